"""Generated gradient kernels against central finite differences of the numpy reference (float64)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.api import compile_grad
from gnnc.frontend import parse_and_check

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# every special case at once: a self loop (2->2), duplicate edges (0->1 twice),
# an isolated vertex (4), a vertex with no in-edges (3) and a small hub (1)
GRAPH = gnnc.Graph(np.array([[0, 1, 2, 2, 3, 0, 2, 3], [1, 2, 0, 2, 1, 1, 1, 0]]), num_vertices=5)

SMOOTH = """
kernel smooth(x: f32[V, H, F], y: f32[V, H], w: f32[E], b: f32[H], c: f32) -> f32[V, H, F] {
    s[e]   = sigmoid(y[u] * w[e] + b) + tanh(y[v] * c) / (2 + exp(y[u]))
    out[v] = x[v] * 3 + mean(s[e] * x[u]) + sum(sqrt(1 + x[u] * x[u]) * log(2 + w[e]) - x[v])
}
kernel edgewise(q: f32[V, H, D], k: f32[V, H, D]) -> f32[E, H] {
    out[e] = dot(q[v], k[u]) * rsqrt(deg_in(v) * deg_out(u)) - dot(q[u], q[u])
}
"""


def _f64(source: str) -> str:
    return source.replace("f32", "f64")


def _inputs(kernel, rng, dims):
    args = {}
    for p in kernel.params:
        rows = {"V": [GRAPH.num_vertices], "E": [GRAPH.num_edges], None: []}[p.type.domain]
        shape = rows + [dims[d] if isinstance(d, str) else d for d in p.type.shape]
        args[p.name] = rng.uniform(0.2, 1.5, size=shape)
    return args


def _numeric_grad(forward, args, name, gout, h=1e-6):
    grad = np.zeros_like(args[name])
    flat = grad.reshape(-1)
    for i in range(flat.size):
        plus = {k: v.copy() for k, v in args.items()}
        minus = {k: v.copy() for k, v in args.items()}
        plus[name].reshape(-1)[i] += h
        minus[name].reshape(-1)[i] -= h
        flat[i] = np.sum((forward(GRAPH, **plus) - forward(GRAPH, **minus)) * gout) / (2 * h)
    return grad


CASES = [
    (EXAMPLES / "gcn.gnn", "gcn"),
    (EXAMPLES / "gcn_norm.gnn", "gcn_norm"),
    (EXAMPLES / "sage_mean.gnn", "sage_mean"),
    (EXAMPLES / "gin.gnn", "gin"),
    (EXAMPLES / "attention.gnn", "attention"),
    (SMOOTH, "smooth"),
    (SMOOTH, "edgewise"),
]


@pytest.mark.parametrize("source,name", CASES, ids=[c[1] for c in CASES])
def test_gradients_match_finite_differences(source, name):
    text = Path(source).read_text() if isinstance(source, Path) else source
    text = _f64(text)
    kernel = parse_and_check(text).kernel(name)
    rng = np.random.default_rng(0)
    args = _inputs(kernel, rng, {"F": 2, "H": 2, "D": 3})
    forward = getattr(gnnc.compile(text, target="reference"), name)
    result = forward(GRAPH, **args)
    gout = rng.normal(size=result.shape)
    compiled = compile_grad(text, name)(GRAPH, gout=gout, **args)
    reference = compile_grad(text, name, target="reference")(GRAPH, gout=gout, **args)
    assert set(compiled) == set(reference)
    differentiable = [p.name for p in kernel.params]
    assert set(compiled) == set(differentiable)
    for p in differentiable:
        want = _numeric_grad(forward, args, p, gout)
        np.testing.assert_allclose(reference[p], want, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(compiled[p], reference[p], rtol=1e-10, atol=1e-12)


def test_f32_gradients_match_reference():
    grad = compile_grad(EXAMPLES / "gcn.gnn", "gcn")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 3)).astype(np.float32)
    w = rng.normal(size=8).astype(np.float32)
    gout = rng.normal(size=(5, 3)).astype(np.float32)
    got = grad(GRAPH, x, w, gout=gout)
    want = compile_grad(EXAMPLES / "gcn.gnn", "gcn", target="reference")(GRAPH, x, w, gout=gout)
    # by hand: dx[u] = sum over out-edges e=(u->v) of w[e] gout[v]; dw[e] = <gout[v], x[u]>
    by_hand_x = np.zeros_like(want["x"])
    np.add.at(by_hand_x, GRAPH.src, w[:, None].astype(np.float64) * gout[GRAPH.dst])
    by_hand_w = np.sum(gout[GRAPH.dst].astype(np.float64) * x[GRAPH.src], axis=1)
    np.testing.assert_allclose(want["x"], by_hand_x, rtol=1e-12)
    np.testing.assert_allclose(want["w"], by_hand_w, rtol=1e-12)
    for k in ("x", "w"):
        assert got[k].dtype == np.float32
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


def test_reversed_graph_keeps_edge_ids():
    rev = GRAPH.reversed()
    assert rev.reversed() is GRAPH and GRAPH.reversed() is rev
    np.testing.assert_array_equal(rev.src, GRAPH.dst)
    np.testing.assert_array_equal(rev.dst, GRAPH.src)
    np.testing.assert_array_equal(rev.in_indptr, GRAPH.out_indptr)
    np.testing.assert_array_equal(np.sort(rev.in_eid), np.arange(GRAPH.num_edges))


def test_unsupported_operations_are_refused_clearly():
    with pytest.raises(gnnc.CompileError, match="'@' is not differentiated yet"):
        compile_grad(EXAMPLES / "mlp_aggr.gnn", "mlp_aggr")



# ------------------------------------------------- hypothesis: random kernels and graphs

from hypothesis import given, settings, strategies as st  # noqa: E402

from tests.strategies import graphs  # noqa: E402

_ATOMS = ["x[u]", "x[v]", "w[e]", "y[u]", "y[v]", "deg_in(v)", "2", "c"]
_UNARY = ["exp(({0}) * 0.3)", "sigmoid({0})", "tanh({0})", "sqrt(1 + ({0}) * ({0}))", "log(2 + ({0}) * ({0}))",
          "rsqrt(1 + ({0}) * ({0}))", "-({0})"]
_BINARY = ["({0} + {1})", "({0} - {1})", "({0} * {1})", "({0} / (1 + ({1}) * ({1})))"]


@st.composite
def _edge_exprs(draw, depth=3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(_ATOMS))
    if draw(st.booleans()):
        return draw(st.sampled_from(_UNARY)).format(draw(_edge_exprs(depth - 1)))
    a, b = draw(_edge_exprs(depth - 1)), draw(_edge_exprs(depth - 1))
    return draw(st.sampled_from(_BINARY)).format(a, b)


@st.composite
def _kernels(draw):
    """A smooth kernel: an edge result, or an aggregation (sum / mean) with a destination term."""
    body = draw(_edge_exprs())
    if "x[" not in body:
        body = f"({body}) * x[u]"
    if draw(st.booleans()):
        result, stmt = "f64[E, F]", f"out[e] = {body}"
    else:
        agg = draw(st.sampled_from(["sum", "mean"]))
        stmt = f"out[v] = {agg}({body}) + x[v] * y[v]"
        result = "f64[V, F]"
    return f"kernel k(x: f64[V, F], y: f64[V], w: f64[E], c: f64) -> {result} {{\n    {stmt}\n}}\n"


# each example compiles its own gradient kernels: fewer examples than the profile's default
@settings(max_examples=min(8, settings().max_examples))
@given(graph=graphs(max_vertices=12, max_edges=40), source=_kernels(), f=st.sampled_from([1, 3]),
       seed=st.integers(0, 2**31 - 1))
def test_random_kernels_directional_derivatives(graph, source, f, seed):
    """<grad, d> equals the central difference of <gout, out> along a random direction d."""
    rng = np.random.default_rng(seed)
    n, m = graph.num_vertices, graph.num_edges
    args = {"x": rng.uniform(-1, 1, (n, f)), "y": rng.uniform(-1, 1, n), "w": rng.uniform(-1, 1, m),
            "c": np.array(rng.uniform(-1, 1))}
    forward = gnnc.compile(source, target="reference").k
    gout = rng.normal(size=forward(graph, **args).shape)
    compiled = compile_grad(source, "k")(graph, gout=gout, **args)
    reference = compile_grad(source, "k", target="reference")(graph, gout=gout, **args)
    h = 1e-5
    for name, value in args.items():
        d = rng.normal(size=value.shape)
        plus, minus = dict(args), dict(args)
        plus[name], minus[name] = value + h * d, value - h * d
        numeric = np.sum((forward(graph, **plus) - forward(graph, **minus)) * gout) / (2 * h)
        analytic = float(np.sum(reference[name] * d))
        assert abs(analytic - numeric) <= 1e-5 * (1 + abs(numeric)), (name, analytic, numeric)
        np.testing.assert_allclose(compiled[name], reference[name], rtol=1e-9, atol=1e-9 * (1 + np.abs(reference[name]).max(initial=0)))


def test_cli_grad_dumps_gradient_kernels(capsys):
    from gnnc.cli import main

    assert main(["compile", "--grad", str(EXAMPLES / "gcn.gnn"), "--emit", "graph"]) == 0
    dump = capsys.readouterr().out
    assert "@gcn__grad_x_src" in dump and "@gcn__grad_w_edge" in dump
    assert 'graph.aggregate "sum"' in dump
    assert main(["compile", "--grad", str(EXAMPLES / "sage_max.gnn"), "--emit", "graph"]) == 0
    dump = capsys.readouterr().out
    # the argmax stage on the forward graph, then the selection on the reversed one
    assert 'graph.aggregate "argmax"' in dump and "graph.edge_id" in dump and '"step"' in dump
    assert main(["compile", "--grad", str(EXAMPLES / "mlp_aggr.gnn"), "--emit", "graph"]) == 1
    assert "'@' is not differentiated yet" in capsys.readouterr().err
