"""Graph file loading (gnnc.graph.io), the committed example graphs, and the benchmark generators."""

from __future__ import annotations

import gzip
import importlib.util
import struct
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import gnnc
from gnnc.errors import GraphError
from gnnc.graph.io import load_graph, read_edges, read_gt, read_vertex_labels

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "examples" / "data"


def _benchmarks_graphs():
    spec = importlib.util.spec_from_file_location("benchmarks_graphs", REPO / "benchmarks" / "graphs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def edges_of(path) -> list[tuple[int, int]]:
    src, dst, _ = read_edges(path)
    assert src.dtype == np.int64 and dst.dtype == np.int64
    return list(zip(src.tolist(), dst.tolist()))


# ------------------------------------------------------------------ edge lists


@pytest.mark.parametrize("name", ["g.txt", "g.edges", "g.el", "g.txt.gz"])
def test_edge_list(tmp_path, name):
    p = write(tmp_path / name, "# a comment\n% another\n0 1\n\n1\t2\n  2 0   # trailing comment\n5 5\n")
    src, dst, n = read_edges(p)
    assert list(zip(src.tolist(), dst.tolist())) == [(0, 1), (1, 2), (2, 0), (5, 5)]
    assert n == 6


def test_edge_list_weights_are_ignored(tmp_path):
    p = write(tmp_path / "w.txt", "0 1 0.5\n1 0 2e-3\n")
    assert edges_of(p) == [(0, 1), (1, 0)]


def test_edge_list_empty(tmp_path):
    src, dst, n = read_edges(write(tmp_path / "e.txt", "# nothing\n"))
    assert len(src) == len(dst) == 0 and n == 0


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("0 1\n2\n", 2, "two vertex ids"),
        ("0 1\n1 2 3\n", 2, "expected 2 values"),
        ("0 1\n1 x\n", 2, "expected an integer"),
        ("0 1\n\n1 -2\n", 3, "negative"),
        ("0 1\n1 2.5\n", 2, "expected an integer"),
    ],
)
def test_edge_list_errors(tmp_path, text, line, words):
    p = write(tmp_path / "bad.txt", text)
    with pytest.raises(GraphError, match=rf"bad\.txt:{line}:.*{words}"):
        read_edges(p)


# ------------------------------------------------------------------ Matrix Market


def test_mtx_general(tmp_path):
    p = write(
        tmp_path / "g.mtx",
        "%%MatrixMarket matrix coordinate real general\n% comment\n3 3 3\n1 2 0.5\n3 1 -1\n2 2 4e1\n",
    )
    src, dst, n = read_edges(p)
    assert list(zip(src.tolist(), dst.tolist())) == [(0, 1), (2, 0), (1, 1)] and n == 3


@pytest.mark.parametrize("name", ["s.mtx", "s.mtx.gz"])
def test_mtx_symmetric_pattern(tmp_path, name):
    p = write(tmp_path / name, "%%MatrixMarket matrix coordinate pattern symmetric\n4 4 3\n2 1\n3 3\n4 2\n")
    # stored entries first, then the mirror of each off-diagonal one; the diagonal once
    assert edges_of(p) == [(1, 0), (2, 2), (3, 1), (0, 1), (1, 3)]
    assert read_edges(p)[2] == 4
    assert list(zip(*read_edges(p, symmetric=False)[:2])) == [(1, 0), (2, 2), (3, 1)]


def test_mtx_matches_scipy(tmp_path):
    import scipy.io

    a = sp.random(50, 50, density=0.1, random_state=1, format="coo")
    scipy.io.mmwrite(tmp_path / "r.mtx", a)
    src, dst, n = read_edges(tmp_path / "r.mtx")
    b = sp.coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    assert n == 50 and (b != (a != 0)).nnz == 0


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("hello\n", r"bad\.mtx:1: not a Matrix Market"),
        ("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", "coordinate"),
        ("%%MatrixMarket matrix coordinate real general\n2 3 1\n1 1 1\n", r"bipartite graph \(2 sources, 3 dest"),
        ("%%MatrixMarket matrix coordinate real symmetric\n2 3 1\n1 1 1\n", "symmetric matrix is square"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n", "announces 2 entries"),
        (
            "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n3 1 1\n",
            r"bad\.mtx:4: row index 3 out of range",
        ),
        ("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n1 1\n", r"bad\.mtx:4: expected 3 values"),
        ("%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 0\n", r"bad\.mtx:3: column index 0"),
    ],
)
def test_mtx_errors(tmp_path, text, pattern):
    p = write(tmp_path / "bad.mtx", text)
    with pytest.raises(GraphError, match=pattern):
        read_edges(p)


