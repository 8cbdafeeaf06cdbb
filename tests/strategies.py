"""Hypothesis strategies shared by the tests: graphs, features, random kernels."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import gnnc

FEATURE_SIZES = (1, 3, 17, 64, 130)


@st.composite
def edge_lists(draw, max_vertices: int = 40, max_edges: int = 200, huge_hubs: bool = False):
    """(src, dst, V): empty graphs, isolated vertices, self loops, duplicates, hubs.

    With ``huge_hubs``, also graphs where one to three destinations have
    5,000 to 100,000 in-edges each (what `group neighbors` splits), with
    duplicates, self loops and isolated vertices beside them.
    """
    kinds = ["random", "empty", "no_edges", "hub", "self_loops", "power_law"]
    kind = draw(st.sampled_from(kinds + (["huge_hub"] if huge_hubs else [])))
    if kind == "huge_hub":
        v = draw(st.integers(2, max_vertices))
        rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
        hubs = rng.integers(0, v, draw(st.integers(1, 3)))
        sizes = [draw(st.sampled_from([5_000, 20_000, 100_000])) for _ in hubs]
        src = np.concatenate([rng.integers(0, v, n) for n in sizes] + [rng.integers(0, v, max_edges)])
        dst = np.concatenate([np.full(n, h) for n, h in zip(sizes, hubs)] + [rng.integers(0, v, max_edges)])
        loops = rng.random(src.shape[0]) < 0.05
        dst = np.where(loops, src, dst)
        # leave the top vertices isolated
        v += draw(st.integers(0, 3))
        return src.astype(np.int64), dst.astype(np.int64), v
    if kind == "empty":
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    v = draw(st.integers(1, max_vertices))
    if kind == "no_edges":
        return np.zeros(0, np.int64), np.zeros(0, np.int64), v
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    if kind == "hub":
        # one destination with thousands of in-edges, many duplicates among them
        n = draw(st.integers(1000, 3000))
        src = rng.integers(0, v, n)
        dst = np.full(n, rng.integers(0, v))
        extra = draw(st.integers(0, max_edges))
        src = np.concatenate([src, rng.integers(0, v, extra)])
        dst = np.concatenate([dst, rng.integers(0, v, extra)])
    elif kind == "power_law":
        n = draw(st.integers(0, max_edges))
        weights = 1.0 / np.arange(1, v + 1) ** 1.2
        weights /= weights.sum()
        src = rng.choice(v, n, p=weights)
        dst = rng.choice(v, n, p=weights[::-1])
    else:
        n = draw(st.integers(0, max_edges))
        src = rng.integers(0, v, n)
        dst = rng.integers(0, v, n)
        if kind == "self_loops" and n:
            loops = rng.random(n) < 0.3
            dst = np.where(loops, src, dst)
        if n and draw(st.booleans()):  # duplicate a chunk of edges
            k = draw(st.integers(1, n))
            src = np.concatenate([src, src[:k]])
            dst = np.concatenate([dst, dst[:k]])
    return src.astype(np.int64), dst.astype(np.int64), v


@st.composite
def graphs(draw, **kwargs):
    src, dst, v = draw(edge_lists(**kwargs))
    return gnnc.Graph.from_coo(src, dst, num_vertices=v)


@st.composite
def relation_graphs(draw, max_relations: int = 6, **kwargs):
    """Graphs with a relation type per edge (`edge_lists`' shapes): one relation, relations
    without edges (num_relations above the largest type + 1), types skewed to a few."""
    src, dst, v = draw(edge_lists(**kwargs))
    r = draw(st.integers(1, max_relations))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    kind = draw(st.sampled_from(["uniform", "skewed", "one_used", "unused_top"]))
    e = src.shape[0]
    if kind == "uniform":
        types = rng.integers(0, r, e)
    elif kind == "skewed":
        weights = 1.0 / np.arange(1, r + 1) ** 2
        types = rng.choice(r, e, p=weights / weights.sum())
    elif kind == "one_used":
        types = np.full(e, rng.integers(0, r))
    else:  # the top relations have no edges
        types = rng.integers(0, max(1, r // 2), e)
    return gnnc.Graph.from_coo(src, dst, num_vertices=v, edge_type=types.astype(np.int64), num_relations=r)


def with_relations(graph: gnnc.Graph, seed: int, max_relations: int = 5) -> gnnc.Graph:
    """The same edges with random relation types, some relations without edges."""
    rng = np.random.default_rng(seed)
    r = int(rng.integers(1, max_relations + 1))
    types = rng.integers(0, max(1, r - 1), graph.num_edges)
    return gnnc.Graph(graph, edge_type=types, num_relations=r)


def random_inputs(signature, graph, dims: dict[str, int], dtype, seed: int) -> dict[str, np.ndarray]:
    """Arrays for every parameter of a kernel signature, values in [-1, 1]."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for p in signature.params:
        shape = [dims[d] if isinstance(d, str) else d for d in p.shape]
        lead = {"V": [graph.num_vertices], "E": [graph.num_edges], "R": [graph.num_relations], None: []}[p.domain]
        inputs[p.name] = rng.uniform(-1, 1, lead + shape).astype(dtype)
    return inputs


# ------------------------------------------------------------ random kernels
#
# A random kernel over x, y: [V, F], w: [E], s: [V], eps: f32 and W: [F, F].
# Expressions are kept numerically tame (no exp of exp, no division by
# something that can be 0) so float32 and the float64 reference agree within
# a rounding tolerance; semantics edge cases are covered by dedicated tests.

_VEC_LEAVES = ["x[u]", "x[v]", "y[u]", "y[v]"]
_SCALAR_EDGE_LEAVES = ["w[e]", "s[u]", "s[v]", "eps", "deg_in(v)", "deg_out(u)", "0.5", "2"]
_SAFE_UNARY = ["tanh", "sigmoid", "relu", "abs"]


@st.composite
def vec_edge_expr(draw, depth: int = 3) -> str:
    if depth <= 0:
        return draw(st.sampled_from(_VEC_LEAVES))
    choice = draw(st.integers(0, 7))
    sub = lambda: draw(vec_edge_expr(depth - 1))  # noqa: E731
    if choice == 0:
        return draw(st.sampled_from(_VEC_LEAVES))
    if choice == 1:
        return f"({sub()} {draw(st.sampled_from(['+', '-', '*']))} {sub()})"
    if choice == 2:
        return f"({draw(scalar_edge_expr(depth - 1))} * {sub()})"
    if choice == 3:
        return f"{draw(st.sampled_from(_SAFE_UNARY))}({sub()})"
    if choice == 4:
        return f"{draw(st.sampled_from(['max', 'min']))}({sub()}, {sub()})"
    if choice == 5:
        return f"leaky_relu({sub()}, 0.1)"
    if choice == 6:
        return f"tanh({sub()} @ W)"
    return f"({sub()} / (1 + abs({draw(scalar_edge_expr(depth - 1))})))"


@st.composite
def scalar_edge_expr(draw, depth: int = 2) -> str:
    if depth <= 0:
        return draw(st.sampled_from(_SCALAR_EDGE_LEAVES))
    choice = draw(st.integers(0, 5))
    sub = lambda: draw(scalar_edge_expr(depth - 1))  # noqa: E731
    if choice == 0:
        return draw(st.sampled_from(_SCALAR_EDGE_LEAVES))
    if choice == 1:
        return f"({sub()} {draw(st.sampled_from(['+', '-', '*']))} {sub()})"
    if choice == 2:
        return f"tanh(dot({draw(vec_edge_expr(1))}, {draw(vec_edge_expr(1))}))"
    if choice == 3:
        return "rsqrt(deg_out(u) * deg_in(v))"
    if choice == 4:
        return f"exp(tanh({sub()}))"
    return f"sqrt(1 + abs({sub()}))"


@st.composite
def vertex_expr(draw) -> str:
    terms = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["sum", "mean", "max", "min", "softmax", "dst"]))
        if kind == "dst":
            terms.append(draw(st.sampled_from(["x[v]", "(1 + eps) * x[v]", "s[v] * y[v]", "tanh(x[v] @ W)"])))
        elif kind == "softmax":
            terms.append(f"sum(softmax({draw(scalar_edge_expr(2))}) * {draw(vec_edge_expr(2))})")
        else:
            terms.append(f"{kind}({draw(vec_edge_expr(3))})")
    ops = [draw(st.sampled_from(["+", "-", "*"])) for _ in terms[1:]]
    text = terms[0]
    for op, t in zip(ops, terms[1:]):
        text = f"{text} {op} {t}"
    return text


