"""Values that depend on an edge_index alone, made once per tensor, eager or compiled.

GCNConv's self-loop weights (for a graph without edge weights), the
attention layers' `keep` mask (0 on the graph's own self loops) and a
static graph's repeated edge_index (`static_graphs`), SimpleConv's edges
with a loop appended per vertex, FiLMConv's edges between (vertex,
relation) pairs and the reversed edges of DirGNNConv and HypergraphConv
are O(E) tensor code that every call would otherwise run
again. They are kept with
the edge_index (`gnnc.torch.graphs.derived`: dropped with the tensor, made
again after an in-place edit of it). An eager call reads them there; a
call under torch.compile gets them from a custom op (`gnnc::nn_gcn_loops`,
`gnnc::nn_keep`, ...) whose implementation reads the same cache and returns
a copy (the compiled graph owns its outputs), so a compiled model does not
recompute them either; an edge_index's copy shares the cached tensor's gnnc
graphs (`_shared_copy`), so it is not converted again either.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from gnnc.errors import ArgumentError, GraphError
from gnnc.graph.graph import Graph
from gnnc.nn import relations, self_loops
from gnnc.torch import graphs
from gnnc.torch.untraced import untraced

_LIBRARY = torch.library.Library("gnnc", "FRAGMENT")
_LIBRARY.define("nn_keep(Tensor edge_index, ScalarType dtype) -> Tensor")
_LIBRARY.define(
    "nn_gcn_loops(Tensor edge_index, SymInt num_nodes, float fill, ScalarType dtype, bool add_loops) -> Tensor"
)
_LIBRARY.define("nn_static_edges(Tensor edge_index, SymInt count, SymInt num_src, SymInt num_dst) -> Tensor")
_LIBRARY.define("nn_appended_loops(Tensor edge_index, SymInt num_nodes) -> Tensor")
_LIBRARY.define("nn_relation_pair_edges(Tensor edge_index, Tensor edge_type, int num_relations, str layer) -> Tensor")
_LIBRARY.define("nn_flipped_edges(Tensor edge_index) -> Tensor")


def _shared_copy(cached: torch.Tensor) -> torch.Tensor:
    """A copy of a cached edge_index for a custom op to return: the copy (a new tensor each
    compiled call) reaches the kernels as their edge_index and finds the graph built for the
    cached one instead of building its own each call."""
    out = cached.clone()
    graphs.share_conversions(out, cached)
    return out


def _loops(
    edge_index: torch.Tensor | Graph, num_nodes: int, fill: float, dtype: torch.dtype, add_loops: bool
) -> torch.Tensor:
    def make() -> torch.Tensor:
        # an ordinary tensor even when first made under inference_mode: a later training call reuses it
        with torch.inference_mode(False):
            if isinstance(edge_index, Graph):  # from its in-CSR: no edge_index made
                return self_loops.graph_loops(edge_index, num_nodes, fill, dtype, add_loops)
            return self_loops.unweighted_loops(edge_index, num_nodes, fill, dtype, add_loops)

    return graphs.derived(edge_index, ("nn.gcn_loops", fill, dtype, num_nodes, add_loops), make)


def _keep(edge_index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    def make() -> torch.Tensor:
        with torch.inference_mode(False):
            return (edge_index[0] != edge_index[1]).to(dtype)

    return graphs.derived(edge_index, ("nn.keep", dtype), make)


def _repeated(edge_index: torch.Tensor, count: int, num_src: int, num_dst: int) -> torch.Tensor:
    """The edge_index of `count` copies of the graph: copy b's ids offset by (b num_src, b num_dst)."""
    if edge_index.dtype not in (torch.int64, torch.int32):
        raise ArgumentError(f"edge_index must hold int64 (or int32) vertex ids, got {edge_index.dtype}")
    ids = edge_index.to(torch.int64)
    if ids.numel():
        for row, (what, n) in enumerate((("source", num_src), ("destination", num_dst))):
            low, high = int(ids[row].min()), int(ids[row].max())
            if low < 0 or high >= n:
                bad = low if low < 0 else high
                raise GraphError(
                    f"{what} id {bad} is out of range: a static graph's {what}s are its {n} rows of x, "
                    f"so ids must lie in [0, {n})"
                )
    offsets = torch.arange(count, dtype=torch.int64, device=ids.device)[:, None] * torch.tensor(
        [num_src, num_dst], dtype=torch.int64, device=ids.device
    )
    return (ids[:, None, :] + offsets.T[:, :, None]).reshape(2, count * ids.shape[1])


