"""deploycc: a target-aware deployment compiler driver for ONNX models.

    import deploycc
    report = deploycc.check("model.onnx", ["jetson-xavier", "openvino-cpu"])
    print(report.exit_code, report.to_json())

Importing deploycc loads no backend (onnxruntime, openvino, tensorrt) and no onnx.
"""

from __future__ import annotations

from deploycc.api import check, get_target, inspect, list_targets
from deploycc.errors import DeployccError

__version__ = "0.1.0"
__all__ = ["DeployccError", "__version__", "check", "get_target", "inspect", "list_targets"]
