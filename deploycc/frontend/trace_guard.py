"""What the TorchScript tracer cannot see: a value computed from the inputs' data that leaves torch
(a Python bool for an `if`, a number, an index, a NumPy array). The tracer records the path the
example inputs took and writes the rest as constants; a proof on inputs drawn like the example's
takes the same path and passes, so the engine is wrong for every input that would have gone the
other way. torch warns (TracerWarning), but it warns alike for a size (`if x.shape[0] > 1`),
which the second-size proof does check.

So the trace runs under a torch function mode that marks the module's inputs and everything
computed from their values (not their sizes, not the `*_like` factories), and records each place
where such a value is converted to a Python or NumPy one: the module's file and line, and what was
converted. Those are the data-dependent guards: the export is refused unless the user accepts the
traced path (`--accept-trace-warnings`), which the report then says, with torch's own warnings.
"""

from __future__ import annotations

import contextlib
import os
import traceback
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

# What turns a tensor into a value the trace cannot follow
CONVERSIONS = {"__bool__": "a Python bool (an if, and, or, assert)", "item": "a Python number (.item())",
               "__int__": "a Python int", "__float__": "a Python float", "__index__": "a Python index",
               "__complex__": "a Python complex", "tolist": "a Python list (.tolist())",
               "numpy": "a NumPy array (.numpy())", "__array__": "a NumPy array",
               "is_nonzero": "a Python bool (is_nonzero)", "equal": "a Python bool (torch.equal)",
               "allclose": "a Python bool (torch.allclose)"}
# What reads a tensor's metadata or only its size: the result carries none of its values
SIZE_ONLY = {"size", "shape", "dim", "ndim", "numel", "nelement", "__len__", "stride", "dtype", "device",
             "is_floating_point", "element_size", "layout", "requires_grad", "is_cuda", "names",
             "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
             "new_zeros", "new_ones", "new_empty", "new_full", "_shape_as_tensor"}
STANDARD_LIBRARY = os.path.dirname(contextlib.__file__) + os.sep
DEPLOYCC = os.path.dirname(os.path.dirname(__file__)) + os.sep
INSTALLED = ("site-packages", "dist-packages")


@dataclass
class TraceFindings:
    """What one trace saw: torch's TracerWarnings (`file:line: text`) and the places where a value
    computed from the inputs' data left torch (`file:line in function: source line (what)`)."""

    warnings: list[str] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)


class _DataMarks:
    """The tensors computed from the inputs' data, each held by a weak reference under its id (an id
    is reused once its tensor is gone, so the reference is checked to be the very tensor)."""

    def __init__(self) -> None:
        import torch
        from torch.utils._pytree import tree_leaves

        self._tensor = torch.Tensor
        self._leaves = tree_leaves
        self._marked: dict[int, Any] = {}

    def mark(self, value: Any) -> None:
        for leaf in self._leaves(value):
            if isinstance(leaf, self._tensor) and id(leaf) not in self._marked:
                self._marked[id(leaf)] = weakref.ref(leaf, partial(self._forget, id(leaf)))

    def _forget(self, key: int, _: Any) -> None:
        self._marked.pop(key, None)

    def any_marked(self, value: Any) -> bool:
        return any(isinstance(leaf, self._tensor) and (ref := self._marked.get(id(leaf))) is not None
                   and ref() is leaf for leaf in self._leaves(value))


@contextlib.contextmanager
def watched(module: Any, findings: TraceFindings) -> Iterator[None]:
    """Trace `module` inside this block: its inputs are marked on entry to its forward, and every
    data-dependent conversion and TracerWarning goes to `findings`."""
    import torch

    marks = _DataMarks()

    def entered(_: Any, args: Any, kwargs: Any = None) -> None:
        marks.mark((args, kwargs))

    handle = module.register_forward_pre_hook(entered, with_kwargs=True)
    try:
        with warnings.catch_warnings(record=True) as caught, _data_flow_mode(marks, findings):
            warnings.simplefilter("always", torch.jit.TracerWarning)
            yield
    finally:
        handle.remove()
        for warning in caught:
            if issubclass(warning.category, torch.jit.TracerWarning):
                text = f"{os.path.basename(warning.filename)}:{warning.lineno}: {warning.message}"
                if text not in findings.warnings:
                    findings.warnings.append(text)
        findings.guards[:] = list(dict.fromkeys(findings.guards))


def _data_flow_mode(marks: _DataMarks, findings: TraceFindings) -> Any:
    """A torch function mode that marks what each call computes from marked tensors, and records in
    `findings` each conversion of a marked tensor to a Python or NumPy value, with torch's warning."""
    import torch
    from torch.overrides import TorchFunctionMode

    torch_folder = os.path.dirname(torch.__file__) + os.sep

    class DataFlow(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            name = _name(func)
            if name not in CONVERSIONS:
                result = func(*args, **kwargs)
            else:  # torch's warning names this frame: say the module's line instead
                with warnings.catch_warnings(record=True) as raised:
                    warnings.simplefilter("always", torch.jit.TracerWarning)
                    result = func(*args, **kwargs)
                for warning in raised:
                    text = f"{warning.message} ({_site(torch_folder)})"
                    traced = issubclass(warning.category, torch.jit.TracerWarning)
                    if traced and text not in findings.warnings:
                        findings.warnings.append(text)
            if name in SIZE_ONLY or not marks.any_marked((args, kwargs)):
                return result
            if name in CONVERSIONS:
                findings.guards.append(f"{_site(torch_folder)} (to {CONVERSIONS[name]})")
            else:
                marks.mark(result)
                if (name.endswith("_") and not name.startswith("__")) or name == "__setitem__":
                    marks.mark(args[0])  # written in place with a value from the inputs
            return result

    return DataFlow()


def _name(func: Any) -> str:
    name = getattr(func, "__name__", "")
    if name == "__get__":  # a property such as Tensor.shape: the descriptor's own name
        return str(getattr(getattr(func, "__self__", None), "__name__", name))
    return str(name)


def _site(torch_folder: str) -> str:
    """The innermost frame of the user's code (outside torch, deploycc and the standard library)."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        file = frame.filename
        if file.startswith((torch_folder, DEPLOYCC, "<")) or (
                file.startswith(STANDARD_LIBRARY) and not any(folder in file for folder in INSTALLED)):
            continue
        line = (frame.line or "").strip()
        return f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}: {line}"
    return "inside torch"
