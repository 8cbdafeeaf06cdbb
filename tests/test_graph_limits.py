"""Graphs and graph files that could crash, exhaust memory or load as the wrong graph (issue 29).

Each case is checked before anything reads the arrays or allocates for the
sizes: scipy matrices whose index arrays scipy itself never checks, sizes past
this machine's memory, files whose headers claim more than their data holds,
gzip bombs, overlong tokens, CR-only line ends. The fuzz suite (tests/fuzz/)
throws random variations of the same at the loaders in subprocesses.
"""

from __future__ import annotations

import gzip
import io
import struct
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from gnnc.errors import GraphError
from gnnc.graph import limits
from gnnc.graph.graph import Graph
from gnnc.graph.io import MAX_INT_TOKEN, load_graph, read_edges

# ------------------------------------------------------------------ scipy matrices


def _csr(indptr, indices, shape=(3, 3), fmt="csr"):
    """A csr / csc matrix holding exactly these arrays (set after construction: scipy checks little either way)."""
    cls = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    m = cls(shape)
    m.indptr = np.asarray(indptr, dtype=np.int32)
    m.indices = np.asarray(indices, dtype=np.int32)
    m.data = np.ones(len(indices))
    return m


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize(
    "indptr, indices, pattern",
    [
        # decreasing: scipy's tocoo writes past its buffer (SIGSEGV, "free(): invalid pointer")
        ([0, 3, 1, 3], [0, 1, 2], r"indptr must be non-decreasing.*position 2: indptr\[1\] = 3 > indptr\[2\] = 1"),
        # a milder overlap: tocoo gives a graph, the wrong one
        ([0, 2, 1, 3], [0, 1, 2], r"non-decreasing"),
        ([1, 2, 3, 3], [0, 1, 2], r"indptr\[0\] must be 0, got 1"),
        ([0, 1, 2], [0, 1], r"indptr has 3 entries, but 3 .* need 4"),
        ([0, 1, 2, 5], [0, 1, 2], r"indptr\[-1\] = 5 is past the 3 stored indices"),
        ([0, 1, 2, 3], [0, 1, 7], r"indices\[2\] = 7 is out of range"),
        ([0, 1, 2, 3], [0, -1, 2], r"indices\[1\] = -1 is negative"),
    ],
)
def test_broken_compressed_matrices_are_refused(fmt, indptr, indices, pattern):
    with pytest.raises(GraphError, match=pattern):
        Graph.from_scipy(_csr(indptr, indices, fmt=fmt))


def test_compressed_matrix_with_spare_capacity_reads_indptr_entries_only():
    # scipy allows len(indices) > indptr[-1]; tocoo would give the spare slots garbage rows
    m = _csr([0, 1, 2, 2], [1, 2, 0, 0])
    g = Graph.from_scipy(m)
    assert g.src.tolist() == [0, 1] and g.dst.tolist() == [1, 2]


def test_compressed_matrix_data_and_indices_must_agree():
    m = _csr([0, 1, 2, 3], [0, 1, 2])
    m.data = np.ones(2)
    with pytest.raises(GraphError, match="3 indices but 2 values"):
        Graph.from_scipy(m)


def test_broken_coo_bsr_dia_lil_are_refused():
    coo = sp.coo_matrix((np.ones(2), ([0, 1], [1, 2])), shape=(3, 3))
    coo.row = np.array([0, 5], dtype=np.int32)
    with pytest.raises(GraphError, match=r"row\[1\] = 5 is out of range"):
        Graph.from_scipy(coo)
    bsr = sp.bsr_matrix(np.eye(4), blocksize=(2, 2))
    bsr.indptr = np.array([0, 2, 1], dtype=np.int32)
    with pytest.raises(GraphError, match="bsr matrix's indptr must be non-decreasing"):
        Graph.from_scipy(bsr)
    dia = sp.dia_matrix(np.eye(3))
    dia.offsets = np.array([0, 1], dtype=np.int32)  # dia_tocsr would read data rows that are not there
    with pytest.raises(GraphError, match="2 offsets but 1 rows of diagonals"):
        Graph.from_scipy(dia)
    lil = sp.lil_matrix(np.eye(3))
    lil.rows[1] = [0, 9]
    with pytest.raises(GraphError, match="lists of columns and of values differ"):
        Graph.from_scipy(lil)
    lil.data[1] = [1.0, 1.0]
    with pytest.raises(GraphError, match=r"column\[2\] = 9 is out of range"):
        Graph.from_scipy(lil)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "bsr", "dia", "lil", "dok"])
