"""TensorRT's half of the device bundle: bundle.json (the build settings, the exact trtexec
command equivalent to deploycc's build, the deploycc command), trtexec.sh, and the files it
names, laid out in the bundle's folder with device/bundle.py, which also writes the reference
data and carries run_on_device.py, the runner that builds, verifies and times the engine with
the board's own Python.
"""

from __future__ import annotations

import json
import shlex
import shutil
from typing import Any

from deploycc.backends.base import Artifact, BuildRequest
from deploycc.backends.tensorrt.options import implicit_int8, own, workspace_mb
from deploycc.device.bundle import (
    BUNDLE_DIR,
    BUNDLE_FILE,
    BUNDLE_SCHEMA,
    CALIBRATION_CACHE,
    FP32_MODEL_NAME,
    MODEL_NAME,
    PLAN_NAME,
    RUNNER,
    TIMING_CACHE,
    copy_model,
    copy_runner,
    dims_text,
    trtexec_flags,
)
from deploycc.taxonomy import Precision

# The precisions built with the half-precision analysis, whose kept layers are pinned in fp32
# (run_on_device.py's KEEPS_FP32_LAYERS)
HALF = (Precision.FP16, Precision.BF16)


def trtexec_command(request: BuildRequest, onnx: str = MODEL_NAME, plan: str = PLAN_NAME) -> list[str]:
    """trtexec flags equivalent to deploycc's TensorRT build, spelled for the target's TensorRT."""
    flags = trtexec_flags(request.target.backend.version)
    options = own(request)
    command = ["trtexec", f"--onnx={onnx}", f"--saveEngine={plan}", f"--timingCacheFile={TIMING_CACHE}"]
    workspace = workspace_mb(request)
    if workspace:
        command.append(flags["workspace"].format(workspace))
    if request.precision in HALF:
        command.append("--bf16" if request.precision == Precision.BF16 else "--fp16")  # --bf16: 9.0 on
        command += fp32_layer_flags(request, flags)
    elif request.precision == Precision.INT4:  # weight-only: the model's int4 DequantizeLinear (10.0 on)
        command += ["--int4", "--fp16"]
    elif request.precision == Precision.INT8:
        command += ["--int8", "--fp16"]
        if implicit_int8(request):  # the DLA's implicit quantization reads the scales from the cache
            command.append(f"--calib={CALIBRATION_CACHE}")
    if options.profiles:
        for flag, pick in (("--minShapes", "min"), ("--optShapes", "opt"), ("--maxShapes", "max")):
            shapes = ",".join(f"{p.input}:{dims_text(getattr(p, pick))}" for p in options.profiles)
            command.append(f"{flag}={shapes}")
    if options.dla_core is not None:
        command.append(f"--useDLACore={options.dla_core}")
        if options.gpu_fallback:
            command.append("--allowGPUFallback")
    command.append(flags["build_only"])
    return command


def fp32_layer_flags(request: BuildRequest, flags: dict[str, str]) -> list[str]:
    """trtexec's flags that keep the half-precision analysis' layers in fp32 (the layer the
    parser names after each node; run_on_device.py also pins the others a node makes), where
    this release has them and the names can be spelled (trtexec splits its specs on ",")."""
    names = [name for name in request.fp32_layers if "," not in name and "'" not in name]
    if not names or "layer_precisions" not in flags:
        return []
    spec = ",".join(f"{name}:fp32" for name in names)
    return [flags["layer_precisions"].format(spec), flags["layer_output_types"].format(spec),
            flags["precision_constraints"].format("obey")]


