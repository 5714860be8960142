"""inspect: the facts of a model and the redundancy a user would act on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import deploycc
from deploycc.errors import ModelInputError

REDUNDANT = """
<ir_version: 8, opset_import: ["" : 13]>
g (float[1,3,8,8] x) => (float[1,4,8,8] y, float[1,4,8,8] spare) {
  i = Identity(x)
  d = Dropout(i)
  c0 = Cast<to=1>(d)
  c1 = Cast<to=11>(c0)
  c2 = Cast<to=1>(c1)
  conv = Conv(c2, w)
  bn = BatchNormalization(conv, s, b, m, v)
  y = Relu(bn)
  dead = Neg(x)
  k1 = Constant <value = float[1] {2}> ()
  k2 = Mul(k1, k1)
  spare = Mul(y, k2)
  mp, idx = MaxPool <kernel_shape = [1, 1]> (y)
}
"""


def _redundant_model() -> onnx.ModelProto:
    model = onnx.parser.parse_model(REDUNDANT)
    rng = np.random.default_rng(0)
    for name, shape in (("w", (4, 3, 1, 1)), ("s", (4,)), ("b", (4,)), ("m", (4,)), ("v", (4,)),
                        ("unused_w", (16,))):
        model.graph.initializer.append(numpy_helper.from_array(rng.random(shape, np.float32), name))
    return model


def test_redundancy_findings(write_model):
    report = deploycc.inspect(write_model(_redundant_model()))
    found = {f.kind: f for f in report.findings}
    assert found["identity"].count == 1
    assert found["dropout"].count == 1
    assert found["noop_cast"].count == 1  # c0: float -> float
    assert found["chained_cast"].count == 2  # c1 and c2 read a Cast
    assert found["conv_bn"].count == 1
    assert found["dead_node"].count == 2  # Neg and the MaxPool nothing reads
    assert found["unused_initializer"].nodes == ["unused_w"]
    assert found["constant_foldable"].count == 1  # k2 = k1 * k1
    assert report.parameter_count == 4 * 3 + 4 * 4 + 16
    assert report.parameter_bytes == report.parameter_count * 4


def test_io_and_histogram(write_model):
    report = deploycc.inspect(write_model(_redundant_model()))
    assert report.inputs == [{"name": "x", "dtype": "float32", "dims": [1, 3, 8, 8]}]
    assert report.op_histogram["Cast"] == 3
    assert report.node_count == 13
    assert report.opset_imports == {"ai.onnx": 13}


def test_symbolic_dims_keep_their_names_and_subgraphs_are_counted(write_model):
    text = """
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[batch, 4] x) => (float[batch, 4] y) {
      y = If (c) <then_branch = t () => (float[batch, 4] a) { a = Relu(x) },
                  else_branch = e () => (float[batch, 4] b) { b = Neg(x) }>
    }
    """
    report = deploycc.inspect(write_model(text))
    assert report.inputs[1]["dims"] == ["batch", 4]
    assert report.subgraph_count == 2
    assert report.control_flow_nodes == {"If": 1}
    assert report.node_count == 3


def _external_model(folder: Path, elements: int) -> Path:
    """A model whose one weight lives in a sparse external file: no disk or memory spent."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "weights.bin"
    with data.open("wb") as handle:
        handle.truncate(elements * 4)
    tensor = TensorProto(name="big", data_type=TensorProto.FLOAT, dims=[elements])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", "0"), ("length", str(elements * 4))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["big"], ["y"], keepdims=0)], "big",
        [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], initializer=[tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = folder / "big.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_external_data_is_listed(tmp_path: Path):
    report = deploycc.inspect(_external_model(tmp_path / "m", 1000))
    assert report.external_data == [{"location": "weights.bin", "size_bytes": 4000, "tensors": 1}]
    assert report.parameter_bytes == 4000


def test_check_finds_external_data_beside_the_model_from_any_directory(
        tmp_path: Path, monkeypatch):
    path = _external_model(tmp_path / "m", 1000)
    monkeypatch.chdir(tmp_path)  # not the model's folder
    report = deploycc.check(path, ["ort-cpu"])
    assert report.targets[0].legal


def test_a_model_over_2gb_is_inspected_and_checked_without_reading_its_weights(tmp_path: Path):
    elements = (2**31 + 2**28) // 4  # 2.25 GiB of float32
    path = _external_model(tmp_path / "huge", elements)
    code = (
        "import resource, deploycc, json, sys\n"
        f"r = deploycc.inspect({str(path)!r})\n"
        f"assert deploycc.check({str(path)!r}, ['ort-cpu', 'jetson-xavier']).exit_code == 0\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
        "print(json.dumps([r.parameter_bytes, r.external_data[0]['size_bytes'], peak]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    parameter_bytes, size, peak = (int(x) for x in out.stdout.strip()[1:-1].split(","))
    assert parameter_bytes == elements * 4 == size
    assert peak < 1 << 30, f"peak RSS {peak} bytes: the weights were read"
    assert os.path.getsize(path) < 1000  # the .onnx holds the graph only; the weights are external


def test_external_data_outside_the_folder_is_refused(tmp_path: Path):
    path = _external_model(tmp_path / "m", 10)
    model = onnx.load(path, load_external_data=False)
    model.graph.initializer[0].external_data[0].value = "../../etc/passwd"
    path.write_bytes(model.SerializeToString())
    try:
        deploycc.inspect(path)
    except ModelInputError as error:
        assert "climbs out" in str(error)
    else:
        raise AssertionError("a location outside the model's folder was accepted")


def test_a_torch_archive_is_named_not_called_truncated(tmp_path: Path):
    import zipfile

    from tests.cli.test_cli import run

    for name in ("model.pt2", "model.pt", "renamed.onnx"):  # torch's archives are zip files
        with zipfile.ZipFile(tmp_path / name, "w") as archive:
            archive.writestr("archive/data.pkl", b"not onnx")
    said = {name: run("inspect", str(tmp_path / name)) for name in ("model.pt2", "model.pt", "renamed.onnx")}
    for result in said.values():
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "truncated" not in result.stderr
    assert "a torch.export archive; inspect reads ONNX" in said["model.pt2"].stderr
    assert f"deploycc check {tmp_path / 'model.pt2'} -t TARGET" in said["model.pt2"].stderr
    assert "a TorchScript archive" in said["model.pt"].stderr
    assert "is a zip archive" in said["renamed.onnx"].stderr
    try:
        deploycc.inspect(tmp_path / "model.pt2")
    except ModelInputError as error:
        assert "deploycc.check(" in str(error)  # the API's terms
    else:
        raise AssertionError("inspect read a torch archive")
