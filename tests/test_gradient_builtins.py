"""step, edge_id, argmax, argmin and outer (what generated gradients of relu, abs, max, min and @ use): compiled = reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from tests.helpers import assert_matches, slow_except
from tests.strategies import graphs

SOURCE = """
kernel steps(x: f64[V, F]) -> f64[E, F] {
    out[e] = step(x[u] - x[v]) + edge_id(e) * 10
}
kernel best(x: f64[V, F], w: f64[E]) -> (hi: f64[V, F], lo: f64[V, F]) {
    hi[v] = argmax(x[u] * w[e])
    lo[v] = argmin(x[u])
}
"""

# a self loop (2->2), duplicates (0->1 twice), a vertex without in-edges (3), an isolated one (4)
GRAPH = gnnc.Graph(np.array([[0, 1, 2, 2, 3, 0, 2, 3], [1, 2, 0, 2, 1, 1, 1, 0]]), num_vertices=5)


def _by_hand_arg(graph, values, kind):
    """Per destination and element: the lowest in-edge id attaining the max (min), the first NaN; -1 if none."""
    out = np.full((graph.num_vertices,) + values.shape[1:], -1.0)
    for v in range(graph.num_vertices):
        for idx in np.ndindex(values.shape[1:]):
            best, best_e = None, -1
            for e in range(graph.num_edges):  # in increasing id
                if graph.dst[e] != v:
                    continue
                x = values[(e,) + idx]
                if best_e < 0 or (not np.isnan(best) and (np.isnan(x) or (x > best if kind == "max" else x < best))):
                    best, best_e = x, e
            out[(v,) + idx] = best_e
    return out


def test_step_is_heaviside_with_step_0_equal_0_and_keeps_nan():
    x = np.array([[-1.0], [0.0], [2.0], [np.nan], [-0.0]])
    ring = gnnc.Graph(np.array([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]]), num_vertices=5)
    src = "kernel s(x: f64[V, F]) -> f64[E, F] {\n    out[e] = step(x[u])\n}\n"
    want = np.array([[0.0], [0.0], [1.0], [np.nan], [0.0]])
    for target in ("cpu", "reference"):
        got = gnnc.compile(src, target=target).s(ring, x)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "schedule", slow_except([None, "partition src 2", "vectorize 4", "sort degree"], None, "partition src 2")
)
def test_argmax_ties_go_to_the_lowest_edge_id_whatever_the_walk(schedule):
    # integer features on a few values: ties everywhere, duplicates tie by construction
    rng = np.random.default_rng(3)
    src = rng.integers(0, 6, 60)
    dst = rng.integers(0, 6, 60)
    graph = gnnc.Graph.from_coo(np.concatenate([src, src[:9]]), np.concatenate([dst, dst[:9]]), num_vertices=7)
    x = rng.integers(-2, 3, (7, 4)).astype(np.float64)
    w = rng.integers(-1, 2, graph.num_edges).astype(np.float64)
    x[2, 1] = np.nan
    module = gnnc.compile(SOURCE, kernels=["best"], schedule=schedule)
    got = module.best(graph, x, w)
    values = x[graph.src] * w[:, None]
    np.testing.assert_array_equal(got["hi"], _by_hand_arg(graph, values, "max"))
    np.testing.assert_array_equal(got["lo"], _by_hand_arg(graph, x[graph.src], "min"))
    want = gnnc.compile(SOURCE, target="reference").best(graph, x, w)
    for k in ("hi", "lo"):
        np.testing.assert_array_equal(want[k], got[k])


def test_edge_id_and_step_match_the_reference():
    x = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, -1.0], [0.0, 0.0], [5.0, 5.0]])
    got = gnnc.compile(SOURCE, kernels=["steps"]).steps(GRAPH, x)
    want = gnnc.compile(SOURCE, target="reference").steps(GRAPH, x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.floor(got[:, 0] / 10), np.arange(GRAPH.num_edges))


def test_argmax_is_refused_by_neighbour_grouping():
    with pytest.raises(gnnc.CompileError, match="argmax / argmin are not split"):
        gnnc.compile(SOURCE, kernels=["best"], schedule="group neighbors 2")


def test_edge_id_reads_only_the_edge():
    with pytest.raises(gnnc.SourceError, match="edge_id takes the edge index e"):
        gnnc.compile("kernel k(x: f32[V]) -> f32[V] {\n    out[v] = sum(edge_id(u))\n}\n")
    with pytest.raises(gnnc.SourceError, match="reads an edge outside an aggregation"):
        gnnc.compile("kernel k(x: f32[V]) -> f32[V] {\n    out[v] = edge_id(e) + x[v]\n}\n")


@settings(max_examples=min(10, settings().max_examples))
@given(
    graph=graphs(max_vertices=20, max_edges=80),
    f=st.sampled_from([1, 3]),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_argmax_argmin_match_the_reference_on_random_graphs(graph, f, seed, dtype):
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, (graph.num_vertices, f)).astype(dtype)
    w = rng.integers(-1, 2, graph.num_edges).astype(dtype)
    source = SOURCE if dtype == np.float64 else SOURCE.replace("f64", "f32")
    got = gnnc.compile(source, kernels=["best"]).best(graph, x, w)
    want = gnnc.compile(source, target="reference").best(graph, x, w)
    assert_matches(got, want, graph, dtype)
    np.testing.assert_array_equal(want["lo"], _by_hand_arg(graph, x[graph.src].astype(np.float64), "min"))


def test_outer_matches_the_reference_and_numpy():
    source = """
