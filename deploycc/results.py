"""Typed results of the public API. Each serializes to exactly the JSON the CLI prints."""

from __future__ import annotations

import dataclasses
import json
from typing import Any


class Result:
    """Mixin for result dataclasses: `to_dict()` and `to_json()` are what `--json` prints."""

    def to_dict(self) -> dict[str, Any]:
        assert dataclasses.is_dataclass(self)
        return dataclasses.asdict(self)  # type: ignore[arg-type]

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)
