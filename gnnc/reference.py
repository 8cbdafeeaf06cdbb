"""The test oracle: a plain numpy evaluation of a checked kernel AST, in float64.

    want = gnnc.reference.evaluate(kernel, graph, x, w)     # float64 arrays

It shares no code with the compiler (no graph dialect, no lowering): every
edge expression is an array ``[E, *shape]`` computed by gathering
``x[graph.src]`` / ``x[graph.dst]``, every vertex expression an array
``[V, *shape]``, and aggregations scatter with ``np.add.at`` /
``np.maximum.at`` over the edges in edge-id order. The semantics are those of
DESIGN.md ("Values and arithmetic"):

- broadcasting is by *leading* axes (the shorter shape is padded with
  trailing singleton axes; numpy's own rule aligns trailing axes);
- empty aggregations give 0; ``max`` / ``min`` propagate NaN;
- ``softmax`` is the stable one (the destination's max is subtracted);
- everything else is IEEE arithmetic (0/0 is NaN, no warnings).

Parameters (graph type P) are kept with a leading axis of length 1, so that
they broadcast against ``[E, ...]`` and ``[V, ...]`` values alike.

Relation types: ``W[rel(e)]`` is ``W[graph.edge_type]`` (an ``[E, ...]``
edge value), ``deg_in(v, rel(e))`` the number of edges sharing the edge's
(destination, relation) pair, ``deg_out(u, rel(e))`` its (source, relation)
pair; ``a @ M`` with a per-edge matrix ``M`` (``W[rel(e)]``, ``theta[e]``)
multiplies each edge's row by its own matrix.

On a bipartite graph a vertex expression has one row per destination; an
input read at ``u`` is indexed by source ids, one read at ``v`` by
destination ids (so one read at both has its destinations as its first rows,
DGL's block convention), and ``deg_in(u)`` / ``deg_out(v)`` are 0 for an id
that is no destination / no source.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gnnc.errors import ArgumentError, GnncError
from gnnc.graph.graph import Graph
from gnnc.lang import ast
from gnnc.lang.signature import kernel_signature
from gnnc.runtime.signature import pack_results, prepare_call

__all__ = ["evaluate"]

_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "abs": np.abs,
    "relu": lambda x: np.maximum(x, 0.0),  # NaN stays NaN, as torch.relu
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    # 1 above 0, 0 at or below it, NaN for NaN
    "step": lambda x: np.where(x > 0, 1.0, np.where(x <= 0, 0.0, x)),
    "detach": lambda x: x,
}


class _ReferenceError(GnncError):
    """A tree the checker would have rejected reached the reference."""


def _align(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Leading-axes broadcasting: pads the shorter value shape with trailing 1s."""
    sa, sb = a.shape[1:], b.shape[1:]
    short, long = (sa, sb) if len(sa) <= len(sb) else (sb, sa)
    if long[: len(short)] != short:
        raise _ReferenceError(f"shapes {list(sa)} and {list(sb)} do not broadcast by leading axes")
    if len(sa) < len(sb):
        a = a.reshape(a.shape + (1,) * (len(sb) - len(sa)))
    elif len(sb) < len(sa):
        b = b.reshape(b.shape + (1,) * (len(sa) - len(sb)))
    return a, b


