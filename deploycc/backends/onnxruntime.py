"""ONNX Runtime: the optimized model ORT itself writes (optimized_model_filepath), or the ORT
format for mobile and embedded runtimes, with the session options recorded and a placement
check that reads, from a profiled run, which execution provider ran every node.
"""

from __future__ import annotations

import ctypes
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploycc.backends.base import (
    Artifact,
    Backend,
    BackendError,
    BackendOptions,
    BuildRequest,
    ConformanceRunner,
    Int8Recipe,
    Placement,
    QdqLayout,
    Quantizer,
    Runner,
)
from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    from deploycc.options import BuildOptions
    from deploycc.targets.schema import Target

LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}
DEFAULT_LEVEL = "extended"


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
    def __init__(self, path: Path, providers: list[str], threads: int = 0, level: str = "all") -> None:
        """`level` is what ORT applies at load: "all" (its default) everywhere, so a portable
        artifact still gets this machine's layout transforms; "disabled" to run ops as written."""
        import onnxruntime as ort

        started = time.perf_counter()
        self.session = ort.InferenceSession(str(path), session_options(level, threads), providers=providers)
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
                               stage="run") from None
        if all(isinstance(result, np.ndarray) for result in results):
            return dict(zip(self._outputs, results, strict=True))
        from deploycc.verify.runner import as_arrays

        return as_arrays(dict(zip(self._outputs, results, strict=True)))  # sequences and maps


@dataclass
class OrtOptions(BackendOptions):
    artifact_format: str = "onnx"  # "onnx" (optimized ONNX) or "ort" (ORT format): --format


def _own(request: BuildRequest) -> OrtOptions:
    options = request.backend_options
    return options if isinstance(options, OrtOptions) else OrtOptions()


class OnnxRuntimeBackend(Backend):
    kind = "onnxruntime"
    int8 = Int8Recipe(Quantizer.ORT_QDQ, QdqLayout.X86)

    def backend_options(self, options: BuildOptions) -> BackendOptions:
        return OrtOptions(artifact_format=options.artifact_format)

    def conformance_runner(self) -> ConformanceRunner:
        return run_conformance_case

    def raw_runner(self, path: Path, target: Target, threads: int | None) -> Runner:
        return OrtRunner(path, [target.backend.execution_provider or "CPUExecutionProvider"],
                         threads=threads or 0)  # ORT's defaults on the raw model

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

        # int8: the model is a Q/DQ model (quantize/)
        if request.precision not in (Precision.FP32, Precision.INT8):
            raise BackendError(f"precision {request.precision} is not built for {request.target.name} yet: "
                               "ORT CPU runs the model in the precision it was exported in",
                               hint="export the model in that precision, or use --precision fp32")
        level = request.target.backend.optimization_level or DEFAULT_LEVEL
        artifact_format = _own(request).artifact_format
        ort_format = artifact_format == "ort"
        name = "model.ort" if ort_format else "model.ort.onnx"
        external = "model.ort.onnx.data" if _has_external_data(request.model) and not ort_format else None
        options = session_options(level, optimized_path=request.outdir / name, ort_format=ort_format,
                                  external_data=external)
        provider = self._provider(request)
        if request.fail_on_fallback and provider != "CPUExecutionProvider":
            options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        try:
            ort.InferenceSession(str(request.model), options, providers=[provider])
        except Exception as error:
            raise BackendError(f"onnxruntime could not build the optimized model: "
                               f"{str(error).strip().splitlines()[0]}") from None
        files = [name] + ([external] if external and (request.outdir / external).exists() else [])
        placement = self.placement(request.outdir / name, provider)
        if request.fail_on_fallback and placement.fallback:
            raise BackendError(f"{len(placement.fallback)} node(s) fall back from {provider}: "
                               f"{', '.join(placement.fallback[:5])}",
                               hint="drop --fail-on-fallback to allow it")
        return Artifact(kind="ort-format" if ort_format else "ort-optimized-onnx", files=files,
                        settings={"graph_optimization_level": level, "execution_provider": provider,
                                  "format": artifact_format},
                        placement=placement)

    def placement(self, artifact: Path, provider: str) -> Placement:
        """Run once with profiling on and read which provider ran every node."""
        import onnxruntime as ort

        from deploycc.verify.inputs import generate_for_session

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
        return OrtRunner(outdir / artifact.files[0], [self._provider(request)], threads=request.threads or 0)


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
