"""A quantizer past protobuf's limit runs in a process of its own (quantize/isolated.py): what it
returns comes back as it would in this one, and a crash (ONNX Runtime's quantize_dynamic died by
SIGSEGV on a 4.4 GB decoder and took deploycc with it) is an exception with the reason."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import onnx
import pytest

from deploycc.quantize.dynamic import _quantize_dynamically
from deploycc.quantize.isolated import QuantizerCrashed, in_own_process
from examples.make_models import relu_mlp


def crash() -> None:
    import tempfile

    (Path(tempfile.gettempdir()) / "copy-of-the-model").write_bytes(b"0" * 1024)
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_crash_in_the_quantizers_process_is_an_exception_here(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """...and what it wrote in its temporary folder is gone (ORT's quantizer leaves a copy of the
    model there: 4.1 GB a crash, until the disk was full)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    with pytest.raises(QuantizerCrashed, match="crash's process died"):
        in_own_process(crash)
    assert not list(tmp_path.rglob("copy-of-the-model")) and not list(tmp_path.iterdir())


def test_its_result_comes_back_as_in_this_process(tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    onnx.save(relu_mlp((64, 64, 16), batch=2, std=0.1), model)
    (tmp_path / "here").mkdir()
    (tmp_path / "child").mkdir()
    here_file, here_note = _quantize_dynamically(model, tmp_path / "here")
    child_file, child_note = in_own_process(_quantize_dynamically, model, tmp_path / "child")
    assert child_note == here_note and "2 weight(s)" in child_note
    assert child_file.read_bytes() == here_file.read_bytes()


def test_the_streamed_int8_of_a_large_model_is_quantize_dynamics_own(tmp_path: Path) -> None:
    """Past 2 GB the dynamic int8 is written one weight at a time (quantize_dynamic held three copies
    of TinyLlama-1.1B's 4.2 GB, and the memory ceiling killed it): the same int8 weights and scales,
    as the DynamicQuantizeMatMul ORT's optimizer fuses quantize_dynamic's model into, so the same
    outputs, on inputs of another size than any drawn, and not the float model's."""
    import numpy as np
    import onnxruntime as ort

    from deploycc.quantize.dynamic import streamed_dynamic_int8
    from examples.make_models import encoder_block

    model = tmp_path / "encoder.onnx"
    onnx.save(encoder_block(seed=2), model)
    (tmp_path / "ort").mkdir()
    (tmp_path / "streamed").mkdir()
    by_ort, _ = _quantize_dynamically(model, tmp_path / "ort")
    streamed, note = streamed_dynamic_int8(model, tmp_path / "streamed")
    assert "6 MatMul weight(s) in int8" in note
    graph = onnx.load(streamed).graph
    assert sum(node.op_type == "DynamicQuantizeMatMul" for node in graph.node) == 6
    assert not [node for node in graph.node if node.op_type == "MatMul"]
    x = np.random.default_rng(3).normal(0, 1, (3, 11, 64)).astype(np.float32)

    def run(path: Path) -> np.ndarray:
        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    np.testing.assert_array_equal(run(streamed), run(by_ort))
    assert np.abs(run(streamed) - run(model)).max() > 1e-4  # the weights did change
