"""The runtime's Graph (constructors, invariants, CSR) and call-argument checking (signature.prepare_call)."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnc.errors import ArgumentError, GraphError
from gnnc.graph import graph as graph_module
from gnnc.graph import group_edges
from gnnc.graph.graph import Graph
from gnnc.ir.signature import KernelSignature, TensorSig
from gnnc.runtime.signature import pack_results, prepare_call

from .strategies import edge_lists

# A small graph with a self loop (2 -> 2), a duplicate (0 -> 1 twice), an
# isolated vertex (4) and a vertex with no in-edges (3 has only out-edges).
SRC = np.array([0, 3, 2, 0, 1, 2, 3, 0])
DST = np.array([1, 1, 2, 1, 0, 0, 2, 2])
V = 5


def in_csr_by_loop(src, dst, n):
    """The in-edge CSR the kernels use, by a plain Python loop."""
    buckets = [[] for _ in range(n)]
    for eid, (u, v) in enumerate(zip(src, dst)):
        buckets[v].append((u, eid))
    indptr, in_src, in_eid = [0], [], []
    for b in buckets:
        for u, eid in b:
            in_src.append(u)
            in_eid.append(eid)
        indptr.append(len(in_src))
    return indptr, in_src, in_eid


def assert_same_graph(a: Graph, b: Graph) -> None:
    assert a.num_vertices == b.num_vertices and a.num_edges == b.num_edges
    for name in ("src", "dst", "in_indptr", "in_src", "in_eid", "out_indptr", "out_dst", "out_eid"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


# ------------------------------------------------------------- constructors


def test_coo_matches_loop():
    g = Graph.from_coo(SRC, DST, num_vertices=V)
    assert g.num_vertices == V and g.num_edges == len(SRC)
    indptr, in_src, in_eid = in_csr_by_loop(SRC, DST, V)
    np.testing.assert_array_equal(g.in_indptr, indptr)
    np.testing.assert_array_equal(g.in_src, in_src)
    np.testing.assert_array_equal(g.in_eid, in_eid)
    # out-CSR: the in-CSR of the reversed graph
    indptr, out_dst, out_eid = in_csr_by_loop(DST, SRC, V)
    np.testing.assert_array_equal(g.out_indptr, indptr)
    np.testing.assert_array_equal(g.out_dst, out_dst)
    np.testing.assert_array_equal(g.out_eid, out_eid)


@given(edge_lists())
def test_an_int64_edge_index_with_its_shape_takes_one_copy_and_builds_the_same_graph(edges):
    """`from_edge_index(int64 2 x E, shape=(n, m))` (a mini-batch block) builds as the general way;
    an id out of range there gets the general way's message; the graph owns its copy."""
    src, dst, n = edges
    edge_index = np.stack([np.asarray(src, np.int64), np.asarray(dst, np.int64)])
    want = Graph.from_coo(src, dst, shape=(n, n))
    got = Graph.from_edge_index(edge_index, shape=(n, n))
    assert_same_graph(got, want)
    edge_index[:] = 0  # the caller's array, edited afterwards
    assert_same_graph(got, want)
    if src.size:
        top = int(max(np.max(src), np.max(dst)))  # the largest id is out of range for top vertices
        with pytest.raises(GraphError, match="out of range"):
            Graph.from_edge_index(np.stack([np.asarray(src, np.int64), np.asarray(dst, np.int64)]), shape=(top, top))


@pytest.mark.parametrize(
    "src,dst",
    [
        ([0, 1, 2], [0, 1, 3]),  # grouped by destination: the last is out of range
        ([0, 1, 2], [-1, 0, 1]),  # grouped: the first is negative
        ([0, 1, 2], [2, 3, 0]),  # not grouped: one in the middle
        ([0, 5, 2], [0, 1, 1]),  # a source
        ([-1, 0, 2], [0, 1, 1]),
    ],
)
def test_a_blocks_ids_out_of_range_are_refused(src, dst):
    with pytest.raises(GraphError, match="out of range|is negative"):
        Graph.from_edge_index(np.array([src, dst], dtype=np.int64), shape=(3, 3))


