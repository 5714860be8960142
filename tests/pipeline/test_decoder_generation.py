"""A decoder with a KV cache (examples/make_models.kv_decoder, the layout Optimum exports): its
dims' roles (the mask spans the past and the new tokens), and its verification by a greedy
generation against the original, which a model that is right on one forward but wrong in the loop
fails."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

from deploycc import api
from deploycc.graph.decoder import decoder_signature
from deploycc.graph.dim_roles import guess_dims, sample_shapes
from deploycc.options import BuildOptions
from deploycc.taxonomy import Precision
from deploycc.verify.generation import check_generation, generate, prompt_from
from examples.make_models import encoder_block, kv_decoder


@pytest.fixture(scope="module")
def decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("decoder") / "kv_decoder.onnx"
    onnx.save(kv_decoder(seed=1), path)
    return path


def _runner(path: Path):  # type: ignore[no-untyped-def]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, feeds), strict=True))


def _drawn(graph: ir.Graph, vocab: int = 128) -> dict[str, np.ndarray]:
    """Inputs at the sizes deploycc draws (batch 2), token ids in the vocabulary."""
    shapes = sample_shapes(graph, guess_dims(graph), 0, batch=2)
    rng = np.random.default_rng(0)
    feeds = {}
    for value in graph.inputs:
        shape = shapes[value.name]
        if value.dtype == ir.DataType.INT64:
            feeds[value.name] = rng.integers(0, vocab, shape).astype(np.int64)
        else:
            feeds[value.name] = rng.normal(0, 1, shape).astype(np.float32)
    return feeds


def test_the_signature_and_the_roles_of_its_dims(decoder: Path) -> None:
    graph = ir.load(decoder).graph
    signature = decoder_signature(graph)
    assert signature is not None and signature.layers == 2 and len(signature.cache) == 4
    assert {(e.past, e.present, e.axis) for e in signature.cache if e.layer == 1} == {
        ("past_key_values.1.key", "present.1.key", 2), ("past_key_values.1.value", "present.1.value", 2)}
    assert (signature.attention_mask, signature.position_ids) == ("attention_mask", "position_ids")
    assert decoder_signature(ir.from_proto(encoder_block()).graph) is None
    shapes = sample_shapes(graph, guess_dims(graph), 0, batch=2)
    past, new = shapes["past_key_values.0.key"][2], shapes["input_ids"][1]
    assert shapes["attention_mask"] == [2, past + new] and past > 0  # drawn apart, the model fails


def test_an_unnamed_mask_dim_is_the_sum_too(tmp_path: Path) -> None:
    """Exporters that name no dims (`?`, s0...): the decoder's signature says what the mask spans,
    and an unnamed cache length is a length of tokens, not an image's height."""
    model = kv_decoder(seed=1)
    for value in [*model.graph.input, *model.graph.output]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = f"unk__{abs(hash((value.name, dim.dim_param))) % 1000}"
    graph = ir.from_proto(model).graph
    guesses = {(g.input, g.axis): g for g in guess_dims(graph)}
    assert guesses[("past_key_values.0.key", 2)].role == "sequence"
    shapes = sample_shapes(graph, list(guesses.values()), 0, batch=2)
    assert shapes["attention_mask"][1] == shapes["past_key_values.0.key"][2] + shapes["input_ids"][1]


def test_generation_with_the_cache_is_the_full_sequence_without_it(decoder: Path) -> None:
    """The example decoder itself: the logits of each step with the cache are those of one forward
    over the whole sequence from an empty cache (what makes it a decoder with a cache at all)."""
    graph = ir.load(decoder).graph
    signature = decoder_signature(graph)
    assert signature is not None
    run, drawn = _runner(decoder), _drawn(graph)
    prompt = prompt_from(signature, drawn)
    cache = {e.past: np.zeros((1, 2, 0, 16), np.float32) for e in signature.cache}
    tokens, rows = generate(run, signature, prompt, cache, 6, {})
    sequence = np.concatenate([prompt, np.array([tokens[:-1]])], axis=1)
    whole = run({"input_ids": sequence, "attention_mask": np.ones_like(sequence),
                 "position_ids": np.arange(sequence.shape[1])[None], **cache})["logits"][0]
    np.testing.assert_allclose(np.stack(rows), whole[prompt.shape[1] - 1:], rtol=1e-4, atol=1e-4)
    assert len(set(tokens)) > 1  # the logits spread: greedy tokens are a real check


