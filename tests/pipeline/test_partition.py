"""Partition: device segments and host segments, each chain run against the original."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from deploycc import api
from deploycc.graph.shapes import load_inferred
from deploycc.options import BuildOptions, LegalizeOptions
from tests.records.test_round_trip import assert_reads_back

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64
_vi = helper.make_tensor_value_info
ML = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]


def _save(tmp_path: Path, graph: onnx.GraphProto, name: str, opsets=None) -> Path:
    path = tmp_path / name
    onnx.save(helper.make_model(graph, opset_imports=opsets or ML), path)
    return path


def _const(name: str, values, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def _conv(name: str, x: str, y: str, channels: int) -> tuple[onnx.NodeProto, onnx.TensorProto]:
    weights = np.random.default_rng(len(name)).standard_normal((channels, channels, 3, 3)).astype(np.float32)
    return (helper.make_node("Conv", [x, f"{name}_w"], [y], pads=[1, 1, 1, 1]),
            numpy_helper.from_array(weights * 0.2, f"{name}_w"))


def scaler_in_the_middle(channels: int = 4, size: int = 8) -> onnx.GraphProto:
    """Conv -> ai.onnx.ml Binarizer (no rule; only ORT has it) -> Conv: two device segments."""
    first, w1 = _conv("c1", "x", "a", channels)
    second, w2 = _conv("c2", "scaled", "b", channels)
    image = [1, channels, size, size]
    nodes = [first, helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Reshape", ["r", "rows"], ["flat"]),
             helper.make_node("Binarizer", ["flat"], ["scaled_flat"], domain="ai.onnx.ml", threshold=0.1),
             helper.make_node("Reshape", ["scaled_flat", "back"], ["scaled"]),
             second, helper.make_node("Sigmoid", ["b"], ["y"])]
    return helper.make_graph(nodes, "middle", [_vi("x", FLOAT, image)], [_vi("y", FLOAT, image)],
                             [w1, w2, _const("rows", [channels, size * size], np.int64),
                              _const("back", image, np.int64)])


def _feeds(shape=(1, 4, 8, 8)) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("target", ["ort-cpu", "openvino-cpu"])
def test_an_illegal_node_in_the_middle_makes_two_device_segments(tmp_path: Path, target: str) -> None:
    model = _save(tmp_path, scaler_in_the_middle(), "middle.onnx")
    if target == "ort-cpu":  # ORT runs Binarizer: nothing to partition, one device segment
        report = api.build_partitioned(model, target, tmp_path / "out", BuildOptions(bench=False))
        assert [s["placement"] for s in report.segments] == ["device"]
        return
    report = api.build_partitioned(model, target, tmp_path / "out", BuildOptions(bench=False),
                                   flops_per_byte=0)
    assert report.status == "verified", report.summary
    assert [s["placement"] for s in report.segments] == ["device", "host", "device"]
    assert report.chain_on_ort.passed and report.chain_on_engines.passed
    assert any("Binarizer" in node for node in report.host_nodes)
    assert (tmp_path / "out" / "segments" / "00" / "model.xml").exists()  # a real OpenVINO engine
    assert_reads_back(tmp_path / "out")  # report.md is rendered from the record in report.json
    from deploycc.runtime import Chain

    chain = Chain.load(tmp_path / "out" / "segments")
    expected = ort.InferenceSession(str(model)).run(None, _feeds())[0]
    np.testing.assert_allclose(chain.run(_feeds())["y"], expected, rtol=1e-5, atol=1e-5)
    assert set(chain.seconds) == {0, 1, 2}


def test_a_detector_ending_in_nonzero_keeps_it_on_the_host_of_jetson_nano(tmp_path: Path) -> None:
    """torchvision's post-processing picks boxes above a score with NonZero, which TensorRT 8.2's
    parser filters out as data-dependent: it runs on the host, the network on the device."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["features"]),
             helper.make_node("Reshape", ["features", "box_shape"], ["raw_boxes"]),
             helper.make_node("Sigmoid", ["raw_boxes"], ["boxes"]),
             helper.make_node("ReduceMean", ["boxes"], ["scores"], axes=[2], keepdims=0),
             helper.make_node("Greater", ["scores", "threshold"], ["kept"]),
             helper.make_node("NonZero", ["kept"], ["selected"])]
    graph = helper.make_graph(
        nodes, "detector", [_vi("x", FLOAT, [1, 3, 8, 8])], [_vi("selected", INT64, [2, "n"])],
        [_const("w", np.random.default_rng(4).standard_normal((16, 3, 3, 3)) * 0.3),
         _const("box_shape", [1, 144, 4], np.int64), _const("threshold", 0.5)])
    model = _save(tmp_path, graph, "detector.onnx", [helper.make_opsetid("", 13)])
    report = api.build_partitioned(model, "jetson-nano", tmp_path / "out", BuildOptions(bench=False),
                                   flops_per_byte=0)
    assert report.status == "pending-on-device", report.summary  # TensorRT builds on the board
    assert [s["placement"] for s in report.segments] == ["device", "host"]
    assert report.segments[1]["ops"] == {"NonZero": 1}
    assert report.chain_on_ort.passed
    assert (tmp_path / "out" / "segments" / "00" / "bundle").is_dir()


