"""A transformers causal language model from PyTorch: exported with its KV cache by Optimum, proven
against torch by a greedy generation (torch without a cache, the export with its cache fed back),
built and verified like Optimum's own ONNX files; the proof fails where the generation differs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch front end needs torch (make test installs it)")
transformers = pytest.importorskip("transformers", reason="the decoders extra (make test installs it)")
pytest.importorskip("optimum.exporters.onnx", reason="the decoders extra (make test installs it)")

from deploycc import api  # noqa: E402
from deploycc.errors import OptionError  # noqa: E402
from deploycc.options import BuildOptions  # noqa: E402
from deploycc.taxonomy import BuildStatus  # noqa: E402

QUICK = BuildOptions(bench=False)


def tiny_llama(seed: int = 0) -> object:
    """A Llama with grouped-query attention (4 heads, 2 of them keys and values) and rotary
    embeddings, two layers, random weights: nothing downloaded."""
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                      max_position_embeddings=256)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def llama() -> object:
    return tiny_llama()


def test_a_causal_lm_is_exported_with_its_cache_and_proven_by_generation(llama: object,
                                                                         tmp_path: Path) -> None:
    report = api.build(llama, target="ort-cpu", outdir=tmp_path / "out", options=QUICK)
    assert report.status == BuildStatus.VERIFIED, report.summary
    export = report.export
    assert export is not None and export.order == ["optimum"] and export.chosen == "optimum"
    (proof,) = export.attempts[0].proofs
    generation = proof.verification.generation
    assert proof.verification.passed and generation is not None
    assert generation.tokens_equal == generation.new_tokens == 16 and generation.prompt_tokens == 8
    # the build judged its engine by the generation too, and torch against that engine at the end
    assert report.verification is not None and report.verification.generation is not None
    assert export.final is not None and export.final.passed and export.final_against == "the engine"
    assert export.final.generation is not None and export.final.generation.tokens_equal == 16
    import onnx

    graph = onnx.load(tmp_path / "out" / "model.exported.onnx").graph
    names = [value.name for value in graph.input]
    assert names[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert "past_key_values.1.value" in names and "present.1.value" in [v.name for v in graph.output]


def test_the_generation_proof_fails_where_the_model_is_another(llama: object, tmp_path: Path) -> None:
    """The export of one model against torch's generation of another (other weights): the proof
    finds the tokens differ, so it could find a wrong cache."""
    from deploycc.frontend import decoders
    from deploycc.frontend.sources import with_inputs

    source = with_inputs(llama, None, label="llama")
    path = tmp_path / "llama.onnx"
    decoders.export_optimum(source, source.inputs, {}, path, 17, None)
    same = decoders.prove_on_ort(path, decoders.reference(source), decoders.GENERATED)
    assert same.passed and same.generation is not None and same.generation.tokens_equal == 16
    other = with_inputs(tiny_llama(seed=1), None, label="other")
    different = decoders.prove_on_ort(path, decoders.reference(other), decoders.GENERATED)
    assert not different.passed and "greedy generation" in different.problem, different.problem
    assert np.isfinite(different.generation.logits.max_abs_error)


@pytest.mark.parametrize(("precision", "told"),
                         [("fp16", "pin --precision fp32"), ("fp32", "report the model")])
def test_a_causal_lm_the_build_changed_is_not_sent_to_another_exporter(llama: object, tmp_path: Path,
                                                                      precision: str, told: str) -> None:
    """torch's generation against a build that generates otherwise fails the build; a causal LM has
    one exporter (Optimum's), so the user is told what is theirs to change, not to try another."""
    from deploycc.backends.registry import get_backend
    from deploycc.frontend import decoders
    from deploycc.frontend.build_proof import prove_build
    from deploycc.frontend.sources import with_inputs
    from deploycc.pipeline.context import BuildContext
    from deploycc.pipeline.outcome import Clock
    from deploycc.targets import registry
    from deploycc.taxonomy import Precision

    source = with_inputs(llama, None, label="llama")
    path = tmp_path / "llama.onnx"
    decoders.export_optimum(source, source.inputs, {}, path, 17, None)
    target = registry.resolve("jetson-orin")
    context = BuildContext(source=path, target=target, options=QUICK, staging=tmp_path, notes=[],
                           backend=get_backend(target.backend.kind), precision=Precision(precision),
                           clock=Clock({}, None), status=BuildStatus.PENDING_ON_DEVICE, legalized_file=path)
    other = decoders.reference(with_inputs(tiny_llama(seed=1), None, label="other"))
    prove_build(context, source, [other])  # the build's model generates as another model does
    assert context.status == BuildStatus.FAILED and "greedy generation" in context.message
    assert context.next_step is not None and told in context.next_step and "exporter" not in context.next_step


def test_a_jetson_build_is_proven_on_the_legalized_model(llama: object, tmp_path: Path) -> None:
    report = api.build(llama, target="jetson-orin", outdir=tmp_path / "orin", options=QUICK)
    assert report.status == BuildStatus.PENDING_ON_DEVICE, report.summary
    export = report.export
    assert export.attempts[0].opset_written == 17  # TensorRT 8.6 reads up to 17
    assert export.final is not None and export.final.passed and export.final.generation is not None
    assert export.final_against.startswith("the legalized model on ONNX Runtime CPU")


def test_the_optimum_exporter_is_for_causal_lms_and_needs_optimum(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3))
    with pytest.raises(OptionError, match="exports a transformers causal language model"):
        api.build(conv, (torch.zeros(1, 3, 8, 8),), target="ort-cpu", outdir=tmp_path / "c",
                  exporters=["optimum"])
    from deploycc.frontend import build

    monkeypatch.setattr(build, "optimum_installed", lambda: False)  # a machine without the extra
    with pytest.raises(OptionError, match="Optimum, which is not installed") as refused:
        api.build(tiny_llama(), target="ort-cpu", outdir=tmp_path / "l")
    assert "deploycc[decoders]" in (refused.value.hint or "")


