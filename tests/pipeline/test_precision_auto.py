"""`--precision auto`: every candidate the target offers is built by the build's own stages and
judged against the budget; one that breaks it is never chosen (the slower one is kept, and the
report says why), a device target takes its default from its data, and the chosen precision is the
one built and verified. Which candidate is fastest is this machine's measurement: the tests assert
the rule that chose, not a speed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploycc import api
from deploycc.options import BuildOptions, QuantizeOptions
from deploycc.pipeline.precision_timing import FASTER
from deploycc.taxonomy import CandidateOutcome, Precision
from examples.make_models import relu_mlp, small_cnn
from tests.cli.test_cli import run as run_cli


def _cancelling_model() -> onnx.ModelProto:
    """y = x @ A - x @ B with B a hair from A: in fp32 the difference is x @ (A - B); in bf16 or fp16
    each product's rounding (0.4% or 0.05% of a large value) is larger than the difference itself,
    and in int8 so is each product's quantization step."""
    rng = np.random.default_rng(0)
    a = rng.normal(0, 1, (64, 32)).astype(np.float32) * 100
    b = a + rng.normal(0, 0.01, a.shape).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "a"], ["xa"]), helper.make_node("MatMul", ["x", "b"], ["xb"]),
         helper.make_node("Sub", ["xa", "xb"], ["y"])], "cancelling",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        [numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def cancelling(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("auto") / "cancelling.onnx"
    onnx.save(_cancelling_model(), path)
    return path


def _candidates(report) -> dict[Precision, object]:
    assert report.precision_choice is not None
    return {c.precision: c for c in report.precision_choice.candidates}


def test_a_half_candidate_over_budget_is_not_chosen_and_says_why(cancelling: Path, tmp_path: Path) -> None:
    half = Precision.BF16
    # without the half analysis nothing is kept in fp32: the half engine is as broken as half makes it
    options = BuildOptions(choose_precision=True, half_analysis=False, bench=False)
    report = api.build(cancelling, "openvino-cpu", tmp_path / "out", options)
    candidates = _candidates(report)
    assert candidates[half].outcome == CandidateOutcome.OVER_BUDGET, candidates[half]
    assert candidates[half].why  # the verification's or the cosine's words
    assert report.precision == Precision.FP32 and report.status == "verified", report.summary
    assert candidates[Precision.FP32].outcome == CandidateOutcome.CHOSEN
    assert "## Precision: fp32 (--precision auto" in (tmp_path / "out" / "report.md").read_text()
    assert not (tmp_path / "out" / ".precision").exists()  # the candidates' folders are gone


def test_the_half_analysis_runs_only_where_every_layer_in_half_is_over_budget(cancelling: Path,
                                                                              tmp_path: Path) -> None:
    """A half candidate is built in every layer's half first; the analysis (which layers to keep in
    fp32) and a second build follow only where that engine breaks the budget."""
    broken = api.build(cancelling, "openvino-cpu", tmp_path / "broken", BuildOptions(bench=False))
    built = [p for p in (Precision.BF16, Precision.FP16)
             if _candidates(broken)[p].outcome != CandidateOutcome.NOT_MEASURED]  # fp16 may be bf16 here
    assert Precision.BF16 in built
    for half in built:
        candidate = _candidates(broken)[half]
        assert candidate.outcome == CandidateOutcome.OVER_BUDGET, candidate
        assert "half analysis's 2 layer(s) kept in fp32" in candidate.why, candidate.why  # MatMul_0, _1
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=5), model)
    fine = api.build(model, "openvino-cpu", tmp_path / "fine", BuildOptions(bench=False))
    timed = {p: c for p, c in _candidates(fine).items()
             if p in (Precision.BF16, Precision.FP16) and c.ratio is not None}
    assert timed, fine.precision_choice  # a small CNN is within budget in either half, and timed
    for half, candidate in timed.items():
        assert candidate.why.endswith(f"; every layer in {half}"), candidate.why
    if fine.precision in timed:  # the chosen half engine: no analysis in its report, and it says why
        assert fine.half is None
        assert f"{fine.precision}: every layer in {fine.precision}, within the budget" in " ".join(fine.notes)


