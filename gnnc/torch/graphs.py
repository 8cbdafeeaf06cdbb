"""edge_index tensors as `gnnc.Graph`s, converted once and cached while they stay the same.

A custom op takes its graph as tensors (`edge_index` and the sizes), so that
it is a pure function of its inputs for torch.compile, export and tracing;
its CPU implementation then needs the checked `Graph` (CSR, degrees,
per-graph plans). Building one sorts the edges, so it is cached per tensor.

The cache is keyed by the tensor itself (its id, guarded by a weak
reference, so a new tensor that reuses a dead one's id is a miss) and is
valid while the tensor's `_version` (bumped by every in-place edit through
torch), data pointer, shape and strides are those it was converted at.
Edits that bypass torch (through `.numpy()`) cannot be seen.

A `gnnc.Graph` given to gnnc.nn travels as a *handle* (`handle_of`): a
`[2, E]` int64 tensor of one stored element, broadcast, that carries the Graph
itself, so a graph of 64M edges passes through the ops without its
1 GiB edge_index. Its values are not the edges: only the ops read it, and they
take the Graph it carries.

An edge_index on a CUDA device is copied to the host once to build the
Graph (the CSR is built by the host code all graphs go through), cached as a
CPU one is; the CUDA runtime then keeps the Graph's arrays on the device.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from gnnc.errors import ArgumentError
from gnnc.graph.coo import CooGraph
from gnnc.graph.graph import Graph

#: (num_src, num_dst) a graph was asked for; None: square, max id + 1 vertices.
SizeKey = tuple[int, int] | None


@dataclass
class _Entry:
    """What one edge_index tensor was converted to, and the state it was converted at."""

    tensor: weakref.ref
    state: tuple
    #: For a user's tensor the graphs themselves; for a tensor made from a
    #: Graph a weak reference to it (the Graph keeps the tensor alive).
    graphs: dict[SizeKey, Graph | weakref.ref] = field(default_factory=dict)
    #: The edges of a tensor used once so far, by sizes (`block_of`): converted on a second use.
    blocks: dict[tuple[int, int], CooGraph] = field(default_factory=dict)
    #: Values made from the tensor by `derived` (gnnc.nn's edge lists, self-loop weights).
    derived: dict[Any, Any] = field(default_factory=dict)

    def get(self, key: SizeKey) -> Graph | None:
        graph = self.graphs.get(key)
        return graph() if isinstance(graph, weakref.ref) else graph


_ENTRIES: dict[int, _Entry] = {}
#: The edge_index tensors each Graph travels into the ops as, by device.
_EDGE_INDEX: weakref.WeakKeyDictionary[Graph, dict[torch.device, torch.Tensor]] = weakref.WeakKeyDictionary()
#: The edge_type tensors a typed Graph travels into the ops as, by device.
_EDGE_TYPE: weakref.WeakKeyDictionary[Graph, dict[torch.device, torch.Tensor]] = weakref.WeakKeyDictionary()


def _state(t: torch.Tensor) -> tuple:
    try:
        version = t._version
    except RuntimeError:  # an inference tensor keeps no version counter
        version = None
    if t.layout != torch.strided:  # a sparse adjacency: its parts' storage instead
        if t.layout == torch.sparse_coo:
            parts: tuple[torch.Tensor, ...] = (t._indices(), t._values())
        elif t.layout in (torch.sparse_csr, torch.sparse_bsr):
            parts = (t.crow_indices(), t.col_indices(), t.values())
        else:
            parts = (t.ccol_indices(), t.row_indices(), t.values())
        return version, t.layout, tuple(t.shape), tuple(p.data_ptr() for p in parts)
    return version, t.data_ptr(), tuple(t.shape), tuple(t.stride())


def _entry(t: torch.Tensor) -> _Entry:
    """The tensor's cache entry, a fresh one if it has none or changed since."""
    key = id(t)
    entry = _ENTRIES.get(key)
    state = _state(t)
    if entry is not None and entry.tensor() is t and entry.state == state:
        return entry

    def forget(ref: weakref.ref, key: int = key, entries: dict = _ENTRIES) -> None:
        # `entries` bound now: at interpreter exit the module's globals may be gone
        if key in entries and entries[key].tensor is ref:
            del entries[key]

    entry = _Entry(weakref.ref(t, forget), state)
    _ENTRIES[key] = entry
    return entry