def fp32_layer_notes(request: BuildRequest) -> list[str]:
    """What the bundle does with the kept layers, where trtexec cannot say it all."""
    if not request.fp32_layers or request.precision not in HALF:
        return []
    version = request.target.backend.version
    flags = trtexec_flags(version)
    notes = [f"{len(request.fp32_layers)} layer(s) kept in fp32: run_on_device.py pins them through the "
             "API (layer precision and output type, OBEY_PRECISION_CONSTRAINTS)"]
    if "layer_precisions" not in flags:
        notes.append(f"trtexec of TensorRT {version} has no --layerPrecisions (8.4.1 to 10.16): trtexec.sh "
                     "builds all in fp16; use run_on_device.py")
    unspelled = [name for name in request.fp32_layers if "," in name or "'" in name]
    if unspelled and "layer_precisions" in flags:
        notes.append(f"trtexec cannot name {', '.join(unspelled)} (a ',' or a quote in the name): "
                     "only run_on_device.py keeps them in fp32")
    return notes


def settings(request: BuildRequest) -> dict[str, Any]:
    options = own(request)
    return {
        "target": request.target.name,
        "jetpack": request.target.jetpack.release if request.target.jetpack else None,
        "tensorrt": request.target.backend.version,
        "precision": request.precision,
        "workspace_mb": workspace_mb(request),
        "profiles": [{"input": p.input, "min": p.min, "opt": p.opt, "max": p.max} for p in options.profiles],
        "dla_core": options.dla_core,
        "gpu_fallback": options.gpu_fallback,
        "int8_calibration_cache": CALIBRATION_CACHE if implicit_int8(request) else None,
        "fp32_layers": list(request.fp32_layers) if request.precision in HALF else [],
    }


def write_bundle(request: BuildRequest) -> Artifact:
    """Copy the legalized model into OUTDIR/bundle with its build settings and commands."""
    folder = request.outdir / BUNDLE_DIR
    folder.mkdir()
    files = [f"{BUNDLE_DIR}/{BUNDLE_FILE}", *copy_model(request.model, folder, MODEL_NAME)]
    implicit_alternative = None
    if request.precision == Precision.INT8 and request.calibration_cache is not None:
        shutil.copyfile(request.calibration_cache, folder / CALIBRATION_CACHE)
        files.append(f"{BUNDLE_DIR}/{CALIBRATION_CACHE}")
        if not implicit_int8(request) and request.fp32_model is not None:
            # The GPU's other INT8 form: the runner builds and times both and keeps the faster.
            files += copy_model(request.fp32_model, folder, FP32_MODEL_NAME)
            implicit_alternative = {"model": FP32_MODEL_NAME, "cache": CALIBRATION_CACHE}
    command = trtexec_command(request)
    build = {**settings(request), "int8_implicit": implicit_alternative}
    jetpack = f" --jetpack {build['jetpack']}" if build["jetpack"] else ""
    deploycc_command = f"deploycc build {BUNDLE_DIR} --engine-only --target {request.target.name}{jetpack}"
    (folder / BUNDLE_FILE).write_text(json.dumps({
        "schema": BUNDLE_SCHEMA, "settings": build, "trtexec": command, "deploycc": deploycc_command,
    }, indent=2) + "\n")
    # JetPack installs trtexec in /usr/src/tensorrt/bin, which is not on PATH.
    (folder / "trtexec.sh").write_text(
        "#!/bin/sh\n# Builds the engine on the device, equivalent to deploycc's TensorRT build.\nset -e\n"
        "cd \"$(dirname \"$0\")\"\n"
        "TRTEXEC=\"$(command -v trtexec || echo /usr/src/tensorrt/bin/trtexec)\"\n"
        "\"$TRTEXEC\" " + shlex.join(command[1:]) + "\n")
    (folder / "trtexec.sh").chmod(0o755)
    files.append(f"{BUNDLE_DIR}/trtexec.sh")
    files.append(copy_runner(folder))
    return Artifact(kind="device-bundle", files=files, pending_on_device=True, device_folder=BUNDLE_DIR,
                    settings={**build, "trtexec": shlex.join(command), "deploycc": deploycc_command},
                    notes=[f"TensorRT is not installed here: the engine is pending on the device. "
                           f"Copy {BUNDLE_DIR}/ to the {request.target.name} and run `python3 {RUNNER}` "
                           f"there (it builds the engine, checks it against the reference and times it; "
                           f"`sh trtexec.sh` builds only), then `deploycc device import` its result.json.",
                           *fp32_layer_notes(request)])