def test_a_quantized_engine_is_held_to_torch_by_its_tokens(llama: object, tmp_path: Path) -> None:
    """torch against an int8 engine is judged as the build judges a quantized decoder: its greedy
    tokens and the logits' cosine, not element by element (TinyLlama-1.1B's int8 engine: 16/16
    tokens, cosine 0.9925, and 16% of its logits past int8's 0.1 failed the build). The same run
    is refused at fp32, where every logit must match."""
    from deploycc.frontend import decoders
    from deploycc.frontend.sources import with_inputs
    from deploycc.taxonomy import Precision
    from deploycc.verify.runner import session

    source = with_inputs(llama, None, label="llama")
    path = tmp_path / "llama.onnx"
    decoders.export_optimum(source, source.inputs, {}, path, 17, None)
    runner = session(path, threads=0)
    names = [output.name for output in runner.get_outputs()]

    def scaled(feeds: dict) -> dict:  # every logit 3x: the same tokens, the cosine 1, the values not
        outputs = dict(zip(names, runner.run(None, feeds), strict=True))
        outputs["logits"] = outputs["logits"] * 3.0
        return outputs

    import onnx_ir as ir

    graph, expected = ir.load(path).graph, decoders.reference(source)
    quantized = decoders.prove_generation(scaled, graph, expected, "why", Precision.INT8, "the engine")
    assert quantized.passed and quantized.generation.tokens_equal == 16, quantized.problem
    assert not quantized.generation.logits.passed  # element by element it is not the original
    exact = decoders.prove_generation(scaled, graph, expected, "why", Precision.FP32, "the engine")
    assert not exact.passed and "logits" in exact.problem


def test_check_exports_a_causal_lm_per_target_and_draws_its_cache(llama: object) -> None:
    """`check` of a causal LM: Optimum's export judged per target, and the fp16 analysis on inputs
    drawn for the export's cache (the example holds the prompt alone: it was an internal error)."""
    report = api.check(llama, targets=["ort-cpu", "jetson-orin"], precision="target")
    assert [verdict.legal for verdict in report.targets] == [True, True]
    assert report.half is not None and report.notes[0].startswith("ort-cpu: exported with optimum")
