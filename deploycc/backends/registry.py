"""Backends by kind: the target file names the kind, this module finds the code."""

from __future__ import annotations

from deploycc.backends.base import Backend


def get_backend(kind: str) -> Backend:
    if kind == "onnxruntime":
        from deploycc.backends.onnxruntime import OnnxRuntimeBackend

        return OnnxRuntimeBackend()
    if kind == "openvino":
        from deploycc.backends.openvino import OpenVinoBackend

        return OpenVinoBackend()
    if kind == "tensorrt":
        from deploycc.backends.tensorrt import TensorRTBackend

        return TensorRTBackend()
    raise ValueError(f"no backend of kind {kind!r}")
