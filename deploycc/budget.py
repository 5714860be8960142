"""What a command may make and use: one memory budget and one run time budget, that scale with the
machine and with the model a command was given.

A model file of a few kilobytes can ask for terabytes (a Tile, a Range, a declared input dim) or
loop for ever. So every stage that materialises a tensor (a drawn input, an array read from an
.npz) asks `require` first, with the element count computed in Python integers (they do not
overflow; a fold past its own limit is left unfolded), and a model run stops at `run_seconds`.
What no check foresaw (an intermediate ONNX Runtime allocates) meets the ceiling: the command
line sets the process's data limit (RLIMIT_DATA) to what it had at start plus the memory budget,
so that it ends as exit 2 "too large" instead of being killed by the kernel, taking other
processes with it.

The budget: 1 GiB plus 128 times the bytes of the largest model read (its file and external data)
plus 64 times the bytes of the largest set of inputs drawn or read (a real model's activations
stay within that; a few-kilobyte bomb gets the GiB), never more than half the machine's memory.
`--memory-budget` (DEPLOYCC_MEMORY_BUDGET) sets it outright. One tensor may take a quarter of it.
A run of a model may take 20 s plus a second per 5 MB of model (`--run-seconds`,
DEPLOYCC_RUN_SECONDS).
"""

from __future__ import annotations

import os
import re
import threading

from deploycc import taxonomy
from deploycc.errors import DeployccError, OptionError

MEMORY_ENV = "DEPLOYCC_MEMORY_BUDGET"
RUN_SECONDS_ENV = "DEPLOYCC_RUN_SECONDS"

FLOOR_BYTES = 1 << 30
# A language model's logits over a large vocabulary (BLOOM's 250,880: 490 MB in float64 where
# verification compares them) outgrow its weights: 64 was too few for a 65 MB BLOOM
BYTES_PER_MODEL_BYTE = 128
# and a small network on large inputs (a super-resolution model on 1080p frames) is sized by them
BYTES_PER_INPUT_BYTE = 64
TENSOR_SHARE = 4  # one tensor may take a quarter of the budget: it is copied, converted, compared
RUN_FLOOR_SECONDS = 20.0
MODEL_BYTES_PER_SECOND = 5 << 20
# What the libraries a command imports after the ceiling is set (torch, OpenVINO) map for
# themselves, above what the process held when it was set.
LIBRARY_ROOM_BYTES = 512 << 20

_lock = threading.Lock()
_model_bytes = 0
_input_bytes = 0
_ceiling_base: int | None = None  # the process's data size when the ceiling was turned on


class TooLarge(DeployccError):
    """What the model asks deploycc to make or run does not fit the memory or time budget:
    unusable input (exit 2), named with its size and the budget. `resource`: "memory" or "time"."""

    resource = "memory"


class OverTime(TooLarge):
    resource = "time"


def parse_size(text: str) -> int:
    """Bytes from "1500000000", "512M", "4G", "1.5GiB" (binary units)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not found:
        raise ValueError(f"not a size: {text!r} (say 4G, 512M or a number of bytes)")
    number, unit = found.groups()
    return int(float(number) * (1 << (10 * " kmgt".index(unit or " "))))


def human(size: int | float) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.3g} {unit}"
    return f"{int(size)} bytes"


def machine_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # not Linux: a laptop's
        return 16 << 30


def note_model_bytes(size: int) -> None:
    """A model of `size` bytes (file and external data) was read: the budget grows with the
    largest, and the ceiling with it."""
    global _model_bytes
    with _lock:
        if size <= _model_bytes:
            return
        _model_bytes = size
    _apply_ceiling()


def note_input_bytes(size: int) -> None:
    """A set of inputs of `size` bytes was drawn or read (each checked by `require` first): the
    budget grows with the largest set, and the ceiling with it."""
    global _input_bytes
    with _lock:
        if size <= _input_bytes:
            return
        _input_bytes = size
    _apply_ceiling()


def memory_bytes() -> int:
    given = os.environ.get(MEMORY_ENV)
    if given:
        try:
            return parse_size(given)
        except ValueError as error:
            raise OptionError(f"{MEMORY_ENV}: {error}") from None
    return min(machine_memory() // 2,
               FLOOR_BYTES + BYTES_PER_MODEL_BYTE * _model_bytes + BYTES_PER_INPUT_BYTE * _input_bytes)


def tensor_bytes() -> int:
    return memory_bytes() // TENSOR_SHARE


def run_seconds() -> float:
    given = os.environ.get(RUN_SECONDS_ENV)
    if given:
        try:
            return float(given)
        except ValueError:
            raise OptionError(f"{RUN_SECONDS_ENV}: not a number of seconds: {given!r}") from None
    return RUN_FLOOR_SECONDS + _model_bytes / MODEL_BYTES_PER_SECOND


def require(what: str, elements: int, itemsize: int) -> None:
    """Refuse (TooLarge) to make `what`, a tensor of `elements` elements of `itemsize` bytes,
    above the tensor budget; `elements` a Python int, which cannot overflow."""
    size = int(elements) * int(itemsize)
    limit = tensor_bytes()
    if size > limit:
        raise too_large(f"{what} would take {human(size)} ({int(elements):,} elements), more than the "
                        f"{human(limit)} one tensor may take")


def too_large(problem: str) -> TooLarge:
    size = human(memory_bytes())
    return TooLarge(problem, hint=f"the memory budget is {size}: set {MEMORY_ENV} to change it",
                    cli_hint=f"the memory budget is {size}: --memory-budget changes it")


def out_of_memory(stage: str) -> TooLarge:
    """What a stage that ran out of the memory budget (the ceiling) raises."""
    return too_large(f"{stage} needed more memory than the budget allows")


def says_out_of_memory(error: BaseException | str) -> bool:
    """An allocation that failed, in Python's words or a C++ library's (ONNX Runtime, OpenVINO)."""
    return isinstance(error, MemoryError) or taxonomy.says_out_of_memory(str(error))


def status_kib(key: str) -> int | None:
    """A field of this process's /proc/self/status in KiB (VmData, VmRSS, VmSize); None off Linux."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def enable_ceiling() -> None:
    """Cap this process's data (and its children's, who inherit the limit) at what it holds now
    plus the memory budget; raised as larger models are read. The command line's, not the API's:
    a library does not set limits on its caller's process."""
    global _ceiling_base
    _ceiling_base = ((status_kib("VmData") or 0) << 10) + LIBRARY_ROOM_BYTES
    _apply_ceiling()


