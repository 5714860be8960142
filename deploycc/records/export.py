"""What the PyTorch front end did: each exporter it tried, how the export was proven against torch,
how far its graph got on the target, and which attempt was kept and why."""

from __future__ import annotations

from dataclasses import dataclass, field

from deploycc.records.verification import Verification
from deploycc.results import Result

# Export failure classes, each one line with a hint (frontend/failures.py decides)
UNSUPPORTED_OP = "unsupported-op"  # an aten op the exporter has no translation for
DATA_DEPENDENT = "data-dependent-guard"  # control flow or a shape that depends on the input's values
OPSET_CEILING = "opset-ceiling"  # the op exists in a newer opset than the target's parser reads
TORCH_FAILURE = "torch-failure"  # anything else torch raised
NOT_PROVEN = "not-proven"  # exported, but ONNX Runtime does not compute what torch does


@dataclass
class ExportFailure:
    kind: str
    message: str  # one line
    hint: str = ""
    op: str | None = None  # the aten op, where the exporter named one
    module_path: str | None = None  # where in the module it came from ("backbone.layer1.0")
    needs_opset: int | None = None  # opset-ceiling: the opset that has the op

    def short(self) -> str:
        where = f" (in {self.module_path})" if self.module_path else ""
        return f"{self.kind}: {self.message}{where}"

    def line(self) -> str:
        return f"{self.short()}; {self.hint}" if self.hint else self.short()


@dataclass
class ExportProof:
    """torch against the exported ONNX on ONNX Runtime, at one set of input sizes."""

    shapes: dict[str, list[int]]
    verification: Verification
    why: str  # "the example inputs" | "a second batch size" ...


@dataclass
class ExportAttempt:
    exporter: str
    opset_requested: int
    opset_written: int | None = None
    nodes: int | None = None
    dynamic: dict[str, dict[str, str]] = field(default_factory=dict)  # as written: input -> axis -> dim name
    seconds: float = 0.0
    failure: ExportFailure | None = None
    proofs: list[ExportProof] = field(default_factory=list)
    # after the build: its status and summary (not built when the export failed or was not proven)
    outcome: str | None = None
    summary: str | None = None
    notes: list[str] = field(default_factory=list)
    # a trace: torch's TracerWarnings (file:line: text), and where a value computed from the
    # inputs' data left torch (the path the example took is fixed in the file)
    trace_warnings: list[str] = field(default_factory=list)
    data_guards: list[str] = field(default_factory=list)
    guards_accepted: bool = False  # kept all the same (--accept-trace-warnings)

    @property
    def exported(self) -> bool:
        return self.opset_written is not None


@dataclass
class ExportReport(Result):
    source: str  # what the user gave
    kind: str  # pt2 | torchscript | factory | module
    target: str
    opset_ceiling: int
    order: list[str]  # the target's exporter order
    example_shapes: dict[str, list[int]]
    attempts: list[ExportAttempt] = field(default_factory=list)
    chosen: str | None = None
    reason: str = ""
    # torch against the final artifact (the engine, or the legalized model where the engine is
    # built on the device), on the example inputs
    final: Verification | None = None
    final_against: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # what the front end decided before any export

    @property
    def second_exporter_needed(self) -> bool:
        return len(self.attempts) > 1

    def line(self) -> str:
        if self.chosen is None:
            failed = "; ".join(f"{a.exporter}: {a.failure.short() if a.failure else a.summary}"
                               for a in self.attempts)
            hints = list(dict.fromkeys(a.failure.hint for a in self.attempts if a.failure and a.failure.hint))
            return f"export failed: {failed}" + (f" ({'; '.join(hints)})" if hints else "")
        return f"exported with {self.chosen}: {self.reason}"
