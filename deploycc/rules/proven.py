"""Proofs already run: a rewrite's proof is decided by what it ran (the original and replacement
models, the feeds of every seed) and the rule's tolerances, so the same proof is not run twice.
The repeated blocks of a network make the same proof model again and again (a ViT's twelve
LayerNorms of one shape); the cells of an audit legalize one model for several targets. Kept in
memory, and where an audit names a folder (CACHE_ENV) in files that its cells share, written
atomically so that cells side by side read a whole verdict or none.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from deploycc.results import KeptRecords

CACHE_ENV = "DEPLOYCC_PROOF_CACHE"  # a folder of proof verdicts shared by an audit's cells
KEPT_IN_MEMORY = 4096
# What a proof decides; the rest of a certificate (the rule, node, op, added ops) is the site's own
VERDICT = ("status", "reference", "samples", "max_abs_error", "max_rel_error", "detail")
_kept = KeptRecords(KEPT_IN_MEMORY, lambda: os.environ.get(CACHE_ENV))


def key(rule: str, atol: float, rtol: float, before: bytes, after: bytes,
        feed_sets: list[dict[str, Any]]) -> str:
    """What decides a proof: the rule and its tolerances, both models, every seed's feeds, and
    the runtimes that run them."""
    import onnx
    import onnxruntime

    from deploycc.verify.reference import feeds_digest

    runtimes = f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}"  # what ran the proof
    digest = hashlib.sha256(f"{rule}|{atol!r}|{rtol!r}|{runtimes}|{len(before)}|{len(after)}|".encode())
    digest.update(before)
    digest.update(after)
    for feeds in feed_sets:
        digest.update(feeds_digest(feeds).encode())
    return digest.hexdigest()[:40]


def recall(found_key: str, certificate: Any) -> bool:
    """Fill `certificate` (a rules.proof.Certificate) with the verdict of the same proof run
    before; False when none was."""
    from deploycc.taxonomy import ProofStatus

    verdict = _kept.get(found_key)
    if verdict is None or set(verdict) != set(VERDICT):
        return False
    try:
        status = ProofStatus(verdict["status"])  # a file holds its text
    except ValueError:
        return False
    for name in VERDICT:
        setattr(certificate, name, verdict[name])
    certificate.status = status
    return True


def keep(found_key: str, certificate: Any) -> None:
    _kept.put(found_key, {name: getattr(certificate, name) for name in VERDICT})
