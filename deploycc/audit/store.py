"""Finished cells on disk, one JSON file per cell key, so a rerun skips them (resumable); cells
that failed for want of a resource or of time are run again."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from deploycc.records.audit import CellResult
from deploycc.results import from_dict
from deploycc.taxonomy import Failure

# Outcomes that say more about the cluster at the time than about the model and the target: a
# rerun (after a board joined, with a longer timeout) must try them again, not reuse them.
TRANSIENT = frozenset({Failure.UNSCHEDULABLE, Failure.TIMEOUT})


class CellStore:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> CellResult | None:
        path = self._path(key)
        if not path.is_file():
            return None
        try:
            result = from_dict(CellResult, json.loads(path.read_text()))
        except (ValueError, TypeError):
            return None  # a damaged record is recomputed, not trusted
        if result.category in TRANSIENT:
            return None
        result.cached = True
        return result

    def put(self, key: str, result: CellResult) -> None:
        from deploycc.io import write_text_atomic

        write_text_atomic(self._path(key), json.dumps(asdict(result), indent=1))