def _sizes(num_vertices: Any, size: Any) -> SizeKey:
    if size is not None:
        if num_vertices is not None:
            raise ArgumentError("give num_vertices= (a square graph) or size=(num_src, num_dst), not both")
        if isinstance(size, torch.Tensor):
            size = size.tolist()
        if not isinstance(size, (tuple, list)) or len(size) != 2:
            raise ArgumentError(f"size must be a pair (num_src, num_dst), got {size!r}")
        return int(size[0]), int(size[1])
    if num_vertices is not None:
        return int(num_vertices), int(num_vertices)
    return None


#: The attribute of a handle tensor (`handle_of`) that holds its Graph.
_HANDLE_GRAPH = "_gnnc_graph"


def handle_of(graph: Graph) -> torch.Tensor:
    """A `[2, E]` int64 CPU tensor that stands for `graph` in the ops, without its edges.

    One stored element, broadcast (stride 0): its values are *not* the
    edges. The handle holds the Graph (an attribute), so a backward saved
    with it finds the Graph even when the caller has dropped it; the Graph
    does not hold the handle, so each call may get a new one (cheap) and
    nothing outlives both. Read the edges with `edge_index_of`.
    """
    handle = torch.zeros((2, 1), dtype=torch.int64).expand(2, graph.num_edges)
    setattr(handle, _HANDLE_GRAPH, graph)
    return handle


def graph_behind(t: torch.Tensor) -> Graph | None:
    """The Graph a handle (`handle_of`) stands for; None for any other tensor."""
    return t.__dict__.get(_HANDLE_GRAPH) if isinstance(t, torch.Tensor) else None


def graph_of(edge_index: torch.Tensor, sizes: SizeKey) -> Graph:
    """The Graph of an edge_index tensor with these (num_src, num_dst), converted once."""
    behind = graph_behind(edge_index)
    if behind is not None:
        if sizes is not None and (behind.num_src, behind.num_dst) != sizes:
            raise ArgumentError(
                f"the graph has (num_src, num_dst) = {(behind.num_src, behind.num_dst)}; the call asks for {sizes}"
            )
        return behind
    entry = _entry(edge_index)
    graph = entry.get(sizes)
    if graph is None and sizes is not None and sizes in entry.blocks:  # a second use: converted now
        graph = entry.graphs[sizes] = entry.blocks.pop(sizes).graph()
    if graph is None:
        if edge_index.device.type not in ("cpu", "cuda"):
            raise ArgumentError(f"edge_index is on {edge_index.device}; gnnc.torch runs CPU and CUDA tensors")
        # a CUDA edge_index is copied to the host once, here: the CSR is built there
        graph = Graph.from_edge_index(edge_index.detach().cpu(), shape=sizes)
        entry.graphs[sizes] = graph
        if sizes is None:  # the same graph, asked for by its sizes
            entry.graphs.setdefault((graph.num_src, graph.num_dst), graph)
    return graph


#: The largest graph `block_of` keeps as edges: past about this many edges or vertex ids the C
#: helpers' CSR and plans (fresh allocations each call, no grouped fast path) cost more than
#: `Graph.from_edge_index` and the runtime's plans (docs/design/training.md, "Nineteenth session").
BLOCK_MAX_EDGES = 4096
BLOCK_MAX_IDS = 8192


