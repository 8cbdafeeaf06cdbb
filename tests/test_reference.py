"""The numpy reference (gnnc.reference) on hand-built checked ASTs, against plain Python loops over edges."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gnnc import reference
from gnnc.errors import ArgumentError, SourceLocation
from gnnc.graph.graph import Graph
from gnnc.lang import ast

from .strategies import graphs

LOC = SourceLocation("<test>", 1, 1)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# ------------------------------------------------------- building checked trees
#
# Each helper fills gtype and shape as the checker would.


def _combine(a: str, b: str) -> str:
    if a == b:
        return a
    if a == "P":
        return b
    if b == "P":
        return a
    if "A" in (a, b):
        return "A"
    return "E"


def _broadcast(a: tuple, b: tuple) -> tuple:
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    assert long[: len(short)] == short, (a, b)
    return long


def num(x):
    return ast.Number(value=float(x), text=str(x), loc=LOC, gtype="P", shape=())


def at(name, index, *shape):
    return ast.Index(name=name, index=index, loc=LOC, gtype={"u": "S", "v": "D", "e": "E"}[index], shape=tuple(shape))


def par(name, *shape):
    return ast.Name(name=name, loc=LOC, gtype="P", shape=tuple(shape))


def deg(direction, index):
    return ast.Degree(direction=direction, index=index, loc=LOC, gtype="S" if index == "u" else "D", shape=())


def neg(a):
    return ast.Unary(op="-", operand=a, loc=LOC, gtype=a.gtype, shape=a.shape)


def bin(op, a, b):
    if op == "@":
        shape = a.shape[:-1] + (b.shape[1],)
    else:
        shape = _broadcast(a.shape, b.shape)
    return ast.Binary(op=op, lhs=a, rhs=b, loc=LOC, gtype=_combine(a.gtype, b.gtype), shape=shape)


def call(func, *args):
    a = args[0]
    if func in ("max", "min"):
        shape, gtype = _broadcast(a.shape, args[1].shape), _combine(a.gtype, args[1].gtype)
    elif func == "dot":
        shape, gtype = a.shape[:-1], _combine(a.gtype, args[1].gtype)
    elif func == "softmax":
        shape, gtype = a.shape, "E"
    else:
        shape, gtype = a.shape, a.gtype
    return ast.Call(func=func, args=list(args), loc=LOC, gtype=gtype, shape=shape)


def agg(kind, operand):
    return ast.Aggregate(kind=kind, operand=operand, loc=LOC, gtype="A", shape=operand.shape)


def param(name, domain, *shape, dtype="f32"):
    return ast.Param(name=name, type=ast.TensorType(dtype, domain, tuple(shape), LOC), loc=LOC)


def result(name, domain, *shape, dtype="f32"):
    return ast.Result(name=name, type=ast.TensorType(dtype, domain, tuple(shape), LOC), loc=LOC)


def define(name, index, value):
    return ast.Definition(name=name, index=index, value=value, loc=LOC)


def kernel(name, params, results, body, dtype="f32"):
    single = len(results) == 1 and results[0].name == "out"
    return ast.Kernel(name=name, params=params, results=results, single_result=single, body=body, loc=LOC, dtype=dtype)


def out_v(value, *shape, params, dtype="f32", name="k"):
    return kernel(name, params, [result("out", "V", *shape, dtype=dtype)], [define("out", "v", value)], dtype)


def out_e(value, *shape, params, dtype="f32", name="k"):
    return kernel(name, params, [result("out", "E", *shape, dtype=dtype)], [define("out", "e", value)], dtype)


# --------------------------------------------------------------- the kernels

GCN = out_v(
    agg("sum", bin("*", at("w", "e"), at("x", "u", "F"))),
    "F",
    params=[param("x", "V", "F"), param("w", "E")],
    name="gcn",
)
GCN_NORM = out_v(
    agg("sum", bin("*", at("x", "u", "F"), call("rsqrt", bin("*", deg("out", "u"), deg("in", "v"))))),
    "F",
    params=[param("x", "V", "F")],
    name="gcn_norm",
)
GIN = out_v(
    bin("+", bin("*", bin("+", num(1), par("eps")), at("x", "v", "F")), agg("sum", at("x", "u", "F"))),
    "F",
    params=[param("x", "V", "F"), param("eps", None)],
    name="gin",
)
SAGE_MAX = out_v(agg("max", at("x", "u", "F")), "F", params=[param("x", "V", "F")], name="sage_max")
SAGE_MIN = out_v(agg("min", at("x", "u", "F")), "F", params=[param("x", "V", "F")], name="sage_min")
SAGE_MEAN = out_v(agg("mean", at("x", "u", "F")), "F", params=[param("x", "V", "F")], name="sage_mean")
ATTENTION = out_e(
    call("dot", at("q", "v", "H", "D"), at("k", "u", "H", "D")),
    "H",
    params=[param("q", "V", "H", "D"), param("k", "V", "H", "D")],
    name="attention",
)
MLP_AGGR = out_v(
    agg("max", call("relu", bin("@", bin("+", at("x", "u", "D1"), at("x", "v", "D1")), par("W", "D1", "D2")))),
    "D2",
    params=[param("x", "V", "D1"), param("W", None, "D1", "D2")],
    name="mlp_aggr",
)
GAT = kernel(
    "gat",
    [param("h", "V", "H", "F"), param("el", "V", "H"), param("er", "V", "H")],
    [result("out", "V", "H", "F"), result("alpha", "E", "H")],
    [
        define("s", "e", call("leaky_relu", bin("+", at("el", "u", "H"), at("er", "v", "H")), num(0.2))),
        define("alpha", "e", call("softmax", at("s", "e", "H"))),
        define("out", "v", agg("sum", bin("*", at("alpha", "e", "H"), at("h", "u", "H", "F")))),
    ],
)

# ------------------------------------------------------------ loop oracles


def in_edges(graph, v):
    return [e for e in range(graph.num_edges) if graph.dst[e] == v]


def loop_aggregate(graph, kind, message, shape):
    """Aggregation by a Python loop; message(e) is the value of edge e."""
    out = np.zeros((graph.num_vertices,) + shape)
    for v in range(graph.num_vertices):
        msgs = [np.asarray(message(e), dtype=np.float64) for e in in_edges(graph, v)]
        if not msgs:
            continue
        stack = np.stack(msgs)
        if kind == "sum":
            out[v] = stack.sum(0)
        elif kind == "mean":
            out[v] = stack.sum(0) / len(msgs)
        elif kind == "max":
            out[v] = np.where(np.isnan(stack).any(0), np.nan, stack.max(0))
        else:
            out[v] = np.where(np.isnan(stack).any(0), np.nan, stack.min(0))
    return out


def small_graph():
    # vertex 4 is isolated, 3 has no in-edges, 2 has a self loop, 0 -> 1 twice
    return Graph.from_coo([0, 3, 2, 0, 1, 2, 3, 0], [1, 1, 2, 1, 0, 0, 2, 2], num_vertices=5)


def rand(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def close(got, want):
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


# ----------------------------------------------------------------- the tests


@given(graphs(max_vertices=12, max_edges=40), st.sampled_from([1, 3, 4]), st.integers(0, 1000))
def test_gcn(graph, f, seed):
    x, w = rand((graph.num_vertices, f), seed), rand(graph.num_edges, seed + 1)
    got = reference.evaluate(GCN, graph, x, w)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    close(got, loop_aggregate(graph, "sum", lambda e: w64[e] * x64[graph.src[e]], (f,)))


def test_gcn_norm_gin_and_mean():
    g = small_graph()
    x = rand((5, 3))
    x64 = x.astype(np.float64)
    din = np.bincount(g.dst, minlength=5)
    dout = np.bincount(g.src, minlength=5)
    want = loop_aggregate(g, "sum", lambda e: x64[g.src[e]] / math.sqrt(dout[g.src[e]] * din[g.dst[e]]), (3,))
    close(reference.evaluate(GCN_NORM, g, x), want)
    eps = 0.25
    want = (1 + eps) * x64 + loop_aggregate(g, "sum", lambda e: x64[g.src[e]], (3,))
    close(reference.evaluate(GIN, g, x, eps=eps), want)
    close(reference.evaluate(GIN, g, x=x, eps=np.float32(eps)), want)
    got = reference.evaluate(SAGE_MEAN, g, x)
    close(got, loop_aggregate(g, "mean", lambda e: x64[g.src[e]], (3,)))
    assert np.all(got[3] == 0) and np.all(got[4] == 0)


def test_sage_max_min_empty_and_nan():
    g = small_graph()
    x = rand((5, 4))
    x[0, 1] = np.nan  # 0 -> 1 and 0 -> 2: vertices 1 and 2 get NaN in column 1
    x[3, 2] = -np.inf
    x64 = x.astype(np.float64)
    for k, kind in ((SAGE_MAX, "max"), (SAGE_MIN, "min")):
        got = reference.evaluate(k, g, x)
        close(got, loop_aggregate(g, kind, lambda e: x64[g.src[e]], (4,)))
        assert np.all(got[3] == 0) and np.all(got[4] == 0)  # no in-edges: 0
        assert np.isnan(got[1, 1]) and np.isnan(got[2, 1]) and not np.isnan(got[0, 1])
    assert reference.evaluate(SAGE_MIN, g, x)[1, 2] == -np.inf


def test_max_propagates_nan_whatever_its_position():
    # NaN first, last, and in the middle of a destination's in-edges
    g = Graph.from_coo([0, 1, 2, 0, 1, 2], [3, 3, 3, 4, 4, 4], num_vertices=5)
    for pos in range(3):
        x = np.arange(5, dtype=np.float32)[:, None].copy()
        x[pos] = np.nan
        got = reference.evaluate(SAGE_MAX, g, x)
        assert np.isnan(got[3, 0]) and np.isnan(got[4, 0])


@given(graphs(max_vertices=10, max_edges=30), st.integers(1, 3), st.sampled_from([1, 2, 3]), st.integers(0, 99))
def test_gat(graph, heads, f, seed):
    h = rand((graph.num_vertices, heads, f), seed)
    el, er = rand((graph.num_vertices, heads), seed + 1) * 5, rand((graph.num_vertices, heads), seed + 2) * 5
    got = reference.evaluate(GAT, graph, h, el, er)
    assert set(got) == {"out", "alpha"}
    src, dst = graph.src, graph.dst
    s = el.astype(np.float64)[src] + er.astype(np.float64)[dst]
    s = np.where(s > 0, s, 0.2 * s)
    alpha = np.zeros((graph.num_edges, heads))
    for v in range(graph.num_vertices):
        es = in_edges(graph, v)
        for hd in range(heads):
            m = max((s[e, hd] for e in es), default=0.0)
            total = sum(math.exp(s[e, hd] - m) for e in es)
            for e in es:
                alpha[e, hd] = math.exp(s[e, hd] - m) / total
    close(got["alpha"], alpha)
    h64 = h.astype(np.float64)
    out = loop_aggregate(graph, "sum", lambda e: alpha[e][:, None] * h64[src[e]], (heads, f))
    close(got["out"], out)
    # every destination's weights sum to 1
    sums = np.zeros((graph.num_vertices, heads))
    np.add.at(sums, dst, got["alpha"])
    has_in = np.bincount(dst, minlength=graph.num_vertices) > 0
    np.testing.assert_allclose(sums[has_in], 1.0)


def test_softmax_is_stable():
    g = Graph.from_coo([0, 1, 2], [2, 2, 2], num_vertices=3)
    el = np.array([[1000.0], [999.0], [0.0]], np.float32)
    er = np.zeros((3, 1), np.float32)
    got = reference.evaluate(GAT, g, np.ones((3, 1, 1), np.float32), el, er)
    e1 = math.exp(-1.0)
    e2 = math.exp(-1000.0)
    close(got["alpha"][:, 0], np.array([1, e1, e2]) / (1 + e1 + e2))
    close(got["out"], np.array([0.0, 0.0, 1.0])[:, None, None])


def test_leading_axes_broadcasting_when_sizes_coincide():
    # [H] * [H, F] with H == F: numpy's trailing rule would scale columns, not rows
    g = Graph.from_coo([0, 1], [1, 0], num_vertices=2)
    h = rand((2, 3, 3))
    el = rand((2, 3), 1)
    er = np.zeros((2, 3), np.float32)
    got = reference.evaluate(GAT, g, h, el, er)
    # each vertex has one in-edge, so alpha == 1 and out[v] = h[u]
    close(got["out"], h.astype(np.float64)[[1, 0]])
    k = out_v(
        agg("sum", bin("*", at("a", "u", "H"), at("h", "u", "H", "F"))),
        "H",
        "F",
        params=[param("a", "V", "H"), param("h", "V", "H", "F")],
    )
    got = reference.evaluate(k, g, el, h)
    want = el.astype(np.float64)[[1, 0]][:, :, None] * h.astype(np.float64)[[1, 0]]
    close(got, want)


def test_attention_dot():
    g = small_graph()
    q, k = rand((5, 2, 4), 1), rand((5, 2, 4), 2)
    got = reference.evaluate(ATTENTION, g, q, k)
    q64, k64 = q.astype(np.float64), k.astype(np.float64)
    want = np.array(
        [
            [sum(q64[g.dst[e], hd, d] * k64[g.src[e], hd, d] for d in range(4)) for hd in range(2)]
            for e in range(g.num_edges)
        ]
    )
    assert got.shape == (8, 2)
    close(got, want)


def test_mlp_aggr_matmul():
    g = small_graph()
    x, W = rand((5, 3), 1), rand((3, 4), 2)
    got = reference.evaluate(MLP_AGGR, g, x, W)
    x64, W64 = x.astype(np.float64), W.astype(np.float64)

    def message(e):
        z = x64[g.src[e]] + x64[g.dst[e]]
        return [max(0.0, sum(z[i] * W64[i, j] for i in range(3))) for j in range(4)]

    close(got, loop_aggregate(g, "max", message, (4,)))
    assert np.all(got[3:] == 0)


def test_two_phases_and_vertex_values_read_at_u():
    # h[v] = sum(x[u]); out[v] = max(h[u] * w[e]) + h[v]
    k = kernel(
        "two",
        [param("x", "V", "F"), param("w", "E")],
        [result("out", "V", "F")],
        [
            define("h", "v", agg("sum", at("x", "u", "F"))),
            define("out", "v", bin("+", agg("max", bin("*", at("h", "u", "F"), at("w", "e"))), at("h", "v", "F"))),
        ],
    )
    g = small_graph()
    x, w = rand((5, 2)), rand(8, 1)
    got = reference.evaluate(k, g, x, w)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    h = loop_aggregate(g, "sum", lambda e: x64[g.src[e]], (2,))
    close(got, loop_aggregate(g, "max", lambda e: h[g.src[e]] * w64[e], (2,)) + h)


def test_parameter_only_values_and_degrees():
    g = small_graph()
    din = np.bincount(g.dst, minlength=5).astype(np.float64)
    dout = np.bincount(g.src, minlength=5).astype(np.float64)
    # sum(2) counts in-edges twice; an edge value with only parameters; deg_in(u), deg_out(v)
    k = out_v(agg("sum", num(2)), params=[param("x", "V")])
    close(reference.evaluate(k, g, np.zeros(5, np.float32)), 2 * din)
    k = out_e(bin("*", par("eps"), num(3)), params=[param("eps", None)])
    close(reference.evaluate(k, g, 0.5), np.full(8, 1.5))
    k = out_e(bin("-", deg("in", "u"), deg("out", "v")), params=[param("x", "V")])
    close(reference.evaluate(k, g, np.zeros(5, np.float32)), din[g.src] - dout[g.dst])
    k = out_v(bin("+", deg("in", "v"), agg("mean", deg("out", "u"))), params=[param("x", "V")])
    want = din + loop_aggregate(g, "mean", lambda e: dout[g.src[e]], ())
    close(reference.evaluate(k, g, np.zeros(5, np.float32)), want)


def test_empty_aggregation_division_is_nan():
    # sum(a[e] * h[u]) / sum(a[e]) at a vertex without in-edges is 0/0 = NaN
    k = out_v(
        bin("/", agg("sum", bin("*", at("a", "e"), at("h", "u", "F"))), agg("sum", at("a", "e"))),
        "F",
        params=[param("a", "E"), param("h", "V", "F")],
    )
    g = small_graph()
    a, h = np.abs(rand(8)) + 0.1, rand((5, 2), 1)
    got = reference.evaluate(k, g, a, h)
    assert np.isnan(got[3]).all() and np.isnan(got[4]).all() and not np.isnan(got[:3]).any()
    a64, h64 = a.astype(np.float64), h.astype(np.float64)
    num_ = loop_aggregate(g, "sum", lambda e: a64[e] * h64[g.src[e]], (2,))
    den = loop_aggregate(g, "sum", lambda e: a64[e], ())
    close(got[:3], num_[:3] / den[:3, None])


@pytest.mark.parametrize(
    "func, fn",
    [
        ("exp", math.exp),
        ("log", lambda t: math.log(t) if t > 0 else (-math.inf if t == 0 else math.nan)),
        ("sqrt", lambda t: math.sqrt(t) if t >= 0 else math.nan),
        ("rsqrt", lambda t: 1 / math.sqrt(t) if t > 0 else (math.inf if t == 0 else math.nan)),
        ("abs", abs),
        ("relu", lambda t: max(t, 0.0)),
        ("sigmoid", lambda t: 1 / (1 + math.exp(-t)) if t > -700 else 0.0),
        ("tanh", math.tanh),
    ],
)
def test_unary_functions(func, fn):
    g = Graph.from_coo(np.arange(7), np.zeros(7, np.int64), num_vertices=7)
    x = np.array([-2.0, -0.5, 0.0, 0.3, 1.0, 4.0, -800.0], np.float64)
    k = out_e(call(func, at("x", "u")), params=[param("x", "V", dtype="f64")], dtype="f64")
    got = reference.evaluate(k, g, x)
    close(got, np.array([fn(t) for t in x]))
    x[2] = np.nan
    assert np.isnan(reference.evaluate(k, g, x)[2])  # NaN in, NaN out (relu too)


def test_elementwise_max_min_leaky_relu_and_negation():
    g = Graph.from_coo([0, 1, 2, 3], [0, 0, 0, 0], num_vertices=4)
    x = np.array([-1.0, np.nan, 2.0, 0.0], np.float32)
    y = np.array([0.5, 1.0, np.nan, -0.0], np.float32)
    for f, op in (("max", max), ("min", min)):
        k = out_e(call(f, at("x", "u"), at("y", "u")), params=[param("x", "V"), param("y", "V")])
        got = reference.evaluate(k, g, x, y)
        assert got[0] == op(-1.0, 0.5) and np.isnan(got[1]) and np.isnan(got[2])
    k = out_e(call("leaky_relu", at("x", "u"), num(0.1)), params=[param("x", "V")])
    got = reference.evaluate(k, g, x)
    assert got[0] == pytest.approx(-0.1) and np.isnan(got[1]) and got[2] == 2.0 and got[3] == 0.0
    k = out_e(neg(bin("-", at("x", "u"), bin("/", at("y", "u"), num(2)))), params=[param("x", "V"), param("y", "V")])
    got = reference.evaluate(k, g, x, y)
    assert got[0] == pytest.approx(1.25) and np.isnan(got[1]) and np.isnan(got[2])


def test_matmul_on_vertex_values_and_parameters():
    # out[v] = tanh(x[v] @ W) + sum(x[u]) @ W
    k = out_v(
        bin(
            "+",
            call("tanh", bin("@", at("x", "v", "F"), par("W", "F", 2))),
            bin("@", agg("sum", at("x", "u", "F")), par("W", "F", 2)),
        ),
        2,
        params=[param("x", "V", "F"), param("W", None, "F", 2)],
    )
    g = small_graph()
    x, W = rand((5, 3)), rand((3, 2), 1)
    got = reference.evaluate(k, g, x, W)
    x64, W64 = x.astype(np.float64), W.astype(np.float64)
    s = loop_aggregate(g, "sum", lambda e: x64[g.src[e]], (3,))
    close(got, np.tanh(x64 @ W64) + s @ W64)


def test_empty_graphs():
    for g in (Graph.from_coo([], []), Graph.from_coo([], [], num_vertices=3)):
        n = g.num_vertices
        x = rand((n, 2))
        close(reference.evaluate(SAGE_MAX, g, x), np.zeros((n, 2)))
        close(reference.evaluate(GCN, g, x, np.zeros(0, np.float32)), np.zeros((n, 2)))
        got = reference.evaluate(GAT, g, rand((n, 1, 2)), rand((n, 1)), rand((n, 1)))
        assert got["alpha"].shape == (0, 1)
        close(got["out"], np.zeros((n, 1, 2)))


def test_calling_convention():
    g = small_graph()
    x, w = rand((5, 3)), rand(8)
    got = reference.evaluate(GCN, g, x, w=w, threads=4)
    assert got.dtype == np.float64 and got.shape == (5, 3)
    with pytest.raises(ArgumentError, match="expected float32, got float64"):
        reference.evaluate(GCN, g, x.astype(np.float64), w)
    with pytest.raises(ArgumentError, match=r"missing input 'w'"):
        reference.evaluate(GCN, g, x)
    with pytest.raises(ArgumentError, match=r"leading axis \(E\)"):
        reference.evaluate(GCN, g, x, w[:3])
    with pytest.raises(ArgumentError, match="gnnc.Graph"):
        reference.evaluate(GCN, (g.src, g.dst), x, w)
    # f64 kernels return f64, non-contiguous inputs are fine
    k64 = out_v(agg("sum", at("x", "u", "F")), "F", params=[param("x", "V", "F", dtype="f64")], dtype="f64")
    big = rand((5, 6), dtype=np.float64)
    close(reference.evaluate(k64, g, big[:, ::2]), loop_aggregate(g, "sum", lambda e: big[g.src[e], ::2], (3,)))
    # out= gets the values in the kernel's dtype
    out = np.empty((5, 3), np.float32)
    res = reference.evaluate(GCN, g, x, w, out=out)
    assert res is out
    np.testing.assert_allclose(out, got, rtol=1e-6, atol=1e-6)
    with pytest.raises(ArgumentError, match="overlaps input 'x'"):
        reference.evaluate(GCN, g, x, w, out=x)


@pytest.mark.parametrize(
    "name, hand_built",
    [
        ("gcn", GCN),
        ("gcn_norm", GCN_NORM),
        ("gin", GIN),
        ("sage_max", SAGE_MAX),
        ("sage_mean", SAGE_MEAN),
        ("attention", ATTENTION),
        ("mlp_aggr", MLP_AGGR),
        ("gat", GAT),
    ],
)
def test_parsed_examples_agree_with_hand_built_trees(name, hand_built):
    from gnnc.lang import load_program

    parsed = load_program(EXAMPLES / f"{name}.gnn").kernel(name)
    g = small_graph()
    dims = {"F": 3, "H": 2, "D": 4, "D1": 3, "D2": 5}
    args = {}
    for i, p in enumerate(parsed.params):
        lead = {"V": [5], "E": [8], None: []}[p.type.domain]
        shape = lead + [dims[d] if isinstance(d, str) else d for d in p.type.shape]
        args[p.name] = rand(shape, i) if shape else 0.5
    want = reference.evaluate(hand_built, g, **args)
    got = reference.evaluate(parsed, g, **args)
    if isinstance(want, dict):
        for key in want:
            close(got[key], want[key])
    else:
        close(got, want)
