"""Kernels that read no edge ids run without them: no `in_eid`, no `part_eid`, a reversed graph
that dropped its sort's ids (8 bytes an edge each: 0.5 GiB an array at 64M edges). Likewise a
partitioned kernel reads no `in_src`, and a large reversed graph drops its own once its
partitions hold the sources."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
import gnnc.torch
from gnnc.graph import graph as graph_module
from gnnc.graph import plans
from tests.helpers import assert_matches
from tests.strategies import edge_lists

PLAIN = "kernel plain(x: f32[V, F]) -> f32[V, F] { out[v] = mean(x[u]) }"
WEIGHTED = "kernel weighted(x: f32[V, F], w: f32[E]) -> f32[V, F] { out[v] = sum(w[e] * x[u]) }"


def _csc_graph(src: np.ndarray, dst: np.ndarray, v: int) -> gnnc.Graph:
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(v + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=v), out=indptr[1:])
    return gnnc.Graph.from_csc(indptr, src[order].astype(np.int64))


def test_the_record_says_whether_a_kernel_reads_edge_ids():
    assert gnnc.compile(PLAIN).plain._abi.edge_ids is False
    assert gnnc.compile(PLAIN, schedule="partition src 3").plain._abi.edge_ids is False
    assert gnnc.compile(WEIGHTED).weighted._abi.edge_ids is True
    assert gnnc.compile(WEIGHTED, schedule="partition src 3").weighted._abi.edge_ids is True


@pytest.mark.parametrize("schedule", [None, "partition src 3", "partition src 3; prefetch 4"])
@settings(max_examples=15, deadline=None)
@given(edges=edge_lists())
def test_a_kernel_that_reads_no_edge_ids_leaves_a_graph_without_them(schedule, edges):
    src, dst, v = edges
    graph = _csc_graph(src, dst, v)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((v, 5)).astype(np.float32)
    w = rng.standard_normal(graph.num_edges).astype(np.float32)
    plain = gnnc.compile(PLAIN, schedule=schedule).plain
    assert_matches(plain(graph, x), gnnc.compile(PLAIN, target="reference").plain(graph, x), graph, np.float32)
    assert graph._in_eid is None
    assert not any(isinstance(k, tuple) and k[0] == "source_partition_eids" for k in graph.plans)
    # a kernel that reads them, on the same graph and plans, has them made then
    weighted = gnnc.compile(WEIGHTED, schedule=schedule).weighted
    want = gnnc.compile(WEIGHTED, target="reference").weighted(graph, x, w)
    assert_matches(weighted(graph, x, w), want, graph, np.float32)
    assert_matches(plain(graph, x), gnnc.compile(PLAIN, target="reference").plain(graph, x), graph, np.float32)


@given(edges=edge_lists())
def test_partitions_made_without_edge_ids_are_those_made_with_them(edges):
    src, dst, v = edges
    k = 3
    lean, full = gnnc.Graph.from_coo(src, dst, num_vertices=v), gnnc.Graph.from_coo(src, dst, num_vertices=v)
    without = plans.source_partitions(lean, k, eids=False)
    assert without[3] is None
    with_ids = plans.source_partitions(lean, k)
    want = plans.source_partitions(full, k)
    for got, expected in zip(with_ids, want):
        assert np.array_equal(got, expected)
    assert all(a is b for a, b in zip(without[:3], with_ids[:3]))  # the partitions are kept, not made again


@given(edges=edge_lists())
def test_a_large_reversed_graph_sorts_its_edge_ids_again_when_asked(edges):
    src, dst, v = edges
    kept = gnnc.Graph.from_coo(src, dst, num_vertices=v).reversed()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graph_module, "_KEEP_REVERSED_EIDS", -1)
        dropped = gnnc.Graph.from_coo(src, dst, num_vertices=v).reversed()
    assert dropped._in_eid is None
    assert np.array_equal(dropped.in_eid, kept.in_eid)
    assert np.array_equal(dropped.in_src, kept.in_src) and np.array_equal(dropped.in_indptr, kept.in_indptr)
    assert not dropped.in_eid.flags.writeable


@pytest.mark.parametrize("case", ["edge ids", "sources"])
def test_gradients_on_a_reversed_graph_without_its_edge_ids_or_sources(monkeypatch, case):
    """Past the size limit (set to 0 here) a reversed graph drops its edge ids at once, and its
    sources once a partitioned kernel's plans hold them: a gradient that reads edge ids, and a
    partitioned one that reads no in_src, against torch's."""
    monkeypatch.setattr(graph_module, "_KEEP_REVERSED_EIDS", -1)
    rng = np.random.default_rng(1)
    v, e = 50, 400
    edge_index = torch.from_numpy(rng.integers(0, v, (2, e)))
    x = torch.randn(v, 6, requires_grad=True)
    w = torch.randn(e, requires_grad=True)
    if case == "edge ids":
        gnnc.torch.kernel(WEIGHTED, "weighted")(edge_index, x, w).square().sum().backward()
    else:
        gnnc.torch.kernel(PLAIN, "plain", schedule="partition src 3")(edge_index, x).square().sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    if case == "edge ids":
        out = torch.zeros(v, 6).index_add_(0, edge_index[1], w2[:, None] * x2[edge_index[0]])
    else:
        deg = torch.zeros(v).index_add_(0, edge_index[1], torch.ones(e)).clamp(min=1)
        out = torch.zeros(v, 6).index_add_(0, edge_index[1], x2[edge_index[0]]) / deg[:, None]
    out.square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    if case == "edge ids":
        torch.testing.assert_close(w.grad, w2.grad)


