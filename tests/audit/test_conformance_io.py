"""The probe's harness feeds every element type the conformance cases use, on the real backends.

Cases whose inputs are TensorProto, numpy scalars or ml_dtypes arrays (bfloat16, float8, int4,
int2, float4) once failed in the harness itself ("Unable to handle object of type TensorProto"),
counted against the backend. Here they run, and the comparison still fails on a wrong value.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import onnx
import pytest

from deploycc.audit.conformance import outcome, same
from deploycc.audit.probe import all_cases
from deploycc.backends.raw_values import decode, elem_type, storage_bytes

FED_CASES = ["test_cast_FLOAT_to_INT4", "test_cast_INT4_to_FLOAT", "test_cast_FLOAT_to_BFLOAT16",
             "test_cast_BFLOAT16_to_FLOAT", "test_cast_FLOAT8E4M3FN_to_FLOAT",
             "test_cast_FLOAT_to_FLOAT8E5M2", "test_cast_FLOAT_to_UINT2", "test_blackmanwindow_expanded"]


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2,
                                   ml_dtypes.float4_e2m1fn, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_storage_bits_round_trip(dtype) -> None:
    values = np.array([0, 1, -1, 2, 1, 0, -2, 1, 1], dtype=np.float32)
    if "uint" in np.dtype(dtype).name:
        values = np.abs(values)
    array = values.astype(dtype).reshape(3, 3)
    raw = storage_bytes(array)
    bits = {onnx.TensorProto.INT4: 4, onnx.TensorProto.INT2: 2}.get(elem_type(array))
    if bits is not None:  # packed: 9 values take ceil(9 * bits / 8) bytes
        assert len(raw) == -(-9 * bits // 8)
    back = decode(raw, [3, 3], elem_type(array))
    assert back.dtype == array.dtype and np.array_equal(back.astype(np.float32), array.astype(np.float32))


def test_comparison_fails_on_one_wrong_value() -> None:
    want = np.array([1, -2, 3, 7], dtype=ml_dtypes.int4)
    assert same(want.copy(), want)
    wrong = want.copy()
    wrong[2] = 2
    assert not same(wrong, want)
    half, one_and_half = (np.array(v, dtype=ml_dtypes.bfloat16) for v in ([0.5, 1.0], [0.5, 1.5]))
    assert not same(half, one_and_half)


@pytest.fixture(scope="module")
def fed_cases():
    return {case.name: case for case in all_cases() if case.name in FED_CASES}


@pytest.mark.parametrize("name", FED_CASES)
def test_exotic_inputs_and_outputs_run_on_onnxruntime(fed_cases, name: str) -> None:
    case = fed_cases[name]
    assert outcome("onnxruntime", case.model.SerializeToString(), case) == ("pass", "")


def test_openvino_gets_its_types_and_refuses_the_ones_it_lacks(fed_cases) -> None:
    for name in ["test_cast_INT4_to_FLOAT", "test_cast_BFLOAT16_to_FLOAT", "test_cast_FLOAT8E4M3FN_to_FLOAT"]:
        case = fed_cases[name]
        assert outcome("openvino", case.model.SerializeToString(), case) == ("pass", ""), name
    uint2 = fed_cases["test_cast_FLOAT_to_UINT2"]
    assert outcome("openvino", uint2.model.SerializeToString(), uint2)[0] in ("refused", "error")


def test_a_corrupted_expectation_is_a_mismatch(fed_cases) -> None:
    case = fed_cases["test_cast_FLOAT_to_INT4"]
    inputs, expected = case.data_sets[0]
    wrong = onnx.numpy_helper.to_array(expected[0]).copy()
    wrong.reshape(-1)[0] = wrong.reshape(-1)[0] + np.array(1, dtype=wrong.dtype)
    corrupted = dataclasses.replace(case, data_sets=[(inputs, [wrong])])
    assert outcome("onnxruntime", case.model.SerializeToString(), corrupted)[0] == "mismatch"
