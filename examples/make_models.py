"""Make the demo models with deploycc's own code (no downloads, no PyTorch).

    python examples/make_models.py --out demo/

small_cnn.onnx      Conv+BatchNormalization+Relu+Identity+Gelu at opset 20, dynamic batch:
                    legal on ORT/OpenVINO; Gelu-20 is beyond TensorRT 8.x's opset 17.
encoder_block.onnx  a transformer encoder block (LayerNormalization, Einsum attention,
                    Softmax, MatMul MLP with Gelu) at opset 20.
kv_decoder.onnx     a Llama-shaped decoder with a KV cache, as Optimum writes one (input_ids,
                    attention_mask, position_ids, past_key_values.N.key/value in; logits,
                    present.N.key/value out): RMSNorm, rotary embeddings, grouped-query
                    attention, a SiLU-gated MLP, at opset 17.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(array, name)


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    channels = 8
    inits = [
        _init("conv1.w", rng.normal(0, 0.2, (channels, 3, 3, 3)).astype(np.float32)),
        _init("conv1.b", rng.normal(0, 0.1, (channels,)).astype(np.float32)),
        _init("bn1.scale", rng.uniform(0.5, 1.5, (channels,)).astype(np.float32)),
        _init("bn1.bias", rng.normal(0, 0.1, (channels,)).astype(np.float32)),
        _init("bn1.mean", rng.normal(0, 0.1, (channels,)).astype(np.float32)),
        _init("bn1.var", rng.uniform(0.5, 1.5, (channels,)).astype(np.float32)),
        _init("conv2.w", rng.normal(0, 0.2, (channels, channels, 3, 3)).astype(np.float32)),
        _init("fc.w", rng.normal(0, 0.2, (channels, 10)).astype(np.float32)),
        _init("fc.b", rng.normal(0, 0.1, (10,)).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], name="conv1",
                         pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"],
                         ["b1"], name="bn1"),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node("Identity", ["r1"], ["r1_copy"], name="identity1"),
        helper.make_node("Conv", ["r1_copy", "conv2.w"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Gelu", ["c2"], ["g2"], name="gelu2", approximate="tanh"),
        helper.make_node("GlobalAveragePool", ["g2"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)],
                              producer_name="deploycc-examples")
    model.ir_version = 10
    return model


def relu_mlp(widths: tuple[int, ...], batch: int, std: float, seed: int = 0) -> onnx.ModelProto:
    """MatMul, Relu, MatMul, ... through `widths` (input, hidden..., output), weights drawn from
    N(0, std) in order: the smallest model whose MatMuls read constant weights."""
    rng = np.random.default_rng(seed)
    layers = list(itertools.pairwise(widths))
    inits = [_init(f"w{i}", rng.normal(0, std, shape).astype(np.float32)) for i, shape in enumerate(layers)]
    nodes, current = [], "x"
    for i in range(len(layers)):
        product = "y" if i == len(layers) - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [current, f"w{i}"], [product]))
        if product != "y":
            nodes.append(helper.make_node("Relu", [product], [f"r{i}"]))
            current = f"r{i}"
    graph = helper.make_graph(nodes, "relu_mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, widths[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, widths[-1]])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def encoder_block(seed: int = 0, hidden: int = 64, heads: int = 4, ffn: int = 128) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads

    def weight(name: str, *shape: int) -> TensorProto:
        return _init(name, rng.normal(0, 0.05, shape).astype(np.float32))

    inits = [
        _init("ln1.gamma", np.ones(hidden, np.float32)),
        _init("ln1.beta", np.zeros(hidden, np.float32)),
        _init("ln2.gamma", np.ones(hidden, np.float32)),
        _init("ln2.beta", np.zeros(hidden, np.float32)),
        weight("wq", hidden, hidden), weight("wk", hidden, hidden), weight("wv", hidden, hidden),
        weight("wo", hidden, hidden), weight("w1", hidden, ffn), weight("w2", ffn, hidden),
        _init("heads_shape", np.array([0, 0, heads, head_dim], np.int64)),
        _init("merge_shape", np.array([0, 0, hidden], np.int64)),
        _init("scale", np.array(1.0 / np.sqrt(head_dim), np.float32)),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "ln1.gamma", "ln1.beta"], ["n1"], name="ln1",
                         axis=-1),
    ]
    for proj in ("q", "k", "v"):
        nodes += [
            helper.make_node("MatMul", ["n1", f"w{proj}"], [f"{proj}_flat"], name=f"proj_{proj}"),
            helper.make_node("Reshape", [f"{proj}_flat", "heads_shape"], [f"{proj}_heads"],
                             name=f"split_{proj}"),
        ]
    nodes += [
        helper.make_node("Einsum", ["q_heads", "k_heads"], ["scores"], name="qk",
                         equation="bqhd,bkhd->bhqk"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale_scores"),
        helper.make_node("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
        helper.make_node("Einsum", ["probs", "v_heads"], ["context"], name="pv",
                         equation="bhqk,bkhd->bqhd"),
        helper.make_node("Reshape", ["context", "merge_shape"], ["merged"], name="merge_heads"),
        helper.make_node("MatMul", ["merged", "wo"], ["attn_out"], name="proj_o"),
        helper.make_node("Add", ["x", "attn_out"], ["res1"], name="residual1"),
        helper.make_node("LayerNormalization", ["res1", "ln2.gamma", "ln2.beta"], ["n2"], name="ln2",
                         axis=-1),
        helper.make_node("MatMul", ["n2", "w1"], ["h1"], name="ffn_in"),
        helper.make_node("Gelu", ["h1"], ["h1_act"], name="ffn_gelu"),
        helper.make_node("MatMul", ["h1_act", "w2"], ["h2"], name="ffn_out"),
        helper.make_node("Add", ["res1", "h2"], ["y"], name="residual2"),
    ]
    graph = helper.make_graph(
        nodes, "encoder_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)],
                              producer_name="deploycc-examples")
    model.ir_version = 10
    return model


def kv_decoder(seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
               vocab: int = 128, ffn: int = 128, max_positions: int = 256) -> onnx.ModelProto:
    """A decoder that generates with a KV cache, in the layout Optimum exports (dims named
    batch_size, sequence_length, past_sequence_length): the first step reads an empty cache
    (past length 0), each later one the cache the step before returned. Weights are scaled so
    that the logits spread by about one unit, which makes greedy tokens a real check."""
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads
    nodes: list[onnx.NodeProto] = []
    inits = [
        _init("embed", rng.normal(0, 1.0, (vocab, hidden)).astype(np.float32)),
        _init("lm_head", rng.normal(0, 1.0 / np.sqrt(hidden), (hidden, vocab)).astype(np.float32)),
        _init("eps", np.array(1e-6, np.float32)),
        _init("one_i64", np.array(1, np.int64)),
        _init("zero_i64", np.array(0, np.int64)),
        _init("axis_last", np.array([-1], np.int64)),
        _init("heads_shape", np.array([0, 0, heads, head_dim], np.int64)),
        _init("kv_shape", np.array([0, 0, kv_heads, head_dim], np.int64)),
        _init("merge_shape", np.array([0, 0, hidden], np.int64)),
        _init("kv_repeats", np.array([1, heads // kv_heads, 1, 1], np.int64)),
        _init("scale", np.array(1.0 / np.sqrt(head_dim), np.float32)),
        _init("masked", np.array(-1e4, np.float32)),
    ]
    inverse = 1.0 / (10000.0 ** (np.arange(0, head_dim, 2) / head_dim))
    angles = np.outer(np.arange(max_positions), inverse)
    angles = np.concatenate([angles, angles], axis=-1)
    inits += [_init("rope_cos", np.cos(angles).astype(np.float32)),
              _init("rope_sin", np.sin(angles).astype(np.float32))]

    def node(op: str, inputs: list[str], output: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def rms_norm(x: str, prefix: str) -> str:
        inits.append(_init(f"{prefix}.weight", rng.uniform(0.8, 1.2, hidden).astype(np.float32)))
        square = node("Mul", [x, x], f"{prefix}.square")
        mean = node("ReduceMean", [square], f"{prefix}.mean", axes=[-1], keepdims=1)
        root = node("Sqrt", [node("Add", [mean, "eps"], f"{prefix}.var_eps")], f"{prefix}.root")
        return node("Mul", [node("Div", [x, root], f"{prefix}.normed"), f"{prefix}.weight"], f"{prefix}.out")

    def linear(x: str, name: str, rows: int, cols: int) -> str:
        weight = rng.normal(0, 1.0 / np.sqrt(rows), (rows, cols)).astype(np.float32)
        inits.append(_init(f"{name}.weight", weight))
        return node("MatMul", [x, f"{name}.weight"], name)

    def rotate(x: str, prefix: str) -> str:  # x * cos + rotate_half(x) * sin, as Llama does
        nodes.append(helper.make_node("Split", [x], [f"{prefix}.x1", f"{prefix}.x2"], name=f"{prefix}.split",
                                      axis=-1))
        half = node("Concat", [node("Neg", [f"{prefix}.x2"], f"{prefix}.neg"), f"{prefix}.x1"],
                    f"{prefix}.rotated_half", axis=-1)
        return node("Add", [node("Mul", [x, "cos"], f"{prefix}.cos_part"),
                            node("Mul", [half, "sin"], f"{prefix}.sin_part")], f"{prefix}.rope")

    x = node("Gather", ["embed", "input_ids"], "embedded")
    for name in ("cos", "sin"):  # [batch, 1, seq, head_dim]: broadcast over the heads
        node("Unsqueeze", [node("Gather", [f"rope_{name}", "position_ids"], f"{name}_rows"), "one_axis"],
             name)
    inits.append(_init("one_axis", np.array([1], np.int64)))
    # the causal mask: query i (at absolute position past + i) sees keys 0..past + i, unpadded ones only
    past_length = node("Gather", [node("Shape", ["past_key_values.0.key"], "past_shape"), "two_index"],
                       "past_length")
    new_length = node("Gather", [node("Shape", ["input_ids"], "ids_shape"), "one_i64"], "new_length")
    total = node("Add", [past_length, new_length], "total_length")
    inits.append(_init("two_index", np.array(2, np.int64)))
    query_positions = node("Range", [past_length, total, "one_i64"], "query_positions")
    key_positions = node("Range", ["zero_i64", total, "one_i64"], "key_positions")
    causal = node("LessOrEqual", [key_positions, node("Unsqueeze", [query_positions, "axis_last"],
                                                       "query_column")], "causal")
    unpadded = node("Equal", ["attention_mask", "one_i64"], "unpadded")
    inits.append(_init("mask_axes", np.array([1, 2], np.int64)))
    allowed = node("And", [causal, node("Unsqueeze", [unpadded, "mask_axes"], "unpadded_4d")], "allowed")

    for layer in range(layers):
        p = f"layers.{layer}"
        normed = rms_norm(x, f"{p}.input_norm")
        q = node("Transpose", [node("Reshape", [linear(normed, f"{p}.q_proj", hidden, hidden), "heads_shape"],
                                    f"{p}.q_heads")], f"{p}.q", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(normed, f"{p}.k_proj", hidden, kv_heads * head_dim),
                                                "kv_shape"], f"{p}.k_heads")], f"{p}.k", perm=[0, 2, 1, 3])
        v = node("Transpose", [node("Reshape", [linear(normed, f"{p}.v_proj", hidden, kv_heads * head_dim),
                                                "kv_shape"], f"{p}.v_heads")], f"{p}.v", perm=[0, 2, 1, 3])
        q, k = rotate(q, f"{p}.q"), rotate(k, f"{p}.k")
        keys = node("Concat", [f"past_key_values.{layer}.key", k], f"present.{layer}.key", axis=2)
        values = node("Concat", [f"past_key_values.{layer}.value", v], f"present.{layer}.value", axis=2)
        keys_all = node("Tile", [keys, "kv_repeats"], f"{p}.keys_per_head")  # grouped-query attention
        values_all = node("Tile", [values, "kv_repeats"], f"{p}.values_per_head")
        keys_t = node("Transpose", [keys_all], f"{p}.keys_t", perm=[0, 1, 3, 2])
        scores = node("Mul", [node("MatMul", [q, keys_t], f"{p}.qk"), "scale"], f"{p}.scores")
        probs = node("Softmax", [node("Where", [allowed, scores, "masked"], f"{p}.masked_scores")],
                     f"{p}.probs", axis=-1)
        heads_context = node("MatMul", [probs, values_all], f"{p}.context_heads")
        context = node("Reshape", [node("Transpose", [heads_context], f"{p}.context_t", perm=[0, 2, 1, 3]),
                                   "merge_shape"], f"{p}.context")
        x = node("Add", [x, linear(context, f"{p}.o_proj", hidden, hidden)], f"{p}.attn_residual")
        normed = rms_norm(x, f"{p}.post_norm")
        gate = linear(normed, f"{p}.gate_proj", hidden, ffn)
        silu = node("Mul", [gate, node("Sigmoid", [gate], f"{p}.gate_sigmoid")], f"{p}.silu")
        up = linear(normed, f"{p}.up_proj", hidden, ffn)
        x = node("Add", [x, linear(node("Mul", [silu, up], f"{p}.gated"), f"{p}.down_proj", ffn, hidden)],
                 f"{p}.mlp_residual")
    node("MatMul", [rms_norm(x, "final_norm"), "lm_head"], "logits")

    def tensor(name: str, dtype: int, dims: list) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, dtype, dims)

    cache = ["batch_size", kv_heads, "past_sequence_length", head_dim]
    grown = ["batch_size", kv_heads, "past_sequence_length + sequence_length", head_dim]
    inputs = [tensor("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              tensor("attention_mask", TensorProto.INT64,
                     ["batch_size", "past_sequence_length + sequence_length"]),
              tensor("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    outputs = [tensor("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", vocab])]
    for layer in range(layers):
        for part in ("key", "value"):
            inputs.append(tensor(f"past_key_values.{layer}.{part}", TensorProto.FLOAT, cache))
            outputs.append(tensor(f"present.{layer}.{part}", TensorProto.FLOAT, grown))
    graph = helper.make_graph(nodes, "kv_decoder", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="deploycc-examples")
    model.ir_version = 8
    return model


MODELS = {"small_cnn": small_cnn, "encoder_block": encoder_block, "kv_decoder": kv_decoder}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("demo"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, make in MODELS.items():
        model = make()
        onnx.checker.check_model(model, full_check=True)
        path = args.out / f"{name}.onnx"
        onnx.save(model, path)
        print(f"wrote {path} ({len(model.graph.node)} nodes)")


if __name__ == "__main__":
    main()
