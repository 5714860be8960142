"""Weight-only int4 on a decoder with trained weights: greedy agreement and perplexity against fp32
(issue 52's accuracy bar), made here with nothing downloaded.

    .venv-decoders/bin/python benchmarks/decoder_accuracy.py [--steps 600]

Random weights say nothing of int4's accuracy (Gaussian weights have no structure for 4-bit blocks
to keep), and no trained model may be downloaded. So a small Llama (byte-level: vocabulary 256, no
tokenizer; hidden 256, 4 layers, 4 heads, 2 KV heads) is trained here for a few minutes on the
project's own prose (README.md and docs/, the first 90%), exported by Optimum with past key values,
and quantized by deploycc's int4 recipes (quantize/weights.py). On the held-out 10%:

- perplexity per byte, each model on 8 windows of 256 bytes from an empty cache;
- greedy agreement: from 8 prompts of 32 bytes, fp32 generates 32 bytes, the int4 model is run on
  the same bytes with its own cache (verify/generation.py's teacher-forced loop), and the share of
  positions where its greedy byte is fp32's;
- what `deploycc build --precision int4` says of the model (its verification judges it).

Writes results/decoder-accuracy.json.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
WORK = HERE / "decoders-work" / "bytes-llama"
CONFIG = {"vocab_size": 256, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
          "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
WINDOW, WINDOWS, PROMPT, NEW = 256, 8, 32, 32
EMPTY = (1, CONFIG["num_key_value_heads"], 0, CONFIG["hidden_size"] // CONFIG["num_attention_heads"])


def corpus() -> tuple[bytes, bytes]:
    """The project's prose, the first 90% to train on, the rest held out."""
    text = b"\n\n".join(p.read_bytes() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    cut = int(len(text) * 0.9)
    return text[:cut], text[cut:]


def train(data: bytes, steps: int) -> Path:
    import torch
    import transformers

    folder = WORK / "hf"
    if (folder / "config.json").exists():
        return folder
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
    tokens = torch.tensor(list(data), dtype=torch.long)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    generator = torch.Generator().manual_seed(0)
    started = time.perf_counter()
    for step in range(steps):
        starts = torch.randint(0, len(tokens) - 129, (16,), generator=generator)
        batch = torch.stack([tokens[s:s + 129] for s in starts])
        loss = model(input_ids=batch[:, :-1], labels=batch[:, :-1]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step}: loss {loss.item():.3f} ({time.perf_counter() - started:.0f} s)", flush=True)
    model.eval().save_pretrained(folder)
    return folder


def export(folder: Path) -> Path:
    from optimum.exporters.onnx import main_export

    onnx_file = WORK / "onnx" / "model.onnx"
    if not onnx_file.exists():
        main_export(str(folder), output=str(onnx_file.parent), task="text-generation-with-past", opset=17,
                    device="cpu", no_post_process=True)
    return onnx_file


def perplexity(run, signature, held_out: bytes, dtypes) -> float:  # type: ignore[no-untyped-def]
    from deploycc.verify.generation import step_feeds

    losses = []
    stride = (len(held_out) - WINDOW - 1) // WINDOWS
    for index in range(WINDOWS):
        start = index * stride
        window = np.frombuffer(held_out[start:start + WINDOW + 1], np.uint8).astype(np.int64)
        cache = {e.past: np.zeros(EMPTY, np.float32) for e in signature.cache}
        outputs = run(step_feeds(signature, window[None, :-1], cache, 0, dtypes))
        logits = np.asarray(outputs[signature.logits])[0]
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        losses.append(-log_probs[np.arange(WINDOW), window[1:]].mean())
    return float(math.exp(np.mean(losses)))


def agreement(reference, candidate, signature, held_out: bytes) -> float:  # type: ignore[no-untyped-def]
    from deploycc.verify.generation import generate

    cache = {e.past: np.zeros(EMPTY, np.float32) for e in signature.cache}
    equal = total = 0
    stride = (len(held_out) - PROMPT) // WINDOWS
    for index in range(WINDOWS):
        start = index * stride
        prompt = np.frombuffer(held_out[start:start + PROMPT], np.uint8).astype(np.int64)[None]
        tokens, _ = generate(reference, signature, prompt, cache, NEW, {})
        chosen, _ = generate(candidate, signature, prompt, cache, NEW, {}, forced=tokens)
        equal += sum(a == b for a, b in zip(chosen, tokens, strict=True))
        total += len(tokens)
    return equal / total


def main() -> None:
    import onnx_ir as ir

    from benchmarks.decoder_speed import openvino_run, ort_run
    from deploycc.backends.base import WeightQuantizer
    from deploycc.graph.decoder import decoder_signature
    from deploycc.quantize.weights import quantize_weights

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    train_text, held_out = corpus()
    model = export(train(train_text, args.steps))
    signature = decoder_signature(ir.load(model).graph)
    assert signature is not None
    quantized = {}
    recipes = ((WeightQuantizer.ORT_MATMUL_NBITS, "ort"), (WeightQuantizer.NNCF_COMPRESS, "openvino"))
    for quantizer, name in recipes:
        out = WORK / f"int4-{name}"
        out.mkdir(exist_ok=True)
        quantized[name], _ = quantize_weights(quantizer, model, out, 4)
    engines = {"ort fp32": ort_run(model), "ort int4": ort_run(quantized["ort"]),
               "openvino fp32": openvino_run(model), "openvino int4": openvino_run(quantized["openvino"])}
    rows: dict[str, dict] = {}
    for name, run in engines.items():
        backend = name.split()[0]
        rows[name] = {"perplexity": round(perplexity(run, signature, held_out, {}), 4)}
        if "int4" in name:
            rows[name]["greedy_agreement"] = round(agreement(engines[f"{backend} fp32"], run, signature,
                                                             held_out), 4)
            rows[name]["perplexity_over_fp32"] = round(rows[name]["perplexity"] /
                                                       rows[f"{backend} fp32"]["perplexity"], 4)
        print(name, rows[name], flush=True)
    builds = {}
    for target in ("ort-cpu", "openvino-cpu"):
        done = subprocess.run([sys.executable, "-m", "deploycc.cli", "build", str(model), "-t", target,
                               "--precision", "int4", "-o", str(WORK / f"build-{target}"), "--force",
                               "--json", "--no-bench"], capture_output=True, text=True)
        report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
        builds[target] = {"exit": done.returncode, "status": report.get("status"),
                          "summary": report.get("summary", done.stderr.strip()[-200:])}
        print(target, builds[target], flush=True)
    result = {"config": CONFIG, "train_bytes": len(train_text), "held_out_bytes": len(held_out),
              "steps": args.steps, "engines": rows, "builds": builds}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "decoder-accuracy.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