def test_every_constructor_gives_the_same_edge_ids():
    want = Graph.from_coo(SRC, DST, num_vertices=V)
    assert_same_graph(Graph.from_edge_index(np.stack([SRC, DST]), num_vertices=V), want)
    assert_same_graph(Graph(np.stack([SRC, DST]), num_vertices=V), want)
    assert_same_graph(Graph((SRC, DST), num_vertices=V), want)
    assert_same_graph(Graph([SRC.tolist(), DST.tolist()], num_vertices=V), want)
    assert_same_graph(Graph(want), want)
    # CSR by source: edge ids are positions in `indices`, so sort the COO by source
    order = np.argsort(SRC, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(SRC, minlength=V))])
    by_csr = Graph.from_csr(indptr, DST[order], num_vertices=V)
    assert_same_graph(by_csr, Graph.from_coo(SRC[order], DST[order], num_vertices=V))
    # scipy: edge ids follow A.tocoo() order
    A = sp.coo_matrix((np.ones(len(SRC)), (SRC, DST)), shape=(V, V))
    assert_same_graph(Graph.from_scipy(A), want)  # tocoo() of a COO keeps its order
    csr = sp.csr_matrix(([1.0, 2.0, 3.0], ([2, 0, 0], [1, 3, 1])), shape=(4, 4))
    coo = csr.tocoo()
    g = Graph(csr)
    np.testing.assert_array_equal(g.src, coo.row)
    np.testing.assert_array_equal(g.dst, coo.col)
    assert g.num_vertices == 4


def test_scipy_drops_explicit_zeros_and_keeps_order():
    A = sp.csr_matrix((np.array([1.0, 0.0, 5.0, np.nan]), np.array([1, 2, 0, 2]), np.array([0, 2, 3, 4])), shape=(3, 3))
    assert A.nnz == 4
    g = Graph.from_scipy(A)
    np.testing.assert_array_equal(g.src, [0, 1, 2])
    np.testing.assert_array_equal(g.dst, [1, 0, 2])  # the stored zero (0, 2) is no edge; NaN != 0 is
    g = Graph.from_scipy(sp.csr_array(np.array([[0, 1], [1, 1]], dtype=bool)))
    np.testing.assert_array_equal(np.stack([g.src, g.dst]), [[0, 1, 1], [1, 0, 1]])


def test_scipy_non_square_is_bipartite():
    g = Graph.from_scipy(sp.csr_matrix((3, 4)))
    assert (g.num_src, g.num_dst, g.num_edges, g.bipartite) == (3, 4, 0, True)
    with pytest.raises(GraphError, match="scipy sparse"):
        Graph.from_scipy(np.eye(3))


def test_csr_default_num_vertices():
    # 2 rows, but a destination 4: V = max(len(indptr) - 1, max(indices) + 1)
    g = Graph.from_csr([0, 1, 3], [4, 0, 1])
    assert g.num_vertices == 5
    np.testing.assert_array_equal(g.src, [0, 1, 1])
    np.testing.assert_array_equal(g.dst, [4, 0, 1])
    g = Graph.from_csr([0, 0, 0, 0], [])
    assert (g.num_vertices, g.num_edges) == (3, 0)


def test_default_num_vertices_from_ids():
    g = Graph.from_coo([0, 7], [3, 1])
    assert g.num_vertices == 8
    assert Graph.from_coo([], []).num_vertices == 0


def test_empty_graphs():
    for g in (
        Graph.from_coo([], []),
        Graph(np.zeros((2, 0), np.int64)),
        Graph.from_csr([0], []),
        Graph.from_scipy(sp.csr_matrix((0, 0))),
    ):
        assert (g.num_vertices, g.num_edges) == (0, 0)
        np.testing.assert_array_equal(g.in_indptr, [0])
        assert g.in_src.shape == g.in_eid.shape == (0,)
        assert g.deg_in(np.float32).shape == (0,)
        assert g.signature() == {
            "num_vertices": 0,
            "num_edges": 0,
            "deg_mean": 0.0,
            "deg_std": 0.0,
            "deg_max": 0,
            "out_deg_max": 0,
        }
    g = Graph.from_coo([], [], num_vertices=3)
    np.testing.assert_array_equal(g.in_indptr, [0, 0, 0, 0])
    np.testing.assert_array_equal(g.out_indptr, [0, 0, 0, 0])
    np.testing.assert_array_equal(g.deg_out(np.float64), [0, 0, 0])


