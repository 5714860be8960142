"""TensorRT's builder configuration has one source, run_on_device.configure_builder, used by the
host's build (backends/tensorrt/engine.py) and the board's runner. TensorRT cannot be installed
here, so both entry points are driven with a recording stand-in for the few TensorRT classes a build
touches: for the same settings, the same flags, pools, profiles, calibrator and pinned layers must
come out of the host's build, `deploycc build --engine-only` on the bundle, and the runner the
bundle carries. The stand-in lives in this test only: nothing else should call a fake TensorRT."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from deploycc.backends.base import BackendError, BuildRequest
from deploycc.backends.tensorrt import TensorRTBackend, bundle, engine, fingerprint
from deploycc.backends.tensorrt.options import TensorRTOptions
from deploycc.device import bundle as device_bundle
from deploycc.device import run_on_device
from deploycc.records.shapes import ShapeProfile
from deploycc.targets import registry
from deploycc.taxonomy import Precision

KEPT = "wide_matmul"
TIMING = ("create_timing_cache", "set_timing_cache")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2])


class _Recorded:
    """Writes every attribute set on it into the build's log, as (who, attribute, value)."""

    def __init__(self, log: list[tuple[Any, ...]], who: str) -> None:
        object.__setattr__(self, "_log", log)
        object.__setattr__(self, "_who", who)

    def __setattr__(self, name: str, value: Any) -> None:
        shown = ("calibrator", value.read_calibration_cache()) if name == "int8_calibrator" else value
        self._log.append((self._who, name, shown))
        object.__setattr__(self, name, value)


class _Cache:
    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def serialize(self) -> bytes:
        return self.blob + b"+timed"


class _Config(_Recorded):
    """IBuilderConfig before TensorRT 8.4: the workspace is max_workspace_size."""

    def set_flag(self, flag: str) -> None:
        self._log.append(("config", "set_flag", flag))

    def add_optimization_profile(self, profile: Any) -> None:
        self._log.append(("config", "add_optimization_profile", tuple(profile.shapes)))

    def create_timing_cache(self, blob: bytes) -> _Cache:
        self._log.append(("config", "create_timing_cache", bytes(blob)))
        return _Cache(bytes(blob))

    def set_timing_cache(self, cache: _Cache, ignore_mismatch: bool) -> bool:
        self._log.append(("config", "set_timing_cache", cache.blob, ignore_mismatch))
        object.__setattr__(self, "_cache", cache)
        return True

    def get_timing_cache(self) -> _Cache | None:
        return getattr(self, "_cache", None)

    def can_run_on_DLA(self, layer: Any) -> bool:
        return True


class _PoolConfig(_Config):
    """IBuilderConfig from 8.4: memory pools."""

    def set_memory_pool_limit(self, pool: str, size: int) -> None:
        self._log.append(("config", "set_memory_pool_limit", pool, size))


class _Profile:
    def __init__(self) -> None:
        self.shapes: list[tuple[str, list[int], list[int], list[int]]] = []

    def set_shape(self, name: str, low: Any, typical: Any, high: Any) -> None:
        self.shapes.append((name, list(low), list(typical), list(high)))


