"""Read a target file into the records of `targets/schema.py`: TOML parsed and validated key by
key (every error names the file and the dotted key), op tables found and merged, inline ops and
`[[restrict]]` overlays applied, a JetPack release's facts laid over. Finding a target by name
is `targets/registry.py`'s job.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Mapping
from dataclasses import fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from deploycc.dtypes import KNOWN_DTYPES
from deploycc.errors import TargetError
from deploycc.legality import predicates
from deploycc.targets.schema import (
    BACKENDS,
    DEVICE_KINDS,
    DTYPE_MODES,
    LEGALIZE_MODES,
    OP_STATUSES,
    OPEN_RANGES,
    OPTIMIZATION_LEVELS,
    PERFORMANCE_HINTS,
    PRECISIONS,
    SHAPE_POLICIES,
    BackendSpec,
    Device,
    Dla,
    DtypePolicy,
    ExportPolicy,
    JetPack,
    Memory,
    OpsetRange,
    OpSupport,
    OpTable,
    PrecisionPolicy,
    PredicateRef,
    Provenance,
    ShapePolicy,
    Target,
)
from deploycc.taxonomy import Precision

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

TARGET_KEYS = {
    "schema", "name", "description", "aliases", "mode", "backend", "device", "opset", "ops", "op",
    "dtypes", "shapes", "precision", "memory", "dla", "jetpack", "provenance", "restrict", "export",
    "placement", "extends",
}
EXPORTERS = ("dynamo", "torchscript")  # torch.onnx.export(dynamo=True) and (dynamo=False)


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


# ------------------------------------------------------------------------------ op tables


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


@lru_cache(maxsize=32)
def load_table(path: Path) -> OpTable:
    data = read_toml(path)
    reader = Reader(data, path)
    return OpTable(
        name=reader.text("name", required=True),
        product=reader.text("product", default=""),
        product_version=reader.text("product_version", default=""),
        dtype_mode=reader.choice("dtype_mode", DTYPE_MODES, default="none"),
        function_expansion=reader.flag("function_expansion", False),
        source=_provenance(reader.table("source")),
        entries=tuple(_op_entry(row) for row in reader.tables("op")),
        type_notes=reader.strings("type_notes"),
        open_range=reader.choice("open_range", OPEN_RANGES, default="latest"),
        general_restrictions=reader.strings("general_restrictions"),
    )


SHAPE_DEFAULTS = ("fixed", "profile", "dynamic")


def _shape_policy(reader: Reader) -> ShapePolicy:
    reader.reject_unknown(_keys(ShapePolicy))
    batch = reader.choice("batch", SHAPE_DEFAULTS, default="dynamic")
    profile = reader._get("batch_profile", list, batch == "profile", None)
    if profile is not None and (len(profile) != 3 or not all(isinstance(n, int) and not isinstance(n, bool)
                                                             for n in profile)
                                or not 1 <= profile[0] <= profile[1] <= profile[2]):
        raise reader.fail("batch_profile",
                          f"must be [MIN, OPT, MAX] with 1 <= MIN <= OPT <= MAX, not {profile!r}")
    size = reader.integer("batch_size", default=1)
    if size < 1:
        raise reader.fail("batch_size", f"must be at least 1, not {size}")
    return ShapePolicy(policy=reader.choice("policy", SHAPE_POLICIES), note=reader.text("note"), batch=batch,
                       batch_size=size, batch_profile=tuple(profile) if profile else None,  # type: ignore[arg-type]
                       dims=reader.choice("dims", SHAPE_DEFAULTS, default="dynamic"))


def _provenance(reader: Reader | None) -> Provenance:
    if reader is None:
        return Provenance()
    fields = ("repo", "path", "commit", "tag_or_branch", "url", "retrieved", "provenance_note")
    return Provenance(**{key: reader.text(key) for key in fields})


def _op_entry(row: Reader) -> OpSupport:
    row.reject_unknown({"op", "domain", "status", "since", "until", "dtypes", "type_constraints",
                        "restrictions", "predicates", "note"})
    domain = row.text("domain", default="")
    dtypes = row.strings("dtypes", KNOWN_DTYPES) if "dtypes" in row.data else None
    constraints = row.table("type_constraints")
    type_constraints = None
    if constraints is not None:
        type_constraints = tuple(
            (key, constraints.strings(key)) for key in sorted(constraints.data)
        )
    refs = []
    raw_predicates = row.data.get("predicates", [])
    if not isinstance(raw_predicates, list):
        raise row.fail("predicates", "must be a list")
    for index, item in enumerate(raw_predicates):
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise row.fail(f"predicates[{index}]", "must be a name or a table with 'name'")
        args = {k: v for k, v in item.items() if k not in ("name", "wrong_result")}
        problem = predicates.validate(item["name"], args)
        if problem:
            raise row.fail(f"predicates[{index}]", problem)
        wrong_result = item.get("wrong_result", False)
        if not isinstance(wrong_result, bool):
            raise row.fail(f"predicates[{index}].wrong_result", "must be true or false")
        refs.append(PredicateRef(item["name"], tuple(sorted((k, _freeze(v)) for k, v in args.items())),
                                 wrong_result))
    return OpSupport(
        op=row.text("op", required=True),
        domain="" if domain == "ai.onnx" else domain,
        status=row.choice("status", OP_STATUSES, default="supported"),
        since=row.integer("since"),
        until=row.integer("until"),
        dtypes=dtypes,
        type_constraints=type_constraints,
        restrictions=row.strings("restrictions"),
        predicates=tuple(refs),
        note=row.text("note"),
    )


def _add_restrictions(entries: tuple[OpSupport, ...], overlays: list[Reader]) -> tuple[OpSupport, ...]:
    """`[[restrict]]` adds predicates and notes to a table's entries for one op, keeping the rest."""
    extra: dict[tuple[str, str], OpSupport] = {}
    for overlay in overlays:
        parsed = _op_entry(overlay)
        if not parsed.predicates and not parsed.restrictions:
            raise overlay.fail("predicates", "a [[restrict]] entry needs predicates or restrictions")
        earlier = extra.get((parsed.domain, parsed.op))
        if earlier is not None:  # several entries for one op add up
            parsed = replace(parsed, predicates=earlier.predicates + parsed.predicates,
                             restrictions=earlier.restrictions + parsed.restrictions)
        extra[(parsed.domain, parsed.op)] = parsed
    updated = []
    for entry in entries:
        add = extra.get((entry.domain, entry.op))
        if add is not None:
            entry = replace(entry, predicates=entry.predicates + add.predicates,
                            restrictions=entry.restrictions + add.restrictions)
        updated.append(entry)
    return tuple(updated)


