"""The zoo's PaddlePaddle models, run in the Paddle environment (`.venv-paddle`, `make zoo`), not in
deploycc's: paddle2onnx pins an older onnx than deploycc's. make.py calls it through
more_families.paddle_models, one process per step:

    python paddle_worker.py count   BUILDER
    python paddle_worker.py export  BUILDER OPSET OUT.onnx
    python paddle_worker.py predict BUILDER INPUTS.npz OUTPUTS.npz

A model is rebuilt at each step from its builder and seed 0 (random weights, nothing downloaded),
its BatchNorm statistics taken from a batch as the torch families' with_signal does, so the three
steps see the same weights. Exported as Paddle's docs show: paddle.onnx.export with an InputSpec
whose batch is None (paddle2onnx). Imports nothing of deploycc or of the zoo's catalog.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# builder -> (input kind, size): "image" NCHW float32 at SIZE x SIZE, "tokens" int64 ids of SIZE
IMAGE, TOKENS = "image", "tokens"
BUILDERS = {
    "resnet18": (IMAGE, 224), "resnet50": (IMAGE, 224), "resnext50_32x4d": (IMAGE, 224),
    "wide_resnet50_2": (IMAGE, 224), "mobilenet_v1": (IMAGE, 224), "mobilenet_v2": (IMAGE, 224),
    "mobilenet_v3_small": (IMAGE, 224), "mobilenet_v3_large": (IMAGE, 224), "vgg11": (IMAGE, 224),
    "alexnet": (IMAGE, 224), "squeezenet1_1": (IMAGE, 224), "shufflenet_v2_x1_0": (IMAGE, 224),
    "shufflenet_v2_swish": (IMAGE, 224), "densenet121": (IMAGE, 224), "googlenet": (IMAGE, 224),
    "inception_v3": (IMAGE, 299), "lenet": (IMAGE, 28),
    "text_transformer": (TOKENS, 32), "text_lstm": (TOKENS, 32), "text_gru": (TOKENS, 32),
}
VOCAB = 1000


def inputs(builder: str, batch: int) -> Any:
    import numpy as np

    kind, size = BUILDERS[builder]
    rng = np.random.default_rng(0)
    if kind == TOKENS:
        return rng.integers(0, VOCAB, (batch, size)).astype(np.int64)
    channels = 1 if builder == "lenet" else 3
    return rng.standard_normal((batch, channels, size, size)).astype(np.float32)


def _text_model(builder: str) -> Any:
    """A text classifier as Paddle's own tutorials build one: embedding, an encoder (a Transformer
    encoder, a bidirectional LSTM or a GRU), the mean over the sequence and a linear head."""
    import paddle
    from paddle import nn

    class TextClassifier(nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(VOCAB, 64)
            if builder == "text_transformer":
                layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0)
                self.encoder: Any = nn.TransformerEncoder(layer, 2)
            elif builder == "text_lstm":
                self.encoder = nn.LSTM(64, 32, direction="bidirect")
            else:
                self.encoder = nn.GRU(64, 64, num_layers=2)
            self.head = nn.Linear(64, 4)

        def forward(self, ids: Any) -> Any:
            hidden = self.encoder(self.embedding(ids))
            hidden = hidden[0] if isinstance(hidden, tuple) else hidden
            return self.head(paddle.mean(hidden, axis=1))

    return TextClassifier()


def build(builder: str) -> Any:
    import paddle
    import paddle.vision.models as models

    paddle.seed(0)
    if builder.startswith("text_"):
        model = _text_model(builder)
    elif builder == "lenet":
        model = models.LeNet()
    else:
        model = getattr(models, builder)(pretrained=False)
    norms = [layer for layer in model.sublayers() if isinstance(layer, paddle.nn.layer.norm._BatchNormBase)]
    if norms:  # statistics from a batch: left at 0 and 1, deep random networks fade or explode
        for layer in norms:
            layer._momentum = 0.0
        model.train()
        with paddle.no_grad():
            model(paddle.to_tensor(inputs(builder, 4)))
    model.eval()
    return model


def export(builder: str, opset: int, out: str) -> None:
    import paddle
    from paddle.static import InputSpec

    kind, size = BUILDERS[builder]
    shape = [None, size] if kind == TOKENS else [None, 1 if builder == "lenet" else 3, size, size]
    spec = InputSpec(shape, "int64" if kind == TOKENS else "float32", "input")
    paddle.onnx.export(build(builder), out, input_spec=[spec], opset_version=opset)
    os.replace(f"{out}.onnx", out)  # Paddle names the file PREFIX.onnx; make.py gives a path of its own


def predict(builder: str, given: str, wanted: str) -> None:
    import numpy as np
    import paddle

    model = build(builder)
    with paddle.no_grad():
        output = model(paddle.to_tensor(np.load(given)["input"]))
    outputs = output if isinstance(output, (list, tuple)) else [output]  # GoogLeNet: logits and two aux heads
    np.savez(wanted, *[tensor.numpy() for tensor in outputs])


def main(argv: list[str]) -> int:
    step, builder, *rest = argv
    if step == "count":
        print(sum(int(p.size) for p in build(builder).parameters()))
    elif step == "export":
        export(builder, int(rest[0]), rest[1])
    elif step == "predict":
        predict(builder, rest[0], rest[1])
    else:
        raise SystemExit(f"unknown step {step!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
