"""com.microsoft contrib ops into standard ONNX, checked against ORT's contrib kernels."""

from __future__ import annotations

import numpy as np
import pytest

from tests.rules.helpers import declines, rewrite_and_compare, rewritten_by

HEADER = '<ir_version: 10, opset_import: ["" : 17, "com.microsoft" : 1]>'


def _weights(rows: int, cols: int, step: int) -> str:
    """A weight tensor's values for the graph text: varied, not random, within [-0.5, 0.5]."""
    return ", ".join(str(((i * step) % 17) / 16 - 0.5) for i in range(rows * cols))


@pytest.mark.parametrize(("call", "inputs", "rule"), [
    ("Gelu", "x", "ms-gelu"),
    ("BiasGelu", "x, b", "ms-bias-gelu"),
    ("FastGelu", "x, b", "ms-fast-gelu"),
    ("FastGelu", "x", "ms-fast-gelu"),
    ("QuickGelu<alpha=1.5>", "x", "ms-quick-gelu"),
])
def test_gelu_family(call: str, inputs: str, rule: str) -> None:
    op = call.split("<")[0]
    rewrite_and_compare(f"""
        {HEADER}
        g (float[2,3,8] x, float[8] b) => (float[2,3,8] y) {{ y = com.microsoft.{call}({inputs}) }}
    """, op, rule, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("attributes", [
    'activation="Relu"', 'activation="LeakyRelu", activation_params=[0.1]',
    'activation="Sigmoid"', 'activation="Tanh"',
])
def test_fused_conv(attributes: str) -> None:
    rewrite_and_compare(f"""
        {HEADER}
        g (float[1,2,5,5] x, float[3,2,3,3] w, float[3] b, float[1,3,3,3] z) => (float[1,3,3,3] y) {{
            y = com.microsoft.FusedConv<{attributes}>(x, w, b, z)
        }}
    """, "FusedConv", "ms-fused-conv", atol=1e-4, rtol=1e-3)


def test_skip_layer_normalization_with_sum_output() -> None:
    rewrite_and_compare(f"""
        {HEADER}
        g (float[2,3,8] x, float[2,3,8] skip, float[8] gamma, float[8] beta, float[8] bias)
          => (float[2,3,8] y, float[2,3,8] total) {{
            y, m, v, total = com.microsoft.SkipLayerNormalization<epsilon=1e-5>(x, skip, gamma, beta, bias)
        }}
    """, "SkipLayerNormalization", "ms-skip-layer-normalization", atol=1e-4, rtol=1e-3)


def test_skip_simplified_layer_normalization() -> None:
    rewrite_and_compare(f"""
        {HEADER}
        g (float[2,3,8] x, float[2,3,8] skip, float[8] gamma) => (float[2,3,8] y) {{
            y = com.microsoft.SkipSimplifiedLayerNormalization<epsilon=1e-5>(x, skip, gamma)
        }}
    """, "SkipSimplifiedLayerNormalization", "ms-skip-simplified-layer-normalization", atol=1e-4, rtol=1e-3)


def test_unknown_fused_activation_is_declined() -> None:
    declines(f"""
        {HEADER}
        g (float[1,2,5,5] x, float[3,2,3,3] w) => (float[1,3,3,3] y) {{
            y = com.microsoft.FusedConv<activation="Swish">(x, w)
        }}
    """, "FusedConv", "Swish")


def test_simplified_layer_normalization() -> None:
    rewrite_and_compare("""
        <ir_version: 10, opset_import: ["" : 17]>
        g (float[2,3,8] x, float[8] gamma) => (float[2,3,8] y) {
            y = SimplifiedLayerNormalization<epsilon=1e-5, axis=-1>(x, gamma)
        }
    """, "SimplifiedLayerNormalization", "ms-simplified-layer-normalization", atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize(("signature", "call"), [
    # BERT as ORT's optimizer fuses it: segments, a mask, and every output
    ("int32[2,5] ids, int32[2,5] seg, int32[2,5] mask",
     "(ids, seg, words, positions, segments, gamma, beta, mask)"),
    # DistilBERT: no segments, no mask; positions given as one row for the batch
    ("int32[2,5] ids, int32[1,5] pos", '(ids, "", words, positions, "", gamma, beta, "", pos)'),
])
def test_embed_layer_normalization(signature: str, call: str) -> None:
    rewrite_and_compare(f"""
        {HEADER}
        g ({signature}) => (float[2,5,8] y, int32[2] mask_index, float[2,5,8] total) {{
            words = Constant<value = float[11,8] {{{_weights(11, 8, 7)}}}>()
            positions = Constant<value = float[6,8] {{{_weights(6, 8, 5)}}}>()
            segments = Constant<value = float[2,8] {{{_weights(2, 8, 3)}}}>()
            gamma = Constant<value = float[8] {{1.0, 0.5, 2.0, 1.5, 1.0, 0.25, 1.0, 3.0}}>()
            beta = Constant<value = float[8] {{0.0, 0.1, -0.1, 0.2, 0.0, 0.3, -0.2, 0.0}}>()
            y, mask_index, total = com.microsoft.EmbedLayerNormalization<epsilon=1e-5>{call}
        }}
    """, "EmbedLayerNormalization", "ms-embed-layer-normalization", atol=1e-4, rtol=1e-3,
        feeds={"ids": np.array([[1, 4, 10, 0, 3], [7, 7, 2, 9, 5]], np.int32),
               "seg": np.array([[0, 0, 1, 1, 1], [0, 1, 0, 1, 0]], np.int32),
               "mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32),
               "pos": np.array([[0, 2, 1, 4, 5]], np.int32)} if "seg" in signature else
        {"ids": np.array([[1, 4, 10, 0, 3], [7, 7, 2, 9, 5]], np.int32),
         "pos": np.array([[0, 2, 1, 4, 5]], np.int32)})



@pytest.mark.parametrize(("mask_type", "mask_arg", "mask"), [
    ("int32[2] mask", "mask", np.array([3, 5], np.int32)),  # key lengths, as EmbedLayerNormalization writes
    ("int32[2,5] mask", "mask", np.array([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]], np.int32)),  # 0/1 per key
    ("int32[2,5,5] mask", "mask", (np.arange(50).reshape(2, 5, 5) % 3 > 0).astype(np.int32)),
    ("", '""', None),
])
def test_ms_attention(mask_type: str, mask_arg: str, mask: np.ndarray | None) -> None:
    inputs = "float[2,5,8] x" + (f", {mask_type}" if mask_type else "")
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 5, 8)).astype(np.float32)}
    if mask is not None:
        feeds["mask"] = mask
    rewrite_and_compare(f"""
        {HEADER}
        g ({inputs}) => (float[2,5,8] y) {{
            w = Constant<value = float[8,24] {{{_weights(8, 24, 5)}}}>()
            b = Constant<value = float[24] {{{_weights(1, 24, 3)}}}>()
            y = com.microsoft.Attention<num_heads=2>(x, w, b, {mask_arg})
        }}
    """, "Attention", "ms-attention", atol=1e-4, rtol=1e-3, feeds=feeds)