class _Tensor:
    def __init__(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> None:
        self.name, self.shape, self.dtype = name, shape, dtype


class _Layer(_Recorded):
    def __init__(self, log: list[tuple[Any, ...]], name: str, dtype: str) -> None:
        super().__init__(log, f"layer {name}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "type", "MATRIX_MULTIPLY")
        object.__setattr__(self, "metadata", "")
        object.__setattr__(self, "outputs", [_Tensor(name + "_out", (1, 4), dtype)])

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    def get_output(self, index: int) -> _Tensor:
        return self.outputs[index]

    def set_output_type(self, index: int, dtype: str) -> None:
        self._log.append((self._who, "set_output_type", index, dtype))


class _Network:
    def __init__(self, log: list[tuple[Any, ...]], inputs: list[_Tensor]) -> None:
        self.inputs = inputs
        # a node's layer, its second layer (NAME_1), another node's, and a shape layer
        self.layers = [_Layer(log, KEPT, "float32"), _Layer(log, f"{KEPT}_1", "float32"),
                       _Layer(log, "other", "float32"), _Layer(log, "shape_of", "int32")]

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def get_input(self, index: int) -> _Tensor:
        return self.inputs[index]

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def get_layer(self, index: int) -> _Layer:
        return self.layers[index]


def fake_tensorrt(version: str, inputs: list[_Tensor]) -> types.ModuleType:
    """The TensorRT a build touches, at `version`'s API (flags, pools), logging what is set."""
    log: list[tuple[Any, ...]] = []
    release = _version(version)
    flags = ["FP16", "INT8", "GPU_FALLBACK", "OBEY_PRECISION_CONSTRAINTS"]
    flags += ["BF16"] if release >= (9, 0) else ["STRICT_TYPES"]
    config_type = _PoolConfig if release >= (8, 4) else _Config

    class Logger:
        WARNING = 2

        def __init__(self, severity: int) -> None:
            self.severity = severity

    class Builder:
        def __init__(self, logger: Logger) -> None:
            self.logger = logger

        def create_network(self, flags: int) -> _Network:
            log.append(("builder", "create_network", flags))
            return _Network(log, inputs)

        def create_builder_config(self) -> _Config:
            return config_type(log, "config")

        def create_optimization_profile(self) -> _Profile:
            return _Profile()

        def build_serialized_network(self, network: _Network, config: _Config) -> bytes:
            return b"plan"

    class OnnxParser:
        num_errors = 0

        def __init__(self, network: _Network, logger: Logger) -> None:
            self.network = network

        def parse_from_file(self, path: str) -> bool:
            return True

    class IInt8EntropyCalibrator2:
        def __init__(self) -> None:
            pass

    trt = types.ModuleType("tensorrt")
    trt.__dict__.update(
        __version__=version, log=log, Logger=Logger, Builder=Builder, OnnxParser=OnnxParser,
        IInt8EntropyCalibrator2=IInt8EntropyCalibrator2, float32="float32", float16="float16",
        BuilderFlag=types.SimpleNamespace(**{flag: flag for flag in flags}),
        NetworkDefinitionCreationFlag=types.SimpleNamespace(EXPLICIT_BATCH=0),
        MemoryPoolType=types.SimpleNamespace(WORKSPACE="WORKSPACE"),
        DeviceType=types.SimpleNamespace(DLA="DLA", GPU="GPU"),
        ProfilingVerbosity=types.SimpleNamespace(DETAILED="DETAILED"))
    return trt


def _request(tmp_path: Path, target: str, precision: Precision, options: TensorRTOptions,
             fp32_layers: tuple[str, ...] = (), calibrated: bool = False) -> BuildRequest:
    model = tmp_path / "legalized.onnx"
    model.write_bytes(b"an ONNX model (the stand-in parser does not read it)")
    cache = tmp_path / "int8.cache"
    cache.write_bytes(b"TRT-8500-EntropyCalibration2\nx: 3c010a14\n")
    outdir = tmp_path / "out"
    outdir.mkdir()
    return BuildRequest(model=model, outdir=outdir, target=registry.resolve(target), precision=precision,
                        backend_options=options, fp32_layers=fp32_layers,
                        calibration_cache=cache if calibrated else None)


def _host(request: BuildRequest, version: str, inputs: list[_Tensor],
          monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """What the host's build (engine.build_plan) sets, with the stand-in TensorRT imported."""
    trt = fake_tensorrt(version, inputs)
    with monkeypatch.context() as patched:
        patched.setitem(sys.modules, "tensorrt", trt)
        patched.setattr(fingerprint, "current", lambda: {"tensorrt": version})
        engine.build_plan(request, request.model, request.outdir / "model.plan")
    return trt.log


def _board(folder: Path, version: str, inputs: list[_Tensor]) -> list[tuple[Any, ...]]:
    """What the runner the bundle carries sets, building from its bundle.json."""
    spec = importlib.util.spec_from_file_location("bundle_runner", folder / device_bundle.RUNNER)
    assert spec is not None and spec.loader is not None
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    trt = fake_tensorrt(version, inputs)
    built = runner.TrtEngine.__new__(runner.TrtEngine)
    built.trt, built.logger = trt, trt.Logger(trt.Logger.WARNING)
    assert built._build(str(folder), device_bundle.read_bundle(folder)["settings"]) == b"plan"
    return trt.log


def _all_three(request: BuildRequest, version: str, inputs: list[_Tensor],
               monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The host's build, `--engine-only` on its bundle and the board's runner on a copy of the same
    bundle: each must set what the others set. The host's own build keeps no timing cache (none is
    asked for); both builds from the bundle use the bundle's. Returns the board's log."""
    artifact = bundle.write_bundle(request)
    folder = request.outdir / device_bundle.BUNDLE_DIR
    assert f"{device_bundle.BUNDLE_DIR}/{device_bundle.RUNNER}" in artifact.files
    board_copy = request.outdir.parent / "board"
    shutil.copytree(folder, board_copy)
    host = _host(request, version, inputs, monkeypatch)
    (request.outdir.parent / "engine").mkdir()
    bundle_request = TensorRTBackend().stages.bundle_request
    assert bundle_request is not None
    engine_only = bundle_request(folder, request.outdir.parent / "engine", request.target)
    on_host_from_bundle = _host(engine_only, version, inputs, monkeypatch)
    board = _board(board_copy, version, inputs)
    assert on_host_from_bundle == board
    assert host == [entry for entry in board if entry[1] not in TIMING]
    return board


def test_an_fp16_build_with_kept_layers_and_a_dynamic_input_is_configured_alike(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a range for "ids", which the network fixed, is left out of the profile on both sides
    options = TensorRTOptions(profiles=[ShapeProfile("x", [1, 4], [8, 4], [32, 4]),
                                        ShapeProfile("ids", [5], [5], [5])])
    request = _request(tmp_path, "gpu-trt10", Precision.FP16, options, fp32_layers=(KEPT,))
    inputs = [_Tensor("x", (-1, 4)), _Tensor("ids", (5,), "int32")]
    board = _all_three(request, "10.16", inputs, monkeypatch)
    assert board == [
        ("builder", "create_network", 0),  # explicit batch is the only mode from 10
        ("config", "set_memory_pool_limit", "WORKSPACE", 4096 << 20),
        ("config", "set_flag", "FP16"),
        (f"layer {KEPT}", "precision", "float32"), (f"layer {KEPT}", "set_output_type", 0, "float32"),
        (f"layer {KEPT}_1", "precision", "float32"), (f"layer {KEPT}_1", "set_output_type", 0, "float32"),
        ("config", "set_flag", "OBEY_PRECISION_CONSTRAINTS"),
        ("config", "profiling_verbosity", "DETAILED"),
        ("config", "add_optimization_profile", (("x", [1, 4], [8, 4], [32, 4]),)),
        ("config", "create_timing_cache", b""),
        ("config", "set_timing_cache", b"", False),
    ]


def test_bf16_sets_its_own_flag_and_keeps_the_analysis_layers(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    request = _request(tmp_path, "gpu-trt10", Precision.BF16, TensorRTOptions(), fp32_layers=(KEPT,))
    board = _all_three(request, "10.16", [_Tensor("x", (1, 4))], monkeypatch)
    flags = [entry[2] for entry in board if entry[1] == "set_flag"]
    assert flags == ["BF16", "OBEY_PRECISION_CONSTRAINTS"]
    assert "--bf16" in bundle.trtexec_command(request)


def test_implicit_int8_on_the_dla_is_configured_alike_on_tensorrt_8_5(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    options = TensorRTOptions(dla_core=1, gpu_fallback=False)
    request = _request(tmp_path, "jetson-xavier", Precision.INT8, options, calibrated=True)
    board = _all_three(request, "8.5.2", [_Tensor("x", (1, 4))], monkeypatch)
    assert board[0] == ("builder", "create_network", 1)  # 1 << EXPLICIT_BATCH before 10
    assert [entry[2] for entry in board if entry[1] == "set_flag"] == ["INT8", "FP16"]  # no GPU_FALLBACK
    assert ("config", "int8_calibrator", ("calibrator", request.calibration_cache.read_bytes())) in board
    assert ("config", "default_device_type", "DLA") in board and ("config", "DLA_core", 1) in board


def test_tensorrt_8_2_has_no_memory_pools_and_takes_the_workspace_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    request = _request(tmp_path, "jetson-nano", Precision.FP32, TensorRTOptions(workspace_mb=256))
    board = _all_three(request, "8.2.1", [_Tensor("x", (1, 4))], monkeypatch)
    assert ("config", "max_workspace_size", 256 << 20) in board
    assert not any(entry[1] == "set_flag" for entry in board)


def test_what_the_builder_cannot_take_is_refused_on_both_sides(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    request = _request(tmp_path, "gpu-trt10", Precision.BF16, TensorRTOptions())
    bundle.write_bundle(request)
    folder = request.outdir / device_bundle.BUNDLE_DIR
    with pytest.raises(BackendError, match=r"TensorRT 8\.5\.2 has no BF16 builder flag"):
        _host(request, "8.5.2", [_Tensor("x", (1, 4))], monkeypatch)
    with pytest.raises(ValueError, match=r"TensorRT 8\.5\.2 has no BF16 builder flag"):
        _board(folder, "8.5.2", [_Tensor("x", (1, 4))])
    dynamic = [_Tensor("x", (-1, 4))]  # and no profile for it
    with pytest.raises(BackendError, match="dynamic inputs need an optimization profile: x") as refused:
        _host(request, "10.16", dynamic, monkeypatch)
    assert refused.value.hint is not None and "--dynamic-batch" in refused.value.hint
    with pytest.raises(ValueError, match="dynamic inputs need an optimization profile: x"):
        _board(folder, "10.16", dynamic)


def test_the_host_configures_nothing_of_its_own() -> None:
    """A second copy of the configuration would drift again: engine.py only calls the runner's."""
    source = Path(engine.__file__).read_text()
    for call in ("create_builder_config", "set_flag", "set_memory_pool_limit", "add_optimization_profile",
                 "set_timing_cache", "int8_calibrator", "pin_fp32"):
        assert call not in source, call
    assert run_on_device.TIMING_CACHE == device_bundle.TIMING_CACHE  # one cache file for all on the board

