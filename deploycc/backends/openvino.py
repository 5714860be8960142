"""OpenVINO: the ONNX frontend (`Core.read_model`) -> IR (.xml + .bin, weights compressed to fp16
only when the precision asks for it), compiled on the target device with the target's performance hint
and a model cache directory, and `Core.query_model` for placement.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import TensorProto

from deploycc.backends.base import (
    Artifact,
    Backend,
    BackendError,
    BackendOptions,
    BackendRunners,
    BackendStages,
    BuildRequest,
    Int8Recipe,
    Placement,
    Quantizer,
    Runner,
    WeightQuantizer,
)
from deploycc.io.files import save_openvino_ir, trim_cache, user_cache_dir
from deploycc.taxonomy import WEIGHT_ONLY_BITS, Failed, Failure, Precision

if TYPE_CHECKING:
    from deploycc.options import BuildOptions
    from deploycc.targets.schema import Target

# int8: NNCF's model (quantize/), its float parts pinned to f32 as in an fp32 build; int4 and
# int8-weights: NNCF's weight-compressed IR, its activations in bf16 where the device computes bf16
# (weight_only_activations), else f32
INFERENCE_PRECISION = {Precision.FP32: "f32", Precision.FP16: "f16", Precision.BF16: "bf16",
                       Precision.INT8: "f32", Precision.INT4: "f32", Precision.INT8_WEIGHTS: "f32"}


def default_cache_dir() -> Path:
    """Compiled-blob cache outside the output directory: blobs are machine-specific."""
    return user_cache_dir("openvino")


def cache_limit_bytes() -> int:
    """How much the blob cache may hold, the oldest blobs dropped past it: 4 GiB, or
    DEPLOYCC_OPENVINO_CACHE_MB (0 keeps none)."""
    return int(os.environ.get("DEPLOYCC_OPENVINO_CACHE_MB", "4096")) << 20


@dataclass
class OpenVinoOptions(BackendOptions):
    cache_dir: Path | None = None  # the compiled-blob cache (CACHE_DIR); None: none


def _own(request: BuildRequest) -> OpenVinoOptions:
    options = request.backend_options
    return options if isinstance(options, OpenVinoOptions) else OpenVinoOptions()


# What the ONNX frontend says when a tensor's rank depends on a dynamic dim, as in a TorchScript
# export of `x.squeeze(0)` (an If on `Shape(x)[0] == 1` whose branches differ in rank).
_DYNAMIC_RANK = ("rank has to be known", "rank().is_static()", "Unsupported input type dynamic")


def _compile_error(core: Any, xml: Path, error: RuntimeError) -> BackendError:
    """The CPU plugin failing on a model its frontend read: with dynamic inputs it is a shape
    problem the user can fix with --batch/--shape (OpenVINO 2026.4 fails to compile Silero VAD's
    If branches while its chunk length is dynamic, and compiles them once it is fixed)."""
    detail = inference_problem(error)
    try:
        dynamic = any(port.get_partial_shape().is_dynamic for port in core.read_model(str(xml)).inputs)
    except Exception:
        dynamic = False
    if dynamic:
        return BackendError(f"OpenVINO cannot compile this graph while its dims are dynamic ({detail})",
                            hint="fix the dynamic dims: --batch N, or --shape NAME:DIMS per input",
                            stage=Failed.LOAD, category=Failure.DYNAMIC_SHAPE)
    return BackendError(f"OpenVINO cannot compile this graph: {detail}", stage=Failed.LOAD)


def _conversion_error(message: str) -> BackendError:
    text = message.strip()
    last = text.splitlines()[-1] if text else "no message"
    if any(sign in text for sign in _DYNAMIC_RANK):
        return BackendError(f"OpenVINO's ONNX frontend cannot type this graph while its dims are dynamic "
                            f"({last.lstrip('- ')}): a tensor's rank depends on an input dim",
                            hint="fix the dynamic dims with --batch N or --shape NAME:DIMS",
                            category=Failure.DYNAMIC_SHAPE)
    return BackendError(f"openvino conversion failed: {last}")


def compile_config(request: BuildRequest) -> dict[str, str]:
    hint = weight_only_activations(request.target.device.kind) if request.precision in WEIGHT_ONLY_BITS \
        else INFERENCE_PRECISION[request.precision]
    config = {"INFERENCE_PRECISION_HINT": hint}
    if request.target.backend.performance_hint:
        config["PERFORMANCE_HINT"] = request.target.backend.performance_hint
    cache_dir = _own(request).cache_dir
    if cache_dir is not None:
        config["CACHE_DIR"] = str(cache_dir)
    if request.threads:
        config["INFERENCE_NUM_THREADS"] = str(request.threads)
    return config


def _stable_names(model: Any, onnx_path: Path) -> None:
    """Rename the ops the frontend named from a process-wide counter (Reshape_13505), so the
    same model gives the same IR in any process; names that come from the ONNX graph stay."""
    from deploycc import io

    graph = io.load(onnx_path, check=False).model.graph
    kept = {n.name for n in graph} | {v.name for n in graph for v in n.outputs} | \
        {v.name for v in graph.inputs} | {v.name for v in graph.outputs} | set(graph.initializers)
    for index, op in enumerate(model.get_ordered_ops()):
        if op.get_friendly_name() not in kept:
            op.set_friendly_name(f"{op.get_type_name()}_{index}")


# The runtime attribute that keeps an op in its original precision when the model is compressed
# to fp16 or inferred in half (ov::disable_fp16_compression; its RTTI name was
# "disable_fp16_compression" until 2023 and is "precise" since): the key of each spelling is set.
KEEP_PRECISION_KEYS = ("precise_0", "disable_fp16_compression_0")


def keep_in_fp32(model: Any, onnx_path: Path, nodes: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Mark the ops the ONNX nodes became to stay in fp32 (in place): an op carries the node's
    name, or the name of one of its output tensors (the frontend names an op that feeds a graph
    output after the output). Returns the nodes matched and those no op matched."""
    from deploycc import io

    graph = io.load(onnx_path, check=False).model.graph
    wanted = set(nodes)
    by_output = {v.name: node.name for node in graph if node.name in wanted for v in node.outputs if v.name}
    matched: set[str] = set()
    for op in model.get_ops():
        name = op.get_friendly_name()
        node = name if name in wanted else next(
            (by_output[t] for port in op.outputs() for t in port.get_names() if t in by_output), None)
        if node is None:
            continue
        for key in KEEP_PRECISION_KEYS:
            op.get_rt_info()[key] = ""
        matched.add(node)
    return [n for n in nodes if n in matched], [n for n in nodes if n not in matched]


