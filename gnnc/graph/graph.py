"""The runtime's graph: directed edges u -> v, checked once, kept read-only.

    graph = gnnc.Graph(edge_index)            # 2 x E, numpy or torch
    graph = gnnc.Graph.from_coo(src, dst, num_vertices=5)
    graph = gnnc.Graph.from_csr(indptr, indices)   # CSR by source, as DGL's ('csr', ...)
    graph = gnnc.Graph.from_csc(indptr, indices)   # by destination: no copy of read-only arrays (memmaps)
    graph = gnnc.Graph.from_scipy(A)          # A[u, v] != 0 is the edge u -> v
    block = gnnc.Graph(edge_index, shape=(num_src, num_dst))   # bipartite
    kg = gnnc.Graph(edge_index, edge_type=t, num_relations=R)  # heterogeneous
    kg = gnnc.Graph.from_hetero(data)         # PyG HeteroData or a DGL heterograph

A graph has ``num_src`` sources and ``num_dst`` destinations. Without a
``shape`` they are one vertex set (``num_src == num_dst == num_vertices``);
with ``shape=(num_src, num_dst)`` (or a non-square scipy matrix) sources and
destinations are counted separately, as DGL's blocks for mini-batch training:
source ids are checked against ``num_src``, destination ids against
``num_dst``. ``num_vertices`` is ``num_dst``, the rows of a kernel's vertex
results. docs/language.md says how kernels read vertex tensors on such a graph.

A graph may carry a relation type per edge (``edge_type``, integers in
``[0, num_relations)``, in edge-id order), as knowledge graphs do: kernels
index relation tensors with it (``W[rel(e)]``) and count in-edges per
relation (``deg_in(v, rel(e))``). ``num_relations`` may exceed the largest
type + 1 (relations without edges); it defaults to that. A graph made from a
heterogeneous one (``from_hetero``) also keeps its node types (``types``:
names, per-type offsets, a type per node; ``hetero.py``).

An edge id is the edge's position in what the user gave (an ``edge_index``
column, a COO position, a position in CSR ``indices``, the ``A.tocoo()``
order); edge tensors are always indexed by it. The kernels walk the in-edge
CSR grouped by destination (``in_indptr``, ``in_src``, ``in_eid``), within a
destination in increasing edge id, and map positions back to edge ids through
``in_eid``.

Every invariant (integer ids, equal lengths, ids in range, well-formed CSR,
a size this machine's memory can hold: ``limits.py``) is checked here, once,
before anything reads the arrays (a scipy matrix's too, before any of scipy's
own conversions runs on them); the arrays are then read-only, so per call only shapes,
dtypes and aliasing need checking. Building is vectorised numpy: a stable
argsort and a bincount.

Graphs past memory: `from_csc` takes the in-CSR itself (grouped by
destination, edge ids its positions) and keeps int64 arrays that are already
read-only, such as `np.load(..., mmap_mode="r")` or `np.memmap(..., mode="r")`,
without copying them: the kernels read the edges from the file's pages. It
adds `in_eid` (the identity, 8 bytes per edge) on the first call, and `dst`
only when something asks for it.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from gnnc.errors import ArgumentError, GraphError
from gnnc.graph import group_edges, limits, reorder
from gnnc.graph.hetero import GraphTypes, hetero_parts
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


def _ids(obj: Any, what: str, ndim: int, kind_of: str = "vertex ids") -> np.ndarray:
    """An owned, C-contiguous int64 copy of an id array, after checking its dtype and rank."""
    arr = _to_numpy(obj, what)
    if arr.ndim != ndim:
        raise GraphError(f"{what} must be a {ndim}-D array, got shape {arr.shape}")
    kind = arr.dtype.kind
    if kind == "b":
        raise GraphError(f"{what} has dtype bool; {kind_of} must be integers")
    if kind not in "iu":
        # `[]` becomes a float64 array; an empty array holds no bad id
        if arr.size == 0 and kind in "f":
            return np.zeros(arr.shape, dtype=np.int64)
        raise GraphError(f"{what} has dtype {arr.dtype}; {kind_of} must be integers (use .astype(np.int64))")
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


def _check_range(ids: np.ndarray, n: int, what: str, bound_what: str, what_kind: str = "vertex ids") -> None:
    if ids.size == 0 or (ids.min() >= 0 and ids.max() < n):  # two passes, no temporary
        return
    bad = np.flatnonzero((ids < 0) | (ids >= n))
    if bad.size:
        i = int(bad[0])
        value = int(ids[i])
        if value < 0:
            raise GraphError(f"{what}[{i}] = {value} is negative; {what_kind} must be >= 0")
        raise GraphError(
            f"{what}[{i}] = {value} is out of range: {bound_what} is {n}, so "
            f"{'ids' if what_kind == 'vertex ids' else what_kind} must be < {n}"
            + (f" ({bad.size} ids are out of range)" if bad.size > 1 else "")
        )


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    arr.flags.writeable = False
    return arr


def _frozen(arr: np.ndarray) -> np.ndarray:
    """`arr` (C-contiguous already: made here) read-only."""
    arr.flags.writeable = False
    return arr


#: The element types degrees take by the language's names (a new graph asks for them by name).
_FLOAT_NAMES: dict[str, np.dtype] = {"f32": np.dtype(np.float32), "f64": np.dtype(np.float64)}


def _float_dtype(dtype: Any) -> np.dtype:
    named = _FLOAT_NAMES.get(dtype) if isinstance(dtype, str) else None
    if named is not None:
        return named
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise ArgumentError(f"degrees are float32 or float64, got {dtype!r}") from exc
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ArgumentError(f"degrees are float32 or float64, got {dt}")
    return dt


#: Keys below this many values are sorted by numpy's radix sort (16-bit keys, stable).
_RADIX_KEYS = 1 << 16
#: Graphs up to this many edges (and 2**32 keys) sort by two 16-bit radix passes.
_RADIX2_EDGES = 1 << 24


def _csr_by(keys: np.ndarray, other: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Groups edges by ``keys`` (stable: increasing edge id within a group): (indptr, other in
    group order, edge ids in group order)."""
    try:
        found = group_edges.group(keys, other, n)
    except group_edges.OutOfRange:  # checked keys that changed since (a file mapping rewritten)
        found = None
    if found is not None:
        if found.other is None:  # grouped already
            return _readonly(found.indptr), _readonly(other), _readonly(np.arange(keys.shape[0], dtype=np.int64))
        assert found.order is not None
        return _readonly(found.indptr), _readonly(found.other), _readonly(found.order)
    return _numpy_csr_by(keys, other, n)[:3]


