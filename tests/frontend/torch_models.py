"""Small torch modules for the front end's tests, each showing one behaviour of the exporters
(torchvision does not import beside the torch build the tests install, so these stand in)."""

from __future__ import annotations

import torch
from torch import nn


class SmallNet(nn.Module):
    """A conv net both exporters take, with a batch either keeps dynamic."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 5)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(image)).mean((2, 3)))


class MinMax(nn.Module):
    """torch.aminmax: the TorchScript exporter has it, dynamo has no translation (torch 2.13)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low, high = torch.aminmax(x)
        return x * (high - low)


class Differences(nn.Module):
    """torch.diff: dynamo has it, the TorchScript exporter has not."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.diff(x, dim=1) * 2


class Branch(nn.Module):
    """Python control flow on a value: torch.export stops at the guard; the tracer records the
    branch it took."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


class Eigen(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigvals(x).real


class Nested(nn.Module):
    """An op no exporter has, two modules deep: the failure names `inner.1`."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Identity(), Eigen())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


class Grid(nn.Module):
    """GridSample: opset 16, above the Jetson Nano's TensorRT 8.2 (13). Bicubic has no rewrite
    into older ops; bilinear has one (rules/sampling.py)."""

    def __init__(self, mode: str = "bicubic") -> None:
        super().__init__()
        self.mode = mode

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return nn.functional.grid_sample(x, grid, mode=self.mode, align_corners=False)


class WindowAttention(nn.Module):
    """Attention over windows, as Hiera writes it: scaled_dot_product_attention on rank-5 tensors,
    which dynamo cannot translate at all and TorchScript has only from opset 14 (the Nano reads 13).
    `causal` masks the future as a decoder does."""

    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class FlattenByNumber(nn.Module):
    """`int(x.shape[0])` is a Python number to the tracer: the batch is written as a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.reshape(int(x.shape[0]), -1))


class Broken(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch.ones(7, 7)  # the example's width is 4: torch itself fails


def small_net() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return SmallNet(), (torch.randn(1, 3, 16, 16),)


def small_net_alone() -> nn.Module:
    torch.manual_seed(0)
    return SmallNet()


def not_a_module() -> str:
    return "a string"


def nested() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return Nested(), (torch.randn(1, 3, 3),)


def branch() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Branch with positive example inputs: the trace takes the `x * 2` path."""
    return Branch(), (torch.rand(2, 3) + 0.1,)
