"""Warm calls run prepared (runtime/prepared.py): the same results as the checked way, and
everything the prepared form cannot vouch for still takes the checked way."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import gnnc
from gnnc.runtime import prepared
from tests.helpers import assert_matches
from tests.strategies import random_inputs


def _graph(seed: int, v: int = 200, e: int = 2000) -> gnnc.Graph:
    rng = np.random.default_rng(seed)
    return gnnc.Graph.from_coo(rng.integers(0, v, e), rng.integers(0, v, e), num_vertices=v)


#: A softmax over in-edges: per-vertex temps and a scratch workspace, which warm calls keep.
SOURCE = """
kernel att(h: f32[V, F], el: f32[V], er: f32[V]) -> f32[V, F] {
    s[e] = leaky_relu(el[u] + er[v], 0.2)
    out[v] = sum(softmax(s[e]) * h[u])
}
"""


@pytest.fixture(scope="module")
def gat():
    return gnnc.compile(SOURCE).att


@pytest.fixture(scope="module")
def gat_reference():
    return gnnc.compile(SOURCE, target="reference").att


def _entries(graph: gnnc.Graph) -> list[prepared.Prepared]:
    return [v for v in graph.plans.values() if isinstance(v, prepared.Prepared)]


def _positional(kernel, inputs: dict) -> list[np.ndarray]:
    return [inputs[p.name] for p in kernel.signature.params]


@pytest.mark.parametrize("threads", [1, 3])
def test_warm_calls_match_the_reference(gat, gat_reference, threads):
    # kept workspace buffers must not carry anything from one call into the next
    graph = _graph(0)
    want = gat_reference(graph, **random_inputs(gat.signature, graph, {"F": 8}, np.float32, 1))
    for seed in (1, 2, 1):
        inputs = random_inputs(gat.signature, graph, {"F": 8}, np.float32, seed)
        got = gat(graph, *_positional(gat, inputs), threads=threads)
        if seed == 1:
            assert_matches(got, want, graph, np.float32)
    assert len(_entries(graph)) == 1


def test_one_entry_per_shape_and_threads(gat):
    graph = _graph(1)
    for f, threads in ((8, 1), (8, 1), (16, 1), (8, 2), (16, 1)):
        gat(graph, *_positional(gat, random_inputs(gat.signature, graph, {"F": f}, np.float32, 0)), threads=threads)
    assert len(_entries(graph)) == 3
    other = _graph(2)
    gat(other, *_positional(gat, random_inputs(gat.signature, other, {"F": 8}, np.float32, 0)), threads=1)
    assert len(_entries(graph)) == 3 and len(_entries(other)) == 1


def test_what_it_cannot_vouch_for_takes_the_checked_way(gat):
    graph = _graph(3)
    inputs = random_inputs(gat.signature, graph, {"F": 8}, np.float32, 0)
    args = _positional(gat, inputs)
    want = gat(graph, *args, threads=1)
    gat(graph, *args, threads=1)
    # the same shapes, float64: refused with the checked way's message
    with pytest.raises(gnnc.ArgumentError, match="expected float32, got float64"):
        gat(graph, *[a.astype(np.float64) for a in args], threads=1)
    # non-contiguous inputs are copied by the check, and give the same result
    strided = [np.asfortranarray(a) if a.ndim == 2 else a for a in args]
    np.testing.assert_array_equal(gat(graph, *strided, threads=1), want)
    # keywords and out= take the checked way too
    np.testing.assert_array_equal(gat(graph, **inputs, threads=1), want)
    out = np.empty_like(want)
    assert gat(graph, *args, out=out, threads=1) is out
    np.testing.assert_array_equal(out, want)
    # wrong shapes never find an entry
    with pytest.raises(gnnc.ArgumentError):
        gat(graph, args[0][:-1], *args[1:], threads=1)
    assert len(_entries(graph)) == 1


def test_a_collected_variant_sends_the_call_the_checked_way(gat):
    graph = _graph(4)
    args = _positional(gat, random_inputs(gat.signature, graph, {"F": 8}, np.float32, 0))
    want = gat(graph, *args, threads=1)
    (entry,) = _entries(graph)

    class Gone:
        pass

    gone = Gone()
    entry.runner = weakref.ref(gone)
    del gone
    np.testing.assert_array_equal(gat(graph, *args, threads=1), want)


def test_threads_none_follows_omp_num_threads(gat, monkeypatch):
    graph = _graph(5)
    args = _positional(gat, random_inputs(gat.signature, graph, {"F": 8}, np.float32, 0))
    for n in ("1", "2", "1"):
        monkeypatch.setenv("OMP_NUM_THREADS", n)
        gat(graph, *args)
    assert sorted(e.threads for e in _entries(graph)) == [1, 2]


def _bipartite(seed: int, n_src: int, n_dst: int, e: int) -> gnnc.Graph:
    rng = np.random.default_rng(seed)
    return gnnc.Graph.from_coo(rng.integers(0, n_src, e), rng.integers(0, n_dst, e), shape=(n_src, n_dst))


def _count_checks(monkeypatch) -> list:
    from gnnc.runtime import module

    checks = []
    original = module.prepare_call
    monkeypatch.setattr(module, "prepare_call", lambda *a, **k: checks.append(1) or original(*a, **k))
    return checks


@pytest.mark.parametrize("threads", [1, 2])
def test_new_graphs_reuse_the_layout_of_a_call_shape(gat, gat_reference, monkeypatch, threads):
    """Mini-batch blocks: each call a new graph of other sizes, the same feature widths. After
    the first, a call is laid out from the last one of its shape (`Kernel._run_as_before`):
    no check, and every graph-sized part (results, temps, CSR, counts) its own graph's."""
    checks = _count_checks(monkeypatch)
    sizes = [(300, 40, 900), (120, 90, 500), (300, 40, 1), (500, 7, 3000), (64, 64, 0), (300, 40, 900)]
    for i, (n_src, n_dst, e) in enumerate(sizes):
        graph = _graph(i, n_src, e) if n_src == n_dst else _bipartite(i, n_src, n_dst, e)
        h = np.random.default_rng(i).random((n_src, 8), dtype=np.float32)
        el = np.random.default_rng(i + 1).random(n_src, dtype=np.float32)
        er = np.random.default_rng(i + 2).random(n_dst, dtype=np.float32)
        if graph.bipartite:  # att reads el at u and er at v: rows per source and per destination
            got = gat(graph, h, el, er, threads=threads)
            want = gat_reference(graph, h=h, el=el, er=er)
        else:
            got = gat(graph, h, el, np.resize(er, n_src), threads=threads)
            want = gat_reference(graph, h=h, el=el, er=np.resize(er, n_src))
        assert got.shape == (n_dst, 8)
        assert_matches(got, want, graph, np.float32)
    assert len(checks) <= 1, "only the first call takes the checked way (none: an earlier test's shape)"


