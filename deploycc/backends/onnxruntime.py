"""ONNX Runtime: the optimized model ORT itself writes (optimized_model_filepath), or the ORT
format for mobile and embedded runtimes, with the session options recorded and a placement
check that reads, from a profiled run, which execution provider ran every node.
"""

from __future__ import annotations

import ctypes
import json
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploycc import budget
from deploycc.backends.base import (
    Artifact,
    Backend,
    BackendError,
    BackendOptions,
    BackendRunners,
    BackendStages,
    BackendUnavailable,
    BuildRequest,
    Int8Recipe,
    Placement,
    QdqLayout,
    Quantizer,
    Runner,
    WeightQuantizer,
)
from deploycc.backends.ort_gpu import GPU_BUNDLE, write_gpu_bundle
from deploycc.backends.profiles import shape_profiles
from deploycc.device.bundle import BUNDLE_DIR
from deploycc.records.shapes import ShapeProfile
from deploycc.taxonomy import Failed, Precision

if TYPE_CHECKING:
    from deploycc.device.bundle import DeviceReference
    from deploycc.options import BuildOptions
    from deploycc.targets.schema import Target

LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}
DEFAULT_LEVEL = "extended"
# The level the artifact is loaded at, whatever level it was saved at: ORT's own default. A
# portable artifact (saved at "extended") still gets this machine's layout transforms (NCHWc)
# when it is loaded; loaded at "extended", MobileNetV3 ran 1.95x the time of the raw export.
LOAD_LEVEL = "all"


def session_options(level: str, threads: int = 0, optimized_path: Path | None = None,
                    ort_format: bool = False, external_data: str | None = None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4  # errors come back as exceptions
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
    options.intra_op_num_threads = threads
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
        if ort_format:
            options.add_session_config_entry("session.save_model_format", "ORT")
        elif external_data:
            options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                             external_data)
            options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                             "1024")
    return options


class OrtRunner(Runner):
    def __init__(self, path: Path, providers: list[str], threads: int = 0, level: str = "all",
                 disabled: Sequence[str] = ()) -> None:
        """`level` is what ORT applies at load: "all" (its default) everywhere, so a portable
        artifact still gets this machine's layout transforms; "disabled" to run ops as written.
        `disabled`: ORT's graph transformers left out (the target's disabled_optimizers)."""
        import onnxruntime as ort

        if any(provider != "CPUExecutionProvider" for provider in providers):
            budget.lift_ceiling()  # a GPU provider maps device memory the ceiling would count
        started = time.perf_counter()
        self.session = ort.InferenceSession(str(path), session_options(level, threads), providers=providers,
                                            disabled_optimizers=list(disabled) or None)
        self.load_seconds = time.perf_counter() - started
        self._outputs = [o.name for o in self.session.get_outputs()]

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.session.get_inputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            results = self.session.run(self._outputs, feeds)
        except Exception as error:  # ORT's own exception types: the engine failed on these inputs
            first = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
            raise BackendError(f"ONNX Runtime failed to run on these inputs: {first[:300]}",
                               stage=Failed.RUN) from None
        if all(isinstance(result, np.ndarray) for result in results):
            return dict(zip(self._outputs, results, strict=True))
        from deploycc.verify.runner import as_arrays

        return as_arrays(dict(zip(self._outputs, results, strict=True)))  # sequences and maps


@dataclass
class OrtOptions(BackendOptions):
    artifact_format: str = "onnx"  # "onnx" (optimized ONNX) or "ort" (ORT format): --format
    # the TensorRT provider's trt_profile_* shapes, one per dynamic input
    profiles: list[ShapeProfile] = field(default_factory=list)


def _own(request: BuildRequest) -> OrtOptions:
    options = request.backend_options
    return options if isinstance(options, OrtOptions) else OrtOptions()


FP16_MODEL = "model.fp16.onnx"