def _static_edges(edge_index: torch.Tensor, count: int, num_src: int, num_dst: int) -> torch.Tensor:
    def make() -> torch.Tensor:
        with torch.inference_mode(False):
            return _repeated(edge_index, count, num_src, num_dst)

    return graphs.derived(edge_index, ("nn.static_edges", count, num_src, num_dst), make)


@torch.library.impl(_LIBRARY, "nn_static_edges", "CompositeExplicitAutograd")
def _static_edges_op(edge_index: torch.Tensor, count: int, num_src: int, num_dst: int) -> torch.Tensor:
    return _shared_copy(_static_edges(edge_index, int(count), int(num_src), int(num_dst)))


@torch.library.register_fake("gnnc::nn_static_edges", lib=_LIBRARY)
def _static_edges_fake(edge_index: torch.Tensor, count: Any, num_src: Any, num_dst: Any) -> torch.Tensor:
    return edge_index.new_empty((2, count * edge_index.shape[1]), dtype=torch.int64)


def _appended(edge_index: torch.Tensor | Graph, num_nodes: int) -> torch.Tensor:
    def make() -> torch.Tensor:
        with torch.inference_mode(False):
            edges = graphs.edge_index_of(edge_index) if isinstance(edge_index, Graph) else edge_index
            ids = torch.arange(num_nodes, dtype=edges.dtype, device=edges.device)
            return torch.cat([edges, torch.stack([ids, ids])], dim=1)

    return graphs.derived(edge_index, ("nn.appended_loops", num_nodes), make)


