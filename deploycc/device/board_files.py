"""What the board sends back, read as input like any other: the board is another machine, and its
result.json, reference index, reference arrays and trtexec outputs may be truncated, hostile or
from another release. Every one of them is read here, bounded and checked before anything uses it,
and any problem is one line naming the file and the field (OptionError, exit 2):

- size: a JSON file is read whole only under its limit, and its nesting is measured on the text
  before `json` parses it (the parser recurses once per level: 100,000 `[` are a RecursionError);
- types: each value against the schema of the program that writes it (run_on_device.py's
  RESULT_SCHEMA for result.json, bundle.py's REFERENCE_SCHEMA for the index, trtexec's
  exportJSONOutput), keys the host reads required, every known key typed, unknown keys kept
  unread (a runner of the same schema may add one);
- sizes: a reference array's declared shape against its file's bytes, trtexec's dimensions
  against its values, numeric dtypes only;
- paths: a file the index names stays inside its folder (no absolute path, no `..`, no link out),
  and is a plain file.

The specs are data (Obj, Seq, Names, Scalar: records/device_schema.py, beside result.json's own
schema) read by one checker, `check`.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from deploycc.device.bundle import REFERENCE_DIR, REFERENCE_INDEX, REFERENCE_SCHEMA
from deploycc.errors import OptionError
from deploycc.records.device import DeviceResult, NotADeviceResult
from deploycc.records.device_schema import INT, STR, Obj, Scalar, Seq, Spec, problem, shown

MAX_DEPTH = 32  # result.json's deepest is 5 (fp32_layers.inspector.engine.<node>): room to grow
MAX_JSON_BYTES = 64 << 20  # result.json, reference.json: 600 tegrastats lines and a row per output
MAX_OUTPUT_BYTES = 512 << 20  # trtexec's outputs as decimal text: tens of millions of values
MAX_ARRAY_BYTES = 2 << 30  # one reference array
MAX_RANK = 32
# The dtypes bundle.py writes reference arrays in (binding_dtype): numbers and bool, never objects.
NUMERIC_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                  "float16", "float32", "float64")


# --------------------------------------------------------------------------- specs

# JSON's, by exact type: the fast test for millions of trtexec values
NUMBER = Scalar("a number", lambda v: type(v) in (float, int))
DIM = Scalar("a non-negative integer", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0)
DTYPE = Scalar(f"a numeric dtype ({', '.join(NUMERIC_DTYPES)})", lambda v: v in NUMERIC_DTYPES)
SHA256 = Scalar("a sha256 (64 hex digits)",
                lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None)

# reference/reference.json as bundle.py's write_reference writes it (REFERENCE_SCHEMA 1)
_ENTRY = Obj({"name": STR, "shape": Seq(DIM), "dtype": DTYPE, "file": STR, "sha256": SHA256})
INDEX_SPEC = Obj({"schema": INT, "model_sha256": SHA256, "inputs": Seq(_ENTRY), "outputs": Seq(_ENTRY),
                       "tolerances": Obj({"atol": NUMBER, "rtol": NUMBER, "min_cosine": NUMBER},
                                         {"mismatch_share": NUMBER})})

# trtexec --exportOutput (exportJSONOutput, 8.2.1 to 10.0.1): values are JSON numbers, never strings
TRTEXEC_SPEC = Seq(Obj({"name": STR, "dimensions": STR, "values": Seq(NUMBER)}))


# --------------------------------------------------------------------------- the checker

def check(value: Any, spec: Spec, source: object, what: str) -> None:
    """`value` as `spec` has it, else OptionError: '{source}: not a {what}: {field}: {problem}'."""
    wrong = problem(value, spec)
    if wrong:
        raise OptionError(f"{source}: not a {what}: {wrong}")


def read_result(data: Any, source: object) -> DeviceResult:
    """result.json's value `data` (read from `source`) as the record, checked against its schema
    (RESULT_SPEC): anything else is one line, OptionError."""
    try:
        return DeviceResult.from_dict(data, str(source))
    except NotADeviceResult as error:
        raise OptionError(error.message, hint=error.hint) from None


# --------------------------------------------------------------------------- files

# a JSON string (escapes included), or a run of anything but brackets and quotes
_NOT_BRACKETS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[^"\[\]{}]+')


def _too_deep(text: str) -> bool:
    """Whether `text` nests brackets more than MAX_DEPTH deep, strings aside; measured without
    recursion, stopping at the first level too many."""
    depth = 0
    for char in _NOT_BRACKETS.sub("", text):
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif char in "]}":
            depth -= 1
    return False


def read_json(path: Path, what: str, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON value of the file `path` (a plain file of at most `limit` bytes, nested at most
    MAX_DEPTH deep), or OptionError in one line."""
    if not path.exists():
        raise OptionError(f"{path}: no such {what}")
    if not path.is_file():  # a folder, a FIFO (reading would block), a device
        raise OptionError(f"{path}: not a {what} (not a plain file)")
    try:
        with path.open("rb") as stream:
            data = stream.read(limit + 1)
        if len(data) > limit:
            raise OptionError(f"{path}: not a {what} (larger than {limit >> 20} MiB)")
        text = data.decode("utf-8")
        if _too_deep(text):
            raise OptionError(f"{path}: not a {what} (nested more than {MAX_DEPTH} deep)")
        return json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        first = str(error).splitlines()[0] if str(error) else "truncated?"
        raise OptionError(f"{path}: not a readable {what} ({type(error).__name__}: {first})") from None


