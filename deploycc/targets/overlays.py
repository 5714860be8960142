"""A target file laid over another: `extends = "jetson-orin"` (a variant states only what differs
from its base) and `[jetpack.releases."X"]` (a release overrides the sections it changes). Both
merge table by table; an empty table clears the base's.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from deploycc.errors import TargetError
from deploycc.targets.files import Reader, find_table, read_toml, search_dirs
from deploycc.targets.schema import JetPack


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        # An empty table in an override clears the base table (e.g. no int64 narrowing on TRT 10).
        if isinstance(value, dict) and value and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def apply_jetpack(data: dict[str, Any], path: Path, requested: str | None) -> tuple[dict, JetPack | None]:
    section = data.get("jetpack")
    if section is None:
        if requested is not None:
            raise TargetError(f"target '{data.get('name', path.stem)}' is not a Jetson target; "
                              "--jetpack applies only to targets with a [jetpack] section")
        return data, None
    reader = Reader(section, path, "jetpack.")
    reader.reject_unknown({"default", "releases"})
    releases = reader.table("releases", required=True)
    assert releases is not None
    available = tuple(sorted(releases.data))
    release = requested or reader.text("default", required=True)
    if release not in releases.data:
        raise TargetError(
            f"target '{data.get('name', path.stem)}' has no data for JetPack {release}",
            hint=f"available: {', '.join(available)}",
        )
    base_version = (data.get("backend") or {}).get("version")
    for name, overlay in releases.data.items():
        if not isinstance(overlay, dict):
            raise reader.fail(f"releases.{name}", "must be a table")
        # The description names the TensorRT release (`targets show`'s header): a release that
        # changes it must say so, or the header contradicts the body.
        version = (overlay.get("backend") or {}).get("version", base_version)
        if version != base_version and "description" not in overlay:
            raise reader.fail(f"releases.{name}.description",
                              f"required: this release sets backend.version {version} (the target's "
                              f"description is written for {base_version})")
    override = releases.data[release]
    merged = deep_merge({k: v for k, v in data.items() if k != "jetpack"}, override)
    facts = _jetpack_facts(release, path)
    return merged, JetPack(release=release, available=available, facts=facts)


def _jetpack_facts(release: str, near: Path) -> tuple[tuple[str, Any], ...]:
    table = read_toml(find_table("jetpack", near))
    for row in table.get("release", []):
        if row.get("jetpack") == release:
            keep = ("jetson_linux_l4t", "tensorrt", "cuda", "cudnn", "dla_sw", "max_onnx_opset",
                    "all_citations_official")
            return tuple((k, row[k]) for k in keep if k in row)
    raise TargetError(f"{near}: key 'jetpack.releases.{release}': JetPack {release} is not in "
                      "the JetPack map (targets/tables/jetpack.toml)")


def _find_base(name: str, near: Path) -> Path:
    for folder in (near.parent, *search_dirs()):
        candidate = folder / f"{name}.toml"
        if candidate.is_file() and candidate.resolve() != near.resolve():
            return candidate
    raise TargetError(f"{near}: key 'extends': no target file named {name!r}",
                      hint="the base is looked up beside the file, then as `--target` looks up names")


def read_target_data(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's document over its base's (`extends = "jetson-orin"`): a variant of a target, e.g.
    ONNX Runtime's TensorRT provider on the same board, states only what differs. The base's name
    and aliases stay its own; an empty table drops the base's section (`dla = {}`)."""
    data = read_toml(path)
    base_name = data.get("extends")
    if base_name is None:
        return data
    if not isinstance(base_name, str):
        raise Reader(data, path).fail("extends", "must be the name of a target")
    base_path = _find_base(base_name, path)
    if base_path.resolve() in seen:
        raise Reader(data, path).fail("extends", f"{base_name!r} extends this file again (a cycle)")
    base = read_target_data(base_path, (*seen, path.resolve()))
    own = {k: v for k, v in base.items() if k not in ("name", "aliases")}
    merged = deep_merge(own, {k: v for k, v in data.items() if k != "extends"})
    return {k: v for k, v in merged.items() if v != {}}
