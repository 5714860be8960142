"""Decoders as a user gives them to deploycc's PyTorch front end: a factory returning a transformers
causal LM (issue 52's "from PyTorch through the front end"), here TinyLlama-1.1B's config with the
random weights benchmarks/decoders.py saved (nothing downloaded).

    .venv/bin/deploycc build benchmarks/decoder_factories.py:tinyllama -t ort-cpu -o OUT

Optimum exports it with its KV cache, torch's greedy generation proves the export and then the
engine (frontend/decoders.py).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def tinyllama():  # type: ignore[no-untyped-def]
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(HERE / "decoders-work" / "llama-1.1b" / "hf")
