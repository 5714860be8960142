"""SVMClassifier (`ai.onnx.ml`, what skl2onnx writes for scikit-learn's SVC) in standard ONNX ops,
as ONNX Runtime computes it (svmclassifier.cc and ml_common.h), for TensorRT and OpenVINO, which
parse no `ai.onnx.ml` op:

- the kernel of each row with every support vector (LINEAR x.s, POLY (g x.s + c)^d, RBF
  exp(-g |x - s|^2), SIGMOID tanh(g x.s + c));
- one-versus-one decision values, one per pair of classes i < j: the kernels of i's support
  vectors weighed by coefficient row j - 1, j's by row i, plus rho (a MatMul with the coefficients
  laid out per pair);
- the label: the class with the most pairwise votes, the first of equals (ORT's max_element);
- with probabilities (prob_a, prob_b): each pair's Platt sigmoid, clamped to [1e-7, 1 - 1e-7],
  then libsvm's pairwise coupling (Wu, Lin and Weng's method 2) in float32 as ORT runs it: at
  most 100 rounds, a row stopping at the first round whose error is below 0.005 / k. The rounds
  are an ONNX Loop whose body updates only the rows not yet stopped (an update of 0 leaves a row's
  values as they are, bit for bit), so each row ends where ORT's own loop breaks.

onnx's reference evaluator is not what this follows: it fills the off-diagonal of the coupling's
matrix with a dot product where libsvm and ORT take one product per entry (up to 0.125 apart on a
3-class SVC).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from deploycc.rules.base import Builder, Rule, Site
from deploycc.rules.catalog import register
from deploycc.rules.ml import ML, attribute_text

if TYPE_CHECKING:
    import onnx_ir as ir

COUPLING_ROUNDS = 100  # ml_common.h's multiclass_probability
CLAMP = np.float32(1.0e-7)


class _Svc:
    """The attributes of one SVMClassifier in SVC mode, as arrays."""

    def __init__(self, site: Site) -> None:
        self.labels = np.array(site.attr("classlabels_ints", []) or [], np.int64)
        self.per_class = [int(v) for v in site.attr("vectors_per_class", []) or []]
        self.starts = np.cumsum([0, *self.per_class[:-1]]).astype(int)
        vectors = sum(self.per_class)
        self.support = np.array(site.attr("support_vectors", []) or [], np.float32)
        self.features = self.support.size // vectors if vectors else 0
        self.support = self.support.reshape(vectors, self.features) if vectors else self.support
        self.coefficients = np.array(site.attr("coefficients", []) or [], np.float32)
        self.rho = np.array(site.attr("rho", []) or [], np.float32)
        self.prob_a = np.array(site.attr("prob_a", []) or [], np.float32)
        self.prob_b = np.array(site.attr("prob_b", []) or [], np.float32)
        params = [*(site.attr("kernel_params", []) or []), 0.0, 0.0, 0.0]
        self.gamma, self.coef0, self.degree = (np.float32(v) for v in params[:3])
        self.kernel = attribute_text(site.attr("kernel_type", "LINEAR"))
        self.classes = len(self.labels)
        self.pairs = [(i, j) for i in range(self.classes) for j in range(i + 1, self.classes)]

    def why_not(self, site: Site) -> str | None:
        if self.classes < 2:
            return "integer class labels are handled (string labels have no tensor form on a device)"
        if len(self.per_class) != self.classes or not self.per_class or self.support.size == 0:
            return "SVC mode (support vectors per class) is handled, not the linear mode"
        if self.coefficients.size != (self.classes - 1) * self.support.shape[0] or \
                len(self.rho) != len(self.pairs):
            return "coefficients or rho do not fit the support vectors and classes"
        if self.prob_a.size and (self.prob_a.size != len(self.pairs) or self.prob_b.size != len(self.pairs)):
            return "prob_a/prob_b do not have one value per pair of classes"
        if attribute_text(site.attr("post_transform", "NONE")) != "NONE":
            return "post_transform NONE is handled"
        if self.kernel not in ("LINEAR", "POLY", "RBF", "SIGMOID"):
            return f"kernel {self.kernel} is not one of LINEAR, POLY, RBF, SIGMOID"
        shape = site.shape(0)
        dtype = site.dtype(0)
        if site.rank(0) != 2 or dtype is None or dtype.name != "FLOAT" or shape is None or \
                shape[1] != self.features:
            return "handles a float32 input of rank 2 whose rows have the support vectors' features"
        return None

    def pair_weights(self) -> np.ndarray:
        """[vectors, pairs]: pair (i, j) weighs i's support vectors by row j - 1 and j's by row i."""
        rows = self.coefficients.reshape(self.classes - 1, -1)
        weights = np.zeros((rows.shape[1], len(self.pairs)), np.float32)
        for p, (i, j) in enumerate(self.pairs):
            si, sj = self.starts[i], self.starts[j]
            weights[si:si + self.per_class[i], p] = rows[j - 1, si:si + self.per_class[i]]
            weights[sj:sj + self.per_class[j], p] = rows[i, sj:sj + self.per_class[j]]
        return weights

    def pair_votes(self, winner_is_first: bool) -> np.ndarray:
        """[pairs, classes]: 1 where the pair's vote goes to that class."""
        votes = np.zeros((len(self.pairs), self.classes), np.float32)
        for p, (i, j) in enumerate(self.pairs):
            votes[p, i if winner_is_first else j] = 1
        return votes


