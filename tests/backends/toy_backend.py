"""A backend written the way a new one is: one module implementing `backends.base.Backend`, and
one line in `targets.schema.BACKENDS` (ENTRY, added at test time). Its engine is ONNX
Runtime's CPU under a kind of its own; everything else (check, legalize, build and verify,
int8, the audit) reaches it through the interface alone.

Run as a script, it is the audit's cell worker with the toy registered (a cell runs in a child
process, which does not inherit a registration made in the test's process).
"""

from __future__ import annotations

import sys
from pathlib import Path

TOY_KIND = "toy"
TOY_TARGET = """
schema = 1
name = "toy-cpu"
description = "a toy backend: ONNX Runtime's CPU under a kind of its own"
mode = "partial"

[backend]
kind = "toy"
version = "0.1"

[device]
kind = "CPU"
name = "any CPU"

[opset]
min = 7
max = 21
preferred = 21

[ops]
table = "ort-cpu-1.32"

[shapes]
policy = "dynamic"
batch = "dynamic"
dims = "dynamic"

[precision]
supported = ["fp32", "int8"]
default = "fp32"
"""

if __name__ == "__main__":  # the audit's worker: the repository on the path, then the registry line
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from deploycc.backends.base import (  # noqa: E402 - after the path above, when run as the worker
    Artifact,
    Backend,
    BackendStages,
    BuildRequest,
    Int8Recipe,
    Placement,
    Quantizer,
    Runner,
)


class ToyBackend(Backend):
    kind = TOY_KIND
    stages = BackendStages(int8=Int8Recipe(Quantizer.ORT_QDQ))  # --precision int8: ORT's Q/DQ, timed here

    def unavailable_reason(self) -> str | None:
        return None

    def environment(self) -> dict[str, str]:
        import onnxruntime

        return {"toy": "0.1", "onnxruntime": onnxruntime.__version__}

    def build(self, request: BuildRequest) -> Artifact:
        """The engine file is the model itself (with its weights file, where it has one)."""
        from deploycc.io import copy_model_file

        engine = copy_model_file(request.model, request.outdir / "model.toy.onnx")[0]
        return Artifact(kind="toy-onnx", files=[engine.name], settings={"precision": request.precision},
                        placement=Placement(primary="CPU", method="everything on the CPU"))

    def load(self, artifact: Artifact, outdir: Path, request: BuildRequest) -> Runner:
        from deploycc.backends.onnxruntime import OrtRunner

        return OrtRunner(outdir / artifact.files[0], ["CPUExecutionProvider"], threads=request.threads or 0)


ENTRY = "tests.backends.toy_backend:ToyBackend"  # its line in targets.schema.BACKENDS: kind -> class


if __name__ == "__main__":
    from deploycc.audit.worker import main
    from deploycc.targets.schema import BACKENDS

    BACKENDS[TOY_KIND] = ENTRY
    main()