def _positions_restart(source: Path, out: Path) -> Path:
    """The decoder with its rotary positions taken from the new tokens alone (0..n-1), not from
    position_ids: the same as the original on a prompt from an empty cache, wrong at every later step."""
    model = ir.load(source)
    graph = model.graph
    ids = graph.inputs[0]
    shape = ir.node("Shape", [ids], attributes={"start": 1, "end": 2})
    length = ir.node("Squeeze", [shape.outputs[0]])
    zero, one = (ir.node("Constant", [], attributes={"value": ir.tensor(np.array(v, np.int64))})
                 for v in (0, 1))
    local = ir.node("Range", [zero.outputs[0], length.outputs[0], one.outputs[0]])
    axis = ir.node("Constant", [], attributes={"value": ir.tensor(np.array([0], np.int64))})
    row = ir.node("Unsqueeze", [local.outputs[0], axis.outputs[0]])
    positions = next(v for v in graph.inputs if v.name == "position_ids")
    for node in [n for n in graph if n.op_type == "Gather" and n.inputs[1] is positions]:
        node.replace_input_with(1, row.outputs[0])
    graph.extend([shape, length, zero, one, local, axis, row])
    graph.sort()
    ir.save(model, out)
    return out


def test_a_model_right_on_the_prompt_but_wrong_in_the_loop_fails(decoder: Path, tmp_path: Path) -> None:
    broken = _positions_restart(decoder, tmp_path / "broken.onnx")
    graph = ir.load(decoder).graph
    signature = decoder_signature(graph)
    assert signature is not None
    drawn = _drawn(graph)
    same = check_generation(_runner(decoder), _runner(decoder), signature, original_feeds=drawn,
                            candidate_feeds=drawn, precision=Precision.FP32, ran_on="ort")
    assert same.passed and same.tokens_equal == same.new_tokens and same.logits.max_abs_error == 0.0
    check = check_generation(_runner(decoder), _runner(broken), signature, original_feeds=drawn,
                             candidate_feeds=drawn, precision=Precision.FP32, ran_on="ort")
    assert not check.passed and "greedy generation" in check.problem
    json.dumps(dataclasses.asdict(check))  # a report holds it: numpy's integers are no JSON (exit 3 before)
    assert check.logits.max_abs_error > 0.1
    first = check.logits  # the prompt's step (position 0) is the same: the loop is what differs
    assert first.shape == [16, 128] and check.first_difference != 0


@pytest.mark.parametrize("target", ["ort-cpu", "openvino-cpu", "gpu-trt10"])
def test_a_decoder_builds_verified_by_greedy_generation(decoder: Path, tmp_path: Path, target: str) -> None:
    options = BuildOptions(precision=Precision.FP32, bench=False)
    report = api.build(decoder, target, tmp_path / target, options)
    assert report.status in ("verified", "pending-on-device"), report.summary
    assert report.stage == "done"  # the generation's check left it at "verify" on success before
    verification = report.verification or report.legalize.verification
    generation = verification.generation
    assert generation is not None and generation.passed, generation
    assert generation.tokens_equal == generation.new_tokens == 16 and generation.prompt_tokens == 8
    ran_on = "the engine" if target != "gpu-trt10" else "the device's model on ONNX Runtime CPU"
    assert generation.ran_on == ran_on
    markdown = (tmp_path / target / "report.md").read_text()
    assert "Generation: greedy generation" in markdown
    # each stage's time and this process's peak RSS in it (issue 52: a pipeline whose memory fits)
    if Path("/proc/self/clear_refs").exists():
        assert set(report.peak_rss_mib) <= set(report.seconds) and report.peak_rss_mib["legalize"] > 10
        assert "| legalize |" in markdown.split("## Stages")[1]


def test_bench_of_a_decoder_reads_time_to_first_token_and_tokens_per_second(decoder: Path) -> None:
    """The timing loop itself (short: 4 tokens, one repeat), and a prompt past the model's 256
    positions reported as refused with ONNX Runtime's reason, the longer ones not tried."""
    from deploycc.bench.generative import time_generation

    graph = ir.load(decoder).graph
    signature = decoder_signature(graph)
    assert signature is not None
    bench = time_generation(_runner(decoder), signature, _drawn(graph), lengths=(16, 300, 600),
                            decode_tokens=4, repeats=1)
    assert [t.prompt_tokens for t in bench.timings] == [16]
    timing = bench.timings[0]
    assert timing.ttft_ms > 0 and timing.decode_tokens_per_s > 0
    # 2 layers x (key, value) x [1, 2 heads, 16 + 4 positions, 16] float32
    assert timing.cache_bytes == 4 * (2 * 20 * 16) * 4
    assert list(bench.refused) == ["300"] and "Gather" in bench.refused["300"]