def test_degrees_count_self_loops_and_duplicates():
    g = Graph.from_coo(SRC, DST, num_vertices=V)
    for dtype in (np.float32, np.float64):
        din, dout = g.deg_in(dtype), g.deg_out(dtype)
        assert din.dtype == dtype and dout.dtype == dtype
        np.testing.assert_array_equal(din, [2, 3, 3, 0, 0])
        np.testing.assert_array_equal(dout, [3, 1, 2, 2, 0])
        assert not din.flags.writeable and not dout.flags.writeable
        assert g.deg_in(dtype) is din  # cached
    assert g.deg_in("f32").dtype == np.float32
    with pytest.raises(ArgumentError):
        g.deg_in(np.int64)
    s = g.signature()
    assert s["num_vertices"] == V and s["num_edges"] == 8 and s["deg_max"] == 3
    assert s["deg_mean"] == pytest.approx(8 / 5) and s["deg_std"] == pytest.approx(np.std([2, 3, 3, 0, 0]))


def test_arrays_are_read_only_int64_contiguous_and_owned():
    src, dst = SRC.copy(), DST.copy()
    g = Graph.from_coo(src, dst, num_vertices=V)
    for name in ("src", "dst", "in_indptr", "in_src", "in_eid", "out_indptr", "out_dst", "out_eid"):
        arr = getattr(g, name)
        assert arr.dtype == np.int64 and arr.flags.c_contiguous, name
        assert not arr.flags.writeable, name
        with pytest.raises(ValueError):
            arr[0] = 1
    src[0] = 4  # the graph holds its own copy; the user's arrays stay writeable
    assert g.src[0] == 0 and src.flags.writeable
    assert g.out_indptr is g.out_indptr  # computed once
    g.plans["partition"] = 1
    assert g.plans == {"partition": 1}
    assert Graph.from_coo([0], [0]).plans == {}


def test_accepts_other_integer_dtypes():
    for dtype in (np.int32, np.uint8, np.uint64, np.int16):
        g = Graph.from_coo(SRC.astype(dtype), DST.astype(dtype), num_vertices=V)
        assert g.src.dtype == np.int64
        np.testing.assert_array_equal(g.in_eid, Graph.from_coo(SRC, DST, num_vertices=V).in_eid)
    Graph.from_coo(SRC, DST, num_vertices=np.int32(V))


class FakeTensor:
    """Duck-types the part of torch.Tensor the runtime uses (torch is not installed here)."""

    __module__ = "torch"

    def __init__(self, arr):
        self.arr = arr

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.arr


def test_torch_like_tensors():
    g = Graph(FakeTensor(np.stack([SRC, DST])), num_vertices=V)
    assert_same_graph(g, Graph.from_coo(SRC, DST, num_vertices=V))
    g = Graph.from_coo(FakeTensor(SRC), FakeTensor(DST))
    assert g.num_edges == len(SRC)


def test_in_csr_is_stable_on_random_graphs():
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 50, 2000), rng.integers(0, 50, 2000)
    g = Graph.from_coo(src, dst, num_vertices=60)
    indptr, in_src, in_eid = in_csr_by_loop(src, dst, 60)
    np.testing.assert_array_equal(g.in_indptr, indptr)
    np.testing.assert_array_equal(g.in_src, in_src)
    np.testing.assert_array_equal(g.in_eid, in_eid)


@given(edge_lists())
def test_in_csr_matches_loop(edges):
    src, dst, v = edges
    g = Graph.from_coo(src, dst, num_vertices=v)
    indptr, in_src, in_eid = in_csr_by_loop(src, dst, v)
    np.testing.assert_array_equal(g.in_indptr, indptr)
    np.testing.assert_array_equal(g.in_src, in_src)
    np.testing.assert_array_equal(g.in_eid, in_eid)
    np.testing.assert_array_equal(g.deg_in(np.float64), np.diff(indptr))
    np.testing.assert_array_equal(g.deg_out(np.float32), np.bincount(src, minlength=v))
    # positions map back to edges
    np.testing.assert_array_equal(g.src[g.in_eid], g.in_src)
    np.testing.assert_array_equal(g.dst[g.out_eid], g.out_dst)


