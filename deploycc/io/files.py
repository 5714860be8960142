"""File-system work: an output directory staged in a hidden sibling and renamed into place (a
SIGTERM ends the build cleanly; a killed build's leftovers are removed by the next run), a
file's sha256, a folder as a tar.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from deploycc.io.outputs import (
    output_lock,
    refuse_inputs,
    remove_stale,
    remove_stale_partials,
    staging_prefix,
)


def _terminated(signum: int, frame: Any) -> None:
    from deploycc.errors import Terminated

    raise Terminated(f"terminated by signal {signum}")


def failed_run(folder: Path) -> bool:
    """Whether `folder` holds nothing but what a failed run wrote: its report.json says the run
    failed and lists every file the folder holds. Such a folder is a record of why there is no
    result, not a result, so the next attempt replaces it without being forced (as make rebuilds
    a target whose last build failed); a folder with anything else in it is never replaced so."""
    import json

    from deploycc.taxonomy import BuildStatus

    try:
        report = json.loads((folder / "report.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(report, dict) or report.get("status") != BuildStatus.FAILED \
            or not isinstance(report.get("files"), list):
        return False
    listed = {str(name) for name in report["files"]} | {"report.json", "report.md"}
    for root, _, names in os.walk(folder):
        for name in names:
            if str((Path(root) / name).relative_to(folder)) not in listed:
                return False
    return True


class StagedDirectory:
    """Build an output directory in a hidden sibling and rename it into place at the end.

    An existing directory is refused unless `force`, or unless it holds only a failed run's
    record (`failed_run`: `replaces_failed` says so); on any exception, Ctrl-C or SIGTERM the
    staging folder is removed; a SIGKILLed build's staging folder is removed by the next run.
    """

    def __init__(self, outdir: Path, *, force: bool = False, protect: tuple[Path, ...] = ()) -> None:
        """`protect`: inputs that must survive, so an OUTDIR holding one is never replaced."""
        from deploycc.errors import OptionError, OutputExists

        self.outdir = outdir
        self.replaces_failed = outdir.is_dir() and not force and failed_run(outdir)
        if outdir.exists() and not force and not self.replaces_failed:
            raise OutputExists(outdir)
        if outdir.exists() and not outdir.is_dir():
            raise OptionError(f"{outdir}: exists and is not a directory")
        refuse_inputs([outdir], protect)
        self.force = force
        self.path: Path | None = None
        self._previous_handler: Any = None
        self._lock = contextlib.ExitStack()

    def __enter__(self) -> StagedDirectory:
        import signal
        import tempfile
        import threading

        from deploycc.errors import OutputExists

        parent = self.outdir.parent
        with contextlib.ExitStack() as held:
            held.enter_context(output_lock(self.outdir))  # makes the parent, or says it cannot
            # again under the lock: a run that finished meanwhile made the folder
            self.replaces_failed = self.outdir.is_dir() and not self.force and failed_run(self.outdir)
            if self.outdir.exists() and not self.force and not self.replaces_failed:
                raise OutputExists(self.outdir)
            remove_stale_partials(parent)
            self.path = Path(tempfile.mkdtemp(prefix=staging_prefix(self.outdir), dir=parent))
            self._lock = held.pop_all()
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, _terminated)
        return self

    @property
    def staging(self) -> Path:
        assert self.path is not None, "the directory was committed already"
        return self.path

    def commit(self) -> None:
        """Put the staged directory in place (replacing the old one under --force)."""
        import shutil

        assert self.path is not None
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.path, 0o777 & ~umask)  # mkdtemp made it private; the result is not
        old = None
        if self.outdir.exists():
            old = self.outdir.with_name(f".{self.outdir.name}.old-{os.getpid()}")
            os.rename(self.outdir, old)
        os.rename(self.path, self.outdir)
        self.path = None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        import shutil
        import signal

        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        self._lock.close()


# Scratch files (a model rewritten for one ORT session, arrays handed to a child process) go to
# memory where there is room. On disk, a write waited on the kernel's writeback of the other files
# an audit writes: 500 MB took 0.1 s alone and 4.7 s beside an audit; in /dev/shm, 0.2 s always.
RAM_FOLDER = Path("/dev/shm")
SCRATCH_MARK = "deploycc-scratch-"
RAM_SPARE = 2 << 30  # memory left to the runs that read the files
SCRATCH_MARGIN = 3  # a scratch folder may hold this many copies of the size asked for


def scratch_folder(prefix: str, size: int = 0) -> Any:
    """A temporary folder (a TemporaryDirectory) for files of about `size` bytes that live only
    while this process runs: in memory when /dev/shm and the machine's free memory both have room
    for SCRATCH_MARGIN times that and RAM_SPARE beside, else in the system's temporary folder.
    A process killed before it cleans up leaves its folder in memory, so each folder made there
    first removes those whose process is gone."""
    import tempfile

    if _ram_has_room(SCRATCH_MARGIN * size + RAM_SPARE):
        remove_stale(RAM_FOLDER, SCRATCH_MARK)
        with contextlib.suppress(OSError):
            return tempfile.TemporaryDirectory(prefix=f"{SCRATCH_MARK}{os.getpid()}-{prefix}", dir=RAM_FOLDER)
    return tempfile.TemporaryDirectory(prefix=prefix)


def _ram_has_room(needed: int) -> bool:
    import shutil

    try:
        if not os.access(RAM_FOLDER, os.W_OK) or shutil.disk_usage(RAM_FOLDER).free < needed:
            return False
        with open("/proc/meminfo") as info:
            available = next((int(line.split()[1]) * 1024 for line in info
                              if line.startswith("MemAvailable:")), 0)
    except (OSError, ValueError):
        return False
    return available >= needed


def user_cache_dir(*parts: str) -> Path:
    """~/.cache/deploycc/PARTS (or under $XDG_CACHE_HOME): what is costly to make and the same on
    every run of this machine, never an output."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base, "deploycc", *parts)