def _freeze(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


# -------------------------------------------------------------------------------- targets


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        # An empty table in an override clears the base table (e.g. no int64 narrowing on TRT 10).
        if isinstance(value, dict) and value and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _apply_jetpack(data: dict[str, Any], path: Path, requested: str | None) -> tuple[dict, JetPack | None]:
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
    merged = _deep_merge({k: v for k, v in data.items() if k != "jetpack"}, override)
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


def _keys(record: type) -> set[str]:
    return {f.name for f in fields(record)}


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
    merged = _deep_merge(own, {k: v for k, v in data.items() if k != "extends"})
    return {k: v for k, v in merged.items() if v != {}}


def build_target(path: Path, jetpack: str | None) -> Target:
    raw = read_target_data(path)
    data, jetpack_info = _apply_jetpack(raw, path, jetpack)
    top = Reader(data, path)
    top.reject_unknown(TARGET_KEYS - {"jetpack", "extends"})
    if top.integer("schema", default=1) != 1:
        raise top.fail("schema", "only schema 1 is understood by this deploycc")

    backend_r = top.table("backend", required=True)
    device_r = top.table("device", required=True)
    opset_r = top.table("opset", required=True)
    ops_r = top.table("ops", required=True)
    assert backend_r and device_r and opset_r and ops_r
    # A table's keys are its record's fields: a field added to the schema is a key accepted here.
    backend_r.reject_unknown(_keys(BackendSpec))
    device_r.reject_unknown(_keys(Device))
    opset_r.reject_unknown(_keys(OpsetRange))
    ops_r.reject_unknown({"table", "function_expansion", "function_expansion_max_opset"})

    table_name = ops_r.text("table", required=True)
    table = load_table(find_table(table_name, path))
    inline = tuple(_op_entry(row) for row in top.tables("op"))
    if inline:
        replaced = {(e.domain, e.op) for e in inline}
        kept = tuple(e for e in table.entries if (e.domain, e.op) not in replaced)
        table = replace(table, entries=kept + inline, name=f"{table.name}+{path.stem}")
    restrictions = top.tables("restrict")
    if restrictions:
        table = replace(table, entries=_add_restrictions(table.entries, restrictions))
    if "function_expansion" in ops_r.data:
        table = replace(table, function_expansion=ops_r.flag("function_expansion"))
    if "function_expansion_max_opset" in ops_r.data:
        table = replace(table, function_expansion_max_opset=ops_r.integer("function_expansion_max_opset"))

    low = opset_r.integer("min", default=1)
    high = opset_r.integer("max", required=True)
    preferred = opset_r.integer("preferred", default=high)
    if not low <= preferred <= high:
        raise opset_r.fail("preferred", f"{preferred} is outside [{low}, {high}]")

    dtypes_r = top.table("dtypes") or Reader({}, path, "dtypes.")
    dtypes_r.reject_unknown(_keys(DtypePolicy))
    computed_r = dtypes_r.table("computed_as") or Reader({}, path, "dtypes.computed_as.")
    computed = []
    for source in sorted(computed_r.data):
        if source not in KNOWN_DTYPES:
            raise computed_r.fail(source, "unknown dtype")
        computed.append((source, computed_r.choice(source, tuple(sorted(KNOWN_DTYPES)))))

    shapes_r = top.table("shapes", required=True)
    precision_r = top.table("precision", required=True)
    assert shapes_r and precision_r
    supported_precisions = tuple(Precision(p) for p in precision_r.strings("supported", PRECISIONS))
    if not supported_precisions:
        raise precision_r.fail("supported", "must list at least one precision")
    default_precision = Precision(precision_r.choice("default", supported_precisions))
    refused = []
    for refused_r in precision_r.tables("refused"):
        refused_r.reject_unknown({"precision", "reason", "instead"})
        refused.append((Precision(refused_r.choice("precision", PRECISIONS)),
                        refused_r.text("reason", required=True),
                        Precision(refused_r.choice("instead", supported_precisions))))
    memory_r = top.table("memory") or Reader({}, path, "memory.")
    memory_r.reject_unknown(_keys(Memory))

    dla = None
    dla_r = top.table("dla")
    if dla_r is not None:
        dla_r.reject_unknown(_keys(Dla))
        dla_table_name = dla_r.text("table")
        dla = Dla(
            cores=dla_r.integer("cores", required=True),
            precisions=tuple(Precision(p) for p in dla_r.strings("precisions", PRECISIONS)),
            table=load_table(find_table(dla_table_name, path)) if dla_table_name else None,
            shape_policy=dla_r.choice("shape_policy", SHAPE_POLICIES, default="static"),
        )

    placement_r = top.table("placement") or Reader({}, path, "placement.")
    placement_r.reject_unknown({"fallback", "note"})
    provenance_r = top.table("provenance") or Reader({}, path, "provenance.")
    export_r = top.table("export") or Reader({}, path, "export.")
    return Target(
        name=top.text("name", required=True),
        description=top.text("description", default=""),
        aliases=top.strings("aliases"),
        mode=top.choice("mode", LEGALIZE_MODES, default="full"),
        backend=BackendSpec(
            kind=backend_r.choice("kind", tuple(BACKENDS)),
            version=backend_r.text("version", required=True),
            execution_provider=backend_r.text("execution_provider"),
            performance_hint=backend_r.choice("performance_hint", PERFORMANCE_HINTS, optional=True),
            optimization_level=backend_r.choice("optimization_level", OPTIMIZATION_LEVELS, optional=True),
        ),
        device=Device(
            kind=device_r.choice("kind", DEVICE_KINDS),
            name=device_r.text("name", default=""),
            compute_capability=device_r.text("compute_capability"),
            memory_mb=device_r.integer("memory_mb"),
        ),
        opset=OpsetRange(min=low, max=high, preferred=preferred, statement=opset_r.text("statement")),
        ops=table,
        dtypes=DtypePolicy(
            unsupported=dtypes_r.strings("unsupported", KNOWN_DTYPES),
            computed_as=tuple(computed),
            notes=dtypes_r.strings("notes"),
        ),
        shapes=_shape_policy(shapes_r),
        precision=PrecisionPolicy(supported=supported_precisions, default=default_precision,
                                  refused=tuple(refused)),
        memory=Memory(
            budget_mb=memory_r.integer("budget_mb"),
            workspace_mb=memory_r.integer("workspace_mb"),
            note=memory_r.text("note"),
        ),
        dla=dla,
        jetpack=jetpack_info,
        source_file=str(path),
        provenance=tuple((k, str(v)) for k, v in sorted(provenance_r.data.items())),
        export=_export_policy(export_r, high),
        fallback=placement_r.strings("fallback"),
    )


def _export_policy(reader: Reader, opset_max: int) -> ExportPolicy:
    reader.reject_unknown(_keys(ExportPolicy))
    exporters = reader.strings("exporters", EXPORTERS) or ExportPolicy.exporters
    if len(set(exporters)) != len(exporters):
        raise reader.fail("exporters", f"names an exporter twice: {list(exporters)}")
    ceiling = reader.integer("opset")
    if ceiling is not None and not 7 <= ceiling <= opset_max:
        raise reader.fail("opset", f"{ceiling} is outside [7, {opset_max}] (the target's opset.max)")
    return ExportPolicy(exporters=exporters, opset=ceiling, note=reader.text("note"))
