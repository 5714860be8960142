"""A quantizer run in a process of its own, for models past protobuf's 2 GB: ONNX Runtime's
quantizers load the whole model with the onnx package, which killed deploycc by a segmentation
fault (in onnx's load_external_data_for_tensor, under quantize_dynamic) on a 4.4 GB decoder. In a
child the crash is the quantizer's failure, with its reason, and the build goes on: a precision
candidate is not chosen, `--precision int8` ends at quantize and says why."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

Result = TypeVar("Result")
LARGE_MODEL = 1 << 31  # protobuf's limit: beyond it the quantized weights go to external data


def past_protobuf_limit(model: Path) -> bool:
    """Whether the model and its external data files together pass LARGE_MODEL: its quantized form is
    then written with external data too, and is never held as one protobuf."""
    return sum(f.stat().st_size for f in model.parent.glob(f"{model.name}*")) > LARGE_MODEL


class QuantizerCrashed(RuntimeError):
    """The quantizer's process died (a signal, or out of memory) without an answer."""


def in_own_process(function: Callable[..., Result], *args: object) -> Result:
    """`function(*args)` in a fresh interpreter (spawned: nothing of this process's threads or
    loaded sessions goes with it); its exceptions come back as raised. `function` must be a module's
    top-level function and its arguments picklable. Its temporary files go in a folder removed
    after, however it ended: ONNX Runtime's quantizer writes a copy of the model there (4.1 GB of a
    4.4 GB decoder, left behind by each crash until the disk was full)."""
    import multiprocessing
    import shutil
    import tempfile
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    scratch = tempfile.mkdtemp(prefix="deploycc-quantizer-")
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_temporary_files_in, initargs=(scratch,)) as pool:
            try:
                return pool.submit(function, *args).result()
            except BrokenProcessPool:
                raise QuantizerCrashed(f"{getattr(function, '__name__', 'the quantizer')}'s process died "
                                       "(killed by a signal or out of memory)") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _temporary_files_in(folder: str) -> None:
    """The child's temporary files (tempfile's, and so ONNX Runtime's quantizer's) in `folder`."""
    import os
    import tempfile

    os.environ["TMPDIR"] = folder
    tempfile.tempdir = folder


def quantized_in_own_process_if_large(quantize: Callable[..., Result], model: Path, outdir: Path,
                                      *args: object) -> Result:
    """`quantize(model, outdir, *args)`: in a process of its own where the model passes protobuf's
    limit (past_protobuf_limit), here otherwise (a process costs a second or two)."""
    if past_protobuf_limit(model):
        return in_own_process(quantize, model, outdir, *args)
    return quantize(model, outdir, *args)