def test_an_ill_conditioned_output_is_judged_by_the_originals_spread_not_by_cosine(tmp_path: Path) -> None:
    """TopK among near-tied scores: OpenVINO's fp32 selects other indices, as the original itself does
    when its inputs move by a few roundings, and verification passes the output so. The search judged
    the same output by cosine and called the fp32 engine it delivered over budget (SSDlite). A half
    candidate whose analysis keeps no layer in fp32 (it judges the float outputs, within) is not built
    a second time: the same engine."""
    from deploycc.backends.openvino import _computed_as
    from tests.verify.test_conditioning import _case

    original, _, _ = _case(tmp_path, spread=1e-6)
    report = api.build(original, "openvino-cpu", tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "verified" and report.verification is not None, report.summary
    if "indices" not in report.verification.ill_conditioned:
        pytest.skip("OpenVINO's fp32 selected ONNX Runtime's very indices here: nothing ill-conditioned")
    candidates = _candidates(report)
    assert candidates[Precision.FP32].outcome == CandidateOutcome.CHOSEN, candidates[Precision.FP32]
    assert candidates[Precision.FP32].min_cosine < 0.999  # the cosine it was wrongly refused for
    if _computed_as("CPU", Precision.BF16) == Precision.BF16:
        bf16 = candidates[Precision.BF16]
        assert bf16.outcome == CandidateOutcome.OVER_BUDGET, bf16
        assert "the half analysis keeps no layer in fp32" in bf16.why, bf16.why


def test_a_half_precision_the_device_computes_as_another_is_not_built(tmp_path: Path) -> None:
    """OpenVINO's CPU plugin picks by the CPU's units: f16 runs as bf16 on a CPU without FP16 ones.
    Such a candidate is the other's engine under another name: declined, with the reason, never
    timed or reported as what it is not."""
    from deploycc.backends.openvino import _computed_as

    computed = _computed_as("CPU", Precision.FP16)
    assert computed in (Precision.FP16, Precision.BF16, Precision.FP32)
    assert _computed_as("CPU", Precision.FP32) == Precision.FP32
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=6), model)
    report = api.build(model, "openvino-cpu", tmp_path / "out", BuildOptions(bench=False))
    fp16 = _candidates(report)[Precision.FP16]
    if computed == Precision.FP16:  # a CPU with FP16 units: built and judged like any candidate
        assert fp16.outcome != CandidateOutcome.NOT_MEASURED, fp16
    else:
        assert fp16.outcome == CandidateOutcome.NOT_MEASURED and f"computes fp16 as {computed}" in fp16.why
        pinned = api.build(model, "openvino-cpu", tmp_path / "pinned",
                           BuildOptions(precision=Precision.FP16, bench=False))
        assert pinned.artifact is not None
        assert any(f"computes fp16 as {computed}" in note for note in pinned.artifact.notes), pinned.artifact


def test_a_dynamic_int8_candidate_over_budget_is_not_chosen(cancelling: Path, tmp_path: Path) -> None:
    # no calibration data: ORT's recipe offers int8 with the MatMul weights quantized ahead
    options = BuildOptions(choose_precision=True, bench=False)
    report = api.build(cancelling, "ort-cpu", tmp_path / "out", options)
    int8 = _candidates(report)[Precision.INT8]
    assert int8.outcome == CandidateOutcome.OVER_BUDGET, int8
    assert report.precision != Precision.INT8 and report.status == "verified", report.summary