@given(edges=edge_lists())
def test_the_reversed_graph_of_a_csc_graph_keeps_no_sources_until_asked(edges):
    """A `from_csc` graph's destinations are made for the reversed graph's sort and dropped
    (its kernels read its in-CSR): 8 bytes an edge less; asked for, they are made again."""
    src, dst, v = edges
    csc = _csc_graph(src, dst, v)
    rev = csc.reversed()
    assert csc._dst is None and rev._src is None
    want = gnnc.Graph.from_coo(csc.edge_index()[0], csc.edge_index()[1], num_vertices=v).reversed()
    for name in ("in_indptr", "in_src", "in_eid"):
        assert np.array_equal(getattr(rev, name), getattr(want, name)), name
    assert np.array_equal(rev.deg_out(), want.deg_out()) and np.array_equal(rev.deg_in(), want.deg_in())
    assert np.array_equal(plans.source_partitions(rev, 3, eids=False)[2], plans.source_partitions(want, 3)[2])
    assert rev._src is None
    assert np.array_equal(rev.src, want.src) and np.array_equal(rev.dst, want.dst)


TWO_WALKS = """
kernel two(x: f32[V, F], w: f32[E]) -> f32[V, F] {
    m[v] = max(w[e])
    out[v] = sum(exp(w[e] - m[v]) * x[u])
}
"""


def test_the_record_says_whether_a_partitioned_kernel_reads_in_src():
    assert gnnc.compile(PLAIN).plain._abi.in_src is True
    assert gnnc.compile(PLAIN, schedule="partition src 3").plain._abi.in_src is False
    assert gnnc.compile(PLAIN, schedule="partition src 3; prefetch 4").plain._abi.in_src is False
    # the narrower walk is not partitioned: it reads in_src
    assert gnnc.compile(TWO_WALKS, schedule="partition src 3").two._abi.in_src is True


@settings(max_examples=15, deadline=None)
@given(edges=edge_lists())
def test_a_large_reversed_graph_drops_its_sources_once_partitions_hold_them(edges):
    src, dst, v = edges
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graph_module, "_KEEP_REVERSED_EIDS", -1)
        graph = _csc_graph(src, dst, v)
        rev = graph.reversed()
        want = gnnc.Graph.from_coo(graph.edge_index()[1], graph.edge_index()[0], num_vertices=v)
        rng = np.random.default_rng(2)
        x = rng.standard_normal((v, 5)).astype(np.float32)
        reference = gnnc.compile(PLAIN, target="reference").plain(want, x)
        partitioned = gnnc.compile(PLAIN, schedule="partition src 3").plain
        assert_matches(partitioned(rev, x), reference, want, np.float32)
        assert rev._in_src is None  # the partitions carry every source
        # a kernel that reads in_src has it sorted again, and kept
        whole = gnnc.compile(PLAIN).plain
        assert_matches(whole(rev, x), reference, want, np.float32)
        assert np.array_equal(rev._in_src, want.in_src) and not rev.in_src.flags.writeable
        assert_matches(partitioned(rev, x), reference, want, np.float32)
        rev.release_in_src()
        assert rev._in_src is not None  # asked for once: kept from then on
    # a graph's own sources (the caller's) are never dropped
    kept = gnnc.Graph.from_coo(src, dst, num_vertices=v)
    kept.release_in_src()
    assert kept._in_src is not None


