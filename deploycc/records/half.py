"""What the half-precision analysis found and chose: plain data, read back from report.json."""

from __future__ import annotations

from dataclasses import dataclass, field

from deploycc.results import Result
from deploycc.taxonomy import Precision


@dataclass
class FlaggedTensor:
    """A tensor whose values the half type cannot hold: beyond its range (they become inf), or
    all below its smallest normal number (relative rounding beyond the bound, or flushed to 0)."""

    name: str
    node: str  # the node that writes it ("" for a graph input)
    op: str
    why: str  # "beyond range" | "below normal range"
    max_abs: float
    min_abs_nonzero: float

    def __str__(self) -> str:
        where = f"{self.node} ({self.op})" if self.node else "graph input"
        return f"{self.name} from {where}: {self.why}, |x| up to {self.max_abs:.4g}" + \
            (f", smallest nonzero {self.min_abs_nonzero:.3g}" if self.why == BELOW_NORMAL else "")


BEYOND_RANGE = "beyond range"
BELOW_NORMAL = "below normal range"


@dataclass
class HalfPrecisionReport(Result):
    """fp16 (or bf16) on the host: the tensors it cannot hold, the emulated error of the whole
    model in it, and the fewest layers (ONNX nodes) to keep in fp32 so that the error is within
    the precision's tolerance."""

    precision: Precision
    inputs: str  # what the model ran on
    layers: int  # nodes that compute a float tensor: the candidates
    tolerance: Precision = Precision.FP16  # whose tolerances judge it (a quantized model: int8's)
    flagged: list[FlaggedTensor] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # node names kept in fp32, most damaging first
    kept_flops_share: float = 0.0  # of the model's counted FLOPs
    error_all_half: float = 0.0  # worst output's max abs error with every layer in half
    error_with_kept: float = 0.0  # the same with `kept` in fp32
    within_all_half: bool = True
    within_with_kept: bool = True
    runs: int = 0  # emulation runs made
    seconds: float = 0.0
    reason: str = ""  # why nothing, or more than a few layers, is kept; why the analysis stopped

    def line(self) -> str:
        """"fp16: N layers kept in fp32 (X% of FLOPs): names" or why none is."""
        name = self.precision.value
        if self.kept:
            more = len(self.kept) - 8
            names = ", ".join(self.kept[:8]) + (f" and {more} more" if more > 0 else "")
            return (f"{name}: {len(self.kept)} layer(s) kept in fp32 ({100 * self.kept_flops_share:.2f}% of "
                    f"FLOPs): {names}")
        return f"{name}: every layer in {name}" + (f" ({self.reason})" if self.reason else "")

    def errors(self) -> str:
        """The predicted error with and without the kept layers."""
        name = self.precision.value
        all_half = f"predicted max error {self.error_all_half:.3g} all in {name}" + \
            ("" if self.within_all_half else " (beyond tolerance)")
        if not self.kept:
            return all_half
        return all_half + f", {self.error_with_kept:.3g} with the kept layers in fp32" + \
            ("" if self.within_with_kept else " (beyond tolerance)")
