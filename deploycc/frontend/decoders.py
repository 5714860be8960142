"""Decoders from PyTorch: a transformers causal language model (one `generate` runs) is exported with
its KV cache as Optimum writes it for `text-generation-with-past` (input_ids, attention_mask,
position_ids, past_key_values.N.key/value -> logits, present.N.key/value: the signature
graph/decoder.py reads), by Optimum's own exporter, and proven by a greedy generation against
torch's, not by one forward: torch generates from the prompt without a cache (the whole sequence
each step), the export with its cache fed back, and each step's token and logits are compared.

The example prompt (causal_lm.py: token ids over the vocabulary, or the user's `--input
input_ids:...` / `--example-inputs`): its first row is the prompt.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.errors import OptionError
from deploycc.frontend import first_line
from deploycc.taxonomy import QUANTIZED, Precision

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir

    from deploycc.frontend.sources import Axis, TorchSource
    from deploycc.verify.generation import Reference, Run
    from deploycc.verify.verification import Verification

OPTIMUM = "optimum"
TASK = "text-generation-with-past"
GENERATED = "a greedy generation from the example prompt"  # what the proofs say they ran on
# Optimum exports through torch.onnx's TorchScript exporter, whose symbolic functions stop at 20;
# 18 is the highest its decoders' configs were measured at here (17 in benchmarks/decoders.py)
OPTIMUM_MAX_OPSET = 18
INSTALL_HINT = "pip install 'deploycc[decoders]' (optimum-onnx)"


def optimum_installed() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("optimum.exporters.onnx") is not None
    except ModuleNotFoundError:  # no optimum package at all
        return False


def export_optimum(source: TorchSource, inputs: tuple[Any, ...], dynamic: dict[str, dict[int, Axis]],
                   path: Path, opset: int, output_names: list[str] | None) -> None:
    """Optimum's export of the causal LM with its cache, written to `path` (its weights beside it
    where they pass protobuf's limit). The dims Optimum opens are its own (batch, sequence and past
    lengths): `dynamic` and `inputs` say nothing it does not."""
    from deploycc import io

    try:
        from optimum.exporters.onnx import onnx_export_from_model
    except ImportError:
        raise OptionError("a causal language model is exported with its KV cache by Optimum, which is "
                          "not installed", hint=INSTALL_HINT) from None
    with tempfile.TemporaryDirectory(prefix="deploycc-optimum-", dir=path.parent) as folder:
        onnx_export_from_model(source.module, folder, task=TASK, opset=opset, device="cpu",
                               no_post_process=True, do_validation=False)
        written = io.load(Path(folder) / "model.onnx", check=False)
        io.save(written.model, path, force_external=bool(written.external_files))


def torch_generation(module: Any, prompt: np.ndarray, steps: int) -> Reference:
    """torch's greedy generation from `prompt` [1, n]: each step runs the whole sequence without a
    cache (what the exported cache must reproduce) and takes the last position's logits."""
    import numpy as np
    import torch

    from deploycc.verify.generation import Reference

    tokens, rows = [], []
    sequence = torch.from_numpy(np.ascontiguousarray(prompt)).to(torch.int64)
    with torch.no_grad():
        for _ in range(steps):
            logits = module(input_ids=sequence, use_cache=False).logits[0, -1].float().numpy()
            tokens.append(int(np.argmax(logits)))
            rows.append(logits.astype(np.float32))
            sequence = torch.cat([sequence, torch.tensor([[tokens[-1]]], dtype=torch.int64)], dim=1)
    return Reference(np.ascontiguousarray(prompt), tokens, rows)


def reference(source: TorchSource) -> Reference:
    """torch's generation from the example prompt (the first row of the example input_ids)."""
    from deploycc.verify.generation import NEW_TOKENS

    prompt = source.inputs[0][:1].detach().cpu().numpy()
    return torch_generation(source.module, prompt, NEW_TOKENS)


def _step_inputs(graph: ir.Graph) -> dict[str, np.ndarray]:
    """What a generation's first step reads beside the prompt: each input in the dtype the graph
    declares, the cache at batch 1 with its dims as declared (a symbolic one at 1; the generation
    empties its growing axis)."""
    import numpy as np

    feeds = {}
    for value in graph.inputs:
        dims = [dim if isinstance(dim, int) else 1 for dim in (value.shape or [])]
        dtype = value.dtype.numpy() if value.dtype is not None else np.float32
        feeds[value.name or ""] = np.zeros(dims, dtype)
    return feeds


def prove_generation(run: Run, graph: ir.Graph, expected: Reference, why: str, precision: Precision,
                     ran_on: str) -> Verification:
    """torch's greedy generation (`expected`) against `run`'s, which reads `graph`'s inputs."""
    from deploycc.graph.decoder import decoder_signature
    from deploycc.verify.generation import check_generation
    from deploycc.verify.verification import Verification

    signature = decoder_signature(graph)
    if signature is None:
        return Verification(passed=False, reference="torch", inputs=why, precision=precision,
                            problem="the export has no KV-cache signature (past_key_values in, present out)")
    feeds = _step_inputs(graph)
    try:  # a quantized engine is judged by its tokens and the logits' cosine, as the build judges it
        check = check_generation(expected, run, signature, original_feeds=feeds, candidate_feeds=feeds,
                                 precision=precision, ran_on=ran_on, by_tokens=precision in QUANTIZED)
    except Exception as error:  # the runtime refused a step: no proof
        return Verification(passed=False, reference="torch", inputs=why, precision=precision,
                            problem=f"the greedy generation did not run: {first_line(error)}")
    return Verification(passed=check.passed, reference="torch", inputs=why, precision=precision,
                        problem=check.problem, generation=check)


def prove_on_ort(path: Path, expected: Reference, why: str, graph: ir.Graph | None = None) -> Verification:
    """torch's generation against the ONNX file's on ONNX Runtime CPU, at float32's tolerances
    (`graph`: the file's, where the caller has it read already)."""
    from deploycc import io
    from deploycc.verify.runner import run_session, session

    graph = graph if graph is not None else io.load(path, check=False).model.graph
    loaded = session(path, threads=0)
    return prove_generation(lambda feeds: run_session(loaded, feeds), graph, expected, why, Precision.FP32,
                            "onnxruntime-cpu")