def test_a_scikit_learn_head_runs_on_the_host_of_a_tensorrt_target(tmp_path: Path) -> None:
    """Features scaled in standard ops, then a LinearClassifier whose SOFTMAX_ZERO no rule
    writes and ZipMap (a sequence of maps, kept as asked): both on the host."""
    sequence_of_maps = helper.make_sequence_type_proto(
        helper.make_map_type_proto(INT64, helper.make_tensor_type_proto(FLOAT, [])))
    nodes = [helper.make_node("Sub", ["x", "mean"], ["centred"]),
             helper.make_node("Div", ["centred", "std"], ["z"]),
             helper.make_node("LinearClassifier", ["z"], ["label", "probabilities"], domain="ai.onnx.ml",
                              classlabels_ints=[0, 1, 2], coefficients=[v / 10 for v in range(12)],
                              intercepts=[0.1, 0.2, 0.3], post_transform="SOFTMAX_ZERO"),
             helper.make_node("ZipMap", ["probabilities"], ["probs"], domain="ai.onnx.ml",
                              classlabels_int64s=[0, 1, 2])]
    graph = helper.make_graph(nodes, "pipeline", [_vi("x", FLOAT, [1, 4])],
                              [_vi("label", INT64, [1]), helper.make_value_info("probs", sequence_of_maps)],
                              [_const("mean", [0.1, 0.2, 0.3, 0.4]), _const("std", [1.0, 2.0, 0.5, 1.5])])
    model = _save(tmp_path, graph, "sklearn.onnx", [helper.make_opsetid("", 13),
                                                     helper.make_opsetid("ai.onnx.ml", 1)])
    options = BuildOptions(legalize=LegalizeOptions(keep_map_outputs=True), bench=False)
    report = api.build_partitioned(model, "jetson-xavier", tmp_path / "out", options, flops_per_byte=0)
    assert [s["placement"] for s in report.segments] == ["device", "host"]
    assert report.chain_on_ort.passed, report.summary
    assert {"LinearClassifier", "ZipMap"} == set(report.segments[1]["ops"])


def test_an_if_with_an_illegal_node_in_a_branch_stays_whole_on_the_host(tmp_path: Path) -> None:
    binarize = helper.make_node("Binarizer", ["r"], ["s"], domain="ai.onnx.ml", threshold=0.5)
    scaled = helper.make_graph([binarize], "then", [], [_vi("s", FLOAT, [2, 3])])
    kept = helper.make_graph([helper.make_node("Identity", ["r"], ["k"])], "else", [],
                             [_vi("k", FLOAT, [2, 3])])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("If", ["flag"], ["chosen"], then_branch=scaled, else_branch=kept),
             helper.make_node("Exp", ["chosen"], ["y"])]
    graph = helper.make_graph(nodes, "branch", [_vi("x", FLOAT, [2, 3]), _vi("flag", TensorProto.BOOL, [])],
                              [_vi("y", FLOAT, [2, 3])])
    model = _save(tmp_path, graph, "branch.onnx")
    report = api.build_partitioned(model, "openvino-cpu", tmp_path / "out", BuildOptions(bench=False),
                                   flops_per_byte=0)
    assert [s["placement"] for s in report.segments] == ["device", "host", "device"]
    assert report.segments[1]["ops"] == {"If": 1}
    assert report.status == "verified", report.summary