@given(edge_lists())
def test_edges_grouped_by_destination_are_the_in_csr_as_they_are(edges):
    """A graph whose edges come sorted by destination (a sampler's block) keeps them as its
    in-CSR, unsorted and ungathered: the same arrays as the sort gives, its ids the identity."""
    src, dst, v = edges
    order = np.argsort(dst, kind="stable")
    src, dst = src[order], dst[order]
    g = Graph.from_coo(src, dst, num_vertices=v)
    assert g._in_eid is None and g.in_src is g.src  # no sort, no gather: the edge list itself
    indptr, in_src, in_eid = in_csr_by_loop(src, dst, v)
    np.testing.assert_array_equal(g.in_indptr, indptr)
    np.testing.assert_array_equal(g.in_src, in_src)
    np.testing.assert_array_equal(g.in_eid, in_eid)
    assert g.edges_sorted and not g.in_src.flags.writeable
    np.testing.assert_array_equal(g.deg_in(np.float32), np.diff(indptr))
    np.testing.assert_array_equal(g.deg_out(np.float32), np.bincount(src, minlength=v))
    rev = g.reversed()  # sorted by source only by chance: the general way, checked the same
    indptr, in_src, in_eid = in_csr_by_loop(dst, src, v)
    np.testing.assert_array_equal(rev.in_indptr, indptr)
    np.testing.assert_array_equal(rev.in_src, in_src)
    np.testing.assert_array_equal(rev.in_eid, in_eid)


def test_builds_a_million_edges_fast():
    """A million edges build within a few times numpy's stable argsort of their destinations
    (timed beside it, best of three: the machines are shared); an O(E log E) comparison sort
    or a loop in Python would be far past it."""
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 200_000, 1_000_000), rng.integers(0, 200_000, 1_000_000)
    build, baseline = [], []
    for _ in range(3):
        start = time.perf_counter()
        g = Graph.from_coo(src, dst)
        build.append(time.perf_counter() - start)
        start = time.perf_counter()
        np.argsort(dst, kind="stable")
        baseline.append(time.perf_counter() - start)
    assert min(build) < 8 * min(baseline), (build, baseline)
    assert g.in_indptr[-1] == 1_000_000


