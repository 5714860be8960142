"""Proof of one rewrite, on the spot: the replaced node and its replacement, run side by side.

Both become tiny models over the same inputs (constant inputs keep their values, the others get
seeded random data mixed with edge values) and run on ONNX Runtime CPU with graph optimizations
off, so ORT cannot fuse the replacement back into the op it replaced. A certificate records the
runtime that ran the original, the errors, and the verdict; a failed proof stops the rewrite.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from deploycc.records.rewrite import Certificate  # re-exported: a record, in records/
from deploycc.rules import proven
from deploycc.rules.base import Builder, Rule, Site
from deploycc.taxonomy import ProofStatus
from deploycc.verify import inputs as input_data
from deploycc.verify.compare import compare
from deploycc.verify.runner import RunError, run_model_bytes, serialize

if TYPE_CHECKING:
    import onnx_ir as ir

PROVEN, FAILED, UNPROVEN = ProofStatus.PROVEN, ProofStatus.FAILED, ProofStatus.UNPROVEN
PROOF_SEEDS = (0, 1)
HALF_TOLERANCE = 1e-2  # float16/bfloat16 outputs: one rounding of a 10-bit mantissa apart
MAX_CONSTANT_BYTES = 256 << 20  # larger constant inputs are not copied into a proof model


Expansion = Callable[[Site, Builder], Sequence["ir.Value"]]


def _copy_inputs(node: ir.Node, sizes: dict[str, int]) -> tuple[list[ir.Value | None], list[ir.Value],
                                                                  list[ir.Value]]:
    """Fresh values standing for the node's inputs: (in node order, graph inputs, initializers)."""
    import onnx_ir as ir

    mapping: dict[int, ir.Value] = {}
    ordered: list[ir.Value | None] = []
    graph_inputs: list[ir.Value] = []
    initializers: list[ir.Value] = []
    for index, value in enumerate(node.inputs):
        if value is None:
            ordered.append(None)
            continue
        if id(value) in mapping:
            ordered.append(mapping[id(value)])
            continue
        tensor = value.const_value if value.const_value is not None else \
            ir.convenience.get_const_tensor(value)
        name = value.name or f"input{index}"
        if tensor is not None:
            if tensor.nbytes > MAX_CONSTANT_BYTES:
                raise RunError(f"constant input '{name}' is {tensor.nbytes >> 20} MiB, too large to copy")
            fresh = ir.Value(name=name, shape=ir.Shape(list(tensor.shape.numpy())),
                             type=ir.TensorType(tensor.dtype),
                             const_value=tensor)
            initializers.append(fresh)
        else:
            dims = input_data.concrete_dims(value, sizes)
            if dims is None or value.dtype is None:
                raise RunError(f"input '{name}' has no known shape or type")
            fresh = ir.Value(name=name, shape=ir.Shape(dims), type=ir.TensorType(value.dtype))
            graph_inputs.append(fresh)
        mapping[id(value)] = fresh
        ordered.append(fresh)
    return ordered, graph_inputs, initializers


def _model(graph_inputs: list[ir.Value], initializers: list[ir.Value], nodes: Sequence[ir.Node],
           outputs: list[ir.Value], opsets: dict[str, int]) -> ir.Model:
    import onnx_ir as ir

    for index, value in enumerate(outputs):
        value.name = f"output{index}"
    graph = ir.Graph(graph_inputs, outputs, nodes=nodes, initializers=initializers,
                     opset_imports=opsets, name="proof")
    return ir.Model(graph, ir_version=10)


# Types random inputs cannot be drawn in, nor fed to ORT from numpy: a proof model takes them as
# float32 and casts at its boundary (inputs in, outputs out), in both models alike.
CAST_AT_BOUNDARY = {"BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ"}


def _float_boundary(feeds: list[ir.Value]) -> tuple[list[ir.Value], list[ir.Node]]:
    """Graph inputs of a CAST_AT_BOUNDARY type become float32 inputs Cast to that type."""
    import onnx_ir as ir

    inputs, casts = [], []
    for value in feeds:
        if value.dtype is None or value.dtype.name not in CAST_AT_BOUNDARY:
            inputs.append(value)
            continue
        wide = ir.Value(name=value.name, shape=value.shape, type=ir.TensorType(ir.DataType.FLOAT))
        value.name = f"{value.name}/narrow"
        casts.append(ir.Node("", "Cast", [wide], attributes=[ir.AttrInt64("to", int(value.dtype))],
                             outputs=[value]))
        inputs.append(wide)
    return inputs, casts


def _float_outputs(outputs: list[ir.Value]) -> tuple[list[ir.Value], list[ir.Node]]:
    import onnx_ir as ir

    results, casts = [], []
    for value in outputs:
        if value.dtype is None or value.dtype.name not in CAST_AT_BOUNDARY:
            results.append(value)
            continue
        cast = ir.Node("", "Cast", [value], attributes=[ir.AttrInt64("to", int(ir.DataType.FLOAT))])
        cast.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
        casts.append(cast)
        results.append(cast.outputs[0])
    return results, casts


def compared_outputs(node: ir.Node, replacement_count: int) -> list[int]:
    """Outputs a rewrite must reproduce: the first, and every other one somebody reads."""
    site = Site(node, node.inputs, 0)
    return [i for i in range(min(len(node.outputs), replacement_count)) if i == 0 or site.output_used(i)]