def test_a_graph_output_also_read_inside_the_graph(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Binarizer", ["a"], ["b"], domain="ai.onnx.ml", threshold=0.5),
             helper.make_node("Add", ["b", "a"], ["c"])]
    graph = helper.make_graph(nodes, "shared", [_vi("x", FLOAT, [2, 3])],
                              [_vi("a", FLOAT, [2, 3]), _vi("c", FLOAT, [2, 3])])
    model = _save(tmp_path, graph, "shared.onnx")
    report = api.build_partitioned(model, "openvino-cpu", tmp_path / "out", BuildOptions(bench=False),
                                   flops_per_byte=0)
    assert report.status == "verified", report.summary
    assert "a" in report.segments[0]["outputs"] and "a" in report.segments[2]["inputs"]


# The property: whatever the legality, the segment graph is acyclic and the chain is the original.

OPS = ("Relu", "Sigmoid", "Add", "Mul", "Neg")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 1 << 16), st.integers(0, 1 << 16),
                          st.booleans()), min_size=2, max_size=14))
def test_random_dags_partition_into_an_acyclic_chain_equal_to_the_original(tmp_path_factory, spec) -> None:
    from deploycc.partition.plan import plan
    from deploycc.partition.segments import write_segments
    from deploycc.runtime import Chain

    names, nodes, illegal = ["x"], [], set()
    for i, (op, a, b, refused) in enumerate(spec):
        inputs = [names[a % len(names)]] + ([names[b % len(names)]] if op in ("Add", "Mul") else [])
        nodes.append(helper.make_node(op, inputs, [f"v{i}"], name=f"n{i}"))
        names.append(f"v{i}")
        if refused:
            illegal.add(f"n{i}")
    outputs = [_vi(name, FLOAT, [2, 3]) for name in names[1:] if not any(name in n.input for n in nodes)]
    graph = helper.make_graph(nodes, "random", [_vi("x", FLOAT, [2, 3])], outputs)
    folder = tmp_path_factory.mktemp("random")
    path = _save(folder, graph, "random.onnx", [helper.make_opsetid("", 17)])
    model = load_inferred(path).model
    result = plan(model.graph, lambda node: ["refused"] if node.name in illegal else [], flops_per_byte=0)
    order = {name: s.index for s in result.segments for name in s.outputs}
    for segment in result.segments:  # every cut tensor comes from an earlier segment
        assert all(order.get(name, -1) < segment.index for name in segment.inputs if name != "x")
        assert all((nodes[i].name in illegal) == (segment.placement == "host") for i in segment.nodes)
    write_segments(model, result, folder / "segments", source="random.onnx", target="test")
    feeds = {"x": np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)}
    ran = ort.InferenceSession(str(path)).run(None, feeds)
    expected = dict(zip([o.name for o in outputs], ran, strict=True))
    chain = Chain.load(folder / "segments")
    actual = chain.run(feeds)
    for name, want in expected.items():
        np.testing.assert_allclose(actual[name], want, rtol=1e-6, atol=1e-6)


def test_audit_counts_host_segments_apart(tmp_path: Path) -> None:
    from deploycc.audit.run import AuditOptions

    # big enough for the default cost model to keep its convolutions on the device
    _save(tmp_path, scaler_in_the_middle(channels=16, size=32), "middle.onnx")
    plain = api.audit([tmp_path], ["openvino-cpu"], tmp_path / "plain", AuditOptions())
    assert plain.cells[0].status == "failed" and plain.summary[0].with_host_segments == 0
    audited = api.audit([tmp_path], ["openvino-cpu"], tmp_path / "audit", AuditOptions(partition=True))
    cell, summary = audited.cells[0], audited.summary[0]
    assert cell.status == "host-segments", cell.message
    assert cell.details["partition"]["segments"] == ["device", "host", "device"]
    assert summary.succeeded == 0 and summary.with_host_segments == 1
    assert "with host segments" in (tmp_path / "audit" / "audit.md").read_text()


def test_bench_times_the_chain_and_each_segment(tmp_path: Path) -> None:
    from deploycc.bench.run import BenchOptions

    model = _save(tmp_path, scaler_in_the_middle(), "middle.onnx")
    built = api.build_partitioned(model, "openvino-cpu", tmp_path / "out", BuildOptions(bench=False),
                                  flops_per_byte=0)
    assert built.status == "verified", built.summary
    timed = api.bench(tmp_path / "out", options=BenchOptions(iterations=20, warmup=3))
    assert timed.artifact.startswith("chain of 3 segments")
    assert list(timed.segments_ms) == ["segment 0 (device)", "segment 1 (host)", "segment 2 (device)"]
    assert all(ms > 0 for ms in timed.segments_ms.values())
    assert sum(timed.segments_ms.values()) <= timed.latency.max_ms  # parts of each timed run