@pytest.mark.parametrize("threads", [1, 2])
def test_a_bound_call_lays_out_what_the_checked_way_would(gat, threads):
    """Graphs of one class share one `Bound` of the call shape (the class decision's arguments
    in place), and the call it lays out for each graph holds the values, addresses and
    workspace that `prepared.make` lays out for that graph from its own decision."""
    from gnnc.autotune.decision import decide
    from gnnc.graph import plans

    args = (np.ones((300, 8), np.float32), np.ones(300, np.float32), np.ones(40, np.float32))
    gat(_bipartite(20, 300, 40, 900), *args, threads=threads)  # the shape's layout and class decision
    decisions = []
    for seed, e in ((21, 700), (22, 1100), (23, 0)):
        graph = _bipartite(seed, 300, 40, e)
        gat(graph, *args, threads=threads)
        (bound,) = _entries(graph)
        assert not bound.unread, "laid out with its addresses"
        decided = decide(gat, graph, {"F": 8}, threads)
        outputs = [np.empty(shape, np.float32) for shape in bound.results]
        made = prepared.make(bound.runner(), decided, plans.build(graph, decided.plans), outputs)
        made(list(args), outputs)  # its first call reads the fixed addresses
        assert bound.values == made.values
        assert [p[:2] for p in bound.pointers] == [p[:2] for p in made.pointers]
        assert all(a is b for (_, s, a), (_, _, b) in zip(bound.pointers, made.pointers) if s == prepared._FIXED)
        assert (bound.workspace, bound.threads, bound.per_call) == (made.workspace, made.threads, made.per_call)
        assert str(bound.reason) == decided.reason, "the line a call logs, formatted when logged"
        np.testing.assert_array_equal(gat(graph, *args, threads=threads), outputs[0])
        decisions.append(bound.keep[1])
    assert decisions[0] is decisions[1], "graphs of one class: one class decision, one Bound"


