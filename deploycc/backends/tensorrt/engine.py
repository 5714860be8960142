"""Building and running a TensorRT engine with the real TensorRT Python API.

Written against TensorRT 8.2 (JetPack 4.6, bindings API) through 10.x (named I/O tensors,
networks always explicit-batch). It needs a GPU and the `tensorrt` + `cuda-python` packages
(`pip install 'deploycc[tensorrt]'` on the device); its tests skip elsewhere. The builder's
configuration is the board's runner's (`configure_builder` in deploycc/device/run_on_device.py),
given the request as the bundle.json settings it would write: one source, so an engine built here
and one built from the bundle on the board get the same flags.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.backends.base import BackendError, BuildRequest, Placement, Runner
from deploycc.backends.tensorrt import bundle, fingerprint
from deploycc.backends.tensorrt.options import implicit_int8, own
from deploycc.device.run_on_device import (
    BuildSettingsError,
    configure_builder,
    network_flags,
    timing_cache_bytes,
)

if TYPE_CHECKING:
    import numpy as np


def _logger() -> Any:
    import tensorrt as trt

    return trt.Logger(trt.Logger.WARNING)


def _parse(network: Any, onnx_path: Path, logger: Any, trt: Any) -> Any:
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):  # follows external data beside the model
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        first = errors[0] if errors else "no message"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise BackendError(f"TensorRT's ONNX parser refused the model: {first}{more}")
    return parser


def _configure(builder: Any, network: Any, request: BuildRequest,
               trt: Any) -> tuple[Any, dict[str, Any] | None]:
    """The builder configuration the board's runner gives this request's bundle: the request as its
    bundle.json settings, through the runner's configure_builder (the one source of both). Returns
    the config and what was done with the kept fp32 layers (None: none asked)."""
    options = own(request)
    calibration = None
    if implicit_int8(request) and request.calibration_cache is not None:
        calibration = request.calibration_cache.read_bytes()  # the DLA reads the scales deploycc computed
    timing = None
    if options.timing_cache is not None:
        timing = options.timing_cache.read_bytes() if options.timing_cache.exists() else b""
    try:
        return configure_builder(trt, builder, network, bundle.settings(request), calibration, timing)
    except BuildSettingsError as error:
        raise BackendError(str(error), hint=error.hint) from error


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
    network = builder.create_network(network_flags(trt))
    _parser = _parse(network, onnx_path, logger, trt)  # the parser must outlive the build
    config, fp32_layers = _configure(builder, network, request, trt)
    kept = {"fp32_layers": fp32_layers} if fp32_layers is not None else {}
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
    if options.timing_cache is not None:
        filled = timing_cache_bytes(config)
        if filled:
            options.timing_cache.write_bytes(filled)
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