def test_a_dynamic_int8_candidate_within_budget_is_timed_and_when_chosen_built(tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    onnx.save(relu_mlp((256, 256, 256), batch=16, std=0.05, seed=2), model)
    out = tmp_path / "out"
    report = api.build(model, "ort-cpu", out, BuildOptions(choose_precision=True, bench=False))
    assert report.status == "verified", report.summary
    int8 = _candidates(report)[Precision.INT8]
    assert int8.outcome in (CandidateOutcome.CHOSEN, CandidateOutcome.NOT_FASTER), int8  # within budget
    assert int8.ratio is not None and int8.min_cosine is not None and int8.min_cosine >= 0.999
    if report.precision == Precision.INT8:  # the artifact is the quantized model, verified
        ops = {node.op_type for node in onnx.load(out / "model.ort.onnx").graph.node}
        assert ops & {"DynamicQuantizeMatMul", "MatMulInteger", "DynamicQuantizeLinear"}, ops
        assert report.verification is not None and report.verification.passed


def test_a_dynamic_int8_candidate_is_built_only_where_it_changes_something(tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"  # Conv and Gemm: no MatMul reads a constant
    onnx.save(small_cnn(), model)
    report = api.build(model, "ort-cpu", tmp_path / "out", BuildOptions(choose_precision=True, bench=False))
    assert Precision.INT8 not in _candidates(report)


def test_an_int8_candidate_the_guard_refuses_is_not_chosen(cancelling: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    calibration = tmp_path / "calibration"
    calibration.mkdir()
    for index in range(12):
        np.savez(calibration / f"{index:02d}.npz", x=rng.standard_normal((4, 64)).astype(np.float32))
    options = BuildOptions(choose_precision=True, half_analysis=False, bench=False,
                           quantize=QuantizeOptions(calibration=calibration, metric="cosine", max_drop=0.001))
    report = api.build(cancelling, "ort-cpu", tmp_path / "out", options)
    int8 = {c.recipe: c for c in report.precision_choice.candidates if c.precision == Precision.INT8}
    calibrated, dynamic = int8["calibrated on the given samples"], int8["dynamic"]
    assert calibrated.outcome == CandidateOutcome.OVER_BUDGET and "int8 guard kept" in calibrated.why, int8
    assert dynamic.outcome == CandidateOutcome.OVER_BUDGET, dynamic  # without data: over budget as well
    assert report.precision != Precision.INT8 and report.status == "verified", report.summary


def _mlp_and_samples(folder: Path, width: int) -> tuple[Path, Path]:
    """A ReLU MLP of `width` at batch 16, and a folder of 10 calibration samples for it."""
    model = folder / "mlp.onnx"
    onnx.save(relu_mlp((width, width, width), batch=16, std=0.05, seed=2), model)
    rng = np.random.default_rng(3)
    calibration = folder / "calibration"
    calibration.mkdir()
    for index in range(10):
        np.savez(calibration / f"{index:02d}.npz", x=rng.standard_normal((16, width)).astype(np.float32))
    return model, calibration


def test_given_data_int8_is_tried_calibrated_and_dynamic_and_the_chosen_one_built(tmp_path: Path) -> None:
    """Calibration data adds a candidate, it takes none away: ORT's dynamic int8 (no data needed) is
    built and timed beside the calibrated one, each named by its recipe, and the artifact is the one
    chosen."""
    model, calibration = _mlp_and_samples(tmp_path, 256)
    options = BuildOptions(choose_precision=True, bench=False,
                           quantize=QuantizeOptions(calibration=calibration))
    out = tmp_path / "out"
    report = api.build(model, "ort-cpu", out, options)
    assert report.status == "verified", report.summary
    int8 = {c.recipe: c for c in report.precision_choice.candidates if c.precision == Precision.INT8}
    assert set(int8) == {"calibrated on the given samples", "dynamic"}, int8
    assert int8["dynamic"].ratio is not None and int8["dynamic"].min_cosine >= 0.999  # built and timed
    chosen = next(c for c in report.precision_choice.candidates if c.outcome == CandidateOutcome.CHOSEN)
    ops = {node.op_type for node in onnx.load(out / "model.ort.onnx").graph.node}
    if chosen.recipe == "dynamic":
        assert ops & {"DynamicQuantizeMatMul", "MatMulInteger"}, ops
    elif chosen.recipe:
        assert ops & {"QLinearMatMul", "QuantizeLinear", "MatMulIntegerToFloat", "QGemm"}, ops
    assert "int8 (dynamic)" in (out / "report.md").read_text()
    _raced_if_both_faster(list(int8.values()))


def _raced_if_both_faster(candidates: list) -> None:
    """Where two candidates are faster than fp32, each says it was raced against the other, and one is
    chosen."""
    faster = [c for c in candidates if c.ci95 is not None and c.ci95[1] < FASTER]
    if len(faster) == 2:
        assert all("directly:" in c.why for c in faster), [c.why for c in faster]
        assert sum(c.outcome == CandidateOutcome.CHOSEN for c in faster) == 1, faster


def test_two_candidates_faster_than_fp32_are_raced_against_each_other(tmp_path: Path) -> None:
    """bf16 and int8 each faster than fp32 are raced directly, and the narrower displaces the other only
    where faster than it beyond the noise: each raced against fp32 alone, a Whisper encoder's bf16 and
    int8 read 0.51x and 0.70x (bf16 chosen), side by side 0.56x and 0.52x."""
    model, calibration = _mlp_and_samples(tmp_path, 1024)
    out = tmp_path / "out"
    report = api.build(model, "openvino-cpu", out, BuildOptions(choose_precision=True, bench=False, quantize=(
        QuantizeOptions(calibration=calibration, metric="cosine"))))
    assert report.status == "verified", report.summary
    _raced_if_both_faster(list(_candidates(report).values()))  # bf16 and int8: 1.7x and 2.3x fp32 here
    # the half candidate was verified on each validation sample: none of them is left in the artifact
    assert not list(out.glob("validation-*.npz")), sorted(p.name for p in out.iterdir())


def _offset_model(size: int = 64) -> onnx.ModelProto:
    """y = (x @ I + 4096) @ I - 4096: in fp32, x; in bf16 the sum is stored to 8 bits, which keeps
    x of a thousand (cosine 0.99997) and loses x of a tenth entirely."""
    eye, offset = np.eye(size, dtype=np.float32), np.full((size,), 4096, np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "first"], ["h"]),
         helper.make_node("Add", ["h", "offset"], ["lifted"]),
         helper.make_node("MatMul", ["lifted", "second"], ["back"]),
         helper.make_node("Sub", ["back", "offset"], ["y"])], "offset",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", size])],
        [numpy_helper.from_array(eye, "first"), numpy_helper.from_array(eye.copy(), "second"),
         numpy_helper.from_array(offset, "offset")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_given_data_a_half_candidate_is_judged_on_every_validation_sample(tmp_path: Path) -> None:
    """Given data, every candidate is verified on the first validation sample; a half candidate
    within budget there is verified on the others too (PP-OCRv4 rec's bf16 passed its first sample
    and was over budget on held-out inputs)."""
    model = tmp_path / "offset.onnx"
    onnx.save(_offset_model(), model)
    rng = np.random.default_rng(4)
    folders = {name: tmp_path / name for name in ("calibration", "validation")}
    for folder in folders.values():
        folder.mkdir()
    for index in range(4):
        np.savez(folders["calibration"] / f"{index}.npz", x=rng.normal(0, 1000, (1, 64)).astype(np.float32))
    for index, scale in enumerate((1000.0, 0.1)):  # the first passes bf16, the second cannot
        np.savez(folders["validation"] / f"{index}.npz", x=rng.normal(0, scale, (1, 64)).astype(np.float32))
    options = BuildOptions(choose_precision=True, bench=False, quantize=QuantizeOptions(
        calibration=folders["calibration"], validation=folders["validation"]))
    report = api.build(model, "openvino-cpu", tmp_path / "out", options)
    assert report.status == "verified", report.summary
    half = _candidates(report)[Precision.BF16]
    assert half.outcome == CandidateOutcome.OVER_BUDGET, half
    assert "over budget on validation sample 2 of 2" in half.why, half.why
    assert report.precision != Precision.BF16


@pytest.mark.parametrize("target", ["openvino-cpu", "ort-cpu"])
def test_the_chosen_precision_is_within_budget_faster_and_the_one_built(tmp_path: Path, target: str) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=1), model)  # a model no other test here builds: measured, not remembered
    out = tmp_path / "out"
    report = api.build(model, target, out, BuildOptions(choose_precision=True, bench=False))
    assert report.status == "verified", report.summary
    choice = report.precision_choice
    assert choice is not None and choice.chosen == report.precision and not choice.cached
    offered = [Precision(p) for p in ("fp32", "bf16", "fp16") if p in _target_precisions(target)]
    # small_cnn has no MatMul with constant weights: no int8 candidate without calibration data
    assert [c.precision for c in choice.candidates] == offered  # every one the target offers, in order
    if target == "ort-cpu":  # its CPU provider has no float16 Conv: from its data, not built
        fp16 = next(c for c in choice.candidates if c.precision == Precision.FP16)
        assert fp16.outcome == CandidateOutcome.NOT_MEASURED and "computes float16 as float32" in fp16.why
    chosen = next(c for c in choice.candidates if c.outcome == CandidateOutcome.CHOSEN)
    assert chosen.precision == report.precision
    if chosen.precision != Precision.FP32:  # faster beyond noise, and within budget
        assert chosen.ci95 is not None and chosen.ci95[1] < 1.0
        assert chosen.min_cosine is not None and chosen.min_cosine >= 0.999
    # the report reads back, and the manifest records that the precision was chosen
    data = json.loads((out / "report.json").read_text())
    assert data["precision_choice"]["chosen"] == str(report.precision)
    assert json.loads((out / "manifest.json").read_text())["options"]["choose_precision"] is True


