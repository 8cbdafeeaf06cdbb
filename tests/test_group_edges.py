"""The native edge grouping (gnnc/graph/group_edges.c) against the graph layer's numpy code and a loop.

Every graph is built both ways (the helper, and numpy with the helper turned
off) and compared array by array, in-CSR, reversed graph and out-CSR, with
the sizes drawn across the helper's one-buffer limit; ids out of range get
the same message both ways; without a C compiler graphs are built by numpy.
"""

from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gnnc import sharedlib
from gnnc.errors import GraphError
from gnnc.graph import graph as graph_module
from gnnc.graph import group_edges, plans
from gnnc.graph.graph import Graph

from .strategies import edge_lists
from .test_runtime_graph import in_csr_by_loop

ARRAYS = ("src", "dst", "in_indptr", "in_src", "in_eid", "out_indptr", "out_dst", "out_eid")


@pytest.fixture(autouse=True)
def _fresh_helper():
    """Each test loads the helper as its settings say (set up first, this is torn down after
    the test's monkeypatch is undone): the next test finds it as the process has it."""
    group_edges._reset_for_tests()
    yield
    group_edges._reset_for_tests()


def build_both(make, monkeypatch):
    """`make()` with the helper and with numpy: the graphs (or the messages of their errors)."""
    results = []
    for setting in ("1", "0"):
        monkeypatch.setenv(group_edges.SETTING, setting)
        group_edges._reset_for_tests()
        assert group_edges.available() == (setting == "1"), group_edges._unavailable
        try:
            results.append(make())
        except GraphError as exc:
            results.append(str(exc))
    assert not group_edges.available()
    return results


def assert_same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert (a.num_src, a.num_dst, a.num_edges, a.edges_sorted) == (b.num_src, b.num_dst, b.num_edges, b.edges_sorted)
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert not getattr(a, name).flags.writeable, name
    ra, rb = a.reversed(), b.reversed()
    for name in ("in_indptr", "in_src", "in_eid"):
        np.testing.assert_array_equal(getattr(ra, name), getattr(rb, name), err_msg=f"reversed {name}")
    assert ra.edges_sorted == rb.edges_sorted
    np.testing.assert_array_equal(a.deg_in(np.float32), b.deg_in(np.float32))
    np.testing.assert_array_equal(a.deg_out(np.float64), b.deg_out(np.float64))


@given(edges=edge_lists(huge_hubs=True), grouped=st.booleans(), extra_src=st.integers(0, 5), one_buffer=st.booleans())
def test_native_and_numpy_build_the_same_graphs(edges, grouped, extra_src, one_buffer):
    with pytest.MonkeyPatch.context() as mp:
        check_both_ways(mp, edges, grouped, extra_src, one_buffer)
    group_edges._reset_for_tests()


def check_both_ways(monkeypatch, edges, grouped, extra_src, one_buffer):
    src, dst, v = edges
    if grouped:  # a sampler's block: edges listed by destination
        order = np.argsort(dst, kind="stable")
        src, dst = src[order], dst[order]
    shape = (v + extra_src, v)  # bipartite where extra_src > 0
    edge_index = np.stack([src, dst]).astype(np.int64)
    if not one_buffer:
        monkeypatch.setattr(group_edges, "_ONE_BUFFER_EDGES", -1)  # the large graphs' two calls
    native, numpy = build_both(lambda: Graph.from_edge_index(edge_index, shape=shape), monkeypatch)
    assert_same(native, numpy)
    if isinstance(native, Graph):
        assert native.edges_sorted == (src.size < 2 or bool(np.all(dst[1:] >= dst[:-1])))
        indptr, in_src, in_eid = in_csr_by_loop(src, dst, v)
        np.testing.assert_array_equal(native.in_indptr, indptr)
        np.testing.assert_array_equal(native.in_src, in_src)
        np.testing.assert_array_equal(native.in_eid, in_eid)
    assert_same(*build_both(lambda: Graph.from_coo(src, dst, num_vertices=v + extra_src), monkeypatch))


@pytest.mark.parametrize(
    "src,dst,shape",
    [
        ([0, 1, 2], [0, 1, 3], (3, 3)),  # grouped: the last destination
        ([0, 1, 2], [-1, 0, 1], (3, 3)),  # a negative destination
        ([0, 1, 2], [2, 3, 0], (3, 3)),  # not grouped: one in the middle
        ([0, 5, 2], [0, 1, 1], (3, 3)),  # a source
        ([-1, 0, 2], [0, 1, 1], (3, 3)),  # a negative source
        ([0, 1, 2], [0, 1, 1], (2, 3)),  # bipartite: a source past num_src
        ([0, 1, 2, 3], [3, 0, 1, 2], (4, 2)),  # several destinations past num_dst
        ([0], [0], (1, 0)),  # no destinations at all
    ],
)
def test_ids_out_of_range_get_the_same_message_both_ways(monkeypatch, src, dst, shape):
    edge_index = np.array([src, dst], dtype=np.int64)
    for make in (
        lambda: Graph.from_edge_index(edge_index, shape=shape),
        lambda: Graph.from_coo(src, dst, shape=shape),
    ):
        native, numpy = build_both(make, monkeypatch)
        assert isinstance(native, str) and ("out of range" in native or "is negative" in native)
        assert native == numpy


