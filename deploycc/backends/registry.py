"""Backends by kind: the target file names the kind, this table finds the code. A new backend
is one module implementing `backends.base.Backend` and one line here."""

from __future__ import annotations

from importlib import import_module

from deploycc.backends.base import Backend

BACKENDS = {
    "onnxruntime": "deploycc.backends.onnxruntime:OnnxRuntimeBackend",
    "openvino": "deploycc.backends.openvino:OpenVinoBackend",
    "tensorrt": "deploycc.backends.tensorrt:TensorRTBackend",
}


def get_backend(kind: str) -> Backend:
    if kind not in BACKENDS:
        raise ValueError(f"no backend of kind {kind!r} (known: {', '.join(sorted(BACKENDS))})")
    module, name = BACKENDS[kind].split(":")
    backend: Backend = getattr(import_module(module), name)()  # imported when first asked for
    return backend
