"""Generated gradient kernels against central finite differences of the numpy reference (float64)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.api import compile_grad
from gnnc.graph.coo import CooGraph
from gnnc.lang import parse_and_check
from gnnc.lang.parser import CALL_FUNCTIONS
from tests.helpers import numeric_grad, slow_except

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


MATMUL = """
kernel mm(x: f32[V, K], W: f32[K, N]) -> f32[V, N] {
    out[v] = sum(tanh((x[u] * 0.5 + x[v]) @ W) * deg_out(u)) + sigmoid(x[v] @ W)
}
kernel mm_edge(x: f32[V, K], W: f32[K, N]) -> f32[E, N] {
    out[e] = (x[u] - x[v] * x[v]) @ W
}
"""

CASES = [
    (MATMUL, "mm"),
    (MATMUL, "mm_edge"),
    (EXAMPLES / "gcn.gnn", "gcn"),
    (EXAMPLES / "gcn_norm.gnn", "gcn_norm"),
    (EXAMPLES / "sage_mean.gnn", "sage_mean"),
    (EXAMPLES / "gin.gnn", "gin"),
    (EXAMPLES / "attention.gnn", "attention"),
    (SMOOTH, "smooth"),
    (SMOOTH, "edgewise"),
]


@pytest.mark.parametrize(
    "source,name",
    slow_except(CASES, (EXAMPLES / "gcn.gnn", "gcn"), (SMOOTH, "edgewise")),
    ids=[c[1] for c in CASES],
)
def test_gradients_match_finite_differences(source, name):
    text = Path(source).read_text() if isinstance(source, Path) else source
    text = _f64(text)
    kernel = parse_and_check(text).kernel(name)
    rng = np.random.default_rng(0)
    args = _inputs(kernel, rng, {"F": 2, "H": 2, "D": 3, "K": 3, "N": 2})
    forward = getattr(gnnc.compile(text, target="reference"), name)
    result = forward(GRAPH, **args)
    gout = rng.normal(size=result.shape)
    compiled = compile_grad(text, name)(GRAPH, gout=gout, **args)
    reference = compile_grad(text, name, target="reference")(GRAPH, gout=gout, **args)
    assert set(compiled) == set(reference)
    differentiable = [p.name for p in kernel.params]
    assert set(compiled) == set(differentiable)
    for p in differentiable:
        want = numeric_grad(lambda **a: forward(GRAPH, **a), args, p, gout)
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


def test_names_of_generated_tensors_are_kept_free():
    with pytest.raises(gnnc.CompileError, match="names ending in '__' are kept for generated gradient kernels"):
        compile_grad("kernel k(st0__: f32[V, F]) -> f32[V, F] {\n    out[v] = sum(st0__[u])\n}\n", "k")


@pytest.mark.parametrize("func", sorted(CALL_FUNCTIONS))
def test_every_builtin_is_differentiated(func):
    """No call of the language is refused: each, applied to x, has a gradient w.r.t. x (checked numerically)."""
    calls = {
        "leaky_relu": "leaky_relu(x[u], 0.2)",
        "dot": "dot(x[u], x[v])",
        "outer": "outer(x[u], x[v] * x[v])",
        "transpose": "transpose(outer(x[u], x[v] * x[v]))",
        "softmax": "softmax(x[u]) * x[v]",
        "step": "step(x[u] - 1.0) * x[v]",  # piecewise constant: the gradient is through x[v]
        "detach": "detach(x[u]) * x[v]",  # a constant to the gradient: through x[v] only
    }
    rank = {"dot": "", "outer": ", K, K", "transpose": ", K, K"}.get(func, ", K")
    source = f"kernel k(x: f64[V, K]) -> f64[E{rank}] {{\n    out[e] = {calls.get(func, func + '(x[u])')}\n}}\n"
    rng = np.random.default_rng(5)
    args = {"x": rng.uniform(0.2, 1.5, size=(GRAPH.num_vertices, 2))}
    forward = gnnc.compile(source, target="reference").k
    gout = rng.normal(size=forward(GRAPH, **args).shape)
    got = compile_grad(source, "k", target="reference")(GRAPH, gout=gout, **args)["x"]
    if func == "detach":
        # the numeric gradient of the same kernel with the detached x an input of its own
        twin = f"kernel k(x: f64[V, K], c: f64[V, K]) -> f64[E{rank}] {{\n    out[e] = c[u] * x[v]\n}}\n"
        forward = gnnc.compile(twin, target="reference").k
        args = {**args, "c": args["x"].copy()}
    np.testing.assert_allclose(got, _numeric(forward, GRAPH, args, {"out": gout}, "x"), rtol=1e-6, atol=1e-7)


OUTER = """
kernel outer_k(x: f64[V, K], y: f64[V, N], m: f64[N, K]) -> f64[V, K, N] {
    out[v] = sum(outer(tanh(x[u] * x[v]), y[v] * y[u]) * transpose(m)) + outer(x[v], sigmoid(y[v]))
}
kernel transposed(a: f64[V, H, K, N], b: f64[V, H, N], w: f64[E]) -> f64[V, H, N] {
    s[e]   = transpose(a[u] * w[e] + outer(dot(a[v], a[u]), b[u]))
    out[v] = sum(dot(s[e], s[e]) * b[v]) + dot(transpose(a[v]), transpose(a[v]))
}
kernel softmax_t(m: f64[V, H, K, N], s: f64[V, H]) -> f64[V, H, N, K] {
    out[v] = sum(softmax(s[u] + s[v]) * transpose(m[u]))
}
kernel at_matrix(m: f64[V, N, K], W: f64[N, K]) -> f64[V, K, K] {
    out[v] = sum(tanh(transpose(m[u] * m[v]) @ W)) + transpose(m[v]) @ W
}
"""


@pytest.mark.parametrize(
    "name,dims",
    slow_except(
        [
            ("outer_k", {"K": 3, "N": 2}),
            ("outer_k", {"K": 1, "N": 4}),
            ("outer_k", {"K": 3, "N": 1}),
            ("transposed", {"H": 2, "K": 3, "N": 2}),
            ("transposed", {"H": 1, "K": 1, "N": 3}),
            ("at_matrix", {"K": 2, "N": 3}),
            ("at_matrix", {"K": 1, "N": 1}),
            ("softmax_t", {"H": 2, "K": 3, "N": 2}),
        ],
        ("outer_k", {"K": 1, "N": 4}),
    ),
)
def test_outer_and_transpose_gradients_match_finite_differences(name, dims):
    """outer w.r.t. both operands (b's is a dot of the transposed adjoint) and transpose itself."""
    kernel = parse_and_check(OUTER).kernel(name)
    rng = np.random.default_rng(11)
    args = _inputs(kernel, rng, dims)
    forward = getattr(gnnc.compile(OUTER, target="reference"), name)
    gout = rng.normal(size=forward(GRAPH, **args).shape)
    compiled = compile_grad(OUTER, name)(GRAPH, gout=gout, **args)
    reference = compile_grad(OUTER, name, target="reference")(GRAPH, gout=gout, **args)
    for p in args:
        np.testing.assert_allclose(reference[p], _numeric(forward, GRAPH, args, {"out": gout}, p), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(compiled[p], reference[p], rtol=1e-10, atol=1e-12)


# ------------------------------------------------- hypothesis: random kernels and graphs

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.strategies import graphs  # noqa: E402

_ATOMS = ["x[u]", "x[v]", "w[e]", "y[u]", "y[v]", "deg_in(v)", "2", "c"]
_UNARY = [
    "exp(({0}) * 0.3)",
    "sigmoid({0})",
    "tanh({0})",
    "sqrt(1 + ({0}) * ({0}))",
    "log(2 + ({0}) * ({0}))",
    "rsqrt(1 + ({0}) * ({0}))",
    "-({0})",
]
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
    """A smooth kernel: an edge result, an aggregation with a destination term, softmax weights, two phases,
    or a dot over a transposed outer."""
    body = draw(_edge_exprs())
    if "x[" not in body:
        body = f"({body}) * x[u]"
    form = draw(st.sampled_from(["edge", "agg", "softmax", "two_phase", "outer"]))
    if form == "outer":
        # d of outer's second operand sums its adjoint's second-to-last axis; transpose's is transposed
        other = f"({draw(_edge_exprs(2))}) * x[v]"
        stmt = f"out[v] = sum(dot(transpose(outer({body}, {other})), outer(y[v] * x[v], tanh({other})))) + x[v]"
        result = "f64[V, F]"
    elif form == "edge":
        result, stmt = "f64[E, F]", f"out[e] = {body}"
    elif form == "agg":
        agg = draw(st.sampled_from(["sum", "mean"]))
        stmt = f"out[v] = {agg}({body}) + x[v] * y[v]"
        result = "f64[V, F]"
    elif form == "softmax":
        score = draw(_edge_exprs(2)).replace("x[u]", "y[u]").replace("x[v]", "y[v]")
        stmt = f"a[e] = softmax({score})\n    out[v] = sum(a[e] * {body}) * y[v] + mean(a[e] * x[u])"
        result = "f64[V, F]"
    else:
        stmt = f"h[v] = mean({body}) + x[v]\n    out[v] = sum(tanh(h[u]) * w[e]) + h[v] * sum(h[u])"
        result = "f64[V, F]"
    return f"kernel k(x: f64[V, F], y: f64[V], w: f64[E], c: f64) -> {result} {{\n    {stmt}\n}}\n"


# each example compiles its own gradient kernels: fewer examples than the profile's default
@settings(max_examples=min(8, settings().max_examples))
@given(
    graph=graphs(max_vertices=12, max_edges=40),
    source=_kernels(),
    f=st.sampled_from([1, 3]),
    seed=st.integers(0, 2**31 - 1),
)
@pytest.mark.slow
def test_random_kernels_directional_derivatives(graph, source, f, seed):
    """<grad, d> equals the central difference of <gout, out> along a random direction d."""
    rng = np.random.default_rng(seed)
    n, m = graph.num_vertices, graph.num_edges
    args = {
        "x": rng.uniform(-1, 1, (n, f)),
        "y": rng.uniform(-1, 1, n),
        "w": rng.uniform(-1, 1, m),
        "c": np.array(rng.uniform(-1, 1)),
    }
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
        np.testing.assert_allclose(
            compiled[name], reference[name], rtol=1e-9, atol=1e-9 * (1 + np.abs(reference[name]).max(initial=0))
        )


def test_cli_grad_dumps_gradient_kernels(capsys):
    from gnnc.tools.cli import main

    assert main(["compile", "--grad", str(EXAMPLES / "gcn.gnn"), "--emit", "graph"]) == 0
    dump = capsys.readouterr().out
    assert "@gcn__grad_x_src" in dump and "@gcn__grad_w_edge" in dump
    assert "graph.aggregate sum" in dump
    assert main(["compile", "--grad", str(EXAMPLES / "sage_max.gnn"), "--emit", "graph"]) == 0
    dump = capsys.readouterr().out
    # the argmax stage on the forward graph, then the selection on the reversed one
    assert "graph.aggregate argmax" in dump and "graph.edge_id" in dump and "graph.unary step" in dump
    assert main(["compile", "--grad", str(EXAMPLES / "mlp_aggr.gnn"), "--emit", "graph"]) == 0
    dump = capsys.readouterr().out
    # W's gradient is the sum per vertex of its adjoints (a dense product then): no outer per edge
    assert "@mlp_aggr__grad_W_src" in dump and "@mlp_aggr__grad_W_dst" in dump
    assert "graph.outer" not in dump and "graph.matvec" in dump


# ------------------------------------- non-smooth operations: hand-written subgradients
#
# Conventions (as torch where it has one): relu'(0) = 0, leaky_relu'(0) = slope,
# abs'(0) = 0, max(a, b) and min(a, b) give a tie to a; a max / min aggregation
# gives each element's gradient to the lowest-id in-edge attaining it, or to
# the first NaN. Inputs on a grid of halves put many values exactly on the kinks.

ELEMENTWISE = """
kernel ew(x: f64[V, F], z: f64[V, F]) -> f64[V, F] {
    out[v] = sum(relu(x[u] - z[v]) + 2 * leaky_relu(x[u] - z[v], 0.1) + 3 * abs(x[u] - z[v])
                 + 5 * max(x[u], z[v]) + 7 * min(x[u], z[v])) + relu(z[v])
}
"""


def _grid(rng, shape):
    return rng.integers(-2, 3, shape) / 2.0


@pytest.mark.parametrize("target", ["cpu", "reference"])
def test_elementwise_subgradients_at_the_kinks(target):
    rng = np.random.default_rng(5)
    x, z = _grid(rng, (5, 3)), _grid(rng, (5, 3))
    gout = rng.normal(size=(5, 3))
    got = compile_grad(ELEMENTWISE, "ew", target=target)(GRAPH, x, z, gout=gout)
    xs, zd, g = x[GRAPH.src], z[GRAPH.dst], gout[GRAPH.dst]
    a = xs - zd
    d_a = (a > 0) + 2 * np.where(a > 0, 1.0, 0.1) + 3 * np.sign(a)
    dx_edge = g * (d_a + 5 * (xs >= zd) + 7 * (xs <= zd))
    dz_edge = g * (-d_a + 5 * (zd > xs) + 7 * (zd < xs))
    want_x, want_z = np.zeros_like(x), gout * (z > 0)
    np.add.at(want_x, GRAPH.src, dx_edge)
    np.add.at(want_z, GRAPH.dst, dz_edge)
    np.testing.assert_allclose(got["x"], want_x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["z"], want_z, rtol=1e-12, atol=1e-12)


def test_a_nan_input_gives_a_nan_gradient_through_relu():
    x = np.array([[np.nan], [1.0], [-1.0], [0.0], [2.0]])
    src = "kernel r(x: f64[V, F]) -> f64[V, F] {\n    out[v] = relu(x[v])\n}\n"
    got = compile_grad(src, "r")(GRAPH, x, gout=np.ones((5, 1)))["x"]
    np.testing.assert_array_equal(got[:, 0], [np.nan, 1.0, 0.0, 0.0, 1.0])


MAXES = """
kernel sage_max(x: f64[V, F]) -> f64[V, F] {
    out[v] = max(x[u])
}
kernel weighted_min(x: f64[V, F], w: f64[E]) -> f64[V, F] {
    out[v] = min(x[u] * w[e]) + x[v]
}
"""


def _by_hand_selected(graph, values, gout, kind):
    """The adjoint of each edge value of a max / min aggregation: gout of its destination where it was chosen."""
    adj = np.zeros_like(values)
    for v in range(graph.num_vertices):
        edges = [e for e in range(graph.num_edges) if graph.dst[e] == v]  # increasing ids
        for idx in np.ndindex(values.shape[1:]):
            column = [values[(e,) + idx] for e in edges]
            if not column:
                continue
            nans = [i for i, c in enumerate(column) if np.isnan(c)]
            best = max(column) if kind == "max" else min(column)
            chosen = nans[0] if nans else column.index(best)
            adj[(edges[chosen],) + idx] = gout[(v,) + idx]
    return adj


def _check_maxes(graph, x, w, gout, dtype=np.float64):
    source = MAXES if dtype == np.float64 else MAXES.replace("f64", "f32")
    a_max = _by_hand_selected(graph, x[graph.src].astype(np.float64), gout.astype(np.float64), "max")
    want_max = np.zeros(x.shape)
    np.add.at(want_max, graph.src, a_max)
    values = x[graph.src].astype(np.float64) * w[:, None]
    a_min = _by_hand_selected(graph, values, gout.astype(np.float64), "min")
    want_x = gout.astype(np.float64).copy()
    np.add.at(want_x, graph.src, a_min * w[:, None])
    want_w = np.sum(a_min * x[graph.src], axis=1)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for target in ("cpu", "reference"):
        got = compile_grad(source, "sage_max", target=target)(graph, x, gout=gout)
        np.testing.assert_allclose(got["x"], want_max, rtol=tol, atol=tol)
        got = compile_grad(source, "weighted_min", target=target)(graph, x, w, gout=gout)
        np.testing.assert_allclose(got["x"], want_x, rtol=tol, atol=tol)
        np.testing.assert_allclose(got["w"], want_w, rtol=tol, atol=tol)
        assert target == "reference" or got["x"].dtype == dtype


def test_max_min_aggregation_gradients_go_to_the_first_attaining_edge():
    rng = np.random.default_rng(7)
    x = rng.integers(-1, 2, (5, 3)).astype(np.float64)  # ties; 0->1 twice ties by construction
    w = rng.integers(-1, 2, 8).astype(np.float64)
    _check_maxes(GRAPH, x, w, rng.normal(size=(5, 3)))


def test_max_aggregation_gradient_goes_to_the_first_nan():
    x = np.array([[1.0], [np.nan], [np.nan], [0.0], [3.0]])
    got = compile_grad(MAXES, "sage_max")(GRAPH, x, gout=np.arange(1.0, 6.0)[:, None])["x"]
    # by hand, destination by destination (in-edges by id, source in brackets):
    # 0 <- 2 (2: NaN), 7 (3): edge 2, from vertex 2, carries gout[0] = 1
    # 1 <- 0 (0), 4 (3), 5 (0), 6 (2: NaN): edge 6, from vertex 2, carries gout[1] = 2
    # 2 <- 1 (1: NaN), 3 (2: NaN): the first NaN, edge 1 from vertex 1, carries gout[2] = 3
    want = np.array([[0.0], [3.0], [1.0 + 2.0], [0.0], [0.0]])
    np.testing.assert_array_equal(got, want)


@settings(max_examples=min(8, settings().max_examples))
@given(
    graph=graphs(max_vertices=10, max_edges=30),
    f=st.sampled_from([1, 3]),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([np.float32, np.float64]),
)
@pytest.mark.slow
def test_max_min_gradients_on_random_graphs(graph, f, seed, dtype):
    rng = np.random.default_rng(seed)
    x = rng.integers(-1, 2, (graph.num_vertices, f)).astype(dtype)
    w = rng.integers(-1, 2, graph.num_edges).astype(dtype)
    gout = rng.normal(size=(graph.num_vertices, f)).astype(dtype)
    _check_maxes(graph, x, w, gout, dtype)


# ------------------------------------------------- softmax, GAT, staged kernels

GAT = """
kernel gat1(h: f64[V, H, F], el: f64[V, H], er: f64[V, H]) -> f64[V, H, F] {
    s[e]   = leaky_relu(el[u] + er[v], 0.2)
    out[v] = sum(softmax(s[e]) * h[u])
}
kernel gat2(h: f64[V, H, F], el: f64[V, H], er: f64[V, H]) -> (out: f64[V, H, F], alpha: f64[E, H]) {
    s[e]     = leaky_relu(el[u] + er[v], 0.2)
    alpha[e] = softmax(s[e])
    out[v]   = sum(alpha[e] * h[u])
}
kernel two_hop(x: f64[V, F]) -> f64[V, F] {
    h[v]   = mean(x[u])
    out[v] = sum(h[u] * x[v]) + h[v] * h[v]
}
kernel vertex_results(x: f64[V, F], w: f64[E]) -> (h: f64[V, F], out: f64[V, F]) {
    h[v]   = max(x[u] * w[e]) + x[v]
    out[v] = sum(h[u] * x[v]) - h[v] * min(h[u])
}
kernel quotient(x: f64[V, F], w: f64[E]) -> f64[V, F] {
    out[v] = sum(w[e] * x[u]) / (1 + sum(w[e] * w[e])) + max(tanh(x[u]) * w[e])
}
"""


def _numeric(forward, graph, args, gouts, name, h=1e-6):
    grad = np.zeros_like(args[name])
    for i in range(grad.size):
        plus = {k: v.copy() for k, v in args.items()}
        minus = {k: v.copy() for k, v in args.items()}
        plus[name].reshape(-1)[i] += h
        minus[name].reshape(-1)[i] -= h
        a, b = forward(graph, **plus), forward(graph, **minus)
        a, b = (a, b) if isinstance(a, dict) else ({"out": a}, {"out": b})
        grad.reshape(-1)[i] = sum(np.sum((a[k] - b[k]) * gouts[k]) for k in a) / (2 * h)
    return grad


@pytest.mark.parametrize("name", slow_except(["gat1", "gat2", "two_hop", "vertex_results", "quotient"], "quotient"))
def test_staged_gradients_match_finite_differences(name):
    """Smooth away from ties and kinks (continuous random inputs): central differences apply."""
    kernel = parse_and_check(GAT).kernel(name)
    rng = np.random.default_rng(11)
    args = _inputs(kernel, rng, {"F": 3, "H": 2})
    args = {k: v - 0.85 for k, v in args.items()}  # both signs: leaky_relu's two slopes
    forward = getattr(gnnc.compile(GAT, target="reference"), name)
    result = forward(GRAPH, **args)
    result = result if isinstance(result, dict) else {"out": result}
    gouts = {k: rng.normal(size=v.shape) for k, v in result.items()}
    gout = gouts if len(gouts) > 1 else gouts["out"]
    compiled = compile_grad(GAT, name)(GRAPH, gout=gout, **args)
    reference = compile_grad(GAT, name, target="reference")(GRAPH, gout=gout, **args)
    for p in args:
        np.testing.assert_allclose(reference[p], _numeric(forward, GRAPH, args, gouts, p), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(compiled[p], reference[p], rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_gat_gradient_by_hand():
    """d s = alpha * (g - sum over the destination's in-edges of alpha * g), g = <gout[v], h[u]> per head."""
    kernel = parse_and_check(GAT).kernel("gat1")
    rng = np.random.default_rng(2)
    args = {k: v - 0.85 for k, v in _inputs(kernel, rng, {"F": 3, "H": 2}).items()}
    h, el, er = args["h"], args["el"], args["er"]
    gout = rng.normal(size=h.shape)
    src, dst, V = GRAPH.src, GRAPH.dst, GRAPH.num_vertices
    pre = el[src] + er[dst]
    s = np.where(pre > 0, pre, 0.2 * pre)
    peak = np.full((V, 2), -np.inf)
    np.maximum.at(peak, dst, s)
    ex = np.exp(s - peak[dst])
    z = np.zeros((V, 2))
    np.add.at(z, dst, ex)
    alpha = ex / z[dst]
    g = np.sum(gout[dst] * h[src], axis=-1)
    c = np.zeros((V, 2))
    np.add.at(c, dst, alpha * g)
    ds = alpha * (g - c[dst]) * np.where(pre > 0, 1.0, 0.2)
    want = {"h": np.zeros_like(h), "el": np.zeros_like(el), "er": np.zeros_like(er)}
    np.add.at(want["h"], src, alpha[..., None] * gout[dst])
    np.add.at(want["el"], src, ds)
    np.add.at(want["er"], dst, ds)
    got = compile_grad(GAT, "gat1")(GRAPH, h, el, er, gout=gout)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12)


def test_gat_stages_are_per_edge_and_head_never_per_feature():
    from gnnc.lang.autodiff import gradient_program

    grad = gradient_program(parse_and_check(GAT).kernel("gat1"), walks=False)  # the kernels, not shared walks
    stages = [k for k in grad.kernels if k.wrt.endswith("__")]
    assert stages and all(not k.reverse for k in stages)
    assert "-> f64[E, H] {" in grad.source and "-> f64[E, H, F]" not in grad.source
    # the reversed-graph kernels read the softmax weights saved on the forward graph
    assert all("softmax" not in piece for piece in grad.source.split("kernel ")[1:] if "__grad_" in piece)
    # the score gradient is one [E, H] stage: the el and er kernels read it and take no dot over F
    pieces = {piece.split("(", 1)[0]: piece for piece in grad.source.split("kernel ")[1:]}
    assert "dot(" not in pieces["gat1__grad_el_src"] and "dot(" not in pieces["gat1__grad_er_dst"]
    assert sum("dot(" in piece for piece in pieces.values()) == 1


@settings(max_examples=min(6, settings().max_examples))
@given(
    graph=graphs(max_vertices=10, max_edges=30),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([np.float32, np.float64]),
)
@pytest.mark.slow
def test_gat_gradients_on_random_graphs(graph, seed, dtype):
    """Compiled against the reference's gradients (empty graphs, isolated vertices, duplicates, H = F = 1 too)."""
    rng = np.random.default_rng(seed)
    n, H, F = graph.num_vertices, int(rng.integers(1, 3)), int(rng.integers(1, 4))
    args = {"h": rng.normal(size=(n, H, F)), "el": rng.normal(size=(n, H)), "er": rng.normal(size=(n, H))}
    source = GAT if dtype == np.float64 else GAT.replace("f64", "f32")
    args = {k: v.astype(dtype) for k, v in args.items()}
    gouts = {
        "out": rng.normal(size=(n, H, F)).astype(dtype),
        "alpha": rng.normal(size=(graph.num_edges, H)).astype(dtype),
    }
    got = compile_grad(source, "gat2")(graph, gout=gouts, **args)
    want = compile_grad(source, "gat2", target="reference")(graph, gout=gouts, **args)
    from tests.helpers import assert_matches

    for k in args:
        assert_matches(got[k], want[k], graph, dtype)


def test_several_results_need_a_gout_dict():
    grad = compile_grad(GAT, "gat2", target="reference")
    h, el = np.ones((5, 1, 1)), np.ones((5, 1))
    with pytest.raises(gnnc.ArgumentError, match="pass gout as a dict"):
        grad(GRAPH, h, el, el, gout=np.ones((5, 1, 1)))
    with pytest.raises(gnnc.ArgumentError, match="no gout for result alpha"):
        grad(GRAPH, h, el, el, gout={"out": np.ones((5, 1, 1))})


_NS_ATOMS = ["x[u]", "x[v]", "w[e]", "y[u]", "y[v]", "deg_in(v)", "0.5", "c"]
_NS_UNARY = ["relu({0})", "abs({0})", "leaky_relu({0}, 0.1)", "tanh({0})", "-({0})", "sigmoid({0})"]
_NS_BINARY = ["({0} + {1})", "({0} - {1})", "({0} * {1})", "max({0}, {1})", "min({0}, {1})"]


@st.composite
def _ns_exprs(draw, depth=3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(_NS_ATOMS))
    if draw(st.booleans()):
        return draw(st.sampled_from(_NS_UNARY)).format(draw(_ns_exprs(depth - 1)))
    return draw(st.sampled_from(_NS_BINARY)).format(draw(_ns_exprs(depth - 1)), draw(_ns_exprs(depth - 1)))


@st.composite
def _ns_kernels(draw):
    """Non-smooth and staged: max / min aggregations, softmax weights, a vertex value read at u, edge results."""
    body = draw(_ns_exprs())
    if "x[" not in body:
        body = f"({body}) * x[u]"
    score = draw(_ns_exprs(2)).replace("x[u]", "y[u]").replace("x[v]", "y[v]")
    form = draw(st.sampled_from(["agg", "softmax", "two_phase", "edge"]))
    if form == "agg":
        agg = draw(st.sampled_from(["max", "min", "sum", "mean"]))
        stmts, result = [f"out[v] = {agg}({body}) + relu(x[v]) * y[v]"], "f64[V, F]"
    elif form == "softmax":
        stmts = [
            f"a[e] = softmax({score})",
            f"a_max[v] = max(a[e] * {body})",
            f"out[v] = sum(a[e] * {body}) + a_max[v]",
        ]
        result = "f64[V, F]"
    elif form == "two_phase":
        stmts = [f"h[v] = max({body})", "out[v] = sum(abs(h[u] - x[v]) * w[e]) + min(h[v], x[v])"]
        result = "f64[V, F]"
    else:
        stmts, result = [f"out[e] = {body} * max(y[u], y[v])"], "f64[E, F]"
    text = "\n    ".join(stmts)
    return f"kernel k(x: f64[V, F], y: f64[V], w: f64[E], c: f64) -> {result} {{\n    {text}\n}}\n"


@settings(max_examples=min(8, settings().max_examples))
@given(
    graph=graphs(max_vertices=12, max_edges=40),
    source=_ns_kernels(),
    f=st.sampled_from([1, 3]),
    seed=st.integers(0, 2**31 - 1),
)
@pytest.mark.slow
def test_random_non_smooth_kernels_compiled_gradients_match_the_reference(graph, source, f, seed):
    rng = np.random.default_rng(seed)
    n, m = graph.num_vertices, graph.num_edges
    args = {
        "x": rng.uniform(-1, 1, (n, f)),
        "y": rng.uniform(-1, 1, n),
        "w": rng.uniform(-1, 1, m),
        "c": np.array(rng.uniform(-1, 1)),
    }
    forward = gnnc.compile(source, target="reference").k
    gout = rng.normal(size=forward(graph, **args).shape)
    compiled = compile_grad(source, "k")(graph, gout=gout, **args)
    reference = compile_grad(source, "k", target="reference")(graph, gout=gout, **args)
    assert set(compiled) == set(reference) == set(args)
    for name in args:
        scale = 1 + np.abs(reference[name]).max(initial=0)
        np.testing.assert_allclose(compiled[name], reference[name], rtol=1e-9, atol=1e-9 * scale)


@pytest.mark.parametrize("name", slow_except(["sage_max", "gat_conv", "mlp_aggr"], "sage_max"))
def test_gradient_kernels_under_the_cuda_thread_mapping_emulation(name):
    """The generated kernels (argmax stages, softmax stages, W^T) under the default cuda mapping, emulated on the CPU."""
    path = EXAMPLES / f"{name}.gnn"
    kernel = parse_and_check(path.read_text()).kernel(name)
    rng = np.random.default_rng(4)
    args = {
        k: (v - 0.85).astype(np.float32) for k, v in _inputs(kernel, rng, {"F": 3, "H": 2, "D1": 3, "D2": 4}).items()
    }
    if name == "sage_max":
        args["x"] = rng.integers(-1, 2, args["x"].shape).astype(np.float32)  # ties
    out = getattr(gnnc.compile(path, target="reference"), name)(GRAPH, **args)
    gout = rng.normal(size=out.shape).astype(np.float32)
    want = compile_grad(path, name, target="reference")(GRAPH, gout=gout, **args)
    got = compile_grad(path, name, target="cuda-emulation")(GRAPH, gout=gout, **args)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


def test_float32_edge_ids_are_exact_only_below_2_to_the_24(monkeypatch):
    from gnnc.runtime import gradient

    monkeypatch.setattr(gradient, "_F32_EXACT", 7)  # GRAPH has 8 edges
    grad = compile_grad(MAXES, "sage_max")
    x64 = np.ones((5, 2))
    grad(GRAPH, x64, gout=x64)  # float64: exact
    f32 = compile_grad(MAXES.replace("f64", "f32"), "sage_max")
    with pytest.raises(gnnc.ArgumentError, match="exact only below 2\\^24 edges"):
        f32(GRAPH, x64.astype(np.float32), gout=x64.astype(np.float32))


@pytest.mark.slow
def test_heads_at_a_matrix_and_piecewise_constant_builtins():
    """`[H, K] @ W`: the runtime sums the per-head partials; argmax / step give no gradient; outer of x and x."""
    source = """
kernel heads(y: f64[V, H, K], W: f64[K, N], x: f64[V, H]) -> f64[V, H, N] {
    out[v] = sum(tanh(y[u] @ W)) + (y[v] @ W) * (1 + argmax(x[u])) + step(y[v] @ W)
}
kernel outer_k(x: f64[V, K], y: f64[V, K]) -> f64[V, K, K] {
    out[v] = sum(outer(tanh(x[u] * x[v]), y[v]))
}
"""
    kernel = parse_and_check(source).kernel("heads")
    rng = np.random.default_rng(9)
    args = _inputs(kernel, rng, {"H": 2, "K": 3, "N": 2})
    forward = gnnc.compile(source, target="reference").heads
    gout = rng.normal(size=forward(GRAPH, **args).shape)
    compiled = compile_grad(source, "heads")(GRAPH, gout=gout, **args)
    reference = compile_grad(source, "heads", target="reference")(GRAPH, gout=gout, **args)
    gouts = {"out": gout}
    for p in ("y", "W"):
        np.testing.assert_allclose(reference[p], _numeric(forward, GRAPH, args, gouts, p), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(compiled[p], reference[p], rtol=1e-10, atol=1e-12)
    assert not np.any(compiled["x"])  # only through argmax
    kernel = parse_and_check(source).kernel("outer_k")
    args = _inputs(kernel, rng, {"K": 3})
    forward = gnnc.compile(source, target="reference").outer_k
    gout = rng.normal(size=forward(GRAPH, **args).shape)
    got = compile_grad(source, "outer_k")(GRAPH, gout=gout, **args)
    for p in ("x", "y"):  # y, outer's second operand, sums adj over its second-to-last axis
        np.testing.assert_allclose(got[p], _numeric(forward, GRAPH, args, {"out": gout}, p), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", slow_except(["gat_conv", "sage_max", "mlp_aggr"], "sage_max"))
def test_forward_keeps_what_the_gradient_reuses(name):
    """`forward` gives the kernel's results and the gout-free intermediates; with them the gradient is the same."""
    path = EXAMPLES / f"{name}.gnn"
    kernel = parse_and_check(path.read_text()).kernel(name)
    rng = np.random.default_rng(6)
    args = {
        k: (v - 0.85).astype(np.float32) for k, v in _inputs(kernel, rng, {"F": 3, "H": 2, "D1": 3, "D2": 4}).items()
    }
    grad = compile_grad(path, name)
    out, saved = grad.forward(GRAPH, **args)
    assert list(saved) == grad.saved and grad.saved
    np.testing.assert_allclose(out, getattr(gnnc.compile(path), name)(GRAPH, **args), rtol=1e-6, atol=1e-6)
    gout = rng.normal(size=out.shape).astype(np.float32)
    with_saved = grad(GRAPH, gout=gout, saved=saved, **args)
    without = grad(GRAPH, gout=gout, **args)
    for k in without:
        np.testing.assert_allclose(with_saved[k], without[k], rtol=1e-6, atol=1e-6)
    with pytest.raises(gnnc.ArgumentError, match="which forward\\(\\) does not give"):
        grad(GRAPH, gout=gout, saved={"st9__": out}, **args)


GAT_PROJECTED = """
kernel gat_projected(h: f32[V, H, F], a_src: f32[H, F], a_dst: f32[H, F]) -> f32[V, H, F] {
    el[v] = dot(h[v], a_src)
    er[v] = dot(h[v], a_dst)
    s[e] = leaky_relu(el[u] + er[v], 0.2)
    out[v] = sum(softmax(s[e]) * h[u])
}
"""


@pytest.mark.slow
def test_forward_variant_reads_the_kernels_own_vertex_values():
    """GAT with its attention projection in the kernel: the forward variant saves el and er as
    themselves (no second evaluation), and its saved values give the gradient unchanged."""
    from gnnc.lang.autodiff import gradient_program

    kernel = parse_and_check(GAT_PROJECTED).kernel("gat_projected")
    forward_source = gradient_program(kernel).forward
    assert "st0__[v] = el[v]" in forward_source and "st1__[v] = er[v]" in forward_source
    assert forward_source.count("dot(") == 2
    rng = np.random.default_rng(7)
    args = {k: v.astype(np.float32) for k, v in _inputs(kernel, rng, {"F": 3, "H": 2}).items()}
    grad = compile_grad(GAT_PROJECTED, "gat_projected")
    out, saved = grad.forward(GRAPH, **args)
    gout = rng.normal(size=out.shape).astype(np.float32)
    with_saved = grad(GRAPH, gout=gout, saved=saved, **args)
    want = compile_grad(GAT_PROJECTED.replace("f32", "f64"), "gat_projected", target="reference")(
        GRAPH, gout=gout.astype(np.float64), **{k: v.astype(np.float64) for k, v in args.items()}
    )
    for k in want:
        np.testing.assert_allclose(with_saved[k], want[k], rtol=1e-4, atol=1e-5)
    forward = gnnc.compile(GAT_PROJECTED.replace("f32", "f64"), target="reference").gat_projected
    args64 = {k: v.astype(np.float64) for k, v in args.items()}
    for p in ("h", "a_src", "a_dst"):
        np.testing.assert_allclose(
            want[p], _numeric(forward, GRAPH, args64, {"out": gout.astype(np.float64)}, p), rtol=1e-5, atol=1e-6
        )


#: An attention written out (GATConv's form: a max shift, exp, a normalising sum), not as softmax.
EXPLICIT_ATTENTION = """
kernel att(h: f64[V, H, F], a: f64[V, H], b: f64[V, H]) -> f64[V, H, F] {
    s[e] = leaky_relu(a[u] + b[v], 0.2)
    m[v] = detach(max(s[e]))
    p[e] = exp(s[e] - m[v])
    z[v] = sum(p[e])
    r[v] = 1.0 / (z[v] + (1 - step(z[v])))
    out[v] = sum(p[e] * r[v] * h[u])
}
"""


def test_a_per_edge_dot_several_kernels_read_is_staged_once():
    """The scores' adjoint `dot(gout__[v], h[u])` is read by a vertex stage and the scores'
    own adjoint (b's and, on the reversed graph, a's, `share_edge_adjoints`): one [E, H] stage
    computes it, the others read it by edge, and the gradients stay the reference's on
    square and bipartite graphs."""
    from gnnc.lang.autodiff import gradient_program

    grad = gradient_program(parse_and_check(EXPLICIT_ATTENTION).kernel("att"), walks=False)
    pieces = {p.split("(", 1)[0]: p for p in grad.source.split("kernel ")[1:]}
    dots = [n for n, p in pieces.items() if "dot(gout__[v], h[u])" in p or "dot(gout__[u], h[v])" in p]
    assert len(dots) == 1 and "-> f64[E, H] {" in pieces[dots[0]]
    stage = next(k.wrt for k in grad.kernels if k.name == dots[0])
    readers = [k for k in grad.kernels if stage in k.inputs]
    assert len(readers) >= 2
    assert all(f"{stage}[e]" in pieces[k.name] for k in readers)
    order = [k.name for k in grad.kernels]
    assert all(order.index(dots[0]) < order.index(k.name) for k in readers)
    _check_attention_gradients(EXPLICIT_ATTENTION)


def _check_attention_gradients(source: str) -> None:
    rng = np.random.default_rng(5)
    for graph in (
        gnnc.Graph.from_coo(rng.integers(0, 12, 60), rng.integers(0, 12, 60), num_vertices=12),
        gnnc.Graph.from_coo(rng.integers(0, 12, 50), rng.integers(0, 5, 50), shape=(12, 5)),
    ):
        args = {"h": rng.normal(size=(12, 2, 3)), "a": rng.normal(size=(12, 2)), "b": rng.normal(size=(12, 2))}
        gout = rng.normal(size=(graph.num_dst, 2, 3))
        got = compile_grad(source, "att")(graph, gout=gout, **args)
        want = compile_grad(source, "att", target="reference")(graph, gout=gout, **args)
        for k in args:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12)


def test_an_edge_adjoint_summed_at_both_ends_is_staged_once():
    """The scores' adjoint flows to a[u] and b[v]: b's gradient sums it over in-edges, a's over
    out-edges (the reversed graph). One [E, H] stage computes it; both read `sum(stN__[e])`,
    and neither recomputes the exp or gathers rows for it."""
    from gnnc.lang.autodiff import gradient_program

    grad = gradient_program(parse_and_check(EXPLICIT_ATTENTION).kernel("att"), walks=False)
    pieces = {p.split("(", 1)[0]: p for p in grad.source.split("kernel ")[1:]}
    grads = {k.wrt: k for k in grad.kernels if not k.wrt.endswith("__")}
    staged = {m for w in ("a", "b") for m in re.findall(r"sum\((st\d+__)\[e\]\)", pieces[grads[w].name])}
    assert len(staged) == 1
    (stage,) = staged
    assert grads["a"].reverse and not grads["b"].reverse
    for w in ("a", "b"):
        body = pieces[grads[w].name].split("{", 1)[1]
        assert f"sum({stage}[e])" in body and "exp(" not in body
    writer = next(k for k in grad.kernels if k.wrt == stage)
    assert "-> f64[E, H] {" in pieces[writer.name] and not writer.reverse
    assert stage not in grad.saved  # it reads the incoming gradient: the backward computes it
    shared = gradient_program(parse_and_check(EXPLICIT_ATTENTION).kernel("att"))
    walk = next(k for k in shared.kernels if stage in k.writes)
    assert "b" in walk.writes  # written in the walk that sums it for b
    _check_attention_gradients(EXPLICIT_ATTENTION)


def test_an_exp_several_gradient_kernels_recompute_is_written_by_the_training_forward():
    """The softmax written out (`p[e] = exp(s[e] - m[v])`): the softmax adjoint's sum, the score
    adjoint and h's gradient (reversed) each recomputed the exp and its score's gathers. It is
    an [E, H] intermediate the training forward writes (the compiler computing the exp once
    for p and for it); no gradient kernel computes an exp of an edge then."""
    from gnnc.lang.autodiff import gradient_program

    grad = gradient_program(parse_and_check(EXPLICIT_ATTENTION).kernel("att"), walks=False)
    pieces = {p.split("(", 1)[0]: p for p in grad.source.split("kernel ")[1:]}
    staged = [k for k in grad.kernels if k.wrt in grad.saved and "-> f64[E, H] {" in pieces[k.name]]
    assert len(staged) == 1
    stage = staged[0].wrt
    assert f"{stage}[e] = exp(((leaky_relu((a[u] + b[v]), 0.2)) - m[v]))" in grad.forward
    backward = [k for k in grad.kernels if k.wrt not in grad.saved]
    readers = [k for k in backward if stage in k.inputs]
    assert len(readers) >= 3 and any(k.reverse for k in readers)
    for k in backward:
        body = pieces[k.name].split("{", 1)[1]
        assert not re.search(r"exp\(.*\[u\]", body), k.name
    _check_attention_gradients(EXPLICIT_ATTENTION)


def test_a_per_feature_adjoint_at_both_ends_is_not_staged():
    """`relu(x[u] + x[v])`'s adjoint at both ends is a row per edge ([F], as x's): staged it would be an
    E x F array; each walk recomputes it instead."""
    from gnnc.lang.autodiff import gradient_program

    source = "kernel pr(x: f64[V, F]) -> f64[V, F] { out[v] = sum(relu(x[u] + x[v])) }"
    grad = gradient_program(parse_and_check(source).kernel("pr"), walks=False)
    assert not any(k.wrt.endswith("__") for k in grad.kernels)


EDGE_ATTENTION = """
kernel ea(h: f64[V, H, F], el: f64[V, H], er: f64[V, H], w: f64[E, H]) -> (out: f64[V, H, F], alpha: f64[E, H]) {
    alpha[e] = softmax(leaky_relu(el[u] + er[v] + w[e], 0.2))
    out[v]   = sum(alpha[e] * h[u])
}
"""


@pytest.mark.parametrize("order", ["by source", "random"])
def test_per_edge_intermediates_run_on_the_edges_in_csr_order(order, monkeypatch):
    """A gradient keeping per-edge intermediates (the softmax's weights, the score's adjoint)
    runs on the graph's edges numbered by destination (`plans.in_csr_numbering`), its edge
    input, edge result and their gradients renumbered both ways: the same gradients as the
    reference, which runs on the user's numbering, and as with the renumbering off."""
    from gnnc.runtime import gradient
    from gnnc.runtime.gradient import HostArrays

    monkeypatch.setattr(gradient, "RENUMBER_MIN_EDGES", 0)
    rng = np.random.default_rng(11)
    for shape, e in (((14, 14), 90), ((14, 6), 50)):
        src, dst = rng.integers(0, shape[0], e), rng.integers(0, shape[1], e)
        src[:6], dst[:6] = 3, 2  # duplicates
        order_ = np.lexsort((dst, src)) if order == "by source" else rng.permutation(e)
        graph = gnnc.Graph.from_coo(src[order_], dst[order_], shape=shape)
        assert not graph.edges_sorted
        args = {
            "h": rng.normal(size=(shape[0], 2, 3)),
            "el": rng.normal(size=(shape[0], 2)),
            "er": rng.normal(size=(shape[1], 2)),
            "w": rng.normal(size=(e, 2)),
        }
        gout = {"out": rng.normal(size=(shape[1], 2, 3)), "alpha": rng.normal(size=(e, 2))}
        grad = compile_grad(EDGE_ATTENTION, "ea")
        assert grad.in_csr_order
        out, saved = grad.forward(graph, **args)
        assert ("in_csr_numbering",) in graph.plans
        reference = compile_grad(EDGE_ATTENTION, "ea", target="reference")
        want_out = gnnc.compile(EDGE_ATTENTION, target="reference").ea(graph, **args)
        np.testing.assert_allclose(out["alpha"], want_out["alpha"], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(out["out"], want_out["out"], rtol=1e-12, atol=1e-14)
        want = reference(graph, gout=gout, **args)
        got = grad(graph, gout=gout, saved=saved, **args)
        with monkeypatch.context() as m:
            m.setattr(HostArrays, "renumbers_edges", False)
            plain = grad(graph, gout=gout, **args)
        # the edges alone decide: a CooGraph's forward saves for a Graph's backward
        coo = CooGraph(src[order_], dst[order_], *shape)
        out_coo, saved_coo = grad.forward(coo, **args)
        from_coo = grad(graph, gout=gout, saved=saved_coo, **args)
        for k in args:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(plain[k], want[k], rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(from_coo[k], want[k], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(out_coo["alpha"], want_out["alpha"], rtol=1e-12, atol=1e-14)
        # a wrong edge count is refused by the kernel, not cut to the graph's edges
        with pytest.raises(gnnc.ArgumentError):
            grad(graph, gout=gout, **{**args, "w": rng.normal(size=(e + 1, 2))})
        # below RENUMBER_MIN_EDGES (the L2 holds the edge rows) the user's numbering stays
        monkeypatch.setattr(gradient, "RENUMBER_MIN_EDGES", e + 1)
        small = gnnc.Graph.from_coo(src[order_], dst[order_], shape=shape)
        grad.forward(small, **args)
        assert ("in_csr_numbering",) not in small.plans
        monkeypatch.setattr(gradient, "RENUMBER_MIN_EDGES", 0)


def test_a_per_edge_dot_one_kernel_reads_is_not_staged():
    """A weighted sum's weight gradient reads `dot(gout__[v], x[u])` once: staging it would be a walk more."""
    from gnnc.lang.autodiff import gradient_program

    source = "kernel ws(x: f64[V, F], w: f64[E]) -> f64[V, F] { out[v] = sum(w[e] * x[u]) }"
    grad = gradient_program(parse_and_check(source).kernel("ws"))
    assert not any(k.wrt.endswith("__") for k in grad.kernels)  # no stage: w's own kernel computes the dot
    assert grad.source.count("dot(gout__[v], x[u])") == 1


def test_two_shared_dots_are_two_stages_before_all_their_readers():
    """Two attention-weighted sums (h and g): two per-edge dots, each staged once; every reader
    of each reads its stage (the second stage's readers are found after the first moved them)."""
    from gnnc.lang.autodiff import gradient_program

    source = EXPLICIT_ATTENTION.replace("h: f64[V, H, F],", "h: f64[V, H, F], g: f64[V, H, F],").replace(
        "out[v] = sum(p[e] * r[v] * h[u])", "out[v] = sum(p[e] * r[v] * h[u]) + sum(p[e] * r[v] * g[u])"
    )
    grad = gradient_program(parse_and_check(source).kernel("att"), walks=False)
    pieces = {p.split("(", 1)[0]: p for p in grad.source.split("kernel ")[1:]}
    order = [k.name for k in grad.kernels]
    for row in ("h", "g"):
        makers = [n for n, p in pieces.items() if f"out[e] = dot(gout__[v], {row}[u])" in p]
        assert len(makers) == 1
        stage = next(k.wrt for k in grad.kernels if k.name == makers[0])
        readers = [k.name for k in grad.kernels if stage in k.inputs]
        assert len(readers) >= 2 and all(order.index(makers[0]) < order.index(n) for n in readers)
        assert all(
            f"dot(gout__[v], {row}[u])" not in pieces[n] and f"dot(gout__[u], {row}[v])" not in pieces[n]
            for n in order
            if n != makers[0]
        )
    rng = np.random.default_rng(6)
    graph = gnnc.Graph.from_coo(rng.integers(0, 12, 60), rng.integers(0, 5, 60), shape=(12, 5))
    args = {n: rng.normal(size=(12, 2, 3)) for n in ("h", "g")}
    args.update({n: rng.normal(size=(12, 2)) for n in ("a", "b")})
    gout = rng.normal(size=(5, 2, 3))
    got = compile_grad(source, "att")(graph, gout=gout, **args)
    want = compile_grad(source, "att", target="reference")(graph, gout=gout, **args)
    for k in args:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12)