# ------------------------------------------------------------------ npz


def test_npz_src_dst(tmp_path):
    np.savez(tmp_path / "a.npz", src=np.array([0, 2], np.int32), dst=np.array([1, 0], np.int32), num_vertices=5)
    src, dst, n = read_edges(tmp_path / "a.npz")
    assert src.tolist() == [0, 2] and dst.tolist() == [1, 0] and n == 5 and src.dtype == np.int64


def test_npz_edge_index(tmp_path):
    np.savez_compressed(tmp_path / "b.npz", edge_index=np.array([[0, 1, 3], [1, 2, 0]]))
    assert edges_of(tmp_path / "b.npz") == [(0, 1), (1, 2), (3, 0)]
    assert read_edges(tmp_path / "b.npz")[2] == 4


def test_npz_scipy_csr(tmp_path):
    a = sp.csr_matrix(np.array([[0, 1, 1], [0, 0, 0], [1, 0, 1]], dtype=np.float32))
    sp.save_npz(tmp_path / "c.npz", a)
    coo = a.tocoo()
    src, dst, n = read_edges(tmp_path / "c.npz")
    assert src.tolist() == coo.row.tolist() and dst.tolist() == coo.col.tolist() and n == 3


@pytest.mark.parametrize(
    "arrays, pattern",
    [
        ({"x": np.zeros(3)}, "needs 'src' and 'dst'"),
        ({"src": np.array([0, 5]), "dst": np.array([1, 1]), "num_vertices": 3}, "num_vertices is 3"),
        ({"src": np.array([0, 1]), "dst": np.array([1])}, "one length"),
        ({"src": np.array([0.0]), "dst": np.array([1.0])}, "integers"),
        ({"edge_index": np.zeros((3, 2), np.int64)}, r"shape \(2, E\)"),
    ],
)
def test_npz_errors(tmp_path, arrays, pattern):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(GraphError, match=pattern):
        read_edges(tmp_path / "bad.npz")


