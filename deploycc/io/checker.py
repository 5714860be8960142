"""onnx's checker, as a one-line error, on a model whose weights are never loaded (so it works past
2 GB); and, when it refuses one, whether ONNX Runtime loads the model all the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from deploycc.io.validate import model_error

if TYPE_CHECKING:
    import onnx

LARGE_TENSOR_BYTES = 1024  # initializers above this are kept out of protobuf round trips


def check_proto(proto: onnx.ModelProto, path: Path, has_external_data: bool = False,
                size: int | None = None) -> None:
    """onnx.checker as a one-line error; weights are not loaded, so it works past 2 GB.

    With external data the checker is given the path: given a proto, it would look for the
    data files relative to the current directory instead of beside the model. The locations
    were vetted by validate_external_data before this runs. `size`: the proto's serialized size
    where the caller knows it (the file's): protobuf's ByteSize costs a walk of every weight.
    """
    import onnx

    newest = onnx.defs.onnx_opset_version()
    for opset in proto.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > newest:
            raise model_error(path, f"declares opset {opset.version} of the default domain, newer than "
                                    f"the {newest} the installed onnx {onnx.__version__} knows",
                              "upgrade onnx, or export the model at a lower opset")
    try:
        onnx.checker.check_model(str(path) if has_external_data else _without_weights(proto, size),
                                 full_check=False)
    except Exception as error:  # ValidationError, and other types the C++ checker raises
        raise model_error(path, f"fails the ONNX checker: {_one_line(error)}") from None


CHECK_COPY_LIMIT = 8 << 20


def _without_weights(proto: onnx.ModelProto, size: int | None = None) -> onnx.ModelProto:
    """The model with its large initializers declared as graph inputs instead, for the checker:
    given a proto it serializes it and parses it again in C++, two more copies of every weight.
    What it checks of an initializer beyond its type and shape (a data size that fits the dims)
    validate_inline_tensors has checked already. Small models go as they are."""
    import onnx

    if (proto.ByteSize() if size is None else size) < CHECK_COPY_LIMIT:
        return proto
    light = onnx.ModelProto()
    for descriptor, value in proto.ListFields():
        if descriptor.name == "graph":
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(light, descriptor.name).extend(value)
        elif descriptor.message_type:
            getattr(light, descriptor.name).CopyFrom(value)
        else:
            setattr(light, descriptor.name, value)
    graph = proto.graph
    for descriptor, value in graph.ListFields():
        if descriptor.name == "initializer":
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(light.graph, descriptor.name).extend(value)
        elif descriptor.message_type:
            getattr(light.graph, descriptor.name).CopyFrom(value)
        else:
            setattr(light.graph, descriptor.name, value)
    inputs = {value.name for value in graph.input}
    if light.ir_version < 4:
        light.ir_version = 4  # an initializer that became an input alone is no longer listed twice
    for tensor in graph.initializer:
        if _data_bytes(tensor) <= LARGE_TENSOR_BYTES and not tensor.HasField("data_location"):
            light.graph.initializer.append(tensor)
        elif tensor.name not in inputs:
            light.graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type,
                                                                        list(tensor.dims)))
    return light


def _data_bytes(tensor: onnx.TensorProto) -> int:
    """The tensor's data size from its dims and type, without touching its data (ByteSize walks
    it: about a second over a ConvNeXt's initializers, on every read); 8 bytes per string."""
    import onnx

    try:
        width = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, TypeError, ValueError):  # strings and types numpy lacks
        width = 8
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * max(width, 1)


def onnxruntime_loads(path: Path) -> bool:
    """Whether ONNX Runtime loads the model file as it is. Asked only when the checker refuses a
    model: the checker is stricter than the runtime (it wants a shape on every graph output, even
    where an exporter declares none), and a model ONNX Runtime loads is never "bad input".
    In a child process: ORT may crash on a model the checker refused, and that must not end us."""
    import subprocess
    import sys

    script = ("import sys, onnxruntime as ort\n"
              "options = ort.SessionOptions()\n"
              "options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL\n"
              "options.log_severity_level = 4\n"
              "ort.InferenceSession(sys.argv[1], options, providers=['CPUExecutionProvider'])\n")
    try:
        child = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, timeout=600)
    except subprocess.TimeoutExpired:
        return False
    return child.returncode == 0


def _one_line(error: BaseException, limit: int = 300) -> str:
    """The checker's message, which spans lines ("...of node:\nname: OpType: Add\n is not..."), as one."""
    text = " ".join(part.strip() for part in str(error).splitlines() if part.strip())
    text = text or type(error).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."