def _target_precisions(name: str) -> list[str]:
    from deploycc.targets import registry

    return [str(p) for p in registry.resolve(name).precision.supported]


def test_a_device_target_takes_its_default_from_its_data(tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model)
    out = tmp_path / "out"
    run = run_cli("build", str(model), "-t", "jetson-xavier", "--precision", "auto", "-o", str(out))
    assert run.returncode == 0, run.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["precision"] == "fp16"  # the target's default: TensorRT on the board builds fp16
    (only,) = report["precision_choice"]["candidates"]
    assert only["outcome"] == str(CandidateOutcome.NOT_MEASURED) and "runs on its device" in only["why"]


def test_the_default_searches_and_a_named_precision_pins(tmp_path: Path) -> None:
    """No --precision is --precision auto; --precision fp32 gives the fp32 build, nothing searched."""
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model)
    default = run_cli("build", str(model), "-t", "openvino-cpu", "--no-bench",
                      "-o", str(tmp_path / "default"))
    assert default.returncode == 0, default.stderr
    searched = json.loads((tmp_path / "default" / "report.json").read_text())
    assert searched["precision_choice"] is not None
    assert searched["precision"] == searched["precision_choice"]["chosen"]
    pinned = run_cli("build", str(model), "-t", "openvino-cpu", "--precision", "fp32", "--no-bench",
                     "-o", str(tmp_path / "pinned"))
    assert pinned.returncode == 0, pinned.stderr
    report = json.loads((tmp_path / "pinned" / "report.json").read_text())
    assert report["precision_choice"] is None and report["precision"] == "fp32"
    # the API the same way: choosing off keeps the target's default
    api_report = api.build(model, "openvino-cpu", tmp_path / "api",
                           BuildOptions(bench=False, choose_precision=False))
    assert api_report.precision_choice is None and api_report.precision == Precision.FP32


