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
