"""The default schedule heuristic: what it picks, and that what it picks is right."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gnnc
from gnnc.autotune import heuristic
from gnnc.ir.abi import Lanes, Phase

from .helpers import assert_matches
from .strategies import random_inputs

EXAMPLES = Path(__file__).parent.parent / "examples"
MIB = 1 << 20


def fake_graph(v: int, e: int) -> SimpleNamespace:
    return SimpleNamespace(num_vertices=v, num_edges=e)


@pytest.mark.parametrize(
    "v,e,f,want",
    [
        (131072, 2097152, 512, "partition src 4"),  # rmat-17: rows = 8 LLC
        (131072, 2097152, 256, "partition src 2"),  # rows = 4 LLC
        (131072, 2097152, 128, "prefetch 16"),  # rows = 2 LLC: partitioning measured slower
        (65536, 1048576, 256, None),
        (258569, 1026264, 512, None),  # mdual: mean degree 4, measured slower
        (1 << 22, 1 << 26, 512, "partition src 8"),  # capped
        (0, 0, 64, None),
    ],
)
def test_partition_rule_follows_the_measurements(v, e, f, want):
    assert heuristic.default_directives(fake_graph(v, e), 4 * f, llc_bytes=32 * MIB) == want


def test_source_row_bytes_counts_the_inputs_read_at_sources():
    module = gnnc.compile(EXAMPLES / "gat.gnn")
    sig = module.gat.signature  # h[u]: [V, H, F], el[u]: [V, H]; er[v] is read at destinations
    assert heuristic.source_row_bytes(sig, {"H": 4, "F": 8}, 4) == 4 * (32 + 4)
    attention = gnnc.compile(EXAMPLES / "attention.gnn").attention.signature  # q[v], k[u]
    assert heuristic.source_row_bytes(attention, {"H": 4, "D": 32}, 4) == 4 * 128


def test_a_kernel_gathering_nothing_at_sources_may_still_vectorize():
    got = heuristic.default_directives(
        fake_graph(65536, 1 << 20), 0, llc_bytes=32 * MIB, phases=ONE_WALK, dims={"F": 32}, accumulates=True
    )
    assert got == "vectorize 32\nspecialize F 32"


@pytest.mark.parametrize(
    "e,row_bytes,dims,want",
    [
        (1 << 20, 4 * 36, {"H": 4, "F": 8}, "prefetch 24\nspecialize H 4 F 8"),
        (1 << 14, 4 * 128, {"F": 128}, "prefetch 16\nspecialize F 128"),
        ((1 << 14) - 1, 4 * 128, {"F": 128}, None),  # a variant's compile would not pay
        (1 << 20, 4 * 260, {"H": 4, "F": 64}, "specialize H 4 F 64"),  # gat H=4 F=64: 1.16-1.35x (Xeon)
        (1 << 20, 4 * 2052, {"H": 4, "F": 512}, None),  # gat H=4 F=512: 0.98-1.01x
        (1 << 20, 4 * 32, {}, "prefetch 24"),  # sizes written in the source
    ],
)
def test_specialize_rule_follows_the_measurements(e, row_bytes, dims, want):
    got = heuristic.default_directives(
        fake_graph(e // 4, e), row_bytes, llc_bytes=32 * MIB, phases=[Phase("H", 3)], dims=dims
    )
    assert got == want


@pytest.mark.parametrize(
    "row_bytes,distance",
    [
        (4, 24),
        (128, 24),
        (4 * 64, 24),
        (4 * 80, 24),
        (4 * 86, 23),
        (4 * 128, 16),
        (4 * 256, 8),
        (4 * 512, 8),
    ],
)
def test_prefetch_distance_keeps_about_8_kib_of_rows_in_flight(row_bytes, distance):
    assert heuristic.prefetch_distance(row_bytes) == distance
    got = heuristic.default_directives(
        fake_graph(1 << 18, 1 << 20), row_bytes, llc_bytes=32 * MIB
    )  # degree 4: no partitions
    assert got == (f"prefetch {distance}" if distance != 8 else None)


def test_a_large_call_runs_the_picked_prefetch_distance():
    gcn = gnnc.compile(EXAMPLES / "gcn.gnn").gcn
    rng = np.random.default_rng(5)
    v, e = 2000, 1 << 14
    graph = gnnc.Graph.from_coo(rng.integers(0, v, e), rng.integers(0, v, e), num_vertices=v)
    inputs = random_inputs(gcn.signature, graph, {"F": 32}, np.float32, 5)
    got = gcn(graph, **inputs)
    assert list(gcn._variants) == ["vectorize 32\nprefetch 24\nspecialize F 32"]
    assert_matches(got, gnnc.compile(EXAMPLES / "gcn.gnn", target="reference").gcn(graph, **inputs), graph, np.float32)


@contextmanager
def small_cache():
    """A last-level cache of 512 bytes, so that small graphs take the partitioned path."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(heuristic.plans, "last_level_cache_bytes", lambda: 512)
        yield


