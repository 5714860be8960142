"""Proof of an export: torch's outputs against the ONNX model's on ONNX Runtime CPU, on the example
inputs and again with every dynamic axis at a second size (an axis that was traced as a constant
fails there), at float32's tolerances; and, after the build, torch against the final artifact.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploycc.frontend import first_line
from deploycc.records.export import ExportProof
from deploycc.taxonomy import Precision
from deploycc.verify.runner import RunError
from deploycc.verify.verification import Verification, compare_all

if TYPE_CHECKING:
    import numpy as np
    import onnx_ir as ir

    from deploycc.frontend.sources import TorchSource

REFERENCE = "torch"


def torch_outputs(module: Any, inputs: tuple[Any, ...]) -> list[np.ndarray]:
    """The module's outputs on `inputs`, flattened as the exporters flatten them (tensors only)."""
    return named_outputs(module, inputs)[1]


def named_outputs(module: Any, inputs: tuple[Any, ...]) -> tuple[list[str], list[np.ndarray]]:
    """The module's outputs on `inputs` as `torch_outputs` gives them, and a name for each from
    where it sits in what forward returns: a dict's key or a named tuple's field ("logits"),
    "output" for a lone tensor, "output_1" for a tuple's second; the names both exporters are
    asked to write, so that the file reads the same whatever exporter and target made it."""
    import torch
    from torch.utils._pytree import tree_flatten_with_path

    with torch.no_grad():
        result = module(*inputs)
    leaves = [(path, leaf) for path, leaf in tree_flatten_with_path(result)[0]
              if isinstance(leaf, torch.Tensor)]
    names: list[str] = []
    for path, _ in leaves:
        parts = [str(getattr(key, "key", getattr(key, "name", getattr(key, "idx", key)))) for key in path]
        name = "_".join(parts) if parts else "output"
        name = f"output_{name}" if name[0].isdigit() else name
        while name in names:
            name += "_"
        names.append(name)
    return names, [leaf.detach().cpu().numpy() for _, leaf in leaves]


def feeds_for(graph_inputs: list[ir.Value], source: TorchSource, inputs: tuple[Any, ...]) -> dict[str, Any]:
    """The arrays for the model's inputs: by name where forward's names survived export, else in
    order among the rest; cast to the dtype the graph declares (an exporter may widen an index)."""
    import numpy as np

    arrays = {name: tensor.detach().cpu().numpy() for name, tensor in zip(source.names, inputs, strict=True)}
    unclaimed = [name for name in source.names if name not in {v.name for v in graph_inputs}]
    feeds: dict[str, Any] = {}
    for value in graph_inputs:
        name = value.name or ""
        array = arrays[name] if name in arrays else arrays[unclaimed.pop(0)] if unclaimed else None
        if array is None:
            raise RunError(f"the ONNX model reads {name!r}, which the module has no input for")
        dtype = value.dtype.numpy() if value.dtype is not None else array.dtype
        feeds[name] = np.asarray(array).astype(dtype, copy=False)
    return feeds


def prove(path: Path, source: TorchSource, inputs: tuple[Any, ...], why: str,
          expected: list[np.ndarray] | None = None) -> ExportProof:
    """torch against `path` on ONNX Runtime CPU at `inputs`."""
    from deploycc import io
    from deploycc.verify.runner import session

    graph = io.load(path, check=False).model.graph
    shapes = {name: list(tensor.shape) for name, tensor in zip(source.names, inputs, strict=True)}
    expected = torch_outputs(source.module, inputs) if expected is None else expected
    try:
        runner = session(path, threads=0)
        feeds = feeds_for(list(graph.inputs), source, inputs)
        names = [output.name for output in runner.get_outputs()]
        actual = dict(zip(names, runner.run(None, feeds), strict=True))
    except Exception as error:  # ORT refused the model or these sizes: no proof
        result = Verification(passed=False, reference=REFERENCE, inputs=why, precision=Precision.FP32,
                              problem=f"ONNX Runtime could not run the export: {first_line(error)}")
        return ExportProof(shapes, result, why)
    return ExportProof(shapes, judge(expected, actual, why, Precision.FP32, original=(path, feeds)), why)


def judge(expected: list[np.ndarray], actual: dict[str, np.ndarray], why: str, precision: Precision,
          original: tuple[Path, dict[str, np.ndarray]] | None = None) -> Verification:
    """torch's outputs (in order) against a run's (by name, in the model's order). With `original`
    (the ONNX file and its feeds), an output that the model itself moves beyond tolerance when its
    inputs move by a few roundings is judged against that spread, as verification judges it (a
    classifier's logit on a random-weight Inception: one of 1,000 beyond fp32's atol)."""
    if len(expected) != len(actual):
        return Verification(passed=False, reference=REFERENCE, inputs=why, precision=precision,
                            problem=f"torch returns {len(expected)} tensor(s), the model {len(actual)}")
    keyed = dict(zip(actual, expected, strict=True))
    return compare_all(keyed, actual, reference=REFERENCE, inputs=why, precision=precision, original=original)


def proven(proof: ExportProof) -> bool:
    """Passed, or matched on outputs that carry no signal (said in the report, not a refusal)."""
    return proof.verification.passed or proof.verification.needs_inputs


def second_size(source: TorchSource, dims: dict[str, dict[int, str]]) -> tuple[Any, ...] | None:
    """The example inputs with every dynamic dim (by its name in the graph, so inputs that share a
    dim move together) one larger, or at the range's other end where the user gave one; the
    content is the example's, taken cyclically along the axis. None when nothing is dynamic."""
    import torch

    sizes: dict[str, int] = {}
    for name, axes in dims.items():
        tensor = source.inputs[source.names.index(name)]
        for axis, dim in axes.items():
            if dim not in sizes:
                sizes[dim] = _other_size(int(tensor.shape[axis]), source.dynamic.get(name, {}).get(axis))
    if not sizes:
        return None
    moved = []
    for name, tensor in zip(source.names, source.inputs, strict=True):
        for axis, dim in dims.get(name, {}).items():
            index = torch.arange(sizes[dim]) % max(int(tensor.shape[axis]), 1)
            tensor = torch.index_select(tensor, axis, index)
        moved.append(tensor)
    return tuple(moved)


def _other_size(size: int, bounds: Any) -> int:
    if bounds is not None:
        for candidate in (bounds.opt, bounds.high, bounds.low):
            if candidate is not None and candidate != size:
                return int(candidate)
    return size + 1


def final_proof(run: Callable[[dict[str, Any]], dict[str, Any]], model: Path, graph: ir.Graph,
                source: TorchSource, precision: Precision, expected: list[np.ndarray]) -> Verification:
    """torch against the final artifact's runner on the example inputs, at the build's precision;
    its outputs are read in the order of `graph`'s (the model it was built from, in `model`)."""
    feeds = feeds_for(list(graph.inputs), source, source.inputs)
    produced = run(feeds)
    ordered = {value.name: produced[value.name] for value in graph.outputs if value.name in produced}
    return judge(expected, ordered, "the example inputs", precision, original=(model, feeds))

