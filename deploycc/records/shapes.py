"""The shape plan's record: what each input is built for, verified and timed at, and why
(pipeline/shape_policy.py makes it; the reports show it)."""

from __future__ import annotations

from dataclasses import dataclass, field

FLAGS = "--batch N, --dynamic-batch MIN:OPT:MAX, --shape NAME:DIMS, --shape-range NAME:MIN:OPT:MAX"


@dataclass
class ShapeProfile:
    """The min/opt/max dims one input is built for: the one spelling of a shape profile (the shape
    plan's, TensorRT's optimization profiles, ONNX Runtime's TensorRT-provider profiles)."""

    input: str
    min: list[int]
    opt: list[int]
    max: list[int]

    def dims(self, pick: str) -> list[int]:
        """"min", "opt" or "max"."""
        return {"min": self.min, "opt": self.opt, "max": self.max}[pick]


@dataclass
class InputShapes:
    """What one input is built and verified at."""

    input: str
    exported: list[int | str]  # the dims as the model declares them
    accepts: str  # what the engine takes: "1x3x224x224", "Nx3x224x224", "1x3x[112..224..448]x[...]"
    sample: list[int]  # the dims verification draws and bench times
    profile: ShapeProfile | None = None  # where the engine is built for a range of dims
    how: list[str] = field(default_factory=list)  # per dynamic dim: what it is, its size and why


@dataclass
class ShapePlan:
    """Every dynamic input's shapes, for the reports; empty when the model has no dynamic dim."""

    inputs: list[InputShapes] = field(default_factory=list)
    change_with: str = FLAGS
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line for the console: what the engine accepts, per input."""
        return "; ".join(f"{i.input} {i.accepts}" for i in self.inputs)
