"""Finished cells on disk, one JSON file per cell key, so a rerun skips them (resumable)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from deploycc.audit.cells import CellResult


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
            result = CellResult(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            return None  # a damaged record is recomputed, not trusted
        result.cached = True
        return result

    def put(self, key: str, result: CellResult) -> None:
        from deploycc.io import write_text_atomic

        write_text_atomic(self._path(key), json.dumps(asdict(result), indent=1))