def block_of(edge_index: torch.Tensor, sizes: tuple[int, int]) -> Graph | CooGraph:
    """What an eager CPU call runs on: the tensor's Graph where it was converted (`graph_of`);
    on its first use its edges alone, copied (a `CooGraph`: the kernel runs in one native call
    that builds what it needs in C, `runtime.module.Kernel`), which a second use converts. A
    mini-batch block is used once (its forward kernel; the backward reuses the same
    CooGraph): it never becomes a Graph with plans in Python. A graph used again (full-batch
    training) is converted on its second call and keeps its plans from then on. Anything
    else (a handle, another device or integer type, a malformed tensor, more than
    BLOCK_MAX_EDGES edges or BLOCK_MAX_IDS vertices a side) goes to `graph_of`, which converts
    or says what is wrong."""
    if (
        type(edge_index) is torch.Tensor
        and edge_index.dtype == torch.int64
        and edge_index.device.type == "cpu"
        and edge_index.dim() == 2
        and edge_index.shape[0] == 2
        and edge_index.shape[1] <= BLOCK_MAX_EDGES
        and edge_index.layout == torch.strided
        and 0 <= sizes[0] <= BLOCK_MAX_IDS
        and 0 <= sizes[1] <= BLOCK_MAX_IDS
        and graph_behind(edge_index) is None
    ):
        entry = _entry(edge_index)
        graph = entry.get(sizes)
        if graph is not None:  # converted before: the same tensor again
            return graph
        if sizes not in entry.blocks:
            block = CooGraph.from_edge_index(edge_index.detach().numpy(), *sizes)
            entry.blocks[sizes] = block
            return block
    return graph_of(edge_index, sizes)


def typed_graph(graph: Graph, edge_type: torch.Tensor, num_relations: int) -> Graph:
    """`graph` with the relation types `edge_type` (one per edge id), checked and built once
    per edge_type tensor (and graph, and num_relations) while the tensor stays the same."""
    if edge_type.device.type not in ("cpu", "cuda"):
        raise ArgumentError(f"edge_type is on {edge_type.device}; gnnc.torch runs CPU and CUDA tensors")
    if edge_type.dtype.is_floating_point or edge_type.dtype.is_complex or edge_type.dtype == torch.bool:
        raise ArgumentError(f"edge_type holds relation types: an integer tensor, got {edge_type.dtype}")

    def make() -> tuple[weakref.ref, Graph]:
        types = edge_type.detach().cpu().numpy()
        return weakref.ref(graph), Graph(graph, edge_type=types, num_relations=int(num_relations))

    key = ("typed", id(graph), int(num_relations))
    base, typed = derived(edge_type, key, make)
    if base() is not graph:  # another graph reused a dead one's id
        entry = _entry(edge_type)
        entry.derived[key] = make()
        typed = entry.derived[key][1]
    return typed


def edge_type_of(graph: Graph, device: torch.device | str = "cpu") -> torch.Tensor:
    """The int64 tensor of a typed Graph's relation types (by edge id), made once per device;
    the ops find the Graph itself through it, as through `edge_index_of`."""
    if graph.edge_type is None:
        raise ArgumentError("the graph has no relation types (gnnc.Graph(..., edge_type=...))")
    device = torch.device(device)
    per_device = _EDGE_TYPE.setdefault(graph, {})
    t = per_device.get(device)
    if t is None:
        t = torch.from_numpy(graph.edge_type.copy())
        t = t if device.type == "cpu" else t.to(device)
        per_device[device] = t
    key = ("typed", id(graph), int(graph.num_relations or 0))
    _entry(t).derived[key] = (weakref.ref(graph), graph)
    return t


#: Values `derived` from the Graph a handle stands for, kept with the Graph (handles come and go).
_GRAPH_DERIVED: weakref.WeakKeyDictionary[Graph, dict[Any, Any]] = weakref.WeakKeyDictionary()


def derived(t: torch.Tensor | Graph, key: Any, make: Any) -> Any:
    """`make()`, computed once per tensor `t` and `key` and cached with `t`'s graphs.

    The value is dropped with `t`, and recomputed when `t` is edited in
    place (the rule of the graph cache). gnnc.nn keeps what it derives from
    an adjacency here: a sparse tensor's edge_index, GCN's self-loop weights.
    For a Graph, or a handle of one (`handle_of`), it is kept with the Graph.
    """
    if isinstance(t, Graph):
        return graph_derived(t, key, make)
    behind = graph_behind(t)
    if behind is not None:
        return graph_derived(behind, key, make)
    entry = _entry(t)
    if key not in entry.derived:
        entry.derived[key] = make()
    return entry.derived[key]