def test_the_choice_is_remembered_for_the_same_model_and_options(tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=3), model)
    options = BuildOptions(choose_precision=True, bench=False)
    first = api.build(model, "openvino-cpu", tmp_path / "first", options)
    again = api.build(model, "openvino-cpu", tmp_path / "again", options)
    assert first.precision_choice is not None and again.precision_choice is not None
    assert not first.precision_choice.cached and again.precision_choice.cached
    assert again.precision == first.precision and again.status == "verified", again.summary
    assert again.precision_choice.candidates == first.precision_choice.candidates
    # another option that changes the candidates is measured anew
    other = api.build(model, "openvino-cpu", tmp_path / "other",
                      BuildOptions(choose_precision=True, bench=False, half_analysis=False))
    assert other.precision_choice is not None and not other.precision_choice.cached


def test_a_partitioned_build_says_it_did_not_search(tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), model)
    out = tmp_path / "out"
    run = run_cli("build", str(model), "-t", "ort-cpu", "--partition", "--precision", "auto", "--no-bench",
                  "-o", str(out))
    assert run.returncode == 0, run.stderr
    notes = json.loads((out / "report.json").read_text())["notes"]
    assert any(note.startswith("--precision auto: fp32, the target's default") for note in notes), notes


def test_a_torch_model_is_proven_against_the_chosen_engine(tmp_path: Path) -> None:
    """The search's engine is the build's: the torch front end proves it, not the legalized model,
    also when no bench loads it again."""
    torch = pytest.importorskip("torch")

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.second(torch.relu(self.first(x)))

    report = api.build(Mlp().eval(), (torch.randn(4, 64),), target="ort-cpu", outdir=tmp_path / "out",
                       options=BuildOptions(choose_precision=True, bench=False))
    assert report.status == "verified" and report.precision_choice is not None, report.summary
    assert report.export is not None and report.export.final_against == "the engine"
