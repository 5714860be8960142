"""The device bundle's files: their names and schema, reading a bundle, the reference data the
board judges its engine by, and run_on_device.sh. The TensorRT backend writes a bundle where
TensorRT is not importable (as on the machines this project is developed on): the legalized
model, bundle.json (the build settings and commands, backends/tensorrt/bundle.py), the reference
data (inputs and the original model's outputs on ONNX Runtime, as raw little-endian binaries in
the dtype the engine binding will have, with a JSON index and the precision's tolerances) and
run_on_device.py, which builds, verifies and times the engine with the board's own Python.
"""

from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    from deploycc.graph.decoder import DecoderSignature

BUNDLE_DIR = "bundle"
BUNDLE_FILE = "bundle.json"
MODEL_NAME = "model.onnx"
PLAN_NAME = "model.plan"
TIMING_CACHE = "timing.cache"
CALIBRATION_CACHE = "calibration.cache"
FP32_MODEL_NAME = "model.fp32.onnx"  # INT8 bundles for the GPU: the implicit form's model
RUNNER = "run_on_device.py"
TRTEXEC_RUNNER = "run_on_device.sh"
TRTEXEC_OUTPUT, TRTEXEC_TIMES, TRTEXEC_LOG = "trtexec-output.json", "trtexec-times.json", "trtexec.log"
BUNDLE_SCHEMA = 1  # bundle.json's layout; the runner refuses a newer one
REFERENCE_DIR, REFERENCE_INDEX = "reference", "reference.json"
REFERENCE_SCHEMA = 1


def version_tuple(version: str) -> tuple[int, ...]:
    """(major, minor) of a version text: "8.5.2" and "8.5" alike."""
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


def dims_text(dims: list[int]) -> str:
    return "x".join(str(d) for d in dims)


def trtexec_flags(version: str) -> dict[str, str]:
    """The spelling of the flags that changed, for trtexec of TensorRT `version`, as read from
    samples/common/sampleOptions.cpp at tags 8.2.1, 8.4.3, 8.5.3, v8.6.1 and v10.0.1:
    --workspace (MiB) until --memPoolSize arrived in 8.4 (deprecated then, gone in 10);
    --buildOnly until --skipInference arrived in 8.6 (gone in 10); --streams until --infStreams
    in 8.6. The pool size is given as a bare number: 8.4-8.6 read MiB with std::stod (a suffix is
    ignored, so "4G" is 4 MiB), 10.0 reads a suffix as bytes before multiplying by 2^20 again,
    and from 10.1 a bare number is MiB."""
    new = version_tuple(version) or (10, 0)
    return {"workspace": "--memPoolSize=workspace:{}" if new >= (8, 4) else "--workspace={}",
            "build_only": "--skipInference" if new >= (8, 6) else "--buildOnly",
            "streams": "--infStreams={}" if new >= (8, 6) else "--streams={}",
            **layer_precision_flags(new)}


def layer_precision_flags(version: tuple[int, ...]) -> dict[str, str]:
    """trtexec's per-layer precision flags, where its release has them (read from
    samples/common/sampleOptions.cpp at each tag): --precisionConstraints=none|prefer|obey from
    8.2.1, --layerPrecisions and --layerOutputTypes (NAME:fp32 pairs split on ",", the name on
    the last ":") from 8.4.1 through 10.16; 11.0 removed all three, its networks strongly typed.
    An empty dict: this trtexec cannot pin a layer's precision."""
    if version < (8, 4) or version >= (11,):  # (major, minor): 8.4.1 is the first 8.4 release
        return {}
    return {"layer_precisions": "--layerPrecisions={}", "layer_output_types": "--layerOutputTypes={}",
            "precision_constraints": "--precisionConstraints={}"}


def copy_model(model: Path, folder: Path, name: str) -> list[str]:
    """`model` as `folder/name`, with its external data file beside it under the name the model
    gives it (the legalized model names its data file after itself); the bundle's paths."""
    from deploycc.io import copy_model_file

    return [f"{BUNDLE_DIR}/{file.name}" for file in copy_model_file(model, folder / name)]


def copy_runner(folder: Path) -> str:
    """run_on_device.py, from beside this module, into the bundle; its path there."""
    shutil.copyfile(Path(__file__).with_name(RUNNER), folder / RUNNER)
    return f"{BUNDLE_DIR}/{RUNNER}"


def is_bundle(path: Path) -> bool:
    return path.is_dir() and (path / BUNDLE_FILE).is_file()


def read_bundle(path: Path) -> dict[str, Any]:
    return json.loads((path / BUNDLE_FILE).read_text())


def binding_dtype(dtype: np.dtype, tensorrt_version: str) -> np.dtype:
    """The dtype a TensorRT engine binding has for an ONNX tensor of `dtype`: TensorRT 8.x carries
    INT64 as INT32 and DOUBLE as FLOAT (onnx-tensorrt casts them at import); 10.x keeps INT64."""
    major = version_tuple(tensorrt_version)[:1] or (10,)
    if dtype == np.float64:
        return np.dtype(np.float32)
    if dtype == np.int64 and major[0] < 10:
        return np.dtype(np.int32)
    return np.dtype(dtype)