def test_deploycc_bench_on_a_decoder_build(decoder: Path, tmp_path: Path) -> None:
    from deploycc.bench.run import BenchOptions

    out = tmp_path / "build"
    api.build(decoder, "ort-cpu", out, BuildOptions(precision=Precision.FP32, bench=False))
    report = api.bench(out, None, BenchOptions(warmup=2, iterations=5))
    assert report.generation is not None and report.generation.timings[0].prompt_tokens == 128
    assert "512" in report.generation.refused  # the example holds 256 positions


def test_a_tensorrt_profile_spans_the_prompt_and_the_single_token_steps(decoder: Path) -> None:
    """Around the typical size (64..256 new tokens, 64..256 cached), the engine could run neither an
    empty cache nor one new token: the decoder's profile starts at 0 cached and 1 new."""
    from deploycc.pipeline.shape_policy import plan_shapes
    from deploycc.targets import registry

    plan, _ = plan_shapes(decoder, registry.resolve("jetson-orin"), BuildOptions())
    profiles = {shapes.input: shapes.profile for shapes in plan.inputs}
    assert profiles["input_ids"].min == [1, 1] and profiles["position_ids"].min == [1, 1]
    assert profiles["past_key_values.1.value"].min == [1, 2, 0, 16]
    assert profiles["attention_mask"].min == [1, 1]  # 0 cached + 1 new
    opt, high = profiles["past_key_values.0.key"].opt[2], profiles["past_key_values.0.key"].max[2]
    assert profiles["attention_mask"].max[1] == high + profiles["input_ids"].max[1] and opt > 0
    assert any("one profile from the prompt" in note for note in plan.notes)


def test_precision_candidates_read_a_model_with_external_data(tmp_path: Path) -> None:
    """The search's candidates read the build's legalized model and its external data where it is:
    linked into each candidate's folder, onnx refused the data (a hard link is 'a potential hardlink
    attack', a symbolic one refused too), and Qwen2.5-0.5B's dynamic int8 candidate failed so."""
    model = tmp_path / "decoder.onnx"
    onnx.save(kv_decoder(seed=1), model, save_as_external_data=True, location="decoder.onnx.data")
    report = api.build(model, "ort-cpu", tmp_path / "out", BuildOptions(bench=False))
    assert report.status == "verified", report.summary
    candidates = {c.precision: c for c in report.precision_choice.candidates}
    assert candidates["int8"].outcome != "failed", candidates["int8"].why
    assert (report.verification.generation.tokens_equal == report.verification.generation.new_tokens)


def test_a_quantized_decoder_is_judged_by_its_generation(tmp_path: Path) -> None:
    """int4 moves one forward's logits past int8's elementwise tolerance on drawn token ids while
    every greedy token holds (a trained byte-level Llama: 93-96% of tokens, perplexity within 0.5%):
    the generation judges it, with the forward's problem kept as the caveat. With two layers the
    logits' cosine falls below the budget's 0.99 and the build fails, saying so."""
    one_layer, two_layers = tmp_path / "one.onnx", tmp_path / "two.onnx"
    onnx.save(kv_decoder(seed=1, layers=1), one_layer)
    onnx.save(kv_decoder(seed=1, layers=2), two_layers)
    options = BuildOptions(precision=Precision.INT4, bench=False)
    report = api.build(one_layer, "ort-cpu", tmp_path / "one", options)
    assert report.status == "verified", report.summary
    verification = report.verification
    assert verification.forward_problem.startswith("output 'logits'")  # it failed elementwise
    assert verification.generation.tokens_equal >= 0.9 * verification.generation.new_tokens
    assert verification.generation.logits.cosine_similarity >= 0.99
    assert "judged by its greedy generation" in verification.caveat()
    failed = api.build(two_layers, "ort-cpu", tmp_path / "two", options)
    assert failed.status == "failed" and "the logits' cosine" in failed.summary, failed.summary


def test_an_int4_decoder_for_tensorrt_10_is_judged_by_its_generation_on_the_device_model(
        tmp_path: Path) -> None:
    """gpu-trt10's int4 (blockwise Q/DQ) decoder: the model the board builds from generates on ONNX
    Runtime CPU at int4's bar (90% of the tokens), not the fp32 legalized model's (all of them)."""
    model = tmp_path / "one.onnx"
    onnx.save(kv_decoder(seed=1, layers=1), model)
    options = BuildOptions(precision=Precision.INT4, bench=False)
    report = api.build(model, "gpu-trt10", tmp_path / "out", options)
    assert report.status == "pending-on-device", report.summary
    generation = report.legalize.verification.generation
    assert generation is not None and generation.passed, generation
    assert generation.ran_on == "the device's model on ONNX Runtime CPU" and generation.min_agreement == 0.9
    assert generation.tokens_equal >= 0.9 * generation.new_tokens and generation.logits.cosine_similarity < 1