def prove(rule: Rule, node: ir.Node, opsets: dict[str, int], site_opset: int,
          name: str) -> Certificate:
    """Run `node` and `rule`'s replacement for it on the same inputs; compare every used output."""
    import onnx_ir as ir

    certificate = Certificate(rule=rule.name, node=name, op=node.op_type, status=UNPROVEN)
    onnx_opset = opsets.get("", 1)
    sizes: dict[str, int] = {}
    try:
        original_inputs, original_feeds, original_constants = _copy_inputs(node, sizes)
        replaced_inputs, replaced_feeds, replaced_constants = _copy_inputs(node, sizes)
    except RunError as error:
        certificate.detail = f"not run: {error}"
        return certificate
    original = ir.Node(node.domain, node.op_type, original_inputs,
                       attributes=list(node.attributes.values()), num_outputs=len(node.outputs))
    builder = Builder(onnx_opset, "proof")
    replacement = list(rule.expand(Site(node, replaced_inputs, site_opset), builder))
    indices = compared_outputs(node, len(replacement))
    for index in indices:  # carry the original output types so both models declare them
        source = node.outputs[index]
        original.outputs[index].type = source.type
        replacement[index].type = source.type
    certificate.added_ops = _histogram(builder.nodes)
    # An output that is also one of the inputs cannot be renamed: pass it through an Identity.
    replaced_outputs = [replacement[i] if replacement[i].producer() is not None
                        else builder.op("Identity", replacement[i]) for i in indices]
    original_feeds, casts_in = _float_boundary(original_feeds)
    original_outputs, casts_out = _float_outputs([original.outputs[i] for i in indices])
    before = _model(original_feeds, original_constants, [*casts_in, original, *casts_out],
                    original_outputs, opsets)
    replaced_feeds, casts_in = _float_boundary(replaced_feeds)
    replaced_outputs, casts_out = _float_outputs(replaced_outputs)
    after = _model(replaced_feeds, replaced_constants, [*casts_in, *builder.nodes, *casts_out],
                   replaced_outputs, opsets)
    try:
        before_bytes, after_bytes = serialize(before), serialize(after)
        feed_sets = []
        for seed in PROOF_SEEDS:
            feeds = input_data.generate(original_feeds, seed=seed, edges=True, sizes=sizes,
                                        int_high=_index_bound(original_feeds + original_constants, sizes))
            # the copies' shapes: a dynamic dim is the size the proof runs at
            for index, array in rule.proof_values(Site(node, original_inputs, site_opset), seed).items():
                named = original_inputs[index]
                if named is not None and named.name in feeds:
                    feeds[named.name] = array
            feed_sets.append(feeds)
    except RunError as error:
        certificate.detail = f"not run: {error}"
        return certificate
    except Exception as error:  # a replacement that does not even serialize is a failed proof
        certificate.status = FAILED
        certificate.detail = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        return certificate
    key = proven.key(rule.name, rule.atol, rule.rtol, before_bytes, after_bytes, feed_sets)
    if proven.recall(key, certificate):
        return certificate
    _run_proof(rule, certificate, before_bytes, after_bytes, feed_sets)
    proven.keep(key, certificate)
    return certificate


def _run_proof(rule: Rule, certificate: Certificate, before_bytes: bytes, after_bytes: bytes,
               feed_sets: list[dict[str, Any]]) -> None:
    """The original and its replacement run on each set of feeds; the certificate says how close."""
    worst_abs = worst_rel = 0.0
    try:
        for seed, feeds in zip(PROOF_SEEDS, feed_sets, strict=True):
            expected = run_model_bytes(before_bytes, feeds)
            try:
                actual = run_model_bytes(after_bytes, feeds, valid=True)
            except RunError as error:  # the replacement itself does not run: a failed proof
                certificate.status = FAILED
                certificate.detail = f"the replacement does not run: {error}"
                return
            certificate.reference = expected.runtime
            certificate.samples += 1
            for output in expected.outputs:
                reference = expected.outputs[output]
                loose = reference.dtype.itemsize <= 2 and reference.dtype.kind == "f"
                atol, rtol = (max(rule.atol, HALF_TOLERANCE), max(rule.rtol, HALF_TOLERANCE)) if loose \
                    else (rule.atol, rule.rtol)
                result = compare(output, reference, actual.outputs[output], atol=atol, rtol=rtol)
                worst_abs = max(worst_abs, result.max_abs_error)
                worst_rel = max(worst_rel, result.max_rel_error)
                if not result.passed and certificate.status != FAILED:  # report the first failure
                    certificate.status = FAILED
                    certificate.detail = f"{output} (seed {seed}): {result.problem}"
    except RunError as error:
        certificate.detail = f"not run: {error}"
        return
    except Exception as error:  # a replacement ORT refuses is a failed proof, not a crash
        certificate.status = FAILED
        certificate.detail = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        return
    certificate.max_abs_error, certificate.max_rel_error = worst_abs, worst_rel
    if certificate.status != FAILED:
        certificate.status = PROVEN


def _index_bound(values: Sequence[ir.Value], sizes: dict[str, int]) -> int:
    """Integer inputs of a single node are nearly always indices: keep them below every dim."""
    dims = [d for v in values for d in (input_data.concrete_dims(v, sizes) or []) if d > 0]
    return min(dims) if dims else 1


def _histogram(nodes: Sequence[ir.Node]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in nodes:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))