def test_npz_not_a_zip(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(GraphError, match="junk.npz"):
        read_edges(tmp_path / "junk.npz")


# ------------------------------------------------------------------ bipartite files


def _bipartite_files(tmp_path):
    """The same bipartite graph (3 sources, 2 destinations) in each format that can hold one."""
    src, dst = np.array([0, 2, 2, 1]), np.array([1, 0, 1, 1])
    mtx = "%%MatrixMarket matrix coordinate pattern general\n3 2 4\n" + "".join(
        f"{u + 1} {v + 1}\n" for u, v in zip(src, dst)
    )
    np.savez(tmp_path / "b.npz", src=src, dst=dst, num_src=3, num_dst=2)
    sp.save_npz(tmp_path / "s.npz", sp.coo_matrix((np.ones(4), (src, dst)), shape=(3, 2)).tocsr())
    return src, dst, [write(tmp_path / "b.mtx", mtx), tmp_path / "b.npz", tmp_path / "s.npz"]


def test_bipartite_files_load_as_bipartite_graphs(tmp_path):
    src, dst, paths = _bipartite_files(tmp_path)
    for path in paths:
        g = load_graph(path)
        assert g.bipartite and (g.num_src, g.num_dst) == (3, 2), path
        assert sorted(zip(g.src.tolist(), g.dst.tolist())) == sorted(zip(src.tolist(), dst.tolist())), path
        with pytest.raises(
            GraphError,
            match=r"bipartite graph \(3 sources, 2 destinations\) has no single vertex count: load it with load_graph",
        ):
            read_edges(path)
        with pytest.raises(GraphError, match="cannot be made symmetric"):
            load_graph(path, symmetric=True)


def test_a_bipartite_file_runs_a_kernel(tmp_path):
    # a kernel over a bipartite graph from a file agrees with the same graph built in memory
    src, dst, paths = _bipartite_files(tmp_path)
    module = gnnc.compile("kernel agg(x: f32[V, F]) -> f32[V, F] { out[v] = sum(x[u]) }")
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    want = module.agg(gnnc.Graph.from_coo(src, dst, shape=(3, 2)), x=x)
    for path in paths:
        np.testing.assert_array_equal(module.agg(load_graph(path), x=x), want)


@pytest.mark.parametrize(
    "arrays, pattern",
    [
        ({"src": np.array([0]), "dst": np.array([1]), "num_src": 2}, "needs both 'num_src' and 'num_dst'"),
        (
            {"src": np.array([0]), "dst": np.array([1]), "num_src": 2, "num_dst": 2, "num_vertices": 2},
            "no 'num_vertices'",
        ),
        ({"src": np.array([4]), "dst": np.array([1]), "num_src": 2, "num_dst": 2}, "num_src is 2 but source id 4"),
        ({"src": np.array([0]), "dst": np.array([2]), "num_src": 2, "num_dst": 2}, "num_dst is 2 but destination id 2"),
    ],
)
def test_bipartite_npz_errors(tmp_path, arrays, pattern):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(GraphError, match=pattern):
        load_graph(tmp_path / "bad.npz")


# ------------------------------------------------------------------ METIS

# a 4-cycle 1-2-3-4 plus the chord 1-3, and an isolated vertex 5 (its line is blank)
METIS_PLAIN = "% comment line\n5 5\n2 4 3\n1 3\n2 4 1\n3 1\n\n"


@pytest.mark.parametrize("name", ["g.graph", "g.graph.gz"])
def test_metis_plain(tmp_path, name):
    src, dst, n = read_edges(write(tmp_path / name, METIS_PLAIN))
    assert n == 5
    assert list(zip(src.tolist(), dst.tolist())) == [
        (0, 1),
        (0, 3),
        (0, 2),
        (1, 0),
        (1, 2),
        (2, 1),
        (2, 3),
        (2, 0),
        (3, 2),
        (3, 0),
    ]
    half = read_edges(write(tmp_path / name, METIS_PLAIN), symmetric=False)
    assert sorted(zip(half[0].tolist(), half[1].tolist())) == [(0, 1), (0, 2), (0, 3), (1, 2), (2, 3)]


def test_metis_with_weights(tmp_path):
    # fmt 111: vertex size, ncon=2 vertex weights, then (neighbour, edge weight) pairs
    text = "3 2 111 2\n7 1 2  2 10  3 20\n8 3 4  1 10\n9 5 6  1 20\n"
    assert edges_of(write(tmp_path / "w.graph", text)) == [(0, 1), (0, 2), (1, 0), (2, 0)]
    # fmt 010 with ncon 2, as in METIS's test.mgraph
    text = "%% vwgt1 vwgt2 adjacency\n 3 2 010 2\n 1 1 2 3\n 2 2 1\n 24 8 1\n"
    assert edges_of(write(tmp_path / "v.graph", text)) == [(0, 1), (0, 2), (1, 0), (2, 0)]
    # fmt 1: edge weights only
    assert edges_of(write(tmp_path / "e.graph", "2 1 1\n2 5\n1 5\n")) == [(0, 1), (1, 0)]


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("", "empty METIS"),
        ("3\n", "header"),
        ("2 1 2\n2\n1\n", "fmt"),
        ("2 2\n2\n1\n", "announces 2 undirected edges"),
        ("2 1\n3\n1\n", r"bad\.graph:2: neighbour 3 out of range"),
        ("2 1\n2\n1\n1\n", r"bad\.graph:4: more vertex lines"),
        ("3 1\n2\n1\n", "announces 3 vertices"),
        ("2 1 1\n2\n1 1\n", r"bad\.graph:2: .*pairs"),
        ("2 1\n2\nx\n", r"bad\.graph:3: expected an integer"),
    ],
)
def test_metis_errors(tmp_path, text, pattern):
    p = write(tmp_path / "bad.graph", text)
    with pytest.raises(GraphError, match=pattern):
        read_edges(p)


# ------------------------------------------------------------------ graph-tool .gt

_GT_SCALAR = {"bool": (0, "u1"), "int16": (1, "i2"), "int32": (2, "i4"), "int64": (3, "i8"), "double": (4, "f8")}


def write_gt(path: Path, n: int, adj: list[list[int]], *, directed: bool, big: bool = False, props=()) -> Path:
    """A minimal writer of graph-tool's binary format, following its documentation.

    ``props`` holds (key, name, type, values) with key 0/1/2 for graph / vertex
    / edge and type one of _GT_SCALAR's names, "string" or "vector<double>".
    """
    e = ">" if big else "<"
    out = bytearray("⛾ gt".encode() + bytes([1, 1 if big else 0]))

    def u64(x):
        out.extend(struct.pack(e + "Q", x))

    def string(s: str):
        b = s.encode()
        u64(len(b))
        out.extend(b)

    string("written by test_graph_io")
    out.append(1 if directed else 0)
    u64(n)
    width = "B" if n < 1 << 8 else "H" if n < 1 << 16 else "I" if n < 1 << 32 else "Q"
    for nbrs in adj:
        u64(len(nbrs))
        out.extend(struct.pack(e + width * len(nbrs), *nbrs))
    u64(len(props))
    for key, name, vtype, values in props:
        out.append(key)
        string(name)
        if vtype in _GT_SCALAR:
            code, dt = _GT_SCALAR[vtype]
            out.append(code)
            out.extend(np.asarray(values, dtype=e + dt).tobytes())
        elif vtype == "string":
            out.append(6)
            for s in values:
                string(s)
        elif vtype == "vector<double>":
            out.append(11)
            for vec in values:
                u64(len(vec))
                out.extend(np.asarray(vec, dtype=e + "f8").tobytes())
        else:
            raise ValueError(vtype)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(bytes(out)))
    else:
        path.write_bytes(bytes(out))
    return path