def test_weight_only_is_a_decoders_auto_candidate_timed_on_a_decode_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decoder's `--precision auto` tries int4 and int8 weight-only, judged by its greedy generation
    (the one-layer example's int4 passes it, the two-layer one's logits do not), int8 weight-only
    where no dynamic int8 keeps the same weights, and times every candidate on one token after the
    drawn cache, in a batch of 1: what each generated token costs."""
    from deploycc.taxonomy import CandidateOutcome

    monkeypatch.setenv("DEPLOYCC_PRECISION_CACHE", str(tmp_path / "cache"))
    one_layer = tmp_path / "one.onnx"
    onnx.save(kv_decoder(seed=1, layers=1), one_layer)
    report = api.build(one_layer, "ort-cpu", tmp_path / "one", BuildOptions(bench=False))
    assert report.status == "verified", report.summary
    choice = report.precision_choice
    int4 = next(c for c in choice.candidates if c.precision == Precision.INT4)
    assert int4.outcome in (CandidateOutcome.CHOSEN, CandidateOutcome.NOT_FASTER), int4
    assert int4.ratio is not None and int4.ci95 is not None
    assert choice.timed_at["input_ids"] == [1, 1] and choice.timed_at["attention_mask"] == [1, 129]
    two_layers = tmp_path / "two.onnx"
    onnx.save(kv_decoder(seed=1, layers=2), two_layers)
    two = api.build(two_layers, "ort-cpu", tmp_path / "two", BuildOptions(bench=False))
    refused = next(c for c in two.precision_choice.candidates if c.precision == Precision.INT4)
    assert refused.outcome == CandidateOutcome.OVER_BUDGET and "cosine" in refused.why, refused
    # ONNX Runtime's dynamic int8 already keeps the same weights in int8: int8 weight-only is not
    # built beside it, and the report says why
    int8_weights = next(c for c in two.precision_choice.candidates if c.precision == Precision.INT8_WEIGHTS)
    assert int8_weights.outcome == CandidateOutcome.NOT_MEASURED and "already keeps" in int8_weights.why
    # OpenVINO's int4 (NNCF) of the one-layer model: one forward's cosine below the budget's 0.999
    # for encoders, its generation within a decoder's (it was refused by that cosine before)
    openvino = api.build(one_layer, "openvino-cpu", tmp_path / "ov", BuildOptions(bench=False))
    nncf = next(c for c in openvino.precision_choice.candidates if c.precision == Precision.INT4)
    assert nncf.outcome in (CandidateOutcome.CHOSEN, CandidateOutcome.NOT_FASTER), nncf
    assert nncf.min_cosine is not None and nncf.min_cosine < 0.999
    # OpenVINO has no int8 candidate without calibration data: int8 weight-only (NNCF) is tried
    eight = next(c for c in openvino.precision_choice.candidates if c.precision == Precision.INT8_WEIGHTS)
    assert eight.outcome in (CandidateOutcome.CHOSEN, CandidateOutcome.NOT_FASTER), eight
    assert Precision.INT8 not in {c.precision for c in openvino.precision_choice.candidates}


def test_the_head_size_of_a_cache_groupqueryattention_reads() -> None:
    """onnxruntime-genai's builder leaves the cache's head size symbolic (`kv_cache_dim`); a rank-4
    cache with 2 KV heads looked like an image and the dim was drawn as a width of 224. The packed
    q/k/v projection's width (MatMulNBits N = 1152) over its heads (14 + 2 x 2) says 64."""
    from onnx import TensorProto, helper

    cache = ["batch_size", 2, "past_sequence_length", "kv_cache_dim"]
    graph = helper.make_graph(
        [helper.make_node("MatMulNBits", ["hidden", "w", "scales"], ["qkv"], domain="com.microsoft",
                          K=896, N=1152, bits=4, block_size=32),
         helper.make_node("GroupQueryAttention",
                          ["qkv", "", "", "past.0.key", "past.0.value", "seqlens", "total"],
                          ["out", "present.0.key", "present.0.value"], domain="com.microsoft",
                          num_heads=14, kv_num_heads=2)],
        "gqa", [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch_size", "length", 896]),
                helper.make_tensor_value_info("past.0.key", TensorProto.FLOAT, cache),
                helper.make_tensor_value_info("past.0.value", TensorProto.FLOAT, cache)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    guesses = {(g.input, g.axis): g for g in guess_dims(ir.from_proto(model).graph)}
    assert guesses[("past.0.key", 3)].typical == 64 and guesses[("past.0.value", 3)].typical == 64
    assert "GroupQueryAttention" in guesses[("past.0.key", 3)].source