def test_new_graphs_from_several_python_threads_at_once(gat, gat_reference):
    """Blocks from a pool of Python threads (the native code runs without the GIL): each call
    on its new graph gets its own layout, workspace and results, and matches the reference."""
    from concurrent.futures import ThreadPoolExecutor

    def run(seed: int) -> tuple:
        n_src, n_dst = (300, 40) if seed % 3 else (64, 64)
        graph = _bipartite(seed, n_src, n_dst, 200 + 37 * seed) if seed % 3 else _graph(seed, 64, 300)
        rng = np.random.default_rng(seed)
        h = rng.random((n_src, 8), dtype=np.float32)
        el, er = rng.random(n_src, dtype=np.float32), rng.random(n_dst, dtype=np.float32)
        got = gat(graph, h, el, er, threads=1 + seed % 2)
        return got, gat_reference(graph, h=h, el=el, er=er), graph

    with ThreadPoolExecutor(4) as pool:
        for got, want, graph in pool.map(run, range(40, 100)):
            assert_matches(got, want, graph, np.float32)


def test_a_new_graph_the_inputs_do_not_fit_takes_the_checked_way(gat, monkeypatch):
    checks = _count_checks(monkeypatch)
    first = _bipartite(0, 300, 40, 900)
    gat(first, np.ones((300, 8), np.float32), np.ones(300, np.float32), np.ones(40, np.float32), threads=1)
    before = len(checks)
    other = _bipartite(1, 200, 40, 900)  # 200 sources: h's 300 rows do not fit
    with pytest.raises(gnnc.ArgumentError, match="leading axis"):
        gat(other, np.ones((300, 8), np.float32), np.ones(300, np.float32), np.ones(40, np.float32), threads=1)
    assert len(checks) == before + 1


def test_a_new_graph_decided_otherwise_is_laid_out_anew():
    """A graph past the default schedule's small class runs another variant: its own layout."""
    kernel = gnnc.compile("kernel s(x: f32[V, F]) -> f32[V, F] { out[v] = mean(x[u]) }").s
    reference = gnnc.compile("kernel s(x: f32[V, F]) -> f32[V, F] { out[v] = mean(x[u]) }", target="reference").s
    runners = []
    for i, e in enumerate((500, 40_000, 700, 40_000)):
        graph = _bipartite(i, 2000, 600, e)
        x = np.random.default_rng(i).random((2000, 8), dtype=np.float32)
        assert_matches(kernel(graph, x, threads=1), reference(graph, x=x), graph, np.float32)
        runners.append([p.runner() for p in _entries(graph)])
    # the classes alternate: each graph runs its class's kernel, never the other's layout
    assert runners[0] == runners[2] and runners[1] == runners[3] and runners[0] != runners[1]


def test_a_kept_layout_does_not_hold_its_graph_alive(gat):
    """What a kernel keeps for calls on new graphs holds none of the graph's arrays: a large
    graph's plans (its CSR, partitions) go with the graph."""
    graph = _bipartite(5, 300, 40, 900)
    gat(graph, np.ones((300, 8), np.float32), np.ones(300, np.float32), np.ones(40, np.float32), threads=1)
    in_src = weakref.ref(graph.in_src)
    kept = [call for call, _, _ in gat._layouts.values()]
    assert kept and all(v is None or not isinstance(v, np.ndarray) for c in kept for v in c.values)
    assert all(index is None for c in kept for _, source, index in c.pointers if source == prepared._FIXED)
    # nor their addresses: a layout's fixed places are empty until `rebound` fills them
    assert all(c.values[at] is None for c in kept for at, source, _ in c.pointers if source == prepared._FIXED)
    del graph
    assert in_src() is None


def test_a_laid_out_call_reads_its_fixed_arrays_addresses_once(gat):
    """A prepared call's graph arrays are in place as addresses (read when it is laid out, for
    every later call), and they are the addresses of the arrays the call keeps."""
    graph = _bipartite(6, 300, 40, 900)
    args = (np.ones((300, 8), np.float32), np.ones(300, np.float32), np.ones(40, np.float32))
    first = gat(graph, *args, threads=1)
    for call in _entries(graph):
        fixed = [(at, array) for at, source, array in call.pointers if source == prepared._FIXED]
        assert fixed and all(call.values[at] == array.ctypes.data for at, array in fixed)
        assert {at for at, _, _ in call.per_call}.isdisjoint(at for at, _ in fixed)
    np.testing.assert_array_equal(gat(graph, *args, threads=1), first)  # warm: from those addresses
