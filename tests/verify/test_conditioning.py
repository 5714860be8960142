"""Outputs that turn on the last bit (TopK among near-tied scores) are judged against the
original's own spread under rounding-level input moves; everything else stays elementwise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc.verify.verification import PERTURBATION_TRIALS, PERTURBATION_TRIALS_MAX, compare_all

FEATURES, CANDIDATES, KEEP = 64, 2000, 50


def _scorer(path: Path, weights: np.ndarray, *, split: bool = False) -> Path:
    """x [1, 64] -> scores = x @ W -> TopK(50) values and indices, and boxes = x @ B beside them (a
    detector's regression: the output with signal, where the tied scores have almost none). With
    split, the MatMul is two halves summed: the same function, rounded differently."""
    boxes = np.random.default_rng(2).standard_normal((FEATURES, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array([KEEP], np.int64), "k"), numpy_helper.from_array(boxes, "b")]
    if split:
        half = FEATURES // 2
        inits += [numpy_helper.from_array(weights[:half], "w0"),
                  numpy_helper.from_array(weights[half:], "w1")]
        nodes = [helper.make_node("Split", ["x"], ["x0", "x1"], axis=1, num_outputs=2),
                 helper.make_node("MatMul", ["x0", "w0"], ["p0"]),
                 helper.make_node("MatMul", ["x1", "w1"], ["p1"]),
                 helper.make_node("Add", ["p1", "p0"], ["scores"])]
    else:
        inits.append(numpy_helper.from_array(weights, "w"))
        nodes = [helper.make_node("MatMul", ["x", "w"], ["scores"])]
    nodes.append(helper.make_node("TopK", ["scores", "k"], ["values", "indices"], axis=1))
    nodes.append(helper.make_node("MatMul", ["x", "b"], ["boxes"]))
    graph = helper.make_graph(
        nodes, "scorer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, FEATURES])],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, [1, KEEP]),
         helper.make_tensor_value_info("indices", TensorProto.INT64, [1, KEEP]),
         helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 4])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def _run(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def _case(tmp_path: Path, spread: float) -> tuple[Path, Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    # Every candidate's column is one shared vector plus `spread` of noise: near-ties when small.
    weights = (rng.standard_normal((FEATURES, 1)) + spread * rng.standard_normal((FEATURES, CANDIDATES)))
    weights = weights.astype(np.float32)
    feeds = {"x": rng.standard_normal((1, FEATURES)).astype(np.float32)}
    original = _scorer(tmp_path / "original.onnx", weights)
    return original, _scorer(tmp_path / "split.onnx", weights, split=True), feeds


def test_a_selection_among_near_ties_passes_within_the_originals_own_spread(tmp_path: Path) -> None:
    original, candidate, feeds = _case(tmp_path, spread=1e-6)
    expected, actual = _run(original, feeds), _run(candidate, feeds)
    assert not np.array_equal(expected["indices"], actual["indices"])  # the rounding moved the selection
    plain = compare_all(expected, actual, reference="onnxruntime", inputs="seed", precision="fp32")
    assert not plain.passed
    judged = compare_all(expected, actual, reference="onnxruntime", inputs="seed", precision="fp32",
                         original=(original, feeds))
    assert judged.passed and "indices" in judged.ill_conditioned
    assert "ill-conditioned" in judged.caveat()
    # the tied scores are one value up to float32 rounding: reported, never called "ok"
    values = next(o for o in judged.outputs if o.name == "values")
    assert values.degenerate.startswith("constant") and "values not judged" in judged.caveat()


def test_a_wrong_candidate_on_an_ill_conditioned_output_still_fails(tmp_path: Path) -> None:
    original, _, feeds = _case(tmp_path, spread=1e-6)
    expected = _run(original, feeds)
    wrong = {"values": expected["values"] * 1.5, "indices": expected["indices"][:, ::-1].copy(),
             "boxes": expected["boxes"]}
    judged = compare_all(expected, wrong, reference="onnxruntime", inputs="seed", precision="fp32",
                         original=(original, feeds))
    assert not judged.passed and not judged.ill_conditioned


def test_a_well_conditioned_mismatch_is_not_excused(tmp_path: Path) -> None:
    original, _, feeds = _case(tmp_path, spread=1.0)  # scores far apart: the selection is stable
    expected = _run(original, feeds)
    shifted = dict(expected, values=expected["values"] + 1e-2)
    judged = compare_all(expected, shifted, reference="onnxruntime", inputs="seed", precision="fp32",
                         original=(original, feeds))
    assert not judged.passed and not judged.ill_conditioned


def test_a_candidate_far_outside_the_originals_spread_fails_without_more_trials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A difference of large products (the output moves by 1e-2 of itself when the input moves by 16
    roundings) is judged against the original's spread; a candidate a thousand times further out than
    the first trials fails after them (more trials widen the spread by a sample's tail), one nearer
    runs every trial before it fails (bf16 LR-ASPP's map, cosine 0.82, ran 15 more runs for nothing)."""
    from deploycc.verify import runner
    from tests.pipeline.test_precision_auto import _cancelling_model

    path = tmp_path / "cancelling.onnx"
    onnx.save(_cancelling_model(), path)
    feeds = {"x": np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)}
    expected = _run(path, feeds)
    runs: list[int] = []
    real = runner.run_session

    def counted(*args, **kwargs):  # the real run, counted
        runs.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "run_session", counted)
    near = {"y": expected["y"] + 0.01 * np.abs(expected["y"]).max()}
    for candidate, trials in (({"y": -expected["y"]}, PERTURBATION_TRIALS), (near, PERTURBATION_TRIALS_MAX)):
        runs.clear()
        judged = compare_all(expected, candidate, reference="onnxruntime", inputs="seed", precision="fp32",
                             original=(path, feeds))
        assert not judged.passed and not judged.ill_conditioned
        assert len(runs) == trials
