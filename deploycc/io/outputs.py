"""What a command writes, kept apart from what it reads: the one guard every output goes through.

- `refuse_inputs`: no output (a model, its `.data` sidecar, a report, a directory) is the same
  file as an input or one of the input model's weight files, nor holds one, nor is another output.
- `refuse_existing`: an existing output file, a model's sidecar included, is replaced only when
  forced.
- `output_lock`: an output is written under a lock beside it (`.NAME.lock`, flock: the kernel lets
  go when its process dies, so a killed run's file blocks no one), so two runs to one output do
  not both succeed and silently replace each other; the lock file goes at the end.
- `remove_stale`: staging folders are named with their writer's pid, so the next run in that
  folder removes what a killed one left (a complete-looking 226 MB model, otherwise forever).
- `claim`: all of the above for the files one command writes.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from deploycc.errors import ModelInputError, OptionError, OutputExists

LOCK_SUFFIX = ".lock"
PARTIAL_MARK = ".partial-"  # an output's staging twin beside it: .NAME.partial-PID-XXXXXXXX


class OutputBusy(OptionError):
    """Another deploycc run holds the output's lock: it is writing that output now."""

    def __init__(self, path: object, pid: str) -> None:
        holder = f" (pid {pid})" if pid else ""
        super().__init__(f"{path} is being written by another deploycc run{holder}",
                         hint="wait for it, or write elsewhere")
        self.args = (path, pid)  # as it was made: the error survives pickling (an audit cell's process)


def cannot_write(path: Path, error: OSError) -> OptionError:
    """An output whose folder cannot be made or written (under /proc, below a file): a one-line
    error with exit 2, not an internal error."""
    reason = error.strerror or type(error).__name__
    if error.errno in (errno.EEXIST, errno.ENOTDIR):
        reason = f"{error.filename or 'a folder above it'} is not a directory"
    return OptionError(f"cannot write {path}: {reason}", hint="choose another output path")


def sidecar(output: Path) -> Path:
    """The external-data file deploycc writes beside a model (io.save names it so)."""
    return output.with_name(output.name + ".data")


def written_files(output: Path) -> list[Path]:
    """The files writing a model to `output` may make: the model and its sidecar."""
    return [output, sidecar(output)] if output.suffix == ".onnx" else [output]


def model_files(path: Path) -> list[Path]:
    """A model file and the files its weights are read from (an ONNX model's external data)."""
    if path.suffix != ".onnx" or not path.is_file():
        return [path]
    from deploycc.io.read import peek

    try:
        external = peek(path).external_files
    except Exception:  # unreadable: the command says so itself (a guard must not break); its usual sidecar
        return [path, sidecar(path)]
    return [path, *(path.parent / file.location for file in external)]


def same_file(one: Path, other: Path) -> bool:
    """The same file however spelled: resolved (symlinks, `..`) or the same inode (a hard link)."""
    if one.resolve() == other.resolve():
        return True
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def refuse_inputs(outputs: Sequence[Path], inputs: Sequence[Path]) -> None:
    """Refuse (exit 2) an output that is an input, would hold one (a directory replaced whole),
    or is another output. An input model's weight files count as inputs; they are looked for only
    where an output exists (a path that is not there is no input's file)."""
    for index, output in enumerate(outputs):
        for other in outputs[:index]:
            if same_file(output, other):
                raise OptionError(f"{output}: named as two outputs", hint="give each output its own path")
    present = [output for output in outputs if output.exists() or output.is_symlink()]
    if not present:
        return
    guarded = [file for path in inputs for file in model_files(path)]
    for output in present:
        for file in guarded:
            if same_file(output, file):
                raise ModelInputError(f"{output}: refusing to overwrite the input {file}",
                                      hint="choose another output path")
            if output.is_dir() and file.resolve().is_relative_to(output.resolve()):
                raise OptionError(f"{output}: holds the input {file}, which replacing it would delete",
                                  hint="choose another output directory")


def refuse_existing(outputs: Sequence[Path], *, force: bool) -> None:
    """An existing output file (a model's sidecar too) is replaced only when forced; a directory
    where a file goes is never replaced."""
    for output in outputs:
        if output.is_dir():
            raise ModelInputError(f"{output}: output path is a directory")
        if not force and (output.exists() or output.is_symlink()):
            raise OutputExists(output)