@st.composite
def random_kernels(draw) -> str:
    """Source text of a random kernel; sometimes with an edge result, two phases."""
    dtype = draw(st.sampled_from(["f32", "f64"]))
    params = f"x: {dtype}[V, F], y: {dtype}[V, F], w: {dtype}[E], s: {dtype}[V], eps: {dtype}, W: {dtype}[F, F]"
    shape = draw(st.sampled_from(["edge", "vertex", "both", "two_phase"]))
    if shape == "edge":
        body = f"out[e] = {draw(vec_edge_expr(3))}"
        sig = f"-> {dtype}[E, F]"
    elif shape == "vertex":
        body = f"out[v] = {draw(vertex_expr())}"
        sig = f"-> {dtype}[V, F]"
    elif shape == "both":
        body = f"score[e] = {draw(scalar_edge_expr(2))}\n    out[v] = sum(softmax(score[e]) * {draw(vec_edge_expr(2))})"
        sig = f"-> (out: {dtype}[V, F], score: {dtype}[E])"
    else:
        body = f"h[v] = {draw(vertex_expr())}\n    out[v] = {draw(st.sampled_from(['sum', 'mean', 'max', 'min']))}(tanh(h[u]) * {draw(vec_edge_expr(1))}) + h[v]"
        sig = f"-> {dtype}[V, F]"
    return f"kernel k({params}) {sig} {{\n    {body}\n}}\n"