kernel o(x: f64[V, H, K], y: f64[V, H, N], w: f64[E]) -> f64[V, H, K, N] {
    out[v] = sum(outer(x[u] * w[e], y[v])) + outer(x[v], y[v])
}
"""
    with pytest.raises(gnnc.SourceError, match="outer needs operands"):
        gnnc.compile("kernel o(x: f32[V, K], y: f32[V, H, N]) -> f32[V, K, N] {\n    out[v] = outer(x[v], y[v])\n}\n")
    rng = np.random.default_rng(0)
    x, y, w = rng.normal(size=(5, 2, 3)), rng.normal(size=(5, 2, 4)), rng.normal(size=8)
    got = gnnc.compile(source).o(GRAPH, x, y, w)
    want = gnnc.compile(source, target="reference").o(GRAPH, x, y, w)
    by_hand = np.einsum("vhk,vhn->vhkn", x, y)
    np.add.at(by_hand, GRAPH.dst, np.einsum("ehk,ehn->ehkn", x[GRAPH.src] * w[:, None, None], y[GRAPH.dst]))
    np.testing.assert_allclose(want, by_hand, rtol=1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k, n", [(64, 2), (16, 2), (65, 3), (37, 19)])
def test_the_reference_breaks_ties_through_matvecs_by_edge_id_not_rounding(k, n):
    """Equal rows through `@` and `dot` give bit-equal values in the oracle (BLAS could differ by an ulp
    with a row's alignment), so argmax / argmin follow the lowest-edge-id rule exactly."""
    source = """
    kernel m(x: f64[V, K], W: f64[K, N]) -> (hi: f64[V, N], lo: f64[V, N], y: f64[E, N], d: f64[E]) {
        y[e] = x[u] @ W
        d[e] = dot(x[u] @ W, x[v] @ W)
        hi[v] = argmax(x[u] @ W)
        lo[v] = argmin(tanh(x[u] @ W))
    }
    """
    rng = np.random.default_rng(7)
    v = 40  # 699 edges: BLAS's last rows (past its blocks of 4 or 8) differ from equal ones by an ulp
    x = np.tile(rng.standard_normal(k), (v, 1))  # every vertex alike: every in-edge ties
    W = rng.standard_normal((k, n))
    src, dst = rng.integers(0, v, 699), rng.integers(0, v, 699)
    graph = gnnc.Graph.from_coo(src, dst, num_vertices=v)
    got = gnnc.compile(source, target="reference").m(graph, x, W)
    assert np.all(got["y"] == got["y"][0]) and np.all(got["d"] == got["d"][0])
    first = np.full(v, -1.0)
    for e in range(graph.num_edges - 1, -1, -1):
        first[dst[e]] = e
    for name in ("hi", "lo"):
        np.testing.assert_array_equal(got[name], np.repeat(first[:, None], n, axis=1))
