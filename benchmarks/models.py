"""The benchmark models, defined here in PyTorch and exported with torch.onnx (the path users
take), so the graphs carry what real exports carry. PyTorch is used in the benchmarks
environment only (`make bench-env`); deploycc and its tests never import it.

    resnet      ResNet-18-style CNN, 224x224, batch 1
    mobilenet   MobileNetV2-style inverted residuals with depthwise convolutions, 224x224
    bert        BERT-base shapes: 12 layers, hidden 768, 12 heads, FFN 3072, sequence 128
    mlp         4 x 1024 fully connected with GELU, batch 32
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


class ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(512, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layers(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_residual = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_residual else self.block(x)


class MobileNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        blocks: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
        cin = 32
        for expand, cout, repeats, stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                                              (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
            for i in range(repeats):
                blocks.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        blocks += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
        self.features = nn.Sequential(*blocks)
        self.head = nn.Linear(1280, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean((2, 3)))


class Bert(nn.Module):
    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                 vocab: int = 30522, positions: int = 512) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(positions, hidden)
        self.norm = nn.LayerNorm(hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=0.1, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        return self.encoder(self.norm(self.tokens(input_ids) + self.positions(positions)))


class Mlp(nn.Module):
    def __init__(self, width: int = 1024, depth: int = 4) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.GELU(), nn.Dropout(0.1)]
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def specs() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...], list[str]]]:
    torch.manual_seed(0)
    return {
        "resnet": (ResNet(), (torch.randn(1, 3, 224, 224),), ["image"]),
        "mobilenet": (MobileNet(), (torch.randn(1, 3, 224, 224),), ["image"]),
        "bert": (Bert(), (torch.randint(0, 30522, (1, 128)),), ["input_ids"]),
        "mlp": (Mlp(), (torch.randn(32, 1024),), ["x"]),
    }


def export_all(folder: Path, only: list[str] | None = None) -> dict[str, Path]:
    """Export every model (eval mode) to folder/<name>.onnx with a dynamic batch."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.backends.mha.set_fastpath_enabled(False)  # the fused encoder kernel has no ONNX export
    paths = {}
    for name, (module, example, inputs) in specs().items():
        if only and name not in only:
            continue
        path = folder / f"{name}.onnx"
        module.eval()
        with torch.no_grad():
            torch.onnx.export(module, example, str(path), input_names=inputs, output_names=["output"],
                              dynamic_axes={inputs[0]: {0: "batch"}, "output": {0: "batch"}},
                              opset_version=17, dynamo=False)
        paths[name] = path
    return paths