def lock_path(output: Path) -> Path:
    absolute = Path(os.path.abspath(output))  # `.` and `..` have no name of their own; links stay
    if not absolute.name:  # the root
        return absolute / f".deploycc{LOCK_SUFFIX}"
    return absolute.with_name(f".{absolute.name}{LOCK_SUFFIX}")


# Locks held here, by lock file and thread: [descriptor, depth, pid]. The command line and the
# API under it both claim an output in one thread, and a second flock of the file would refuse
# it; another thread's claim is another run's. The pid: a child forked meanwhile inherits the
# table, not the right to let go.
_held: dict[tuple[Path, int], list[int]] = {}


@contextlib.contextmanager
def output_lock(output: Path) -> Iterator[None]:
    """Hold `output`'s lock while the body writes it; another run holding it is OutputBusy. The
    output's folder is made here: one that cannot be is a `cannot_write` error."""
    import threading

    lock = lock_path(Path(output))
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        key = (lock.parent.resolve() / lock.name, threading.get_ident())
    except OSError as error:
        raise cannot_write(Path(output), error) from None
    if key in _held and _held[key][2] == os.getpid():
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    descriptor = _acquire(Path(output), lock)
    _held[key] = [descriptor, 1, os.getpid()]
    try:
        yield
    finally:
        if _held.get(key, [0, 0, 0])[2] == os.getpid():
            del _held[key]
            with contextlib.suppress(OSError):
                os.unlink(lock)  # while still holding it: a run waiting on this file retries on a new one
            os.close(descriptor)


def _acquire(output: Path, lock: Path) -> int:
    import fcntl

    while True:
        try:
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise cannot_write(output, error) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
            os.close(descriptor)
            raise OutputBusy(output, holder if holder.isdigit() else "") from None
        try:  # its holder may have finished and removed the file between our open and flock
            current = os.path.samestat(os.fstat(descriptor), os.stat(lock))
        except FileNotFoundError:
            current = False
        if current:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
            return descriptor
        os.close(descriptor)


@contextlib.contextmanager
def claim(outputs: Sequence[Path | None], *, inputs: Sequence[Path] = (), force: bool = False,
          reports: Sequence[Path | None] = ()) -> Iterator[None]:
    """The files one command writes, checked and locked while the body runs: `outputs` (a model's
    sidecar with it) replaced only when `force`; `reports` replaced freely; none an input (an
    input model's weight files included) or another output. The checks run again under the lock:
    a run that finished in between made the output exist."""
    kept = [Path(p) for p in outputs if p is not None]
    files = [file for output in kept for file in written_files(output)]
    told = [Path(p) for p in reports if p is not None]
    refuse_inputs([*files, *told], inputs)
    refuse_existing(files, force=force)
    with contextlib.ExitStack() as locks:
        for output in [*kept, *told]:
            locks.enter_context(output_lock(output))
        refuse_inputs([*files, *told], inputs)
        refuse_existing(files, force=force)
        yield


def staging_prefix(output: Path) -> str:
    """The name an output's temporary twin beside it starts with (`.NAME.partial-PID-`), which
    `remove_stale` tells from a live run's by the pid."""
    return f".{output.name}{PARTIAL_MARK}{os.getpid()}-"


def remove_stale(parent: Path, prefix: str) -> None:
    """Remove the entries of `parent` named PREFIX + PID + ... whose process is gone (what a
    killed run left in its staging folders); entries of live processes and names without a pid
    are left alone."""
    import shutil

    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            if not entry.name.startswith(prefix):
                continue
            pid_text = entry.name[len(prefix):].split("-")[0]
            if not pid_text.isdigit() or _alive(int(pid_text)):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def remove_stale_partials(parent: Path) -> None:
    """Every `.NAME.partial-PID-...` folder in `parent` whose process is gone, whatever NAME."""
    with contextlib.suppress(OSError):
        names = {entry.name.split(PARTIAL_MARK)[0] for entry in os.scandir(parent)
                 if entry.name.startswith(".") and PARTIAL_MARK in entry.name}
        for name in names:
            remove_stale(parent, f"{name}{PARTIAL_MARK}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
