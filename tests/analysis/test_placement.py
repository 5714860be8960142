"""ONNX Runtime with a GPU provider: the CUDA EP's kernel table imported from OperatorKernels.md,
and each node's provider, the TensorRT subgraphs and the Memcpy borders predicted by `check`,
against answers worked out by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from deploycc import api
from deploycc.targets.registry import resolve

TOOLS = Path(__file__).resolve().parents[2] / "tools"

# Three rows of the CUDAExecutionProvider section of docs/OperatorKernels.md (@001d12d), as written
EXCERPT = """|**Operator Domain:** *ai.onnx*||||
|Add|*in* A:**T**<br> *in* B:**T**<br> *out* C:**T**|14+|**T** = tensor(bfloat16), tensor(double), tensor(float), tensor(float16), tensor(int16), tensor(int32), tensor(int64), tensor(int8), tensor(uint16), tensor(uint32), tensor(uint64), tensor(uint8)|
|||13|**T** = tensor(bfloat16), tensor(double), tensor(float), tensor(float16), tensor(int32), tensor(int64), tensor(uint32), tensor(uint64)|
|||[7, 12]|**T** = tensor(double), tensor(float), tensor(float16), tensor(int32), tensor(int64), tensor(uint32), tensor(uint64)|
|And|*in* A:**T**<br> *in* B:**T**<br> *out* C:**T1**|7+|**T** = tensor(bool)<br/> **T1** = tensor(bool)|
|**Operator Domain:** *com.microsoft*||||
|BiasGelu|*in* A:**T**<br> *in* B:**T**<br> *out* C:**T**|1+|**T** = tensor(bfloat16), tensor(double), tensor(float), tensor(float16)|
"""


def test_operator_kernels_md_is_read_row_by_row_and_the_shipped_table_holds_it() -> None:
    sys.path.insert(0, str(TOOLS))
    try:
        import import_capabilities as importer
    finally:
        sys.path.remove(str(TOOLS))
    ops = importer.parse_operator_kernels(EXCERPT)
    assert [(o["domain"], o["op_type"], [(k["since_opset"], k["until_opset"]) for k in o["kernels"]])
            for o in ops] == [("ai.onnx", "Add", [(14, None), (13, 13), (7, 12)]),
                              ("ai.onnx", "And", [(7, None)]), ("com.microsoft", "BiasGelu", [(1, None)])]
    assert ops[1]["kernels"][0]["type_constraints"] == {"T": ["tensor(bool)"], "T1": ["tensor(bool)"]}
    table = resolve("ort-cuda").ops
    add = [e for e in table.entries if e.op == "Add" and e.domain == ""]
    assert sorted((e.since, e.until) for e in add) == [(7, 12), (13, 13), (14, None)]
    assert "bfloat16" in dict(next(e for e in add if e.since == 14).type_constraints)["T"]
    assert any(e.op == "BiasGelu" and e.domain == "com.microsoft" for e in table.entries)
    assert table.source.commit == "001d12d2623fd411ce0f83d05abb5e82304a3389"
    # the shipped table is what the importer makes of the vendored text
    vendored = importer.ort_kernels_doc(TOOLS / "vendor" / importer.CUDA_KERNELS)
    assert len(table.entries) == sum(len(o["kernels"]) for o in vendored["ops"]) + 1  # + Constant


@pytest.fixture(scope="module")
def islands(tmp_path_factory) -> Path:
    """relu (all) -> compress (CUDA, not TensorRT; its output sized by the data) -> hardmax (TensorRT,
    not CUDA); det (neither: CPU) -> sigmoid."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Compress", ["a", "cond"], ["c"], name="compress", axis=0),
             helper.make_node("Hardmax", ["c"], ["e"], name="hardmax"),
             helper.make_node("Det", ["m"], ["d"], name="det"),
             helper.make_node("Sigmoid", ["d"], ["s"], name="sigmoid")]
    graph = helper.make_graph(nodes, "islands", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4]),
        helper.make_tensor_value_info("cond", TensorProto.BOOL, [6]),
        helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 3, 3])],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, None)])
    path = tmp_path_factory.mktemp("placement") / "islands.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17)])), path)
    return path


def test_tensorrt_takes_what_its_parser_reads_cuda_the_rest_it_has_kernels_for(islands: Path) -> None:
    placement = api.check(islands, ["ort-trt"]).targets[0].placement
    assert placement is not None
    assert placement.counts == {"TensorrtExecutionProvider": 3, "CUDAExecutionProvider": 1,
                                "CPUExecutionProvider": 1}
    assert {(o.node, o.provider) for o in placement.off_primary} == {
        ("compress", "CUDAExecutionProvider"), ("det", "CPUExecutionProvider")}
    assert all("TensorRT" in o.reason for o in placement.off_primary)
    # relu | compress on CUDA | hardmax | det on the CPU | sigmoid: three engines of one node each
    assert placement.subgraphs == 3 and placement.subgraph_sizes == [1, 1, 1]
    # CUDA and TensorRT share the GPU: the one copy is det's output going back to it
    assert [(b.tensor, b.bytes) for b in placement.borders] == [("d", 8)]


def test_the_cuda_provider_leaves_what_it_has_no_kernel_for_on_the_cpu(islands: Path) -> None:
    placement = api.check(islands, ["ort-cuda"]).targets[0].placement
    assert placement.counts == {"CUDAExecutionProvider": 3, "CPUExecutionProvider": 2}
    assert placement.subgraph_sizes == [2, 1]  # relu, compress | hardmax, det on the CPU | sigmoid
    # compress's output is sized by the data: its bytes are a floor (one row of 4 floats)
    assert sorted((b.tensor, b.source, b.bytes) for b in placement.borders) == [
        ("c", "CUDAExecutionProvider", 16), ("d", "CPUExecutionProvider", 8)]
    assert api.check(islands, ["ort-cpu"]).targets[0].placement is None  # one provider: nothing to predict


def test_an_int64_product_of_dims_stays_on_the_gpu_after_legalize(tmp_path: Path) -> None:
    """A flatten's element count (ReduceProd of Shape dims, int64) has no CUDA kernel: as exported
    it splits the graph in two with a Memcpy each way; legalize writes it as Muls, one subgraph."""
    from onnx import parser

    from deploycc.options import LegalizeOptions

    model = tmp_path / "flatten.onnx"
    onnx.save(parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 13]>
        g (float[N,C,H,W] x) => (float[N,M] y) {
            s = Shape(x)
            idx = Constant <value = int64[3] {1,2,3}> ()
            dims = Gather <axis=0> (s, idx)
            p = ReduceProd <keepdims=1> (dims)
            minus_one = Constant <value = int64[1] {-1}> ()
            shape = Concat <axis=0> (minus_one, p)
            y = Reshape(x, shape)
        }"""), model)
    exported = api.check(model, ["ort-cuda"]).targets[0].placement
    assert (len(exported.subgraph_sizes), len(exported.borders)) == (2, 2)
    report = api.legalize(model, "ort-cuda", tmp_path / "out.onnx", LegalizeOptions())
    assert report.success and report.verification is not None and report.verification.passed, report.summary
    after = api.check(tmp_path / "out.onnx", ["ort-cuda"]).targets[0].placement
    assert after.counts == {"CUDAExecutionProvider": sum(after.counts.values())} and not after.borders
