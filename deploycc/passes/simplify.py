"""An optional extra pass for users who trust onnxsim (`--simplifier onnxsim`).

onnxsim runs in a child process on a copy of the model, so its memory use (it loads every
weight, and more) cannot take the pipeline down; deploycc's loader validates what it returns,
and the pipeline's signature and numeric checks apply to it like to any other pass.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from deploycc.errors import DeployccError, OptionError
from deploycc.graph.graphs import content
from deploycc.options import LegalizeOptions
from deploycc.passes.base import Pass, PassOutcome, PipelineState

SIMPLIFIERS = ("onnxsim",)
TIMEOUT_SECONDS = 1800
_CHILD = """
import sys, onnx, onnxsim
model = onnx.load(sys.argv[1])
simplified, ok = onnxsim.simplify(model)
if not ok:
    sys.exit("onnxsim could not validate its result")
onnx.save(simplified, sys.argv[2], save_as_external_data=simplified.ByteSize() > 1_900_000_000)
"""


class SimplifierError(DeployccError):
    exit_code = 1


class SimplifyPass(Pass):
    name = "simplify"
    summary = "optional: run onnxsim in a child process (--simplifier onnxsim)"
    optional = True
    in_place = False  # the model is the one onnxsim's child process wrote

    def wanted(self, options: LegalizeOptions) -> bool:
        return options.simplifier is not None

    def run(self, state: PipelineState) -> PassOutcome:
        from deploycc import io

        tool = state.options.simplifier
        if tool not in SIMPLIFIERS:
            raise OptionError(f"unknown simplifier {tool!r}", hint=f"choose from {', '.join(SIMPLIFIERS)}")
        if importlib.util.find_spec("onnxsim") is None:
            raise OptionError("--simplifier onnxsim needs onnxsim, which is not installed",
                              hint="pip install 'deploycc[onnxsim]'")
        with tempfile.TemporaryDirectory(prefix="deploycc-onnxsim-") as folder:
            source, result = Path(folder) / "in.onnx", Path(folder) / "out.onnx"
            io.save(state.model, source)
            try:
                child = subprocess.run([sys.executable, "-c", _CHILD, str(source), str(result)],
                                       capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                raise SimplifierError(f"onnxsim did not finish in {TIMEOUT_SECONDS} s") from None
            if child.returncode != 0:
                lines = (child.stderr or child.stdout or "").strip().splitlines()
                raise SimplifierError(f"onnxsim failed (exit {child.returncode}): "
                                      f"{lines[-1] if lines else 'no message'}")
            loaded = io.load(result)
            # Keep the weights in memory: the temporary folder goes away with this block.
            for value in loaded.model.graph.initializers.values():
                if value.const_value is not None:
                    import onnx_ir as ir

                    value.const_value = ir.tensor(value.const_value.numpy(), name=value.const_value.name)
        before, held = len(state.model.graph), content(state.model)
        state.model = loaded.model
        from deploycc.graph.shapes import infer_shapes

        infer_shapes(state.model)
        return PassOutcome(content(state.model) != held,
                           [f"onnxsim: {before} -> {len(state.model.graph)} nodes"])
