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

    EXPORT = "export"  # a PyTorch model torch could not export
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
    REGRESSED = "regressed"  # worse than as exported (refused, or not run by the backend): a deploycc bug


# What a process or an exception says when memory ran out, matched without case: MemoryError,
# C++'s std::bad_alloc (ONNX Runtime's session init), ENOMEM ("[Errno 12] Cannot allocate memory",
# glibc's "cannot allocate memory for thread-local data" when a thread starts past the limit).
# numpy's "Unable to allocate 8.00 TiB", ORT's "Failed to allocate memory".
OUT_OF_MEMORY_MARKERS = ("memoryerror", "bad_alloc", "cannot allocate memory", "out of memory",
                         "unable to allocate", "failed to allocate memory")


def says_out_of_memory(text: str) -> bool:
    lowered = text.lower()
    return any(marker in lowered for marker in OUT_OF_MEMORY_MARKERS)


# A node's reason as the failure of the cell it stops: a restriction is an op the target does
# not take in that form; a wrong result is one whose outputs would not match.
FAILURE_OF_REFUSAL: dict[str, Failure] = {
    Refusal.UNSUPPORTED_OP: Failure.UNSUPPORTED_OP, Refusal.OPSET: Failure.OPSET,
    Refusal.DTYPE: Failure.DTYPE, Refusal.DYNAMIC_SHAPE: Failure.DYNAMIC_SHAPE,
    Refusal.RESTRICTION: Failure.UNSUPPORTED_OP,
    Refusal.WRONG_RESULT: Failure.NUMERIC_MISMATCH}


class BuildStatus(Name):
    """How a build ended; a bundled build ends on the board (`deploycc device import`)."""

    VERIFIED = "verified"
    PENDING_ON_DEVICE = "pending-on-device"  # bundled: the engine is built and checked on the board
    FAILED = "failed"
    NEEDS_INPUTS = "needs-inputs"  # the original fails on drawn inputs: nothing was judged
    # The board's run_on_device.py writes these two (it cannot import this module: it runs on the
    # board's own Python; tests/backends/test_device_runner.py holds its spelling to these).
    VERIFIED_ON_DEVICE = "verified-on-device"
    FAILED_ON_DEVICE = "failed-on-device"


ON_DEVICE = (BuildStatus.VERIFIED_ON_DEVICE, BuildStatus.FAILED_ON_DEVICE)


class Stage(Name):
    """How far a build got: the last stage reached, or the one that failed."""

    EXPORT = "export"  # the PyTorch front end's, before any ONNX exists
    LEGALIZE = "legalize"
    QUANTIZE = "quantize"
    BUILD = "build"
    VERIFY = "verify"
    BENCH = "bench"
    DONE = "done"
    # the board's own (run_on_device.py): reading the bundle, and the engine's first run
    READ = "read"
    RUN = "run"
    # an audit cell's own: the check as exported, the child process it ran in, Ray placing it,
    # and its bundle on the board
    CHECK = "check"
    ISOLATION = "isolation"
    SCHEDULE = "schedule"
    DEVICE = "device"


# The stages a board reports in result.json, in the order it goes through them.
DEVICE_STAGES = (Stage.READ, Stage.BUILD, Stage.RUN, Stage.VERIFY, Stage.BENCH, Stage.DONE)

# The engines run_on_device.py takes (`--engine`): the board's own first (its default), then
# ONNX Runtime standing in for it on any host. tests/backends/test_device_runner.py holds these
# to the runner's own; device/ re-exports them.
RUNNER_ENGINES = ("tensorrt", "onnxruntime", "onnxruntime-gpu")
BOARD_ENGINE = RUNNER_ENGINES[0]
GPU_ENGINE = RUNNER_ENGINES[2]  # onnxruntime-gpu on an ort-cuda or ort-trt bundle: the real engine there


class Precision(Name):
    """The numeric precision an engine is built in (a target lists those it takes)."""

    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"
    FP8 = "fp8"
    INT4 = "int4"
    INT8_WEIGHTS = "int8-weights"  # weight-only: the MatMul weights in int8, the activations in float