def test_runtime_imports_no_compiler():
    code = (
        "import sys, gnnc.graph.graph, gnnc.runtime.signature\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('xdsl', 'llvmlite', 'scipy', 'torch')"
        " or m.startswith(('gnnc.lang', 'gnnc.ir.', 'gnnc.transforms', 'gnnc.target', 'gnnc.driver'))"
        " and m not in ('gnnc.ir.abi', 'gnnc.ir.schedule', 'gnnc.ir.signature')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ invariants


@pytest.mark.parametrize(
    "build, pattern",
    [
        (lambda: Graph.from_coo([0, 1], [1, 5], num_vertices=3), r"dst\[1\] = 5 is out of range.*< 3"),
        (lambda: Graph.from_coo([0, -1], [1, 1]), r"src\[1\] = -1 is negative"),
        (lambda: Graph.from_coo([0, 1], [1]), r"same length.*2 and 1"),
        (lambda: Graph.from_coo([0.0, 1.0], [1, 1]), r"src has dtype float64.*integers"),
        (lambda: Graph.from_coo([True, False], [1, 1]), r"src has dtype bool"),
        (lambda: Graph.from_coo([[0, 1]], [1, 1]), r"src must be a 1-D array"),
        (lambda: Graph.from_coo([0], [1], num_vertices=-1), r"num_vertices must be a non-negative integer"),
        (lambda: Graph.from_coo([0], [1], num_vertices=2.0), r"num_vertices must be a non-negative integer"),
        (lambda: Graph.from_coo([0], [1], num_vertices=True), r"num_vertices must be a non-negative integer"),
        (lambda: Graph.from_coo(np.array([2**63], dtype=np.uint64), [0]), r"does not fit in int64"),
        (lambda: Graph.from_edge_index(np.zeros((3, 4), np.int64)), r"shape \(2, E\).*\(3, 4\)"),
        (lambda: Graph.from_edge_index(np.zeros((5, 2), np.int64)), r"edge_index\.T"),
        (lambda: Graph.from_edge_index(np.zeros(4, np.int64)), r"shape \(2, E\)"),
        (lambda: Graph.from_edge_index(np.zeros((2, 3))), r"edge_index has dtype float64"),
        (lambda: Graph.from_edge_index(np.array([[0, 1], [1, 2]]), num_vertices=2), r"dst\[1\] = 2 is out of range"),
        (lambda: Graph.from_csr([], []), r"at least one entry"),
        (lambda: Graph.from_csr([1, 2], [0, 0]), r"indptr\[0\] must be 0, got 1"),
        (
            lambda: Graph.from_csr([0, 2, 1, 3], [0, 0, 0]),
            r"non-decreasing.*position 2: indptr\[1\] = 2 > indptr\[2\] = 1",
        ),
        (lambda: Graph.from_csr([0, 1, 2], [0, 0, 0]), r"indptr\[-1\] = 2 must equal len\(indices\) = 3"),
        (lambda: Graph.from_csr([0, 1, 2], [0, 1], num_vertices=1), r"num_vertices = 1 is less than the 2 rows"),
        (lambda: Graph.from_csr([0, 1, 2], [0, 3], num_vertices=3), r"indices\[1\] = 3 is out of range"),
        (lambda: Graph.from_csr([0, 1], [-2]), r"indices\[0\] = -2 is negative"),
        (lambda: Graph.from_csr([0.0, 1.0], [0]), r"indptr has dtype float64"),
        (lambda: Graph.from_csr([[0, 1]], [0]), r"indptr must be a 1-D array"),
        (lambda: Graph({"src": [0]}), r"cannot build a Graph from dict"),
        (lambda: Graph(sp.csr_matrix((2, 2)), num_vertices=3), r"num_vertices cannot be given"),
    ],
)
def test_invariant_violations(build, pattern):
    with pytest.raises(GraphError, match=pattern):
        build()


# ------------------------------------------------------------ call arguments

GAT = KernelSignature.from_dict(
    {
        "name": "gat",
        "dtype": "f32",
        "params": [
            {"name": "h", "domain": "V", "shape": ["H", "F"], "sides": ["src"]},
            {"name": "el", "domain": "V", "shape": ["H"], "sides": ["src", "dst"]},
            {"name": "w", "domain": "E", "shape": []},
            {"name": "eps", "domain": None, "shape": []},
            {"name": "W", "domain": None, "shape": ["F", 2]},
        ],
        "results": [
            {"name": "out", "domain": "V", "shape": ["H", 2]},
            {"name": "alpha", "domain": "E", "shape": ["H"]},
        ],
        "single_result": False,
        "symbol": "gnnc_gat",  # extra metadata keys are ignored
        "abi": {},
    }
)
GCN = KernelSignature(
    "gcn", "f64", (TensorSig("x", "V", ("F",)), TensorSig("w", "E", ())), (TensorSig("out", "V", ("F",)),), True
)


@pytest.fixture
def graph():
    return Graph.from_coo(SRC, DST, num_vertices=V)


def gat_args(graph, dtype=np.float32, H=2, F=3):
    rng = np.random.default_rng(0)
    return {
        "h": rng.random((graph.num_vertices, H, F)).astype(dtype),
        "el": rng.random((graph.num_vertices, H)).astype(dtype),
        "w": rng.random(graph.num_edges).astype(dtype),
        "eps": 0.5,
        "W": rng.random((F, 2)).astype(dtype),
    }


def test_signature_round_trip():
    d = GAT.to_dict()
    assert "symbol" not in d
    assert KernelSignature.from_dict(d) == GAT
    assert d["params"][3] == {"name": "eps", "domain": None, "shape": []}
    import json

    assert KernelSignature.from_dict(json.loads(json.dumps(d))) == GAT


def test_prepare_call_binds_and_allocates(graph):
    a = gat_args(graph)
    inputs, outputs, dims = prepare_call(GAT, graph, (a["h"], a["el"]), {"w": a["w"], "eps": 0.5, "W": a["W"]})
    assert dims == {"H": 2, "F": 3}
    assert inputs[0] is a["h"] and inputs[4] is a["W"]  # contiguous, right dtype: no copy
    assert inputs[3].dtype == np.float32 and inputs[3].shape == () and float(inputs[3]) == 0.5
    assert [o.shape for o in outputs] == [(V, 2, 2), (8, 2)]
    assert all(o.dtype == np.float32 and o.flags.c_contiguous for o in outputs)
    packed = pack_results(GAT, outputs)
    assert list(packed) == ["out", "alpha"] and packed["out"] is outputs[0]
    inputs, outputs, dims = prepare_call(GCN, graph, (np.zeros((V, 4)), np.zeros(8)), {})
    assert pack_results(GCN, outputs) is outputs[0]
    # an int scalar and a Python list are fine
    a["eps"] = 1
    a["w"] = [0.0] * 8
    inputs, _, _ = prepare_call(GAT, graph, (), a)
    assert inputs[3].dtype == np.float32 and inputs[2].dtype == np.float32
    # a 0-d array for a scalar keeps its shape
    a["eps"] = np.array(0.5, np.float32)
    inputs, _, _ = prepare_call(GAT, graph, (), a)
    assert inputs[3].shape == () and inputs[3] is a["eps"]


def test_non_contiguous_inputs_are_copied(graph):
    a = gat_args(graph)
    big = np.zeros((V, 2, 6), np.float32)
    a["h"] = big[:, :, ::2]
    a["W"] = np.asfortranarray(a["W"])
    inputs, _, _ = prepare_call(GAT, graph, (), a)
    assert inputs[0].flags.c_contiguous and not np.shares_memory(inputs[0], big)
    np.testing.assert_array_equal(inputs[0], a["h"])
    assert inputs[4].flags.c_contiguous
    np.testing.assert_array_equal(inputs[4], a["W"])


def test_a_vertex_input_the_kernel_never_reads_is_checked_but_not_copied(graph):
    """No `sides`: the kernel reads h nowhere (a gradient kernel taking every forward input);
    a broadcast stand-in of its shape binds the dims and is passed as it is."""
    unread = KernelSignature.from_dict(
        {
            **GAT.to_dict(),
            "params": [{**p.to_dict(), "sides": []} if p.name == "h" else p.to_dict() for p in GAT.params],
        }
    )
    a = gat_args(graph)
    a["h"] = np.broadcast_to(np.float32(0), (V, 2, 3))
    inputs, _, dims = prepare_call(unread, graph, (), a)
    assert inputs[0] is a["h"] and dims["F"] == 3
    a["h"] = np.broadcast_to(np.float32(0), (V + 1, 2, 3))
    with pytest.raises(ArgumentError, match="h"):
        prepare_call(unread, graph, (), a)


def test_torch_like_inputs(graph):
    a = gat_args(graph)
    h = a["h"]
    a["h"] = FakeTensor(h)
    inputs, _, _ = prepare_call(GAT, graph, (), a)
    assert inputs[0] is h


@pytest.mark.parametrize(
    "change, pattern",
    [
        (lambda a: a.update(h=a["h"].astype(np.float64)), r"input 'h' of gat: expected float32, got float64"),
        (lambda a: a.update(h=a["h"].astype(np.int32)), r"expected float32, got int32"),
        (
            lambda a: a.update(el=a["el"][:, :, None]),
            r"input 'el' of gat: expected 2 axes \[V, H\], got shape \(5, 2, 1\)",
        ),
        (lambda a: a.update(h=a["h"][:4]), r"leading axis \(V\) has 4 entries but the graph has 5 vertices"),
        (lambda a: a.update(w=a["w"][:7]), r"leading axis \(E\) has 7 entries but the graph has 8 edges"),
        (lambda a: a.update(el=a["el"][:, :1]), r"dimension 'H' is 2 in 'h' \(axis 1\) but 1 in 'el' \(axis 1\)"),
        (lambda a: a.update(W=a["W"][:2]), r"dimension 'F' is 3 in 'h' \(axis 2\) but 2 in 'W' \(axis 0\)"),
        (lambda a: a.update(W=np.zeros((3, 5), np.float32)), r"input 'W' of gat: axis 1 must have size 2"),
        (lambda a: a.update(eps="x"), r"input 'eps' of gat is a scalar"),
        (lambda a: a.update(eps=True), r"input 'eps' of gat is a scalar"),
        (lambda a: a.update(eps=1e300), r"out of range"),
        (lambda a: a.update(eps=10**400), r"out of range"),
        (lambda a: a.update(eps=np.zeros(1, np.float32)), r"input 'eps' of gat: expected 0 axes"),
        (lambda a: a.update(x=1), r"unknown input 'x' for gat\(h, el, w, eps, W\)"),
        (lambda a: (a.pop("el"), a.pop("W")), r"missing inputs 'el', 'W' of gat"),
        (lambda a: a.update(graph=1), r"'graph' is a call option"),
        (lambda a: a.update(threads=2), r"'threads' is a call option"),
        (lambda a: a.update(out=1), r"'out' is a call option"),
    ],
)
def test_prepare_call_errors(graph, change, pattern):
    a = gat_args(graph)
    change(a)
    with pytest.raises(ArgumentError, match=pattern):
        prepare_call(GAT, graph, (), a)


def test_positional_errors(graph):
    a = gat_args(graph)
    with pytest.raises(ArgumentError, match=r"'h' both positionally and by name"):
        prepare_call(GAT, graph, (a["h"],), a)
    with pytest.raises(ArgumentError, match=r"takes 5 inputs.*6 were given"):
        prepare_call(GAT, graph, tuple(a.values()) + (1,), {})


def test_out_given(graph):
    a = gat_args(graph)
    out = np.zeros((V, 2, 2), np.float32)
    alpha = np.zeros((8, 2), np.float32)
    _, outputs, _ = prepare_call(GAT, graph, (), a, out={"alpha": alpha})
    assert outputs[1] is alpha and outputs[0].shape == (V, 2, 2)
    _, outputs, _ = prepare_call(GAT, graph, (), a, out=(out, alpha))
    assert outputs[0] is out and outputs[1] is alpha
    _, outputs, _ = prepare_call(GAT, graph, (), a, out=[None, alpha])
    assert outputs[1] is alpha
    x = np.zeros((V, 4))
    single = np.empty((V, 4))
    _, outputs, _ = prepare_call(GCN, graph, (x, np.zeros(8)), {}, out=single)
    assert outputs[0] is single


@pytest.mark.parametrize(
    "make_out, pattern",
    [
        (
            lambda a: {"out": np.zeros((V, 2, 2), np.float64)},
            r"out= for result 'out' of gat: expected float32, got float64",
        ),
        (lambda a: {"out": np.zeros((V, 2, 3), np.float32)}, r"expected shape \(5, 2, 2\), got \(5, 2, 3\)"),
        (lambda a: {"alpha": np.zeros((2, 8), np.float32).T}, r"must be C-contiguous"),
        (lambda a: {"alpha": np.zeros((8, 4), np.float32)[:, ::2]}, r"must be C-contiguous"),
        (lambda a: {"alpha": np.broadcast_to(np.zeros(2, np.float32), (8, 2))}, r"C-contiguous|read-only"),
        (lambda a: {"nope": np.zeros(1)}, r"unknown result 'nope'.*out, alpha"),
        (lambda a: np.zeros((V, 2, 2), np.float32), r"gat has 2 results.*dict"),
        (lambda a: (None, None, None), r"3 arrays but gat has 2 results"),
        (lambda a: {"alpha": [[0.0] * 2] * 8}, r"must be a numpy array, got list"),
    ],
)
def test_out_errors(graph, make_out, pattern):
    a = gat_args(graph)
    with pytest.raises(ArgumentError, match=pattern):
        prepare_call(GAT, graph, (), a, out=make_out(a))


def test_out_read_only(graph):
    a = gat_args(graph)
    alpha = np.zeros((8, 2), np.float32)
    alpha.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        prepare_call(GAT, graph, (), a, out={"alpha": alpha})


def test_out_overlapping_inputs_or_outputs(graph):
    a = gat_args(graph)
    base = np.zeros(16, np.float32)
    a["el"] = base[:10].reshape(V, 2)  # el and alpha are views of one buffer
    with pytest.raises(ArgumentError, match=r"out= for result 'alpha' of gat overlaps input 'el'"):
        prepare_call(GAT, graph, (), a, out={"alpha": base.reshape(8, 2)})
    a = gat_args(graph)
    flat = np.zeros(V * 6 + 16, np.float32)
    a["h"] = flat[: V * 6].reshape(V, 2, 3)
    with pytest.raises(ArgumentError, match="overlaps input 'h'"):  # by one element
        prepare_call(GAT, graph, (), a, out={"alpha": flat[V * 6 - 1 : V * 6 + 15].reshape(8, 2)})
    prepare_call(GAT, graph, (), a, out={"alpha": flat[V * 6 :].reshape(8, 2)})  # adjacent: fine
    x = np.zeros((V, 4))
    for out in (x, x.view(), x[:, :], x.reshape(V, 4)):
        with pytest.raises(ArgumentError, match="overlaps input 'x'"):
            prepare_call(GCN, graph, (x, np.zeros(8)), {}, out=out)
    both = np.zeros(V * 4 + 16, np.float32)
    a = gat_args(graph)
    with pytest.raises(ArgumentError, match="results 'out' and 'alpha' of gat overlap"):
        prepare_call(
            GAT, graph, (), a, out=(both[: V * 4].reshape(V, 2, 2), both[V * 4 - 1 : V * 4 + 15].reshape(8, 2))
        )
    prepare_call(GAT, graph, (), a, out=(both[: V * 4].reshape(V, 2, 2), both[V * 4 :].reshape(8, 2)))
    # a non-contiguous input is copied, so an out= in the original's memory does not alias the copy
    y = np.zeros((V, 8))
    _, outputs, _ = prepare_call(GCN, graph, (y[:, ::2], np.zeros(8)), {}, out=np.zeros((V, 4)))
    assert outputs[0].shape == (V, 4)


def test_empty_graph_call():
    g = Graph.from_coo([], [])
    inputs, outputs, dims = prepare_call(GCN, g, (np.zeros((0, 3)), np.zeros(0)), {})
    assert dims == {"F": 3} and outputs[0].shape == (0, 3)


@pytest.mark.parametrize("path", ["one 16-bit radix", "two 16-bit radix", "packed"])
@settings(max_examples=25, deadline=None)
@given(edges=edge_lists(), spread=st.sampled_from([4099, 65521]))
def test_every_sort_of_the_in_csr_is_stable(path, edges, spread):
    """The three numpy sorts `_numpy_csr_by` picks from (by key and edge count) give the stable in-CSR;
    past the first, vertex ids are spread (id * `spread` + 7) so that keys differ in their
    low and high 16 bits both."""
    src, dst, v = edges
    if path != "one 16-bit radix":
        src, dst, v = src * spread + 7, dst * spread + 7, v * spread + 7
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(group_edges.SETTING, "0")  # numpy's sorts, not the native helper's
        group_edges._reset_for_tests()
        if path == "packed":
            mp.setattr(graph_module, "_RADIX2_EDGES", -1)
        g = Graph.from_coo(src, dst, num_vertices=v)
    group_edges._reset_for_tests()
    order = np.argsort(dst, kind="stable")
    np.testing.assert_array_equal(g.in_indptr, np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=v))]))
    np.testing.assert_array_equal(g.in_src, src[order])
    np.testing.assert_array_equal(g.in_eid, order)