def test_causal_ms_attention_is_declined() -> None:
    declines(f"""
        {HEADER}
        g (float[2,5,8] x, float[8,24] w) => (float[2,5,8] y) {{
            y = com.microsoft.Attention<num_heads=2, unidirectional=1>(x, w)
        }}
    """, "Attention", "unidirectional")


def test_ort_optimized_bert_is_legal_on_tensorrt_after_deploycc(tmp_path) -> None:
    """The graph ORT's transformer optimizer makes of a BERT layer: EmbedLayerNormalization feeding
    its mask's lengths to Attention, then SkipLayerNormalization and BiasGelu, all contrib ops no
    TensorRT parser reads; legalized for the Jetson Xavier and verified against ORT's kernels."""
    from deploycc import api

    hidden, ffn = 8, 16
    text = f"""
        {HEADER}
        g (int32[batch,seq] ids, int32[batch,seq] seg, int32[batch,seq] attention_mask)
            => (float[batch,seq,8] y) {{
            words = Constant<value = float[30,8] {{{_weights(30, hidden, 7)}}}>()
            positions = Constant<value = float[16,8] {{{_weights(16, hidden, 5)}}}>()
            segments = Constant<value = float[2,8] {{{_weights(2, hidden, 3)}}}>()
            gamma = Constant<value = float[8] {{{_weights(1, hidden, 9)}}}>()
            beta = Constant<value = float[8] {{{_weights(1, hidden, 11)}}}>()
            qkv = Constant<value = float[8,24] {{{_weights(hidden, 24, 5)}}}>()
            qkv_bias = Constant<value = float[24] {{{_weights(1, 24, 3)}}}>()
            proj = Constant<value = float[8,8] {{{_weights(hidden, hidden, 13)}}}>()
            up = Constant<value = float[8,16] {{{_weights(hidden, ffn, 7)}}}>()
            up_bias = Constant<value = float[16] {{{_weights(1, ffn, 5)}}}>()
            down = Constant<value = float[16,8] {{{_weights(ffn, hidden, 3)}}}>()
            embedded, lengths = com.microsoft.EmbedLayerNormalization<epsilon=1e-12>(
                ids, seg, words, positions, segments, gamma, beta, attention_mask)
            attended = com.microsoft.Attention<num_heads=2>(embedded, qkv, qkv_bias, lengths)
            projected = MatMul(attended, proj)
            normed = com.microsoft.SkipLayerNormalization<epsilon=1e-12>(projected, embedded, gamma, beta)
            raised = MatMul(normed, up)
            activated = com.microsoft.BiasGelu(raised, up_bias)
            lowered = MatMul(activated, down)
            y = com.microsoft.SkipLayerNormalization<epsilon=1e-12>(lowered, normed, gamma, beta)
        }}
    """
    import onnx

    path = tmp_path / "bert_ort_optimized.onnx"
    onnx.save(onnx.parser.parse_model(text), path)
    np.savez(tmp_path / "inputs.npz", ids=np.array([[2, 9, 17, 4, 0, 0], [5, 29, 1, 8, 3, 12]], np.int32),
             seg=np.array([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]], np.int32),
             attention_mask=np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.int32))
    before = api.check(str(path), targets=["jetson-xavier"])
    assert before.exit_code == 1
    from deploycc.options import LegalizeOptions

    report = api.legalize(str(path), "jetson-xavier", tmp_path / "out.onnx",
                          LegalizeOptions(inputs=tmp_path / "inputs.npz"))
    assert report.success, report.summary
    assert {r.rule for r in report.rewrites} >= {"ms-embed-layer-normalization", "ms-attention",
                                                 "ms-skip-layer-normalization", "ms-bias-gelu"}
    assert report.verification is not None and report.verification.passed


