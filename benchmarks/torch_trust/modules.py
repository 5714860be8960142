"""Thirty-odd small torch modules that a trace gets wrong in the ways users meet (issue 48):
control flow on the inputs' values, NumPy inside forward, in-place and view ops, Python scalars,
tuples and dicts of outputs, and models large enough to be saved with external data. Each factory
returns (module, example_inputs); `CASES` says what deploycc must do with each:

    "build"    an export computes what the module computes for every input: built and verified
    "refuse"   the inputs' data picks a branch or a value that a trace fixes: refused with its
               class (or built only with --accept-trace-warnings), unless an exporter follows it
               (dynamo keeps .item() as a value of the graph), and then right on every input tried

`benchmarks/torch_trust/run.py` builds every case on ort-cpu and jetson-xavier and checks each
artifact that says verified against torch on inputs the example could not show wrong: negated,
scaled and shifted values and, where the engine takes it, another size.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import torch
from torch import nn

Pair = namedtuple("Pair", ["mean", "spread"])


def _x(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(0)) + 0.05


class Lambda(nn.Module):
    """A module whose forward is `body(self, *inputs)`: one class for the small cases."""

    def __init__(self, body, **parameters: torch.Tensor) -> None:
        super().__init__()
        self.body = body
        for name, value in parameters.items():
            self.register_parameter(name, nn.Parameter(value, requires_grad=False))

    def forward(self, x):
        return self.body(self, x)


def _case(body, x: torch.Tensor, **parameters: torch.Tensor):
    return lambda: (Lambda(body, **parameters), (x,))


# --- control flow on the inputs' values: no trace can keep it --------------------------------
def _branch_sum(self, x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def _branch_item(self, x):
    if x.mean().item() > 0.5:
        return torch.relu(x - 0.5)
    return torch.tanh(x)


def _branch_any(self, x):
    if (x < 0).any():
        return x.abs()
    return x * 3


def _while_halves(self, x):
    while x.abs().sum() > 1:
        x = x / 2
    return x


def _scale_by_item(self, x):
    return x / x.abs().max().item()


def _clamp_by_item(self, x):
    return x.clamp(max=float(x.mean()))


def _index_by_value(self, x):
    k = int(x[0].argmax())
    return x[:, k:k + 1] * 2


def _tolist(self, x):
    sums = x.sum(1).tolist()
    return x * torch.tensor(sums).unsqueeze(1)


def _assert_positive(self, x):
    assert x.min() >= 0, "negative input"
    return torch.sqrt(x)


def _topk_by_count(self, x):
    count = int((x > 0.5).sum())
    return torch.topk(x.flatten(), max(count, 1)).values.sum().reshape(1)


def _norm_branch(self, x):
    norm = torch.linalg.norm(x)
    return x / norm if norm > 1 else x


# --- NumPy inside forward -----------------------------------------------------------------------
def _numpy_tanh(self, x):
    return torch.from_numpy(np.tanh(x.numpy()))


def _numpy_partial(self, x):
    return torch.from_numpy(np.exp(x.numpy())) + x


def _numpy_on_weights(self, x):  # NumPy on the weights alone: a constant, rightly
    return x @ torch.from_numpy(np.cos(self.w.detach().numpy()))


# --- in-place and view ops ------------------------------------------------------------------------
def _inplace_chain(self, x):
    y = x.clone()
    y.add_(-0.5)
    y.relu_()
    return y


def _slice_assign(self, x):
    y = x.clone()
    y[:, 0] = 0
    return y.reshape(y.shape[0], -1)


def _transpose_view(self, x):
    return x.transpose(1, 2).contiguous().view(x.shape[0], -1)


def _mask_assign(self, x):
    y = x - 0.5
    y[y < 0] = 0
    return y


def _inplace_on_view(self, x):
    y = x.clone()
    y[:, :2].mul_(2)
    return y


# --- Python scalars ------------------------------------------------------------------------------
def _shape_scalar(self, x):
    return x * x.shape[-1]


def _size_branch(self, x):
    if x.shape[0] > 1:
        return x + x.flip(0)
    return x * 2


def _arange_from_shape(self, x):
    return x * torch.arange(x.shape[1], dtype=x.dtype)


def _python_constants(self, x):
    return x * 0.5 + 3


def _where(self, x):  # the branch written as torch computes it: exported whole
    return torch.where(x.sum() > 0, x * 2, x - 1)


# --- tuples and dicts of outputs ---------------------------------------------------------------
def _tuple_out(self, x):
    return x + 1, x * 2


def _dict_out(self, x):
    logits = x @ self.w
    return {"logits": logits, "probs": torch.softmax(logits, -1)}


def _nested_out(self, x):
    return x, {"a": x * 2, "b": [x - 1, x + 1]}


def _namedtuple_out(self, x):
    return Pair(x.mean(-1), x.std(-1))


# --- large enough to be saved with external data ---------------------------------------------
class BigMlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))

    def forward(self, x):
        return self.body(x)


class ConvBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.Conv2d(64, 64, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, x):
        return self.body(x)


class Embedder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding, self.norm = nn.Embedding(4096, 128), nn.LayerNorm(128)

    def forward(self, ids):
        return self.norm(self.embedding(ids))


W = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
FACTORIES = {
    "branch_sum": _case(_branch_sum, _x(2, 8)),
    "branch_item": _case(_branch_item, _x(2, 8)),
    "branch_any": _case(_branch_any, _x(2, 8)),
    "while_halves": _case(_while_halves, _x(2, 8)),
    "scale_by_item": _case(_scale_by_item, _x(2, 8)),
    "clamp_by_item": _case(_clamp_by_item, _x(2, 8)),
    "index_by_value": _case(_index_by_value, _x(2, 8)),
    "tolist": _case(_tolist, _x(2, 8)),
    "assert_positive": _case(_assert_positive, _x(2, 8)),
    "topk_by_count": _case(_topk_by_count, _x(2, 8)),
    "norm_branch": _case(_norm_branch, _x(2, 8)),
    "numpy_tanh": _case(_numpy_tanh, _x(2, 8)),
    "numpy_partial": _case(_numpy_partial, _x(2, 8)),
    "numpy_on_weights": _case(_numpy_on_weights, _x(2, 8), w=W),
    "inplace_chain": _case(_inplace_chain, _x(2, 8)),
    "slice_assign": _case(_slice_assign, _x(2, 4, 8)),
    "transpose_view": _case(_transpose_view, _x(2, 4, 8)),
    "mask_assign": _case(_mask_assign, _x(2, 8)),
    "inplace_on_view": _case(_inplace_on_view, _x(2, 8)),
    "shape_scalar": _case(_shape_scalar, _x(2, 8)),
    "size_branch": _case(_size_branch, _x(2, 8)),
    "arange_from_shape": _case(_arange_from_shape, _x(2, 8)),
    "python_constants": _case(_python_constants, _x(2, 8)),
    "where": _case(_where, _x(2, 8)),
    "tuple_out": _case(_tuple_out, _x(2, 8)),
    "dict_out": _case(_dict_out, _x(2, 8), w=W),
    "nested_out": _case(_nested_out, _x(2, 8)),
    "namedtuple_out": _case(_namedtuple_out, _x(2, 8)),
    "big_mlp": lambda: (BigMlp(), (_x(2, 256),)),
    "conv_bn": lambda: (ConvBn().eval(), (_x(2, 3, 32, 32),)),
    "embedder": lambda: (Embedder(), (torch.randint(0, 4096, (2, 16),
                                                    generator=torch.Generator().manual_seed(0)),)),
}
REFUSE = {"branch_sum", "branch_item", "branch_any", "while_halves", "scale_by_item", "clamp_by_item",
          "index_by_value", "tolist", "assert_positive", "topk_by_count", "norm_branch", "numpy_tanh",
          "numpy_partial"}
CASES = {name: "refuse" if name in REFUSE else "build" for name in FACTORIES}
EXTERNAL_DATA = ("big_mlp", "conv_bn", "embedder")  # also exported to ONNX with external data and built


def __getattr__(name: str):
    """`benchmarks/torch_trust/modules.py:NAME` as a deploycc factory spec."""
    if name in FACTORIES:
        return FACTORIES[name]
    raise AttributeError(name)