def _in_fp16(request: BuildRequest) -> tuple[BuildRequest, list[str]]:
    """The request for the model converted to fp16 by onnxconverter-common (inputs and outputs
    kept fp32; the layers the analysis keeps on the block list, with the ops ORT has no fp16
    kernel for), and what to say of it."""
    import dataclasses

    import onnx

    try:
        from onnxconverter_common import float16
    except ImportError:
        raise BackendUnavailable("--precision fp16 on ONNX Runtime needs onnxconverter-common",
                                 hint="pip install 'deploycc[fp16]'") from None
    proto = onnx.load(str(request.model))
    _name_nameless(proto.graph)  # the converter names its Casts after the node: two nameless ones collide
    # fp16's own limits: the converter's defaults clamp weights to 1e4 and flush below 1e-7
    with warnings.catch_warnings():  # each value below fp16's smallest subnormal, flushed as asked
        warnings.simplefilter("ignore", UserWarning)
        converted = float16.convert_float_to_float16(
            proto, min_positive_val=float(np.finfo(np.float16).smallest_subnormal),
            max_finite_val=float(np.finfo(np.float16).max), keep_io_types=True,
            node_block_list=list(request.fp32_layers) or None)
    _restore_fp32_weights(proto, converted, set(request.fp32_layers))
    path = request.outdir / FP16_MODEL
    large = converted.ByteSize() > (1 << 30) if hasattr(converted, "ByteSize") else False
    onnx.save(converted, str(path), save_as_external_data=large,
              location=FP16_MODEL + ".data" if large else None)
    notes = [f"converted to fp16 by onnxconverter-common, {len(request.fp32_layers)} layer(s) on its "
             "block list"
             if request.fp32_layers else "converted to fp16 by onnxconverter-common"]
    if not _has_half_arithmetic():
        notes.append("this CPU has no fp16 arithmetic (no AVX512-FP16, not ARM64): ONNX Runtime's CPU EP "
                     "runs most fp16 nodes between Casts it inserts, so fp16 halves the weights but is "
                     "not faster here; fp32 is the faster build on this machine")
    return dataclasses.replace(request, model=path), notes


def _name_nameless(graph: Any) -> None:
    """Name every nameless node of the main graph uniquely (the half analysis names them too, when
    it runs: `--no-fp16-analysis` left them nameless, and ORT refused the converted model for two
    Casts named alike)."""
    taken = {node.name for node in graph.node}
    for index, node in enumerate(graph.node):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)


def _restore_fp32_weights(original: Any, converted: Any, kept: set[str]) -> None:
    """Give the weights only kept layers read back their fp32 values: the converter writes every
    initializer in fp16 (clamped to its range) and casts it up for a blocked node, which would
    round the very layer the analysis keeps. The Cast it reads them through becomes a no-op."""
    readers: dict[str, set[str]] = {}
    for node in original.graph.node:
        for name in node.input:
            readers.setdefault(name, set()).add(node.name)
    weights = {tensor.name: tensor for tensor in original.graph.initializer}
    for tensor in converted.graph.initializer:
        source = weights.get(tensor.name)
        if source is not None and readers.get(tensor.name) and readers[tensor.name] <= kept:
            tensor.CopyFrom(source)


def _has_half_arithmetic() -> bool:
    """Whether this CPU computes in fp16 (ORT's MLAS has fp16 kernels on ARM64 and AVX512-FP16)."""
    import platform

    if platform.machine().lower() in ("arm64", "aarch64"):
        return True
    try:
        return "avx512_fp16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _has_external_data(model: Path) -> bool:
    return model.with_name(model.name + ".data").exists()


def _ort_value(array: np.ndarray) -> Any:
    import onnxruntime as ort

    from deploycc.backends.raw_values import elem_type, storage_bytes

    raw = storage_bytes(array)
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), elem_type(array))
    ctypes.memmove(value.data_ptr(), raw, len(raw))
    return value


