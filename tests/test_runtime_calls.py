"""Calling real compiled kernels: argument checking, out=, non-contiguous inputs, edge ids.

Every bad call must raise a `gnnc.GnncError` subclass before native code runs,
and leave any `out=` buffer untouched.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import gnnc
from gnnc import sharedlib
from gnnc.errors import ArgumentError, GnncError, GraphError, SourceError
from tests.helpers import assert_matches

EXAMPLES = Path(__file__).parent.parent / "examples"


@functools.cache
def compiled(name: str):
    return gnnc.compile(str(EXAMPLES / f"{name}.gnn"))


@functools.cache
def referenced(name: str):
    return gnnc.compile(str(EXAMPLES / f"{name}.gnn"), target="reference")


N, E, F = 40, 160, 6


@pytest.fixture(scope="module")
def graph() -> gnnc.Graph:
    rng = np.random.default_rng(7)
    return gnnc.Graph(rng.integers(0, N, size=(2, E)), num_vertices=N)


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def gat_inputs(n: int, heads: int = 2, feats: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    return {
        "h": rand(n, heads, feats, seed=seed),
        "el": rand(n, heads, seed=seed + 1),
        "er": rand(n, heads, seed=seed + 2),
    }


def raises_argument_error(call, match: str | None = None) -> ArgumentError:
    with pytest.raises(ArgumentError, match=match) as info:
        call()
    assert isinstance(info.value, GnncError)
    return info.value


# ---------------------------------------------------------------- bad arguments


def test_wrong_dtype(graph):
    gcn = compiled("gcn").gcn
    x64 = rand(N, F, dtype=np.float64)
    err = raises_argument_error(lambda: gcn(graph, x=x64, w=rand(E)), "float32")
    assert "'x'" in str(err) and "float64" in str(err)
    raises_argument_error(lambda: gcn(graph, x=rand(N, F), w=np.ones(E, dtype=np.int64)), "'w'")


def test_wrong_rank(graph):
    gcn = compiled("gcn").gcn
    raises_argument_error(lambda: gcn(graph, x=rand(N), w=rand(E)), "axes")
    raises_argument_error(lambda: gcn(graph, x=rand(N, F, 1), w=rand(E)), "axes")
    raises_argument_error(lambda: gcn(graph, x=rand(N, F), w=rand(E, 1)), "'w'")


def test_wrong_leading_axis(graph):
    gcn = compiled("gcn").gcn
    raises_argument_error(lambda: gcn(graph, x=rand(N + 1, F), w=rand(E)), "vertices")
    raises_argument_error(lambda: gcn(graph, x=rand(N, F), w=rand(E - 1)), "edges")
    attention = compiled("attention").attention
    raises_argument_error(lambda: attention(graph, q=rand(N, 2, 4), k=rand(N - 1, 2, 4)), "'k'")


def test_inconsistent_symbolic_dim(graph):
    gat = compiled("gat").gat
    inputs = gat_inputs(N, heads=2)
    inputs["el"] = rand(N, 3)
    err = raises_argument_error(lambda: gat(graph, **inputs), "'H'")
    assert "2" in str(err) and "3" in str(err)


def test_missing_and_unknown_arguments(graph):
    gat = compiled("gat").gat
    inputs = gat_inputs(N)
    del inputs["er"]
    raises_argument_error(lambda: gat(graph, **inputs), "missing input 'er'")
    raises_argument_error(lambda: gat(graph, **gat_inputs(N), bias=rand(N, 2)), "unknown input 'bias'")
    gcn = compiled("gcn").gcn
    raises_argument_error(lambda: gcn(graph, rand(N, F), rand(E), rand(E)), "positionally")
    raises_argument_error(lambda: gcn(graph, rand(N, F), x=rand(N, F), w=rand(E)), "both positionally and by name")


def test_not_a_graph(graph):
    gcn = compiled("gcn").gcn
    x, w = rand(N, F), rand(E)
    raises_argument_error(lambda: gcn(np.array([[0, 1], [1, 0]]), x=x, w=w), "gnnc.Graph")
    raises_argument_error(lambda: gcn(None, x=x, w=w), "gnnc.Graph")
    raises_argument_error(lambda: gcn(sp.eye(N, format="csr"), x=x, w=w), "gnnc.Graph")


def test_bad_call_options(graph):
    gcn = compiled("gcn").gcn
    x, w = rand(N, F), rand(E)
    raises_argument_error(lambda: gcn(graph, x=x, w=w, threads=0), "threads")
    raises_argument_error(lambda: gcn(graph, x=x, w=w, threads="4"), "threads")


# ---------------------------------------------------------------- good calls


def test_positional_arguments(graph):
    gcn = compiled("gcn").gcn
    x, w = rand(N, F, seed=1), rand(E, seed=2)
    got = gcn(graph, x, w)
    assert_matches(got, referenced("gcn").gcn(graph, x=x, w=w), graph, np.float32)
    np.testing.assert_array_equal(got, gcn(graph, x, w=w))
    np.testing.assert_array_equal(got, gcn(graph, x=x, w=w))


@pytest.mark.parametrize("eps", [0.25, -1.5, 0, np.float32(0.5), np.array(0.75, dtype=np.float32)],
                         ids=["float", "negative", "int", "np.float32", "0-d"])  # fmt: skip
def test_scalar_parameter(graph, eps):
    gin = compiled("gin").gin
    x = rand(N, F, seed=3)
    got = gin(graph, x=x, eps=eps)
    want = referenced("gin").gin(graph, x=x, eps=float(eps))
    assert_matches(got, want, graph, np.float32)
    np.testing.assert_array_equal(gin(graph, x, eps), got)


def test_scalar_parameter_bad_values(graph):
    gin = compiled("gin").gin
    x = rand(N, F)
    raises_argument_error(lambda: gin(graph, x=x, eps="0.1"), "scalar")
    raises_argument_error(lambda: gin(graph, x=x, eps=1e300), "out of range")
    raises_argument_error(lambda: gin(graph, x=x, eps=np.zeros(3, np.float32)), "'eps'")


# ---------------------------------------------------------------- out=


def test_out_single_result(graph):
    gcn = compiled("gcn").gcn
    x, w = rand(N, F, seed=4), rand(E, seed=5)
    buf = np.full((N, F), np.nan, dtype=np.float32)
    res = gcn(graph, x=x, w=w, out=buf)
    assert res is buf
    np.testing.assert_array_equal(buf, gcn(graph, x=x, w=w))


def test_out_gat_dict_and_tuple(graph):
    gat = compiled("gat").gat
    inputs = gat_inputs(N, seed=6)
    want = gat(graph, **inputs)
    assert_matches(want, referenced("gat").gat(graph, **inputs), graph, np.float32)

    out = np.full((N, 2, 3), np.nan, np.float32)
    alpha = np.full((E, 2), np.nan, np.float32)
    res = gat(graph, **inputs, out={"out": out, "alpha": alpha})
    assert res["out"] is out and res["alpha"] is alpha
    np.testing.assert_array_equal(out, want["out"])
    np.testing.assert_array_equal(alpha, want["alpha"])

    out2 = np.full_like(out, np.nan)
    res = gat(graph, **inputs, out={"out": out2})  # the other result is allocated
    assert res["out"] is out2 and res["alpha"] is not alpha
    np.testing.assert_array_equal(out2, want["out"])
    np.testing.assert_array_equal(res["alpha"], want["alpha"])

    out3, alpha3 = np.full_like(out, np.nan), np.full_like(alpha, np.nan)
    res = gat(graph, **inputs, out=(out3, alpha3))
    assert res["out"] is out3 and res["alpha"] is alpha3
    np.testing.assert_array_equal(out3, want["out"])
    np.testing.assert_array_equal(alpha3, want["alpha"])


def test_out_gat_bad_forms(graph):
    gat = compiled("gat").gat
    inputs = gat_inputs(N)
    out = np.zeros((N, 2, 3), np.float32)
    raises_argument_error(lambda: gat(graph, **inputs, out=out), "dict")
    raises_argument_error(lambda: gat(graph, **inputs, out={"beta": out}), "beta")
    raises_argument_error(lambda: gat(graph, **inputs, out=(out, np.zeros((E, 2), np.float32), out)), "3 arrays")
    # out= for one result the right shape for the other
    raises_argument_error(lambda: gat(graph, **inputs, out={"alpha": out}), "shape")
    # two results in one buffer
    buf = np.zeros(N * 6 + E * 2, np.float32)
    shared = {"out": buf[: N * 6].reshape(N, 2, 3), "alpha": buf[1 : E * 2 + 1].reshape(E, 2)}
    raises_argument_error(lambda: gat(graph, **inputs, out=shared), "overlap")


def test_out_overlapping_an_input(graph):
    gcn = compiled("gcn").gcn
    x, w = rand(N, F, seed=8), rand(E)
    before = x.copy()
    raises_argument_error(lambda: gcn(graph, x=x, w=w, out=x), "overlaps input 'x'")
    np.testing.assert_array_equal(x, before)
    # a shifted view of the same memory, both C-contiguous
    base = rand(N + 1, F, seed=9)
    saved = base.copy()
    raises_argument_error(lambda: gcn(graph, x=base[:N], w=w, out=base[1:]), "overlap")
    raises_argument_error(lambda: gcn(graph, x=base[1:], w=w, out=base[:N]), "overlap")
    np.testing.assert_array_equal(base, saved)
    # out= that overlaps an edge input, through a reshaped view
    flat = np.zeros(N * F, np.float32)
    raises_argument_error(lambda: gcn(graph, x=x, w=flat[:E], out=flat.reshape(N, F)), "overlaps input 'w'")
    # the gat result aliasing h
    gat = compiled("gat").gat
    inputs = gat_inputs(N)
    raises_argument_error(lambda: gat(graph, **inputs, out={"out": inputs["h"]}), "overlaps input 'h'")


def test_out_non_contiguous_wrong_dtype_read_only(graph):
    gcn = compiled("gcn").gcn
    x, w = rand(N, F), rand(E)
    wide = np.zeros((N, 2 * F), np.float32)
    raises_argument_error(lambda: gcn(graph, x=x, w=w, out=wide[:, ::2]), "contiguous")
    raises_argument_error(lambda: gcn(graph, x=x, w=w, out=np.zeros((N, F), np.float32, order="F")), "contiguous")
    assert not wide.any()
    raises_argument_error(lambda: gcn(graph, x=x, w=w, out=np.zeros((N, F), np.float64)), "float32")
    raises_argument_error(lambda: gcn(graph, x=x, w=w, out=np.zeros((N, F + 1), np.float32)), "shape")
    raises_argument_error(lambda: gcn(graph, x=x, w=w, out=[[0.0] * F] * N), "numpy array")
    ro = np.zeros((N, F), np.float32)
    ro.flags.writeable = False
    raises_argument_error(lambda: gcn(graph, x=x, w=w, out=ro), "read-only")


def test_bad_out_writes_nothing(graph):
    gat = compiled("gat").gat
    inputs = gat_inputs(N)
    out = np.full((N, 2, 3), 7.0, np.float32)
    bad_alpha = np.zeros((E, 2), np.float64)
    raises_argument_error(lambda: gat(graph, **inputs, out={"out": out, "alpha": bad_alpha}), "alpha")
    assert (out == 7.0).all(), "nothing is written half-way"


# ---------------------------------------------------------------- non-contiguous inputs


def test_non_contiguous_inputs(graph):
    gcn = compiled("gcn").gcn
    x, w = rand(N, F, seed=10), rand(E, seed=11)
    want = gcn(graph, x=x, w=w)
    wide = np.zeros((N, 2 * F), np.float32)
    wide[:, ::2] = x
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(gcn(graph, x=strided, w=w), want)
    fortran = np.asfortranarray(x)
    assert not fortran.flags.c_contiguous
    np.testing.assert_array_equal(gcn(graph, x=fortran, w=w), want)
    w_wide = np.zeros(2 * E, np.float32)
    w_wide[1::2] = w
    np.testing.assert_array_equal(gcn(graph, x=fortran, w=w_wide[1::2]), want)
    np.testing.assert_array_equal(wide[:, 1::2], 0)  # inputs are not written

    attention = compiled("attention").attention
    q, k = rand(N, 2, 4, seed=12), rand(N, 2, 4, seed=13)
    want = attention(graph, q=q, k=k)
    np.testing.assert_array_equal(attention(graph, q=np.asfortranarray(q), k=k[::-1][::-1]), want)
    q_big = np.zeros((N, 4, 4), np.float32)
    q_big[:, ::2] = q
    np.testing.assert_array_equal(attention(graph, q=q_big[:, ::2], k=k), want)


def test_byte_swapped_input_is_a_dtype_error(graph):
    gcn = compiled("gcn").gcn
    x = rand(N, F).astype(">f4" if np.little_endian else "<f4")
    raises_argument_error(lambda: gcn(graph, x=x, w=rand(E)), "x")


# ---------------------------------------------------------------- graphs and edge ids


def attention_numpy(q: np.ndarray, k: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    return np.einsum("ehd,ehd->eh", q[dst].astype(np.float64), k[src].astype(np.float64))


def test_edge_outputs_follow_user_edge_ids():
    rng = np.random.default_rng(21)
    n, e, heads, d = 25, 140, 2, 5
    src = rng.integers(0, n, e)
    dst = rng.integers(0, n, e)
    src[:5], dst[:5] = 3, 3  # self loops
    src[5:9], dst[5:9] = 1, 2  # a duplicated edge
    q, k = rand(n, heads, d, seed=22), rand(n, heads, d, seed=23)
    attention = compiled("attention").attention

    def check(graph: gnnc.Graph, s: np.ndarray, t: np.ndarray) -> np.ndarray:
        assert graph.num_edges == len(s)
        got = attention(graph, q=q, k=k)
        assert got.shape == (len(s), heads)
        np.testing.assert_allclose(got, attention_numpy(q, k, s, t), rtol=1e-5, atol=1e-5)
        return got

    by_edge_index = check(gnnc.Graph(np.stack([src, dst]), num_vertices=n), src, dst)
    np.testing.assert_array_equal(check(gnnc.Graph.from_edge_index(np.stack([src, dst]), num_vertices=n), src, dst),
                                  by_edge_index)  # fmt: skip
    np.testing.assert_array_equal(check(gnnc.Graph.from_coo(src, dst, num_vertices=n), src, dst), by_edge_index)
    np.testing.assert_array_equal(check(gnnc.Graph((src, dst), num_vertices=n), src, dst), by_edge_index)
    # a scipy COO matrix keeps its entries' order, duplicates included
    coo = sp.coo_matrix((np.ones(e, np.float32), (src, dst)), shape=(n, n))
    np.testing.assert_array_equal(check(gnnc.Graph.from_scipy(coo), src, dst), by_edge_index)

    # CSR by source: an edge's id is its position in `indices`
    order = np.argsort(src, kind="stable")
    s_sorted, t_sorted = src[order], dst[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(s_sorted, minlength=n))])
    by_csr = check(gnnc.Graph.from_csr(indptr, t_sorted, num_vertices=n), s_sorted, t_sorted)
    np.testing.assert_array_equal(by_csr, by_edge_index[order])

    # a scipy CSR matrix: ids follow A.tocoo()
    a = sp.csr_matrix((np.ones(e), (src, dst)), shape=(n, n))  # sums the duplicates into one entry
    a_coo = a.tocoo()
    by_scipy = check(gnnc.Graph.from_scipy(a), a_coo.row, a_coo.col)
    assert len(by_scipy) == a.nnz < e


def test_same_graph_four_ways_same_results():
    rng = np.random.default_rng(31)
    n = 30
    pairs = np.unique(rng.integers(0, n, size=(200, 2)), axis=0)  # sorted by source, then destination
    src, dst = pairs[:, 0], pairs[:, 1]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
    graphs = {
        "edge_index": gnnc.Graph(np.stack([src, dst]), num_vertices=n),
        "coo": gnnc.Graph.from_coo(src, dst, num_vertices=n),
        "csr": gnnc.Graph.from_csr(indptr, dst, num_vertices=n),
        "scipy": gnnc.Graph.from_scipy(sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))),
    }
    gat = compiled("gat").gat
    inputs = gat_inputs(n, heads=2, feats=4, seed=32)
    results = {name: gat(g, **inputs) for name, g in graphs.items()}
    want = referenced("gat").gat(graphs["coo"], **inputs)
    for name, res in results.items():
        assert_matches(res, want, graphs[name], np.float32)
        np.testing.assert_allclose(res["alpha"], results["edge_index"]["alpha"], rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- errors at compile and graph construction


@pytest.mark.parametrize("name", ["out", "threads", "schedule", "graph"])
def test_reserved_parameter_names(name):
    source = f"kernel k({name}: f32[V, F]) -> f32[V, F] {{\n    out[v] = sum({name}[u])\n}}\n"
    with pytest.raises(SourceError, match="reserved") as info:
        gnnc.compile(source)
    assert info.value.loc.line == 1 and info.value.loc.col == 10


@pytest.mark.parametrize(
    "build",
    [
        lambda: gnnc.Graph(np.array([[0, 5], [1, 0]]), num_vertices=3),
        lambda: gnnc.Graph(np.array([[0, -1], [1, 0]])),
        lambda: gnnc.Graph.from_coo(np.array([0, 1]), np.array([1, 7]), num_vertices=3),
        lambda: gnnc.Graph.from_csr(np.array([0, 2, 1, 3]), np.array([0, 1, 2])),
        lambda: gnnc.Graph.from_csr(np.array([0, 1, 2]), np.array([0, 9]), num_vertices=2),
        lambda: gnnc.Graph.from_csr(np.array([1, 2, 3]), np.array([0, 1, 0])),
        lambda: gnnc.Graph.from_coo([0, 2], [1, 0], shape=(2, 3)),
    ],
    ids=["edge-index-high", "edge-index-negative", "coo-high", "csr-decreasing", "csr-indices-high",
         "csr-not-from-zero", "bipartite-src-high"],
)  # fmt: skip
def test_bad_graphs_are_graph_errors(build):
    with pytest.raises(GraphError):
        build()


def test_graph_arrays_are_read_only(graph):
    with pytest.raises(ValueError):
        graph.in_indptr[0] = 5


def test_buffer_addresses_are_the_arrays_data_pointers():
    # the runtime reads data pointers from the array struct (faster than
    # .ctypes.data); they must be the same on every kind of array a call passes

    base = np.arange(100, dtype=np.float32)
    arrays = [
        base,
        base[7:],
        base[10:20],
        np.empty(0, np.int64),
        np.zeros((5, 4))[2:],
        np.ascontiguousarray(np.arange(12).reshape(3, 4).T),
        np.frombuffer(bytes(16), np.uint8),
    ]
    assert sharedlib.addresses(arrays) == [a.ctypes.data for a in arrays]
    assert sharedlib.addresses is sharedlib._addresses_by_struct  # the fast path is the one in use
    assert [sharedlib.address(a) for a in arrays] == [a.ctypes.data for a in arrays]
