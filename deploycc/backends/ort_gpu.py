"""ONNX Runtime with a GPU provider (ort-cuda, ort-trt) where that provider is not installed, as on
the machines deploycc is developed on: the device bundle. It holds the legalized model and
providers.json, the provider list with each provider's options, which `run_on_device.py`'s
`ort_gpu_session(BUNDLE)` turns into a session: the one documented call, on any host with
onnxruntime (a provider it lacks is left out, and said so).

The TensorRT provider's options make its build reproducible and cached:
- fp16 / int8 as the build's precision;
- the engine cache and timing cache under the bundle, in a folder keyed by the model's sha256,
  the TensorRT version, the GPU's SM and the profiles (ort_gpu_session resolves the key on the
  host: an upgrade or another GPU gets a fresh folder instead of a stale engine, ORT #18272, #22244);
- explicit trt_profile_{min,opt,max}_shapes from the shape plan, so a new shape inside them
  never rebuilds the engine (ORT #13851);
- the EPContext model (trt_dump_ep_context_model), so a second start skips the parser and build.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from deploycc.backends.base import Artifact, BuildRequest
from deploycc.device.bundle import (
    BUNDLE_DIR,
    BUNDLE_FILE,
    BUNDLE_SCHEMA,
    MODEL_NAME,
    copy_model,
    copy_runner,
    version_tuple,
)
from deploycc.records.shapes import ShapeProfile
from deploycc.taxonomy import Precision

GPU_BUNDLE = "ort-gpu-bundle"  # the artifact's kind
PROVIDERS_FILE = "providers.json"
TENSORRT, CUDA, CPU = "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"
CACHE_DIR = "trt-cache"  # under the bundle; ort_gpu_session adds the key folder
ENGINE = "onnxruntime-gpu"  # run_on_device.py's --engine for it

# The first ORT release that reads each TensorRT provider option, from the pull request that added
# it. ORT's Python binding refuses a name it does not know ("Invalid TensorRT EP option"), so a
# bundle for an older release (a Jetson's wheel) leaves the option out and says what that costs.
OPTION_SINCE: dict[str, tuple[tuple[int, int], str, str]] = {
    "trt_timing_cache_enable": ((1, 15), "onnxruntime#14767",
                                "no timing cache: each engine build times its kernels anew"),
    "trt_profile_min_shapes": ((1, 15), "onnxruntime#15546",
                               "no explicit profiles: the engine is rebuilt whenever an input shape "
                               "leaves the range seen so far (onnxruntime #13851)"),
    "trt_timing_cache_path": ((1, 17), "onnxruntime#17865",
                              "the timing cache lies in the engine cache folder"),
    "trt_dump_ep_context_model": ((1, 17), "onnxruntime#19154",
                                  "no EPContext model: every new process parses the model again "
                                  "(the engine cache still spares the build)"),
}
OPTION_SINCE["trt_profile_opt_shapes"] = OPTION_SINCE["trt_profile_max_shapes"] = OPTION_SINCE[
    "trt_profile_min_shapes"]
OPTION_SINCE["trt_ep_context_file_path"] = OPTION_SINCE["trt_dump_ep_context_model"]


def options_for_release(options: dict[str, Any], version: str) -> tuple[dict[str, Any], list[str]]:
    """The options ORT `version` reads, and one note per feature it lacks."""
    have = version_tuple(version)
    kept = {k: v for k, v in options.items() if k not in OPTION_SINCE or have >= OPTION_SINCE[k][0]}
    lacking: dict[str, str] = {}  # origin -> note, so the three profile options give one note
    for key in options:
        switch = key.replace("_path", "_enable")
        if key not in kept and not (switch != key and switch in options and switch not in kept):
            since, origin, cost = OPTION_SINCE[key]
            lacking.setdefault(origin, f"onnxruntime {version} predates {key} ({since[0]}.{since[1]}, "
                                       f"{origin}): {cost}")
    return kept, list(lacking.values())


def profile_text(profiles: list[ShapeProfile], pick: str) -> str:
    """ORT's trt_profile_*_shapes spelling of the "min", "opt" or "max" dims:
    "input:1x3x224x224,mask:1x128"."""
    return ",".join(f"{p.input}:{'x'.join(str(d) for d in p.dims(pick))}" for p in profiles)


def provider_list(request: BuildRequest, profiles: list[ShapeProfile],
                  min_subgraph_size: int | None = None) -> tuple[list[list[Any]], list[str]]:
    """[[provider, options], ...] in ORT's priority order: the target's provider, then CUDA (for
    the TensorRT provider's leftovers), then the CPU; and a note per option the target's ORT
    release lacks."""
    primary = request.target.backend.execution_provider or CUDA
    providers: list[list[Any]] = []
    notes: list[str] = []
    if primary == TENSORRT:
        options: dict[str, Any] = {
            "trt_fp16_enable": request.precision in (Precision.FP16, Precision.INT8),
            "trt_int8_enable": request.precision == Precision.INT8,
            "trt_engine_cache_enable": True, "trt_engine_cache_path": CACHE_DIR,
            "trt_timing_cache_enable": True, "trt_timing_cache_path": CACHE_DIR,
            "trt_dump_ep_context_model": True, "trt_ep_context_file_path": CACHE_DIR,
        }
        # int8: the model is quantize/'s Q/DQ model, which TensorRT reads as explicit quantization
        # (no calibration table: the scales are in the graph)
        if min_subgraph_size is not None:
            options["trt_min_subgraph_size"] = min_subgraph_size
        if profiles:
            for key, pick in (("trt_profile_min_shapes", "min"), ("trt_profile_opt_shapes", "opt"),
                              ("trt_profile_max_shapes", "max")):
                options[key] = profile_text(profiles, pick)
        options, notes = options_for_release(options, request.target.backend.version)
        providers.append([TENSORRT, options])
    providers.append([CUDA, {}])
    providers.append([CPU, {}])
    return providers, notes


def write_gpu_bundle(request: BuildRequest, profiles: list[ShapeProfile],
                     min_subgraph_size: int | None = None) -> Artifact:
    """OUTDIR/bundle: the model, providers.json, bundle.json and the runner; pending on the device."""
    folder = request.outdir / BUNDLE_DIR
    folder.mkdir()
    files = copy_model(request.model, folder, MODEL_NAME)
    providers, option_notes = provider_list(request, profiles, min_subgraph_size)
    model_sha = hashlib.sha256((folder / MODEL_NAME).read_bytes()).hexdigest()
    document = {"providers": providers, "model_sha256": model_sha,
                "profiles": [dataclasses.asdict(profile) for profile in profiles],
                "load": "from run_on_device import ort_gpu_session; session = ort_gpu_session('bundle')"}
    (folder / PROVIDERS_FILE).write_text(json.dumps(document, indent=1) + "\n")
    jetpack = request.target.jetpack
    settings = {"target": request.target.name, "onnxruntime": request.target.backend.version,
                # a Jetson's ORT wheel is built for one JetPack (and its TensorRT): say which
                "jetpack": jetpack.release if jetpack else None,
                "tensorrt": dict(jetpack.facts).get("tensorrt") if jetpack else None,
                "execution_provider": providers[0][0], "precision": request.precision,
                "profiles": document["profiles"], "fp32_layers": list(request.fp32_layers)}
    (folder / BUNDLE_FILE).write_text(json.dumps({"schema": BUNDLE_SCHEMA, "settings": settings,
                                                  "engine": ENGINE}, indent=2) + "\n")
    files += [f"{BUNDLE_DIR}/{PROVIDERS_FILE}", f"{BUNDLE_DIR}/{BUNDLE_FILE}", copy_runner(folder)]
    provider = str(providers[0][0]).removesuffix("ExecutionProvider")
    runner = f"python3 run_on_device.py --engine {ENGINE}"
    note = (f"onnxruntime here has no {provider} provider: the session is pending on the GPU host. Copy "
            f"{BUNDLE_DIR}/ there and run `{runner}` (it builds the session from providers.json, checks it "
            "against the reference, times it and reads where ORT placed each node), then `deploycc device "
            f"import` its result.json. In your code: {document['load']}")
    return Artifact(kind=GPU_BUNDLE, files=files, pending_on_device=True, device_folder=BUNDLE_DIR,
                    settings={**settings, "providers": providers, "pending": "the ONNX Runtime session",
                              "runner": runner}, notes=[note, *option_notes])


def read_providers(folder: Path) -> dict[str, Any]:
    return json.loads((folder / PROVIDERS_FILE).read_text())
