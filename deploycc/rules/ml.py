"""Classical-ML ops (`ai.onnx.ml`, what skl2onnx writes) in standard ONNX ops.

No TensorRT or OpenVINO release parses `ai.onnx.ml`; a scikit-learn pipeline deploys there only
when its ops are written in tensor arithmetic:

- TreeEnsembleRegressor: every tree walked at once, one level per step, by index arithmetic (the
  "tree traversal" strategy of Microsoft's Hummingbird): node = Where(x[feature[node]] <= thr[node],
  true[node], false[node]) with Gather/GatherElements over the flattened node tables, leaves
  pointing at themselves; then the leaf weights gathered and summed over the trees. The size is
  linear in the node count (the GEMM strategy is quadratic), and every comparison is the one the op
  makes, on the same float32 values: the path is exact, only the order of the final sum differs.
- Scaler: (x - offset) * scale. ArrayFeatureExtractor: Gather on the last axis.
- LinearClassifier with integer labels and one score per class: MatMul + Add, the post transform
  (Softmax/Sigmoid), and the label gathered at the ArgMax (ties to the first class, as ONNX
  Runtime's max_element).

ZipMap has no rule: its output, a sequence of maps, has no tensor form on any engine; with
`--partition` it runs on the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from deploycc.analysis.graphs import dims_of
from deploycc.rules.base import Builder, Rule, Site
from deploycc.rules.catalog import register

if TYPE_CHECKING:
    import onnx_ir as ir

ML = "ai.onnx.ml"
# Branch modes and the comparison each makes of x against the node's threshold.
_COMPARISONS = {"BRANCH_LEQ": "LessOrEqual", "BRANCH_LT": "Less", "BRANCH_GTE": "GreaterOrEqual",
                "BRANCH_GT": "Greater"}
# Below opset 12 there is no LessOrEqual/GreaterOrEqual: the negation of the strict opposite.
_NEGATED = {"LessOrEqual": "Greater", "GreaterOrEqual": "Less"}
MAX_TREE_NODES = 1 << 20


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Forest:
    """The trees of one TreeEnsemble node as flat tables indexed by a global node number."""

    def __init__(self, site: Site, weights_prefix: str) -> None:
        trees = site.attr("nodes_treeids", [])
        nodes = site.attr("nodes_nodeids", [])
        self.index = {(t, n): i for i, (t, n) in enumerate(zip(trees, nodes, strict=True))}
        self.modes = [_text(m) for m in site.attr("nodes_modes", [])]
        leaf = [m == "LEAF" for m in self.modes]
        self.feature = np.array([0 if is_leaf else f for f, is_leaf
                                 in zip(site.attr("nodes_featureids", []), leaf, strict=True)], np.int64)
        self.threshold = np.array(site.attr("nodes_values", []), np.float32)
        own = list(range(len(trees)))
        true_ids, false_ids = site.attr("nodes_truenodeids", []), site.attr("nodes_falsenodeids", [])
        self.true = np.array([i if leaf[i] else self.index[(trees[i], true_ids[i])] for i in own], np.int64)
        self.false = np.array([i if leaf[i] else self.index[(trees[i], false_ids[i])] for i in own], np.int64)
        children = {int(c) for i in own if not leaf[i] for c in (self.true[i], self.false[i])}
        self.roots = [i for i in own if i not in children]
        self.depth = self._depth(leaf)
        n_targets = int(site.attr("n_targets", 1) if weights_prefix == "target" else 0) or 1
        self.values = np.zeros((len(own), n_targets), np.float32)
        for tree, node, target, weight in zip(site.attr(f"{weights_prefix}_treeids", []),
                                              site.attr(f"{weights_prefix}_nodeids", []),
                                              site.attr(f"{weights_prefix}_ids", []),
                                              site.attr(f"{weights_prefix}_weights", []), strict=True):
            self.values[self.index[(tree, node)], target] += np.float32(weight)

    def _depth(self, leaf: list[bool]) -> int:
        """Steps from the deepest root to its leaf (a cycle would never end: refused by check)."""
        depth, frontier = 0, list(self.roots)
        while frontier and depth <= len(leaf):
            frontier = [int(c) for i in frontier if not leaf[i] for c in (self.true[i], self.false[i])]
            depth += 1 if frontier else 0
        return depth


def _tree_check(site: Site, weights_prefix: str) -> str | None:
    dtype = site.dtype(0)
    if site.rank(0) != 2 or dtype is None or dtype.name != "FLOAT":
        return "handles a float32 input of rank 2 (rows of features)"
    if site.attr("nodes_values_as_tensor") is not None or site.attr(f"{weights_prefix}_weights_as_tensor"):
        return "thresholds or weights given as double tensors are compared in double by the op"
    modes = {_text(m) for m in site.attr("nodes_modes", [])} - {"LEAF"}
    if len(modes) > 1 or not modes <= set(_COMPARISONS):
        return f"branch modes {sorted(modes)}: one of {sorted(_COMPARISONS)} for every node is handled"
    if any(site.attr("nodes_missing_value_tracks_true", []) or []):
        return "missing values that follow the true branch are not handled"
    if len(site.attr("nodes_nodeids", [])) > MAX_TREE_NODES:
        return f"more than {MAX_TREE_NODES} tree nodes"
    try:
        forest = _Forest(site, weights_prefix)
    except (KeyError, ValueError, IndexError) as error:
        return f"the tree tables do not describe trees ({error})"
    if forest.depth > len(forest.feature):
        return "a tree has a cycle"
    return None


def _walk(site: Site, b: Builder, forest: _Forest, x: ir.Value) -> ir.Value:
    """The global index of the leaf each row reaches in every tree: [rows, trees]."""
    modes = {m for m in forest.modes if m != "LEAF"}
    comparison = _COMPARISONS[modes.pop()] if modes else "LessOrEqual"
    rows = b.op("Slice", b.op("Shape", x), b.ints([0]), b.ints([1]))
    node = b.op("Expand", b.const(np.array([forest.roots], np.int64)),
                b.op("Concat", rows, b.ints([len(forest.roots)]), axis=0))
    feature, threshold = b.const(forest.feature), b.const(forest.threshold)
    true, false = b.const(forest.true), b.const(forest.false)
    for _ in range(forest.depth):
        chosen = b.op("GatherElements", x, b.op("Gather", feature, node), axis=1)
        limit = b.op("Gather", threshold, node)
        if b.opset < 12 and comparison in _NEGATED:
            taken = b.op("Not", b.op(_NEGATED[comparison], chosen, limit))
        else:
            taken = b.op(comparison, chosen, limit)
        node = b.op("Where", taken, b.op("Gather", true, node), b.op("Gather", false, node))
    return node


@register
class TreeEnsembleRegressorRule(Rule):
    """TreeEnsembleRegressor: y = post(aggregate over trees of weight[leaf reached]) + base_values."""

    name = "tree-ensemble-regressor"
    family = "ml"
    op_type = "TreeEnsembleRegressor"
    domain = ML
    until = 3

    def check(self, site: Site) -> str | None:
        if _text(site.attr("aggregate_function", "SUM")) not in ("SUM", "AVERAGE"):
            return "aggregate functions SUM and AVERAGE are handled"
        if _text(site.attr("post_transform", "NONE")) not in ("NONE", "LOGISTIC"):
            return "post transforms NONE and LOGISTIC are handled"
        return _tree_check(site, "target")

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        forest = _Forest(site, "target")
        x = site.inputs[0]
        assert x is not None
        leaves = _walk(site, b, forest, x)
        y = b.reduce("ReduceSum", b.op("Gather", b.const(forest.values), leaves), [1], keepdims=0)
        if _text(site.attr("aggregate_function", "SUM")) == "AVERAGE":
            y = b.op("Div", y, b.const(np.float32(len(forest.roots))))
        base = site.attr("base_values")
        if base:
            y = b.op("Add", y, b.const(np.array(base, np.float32)))
        if _text(site.attr("post_transform", "NONE")) == "LOGISTIC":
            y = b.op("Sigmoid", y)
        return [y]


def _float_rows(site: Site) -> str | None:
    dtype = site.dtype(0)
    if site.rank(0) != 2 or dtype is None or dtype.name != "FLOAT":
        return "handles a float32 input of rank 2 (rows of features)"
    return None


@register
class ScalerRule(Rule):
    """Scaler: y = (x - offset) * scale, per feature or for all."""

    name = "scaler"
    family = "ml"
    op_type = "Scaler"
    domain = ML

    def check(self, site: Site) -> str | None:
        return _float_rows(site)

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        offset = np.array(site.attr("offset", [0.0]) or [0.0], np.float32)
        scale = np.array(site.attr("scale", [1.0]) or [1.0], np.float32)
        return [b.op("Mul", b.op("Sub", site.inputs[0], b.const(offset)), b.const(scale))]


@register
class ArrayFeatureExtractorRule(Rule):
    """ArrayFeatureExtractor: y = x[..., indices] (Gather on the last axis)."""

    name = "array-feature-extractor"
    family = "ml"
    op_type = "ArrayFeatureExtractor"
    domain = ML

    def check(self, site: Site) -> str | None:
        dtype, indices, rank = site.dtype(0), site.constant(1), site.rank(0)
        if rank is None or rank < 2 or dtype is None or dtype.name == "STRING":
            return "handles numeric inputs of rank 2 or more (ONNX Runtime gives a rank-1 input a row)"
        shape = site.shape(0)
        if indices is None or indices.ndim != 1 or shape is None or shape[-1] is None or \
                not ((indices >= 0) & (indices < shape[-1])).all():
            return "needs constant 1-D indices within a static last dim"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        return [b.op("Gather", site.inputs[0], site.inputs[1], axis=-1)]


def _weights(site: Site, classes: int) -> np.ndarray | None:
    """The [classes, features] coefficient matrix as ONNX Runtime reads it: row i starts at
    i * features, features being the input's dim 1 where it is known. onnxmltools' iris sample
    declares 2 features and carries 4 per class; ORT reads the first 2 * classes values."""
    coefficients = np.array(site.attr("coefficients", []) or [], np.float32)
    dims = dims_of(site.inputs[0]) if site.inputs and site.inputs[0] is not None else None
    features = dims[1] if dims and len(dims) == 2 and isinstance(dims[1], int) else None
    if features is None:
        return coefficients.reshape(classes, -1) if coefficients.size % classes == 0 else None
    if features * classes > coefficients.size:
        return None
    return coefficients[:features * classes].reshape(classes, features)


@register
class LinearClassifierRule(Rule):
    """LinearClassifier: scores = post(x @ W^T + b); label = labels[argmax(scores)]."""

    name = "linear-classifier"
    family = "ml"
    op_type = "LinearClassifier"
    domain = ML

    def check(self, site: Site) -> str | None:
        labels = site.attr("classlabels_ints")
        intercepts = site.attr("intercepts", []) or []
        if not labels:
            return "integer class labels are handled (string labels have no tensor form on a device)"
        if len(intercepts) != len(labels) or len(labels) < 2:
            return "one score per class is handled (the binary single-score form is not)"
        if _weights(site, len(labels)) is None:
            return "coefficients are not one row per class of the input's features"
        if _text(site.attr("post_transform", "NONE")) not in ("NONE", "SOFTMAX", "LOGISTIC"):
            return "post transforms NONE, SOFTMAX and LOGISTIC are handled"
        return _float_rows(site)

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        labels = np.array(site.attr("classlabels_ints"), np.int64)
        weights = _weights(site, len(labels))
        assert weights is not None
        scores = b.op("Add", b.op("MatMul", site.inputs[0], b.const(np.ascontiguousarray(weights.T))),
                      b.const(np.array(site.attr("intercepts"), np.float32)))
        label = b.op("Gather", b.const(labels), b.op("ArgMax", scores, axis=1, keepdims=0), axis=0)
        post = _text(site.attr("post_transform", "NONE"))
        if post == "SOFTMAX":
            scores = b.op("Softmax", scores, axis=1) if b.opset >= 13 else b.op("Softmax", scores)
        elif post == "LOGISTIC":
            scores = b.op("Sigmoid", scores)
        return [label, scores]
