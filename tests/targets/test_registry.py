"""Targets are data: the eight built-ins load, user files and search paths work, errors name key."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

from deploycc.errors import TargetError
from deploycc.targets import registry
from tests.conftest import REPO, SHARED_CAPABILITIES

BUILTIN = ["gpu-trt10", "jetson-nano", "jetson-nano-ort", "jetson-orin", "jetson-orin-ort", "jetson-xavier",
           "jetson-xavier-ort", "openvino-cpu", "ort-cpu", "ort-cuda", "ort-trt"]


def test_the_builtin_targets_load_with_their_backends():
    targets = {t.name: t for t in registry.list_targets()}
    assert sorted(targets) == BUILTIN
    assert targets["ort-cpu"].backend.kind == "onnxruntime"
    # onnxruntime-gpu: its providers behind the target's own, in ORT's order
    assert targets["ort-trt"].backend.execution_provider == "TensorrtExecutionProvider"
    assert targets["ort-trt"].fallback == ("ort-cuda", "ort-cpu")
    assert targets["ort-cuda"].fallback == ("ort-cpu",)
    assert targets["openvino-cpu"].backend.kind == "openvino"
    assert targets["jetson-nano"].backend.version.startswith("8.2")
    assert targets["jetson-xavier"].backend.version == "8.5.2"
    assert targets["jetson-xavier"].dla is not None and targets["jetson-xavier"].dla.cores == 2
    assert targets["jetson-orin"].dla is not None
    assert targets["gpu-trt10"].backend.version.startswith("10.")
    assert targets["jetson-xavier"].opset.max == 17 and targets["jetson-nano"].opset.max == 13
    assert "float64" in targets["gpu-trt10"].dtypes.unsupported
    assert targets["jetson-xavier"].dtypes.computed_as_dtype("int64") == "int32"
    assert targets["gpu-trt10"].dtypes.computed_as_dtype("int64") == "int64"


def test_export_policy_is_target_data():
    """TensorRT 8.x boards export with TorchScript first (TensorRT #3934); the rest with dynamo."""
    orders = {t.name: t.export.exporters for t in registry.list_targets()}
    assert orders["jetson-nano"][0] == orders["jetson-xavier"][0] == orders["jetson-orin"][0] == "torchscript"
    assert orders["gpu-trt10"][0] == orders["ort-cpu"][0] == orders["openvino-cpu"][0] == "dynamo"
    assert all(sorted(order) == ["dynamo", "torchscript"] for order in orders.values())


def test_default_target_is_ort_cpu():
    assert registry.resolve().name == "ort-cpu"


def test_op_tables_keep_their_provenance():
    for target in registry.list_targets():
        source = target.ops.source
        assert source.repo, target.name
        assert source.url or source.path, target.name
    assert registry.resolve("jetson-xavier").ops.source.commit == "7583da4c62475e84b7be31f4b8fb0c101873d434"


def test_aliases_resolve():
    assert registry.resolve("xavier").name == "jetson-xavier"
    assert registry.resolve("ov").name == "openvino-cpu"


def test_unknown_target_suggests_the_nearest():
    with pytest.raises(TargetError, match="did you mean 'jetson-orin'"):
        registry.resolve("jetson-orinn")


def test_jetpack_release_switches_tensorrt_opset_and_op_table():
    default = registry.resolve("jetson-xavier")
    older = registry.resolve("jetson-xavier", jetpack="4.6.1")
    assert default.jetpack is not None and default.jetpack.release == "5.1.2"
    assert older.backend.version == "8.2.1"
    assert older.opset.max == 13
    assert older.ops.name == "onnx-tensorrt-8.2+jetson-xavier"  # the vendor table, the target's corrections
    assert dict(older.jetpack.facts)["jetson_linux_l4t"] == "32.7.1"
    assert older.spec_hash != default.spec_hash
    orin_trt10 = registry.resolve("jetson-orin", jetpack="6.2")
    assert orin_trt10.ops.name == "onnx-tensorrt-10+jetson-orin"
    assert orin_trt10.dtypes.computed_as_dtype("int64") == "int64"  # TRT 10 carries int64


def test_unknown_jetpack_release_is_refused_with_the_available_ones():
    with pytest.raises(TargetError, match=r"available: .*5\.1\.2"):
        registry.resolve("jetson-xavier", jetpack="3.0")
    with pytest.raises(TargetError, match="not a Jetson target"):
        registry.resolve("ort-cpu", jetpack="5.1.2")


def test_spec_hash_is_stable_and_covers_the_op_table():
    first = registry.resolve("jetson-orin").spec_hash
    assert first == registry.resolve("orin").spec_hash
    assert len(first) == 64


MY_BOARD = """
schema = 1
name = "my-board"
description = "a board of our own, on the TensorRT 8.5 table"
[backend]
kind = "tensorrt"
version = "8.5.2"
[device]
kind = "GPU"
name = "custom"
[opset]
max = 17
[ops]
table = "onnx-tensorrt-8.5"
[shapes]
policy = "static"
[precision]
supported = ["fp16"]
default = "fp16"
[[op]]
op = "LayerNormalization"
status = "supported"
dtypes = ["float32", "float16"]
"""


def test_user_target_file_by_path_with_inline_op_override(tmp_path: Path):
    path = tmp_path / "my-board.toml"
    path.write_text(MY_BOARD)
    target = registry.resolve(str(path))
    assert target.name == "my-board"
    assert target.shapes.policy == "static"
    (entry,) = target.ops.lookup("", "LayerNormalization")
    assert entry.status == "supported"
    assert target.ops.lookup("", "Conv")  # the rest of the table is kept


def test_search_path_env_finds_user_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "my-board.toml").write_text(MY_BOARD)
    monkeypatch.setenv(registry.TARGET_PATH_ENV, str(tmp_path))
    assert registry.resolve("my-board").name == "my-board"
    assert "my-board" in registry.target_files()


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda s: s.replace('kind = "tensorrt"', 'kind = "tensorflow"'), "backend.kind"),
        (lambda s: s.replace("max = 17", 'max = "seventeen"'), "opset.max"),
        (lambda s: s.replace('supported = ["fp16"]', 'supported = ["fp13"]'), "precision.supported[0]"),
        (lambda s: s.replace("[shapes]", "[shapez]"), "shapez"),
        (lambda s: s.replace('dtypes = ["float32", "float16"]', 'dtypes = ["float31"]'),
         "op[0].dtypes[0]"),
        (lambda s: s.replace('status = "supported"', 'status = "maybe"'), "op[0].status"),
        (lambda s: s + '\n[[restrict]]\nop = "Conv"\npredicates = ["run_shell"]\n',
         "restrict[0].predicates[0]"),
        (lambda s: s + '\n[[restrict]]\nop = "Conv"\npredicates = [{ name = "attribute_in" }]\n',
         "restrict[0].predicates[0]"),
        (lambda s: s + '\n[export]\nexporters = ["onnx2torch"]\n', "export.exporters[0]"),
        (lambda s: s + '\n[export]\nopset = 21\n', "export.opset"),  # above the target's opset.max
    ],
)
def test_malformed_target_file_error_names_file_and_key(tmp_path: Path, edit, key: str):
    path = tmp_path / "bad.toml"
    path.write_text(edit(MY_BOARD))
    with pytest.raises(TargetError) as error:
        registry.resolve(str(path))
    assert str(path) in str(error.value)
    assert f"'{key}'" in str(error.value)