def test_a_graph_and_its_reversed_graph_go_without_a_garbage_collection():
    """A block's reversed graph points back weakly: no cycle, so both graphs (and the plans and
    decisions they cache) are freed when the last reference goes, not at the next collection."""
    import gc
    import weakref

    gc.disable()
    try:
        g = Graph.from_edge_index(np.array([[0, 1, 2, 2], [1, 2, 0, 1]]), shape=(3, 3))
        rev = g.reversed()
        rev.deg_out(np.float32)
        dead = weakref.ref(g), weakref.ref(rev)
        del g, rev
        assert dead[0]() is None and dead[1]() is None
    finally:
        gc.enable()


def test_a_reversed_graph_outlives_the_graph_it_reverses():
    g = Graph.from_edge_index(np.array([[0, 1, 2, 2], [1, 2, 0, 1]]), shape=(3, 4))
    rev = g.reversed()
    in_src, in_indptr, deg_in = g.in_src.copy(), g.in_indptr.copy(), g.deg_in(np.float64).copy()
    del g
    assert rev._reversed is None  # held weakly: gone
    np.testing.assert_array_equal(rev.deg_out(np.float64), deg_in)  # counted from its own sources
    again = rev.reversed()  # built again, and kept
    assert again.reversed() is rev and rev.reversed() is again
    np.testing.assert_array_equal(again.in_src, in_src)
    np.testing.assert_array_equal(again.in_indptr, in_indptr)


def test_a_graph_that_ran_kernels_pickles_and_copies_without_its_caches():
    """A pickle or a copy keeps the arrays, not the plans (decisions, laid-out calls: a
    mappingproxy and weak references that do not pickle) nor a forward graph's reversed one."""
    import copy
    import pickle

    import gnnc

    module = gnnc.compile("kernel s(x: f32[V, 4]) -> f32[V, 4] { out[v] = sum(x[u]) }")
    g = Graph.from_edge_index(np.array([[0, 1, 2, 2], [1, 2, 0, 1]]), shape=(3, 3))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = module.s(g, x)
    rev = g.reversed()
    module.s(rev, x)
    assert g.plans and rev.plans
    for made in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g)):
        assert made.plans == {} and made._reversed is None
        np.testing.assert_array_equal(module.s(made, x), want)
    made_rev = pickle.loads(pickle.dumps(rev))
    assert made_rev.plans == {} and made_rev._reversed is not None  # the graph it reverses, along
    np.testing.assert_array_equal(made_rev.reversed().in_src, g.in_src)
    np.testing.assert_array_equal(module.s(made_rev, x), module.s(rev, x))
