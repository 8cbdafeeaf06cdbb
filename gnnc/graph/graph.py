"""The runtime's graph: directed edges u -> v, checked once, kept read-only.

    graph = gnnc.Graph(edge_index)            # 2 x E, numpy or torch
    graph = gnnc.Graph.from_coo(src, dst, num_vertices=5)
    graph = gnnc.Graph.from_csr(indptr, indices)   # CSR by source, as DGL's ('csr', ...)
    graph = gnnc.Graph.from_scipy(A)          # A[u, v] != 0 is the edge u -> v
    block = gnnc.Graph(edge_index, shape=(num_src, num_dst))   # bipartite

A graph has ``num_src`` sources and ``num_dst`` destinations. Without a
``shape`` they are one vertex set (``num_src == num_dst == num_vertices``);
with ``shape=(num_src, num_dst)`` (or a non-square scipy matrix) sources and
destinations are counted separately, as DGL's blocks for mini-batch training:
source ids are checked against ``num_src``, destination ids against
``num_dst``. ``num_vertices`` is ``num_dst``, the rows of a kernel's vertex
results. docs/language.md says how kernels read vertex tensors on such a graph.

An edge id is the edge's position in what the user gave (an ``edge_index``
column, a COO position, a position in CSR ``indices``, the ``A.tocoo()``
order); edge tensors are always indexed by it. The kernels walk the in-edge
CSR grouped by destination (``in_indptr``, ``in_src``, ``in_eid``), within a
destination in increasing edge id, and map positions back to edge ids through
``in_eid``.

Every invariant (integer ids, equal lengths, ids in range, well-formed CSR) is
checked here, once; the arrays are then read-only, so per call only shapes,
dtypes and aliasing need checking. Building is vectorised numpy: a stable
argsort and a bincount.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gnnc.errors import ArgumentError, GraphError
from gnnc.graph import reorder
from gnnc.graph.tensors import is_torch_tensor

__all__ = ["Graph"]

_INT64_MAX = np.iinfo(np.int64).max


# ------------------------------------------------------------------ conversion


def _is_scipy_sparse(obj: Any) -> bool:
    return type(obj).__module__.startswith("scipy.sparse") and hasattr(obj, "tocoo")


def _to_numpy(obj: Any, what: str) -> np.ndarray:
    if is_torch_tensor(obj):
        obj = obj.detach().cpu().numpy()
    try:
        arr = np.asarray(obj)
    except (ValueError, TypeError) as exc:
        raise GraphError(f"{what} is not an array of vertex ids: {exc}") from exc
    return arr


def _ids(obj: Any, what: str, ndim: int) -> np.ndarray:
    """An owned, C-contiguous int64 copy of an id array, after checking its dtype and rank."""
    arr = _to_numpy(obj, what)
    if arr.ndim != ndim:
        raise GraphError(f"{what} must be a {ndim}-D array, got shape {arr.shape}")
    kind = arr.dtype.kind
    if kind == "b":
        raise GraphError(f"{what} has dtype bool; vertex ids must be integers")
    if kind not in "iu":
        # `[]` becomes a float64 array; an empty array holds no bad id
        if arr.size == 0 and kind in "f":
            return np.zeros(arr.shape, dtype=np.int64)
        raise GraphError(f"{what} has dtype {arr.dtype}; vertex ids must be integers (use .astype(np.int64))")
    if kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) > _INT64_MAX:
        raise GraphError(f"{what} holds the id {int(arr.max())}, which does not fit in int64")
    return np.array(arr, dtype=np.int64, order="C", copy=True)


def _count(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise GraphError(f"{what} must be a non-negative integer, got {value!r}")
    if value < 0:
        raise GraphError(f"{what} must be a non-negative integer, got {value}")
    return int(value)


def _check_range(ids: np.ndarray, n: int, what: str, bound_what: str) -> None:
    if ids.size == 0 or (ids.min() >= 0 and ids.max() < n):  # two passes, no temporary
        return
    bad = np.flatnonzero((ids < 0) | (ids >= n))
    if bad.size:
        i = int(bad[0])
        value = int(ids[i])
        if value < 0:
            raise GraphError(f"{what}[{i}] = {value} is negative; vertex ids must be >= 0")
        raise GraphError(
            f"{what}[{i}] = {value} is out of range: {bound_what} is {n}, so ids must be < {n}"
            + (f" ({bad.size} ids are out of range)" if bad.size > 1 else "")
        )


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    arr.flags.writeable = False
    return arr


def _float_dtype(dtype: Any) -> np.dtype:
    aliases = {"f32": np.float32, "f64": np.float64}
    try:
        dt = np.dtype(aliases.get(dtype, dtype)) if isinstance(dtype, str) else np.dtype(dtype)
    except TypeError as exc:
        raise ArgumentError(f"degrees are float32 or float64, got {dtype!r}") from exc
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ArgumentError(f"degrees are float32 or float64, got {dt}")
    return dt


#: Keys below this many values are sorted by numpy's radix sort (16-bit keys, stable).
_RADIX_KEYS = 1 << 16


def _csr_by(keys: np.ndarray, other: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Groups edges by ``keys`` (stable: increasing edge id within a group): (indptr, other in
    group order, edge ids in group order, the count of each key)."""
    e = keys.shape[0]
    bits = max(1, e.bit_length())
    if n <= _RADIX_KEYS:
        # numpy sorts 16-bit keys by counting, stably: a few passes, where a comparison sort of
        # the same keys costs 4x as much (a 1,300-edge block: 4 us against 17 us)
        order = np.argsort(keys.astype(np.uint16), kind="stable")
    elif n.bit_length() + bits <= 62:
        # (key, edge id) packed in one int64 are unique, so a plain (SIMD) sort
        # is stable by construction and faster than argsort(kind="stable")
        packed = (keys << bits) | np.arange(e, dtype=np.int64)
        packed.sort()
        order = packed & ((1 << bits) - 1)
    else:  # pragma: no cover - needs about 2**62 vertices x edges
        order = np.argsort(keys, kind="stable").astype(np.int64, copy=False)
    counts = np.bincount(keys, minlength=n)
    indptr = np.empty(n + 1, dtype=np.int64)
    indptr[0] = 0
    np.cumsum(counts, out=indptr[1:])
    return _readonly(indptr), _readonly(other[order]), _readonly(order), counts


