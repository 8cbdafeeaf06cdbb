"""Edge values the loop lowering computes into scratch (conversion/graph_to_loop/values.py):
random kernels that read computed values at permuted indices (an `outer`'s right operand, a
broadcast operand under `transpose`) and costly values several nests share, forward and
gradients, against the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc.api import compile_grad
from tests.strategies import graphs

#: Per-head, per-layer edge values made from the scores `s[e]` ([H, L]); all finite for any input.
_COMPUTED = [
    "exp(tanh(s[e]))",
    "s[e] / (1 + abs(s[e]))",
    "tanh(s[e]) * exp(-abs(s[e]))",
    "sqrt(1 + abs(s[e])) * w[e]",
    "exp(tanh(s[e])) / (1 + dot(exp(tanh(s[e])), one))",
]

#: Results reading `a[e]` ([H, L]) at permuted indices, or in several nests.
_RESULTS = [
    "sum(dot(val[u], outer(oned, a[e])))",
    "sum(w[e] * dot(val[u], outer(oned, a[e] * a[e])))",
    "sum(dot(val[u], transpose(a[e] * k[u])))",
    "sum(dot(val[u], transpose(exp(tanh(a[e])) * k[u])) + dot(val[u], outer(oned, a[e])))",
    "sum(dot(exp(a[e]), one) * dot(val[u], outer(oned, exp(a[e]))))",
    "sum(softmax(dot(a[e], one)) * dot(val[u], outer(oned, a[e])))",
    "mean(dot(val[u], outer(oned, a[e] / (1 + dot(a[e], one)))))",
]


def _source(computed: str, result: str) -> str:
    return (
        "kernel k(q: f64[V, H, D], k: f64[V, H, L, D], val: f64[V, H, D, L], w: f64[E], one: f64[H, L], "
        "oned: f64[H, D]) -> f64[V, H, D] {\n"
        "    s[e] = dot(k[u], outer(one, q[v])) / 4.0\n"
        f"    a[e] = {computed}\n"
        f"    out[v] = {result}\n"
        "}\n"
    )


def _kernels() -> st.SearchStrategy[str]:
    return st.builds(_source, st.sampled_from(_COMPUTED), st.sampled_from(_RESULTS))


def _inputs(graph: gnnc.Graph, heads: int, layers: int, d: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n, m = graph.num_vertices, graph.num_edges
    return {
        "q": rng.uniform(-1, 1, (n, heads, d)),
        "k": rng.uniform(-1, 1, (n, heads, layers, d)),
        "val": rng.uniform(-1, 1, (n, heads, d, layers)),
        "w": rng.uniform(-1, 1, m),
        "one": np.ones((heads, layers)),
        "oned": rng.uniform(0.5, 1.5, (heads, d)),
    }


def test_the_templates_are_kernels():
    """Every pair the strategy draws from is a valid kernel (a typo would fail every draw of it)."""
    for computed in _COMPUTED:
        for result in _RESULTS:
            gnnc.compile(_source(computed, result), target="reference")


@settings(max_examples=min(10, settings().max_examples))
@given(
    source=_kernels(),
    graph=graphs(max_vertices=14, max_edges=50),
    sizes=st.sampled_from([(1, 1, 1), (2, 3, 4), (3, 2, 5)]),
    threads=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
)
def test_forward_matches_reference(source, graph, sizes, threads, seed):
    inputs = _inputs(graph, *sizes, seed)
    got = gnnc.compile(source).k(graph, threads=threads, **inputs)
    want = gnnc.compile(source, target="reference").k(graph, **inputs)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * (1 + np.abs(want).max(initial=0)))


@settings(max_examples=min(6, settings().max_examples))
@given(
    source=_kernels(),
    graph=graphs(max_vertices=14, max_edges=50),
    mapping=st.sampled_from(
        ["map thread_vertex", "map warp_vertex tile 2", "map thread_edge group 3", "map warp_edge"]
    ),
    seed=st.integers(0, 2**31 - 1),
)
@pytest.mark.slow
def test_cuda_mappings_match_reference(source, graph, mapping, seed):
    """The cuda grids keep these values inline (convert_graph_to_loop.SCRATCH_VALUE_TARGETS): a
    warp mapping's lanes split the feature loops, and map-threads refused every warp mapping of
    a kernel with them in scratch. Each mapping compiles and matches, in the CPU emulation."""
    inputs = _inputs(graph, 2, 3, 4, seed)
    kernel = gnnc.compile(source, target="cuda-emulation", schedule=mapping).k
    want = gnnc.compile(source, target="reference").k(graph, **inputs)
    got = kernel(graph, **inputs)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * (1 + np.abs(want).max(initial=0)))


# each example compiles its own gradient kernels: few of them
@settings(max_examples=min(4, settings().max_examples))
@given(
    source=_kernels(),
    graph=graphs(max_vertices=10, max_edges=30),
    sizes=st.sampled_from([(1, 2, 1), (2, 3, 2)]),
    seed=st.integers(0, 2**31 - 1),
)
@pytest.mark.slow
def test_gradients_match_reference(source, graph, sizes, seed):
    inputs = _inputs(graph, *sizes, seed)
    rng = np.random.default_rng(seed + 1)
    gout = rng.normal(size=(graph.num_vertices, sizes[0], sizes[2]))
    got = compile_grad(source, "k")(graph, gout=gout, **inputs)
    want = compile_grad(source, "k", target="reference")(graph, gout=gout, **inputs)
    for name in want:
        scale = 1 + np.abs(want[name]).max(initial=0)
        np.testing.assert_allclose(got[name], want[name], rtol=1e-9, atol=1e-9 * scale, err_msg=name)
