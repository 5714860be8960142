"""The shape of a deployment target, as frozen dataclasses validated from TOML.

A target file (`targets/<name>.toml`) is data only. It names a backend, a device, the opset
range, an op support table (shipped in `targets/tables/`, optionally overridden inline), the
dtypes the target cannot carry, the shape policy, precisions, memory budget and DLA support.
`targets/loader.py` reads the files into these records; every error names the file and the
dotted key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from deploycc.taxonomy import BOARD_ENGINE, GPU_ENGINE, LegalizeMode, Precision

# The backends a target file may name: kind -> the class that builds for it, as "module:Class"
# (backends/registry.py imports it when first asked for). This is the one table of kinds: a new
# backend is one module implementing backends.base.Backend and one line here.
BACKENDS: dict[str, str] = {
    "onnxruntime": "deploycc.backends.onnxruntime:OnnxRuntimeBackend",
    "openvino": "deploycc.backends.openvino:OpenVinoBackend",
    "tensorrt": "deploycc.backends.tensorrt:TensorRTBackend",
}
DEVICE_KINDS = ("CPU", "GPU", "DLA")
SHAPE_POLICIES = ("static", "dynamic")
PERFORMANCE_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
# What the target does with nodes no rule makes legal: refuse the model (full), leave them for
# the runtime to fall back on (partial, ONNX Runtime's way), or run them on the host (partition).
LEGALIZE_MODES = tuple(LegalizeMode)
# "extended" keeps the saved model portable across CPUs; "all" adds layout transforms (NCHWc)
# tied to the building machine's instruction set.
OPTIMIZATION_LEVELS = ("disabled", "basic", "extended", "all")
PRECISIONS = tuple(p.value for p in Precision)
OP_STATUSES = ("supported", "unsupported", "uncertain")
DTYPE_MODES = ("primary", "constraints", "none")
OPEN_RANGES = ("latest", "next_schema_version")


@dataclass(frozen=True)
class PredicateRef:
    """A named check from the fixed predicate registry, with its arguments from the data."""

    name: str
    args: tuple[tuple[str, Any], ...] = ()
    # The backend converts and runs such a node but computes something else (found by probe),
    # as opposed to refusing it: reported with category "wrong_result".
    wrong_result: bool = False

    def arg(self, key: str, default: Any = None) -> Any:
        return dict(self.args).get(key, default)

    def describe(self) -> str:
        if not self.args:
            return self.name
        inner = ", ".join(f"{k}={v}" for k, v in self.args)
        return f"{self.name}({inner})"


@dataclass(frozen=True)
class OpSupport:
    """One row of an op table: an op (in a domain) over an opset range, and what it accepts."""

    op: str
    domain: str = ""
    status: str = "supported"
    since: int | None = None
    until: int | None = None
    # dtype_mode "primary": dtypes allowed for the op's main type constraint (input 0's).
    dtypes: tuple[str, ...] | None = None
    # dtype_mode "constraints": allowed dtypes per ONNX type-constraint name (T, T1, ...).
    type_constraints: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    restrictions: tuple[str, ...] = ()
    predicates: tuple[PredicateRef, ...] = ()
    note: str | None = None

    def covers(self, version: int) -> bool:
        low = self.since if self.since is not None else 0
        high = self.until if self.until is not None else 10**6
        return low <= version <= high


@dataclass(frozen=True)
class Provenance:
    repo: str | None = None
    path: str | None = None
    commit: str | None = None
    tag_or_branch: str | None = None
    url: str | None = None
    retrieved: str | None = None
    provenance_note: str | None = None


@dataclass(frozen=True)
class OpTable:
    name: str
    product: str
    product_version: str
    dtype_mode: str
    function_expansion: bool
    source: Provenance
    entries: tuple[OpSupport, ...]
    type_notes: tuple[str, ...] = ()
    # How an entry without `until` is read: "latest" covers every later op version;
    # "next_schema_version" covers op versions up to the next ONNX change of the op.
    open_range: str = "latest"
    general_restrictions: tuple[str, ...] = ()
    # The newest model opset at which the runtime's own function expansion is known to work (ORT
    # 1.32 expands Swish-24 in a model of opset 24, not 25; OpenVINO 2026.4 has no SwiGLU-28);
    # deploycc leaves function ops to the runtime up to it and expands them above. None: always.
    function_expansion_max_opset: int | None = None

    def lookup(self, domain: str, op: str) -> tuple[OpSupport, ...]:
        return self._index().get((domain, op), ())

    def _index(self) -> dict[tuple[str, str], tuple[OpSupport, ...]]:
        cached = self.__dict__.get("_index_cache")
        if cached is None:
            grouped: dict[tuple[str, str], list[OpSupport]] = {}
            for entry in self.entries:
                grouped.setdefault((entry.domain, entry.op), []).append(entry)
            cached = {key: tuple(rows) for key, rows in grouped.items()}
            object.__setattr__(self, "_index_cache", cached)
        return cached

    def count_supported(self) -> int:
        return len({(e.domain, e.op) for e in self.entries if e.status == "supported"})


@dataclass(frozen=True)
class BackendSpec:
    kind: str
    version: str
    execution_provider: str | None = None
    performance_hint: str | None = None  # OpenVINO: LATENCY / THROUGHPUT / CUMULATIVE_THROUGHPUT
    optimization_level: str | None = None  # ONNX Runtime graph optimization level for the artifact
    # ONNX Runtime's graph transformers the artifact is saved and loaded without (measured slower
    # on the target; written in the manifest's load settings and its "how to load" lines)
    disabled_optimizers: tuple[str, ...] = ()
    # The engine's traits, which the passes, the shape policy and the audit read from the target
    # (never from the backend); each target file states those that differ from these defaults.
    # Whether the engine's importer takes initializers declared inside an If/Loop body (tidy lifts
    # a branch's Constant nodes into them only then).
    subgraph_initializers: bool = True
    # Whether the runtime fuses activations written out in elementwise ops (x * clip(x + 3, 0, 6) / 6)
    # into one kernel itself. Where it does, tidy leaves such a chain in the form it recognizes;
    # where not (ONNX Runtime), tidy writes it in the fewest kernels the runtime has.
    fuses_written_out_activations: bool = False
    # Whether MatMuls that read one input with weights of their own (attention's Q, K and V
    # projections) run faster merged into one MatMul and a Split; tidy merges them only then.
    merged_projections_pay: bool = True
    # Whether the engine is built on the device itself (TensorRT: a bundle here), so its build and
    # bench stages need that hardware (the audit routes them to it) and probing runs there.
    builds_on_device: bool = False
    # Whether an engine is built for shapes known at build time: fixed ones, or a min/opt/max
    # profile per dynamic input. A tensor sized by the data cannot then cross a segment cut, and
    # the audit fixes the axes before it builds.
    fixed_shape_engines: bool = False
    # Whether engines are built for min/opt/max profiles, so the shape policy's "profile" dims get
    # one (TensorRT; ONNX Runtime's TensorRT provider, trt_profile_*_shapes).
    builds_profiles: bool = False

    @property
    def engine_on_device(self) -> str | None:
        """The runner engine (taxonomy.RUNNER_ENGINES) that builds, verifies and times this target's
        engine on its hardware, where that is not here: the audit's Ray executor sends such cells to
        a node offering the target (an engine built on the board; ONNX Runtime's GPU providers, on a
        GPU host). None: built and judged where deploycc runs."""
        if self.builds_on_device:
            return BOARD_ENGINE
        provider = self.execution_provider or "CPUExecutionProvider"
        return GPU_ENGINE if provider != "CPUExecutionProvider" else None


@dataclass(frozen=True)
class Device:
    kind: str
    name: str
    compute_capability: str | None = None
    memory_mb: int | None = None


@dataclass(frozen=True)
class OpsetRange:
    min: int
    max: int
    preferred: int
    statement: str | None = None

    def contains(self, version: int) -> bool:
        return self.min <= version <= self.max


@dataclass(frozen=True)
class DtypePolicy:
    # dtypes no tensor may have on this target (e.g. float64 on TensorRT)
    unsupported: tuple[str, ...] = ()
    # dtypes the backend computes as another: TensorRT 8.x int64 -> int32 (values must fit);
    # ORT float16 -> float32 where an op has no float16 kernel (it inserts Casts)
    computed_as: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()

    def computed_as_dtype(self, dtype: str) -> str:
        return dict(self.computed_as).get(dtype, dtype)


@dataclass(frozen=True)
class ShapePolicy:
    policy: str
    note: str | None = None
    # What `build` makes of a dim the model leaves dynamic when the user says nothing of it
    # (--batch, --dynamic-batch, --shape, --shape-range decide instead). The batch: "fixed" at
    # batch_size, a "profile" batch_profile = (MIN, OPT, MAX), or "dynamic" (kept as it is).
    batch: str = "dynamic"
    batch_size: int = 1
    batch_profile: tuple[int, int, int] | None = None
    # Every other dynamic dim (height, width, sequence, samples): a "profile" around its typical
    # size, "fixed" at it, or "dynamic" (kept; drawn at it for verification and bench).
    dims: str = "dynamic"


@dataclass(frozen=True)
class ExportPolicy:
    """How the PyTorch front end exports for this target: torch.onnx's exporters in the order tried
    (the second only when the first fails or its graph does not legalize and verify), and the
    opset ceiling, which is the highest opset the target's parser reads (`opset.max`) unless set
    lower here."""

    exporters: tuple[str, ...] = ("dynamo", "torchscript")
    opset: int | None = None
    note: str | None = None


@dataclass(frozen=True)
class PrecisionPolicy:
    supported: tuple[Precision, ...]
    default: Precision
    # Why the target has no such precision, and what to use instead: (precision, reason, instead)
    refused: tuple[tuple[Precision, str, Precision], ...] = ()

    def refusal(self, precision: str) -> tuple[str, Precision] | None:
        """(reason, the precision to use instead) for a precision the target declares it lacks."""
        return next(((why, instead) for name, why, instead in self.refused if name == precision), None)


@dataclass(frozen=True)
class Memory:
    budget_mb: int | None = None
    workspace_mb: int | None = None
    note: str | None = None


@dataclass(frozen=True)
class Dla:
    cores: int
    precisions: tuple[Precision, ...]
    table: OpTable | None = None
    shape_policy: str = "static"


@dataclass(frozen=True)
class JetPack:
    """The JetPack release a Jetson target is resolved at, with the facts the map gives."""

    release: str
    available: tuple[str, ...]
    facts: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    aliases: tuple[str, ...]
    backend: BackendSpec
    device: Device
    opset: OpsetRange
    ops: OpTable
    dtypes: DtypePolicy
    shapes: ShapePolicy
    precision: PrecisionPolicy
    memory: Memory
    dla: Dla | None
    jetpack: JetPack | None
    source_file: str
    provenance: tuple[tuple[str, str], ...] = field(default=())
    mode: LegalizeMode = LegalizeMode.FULL  # the default of `legalize --mode` and `build`
    export: ExportPolicy = ExportPolicy()  # the PyTorch front end's choices for this target
    # ONNX Runtime with a GPU provider: the targets of the providers ORT places a node on when the
    # primary one has no kernel for it, in order (ort-trt: ort-cuda, ort-cpu); `check` predicts
    # each node's provider from their tables
    fallback: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", LegalizeMode(self.mode))  # a TOML file's string

    def to_dict(self, with_ops: bool = False) -> dict[str, Any]:
        data = asdict(self)
        data["ops"] = _table_summary(self.ops, with_ops)
        if self.dla is not None and self.dla.table is not None:
            data["dla"]["table"] = _table_summary(self.dla.table, with_ops)
        data["spec_hash"] = self.spec_hash
        return _jsonable(data)

    @property
    def spec_hash(self) -> str:
        """sha256 of the fully resolved target, op tables included: the cache key part."""
        cached = self.__dict__.get("_spec_hash")
        if cached is None:
            data = _jsonable(asdict(self))
            data.pop("source_file", None)
            blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
            cached = hashlib.sha256(blob).hexdigest()
            object.__setattr__(self, "_spec_hash", cached)
        return cached


def _table_summary(table: OpTable, with_ops: bool) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "name": table.name,
        "product": table.product,
        "product_version": table.product_version,
        "supported_ops": table.count_supported(),
        "entries": len(table.entries),
        "source": asdict(table.source),
    }
    if with_ops:
        summary["op"] = [asdict(e) for e in table.entries]
    return summary


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
