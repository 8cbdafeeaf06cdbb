"""Weight gradients' dense products on gnnc's workers (runtime/products.py): exact, the same for
every thread count, numpy's BLAS thread count restored."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gnnc
from gnnc.graph import plans
from gnnc.runtime import gradient, products


def _graph(edges: int, relations: int, seed: int = 0) -> gnnc.Graph:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, 50, (2, edges))
    types = rng.integers(0, max(1, relations - 1), edges)  # the last relation has no edges
    return gnnc.Graph.from_coo(src, dst, num_vertices=50, edge_type=types, num_relations=relations)


@pytest.mark.parametrize("end", ["src", "dst", "other"])
@pytest.mark.parametrize("blocks", [False, True])
def test_relation_products_match_a_float64_sum_and_ignore_the_thread_count(monkeypatch, blocks, end):
    """Per relation, sums over edges of outer(factor[end], row); the graph's own src / dst go
    by (vertex, relation) pairs (rows summed per pair first), another array by edge."""
    monkeypatch.setattr(products, "CHUNK_ROWS", 37)  # several items per relation
    graph = _graph(700, 5)
    rng = np.random.default_rng(1)
    lead = (3,) if blocks else ()
    factor = rng.standard_normal((50, *lead, 4)).astype(np.float32)
    rows = rng.standard_normal((700, *lead, 6)).astype(np.float32)
    ends = {"src": graph.src, "dst": graph.dst, "other": graph.src.copy()}[end]
    got = [gradient._relation_products(factor, rows, ends, graph, blocks=len(lead), threads=t) for t in (1, 2, 3)]
    assert all(np.array_equal(got[0], g) for g in got[1:])
    f64, g64 = factor.astype(np.float64), rows.astype(np.float64)
    expected = np.zeros((5, *lead, 4, 6))
    for e in range(700):
        r, u = graph.edge_type[e], ends[e]
        expected[r] += np.einsum("...k,...n->...kn", f64[u], g64[e])
    if not blocks:
        expected = expected.reshape(5, 4, 6)
    np.testing.assert_allclose(got[0], expected, rtol=1e-4, atol=1e-4)
    assert not got[0][4].any()


def test_dense_product_over_chunks(monkeypatch):
    monkeypatch.setattr(products, "CHUNK_ROWS", 100)
    rng = np.random.default_rng(2)
    f, g = rng.standard_normal((1001, 7)), rng.standard_normal((1001, 5))
    got = [products.product(f, g, t) for t in (1, 2, 4)]
    assert all(np.array_equal(got[0], x) for x in got[1:])
    np.testing.assert_allclose(got[0], f.T @ g, rtol=1e-12)
    assert products.product(f[:0], g[:0], 2).shape == (7, 5)


def test_blas_thread_count_is_restored():
    controls = products.blas_controls()
    if controls is None:
        pytest.skip("numpy's BLAS is not an OpenBLAS gnnc can find")
    get, _ = controls
    before = get()
    with products.single_threaded_blas():
        assert get() == 1
    assert get() == before


def test_items_run_in_a_forked_child():
    products.run_items(lambda i: i, [1, 1], 2)  # the pool exists in the parent
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        ok = products.run_items(lambda i: i * 2, [1, 1, 1], 2) == [0, 2, 4]
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("side", ["src", "dst"])
@pytest.mark.parametrize("blocks", [False, True])
def test_pair_products_match_a_float64_sum_and_ignore_the_thread_count(monkeypatch, blocks, side):
    """Per relation, sums over its (vertex, relation) pairs of outer(factor[vertex], pair row)."""
    monkeypatch.setattr(products, "CHUNK_ROWS", 7)  # several items per relation
    graph = _graph(700, 5)
    pairs = plans.relation_pairs(graph, side)
    rng = np.random.default_rng(1)
    lead = (3,) if blocks else ()
    factor = rng.standard_normal((50, *lead, 4)).astype(np.float32)
    sums = rng.standard_normal((pairs.num_pairs, *lead, 6)).astype(np.float32)
    got = [gradient._pair_products(factor, sums, pairs, blocks=len(lead), threads=t) for t in (1, 2, 3)]
    assert all(np.array_equal(got[0], g) for g in got[1:])
    expected = np.zeros((5, *lead, 4, 6))
    for p in range(pairs.num_pairs):
        f, g = factor[pairs.vertex[p]].astype(np.float64), sums[p].astype(np.float64)
        expected[pairs.rel[p]] += np.einsum("...k,...n->...kn", f, g)
    if not blocks:
        expected = expected.reshape(5, 4, 6)
    np.testing.assert_allclose(got[0], expected, rtol=1e-4, atol=1e-4)
    assert not got[0][4].any()  # a relation without edges


@pytest.mark.parametrize("side", ["src", "dst"])
def test_pair_graph_keeps_edge_ids_and_types_and_ends_at_pairs(side):
    graph = gnnc.Graph.from_coo([0, 1, 1, 2, 0], [1, 2, 2, 0, 1], shape=(3, 3), edge_type=[0, 1, 1, 1, 0])
    pairs = plans.relation_pairs(graph, side)
    paired = plans.pair_graph(graph, side)
    assert paired is plans.pair_graph(graph, side)  # built once
    others = graph.dst if side == "src" else graph.src
    np.testing.assert_array_equal(paired.src, others)
    np.testing.assert_array_equal(paired.dst, pairs.edge_pair)
    np.testing.assert_array_equal(paired.edge_type, graph.edge_type)
    assert (paired.num_src, paired.num_dst, paired.num_relations) == (3, pairs.num_pairs, 2)
    ends = graph.src if side == "src" else graph.dst
    np.testing.assert_array_equal(pairs.vertex[paired.dst], ends)  # each edge's pair is its end's