@register
class SvmClassifierRule(Rule):
    """SVMClassifier (SVC mode, integer labels): kernels, pairwise decision values and votes; with
    prob_a/prob_b, the probabilities by libsvm's coupling in an ONNX Loop, as ONNX Runtime."""

    name = "svm-classifier"
    family = "ml"
    op_type = "SVMClassifier"
    domain = ML
    since = 1

    def check(self, site: Site) -> str | None:
        return _Svc(site).why_not(site)

    def expand(self, site: Site, b: Builder) -> Sequence[ir.Value]:
        svc = _Svc(site)
        x = site.inputs[0]
        assert x is not None  # check() read its rank
        kernels = _kernels(svc, b, x)
        scores = b.op("Add", b.op("MatMul", kernels, b.const(svc.pair_weights())), b.const(svc.rho))
        positive = b.op("Cast", b.op("Greater", scores, b.scalar_like(0.0, None)), to=1)
        negative = b.op("Sub", b.scalar_like(1.0, None), positive)
        votes = b.op("Add", b.op("MatMul", positive, b.const(svc.pair_votes(True))),
                     b.op("MatMul", negative, b.const(svc.pair_votes(False))))
        label = b.op("Gather", b.const(svc.labels), b.op("ArgMax", votes, axis=1, keepdims=0), axis=0)
        if svc.prob_a.size:
            return [label, _coupled(svc, b, scores)]
        if svc.classes == 2:  # ORT writes the one decision value as [-s, s]
            return [label, b.op("Concat", b.op("Neg", scores), scores, axis=1)]
        return [label, scores]


def _kernels(svc: _Svc, b: Builder, x: ir.Value) -> ir.Value:
    """[rows, vectors]: each row's kernel with every support vector, in ORT's order of operations."""
    if svc.kernel == "RBF":
        diff = b.op("Sub", b.unsqueeze(x, [1]), b.const(svc.support[None]))
        total = b.reduce("ReduceSum", b.op("Mul", diff, diff), [2], keepdims=0)
        return b.op("Exp", b.op("Mul", total, b.const(-svc.gamma)))
    dot = b.op("MatMul", x, b.const(np.ascontiguousarray(svc.support.T)))
    if svc.kernel == "LINEAR":
        return dot
    scaled = b.op("Add", b.op("Mul", dot, b.const(svc.gamma)), b.const(svc.coef0))
    if svc.kernel == "POLY":
        return b.op("Pow", scaled, b.const(svc.degree))
    return b.op("Tanh", scaled)


def _column(b: Builder, matrix: ir.Value, index: int) -> ir.Value:
    return b.op("Gather", matrix, b.const(np.array(index, np.int64)), axis=1)


