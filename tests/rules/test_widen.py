"""compute-wider: a node run in a wider type between Casts, where the target lacks the narrow kernel."""

from __future__ import annotations

import numpy as np
import pytest

from tests.rules.helpers import declines, load, rewrite_and_compare


@pytest.mark.parametrize("op", ["Add", "Mul", "Div"])
def test_bfloat16_arithmetic_runs_in_float32(op: str) -> None:
    # float in and out, so both graphs can be fed and compared; the bfloat16 node is the rewritten one
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 21]>
        g (float[3,8] a, float[3,8] b) => (float[3,8] y) {{
            a16 = Cast <to=16> (a)
            b16 = Cast <to=16> (b)
            s = {op} (a16, b16)
            y = Cast <to=1> (s)
        }}
    """, op, "compute-wider", atol=0, rtol=0)  # each op rounds to bfloat16 exactly as a bf16 kernel


@pytest.mark.parametrize("dtype", ["int16", "uint16", "int8"])
def test_small_integer_max_runs_in_int32(dtype: str) -> None:
    info = np.iinfo(np.dtype(dtype))
    x = np.array([info.min, -1 if info.min else 0, 7, info.max], dtype=dtype)
    y = np.array([info.max, 0, 7, info.min], dtype=dtype)
    rewrite_and_compare(f"""
        <ir_version: 10, opset_import: ["" : 13]>
        g ({dtype}[4] x, {dtype}[4] y) => ({dtype}[4] z) {{ z = Max (x, y) }}
    """, "Max", "compute-wider", feeds={"x": x, "y": y}, seeds=(1,), atol=0, rtol=0)


def test_integer_arithmetic_is_not_widened() -> None:
    # int8 Add wraps; in int32 it would not: the rule must leave it alone
    declines("""
        <ir_version: 10, opset_import: ["" : 14]>
        g (int8[4] x, int8[4] y) => (int8[4] z) { z = Add (x, y) }
    """, "Add", "no input is of a type this rule widens")


def test_declines_when_the_target_lacks_the_wider_op_too() -> None:
    from deploycc.graph.graphs import opset_map
    from deploycc.rules.engine import decide

    model = load("""
        <ir_version: 10, opset_import: ["" : 21]>
        g (bfloat16[4] x) => (bfloat16[4] y) { y = Neg (x) }
    """)
    node = next(iter(model.graph))
    decision = decide(node, model.graph, opset_map(model), accepts=lambda candidate: False)
    assert decision.rewrite is None
    assert any("lacks Neg in the wider type too" in why for _, why in decision.declined), decision.declined


def test_booleans_move_as_int32() -> None:
    """A causal-mask buffer gathered by position ids (BERT, GPT-2 exports) on a target that
    gathers only numbers; the rewrite is exact."""
    from deploycc.graph.graphs import opset_map
    from deploycc.rules.engine import decide
    from deploycc.verify.runner import run_ort, serialize

    model = load("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (bool[6,6] mask, int64[3] rows) => (bool[3,6] y) { y = Gather<axis=0>(mask, rows) }
    """)
    before = serialize(model)
    node = next(iter(model.graph))
    decision = decide(node, model.graph, opset_map(model),
                      accepts=lambda candidate: candidate.op_type != "Gather" or
                      candidate.inputs[0].dtype.name != "BOOL")
    assert decision.rewrite is not None and decision.rewrite.rule == "compute-wider", decision.explain()
    feeds = {"mask": np.tril(np.ones((6, 6), bool)), "rows": np.array([5, 0, 2], np.int64)}
    np.testing.assert_array_equal(run_ort(serialize(model), feeds)["y"], run_ort(before, feeds)["y"])


def test_integer_cumsum_runs_in_float() -> None:
    """RoBERTa's position ids: a running count of the attention mask, on a target whose CumSum is
    float only."""
    from deploycc.graph.graphs import opset_map
    from deploycc.rules.engine import decide
    from deploycc.verify.runner import run_ort, serialize

    model = load("""
        <ir_version: 10, opset_import: ["" : 13]>
        g (int64[2,9] mask) => (int64[2,9] y) <int64 axis = {1}> { y = CumSum(mask, axis) }
    """)
    before = serialize(model)
    node = next(iter(model.graph))
    decision = decide(node, model.graph, opset_map(model),
                      accepts=lambda candidate: candidate.inputs[0].dtype.name == "FLOAT")
    assert decision.rewrite is not None and decision.rewrite.rule == "compute-wider", decision.explain()
    feeds = {"mask": np.random.default_rng(0).integers(0, 2, (2, 9)).astype(np.int64)}
    np.testing.assert_array_equal(run_ort(serialize(model), feeds)["y"], run_ort(before, feeds)["y"])


CLIP_END_OF_TEXT = """
    <ir_version: 10, opset_import: ["" : 17]>
    g (int64[2,7] text, float[50,4] table) => (float[2,7,4] embedded, int64[2] last) {
        embedded = Gather <axis = 0> (table, text)
        last = ArgMax <axis = 1, keepdims = 0> (text)
    }
"""


def test_integer_argmax_runs_in_float_where_a_gather_bounds_its_values() -> None:
    """CLIP's text tower: the end-of-text token is the largest token id (ArgMax on int64), on a target
    whose ArgMax is float only (TensorRT 8.5). The ids also index the embedding table, so each is
    below its 50 rows, exact in float32."""
    from deploycc.graph.graphs import opset_map
    from deploycc.rules.engine import decide
    from deploycc.verify.runner import run_ort, serialize

    model = load(CLIP_END_OF_TEXT)
    before = serialize(model)
    node = next(n for n in model.graph if n.op_type == "ArgMax")
    decision = decide(node, model.graph, opset_map(model),
                      accepts=lambda candidate: candidate.op_type != "ArgMax"
                      or candidate.inputs[0].dtype.name == "FLOAT")
    assert decision.rewrite is not None and decision.rewrite.rule == "compute-wider", decision.explain()
    rng = np.random.default_rng(0)
    text = rng.integers(0, 50, (2, 7)).astype(np.int64)
    text[0, 2] = text[0, 5] = 49  # a tie: the first index wins in both
    feeds = {"text": text, "table": rng.standard_normal((50, 4)).astype(np.float32)}
    after = run_ort(serialize(model), feeds)
    np.testing.assert_array_equal(after["last"], run_ort(before, feeds)["last"])
    assert after["last"][0] == 2


def test_integer_argmax_stays_where_nothing_bounds_its_values() -> None:
    """Without the Gather nothing says the values fit float32 (2**24 + 1 rounds to 2**24): declined."""
    from deploycc.graph.graphs import opset_map
    from deploycc.rules.engine import decide

    model = load("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (int64[2,7] text) => (int64[2] last) { last = ArgMax <axis = 1, keepdims = 0> (text) }
    """)
    node = next(iter(model.graph))
    decision = decide(node, model.graph, opset_map(model),
                      accepts=lambda candidate: candidate.inputs[0].dtype.name == "FLOAT")
    assert decision.rewrite is None or decision.rewrite.rule != "compute-wider", decision.explain()