def test_large_reversed_graphs_sort_their_edge_ids_again_when_asked(monkeypatch):
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 50, 400), rng.integers(0, 30, 400)
    monkeypatch.setattr(graph_module, "_KEEP_REVERSED_EIDS", 100)  # past it: no edge ids kept
    monkeypatch.setattr(group_edges, "_ONE_BUFFER_EDGES", 100)  # and the two-call way
    rev = Graph.from_coo(src, dst, num_vertices=50).reversed()
    assert rev._in_eid is None and not rev.edges_sorted
    indptr, in_src, in_eid = in_csr_by_loop(dst, src, 50)
    np.testing.assert_array_equal(rev.in_indptr, indptr)
    np.testing.assert_array_equal(rev.in_src, in_src)
    np.testing.assert_array_equal(rev.in_eid, in_eid)


def test_keys_changed_between_the_passes_write_nothing_out_of_bounds():
    """A file mapping rewritten by another process between the count and the scatter: the
    scatter says so (and the graph layer then groups with numpy), never writing past its arrays."""
    functions = group_edges._load()
    assert functions is not None
    keys = np.array([0, 0, 1, 2], dtype=np.int64)
    other = np.arange(4, dtype=np.int64)
    indptr = np.empty(4, dtype=np.int64)
    assert functions.count(keys.ctypes.data, other.ctypes.data, 4, 3, -1, indptr.ctypes.data) == -1
    out = np.full(6, -7, dtype=np.int64)  # guards either side of the four slots
    changed = np.array([2, 2, 2, 9], dtype=np.int64)  # more of key 2 than counted, one out of range
    status = functions.scatter(
        changed.ctypes.data, other.ctypes.data, 4, 3, indptr.ctypes.data, out[1:5].ctypes.data, None
    )
    assert status == -3
    assert out[0] == -7 and out[5] == -7


def test_without_a_compiler_numpy_builds_the_graphs(monkeypatch, caplog):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with caplog.at_level(logging.INFO, logger="gnnc.graph.group_edges"):
        g = Graph.from_coo([0, 2, 1], [1, 0, 0], num_vertices=3)
    assert not group_edges.available()
    assert "grouped by numpy" in caplog.text and "/nonexistent/cc" in caplog.text
    np.testing.assert_array_equal(g.in_src, [2, 1, 0])


def test_a_failing_compiler_leaves_numpy_to_build_the_graphs(monkeypatch, tmp_path, caplog):
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\necho 'no such thing' >&2\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("GNNC_CACHE_DIR", str(tmp_path / "cache"))
    with caplog.at_level(logging.INFO, logger="gnnc.graph.group_edges"):
        assert not group_edges.available()
    assert "no such thing" in caplog.text
    g = Graph.from_coo([0, 2, 1], [1, 0, 0], num_vertices=3)
    np.testing.assert_array_equal(g.in_eid, [1, 2, 0])


def test_the_built_helper_is_kept_in_the_compile_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("GNNC_CACHE_DIR", str(tmp_path))
    assert group_edges.available()
    entries = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("graph-group-edges-"))
    assert [p.rsplit(".", 1)[1] for p in entries] == ["sha256", "so"]
    group_edges._reset_for_tests()

    def no_build(cc):
        raise group_edges._BuildError("built again")

    monkeypatch.setattr(group_edges, "_build", no_build)
    assert group_edges.available()  # from the cache
    # an entry changed on disk is not loaded: built again
    so = next(p for p in tmp_path.iterdir() if p.suffix == ".so")
    so.write_bytes(so.read_bytes() + b"\0")
    group_edges._reset_for_tests()
    assert not group_edges.available()
    monkeypatch.undo()
    monkeypatch.setenv("GNNC_CACHE_DIR", str(tmp_path))
    group_edges._reset_for_tests()
    assert group_edges.available()


