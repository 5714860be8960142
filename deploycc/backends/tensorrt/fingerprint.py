"""What a TensorRT plan is tied to: the TensorRT version, the GPU's compute capability and, on
Jetson, the L4T release. A plan built elsewhere fails to deserialize with a cryptic message (or
worse, loads and runs badly); deploycc compares fingerprints first and says what differs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

TEGRA_RELEASE = Path("/etc/nv_tegra_release")
COMPARED = ("tensorrt", "compute_capability", "l4t")


def l4t_release(path: Path = TEGRA_RELEASE) -> str | None:
    """'35.4.1' from '# R35 (release), REVISION: 4.1, ...' (None off Jetson)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    match = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def current() -> dict[str, Any]:
    """This machine's fingerprint (needs TensorRT and cuda-python)."""
    import tensorrt as trt
    from cuda import cudart

    error, properties = cudart.cudaGetDeviceProperties(0)
    if int(error) != 0:
        raise RuntimeError(f"cudaGetDeviceProperties failed: {error}")
    return {
        "tensorrt": trt.__version__,
        "compute_capability": f"{properties.major}.{properties.minor}",
        "device": properties.name.decode(errors="replace") if isinstance(properties.name, bytes)
        else str(properties.name),
        "l4t": l4t_release(),
    }


def mismatch(stored: dict[str, Any], here: dict[str, Any]) -> str | None:
    """Why a plan with fingerprint `stored` cannot run here, or None when it can."""
    differences = [f"{key} {stored.get(key)} (this machine: {here.get(key)})"
                   for key in COMPARED if stored.get(key) != here.get(key)]
    if not differences:
        return None
    return ("the plan was built for another machine: " + "; ".join(differences)
            + ". Rebuild it here with `deploycc build BUNDLE --engine-only`")