def _numpy_csr_by(keys: np.ndarray, other: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`_csr_by` in numpy, with the count of each key."""
    e = keys.shape[0]
    bits = max(1, e.bit_length())
    if n <= _RADIX_KEYS:
        # numpy sorts 16-bit keys by counting, stably: a few passes, where a comparison sort of
        # the same keys costs 4x as much (a 1,300-edge block: 4 us against 17 us)
        order = np.argsort(keys.astype(np.uint16), kind="stable")
    elif n <= 1 << 32 and e <= _RADIX2_EDGES:
        # two stable counting sorts, low 16 bits then high: a graph and its reversed graph build
        # 2.2x faster than with the packed sort below at 165K edges, 1.7x at 4M, 1.2x at 16M,
        # at 22 bytes an edge of temporaries instead of 8 (hence only up to _RADIX2_EDGES)
        low = np.argsort(keys.astype(np.uint16), kind="stable")
        order = low[np.argsort((keys[low] >> 16).astype(np.uint16), kind="stable")]
    elif n.bit_length() + bits <= 62:
        # (key, edge id) packed in one int64 are unique, so a plain (SIMD) sort
        # is stable by construction and faster than argsort(kind="stable")
        packed = (keys << bits) | np.arange(e, dtype=np.int64)
        packed.sort()
        order = packed & ((1 << bits) - 1)
    else:  # pragma: no cover - needs about 2**62 vertices x edges
        order = np.argsort(keys, kind="stable").astype(np.int64, copy=False)
    counts = np.bincount(keys, minlength=n)
    return _readonly(_offsets(counts)), _readonly(other[order]), _readonly(order), counts


def _offsets(counts: np.ndarray) -> np.ndarray:
    """The offsets of groups of `counts` entries laid out one after another: 0, then the running sum."""
    indptr = np.empty(counts.shape[0] + 1, dtype=np.int64)
    indptr[0] = 0
    np.cumsum(counts, out=indptr[1:])
    return indptr


@functools.lru_cache(maxsize=8)
def _unread_degrees(dtype: Any) -> np.ndarray:
    """What a kernel that never reads a degree array gets for it: one element (a valid pointer),
    read-only and shared by every graph."""
    dt = _float_dtype(dtype)
    placeholder = _UNREAD_DEGREES.get(dt)
    if placeholder is None:
        placeholder = _UNREAD_DEGREES[dt] = _readonly(np.zeros(1, dtype=dt))
    return placeholder


_UNREAD_DEGREES: dict[np.dtype, np.ndarray] = {}


#: madvise's advice that the pages of a range are not needed (Linux, and most Unix systems).
_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


def _release_mapped_pages(arr: np.ndarray | None) -> bool:
    """Gives the pages of `arr` back to the system when it lies in a read-only file mapping
    (an np.memmap of mode "r", through views): clean pages of the file, read again from the
    page cache (or the file) on the next access, so nothing is lost. Other arrays are left
    alone (dropping an anonymous page would zero it). True where the pages were released."""
    base: Any = arr
    while base is not None and not isinstance(base, np.memmap):
        base = getattr(base, "base", None)
    if arr is None or base is None or base.mode != "r" or _MADV_DONTNEED is None or not arr.nbytes:
        return False
    page = mmap.PAGESIZE
    start = -(-arr.ctypes.data // page) * page  # whole pages inside the array only
    end = (arr.ctypes.data + arr.nbytes) // page * page
    if end <= start:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_DONTNEED) == 0
    except (OSError, AttributeError):  # no madvise: the pages stay, as the system decides
        return False


def _nondecreasing(keys: np.ndarray) -> bool:
    """Whether `keys` never decrease (one pass; the edges are then grouped by them already)."""
    return keys.shape[0] < 2 or bool(np.all(keys[1:] >= keys[:-1]))


#: A reversed graph with more edges keeps no edge ids; `in_eid` sorts again if asked.
_KEEP_REVERSED_EIDS = 1 << 20

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
    _src: np.ndarray | None
    in_indptr: np.ndarray
    _in_src: np.ndarray | None
    _dst: np.ndarray | None
    _in_eid: np.ndarray | None
    #: `_reversed`'s value: a graph, or a weak reference to the graph a reversed graph reverses
    _twin: Graph | weakref.ref[Graph] | None
    _in_counts: np.ndarray | None
    #: The relation type of each edge, by edge id (int64, read-only), or None.
    edge_type: np.ndarray | None
    #: The number of relation types, or None for a graph without them.
    num_relations: int | None
    #: Per-graph preprocessing data (partitions, permutations, ...), by plan name.
    plans: dict
    #: The node and edge types of a graph made by `from_hetero` (None otherwise): `hetero.GraphTypes`.
    types: GraphTypes | None

    def __init__(
        self,
        obj: Any,
        num_vertices: int | None = None,
        *,
        shape: Any = None,
        edge_type: Any = None,
        num_relations: int | None = None,
    ):
        if isinstance(obj, Graph):
            sizes = _sizes(num_vertices, shape)
            if sizes is not None and sizes != (obj.num_src, obj.num_dst):
                raise GraphError(f"the graph has shape (num_src, num_dst) = {(obj.num_src, obj.num_dst)}, not {sizes}")
            if edge_type is None and num_relations is None and obj.edge_type is not None:
                edge_type, num_relations = obj.edge_type, obj.num_relations
            self._build(obj.src, obj.dst, obj.num_src, obj.num_dst, checked=True)
            self.types = obj.types  # the same vertex ids
        elif _is_scipy_sparse(obj):
            if num_vertices is not None or shape is not None:
                raise GraphError(
                    "num_vertices cannot be given with a scipy matrix: its shape decides it (so does shape=)"
                )
            if edge_type is not None or num_relations is not None:
                raise GraphError(
                    "edge_type cannot be given with a scipy matrix (its edge order is A.tocoo()'s): "
                    "build the graph from COO arrays or an edge_index"
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
        self._set_relations(edge_type, num_relations)

    # ------------------------------------------------------------ constructors

    @classmethod
    def from_edge_index(
        cls,
        edge_index: Any,
        num_vertices: int | None = None,
        *,
        shape: Any = None,
        edge_type: Any = None,
        num_relations: int | None = None,
    ) -> Graph:
        """From a ``2 x E`` array or tensor: row 0 sources, row 1 destinations (as PyG);
        ``edge_type`` (E integers in ``[0, num_relations)``) gives each edge's relation."""
        if num_vertices is None and edge_type is None and num_relations is None:
            graph = _from_int64_edge_index(edge_index, shape)
            if graph is not None:
                return graph
        return cls._new(*_coo_from_edge_index(edge_index, num_vertices, shape), edge_type, num_relations)

    @classmethod
    def from_coo(
        cls,
        src: Any,
        dst: Any,
        num_vertices: int | None = None,
        *,
        shape: Any = None,
        edge_type: Any = None,
        num_relations: int | None = None,
    ) -> Graph:
        """From COO arrays: edge ``i`` is ``src[i] -> dst[i]``, of relation ``edge_type[i]`` if given."""
        return cls._new(*_coo_from_coo(src, dst, num_vertices, shape), edge_type, num_relations)

    @classmethod
    def from_csr(
        cls,
        indptr: Any,
        indices: Any,
        num_vertices: int | None = None,
        *,
        shape: Any = None,
        edge_type: Any = None,
        num_relations: int | None = None,
    ) -> Graph:
        """From a CSR grouped by source (as DGL's ``('csr', ...)``).

        Row ``u`` lists the destinations ``indices[indptr[u]:indptr[u+1]]``;
        an edge's id is its position in ``indices`` (and in ``edge_type``). With
        ``shape=(num_src, num_dst)`` indptr has ``num_src + 1`` entries.
        """
        return cls._new(*_coo_from_csr(indptr, indices, num_vertices, shape), edge_type, num_relations)

    @classmethod
    def from_csc(cls, indptr: Any, indices: Any, num_vertices: int | None = None, *, shape: Any = None) -> Graph:
        """From a CSR grouped by destination, the in-CSR the kernels walk (as DGL's ``('csc', ...)``).

        Row ``v`` lists the sources of ``v``'s in-edges, ``indices[indptr[v]:indptr[v+1]]``;
        an edge's id is its position in ``indices`` (so ``edges_sorted`` holds).
        With ``shape=(num_src, num_dst)`` indptr has ``num_dst + 1`` entries.
        Read-only C-contiguous int64 arrays (memory-mapped files) are kept as
        they are, not copied: the graph's ``in_indptr`` and ``in_src`` are them.
        """
        sizes = _sizes(num_vertices, shape)
        ptr, idx = _shared_ids(indptr, "indptr"), _shared_ids(indices, "indices")
        _check_indptr(ptr, nnz=idx.shape[0])
        rows = ptr.shape[0] - 1
        if sizes is None:
            n = max(rows, int(idx.max()) + 1 if idx.size else 0)
            sizes = (n, n)
        elif sizes[1] != rows:
            what = "num_vertices" if sizes[0] == sizes[1] else "num_dst"
            raise GraphError(f"{what} = {sizes[1]} but indptr has {rows} rows (len(indptr) - 1)")
        square = sizes[0] == sizes[1]
        _check_range(idx, sizes[0], "indices", "num_vertices" if square else "num_src")
        graph = cls.__new__(cls)
        graph.num_src, graph.num_dst, graph.num_edges = sizes[0], sizes[1], int(idx.shape[0])
        graph._src = graph.in_src = _readonly(idx)
        graph.in_indptr = _readonly(ptr)
        graph._dst = None
        graph._in_eid = None
        graph._in_counts = None  # np.diff(indptr) when a degree is asked for
        graph._init_caches(edges_sorted=True)
        return graph

    @classmethod
    def from_hetero(cls, data: Any) -> Graph:
        """From a PyG ``HeteroData`` (through ``to_homogeneous()``) or a DGL heterograph: nodes
        numbered type after type, relations by edge type (``HeteroData.edge_types``, DGL's
        ``canonical_etypes``), as both libraries' ``to_homogeneous`` number them; the node types
        are kept in ``graph.types`` (``graph.types.nodes("paper")`` is that type's id range,
        ``graph.types.node_type`` a type per node). See ``hetero.py``."""
        src, dst, edge_type, num_nodes, types = hetero_parts(data)
        graph = cls._new(
            *_coo_from_coo(src, dst, num_nodes), edge_type, max(len(types.edge_types), 1 if src.size else 0)
        )
        graph.types = types
        return graph

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
    def _new(
        cls,
        src: np.ndarray,
        dst: np.ndarray,
        n_src: int,
        n_dst: int,
        edge_type: Any = None,
        num_relations: int | None = None,
    ) -> Graph:
        graph = cls.__new__(cls)
        graph._build(src, dst, n_src, n_dst)
        graph._set_relations(edge_type, num_relations)
        return graph

    def _set_relations(self, edge_type: Any, num_relations: Any, checked: bool = False) -> None:
        """Checks and keeps the edges' relation types (``edge_type`` by edge id, ``num_relations``)."""
        if edge_type is None:
            if num_relations is not None:
                raise GraphError("num_relations was given without edge_type (the relation of each edge)")
            self.edge_type, self.num_relations = None, None
            return
        if checked:
            self.edge_type, self.num_relations = edge_type, int(num_relations)
            return
        types = _ids(edge_type, "edge_type", 1, "relation types")
        if types.shape[0] != self.num_edges:
            raise GraphError(f"edge_type has {types.shape[0]} entries but the graph has {self.num_edges} edges")
        r = _count(num_relations, "num_relations")
        if r is None:
            r = int(types.max()) + 1 if types.size else 0
        elif r == 0 and types.size:
            raise GraphError("num_relations must be at least 1 for a graph with edges")
        _check_range(types, r, "edge_type", "num_relations", what_kind="relation types")
        self.edge_type, self.num_relations = _readonly(types), r

    def _build(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        n_src: int,
        n_dst: int,
        checked: bool = False,
        grouped: bool | None = None,
        eids: bool = True,
    ) -> None:
        """The graph of the edges ``src[i] -> dst[i]`` (int64 arrays it keeps), ids checked unless
        `checked`; `grouped` says whether `dst` never decreases where known, `eids` False drops
        the in-CSR's edge ids of a graph that sorts its edges (they are sorted again if asked)."""
        if not checked:
            limits.check_graph_size(n_src, n_dst, src.shape[0])
        self.num_src = int(n_src)
        self.num_dst = int(n_dst)
        self.num_edges = int(src.shape[0])
        self._src = _readonly(src)
        self._dst = _readonly(dst)
        # one native pass checks the ids and counts the in-edges; a second groups them unless
        # they came grouped (every sampler's blocks)
        try:
            found = group_edges.group(self._dst, self._src, self.num_dst, None if checked else self.num_src, eids)
        except group_edges.OutOfRange:
            found = None
        if not checked and found is None:  # an id out of range, or no helper
            square = n_src == n_dst
            _check_range(self._src, n_src, "source id src", "num_vertices" if square else "num_src")
            _check_range(self._dst, n_dst, "destination id dst", "num_vertices" if square else "num_dst")
        if found is not None:  # the helper's arrays: its own, C-contiguous int64
            self.in_indptr = _frozen(found.indptr)
            self.in_src = self._src if found.other is None else _frozen(found.other)
            self._in_eid = None if found.order is None else _frozen(found.order)
            self._in_counts = None  # np.diff(indptr) when a degree is asked for
            self._init_caches(edges_sorted=found.other is None)
            return
        if grouped is None:
            grouped = _nondecreasing(self._dst)
        if grouped:
            # edges listed by destination already (a sampler's blocks, a CSC's COO): the edge
            # list is the in-CSR, as `from_csc` keeps it; its edge ids are the identity, made
            # if a kernel reads them. No sort, no gather: a new block's graph each call
            counts = np.bincount(self._dst, minlength=self.num_dst)
            self.in_indptr, self.in_src, self._in_eid, self._in_counts = (
                _readonly(_offsets(counts)),
                self._src,
                None,
                counts,
            )
        else:
            self.in_indptr, self.in_src, self._in_eid, self._in_counts = _numpy_csr_by(
                self._dst, self.src, self.num_dst
            )
        self._init_caches(edges_sorted=grouped)

    @property
    def _reversed(self) -> Graph | None:
        """The reversed graph (`reversed`, cached), or for a reversed graph the graph it reverses
        (None once that is gone, where it was held weakly)."""
        twin = self._twin
        return twin() if isinstance(twin, weakref.ref) else twin

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle or a copy keeps: the arrays, not the caches (`plans`, which hold
        decisions and kernels' laid-out calls, and a forward graph's reversed graph); a
        reversed graph keeps the graph it reverses, as it may read it."""
        state = self.__dict__.copy()
        state["plans"] = {}
        state["_twin"] = self._reversed if self._derived_reverse else None
        return state

    def _init_caches(self, edges_sorted: bool | None = None) -> None:
        self._out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._twin = None
        self._degrees: dict[tuple[str, Any, bool], np.ndarray] = {}
        self._edges_sorted: bool | None = edges_sorted
        #: a reversed graph (made by `reversed`) may drop its in-CSR sources and sort them again
        self._derived_reverse = False
        #: the in-CSR sources are a read-only file mapping whose pages this process gave back
        #: once its kernels' plans held every source (`release_in_src`); a later full read
        #: (the reversed graph's sort) gives them back again
        self._mapped_released = False
        self._keep_in_src = False
        self.edge_type, self.num_relations = None, None
        self.types = None
        self.plans = {}

    @property
    def in_src(self) -> np.ndarray:
        """The source of the in-edge at each in-CSR position.

        A large reversed graph drops it once the plans its kernels read carry
        the sources themselves (`release_in_src`); asked for again, it is
        sorted again from the graph it reverses, and kept from then on."""
        if self._in_src is None:
            self._in_src = self._sorted_sources()
            self._keep_in_src = True
        return self._in_src

    @in_src.setter
    def in_src(self, value: np.ndarray) -> None:
        self._in_src = value

    def _sorted_sources(self) -> np.ndarray:
        assert self._derived_reverse, "only a reversed graph drops its sources"
        return _readonly(_csr_by(self.dst, self._sources_for_sort(), self.num_dst)[1])

    def _sources_for_sort(self) -> np.ndarray:
        """Each edge's source by edge id, for sorting the in-CSR again. A reversed `from_csc`
        graph keeps none: they are the forward graph's destinations, made for the sort (as in
        `reversed`) where that graph keeps none, and not kept (`src` would keep them)."""
        if self._src is not None:
            return self._src
        forward = self._reversed
        assert forward is not None, "only a reversed from_csc graph is built without sources"
        return forward._dst if forward._dst is not None else forward._csr_destinations()

    def release_in_src(self) -> None:
        """Lets go of the in-CSR sources once `plans.build` has laid out a kernel's partitions,
        which hold every source, unless a kernel's cached arguments still read them (they would
        be made, or read, again on every call).

        A reversed graph of more than `_KEEP_REVERSED_EIDS` edges drops them (8 bytes an edge:
        0.5 GiB at 64M edges), unless they were asked for again before; a kernel that reads them
        (its record's `in_src`) makes them again (a sort, once). A graph whose sources are a
        read-only file mapping (`from_csc` over `np.load(mmap_mode="r")`) gives their pages back
        to the system: clean pages of the file, read again from it if asked for."""
        if self.num_edges <= _KEEP_REVERSED_EIDS or self._in_src is None:
            return
        held = any(isinstance(p, Mapping) and p.get("in_src") is self._in_src for p in self.plans.values())
        if held:
            return
        if not self._derived_reverse:
            self._mapped_released = _release_mapped_pages(self._in_src) or self._mapped_released
        elif not self._keep_in_src:
            self._in_src = None

    @property
    def src(self) -> np.ndarray:
        """The source of each edge, by edge id (the reversed graph of a `from_csc` one makes it
        on first use: its sources are that graph's destinations)."""
        if self._src is None:
            assert self._reversed is not None, "only a reversed from_csc graph is built without sources"
            self._src = self._reversed.dst
        return self._src

    @property
    def dst(self) -> np.ndarray:
        """The destination of each edge, by edge id (a `from_csc` graph makes it on first use)."""
        if self._dst is None:
            self._dst = _readonly(self._csr_destinations())
        return self._dst

    def _csr_destinations(self) -> np.ndarray:
        return np.repeat(np.arange(self.num_dst, dtype=np.int64), np.diff(self.in_indptr))

    def edge_index(self) -> np.ndarray:
        """A new ``2 x E`` int64 array, sources then destinations by edge id (the caller's to
        keep or edit). A graph whose `dst` is not made yet (`from_csc`) fills that row without
        making it: the array is the only copy of the destinations."""
        out = np.empty((2, self.num_edges), dtype=np.int64)
        out[0] = self.src
        out[1] = self._dst if self._dst is not None else self._csr_destinations()
        return out

    @property
    def in_eid(self) -> np.ndarray:
        """The user's edge id of the in-edge at each in-CSR position (the identity for `from_csc`).

        Made on first use where the graph was built without it: a `from_csc`
        graph, or a large reversed graph (which sorts again)."""
        if self._in_eid is None:
            if self.edges_sorted:
                self._in_eid = _readonly(np.arange(self.num_edges, dtype=np.int64))
            else:
                self._in_eid = _csr_by(self.dst, self._sources_for_sort(), self.num_dst)[2]
        return self._in_eid

    @property
    def num_vertices(self) -> int:
        """The destinations (the rows of a kernel's vertex results); every vertex of a square graph."""
        return self.num_dst

    @property
    def has_relations(self) -> bool:
        """Whether the edges carry relation types (``edge_type``, ``num_relations``)."""
        return self.edge_type is not None

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
        if self.edge_type is not None:
            graph._set_relations(_readonly(self.edge_type[self.in_eid]), self.num_relations, checked=True)
        graph.types = self.types  # the same vertex ids
        return graph, np.array(self.in_eid)

    # --------------------------------------------------------------- out-CSR

    def _out_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._out is None:
            self._out = _csr_by(self.src, self.dst, self.num_src)
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
        The reversed graph's own `reversed()` is this graph while it lives: it is
        held weakly (no reference cycle) unless the reversed graph reads it (a
        large one that drops its sources, a `from_csc` graph's); once it is gone,
        a new one is built.
        """
        twin = self._reversed
        if twin is not None:
            return twin
        rev = Graph.__new__(Graph)
        # a from_csc graph's destinations are made for the sort, not kept: the reversed
        # graph's sources, made again if asked for (its kernels read its in-CSR only)
        dst = self._dst if self._dst is not None else self._csr_destinations()
        # most gradient kernels read no edge ids (`plans.PlanSpec.edge_ids`): 8 bytes an edge
        keep_eids = self.num_edges <= _KEEP_REVERSED_EIDS
        rev._build(dst, self.src, self.num_dst, self.num_src, checked=True, eids=keep_eids)
        if self._dst is None:
            rev._src = None
        del dst
        if not keep_eids:
            rev._in_eid = None
        rev._set_relations(self.edge_type, self.num_relations, checked=True)
        rev.types = self.types  # the same vertex ids
        # the reversed graph points back weakly where it needs nothing of this one (its own
        # sources, kept): no cycle, so a mini-batch block's two graphs, their plans and
        # decisions go when the last reference does, not at the next garbage collection
        needs_forward = rev._src is None or not keep_eids
        rev._twin = self if needs_forward else weakref.ref(self)
        rev._derived_reverse = True
        self._twin = rev
        if self._mapped_released:  # the sort read the mapped sources again: given back again
            self.release_in_src()
        return rev

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

    def _in_counts_of(self) -> np.ndarray:
        if self._in_counts is None:
            indptr = self.in_indptr
            self._in_counts = indptr[1:] - indptr[:-1]
        return self._in_counts

    def _degree(self, direction: str, dtype: Any, padded: bool = False) -> np.ndarray:
        # the type as asked ("f32" and np.float32 are two entries): no conversion on a hit
        key = (direction, dtype if isinstance(dtype, (str, type, np.dtype)) else _float_dtype(dtype), padded)
        deg = self._degrees.get(key)
        if deg is None:
            dt = _float_dtype(dtype)
            n = self.num_ids if padded else self.num_dst if direction == "in" else self.num_src
            if direction == "in":
                counts = self._in_counts_of()  # made with the in-CSR
            elif self._reversed is not None:
                counts = self._reversed._in_counts_of()
            else:  # the in-CSR's sources are the edges' (one reversed graph's may not be kept)
                counts = np.bincount(self.in_src, minlength=n)
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

    def kernel_degrees(self, dtype: Any, deg_in: bool = True, deg_out: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(deg_in, deg_out) over every id either side may use (num_ids each), as kernels read them.

        ``deg_in(u)`` and ``deg_out(v)`` read them at the other side: an id
        that is no destination has no in-edges, one that is no source no
        out-edges, so the padding is 0. ``deg_in=False`` / ``deg_out=False``
        (a kernel that never reads it): a one-element placeholder, not counted.
        """
        padded = self.bipartite  # else nothing to pad: the user-facing arrays serve
        return (
            self._degree("in", dtype, padded) if deg_in else _unread_degrees(dtype),
            self._degree("out", dtype, padded) if deg_out else _unread_degrees(dtype),
        )

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
        relations = f", {self.num_relations} relations" if self.num_relations is not None else ""
        if self.bipartite:
            return (
                f"<gnnc.Graph {self.num_src} sources, {self.num_dst} destinations, {self.num_edges} edges{relations}>"
            )
        return f"<gnnc.Graph {self.num_vertices} vertices, {self.num_edges} edges{relations}>"


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


def _from_int64_edge_index(edge_index: Any, shape: Any) -> Graph | None:
    """The graph of a ``2 x E`` int64 numpy array or CPU tensor with ``shape=(int, int)``, with
    one copy and the native helper's passes (`group_edges`), else two reductions before numpy's
    (a mini-batch block is a new graph every call: `_coo_from_edge_index`'s general checks cost
    a third of its conversion); None for anything else (or an id out of range without the
    helper), which the general way converts or refuses with its message."""
    if not (isinstance(shape, tuple) and len(shape) == 2 and all(type(n) is int and n >= 0 for n in shape)):
        return None
    if isinstance(edge_index, np.ndarray):
        arr = edge_index
    elif is_torch_tensor(edge_index) and edge_index.device.type == "cpu" and not edge_index.requires_grad:
        arr = edge_index.numpy()
    else:
        return None
    if arr.dtype != np.int64 or arr.ndim != 2 or arr.shape[0] != 2:
        return None
    ids = arr.copy()  # C-contiguous and owned: its rows are the graph's own
    n_src, n_dst = shape
    src, dst = ids
    if group_edges.available():  # the count pass checks every id (and names one out of range)
        return Graph._new(src, dst, n_src, n_dst)
    grouped = _nondecreasing(dst)
    if ids.shape[1]:
        # a block's destinations come grouped: their range is their ends
        low, high = (dst[0], dst[-1]) if grouped else (dst.min(), dst.max())
        if low < 0 or high >= n_dst or src.min() < 0 or src.max() >= n_src:
            return None
    limits.check_graph_size(n_src, n_dst, ids.shape[1])
    graph = Graph.__new__(Graph)
    graph._build(src, dst, n_src, n_dst, checked=True, grouped=grouped)
    graph._set_relations(None, None)
    return graph


def _check_indptr(ptr: np.ndarray, owner: str = "", nnz: int | None = None) -> None:
    """Offsets that start at 0, never decrease and (with `nnz`) end at nnz, or a GraphError
    naming the first break; `owner` prefixes the array's name ("the csr matrix's ")."""
    if ptr.shape[0] == 0:
        raise GraphError(f"{owner}indptr must have at least one entry (indptr[0] == 0)")
    if ptr[0] != 0:
        raise GraphError(f"{owner}indptr[0] must be 0, got {int(ptr[0])}")
    bad = np.flatnonzero(ptr[1:] < ptr[:-1])
    if bad.size:
        i = int(bad[0])
        raise GraphError(
            f"{owner}indptr must be non-decreasing, but it decreases at position {i + 1}: "
            f"indptr[{i}] = {int(ptr[i])} > indptr[{i + 1}] = {int(ptr[i + 1])}"
        )
    if nnz is not None and ptr[-1] != nnz:
        raise GraphError(f"{owner}indptr[-1] = {int(ptr[-1])} must equal len(indices) = {nnz}")


def _shared_ids(obj: Any, what: str) -> np.ndarray:
    """A 1-D id array kept as it is when it is read-only, C-contiguous int64 (a memory-mapped
    file: nobody can change it after the checks), else an owned copy as `_ids` makes."""
    if isinstance(obj, np.ndarray) and obj.ndim == 1 and obj.dtype == np.int64 and not obj.flags.writeable:
        if obj.flags.c_contiguous:
            return obj
    return _ids(obj, what, 1)


def _coo_from_csr(
    indptr: Any, indices: Any, num_vertices: Any, shape: Any = None
) -> tuple[np.ndarray, np.ndarray, int, int]:
    sizes = _sizes(num_vertices, shape)
    ptr = _ids(indptr, "indptr", 1)
    idx = _ids(indices, "indices", 1)
    _check_indptr(ptr, nnz=idx.shape[0])
    rows = ptr.shape[0] - 1
    if sizes is None:
        n = max(rows, int(idx.max()) + 1 if idx.size else 0)
        sizes = (n, n)
    elif sizes[0] < rows:
        what = "num_vertices" if sizes[0] == sizes[1] else "num_src"
        raise GraphError(f"{what} = {sizes[0]} is less than the {rows} rows of indptr (len(indptr) - 1)")
    src = np.repeat(np.arange(rows, dtype=np.int64), np.diff(ptr))
    _check_range(idx, sizes[1], "indices", "num_vertices" if sizes[0] == sizes[1] else "num_dst")
    return src, idx, sizes[0], sizes[1]


# ------------------------------------------------------------ scipy -> COO
#
# scipy's constructors accept index arrays they never check (a decreasing
# indptr, indices past the shape, arrays of different lengths), and its
# compiled conversions (tocoo, tocsr) then read and write past their buffers.
# So nothing of scipy's runs on a matrix before its arrays are checked here:
# csr, csc, coo, dia and lil are expanded with numpy, in A.tocoo()'s order;
# bsr and dok are converted by scipy's numpy / Python code once checked.


def _coo_from_scipy(matrix: Any) -> tuple[np.ndarray, np.ndarray, int, int]:
    if not _is_scipy_sparse(matrix):
        raise GraphError(f"from_scipy needs a scipy sparse matrix or array, got {type(matrix).__name__}")
    n_rows, n_cols = _scipy_shape(matrix)
    fmt = getattr(matrix, "format", None)
    if fmt in ("csr", "csc"):
        row, col, data = _scipy_compressed(matrix, fmt, n_rows, n_cols)
    elif fmt == "coo":
        row, col, data = _scipy_attr(matrix, "row", 1), _scipy_attr(matrix, "col", 1), _scipy_data(matrix, 1)
    elif fmt == "dia":
        row, col, data = _scipy_dia(matrix, n_rows, n_cols)
    elif fmt == "lil":
        row, col, data = _scipy_lil(matrix, n_rows)
    elif fmt in ("bsr", "dok"):
        if fmt == "bsr":
            _check_bsr(matrix, n_rows, n_cols)
        try:
            coo = matrix.tocoo()
        except (ValueError, TypeError, IndexError, OverflowError, AttributeError) as exc:
            raise GraphError(f"cannot read the {fmt} matrix: {exc}") from None
        row, col, data = np.asarray(coo.row), np.asarray(coo.col), np.asarray(coo.data)
    else:
        raise GraphError(f"unknown scipy sparse format {fmt!r} of {type(matrix).__name__}")
    if not (row.shape[0] == col.shape[0] == data.shape[0]):
        raise GraphError(
            f"the {fmt} matrix's arrays disagree in length: {row.shape[0]} rows, {col.shape[0]} columns, "
            f"{data.shape[0]} values"
        )
    src = _ids(row, "row", 1)
    dst = _ids(col, "col", 1)
    keep = data != 0
    if not np.all(keep):
        src, dst = src[keep], dst[keep]
    _check_range(src, n_rows, f"the {fmt} matrix's row", "the number of rows")
    _check_range(dst, n_cols, f"the {fmt} matrix's column", "the number of columns")
    return src, dst, n_rows, n_cols


def _scipy_shape(matrix: Any) -> tuple[int, int]:
    try:
        shape = tuple(matrix.shape)
    except (TypeError, AttributeError) as exc:
        raise GraphError(f"the scipy matrix has no valid shape: {exc}") from None
    if len(shape) != 2:
        raise GraphError(f"the adjacency matrix must be 2-D (num_src x num_dst), got shape {shape}")
    n_rows, n_cols = _count(shape[0], "the matrix's rows"), _count(shape[1], "the matrix's columns")
    assert n_rows is not None and n_cols is not None, "_count returns None only for None"
    return n_rows, n_cols


def _scipy_attr(matrix: Any, name: str, ndim: int) -> np.ndarray:
    try:
        value = getattr(matrix, name)
    except (AttributeError, ValueError, TypeError) as exc:
        raise GraphError(f"the {matrix.format} matrix has no valid {name!r}: {exc}") from None
    return _ids(value, f"the {matrix.format} matrix's {name}", ndim)


def _scipy_data(matrix: Any, ndim: int) -> np.ndarray:
    data = _to_numpy(getattr(matrix, "data", None), f"the {matrix.format} matrix's data")
    if data.ndim != ndim:
        raise GraphError(f"the {matrix.format} matrix's data must be {ndim}-D, got shape {data.shape}")
    return data


def _scipy_compressed(matrix: Any, fmt: str, n_rows: int, n_cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A csr / csc matrix's (row, col, data), in storage order (A.tocoo()'s)."""
    major, minor = (n_rows, n_cols) if fmt == "csr" else (n_cols, n_rows)
    ptr = _scipy_attr(matrix, "indptr", 1)
    idx = _scipy_attr(matrix, "indices", 1)
    data = _scipy_data(matrix, 1)
    owner = f"the {fmt} matrix's "
    if ptr.shape[0] != major + 1:
        lines = "rows" if fmt == "csr" else "columns"
        raise GraphError(f"{owner}indptr has {ptr.shape[0]} entries, but {major} {lines} need {major + 1}")
    if idx.shape[0] != data.shape[0]:
        raise GraphError(f"the {fmt} matrix has {idx.shape[0]} indices but {data.shape[0]} values")
    _check_indptr(ptr, owner)
    nnz = int(ptr[-1])
    if nnz > idx.shape[0]:
        raise GraphError(f"{owner}indptr[-1] = {nnz} is past the {idx.shape[0]} stored indices")
    # entries past indptr[-1] are spare capacity: no row holds them
    idx, data = idx[:nnz], data[:nnz]
    _check_range(idx, minor, f"the {fmt} matrix's indices", "the number of " + ("columns" if fmt == "csr" else "rows"))
    lead = np.repeat(np.arange(major, dtype=np.int64), np.diff(ptr))
    return (lead, idx, data) if fmt == "csr" else (idx, lead, data)


def _scipy_dia(matrix: Any, n_rows: int, n_cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A dia matrix's (row, col, data) in row-major order (A.tocoo()'s, which goes through tocsr)."""
    offsets = _scipy_attr(matrix, "offsets", 1)
    data = _scipy_data(matrix, 2)
    if data.shape[0] != offsets.shape[0]:
        raise GraphError(f"the dia matrix has {offsets.shape[0]} offsets but {data.shape[0]} rows of diagonals")
    width = min(data.shape[1], n_cols)
    col = np.broadcast_to(np.arange(width, dtype=np.int64), (offsets.shape[0], width))
    row = col - offsets[:, None]
    inside = (row >= 0) & (row < n_rows)
    row, col, values = row[inside], col[inside], data[:, :width][inside]
    order = np.lexsort((col, row))
    return row[order], col[order], values[order]


def _scipy_lil(matrix: Any, n_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A lil matrix's (row, col, data): row by row, each row's entries as stored."""
    rows, values = getattr(matrix, "rows", None), getattr(matrix, "data", None)
    if rows is None or values is None or len(rows) != n_rows or len(values) != n_rows:
        raise GraphError(f"the lil matrix must hold {n_rows} lists of columns and of values, one per row")
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    if not np.array_equal(lengths, [len(v) for v in values]):
        raise GraphError("the lil matrix's lists of columns and of values differ in length")
    col = _ids([c for r in rows for c in r], "the lil matrix's rows", 1)
    data = _to_numpy([x for v in values for x in v], "the lil matrix's data").reshape(-1)
    return np.repeat(np.arange(n_rows, dtype=np.int64), lengths), col, data


def _check_bsr(matrix: Any, n_rows: int, n_cols: int) -> None:
    """A bsr matrix's blocks, offsets and block columns, checked before scipy's tocoo reads them."""
    try:
        r, c = (int(b) for b in matrix.blocksize)
    except (TypeError, ValueError, AttributeError) as exc:
        raise GraphError(f"the bsr matrix has no valid blocksize: {exc}") from None
    if r < 1 or c < 1 or n_rows % r or n_cols % c:
        raise GraphError(f"the bsr matrix's blocksize {(r, c)} does not divide its shape {(n_rows, n_cols)}")
    ptr = _scipy_attr(matrix, "indptr", 1)
    idx = _scipy_attr(matrix, "indices", 1)
    data = _scipy_data(matrix, 3)
    if ptr.shape[0] != n_rows // r + 1:
        raise GraphError(f"the bsr matrix's indptr has {ptr.shape[0]} entries, its block rows need {n_rows // r + 1}")
    _check_indptr(ptr, "the bsr matrix's ", idx.shape[0])
    if data.shape != (idx.shape[0], r, c):
        raise GraphError(f"the bsr matrix's data has shape {data.shape}, expected {(idx.shape[0], r, c)}")
    _check_range(idx, n_cols // c, "the bsr matrix's indices", "the number of block columns")
