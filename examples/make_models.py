"""Make the demo models with deploycc's own code (no downloads, no PyTorch).

    python examples/make_models.py --out demo/

small_cnn.onnx      Conv+BatchNormalization+Relu+Identity+Gelu at opset 20, dynamic batch:
                    legal on ORT/OpenVINO; Gelu-20 is beyond TensorRT 8.x's opset 17.
encoder_block.onnx  a transformer encoder block (LayerNormalization, Einsum attention,
                    Softmax, MatMul MLP with Gelu) at opset 20.
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


MODELS = {"small_cnn": small_cnn, "encoder_block": encoder_block}


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