def test_unknown_predicate_is_a_load_error_not_code(tmp_path: Path):
    path = tmp_path / "evil.toml"
    path.write_text(MY_BOARD + '\n[[restrict]]\nop = "Conv"\npredicates = ["__import__"]\n')
    with pytest.raises(TargetError, match="unknown predicate '__import__'"):
        registry.resolve(str(path))


def test_invalid_toml_is_a_target_error(tmp_path: Path):
    path = tmp_path / "broken.toml"
    path.write_text("name = [unclosed\n")
    with pytest.raises(TargetError, match="not valid TOML"):
        registry.resolve(str(path))


@pytest.mark.skipif(not SHARED_CAPABILITIES.is_dir(),
                    reason="../shared/capabilities is not beside this checkout")
def test_shipped_tables_are_exactly_what_the_importer_makes_from_the_vendor_data(tmp_path: Path):
    subprocess.run([sys.executable, str(REPO / "tools" / "import_capabilities.py"), "--shared",
                    str(SHARED_CAPABILITIES), "--out", str(tmp_path)], check=True, capture_output=True)
    shipped = REPO / "targets" / "tables"
    names = sorted(p.name for p in tmp_path.glob("*.toml"))
    assert names == sorted(p.name for p in shipped.glob("*.toml"))
    _, mismatch, errors = filecmp.cmpfiles(tmp_path, shipped, names, shallow=False)
    assert not mismatch and not errors, f"regenerate with tools/import_capabilities.py: {mismatch}"