def _quantized_lstm(folder, direction: str = "bidirectional"):
    """A float LSTM model, and the same after ORT's quantize_dynamic (DynamicQuantizeLSTM): how the
    op reaches users (ddddocr's OCR model, voice models in PyPI wheels)."""
    import onnx
    from onnx import TensorProto, helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    directions, inputs, hidden = (2 if direction == "bidirectional" else 1), 6, 5
    rng = np.random.default_rng(0)
    weights = [helper.make_tensor(name, TensorProto.FLOAT, shape, rng.uniform(-0.5, 0.5, shape).ravel())
               for name, shape in (("W", [directions, 4 * hidden, inputs]),
                                   ("R", [directions, 4 * hidden, hidden]), ("B", [directions, 8 * hidden]))]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "y_h", "y_c"], hidden_size=hidden,
                            direction=direction)
    signature = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7, 2, inputs])]
    graph = helper.make_graph([node], "lstm", signature,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("y_h", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("y_c", TensorProto.FLOAT, None)], weights)
    float_path, quantized_path = folder / "lstm.onnx", folder / "lstm.int8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8), float_path)
    # 7-bit weights (reduce_range): on a CPU without VNNI, ORT's u8s8 kernel adds pairs of
    # products in int16 and saturates with full-range weights (measured on an AVX2-only EPYC:
    # its own DynamicQuantizeLSTM 0.24 off the float LSTM), which would judge the CPU, not the rule
    quantize_dynamic(str(float_path), str(quantized_path), op_types_to_quantize=["LSTM"],
                     weight_type=QuantType.QInt8, reduce_range=True)
    assert "DynamicQuantizeLSTM" in {n.op_type for n in onnx.load(str(quantized_path)).graph.node}
    return quantized_path


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_dynamic_quantize_lstm_is_the_lstm_on_its_dequantized_weights(tmp_path, direction: str) -> None:
    import onnx
    import onnx_ir as ir

    from deploycc.graph.shapes import infer_shapes

    model = ir.from_proto(onnx.load(str(_quantized_lstm(tmp_path, direction))))
    infer_shapes(model)
    rewritten_by(model, "DynamicQuantizeLSTM", "ms-dynamic-quantize-lstm")
    assert [n.op_type for n in model.graph if n.op_type == "LSTM"] == ["LSTM"]


def test_a_dynamically_quantized_lstm_model_deploys_on_tensorrt(tmp_path) -> None:
    from deploycc import api

    quantized = _quantized_lstm(tmp_path)
    assert api.check(str(quantized), targets=["jetson-xavier"]).exit_code == 1
    report = api.legalize(str(quantized), "jetson-xavier", tmp_path / "out.onnx")
    assert report.success, report.summary
    assert "ms-dynamic-quantize-lstm" in {r.rule for r in report.rewrites}
    assert report.verification is not None and report.verification.passed
