"""Find targets by name, alias or path: built-in files, DEPLOYCC_TARGET_PATH folders, user files.

Resolution order for a name: folders in DEPLOYCC_TARGET_PATH (left to right), then the
built-in targets. A spec that ends in `.toml` or contains a path separator is a file. Reading
a file into a `Target` is `targets/loader.py`'s job (op tables are looked up in the `tables/`
folder beside the target file first, then among the built-in tables); loaded targets are cached
by path and modification time.
"""

from __future__ import annotations

import difflib
import os
from functools import lru_cache
from pathlib import Path

from deploycc.errors import TargetError
from deploycc.targets.files import TARGET_PATH_ENV, read_toml, search_dirs
from deploycc.targets.loader import build_target
from deploycc.targets.schema import Target

DEFAULT_TARGET = "ort-cpu"
__all__ = ["DEFAULT_TARGET", "TARGET_PATH_ENV", "list_targets", "resolve", "target_files"]


def target_files() -> dict[str, Path]:
    """name -> file for every target reachable by name (earlier search dirs win)."""
    found: dict[str, Path] = {}
    for folder in search_dirs():
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            found.setdefault(path.stem, path)
    return found


def _aliases() -> dict[str, str]:
    aliases: dict[str, str] = {}
    for name, path in target_files().items():
        try:
            for alias in read_toml(path).get("aliases", []):
                if isinstance(alias, str):
                    aliases.setdefault(alias, name)
        except TargetError:
            continue  # a broken file is reported when it is asked for by name
    return aliases


def resolve(spec: str = DEFAULT_TARGET, jetpack: str | None = None) -> Target:
    """A target by name, alias or file path, resolved (at a JetPack release if given)."""
    if spec.endswith(".toml") or os.sep in spec or (os.altsep and os.altsep in spec):
        return load_target_file(Path(spec), jetpack)
    files = target_files()
    if spec in files:
        return load_target_file(files[spec], jetpack)
    aliases = _aliases()
    if spec in aliases:
        return load_target_file(files[aliases[spec]], jetpack)
    candidates = sorted(files) + sorted(aliases)
    close = difflib.get_close_matches(spec, candidates, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'?" if close else "run 'deploycc targets' to list them"
    raise TargetError(f"unknown target '{spec}'", hint=hint)


def list_targets() -> list[Target]:
    return [load_target_file(path) for _, path in sorted(target_files().items())]


@lru_cache(maxsize=64)
def _load_cached(path: str, mtime: float, jetpack: str | None) -> Target:
    return build_target(Path(path), jetpack)


def load_target_file(path: Path, jetpack: str | None = None) -> Target:
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        raise TargetError(f"target file not found: {path}") from None
    return _load_cached(str(path.resolve()), mtime, jetpack)