# ----------------------------------------------------------------------- graph


class Graph:
    """A directed graph with edges ``src[i] -> dst[i]``, ``num_src`` sources and ``num_dst`` destinations.

    ``Graph(obj)`` accepts a scipy sparse matrix or array, a ``2 x E``
    ``edge_index`` (numpy array or torch tensor), or a ``(src, dst)`` pair;
    ``num_vertices=n`` gives a square graph of ``n`` vertices,
    ``shape=(num_src, num_dst)`` a bipartite one. All arrays are int64,
    C-contiguous and read-only.
    """

    num_src: int
    num_dst: int
    num_edges: int
    src: np.ndarray
    dst: np.ndarray
    in_indptr: np.ndarray
    in_src: np.ndarray
    in_eid: np.ndarray
    #: Per-graph preprocessing data (partitions, permutations, ...), by plan name.
    plans: dict

    def __init__(self, obj: Any, num_vertices: int | None = None, *, shape: Any = None):
        if isinstance(obj, Graph):
            sizes = _sizes(num_vertices, shape)
            if sizes is not None and sizes != (obj.num_src, obj.num_dst):
                raise GraphError(f"the graph has shape (num_src, num_dst) = {(obj.num_src, obj.num_dst)}, not {sizes}")
            self._build(obj.src, obj.dst, obj.num_src, obj.num_dst, checked=True)
        elif _is_scipy_sparse(obj):
            if num_vertices is not None or shape is not None:
                raise GraphError(
                    "num_vertices cannot be given with a scipy matrix: its shape decides it (so does shape=)"
                )
            self._build(*_coo_from_scipy(obj))
        elif isinstance(obj, (tuple, list)) and len(obj) == 2:
            self._build(*_coo_from_coo(obj[0], obj[1], num_vertices, shape))
        elif isinstance(obj, (np.ndarray, list)) or is_torch_tensor(obj):
            self._build(*_coo_from_edge_index(obj, num_vertices, shape))
        else:
            raise GraphError(
                f"cannot build a Graph from {type(obj).__name__}: give a 2 x E edge_index, a (src, dst) "
                "pair, or a scipy sparse matrix (or use Graph.from_csr)"
            )

    # ------------------------------------------------------------ constructors

    @classmethod
    def from_edge_index(cls, edge_index: Any, num_vertices: int | None = None, *, shape: Any = None) -> Graph:
        """From a ``2 x E`` array or tensor: row 0 sources, row 1 destinations (as PyG)."""
        return cls._new(*_coo_from_edge_index(edge_index, num_vertices, shape))

    @classmethod
    def from_coo(cls, src: Any, dst: Any, num_vertices: int | None = None, *, shape: Any = None) -> Graph:
        """From COO arrays: edge ``i`` is ``src[i] -> dst[i]``."""
        return cls._new(*_coo_from_coo(src, dst, num_vertices, shape))

    @classmethod
    def from_csr(cls, indptr: Any, indices: Any, num_vertices: int | None = None, *, shape: Any = None) -> Graph:
        """From a CSR grouped by source (as DGL's ``('csr', ...)``).

        Row ``u`` lists the destinations ``indices[indptr[u]:indptr[u+1]]``;
        an edge's id is its position in ``indices``. With
        ``shape=(num_src, num_dst)`` indptr has ``num_src + 1`` entries.
        """
        return cls._new(*_coo_from_csr(indptr, indices, num_vertices, shape))

    @classmethod
    def from_scipy(cls, matrix: Any) -> Graph:
        """From a scipy sparse matrix: ``A[u, v] != 0`` is the edge ``u -> v``.

        A square matrix gives a square graph; a ``num_src x num_dst`` one a
        bipartite graph. Edge ids follow ``A.tocoo()`` order after dropping
        explicitly stored zeros; entries stored twice in a COO matrix are two
        edges.
        """
        return cls._new(*_coo_from_scipy(matrix))

    @classmethod
    def _new(cls, src: np.ndarray, dst: np.ndarray, n_src: int, n_dst: int) -> Graph:
        graph = cls.__new__(cls)
        graph._build(src, dst, n_src, n_dst)
        return graph

    def _build(self, src: np.ndarray, dst: np.ndarray, n_src: int, n_dst: int, checked: bool = False) -> None:
        if not checked:
            square = n_src == n_dst
            _check_range(src, n_src, "source id src", "num_vertices" if square else "num_src")
            _check_range(dst, n_dst, "destination id dst", "num_vertices" if square else "num_dst")
        self.num_src = int(n_src)
        self.num_dst = int(n_dst)
        self.num_edges = int(src.shape[0])
        self.src = _readonly(src)
        self.dst = _readonly(dst)
        self.in_indptr, self.in_src, self.in_eid, self._in_counts = _csr_by(self.dst, self.src, self.num_dst)
        self._out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._reversed: Graph | None = None
        self._degrees: dict[tuple[str, Any, bool], np.ndarray] = {}
        self._edges_sorted: bool | None = None
        self.plans = {}

    @property
    def num_vertices(self) -> int:
        """The destinations (the rows of a kernel's vertex results); every vertex of a square graph."""
        return self.num_dst

    @property
    def bipartite(self) -> bool:
        """Whether sources and destinations are counted separately (num_src != num_dst)."""
        return self.num_src != self.num_dst

    @property
    def num_ids(self) -> int:
        """max(num_src, num_dst): the vertex ids either side may use."""
        return max(self.num_src, self.num_dst)

    @property
    def edges_sorted(self) -> bool:
        """Whether the edge ids are the in-CSR positions: edges sorted by destination
        (ties in id order), so `in_eid` is 0, 1, 2, ... (computed once). Kernels compiled
        with `edges sorted` read edge rows by position and run only on such graphs."""
        if self._edges_sorted is None:
            self._edges_sorted = bool(np.all(self.dst[1:] >= self.dst[:-1]))
        return self._edges_sorted

    def sorted_by_destination(self) -> tuple[Graph, np.ndarray]:
        """The same edges numbered in in-CSR order, so that `edges_sorted` holds, and
        `perm`: new edge i is old edge `perm[i]`. Permute edge data once (`w[perm]`);
        edge results of the new graph come back in the new numbering (`alpha_new[i]`
        belongs to old edge `perm[i]`). Returns this graph itself and the identity
        when its edges are sorted already."""
        if self.edges_sorted:
            return self, np.arange(self.num_edges, dtype=np.int64)
        dst = np.repeat(np.arange(self.num_dst, dtype=np.int64), np.diff(self.in_indptr))
        graph = Graph.__new__(Graph)
        graph._build(np.array(self.in_src), dst, self.num_src, self.num_dst, checked=True)
        return graph, np.array(self.in_eid)

    # --------------------------------------------------------------- out-CSR

    def _out_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._out is None:
            self._out = _csr_by(self.src, self.dst, self.num_src)[:3]
        return self._out

    @property
    def out_indptr(self) -> np.ndarray:
        """num_src + 1 offsets of the out-edges of each source (computed on first use)."""
        return self._out_csr()[0]

    @property
    def out_dst(self) -> np.ndarray:
        """The destination of the out-edge at each position of the out-CSR."""
        return self._out_csr()[1]

    @property
    def out_eid(self) -> np.ndarray:
        """The user's edge id at each position of the out-CSR."""
        return self._out_csr()[2]

    def reversed(self) -> Graph:
        """The graph with every edge turned around, same edge ids (built once, cached).

        Sources and destinations swap sides (num_src and num_dst too).
        Gradient kernels that sum over out-edges run on it as in-edge aggregations.
        """
        if self._reversed is None:
            rev = Graph.__new__(Graph)
            rev._build(self.dst, self.src, self.num_dst, self.num_src, checked=True)
            rev._reversed = self
            self._reversed = rev
        return self._reversed

    def reordered(self, method: str = "rcm") -> Any:
        """This graph with vertices and edges relabelled for locality, and the maps between the ids.

        ``method="rcm"``: reverse Cuthill-McKee. Returns a
        ``gnnc.graph.reorder.Reordering`` (``.graph``, ``.vertices_to_new(x)``,
        ``.vertices_to_old(y)``, ``.edges_to_new(w)``, ``.edges_to_old(a)``).
        Relabel once and keep features in the new order: kernels on a graph
        whose numbering scatters neighbours run several times faster on it.
        """
        return reorder.reorder(self, method)

    # --------------------------------------------------------------- degrees

    def _degree(self, direction: str, dtype: Any, padded: bool = False) -> np.ndarray:
        # the type as asked ("f32" and np.float32 are two entries): no conversion on a hit
        key = (direction, dtype if isinstance(dtype, (str, type, np.dtype)) else _float_dtype(dtype), padded)
        deg = self._degrees.get(key)
        if deg is None:
            dt = _float_dtype(dtype)
            n = self.num_ids if padded else self.num_dst if direction == "in" else self.num_src
            if direction == "in":
                counts = self._in_counts  # made with the in-CSR
            elif self._reversed is not None:
                counts = self._reversed._in_counts
            else:
                counts = np.bincount(self.src, minlength=n)
            if counts.shape[0] == n:
                deg = counts.astype(dt)
            else:
                deg = np.zeros(n, dtype=dt)
                deg[: counts.shape[0]] = counts
            deg.flags.writeable = False
            self._degrees[key] = deg
        return deg

    def deg_in(self, dtype: Any = np.float64) -> np.ndarray:
        """In-degree of every destination as floats (self loops and duplicates count)."""
        return self._degree("in", dtype)

    def deg_out(self, dtype: Any = np.float64) -> np.ndarray:
        """Out-degree of every source as floats (self loops and duplicates count)."""
        return self._degree("out", dtype)

    def kernel_degrees(self, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
        """(deg_in, deg_out) over every id either side may use (num_ids each), as kernels read them.

        ``deg_in(u)`` and ``deg_out(v)`` read them at the other side: an id
        that is no destination has no in-edges, one that is no source no
        out-edges, so the padding is 0.
        """
        if not self.bipartite:  # nothing to pad: the user-facing arrays serve
            return self.deg_in(dtype), self.deg_out(dtype)
        return self._degree("in", dtype, padded=True), self._degree("out", dtype, padded=True)

    # ------------------------------------------------------------ statistics

    def signature(self) -> dict:
        """Small statistics a schedule can be picked from: sizes and in-degree spread."""
        deg = self.deg_in(np.float64)
        out_deg = self.deg_out(np.float64)
        v = self.num_vertices
        return {
            "num_vertices": v,
            **({"num_src": self.num_src} if self.bipartite else {}),
            "num_edges": self.num_edges,
            "deg_mean": float(deg.mean()) if v else 0.0,
            "deg_std": float(deg.std()) if v else 0.0,
            "deg_max": int(deg.max()) if v else 0,
            "out_deg_max": int(out_deg.max()) if self.num_src else 0,
        }

    def __repr__(self) -> str:
        if self.bipartite:
            return f"<gnnc.Graph {self.num_src} sources, {self.num_dst} destinations, {self.num_edges} edges>"
        return f"<gnnc.Graph {self.num_vertices} vertices, {self.num_edges} edges>"


# ------------------------------------------------------- user formats -> COO


def _default_n(n: int | None, *id_arrays: np.ndarray) -> int:
    if n is not None:
        return n
    return max((int(a.max()) + 1 for a in id_arrays if a.size), default=0)


def _sizes(num_vertices: Any, shape: Any) -> tuple[int, int] | None:
    """(num_src, num_dst) from ``num_vertices=`` or ``shape=``, or None when neither is given."""
    n = _count(num_vertices, "num_vertices")
    if shape is None:
        return None if n is None else (n, n)
    if n is not None:
        raise GraphError("give num_vertices (a square graph) or shape=(num_src, num_dst) (a bipartite one), not both")
    if is_torch_tensor(shape) or isinstance(shape, np.ndarray):
        shape = tuple(np.asarray(shape).tolist())
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise GraphError(f"shape must be a pair (num_src, num_dst), got {shape!r}")
    return _count(shape[0], "num_src"), _count(shape[1], "num_dst")  # type: ignore[return-value]  # _count raises where it would return None


def _with_sizes(s: np.ndarray, d: np.ndarray, sizes: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray, int, int]:
    if sizes is None:
        n = _default_n(None, s, d)
        return s, d, n, n
    return s, d, sizes[0], sizes[1]


def _coo_from_coo(src: Any, dst: Any, num_vertices: Any, shape: Any = None) -> tuple[np.ndarray, np.ndarray, int, int]:
    sizes = _sizes(num_vertices, shape)
    s = _ids(src, "src", 1)
    d = _ids(dst, "dst", 1)
    if s.shape[0] != d.shape[0]:
        raise GraphError(f"src and dst must have the same length, got {s.shape[0]} and {d.shape[0]}")
    return _with_sizes(s, d, sizes)


def _coo_from_edge_index(
    edge_index: Any, num_vertices: Any, shape: Any = None
) -> tuple[np.ndarray, np.ndarray, int, int]:
    sizes = _sizes(num_vertices, shape)
    arr = _to_numpy(edge_index, "edge_index")
    if arr.ndim != 2 or arr.shape[0] != 2:
        hint = " (it looks like E x 2: pass edge_index.T)" if arr.ndim == 2 and arr.shape[1] == 2 else ""
        raise GraphError(
            f"edge_index must have shape (2, E) (row 0 sources, row 1 destinations), got {arr.shape}{hint}"
        )
    ids = _ids(arr, "edge_index", 2)  # an owned copy: its rows are the graph's own
    return _with_sizes(ids[0], ids[1], sizes)


def _coo_from_csr(
    indptr: Any, indices: Any, num_vertices: Any, shape: Any = None
) -> tuple[np.ndarray, np.ndarray, int, int]:
    sizes = _sizes(num_vertices, shape)
    ptr = _ids(indptr, "indptr", 1)
    idx = _ids(indices, "indices", 1)
    if ptr.shape[0] == 0:
        raise GraphError("indptr must have at least one entry (indptr[0] == 0)")
    if ptr[0] != 0:
        raise GraphError(f"indptr[0] must be 0, got {int(ptr[0])}")
    steps = np.diff(ptr)
    bad = np.flatnonzero(steps < 0)
    if bad.size:
        i = int(bad[0])
        raise GraphError(
            f"indptr must be non-decreasing, but it decreases at position {i + 1}: "
            f"indptr[{i}] = {int(ptr[i])} > indptr[{i + 1}] = {int(ptr[i + 1])}"
        )
    if ptr[-1] != idx.shape[0]:
        raise GraphError(f"indptr[-1] = {int(ptr[-1])} must equal len(indices) = {idx.shape[0]}")
    rows = ptr.shape[0] - 1
    if sizes is None:
        n = max(rows, int(idx.max()) + 1 if idx.size else 0)
        sizes = (n, n)
    elif sizes[0] < rows:
        what = "num_vertices" if sizes[0] == sizes[1] else "num_src"
        raise GraphError(f"{what} = {sizes[0]} is less than the {rows} rows of indptr (len(indptr) - 1)")
    src = np.repeat(np.arange(rows, dtype=np.int64), steps)
    _check_range(idx, sizes[1], "indices", "num_vertices" if sizes[0] == sizes[1] else "num_dst")
    return src, idx, sizes[0], sizes[1]


def _coo_from_scipy(matrix: Any) -> tuple[np.ndarray, np.ndarray, int, int]:
    if not _is_scipy_sparse(matrix):
        raise GraphError(f"from_scipy needs a scipy sparse matrix or array, got {type(matrix).__name__}")
    shape = matrix.shape
    if len(shape) != 2:
        raise GraphError(f"the adjacency matrix must be 2-D (num_src x num_dst), got shape {shape}")
    coo = matrix.tocoo()
    data = np.asarray(coo.data)
    keep = data != 0
    row = np.asarray(coo.row)
    col = np.asarray(coo.col)
    if not keep.all():
        row, col = row[keep], col[keep]
    src = _ids(row, "row", 1)
    dst = _ids(col, "col", 1)
    return src, dst, int(shape[0]), int(shape[1])
