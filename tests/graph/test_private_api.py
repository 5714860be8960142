"""The private APIs of onnx-ir and onnxscript, all in deploycc/graph/private_api.py: the installed
versions are the ones they were read at, each name is still there, and each does what deploycc
uses it for."""

from __future__ import annotations

import ast
import importlib
from importlib.metadata import version
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from deploycc.graph import private_api
from tests.conftest import REPO, parse

ADAPTER = "deploycc/graph/private_api.py"


@pytest.mark.parametrize("distribution", sorted(private_api.READ_AT))
def test_the_installed_version_is_the_one_the_private_apis_were_read_at(distribution: str) -> None:
    installed, read_at = version(distribution), private_api.READ_AT[distribution]
    assert installed == read_at, (
        f"{distribution} {installed} is installed, but the private APIs in {ADAPTER} were read at "
        f"{read_at}: read each entry of its docstring again in {distribution} {installed}'s source, "
        f"mend what moved, then set READ_AT[{distribution!r}] = {installed!r}")


@pytest.mark.parametrize("name", sorted(private_api.PRIVATE_NAMES))
def test_each_private_name_is_still_there(name: str) -> None:
    module_name, private_name = private_api.PRIVATE_NAMES[name]
    gone = (f"{module_name}.{private_name}, which {ADAPTER} calls {name}, is gone: read its docstring's "
            f"entry again")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        pytest.fail(gone)
    assert hasattr(module, private_name), gone
    assert getattr(private_api, name) is getattr(module, private_name)


def _weighted() -> ir.Model:
    """y = Relu(MatMul(x, w) + b), w large enough (4 KB) to be held out of a C API call."""
    proto = parse("""
        <ir_version: 8, opset_import: ["" : 17]>
        weighted (float[N, 32] x) => (float[N, 32] y) {
            h = MatMul(x, w)
            a = Add(h, b)
            y = Relu(a)
        }""")
    rng = np.random.default_rng(0)
    proto.graph.initializer.extend([
        onnx.numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "w"),
        onnx.numpy_helper.from_array(np.ones(32, np.float32), "b")])
    return ir.serde.deserialize_model(proto)


def test_a_c_api_call_sees_the_model_without_its_large_weights_and_leaves_it_whole() -> None:
    model = _weighted()
    weights = {name: value.const_value.numpy().copy() for name, value in model.graph.initializers.items()}
    inputs = [value.name for value in model.graph.inputs]
    seen: dict[str, list[str]] = {}

    def call(proto: onnx.ModelProto) -> str:
        seen["initializers"] = [tensor.name for tensor in proto.graph.initializer]
        seen["inputs"] = [value.name for value in proto.graph.input]
        return "answer"

    assert private_api.call_onnx_api(call, model) == "answer"
    assert seen["initializers"] == ["b"] and "w" in seen["inputs"]  # w travels as a typed input
    assert [value.name for value in model.graph.inputs] == inputs
    assert sorted(model.graph.initializers) == sorted(weights)
    for name, array in weights.items():
        np.testing.assert_array_equal(model.graph.initializers[name].const_value.numpy(), array)


def test_inferred_shapes_are_merged_onto_the_ir_values() -> None:
    model = _weighted()
    hidden = next(node for node in model.graph if node.op_type == "MatMul").outputs[0]
    assert hidden.shape is None
    inferred = private_api.call_onnx_api(onnx.shape_inference.infer_shapes, model)
    assert private_api.merge_inferred_shapes(model, inferred) is True
    assert hidden.dtype == ir.DataType.FLOAT and [str(d) for d in hidden.shape] == ["N", "32"]


def test_a_match_result_succeeds_until_it_fails_with_a_reason() -> None:
    assert private_api.MatchResult()
    failed = private_api.MatchResult().fail("the constants differ")
    assert not failed and failed.reason == "the constants differ"


def _private_imports(path: Path) -> list[str]:
    """Imports of a private onnx-ir or onnxscript module or name in a source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules, names = [node.module], [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [alias.name for alias in node.names], []
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] in ("onnx_ir", "onnxscript") and any(p.startswith("_") for p in parts[1:] + names):
                found.append(f"{path.name}:{node.lineno} {module} {names}")
    return found


def test_no_module_but_the_adapter_imports_a_private_name() -> None:
    sources = [path for path in sorted((REPO / "deploycc").rglob("*.py")) if path.name != "private_api.py"]
    found = [line for path in sources for line in _private_imports(path)]
    assert not found, f"private imports outside {ADAPTER}: {found}"
    assert _private_imports(REPO / ADAPTER)  # the check does see them