def test_a_tensorrt_segment_reading_a_data_sized_tensor_runs_on_the_host(tmp_path: Path) -> None:
    """NonZero's output count is decided by the data: on TensorRT (engines for fixed shapes here)
    the Gather that reads it goes to the host with NonZero, not into a second engine."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["features"]),
             helper.make_node("Reshape", ["features", "rows"], ["scores"]),
             helper.make_node("Greater", ["scores", "threshold"], ["kept"]),
             helper.make_node("NonZero", ["kept"], ["where"]),
             helper.make_node("Gather", ["where", "one"], ["columns"], axis=0),
             helper.make_node("Gather", ["scores", "columns"], ["picked"], axis=0),
             helper.make_node("Exp", ["picked"], ["y"])]
    graph = helper.make_graph(
        nodes, "data_sized", [_vi("x", FLOAT, [1, 3, 8, 8])], [_vi("y", FLOAT, ["n"])],
        [_const("w", np.random.default_rng(6).standard_normal((4, 3, 3, 3)) * 0.3),
         _const("rows", [144], np.int64), _const("threshold", 0.0), _const("one", 0, np.int64)])
    model = _save(tmp_path, graph, "data_sized.onnx", [helper.make_opsetid("", 13)])
    report = api.build_partitioned(model, "jetson-nano", tmp_path / "out", BuildOptions(bench=False),
                                   flops_per_byte=0)
    assert [s["placement"] for s in report.segments] == ["device", "host"], report.segments
    assert set(report.segments[1]["ops"]) == {"NonZero", "Gather", "Exp"}
    assert "whose size the data decides" in report.segments[1]["decision"]
    assert report.chain_on_ort.passed


def test_the_cost_model_keeps_a_tiny_device_segment_on_the_host(tmp_path: Path) -> None:
    """The same graph, small: its convolutions do not pay for the engine calls around the host
    Binarizer, so everything runs on the host, and the report says why."""
    model = _save(tmp_path, scaler_in_the_middle(), "middle.onnx")
    report = api.build_partitioned(model, "openvino-cpu", tmp_path / "out", BuildOptions(bench=False))
    assert [s["placement"] for s in report.segments] == ["host"]
    assert "not worth a launch" in report.segments[0]["decision"]


def nonzero_between_convs(channels: int = 16, size: int = 32, batch: int | str = 1) -> onnx.GraphProto:
    """Conv -> NonZero of a mask -> GatherND of the selected values -> ReduceSum ([1] again) scaling
    the input of two more Convs: the data sizes only the middle, the Convs after it are static.
    The scaling runs with the batch on axis 1 (a cut tensor whose batch is not first)."""
    first, w1 = _conv("c1", "x", "a", channels)
    second, w2 = _conv("c2", "scaled", "b", channels)
    third, w3 = _conv("c3", "b2", "y", channels)
    image = [batch, channels, size, size]
    nodes = [first, helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Greater", ["r", "threshold"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["idx"]),
             helper.make_node("Transpose", ["idx"], ["idxT"], perm=[1, 0]),
             helper.make_node("GatherND", ["r", "idxT"], ["sel"]),
             helper.make_node("ReduceSum", ["sel"], ["total"], keepdims=1),
             helper.make_node("Transpose", ["r"], ["channels_first"], perm=[1, 0, 2, 3]),
             helper.make_node("Mul", ["channels_first", "total"], ["scaled_t"]),
             helper.make_node("Transpose", ["scaled_t"], ["scaled"], perm=[1, 0, 2, 3]),
             second, helper.make_node("Relu", ["b"], ["b2"]), third]
    return helper.make_graph(nodes, "nonzero_between", [_vi("x", FLOAT, image)], [_vi("y", FLOAT, image)],
                             [w1, w2, w3, _const("threshold", 0.5)])


def test_a_shape_made_static_again_after_nonzero_runs_on_the_device(tmp_path: Path) -> None:
    """Only what reads a data-sized tensor joins NonZero on the host of jetson-nano (TensorRT 8.2
    refuses NonZero): the Convs scaled by the [1] sum of the selected values are a device segment."""
    model = _save(tmp_path, nonzero_between_convs(), "between.onnx", [helper.make_opsetid("", 13)])
    report = api.build_partitioned(model, "jetson-nano", tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "pending-on-device", report.summary  # TensorRT builds on the board
    assert [s["placement"] for s in report.segments] == ["device", "host", "device"], report.segments
    assert report.segments[1]["ops"] == {"NonZero": 1, "Transpose": 1, "GatherND": 1, "ReduceSum": 1}
    assert report.segments[2]["ops"] == {"Mul": 1, "Transpose": 1, "Conv": 2, "Relu": 1}
    assert report.segments[2]["inputs"] == ["channels_first", "total"]
    decision = report.segments[1]["decision"]
    assert decision.startswith("runs what the target cannot (NonZero); kept on the host: reads idx,"), \
        decision
    assert "whose size the data decides" not in report.segments[2]["decision"]
    reasons = {cut["name"]: cut["reason"] for cut in report.cuts}
    assert reasons["mask"].startswith("read on the host by idx (NonZero): NonZero is listed as unsupported")
    assert reasons["total"] == "made on the host by total (ReduceSum): kept on the host: reads sel, " \
        "whose size the data decides"
    assert report.device_flops_share > 0.5 and report.device_flops <= report.flops
    assert report.flops == sum(s["flops"] for s in report.segments)
    assert report.chain_on_ort.passed
    assert (tmp_path / "out" / "segments" / "02" / "bundle").is_dir()
    assert "FLOPs on the device: " in (tmp_path / "out" / "report.md").read_text()
    assert_reads_back(tmp_path / "out")
    from deploycc.runtime import Chain

    chain = Chain.load(tmp_path / "out" / "segments")
    original = ort.InferenceSession(str(model))
    for seed in (1, 2):  # as many values selected as the data decides
        feeds = {"x": np.random.default_rng(seed).standard_normal((1, 16, 32, 32)).astype(np.float32)}
        np.testing.assert_allclose(chain.run(feeds)["y"], original.run(None, feeds)[0], rtol=1e-4, atol=1e-4)
    chain.close()


def test_a_dynamic_batch_cut_gets_its_inputs_profile(tmp_path: Path) -> None:
    """With --dynamic-batch the cut tensors carry the input's batch, known before run time: the
    scaled Convs stay on the device, and the engine's profile for a cut with the batch on axis 1
    is the input's batch range on that axis."""
    graph = nonzero_between_convs(batch="batch")
    model = _save(tmp_path, graph, "between.onnx", [helper.make_opsetid("", 13)])
    report = api.build_partitioned(model, "jetson-nano", tmp_path / "out",
                                   BuildOptions(bench=False, batch_range=(1, 2, 4)))
    assert [s["placement"] for s in report.segments] == ["device", "host", "device"], report.segments
    assert report.chain_on_ort.passed, report.summary
    profiles = report.segments[2]["artifact"]["settings"]["profiles"]
    assert {"input": "channels_first", "min": [16, 1, 32, 32], "opt": [16, 2, 32, 32],
            "max": [16, 4, 32, 32]} in profiles


