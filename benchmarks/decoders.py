"""Decoders with a KV cache, as Optimum exports them, through `deploycc build` as a user types it
(issue 52).

    make .venv-decoders/.installed
    .venv-decoders/bin/python benchmarks/decoders.py [--only llama ...] [--targets ort-cpu ...]

Optimum (optimum-onnx) pins transformers below 5, which the main bench environment is past: this
one has its own environment (the Makefile's .venv-decoders: torch 2.13 CPU, optimum-onnx,
onnxruntime-genai). Per family, a transformers config at a small size with random weights (nothing
downloaded), exported by Optimum's `main_export` for `text-generation-with-past` (input_ids,
attention_mask, position_ids, past_key_values.N.key/value -> logits, present.N.key/value), then
`deploycc build model.onnx -t TARGET` with no other flag, each in a process of its own: its exit
code, status, the greedy generation's verdict (tokens equal to the original's), wall time and peak
RSS (the build and its children, sampled every 50 ms). Writes results/decoders.json and .md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "decoders-work"
RESULTS = HERE / "results"
TARGETS = ("ort-cpu", "openvino-cpu", "jetson-orin", "gpu-trt10")
SMALL = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 2048}
# family -> (transformers config class, its size overrides beyond SMALL)
FAMILIES: dict[str, tuple[str, dict]] = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {"head_dim": 32}),
    "mistral": ("MistralConfig", {"sliding_window": None}),
    "phi3": ("Phi3Config", {"pad_token_id": 0}),
    "gemma": ("GemmaConfig", {"head_dim": 32}),
    "granite": ("GraniteConfig", {}),
    "olmo": ("OlmoConfig", {}),
    "stablelm": ("StableLmConfig", {}),
    "gpt2": ("GPT2Config", {"n_embd": 128, "n_layer": 2, "n_head": 4, "n_positions": 2048,
                            "vocab_size": 1024}),
}
# Real sizes, as the published configs have them (random weights): Qwen2.5-0.5B (494 M parameters,
# 1.98 GB in fp32: Optimum writes its weights as external data), TinyLlama-1.1B (1.1 B, 4.4 GB;
# grouped-query attention) and OLMo-1B (1.18 B, 4.7 GB; multi-head attention, tied embeddings).
REAL: dict[str, tuple[str, dict]] = {
    "qwen2-0.5b": ("Qwen2Config", {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                                   "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                                   "max_position_embeddings": 32768, "tie_word_embeddings": True}),
    "llama-1.1b": ("LlamaConfig", {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                                   "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
                                   "max_position_embeddings": 2048}),
    "olmo-1b": ("OlmoConfig", {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                               "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 50304,
                               "max_position_embeddings": 2048, "tie_word_embeddings": True}),
}


def export(family: str) -> Path:
    """The family's random-weight model (small, or REAL's size), exported by Optimum (cached in
    decoders-work/)."""
    import torch
    import transformers
    from optimum.exporters.onnx import main_export

    folder = WORK / family
    onnx_file = folder / "onnx" / "model.onnx"
    if onnx_file.exists():
        return onnx_file
    config_class, overrides = FAMILIES.get(family) or REAL[family]
    sizes = {} if family == "gpt2" or family in REAL else dict(SMALL)
    config = getattr(transformers, config_class)(**{**sizes, **overrides})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(folder / "hf")
    main_export(str(folder / "hf"), output=str(folder / "onnx"), task="text-generation-with-past", opset=17,
                device="cpu", no_post_process=True)
    return onnx_file


def build(model: Path, target: str) -> dict:
    """`deploycc build MODEL -t TARGET` in its own process, timed, its peak RSS sampled."""
    import psutil

    out = model.parent.parent / f"out-{target}"
    command = [sys.executable, "-m", "deploycc.cli", "build", str(model), "-t", target, "-o", str(out),
               "--force", "--json", "--no-bench"]
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as printed:  # a pipe read only at the end fills and stops the build
        process = subprocess.Popen(command, stdout=printed, stderr=subprocess.DEVNULL, text=True)
        peak = 0
        watched = psutil.Process(process.pid)
        while process.poll() is None:
            try:
                tree = [watched, *watched.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass
            time.sleep(0.05)
        printed.seek(0)
        stdout = printed.read()
    seconds = time.perf_counter() - started
    weights = sum(f.stat().st_size for f in model.parent.iterdir() if f.name.startswith(model.name))
    row: dict = {"target": target, "exit": process.returncode, "seconds": round(seconds, 1),
                 "peak_rss_mib": round(peak / 2**20, 1), "model_mib": round(weights / 2**20, 1)}
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        row["status"] = "no report"
        return row
    verification = report.get("verification") or (report.get("legalize") or {}).get("verification") or {}
    generation = verification.get("generation") or {}
    row.update(status=report.get("status"), precision=report.get("precision"),
               tokens=(f"{generation.get('tokens_equal')}/{generation.get('new_tokens')}" if generation
                       else "none"),
               summary=report.get("summary", "")[:200], stages=report.get("seconds", {}),
               stage_peak_rss_mib=report.get("peak_rss_mib", {}),  # this process's, per stage
               candidates={c["precision"]: f"{c['outcome']}: {c['why'][:160]}"  # --precision auto's
                           for c in (report.get("precision_choice") or {}).get("candidates", [])})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=list(FAMILIES), help=f"families, or {', '.join(REAL)}")
    parser.add_argument("--targets", nargs="*", default=list(TARGETS))
    args = parser.parse_args()
    rows = []
    for family in args.only:
        try:
            model = export(family)
        except Exception as error:  # an architecture this Optimum cannot export
            rows.append({"family": family, "target": "-", "status": f"export failed: {error}"[:200]})
            continue
        for target in args.targets:
            row = {"family": family, **build(model, target)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    RESULTS.mkdir(exist_ok=True)
    stored = RESULTS / "decoders.json"
    ran = {(r["family"], r["target"]) for r in rows}  # a run of some families keeps the others' rows
    kept = [r for r in json.loads(stored.read_text()) if (r["family"], r["target"]) not in ran] \
        if stored.exists() else []
    rows = kept + rows
    stored.write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["| family | target | exit | status | precision | greedy tokens equal | build s | peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['family']} | {r['target']} | {r.get('exit', '')} | {r.get('status', '')} | "
              f"{r.get('precision', '')} | {r.get('tokens', '')} | {r.get('seconds', '')} | "
              f"{r.get('peak_rss_mib', '')} |" for r in rows]
    (RESULTS / "decoders.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
