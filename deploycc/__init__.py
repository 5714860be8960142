"""deploycc: a target-aware deployment compiler driver for ONNX models.

    import deploycc
    report = deploycc.check("model.onnx", ["jetson-xavier", "openvino-cpu"])
    print(report.exit_code, report.to_json())

    report = deploycc.build(module, (example,), target="jetson-xavier")   # from PyTorch

Importing deploycc loads no backend (onnxruntime, openvino, tensorrt) and no onnx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deploycc.errors import DeployccError

if TYPE_CHECKING:
    from deploycc.api import audit, bench, build, check, get_target, inspect, legalize, list_targets, probe

__version__ = "0.1.0"
__all__ = ["DeployccError", "__version__", "audit", "bench", "build", "check", "get_target", "inspect",
           "legalize", "list_targets", "probe"]
_API = frozenset(__all__) - {"DeployccError", "__version__"}


def __getattr__(name: str) -> Any:
    """The API's functions, imported on first use: `python -m deploycc.cli` imports this package
    before the command line can take Ctrl-C, so the package itself imports next to nothing."""
    if name in _API:
        from deploycc import api

        return getattr(api, name)
    raise AttributeError(f"module 'deploycc' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The API (imported or not yet), so dir() and help() show what there is."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
