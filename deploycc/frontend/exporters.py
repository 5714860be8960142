"""torch.onnx's two exporters, and Optimum's for a causal language model, registered by name, and the
opset each is asked for.

    dynamo        torch.onnx.export(dynamo=True): torch.export's graph, translated by onnxscript
    torchscript   torch.onnx.export(dynamo=False): the TorchScript tracer and its symbolic functions
    optimum       a transformers causal LM with its KV cache, as Optimum exports it (decoders.py)

Each writes one ONNX file with the inputs named as forward names them and the axes asked dynamic
kept so where the exporter could (dynamo's Dim.AUTO keeps an axis static rather than fail when the
model specializes it; the file says what came out, and the proof reads that).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.frontend.decoders import OPTIMUM, OPTIMUM_MAX_OPSET, export_optimum
from deploycc.frontend.trace_guard import TraceFindings, watched

if TYPE_CHECKING:
    from deploycc.frontend.sources import Axis, TorchSource
    from deploycc.targets.schema import Target

# The highest opset each exporter writes when asked (torch.onnx._constants at torch 2.13):
# TorchScript's symbolic functions stop at 20; dynamo translates at 18 and converts up to 23,
# and not down (a lower ceiling is reached by deploycc's own opset conversion, which names the op
# that has no older form).
EXPORTER_MAX_OPSET = {"torchscript": 20, "dynamo": 23}
DYNAMO_BASE_OPSET = 18


def opset_ceiling(target: Target) -> int:
    """The highest opset the target's parser reads (or the lower one its [export] table sets),
    capped by what the installed onnx knows."""
    import onnx

    return min(target.export.opset or target.opset.max, onnx.defs.onnx_opset_version())


def requested_opset(exporter: str, ceiling: int) -> int:
    return min(ceiling, _max_opset(exporter))


def _max_opset(exporter: str) -> int:
    if exporter == OPTIMUM:
        return OPTIMUM_MAX_OPSET
    try:
        from torch.onnx import _constants
    except ImportError:  # pragma: no cover - torch without its private constants
        return EXPORTER_MAX_OPSET[exporter]
    name = "ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET" if exporter == "torchscript" else "ONNX_MAX_OPSET"
    return int(getattr(_constants, name, EXPORTER_MAX_OPSET[exporter]))


class ExporterFailed(Exception):
    """The exporter raised `error`; `printed` is what torch wrote meanwhile (TorchScript prints
    the IR at the failing node, with its module scope, on the C++ side's stderr)."""

    def __init__(self, error: BaseException, printed: str) -> None:
        super().__init__(str(error))
        self.error, self.printed = error, printed


def export_with(exporter: str, source: TorchSource, inputs: tuple[Any, ...],
                dynamic: dict[str, dict[int, Axis]], path: Path, opset: int,
                output_names: list[str] | None = None) -> TraceFindings:
    """Write `source` as ONNX to `path` with `exporter`, with torch's printing kept off the
    console (ExporterFailed carries it, for failures.py). A trace (TorchScript's exporter on a
    Python module) is watched for values computed from the inputs' data that leave torch, and
    torch's TracerWarnings are kept (trace_guard.py): what it found is returned."""
    printed: list[str] = []
    findings = TraceFindings()
    traced = exporter == "torchscript" and not _scripted(source.module)
    try:
        with _captured(printed), warnings.catch_warnings(), \
                _quiet("torch.onnx", "torch.export", "torch._dynamo", "onnxscript"):
            warnings.simplefilter("ignore")
            with watched(source.module, findings) if traced else contextlib.nullcontext():
                EXPORTERS[exporter](source, inputs, dynamic, path, opset, output_names)
    except (KeyboardInterrupt, MemoryError):
        raise
    except BaseException as error:  # torch raises anything, SystemExit included, from deep inside
        raise ExporterFailed(error, "".join(printed)) from error
    return findings


def _scripted(module: Any) -> bool:
    """A TorchScript module: its exporter reads the script (control flow and all), nothing is traced."""
    import torch

    return isinstance(module, torch.jit.ScriptModule)


@contextlib.contextmanager
def _captured(printed: list[str]) -> Iterator[None]:
    """Everything written to file descriptors 1 and 2 (Python's and C++'s alike) into `printed`."""
    from deploycc.io.files import descriptors_to

    with tempfile.TemporaryFile() as sink:
        try:
            # Python's own writes go to the descriptors too, wherever sys.stdout was pointed
            with descriptors_to(sink), contextlib.redirect_stdout(sys.__stdout__ or sys.stdout), \
                    contextlib.redirect_stderr(sys.__stderr__ or sys.stderr):
                yield
        finally:
            sink.seek(0)
            printed.append(sink.read().decode("utf-8", "replace")[-200_000:])


def _torchscript(source: TorchSource, inputs: tuple[Any, ...], dynamic: dict[str, dict[int, Axis]],
                 path: Path, opset: int, output_names: list[str] | None) -> None:
    import torch

    from deploycc.frontend.backports import backported

    with backported(opset):
        torch.onnx.export(source.module, inputs, str(path), dynamo=False, opset_version=opset,
                          input_names=source.names, output_names=output_names, do_constant_folding=True,
                          dynamic_axes={name: {axis: bounds.name for axis, bounds in axes.items()}
                                        for name, axes in dynamic.items()} or None)


def _dynamo(source: TorchSource, inputs: tuple[Any, ...], dynamic: dict[str, dict[int, Axis]],
            path: Path, opset: int, output_names: list[str] | None) -> None:
    import torch

    model = source.program if source.program is not None else source.module
    shapes = None
    if source.program is None and dynamic:
        shapes = tuple({axis: _dim(bounds) for axis, bounds in dynamic.get(name, {}).items()} or None
                       for name in source.names)
    program = torch.onnx.export(model, inputs, dynamo=True, opset_version=opset, input_names=source.names,
                                output_names=output_names, dynamic_shapes=shapes, optimize=True, verify=False,
                                report=False)
    if program is None:  # pragma: no cover - dynamo=True always returns its program
        raise RuntimeError("torch.onnx.export returned no program")
    program.save(str(path))


def _dim(bounds: Axis) -> Any:
    """A torch.export dim: AUTO for the batch opened by default (static where the model cannot
    take another size, never an error), a named range where the user gave one."""
    from torch.export import Dim

    if bounds.low is None and bounds.high is None:
        return Dim.AUTO
    return Dim(bounds.name.replace(".", "_"), min=bounds.low or 1, max=bounds.high or 2**31 - 2)


@contextlib.contextmanager
def _quiet(*names: str) -> Any:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


EXPORTERS: dict[str, Callable[..., None]] = {"torchscript": _torchscript, "dynamo": _dynamo,
                                             OPTIMUM: export_optimum}
