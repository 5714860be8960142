"""onnx's converter on If bodies, nested ones too: each body converted, and the values the
conversions add named apart (each conversion counts _v_N from its own graph)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir
import onnxruntime as ort

from deploycc.passes.opset import convert_opset

NESTED_OPSET_11 = """
<ir_version: 7, opset_import: ["" : 11]>
g (bool c, float[2,1,4] x) => (float[2,4] y, float[2,4] m) {
    m = Squeeze<axes=[1]>(x)
    y = If(c) <
        then_branch = t () => (float[2,4] a) { a = Squeeze<axes=[1]>(x) },
        else_branch = e () => (float[2,4] b) {
            b1 = Squeeze<axes=[1]>(x)
            b = If(c) <
                then_branch = t2 () => (float[2,4] q) { q = Squeeze<axes=[1]>(x) },
                else_branch = e2 () => (float[2,4] w) { w = Identity(b1) }
            >
        }
    >
}
"""


def test_nested_bodies_are_converted_and_stay_ssa() -> None:
    original = onnx.parser.parse_model(NESTED_OPSET_11)
    converted = ir.serde.serialize_model(convert_opset(ir.serde.deserialize_model(original), 13))
    onnx.checker.check_model(converted, full_check=True)  # Squeeze-13 takes axes as an input

    def squeezes(graph: onnx.GraphProto) -> list[int]:
        found = [len(n.input) for n in graph.node if n.op_type == "Squeeze"]
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    found += squeezes(attribute.g)
        return found

    assert squeezes(converted.graph) == [2, 2, 2, 2]
    x = np.random.default_rng(11).standard_normal((2, 1, 4)).astype(np.float32)
    for branch in (True, False):
        feeds = {"c": np.array(branch), "x": x}
        want = ort.InferenceSession(original.SerializeToString()).run(None, feeds)
        got = ort.InferenceSession(converted.SerializeToString()).run(None, feeds)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
