"""Classical-ML ops (`ai.onnx.ml`, what skl2onnx writes) in standard ONNX ops.

No TensorRT or OpenVINO release parses `ai.onnx.ml`; a scikit-learn pipeline deploys there only
when its ops are written in tensor arithmetic:

- TreeEnsembleRegressor: every tree walked at once, one level per step, by index arithmetic (the
  "tree traversal" strategy of Microsoft's Hummingbird): node = Where(x[feature[node]] <= thr[node],
  true[node], false[node]) with Gather/GatherElements over the flattened node tables, leaves
  pointing at themselves; then the leaf weights gathered and summed over the trees. The size is
  linear in the node count (the GEMM strategy is quadratic), and every comparison is the one the op
  makes, on the same float32 values: the path is exact, only the order of the final sum differs.
  A missing feature (NaN) takes the true branch where the node says so
  (nodes_missing_value_tracks_true, what LightGBM and XGBoost write), else the false one.
- TreeEnsembleClassifier (integer labels): the same walk, the class weights summed per class,
  the label at the ArgMax; two classes scored as ONNX Runtime scores its binary case, for the form
  LightGBM's and XGBoost's converters write (one score, for the first class, on every leaf).
- Scaler: (x - offset) * scale. ArrayFeatureExtractor: Gather on the last axis. Normalizer:
  x over its row's max, L1 or L2 norm (rows whose norm is 0 left alone).
- OneHotEncoder with integer categories: Equal against the categories, cast to float (an unknown
  category gives a row of zeros, where `zeros=0` makes the op fail instead).
- LinearClassifier with integer labels and one score per class: MatMul + Add, the post transform
  (Softmax/Sigmoid), and the label gathered at the ArgMax (ties to the first class, as ONNX
  Runtime's max_element).

SVMClassifier has a module of its own (svm.py: kernels, pairwise votes and libsvm's coupling).

ZipMap has no rule: its output, a sequence of maps, has no tensor form on any engine. The
map_outputs pass returns its probability tensor instead (an interface change, reported); with
`--keep-map-outputs --partition` it runs on the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from deploycc.graph.graphs import dims_of
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


def attribute_text(value: object) -> str:
    """A string attribute as text (onnx-ir gives bytes or str)."""
    return value.decode() if isinstance(value, bytes) else str(value)


class _Forest:
    """The trees of one TreeEnsemble node as flat tables indexed by a global node number."""

    def __init__(self, site: Site, weights_prefix: str) -> None:
        trees = site.attr("nodes_treeids", [])
        nodes = site.attr("nodes_nodeids", [])
        self.index = {(t, n): i for i, (t, n) in enumerate(zip(trees, nodes, strict=True))}
        self.modes = [attribute_text(m) for m in site.attr("nodes_modes", [])]
        leaf = [m == "LEAF" for m in self.modes]
        self.feature = np.array([0 if is_leaf else f for f, is_leaf
                                 in zip(site.attr("nodes_featureids", []), leaf, strict=True)], np.int64)
        self.threshold = np.array(site.attr("nodes_values", []), np.float32)
        own = list(range(len(trees)))
        # where a feature is missing (NaN) the node takes its true branch; else the comparison
        # decides, and NaN compares false (ONNX Runtime's TreeEnsemble kernels, every mode)
        self.missing_true = np.array(site.attr("nodes_missing_value_tracks_true", []) or [0] * len(own),
                                     bool)
        true_ids, false_ids = site.attr("nodes_truenodeids", []), site.attr("nodes_falsenodeids", [])
        self.true = np.array([i if leaf[i] else self.index[(trees[i], true_ids[i])] for i in own], np.int64)
        self.false = np.array([i if leaf[i] else self.index[(trees[i], false_ids[i])] for i in own], np.int64)
        children = {int(c) for i in own if not leaf[i] for c in (self.true[i], self.false[i])}
        self.roots = [i for i in own if i not in children]
        self.depth = self._depth(leaf)
        n_targets = int(site.attr("n_targets", 1)) if weights_prefix == "target" \
            else len(site.attr("classlabels_int64s", []) or [])
        n_targets = n_targets or 1
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


WALK_OPSET = 9  # the walk's Where


def _tree_check(site: Site, weights_prefix: str) -> str | None:
    dtype = site.dtype(0)
    if site.rank(0) != 2 or dtype is None or dtype.name != "FLOAT":
        return "handles a float32 input of rank 2 (rows of features)"
    if site.attr("nodes_values_as_tensor") is not None or site.attr(f"{weights_prefix}_weights_as_tensor"):
        return "thresholds or weights given as double tensors are compared in double by the op"
    modes = {attribute_text(m) for m in site.attr("nodes_modes", [])} - {"LEAF"}
    if len(modes) > 1 or not modes <= set(_COMPARISONS):
        return f"branch modes {sorted(modes)}: one of {sorted(_COMPARISONS)} for every node is handled"
    shape = site.shape(0)
    if site.opset < 11 and (shape is None or shape[1] is None):
        return "below opset 11 (no GatherElements) the number of features must be static"
    if len(site.attr("nodes_nodeids", [])) > MAX_TREE_NODES:
        return f"more than {MAX_TREE_NODES} tree nodes"
    try:
        forest = _Forest(site, weights_prefix)
    except (KeyError, ValueError, IndexError) as error:
        return f"the tree tables do not describe trees ({error})"
    if forest.depth > len(forest.feature):
        return "a tree has a cycle"
    return None


def _pick(b: Builder, x: ir.Value, index: ir.Value, shape: list[int | None] | None) -> ir.Value:
    """x[row, index[row, tree]]: GatherElements from opset 11; below it (skl2onnx writes 9) the
    one feature equal to the index selected by Where and summed with zeros, which is exact."""
    if b.opset >= 11:
        return b.op("GatherElements", x, index, axis=1)
    assert shape is not None and shape[1] is not None
    hit = b.op("Equal", b.unsqueeze(index, [2]), b.const(np.arange(shape[1], dtype=np.int64)))
    chosen = b.op("Where", hit, b.unsqueeze(x, [1]), b.const(np.float32(0)))
    return b.reduce("ReduceSum", chosen, [2], keepdims=0)


def _walk(site: Site, b: Builder, forest: _Forest, x: ir.Value) -> ir.Value:
    """The global index of the leaf each row reaches in every tree: [rows, trees]."""
    modes = {m for m in forest.modes if m != "LEAF"}
    comparison = _COMPARISONS[modes.pop()] if modes else "LessOrEqual"
    shape = b.op("Shape", x)
    rows = b.op("Slice", shape, b.ints([0]), b.ints([1])) if b.opset >= 10 else \
        b.op("Slice", shape, starts=[0], ends=[1])  # skl2onnx writes opset 9
    node = b.op("Expand", b.const(np.array([forest.roots], np.int64)),
                b.op("Concat", rows, b.ints([len(forest.roots)]), axis=0))
    feature, threshold = b.const(forest.feature), b.const(forest.threshold)
    true, false = b.const(forest.true), b.const(forest.false)
    missing = b.const(forest.missing_true) if forest.missing_true.any() else None
    for _ in range(forest.depth):
        chosen = _pick(b, x, b.op("Gather", feature, node), site.shape(0))
        limit = b.op("Gather", threshold, node)
        if b.opset < 12 and comparison in _NEGATED:
            taken = b.op("Not", b.op(_NEGATED[comparison], chosen, limit))
            # not (NaN > t) is true, where NaN <= t is false: NaN goes to the false branch
            taken = b.op("And", taken, b.op("Not", b.op("IsNaN", chosen)))
        else:
            taken = b.op(comparison, chosen, limit)
        if missing is not None:
            taken = b.op("Or", taken, b.op("And", b.op("IsNaN", chosen), b.op("Gather", missing, node)))
        node = b.op("Where", taken, b.op("Gather", true, node), b.op("Gather", false, node))
    return node


@register
class TreeEnsembleRegressorRule(Rule):
    """TreeEnsembleRegressor: y = post(aggregate over trees of weight[leaf reached]) + base_values."""

    name = "tree-ensemble-regressor"
    family = "ml"
    op_type = "TreeEnsembleRegressor"
    min_default_opset = WALK_OPSET
    domain = ML
    until = 3

    def check(self, site: Site) -> str | None:
        if attribute_text(site.attr("aggregate_function", "SUM")) not in ("SUM", "AVERAGE"):
            return "aggregate functions SUM and AVERAGE are handled"
        if attribute_text(site.attr("post_transform", "NONE")) not in ("NONE", "LOGISTIC"):
            return "post transforms NONE and LOGISTIC are handled"
        return _tree_check(site, "target")

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        forest = _Forest(site, "target")
        x = site.inputs[0]
        assert x is not None
        leaves = _walk(site, b, forest, x)
        y = b.reduce("ReduceSum", b.op("Gather", b.const(forest.values), leaves), [1], keepdims=0)
        if attribute_text(site.attr("aggregate_function", "SUM")) == "AVERAGE":
            y = b.op("Div", y, b.const(np.float32(len(forest.roots))))
        base = site.attr("base_values")
        if base:
            y = b.op("Add", y, b.const(np.array(base, np.float32)))
        if attribute_text(site.attr("post_transform", "NONE")) == "LOGISTIC":
            y = b.op("Sigmoid", y)
        return [y]


@register
class TreeEnsembleClassifierRule(Rule):
    """TreeEnsembleClassifier: scores = post(sum over trees of class weights[leaf] + base_values);
    label = labels[argmax(scores)]."""

    name = "tree-ensemble-classifier"
    family = "ml"
    op_type = "TreeEnsembleClassifier"
    min_default_opset = WALK_OPSET
    domain = ML
    until = 3

    def check(self, site: Site) -> str | None:
        labels = site.attr("classlabels_int64s") or []
        if not labels:
            return "integer class labels are handled (string labels have no tensor form on a device)"
        if len(labels) == 2:
            return _binary_check(site)
        if len(labels) < 3:
            return "two classes or more are handled"
        base = site.attr("base_values") or []
        if base and len(base) != len(labels):
            return "base values are not one per class"
        if attribute_text(site.attr("post_transform", "NONE")) not in ("NONE", "SOFTMAX", "LOGISTIC"):
            return "post transforms NONE, SOFTMAX and LOGISTIC are handled"
        if any(not 0 <= c < len(labels) for c in site.attr("class_ids", []) or []):
            return "a class id is not one of the labels"
        return _tree_check(site, "class")

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        forest = _Forest(site, "class")
        x = site.inputs[0]
        assert x is not None
        if len(site.attr("classlabels_int64s")) == 2:
            return _binary(site, b, forest, x)
        scores = b.reduce("ReduceSum", b.op("Gather", b.const(forest.values), _walk(site, b, forest, x)),
                          [1], keepdims=0)
        base = site.attr("base_values")
        if base:
            scores = b.op("Add", scores, b.const(np.array(base, np.float32)))
        return _label_and_scores(site, b, np.array(site.attr("classlabels_int64s"), np.int64), scores)


def _binary_check(site: Site) -> str | None:
    """The binary form LightGBM's and XGBoost's converters write: one score per leaf, all for the
    first class, every leaf scored (ONNX Runtime's binary case; its other binary forms differ)."""
    if any(c != 0 for c in site.attr("class_ids", []) or []):
        return "a binary classifier whose weights are all for the first class is handled"
    if len(site.attr("base_values") or []) > 1:
        return "a binary classifier with one base value at most is handled"
    if all(w >= 0 for w in site.attr("class_weights", []) or []):
        return "a binary classifier scored by margins (some weight negative) is handled"
    if attribute_text(site.attr("post_transform", "NONE")) not in ("NONE", "SOFTMAX", "LOGISTIC"):
        return "post transforms NONE, SOFTMAX and LOGISTIC are handled"
    leaves = {(t, n) for t, n, m in zip(site.attr("nodes_treeids", []), site.attr("nodes_nodeids", []),
                                         site.attr("nodes_modes", []), strict=True)
              if attribute_text(m) == "LEAF"}
    if leaves != set(zip(site.attr("class_treeids", []), site.attr("class_nodeids", []), strict=True)):
        return "a binary classifier with a weight on every leaf is handled"
    return _tree_check(site, "class")


def _binary(site: Site, b: Builder, forest: _Forest, x: ir.Value) -> list[ir.Value]:
    """ONNX Runtime's binary case for margins: s = the trees' summed score (+ the base value),
    label 1 where s > 0, scores [-s, s], or with LOGISTIC [sigmoid(-s), sigmoid(s)]. (Where every
    weight is non-negative ONNX Runtime takes s for a probability and scores it otherwise.)"""
    score = b.reduce("ReduceSum", b.op("Gather", b.const(forest.values[:, 0]), _walk(site, b, forest, x)),
                     [1], keepdims=0)
    base = site.attr("base_values") or []
    if base:
        score = b.op("Add", score, b.const(np.float32(base[0])))
    labels = np.array(site.attr("classlabels_int64s"), np.int64)
    positive = b.op("Greater", score, b.const(np.float32(0)))
    label = b.op("Where", positive, b.const(labels[1]), b.const(labels[0]))
    if attribute_text(site.attr("post_transform", "NONE")) == "LOGISTIC":
        pair = [b.op("Sigmoid", b.op("Neg", score)), b.op("Sigmoid", score)]
    else:
        pair = [b.op("Neg", score), score]
    return [label, b.op("Concat", *[b.unsqueeze(value, [1]) for value in pair], axis=1)]


@register
class OneHotEncoderRule(Rule):
    """OneHotEncoder: y[..., j] = float(int64(x) == cats[j]) (ONNX Runtime truncates floats to int64)."""

    name = "one-hot-encoder"
    family = "ml"
    op_type = "OneHotEncoder"
    domain = ML

    def check(self, site: Site) -> str | None:
        dtype = site.dtype(0)
        if not site.attr("cats_int64s"):
            return "integer categories are handled (strings have no tensor form on a device)"
        if dtype is None or dtype.name not in ("INT64", "INT32", "FLOAT", "DOUBLE"):
            return "a numeric input is handled"
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x = site.inputs[0]
        assert x is not None
        dtype = site.dtype(0)
        if dtype is not None and dtype.name != "INT64":
            x = b.op("Cast", x, to=7)  # INT64, truncating floats as the op's kernel does
        cats = b.const(np.array(site.attr("cats_int64s"), np.int64))
        return [b.op("Cast", b.op("Equal", b.unsqueeze(x, [-1]), cats), to=1)]


def _label_and_scores(site: Site, b: Builder, labels: np.ndarray, scores: ir.Value) -> list[ir.Value]:
    """A classifier's outputs: the label at the first highest raw score (ONNX Runtime's
    max_element), and the scores after the post transform, which keeps their order."""
    label = b.op("Gather", b.const(labels), b.op("ArgMax", scores, axis=1, keepdims=0), axis=0)
    post = attribute_text(site.attr("post_transform", "NONE"))
    if post == "SOFTMAX":
        scores = b.op("Softmax", scores, axis=1) if b.opset >= 13 else b.op("Softmax", scores)
    elif post == "LOGISTIC":
        scores = b.op("Sigmoid", scores)
    return [label, scores]


@register
class NormalizerRule(Rule):
    """Normalizer: y = x / n per row, n = max(x) (MAX), sum |x| (L1) or sqrt(sum x^2) (L2);
    a row whose n is 0 stays as it is (ONNX Runtime skips the division there; below opset 11,
    where Equal takes no floats, a norm under the smallest normal float counts as 0)."""

    name = "normalizer"
    family = "ml"
    op_type = "Normalizer"
    domain = ML

    def check(self, site: Site) -> str | None:
        if attribute_text(site.attr("norm", "MAX")) not in ("MAX", "L1", "L2"):
            return "norms MAX, L1 and L2 are handled"
        return _float_rows(site)

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        x = site.inputs[0]
        assert x is not None
        norm = attribute_text(site.attr("norm", "MAX"))
        if norm == "MAX":
            n = b.reduce("ReduceMax", x, [1], keepdims=1)
        elif norm == "L1":
            n = b.reduce("ReduceSum", b.op("Abs", x), [1], keepdims=1)
        else:
            n = b.op("Sqrt", b.reduce("ReduceSum", b.op("Mul", x, x), [1], keepdims=1))
        if b.opset >= 11:
            zero = b.op("Equal", n, b.const(np.float32(0)))
        else:  # Equal takes floats from 11; a NaN norm must still divide (and give NaN)
            zero = b.op("Less", b.op("Abs", n), b.const(np.finfo(np.float32).tiny))
        return [b.op("Div", x, b.op("Where", zero, b.const(np.float32(1)), n))]


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
    """ArrayFeatureExtractor: y = x[..., flatten(indices)] (Gather on the last axis; a vector gives a row)."""

    name = "array-feature-extractor"
    family = "ml"
    op_type = "ArrayFeatureExtractor"
    domain = ML

    def check(self, site: Site) -> str | None:
        dtype, indices, rank = site.dtype(0), site.constant(1), site.rank(0)
        if rank is None or dtype is None or dtype.name == "STRING":
            return "handles numeric inputs of known rank"
        shape = site.shape(0)
        if indices is not None and (shape is None or shape[-1] is None or
                                    not ((indices >= 0) & (indices < shape[-1])).all()):
            return "constant indices must lie within a static last dim"
        # Indices computed at run time (a k-NN's TopK) are in range whenever the op runs:
        # ONNX Runtime refuses an index past the last dim, and Gather does the same.
        return None

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        rank = site.rank(0)
        assert rank is not None
        indices = site.inputs[1]
        if site.rank(1) != 1:
            indices = b.op("Reshape", indices, b.ints([-1]))
        picked = b.op("Gather", site.inputs[0], indices, axis=rank - 1)
        return [b.unsqueeze(picked, [0]) if rank == 1 else picked]


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
        if attribute_text(site.attr("post_transform", "NONE")) not in ("NONE", "SOFTMAX", "LOGISTIC"):
            return "post transforms NONE, SOFTMAX and LOGISTIC are handled"
        return _float_rows(site)

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        labels = np.array(site.attr("classlabels_ints"), np.int64)
        weights = _weights(site, len(labels))
        assert weights is not None
        scores = b.op("Add", b.op("MatMul", site.inputs[0], b.const(np.ascontiguousarray(weights.T))),
                      b.const(np.array(site.attr("intercepts"), np.float32)))
        return _label_and_scores(site, b, labels, scores)