NORMED = "kernel normed(x: f32[V, F]) -> f32[V, F] { out[v] = sum(x[u] * rsqrt(deg_out(u) * deg_in(v))) }"
ONE_SIDE = "kernel one_side(x: f32[V, F]) -> f32[V, F] { out[v] = sum(x[u] / deg_out(u)) }"


def test_the_record_says_which_degrees_a_kernel_reads():
    assert (gnnc.compile(PLAIN).plain._abi.deg_in, gnnc.compile(PLAIN).plain._abi.deg_out) == (False, False)
    normed = gnnc.compile(NORMED).normed._abi
    assert (normed.deg_in, normed.deg_out) == (True, True)
    one_side = gnnc.compile(ONE_SIDE, schedule="partition src 2").one_side._abi
    assert (one_side.deg_in, one_side.deg_out) == (False, True)
    # a record written before the field existed reads both
    old = {k: v for k, v in normed.to_dict().items() if k not in ("deg_in", "deg_out")}
    assert type(normed).from_dict(old).deg_in and type(normed).from_dict(old).deg_out


@settings(max_examples=15, deadline=None)
@given(edges=edge_lists(), bipartite=st.booleans())
def test_a_kernel_that_reads_no_degrees_leaves_them_uncounted(edges, bipartite):
    """A new graph (a mini-batch block) counts no degrees for a kernel that never reads them;
    one that reads them, on the same graph after it, gets them whole (padded when bipartite)."""
    src, dst, v = edges
    n_src = v + 3 if bipartite else v
    graph = gnnc.Graph.from_coo(src, dst, shape=(n_src, v))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n_src, 4)).astype(np.float32)
    for source, name in ((PLAIN, "plain"), (ONE_SIDE, "one_side"), (NORMED, "normed")):
        kernel = getattr(gnnc.compile(source), name)
        want = getattr(gnnc.compile(source, target="reference"), name)(graph, x)
        assert_matches(kernel(graph, x), want, graph, np.float32)
        counted = {key[0] for key in graph._degrees}
        assert counted == {"plain": set(), "one_side": {"out"}, "normed": {"in", "out"}}[name]


def _rss_file() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssFile:"))


def test_a_memory_mapped_graph_gives_its_sources_pages_back(tmp_path):
    """A graph over a read-only memory-mapped in-CSR (`from_csc`) gives the sources' pages back
    to the system once a kernel's partitions hold every source, and again after its reversed
    graph's sort read them: the process's memory holds them no more, the values stay the file's."""
    rng = np.random.default_rng(5)
    v, e = 40_000, graph_module._KEEP_REVERSED_EIDS + 4096
    src, dst = rng.integers(0, v, e), rng.integers(0, v, e)
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(v + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=v), out=indptr[1:])
    np.save(tmp_path / "indptr.npy", indptr)
    np.save(tmp_path / "indices.npy", src[order])
    mapped = np.load(tmp_path / "indices.npy", mmap_mode="r")
    graph = gnnc.Graph.from_csc(np.load(tmp_path / "indptr.npy", mmap_mode="r"), mapped)
    x = rng.standard_normal((v, 2)).astype(np.float32)
    plain = gnnc.compile(PLAIN, schedule="partition src 3").plain
    assert not plain._abi.in_src
    want = gnnc.compile(PLAIN, target="reference").plain(graph, x)  # reads every page in
    before = _rss_file()
    assert_matches(plain(graph, x), want, graph, np.float32)
    assert graph._mapped_released and before - _rss_file() >= 0.8 * mapped.nbytes
    int(np.asarray(graph.in_src).sum())  # read in again: the file's values
    before = _rss_file()
    graph.reversed()  # its sort reads them too, then they go again
    assert before - _rss_file() >= 0.8 * mapped.nbytes
    np.testing.assert_array_equal(graph.in_src, src[order])


def test_only_read_only_file_mappings_give_their_pages_back(tmp_path):
    owned = np.arange(1 << 20)
    assert not graph_module._release_mapped_pages(owned)
    np.save(tmp_path / "a.npy", owned)
    writable = np.load(tmp_path / "a.npy", mmap_mode="r+")
    assert not graph_module._release_mapped_pages(writable)
    copied = np.load(tmp_path / "a.npy", mmap_mode="c")  # copy-on-write: a page written is the process's
    copied[0] = -1
    assert not graph_module._release_mapped_pages(copied)
    assert copied[0] == -1 and owned[5] == 5
    assert graph_module._release_mapped_pages(np.load(tmp_path / "a.npy", mmap_mode="r")[1:])