def _coupled(svc: _Svc, b: Builder, scores: ir.Value) -> ir.Value:
    """[rows, classes]: ml_common.h's multiclass_probability of each row's pairwise sigmoids."""
    k = svc.classes
    value = b.op("Add", b.op("Mul", scores, b.const(svc.prob_a)), b.const(svc.prob_b))
    # 1 - ComputeLogistic(value), ComputeLogistic's own way: v = 1 / (1 + exp(-|value|))
    one = b.const(np.float32(1))
    v = b.op("Div", one, b.op("Add", one, b.op("Exp", b.op("Neg", b.op("Abs", value)))))
    logistic = b.op("Where", b.op("Less", value, b.const(np.float32(0))), b.op("Sub", one, v), v)
    r = b.op("Min", b.op("Max", b.op("Sub", one, logistic), b.const(CLAMP)),
             b.const(np.float32(1) - CLAMP))
    upper = {key: _column(b, r, p) for p, key in enumerate(svc.pairs)}  # R[i][j], i < j
    lower = {key: b.op("Sub", one, r_ij) for key, r_ij in upper.items()}  # R[j][i] = 1 - R[i][j]

    def entry(row: int, col: int) -> ir.Value:
        return upper[(row, col)] if row < col else lower[(col, row)]

    diagonal: list[ir.Value] = []
    for t in range(k):  # Q[t][t] = sum over j != t of R[j][t]^2, summed in ORT's order
        squares = [b.op("Mul", entry(j, t), entry(j, t)) for j in range(k) if j != t]
        total = squares[0]
        for square in squares[1:]:
            total = b.op("Add", total, square)
        diagonal.append(total)
    # Q[t][j] = -R[j][t] * R[t][j] above the diagonal, and Q[j][t] below it
    above = {(t, j): b.op("Neg", b.op("Mul", entry(j, t), entry(t, j)))
             for t in range(k) for j in range(t + 1, k)}
    rows = [[diagonal[t] if j == t else above[(min(t, j), max(t, j))] for j in range(k)] for t in range(k)]
    q_rows = [b.op("Concat", *[b.unsqueeze(cell, [1]) for cell in row], axis=1) for row in rows]
    q = b.op("Concat", *[b.unsqueeze(row, [1]) for row in q_rows], axis=1)  # [rows, k, k]
    rows_count = b.op("Gather", b.op("Shape", scores), b.ints([0]), axis=0)  # [1]
    start = b.op("Expand", b.const(np.full((1, k), np.float32(1) / np.float32(k), np.float32)),
                 b.op("Concat", rows_count, b.ints([k]), axis=0))
    none_done = b.op("Expand", b.const(np.array([False])), rows_count)
    body = _coupling_round(b, k, q, diagonal, q_rows)
    probabilities, _ = b.ops("Loop", b.const(np.array(COUPLING_ROUNDS, np.int64)), b.const(np.array(True)),
                             start, none_done, outputs=2, body=body)
    return probabilities


def _coupling_round(b: Builder, k: int, q: ir.Value, diagonal: list[ir.Value],
                    q_rows: list[ir.Value]) -> ir.Graph:
    """One round of the coupling for every row, as the Loop's body: (p, stopped) -> (p, stopped)."""
    import onnx_ir as ir

    prefix = f"{b.prefix}/round"
    inner = Builder(b.opset, prefix)

    def body_input(name: str, dtype: ir.DataType, dims: list[int | str]) -> ir.Value:
        return ir.Value(name=f"{prefix}/{name}", type=ir.TensorType(dtype), shape=ir.Shape(dims))

    count = body_input("i", ir.DataType.INT64, [])
    going = body_input("cond", ir.DataType.BOOL, [])
    p_in = body_input("p", ir.DataType.FLOAT, ["n", k])
    stopped_in = body_input("stopped", ir.DataType.BOOL, ["n"])
    p = p_in
    qp = inner.reduce("ReduceSum", inner.op("Mul", q, inner.unsqueeze(p, [1])), [2], keepdims=0)
    pqp = inner.reduce("ReduceSum", inner.op("Mul", p, qp), [1], keepdims=0)
    error = inner.reduce("ReduceMax", inner.op("Abs", inner.op("Sub", qp, inner.unsqueeze(pqp, [1]))), [1],
                         keepdims=0)
    eps = np.float32(0.005) / np.float32(k)
    stopped = inner.op("Or", stopped_in, inner.op("Less", error, inner.const(eps)))
    one, two, zero = (inner.const(np.float32(v)) for v in (1, 2, 0))
    for t in range(k):
        qp_t = _column(inner, qp, t)
        diff = inner.op("Div", inner.op("Sub", pqp, qp_t), diagonal[t])
        diff = inner.op("Where", stopped, zero, diff)  # a stopped row takes no step: its values stay
        column = np.arange(k) == t
        p = inner.op("Where", inner.const(column), inner.op("Add", p, inner.unsqueeze(diff, [1])), p)
        grow = inner.op("Add", one, diff)
        step = inner.op("Mul", diff, inner.op("Add", inner.op("Mul", diff, diagonal[t]),
                                              inner.op("Mul", two, qp_t)))
        pqp = inner.op("Div", inner.op("Div", inner.op("Add", pqp, step), grow), grow)
        wide = inner.unsqueeze(grow, [1])
        moved = inner.op("Mul", inner.unsqueeze(diff, [1]), q_rows[t])
        qp = inner.op("Div", inner.op("Add", qp, moved), wide)
        p = inner.op("Div", p, wide)
    going_out = inner.op("Identity", going)
    return ir.Graph([count, going, p_in, stopped_in], [going_out, p, stopped], nodes=inner.nodes,
                    name=prefix)
