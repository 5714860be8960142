"""What a causal language model is to the front end (a transformers model that generates text from
its own past), and the example prompt it is exported and proven on when the user gives none. Read
by sources.py (which inputs a module needs) and decoders.py (how it is exported and proven)."""

from __future__ import annotations

from typing import Any

PROMPT_TOKENS = 8


def is_causal_lm(module: Any) -> bool:
    """A transformers model that generates text from its own past (not an encoder-decoder)."""
    can_generate = getattr(module, "can_generate", None)
    config = getattr(module, "config", None)
    if not callable(can_generate) or config is None or getattr(config, "is_encoder_decoder", False):
        return False
    try:
        return bool(can_generate()) and hasattr(module, "get_output_embeddings")
    except Exception:  # a model whose check itself fails is not taken for a decoder
        return False


def example_prompt(module: Any) -> Any:
    """PROMPT_TOKENS token ids over the model's vocabulary, batch 1 (seed 0)."""
    import torch

    vocabulary = int(getattr(module.config, "vocab_size", 0) or 2)
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, vocabulary, (1, PROMPT_TOKENS), generator=generator, dtype=torch.int64)
