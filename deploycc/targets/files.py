"""Target files as text: where they are (the built-ins, `DEPLOYCC_TARGET_PATH`), TOML read with an
error that names the file, typed access to a document whose every error names the dotted key, and
an op table looked up by name. `loader.py` makes records of what these read.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deploycc.errors import TargetError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

TARGET_PATH_ENV = "DEPLOYCC_TARGET_PATH"


def builtin_dir() -> Path:
    """Where the shipped target files are: inside the wheel, or at the top of a checkout."""
    packaged = Path(__file__).resolve().parent.parent / "_builtin_targets"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "targets"


def search_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get(TARGET_PATH_ENV, "").split(os.pathsep) if p]
    return [*extra, builtin_dir()]


class Reader:
    """Typed access to one TOML document; every error names the file and the dotted key."""

    def __init__(self, data: Mapping[str, Any], file: Path | str, prefix: str = "") -> None:
        self.data = data
        self.file = str(file)
        self.prefix = prefix

    def fail(self, key: str, problem: str) -> TargetError:
        return TargetError(
            f"{self.file}: key '{self.prefix}{key}': {problem}",
            hint="see targets/README.md for the target file format",
        )

    def _get(self, key: str, kind: type | tuple[type, ...], required: bool, default: Any) -> Any:
        if key not in self.data:
            if required:
                raise self.fail(key, "is required")
            return default
        value = self.data[key]
        if isinstance(value, bool) and kind in (int, (int,)):
            raise self.fail(key, f"must be an integer, not {value!r}")
        if not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(key, f"must be {names}, not {type(value).__name__} {value!r}")
        return value

    def text(self, key: str, default: str | None = None, required: bool = False) -> Any:
        return self._get(key, str, required, default)

    def integer(self, key: str, default: int | None = None, required: bool = False) -> Any:
        return self._get(key, int, required, default)

    def flag(self, key: str, default: bool = False) -> bool:
        return bool(self._get(key, bool, False, default))

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None,
               optional: bool = False) -> Any:
        """One of `choices`; required unless a default is given or it is `optional` (then None)."""
        value = self.text(key, default, required=default is None and not optional)
        if value is None and optional:
            return None
        if value not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}, not {value!r}")
        return value

    def strings(self, key: str, choices: frozenset[str] | tuple[str, ...] | None = None) -> tuple:
        values = self._get(key, list, False, [])
        for index, item in enumerate(values):
            if not isinstance(item, str):
                raise self.fail(f"{key}[{index}]", f"must be a string, not {item!r}")
            if choices is not None and item not in choices:
                raise self.fail(f"{key}[{index}]", f"unknown value {item!r}")
        return tuple(values)

    def table(self, key: str, required: bool = False) -> Reader | None:
        value = self._get(key, dict, required, None)
        return None if value is None else Reader(value, self.file, f"{self.prefix}{key}.")

    def tables(self, key: str) -> list[Reader]:
        rows = self._get(key, list, False, [])
        readers = []
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise self.fail(f"{key}[{index}]", "must be a table")
            readers.append(Reader(row, self.file, f"{self.prefix}{key}[{index}]."))
        return readers

    def reject_unknown(self, allowed: set[str]) -> None:
        for key in self.data:
            if key not in allowed:
                raise self.fail(key, f"unknown key (expected one of: {', '.join(sorted(allowed))})")


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise TargetError(f"target file not found: {path}") from None
    except IsADirectoryError:
        raise TargetError(f"target file is a directory: {path}") from None
    except tomllib.TOMLDecodeError as error:
        raise TargetError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError:
        raise TargetError(f"{path}: not valid TOML: not UTF-8 text") from None


def find_table(name: str, near: Path) -> Path:
    if "/" in name or name.endswith(".toml"):
        candidate = (near.parent / name).resolve()
        if candidate.is_file():
            return candidate
    for folder in (near.parent / "tables", *[d / "tables" for d in search_dirs()]):
        candidate = folder / f"{name}.toml"
        if candidate.is_file():
            return candidate
    raise TargetError(f"{near}: key 'ops.table': no op table named {name!r}",
                      hint="tables live in targets/tables/ or a tables/ folder beside the target")