def _apply_ceiling() -> None:
    if _ceiling_base is None:
        return
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        limit = _ceiling_base + memory_bytes()
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ImportError, ValueError, OSError):  # not Linux, or a limit we may not set
        pass


def lift_ceiling() -> None:
    """No ceiling from here on: a GPU runtime (CUDA, TensorRT) maps address space for the device
    beside the host's memory, which a data limit would count and refuse; the GPU's own memory
    bounds it. Called by the backends that load one, before they do."""
    global _ceiling_base
    if _ceiling_base is None:
        return
    _ceiling_base = None
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


class Deadline:
    """A model run's wall budget, for a runtime that can be told to stop from another thread
    (ONNX Runtime's RunOptions.terminate): `Deadline(options)` as a context; `expired` after."""

    def __init__(self, run_options: object, seconds: float | None = None) -> None:
        self.seconds = run_seconds() if seconds is None else seconds
        self.run_options = run_options
        self.expired = False
        self._timer = threading.Timer(self.seconds, self._stop)
        self._timer.daemon = True

    def _stop(self) -> None:
        self.expired = True
        self.run_options.terminate = True  # type: ignore[attr-defined]

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def over_time(stage: str, seconds: float) -> TooLarge:
    return OverTime(f"{stage} did not finish in {seconds:.3g} s, the time a run of this model may take",
                    hint=f"set {RUN_SECONDS_ENV} to allow longer", cli_hint="--run-seconds allows longer")


def require_npz(path: os.PathLike[str] | str) -> None:
    """Refuse an .npz whose arrays, as their headers declare them, do not fit the tensor budget
    (one by one and all together), before numpy reads a byte of their data: a zip of a few
    kilobytes may declare or inflate to terabytes. A file that is not a zip of .npy members is
    left to numpy's own error."""
    import math
    import zipfile

    import numpy as np

    total = 0
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():
                if not member.filename.endswith(".npy"):  # numpy reads such a member whole, as bytes
                    require(f"{path}: member '{member.filename}'", member.file_size, 1)
                    total += member.file_size
                    continue
                with archive.open(member) as stream:
                    version = np.lib.format.read_magic(stream)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
                elements = math.prod(int(dim) for dim in shape)
                require(f"{path}: array '{member.filename[:-4]}' {list(shape)}", elements, dtype.itemsize)
                total += elements * dtype.itemsize
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, NotImplementedError, RuntimeError):
        return
    if total > tensor_bytes():
        raise too_large(f"{path}: its arrays would take {human(total)} together, more than the "
                        f"{human(tensor_bytes())} the inputs may take")


def return_freed_memory() -> None:
    """Give the pages this process has freed back to the system: glibc keeps them for its next
    malloc, so a process that ran a large model and then waits holds them all the while."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to give back this way
        pass


def collect_and_return_memory() -> None:
    """What a stage's sessions and arrays held, freed and given back now: they sit in reference
    cycles until the collector's next pass, which counts objects, not bytes (Qwen2.5-0.5B's fp16
    analysis left its build at 12 GB through the engine build and the generation after it)."""
    import gc

    gc.collect()
    return_freed_memory()