@pytest.fixture
def tiny_cache():
    with small_cache():
        yield


def dense_graph(seed: int, v: int = 100, degree: int = 12) -> gnnc.Graph:
    rng = np.random.default_rng(seed)
    return gnnc.Graph.from_coo(rng.integers(0, v, v * degree), rng.integers(0, v, v * degree), num_vertices=v)


@given(
    seed=st.integers(0, 2**32 - 1),
    f=st.sampled_from((8, 17, 64)),
    kernel=st.sampled_from(("gcn", "sage_max", "sage_mean")),
)
def test_a_call_without_schedule_runs_the_picked_partitioning(seed, f, kernel):
    source = EXAMPLES / f"{kernel}.gnn"
    compiled = getattr(gnnc.compile(source), kernel)
    graph = dense_graph(seed)
    inputs = random_inputs(compiled.signature, graph, {"F": f}, np.float32, seed)
    with small_cache():
        got = compiled(graph, **inputs)
        directives = heuristic.default_directives(graph, 4 * f)
    assert directives is not None and directives.startswith("partition src")
    assert directives in compiled._variants and compiled._variants[directives]._abi.partitions > 1
    want = getattr(gnnc.compile(source, target="reference"), kernel)(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


def test_a_softmax_kernel_is_not_partitioned_by_default(tiny_cache):
    gat = gnnc.compile(EXAMPLES / "gat.gnn").gat
    graph = dense_graph(1)
    inputs = random_inputs(gat.signature, graph, {"H": 2, "F": 16}, np.float32, 1)
    got = gat(graph, **inputs)
    # gat can be partitioned, but measured mixed (heuristic.py): several walks are left alone
    assert gat._variants == {} and gat._refused == set()
    assert_matches(got, gnnc.compile(EXAMPLES / "gat.gnn", target="reference").gat(graph, **inputs), graph, np.float32)


def test_a_kernel_the_pick_cannot_apply_to_runs_as_compiled(tiny_cache, monkeypatch):
    gat = gnnc.compile(EXAMPLES / "gat.gnn").gat
    graph = dense_graph(1)
    inputs = random_inputs(gat.signature, graph, {"H": 2, "F": 16}, np.float32, 1)
    # sliced rows cannot carry a softmax's sum across partitions: the compiler refuses
    monkeypatch.setattr(heuristic, "default_directives", lambda *a, **k: "partition src 2; vectorize 4")
    for _ in range(2):  # refused once, then not asked again
        got = gat(graph, **inputs)
    assert gat._variants == {} and len(gat._refused) == 1
    assert_matches(got, gnnc.compile(EXAMPLES / "gat.gnn", target="reference").gat(graph, **inputs), graph, np.float32)


def test_a_written_schedule_is_kept(tiny_cache):
    for module in (
        gnnc.compile(EXAMPLES / "gcn.gnn", schedule="prefetch 4"),
        gnnc.compile(
            "kernel gcn(x: f32[V, F], w: f32[E]) -> f32[V, F] {\n    out[v] = sum(w[e] * x[u])\n}\n"
            "schedule gcn for cpu { prefetch 16 }\n"
        ),
    ):
        graph = dense_graph(2)
        inputs = random_inputs(module.gcn.signature, graph, {"F": 64}, np.float32, 2)
        module.gcn(graph, **inputs)
        assert module.gcn._variants == {}


ONE_WALK = [Phase("F", 1)]


@pytest.mark.parametrize(
    "phases,f,accumulates,want",
    [
        (ONE_WALK, 32, True, "vectorize 32"),  # rmat-16 gcn: 1.25x
        (ONE_WALK, 16, True, "vectorize 16"),  # 1.33x
        (ONE_WALK, 64, True, "vectorize 64"),  # 1.06-1.35x on four graphs
        (ONE_WALK, 128, True, "vectorize 128"),  # 1.03-1.30x on mdual, rmat-16, copter2; 1.10x over 30 tuning cases
        (ONE_WALK, 256, True, None),  # sixteen registers: not measured, not taken
        (ONE_WALK, 4, True, None),
        ([Phase("F", 3)], 32, True, None),  # gat: 0.57x
        ([Phase("H", 1)], 8, False, None),  # edge-wise attention: 0.88x
        (ONE_WALK * 2, 32, True, None),  # two phases
    ],
)
def test_vectorize_rule_follows_the_measurements(phases, f, accumulates, want):
    # too few edges for the specialize rule, which would add a line
    got = heuristic.default_directives(
        fake_graph(4096, 1 << 13),
        4 * f,
        llc_bytes=32 * MIB,
        phases=phases,
        dims={"F": f, "H": f},
        accumulates=accumulates,
    )
    assert got == want


@given(
    seed=st.integers(0, 2**32 - 1),
    f=st.sampled_from((8, 17, 32, 64, 128)),
    kernel=st.sampled_from(("gcn", "sage_max", "sage_mean", "gin")),
)
def test_a_small_row_runs_vectorized_and_matches_the_reference(seed, f, kernel):
    source = EXAMPLES / f"{kernel}.gnn"
    compiled = getattr(gnnc.compile(source), kernel)
    graph = dense_graph(seed, v=30, degree=6)
    inputs = random_inputs(compiled.signature, graph, {"F": f}, np.float32, seed)
    got = compiled(graph, **inputs)
    assert f"vectorize {f}" in compiled._variants
    want = getattr(gnnc.compile(source, target="reference"), kernel)(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


def degree_graph(degrees: list[int]) -> SimpleNamespace:
    """A stand-in graph with these in-degrees (what the lanes rule reads)."""
    indptr = np.concatenate([[0], np.cumsum(degrees)])
    return SimpleNamespace(
        num_vertices=len(degrees), num_edges=int(indptr[-1]), in_indptr=indptr, plans={}, edges_sorted=False
    )


@pytest.mark.parametrize(
    "degrees,lane_walks,want",
    [
        ([4] * 8192, 2, False),  # mdual-like: 0.72x measured
        ([12] * 2048, 2, True),  # copter2, 4elt: 1.5-1.7x
        ([1] * 8000 + [64] * 300, 2, True),  # R-MAT-like: most edges at hubs
        ([4] * 4096 + [8] * 1024, 2, False),  # 8 in-edges hold a third of them
        ([12] * 2048, 0, False),  # lanes would only weigh rows (gcn_norm): 0.84-1.04x
        ([12] * 1300, 2, False),  # under 16K edges: no variant
    ],
)
def test_edge_lanes_rule_follows_the_measurements(degrees, lane_walks, want):
    got = (
        heuristic.default_directives(
            degree_graph(degrees),
            4 * 33,
            llc_bytes=32 * MIB,
            phases=[Phase("F", 3)],
            dims={"H": 1, "F": 32},
            lane_walks=lane_walks,
        )
        or ""
    )
    assert ("vectorize edges 16" in got.splitlines()) == want


@pytest.mark.slow
def test_a_default_call_of_a_softmax_kernel_on_a_dense_graph_runs_lanes():
    gat = gnnc.compile(EXAMPLES / "gat.gnn").gat
    gat_conv = gnnc.compile(EXAMPLES / "gat_conv.gnn").gat_conv
    gcn_norm = gnnc.compile(EXAMPLES / "gcn_norm.gnn").gcn_norm
    # the H = 1 copy's max, sum and normalising walks; gat's write alpha at the edge's id
    assert gat._abi.lanes == Lanes(walks=3, reducing=3, unit_dims=["H"], edge_ids=True, sized=False)
    assert gat_conv._abi.lanes == Lanes(walks=2, reducing=2, unit_dims=["H"], edge_ids=False, sized=False)
    assert gcn_norm._abi.lanes == Lanes(walks=1, reducing=0, unit_dims=[], edge_ids=False, sized=False)
    rng = np.random.default_rng(7)
    v, e = 1500, 1 << 14
    src, dst = rng.integers(0, v, e), rng.integers(0, v, e)
    order = np.argsort(dst, kind="stable")
    unsorted = gnnc.Graph.from_coo(src, dst, num_vertices=v)
    ordered = gnnc.Graph.from_coo(src[order], dst[order], num_vertices=v)
    refs = {
        name: getattr(gnnc.compile(EXAMPLES / f"{name}.gnn", target="reference"), name) for name in ("gat", "gat_conv")
    }
    for graph in (unsorted, ordered):
        for kernel in (gat, gat_conv):
            inputs = random_inputs(kernel.signature, graph, {"H": 1, "F": 8}, np.float32, 7)
            assert_matches(kernel(graph, **inputs), refs[kernel.name](graph, **inputs), graph, np.float32)
    # gat's alpha by position needs sorted ids (by id, lanes gather and scatter it: 0.96-1.06x)
    assert [("vectorize edges 16" in k, "edges sorted" in k) for k in gat._variants] == [(False, False), (True, True)]
    assert all("vectorize edges 16" in k for k in gat_conv._variants)
    four_heads = random_inputs(gat.signature, ordered, {"H": 4, "F": 8}, np.float32, 7)
    assert_matches(gat(ordered, **four_heads), refs["gat"](ordered, **four_heads), ordered, np.float32)
    assert not any("vectorize edges" in k for k in gat._variants if "H 4" in k)  # no copy for one head there
    x = random_inputs(gcn_norm.signature, ordered, {"F": 8}, np.float32, 7)
    gcn_norm(ordered, **x)
    assert not any("vectorize edges" in k for k in gcn_norm._variants)


@pytest.mark.parametrize(
    "row_bytes,wide,e,want",
    [
        (4 * 128, True, 1 << 20, True),  # gcn, sage_max, attention F=128: 1.02-1.10x
        (4 * (4 * 32 + 4), True, 1 << 20, True),  # gat H=4 F=32 (h and el): 1.06x
        (4 * 64, True, 1 << 20, False),  # rows of 256 bytes: 0.96-1.02x
        (4 * 32, True, 1 << 20, False),  # 128 bytes: gin, sage_max 0.89-0.91x on mdual
        (4 * 512, False, 1 << 20, False),  # no 512-bit registers
        (4 * 512, True, (1 << 14) - 1, False),  # a variant's compile would not pay
    ],
)
def test_simd_rule_follows_the_measurements(row_bytes, wide, e, want):
    got = heuristic.default_directives(fake_graph(e // 4, e), row_bytes, llc_bytes=32 * MIB, wide_vectors=wide) or ""
    assert ("simd 512" in got.splitlines()) == want


@pytest.mark.parametrize("features,want", [(["avx2", "avx512f"], True), (["avx2"], False)])
def test_simd_follows_the_kernels_cpu(features, want):
    """512-bit vectors only where the object's CPU has them (its metadata's features)."""
    gcn = gnnc.compile(EXAMPLES / "gcn.gnn").gcn
    kernel = SimpleNamespace(signature=gcn.signature, _abi=gcn._abi, _metadata={"cpu": {"features": features}})
    got = heuristic.kernel_default(kernel, fake_graph(1 << 16, 1 << 20), {"F": 128}) or ""
    assert ("simd 512" in got.splitlines()) == want


class _StrictGraph:
    """Sizes and whether the ids are sorted; any other read (a probe of the graph) fails."""

    def __init__(self, v: int, e: int, edges_sorted: bool):
        self.num_vertices, self.num_edges, self.edges_sorted = v, e, edges_sorted

    def __getattr__(self, name: str) -> None:
        raise AssertionError(f"the default read graph.{name} of a graph it had a class for")


@pytest.mark.parametrize("example", ["gcn", "gat", "sage_mean", "sage_max", "mlp_aggr", "rgcn", "gcn_norm"])
def test_every_graph_of_a_class_gets_the_same_default(example):
    """`default_class` names every threshold `default_directives` compares a graph with: graphs
    of one class get one default, made without looking at the graph further; mini-batch
    blocks look theirs up (and the runtime its decision). Sizes across every threshold."""
    kernel = getattr(gnnc.compile(EXAMPLES / f"{example}.gnn"), example)
    rng = np.random.default_rng(0)
    names = sorted({d for p in kernel.signature.params for d in p.shape if isinstance(d, str)})
    itemsize = 4
    seen: dict[tuple, str | None] = {}
    for _ in range(400):
        dims = {d: int(rng.choice([1, 4, 16, 64, 256])) for d in names}
        v = int(np.exp(rng.uniform(0, np.log(1 << 23)))) if rng.random() > 0.02 else 0
        e = int(np.exp(rng.uniform(0, np.log(1 << 27)))) if v else 0
        graph = _StrictGraph(v, e, bool(rng.random() < 0.5))
        cls = heuristic.default_class(kernel, graph, dims)
        if cls is None:
            continue
        row_bytes = heuristic.source_row_bytes(kernel.signature, dims, itemsize)
        fresh = heuristic._kernel_default(kernel, graph, dims, itemsize, row_bytes)
        key = (tuple(dims.items()), cls)
        assert seen.setdefault(key, fresh) == fresh, (key, v, e)
        assert heuristic.kernel_default(kernel, graph, dims) == fresh
    assert len(seen) > 20  # the classes were met, small and large
    # a call whose default reads the graph itself has no class
    big = _StrictGraph(1 << 22, 1 << 26, False)
    assert heuristic.default_class(kernel, big, dict.fromkeys(names, 64)) is None
