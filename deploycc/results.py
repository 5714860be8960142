"""Typed results of the public API. Each serializes to exactly the JSON the CLI prints."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any


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