def test_no_runtime_code_reads_the_shared_folder():
    for path in (REPO / "deploycc").rglob("*.py"):
        assert "shared/capabilities" not in path.read_text(), path


def test_a_variant_extends_its_board_and_states_only_what_differs():
    """jetson-orin-ort: ONNX Runtime's TensorRT provider on the Orin. The board's facts (memory,
    the parser's table per JetPack, int64 narrowing) come from jetson-orin; name, aliases, DLA and
    the backend are its own, and each JetPack names the ORT release built for its TensorRT."""
    board, variant = registry.resolve("jetson-orin"), registry.resolve("orin-ort")
    assert variant.name == "jetson-orin-ort" and "orin" not in variant.aliases
    assert variant.backend.kind == "onnxruntime" and variant.backend.version == "1.17"
    assert variant.fallback == ("ort-cuda", "ort-cpu") and variant.dla is None and variant.mode == "partial"
    assert variant.memory == board.memory and variant.shapes == board.shapes
    assert variant.ops.name == "onnx-tensorrt-8.6+jetson-orin-ort"
    assert variant.dtypes.computed_as_dtype("int64") == "int32" and variant.dtypes.unsupported == ()
    trt10 = registry.resolve("jetson-orin-ort", jetpack="6.2")
    assert trt10.backend.version == "1.19" and trt10.ops.name.startswith("onnx-tensorrt-10")
    assert trt10.dtypes.computed_as_dtype("int64") == "int64" and trt10.opset.max == 20
    assert registry.resolve("jetson-nano-ort").precision.refused == board_refusals("jetson-nano")


def board_refusals(name: str):
    return registry.resolve(name).precision.refused


def test_extends_errors_name_the_file_and_key(tmp_path: Path):
    (tmp_path / "a.toml").write_text('schema = 1\nextends = "b"\nname = "a"\n')
    (tmp_path / "b.toml").write_text('schema = 1\nextends = "a"\nname = "b"\n')
    with pytest.raises(TargetError, match=r"a.toml: key 'extends': 'b' extends this file again|"
                                          r"b.toml: key 'extends': 'a' extends this file again"):
        registry.load_target_file(tmp_path / "a.toml")
    (tmp_path / "c.toml").write_text('schema = 1\nextends = "no-such-board"\nname = "c"\n')
    with pytest.raises(TargetError, match="key 'extends': no target file named 'no-such-board'"):
        registry.load_target_file(tmp_path / "c.toml")
    # a user's own variant of a built-in: found by name among the built-ins
    (tmp_path / "mine.toml").write_text('schema = 1\nextends = "jetson-nano"\nname = "mine"\n'
                                        '[memory]\nbudget_mb = 2048\n')
    mine = registry.load_target_file(tmp_path / "mine.toml")
    assert mine.memory.budget_mb == 2048 and mine.opset.max == 13 and mine.aliases == ()


def test_every_declared_predicate_is_implemented_and_nothing_else():
    """A target is checked against the vocabulary; legality judges with its registry: the two agree,
    so a name that passes loading never fails the check for want of code."""
    from deploycc.legality.predicates import REGISTRY
    from deploycc.targets.vocabulary import PREDICATES

    assert set(REGISTRY) == set(PREDICATES)
    assert all(REGISTRY[name].signature is PREDICATES[name] for name in PREDICATES)