def test_a_cut_sized_by_the_inputs_own_dims_is_known_before_run_time(tmp_path: Path) -> None:
    """A symbolic dim that a graph input declares (a batch a profile covers) is no data-decided
    size: the reader of such a cut stays on the device; NonZero's count is one."""
    from deploycc.partition.plan import plan

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Neg", ["a"], ["b"], name="refused"),
             helper.make_node("Exp", ["b"], ["c"], name="exp"),
             helper.make_node("NonZero", ["a"], ["idx"], name="nonzero"),
             helper.make_node("Cast", ["idx"], ["y"], name="cast", to=FLOAT)]
    graph = helper.make_graph(nodes, "batch", [_vi("x", FLOAT, ["N", 4])],
                              [_vi("c", FLOAT, ["N", 4]), _vi("y", FLOAT, [2, "n"])])
    model = load_inferred(_save(tmp_path, graph, "batch.onnx", [helper.make_opsetid("", 17)])).model
    refused = {"refused", "nonzero"}
    result = plan(model.graph, lambda node: ["refused"] if node.name in refused else [], flops_per_byte=0,
                  static_cuts=True)
    ordered = list(model.graph)
    where = {ordered[i].name: s.placement for s in result.segments for i in s.nodes}
    assert where == {"relu": "device", "refused": "host", "exp": "device", "nonzero": "host", "cast": "host"}
    assert result.host_reasons["cast (Cast)"] == ["kept on the host: reads idx, whose size the data decides"]