# The integer precisions: engines whose float original says nothing of their rounding (a quantized
# decoder is judged by its greedy generation, not by one forward element by element)
QUANTIZED = (Precision.INT8, Precision.INT4, Precision.INT8_WEIGHTS)
# Weight-only quantization (no calibration data): the bits each keeps of a MatMul weight
WEIGHT_ONLY_BITS: dict[Precision, int] = {Precision.INT4: 4, Precision.INT8_WEIGHTS: 8}


class CandidateOutcome(Name):
    """What `--precision auto` made of one precision it tried."""

    CHOSEN = "chosen"
    BASELINE = "baseline"  # fp32: what the others are timed against, kept when none is faster
    NOT_FASTER = "not faster"  # within budget, but its interval does not lie below the baseline's
    OVER_BUDGET = "over budget"  # its verification failed, or its cosine is below the budget's
    FAILED = "failed"  # the engine did not build, load or run
    NOT_MEASURED = "not measured"  # the target runs elsewhere: chosen from its data


class SafetyStep(Name):
    """A step that guards what deploycc says of a model: skipped, it is never silent (a warning
    line, the report's `skipped_steps`, and with `--strict` exit 1)."""

    FP16_ANALYSIS = "fp16-analysis"  # what half breaks, and the layers kept in fp32
    BF16_ANALYSIS = "bf16-analysis"
    INT8_GUARD = "int8-guard"  # the int8 model judged on the validation samples
    VERIFICATION = "verification"  # the engine (or the device's reference) against the original

    @classmethod
    def half_analysis(cls, precision: Precision) -> SafetyStep:
        return cls.BF16_ANALYSIS if precision == Precision.BF16 else cls.FP16_ANALYSIS


class Legality(Name):
    """A node's verdict on a target, the MLIR way: legal, illegal, or legal only under a named
    condition (a vendor restriction checked by a predicate, a function body the runtime expands,
    vendor data marked uncertain)."""

    LEGAL = "legal"
    CONDITIONAL = "conditional"
    ILLEGAL = "illegal"


class Severity(Name):
    """A finding on the whole graph: it makes the model illegal, or it is worth a note."""

    ILLEGAL = "illegal"
    NOTE = "note"


class Condition(Name):
    """Conditions deploycc acts on, not only reports (each has its sentence in the verdict)."""

    # A function op the target has no kernel for, legal because the runtime expands its ONNX
    # function body; legalize expands such bodies itself where the runtime's onnx may not know it.
    RUNTIME_EXPANDS = "runtime-expands"


class ProofStatus(Name):
    """A rewrite's proof on ONNX Runtime."""

    PROVEN = "proven"
    FAILED = "failed"
    UNPROVEN = "unproven"


class Failed(Name):
    """Where a runtime failed a model (RunError.stage, BackendError.stage): what the failure says
    of the model. A refusal of the inputs it was given is not a numeric mismatch, and a crash of
    the runtime's process says nothing of the model's validity."""

    BUILD = "build"  # the engine could not be built
    LOAD = "load"  # the model (or the built engine) could not be loaded
    RUN = "run"  # loaded, and failed on the inputs it was given
    CRASH = "crash"  # the runtime's process died or hung


class CaseOutcome(Name):
    """One ONNX conformance case on a backend (`deploycc probe`): as its expected outputs say, or not."""

    PASS = "pass"
    MISMATCH = "mismatch"  # ran, and its outputs differ beyond the probe's tolerances
    REFUSED = "refused"  # the backend said it does not take the model
    ERROR = "error"  # the backend failed otherwise, or the harness could not read its outputs
    CRASH = "crash"  # the backend's process died or hung


class LegalizeMode(Name):
    """How legalization ends when a node stays illegal (`--mode`, a target's `mode`)."""

    FULL = "full"  # every node legal, else the legalization fails
    PARTIAL = "partial"  # illegal nodes kept, for another runtime or the host to run
    PARTITION = "partition"  # partial, then cut into device and host segments (build --partition)
