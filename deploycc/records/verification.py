"""Whole-model verification's record: each output of the rewritten model compared with the
original's, and what a pass rests on beyond elementwise tolerance."""

from __future__ import annotations

from dataclasses import dataclass, field

from deploycc.taxonomy import Precision

# What generated float inputs hold (verify/inputs.py draws them). Noise first; where the original
# answers noise with nothing (a text detector finds no text in it: PP-OCR's detectors give all
# zeros), an image input is drawn again as a picture: a mosaic of flat 16-pixel tiles (edges
# between regions, as in a photo), then a page of dark words in lines on white. Everything else
# stays noise.
NOISE, MOSAIC, PAGE = "noise", "mosaic", "page"
CONTENTS = (NOISE, MOSAIC, PAGE)
PERTURBATION_ULPS = 16  # internal reorderings move more than one rounding of the input does


@dataclass
class OutputComparison:
    name: str
    shape: list[int]
    dtype: str
    passed: bool
    max_abs_error: float
    max_rel_error: float
    cosine_similarity: float
    required_atol: float  # the smallest atol that passes with rtol = 0
    required_rtol: float  # the smallest rtol that passes with atol = 0 (inf if an expected 0 differs)
    atol: float
    rtol: float
    mismatched: int
    problem: str = ""
    # Why the reference output says nothing ("all within 1e-06 of zero", "constant"): a match
    # there proves little, and reports never call it "ok".
    degenerate: str = ""


@dataclass
class GenerationCheck:
    """A greedy generation with the KV cache, the candidate against the original (a decoder's
    check beyond one forward): the original generates `new_tokens` after a `prompt_tokens` prompt,
    feeding each step's present back as the next step's past; the candidate is run on the same
    tokens with its own cache, and at each position its greedy choice is compared with the
    original's, and its logits at every step with the original's."""

    prompt_tokens: int
    new_tokens: int
    tokens_equal: int  # positions where the candidate's greedy token is the original's
    min_agreement: float  # the share of equal positions the precision's budget asks
    logits: OutputComparison  # every step's last-position logits, stacked [steps, vocab]
    ran_on: str  # the engine, or the model the device builds from on ONNX Runtime (an engine built there)
    passed: bool
    first_difference: int | None = None  # the first position whose token differs
    problem: str = ""

    @property
    def agreement(self) -> float:
        return self.tokens_equal / self.new_tokens if self.new_tokens else 1.0

    def line(self) -> str:
        where = "" if self.first_difference is None else f", first differs at {self.first_difference}"
        return (f"greedy generation ({self.prompt_tokens}-token prompt, {self.new_tokens} new, "
                f"{self.ran_on}): tokens equal {self.tokens_equal}/{self.new_tokens}{where}; logits max abs "
                f"{self.logits.max_abs_error:.2e}, cosine {self.logits.cosine_similarity:.6f}")


@dataclass
class Verification:
    passed: bool
    reference: str
    inputs: str
    precision: Precision  # whose tolerances judged it
    outputs: list[OutputComparison] = field(default_factory=list)
    problem: str = ""
    # The original itself fails on the inputs deploycc drew (a sample rate it checks, a Pad past
    # its bounds): nothing is judged; the user must give inputs the model takes (--inputs).
    needs_inputs: bool = False
    # The dims drawn for each input of the rewritten graph ({} with --inputs), and which of the
    # typical sizes' attempts gave them (0: the typical sizes; then each role's fallbacks).
    shapes: dict[str, list[int]] = field(default_factory=dict)
    attempt: int = 0
    content: str = NOISE  # what the drawn float image inputs held (CONTENTS)
    inputs_file: str = ""  # the inputs it ran on, as an .npz beside the result (build's verify-inputs.npz)
    compared_as_sets: list[str] = field(default_factory=list)  # outputs equal up to the order of rows
    # Outputs the original itself moves beyond tolerance under a rounding-level perturbation of
    # its inputs (selection among near-tied scores): judged against that spread, not elementwise.
    ill_conditioned: list[str] = field(default_factory=list)
    # Outputs the engine computes no further from ORT than the same backend computes the model as
    # exported (its own kernels' rounding, not deploycc's change): "backend (how far)".
    backend_bound: list[str] = field(default_factory=list)
    # Of those, the ones the backend gets wrong as exported beyond its rounding (below the precision's
    # cosine floor: OpenVINO folding a per-position scale into a Conv): its defect, not deploycc's.
    backend_defect: list[str] = field(default_factory=list)
    generation: GenerationCheck | None = None  # a decoder with a KV cache: its greedy generation
    # A quantized decoder (int8, int4) is judged by its generation, not by one forward elementwise:
    # the forward's problem, kept for the reports, where the generation passed
    forward_problem: str = ""

    def caveat(self) -> str:
        """What a pass rests on beyond elementwise tolerance, for the reports ('' when nothing)."""
        parts = []
        uninformative = [o.name for o in self.outputs if o.degenerate]
        if uninformative:
            parts.append(f"{', '.join(uninformative)} not judged: the original's output carries no signal on "
                         f"these inputs ({'; '.join(o.degenerate for o in self.outputs if o.degenerate)})")
        if self.compared_as_sets:
            parts.append(f"{', '.join(self.compared_as_sets)} equal up to the order of rows")
        if self.ill_conditioned:
            parts.append(f"{', '.join(self.ill_conditioned)} ill-conditioned at these inputs (the original "
                         "itself moves beyond tolerance when its inputs move by "
                         f"{PERTURBATION_ULPS} roundings): passed as no further from the reference "
                         "than the original's own worst move")
        rounding = [name for name in self.backend_bound if name not in self.backend_defect]
        if rounding:
            parts.append(f"{', '.join(rounding)} as far from ONNX Runtime as the backend computes "
                         "the model as exported, no further: its own kernels' rounding")
        if self.backend_defect:
            parts.append(f"{', '.join(self.backend_defect)} as wrong as the backend computes the model as "
                         "exported, and no more: a defect of the backend beyond rounding, which no rule "
                         "of this target avoids yet")
        if self.forward_problem:
            parts.append("a quantized decoder, judged by its greedy generation (tokens, and the logits' "
                         f"cosine); one forward on drawn token ids moved further ({self.forward_problem})")
        return "; ".join(parts)
