"""The original model's outputs, computed once per inputs: a build runs the original on the same
inputs more than once (verifying the legalized model, then the engine), and an audit runs it again
for every target. Within a process, results are kept by the file (path, size, time) and the
inputs; across an audit's cells, by the model's sha256 and the inputs, in the folder the audit
names (CACHE_ENV), for the model it names (MODEL_ENV): files there are written atomically, so
cells running side by side read whole results or none.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from deploycc.verify.exact import EXACT

CACHE_ENV = "DEPLOYCC_REFERENCE_CACHE"  # a folder of reference outputs shared by an audit's cells
MODEL_ENV = "DEPLOYCC_REFERENCE_MODEL"  # the sha256 of the model whose outputs may be shared there
KEPT_IN_MEMORY = 4

Outputs = tuple[dict[str, np.ndarray], str]  # the outputs, and what computed them (ORT, reference)
_memory: OrderedDict[tuple[str, int, int, str], Outputs] = OrderedDict()


def feeds_digest(feeds: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(feeds):
        array = np.ascontiguousarray(feeds[name])
        digest.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def original_outputs(path: Path, feeds: dict[str, np.ndarray], run: Callable[[], Outputs]) -> Outputs:
    """`run()`'s result for the original at `path` on `feeds`, from a cache where it was computed
    before (copies: a caller may change what it is given)."""
    stat = path.stat()
    inputs = ("exact-" if EXACT.get() else "") + feeds_digest(feeds)  # a prefix: the file name keeps it
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, inputs)
    found = _memory.get(key)
    if found is None:
        shared = _shared_file(path, inputs)
        found = _read(shared) if shared is not None else None
        if found is None:
            found = run()
            if shared is not None:
                _write(shared, found)
    _memory[key] = found
    _memory.move_to_end(key)
    while len(_memory) > KEPT_IN_MEMORY:
        _memory.popitem(last=False)
    outputs, reference = found
    return {name: copy.deepcopy(array) for name, array in outputs.items()}, reference


def _shared_file(path: Path, inputs: str) -> Path | None:
    folder, model = os.environ.get(CACHE_ENV), os.environ.get(MODEL_ENV)
    if not folder or not model:
        return None
    from deploycc.io import sha256_file

    if sha256_file(path) != model:  # not the audited model (a staged copy is the same bytes)
        return None
    return Path(folder) / model[:32] / f"{inputs[:32]}.npz"


def _read(file: Path) -> Outputs | None:
    try:
        with np.load(file, allow_pickle=False) as data:
            meta = json.loads(str(data["__meta__"]))
            outputs = {name: data[f"output_{index}"] for index, name in enumerate(meta["names"])}
            return outputs, meta["reference"]
    except (OSError, ValueError, KeyError):  # absent, or written by another version: computed again
        return None


def _write(file: Path, found: Outputs) -> None:
    outputs, reference = found
    if any(not isinstance(array, np.ndarray) or array.dtype == object for array in outputs.values()):
        return  # sequences and maps: not stored
    partial = file.with_name(f"{file.stem}.{os.getpid()}.partial.npz")
    meta = json.dumps({"names": list(outputs), "reference": reference})
    arrays: dict[str, Any] = {f"output_{index}": array for index, array in enumerate(outputs.values())}
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        np.savez(partial, **{"__meta__": np.array(meta), **arrays})
        partial.replace(file)
    except OSError:  # a full disk, a read-only folder: the cache saves time, it decides nothing
        partial.unlink(missing_ok=True)
