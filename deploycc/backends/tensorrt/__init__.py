"""TensorRT (Jetson targets and x86 GPUs): a real engine where TensorRT is importable, else a
device bundle that builds the same engine on the device."""

from __future__ import annotations

import importlib.util
import platform
from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.backends.base import Artifact, Backend, BackendUnavailable, BuildRequest, Profile, Runner
from deploycc.errors import DynamicShapeError
from deploycc.taxonomy import Precision

if TYPE_CHECKING:
    import numpy as np

    from deploycc.options import BuildOptions
from deploycc.backends.tensorrt import bundle, fingerprint


class TensorRTBackend(Backend):
    kind = "tensorrt"
    # onnx-tensorrt imports a branch through its nodes and the outer scope; branch-local
    # initializers are not something its If importer is known to handle on TensorRT 8.x, where
    # Constant nodes are.
    subgraph_initializers = False
    builds_on_device = True
    fixed_shape_engines = True

    def prepare(self, request: BuildRequest, options: BuildOptions) -> None:
        request.profiles = profiles_for(request.model, options)

    def add_reference(self, artifact: Artifact, outdir: Path, inputs: dict[str, np.ndarray],
                      outputs: dict[str, np.ndarray], precision: Precision, described: str) -> None:
        if artifact.kind != "device-bundle":
            return
        version = str(artifact.settings.get("tensorrt") or "")
        artifact.files += bundle.write_reference(outdir / bundle.BUNDLE_DIR, inputs, outputs, precision,
                                                 version, described)

    def unavailable_reason(self) -> str | None:
        missing = [name for name in ("tensorrt", "cuda") if importlib.util.find_spec(name) is None]
        if missing:
            return (f"{' and '.join('cuda-python' if m == 'cuda' else m for m in missing)} not importable "
                    f"here (pip install 'deploycc[tensorrt]' on a machine with an NVIDIA GPU)")
        return None

    def environment(self) -> dict[str, str]:
        facts = {"machine": platform.machine()}
        l4t = fingerprint.l4t_release()
        if l4t:
            facts["l4t"] = l4t
        if self.unavailable_reason() is None:
            facts.update({k: str(v) for k, v in fingerprint.current().items() if v is not None})
        else:
            facts["tensorrt"] = "not installed"
        return facts

    def build(self, request: BuildRequest) -> Artifact:
        if request.bundle_only or self.unavailable_reason() is not None:
            return bundle.write_bundle(request)
        from deploycc.backends.tensorrt.engine import build_plan

        plan = request.outdir / bundle.PLAN_NAME
        placement, details = build_plan(request, request.model, plan)
        return Artifact(kind="tensorrt-plan", files=[bundle.PLAN_NAME, bundle.PLAN_NAME + ".json"],
                        settings={**bundle.settings(request), **details,
                                  "trtexec": " ".join(bundle.trtexec_command(request))},
                        placement=placement)

    def load(self, artifact: Artifact, outdir: Path, request: BuildRequest) -> Runner:
        reason = self.unavailable_reason()
        if reason is not None:
            raise BackendUnavailable(f"cannot run a TensorRT engine: {reason}")
        from deploycc.backends.tensorrt.engine import TensorRTRunner

        return TensorRTRunner(outdir / artifact.files[0])


def profiles_for(model: Path, options: BuildOptions) -> list[Profile]:
    """TensorRT optimization profiles for every dynamic input of the legalized model."""
    from deploycc import io
    from deploycc.graph.graphs import dims_of

    graph = io.load(model, check=False).model.graph
    profiles = []
    for value in graph.inputs:
        if value.name in graph.initializers:
            continue
        name = value.name or ""
        dims = dims_of(value) or []
        if name in options.shape_ranges:
            profiles.append(Profile(name, *options.shape_ranges[name]))
            continue
        dynamic = [i for i, d in enumerate(dims) if not isinstance(d, int)]
        if not dynamic:
            continue
        if options.batch_range is None or dynamic != [0]:
            raise DynamicShapeError(
                f"input '{name}' has dynamic dims {dims}: TensorRT needs a profile for them",
                hint="give --dynamic-batch MIN:OPT:MAX (batch only) or --shape-range "
                     "NAME:MINxDIMS:OPTxDIMS:MAXxDIMS")
        rest = [int(d) for d in dims[1:]]  # type: ignore[arg-type]
        smallest, typical, largest = options.batch_range
        profiles.append(Profile(name, [smallest, *rest], [typical, *rest], [largest, *rest]))
    return profiles
