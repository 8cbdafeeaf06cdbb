"""Per-graph preprocessing plans: work blocks, vertex orders, edge orders, partitions.

A schedule picked at compile time (``partition``, ``hilbert``, neighbour
grouping, ...) needs data that depends only on the graph. Each plan is
computed once per graph, by vectorised numpy, and cached in ``graph.plans``
under a key holding its name and parameters; the returned arrays are int64,
C-contiguous and read-only, so a kernel can take them without a copy.

    bounds = balanced_blocks(graph, block_count_for(graph, threads))
    src, dst, eid = hilbert_edge_order(graph)

A kernel call takes every plan its compiled kernel reads in one step:
``build(graph, spec)`` with a ``PlanSpec`` (what the kernel's ABI record
asks for, and the thread count the blocks are cut for) returns the graph
arguments by ABI name, assembled once per graph and spec.

Origins: balanced destination blocks and neighbour grouping split skewed
work (Huang et al.; Seastar sorts by degree); MinHash vertex order is Huang
et al.'s locality-aware scheduling, reverse Cuthill-McKee order the same idea
for graphs whose neighbourhoods overlap without being equal (meshes); the Hilbert edge order and 1-D source
partitioning are FeatGraph's.
"""

from __future__ import annotations

import functools
import glob
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import numpy as np

from gnnc.errors import ArgumentError
from gnnc.graph import group_edges
from gnnc.ir import abi

__all__ = [
    "Blocks",
    "Hybrid",
    "PlanSpec",
    "balanced_blocks",
    "block_count_for",
    "build",
    "degree_order",
    "default_partition_count",
    "edges_in_long_walks",
    "RelationPairs",
    "pair_blocks",
    "pair_graph",
    "pair_tiles",
    "tile_blocks",
    "relation_degrees",
    "relation_edges",
    "relation_edges_by_end",
    "relation_pair_count",
    "relation_pairs",
    "gather_reuse_share",
    "group_offsets_by_dst",
    "group_blocks",
    "grouped_blocks",
    "split_neighbor_groups",
    "hilbert_edge_order",
    "last_level_cache_bytes",
    "locality_order",
    "rcm_order",
    "neighbor_groups",
    "ordered_in_csr",
    "walk_sources",
    "source_partitions",
    "hybrid_plan",
    "hybrid_sources",
]

#: A block below this much work (in-edges + vertices) is not worth a task of its own.
MIN_BLOCK_WORK = 1024
#: Blocks per thread for dynamic scheduling: enough that a late heavy block evens out.
BLOCKS_PER_THREAD = 8
_FALLBACK_LLC_BYTES = 32 << 20


# ----------------------------------------------------------------- helpers


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    arr.flags.writeable = False
    return arr


def _cached(graph: Any, key: tuple, compute: Callable[[], Any]) -> Any:
    plan = graph.plans.get(key)
    if plan is None:
        plan = compute()
        graph.plans[key] = plan
    return plan