def _half_arithmetic(device: str, precision: Precision) -> list[str]:
    """A note where the device computes `precision` in another: the plugin picks by its units
    (the IR keeps the precision asked and the kept layers for a device that has it)."""
    computed = _computed_as(device, precision)
    if computed == precision:
        return []
    return [f"{device} here computes {precision} as {computed} (OpenVINO's plugin, by the units this "
            f"machine has); the IR is {precision} for a device that has them"]


_COMPUTED: dict[tuple[str, Precision], Precision] = {}
# OpenVINO's element type names, as a compiled model reports its INFERENCE_PRECISION_HINT
ELEMENT_PRECISION = {"f32": Precision.FP32, "f16": Precision.FP16, "bf16": Precision.BF16}


def _computed_as(device: str, precision: Precision) -> Precision:
    """What the plugin computes `precision` in on this machine's `device`: a one-MatMul model
    compiled with it as the hint, the hint read back (the CPU plugin gives bf16 for f16 where the
    CPU has no FP16 units, f32 where it has no bf16 ones). `precision` itself where it cannot tell."""
    key = (device, precision)
    if key not in _COMPUTED:
        import openvino as ov
        from openvino import opset13 as ops

        try:
            x = ops.parameter([1, 16], np.float32)
            model = ov.Model([ops.matmul(x, ops.constant(np.ones((16, 16), np.float32)), False, False)], [x])
            compiled = ov.Core().compile_model(model, device, {"INFERENCE_PRECISION_HINT":
                                                               INFERENCE_PRECISION[precision]})
            read = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
            _COMPUTED[key] = ELEMENT_PRECISION.get(read, precision)
        except Exception:  # a device without the property: the precision asked
            _COMPUTED[key] = precision
    return _COMPUTED[key]


