"""Graphs past memory: `Graph.from_csc` keeps read-only (memory-mapped) edges without copying
them, and kernels read memory-mapped, read-only features."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import gnnc
from gnnc import api
from gnnc.errors import GraphError

SOURCE = "kernel agg(x: f32[V, F], w: f32[E]) -> f32[V, F] { out[v] = sum(w[e] * x[u]) }"


def _rss_anon_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon:"))


def _files(tmp_path, num_vertices: int, num_edges: int, features: int = 8, seed: int = 0):
    """An in-CSR and features saved as .npy files, opened read-only as memory maps."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, num_vertices, num_edges), rng.integers(0, num_vertices, num_edges)
    graph = gnnc.Graph.from_coo(src, dst, num_vertices=num_vertices)
    np.save(tmp_path / "indptr.npy", graph.in_indptr)
    np.save(tmp_path / "indices.npy", graph.in_src)
    np.save(tmp_path / "x.npy", rng.standard_normal((num_vertices, features), dtype=np.float32))
    np.save(tmp_path / "w.npy", rng.random(num_edges, dtype=np.float32))
    opened = {name: np.load(tmp_path / f"{name}.npy", mmap_mode="r") for name in ("indptr", "indices", "x", "w")}
    return graph, opened


def test_a_graph_from_a_memory_mapped_csc_shares_the_mapping(tmp_path):
    in_memory, files = _files(tmp_path, 500, 4000)
    graph = gnnc.Graph.from_csc(files["indptr"], files["indices"])
    assert np.shares_memory(graph.in_src, files["indices"]) and np.shares_memory(graph.in_indptr, files["indptr"])
    assert graph.src is graph.in_src  # edge ids are in-CSR positions: the sources are the same array
    assert (graph.num_vertices, graph.num_edges, graph.edges_sorted) == (500, 4000, True)
    assert not graph.in_src.flags.writeable
    # the same graph as the edges it was saved from, renumbered in in-CSR order
    np.testing.assert_array_equal(graph.dst, in_memory.dst[in_memory.in_eid])
    np.testing.assert_array_equal(graph.deg_in(np.float64), in_memory.deg_in(np.float64))
    # a writeable array is copied: the graph must not change after its checks
    writeable = np.array(files["indices"])
    assert not np.shares_memory(gnnc.Graph.from_csc(files["indptr"], writeable).in_src, writeable)


def test_building_from_a_memory_map_allocates_no_edge_array(tmp_path):
    num_edges = 1 << 22  # 32 MiB of int64 ids
    rng = np.random.default_rng(1)
    indptr = np.zeros(1025, dtype=np.int64)
    indptr[1:] = np.cumsum(np.bincount(rng.integers(0, 1024, num_edges), minlength=1024))
    np.save(tmp_path / "indptr.npy", indptr)
    np.save(tmp_path / "indices.npy", rng.integers(0, 1024, num_edges))
    indices = np.load(tmp_path / "indices.npy", mmap_mode="r")
    before = _rss_anon_kib()
    graph = gnnc.Graph.from_csc(np.load(tmp_path / "indptr.npy", mmap_mode="r"), indices)
    grown = _rss_anon_kib() - before
    # the range check's temporaries are freed; a copy of the edges would hold 32 MiB
    assert grown < 8 * 1024, f"anonymous memory grew {grown} KiB"
    assert graph.num_edges == num_edges


def test_kernels_read_memory_mapped_read_only_features(tmp_path):
    in_memory, files = _files(tmp_path, 300, 2500, features=16)
    graph = gnnc.Graph.from_csc(files["indptr"], files["indices"])
    x, w = files["x"], files["w"]
    assert not x.flags.writeable and not w.flags.writeable
    module = gnnc.compile(SOURCE)
    got = module.agg(graph, x, w)
    expected = gnnc.compile(SOURCE, target="reference").agg(graph, np.array(x), np.array(w))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    # the gradient kernels read them too
    grads = api.compile_grad(SOURCE, "agg")(graph, x, w, gout=np.ones_like(got))
    assert grads["x"].shape == x.shape and np.isfinite(grads["w"]).all()


def test_gnnc_nn_layers_take_rows_of_memory_mapped_features(tmp_path):
    torch = pytest.importorskip("torch")
    import gnnc.nn

    _, files = _files(tmp_path, 200, 1500, features=12)
    graph = gnnc.Graph.from_csc(files["indptr"], files["indices"])
    edge_index = torch.from_numpy(np.stack([graph.src, graph.dst]))
    n_id = torch.tensor([5, 0, 17, 199, 42])
    conv = gnnc.nn.SAGEConv(12, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "the given NumPy array is not writable"
        mapped = torch.from_numpy(files["x"])
    whole = conv(mapped, edge_index)  # the whole read-only map as the layer's input
    expected = conv(torch.from_numpy(np.array(files["x"])), edge_index)
    torch.testing.assert_close(whole, expected)
    # a batch's rows gathered from the map, on a block
    block = gnnc.nn.Block(torch.tensor([[1, 2, 3, 4, 0], [0, 0, 1, 1, 1]]), 5, 2)
    rows = torch.from_numpy(np.array(files["x"])[n_id.numpy()])
    torch.testing.assert_close(conv(mapped[n_id], block), conv(rows, block))


def test_from_csc_refuses_what_is_not_an_in_csr():
    with pytest.raises(GraphError, match="non-decreasing"):
        gnnc.Graph.from_csc(np.array([0, 2, 1]), np.array([0, 1]))
    with pytest.raises(GraphError, match="must equal len"):
        gnnc.Graph.from_csc(np.array([0, 1, 2]), np.array([0, 1, 1]))
    with pytest.raises(GraphError, match="out of range"):
        gnnc.Graph.from_csc(np.array([0, 1, 2]), np.array([0, 5]), num_vertices=2)
    with pytest.raises(GraphError, match="indptr has 2 rows"):
        gnnc.Graph.from_csc(np.array([0, 1, 2]), np.array([0, 1]), shape=(4, 3))
    block = gnnc.Graph.from_csc(np.array([0, 1, 3]), np.array([3, 0, 2]), shape=(4, 2))
    assert (block.num_src, block.num_dst, block.src.tolist(), block.dst.tolist()) == (4, 2, [3, 0, 2], [0, 1, 1])
