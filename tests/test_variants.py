"""A module's compiled variants live in a bounded LRU (gnnc/runtime/variants.py).

Every new feature size can make a variant (the default heuristic compiles
the size in); the issue saw 25 sizes keep 25 variants, and their memory,
for the process's life. Now a module keeps `MAX_VARIANTS`; an evicted
variant is dropped and its shared object unloaded once nothing refers to
it, and a decision cached on a graph for an evicted variant is made again.
What a variant holds is its loaded library: the tests count the libraries
mapped (/proc/self/maps) and the variant objects alive.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.driver import compiler
from gnnc.runtime import variants
from tests.helpers import assert_matches

SOURCE = """
kernel lru_gcn(x: f32[V, F], w: f32[E]) -> f32[V, F] {
    out[v] = sum(w[e] * x[u]) + x[v]
}
"""

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="counts libraries in /proc/self/maps")


def loaded_libraries() -> int:
    """gnnc's kernel objects mapped in this process (each load maps a memfd named after its file;
    the graph layer's helper, loaded with the first graph, is not one)."""
    maps = Path("/proc/self/maps").read_text().splitlines()
    names = {line.split()[-2] for line in maps if "memfd:gnnc:" in line and "group_edges" not in line}
    return len(names)


def graph_and_weights(n: int = 300, e: int = 3000):
    rng = np.random.default_rng(0)
    graph = gnnc.Graph(rng.integers(0, n, size=(2, e)), num_vertices=n)
    return graph, rng.standard_normal(e).astype(np.float32)


def features(graph: gnnc.Graph, f: int) -> np.ndarray:
    return np.random.default_rng(f).standard_normal((graph.num_vertices, f)).astype(np.float32)


def check(module, graph, x, w, **options) -> None:
    want = gnnc.compile(SOURCE, target="reference").lru_gcn(graph, x=x, w=w)
    assert_matches(module.lru_gcn(graph, x=x, w=w, **options), want, graph, np.float32)


def test_a_module_keeps_its_most_recent_variants(monkeypatch):
    monkeypatch.setattr(variants, "MAX_VARIANTS", 2)
    gc.collect()
    before = loaded_libraries()
    module = gnnc.compile(SOURCE)
    graph, w = graph_and_weights()
    evicted: list[weakref.ref] = []
    for f in (3, 4, 5, 6):
        check(module, graph, features(graph, f), w, schedule=f"specialize F {f}")
        assert len(module.lru_gcn._variants) <= 2
        evicted += [weakref.ref(v) for v in module.lru_gcn._variants.values()]
    assert list(module.lru_gcn._variants) == ["specialize F 5", "specialize F 6"]
    gc.collect()
    alive = [r() for r in evicted if r() is not None]
    assert {v._abi.sizes["F"] for v in alive} == {5, 6}, "the evicted variants were released"
    assert loaded_libraries() - before == 3, "the module and its two variants, no more"
    # a graph's decision for an evicted variant is made again: the variant comes back from the compile cache
    calls = []
    real = compiler.compile_source
    monkeypatch.setattr(compiler, "compile_source", lambda *a, **k: calls.append(1) or real(*a, **k))
    check(module, graph, features(graph, 3), w, schedule="specialize F 3")
    assert calls == [] and list(module.lru_gcn._variants) == ["specialize F 6", "specialize F 3"]


def test_kernels_of_a_module_share_its_bound(monkeypatch):
    monkeypatch.setattr(variants, "MAX_VARIANTS", 3)
    two = SOURCE + SOURCE.replace("lru_gcn", "lru_other").replace("+ x[v]", "- x[v]")
    module = gnnc.compile(two)
    graph, w = graph_and_weights(60, 400)
    for f in (2, 3):
        x = features(graph, f)
        module.lru_gcn(graph, x, w, schedule=f"specialize F {f}")
        module.lru_other(graph, x, w, schedule=f"specialize F {f}")
    assert len(module.lru_gcn._variants) + len(module.lru_other._variants) == 3
    assert list(module.lru_gcn._variants) == ["specialize F 3"]


@pytest.mark.slow
def test_memory_stays_bounded_over_25_feature_sizes():
    """The issue's case, with the default heuristic picking a variant per feature size
    (`vectorize F`): 25 sizes, at most MAX_VARIANTS variants and libraries held."""
    gc.collect()
    before = loaded_libraries()
    module = gnnc.compile(SOURCE)
    graph, w = graph_and_weights()
    sizes = range(8, 33)
    kept: list[weakref.ref] = []
    seen: set[str] = set()
    for f in sizes:
        module.lru_gcn(graph, features(graph, f), w)
        kept += [weakref.ref(v) for v in module.lru_gcn._variants.values()]
        seen |= set(module.lru_gcn._variants)
        assert len(module.lru_gcn._variants) <= variants.MAX_VARIANTS
    assert len(seen) > variants.MAX_VARIANTS, f"the sizes made {len(seen)} variants: too few to evict any"
    gc.collect()
    alive = {id(r()) for r in kept if r() is not None}
    assert len(alive) == variants.MAX_VARIANTS
    assert loaded_libraries() - before == 1 + variants.MAX_VARIANTS
    # every size still runs right, evicted ones compiled again from the cache
    for f in (8, 20, 32):
        check(module, graph, features(graph, f), w)
    assert len(module.lru_gcn._variants) <= variants.MAX_VARIANTS
