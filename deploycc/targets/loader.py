"""Read a target file into the records of `targets/schema.py`: the document (over its base and
at its JetPack release, `overlays.py`) validated key by key (every error names the file and the
dotted key, `files.py`'s Reader), op tables found and merged, inline ops and `[[restrict]]`
overlays applied. Finding a target by name is `targets/registry.py`'s job.
"""

from __future__ import annotations

from dataclasses import fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from deploycc.dtypes import KNOWN_DTYPES
from deploycc.targets.files import Reader, find_table, read_toml
from deploycc.targets.overlays import apply_jetpack, read_target_data
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
from deploycc.targets.vocabulary import validate as predicate_problem
from deploycc.taxonomy import Precision

TARGET_KEYS = {
    "schema", "name", "description", "aliases", "mode", "backend", "device", "opset", "ops", "op",
    "dtypes", "shapes", "precision", "memory", "dla", "jetpack", "provenance", "restrict", "export",
    "placement", "extends",
}
EXPORTERS = ("dynamo", "torchscript")  # torch.onnx.export(dynamo=True) and (dynamo=False)
# The engine's traits a [backend] table may state, with their defaults: BackendSpec's yes/no fields
TRAIT_DEFAULTS: dict[str, bool] = {f.name: f.default for f in fields(BackendSpec)
                                   if isinstance(f.default, bool)}


# ------------------------------------------------------------------------------ op tables


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
        problem = predicate_problem(item["name"], args)
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


def _keys(record: type) -> set[str]:
    return {f.name for f in fields(record)}


def _required_table(top: Reader, key: str) -> Reader:
    table = top.table(key, required=True)
    assert table is not None  # required=True raises rather than return None
    return table


def _table_or_empty(top: Reader, key: str) -> Reader:
    """An optional table; an absent one reads as empty, so each of its keys takes its default."""
    return top.table(key) or Reader({}, top.file, f"{key}.")


def build_target(path: Path, jetpack: str | None) -> Target:
    raw = read_target_data(path)
    data, jetpack_info = apply_jetpack(raw, path, jetpack)
    top = Reader(data, path)
    top.reject_unknown(TARGET_KEYS - {"jetpack", "extends"})
    if top.integer("schema", default=1) != 1:
        raise top.fail("schema", "only schema 1 is understood by this deploycc")
    backend_r, device_r, opset_r, ops_r = _required_tables(top)
    table = _target_op_table(top, ops_r, path)
    low, high, preferred = _opset_bounds(opset_r)
    dtypes_r = _table_or_empty(top, "dtypes")
    dtypes_r.reject_unknown(_keys(DtypePolicy))
    computed = _computed_as(dtypes_r)
    shapes_r = _required_table(top, "shapes")
    precision = _precision_policy(_required_table(top, "precision"))
    memory_r = _table_or_empty(top, "memory")
    memory_r.reject_unknown(_keys(Memory))
    dla = _dla(top.table("dla"), path)
    placement_r = _table_or_empty(top, "placement")
    placement_r.reject_unknown({"fallback", "note"})
    provenance_r = _table_or_empty(top, "provenance")
    export_r = _table_or_empty(top, "export")
    return Target(
        name=top.text("name", required=True),
        description=top.text("description", default=""),
        aliases=top.strings("aliases"),
        mode=top.choice("mode", LEGALIZE_MODES, default="full"),
        backend=_backend_spec(backend_r),
        device=_device(device_r),
        opset=OpsetRange(min=low, max=high, preferred=preferred, statement=opset_r.text("statement")),
        ops=table,
        dtypes=DtypePolicy(
            unsupported=dtypes_r.strings("unsupported", KNOWN_DTYPES),
            computed_as=computed,
            notes=dtypes_r.strings("notes"),
        ),
        shapes=_shape_policy(shapes_r),
        precision=precision,
        memory=_memory(memory_r),
        dla=dla,
        jetpack=jetpack_info,
        source_file=str(path),
        provenance=tuple((k, str(v)) for k, v in sorted(provenance_r.data.items())),
        export=_export_policy(export_r, high),
        fallback=placement_r.strings("fallback"),
    )