def _ort_output(value: Any) -> Any:
    from deploycc.backends.raw_values import RAW_BITS, decode

    if not value.is_tensor():
        return value.numpy() if hasattr(value, "numpy") else value
    kind = value.element_type()
    if kind not in RAW_BITS:
        return value.numpy()
    shape = list(value.shape())
    count = int(np.prod(shape, dtype=np.int64))
    return decode(ctypes.string_at(value.data_ptr(), -(-count * RAW_BITS[kind] // 8)), shape, kind)


def run_conformance_case(model_bytes: bytes, feeds: dict[str, Any]) -> list[Any]:
    """One conformance case on ORT's defaults, as a user gets them (`deploycc probe`)."""
    import onnx_ir as ir
    import onnxruntime as ort

    from deploycc.backends.raw_values import RAW_BITS, is_exotic
    from deploycc.verify.runner import session as ort_session

    session = ort_session(model_bytes, optimize=True, threads=0)  # ORT's defaults, as a user gets them
    feeds = {name: _ort_value(value) if is_exotic(value) else value for name, value in feeds.items()}
    raw_names = {ir.DataType(kind).name.lower() for kind in RAW_BITS}  # ORT says tensor(bfloat16)
    if not any(o.type.startswith("tensor(") and o.type[7:-1] in raw_names for o in session.get_outputs()):
        return list(session.run(None, feeds))
    # an output numpy cannot hold: run on OrtValues and read its storage bits
    values = {name: value if not isinstance(value, np.ndarray) else ort.OrtValue.ortvalue_from_numpy(value)
              for name, value in feeds.items()}
    return [_ort_output(out) for out in session.run_with_ort_values(None, values)]


def _prepare(request: BuildRequest, options: BuildOptions) -> None:
    """The TensorRT provider's profiles (trt_profile_*_shapes) from the shape plan's ranges."""
    if request.target.backend.builds_profiles:
        profiles = shape_profiles(request.model, options, required=False)
        request.backend_options = replace(_own(request), profiles=profiles)


def _add_reference(artifact: Artifact, outdir: Path, reference: DeviceReference) -> None:
    """A GPU bundle's reference data, for the GPU host to judge its session by."""
    if artifact.kind != GPU_BUNDLE:
        return
    from deploycc.device.bundle import write_reference

    # TensorRT 10's bindings (the TensorRT provider's): int64 stays int64
    artifact.files += write_reference(outdir / BUNDLE_DIR, reference, "10", trtexec=False)


def _raw_runner(path: Path, target: Target, threads: int | None) -> Runner:
    return OrtRunner(path, [target.backend.execution_provider or "CPUExecutionProvider"],
                     threads=threads or 0)  # ORT's defaults on the raw model


class OnnxRuntimeBackend(Backend):
    kind = "onnxruntime"
    stages = BackendStages(int8=Int8Recipe(Quantizer.ORT_QDQ, QdqLayout.X86, dynamic=True), prepare=_prepare,
                           weight_only=WeightQuantizer.ORT_MATMUL_NBITS,
                           add_reference=_add_reference)
    runners = BackendRunners(raw=_raw_runner, conformance=run_conformance_case)

    def backend_options(self, options: BuildOptions) -> BackendOptions:
        return OrtOptions(artifact_format=options.artifact_format)

    def unavailable_reason(self) -> str | None:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return "onnxruntime is not installed (pip install onnxruntime)"
        return None

    def environment(self) -> dict[str, str]:
        import onnxruntime as ort

        return {"onnxruntime": ort.__version__, "providers": ",".join(ort.get_available_providers())}

    def _provider(self, request: BuildRequest) -> str:
        return request.target.backend.execution_provider or "CPUExecutionProvider"

    def build(self, request: BuildRequest) -> Artifact:
        import onnxruntime as ort

        # int8: the model is a Q/DQ model, int4 a MatMulNBits one (quantize/); fp16: converted here,
        # the kept layers in fp32
        if request.precision not in (Precision.FP32, Precision.INT8, Precision.INT4, Precision.INT8_WEIGHTS,
                                     Precision.FP16):
            raise BackendError(f"precision {request.precision} is not built for {request.target.name}: "
                               "ORT CPU runs fp32, fp16, int8 and weight-only (int4, int8) models",
                               hint="use --precision fp32 or fp16")
        notes: list[str] = []
        if request.precision == Precision.FP16:
            request, notes = _in_fp16(request)
        provider = self._provider(request)
        if provider not in ort.get_available_providers():  # onnxruntime-gpu's, on a host without it
            return write_gpu_bundle(request, _own(request).profiles, request.min_segment_nodes)
        level = request.target.backend.optimization_level or DEFAULT_LEVEL
        disabled = request.target.backend.disabled_optimizers
        artifact_format = _own(request).artifact_format
        ort_format = artifact_format == "ort"
        name = "model.ort" if ort_format else "model.ort.onnx"
        external = "model.ort.onnx.data" if _has_external_data(request.model) and not ort_format else None
        options = session_options(level, optimized_path=request.outdir / name, ort_format=ort_format,
                                  external_data=external)
        if request.fail_on_fallback and provider != "CPUExecutionProvider":
            options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        if provider != "CPUExecutionProvider":
            budget.lift_ceiling()
        try:
            session = ort.InferenceSession(str(request.model), options, providers=[provider],
                                           disabled_optimizers=list(disabled) or None)
        except Exception as error:
            raise BackendError(f"onnxruntime could not build the optimized model: "
                               f"{str(error).strip().splitlines()[0]}") from None
        files = [name] + ([external] if external and (request.outdir / external).exists() else [])
        placement = self.placement(request.outdir / name, provider)
        if request.fail_on_fallback and placement.fallback:
            raise BackendError(f"{len(placement.fallback)} node(s) fall back from {provider}: "
                               f"{', '.join(placement.fallback[:5])}",
                               hint="drop --fail-on-fallback to allow it")
        load = load_settings(provider, request.threads, disabled)
        return Artifact(kind="ort-format" if ort_format else "ort-optimized-onnx", files=files,
                        settings={"saved_optimization_level": level, "execution_provider": provider,
                                  "format": artifact_format, "load": load,
                                  "python": _load_lines(name, load, session)},
                        placement=placement, notes=notes)

    def placement(self, artifact: Path, provider: str) -> Placement:
        """Run once with profiling on and read which provider ran every node. The CPU provider
        is the only one of its session: every node is its, counted from the file (an audit's
        ort-cpu cell spent a session and a run of the model on finding that out)."""
        import onnxruntime as ort

        from deploycc.verify.inputs import generate_for_session

        if provider == "CPUExecutionProvider" and artifact.suffix == ".onnx":
            from deploycc import io
            from deploycc.graph.graphs import all_graphs

            nodes = sum(len(graph) for graph in all_graphs(io.peek(artifact).model.graph))
            return Placement(primary=provider, counts={provider: nodes},
                             method="the CPU provider alone: every node")

        with tempfile.TemporaryDirectory(prefix="deploycc-ort-profile-") as folder:
            options = session_options("disabled")
            options.enable_profiling = True
            options.profile_file_prefix = str(Path(folder) / "profile")
            session = ort.InferenceSession(str(artifact), options, providers=[provider])
            try:
                session.run(None, generate_for_session(session))
            except Exception as error:
                failure = str(error).splitlines()[0] if str(error) else type(error).__name__
                return Placement(primary=provider, method=f"profiling run failed: {failure}")
            events = json.loads(Path(session.end_profiling()).read_text())
        counts: dict[str, int] = {}
        fallback: list[str] = []
        seen: set[str] = set()
        for event in events:
            args = event.get("args", {})
            if event.get("cat") != "Node" or "provider" not in args:
                continue
            node = event["name"].removesuffix("_kernel_time")
            if node in seen:
                continue
            seen.add(node)
            counts[args["provider"]] = counts.get(args["provider"], 0) + 1
            if args["provider"] != provider:
                fallback.append(f"{node} ({args.get('op_name', '?')} on {args['provider']})")
        return Placement(primary=provider, counts=counts, fallback=fallback, method="onnxruntime profiling")

    def load(self, artifact: Artifact, outdir: Path, request: BuildRequest) -> Runner:
        """As the manifest says (settings["load"]); an artifact built before it said, at ORT's
        defaults with the request's threads."""
        load = artifact.settings.get("load") or load_settings(self._provider(request), request.threads)
        session = load["session_options"]
        level = next(name for name, value in LEVELS.items() if value == session["graph_optimization_level"])
        return OrtRunner(outdir / artifact.files[0], list(load["providers"]), level=level,
                         threads=request.threads or session.get("intra_op_num_threads", 0),
                         disabled=load.get("disabled_optimizers", ()))


def load_settings(provider: str, threads: int | None, disabled: Sequence[str] = ()) -> dict[str, Any]:
    """How the artifact is loaded (the manifest's settings["load"]): the provider, ORT's default
    optimization level, the threads when the build was given them, and the graph transformers
    left out (at load ORT would fuse again what the saved model was written without)."""
    session: dict[str, Any] = {"graph_optimization_level": LEVELS[LOAD_LEVEL]}
    if threads:
        session["intra_op_num_threads"] = threads
    return {"providers": [provider], "session_options": session,
            **({"disabled_optimizers": list(disabled)} if disabled else {})}


def _load_lines(name: str, load: dict[str, Any], session: Any) -> str:
    """The Python that loads the artifact as `load` says and runs it once."""
    from deploycc.backends.load_snippet import Port, feeds_lines, outputs_comment
    from deploycc.verify.inputs import ORT_TYPES

    def port(meta: Any) -> Port:
        dtype = ORT_TYPES.get(meta.type)
        dims = tuple(dim if isinstance(dim, int) else str(dim or '?') for dim in (meta.shape or []))
        return Port(meta.name, np.dtype(dtype).name if dtype is not None else meta.type, dims)

    options = load["session_options"]
    level = options["graph_optimization_level"]
    lines = ["import numpy as np", "import onnxruntime as ort", "", "options = ort.SessionOptions()",
             f"options.graph_optimization_level = ort.GraphOptimizationLevel.{level}"]
    if "intra_op_num_threads" in options:
        lines.append(f"options.intra_op_num_threads = {options['intra_op_num_threads']}")
    disabled = (f", disabled_optimizers={load['disabled_optimizers']!r}"
                if load.get("disabled_optimizers") else "")
    lines += [f"session = ort.InferenceSession({name!r}, options, providers={load['providers']!r}{disabled})",
              *feeds_lines([port(meta) for meta in session.get_inputs()]),
              "outputs = session.run(None, feeds)",
              *outputs_comment([port(meta) for meta in session.get_outputs()])]
    return "\n".join(lines)