def _positive(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ArgumentError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _prefix(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


#: Up to this many blocks, `_split_prefix` cuts them in Python.
_FEW_BLOCKS = 16
#: Up to this many destinations, few blocks are cut on the prefix array too: making it costs less
#: than `_split_work`'s bisection in Python (16 blocks of 2.9K destinations, a mini-batch block:
#: 6.6 against 27.5 us; of 32K, 14.7 against 34.7; of 100K, 79 against 38).
_PREFIX_MAX_ITEMS = 1 << 15


def _split_work(indptr: np.ndarray, n: int) -> np.ndarray:
    """`_split_prefix` of the prefix `indptr[j] + j` (in-degree + 1 per destination) for few
    blocks of many destinations, by bisection in Python: no array of the prefix is made."""
    items = indptr.shape[0] - 1
    total = int(indptr[-1]) + items
    found = []
    for i in range(1, n):
        target = (i * total + n - 1) // n
        lo, hi = 0, items + 1  # the first j with indptr[j] + j >= target
        while lo < hi:
            mid = (lo + hi) // 2
            if int(indptr[mid]) + mid < target:
                lo = mid + 1
            else:
                hi = mid
        found.append(lo)
    b = [0, *found, items]
    return np.array(
        [0, *(b[j] - 1 if b[j] == b[j + 1] and b[j] - b[j - 1] >= 2 else b[j] for j in range(1, n)), items],
        dtype=np.int64,
    )


def _split_prefix(prefix: np.ndarray, n: int) -> np.ndarray:
    """n + 1 boundaries splitting items with work prefix ``prefix`` into n contiguous runs.

    Boundary i is the first item whose work starts at or after i * T / n, so a
    block holds the items starting in its share of the work and weighs less
    than T / n plus its last item. When that last item is heavy and the next
    block came out empty (the item swallowed its share), the boundary moves
    in front of the item: it gets a block of its own and every other block
    weighs under 2 T / n.
    """
    items = prefix.shape[0] - 1
    total = int(prefix[-1])
    if n <= _FEW_BLOCKS:  # the same rule in Python: a dozen numpy calls cost more for few blocks
        found = prefix.searchsorted([(i * total + n - 1) // n for i in range(1, n)], side="left").tolist()
        b = [0, *found, items]
        return np.array(
            [0, *(b[j] - 1 if b[j] == b[j + 1] and b[j] - b[j - 1] >= 2 else b[j] for j in range(1, n)), items],
            dtype=np.int64,
        )
    bounds = np.empty(n + 1, dtype=np.int64)
    bounds[0], bounds[n] = 0, items
    if n > 1:
        i = np.arange(1, n, dtype=np.int64)
        # ceil(i * T / n) in integers: prefix[j] >= i T / n  <=>  prefix[j] >= ceil(i T / n)
        targets = (i * total + n - 1) // n
        bounds[1:n] = np.searchsorted(prefix, targets, side="left")
        lo, mid, hi = bounds[:-2], bounds[1:-1], bounds[2:]
        shift = (mid == hi) & (mid - lo >= 2)
        # the conditions read only the unshifted array, and a shifted boundary's
        # neighbours never qualify (their blocks are empty / a single item)
        bounds[1:n] = np.where(shift, mid - 1, mid)
    return bounds


# ------------------------------------------------------------- work blocks


#: 0, 1, 2, ...: the identity orders of every graph are read-only views of it (grown as needed).
_IDENTITY = _readonly(np.arange(1 << 16, dtype=np.int64))


def _identity(n: int) -> np.ndarray:
    global _IDENTITY
    if n > _IDENTITY.shape[0]:
        _IDENTITY = _readonly(np.arange(max(n, 2 * _IDENTITY.shape[0]), dtype=np.int64))
    return _IDENTITY[:n]


def destination_order(graph: Any, kind: str) -> np.ndarray:
    """The destination processed at each position: identity, degree, locality or rcm order."""
    if kind == "identity":
        return _cached(graph, ("identity_order",), lambda: _identity(graph.num_vertices))
    if kind == "degree":
        return degree_order(graph)
    if kind == "locality":
        return locality_order(graph)
    if kind == "rcm":
        return rcm_order(graph)
    raise ArgumentError(f"unknown destination order {kind!r}")


def ordered_in_csr(graph: Any, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The in-CSR laid out in the processing order of `kind`: (indptr by position, src, eid).

    The destination at position ``i`` of ``destination_order(graph, kind)``
    finds its in-edges at ``[indptr[i], indptr[i + 1])`` of ``src`` / ``eid``,
    in the order the in-CSR has them. A kernel compiled for a destination
    order walks these instead of the in-CSR, so that its index streams stay
    sequential and `prefetch D` looks D edges ahead in the order the edges are
    walked (on the in-CSR, a reordered sweep jumps between rows, every row's
    indices are a cache miss, and the prefetches land on edges of
    destinations that run much later).
    """

    def compute() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        indptr, where = _walk_positions(graph, destination_order(graph, kind))
        return _readonly(indptr), _readonly(graph.in_src[where]), _readonly(graph.in_eid[where])

    return _cached(graph, ("ordered_in_csr", kind), compute)


def _walk_positions(graph: Any, order: np.ndarray, count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For destinations walked in `order`: (indptr by position, the in-CSR position of each edge
    walked). With `count`, only the destinations whose edges fill the first `count` of the walk
    (the positions may run past it, to the end of the last one's edges)."""
    starts = graph.in_indptr[:-1][order]
    deg = graph.in_indptr[1:][order] - starts
    indptr = np.zeros(order.shape[0] + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    if count is not None:
        m = int(np.searchsorted(indptr[1:], count)) + 1
        starts, deg, indptr = starts[:m], deg[:m], indptr[: m + 1]
    # the edge at new position j is starts[i] + (j - indptr[i]) for its destination's position i
    where = np.repeat(starts - indptr[:-1], deg) + np.arange(indptr[-1], dtype=np.int64)
    return indptr, where


def edge_blocks(graph: Any, n_blocks: int) -> np.ndarray:
    """``n_blocks + 1`` boundaries splitting the E positions of an edge list evenly."""
    n = max(1, int(n_blocks)) if graph.num_edges else 0
    return _cached(
        graph,
        ("edge_blocks", n),
        lambda: _readonly(np.linspace(0, graph.num_edges, n + 1).round().astype(np.int64)),
    )


def balanced_blocks(graph: Any, n_blocks: int, order: np.ndarray | None = None) -> np.ndarray:
    """``n_blocks + 1`` destination boundaries splitting [0, V) into blocks of about equal work.

    With ``order`` (a permutation of the destinations), the boundaries split
    positions in that order: block ``i`` holds ``order[b[i]:b[i+1]]``.

    A destination's work is its in-degree + 1 (an isolated vertex still costs
    a write). Block ``i`` is ``[b[i], b[i+1])``; blocks may be empty. No
    block of two or more destinations reaches twice the mean work T / n, so
    a destination of at least that much work always gets a block of its own
    (a lighter hub may share a block that stays under 2 T / n).
    """
    if isinstance(n_blocks, (bool, np.bool_)) or not isinstance(n_blocks, (int, np.integer)) or n_blocks < 0:
        raise ArgumentError(f"n_blocks must be a non-negative integer, got {n_blocks!r}")
    n = int(n_blocks)
    if n == 0 and graph.num_vertices:
        raise ArgumentError(f"a graph with {graph.num_vertices} vertices needs n_blocks >= 1")
    if n == 1 and graph.num_vertices:
        # a small graph's, a single thread's: not cached on the graph (a mini-batch block is seen once)
        return _one_block(graph.num_vertices)

    def compute() -> np.ndarray:
        v = graph.num_vertices
        if v == 0:
            return _readonly(np.zeros(n + 1, dtype=np.int64))
        if order is not None and not _is_identity(graph, order):
            work = np.diff(graph.in_indptr)[order] + 1
            prefix = np.concatenate([[0], np.cumsum(work)]).astype(np.int64)
            return _readonly(_split_prefix(prefix, n))
        split = group_edges.split_work(graph.in_indptr, n)
        if split is not None:
            return _readonly(split)
        if n <= _FEW_BLOCKS and v > _PREFIX_MAX_ITEMS:
            return _readonly(_split_work(graph.in_indptr, n))
        # prefix of (deg + 1) is in_indptr + arange: no pass over the degrees needed
        prefix = graph.in_indptr + _identity(v + 1)
        return _readonly(_split_prefix(prefix, n))

    key = ("balanced_blocks", n) if order is None or _is_identity(graph, order) else ("balanced_blocks", n, id(order))
    return _cached(graph, key, compute)


@functools.lru_cache(maxsize=4096)
def _one_block(v: int) -> np.ndarray:
    """[0, v]: one block of every destination, read-only and shared by the graphs of v destinations
    (mini-batch blocks of a seed batch's size come again every batch)."""
    return _readonly(np.array([0, v]))


def source_blocks(graph: Any, threads: int) -> np.ndarray:
    """Boundaries of even blocks of the ``num_src`` source rows, for a kernel's source sweep.

    A source sweep computes a value per source row (``x[u] @ W`` hoisted
    out of the in-edge loops); every row costs the same, so the blocks are
    even, as many as ``block_count_for`` would give that many rows.
    """
    threads = _positive(threads, "threads")
    rows = graph.num_src
    n = max(1, min(rows, BLOCKS_PER_THREAD * threads, -(-(rows * 8) // MIN_BLOCK_WORK))) if rows else 0
    return _cached(
        graph,
        ("source_blocks", n),
        lambda: _readonly(np.linspace(0, rows, n + 1).round().astype(np.int64)),
    )


def _is_identity(graph: Any, order: np.ndarray) -> bool:
    return order is graph.plans.get(("identity_order",))


def block_count_for(graph: Any, threads: int, min_work: int = MIN_BLOCK_WORK) -> int:
    """How many balanced blocks to hand ``threads`` threads that take blocks dynamically.

    ``BLOCKS_PER_THREAD`` per thread, fewer when a block would hold less than
    ``min_work`` (in-edges + vertices), never more than V; 1 for a small
    non-empty graph or a single thread (which walks the blocks in order: one
    is the same walk, without a split to compute per graph), 0 for V == 0.
    """
    threads = _positive(threads, "threads")
    min_work = _positive(min_work, "min_work")
    v = graph.num_vertices
    if v == 0:
        return 0
    if threads == 1:
        return 1
    work = graph.num_edges + v
    return max(1, min(v, BLOCKS_PER_THREAD * threads, -(-work // min_work)))


def edges_in_long_walks(graph: Any, min_degree: int) -> float:
    """The fraction of in-edges whose destination has at least `min_degree` of them
    (1.0 for a graph without edges): how much of a walk fills whole chunks of lanes."""

    def compute() -> float:
        if graph.num_edges == 0:
            return 1.0
        deg = np.diff(graph.in_indptr)
        return float(deg[deg >= min_degree].sum() / graph.num_edges)

    return _cached(graph, ("edges_in_long_walks", min_degree), compute)


#: gather_reuse_share looks at this many in-edges in the order's walk, from the start.
REUSE_SAMPLE_EDGES = 1 << 21


def gather_reuse_share(graph: Any, kind: str, window: int) -> float:
    """The share of in-edges whose source row was gathered at most `window` edges
    before, when destinations run in destination order `kind`: the gathers a
    cache holding `window` rows serves (0.0 for a graph without edges).

    Counted over the first REUSE_SAMPLE_EDGES edges of the walk: reuse at a
    distance of a cache is local, and a heuristic asks this on large graphs.
    The distances are computed once per order; each window is a search.
    """

    def gaps() -> np.ndarray:
        seq = walk_sources(graph, kind, REUSE_SAMPLE_EDGES)
        at = np.argsort(seq, kind="stable")
        same = seq[at[1:]] == seq[at[:-1]]
        return _readonly(np.sort((at[1:] - at[:-1])[same]))

    if graph.num_edges == 0:
        return 0.0
    distances = _cached(graph, ("gather_reuse_gaps", kind), gaps)
    sampled = min(graph.num_edges, REUSE_SAMPLE_EDGES)
    return float(np.searchsorted(distances, window, side="right") / sampled)


def walk_sources(graph: Any, kind: str, count: int) -> np.ndarray:
    """The sources of the first `count` in-edges a walk in destination order `kind` gathers:
    ``ordered_in_csr(graph, kind)[1][:count]``, without laying out the rest. A decision that
    samples the walk (`gather_reuse_share`) keeps no E-sized plan (at 64M edges the ordered
    in-CSR and the in_eid it needs are 1.5 GB) for an order it may not pick."""
    laid_out = graph.plans.get(("ordered_in_csr", kind))
    if kind == "identity" or laid_out is not None:
        return np.asarray((graph.in_src if laid_out is None else laid_out[1])[:count])
    _, where = _walk_positions(graph, destination_order(graph, kind), count)
    return graph.in_src[where[:count]]


# ---------------------------------------------------------- vertex orders


def degree_order(graph: Any) -> np.ndarray:
    """Destinations by in-degree, highest first, ties by id (Seastar's degree sorting)."""

    def compute() -> np.ndarray:
        deg = np.diff(graph.in_indptr)
        return _readonly(np.argsort(-deg, kind="stable"))

    return _cached(graph, ("degree_order",), compute)


def rcm_order(graph: Any) -> np.ndarray:
    """Destinations in reverse Cuthill-McKee order of the undirected graph.

    Consecutive destinations are neighbours, or neighbours of neighbours, so
    the source rows one gathers were mostly gathered a few destinations
    before and are still in the cache; the caller's numbering is kept (the
    kernel writes each row where it belongs). A graph whose numbering
    scatters neighbours has locality to find (docs/design/locality.md);
    pair the order with `stream outputs`, since rows are then written out
    of order. On a bipartite
    graph, sources and destinations are the two sides of one undirected
    graph, and the destinations keep their order in its RCM order.
    """

    def compute() -> np.ndarray:
        import scipy.sparse as sp
        from scipy.sparse.csgraph import reverse_cuthill_mckee

        n_src, n_dst = graph.num_src, graph.num_dst
        if n_dst == 0:
            return _readonly(np.zeros(0, dtype=np.int64))
        if not graph.bipartite:
            from gnnc.graph.reorder import rcm_vertex_order  # the order graph.reordered("rcm") relabels by

            # a graph and its reversed graph are one undirected graph: either's order is one
            # of its RCM orders (scipy's differs in ties), and the second costs nothing (at
            # 64M edges one takes 12-15 s and a 1.5 GB transient)
            twin = getattr(graph, "_reversed", None)
            kept = twin.plans.get(("rcm_order",)) if twin is not None else None
            return kept if kept is not None else _readonly(rcm_vertex_order(graph))
        indptr, src = graph.in_indptr, graph.in_src
        # destinations are nodes n_src .. n_src + n_dst - 1 of one graph with the sources
        dst = np.repeat(np.arange(n_dst, dtype=np.int64), np.diff(indptr)) + n_src
        n = n_src + n_dst
        rows = np.concatenate([src, dst])
        cols = np.concatenate([dst, src])
        a = sp.csr_matrix((np.ones(rows.shape[0], dtype=np.int32), (rows, cols)), shape=(n, n))
        order = reverse_cuthill_mckee(a, symmetric_mode=True).astype(np.int64)
        return _readonly(order[order >= n_src] - n_src)

    return _cached(graph, ("rcm_order",), compute)


def locality_order(graph: Any, num_hashes: int = 4, seed: int = 0) -> np.ndarray:
    """Destinations ordered so those with similar in-neighbour sets are adjacent.

    Huang et al.'s locality-aware scheduling: a MinHash signature of each
    destination's in-neighbour set (``num_hashes`` multiply-shift hashes, the
    minimum over the neighbours by ``np.minimum.reduceat`` on the in-CSR),
    then a lexicographic sort of the signatures, first hash most significant:
    destinations with equal signatures (equal sets, or similar ones with
    probability their Jaccard similarity per hash) run together, and share
    the source rows they gather. Destinations without in-edges come last, by
    id. Deterministic given ``seed``.
    """
    num_hashes = _positive(num_hashes, "num_hashes")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ArgumentError(f"seed must be a non-negative integer, got {seed!r}")
    seed = int(seed)

    def compute() -> np.ndarray:
        indptr = graph.in_indptr
        deg = np.diff(indptr)
        has_in = np.flatnonzero(deg)
        isolated = np.flatnonzero(deg == 0)
        if has_in.size == 0:
            return _readonly(isolated)
        rng = np.random.default_rng(seed)
        a = rng.integers(0, 2**64, num_hashes, dtype=np.uint64, endpoint=False) | np.uint64(1)
        b = rng.integers(0, 2**64, num_hashes, dtype=np.uint64, endpoint=False)
        # multiply-shift hashing, wrapping mod 2**64; the top 32 bits are the hash
        ids = np.arange(graph.num_src, dtype=np.uint64)[:, None]  # in-neighbours are sources
        vertex_hash = ((ids * a[None, :] + b[None, :]) >> np.uint64(32)).astype(np.uint32)
        # non-empty rows have strictly increasing starts, so reduceat's segments
        # are exactly their in-edge ranges (empty rows in between add nothing)
        sig = np.minimum.reduceat(vertex_hash[graph.in_src], indptr[has_in], axis=0)
        # pack hash pairs into uint64 keys: fewer, wider sort passes
        if num_hashes % 2:
            sig = np.concatenate([sig, np.zeros((sig.shape[0], 1), dtype=np.uint32)], axis=1)
        sig = sig.astype(np.uint64)
        keys = [(sig[:, j] << np.uint64(32)) | sig[:, j + 1] for j in range(0, sig.shape[1], 2)]
        order = np.lexsort(keys[::-1])  # lexsort's last key is the primary one
        return _readonly(np.concatenate([has_in[order], isolated]))

    return _cached(graph, ("locality_order", num_hashes, seed), compute)


# -------------------------------------------------------------- edge order

# The Hilbert index of a point is read b bits of x and y at a time through a
# table. Wikipedia's xy2d applies, after each bit level, one of four
# transforms to the remaining low bits: identity, swap, complement both, or
# both. They form the Klein four-group, so the transform so far is a state
# (complement bit << 1 | swap bit) and composing is XOR. The table maps
# (state, b bits of x, b bits of y) to (2b digits of d, next state).
_HILBERT_BITS = 4


@functools.cache
def _hilbert_table(bits: int) -> tuple[np.ndarray, np.ndarray]:
    entries = np.arange(4 << (2 * bits), dtype=np.int64)
    state = entries >> (2 * bits)
    xs = (entries >> bits) & ((1 << bits) - 1)
    ys = entries & ((1 << bits) - 1)
    digits = np.zeros_like(entries)
    for level in range(bits - 1, -1, -1):
        rx = (xs >> level) & 1
        ry = (ys >> level) & 1
        # the state's transform, applied to this level's raw bits
        comp, swap = state >> 1, state & 1
        rx, ry = rx ^ comp, ry ^ comp
        rx, ry = np.where(swap == 1, ry, rx), np.where(swap == 1, rx, ry)
        digits = (digits << 2) | ((3 * rx) ^ ry)
        # xy2d's rot(): ry == 0 swaps, and also complements when rx == 1
        step = np.where(ry == 0, 1 | (rx << 1), 0)
        state = state ^ step
    return digits, state


def _hilbert_index(x: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    """The xy2d index of each point on the 2**k x 2**k Hilbert curve (vectorised)."""
    bits = _HILBERT_BITS
    digits, next_state = _hilbert_table(bits)
    chunks = -(-k // bits)
    # padding with leading zero levels swaps x and y once per level (xy2d's
    # rot() for rx = ry = 0) and adds 0 to d: start in that state
    state = np.full(x.shape, (chunks * bits - k) & 1, dtype=np.int64)
    d = np.zeros(x.shape, dtype=np.int64)
    mask = (1 << bits) - 1
    for chunk in range(chunks - 1, -1, -1):
        shift = chunk * bits
        entry = (state << (2 * bits)) | (((x >> shift) & mask) << bits) | ((y >> shift) & mask)
        d = (d << (2 * bits)) | digits[entry]
        state = next_state[entry]
    return d


def hilbert_edge_order(graph: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every edge as ``(src, dst, eid)``, ordered along a Hilbert curve over the (src, dst) plane.

    FeatGraph's traversal for edge-wise kernels: consecutive edges share
    source and destination rows in cache in both coordinates. The curve
    covers a 2**k x 2**k grid, k = ceil(log2(max(V, 2))); edges at the same
    point keep increasing edge id.
    """

    def compute() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        e = graph.num_edges
        k = max(1, (max(graph.num_src, graph.num_dst, 2) - 1).bit_length())
        d = _hilbert_index(graph.src, graph.dst, k)
        bits = max(1, e.bit_length())
        if 2 * k + bits <= 62:
            # (d, edge id) packed are unique: a plain sort is stable and faster
            packed = (d << bits) | np.arange(e, dtype=np.int64)
            packed.sort()
            order = packed & ((1 << bits) - 1)
        else:  # pragma: no cover - needs about 2**62 grid cells x edges
            order = np.argsort(d, kind="stable")
        return _readonly(graph.src[order]), _readonly(graph.dst[order]), _readonly(order)

    return _cached(graph, ("hilbert_edge_order",), compute)


# -------------------------------------------------------- neighbour groups


def _groups(graph: Any, group_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    group_size = _positive(group_size, "group_size")

    def compute() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        v = graph.num_vertices
        indptr = graph.in_indptr
        per_dst = (np.diff(indptr) + (group_size - 1)) // group_size
        offsets = _prefix(per_dst)
        n_groups = int(offsets[-1])
        group_dst = np.repeat(np.arange(v, dtype=np.int64), per_dst)
        start = np.empty(n_groups + 1, dtype=np.int64)
        rank = np.arange(n_groups, dtype=np.int64) - offsets[group_dst]
        start[:n_groups] = indptr[group_dst] + rank * group_size
        start[n_groups] = graph.num_edges
        return _readonly(group_dst), _readonly(start), _readonly(offsets)

    return _cached(graph, ("neighbor_groups", group_size), compute)


def neighbor_groups(graph: Any, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Each destination's in-edges cut into groups of at most ``group_size`` (Huang et al.).

    Returns ``(group_dst, group_start)``: group ``g`` is in-CSR positions
    ``group_start[g] .. group_start[g+1]`` of destination ``group_dst[g]``
    (ascending); ``group_start[-1] == E``. A destination with no in-edges
    has no group. Long rows become several tasks, merged afterwards.
    """
    group_dst, group_start, _ = _groups(graph, group_size)
    return group_dst, group_start


def group_offsets_by_dst(graph: Any, group_size: int) -> np.ndarray:
    """V + 1 offsets: destination v's groups are ``offsets[v] .. offsets[v+1]`` (for the merge)."""
    return _groups(graph, group_size)[2]


def split_neighbor_groups(graph: Any, group_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The neighbour groups of only the destinations with more than ``group_size`` in-edges.

    What a `group neighbors G` kernel takes: a destination of at most G
    in-edges is one group, and is cheaper summed directly than through a
    partial row and a merge. Returns ``(group_dst, group_bounds, offsets)``
    over the n groups of split destinations, in ``neighbor_groups`` order:
    group g is in-CSR positions ``group_bounds[2g] .. group_bounds[2g+1]``
    (interleaved, so a kernel walks group g as "row 2g" of a CSR), and
    destination v's groups are ``offsets[v] .. offsets[v+1]`` (empty when v
    is not split).
    """
    group_size = _positive(group_size, "group_size")

    def compute() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        group_dst, start, offsets = _groups(graph, group_size)
        per_dst = np.diff(offsets)
        split_per_dst = np.where(per_dst > 1, per_dst, 0)
        keep = np.repeat(per_dst > 1, per_dst)
        kept = np.flatnonzero(keep)
        bounds = np.empty(2 * kept.shape[0], dtype=np.int64)
        bounds[0::2] = start[kept]
        bounds[1::2] = start[kept + 1]
        return _readonly(group_dst[kept]), _readonly(bounds), _readonly(_prefix(split_per_dst))

    return _cached(graph, ("split_neighbor_groups", group_size), compute)


def group_blocks(graph: Any, group_size: int, threads: int) -> np.ndarray:
    """Boundaries of blocks of split neighbour groups, for the group sweep's threads.

    Every group but a destination's last holds exactly G edges, so equal
    group counts are about equal work: ``BLOCKS_PER_THREAD`` blocks per
    thread, fewer when a block would hold under ``MIN_BLOCK_WORK`` edges;
    no block (a single boundary, 0) when no destination is split.
    """
    group_size = _positive(group_size, "group_size")
    threads = _positive(threads, "threads")
    group_dst, bounds, _ = split_neighbor_groups(graph, group_size)
    n_groups = group_dst.shape[0]
    edges = int((bounds[1::2] - bounds[0::2]).sum()) if n_groups else 0
    n = 0 if n_groups == 0 else max(1, min(n_groups, BLOCKS_PER_THREAD * threads, -(-edges // MIN_BLOCK_WORK)))
    return _cached(
        graph,
        ("group_blocks", group_size, n),
        lambda: _readonly(np.linspace(0, n_groups, n + 1).round().astype(np.int64)),
    )


def grouped_blocks(graph: Any, group_size: int, n_blocks: int) -> np.ndarray:
    """Destination blocks for the merge sweep of a `group neighbors G` kernel.

    As ``balanced_blocks``, but a split destination weighs its group count
    (it merges partial rows, one per group) instead of its in-degree, so
    the hub that would have had a block of its own shares one.
    """
    group_size = _positive(group_size, "group_size")
    n = _positive(n_blocks, "n_blocks") if graph.num_vertices else 0

    def compute() -> np.ndarray:
        if graph.num_vertices == 0:
            return _readonly(np.zeros(n + 1, dtype=np.int64))
        deg = np.diff(graph.in_indptr)
        work = np.where(deg > group_size, -(-deg // group_size), deg) + 1
        return _readonly(_split_prefix(_prefix(work), n))

    return _cached(graph, ("grouped_blocks", group_size, n), compute)


# ------------------------------------------------------ source partitions


def source_partitions(
    graph: Any, k: int, eids: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """FeatGraph's 1-D source partitioning into ``k`` contiguous source ranges.

    Returns ``(bounds, part_indptr, part_src, part_eid)``. Partition p holds
    sources ``bounds[p] .. bounds[p+1]``, ranges of about equal work
    (out-degree + 1). Segment p of ``part_indptr`` (``k * (V + 1)`` entries)
    is an in-CSR by destination of only the edges with a source in p:
    destination v's are positions ``part_indptr[p*(V+1)+v] ..
    part_indptr[p*(V+1)+v+1]`` of ``part_src`` / ``part_eid``, in increasing
    edge id. A kernel sweeps the partitions one after the other, so the
    source rows it gathers stay in cache.

    ``eids=False`` (for a kernel that reads no edge ids) returns None for
    ``part_eid`` and neither makes nor keeps it: a graph's edge ids are as
    large as its sources. Asked for later, they are made then.
    """
    k = _positive(k, "k")
    key, eid_key = ("source_partitions", k), ("source_partition_eids", k)
    plan, part_eid = graph.plans.get(key), graph.plans.get(eid_key)
    if plan is not None and (part_eid is not None or not eids):
        return (*plan, part_eid if eids else None)
    # sources are split (num_src of them); each partition's in-CSR is by destination (num_dst)
    v, e, n_src = graph.num_dst, graph.num_edges, graph.num_src
    out_deg = np.bincount(graph.in_src, minlength=n_src)  # the sources by in-CSR position: the same counts
    bounds = _split_prefix(_prefix(out_deg) + np.arange(n_src + 1, dtype=np.int64), k)
    del out_deg
    if e and (eids or plan is None):
        # natively: two passes over the in-CSR, no sort and no temporaries (R-MAT 22's 64M
        # edges: 1 GiB of them and seconds of numpy's sort)
        in_eid = None if not eids or graph.edges_sorted else graph.in_eid
        found = group_edges.partition(graph.in_indptr, graph.in_src, in_eid, bounds, eids)
        if found is not None:
            part_indptr, part_src, found_eid = found
            if eids:
                assert found_eid is not None
                part_eid = graph.plans[eid_key] = _readonly(found_eid)
            if plan is None:
                plan = graph.plans[key] = (_readonly(bounds), _readonly(part_indptr), _readonly(part_src))
            return (*plan, part_eid if eids else None)
    # in-CSR order is (dst, eid); a stable sort by partition alone keeps it
    # within each partition. Small integer keys sort by radix.
    narrow = np.uint8 if k <= 256 else np.uint16 if k <= 65536 else np.int64
    part_of = np.repeat(np.arange(k, dtype=narrow), np.diff(bounds))
    pos_part = part_of[graph.in_src] if e else np.zeros(0, dtype=narrow)
    del part_of
    order = np.argsort(pos_part, kind="stable")
    if eids:
        part_eid = graph.plans[eid_key] = _readonly(graph.in_eid[order])
    if plan is None:
        part_src = _readonly(graph.in_src[order])
        # part_indptr[j] counts the edges whose key p * (V + 1) + dst is below j;
        # the keys are sorted, so one repeat writes it without a k * V temporary
        keys = np.empty(e + 2, dtype=np.int64)
        keys[0], keys[-1] = -1, k * (v + 1) - 1
        np.multiply(pos_part[order], v + 1, out=keys[1:-1], dtype=np.int64)
        del pos_part
        keys[1:-1] += np.repeat(np.arange(v, dtype=np.int64), np.diff(graph.in_indptr))[order]
        del order
        part_indptr = np.repeat(np.arange(e + 1, dtype=np.int64), np.diff(keys))
        plan = graph.plans[key] = (_readonly(bounds), _readonly(part_indptr), part_src)
    return (*plan, part_eid if eids else None)


@functools.lru_cache(maxsize=1)
def last_level_cache_bytes() -> int:
    """The last-level (L3) cache size of cpu0 from sysfs; 32 MiB when unknown."""
    for index in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(os.path.join(index, "level")) as f:
                if f.read().strip() != "3":
                    continue
            with open(os.path.join(index, "size")) as f:
                text = f.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text[:-1] if text[-1:] in "KMG" else text
        if digits.isdigit() and int(digits) > 0:
            return int(digits) * scale
    return _FALLBACK_LLC_BYTES


def default_partition_count(graph: Any, feature_bytes_per_vertex: int, llc_bytes: int | None = None) -> int:
    """K so that one partition's source feature rows fill about half the last-level cache.

    The other half is left to the destination rows being written and the
    CSR being streamed. At least 1, at most max(V, 1).
    """
    if llc_bytes is None:
        llc_bytes = last_level_cache_bytes()
    row = _positive(feature_bytes_per_vertex, "feature_bytes_per_vertex")
    budget = max(1, _positive(llc_bytes, "llc_bytes") // 2)
    v = graph.num_src  # the rows partitions split are the sources
    return max(1, min(max(v, 1), -(-(v * row) // budget)))


# ------------------------------------------------ hybrid partitioning (cuda)


def hybrid_sources(graph: Any, k: int, row_bytes: int, budget_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """FeatGraph's hybrid partitioning for `map ... hybrid k`: (hot, slot).

    The sources are ranked by out-degree (ties by id); the first k' get a
    slot, k' = k capped by the sources with out-edges and by what fits in
    `budget_bytes` at `row_bytes` per source. `hot` is [k', source of slot 0,
    ..., source of slot k' - 1]; `slot[u]` is u's slot, -1 for a source read
    from global memory. A row wider than the budget is an ArgumentError.
    """
    k = _positive(k, "hybrid source count")
    if row_bytes > budget_bytes:
        raise ArgumentError(
            f"one source's rows take {row_bytes} bytes, more than the {budget_bytes // 1024} KB of "
            "shared memory a block may use; use the mapping without hybrid (or narrower rows)"
        )

    def compute() -> tuple[np.ndarray, np.ndarray]:
        v = graph.num_src  # slots are per source (a bipartite graph has its own count)
        out_degree = np.bincount(np.asarray(graph.in_src, dtype=np.int64), minlength=v)[:v]
        fits = budget_bytes // row_bytes if row_bytes else k
        count = min(k, fits, int(np.count_nonzero(out_degree)))
        ranked = np.argsort(-out_degree, kind="stable")[:count]
        slot = np.full(v, -1, dtype=np.int64)
        slot[ranked] = np.arange(count, dtype=np.int64)
        # an empty graph still needs a slot table the kernel may point at
        return _readonly(np.concatenate([[count], ranked])), _readonly(slot if v else np.full(1, -1))

    return _cached(graph, ("hybrid_sources", k, row_bytes, budget_bytes), compute)


def hybrid_plan(
    graph: Any, grid: abi.Grid, dims: dict[str, int], itemsize: int
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(hot, slot, shared bytes per launch) of a `map ... hybrid K` grid record: the
    sources staged in shared memory (hybrid_sources) and what each launch needs."""
    assert grid.hybrid is not None, "a grid without hybrid staging has no hybrid plan"
    hybrid = Hybrid(grid.mapping, grid.hybrid, tuple(abi.hybrid_row_elements(grid, dims)), itemsize)
    hot, slot = _hybrid_sources(graph, hybrid)
    return hot, slot, hybrid.shared_bytes(hot)


def _hybrid_sources(graph: Any, hybrid: Hybrid) -> tuple[np.ndarray, np.ndarray]:
    widest = max(hybrid.rows, default=0) * hybrid.itemsize
    try:
        return hybrid_sources(graph, hybrid.sources, widest, abi.SHARED_MEMORY_BYTES)
    except ArgumentError as exc:
        raise ArgumentError(f"map {hybrid.mapping} hybrid {hybrid.sources}: {exc}") from None


# ---------------------------------------------------------- relation types


@dataclass(frozen=True)
class RelationPairs:
    """The distinct (vertex, relation) pairs of a graph's edges at one side, grouped by relation.

    Pair ``p`` is vertex ``vertex[p]`` (the source of its edges for side
    ``"src"``, the destination for ``"dst"``) with relation ``rel[p]``; it
    stands for ``count[p]`` edges. Pairs are sorted by relation, then vertex,
    so relation ``r``'s are the contiguous run ``offsets[r] .. offsets[r + 1]``
    (a relation's transform is one dense product over them: Hector's compact
    materialisation, docs/design/heterogeneous.md). ``edge_pair[e]`` is the
    pair of edge ``e`` (by edge id). All int64 and read-only.
    """

    vertex: np.ndarray
    rel: np.ndarray
    count: np.ndarray
    offsets: np.ndarray
    edge_pair: np.ndarray

    @property
    def num_pairs(self) -> int:
        return int(self.vertex.shape[0])


def _require_relations(graph: Any) -> None:
    if graph.edge_type is None:
        raise ArgumentError("this plan needs a graph with relation types (gnnc.Graph(..., edge_type=...))")


def _pair_keys(graph: Any, side: str) -> tuple[np.ndarray, int]:
    """(key, n): each edge's (vertex, relation) pair at `side` as one integer, `rel * n + vertex`."""
    _require_relations(graph)
    if side not in ("src", "dst"):
        raise ArgumentError(f"relation pairs are per 'src' or 'dst', not {side!r}")
    vertices = graph.src if side == "src" else graph.dst
    n = max(1, graph.num_src if side == "src" else graph.num_dst)
    return graph.edge_type * n + vertices, n


def relation_pairs(graph: Any, side: str) -> RelationPairs:
    """The (source, relation) pairs (``side="src"``) or (destination, relation) pairs
    (``side="dst"``) of a graph with relation types; computed once per graph (a sort)."""
    _require_relations(graph)

    def compute() -> RelationPairs:
        key, n = _pair_keys(graph, side)
        unique, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        rel = unique // n
        offsets = np.searchsorted(rel, np.arange(graph.num_relations + 1, dtype=np.int64), side="left")
        return RelationPairs(
            vertex=_readonly(unique % n),
            rel=_readonly(rel),
            count=_readonly(counts),
            offsets=_readonly(offsets),
            edge_pair=_readonly(inverse.reshape(-1)),
        )

    return _cached(graph, ("relation_pairs", side), compute)


def relation_pair_count(graph: Any, side: str) -> int:
    """How many (vertex, relation) pairs `side` has: `relation_pairs(graph, side).num_pairs`,
    counted without keeping what that builds (an edge-to-pair map of E int64, and the pairs)
    where it is not built yet. The default schedule asks before it knows whether the kernel
    will run per pair: a graph whose relations run per edge keeps nothing E-sized for it."""
    built = graph.plans.get(("relation_pairs", side))
    if built is not None:
        return built.num_pairs
    _require_relations(graph)

    def compute() -> int:
        return int(np.unique(_pair_keys(graph, side)[0]).shape[0])

    return _cached(graph, ("relation_pair_count", side), compute)


def pair_graph(graph: Any, side: str) -> Any:
    """The graph of `side`'s (vertex, relation) pairs (`relation_pairs`) as destinations: the
    same edges, with the same ids and relation types, each from its other end to its pair (for
    ``"src"`` pairs, from its destination). An aggregation over a pair's in-edges is a sum per
    pair of values of the edge and of its other end: a relation weight's gradient sums its
    adjoints so (runtime/gradient.py). Built once per graph (a sort of the edges by pair)."""

    def compute() -> Any:
        pairs = relation_pairs(graph, side)
        others, n = (graph.dst, graph.num_dst) if side == "src" else (graph.src, graph.num_src)
        return type(graph).from_coo(
            others,
            pairs.edge_pair,
            shape=(n, pairs.num_pairs),
            edge_type=graph.edge_type,
            num_relations=graph.num_relations,
        )

    return _cached(graph, ("pair_graph", side), compute)


def pair_vertex_graph(graph: Any, side: str) -> Any:
    """The graph whose edges are `side`'s (vertex, relation) pairs (`relation_pairs`): pair p
    is edge p (its id), from source p to its vertex, of its relation. A sum over a vertex's
    in-edges there is a sum over its pairs: an input's gradient through a relation weight
    takes one row per pair so (runtime/gradient.py). Built once per graph."""

    def compute() -> Any:
        pairs = relation_pairs(graph, side)
        n = graph.num_src if side == "src" else graph.num_dst
        return type(graph).from_coo(
            np.arange(pairs.num_pairs, dtype=np.int64),
            pairs.vertex,
            shape=(pairs.num_pairs, n),
            edge_type=pairs.rel,
            num_relations=graph.num_relations,
        )

    return _cached(graph, ("pair_vertex_graph", side), compute)


def pair_blocks(graph: Any, side: str, threads: int) -> np.ndarray:
    """Boundaries of even blocks of a side's (vertex, relation) pairs, for the sweep that
    computes a value per pair (every pair costs the same: a row of a transform)."""
    threads = _positive(threads, "threads")
    rows = relation_pairs(graph, side).num_pairs
    n = max(1, min(rows, BLOCKS_PER_THREAD * threads, -(-(rows * 8) // MIN_BLOCK_WORK))) if rows else 0
    return _cached(
        graph,
        ("pair_blocks", side, n),
        lambda: _readonly(np.linspace(0, rows, n + 1).round().astype(np.int64)),
    )


def pair_tiles(graph: Any, side: str, rows: int) -> np.ndarray:
    """T + 1 boundaries of tiles of a side's pairs: each relation's run of pairs cut into
    tiles of `rows` (the last one of a run shorter), never two relations in one tile, so
    that a tile is a block of one relation's dense product (`segment-matmul`)."""
    rows = _positive(rows, "rows")

    def compute() -> np.ndarray:
        offsets = relation_pairs(graph, side).offsets
        lengths = np.diff(offsets)
        counts = -(-lengths // rows)
        within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        starts = np.repeat(offsets[:-1], counts) + within * rows
        return _readonly(np.append(starts, offsets[-1]))

    return _cached(graph, ("pair_tiles", side, rows), compute)


def tile_blocks(graph: Any, side: str, rows: int, threads: int) -> np.ndarray:
    """Boundaries of even blocks of a side's pair tiles (`pair_tiles`) for `threads` workers."""
    threads = _positive(threads, "threads")
    tiles = pair_tiles(graph, side, rows).shape[0] - 1
    n = max(1, min(tiles, BLOCKS_PER_THREAD * threads, -(-(tiles * 8 * rows) // MIN_BLOCK_WORK))) if tiles else 0
    return _cached(
        graph,
        ("tile_blocks", side, rows, n),
        lambda: _readonly(np.linspace(0, tiles, n + 1).round().astype(np.int64)),
    )


def relation_edges(graph: Any) -> tuple[np.ndarray, np.ndarray]:
    """The edges grouped by relation: ``(order, offsets)``, relation ``r``'s edge ids being
    ``order[offsets[r]:offsets[r + 1]]`` in increasing id (a stable sort of ``edge_type``).
    A relation tensor's gradient is one dense product, or one sum, over each such run."""
    _require_relations(graph)

    def compute() -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(graph.edge_type, kind="stable").astype(np.int64)
        offsets = np.searchsorted(
            graph.edge_type[order], np.arange(graph.num_relations + 1, dtype=np.int64), side="left"
        )
        return _readonly(order), _readonly(offsets)

    return _cached(graph, ("relation_edges",), compute)


def relation_edges_by_end(graph: Any, side: str) -> tuple[np.ndarray, np.ndarray]:
    """``relation_edges``' runs with each relation's edges ordered by their `side` end
    ("src" or "dst"), ties in increasing id: ``(order, offsets)``. A relation weight's
    gradient then sums the adjoint rows of a (vertex, relation) pair's edges before its
    product, and gathers the factor's rows in increasing vertex order."""
    _require_relations(graph)

    def compute() -> tuple[np.ndarray, np.ndarray]:
        order, offsets = relation_edges(graph)
        ends = np.asarray(graph.src if side == "src" else graph.dst)
        relation = np.repeat(np.arange(graph.num_relations, dtype=np.int64), np.diff(offsets))
        by_end = order[np.lexsort((ends[order], relation))]
        return _readonly(by_end), offsets

    return _cached(graph, ("relation_edges_by_end", side), compute)


def in_csr_numbering(graph: Any) -> tuple[Any, np.ndarray]:
    """The graph with its edges numbered in in-CSR order (`edges_sorted` holds) and `perm`: its
    edge i is the graph's edge `perm[i]` (`in_eid`). Unlike `Graph.sorted_by_destination` it
    shares the graph's in-CSR arrays: a gradient whose intermediates are per edge runs on it,
    so that those are written and read by position, not scattered by the user's edge ids
    (`runtime.gradient.Gradient`). Built once per graph; on a sorted graph, the graph."""

    def compute() -> tuple[Any, np.ndarray]:
        if graph.edges_sorted:
            return graph, _identity(graph.num_edges)
        view = type(graph).from_csc(graph.in_indptr, graph.in_src, shape=(graph.num_src, graph.num_dst))
        perm = _readonly(graph.in_eid)
        if graph.edge_type is not None:
            view._set_relations(_readonly(graph.edge_type[perm]), graph.num_relations, checked=True)
        view.types = graph.types  # the same vertex ids
        return view, perm

    return _cached(graph, ("in_csr_numbering",), compute)


def relation_degrees(graph: Any, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Per edge id, as floats of ``dtype`` ("f32" / "f64"): the edges sharing its (destination,
    relation) pair (``deg_in(v, rel(e))``, R-GCN's c_{v,r}) and its (source, relation) pair
    (``deg_out(u, rel(e))``)."""
    _require_relations(graph)
    np_dtype = np.float32 if dtype == "f32" else np.float64

    def compute() -> tuple[np.ndarray, np.ndarray]:
        degrees = []
        for side in ("dst", "src"):
            pairs = relation_pairs(graph, side)
            deg = pairs.count[pairs.edge_pair].astype(np_dtype)
            deg.flags.writeable = False
            degrees.append(deg)
        return degrees[0], degrees[1]

    return _cached(graph, ("relation_degrees", dtype), compute)


# ------------------------------------------------------ the plans of a call


class Blocks(StrEnum):
    """How `dst_blocks` cuts a kernel's destination sweep into the blocks its workers take."""

    #: destinations of about equal work, in the kernel's destination order (balanced_blocks)
    BALANCED = "balanced"
    #: even runs of the Hilbert edge list, for `order edges hilbert` (edge_blocks)
    EDGES = "edges"
    #: destinations weighed by their neighbour groups, for `group neighbors G` (grouped_blocks)
    GROUPED = "grouped"
    #: one block of every destination: a GPU grid, which does not read the blocks
    WHOLE = "whole"


@dataclass(frozen=True)
class Hybrid:
    """FeatGraph's hybrid partitioning of a `map ... hybrid K` grid (hybrid_sources)."""

    #: the mapping, for the error a too-wide row gets
    mapping: str
    #: K: the sources to stage in shared memory, at most
    sources: int
    #: per launch, the elements one staged source takes (abi.hybrid_row_elements)
    rows: tuple[int, ...]
    itemsize: int

    def shared_bytes(self, hot: np.ndarray) -> list[int]:
        """The dynamic shared memory of each launch, for the sources `hot` stages."""
        return [int(hot[0]) * r * self.itemsize for r in self.rows]


@dataclass(frozen=True)
class PlanSpec:
    """The per-graph arguments one compiled kernel reads, as its ABI record asks for them.

    `build` turns it into arrays for a graph. The defaults are a kernel without
    a schedule: balanced blocks in id order over the in-CSR.
    """

    #: the workers the blocks are cut for (`block_count_for`, `source_blocks`, `group_blocks`)
    threads: int
    #: the kernel's float type ("f32" or "f64"), of the degree arrays
    dtype: str
    #: the destination order positions map through (`destination_order`)
    order: str = "identity"
    blocks: Blocks = Blocks.BALANCED
    #: the in-CSR laid out by position in `order` (`ordered_in_csr`)
    ordered_edges: bool = False
    #: even blocks of source rows for a source sweep (`source_blocks`)
    source_blocks: bool = False
    #: `partition src K`: K (`source_partitions`)
    partitions: int | None = None
    #: `order edges hilbert`: the Hilbert edge list (`hilbert_edge_order`)
    hilbert: bool = False
    #: `group neighbors G`: G (`split_neighbor_groups`, `group_blocks`)
    groups: int | None = None
    hybrid: Hybrid | None = None
    #: the edges' relation types (`edge_rel`)
    relations: bool = False
    #: the edges per (vertex, relation) pair, by edge id (`relation_degrees`)
    relation_degrees: bool = False
    #: the sides whose (vertex, relation) pairs the kernel sweeps (`relation_pairs`, `pair_blocks`)
    pairs: tuple[str, ...] = ()
    #: `segment-matmul`: the pairs a tile holds (`pair_tiles`, `tile_blocks`); None: no tiles
    pair_rows: int | None = None
    #: the kernel reads `in_eid` / `part_eid` (its record's `edge_ids`); False: placeholders
    edge_ids: bool = True
    #: the kernel reads `in_src` (its record's `in_src`); False: a placeholder (a partitioned
    #: walk reads `part_src`), and a large reversed graph may drop its own (`release_in_src`)
    in_src: bool = True
    #: the kernel reads `deg_in` / `deg_out` (its record's); False: a placeholder, not counted
    deg_in: bool = True
    deg_out: bool = True
    #: whether `build` lays out more than the counts, blocks, order, in-CSR and degrees
    extras: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        extras = (
            self.source_blocks
            or self.partitions is not None
            or self.hilbert
            or self.groups is not None
            or self.hybrid is not None
            or self.relations
            or self.relation_degrees
            or bool(self.pairs)
        )
        object.__setattr__(self, "extras", extras)


def build(graph: Any, spec: PlanSpec) -> Mapping[str, Any]:
    """The graph arguments of a kernel call, by ABI argument name (`abi.ARGUMENT_GROUPS`):
    the counts, blocks, destination order, in-CSR and degrees, then the optional groups
    `spec` asks for (source blocks, partitions, Hilbert edges, neighbour groups, hybrid
    sources). Assembled once per graph and spec, from the plans cached on the graph;
    the mapping is read-only, and so is every array in it."""
    key = ("build", spec)
    found = graph.plans.get(key)
    if found is None:  # no closure for `_cached`: a mini-batch block's kernels build one each
        found = graph.plans[key] = MappingProxyType(_build(graph, spec))
    return found


#: What a kernel that reads no edge ids gets for them (its record's `edge_ids` is False).
_NO_EDGE_IDS = _readonly(np.zeros(1, dtype=np.int64))
#: What a kernel that reads no in_src gets for it (its record's `in_src` is False).
_NO_SOURCES = _readonly(np.zeros(1, dtype=np.int64))


def _nonempty(arr: np.ndarray) -> np.ndarray:
    # an empty array has no storage: every pointer a kernel may read must be valid
    return arr if arr.shape[0] else _readonly(np.zeros(1, dtype=arr.dtype))


def _build(graph: Any, spec: PlanSpec) -> dict[str, Any]:
    order = destination_order(graph, spec.order)
    if spec.blocks is Blocks.WHOLE:
        blocks = _one_block(graph.num_vertices)
    else:
        n_blocks = block_count_for(graph, spec.threads)
        if spec.blocks is Blocks.EDGES:
            blocks = edge_blocks(graph, n_blocks)
        elif spec.blocks is Blocks.GROUPED:
            assert spec.groups is not None, "grouped blocks need `group neighbors G`"
            blocks = grouped_blocks(graph, spec.groups, n_blocks)
        else:
            blocks = balanced_blocks(graph, n_blocks, order=order)
    in_csr = (
        graph.in_indptr,
        graph.in_src if spec.in_src or spec.partitions is None else _NO_SOURCES,
        graph.in_eid if spec.edge_ids else _NO_EDGE_IDS,
    )
    if spec.ordered_edges:
        # the sweep walks edges by position in its order (transforms/loop/order_destinations.py)
        in_csr = ordered_in_csr(graph, spec.order)
    deg_in, deg_out = graph.kernel_degrees(spec.dtype, spec.deg_in, spec.deg_out)
    values: dict[str, Any] = {
        "num_vertices": graph.num_vertices,
        "num_edges": graph.num_edges,
        "num_blocks": len(blocks) - 1,
        "dst_blocks": blocks,
        "dst_order": order,
        "in_indptr": in_csr[0],
        "in_src": in_csr[1],
        "in_eid": in_csr[2],
        "deg_in": _nonempty(deg_in),
        "deg_out": _nonempty(deg_out),
    }
    if not spec.extras:
        return values
    if spec.source_blocks:
        src_blocks = source_blocks(graph, spec.threads)
        values["src_meta"] = _readonly(np.array([graph.num_src, src_blocks.shape[0] - 1]))
        values["src_blocks"] = src_blocks
    if spec.partitions is not None:
        _, values["part_indptr"], values["part_src"], part_eid = source_partitions(
            graph, spec.partitions, eids=spec.edge_ids
        )
        values["part_eid"] = _NO_EDGE_IDS if part_eid is None else part_eid
        if not spec.in_src:
            graph.release_in_src()  # the partitions hold every source
    if spec.hilbert:
        values["hilbert_src"], values["hilbert_dst"], values["hilbert_eid"] = hilbert_edge_order(graph)
    if spec.groups is not None:
        group_dst, group_bounds, group_offsets = split_neighbor_groups(graph, spec.groups)
        groups = group_blocks(graph, spec.groups, spec.threads)
        values["group_meta"] = _readonly(np.array([groups.shape[0] - 1, group_dst.shape[0]]))
        values["group_blocks"] = groups
        values["group_dst"], values["group_bounds"] = _nonempty(group_dst), _nonempty(group_bounds)
        values["group_offsets"] = group_offsets
    if spec.hybrid is not None:
        values["hybrid_hot"], values["hybrid_slot"] = _hybrid_sources(graph, spec.hybrid)
    if spec.relations or spec.relation_degrees:
        _require_relations(graph)
    if spec.relations:
        values["edge_rel"] = _nonempty(graph.edge_type)
    if spec.relation_degrees:
        deg_in, deg_out = relation_degrees(graph, spec.dtype)
        values["rel_deg_in"], values["rel_deg_out"] = _nonempty(deg_in), _nonempty(deg_out)
    for side in spec.pairs:
        pairs = relation_pairs(graph, side)
        blocks = pair_blocks(graph, side, spec.threads)
        tiles = tiles_by = _readonly(np.zeros(1, dtype=np.int64))
        if spec.pair_rows is not None:
            tiles = pair_tiles(graph, side, spec.pair_rows)
            tiles_by = tile_blocks(graph, side, spec.pair_rows, spec.threads)
        counts = [pairs.num_pairs, blocks.shape[0] - 1, tiles.shape[0] - 1, tiles_by.shape[0] - 1]
        values[f"{side}_pair_meta"] = _readonly(np.array(counts))
        values[f"{side}_pair_blocks"] = blocks
        values[f"{side}_pair_vertex"] = _nonempty(pairs.vertex)
        values[f"{side}_pair_rel"] = _nonempty(pairs.rel)
        values[f"{side}_edge_pair"] = _nonempty(pairs.edge_pair)
        values[f"{side}_pair_tiles"] = tiles
        values[f"{side}_tile_blocks"] = tiles_by
    return values
