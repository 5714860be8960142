"""Backends by kind: the target file names the kind, `targets.schema.BACKENDS` (the one table of
kinds, which the target loader checks a file against) names the class, and this imports it."""

from __future__ import annotations

from importlib import import_module

from deploycc.backends.base import Backend
from deploycc.targets.schema import BACKENDS


def get_backend(kind: str) -> Backend:
    if kind not in BACKENDS:
        raise ValueError(f"no backend of kind {kind!r} (known: {', '.join(sorted(BACKENDS))})")
    module, name = BACKENDS[kind].split(":")
    backend: Backend = getattr(import_module(module), name)()  # imported when first asked for
    return backend
