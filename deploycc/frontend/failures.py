"""An exporter's exception as one classified line with a hint, never a traceback.

The classes (records/export.py): an unsupported aten op, named, with the module it came from; a
data-dependent guard; an op newer than the target's opset ceiling; a failure of torch itself.
Both exporters' messages are read: TorchScript's UnsupportedOperatorError and the IR it prints,
dynamo's DispatchError / ConversionError and its "Exception summary".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from deploycc.records.export import (
    DATA_DEPENDENT,
    OPSET_CEILING,
    TORCH_FAILURE,
    UNSUPPORTED_OP,
    ExportFailure,
)

if TYPE_CHECKING:
    from deploycc.targets.schema import Target

# TorchScript: "Exporting the operator 'aten::grid_sampler' to ONNX opset version 13 is not
# supported. Support for this operator was added in version 16, ..."
TORCHSCRIPT_OP = re.compile(
    r"Exporting the operator '([\w:.]+)' to ONNX opset version (\d+) is not supported")
ADDED_IN = re.compile(r"Support for this operator was added in version (\d+)")
UNSUPPORTED_EXPORT = re.compile(r"Unsupported: ONNX export of (?:operator )?([\w:.]+)")
# dynamo: "No ONNX function found for <OpOverload(op='aten.linalg_eig', overload='default')>"
DYNAMO_OP = re.compile(r"No ONNX function found for <OpOverload\(op='([\w.]+)'")
DYNAMO_NODE = re.compile(r"Error when translating node %\w+ : .*?target=torch\.ops\.([\w]+\.[\w]+)")
GUARD_MARKERS = ("GuardOnDataDependentSymNode", "data-dependent expression", "data dependent expression",
                 "Could not guard on data-dependent", "DataDependentOutputException")
CONSTRAINT_MARKERS = ("Constraints violated", "ConstraintViolation", "specialized it to be a constant")
NUMPY_MARKER = ".numpy() is not supported"
USER_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\w+)')
SUMMARY = re.compile(r"## Exception summary\s*\n\s*\n?(.+)")
SCOPE = re.compile(r"= (aten::\w+)\(.*?scope: ([^#\n]*?)(?: # (\S+))?$", re.MULTILINE)


def classify(error: BaseException, printed: str, target: Target, *, module: Any = None,
             inputs: tuple[Any, ...] = (), user_dynamic: bool = False) -> ExportFailure:
    """`error` raised by an exporter (`printed`: what torch printed meanwhile), as one line."""
    text = f"{error}\n{error.__cause__ or ''}"
    first = _summary(error)
    added = ADDED_IN.search(text)
    op_match = TORCHSCRIPT_OP.search(text)
    if op_match and added:
        op, needs = op_match.group(1), int(added.group(1))
        return ExportFailure(OPSET_CEILING, f"{op} needs opset {needs}; {target.name} reads up to "
                             f"{target.opset.max}", hint=_newer_target_hint(needs, target), op=op,
                             module_path=_module_path(op, printed, module, inputs), needs_opset=needs)
    if any(marker in text for marker in GUARD_MARKERS):
        return ExportFailure(DATA_DEPENDENT,
                             f"control flow or a shape depends on the input's values: {first}",
                             hint="compute it with torch ops (torch.where, torch.cond)"
                                  + (", or drop --dynamic" if user_dynamic else ""),
                             module_path=_user_line(text))
    if NUMPY_MARKER in text:
        return ExportFailure(DATA_DEPENDENT, "forward converts a tensor to NumPy, which the exporter cannot "
                             f"follow: {first}", hint="keep forward in torch ops",
                             module_path=_user_line(text))
    if any(marker in text for marker in CONSTRAINT_MARKERS):
        return ExportFailure(DATA_DEPENDENT, f"an axis asked dynamic is fixed by the model: {first}",
                             hint="drop that --dynamic axis, or give it the range the model takes")
    op = _unsupported_op(text)
    if op is not None:
        return ExportFailure(UNSUPPORTED_OP, f"the exporter has no ONNX translation for {op}",
                             hint="replace the op in the model, or give the exporter a translation for it",
                             op=op,
                             module_path=_module_path(op, printed, module, inputs))
    return ExportFailure(TORCH_FAILURE, f"torch failed: {first}",
                         hint="rerun with --debug for torch's own trace")


def _user_line(text: str) -> str | None:
    """The last `File "...", line N` of torch's message that is not torch's own: the module's line."""
    found = [match for match in USER_FRAME.finditer(without_colour(text))
             if "/torch/" not in match.group(1) and "/deploycc/" not in match.group(1)]
    if not found:
        return None
    match = found[-1]
    return f"{match.group(1).rsplit('/', 1)[-1]}:{match.group(2)} in {match.group(3)}"


def _unsupported_op(text: str) -> str | None:
    for pattern in (TORCHSCRIPT_OP, DYNAMO_OP, UNSUPPORTED_EXPORT, DYNAMO_NODE):
        match = pattern.search(text)
        if match:
            return match.group(1)
    return None


def without_colour(text: str) -> str:
    """`text` without terminal colour codes (dynamo's messages carry them)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _summary(error: BaseException) -> str:
    """The line that says what went wrong: dynamo's exception summary, else the first line."""
    text = str(error)
    match = SUMMARY.search(text)
    lines = [line for line in text.splitlines() if line.strip()]
    line = match.group(1) if match else lines[0] if lines else type(error).__name__
    line = without_colour(line).strip()
    line = re.sub(r"^<class '([\w.]+)'>: ", lambda m: m.group(1).rsplit(".", 1)[-1] + ": ", line)
    return line[:240]


def _newer_target_hint(needs: int, target: Target) -> str:
    from deploycc.targets import registry

    readers = [t.name for t in registry.list_targets() if t.opset.max >= needs and t.name != target.name]
    same_backend = [name for name in readers if registry.resolve(name).backend.kind == target.backend.kind]
    chosen = same_backend or readers
    where = f"a target that reads it ({', '.join(chosen[:3])})" if chosen else "a newer target"
    return f"build for {where}"


def _module_path(op: str, printed: str, module: Any, inputs: tuple[Any, ...]) -> str | None:
    """Where `op` came from: TorchScript's IR printout names the scope; else one eager run with
    each module's name on a stack, stopping at the first dispatch of the op."""
    bare = op.replace("aten::", "").replace("aten.", "").split(".")[0]
    for match in SCOPE.finditer(printed):
        if match.group(1) == f"aten::{bare}":
            scope = match.group(2).strip().rstrip(",").split("/")[-1]
            path = scope.split("::")[-1].strip()
            return path or None
    if module is None or not inputs:
        return None
    try:
        return _locate(bare, module, inputs)
    except Exception:  # the eager run is a courtesy; the failure line stands without it
        return None


def _locate(op: str, module: Any, inputs: tuple[Any, ...]) -> str | None:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    stack: list[str] = []
    found: list[str] = []

    class FirstDispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            name = func.overloadpacket.__name__
            if not found and (name == op or name.startswith(op + "_") or op.startswith(name + "_")):
                found.append(stack[-1] if stack else "")
            return func(*args, **(kwargs or {}))

    def entered(name: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:  # a hook that returns something replaces the input or output
            stack.append(name)
        return hook

    def left(*_: Any) -> None:
        stack.pop()

    handles = []
    for name, child in module.named_modules():
        handles.append(child.register_forward_pre_hook(entered(name)))
        handles.append(child.register_forward_hook(left))
    try:
        with torch.no_grad(), FirstDispatch():
            module(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return (found[0] or type(module).__name__) if found else None
