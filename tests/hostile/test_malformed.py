"""Hostile and broken inputs: every command gives one line, exit code 2, no traceback, and
writes nothing; external data never leads a read or a write outside the model's folder."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.cli.test_cli import run

COMMANDS = {
    "inspect": lambda m, out: ["inspect", m],
    "check": lambda m, out: ["check", m, "-t", "jetson-xavier"],
    "legalize": lambda m, out: ["legalize", m, "-t", "ort-cpu", "-o", str(out / "legal.onnx")],
    "build": lambda m, out: ["build", m, "-t", "openvino-cpu", "-o", str(out / "build")],
    "bench": lambda m, out: ["bench", m, "--iterations", "2"],
}


def _value(name: str, dims: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _model(nodes, inputs, outputs, initializers=(), opsets=(("", 17),)) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 10
    return model.SerializeToString()


def _good() -> bytes:
    return _model([helper.make_node("Relu", ["x"], ["y"])], [_value("x", [2])], [_value("y", [2])])


def malformed() -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, a phrase the error must contain)."""
    rng = random.Random(7)
    good = _good()
    short = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1000], raw_data=b"\0" * 8)
    return {
        "zero bytes": (b"", "is empty"),
        "truncated": (good[: len(good) // 2], "not an ONNX model"),
        "truncated late": (good[:-3], "not an ONNX model"),
        "random bytes": (bytes(rng.randrange(256) for _ in range(512)), "not an ONNX model"),
        "protobuf, not a model": (onnx.TensorProto(name="t", dims=[1]).SerializeToString(),
                                  "not an ONNX model"),
        "cycle": (_model([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])],
                         [_value("x", [2])], [_value("a", [2])]), "topologically sorted"),
        "input nothing produces": (_model([helper.make_node("Add", ["x", "nowhere"], ["y"])],
                                          [_value("x", [2])], [_value("y", [2])]), "nowhere"),
        # (a value two nodes write is read in node order: tests/io/test_redefinitions.py)
        "a value that is also a graph input": (_model([helper.make_node("Relu", ["x"], ["x"])],
                                                      [_value("x", [2])], [_value("x", [2])]),
                                               "single static assignment"),
        "opset newer than onnx knows": (_model([helper.make_node("Relu", ["x"], ["y"])], [_value("x", [2])],
                                               [_value("y", [2])], opsets=(("", 99),)), "opset 99"),
        # A negative dim declared on a value is read as dynamic, as ONNX Runtime reads it
        # (tests/pipeline/test_real_model_shapes.py); on a tensor's data it is malformed.
        "negative tensor dim": (_model([helper.make_node("Add", ["x", "w"], ["y"])], [_value("x", [2])],
                                       [_value("y", [2])],
                                       [TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[-2])]),
                                "negative dim"),
        "absurd dims": (_model([helper.make_node("Relu", ["x"], ["y"])], [_value("x", [10**15, 10**15])],
                               [_value("y", [10**15, 10**15])]), "more than any real model"),
        "initializer size mismatch": (_model([helper.make_node("Add", ["x", "w"], ["y"])],
                                             [_value("x", [1000])], [_value("y", [1000])], [short]),
                                      "needs 4000"),
        "invalid utf-8 in an op name": (good.replace(b"Relu", b"R\xff\xfeu"), "utf-8"),
    }


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_malformed_model_is_one_line_exit_2_and_writes_nothing(command: str, tmp_path: Path) -> None:
    """`build` (the deepest command) reads every malformed model; each other command a quarter of
    them in turn, so every model meets two commands (they share the reader: io/read.py)."""
    others = [c for c in COMMANDS if c != "build"]
    chosen = {name: case for index, (name, case) in enumerate(malformed().items())
              if command == "build" or index % len(others) == others.index(command)}
    messages = set()
    for name, (data, phrase) in chosen.items():
        folder = tmp_path / name.replace(" ", "_").replace(",", "")
        folder.mkdir()
        model = folder / "m.onnx"
        model.write_bytes(data)
        out = folder / "out"
        out.mkdir()
        result = run(*COMMANDS[command](str(model), out))
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (name, result.stdout[-300:], result.stderr[-300:])
        assert len(lines) == 1 and lines[0].startswith("deploycc: error:"), (name, result.stderr)
        assert "Traceback" not in result.stderr and phrase in lines[0], (name, lines)
        assert list(out.iterdir()) == [], (name, list(out.iterdir()))  # no partial output
        assert model.read_bytes() == data
        messages.add(lines[0].split(": error: ", 1)[1].replace(str(model), "MODEL"))
    if command == "build":
        assert len(messages) >= 9, messages  # distinct problems get distinct messages


def test_an_audit_reports_each_malformed_model_as_an_invalid_model_cell(tmp_path: Path) -> None:
    """In a corpus a broken file is a failed cell, not a failed audit (exit 0, the audit ran)."""
    import json

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    cases = malformed()
    for index, (data, _) in enumerate(cases.values()):
        (corpus / f"m{index:02d}.onnx").write_bytes(data)
    result = run("audit", str(corpus), "-t", "ort-cpu", "-o", str(tmp_path / "audit"), "--stages", "check",
                 "--json", "--jobs", "2")
    assert result.returncode == 0, result.stderr
    cells = json.loads(result.stdout)["cells"]
    assert len(cells) == len(cases)
    assert all(c["status"] == "failed" and c["category"] == "invalid-model" for c in cells), \
        [(c["model"], c["category"], c["message"]) for c in cells if c["category"] != "invalid-model"]


