"""A `.pt2` read once into memory and checked before torch opens it, so that loading an archive
runs no code the archive brings.

torch.export.load is pickle under the hood, and torch says so: a weight or constant marked
`use_pickle` is `torch.load(weights_only=False)`, the sample inputs fall back to it, an opaque
constant is `pickle.loads`, compiled AOTInductor code is loaded as a shared library, and the
program's JSON carries strings that torch evaluates or imports (pt2_program.py). Each is checked
here on the bytes torch is then given (no window for the file to change between the two):

    layout      one folder, no name twice (miniz looks names up ignoring case, zipfile does not)
    pickles     every member torch would unpickle must pass torch's weights-only unpickler
    code        AOTInductor libraries, TorchScript and opaque objects are refused outright
    program     models/*.json: see pt2_program.py
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

from deploycc.errors import ModelInputError
from deploycc.frontend import first_line
from deploycc.frontend.pt2_program import check_program, plain_text

# torch/export/pt2_archive/constants.py, spelled out: the checks must name what torch reads even
# where a future torch moves them (tests/frontend/test_pt2_pickles.py pins them to torch's own)
MODELS = "models/{}.json"
SAMPLE_INPUTS = "data/sample_inputs/{}.pt"
WEIGHTS_DIR, WEIGHTS_CONFIG = "data/weights/", "data/weights/{}_weights_config.json"
CONSTANTS_DIR, CONSTANTS_CONFIG = "data/constants/", "data/constants/{}_constants_config.json"
TENSOR_CONSTANT, CUSTOM_OBJ, OPAQUE_OBJ = "tensor_", "custom_obj_", "opaque_obj_"
AOTINDUCTOR_DIR = "data/aotinductor/"
REFUSED_HINT = ("deploycc reads only plain tensors from a .pt2: save it again with torch.export.save, or, "
                "if you trust its code, give a module.path:factory that loads it")


class Archive:
    """The archive's members as torch's reader sees them: named below its one top folder, and
    looked up ignoring case, as miniz does."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path = path
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
            infos = self.zip.infolist()
        except (zipfile.BadZipFile, OSError, ValueError) as error:
            raise _not_pt2(path, f"not a zip file: {first_line(error)}") from None
        if not infos or "/" not in infos[0].filename:
            raise _not_pt2(path, "no top folder")
        # torch's reader takes the first member's folder as the archive's and prefixes every
        # name it reads with it; a member outside it is one torch's older-format fallback reads
        self.prefix = infos[0].filename.split("/", 1)[0] + "/"
        self.names: list[str] = []  # below the prefix, as stored: what torch's get_file_names lists
        self._infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            key = info.filename.lower()
            if key in self._infos:
                raise ModelInputError(f"{path}: the archive holds {info.filename} twice (or in two cases), "
                                      "so torch and this check could read different copies; refused")
            if not key.startswith(self.prefix.lower()):
                raise _not_pt2(path, f"{info.filename} lies outside its folder {self.prefix}")
            self._infos[key] = info
            self.names.append(info.filename[len(self.prefix):])

    def has(self, name: str) -> bool:
        return (self.prefix + name).lower() in self._infos

    def read(self, name: str) -> bytes:
        try:
            return self.zip.read(self._infos[(self.prefix + name).lower()])
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
            raise _not_pt2(self.path, f"{name}: {first_line(error)}") from None

    def json(self, name: str) -> Any:
        try:
            return json.loads(self.read(name).decode("utf-8"))
        except ValueError as error:
            raise _not_pt2(self.path, f"{name}: {first_line(error)}") from None


def read_checked(path: Path, torch: Any) -> io.BytesIO:
    """The archive's bytes, for torch.export.load, once nothing in them would run code when
    loaded; a ModelInputError (exit 2) naming the member otherwise."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ModelInputError(f"{path}: cannot read ({first_line(error)})") from None
    archive = Archive(path, data)
    for name in archive.names:
        if name.lower().startswith(AOTINDUCTOR_DIR):  # torch's reader ignores case
            raise ModelInputError(f"{path}: the archive holds compiled AOTInductor code ({name}), which "
                                  "torch.export.load would load and run; refused", hint=REFUSED_HINT)
    for model in _model_names(archive):
        check_program(archive.path, MODELS.format(model), archive.json(MODELS.format(model)), torch)
        _check_pickles(archive, model, torch)
    return io.BytesIO(data)


def _model_names(archive: Archive) -> list[str]:
    # as torch's _load_exported_programs takes them: whatever follows models/, less ".json"'s
    # length, whether or not the name ends so
    head, tail = MODELS.split("{}")
    return [name[len(head):-len(tail)] for name in archive.names if name.startswith(head)]


def _check_pickles(archive: Archive, model: str, torch: Any) -> None:
    """Every member torch.export.load would unpickle for `model`, through torch's weights-only
    unpickler; the sample inputs' keys as well, since torch writes them into Python code."""
    if archive.has(SAMPLE_INPUTS.format(model)):
        inputs = _weights_only(archive, SAMPLE_INPUTS.format(model), torch)
        _check_keys(archive.path, SAMPLE_INPUTS.format(model), inputs)
    for directory, config_name in ((WEIGHTS_DIR, WEIGHTS_CONFIG), (CONSTANTS_DIR, CONSTANTS_CONFIG)):
        legacy = f"{directory}{model}.pt"  # torch's older single-file weights, read with a fallback
        if archive.has(legacy):  # both, where both are there: torch picks by exact case, miniz not
            _weights_only(archive, legacy, torch)
        if not archive.has(config_name.format(model)):
            continue  # torch refuses the archive itself
        config = archive.json(config_name.format(model))
        entries = config.get("config") if isinstance(config, dict) else None
        for entry in (entries or {}).values():
            if not isinstance(entry, dict) or not isinstance(entry.get("path_name"), str):
                continue  # torch's dataclass reader refuses it before reading any member
            member = os.path.join(directory, entry["path_name"])  # as torch joins them
            if directory == CONSTANTS_DIR and entry["path_name"].startswith((CUSTOM_OBJ, OPAQUE_OBJ)):
                # pickle.loads, or TorchScript's unpickler calling a registered class's native
                # __setstate__: no weights-only form exists, and no ONNX exporter takes them
                raise _unpickles(archive.path, member)
            if entry.get("use_pickle") and archive.has(member):
                _weights_only(archive, member, torch)


def _weights_only(archive: Archive, member: str, torch: Any) -> Any:
    try:
        return torch.load(io.BytesIO(archive.read(member)), weights_only=True, map_location="cpu")
    except ModelInputError:
        raise
    except Exception:  # the unpickler's refusal, or no pickle at all: either way not plain data
        raise _unpickles(archive.path, member) from None


def _check_keys(path: Path, member: str, value: Any) -> None:
    """torch pastes the keys of the sample inputs into the Python source of the guards it writes
    for ExportedProgram.module() and run_decompositions: only names may be keys."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not (isinstance(key, int) or (isinstance(key, str) and plain_text(key))):
                raise ModelInputError(f"{path}: {member} has the key {str(key)[:60]!r} for torch to paste "
                                      "into code, which could run code; refused", hint=REFUSED_HINT)
            _check_keys(path, member, item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_keys(path, member, item)


def _unpickles(path: Path, member: str) -> ModelInputError:
    return ModelInputError(f"{path}: the archive asks to unpickle {member}, which could run code; refused",
                           hint=REFUSED_HINT)


def _not_pt2(path: Path, why: str) -> ModelInputError:
    return ModelInputError(f"{path}: not a torch.export archive ({why})",
                           hint="write it with torch.export.save(torch.export.export(model, args), path)")
