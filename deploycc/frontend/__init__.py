"""The PyTorch front end: a torch model in (a `torch.export` archive, a TorchScript archive, a
`module.path:factory`, or a module in the API), a proven ONNX export for the target out.

    sources.py    what the user gave, loaded: the module, its example inputs, its dynamic axes
    pt2_archive.py    a .pt2 read once and checked before torch opens it: no pickle, library or
    pt2_program.py    string in it that torch would run as code
    exporters.py  torch.onnx's two exporters, registered by name, and the opset ceiling
    failures.py   an exporter's exception as one classified line with a hint
    proof.py      torch against ONNX Runtime on the example inputs and a second size per axis
    build.py      the target's exporters in order, each built and judged; the better one kept

torch is an optional extra (`deploycc[torch]`): nothing here imports it at module level.
"""

from __future__ import annotations

import re
from pathlib import Path

TORCH_SUFFIXES = {".pt2": "pt2", ".pt": "torchscript", ".pth": "torchscript", ".torchscript": "torchscript"}
# `package.module:factory` or `path/to/file.py:factory`
FACTORY = re.compile(r"^(?P<module>(?:[A-Za-z_][\w]*)(?:\.[A-Za-z_]\w*)*|.+\.py):(?P<factory>[A-Za-z_]\w*)$")


def source_kind(spec: str | Path) -> str | None:
    """"pt2", "torchscript" or "factory" when `spec` names a torch model, else None (an ONNX file,
    or whatever the other commands take)."""
    text = str(spec)
    kind = TORCH_SUFFIXES.get(Path(text).suffix.lower())
    if kind is not None:
        return kind
    if FACTORY.match(text) and not Path(text).exists():
        return "factory"
    return None


def first_line(error: BaseException) -> str:
    """An exception's first non-empty line (at most 200 characters), or its type's name: what a
    one-line message quotes of torch's and the exporters' many-line errors."""
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()[:200]
    return type(error).__name__
