"""Shape and type inference before judging a model, tolerant of models it cannot fully infer."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx_ir as ir

_PASS_LOGGER = "onnx_ir.passes.common.shape_inference"


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        lines = str(error).strip().splitlines() if error else [record.getMessage()]
        self.messages.append(lines[-1] if lines else "unknown error")


def infer_shapes(model: ir.Model) -> str | None:
    """Run ONNX shape inference in place (onnx-ir strips large initializers meanwhile).

    Strict inference first; when it fails, the failure becomes the returned one-line note and
    a lenient pass infers what it can, so the model is judged on the best types available.
    """
    from onnx_ir.passes.common import ShapeInferencePass

    logger = logging.getLogger(_PASS_LOGGER)
    capture = _Capture()
    logger.addHandler(capture)
    propagate, logger.propagate = logger.propagate, False
    try:
        ShapeInferencePass(strict_mode=True, data_prop=True)(model)
        if not capture.messages:
            return None
        ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(model)
        return f"shape inference failed: {capture.messages[0]}"
    finally:
        logger.removeHandler(capture)
        logger.propagate = propagate


PROTO_INFERENCE_LIMIT = 256 << 20  # above this, infer on the IR with large tensors stripped


def infer_proto(proto: Any) -> tuple[Any, str | None]:
    """ONNX shape inference on a protobuf model we already hold (saves an IR round trip).

    Returns the inferred model and a note when strict inference failed (then the lenient
    result, or the model unchanged when even that failed).
    """
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True,
                                                 data_prop=True), None
    except Exception as error:
        lines = str(error).strip().splitlines()
        note = f"shape inference failed: {lines[-1] if lines else type(error).__name__}"
    try:
        return onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True), note
    except Exception:
        return proto, note
