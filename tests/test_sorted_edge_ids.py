"""`edges sorted`: edge rows read by in-CSR position on graphs whose edge ids are sorted by destination."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc.autotune import heuristic
from gnnc.driver import compiler
from tests.helpers import assert_matches, slow_except
from tests.helpers import compiled_example as compiled
from tests.helpers import reference_example as reference
from tests.strategies import edge_lists, random_inputs

EXAMPLES = Path(__file__).parent.parent / "examples"
DIMS = {
    "gcn": {"F": 17},
    "gat": {"H": 2, "F": 5},
    "attention": {"H": 1, "D": 17},
    "gin": {"F": 5},
    "gcn_norm": {"F": 1},
    "sage_max": {"F": 3},
}
#: Schedules `edges sorted` joins (destination orders and the Hilbert order are refused).
WITH = [
    "",
    "prefetch 0",
    "prefetch 3",
    "specialize",
    "group neighbors 4",
    "partition src 2",
    "tile features 4",
    "vectorize 4\nprefetch 24",
]


def sorted_graph(src: np.ndarray, dst: np.ndarray, v: int) -> gnnc.Graph:
    order = np.argsort(dst, kind="stable")
    return gnnc.Graph.from_coo(src[order], dst[order], num_vertices=v)


@st.composite
def sorted_graphs(draw, **kwargs):
    return sorted_graph(*draw(edge_lists(**kwargs)))


@settings(max_examples=40, deadline=None)
@given(edges=edge_lists())
def test_edges_sorted_says_whether_the_ids_are_the_in_csr_positions(edges):
    src, dst, v = edges
    for graph in (gnnc.Graph.from_coo(src, dst, num_vertices=v), sorted_graph(src, dst, v)):
        assert graph.edges_sorted == np.array_equal(graph.in_eid, np.arange(graph.num_edges))
    assert sorted_graph(src, dst, v).edges_sorted


@settings(max_examples=30, deadline=None)
@given(edges=edge_lists(), seed=st.integers(0, 2**32 - 1))
def test_sorted_by_destination_renumbers_the_edges_and_says_how(edges, seed):
    src, dst, v = edges
    graph = gnnc.Graph.from_coo(src, dst, num_vertices=v)
    renumbered, perm = graph.sorted_by_destination()
    assert renumbered.edges_sorted and renumbered.num_vertices == graph.num_vertices
    np.testing.assert_array_equal(renumbered.src, graph.src[perm])
    np.testing.assert_array_equal(renumbered.dst, graph.dst[perm])
    gat = compiled("gat", "edges sorted").gat
    inputs = random_inputs(gat.signature, graph, DIMS["gat"], np.float32, seed)
    got = gat(renumbered, **inputs)
    want = reference("gat").gat(graph, **inputs)
    assert_matches(got["out"], want["out"], graph, np.float32)
    assert_matches(got["alpha"], want["alpha"][perm], graph, np.float32)


@pytest.mark.parametrize("name", slow_except(sorted(DIMS), "gcn"))
@given(
    graph=sorted_graphs(huge_hubs=True),
    extra=st.sampled_from(WITH),
    threads=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=8, deadline=None)
def test_kernels_with_sorted_edge_ids_match_the_reference(name, graph, extra, threads, seed):
    dims = DIMS[name]
    if extra == "specialize":
        extra = "specialize " + " ".join(f"{k} {n}" for k, n in dims.items())
    module = compiled(name, f"edges sorted\n{extra}")
    if isinstance(module, gnnc.CompileError):
        # the kernel refuses the other directive, with its own reason (gat: no groups of a softmax)
        assert any(d in str(module) for d in ("group neighbors", "partition src", "tile features", "vectorize"))
        return
    kernel = getattr(module, name)
    assert kernel._abi.edges_sorted
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, seed)
    got = kernel(graph, threads=threads, **inputs)
    assert_matches(got, getattr(reference(name), name)(graph, **inputs), graph, np.float32)


def test_a_graph_whose_ids_are_not_sorted_is_refused_before_the_native_code():
    gcn = compiled("gcn", "edges sorted").gcn
    graph = gnnc.Graph(np.array([[0, 1, 2, 3], [2, 0, 1, 0]]))  # edge 0 is the third in-CSR position
    assert not graph.edges_sorted
    rng = np.random.default_rng(0)
    x, w = rng.random((4, 3), dtype=np.float32), rng.random(4, dtype=np.float32)
    out = np.full((4, 3), 7.0, np.float32)
    with pytest.raises(gnnc.ArgumentError, match="edges sorted"):
        gcn(graph, x, w, out=out)
    assert (out == 7.0).all()
    same = sorted_graph(np.asarray(graph.src), np.asarray(graph.dst), 4)
    perm = np.argsort(np.asarray(graph.dst), kind="stable")
    np.testing.assert_allclose(gcn(same, x, w[perm]), compiled("gcn", "").gcn(graph, x, w), rtol=1e-6)


@pytest.mark.parametrize("other", ["sort degree", "reorder locality", "order edges hilbert"])
def test_orders_of_their_own_are_refused_with_edges_sorted(other):
    source = (EXAMPLES / "gcn.gnn").read_text() + f"\nschedule gcn for cpu {{ edges sorted; {other} }}\n"
    with pytest.raises(gnnc.SourceError, match="cannot be combined") as info:
        gnnc.compile(source)
    assert "edges sorted" in str(info.value).splitlines()[1] and "^" in str(info.value)


def test_walks_read_edge_rows_by_position_and_prefetch_none():
    source = (EXAMPLES / "gat.gnn").read_text() + "\nschedule gat for cpu { edges sorted }\n"
    stages = compiler.compile_source(source, stop_after="loop").stages
    before, after = stages["convert-graph-to-loop"], stages["sorted-edge-ids"]
    assert 'edge_ids = "sorted"' in before and "edge_ids" not in after
    edge_args = re.findall(r"\^bb\d+\(%\d+: index, %\d+: index, (%\d+): index\)", after)
    assert len(edge_args) % 3 == 0 and edge_args  # gat: max, weighted-sum and normalising walks, per version
    for edge in edge_args:
        assert len(re.findall(rf"{edge}(?!\d)", after)) == 1, f"{edge} is still used"
    assert "write = true" not in stages["prefetch-neighbors"]  # alpha's rows are written in order now
    assert gnnc.compile(source).gat._abi.edges_sorted


def fake_graph(v: int, e: int, edges_sorted: bool) -> SimpleNamespace:
    return SimpleNamespace(num_vertices=v, num_edges=e, edges_sorted=edges_sorted)


@pytest.mark.parametrize(
    "e,edges_sorted,has", [(1 << 20, True, True), (1 << 20, False, False), ((1 << 14) - 1, True, False)]
)
def test_the_default_heuristic_takes_sorted_ids_in_calls_that_get_a_variant(e, edges_sorted, has):
    got = heuristic.default_directives(fake_graph(e // 16, e, edges_sorted), 128, llc_bytes=32 << 20) or ""
    assert (heuristic.EDGES_SORTED in got.splitlines()) == has


def test_tuned_and_predicted_schedules_fit_the_graphs_ids():
    yes, no = SimpleNamespace(edges_sorted=True), SimpleNamespace(edges_sorted=False)
    assert heuristic.fit_edge_ids("vectorize 32; edges sorted", no) == "vectorize 32"
    assert heuristic.fit_edge_ids("vectorize 32", yes) == "vectorize 32; edges sorted"
    assert heuristic.fit_edge_ids("edges sorted; prefetch 4", yes) == "prefetch 4; edges sorted"
    assert heuristic.fit_edge_ids("sort degree", yes) == "sort degree"
    assert heuristic.fit_edge_ids("", yes) == ""  # the kernel as compiled stays so


def test_a_default_call_on_a_large_sorted_graph_runs_the_sorted_variant():
    gcn = gnnc.compile(EXAMPLES / "gcn.gnn").gcn
    rng = np.random.default_rng(2)
    v, e = 1500, 1 << 14
    src, dst = rng.integers(0, v, e), rng.integers(0, v, e)
    for graph in (sorted_graph(src, dst, v), gnnc.Graph.from_coo(src, dst, num_vertices=v)):
        inputs = random_inputs(gcn.signature, graph, {"F": 8}, np.float32, 2)
        got = gcn(graph, **inputs)
        assert_matches(got, reference("gcn").gcn(graph, **inputs), graph, np.float32)
    keys = sorted(gcn._variants)
    assert len(keys) == 2 and sum(heuristic.EDGES_SORTED in k for k in keys) == 1