def board_file(folder: Path, name: str, source: object, where: str, root: Path | None = None) -> Path:
    """`folder`/`name`, where `name` (a value at `where` in `source`, or a fixed name) is a plain
    file inside `folder`, and inside `root` (the bundle) once links are followed: an absolute
    name, a `..` or a link that leads out is refused unread."""
    out = f"{source}: {where}: {name!r}"
    if not name or PurePosixPath(name).is_absolute() or PureWindowsPath(name).drive or "\\" in name \
            or ".." in PurePosixPath(name).parts:
        raise OptionError(f"{out} is not a name inside {folder} (refused unread)")
    path = (folder / name).resolve()
    if not all(path.is_relative_to(place.resolve()) for place in (folder, root or folder)):
        raise OptionError(f"{out} leads out of {folder} (refused unread)")
    if not path.is_file():
        raise OptionError(f"{source}: {where}: no such file {name!r} in {folder}")
    return path


def read_log(folder: Path, name: str, limit: int = MAX_JSON_BYTES) -> str:
    """The text of the log `name` in `folder`, its last `limit` bytes (a tool's summary is at the
    end); "" where there is none."""
    if not (folder / name).exists() and not (folder / name).is_symlink():
        return ""
    path = board_file(folder, name, folder, "the log")
    with path.open("rb") as stream:
        stream.seek(max(0, path.stat().st_size - limit))
        return stream.read(limit).decode("utf-8", errors="replace")


def read_array(bundle: Path, entry: dict[str, Any], source: object, where: str) -> Any:
    """The reference array an index `entry` (checked against INDEX_SPEC) describes, read from
    its file in `bundle`'s reference folder: the bytes its shape and dtype declare, no more, with
    the index's sha256."""
    import hashlib

    import numpy as np

    path = board_file(bundle / REFERENCE_DIR, entry["file"], source, f"{where}.file", root=bundle)
    dtype = np.dtype(entry["dtype"]).newbyteorder("<")
    declared = math.prod(entry["shape"][:MAX_RANK + 1]) * dtype.itemsize
    if len(entry["shape"]) > MAX_RANK or declared > MAX_ARRAY_BYTES:
        raise OptionError(f"{source}: {where}.shape: {entry['shape']} of {dtype.name} is beyond the "
                          f"{MAX_RANK} dims and {MAX_ARRAY_BYTES >> 30} GiB a reference array may have")
    with path.open("rb") as stream:
        data = stream.read(declared + 1)
    if len(data) != declared:
        raise OptionError(f"{source}: {where}.shape: {entry['shape']} of {dtype.name} is {declared} bytes, "
                          f"its file {entry['file']} holds {'more' if len(data) > declared else len(data)}")
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise OptionError(f"{source}: {where}.sha256: {entry['file']} does not match it")
    return np.frombuffer(data, dtype=dtype).reshape(entry["shape"])


def read_trtexec_outputs(path: Path) -> dict[str, Any]:
    """trtexec's exported outputs, {name: float64 array of its dimensions}, each output's
    dimensions holding exactly its values."""
    import numpy as np

    outputs = read_json(path, "trtexec output", MAX_OUTPUT_BYTES)
    check(outputs, TRTEXEC_SPEC, path, "trtexec output")
    arrays = {}
    for position, output in enumerate(outputs):
        dimensions, values = output["dimensions"], output["values"]
        if not re.fullmatch(r"(\d{1,18}(x\d{1,18}){0,31})?", dimensions):
            raise OptionError(f"{path}: [{position}].dimensions: {shown(dimensions)} is not trtexec's AxBxC")
        dims = [int(d) for d in dimensions.split("x") if d]
        if dims and math.prod(dims) != len(values):
            raise OptionError(f"{path}: [{position}].dimensions: {dimensions} hold {math.prod(dims)} values, "
                              f"'values' has {len(values)}")
        arrays[output["name"]] = np.asarray(values, dtype=np.float64).reshape(dims or [-1])
    return arrays


def read_reference_index(folder: Path, model_sha256: str) -> tuple[Path, dict[str, Any]]:
    """The bundle `folder`'s reference index, checked, made for the model of `model_sha256`."""
    path = board_file(folder, f"{REFERENCE_DIR}/{REFERENCE_INDEX}", folder, "the reference index")
    index = read_json(path, "reference index")
    check(index, INDEX_SPEC, path, "reference index")
    if index["schema"] > REFERENCE_SCHEMA:
        raise OptionError(f"{path}: schema: {index['schema']} is newer than this deploycc reads "
                          f"({REFERENCE_SCHEMA})")
    if index["model_sha256"] != model_sha256:
        raise OptionError(f"{path}: model_sha256: the reference was made for another model")
    return path, index
