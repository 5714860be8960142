"""deploycc: a target-aware deployment compiler driver for ONNX models.

    import deploycc
    report = deploycc.check("model.onnx", ["jetson-xavier", "openvino-cpu"])
    print(report.exit_code, report.to_json())

    report = deploycc.build(module, (example,), target="jetson-xavier")   # from PyTorch

Importing deploycc loads no backend (onnxruntime, openvino, tensorrt) and no onnx.
"""

from __future__ import annotations

from deploycc.api import audit, build, check, get_target, inspect, legalize, list_targets
from deploycc.errors import DeployccError

__version__ = "0.1.0"
__all__ = ["DeployccError", "__version__", "audit", "build", "check", "get_target", "inspect", "legalize",
           "list_targets"]
