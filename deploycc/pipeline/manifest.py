"""manifest.json: what makes a build reproducible, and its cache key.

It holds no time and no absolute path, so the same model built twice with the same options on
the same machine gives the same manifest, byte for byte (timings live in report.json). Its
`build_hash` is the sha256 of everything else in it.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from dataclasses import asdict, is_dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deploycc.backends.base import Artifact
    from deploycc.options import BuildOptions
    from deploycc.pipeline.legalize import LegalizeReport
    from deploycc.targets.schema import Target

SCHEMA = 1
PACKAGES = ("deploycc", "onnx", "onnx-ir", "onnxscript", "onnxruntime", "openvino", "tensorrt", "numpy")


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def host() -> dict[str, str]:
    from deploycc.bench.conditions import cpu_model

    return {"system": platform.system(), "machine": platform.machine(), "cpu": cpu_model(),
            "python_implementation": sys.implementation.name}


def _plain(value: Any) -> Any:
    """Options as JSON: dataclasses to dicts, paths to their names (no absolute paths)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return value.name
    return value


def input_files(model: Path) -> list[dict[str, str]]:
    from deploycc import io

    loaded_data = [model.parent / f.location for f in io.peek(model).external_files]
    return [{"name": p.name, "sha256": io.sha256_file(p)} for p in [model, *loaded_data]]


def build_manifest(*, model: Path, target: Target, options: BuildOptions, legalized: LegalizeReport,
                   artifact: Artifact | None, outdir: Path, status: str,
                   environment: dict[str, str]) -> dict[str, Any]:
    from deploycc import io

    outputs = {str(p.relative_to(outdir)): io.sha256_file(p)
               for p in sorted(outdir.rglob("*")) if p.is_file()
               and p.name not in ("manifest.json", "report.json", "report.md")}
    manifest: dict[str, Any] = {
        "schema": SCHEMA,
        "status": status,
        "input": input_files(model),
        "target": {"name": target.name, "jetpack": target.jetpack.release if target.jetpack else None,
                   "spec_hash": target.spec_hash,
                   "spec": {k: v for k, v in target.to_dict().items() if k != "source_file"}},
        "options": _plain(options),
        "precision": options.effective_precision(target),
        "passes": [{"name": p.name, "ran": p.ran} for p in legalized.passes],
        "rewrites": [{"rule": r.rule, "node": r.node} for r in legalized.rewrites],
        "artifact": None if artifact is None else {"kind": artifact.kind, "files": artifact.files,
                                                    "pending_on_device": artifact.pending_on_device,
                                                    "settings": _plain(artifact.settings)},
        "outputs": outputs,
        "versions": versions(),
        "host": host(),
        "device": environment,
    }
    manifest["build_hash"] = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    return manifest