def weight_only_activations(device: str) -> str:
    """A weight-compressed model's activations: bf16 where the device computes bf16, as OpenVINO
    compiles one by default (TinyLlama-1.1B's int8-weights IR decoded 9.3 tokens/s so against 5.8 at
    f32 on an AVX-512 BF16 CPU, its 16 greedy tokens the same), else f32. The engine is verified as
    compiled, so the budget still judges it."""
    return INFERENCE_PRECISION[Precision.BF16] if _computed_as(device, Precision.BF16) == Precision.BF16 \
        else INFERENCE_PRECISION[Precision.FP32]


def _target_computes_as(target: Target, precision: Precision) -> Precision:
    return _computed_as(target.device.kind, precision) if precision in (Precision.FP16, Precision.BF16) \
        else precision


def compile_model(model: Any, device: str, config: dict[str, str]) -> Any:
    """OpenVINO's compiled model from a file path, ONNX bytes or an ov.Model: the one place deploycc
    compiles (runners, the conformance probe)."""
    import openvino as ov

    core = ov.Core()
    if isinstance(model, bytes):
        model = core.read_model(model=model)
    compiled = core.compile_model(str(model) if isinstance(model, Path) else model, device, config)
    if "CACHE_DIR" in config:
        trim_cache(Path(config["CACHE_DIR"]), cache_limit_bytes())
    return compiled


class OpenVinoRunner(Runner):
    def __init__(self, xml: Path, device: str, config: dict[str, str]) -> None:
        """`xml` is an IR file, or an ONNX model that OpenVINO reads with its frontend."""
        import openvino as ov

        started = time.perf_counter()
        try:
            self.compiled = compile_model(Path(xml), device, config)
        except RuntimeError as error:
            raise _compile_error(ov.Core(), xml, error) from None
        self.load_seconds = time.perf_counter() - started
        self.request = self.compiled.create_infer_request()
        self._outputs = [port.get_any_name() for port in self.compiled.outputs]

    @property
    def input_names(self) -> list[str]:
        return [port.get_any_name() for port in self.compiled.inputs]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            results = self.request.infer(feeds)
        except RuntimeError as error:  # the plugin rejects these inputs (a kernel wider than the data)
            raise BackendError(f"OpenVINO failed to run on these inputs: {inference_problem(error)}",
                               stage=Failed.RUN) from None
        return {name: results[port].copy() for name, port in zip(self._outputs, self.compiled.outputs,
                                                                   strict=True)}


