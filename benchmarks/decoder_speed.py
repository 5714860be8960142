"""Decode speed of weight-only int4 (and int8, `--bits 4 8`) against fp32 on one decoder, as issue 52
asks it measured.

    .venv-decoders/bin/python benchmarks/decoder_speed.py --family qwen2-0.5b [--prompt 128] [--bits 4 8]

The decoder as benchmarks/decoders.py exported it (Optimum, random weights). The engines, 2 threads
each, in one process: the raw export on ONNX Runtime's defaults (fp32), deploycc's int4 recipe for
ort-cpu on it (quantize/weights.py: MatMulNBits, blocks of 32, accuracy level 4), the raw export on
OpenVINO (fp32 hint), deploycc's int4 recipe for openvino-cpu (NNCF compress_weights, INT4_SYM, group
32) at the same hint; and, where it was made, onnxruntime-genai's model builder's int4 model of the
same config (`python -m onnxruntime_genai.models.builder -i decoders-work/FAMILY/hf -o
decoders-work/FAMILY/genai-int4 -p int4 -e cpu`, run in the main bench environment: the builder
needs transformers 5, Optimum below 5; it saves the model's tokenizer, so a config without one gets a
placeholder first: `python benchmarks/decoder_speed.py --family FAMILY --placeholder-tokenizer`, a
word-level tokenizer over the vocabulary, which nothing here reads), whose attention is ORT's fused
GroupQueryAttention. Each is
timed by bench/generative.py's loop (time to first token at the prompt, then 32 single-token steps on
the growing cache), one engine after the other, the order turned every round; the medians over the
rounds. Each engine's greedy generation is held to ONNX Runtime's fp32 (16 tokens, the logits' cosine):
random weights say nothing of int4's accuracy on a trained model (`deploycc build --precision int4`
and decoder_accuracy.py judge that), but they show an engine computing another model.
Writes results/decoder-speed-FAMILY.json (-FAMILY-int4-int8-weights.json with `--bits 4 8`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
THREADS = 2
WIDTH = {4: "int4", 8: "int8-weights"}  # the precision each width is built as


def drawn_inputs(model: Path) -> dict[str, np.ndarray]:
    """Inputs at deploycc's drawn sizes, token ids across the vocabulary (their dtypes and cache dims
    are what the timing loop reads)."""
    import onnx_ir as ir

    from deploycc.graph.dim_roles import guess_dims, sample_shapes

    graph = ir.load(model).graph
    shapes = sample_shapes(graph, guess_dims(graph), 0, batch=1)
    vocabulary = int(graph.outputs[0].shape[-1])
    rng = np.random.default_rng(0)
    feeds = {}
    for value in graph.inputs:
        dtype = value.dtype.numpy()
        if np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, vocabulary, shapes[value.name]).astype(dtype)
            feeds[value.name].flat[0] = vocabulary - 1
        else:
            feeds[value.name] = np.zeros(shapes[value.name], dtype)
    return feeds


def ort_run(path: Path):  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, feeds), strict=True))


def openvino_run(path: Path, hint: str | None = "f32"):  # type: ignore[no-untyped-def]
    """The model compiled for the CPU at `hint` (None: OpenVINO's defaults, its LATENCY hint and the
    CPU's own precision, bf16 where it has bf16 units)."""
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": THREADS, **({"INFERENCE_PRECISION_HINT": hint} if hint else
                                                   {"PERFORMANCE_HINT": "LATENCY"})}
    compiled = ov.Core().compile_model(str(path), "CPU", config)
    request = compiled.create_infer_request()
    names = [output.get_any_name() for output in compiled.outputs]

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = request.infer(feeds)
        outputs = zip(names, compiled.outputs, strict=True)
        return {name: np.asarray(result[output]) for name, output in outputs}

    return run


