"""What a user runs instead of deploycc on this CPU, each with its library's defaults (issue 51's peers).

Each function takes the raw export and a work folder and returns the model file its pipeline hands
over (ONNX for ONNX Runtime, IR for OpenVINO), or None where the pipeline does not apply to the model
(the transformers optimizer on a CNN, a quantizer on a model with no weight it quantizes) or its
library is not installed here; `why_not` says which. The pipelines that need calibration data get
drawn inputs (CALIBRATION_SAMPLES, seeds apart from the timing's and the held-out set's): a user
without data of their own gets at best that, and the held-out cosine says whether it stays in budget.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

CALIBRATION_SAMPLES = 8
CALIBRATION_SEED = 100
VALIDATION_SAMPLES, VALIDATION_SEED = 4, 200  # deploycc's int8 guard judges on these
# The pipelines that take calibration data: compared with deploycc given the same data
TAKES_DATA = ("ORT quantize_static", "NNCF defaults")
# The transformers optimizer's model type by the corpus name's family (its default is "bert");
# a decoder like Llama has no type of its own there and takes gpt2's fusions (its LayerNorm kinds).
OPTIMIZER_TYPES = (("gpt2", "gpt2"), ("llama", "gpt2"), ("vit", "vit"), ("swin", "swin"))


def _hints(model: Path) -> dict:
    return json.loads(model.with_suffix(".hints.json").read_text())


def _calibration(model: Path) -> list[dict]:
    from deploycc.bench.run import bench_feeds

    shapes = _hints(model).get("shapes") or None
    return [bench_feeds(model, None, CALIBRATION_SEED + index, shapes)
            for index in range(CALIBRATION_SAMPLES)]


def write_samples(model: Path, folder: Path) -> tuple[Path, Path]:
    """The calibration samples the peers calibrate on, and VALIDATION_SAMPLES others, as folders of
    .npz files keyed by input name (what `deploycc build --calibration --validation` reads): the
    same data for deploycc as for the peers that take data."""
    import numpy as np

    from deploycc.bench.run import bench_feeds

    calibration, validation = folder / "calibration", folder / "validation"
    for index, sample in enumerate(_calibration(model)):
        calibration.mkdir(parents=True, exist_ok=True)
        np.savez(calibration / f"{index:03d}.npz", **sample)
    shapes = _hints(model).get("shapes") or None
    for index in range(VALIDATION_SAMPLES):
        validation.mkdir(parents=True, exist_ok=True)
        np.savez(validation / f"{index:03d}.npz",
                 **bench_feeds(model, None, VALIDATION_SEED + index, shapes))
    return calibration, validation


def is_transformer(model: Path) -> bool:
    return _hints(model).get("family") == "transformers" or model.stem.startswith(("tv_vit", "tv_swin"))


def onnxslim_then_ort(model: Path, work: Path) -> Path | None:
    if importlib.util.find_spec("onnxslim") is None:
        return None
    import onnxslim

    out = work / "onnxslim.onnx"
    with contextlib.redirect_stdout(io.StringIO()):  # its summary table, per model
        onnxslim.slim(str(model), str(out))
    return out


def transformers_optimizer(model: Path, work: Path) -> Path | None:
    """ORT's transformers optimizer at its defaults (fusions Attention, SkipLayerNormalization,
    BiasGelu...; heads and hidden size found from the graph), on transformers only."""
    if not is_transformer(model):
        return None
    from onnxruntime.transformers.optimizer import optimize_model

    model_type = next((kind for key, kind in OPTIMIZER_TYPES if key in model.stem), "bert")
    logging.disable(logging.WARNING)  # its per-fusion chatter
    try:
        optimized = optimize_model(str(model), model_type=model_type, num_heads=0, hidden_size=0)
    finally:
        logging.disable(logging.NOTSET)
    out = work / "ort-transformers-optimizer.onnx"
    optimized.save_model_to_file(str(out))
    return out


def quantize_static_defaults(model: Path, work: Path) -> Path | None:
    """ORT's quantize_static at its defaults (QDQ, int8 activations and weights, per tensor, MinMax)
    on the CNNs (transformers take quantize_dynamic), calibrated on drawn inputs."""
    if is_transformer(model):
        return None
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    from deploycc.quantize.ort_qdq import quiet

    class Drawn(CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter(_calibration(model))

        def get_next(self) -> dict | None:
            return next(self.samples, None)

    out = work / "quantize-static.onnx"
    with quiet():
        quantize_static(str(model), str(out), Drawn())
    return out


def nncf_defaults(model: Path, work: Path) -> Path | None:
    """NNCF's post-training quantization at its defaults (nncf.quantize, mixed preset) on the
    OpenVINO model the ONNX frontend reads, calibrated on drawn inputs."""
    if importlib.util.find_spec("nncf") is None:
        return None
    import nncf
    import openvino as ov

    from deploycc.quantize.ort_qdq import quiet

    ov_model = ov.Core().read_model(str(model))
    with quiet():
        quantized = nncf.quantize(ov_model, nncf.Dataset(_calibration(model)))
    out = work / "nncf-defaults.xml"
    ov.save_model(quantized, str(out), compress_to_fp16=False)
    return out


def olive_optimize(model: Path, work: Path) -> Path | None:
    """Olive's `olive optimize` at its defaults for the CPU (fp32: its graph passes and ORT's
    transformers optimizer where they match). Its int8 is static quantization calibrated on a
    Hugging Face dataset it downloads (`datasets`), which nothing here may: not run."""
    olive = Path(sys.executable).parent / "olive"
    if not olive.is_file():
        return None
    out = work / "olive"
    subprocess.run([str(olive), "optimize", "-m", str(model), "--device", "cpu", "--provider",
                    "CPUExecutionProvider", "-o", str(out), "--disable_telemetry", "--log_level", "3"],
                   capture_output=True, check=True, timeout=900)
    return out / "model.onnx"


# label -> (pipeline, the engine that runs its file: "ort" or "openvino")
PEERS: dict[str, tuple[Callable[[Path, Path], Path | None], str]] = {
    "onnxslim": (onnxslim_then_ort, "ort"),
    "ORT transformers optimizer": (transformers_optimizer, "ort"),
    "ORT quantize_static": (quantize_static_defaults, "ort"),
    "NNCF defaults": (nncf_defaults, "openvino"),
    "Olive optimize": (olive_optimize, "ort"),
}