@dataclass(frozen=True)
class DeviceReference:
    """What the board judges an engine built there by: the inputs verification drew, the original
    model's outputs on them, the precision whose tolerances apply, how the inputs were drawn, and a
    decoder's signature (the board times its generation too)."""

    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    precision: Precision
    described: str
    decoder: DecoderSignature | None = None


def write_reference(folder: Path, reference: DeviceReference, tensorrt_version: str,
                    trtexec: bool = True) -> list[str]:
    """The board's reference: each array as raw little-endian bytes in its binding dtype (the
    same files work as `trtexec --loadInputs=name:file`), and an index with names, shapes,
    dtypes, files and sha256s, the tolerances of the precision, the model they belong to and a
    decoder's signature (time to first token, decode tokens/s, the cache's share of memory)."""
    from deploycc.io import sha256_file
    from deploycc.verify.compare import MISMATCH_SHARE, TOLERANCES, judged_as

    folder_of_data = folder / REFERENCE_DIR
    folder_of_data.mkdir(exist_ok=True)
    files, index = [], {}
    for kind, arrays in (("inputs", reference.inputs), ("outputs", reference.outputs)):
        entries = []
        for position, (name, array) in enumerate(arrays.items()):
            dtype = binding_dtype(np.asarray(array).dtype, tensorrt_version)
            data = np.ascontiguousarray(np.asarray(array).astype(dtype.newbyteorder("<")))
            file = f"{kind}/{position:03d}.bin"
            (folder_of_data / kind).mkdir(exist_ok=True)
            (folder_of_data / file).write_bytes(data.tobytes())
            entries.append({"name": name, "shape": list(data.shape), "dtype": dtype.name, "file": file,
                            "sha256": sha256_file(folder_of_data / file)})
            files.append(f"{BUNDLE_DIR}/{REFERENCE_DIR}/{file}")
        index[kind] = entries
    precision = reference.precision
    atol, rtol, min_cosine = TOLERANCES[judged_as(precision)]
    document = {"schema": REFERENCE_SCHEMA, "model_sha256": sha256_file(folder / MODEL_NAME),
                "precision": precision, "tensorrt": tensorrt_version, "inputs_described": reference.described,
                "reference": "the original model on ONNX Runtime CPU",
                "tolerances": {"atol": atol, "rtol": rtol, "min_cosine": min_cosine,
                               "mismatch_share": MISMATCH_SHARE.get(precision, 0.0)}, **index}
    if reference.decoder is not None:
        document["decoder"] = _decoder_entry(reference.decoder)
    (folder_of_data / REFERENCE_INDEX).write_text(json.dumps(document, indent=1) + "\n")
    if trtexec:  # a TensorRT bundle: trtexec's runner reads these files too
        files.append(write_trtexec_runner(folder, index["inputs"], tensorrt_version))
    return [*files, f"{BUNDLE_DIR}/{REFERENCE_DIR}/{REFERENCE_INDEX}"]


def _decoder_entry(signature: DecoderSignature) -> dict[str, Any]:
    return {"input_ids": signature.input_ids, "logits": signature.logits,
            "attention_mask": signature.attention_mask, "position_ids": signature.position_ids,
            "cache": [{"past": entry.past, "present": entry.present, "axis": entry.axis}
                      for entry in signature.cache]}


def write_trtexec_runner(folder: Path, inputs: list[dict[str, Any]], tensorrt_version: str) -> str:
    """run_on_device.sh, for a board without TensorRT's Python bindings: trtexec builds the
    engine as trtexec.sh does, runs it on the reference inputs (--loadInputs, at their shapes)
    and times it, leaving its outputs (--exportOutput), times (--exportTimes) and log for
    `deploycc device import OUTDIR bundle/` to judge on the host."""
    build = json.loads((folder / BUNDLE_FILE).read_text())["trtexec"]
    skip = trtexec_flags(tensorrt_version)["build_only"]
    run = [flag for flag in build[1:] if flag != skip]
    run.append("--loadInputs=" + ",".join(f"{e['name']}:{REFERENCE_DIR}/{e['file']}" for e in inputs))
    shaped = [e for e in inputs if e["shape"]]  # a scalar input has no dims to give
    if shaped:
        run.append("--shapes=" + ",".join(f"{e['name']}:{dims_text(e['shape'])}" for e in shaped))
    run += [f"--exportOutput={TRTEXEC_OUTPUT}", f"--exportTimes={TRTEXEC_TIMES}"]
    script = folder / TRTEXEC_RUNNER
    script.write_text(
        "#!/bin/sh\n# On a board without TensorRT's Python bindings: trtexec builds the engine, runs it on\n"
        "# the reference inputs and times it. Bring this folder back and\n"
        "# `deploycc device import OUTDIR bundle/`.\n"
        "cd \"$(dirname \"$0\")\"\n"
        "TRTEXEC=\"$(command -v trtexec || echo /usr/src/tensorrt/bin/trtexec)\"\n"
        f"\"$TRTEXEC\" {shlex.join(run)} > {TRTEXEC_LOG} 2>&1\n"
        "code=$?\necho \"trtexec exit $code (log: trtexec.log)\"\nexit $code\n")
    script.chmod(0o755)
    return f"{BUNDLE_DIR}/{TRTEXEC_RUNNER}"