def _matvec(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``a @ w`` (`w` a `[K, N]` matrix), each row summed in the order k = 0, 1, ..., K-1.

    BLAS (np.matmul) blocks and vectorises a product by where a row sits in
    memory, so two equal rows could differ in their last bit, and a tie of
    `argmax` / `argmin` (and the edge a max's gradient goes to) would fall to
    rounding instead of the lowest edge id. Elementwise numpy does every row's
    arithmetic alike: equal inputs give equal outputs.
    """
    acc = np.zeros(a.shape[:-1] + w.shape[1:])
    for k in range(w.shape[0]):
        acc = acc + a[..., k : k + 1] * w[k]
    return acc


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sum over the last axis of ``a * b``, in index order for every row (see `_matvec`)."""
    acc = np.zeros(np.broadcast_shapes(a.shape, b.shape)[:-1])
    for k in range(a.shape[-1]):
        acc = acc + a[..., k] * b[..., k]
    return acc


class _Evaluator:
    def __init__(self, kernel: Any, graph: Graph, params: dict[str, tuple[str | None, np.ndarray]]):
        self.kernel = kernel
        self.graph = graph
        self.src = graph.src
        self.dst = graph.dst
        self.E = graph.num_edges
        #: rows of a vertex expression: one per destination
        self.V = graph.num_dst
        #: name -> (domain "V" / "E" / None, float64 array; parameters have a leading axis of 1)
        self.values = dict(params)
        ids = max(graph.num_src, graph.num_dst)
        self.in_count = np.bincount(self.dst, minlength=ids).astype(np.float64)
        self.out_count = np.bincount(self.src, minlength=ids).astype(np.float64)
        self.edge_type = graph.edge_type
        self.R = graph.num_relations or 0

    # -------------------------------------------------------------- statements

    def run(self) -> None:
        for d in self.kernel.body:
            mode = "edge" if d.index == "e" else "vertex"
            value = self.expr(d.value, mode)
            n = self.E if d.index == "e" else self.V
            self.values[d.name] = ("E" if d.index == "e" else "V", np.broadcast_to(value, (n,) + value.shape[1:]))

    # ------------------------------------------------------------- expressions

    def expr(self, e: Any, mode: str) -> np.ndarray:
        """``e`` evaluated per edge (``mode == "edge"``) or per vertex; P values have a leading 1."""
        if isinstance(e, ast.Number):
            return np.array([float(e.value)])
        if isinstance(e, ast.Name):
            domain, arr = self.lookup(e.name)
            if domain is not None:
                raise _ReferenceError(f"'{e.name}' is a {domain} tensor read without an index")
            return arr
        if isinstance(e, ast.Index):
            return self.index(e, mode)
        if isinstance(e, ast.Degree):
            if getattr(e, "relation", False):
                return self.relation_degree(e.direction, mode)
            counts = self.in_count if e.direction == "in" else self.out_count
            return self.at(counts, e.index, mode)
        if isinstance(e, ast.EdgeId):
            if mode != "edge":
                raise _ReferenceError("edge_id(e) in a vertex expression")
            return np.arange(self.E, dtype=np.float64)
        if isinstance(e, ast.SelfLoop):
            if mode != "edge":
                raise _ReferenceError("self_loop(e) in a vertex expression")
            return (self.src == self.dst).astype(np.float64)
        if isinstance(e, ast.Unary):
            return -self.expr(e.operand, mode)
        if isinstance(e, ast.Binary):
            return self.binary(e, mode)
        if isinstance(e, ast.Call):
            return self.call(e, mode)
        if isinstance(e, ast.Aggregate):
            if mode != "vertex":
                raise _ReferenceError("an aggregation inside an edge expression")
            return self.aggregate(e.kind, self.edge_values(e.operand))
        raise _ReferenceError(f"unexpected expression {type(e).__name__}")

    def lookup(self, name: str) -> tuple[str | None, np.ndarray]:
        try:
            return self.values[name]
        except KeyError:
            raise _ReferenceError(f"unknown name '{name}'") from None

    def at(self, arr: np.ndarray, index: str, mode: str) -> np.ndarray:
        """A vertex array read at ``u`` or ``v``."""
        if mode == "vertex":
            if index != "v":
                raise _ReferenceError(f"a vertex expression reads index {index}")
            return arr[: self.V]
        return arr[self.src] if index == "u" else arr[self.dst]

    def relation_degree(self, direction: str, mode: str) -> np.ndarray:
        """Per edge: the edges sharing its (destination or source, relation) pair, counted."""
        if mode != "edge" or self.edge_type is None:
            raise _ReferenceError("a degree per relation outside an edge expression, or on a graph without types")
        vertex = self.dst if direction == "in" else self.src
        key = vertex * max(self.R, 1) + self.edge_type
        _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        return counts[inverse.reshape(-1)].astype(np.float64)

    def index(self, e: Any, mode: str) -> np.ndarray:
        domain, arr = self.lookup(e.name)
        if domain == "R":
            if e.index != "rel" or mode != "edge" or self.edge_type is None:
                raise _ReferenceError(f"relation tensor '{e.name}' read as {e.name}[{e.index}] in a {mode} expression")
            return arr[self.edge_type]
        if domain == "E":
            if e.index != "e" or mode != "edge":
                raise _ReferenceError(f"edge tensor '{e.name}' read as {e.name}[{e.index}] in a {mode} expression")
            return arr
        if domain == "V" and e.index in ("u", "v"):
            return self.at(arr, e.index, mode)
        raise _ReferenceError(f"'{e.name}' cannot be read as {e.name}[{e.index}]")

    def edge_values(self, e: Any) -> np.ndarray:
        """An edge expression as a full ``[E, *shape]`` array."""
        value = self.expr(e, "edge")
        return np.broadcast_to(value, (self.E,) + value.shape[1:])

    def binary(self, e: Any, mode: str) -> np.ndarray:
        a = self.expr(e.lhs, mode)
        b = self.expr(e.rhs, mode)
        if e.op == "@":
            if b.ndim < 3:
                raise _ReferenceError("the right operand of '@' must be a matrix")
            if a.ndim < 2 or a.shape[-1] != b.shape[-2]:
                raise _ReferenceError(f"'@' of shapes {list(a.shape[1:])} and {list(b.shape[1:])}")
            if b.shape[0] == 1 and b.ndim == 3:  # a parameter matrix
                return _matvec(a, b[0])
            # a matrix per edge: row e of a (one row for a parameter vector) times b[e]; a matrix
            # [..., K, N] per edge is one per leading index of a (block-diagonal weights)
            a = np.broadcast_to(a, (b.shape[0],) + a.shape[1:])
            if b.ndim > 3:
                return np.einsum("e...k,e...kn->e...n", a, b)
            return np.einsum("e...k,ekn->e...n", a, b)
        a, b = _align(a, b)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            return a * b
        if e.op == "/":
            return a / b
        raise _ReferenceError(f"unknown operator {e.op!r}")

    def call(self, e: Any, mode: str) -> np.ndarray:
        f = e.func
        if f in _UNARY:
            return _UNARY[f](self.expr(e.args[0], mode))
        if f == "leaky_relu":
            x = self.expr(e.args[0], mode)
            slope = self.expr(e.args[1], mode)
            x, slope = _align(x, slope)
            # x > 0 is False for NaN, and slope * NaN is NaN: NaN propagates
            return np.where(x > 0, x, slope * x)
        if f in ("max", "min"):
            a, b = _align(self.expr(e.args[0], mode), self.expr(e.args[1], mode))
            return np.maximum(a, b) if f == "max" else np.minimum(a, b)
        if f == "dot":
            a, b = self.expr(e.args[0], mode), self.expr(e.args[1], mode)
            if a.shape[1:] != b.shape[1:] or a.ndim < 2:
                raise _ReferenceError(f"dot of shapes {list(a.shape[1:])} and {list(b.shape[1:])}")
            return _dot(a, b)
        if f == "outer":
            a, b = self.expr(e.args[0], mode), self.expr(e.args[1], mode)
            if a.ndim < 2 or b.ndim < 2 or a.shape[1:-1] != b.shape[1:-1]:
                raise _ReferenceError(f"outer of shapes {list(a.shape[1:])} and {list(b.shape[1:])}")
            return a[..., :, None] * b[..., None, :]
        if f == "transpose":
            m = self.expr(e.args[0], mode)
            if m.ndim < 3:
                raise _ReferenceError(f"transpose of shape {list(m.shape[1:])}")
            # axis 0 holds the rows (vertices, edges, or 1 for a parameter): swap the value's last two
            return np.swapaxes(m, -1, -2)
        if f == "softmax":
            if mode != "edge":
                raise _ReferenceError("softmax in a vertex expression")
            return self.softmax(self.edge_values(e.args[0]))
        if f in ("deg_in", "deg_out"):  # the parser builds Degree nodes; kept for hand-built trees
            index = getattr(e.args[0], "name", "v") if e.args else "v"
            counts = self.in_count if f == "deg_in" else self.out_count
            return self.at(counts, index, mode)
        raise _ReferenceError(f"unknown function '{f}'")

    # ------------------------------------------------------------ aggregations

    def _per_vertex(self, fill: float, shape: tuple[int, ...]) -> np.ndarray:
        return np.full((self.V,) + shape, fill, dtype=np.float64)

    def _empty_mask(self, ndim: int) -> np.ndarray:
        return (self.in_count[: self.V] == 0).reshape((self.V,) + (1,) * (ndim - 1))

    def aggregate(self, kind: str, values: np.ndarray) -> np.ndarray:
        shape = values.shape[1:]
        if kind in ("sum", "mean"):
            total = self._per_vertex(0.0, shape)
            np.add.at(total, self.dst, values)
            if kind == "sum":
                return total
            count = self.in_count[: self.V].reshape((self.V,) + (1,) * len(shape))
            return np.where(count > 0, total / np.maximum(count, 1.0), 0.0)
        if kind in ("max", "min"):
            # np.maximum.at propagates NaN (np.fmax would drop it)
            if kind == "max":
                acc = self._per_vertex(-np.inf, shape)
                np.maximum.at(acc, self.dst, values)
            else:
                acc = self._per_vertex(np.inf, shape)
                np.minimum.at(acc, self.dst, values)
            acc[np.broadcast_to(self._empty_mask(acc.ndim), acc.shape)] = 0.0
            return acc
        if kind in ("argmax", "argmin"):
            best = self.aggregate(kind[3:], values)  # NaN wherever some in-edge is NaN
            at = best[self.dst]
            attains = (values == at) | (np.isnan(values) & np.isnan(at))
            ids = np.arange(self.E, dtype=np.float64).reshape((self.E,) + (1,) * len(shape))
            first = self._per_vertex(np.inf, shape)
            np.minimum.at(first, self.dst, np.where(attains, ids, np.inf))
            first[np.isinf(first)] = -1.0  # no in-edges
            return first
        raise _ReferenceError(f"unknown aggregation '{kind}'")

    def softmax(self, s: np.ndarray) -> np.ndarray:
        """exp(s - max) / sum(exp(s - max)) over each destination's in-edges."""
        shape = s.shape[1:]
        peak = self._per_vertex(-np.inf, shape)
        np.maximum.at(peak, self.dst, s)
        ex = np.exp(s - peak[self.dst])
        total = self._per_vertex(0.0, shape)
        np.add.at(total, self.dst, ex)
        return ex / total[self.dst]


def evaluate(kernel: Any, graph: Graph, *args: Any, **kwargs: Any) -> Any:
    """Evaluates a checked ``ast.Kernel`` on ``graph`` in float64.

    Arguments are bound and checked as for a compiled kernel
    (``signature.prepare_call``). Returns float64 arrays: the one result, or
    a dict name -> array. ``threads=`` and ``schedule=`` are accepted and
    ignored (they do not change the values); with ``out=``, the results are
    also written there (in the kernel's dtype) and the ``out=`` arrays are
    returned instead.
    """
    if not isinstance(graph, Graph):
        raise ArgumentError(
            f"the first argument of a kernel must be a gnnc.Graph, got {type(graph).__name__}; "
            "build one with gnnc.Graph(edge_index) or gnnc.Graph.from_scipy(A)"
        )
    kwargs = dict(kwargs)
    kwargs.pop("threads", None)
    kwargs.pop("schedule", None)
    out = kwargs.pop("out", None)
    sig = kernel_signature(kernel)
    inputs, outputs, dims = prepare_call(sig, graph, args, kwargs, out=out)
    params: dict[str, tuple[str | None, np.ndarray]] = {}
    for p, arr in zip(sig.params, inputs):
        arr64 = arr.astype(np.float64)
        params[p.name] = (p.domain, arr64 if p.domain else arr64[None])  # "R": rows by relation type
    evaluator = _Evaluator(kernel, graph, params)
    with np.errstate(all="ignore"):
        evaluator.run()
    results = []
    for r, buffer in zip(sig.results, outputs):
        domain, value = evaluator.values[r.name]
        if domain != r.domain:
            raise _ReferenceError(f"result '{r.name}' is declared per {r.domain} but defined per {domain}")
        results.append(np.array(np.broadcast_to(value, buffer.shape), dtype=np.float64))
    if out is not None:
        for buffer, value in zip(outputs, results):
            with np.errstate(all="ignore"):
                np.copyto(buffer, value, casting="unsafe")
        return pack_results(sig, outputs)
    return pack_results(sig, results)
