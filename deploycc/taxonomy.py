"""Every status and category deploycc reports, spelled once. The values are what reports and
JSON carry (and what older audit stores hold): a member equals its string, so records read
back from JSON compare equal to the members."""

from __future__ import annotations

from enum import Enum


class Name(str, Enum):
    """A string-valued member that prints and serializes as its value."""

    def __str__(self) -> str:
        return str(self.value)


class Refusal(Name):
    """Why `check` calls a node illegal (or what it is conditional on)."""

    UNSUPPORTED_OP = "unsupported-op"
    OPSET = "opset"
    DTYPE = "dtype"
    DYNAMIC_SHAPE = "dynamic-shape"
    RESTRICTION = "restriction"
    WRONG_RESULT = "wrong-result"  # the backend converts the node and computes otherwise (probed)


class CellStatus(Name):
    """How far an audit cell got."""

    LEGAL_AS_EXPORTED = "legal-as-exported"
    LEGALIZED = "legalized"
    BUILT = "built"
    VERIFIED = "verified"
    BENCHMARKED = "benchmarked"
    FAILED = "failed"
    HOST_SEGMENTS = "host-segments"  # refused whole, deployable with host segments (--partition)


class Failure(Name):
    """Why an audit cell failed."""

    UNSUPPORTED_OP = "unsupported-op"
    OPSET = "opset"
    DTYPE = "dtype"
    DYNAMIC_SHAPE = "dynamic-shape"
    NUMERIC_MISMATCH = "numeric-mismatch"
    NEEDS_INPUTS = "needs-inputs"  # the original fails on drawn inputs (give --inputs), or no int8 samples
    PRECISION = "precision"  # the target has no such precision (int8 on the Jetson Nano)
    BACKEND_ERROR = "backend-error"
    BACKEND_CRASH = "backend-crash"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out-of-memory"
    INVALID_MODEL = "invalid-model"
    UNSCHEDULABLE = "unschedulable"
    REGRESSED = "regressed"  # legal as exported yet refused after deploycc: always a deploycc bug


# A node's reason as the failure of the cell it stops: a restriction is an op the target does
# not take in that form; a wrong result is one whose outputs would not match.
FAILURE_OF_REFUSAL: dict[str, Failure] = {
    Refusal.UNSUPPORTED_OP: Failure.UNSUPPORTED_OP, Refusal.OPSET: Failure.OPSET,
    Refusal.DTYPE: Failure.DTYPE, Refusal.DYNAMIC_SHAPE: Failure.DYNAMIC_SHAPE,
    Refusal.RESTRICTION: Failure.UNSUPPORTED_OP,
    Refusal.WRONG_RESULT: Failure.NUMERIC_MISMATCH}


class BuildStatus(Name):
    """How a build ended."""

    VERIFIED = "verified"
    PENDING_ON_DEVICE = "pending-on-device"  # bundled: the engine is built and checked on the board
    FAILED = "failed"
    NEEDS_INPUTS = "needs-inputs"  # the original fails on drawn inputs: nothing was judged


class ProofStatus(Name):
    """A rewrite's proof on ONNX Runtime."""

    PROVEN = "proven"
    FAILED = "failed"
    UNPROVEN = "unproven"
