"""Building and running a TensorRT engine with the real TensorRT Python API.

Written against TensorRT 8.2 (JetPack 4.6, bindings API) through 10.x (named I/O tensors,
networks always explicit-batch). It needs a GPU and the `tensorrt` + `cuda-python` packages
(`pip install 'deploycc[tensorrt]'` on the device); its tests skip elsewhere.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.backends.base import BackendError, BuildRequest, Placement, Runner
from deploycc.backends.tensorrt import fingerprint
from deploycc.backends.tensorrt.options import implicit_int8, own, workspace_mb
from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    import numpy as np


def _logger() -> Any:
    import tensorrt as trt

    return trt.Logger(trt.Logger.WARNING)


def _major(trt: Any) -> int:
    return int(trt.__version__.split(".")[0])


def _network(builder: Any, trt: Any) -> Any:
    if _major(trt) >= 10:
        return builder.create_network(0)  # explicit batch is the only mode
    return builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))


def _parse(network: Any, onnx_path: Path, logger: Any, trt: Any) -> Any:
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):  # follows external data beside the model
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        first = errors[0] if errors else "no message"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise BackendError(f"TensorRT's ONNX parser refused the model: {first}{more}")
    return parser


def _configure(builder: Any, network: Any, request: BuildRequest, trt: Any) -> tuple[Any, Any]:
    config = builder.create_builder_config()
    options = own(request)
    workspace = workspace_mb(request)
    if workspace:
        if hasattr(config, "set_memory_pool_limit"):
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace << 20)
        else:  # TensorRT < 8.4
            config.max_workspace_size = workspace << 20
    if request.precision in (Precision.FP16, Precision.INT8):
        config.set_flag(trt.BuilderFlag.FP16)
    calibrator = None
    if request.precision == Precision.INT8:
        # A Q/DQ model is quantized explicitly; the DLA's implicit quantization reads the
        # calibration cache deploycc computed (the same calibrator as the board's runner).
        config.set_flag(trt.BuilderFlag.INT8)
        if implicit_int8(request) and request.calibration_cache is not None:
            from deploycc.device.run_on_device import cache_calibrator

            calibrator = cache_calibrator(trt, request.calibration_cache.read_bytes())
            config.int8_calibrator = calibrator
    if options.dla_core is not None:
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = options.dla_core
        if options.gpu_fallback:
            config.set_flag(trt.BuilderFlag.GPU_FALLBACK)
    dynamic = {network.get_input(i).name: network.get_input(i).shape for i in range(network.num_inputs)
               if any(d < 0 for d in network.get_input(i).shape)}
    if dynamic:
        given = {p.input: p for p in options.profiles}
        missing = sorted(set(dynamic) - set(given))
        if missing:
            raise BackendError(f"dynamic inputs need an optimization profile: {', '.join(missing)}",
                               hint="give --dynamic-batch MIN:OPT:MAX or --shape-range NAME:MIN:OPT:MAX")
        profile = builder.create_optimization_profile()
        for name in dynamic:
            p = given[name]
            profile.set_shape(name, p.min, p.opt, p.max)
        config.add_optimization_profile(profile)
    cache = None
    if options.timing_cache is not None:
        blob = options.timing_cache.read_bytes() if options.timing_cache.exists() else b""
        cache = config.create_timing_cache(blob)
        config.set_timing_cache(cache, ignore_mismatch=False)
    return config, cache


def layer_placement(network: Any, config: Any, request: BuildRequest, trt: Any) -> Placement:
    if own(request).dla_core is None:
        return Placement(primary="GPU", counts={"GPU": network.num_layers}, method="no DLA requested")
    counts = {"DLA": 0, "GPU": 0}
    fallback = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if config.can_run_on_DLA(layer):
            counts["DLA"] += 1
        else:
            counts["GPU"] += 1
            fallback.append(f"{layer.name} ({layer.type})")
    return Placement(primary="DLA", counts=counts, fallback=fallback, method="IBuilderConfig.can_run_on_DLA")


def build_plan(request: BuildRequest, onnx_path: Path, plan_path: Path) -> tuple[Placement, dict[str, Any]]:
    """Parse, configure and build; write the plan and its fingerprint beside it."""
    import tensorrt as trt

    logger = _logger()
    builder = trt.Builder(logger)
    network = _network(builder, trt)
    _parser = _parse(network, onnx_path, logger, trt)  # the parser must outlive the build
    config, cache = _configure(builder, network, request, trt)
    kept: dict[str, Any] = {}
    if request.fp32_layers and request.precision == Precision.FP16:
        # the half-precision analysis' layers, pinned as the board's runner pins them
        from deploycc.device.run_on_device import obey_precision, pin_fp32

        pinned, unmatched = pin_fp32(network, trt, request.fp32_layers)
        kept = {"fp32_layers": {"asked": list(request.fp32_layers), "pinned": pinned, "unmatched": unmatched,
                                "obeyed": obey_precision(config, trt)}}
    placement = layer_placement(network, config, request, trt)
    options = own(request)
    if options.dla_core is not None and placement.fallback and not options.gpu_fallback:
        raise BackendError(f"{len(placement.fallback)} layer(s) cannot run on DLA and GPU fallback is off: "
                           f"{', '.join(placement.fallback[:5])}", hint="allow it with --gpu-fallback")
    started = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise BackendError("TensorRT failed to build the engine (see the TensorRT log above)")
    plan_path.write_bytes(bytes(serialized))
    stamp = fingerprint.current()
    plan_path.with_name(plan_path.name + ".json").write_text(json.dumps(stamp, indent=2) + "\n")
    if cache is not None and options.timing_cache is not None:
        options.timing_cache.write_bytes(bytes(config.get_timing_cache().serialize()))
    return placement, {"build_seconds": round(time.perf_counter() - started, 3), "fingerprint": stamp, **kept}


class TensorRTRunner(Runner):
    """Runs a plan with device buffers from cuda-python; refuses a plan from another machine."""

    def __init__(self, plan_path: Path) -> None:
        import tensorrt as trt
        from cuda import cudart

        stored_path = plan_path.with_name(plan_path.name + ".json")
        if stored_path.exists():
            problem = fingerprint.mismatch(json.loads(stored_path.read_text()), fingerprint.current())
            if problem:
                raise BackendError(f"{plan_path}: {problem}")
        started = time.perf_counter()
        self._trt, self._cudart = trt, cudart
        self.engine = trt.Runtime(_logger()).deserialize_cuda_engine(plan_path.read_bytes())
        if self.engine is None:
            raise BackendError(f"{plan_path}: TensorRT could not deserialize the plan")
        self.context = self.engine.create_execution_context()
        self.load_seconds = time.perf_counter() - started
        self._named = hasattr(self.engine, "num_io_tensors")  # TensorRT >= 8.5
        _, self.stream = cudart.cudaStreamCreate()
        self._buffers: list[int] = []

    def _io(self) -> list[tuple[str, bool]]:
        trt = self._trt
        if self._named:
            return [(name, self.engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT)
                    for name in (self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors))]
        return [(self.engine.get_binding_name(i), self.engine.binding_is_input(i))
                for i in range(self.engine.num_bindings)]

    @property
    def input_names(self) -> list[str]:
        return [name for name, is_input in self._io() if is_input]

    def _malloc(self, nbytes: int) -> int:
        error, pointer = self._cudart.cudaMalloc(max(nbytes, 1))
        if int(error) != 0:
            raise BackendError(f"cudaMalloc({nbytes}) failed: {error}")
        self._buffers.append(pointer)
        return pointer

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import numpy as np

        trt, cudart = self._trt, self._cudart
        to_device, to_host = (cudart.cudaMemcpyKind.cudaMemcpyHostToDevice,
                              cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost)
        addresses: dict[str, int] = {}
        for name, is_input in self._io():
            if not is_input:
                continue
            array = np.ascontiguousarray(feeds[name])
            pointer = self._malloc(array.nbytes)
            cudart.cudaMemcpy(pointer, array.ctypes.data, array.nbytes, to_device)
            addresses[name] = pointer
            if self._named:
                self.context.set_input_shape(name, array.shape)
                self.context.set_tensor_address(name, pointer)
            else:
                self.context.set_binding_shape(self.engine.get_binding_index(name), array.shape)
        outputs: dict[str, np.ndarray] = {}
        for name, is_input in self._io():
            if is_input:
                continue
            if self._named:
                shape = tuple(self.context.get_tensor_shape(name))
                dtype = trt.nptype(self.engine.get_tensor_dtype(name))
            else:
                index = self.engine.get_binding_index(name)
                shape = tuple(self.context.get_binding_shape(index))
                dtype = trt.nptype(self.engine.get_binding_dtype(index))
            outputs[name] = np.empty(shape, dtype=dtype)
            addresses[name] = self._malloc(outputs[name].nbytes)
            if self._named:
                self.context.set_tensor_address(name, addresses[name])
        if self._named:
            self.context.execute_async_v3(self.stream)
        else:
            self.context.execute_async_v2([addresses[name] for name, _ in self._io()], self.stream)
        cudart.cudaStreamSynchronize(self.stream)
        for name, array in outputs.items():
            cudart.cudaMemcpy(array.ctypes.data, addresses[name], array.nbytes, to_host)
        for pointer in self._buffers:
            cudart.cudaFree(pointer)
        self._buffers.clear()
        return outputs

    def close(self) -> None:
        self._cudart.cudaStreamDestroy(self.stream)
