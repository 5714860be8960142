"""What a backend built: the artifact's files and settings, and where each node runs in it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Placement:
    """Where each node runs: the device/provider per node, and the nodes that left the target's."""

    primary: str
    counts: dict[str, int] = field(default_factory=dict)
    fallback: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    method: str = ""


@dataclass
class Artifact:
    kind: str  # ort-optimized-onnx | ort-format | openvino-ir | tensorrt-plan | device-bundle
    files: list[str]  # relative to the output directory; the first is what a runner loads
    pending_on_device: bool = False
    settings: dict[str, Any] = field(default_factory=dict)  # what a reproduction needs
    placement: Placement | None = None
    notes: list[str] = field(default_factory=list)
    # The folder of the artifact that travels to the device (it gets a copy of manifest.json), or
    # None for an artifact used where it was built
    device_folder: str | None = None
