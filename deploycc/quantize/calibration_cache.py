"""TensorRT's own INT8 calibration cache, computed here on the CPU from the calibration samples.

TensorRT's implicit quantization (the only INT8 the DLA runs) reads each tensor's scale from the
cache its calibrator wrote: a header `TRT-<version>-EntropyCalibration2`, then one line per
tensor, `name: <hex>`, where hex is the IEEE-754 float32 bits of the scale (amax / 127), written
big-endian as TensorRT's calibrator writes them. The version number is TensorRT's
getInferLibVersion() (8.5.2 is 8502; from 10.0, 10.0.1 is 100001). The scales come from ONNX
Runtime's entropy calibrator (the same KL-divergence search as TensorRT's EntropyCalibration2)
over the fp32 model's activations, and from the samples themselves for the network inputs.
"""

from __future__ import annotations

import re
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from deploycc.quantize.data import Sample

ALGORITHM = "EntropyCalibration2"
_LINE = re.compile(r"^(?P<name>.+): (?P<hex>[0-9a-fA-F]{1,8})$")


def version_number(version: str) -> int:
    """TensorRT's integer version (NV_TENSORRT_VERSION) from "8.5.2" or "10.0.1"."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]] + [0, 0, 0]
    major, minor, patch = parts[:3]
    return major * (10_000 if major >= 10 else 1_000) + minor * 100 + patch


def encode_scale(scale: float) -> str:
    return struct.pack(">f", scale).hex()


def decode_scale(text: str) -> float:
    return struct.unpack(">f", bytes.fromhex(text.rjust(8, "0")))[0]


def write_cache(path: Path, scales: dict[str, float], tensorrt_version: str) -> None:
    lines = [f"TRT-{version_number(tensorrt_version)}-{ALGORITHM}"]
    lines += [f"{name}: {encode_scale(scale)}" for name, scale in sorted(scales.items())]
    path.write_text("\n".join(lines) + "\n")


def read_cache(path: Path) -> tuple[str, dict[str, float]]:
    """(header, {tensor: scale}); a line that is not `name: hex` is an error."""
    lines = path.read_text().splitlines()
    if not lines or not re.fullmatch(r"TRT-\d+-\w+", lines[0]):
        raise ValueError(f"{path}: not a TensorRT calibration cache (header {lines[0] if lines else ''!r})")
    scales = {}
    for number, line in enumerate(lines[1:], start=2):
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"{path}:{number}: not `tensor: hex` ({line!r})")
        scales[match["name"]] = decode_scale(match["hex"])
    return lines[0], scales


def entropy_scales(model: Path, samples: Sequence[Sample], inputs: Sequence[str]) -> dict[str, float]:
    """amax/127 per float tensor of the fp32 model: network inputs from the samples, every node
    output from ONNX Runtime's entropy calibrator."""
    from onnxruntime.quantization import CalibrationMethod, create_calibrator

    from deploycc.quantize.ort_qdq import SampleReader, quiet

    scales: dict[str, float] = {}
    for name in inputs:
        values = [np.asarray(sample[name]) for sample in samples]
        if values and values[0].dtype.kind == "f":
            scales[name] = max(float(np.max(np.abs(v))) for v in values) / 127.0
    with tempfile.TemporaryDirectory(prefix="deploycc-trt-calib-") as folder:
        calibrator = create_calibrator(model, None, augmented_model_path=str(Path(folder) / "augmented.onnx"),
                                       calibrate_method=CalibrationMethod.Entropy,
                                       extra_options={"symmetric": True})
        with quiet():  # it prints its histogram search
            calibrator.collect_data(SampleReader(samples, inputs))
            ranges = calibrator.compute_data()
    for name, data in ranges.data.items():
        amax = max((float(np.max(np.abs(np.asarray(v)))) for v in data.range_value if np.asarray(v).size),
                   default=0.0)
        if amax > 0 and np.isfinite(amax):
            scales[name] = amax / 127.0
    return scales
