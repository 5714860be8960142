"""Exports shared between the cells of an audit: a torch model audited on six targets is exported
by three policies only (dynamo at opset 23 with a dynamic batch for ort-cpu, openvino-cpu and
gpu-trt10; TorchScript at 17 with a fixed batch for jetson-xavier and jetson-orin; TorchScript at
13 for jetson-nano), so the first cell to export and prove under one policy writes the attempt and
its file to the folder the audit names (CACHE_ENV), and the other cells take them from there.

An export is shared only between sources that are the same: the key holds the audit's digest of
the model (MODEL_ENV: a factory's spelling and source file), the module's weights and buffers, the
example inputs, the exporter, the opset asked for, the axes, and torch's and deploycc's versions
(`audit --fresh` empties the folder, for a deploycc changed under the same version).
A cell that finds another exporting the same key waits for it (a lock file) rather than export the
same thing beside it. A failure that names the target (an opset ceiling) is not shared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.records.export import OPSET_CEILING, ExportAttempt
from deploycc.results import from_dict, strict

if TYPE_CHECKING:
    from deploycc.frontend.sources import Axis, TorchSource

CACHE_ENV = "DEPLOYCC_EXPORT_CACHE"  # a folder of proven exports shared by an audit's cells
MODEL_ENV = "DEPLOYCC_EXPORT_MODEL"  # the audit's digest of the torch model those cells export
SHARED_NOTE = "exported and proven by another cell of this audit (same exporter, opset and axes)"
ATTEMPT = "attempt.json"
FILES = "files"

Exported = tuple[ExportAttempt, Path | None]


def shared_export(exporter: str, source: TorchSource, opset: int, axes: dict[str, dict[int, Axis]],
                  folder: Path, export: Callable[[], Exported]) -> Exported:
    """`export()`'s attempt and file, or the ones a cell of the same audit made under the same
    key, copied into `folder`. Outside an audit (no CACHE_ENV) this is `export()`."""
    key = _key(exporter, source, opset, axes)
    if key is None:
        return export()
    entry = Path(os.environ[CACHE_ENV]) / key
    entry.parent.mkdir(parents=True, exist_ok=True)
    with _locked(entry.with_suffix(".lock")):
        found = _read(entry, folder)
        if found is not None:
            return found
        attempt, path = export()
        if attempt.failure is None or attempt.failure.kind != OPSET_CEILING:
            _write(entry, attempt, path)
        return attempt, path


def _key(exporter: str, source: TorchSource, opset: int, axes: dict[str, dict[int, Axis]]) -> str | None:
    """The export's key, or None when nothing may be shared (no audit, or weights not readable)."""
    from importlib import metadata

    import torch

    folder, model = os.environ.get(CACHE_ENV), os.environ.get(MODEL_ENV)
    if not folder or not model:
        return None
    try:
        digest = hashlib.sha256(f"{model}|{exporter}|{opset}|{sorted(axes.items())}|{source.names}|"
                                f"{source.output_names}|{source.accept_trace_warnings}|"
                                f"{torch.__version__}|{metadata.version('deploycc')}".encode())
        holder = source.program if source.program is not None else source.module
        for name, tensor in sorted(holder.state_dict().items()):
            _add_tensor(digest, name, tensor)
        for index, tensor in enumerate(source.inputs):
            _add_tensor(digest, f"input {index}", tensor)
    except (AttributeError, RuntimeError, TypeError, ValueError, metadata.PackageNotFoundError):
        # a sparse, quantized or odd tensor; deploycc run from a tree it was not installed from
        return None
    return digest.hexdigest()[:32]


def _add_tensor(digest: Any, name: str, tensor: Any) -> None:
    import torch

    if not isinstance(tensor, torch.Tensor):
        digest.update(f"{name}={tensor!r}".encode())
        return
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}|".encode())
    digest.update(flat.view(torch.uint8).numpy())  # the tensor's own bytes, not a copy


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """Held by one process at a time (where the platform has flock; elsewhere not held)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: cells may export the same key side by side
        yield
        return
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read(entry: Path, folder: Path) -> Exported | None:
    try:
        record = json.loads((entry / ATTEMPT).read_text())
        attempt, data = from_dict(ExportAttempt, record), record.get("file")
    except (OSError, ValueError, TypeError, KeyError):  # absent, or written by another version
        return None
    attempt.notes = [*attempt.notes, SHARED_NOTE]
    attempt.seconds = 0.0
    if data is None:
        return attempt, None
    folder.mkdir(parents=True, exist_ok=True)
    for item in (entry / FILES).iterdir():
        shutil.copy2(item, folder / item.name)
    return attempt, folder / str(data)


def _write(entry: Path, attempt: ExportAttempt, path: Path | None) -> None:
    """The attempt and the files beside its ONNX file (external data too), written whole or not
    at all: a cache saves time, it decides nothing."""
    partial = entry.with_name(f"{entry.name}.{os.getpid()}.partial")
    try:
        shutil.rmtree(partial, ignore_errors=True)
        (partial / FILES).mkdir(parents=True)
        if path is not None:
            for item in path.parent.iterdir():
                if item.is_file():
                    shutil.copy2(item, partial / FILES / item.name)
        record = {**strict(dataclasses.asdict(attempt)), "file": path.name if path else None}
        (partial / ATTEMPT).write_text(json.dumps(record))
        shutil.rmtree(entry, ignore_errors=True)
        partial.rename(entry)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