def test_a_forked_child_groups_with_the_parents_helper():
    code = (
        "import os, numpy as np\n"
        "from gnnc.graph import group_edges\n"
        "from gnnc.graph.graph import Graph\n"
        "assert group_edges.available()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    g = Graph.from_coo([0, 2, 1], [1, 0, 0], num_vertices=3)\n"
        "    os._exit(0 if g.in_src.tolist() == [2, 1, 0] else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "raise SystemExit(os.waitstatus_to_exitcode(status))\n"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_the_helper_is_loaded_from_a_sealed_copy_else_a_file_copy(monkeypatch):
    assert group_edges.available()
    maps = open("/proc/self/maps").read()
    assert "memfd:gnnc:group_edges.so" in maps
    group_edges._reset_for_tests()

    def no_memfd(path, data):
        raise OSError("memfds may not be executed here")

    monkeypatch.setattr(sharedlib, "_load_memfd", no_memfd)  # a noexec /proc, an old kernel
    assert group_edges.available()
    np.testing.assert_array_equal(Graph.from_coo([0, 2, 1], [1, 0, 0], num_vertices=3).in_src, [2, 1, 0])


def test_the_c_source_compiles_without_warnings(tmp_path):
    cc = group_edges._compiler()
    flags = ["-Wall", "-Wextra", "-Wpedantic", "-Wconversion", "-Werror"]
    cmd = [*cc, *group_edges._FLAGS, *flags, "-o", str(tmp_path / "g.so"), str(group_edges._SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@given(
    edges=edge_lists(huge_hubs=True),
    k=st.integers(1, 20),
    eids=st.booleans(),
    reversed_graph=st.booleans(),
    eids_later=st.booleans(),
)
def test_source_partitions_are_the_same_both_ways(edges, k, eids, reversed_graph, eids_later):
    """FeatGraph's source partitions (plans.source_partitions) natively and by numpy's stable
    sort: the same offsets, sources and edge ids, for graphs whose edge ids are not the in-CSR
    positions (a reversed graph's), and for edge ids asked for after the partitions."""
    src, dst, v = edges
    results = []
    with pytest.MonkeyPatch.context() as mp:
        for setting in ("1", "0"):
            mp.setenv(group_edges.SETTING, setting)
            group_edges._reset_for_tests()
            g = Graph.from_coo(src, dst, num_vertices=v)
            g = g.reversed() if reversed_graph else g
            got = plans.source_partitions(g, k, eids=eids and not eids_later)
            if eids_later:
                got = plans.source_partitions(g, k, eids=True)
            results.append(got)
    group_edges._reset_for_tests()
    for a, b in zip(*results, strict=True):
        if a is None or b is None:
            assert a is None and b is None
        else:
            np.testing.assert_array_equal(a, b)
            assert not a.flags.writeable


def test_partitions_of_a_small_in_csr_by_hand():
    functions = group_edges._load()
    assert functions is not None
    indptr = np.array([0, 2, 4], dtype=np.int64)  # 2 destinations, 4 edges
    in_src = np.array([0, 3, 1, 2], dtype=np.int64)
    bounds = np.array([0, 2, 4], dtype=np.int64)  # sources 0-1 | 2-3
    part_indptr = np.empty(2 * 3, dtype=np.int64)
    out = np.full(6, -7, dtype=np.int64)  # guard words either side of the four slots
    status = functions.partition(
        indptr.ctypes.data, in_src.ctypes.data, None, 2, bounds.ctypes.data, 2,
        part_indptr.ctypes.data, out[1:5].ctypes.data, None,
    )  # fmt: skip
    assert status == 0
    np.testing.assert_array_equal(part_indptr, [0, 1, 2, 2, 3, 4])
    np.testing.assert_array_equal(out[1:5], [0, 1, 3, 2])  # partition 0's edges, then 1's
    assert out[0] == -7 and out[5] == -7  # nothing written outside


@given(edges=edge_lists(huge_hubs=True), n=st.integers(1, 200), reversed_graph=st.booleans())
def test_balanced_blocks_are_the_same_both_ways(edges, n, reversed_graph):
    """plans.balanced_blocks in id order natively (`split_work`: bisection over indptr[j] + j)
    and by numpy's prefix and searchsorted (or its bisection in Python): the same boundaries,
    heavy destinations moved into blocks of their own alike."""
    src, dst, v = edges
    g = Graph.from_coo(src, dst, num_vertices=v)
    g = g.reversed() if reversed_graph else g
    if g.num_vertices == 0:
        return
    n = min(n, g.num_vertices)
    native = group_edges.split_work(g.in_indptr, n)
    assert native is not None
    prefix = g.in_indptr + np.arange(g.num_vertices + 1)
    np.testing.assert_array_equal(native, plans._split_prefix(prefix, n))
    if n <= plans._FEW_BLOCKS:
        np.testing.assert_array_equal(native, plans._split_work(g.in_indptr, n))
    g.plans.clear()
    np.testing.assert_array_equal(plans.balanced_blocks(g, n), native)


def test_a_hub_gets_a_block_of_its_own_natively():
    # destinations 0-2 light, 3 a hub of 100 in-edges, 4 light: work 1, 1, 1, 101, 1
    indptr = np.array([0, 0, 0, 0, 100, 100], dtype=np.int64)
    bounds = group_edges.split_work(indptr, 3)
    # both targets (35 and 70 of 105) fall in the hub: the second block came out empty, so the
    # first boundary moves in front of the hub, which gets the middle block to itself
    np.testing.assert_array_equal(bounds, [0, 3, 4, 5])
    np.testing.assert_array_equal(bounds, plans._split_prefix(indptr + np.arange(6), 3))