@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("name", ["g.gt", "g.gt.gz"])
def test_gt_directed_with_properties(tmp_path, name, big):
    adj = [[1, 2], [], [0, 2], []]
    p = write_gt(
        tmp_path / name,
        4,
        adj,
        directed=True,
        big=big,
        props=[
            (0, "description", "string", ["tiny"]),
            (1, "value", "int32", [0, 1, 1, 0]),
            (1, "label", "string", ["a", "b", "", "d"]),
            (1, "pos", "vector<double>", [[0.0, 1.0], [2.0, 3.0], [], [4.5]]),
            (2, "weight", "double", [0.5, 1.5, 2.5, 3.5]),
        ],
    )
    assert edges_of(p) == [(0, 1), (0, 2), (2, 0), (2, 2)]
    assert read_edges(p)[2] == 4
    assert read_vertex_labels(p, "value").tolist() == [0, 1, 1, 0]
    assert read_vertex_labels(p, "label") == ["a", "b", "", "d"]
    gt = read_gt(p)
    assert gt.directed and gt.comment == "written by test_graph_io"
    assert gt.graph_props == {"description": "tiny"}
    assert gt.edge_props["weight"].tolist() == [0.5, 1.5, 2.5, 3.5]
    assert [v.tolist() for v in gt.vertex_props["pos"]] == [[0.0, 1.0], [2.0, 3.0], [], [4.5]]
    with pytest.raises(GraphError, match="no vertex property 'nope'"):
        read_vertex_labels(p, "nope")


def test_gt_undirected_wide_ids(tmp_path):
    # 300 vertices: ids are stored in 2 bytes; each undirected edge once
    n = 300
    adj = [[] for _ in range(n)]
    adj[0] = [299, 1]
    adj[299] = [299]
    p = write_gt(tmp_path / "u.gt", n, adj, directed=False)
    assert edges_of(p) == [(0, 299), (0, 1), (299, 299), (299, 0), (1, 0)]
    assert list(zip(*read_edges(p, symmetric=False)[:2])) == [(0, 299), (0, 1), (299, 299)]


def test_gt_errors(tmp_path):
    (tmp_path / "magic.gt").write_bytes(b"not a gt file at all")
    with pytest.raises(GraphError, match="magic"):
        read_edges(tmp_path / "magic.gt")
    good = write_gt(tmp_path / "t.gt", 3, [[1, 2], [2], []], directed=True).read_bytes()
    (tmp_path / "trunc.gt").write_bytes(good[:-5])
    with pytest.raises(GraphError, match="trunc.gt: truncated"):
        read_edges(tmp_path / "trunc.gt")
    (tmp_path / "trunc.gt").write_bytes(good[:-12])
    with pytest.raises(GraphError, match="trunc.gt: truncated"):
        read_edges(tmp_path / "trunc.gt")
    write_gt(tmp_path / "range.gt", 3, [[1, 7], [], []], directed=True)
    with pytest.raises(GraphError, match="vertex 7"):
        read_edges(tmp_path / "range.gt")
    with pytest.raises(GraphError, match="only be read from a graph-tool"):
        read_vertex_labels(write(tmp_path / "x.txt", "0 1\n"), "value")


# ------------------------------------------------------------------ common behaviour


def test_symmetric_true_dedups_and_sorts(tmp_path):
    p = write(tmp_path / "d.txt", "0 1\n1 0\n2 1\n2 2\n")
    assert edges_of(p) == [(0, 1), (1, 0), (2, 1), (2, 2)]
    src, dst, n = read_edges(p, symmetric=True)
    assert list(zip(src.tolist(), dst.tolist())) == [(0, 1), (1, 0), (1, 2), (2, 1), (2, 2)] and n == 3