def test_valid_matrices_keep_tocoo_order(fmt):
    for seed in range(6):
        a = sp.random(7, 5, density=0.4, format="coo", random_state=seed)
        a.data[: min(2, a.nnz)] = 0.0  # explicit zeros are no edges
        m = sp.bsr_matrix(a.toarray()) if fmt == "bsr" else a.asformat(fmt)
        want = m.tocoo()
        keep = want.data != 0
        g = Graph.from_scipy(m)
        assert g.src.tolist() == want.row[keep].tolist() and g.dst.tolist() == want.col[keep].tolist()
        assert (g.num_src, g.num_dst) == (7, 5)


# ------------------------------------------------------------------ sizes past memory


@pytest.mark.parametrize(
    "build",
    [
        lambda: Graph(np.array([[0], [1]]), num_vertices=10**12),
        lambda: Graph.from_coo([0], [1], shape=(2, 10**13)),
        lambda: Graph.from_csr([0, 1], [0], num_vertices=10**12),
        lambda: Graph.from_scipy(sp.coo_matrix((10**12, 10**12))),
        lambda: Graph.from_coo([0], [1], num_vertices=2**70),
    ],
)
def test_sizes_past_memory_are_refused_before_allocating(build):
    with pytest.raises(GraphError, match="more than this machine's .* of memory"):
        build()


def test_memory_bound_follows_rlimit(monkeypatch):
    monkeypatch.setattr(limits, "memory_bytes", lambda: 1 << 20)
    with pytest.raises(GraphError, match="needs about"):
        Graph.from_coo([0], [1], num_vertices=1 << 16)
    Graph.from_coo([0], [1], num_vertices=1 << 10)


# ------------------------------------------------------------------ files


def test_header_may_not_declare_more_vertices_than_its_data_fills(tmp_path):
    p = tmp_path / "b.mtx"
    p.write_text("%%MatrixMarket matrix coordinate pattern general\n1000000000 1000000000 1\n1 1\n")
    with pytest.raises(GraphError, match=r"b\.mtx: the file declares 1000000000 vertices, more than a file of"):
        load_graph(p)
    q = tmp_path / "b.txt"
    q.write_text("0 100000000\n")  # a 12-byte edge list of 10^8 vertices (793 MB)
    with pytest.raises(GraphError, match="declares 100000001 vertices"):
        read_edges(q)
    q.write_text("0 5000000\n")
    with pytest.raises(GraphError, match="pass max_vertices="):
        read_edges(q)
    assert read_edges(q, max_vertices=5_000_001)[2] == 5_000_001
    with pytest.raises(GraphError, match="more than max_vertices=10"):
        read_edges(q, max_vertices=10)
    with pytest.raises(GraphError, match="max_vertices must be a non-negative integer"):
        read_edges(q, max_vertices=-1)


def test_bipartite_mtx_sides_are_bounded(tmp_path):
    p = tmp_path / "b.mtx"
    p.write_text("%%MatrixMarket matrix coordinate pattern general\n2 900000000 1\n1 1\n")
    with pytest.raises(GraphError, match="declares 900000000 vertices"):
        load_graph(p)


def test_gzip_bomb_stops_at_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "text_bytes_limit", lambda: 1000)
    p = tmp_path / "bomb.txt.gz"
    p.write_bytes(gzip.compress(b"\n" * 100_000))
    with pytest.raises(GraphError, match=r"bomb\.txt\.gz: the file is larger than 1000 bytes once decompressed"):
        read_edges(p)
    q = tmp_path / "big.txt"
    q.write_bytes(b"0 1\n" * 1000)
    with pytest.raises(GraphError, match=r"big\.txt: the file is larger than 1000 bytes,"):
        read_edges(q)


