"""Typed results of the public API. Each serializes to exactly the JSON the CLI prints."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from collections import OrderedDict
from enum import Enum
from pathlib import Path
from typing import Any

from deploycc.taxonomy import SafetyStep

# The exit codes (errors.py says what each means): here, so that a record's `exit_code` needs
# nothing above results.py.
EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2


def strict(value: Any) -> Any:
    """JSON has no Infinity or NaN (JSON.parse and jq reject them): such floats are written as the
    strings "inf", "-inf" and "nan", everything else as it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {key: strict(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [strict(item) for item in value]
    return value


class Result:
    """Mixin for result dataclasses: `to_dict()` and `to_json()` are what `--json` prints."""

    def to_dict(self) -> dict[str, Any]:
        assert dataclasses.is_dataclass(self)
        return dataclasses.asdict(self)  # type: ignore[arg-type]

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(strict(self.to_dict()), indent=indent, sort_keys=False, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """The record `to_dict()` wrote, read back from its JSON (keys it does not hold ignored)."""
        return from_dict(cls, data)


@dataclasses.dataclass
class SkippedStep:
    """A safety step that did not run, and why. `asked`: the user turned it off by name
    (--no-fp16-analysis), which `--strict` accepts; every other skip fails it."""

    step: SafetyStep
    reason: str
    asked: bool = False

    def line(self) -> str:
        return f"{self.step} skipped{' (as asked)' if self.asked else ''}: {self.reason}"


def unasked(skipped: list[SkippedStep]) -> list[SkippedStep]:
    """The skips `--strict` refuses: those the user did not ask for."""
    return [step for step in skipped if not step.asked]


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    """A dataclass from the JSON data `dataclasses.asdict` (and `strict`) made of it: nested
    records, enums, tuples and the floats written as "inf"/"nan" come back as they were. A
    record type with its own `from_dict` reads itself. Raises TypeError or ValueError on data
    that is not such a record."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__}: a JSON object was expected, not {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    values = {f.name: _read(hints[f.name], data[f.name]) for f in dataclasses.fields(cls)
              if f.init and f.name in data}
    return cls(**values)


def _read(kind: Any, value: Any) -> Any:
    """`value` (from JSON) as the annotated type `kind`."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if value is None or kind is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in args if arg is not type(None)]
        if len(options) == 1:  # `X | None`: X's own reason, not a list of what it is not
            return _read(options[0], value)
        for option in options:
            try:
                return _read(option, value)
            except (TypeError, ValueError):
                continue
        raise ValueError(f"{value!r} is none of {kind}")
    if origin is list:
        return [_read(args[0], item) for item in _sequence(value)] if args else list(_sequence(value))
    if origin is tuple:
        items = _sequence(value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_read(args[0], item) for item in items)
        if not args:
            return tuple(items)
        return tuple(_read(arg, item) for arg, item in zip(args, items, strict=True))
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"a JSON object was expected, not {value!r}")
        return {key: _read(args[1], item) for key, item in value.items()} if args else dict(value)
    if origin is not None:  # Sequence[...], Mapping[...]: as JSON holds them
        return value
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        reader = getattr(kind, "from_dict", None)
        return reader(value) if reader is not None else from_dict(kind, value)
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind(value)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise TypeError(f"a number was expected, not {value!r}")
        return float(value) if isinstance(value, str) else value  # "inf", "nan": as `strict` wrote them
    if kind in (int, str, bool) and not isinstance(value, kind):
        raise TypeError(f"{kind.__name__} was expected, not {value!r}")
    return value


def _sequence(value: Any) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise TypeError(f"a JSON array was expected, not {value!r}")
    return list(value)


class KeptRecords:
    """JSON records kept by key: the last `size` in memory, and in the folder `folder()` names
    (when it names one) as files written atomically, so that processes side by side read a whole
    record or none. A store saves time and decides nothing: a file that cannot be read or
    written is no record."""

    def __init__(self, size: int, folder: typing.Callable[[], Any]) -> None:
        self._size, self._folder = size, folder
        self._memory: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def get(self, key: str) -> dict[str, Any] | None:
        record = self._memory.get(key)
        if record is None:
            record = self._read(key)
        if record is not None:
            self._remember(key, record)
        return record

    def put(self, key: str, record: dict[str, Any]) -> None:
        self._remember(key, record)
        folder = self._folder()
        if not folder:
            return
        file = Path(folder) / f"{key}.json"
        partial = file.with_name(f".{key}.{os.getpid()}.partial")
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(record))
            partial.replace(file)
        except OSError:
            partial.unlink(missing_ok=True)

    def forget(self) -> None:
        """Empty the memory (what another process sees: the folder only)."""
        self._memory.clear()

    def _read(self, key: str) -> dict[str, Any] | None:
        folder = self._folder()
        if not folder:
            return None
        try:
            record = json.loads((Path(folder) / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def _remember(self, key: str, record: dict[str, Any]) -> None:
        self._memory[key] = record
        self._memory.move_to_end(key)
        while len(self._memory) > self._size:
            self._memory.popitem(last=False)