def _required_tables(top: Reader) -> tuple[Reader, Reader, Reader, Reader]:
    """The backend, device, opset and ops tables every target has, each holding only known keys."""
    backend_r, device_r, opset_r, ops_r = (_required_table(top, key)
                                           for key in ("backend", "device", "opset", "ops"))
    # A table's keys are its record's fields: a field added to the schema is a key accepted here.
    backend_r.reject_unknown(_keys(BackendSpec))
    device_r.reject_unknown(_keys(Device))
    opset_r.reject_unknown(_keys(OpsetRange))
    ops_r.reject_unknown({"table", "function_expansion", "function_expansion_max_opset"})
    return backend_r, device_r, opset_r, ops_r


def _target_op_table(top: Reader, ops_r: Reader, path: Path) -> OpTable:
    """The op table `[ops] table` names, with the target's inline `[[op]]` entries replacing the table's
    for the same op, its `[[restrict]]` overlays applied and its function expansion settings."""
    table = load_table(find_table(ops_r.text("table", required=True), path))
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
    return table


def _opset_bounds(opset_r: Reader) -> tuple[int, int, int]:
    """`[opset]`'s min, max and preferred, the preferred one within the other two."""
    low = opset_r.integer("min", default=1)
    high = opset_r.integer("max", required=True)
    preferred = opset_r.integer("preferred", default=high)
    if not low <= preferred <= high:
        raise opset_r.fail("preferred", f"{preferred} is outside [{low}, {high}]")
    return low, high, preferred


def _computed_as(dtypes_r: Reader) -> tuple[tuple[str, str], ...]:
    """`[dtypes.computed_as]`: each known dtype the target computes in another, sorted by source."""
    computed_r = dtypes_r.table("computed_as") or Reader({}, dtypes_r.file, "dtypes.computed_as.")
    computed = []
    for source in sorted(computed_r.data):
        if source not in KNOWN_DTYPES:
            raise computed_r.fail(source, "unknown dtype")
        computed.append((source, computed_r.choice(source, tuple(sorted(KNOWN_DTYPES)))))
    return tuple(computed)


def _precision_policy(precision_r: Reader) -> PrecisionPolicy:
    supported = tuple(Precision(p) for p in precision_r.strings("supported", PRECISIONS))
    if not supported:
        raise precision_r.fail("supported", "must list at least one precision")
    default = Precision(precision_r.choice("default", supported))
    refused = []
    for refused_r in precision_r.tables("refused"):
        refused_r.reject_unknown({"precision", "reason", "instead"})
        refused.append((Precision(refused_r.choice("precision", PRECISIONS)),
                        refused_r.text("reason", required=True),
                        Precision(refused_r.choice("instead", supported))))
    return PrecisionPolicy(supported=supported, default=default, refused=tuple(refused))


def _dla(dla_r: Reader | None, path: Path) -> Dla | None:
    if dla_r is None:
        return None
    dla_r.reject_unknown(_keys(Dla))
    dla_table_name = dla_r.text("table")
    return Dla(
        cores=dla_r.integer("cores", required=True),
        precisions=tuple(Precision(p) for p in dla_r.strings("precisions", PRECISIONS)),
        table=load_table(find_table(dla_table_name, path)) if dla_table_name else None,
        shape_policy=dla_r.choice("shape_policy", SHAPE_POLICIES, default="static"),
    )


def _backend_spec(backend_r: Reader) -> BackendSpec:
    return BackendSpec(
        kind=backend_r.choice("kind", tuple(BACKENDS)),
        version=backend_r.text("version", required=True),
        execution_provider=backend_r.text("execution_provider"),
        performance_hint=backend_r.choice("performance_hint", PERFORMANCE_HINTS, optional=True),
        optimization_level=backend_r.choice("optimization_level", OPTIMIZATION_LEVELS, optional=True),
        disabled_optimizers=backend_r.strings("disabled_optimizers"),
        **{name: backend_r.flag(name, default) for name, default in TRAIT_DEFAULTS.items()},
    )


def _device(device_r: Reader) -> Device:
    return Device(
        kind=device_r.choice("kind", DEVICE_KINDS),
        name=device_r.text("name", default=""),
        compute_capability=device_r.text("compute_capability"),
        memory_mb=device_r.integer("memory_mb"),
    )


def _memory(memory_r: Reader) -> Memory:
    return Memory(
        budget_mb=memory_r.integer("budget_mb"),
        workspace_mb=memory_r.integer("workspace_mb"),
        note=memory_r.text("note"),
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
