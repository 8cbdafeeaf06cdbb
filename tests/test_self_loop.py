"""`self_loop(e)`: 1 on an edge whose source id is its destination id, else 0; compiled = reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gnnc
from gnnc.api import compile_grad
from tests.helpers import assert_matches, numeric_grad
from tests.strategies import graphs

SOURCE = """
kernel split(x: f64[V, F]) -> f64[V, F] {
    out[v] = sum((1 - self_loop(e)) * x[u]) + sum(self_loop(e)) * x[v] * 0.5
}
kernel flags(w: f64[E]) -> f64[E] {
    out[e] = w[e] * self_loop(e)
}
kernel scores(x: f64[V], y: f64[V]) -> f64[V] {
    s[e] = self_loop(e) * 2 + x[u] * y[v]
    out[v] = sum(softmax(s[e]) * x[u])
}
"""

# self loops (2->2 twice, 0->0), duplicates (0->1 twice), a vertex with no in-edges (3), an isolated one (4)
GRAPH = gnnc.Graph(np.array([[0, 1, 2, 2, 3, 0, 2, 0, 0], [1, 2, 2, 2, 1, 1, 0, 0, 1]]), num_vertices=5)


def test_self_loop_by_hand():
    w = np.arange(1.0, GRAPH.num_edges + 1)
    want = w * (GRAPH.src == GRAPH.dst)
    for target in ("cpu", "reference", "cuda-emulation"):
        np.testing.assert_array_equal(gnnc.compile(SOURCE, kernels=["flags"], target=target).flags(GRAPH, w), want)
    x = np.arange(10.0).reshape(5, 2)
    by_hand = np.zeros_like(x)
    for s, d in zip(GRAPH.src, GRAPH.dst):
        by_hand[d] += 0.5 * x[d] if s == d else x[s]
    np.testing.assert_allclose(gnnc.compile(SOURCE, kernels=["split"]).split(GRAPH, x), by_hand)


def test_ids_past_float_precision_are_told_apart():
    """2^24 and 2^24 + 1 are one float32: the flag compares the ids, not their floats."""
    n = (1 << 24) + 2
    graph = gnnc.Graph.from_coo(np.array([n - 2, n - 1, 7]), np.array([n - 1, n - 1, 7]), num_vertices=n)
    kernel = gnnc.compile(SOURCE.replace("f64", "f32"), kernels=["flags"]).flags
    np.testing.assert_array_equal(kernel(graph, np.ones(3, np.float32)), [0.0, 1.0, 1.0])


@pytest.mark.parametrize("schedule", [None, "partition src 2", "sort degree", "vectorize edges 8", "vectorize 2"])
def test_self_loop_under_schedules(schedule):
    name = "scores" if schedule == "vectorize edges 8" else "split"
    try:
        kernel = getattr(gnnc.compile(SOURCE, kernels=[name], schedule=schedule), name)
    except gnnc.CompileError as exc:  # a schedule the kernel cannot take says so
        pytest.fail(f"{schedule}: {exc}")
    rng = np.random.default_rng(1)
    args = {
        p.name: rng.normal(size=(GRAPH.num_vertices,) + ((2,) if name == "split" else ()))
        for p in kernel.signature.params
    }
    want = getattr(gnnc.compile(SOURCE, kernels=[name], target="reference"), name)(GRAPH, **args)
    assert_matches(kernel(GRAPH, **args), want, GRAPH, np.float64)


@given(graph=graphs(max_vertices=20, max_edges=80), seed=st.integers(0, 2**31 - 1))
def test_self_loop_matches_the_reference_on_random_graphs(graph, seed):
    """Hypothesis graphs: empty, isolated vertices, self loops, duplicates, a hub, bipartite."""
    rng = np.random.default_rng(seed)
    module = gnnc.compile(SOURCE)
    reference = gnnc.compile(SOURCE, target="reference")
    w = rng.normal(size=graph.num_edges)
    np.testing.assert_array_equal(module.flags(graph, w), reference.flags(graph, w))
    if graph.bipartite:
        return  # split and scores read x at v and at u: square graphs (docs/language.md)
    x = rng.normal(size=(graph.num_vertices, 3))
    assert_matches(module.split(graph, x), reference.split(graph, x), graph, np.float64)


@pytest.mark.parametrize("name", ["split", "scores"])
def test_self_loop_gradients(name):
    """Its derivative is 0: the gradients match finite differences of the reference."""
    rng = np.random.default_rng(2)
    forward = getattr(gnnc.compile(SOURCE, kernels=[name], target="reference"), name)
    kernel = getattr(gnnc.compile(SOURCE, kernels=[name]), name)
    args = {
        p.name: rng.uniform(0.2, 1.5, size=(GRAPH.num_vertices,) + ((2,) if name == "split" else ()))
        for p in kernel.signature.params
    }
    gout = rng.normal(size=forward(GRAPH, **args).shape)
    compiled = compile_grad(SOURCE, name)(GRAPH, gout=gout, **args)
    reference = compile_grad(SOURCE, name, target="reference")(GRAPH, gout=gout, **args)
    for p in args:
        want = numeric_grad(lambda **a: forward(GRAPH, **a), args, p, gout)
        np.testing.assert_allclose(reference[p], want, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(compiled[p], reference[p], rtol=1e-10, atol=1e-12)


def test_self_loop_reads_only_the_edge():
    with pytest.raises(gnnc.SourceError, match="self_loop takes the edge index e"):
        gnnc.compile("kernel k(x: f32[V]) -> f32[V] {\n    out[v] = sum(self_loop(u) * x[u])\n}\n")
    with pytest.raises(gnnc.SourceError, match="reads an edge outside an aggregation"):
        gnnc.compile("kernel k(x: f32[V]) -> f32[V] {\n    out[v] = self_loop(e) + x[v]\n}\n")