def share_conversions(copy: torch.Tensor, source: torch.Tensor) -> None:
    """Let `copy`, a tensor of `source`'s values, use the graphs and `derived` values made (and to
    be made) from `source`: a custom op that returns a copy of a cached edge_index each call
    (the compiled graph owns its outputs) then does not cost a graph build each call. Each
    tensor's own in-place edits still drop what it sees."""
    entry, shared = _entry(copy), _entry(source)
    entry.graphs, entry.blocks, entry.derived = shared.graphs, shared.blocks, shared.derived


def graph_derived(graph: Graph, key: Any, make: Any) -> Any:
    """`make()`, computed once per Graph and `key` and kept while the Graph lives (a Graph is
    immutable: nothing makes the value stale)."""
    values = _GRAPH_DERIVED.setdefault(graph, {})
    if key not in values:
        values[key] = make()
    return values[key]


def replace_derived(t: torch.Tensor, key: Any, value: Any) -> Any:
    """`value` kept as `derived(t, key, ...)`'s from now on (a value that depends on more than `t`)."""
    behind = graph_behind(t)
    if behind is not None:
        _GRAPH_DERIVED.setdefault(behind, {})[key] = value
        return value
    _entry(t).derived[key] = value
    return value


def state_of(t: torch.Tensor) -> tuple:
    """What an in-place edit of `t` changes (its version, storage, shape): a cached value made
    from `t` is stale when this differs from what it was made at."""
    return _state(t)


def as_graph(graph: Any, num_vertices: int | None = None, size: Any = None) -> Graph:
    """A `gnnc.Graph` for a Graph or an edge_index tensor (converted once per tensor).

    `size=(num_src, num_dst)` makes a bipartite graph (PyG's `size`, DGL's
    blocks); `num_vertices=n` a square one of n vertices; neither, a square
    one of max id + 1 vertices.
    """
    sizes = _sizes(num_vertices, size)
    if isinstance(graph, Graph):
        if sizes is not None and (graph.num_src, graph.num_dst) != sizes:
            given = f"size={sizes}" if size is not None else f"num_vertices={num_vertices}"
            raise ArgumentError(f"the graph has (num_src, num_dst) = {(graph.num_src, graph.num_dst)}, not {given}")
        return graph
    if isinstance(graph, torch.Tensor):
        return graph_of(graph, sizes)
    raise ArgumentError(f"expected a gnnc.Graph or an edge_index tensor, got {type(graph).__name__}")


def edge_index_of(graph: Graph, device: torch.device | str = "cpu") -> torch.Tensor:
    """The 2 x E int64 tensor a Graph travels into the ops as (columns in edge id order),
    made once per device (on a GPU: one host-to-device copy).

    Its cache entry points back at the Graph, so the ops use the Graph
    itself (its plans included) instead of converting the tensor again.
    """
    device = torch.device(device)
    per_device = _EDGE_INDEX.setdefault(graph, {})
    t = per_device.get(device)
    if t is None:
        t = torch.from_numpy(graph.edge_index())
        t = t if device.type == "cpu" else t.to(device)
        per_device[device] = t
    entry = _entry(t)
    entry.graphs[(graph.num_src, graph.num_dst)] = weakref.ref(graph)
    return t


__all__ = [
    "BLOCK_MAX_EDGES",
    "BLOCK_MAX_IDS",
    "as_graph",
    "block_of",
    "derived",
    "edge_index_of",
    "edge_type_of",
    "graph_behind",
    "graph_derived",
    "graph_of",
    "handle_of",
    "replace_derived",
    "share_conversions",
    "state_of",
    "typed_graph",
]