def main() -> None:
    from deploycc.backends.base import WeightQuantizer
    from deploycc.bench.generative import time_generation
    from deploycc.graph.decoder import decoder_signature
    from deploycc.quantize.weights import quantize_weights

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="qwen2-0.5b")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bits", type=int, nargs="+", choices=(4, 8), default=[4],
                        help="the weight-only widths to time (8: --precision int8-weights' recipes)")
    parser.add_argument("--placeholder-tokenizer", action="store_true",
                        help="save a word-level tokenizer over the config's vocabulary in hf/ and stop")
    args = parser.parse_args()
    if args.placeholder_tokenizer:
        placeholder_tokenizer(HERE / "decoders-work" / args.family / "hf")
        return
    import onnx_ir as ir

    model = HERE / "decoders-work" / args.family / "onnx" / "model.onnx"
    work = model.parent.parent / "speed"
    signature = decoder_signature(ir.load(model).graph)
    assert signature is not None, f"{model} is no decoder with a KV cache"
    engines = {"ort fp32 (raw export)": ort_run(model),
               "openvino fp32 (raw export, f32 hint)": openvino_run(model),
               # what a user gets from OpenVINO without deploycc: bf16 on this CPU
               "openvino defaults (raw export)": openvino_run(model, None)}
    for bits in args.bits:
        for quantizer, backend, run in ((WeightQuantizer.ORT_MATMUL_NBITS, "ort", ort_run),
                                        (WeightQuantizer.NNCF_COMPRESS, "openvino", openvino_run)):
            out = work / f"{backend}-int{bits}"
            out.mkdir(parents=True, exist_ok=True)
            made, note = quantize_weights(quantizer, model, out, bits)
            print(note, flush=True)
            hint = ", f32 hint" if backend == "openvino" else ""
            engines[f"{backend} {WIDTH[bits]} (deploycc's recipe{hint})"] = run(made)
            if backend == "openvino":  # the same IR, its activations in the CPU's own precision
                engines[f"openvino {WIDTH[bits]} (deploycc's recipe, OpenVINO's defaults)"] = \
                    openvino_run(made, None)
    drawn = drawn_inputs(model)
    signatures = {name: signature for name in engines}
    genai = model.parent.parent / "genai-int4" / "model.onnx"
    if genai.exists():  # its cache's head size is symbolic: the same config's drawn inputs say it
        engines["ort int4 (onnxruntime-genai's model builder)"] = ort_run(genai)
        signatures["ort int4 (onnxruntime-genai's model builder)"] = decoder_signature(ir.load(genai).graph)
    agreement = _agreement(engines, signatures, drawn)
    timings: dict[str, list] = {name: [] for name in engines}
    for round_ in range(args.rounds):
        order = list(engines) if round_ % 2 == 0 else list(reversed(engines))
        for name in order:
            bench = time_generation(engines[name], signatures[name], drawn, lengths=(args.prompt,),
                                    decode_tokens=args.tokens, repeats=1)
            timings[name].append(bench.timings[0])
            print(name, bench.lines()[0], flush=True)
    rows = {name: {"ttft_ms": statistics.median(t.ttft_ms for t in found),
                   "decode_tokens_per_s": statistics.median(t.decode_tokens_per_s for t in found),
                   **agreement[name]}
            for name, found in timings.items()}
    for name, row in rows.items():
        backend = name.split()[0]
        fp32 = rows[next(k for k in rows if k.startswith(f"{backend} fp32"))]
        if "fp32" not in name:
            speedup = row["decode_tokens_per_s"] / fp32["decode_tokens_per_s"]
            row["decode_speedup_over_fp32"] = round(speedup, 2)
    result = {"family": args.family, "prompt": args.prompt, "decode_tokens": args.tokens,
              "rounds": args.rounds, "threads": THREADS, "engines": rows}
    (HERE / "results").mkdir(exist_ok=True)
    widths = "" if args.bits == [4] else "-" + "-".join(WIDTH[bits] for bits in args.bits)
    written = HERE / "results" / f"decoder-speed-{args.family}{widths}.json"
    written.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


def _agreement(engines: dict, signatures: dict, drawn: dict[str, np.ndarray]) -> dict[str, dict]:
    """Each engine's greedy generation (16 tokens from the drawn prompt) against ONNX Runtime's fp32
    on the raw export: tokens equal and the logits' cosine. Random weights say nothing of a trained
    model's accuracy; they do say whether an engine computes the same model."""
    from deploycc.taxonomy import Precision
    from deploycc.verify.generation import check_generation, reference_generation

    baseline = "ort fp32 (raw export)"
    reference = reference_generation(engines[baseline], signatures[baseline], drawn)
    found = {}
    for name, run in engines.items():
        check = check_generation(reference, run, signatures[name], original_feeds=drawn,
                                 candidate_feeds=drawn, precision=Precision.INT8_WEIGHTS, ran_on=name,
                                 by_tokens=True)
        found[name] = {"greedy_tokens_equal": f"{check.tokens_equal}/{check.new_tokens}",
                       "logits_cosine": round(check.logits.cosine_similarity, 6)}
    return found


def placeholder_tokenizer(folder: Path) -> None:
    """A tokenizer onnxruntime-genai's builder can save beside its model (token i is "ti"): the
    random-weight configs come without one, and the builder stops where it finds none."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocabulary = json.loads((folder / "config.json").read_text())["vocab_size"]
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocabulary)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="t0", bos_token="t1",
                            eos_token="t2").save_pretrained(folder)


if __name__ == "__main__":
    main()