def test_token_lengths_are_bounded_where_read(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("0 1\n" + "1" * 100_000 + " 2\n")  # a 100 KB id once took 56 GiB
    with pytest.raises(GraphError, match=r"t\.txt:2: expected an integer vertex id, found a token of 100000 bytes"):
        read_edges(p)
    # an ignored column (a weight) may be anything: it is never copied out
    p.write_text("0 1 " + "w" * 100_000 + "\n1 2 x\n")
    assert read_edges(p)[0].tolist() == [0, 1]


@pytest.mark.parametrize(
    "text, want",
    [
        ("0 1\r1 2\r2 0\r", [(0, 1), (1, 2), (2, 0)]),
        ("0 1\r\n1 2\r\n2 0", [(0, 1), (1, 2), (2, 0)]),
        ("# c\r0 1\r\r1 2 # x\r", [(0, 1), (1, 2)]),
    ],
)
def test_cr_line_ends_end_lines(tmp_path, text, want):
    p = tmp_path / "cr.txt"
    p.write_bytes(text.encode())
    src, dst, _ = read_edges(p)
    assert list(zip(src.tolist(), dst.tolist())) == want


def test_cr_line_ends_in_mtx_and_metis(tmp_path):
    m = tmp_path / "cr.mtx"
    m.write_bytes(b"%%MatrixMarket matrix coordinate pattern general\r% c\r3 3 2\r1 2\r3 1\r")
    assert read_edges(m)[0].tolist() == [0, 2]
    g = tmp_path / "cr.graph"
    g.write_bytes(b"3 2\r2 3\r1\r1\r")
    src, dst, n = read_edges(g)
    assert n == 3 and sorted(zip(src.tolist(), dst.tolist())) == [(0, 1), (0, 2), (1, 0), (2, 0)]


def _gt_header(n: int) -> bytes:
    return "⛾ gt".encode() + bytes([1, 0]) + struct.pack("<Q", 0) + bytes([1]) + struct.pack("<Q", n)


@pytest.mark.parametrize("degree", [2**63, 2**64 - 1, 10**12])
def test_gt_degree_past_the_file_is_a_graph_error(tmp_path, degree):
    p = tmp_path / "d.gt"
    p.write_bytes(_gt_header(2) + struct.pack("<Q", degree) + b"\0" * 24)
    with pytest.raises(GraphError, match=rf"d\.gt: truncated \.gt file: vertex 0 announces {degree} neighbours"):
        read_edges(p)


def _npy(shape, dtype: str, payload: bytes) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": dtype, "fortran_order": False, "shape": shape})
    return f.getvalue() + payload


def test_npz_array_header_may_not_claim_more_than_its_member(tmp_path):
    p = tmp_path / "lie.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("src.npy", _npy((10**12,), "<i8", b"\0" * 16))
        z.writestr("dst.npy", _npy((2,), "<i8", b"\0" * 16))
    with pytest.raises(GraphError, match=r"lie\.npz: array 'src' claims shape \(1000000000000,\)"):
        load_graph(p)


@pytest.mark.parametrize(
    "extra, pattern",
    [
        ({"num_vertices": np.array([3, 4])}, "'num_vertices' must be one non-negative integer"),
        ({"num_vertices": np.array(2.5)}, "'num_vertices' must be one non-negative integer"),
        ({"num_vertices": np.array(10**12)}, "declares 1000000000000 vertices"),
    ],
)
def test_npz_counts_are_checked(tmp_path, extra, pattern):
    p = tmp_path / "g.npz"
    np.savez(p, src=np.array([0, 1]), dst=np.array([1, 0]), **extra)
    with pytest.raises(GraphError, match=pattern):
        load_graph(p)


def test_scipy_npz_is_checked_before_scipy_converts_it(tmp_path):
    p = tmp_path / "m.npz"
    sp.save_npz(p, _csr([0, 3, 1, 3], [0, 1, 2]), compressed=False)
    with pytest.raises(GraphError, match=r"m\.npz: the csr matrix's indptr must be non-decreasing"):
        load_graph(p)
    sp.save_npz(p, sp.coo_matrix((10**12, 10**12)))
    with pytest.raises(GraphError, match="declares 1000000000000 vertices"):
        load_graph(p)


@pytest.mark.parametrize("suffix", [".txt", ".mtx", ".graph", ".gt", ".npz", ".txt.gz"])
def test_binary_junk_is_a_graph_error(tmp_path, suffix):
    p = tmp_path / f"junk{suffix}"
    p.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(GraphError, match="junk"):
        load_graph(p)


def test_integer_tokens_are_digits_only(tmp_path):
    p = tmp_path / "i.txt"
    for bad in ("1_0", "٣", "0x1", "+-1", "1e3"):
        p.write_text(f"0 1\n{bad} 2\n")
        with pytest.raises(GraphError, match=r"i\.txt:2: expected an integer vertex id"):
            read_edges(p)
    p.write_text("+1 007\n9223372036854775806 0\n")
    assert read_edges(p, max_vertices=2**63)[0].tolist() == [1, 9223372036854775806]
    p.write_text("9223372036854775808 0\n")
    with pytest.raises(GraphError, match="does not fit in int64"):
        read_edges(p)
    assert MAX_INT_TOKEN == 64