def test_unknown_and_missing_files(tmp_path):
    with pytest.raises(GraphError, match="unknown graph file format"):
        read_edges(tmp_path / "g.xyz")
    with pytest.raises(GraphError, match="no such file"):
        read_edges(tmp_path / "missing.txt")
    (tmp_path / "bad.txt.gz").write_bytes(b"not gzip")
    with pytest.raises(GraphError, match="bad.txt.gz"):
        read_edges(tmp_path / "bad.txt.gz")


def test_large_edge_list_is_fast(tmp_path):
    rng = np.random.default_rng(0)
    src = rng.integers(0, 100_000, 1_000_000)
    dst = rng.integers(0, 100_000, 1_000_000)
    p = tmp_path / "big.txt"
    p.write_text("# header\n" + "\n".join(f"{a} {b}" for a, b in zip(src.tolist(), dst.tolist())) + "\n")
    t = time.perf_counter()
    s, d, n = read_edges(p)
    elapsed = time.perf_counter() - t
    assert np.array_equal(s, src) and np.array_equal(d, dst) and n == max(src.max(), dst.max()) + 1
    assert elapsed < 10, f"1M-edge file took {elapsed:.1f} s"


def test_load_graph_builds_a_graph(tmp_path):
    pytest.importorskip("gnnc.graph.graph")
    g = load_graph(write(tmp_path / "g.txt", "0 1\n1 2\n"))
    assert g.num_vertices == 3


# ------------------------------------------------------------------ committed data


def test_committed_4elt():
    src, dst, n = read_edges(DATA / "4elt.npz")
    assert (n, len(src)) == (7434, 86062)
    with np.load(DATA / "4elt.npz") as z:
        assert z["src"].dtype == np.int32 and z["dst"].dtype == np.int32
    fwd = np.sort(src * n + dst)
    assert np.array_equal(fwd, np.sort(dst * n + src)), "4elt is stored with both directions"
    assert len(np.unique(fwd)) == len(fwd) and not np.any(src == dst)


def test_committed_polblogs():
    src, dst, n = read_edges(DATA / "polblogs.npz")
    assert (n, len(src)) == (1490, 19090)
    with np.load(DATA / "polblogs.npz") as z:
        labels = z["labels"]
    assert labels.shape == (1490,) and np.bincount(labels).tolist() == [758, 732]


# ------------------------------------------------------------------ benchmark graphs


def test_available_graphs_falls_back_to_committed(tmp_path):
    graphs = _benchmarks_graphs()
    found = graphs.available_graphs(tmp_path)  # an empty data folder
    assert found == {"4elt": DATA / "4elt.npz", "polblogs": DATA / "polblogs.npz"}
    assert graphs.edges("4elt")[2] == 7434
    with pytest.raises(GraphError, match="fetch_graphs.sh"):
        graphs.path_of("email-Enron", tmp_path)


def test_available_graphs_finds_package_files(tmp_path):
    graphs = _benchmarks_graphs()
    target = tmp_path / graphs.PACKAGE_GRAPHS["copter2"]
    target.parent.mkdir(parents=True)
    write(target, METIS_PLAIN)
    assert graphs.available_graphs(tmp_path)["copter2"] == target


def test_rmat_sizes_and_determinism():
    graphs = _benchmarks_graphs()
    src, dst, n = graphs.rmat_edges(10, 8, seed=3)
    assert n == 1024 and len(src) == len(dst) == 8 * 1024
    assert src.min() >= 0 and max(src.max(), dst.max()) < n
    again = graphs.rmat_edges(10, 8, seed=3)
    assert np.array_equal(src, again[0]) and np.array_equal(dst, again[1])
    other = graphs.rmat_edges(10, 8, seed=4)
    assert not np.array_equal(src, other[0])
    # skewed: the busiest vertex has far more edges than the average of 8
    assert np.bincount(src, minlength=n).max() > 8 * 8
    plain = graphs.rmat_edges(6, 4, permute=False)
    assert len(plain[0]) == 256


def test_featgraph_rand100k_small():
    graphs = _benchmarks_graphs()
    src, dst, n = graphs.featgraph_rand100k_edges(seed=0, scale=0.01)
    assert n == 1000 and len(src) == 200 * 2000 + 800 * 100
    deg = np.bincount(dst, minlength=n)
    assert abs(deg[:200].mean() - 2000) < 1 and abs(deg[200:].mean() - 100) < 1
    assert src.min() >= 0 and src.max() < n
    again = graphs.featgraph_rand100k_edges(seed=0, scale=0.01)
    assert np.array_equal(src, again[0]) and np.array_equal(dst, again[1])