def inference_problem(error: BaseException) -> str:
    """The line of an OpenVINO exception that says what failed (it nests "Exception from ..." lines)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    boilerplate = ("Exception from", "While validating", "Check ")
    telling = [line for line in lines if not line.startswith(boilerplate)]
    return (telling or lines or [type(error).__name__])[0][:300]


def _openvino_type(kind: int) -> Any:
    import openvino as ov

    from deploycc.backends.raw_values import Refused

    name = OPENVINO_TYPE_NAMES.get(kind)
    if name is None:
        raise Refused(f"OpenVINO has no element type {TensorProto.DataType.Name(kind)}")
    return getattr(ov.Type, name)


def _openvino_output(tensor: Any) -> np.ndarray:
    import openvino as ov

    from deploycc.backends.raw_values import decode

    kind = {getattr(ov.Type, name): kind for kind, name in OPENVINO_TYPE_NAMES.items()}[tensor.element_type]
    raw = np.ascontiguousarray(tensor.data).view(np.uint8).tobytes()
    return decode(raw, list(tensor.shape), kind)


def run_conformance_case(model_bytes: bytes, feeds: dict[str, Any]) -> list[Any]:
    """One conformance case compiled on the CPU in f32 (`deploycc probe`)."""
    import openvino as ov

    from deploycc.backends.raw_values import elem_type, is_exotic, storage_bytes

    compiled = compile_model(model_bytes, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    # OpenVINO drops graph inputs nothing reads (a Shape folded to a constant): feed what it kept
    kept = {name for port in compiled.inputs for name in port.get_names()}
    tensors = {}
    for name, value in feeds.items():
        if name not in kept:
            continue
        if is_exotic(value):
            value = ov.Tensor(np.frombuffer(storage_bytes(value), dtype=np.uint8).copy(),
                              ov.Shape(list(value.shape)), _openvino_type(elem_type(value)))
        tensors[name] = value
    request = compiled.create_infer_request()
    results = request.infer(tensors)
    exotic = {getattr(ov.Type, name) for name in OPENVINO_TYPE_NAMES.values()}
    return [_openvino_output(request.get_output_tensor(index)) if port.element_type in exotic
            else results[port] for index, port in enumerate(compiled.outputs)]


def _prepare(request: BuildRequest, options: BuildOptions) -> None:
    if _own(request).cache_dir is None:  # a request made without the user's options (a segment's)
        request.backend_options = OpenVinoOptions(cache_dir=default_cache_dir())


def _int8_runner(model: Path, pinned: bool) -> Runner:
    """The int8 candidate compiled for latency on the CPU, in f32 (what an int8 build pins its
    float parts to: INFERENCE_PRECISION above) or, unpinned, in the CPU's default (bf16 where it
    has bf16 units)."""
    config = {"PERFORMANCE_HINT": "LATENCY"}
    if pinned:
        config["INFERENCE_PRECISION_HINT"] = INFERENCE_PRECISION[Precision.INT8]
    return OpenVinoRunner(model, "CPU", config)


def _raw_runner(path: Path, target: Target, threads: int | None) -> Runner:
    config = {"PERFORMANCE_HINT": target.backend.performance_hint or "LATENCY"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = str(threads)
    return OpenVinoRunner(path, target.device.kind, config)


class OpenVinoBackend(Backend):
    kind = "openvino"
    # int8: NNCF on the OpenVINO model, judged and timed by its int8 runner
    stages = BackendStages(int8=Int8Recipe(Quantizer.NNCF), prepare=_prepare, computes_as=_target_computes_as,
                           weight_only=WeightQuantizer.NNCF_COMPRESS)
    runners = BackendRunners(raw=_raw_runner, int8=_int8_runner, conformance=run_conformance_case)

    def backend_options(self, options: BuildOptions) -> BackendOptions:
        return OpenVinoOptions(cache_dir=default_cache_dir())

    def unavailable_reason(self) -> str | None:
        try:
            import openvino  # noqa: F401
        except ImportError:
            return "openvino is not installed (pip install openvino)"
        return None

    def environment(self) -> dict[str, str]:
        import openvino as ov

        core = ov.Core()
        facts = {"openvino": ov.get_version()}
        for device in core.available_devices:
            try:
                facts[f"device.{device}"] = str(core.get_property(device, "FULL_DEVICE_NAME"))
            except Exception:  # a device without that property still counts as present
                facts[f"device.{device}"] = "present"
        return facts

    def build(self, request: BuildRequest) -> Artifact:
        import openvino as ov

        if request.precision not in INFERENCE_PRECISION:
            raise BackendError(f"precision {request.precision} is not built for OpenVINO",
                               hint="use --precision fp32, fp16, bf16 or int8")
        try:
            # Core.read_model runs the same ONNX frontend as convert_model, without the
            # convert_model telemetry process that calls out to the internet on every conversion.
            model = ov.Core().read_model(str(request.model))
        except Exception as error:
            raise _conversion_error(str(error)) from None
        if request.model.suffix == ".onnx":  # an IR (NNCF's int8 model) keeps its names
            _stable_names(model, request.model)
        notes = []
        if request.fp32_layers and request.precision in (Precision.FP16, Precision.BF16):
            matched, unmatched = keep_in_fp32(model, request.model, request.fp32_layers)
            notes.append(f"{len(matched)} layer(s) kept in fp32 through the runtime's "
                         "disable_fp16_compression"
                         + (f"; no op found for {', '.join(unmatched)}" if unmatched else ""))
        xml = request.outdir / "model.xml"
        # The int8 IR arrives written under the artifact's names: it is the artifact as it is
        # (saving it again would write over the weights file read_model has just mapped).
        if request.model.resolve() != xml.resolve():
            # save_model compresses weights to fp16 by default; only do it when fp16 was asked for
            save_openvino_ir(model, xml, compress_to_fp16=request.precision == Precision.FP16)
        device = request.target.device.kind
        if request.precision in (Precision.FP16, Precision.BF16):
            notes += _half_arithmetic(device, request.precision)
        if request.precision in WEIGHT_ONLY_BITS:
            notes.append(f"activations in {weight_only_activations(device)}: OpenVINO's own choice for a "
                         f"weight-compressed model on this {device} (bf16 where it has bf16 units)")
        placement = self.placement(model, device)
        if placement.unsupported:
            # The CPU plugin refuses an If whose branches differ in rank while a dim is dynamic
            # (Silero VAD's fp16 and opset-15 variants); fixed dims are the user's way out.
            dynamic = any(port.get_partial_shape().is_dynamic for port in model.inputs)
            raise BackendError(f"{len(placement.unsupported)} op(s) not supported on {device}"
                               f"{' while dims are dynamic' if dynamic else ''}: "
                               f"{', '.join(placement.unsupported[:5])}",
                               hint="fix the dynamic dims: --batch N, or --shape NAME:DIMS per input"
                               if dynamic else None, category=Failure.DYNAMIC_SHAPE if dynamic else None)
        if request.fail_on_fallback and placement.fallback:
            raise BackendError(f"{len(placement.fallback)} op(s) fall back from {device}")
        # the model cache's folder is a path of this machine
        config = {k: v for k, v in compile_config(request).items() if k != "CACHE_DIR"}
        return Artifact(kind="openvino-ir", files=["model.xml", "model.bin"],
                        settings={"device": device, "compile": config,
                                  "compress_to_fp16": request.precision == Precision.FP16,
                                  "python": _load_lines(model, device, config)},
                        placement=placement, notes=notes)

    @staticmethod
    def placement(model: Any, device: str) -> Placement:
        import openvino as ov

        supported = ov.Core().query_model(model, device)
        counts: dict[str, int] = {}
        for assigned in supported.values():
            counts[assigned] = counts.get(assigned, 0) + 1
        names = [op.get_friendly_name() for op in model.get_ops()]
        unsupported = [n for n in names if n not in supported]
        fallback = [f"{n} ({supported[n]})" for n in names if n in supported and supported[n] != device]
        return Placement(primary=device, counts=counts, fallback=fallback, unsupported=unsupported,
                         method="openvino Core.query_model")

    def load(self, artifact: Artifact, outdir: Path, request: BuildRequest) -> Runner:
        """With the compile settings the manifest records (an artifact built before it did: the
        request's), this machine's blob cache, and the threads `bench` or `run` was given."""
        config = {**artifact.settings.get("compile", compile_config(request))}
        cache_dir = _own(request).cache_dir
        if cache_dir is not None:
            config["CACHE_DIR"] = str(cache_dir)
        if request.threads:
            config["INFERENCE_NUM_THREADS"] = str(request.threads)
        device = artifact.settings.get("device", request.target.device.kind)
        return OpenVinoRunner(outdir / artifact.files[0], device, config)


def _load_lines(model: Any, device: str, config: dict[str, str]) -> str:
    """The Python that compiles the IR as the manifest says and runs it once."""
    from deploycc.backends.load_snippet import Port, feeds_lines, outputs_comment

    def port(node: Any) -> Port:
        shape = node.get_partial_shape()
        dims = tuple(dim.get_length() if dim.is_static else "?" for dim in shape) \
            if shape.rank.is_static else ("...",)
        try:
            dtype = node.get_element_type().to_dtype().name
        except (RuntimeError, TypeError):  # a type numpy has no dtype for (bf16, u4): OpenVINO's name
            dtype = node.get_element_type().get_type_name()
        return Port(node.get_any_name(), dtype, dims)

    return "\n".join(["import numpy as np", "import openvino as ov", "",
                      f"compiled = ov.Core().compile_model('model.xml', {device!r}, {config!r})",
                      *feeds_lines([port(node) for node in model.inputs]),
                      "outputs = compiled(feeds)  # by output: outputs[compiled.output(name)]",
                      *outputs_comment([port(node) for node in model.outputs])])


# ONNX element types OpenVINO's Python bindings take only as raw storage bits, by OpenVINO's name
OPENVINO_TYPE_NAMES: dict[int, str] = {
    TensorProto.BFLOAT16: "bf16", TensorProto.FLOAT8E4M3FN: "f8e4m3", TensorProto.FLOAT8E5M2: "f8e5m2",
    TensorProto.FLOAT8E8M0: "f8e8m0", TensorProto.INT4: "i4", TensorProto.UINT4: "u4",
    TensorProto.FLOAT4E2M1: "f4e2m1"}