def trim_cache(folder: Path, keep_bytes: int) -> int:
    """Delete `folder`'s oldest files (by when they were last written or read) until what is left
    is at most `keep_bytes`: a cache must not fill the disk over a 200-model audit (OpenVINO's
    blobs took 41 GB). Files another process removes meanwhile are skipped. Returns bytes freed."""
    entries = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            with contextlib.suppress(FileNotFoundError):
                if entry.is_file(follow_symlinks=False):
                    stat = entry.stat(follow_symlinks=False)
                    entries.append((max(stat.st_atime, stat.st_mtime), stat.st_size, entry.path))
    total, freed = sum(size for _, size, _ in entries), 0
    for _, size, path in sorted(entries):
        if total - freed <= keep_bytes:
            break
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            freed += size
    return freed


# Digests already taken, by the file's identity (device, inode, size, mtime): a build hashed its
# legalized model for the fp16 analysis' key and again for the manifest, and the bundle's copy for
# its reference and again for the manifest (a 354 MB ConvNeXt: 1.4 GB read to hash two files).
# deploycc writes by rename, a new inode, so a rewritten file is never taken for the old one.
_digests: OrderedDict[tuple[int, int, int, int], str] = OrderedDict()
KEPT_DIGESTS = 64


# errnos of a full disk or quota
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


def disk_full(error: BaseException) -> bool:
    """Whether `error` is a full disk or quota: the machine's, not the model's, so it stops the build
    (and the CLI says so, exit 2) where a stage that fails on a model would go on without it."""
    return isinstance(error, OSError) and error.errno in FULL_DISK


def full_disk_error(error: Exception, path: Path, needed: int) -> OSError | None:
    """The OSError(ENOSPC) a write of `needed` bytes to `path` met, where a library that writes through
    C++ streams said only that it failed (OpenVINO's save_model: "basic_ios::clear: iostream error",
    TinyLlama-1.1B's fp32 IR on a disk with 1.6 GB free): None where the disk had room for it."""
    free = shutil.disk_usage(path.parent).free
    if free >= needed:
        return None
    said = str(error).splitlines()[0][:80] if str(error) else type(error).__name__
    return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (about {needed / 2**20:,.0f} MiB to write, "
                   f"{free / 2**20:,.0f} MiB free; the writer said: {said})", str(path))


def save_openvino_ir(model: Any, xml: Path, compress_to_fp16: bool = False) -> None:
    """ov.save_model, a full disk said as one (full_disk_error): OpenVINO's own error names
    no cause, and a build whose candidates' IRs did not fit went on to say "fp32 did not pass"."""
    import openvino as ov

    try:
        ov.save_model(model, str(xml), compress_to_fp16=compress_to_fp16)
    except RuntimeError as error:
        needed = sum(op.get_byte_size() for op in model.get_ops() if op.get_type_name() == "Constant")
        full = full_disk_error(error, xml, needed // 2 if compress_to_fp16 else needed)
        if full is not None:
            raise full from error
        raise


def sha256_file(path: Path) -> str:
    import hashlib

    with path.open("rb") as stream:
        stat = os.fstat(stream.fileno())
        key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key in _digests:
            return _digests[key]
        digest = hashlib.sha256()
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    _digests[key] = digest.hexdigest()
    while len(_digests) > KEPT_DIGESTS:
        _digests.popitem(last=False)
    return _digests[key]


def copy_file(source: Path, copy: Path) -> None:
    """shutil.copyfile, the source's digest (when taken) known for the copy too."""
    import shutil

    shutil.copyfile(source, copy)
    stat = source.stat()
    known = _digests.get((stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns))
    if known is not None:
        made = copy.stat()
        _digests[(made.st_dev, made.st_ino, made.st_size, made.st_mtime_ns)] = known


def copy_model_file(model: Path, copy: Path) -> list[Path]:
    """The model file as `copy`, with its external data file, where it has one, beside it under the
    name the model gives it (the legalized model names its data file after itself); the files
    there. A data file already in that folder stays as it is."""
    copy_file(model, copy)
    data = model.with_name(model.name + ".data")
    if not data.exists():
        return [copy]
    placed = copy.with_name(data.name)
    if not placed.exists() or not placed.samefile(data):
        copy_file(data, placed)
    return [copy, placed]


def tar_folder(folder: Path) -> bytes:
    """A folder as an uncompressed tar, under its own name (for ssh's stdin or a Ray object)."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(folder, arcname=folder.name)
    return buffer.getvalue()


@contextlib.contextmanager
def descriptors_to(handle: Any) -> Iterator[None]:
    """File descriptors 1 and 2 sent to the open file `handle` (what a library's C++ side prints
    goes there as well as Python's writes), restored on the way out."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(handle.fileno(), 1)
    os.dup2(handle.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
