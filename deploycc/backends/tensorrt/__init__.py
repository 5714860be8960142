"""TensorRT (Jetson targets and x86 GPUs): a real engine where TensorRT is importable, else a
device bundle that builds the same engine on the device."""

from __future__ import annotations

import importlib.util
import platform
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.backends.base import (
    Artifact,
    Backend,
    BackendOptions,
    BackendStages,
    BackendUnavailable,
    BuildRequest,
    Int8Recipe,
    QdqLayout,
    Quantizer,
    Runner,
    WeightQuantizer,
)
from deploycc.backends.profiles import shape_profiles
from deploycc.backends.tensorrt import bundle, fingerprint
from deploycc.backends.tensorrt.options import TensorRTOptions, implicit_int8, own
from deploycc.device.bundle import (
    BUNDLE_DIR,
    MODEL_NAME,
    PLAN_NAME,
    TIMING_CACHE,
    DeviceReference,
    read_bundle,
    write_reference,
)
from deploycc.records.shapes import ShapeProfile
from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    from deploycc.options import BuildOptions
    from deploycc.targets.schema import Target

DEVICE_BUNDLE = "device-bundle"  # the artifact's kind where the engine is built on the device


def _prepare(request: BuildRequest, options: BuildOptions) -> None:
    """The profiles for every dynamic input, and on a DLA with int8 the fp32 model it builds from."""
    if implicit_int8(request) and request.fp32_model is not None:
        request.model = request.fp32_model  # the DLA takes implicit INT8 only: fp32 and the cache
    profiles = shape_profiles(request.model, options, required=True)
    request.backend_options = replace(own(request), profiles=profiles)


def _static_dims(options: BuildOptions) -> str | None:
    return "the DLA's static shapes" if options.dla_core is not None else None


def _add_reference(artifact: Artifact, outdir: Path, reference: DeviceReference) -> None:
    """A device bundle's reference data, in the bindings of the TensorRT it was made for."""
    if artifact.kind != DEVICE_BUNDLE:
        return
    version = str(artifact.settings.get("tensorrt") or "")
    artifact.files += write_reference(outdir / BUNDLE_DIR, reference, version)


def _bundle_request(folder: Path, outdir: Path, target: Target) -> BuildRequest:
    """The request a bundle describes: all the settings the board's runner builds from, so that
    both build the same engine."""
    settings = read_bundle(folder)["settings"]
    cache = settings.get("int8_calibration_cache")
    return BuildRequest(
        model=folder / MODEL_NAME, outdir=outdir, target=target,
        precision=Precision(settings["precision"]),
        calibration_cache=folder / cache if cache else None,
        fp32_layers=tuple(settings.get("fp32_layers") or ()),
        backend_options=TensorRTOptions(
            dla_core=settings["dla_core"], gpu_fallback=settings["gpu_fallback"],
            workspace_mb=settings["workspace_mb"], timing_cache=folder / TIMING_CACHE,
            profiles=[ShapeProfile(p["input"], p["min"], p["opt"], p["max"]) for p in settings["profiles"]]))


class TensorRTBackend(Backend):
    kind = "tensorrt"
    # ONNX Runtime's quantizer, not NVIDIA's Model Optimizer: ModelOpt writes opset 19 or newer,
    # which TensorRT 8.5's parser (JetPack 5, the Xavier) does not read; ORT's writes any opset from
    # 13, so one tool serves TensorRT 8.5 to 10. The GPU builds the Q/DQ model; the DLA builds
    # the fp32 model with the calibration cache (implicit INT8, all it runs).
    stages = BackendStages(int8=Int8Recipe(Quantizer.ORT_QDQ, QdqLayout.TENSORRT, stand_in_for="TensorRT",
                                           calibration_cache=True),
                           prepare=_prepare, static_dims=_static_dims, add_reference=_add_reference,
                           bundle_request=_bundle_request,
                           # where the target's data offers int4 (TensorRT 10: 8.x has no INT4)
                           weight_only=WeightQuantizer.ORT_BLOCKWISE_QDQ)

    def backend_options(self, options: BuildOptions) -> BackendOptions:
        return TensorRTOptions(dla_core=options.dla_core, gpu_fallback=options.gpu_fallback,
                               workspace_mb=options.workspace_mb, bundle_only=options.bundle_only)

    def unavailable_reason(self) -> str | None:
        missing = [name for name in ("tensorrt", "cuda") if importlib.util.find_spec(name) is None]
        if missing:
            return (f"{' and '.join('cuda-python' if m == 'cuda' else m for m in missing)} not importable "
                    f"here (pip install 'deploycc[tensorrt]' on a machine with an NVIDIA GPU)")
        return None

    def environment(self) -> dict[str, str]:
        facts = {"machine": platform.machine()}
        l4t = fingerprint.l4t_release()
        if l4t:
            facts["l4t"] = l4t
        if self.unavailable_reason() is None:
            facts.update({k: str(v) for k, v in fingerprint.current().items() if v is not None})
        else:
            facts["tensorrt"] = "not installed"
        return facts

    def build(self, request: BuildRequest) -> Artifact:
        if own(request).bundle_only or self.unavailable_reason() is not None:
            return bundle.write_bundle(request)
        from deploycc import budget
        from deploycc.backends.tensorrt.engine import build_plan

        budget.lift_ceiling()  # CUDA's mappings are not the host memory the ceiling guards
        plan = request.outdir / PLAN_NAME
        placement, details = build_plan(request, request.model, plan)
        return Artifact(kind="tensorrt-plan", files=[PLAN_NAME, PLAN_NAME + ".json"],
                        settings={**bundle.settings(request), **details,
                                  "trtexec": " ".join(bundle.trtexec_command(request))},
                        placement=placement)

    def load(self, artifact: Artifact, outdir: Path, request: BuildRequest) -> Runner:
        reason = self.unavailable_reason()
        if reason is not None:
            raise BackendUnavailable(f"cannot run a TensorRT engine: {reason}")
        from deploycc import budget
        from deploycc.backends.tensorrt.engine import TensorRTRunner

        budget.lift_ceiling()
        return TensorRTRunner(outdir / artifact.files[0])


