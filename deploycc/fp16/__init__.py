"""Half precision without surprises: what fp16 (or bf16) breaks, found on the host, and the fewest
layers to keep in fp32 so that the model stays within the precision's tolerance.

    emulate.py   the model with half emulated between layers, on ORT CPU
    analyze.py   ranges, flagged tensors, the damage of each layer, the search for the fewest kept
    record.py    HalfPrecisionReport: what it found and chose
    recalled.py  analyses already run, by the model's bytes and the inputs (an audit's boards)

Each backend writes the kept layers in its own form (TensorRT's per-layer precision, OpenVINO's
`disable_fp16_compression`, the ORT fp16 converter's block list): `BuildRequest.fp32_layers`.
"""

from deploycc.fp16.analyze import analyze_half
from deploycc.fp16.record import FlaggedTensor, HalfPrecisionReport

HALF = ("fp16", "bf16")  # the precisions the analysis is for

__all__ = ["HALF", "FlaggedTensor", "HalfPrecisionReport", "analyze_half"]