def _external(folder: Path, location: str) -> Path:
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    model = folder / "m.onnx"
    model.write_bytes(_model([helper.make_node("Add", ["x", "w"], ["y"])], [_value("x", [4])],
                             [_value("y", [4])], [tensor]))
    return model


EXTERNAL_ESCAPES = {
    "direct ../ (CVE-2022-25882)": "../../etc/passwd",
    "nested sub/../../.. (CVE-2024-27318)": "sub/../../../etc/passwd",
    "absolute path": "/etc/passwd",
    "windows path": "C:\\\\Windows\\\\win.ini",
    "symlink leading out (CVE-2026-27489)": "link.bin",
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_external_data_escapes_are_refused_before_any_read(command: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    for name, location in EXTERNAL_ESCAPES.items():
        folder = tmp_path / name.split(" ")[0].replace("/", "_").replace(".", "d")
        folder.mkdir(exist_ok=True)
        if location == "link.bin":
            os.symlink(secret, folder / "link.bin")
        model = _external(folder, location)
        out = folder / "out"
        out.mkdir(exist_ok=True)
        result = run(*COMMANDS[command](str(model), out))
        assert result.returncode == 2, (name, result.stderr)
        words = ("external data", "outside", "climbs out")
        assert any(word in result.stderr for word in words), (name, result.stderr)
        assert list(out.iterdir()) == []


def test_external_data_keys_and_lengths_are_checked(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(b"\0" * 16)
    model = _external(tmp_path, "w.bin")
    proto = onnx.load(model, load_external_data=False)
    entry = proto.graph.initializer[0].external_data.add()
    entry.key, entry.value = "evil", "1"
    model.write_bytes(proto.SerializeToString())
    assert "unknown external-data key" in run("check", str(model)).stderr
    proto = onnx.load(model, load_external_data=False)
    del proto.graph.initializer[0].external_data[-1]
    proto.graph.initializer[0].external_data[2].value = str(1 << 40)  # length far beyond the file
    model.write_bytes(proto.SerializeToString())
    result = run("check", str(model))
    assert result.returncode == 2 and "length" in result.stderr


def test_written_external_data_uses_names_deploycc_chooses(tmp_path: Path) -> None:
    """The write-direction twin (CVE-2025-51480): the output's data file is named after the output."""
    weights = numpy_helper.from_array(np.ones(300_000, np.float32), "w")
    data = tmp_path / "in" / "weights.bin"
    data.parent.mkdir()
    model = data.parent / "m.onnx"
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [_value("x", [300_000])],
                              [_value("y", [300_000])], [weights])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(proto, model, save_as_external_data=True, location="weights.bin")
    out = tmp_path / "out" / "legal.onnx"
    result = run("legalize", str(model), "-t", "ort-cpu", "-o", str(out))
    assert result.returncode == 0, result.stderr
    written = onnx.load(out, load_external_data=False).graph.initializer[0]
    assert {e.key: e.value for e in written.external_data}["location"] == "legal.onnx.data"
    assert sorted(p.name for p in out.parent.iterdir()) == ["legal.onnx", "legal.onnx.data"]
    assert not (tmp_path / "escape.bin").exists()


def test_a_target_file_cannot_name_code(tmp_path: Path, write_model) -> None:
    target = tmp_path / "evil.toml"
    target.write_text('schema = 1\nname = "evil"\n[backend]\nkind = "onnxruntime"\nversion = "1"\n'
                      '[device]\nkind = "CPU"\n[opset]\nmin = 1\nmax = 20\npreferred = 17\n'
                      '[ops]\ntable = "ort-cpu-1.32"\n[shapes]\npolicy = "dynamic"\n'
                      '[precision]\nsupported = ["fp32"]\ndefault = "fp32"\n'
                      '[[restrict]]\nop = "Relu"\nrestrictions = ["x"]\n'
                      'predicates = [{ name = "__import__(\'os\').system(\'touch pwned\')" }]\n')
    result = run("check", str(write_model(_good())), "-t", str(target))
    assert result.returncode == 2 and "unknown predicate" in result.stderr
    assert not Path("pwned").exists() and not (tmp_path / "pwned").exists()


def test_a_model_too_large_for_the_memory_left_is_out_of_memory_not_malformed(tmp_path: Path) -> None:
    """protobuf's "Arena alloc failed" under a memory limit (ConvNeXt-L's export in an audit cell)
    is a MemoryError, which the audit counts as out-of-memory, not a malformed model."""
    import subprocess
    import sys

    weights = numpy_helper.from_array(np.ones((10 << 20,), np.float32), "w")  # 40 MB
    path = tmp_path / "big.onnx"
    path.write_bytes(_model([helper.make_node("Add", ["x", "w"], ["y"])], [_value("x", [10 << 20])],
                            [_value("y", [10 << 20])], [weights]))
    probe = f"""
import resource
from pathlib import Path
import onnx  # imported (with numpy) before the limit: what the limit starves is the parse alone
from deploycc.bench.memory import address_space_bytes
from deploycc.errors import ModelInputError
from deploycc.io.read import read_proto
limit = address_space_bytes() + {path.stat().st_size} + (24 << 20)  # room to read, not to parse too
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    read_proto(Path({str(path)!r}))
    print("parsed")
except MemoryError:
    print("memory")
except ModelInputError as error:
    print("malformed", error)
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert result.stdout.strip() == "memory", (result.stdout, result.stderr[-500:])