@torch.library.impl(_LIBRARY, "nn_appended_loops", "CompositeExplicitAutograd")
def _appended_op(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    return _shared_copy(_appended(edge_index, int(num_nodes)))


@torch.library.register_fake("gnnc::nn_appended_loops", lib=_LIBRARY)
def _appended_fake(edge_index: torch.Tensor, num_nodes: Any) -> torch.Tensor:
    return edge_index.new_empty((2, edge_index.shape[1] + num_nodes))


def _pair_edges(edge_index: torch.Tensor, edge_type: torch.Tensor, num_relations: int, layer: str) -> torch.Tensor:
    def make() -> torch.Tensor:
        with torch.inference_mode(False):
            rel = edge_type.to(torch.int64)
            if rel.numel() and (int(rel.min()) < 0 or int(rel.max()) >= num_relations):
                raise ArgumentError(
                    f"{layer}: edge_type has values out of range [0, {num_relations}) "
                    f"(min {int(rel.min())}, max {int(rel.max())})"
                )
            return edge_index.to(torch.int64) * num_relations + rel

    key = ("nn.relation_pair_edges", int(num_relations))
    return cast(torch.Tensor, relations.derived_with_types(edge_index, edge_type, key, make))


@torch.library.impl(_LIBRARY, "nn_relation_pair_edges", "CompositeExplicitAutograd")
def _pair_edges_op(edge_index: torch.Tensor, edge_type: torch.Tensor, num_relations: int, layer: str) -> torch.Tensor:
    return _shared_copy(_pair_edges(edge_index, edge_type, num_relations, layer))


@torch.library.register_fake("gnnc::nn_relation_pair_edges", lib=_LIBRARY)
def _pair_edges_fake(edge_index: torch.Tensor, edge_type: torch.Tensor, num_relations: int, layer: str) -> torch.Tensor:
    return edge_index.new_empty(edge_index.shape, dtype=torch.int64)


@torch.library.impl(_LIBRARY, "nn_gcn_loops", "CompositeExplicitAutograd")
def _loops_op(
    edge_index: torch.Tensor, num_nodes: int, fill: float, dtype: torch.dtype, add_loops: bool
) -> torch.Tensor:
    return _loops(edge_index, int(num_nodes), fill, dtype, add_loops).clone()


@torch.library.impl(_LIBRARY, "nn_keep", "CompositeExplicitAutograd")
def _keep_op(edge_index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return _keep(edge_index, dtype).clone()


@torch.library.register_fake("gnnc::nn_gcn_loops", lib=_LIBRARY)
def _loops_fake(
    edge_index: torch.Tensor, num_nodes: Any, fill: float, dtype: torch.dtype, add_loops: bool
) -> torch.Tensor:
    return edge_index.new_empty((2, num_nodes), dtype=dtype)


@torch.library.register_fake("gnnc::nn_keep", lib=_LIBRARY)
def _keep_fake(edge_index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return edge_index.new_empty(edge_index.shape[1], dtype=dtype)


#: A Graph's, outside torch.compile's graph (a Graph cannot be one of its inputs).
_graph_loops = untraced("a gnnc.Graph is not a graph input: pass edge_index to torch.compile")(_loops)


def gcn_loops(edge_index: Any, num_nodes: Any, fill: float, dtype: torch.dtype, add_loops: bool = True) -> torch.Tensor:
    """`[c, loop]` of `self_loops.unweighted_loops` for an unweighted edge_index (or a
    `gnnc.Graph`), made once per tensor (or Graph)."""
    if isinstance(edge_index, Graph):
        return _graph_loops(edge_index, int(num_nodes), fill, dtype, add_loops)
    if torch.compiler.is_compiling():
        return torch.ops.gnnc.nn_gcn_loops(edge_index, num_nodes, fill, dtype, add_loops)
    return _loops(edge_index, num_nodes, fill, dtype, add_loops)


def keep(edge_index: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """1.0 on the edges that are not self loops, 0.0 on those that are, made once per tensor."""
    if torch.compiler.is_compiling():
        return torch.ops.gnnc.nn_keep(edge_index, dtype)
    return _keep(edge_index, dtype)


def static_edges(edge_index: torch.Tensor, count: int, num_src: int, num_dst: int) -> torch.Tensor:
    """The edge_index of `count` copies of a graph of (num_src, num_dst) vertices, copy b's ids
    offset by (b num_src, b num_dst) (`static_graphs`), made once per tensor and sizes. Under
    torch.compile the op returns a copy each call, which shares the cached one's gnnc graphs
    (`graphs.share_conversions`)."""
    if torch.compiler.is_compiling():
        return torch.ops.gnnc.nn_static_edges(edge_index, count, num_src, num_dst)
    return _static_edges(edge_index, count, num_src, num_dst)


def appended_loops(edge_index: torch.Tensor | Graph, num_nodes: Any) -> torch.Tensor:
    """The edges of an edge_index (or a Graph), then a loop (i, i) per vertex (SimpleConv's
    "self_loop"), made once per tensor (or Graph)."""
    if torch.compiler.is_compiling() and isinstance(edge_index, torch.Tensor):
        return torch.ops.gnnc.nn_appended_loops(edge_index, num_nodes)
    return _appended(edge_index, num_nodes)


def relation_pair_edges(
    edge_index: torch.Tensor, edge_type: torch.Tensor, num_relations: int, layer: str
) -> torch.Tensor:
    """`[u * R + r, v * R + r]` per edge u -> v of type r: the edges between (vertex, relation)
    pairs (FiLMConv's), made, and the types checked against R, once per (edge_index, edge_type)."""
    if torch.compiler.is_compiling():
        return torch.ops.gnnc.nn_relation_pair_edges(edge_index, edge_type, num_relations, layer)
    return _pair_edges(edge_index, edge_type, num_relations, layer)


def _flipped(edge_index: torch.Tensor) -> torch.Tensor:
    def make() -> torch.Tensor:
        # an ordinary tensor even when first made under inference_mode: a later training call reuses it
        with torch.inference_mode(False):
            return edge_index.flip(0)

    return graphs.derived(edge_index, "nn.flipped_edges", make)


@torch.library.impl(_LIBRARY, "nn_flipped_edges", "CompositeExplicitAutograd")
def _flipped_op(edge_index: torch.Tensor) -> torch.Tensor:
    return _shared_copy(_flipped(edge_index))


@torch.library.register_fake("gnnc::nn_flipped_edges", lib=_LIBRARY)
def _flipped_fake(edge_index: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(edge_index)


def flipped_edges(edge_index: torch.Tensor) -> torch.Tensor:
    """`edge_index.flip(0)`, every edge turned around with its id kept (DirGNNConv's reversed
    graph, HypergraphConv's hyperedge-to-vertex incidences), made once per tensor."""
    if torch.compiler.is_compiling():
        return torch.ops.gnnc.nn_flipped_edges(edge_index)
    return _flipped(edge_index)


__all__ = ["appended_loops", "flipped_edges", "gcn_loops", "keep", "relation_pair_edges", "static_edges"]
