"""A relational layer's graph arguments: edges with a relation type each, as PyG's layers take them.

PyG's RGCNConv, FastRGCNConv and RGATConv take `edge_index` (a `[2, E]`
tensor, a sampled block) with `edge_type` (one integer per edge, in edge
order), or a SparseTensor whose values are the types (then `edge_type` is
None). A `torch.sparse` adjacency is refused: its values are edge weights
everywhere else in gnnc.nn, and PyG's relational layers cannot take one.

`pair_graph` is the graph whose destinations are the (destination,
relation) pairs of a typed graph's edges: a softmax or a max over one
pair's in-edges (RGAT's within-relation attention, RGCNConv's `aggr="max"`)
is then the kernel's aggregation over its destination.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, cast

import torch

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.torch import graphs
from gnnc.torch.untraced import untraced


@dataclass(frozen=True)
class TypedEdges:
    """A relational call's graph: the adjacency and each edge's relation type (`[E]`, int64)."""

    adj: inputs.Adjacency
    edge_type: torch.Tensor

    @property
    def edge_index(self) -> torch.Tensor:
        return self.adj.edge_index


def typed_edges(edge_index: Any, edge_type: Any, num_relations: int, layer: str) -> TypedEdges:
    """The edges and their types of a relational layer's `forward(x, edge_index, edge_type)`."""
    adj = inputs.adjacency(edge_index)
    if adj.layout == inputs.Layout.TORCH_SPARSE:
        raise ArgumentError(
            f"{layer}: a torch.sparse adjacency is not supported (its values would be edge weights): pass "
            "edge_index with edge_type, or a SparseTensor whose values are the edge types (as PyG)"
        )
    if adj.sparse_tensor:
        if edge_type is not None:
            raise ArgumentError(f"{layer}: a SparseTensor's values are the edge types: pass no edge_type with one")
        edge_type = adj.values
        if edge_type is None:
            raise ArgumentError(f"{layer}: the SparseTensor has no values: they must be the edge types")
        adj = inputs.Adjacency(adj.edge_index, None, adj.size, adj.layout, adj.given, adj.block)
    if edge_type is None:
        raise ArgumentError(f"{layer}: forward needs edge_type (one relation type per edge)")
    if not isinstance(edge_type, torch.Tensor):
        raise ArgumentError(f"{layer}: edge_type must be a tensor, got {type(edge_type).__name__}")
    if edge_type.dtype.is_floating_point or edge_type.dtype.is_complex or edge_type.dtype == torch.bool:
        raise ArgumentError(f"{layer}: edge_type holds relation types: an integer tensor, got {edge_type.dtype}")
    num_edges = adj.edge_index.shape[1]
    if edge_type.dim() != 1 or edge_type.shape[0] != num_edges:
        raise ArgumentError(f"{layer}: edge_type must have shape [E] = [{num_edges}], got {tuple(edge_type.shape)}")
    return TypedEdges(adj, edge_type)


def check_relations(num_relations: Any, layer: str) -> int:
    if isinstance(num_relations, bool) or not isinstance(num_relations, int) or num_relations < 1:
        raise ArgumentError(f"{layer}: num_relations must be a positive integer, got {num_relations!r}")
    return num_relations


def check_decomposition(num_bases: Any, num_blocks: Any, layer: str) -> None:
    """PyG's rule: a basis or a block-diagonal decomposition, not both; each a positive count."""
    if num_bases is not None and num_blocks is not None:
        raise ArgumentError(
            f"{layer}: Can not apply both basis-decomposition and block-diagonal-decomposition at the same time."
        )
    for what, value in (("num_bases", num_bases), ("num_blocks", num_blocks)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ArgumentError(f"{layer}: {what} must be a positive integer or None, got {value!r}")


@dataclass(frozen=True)
class PairGraph:
    """The (destination, relation) pairs of a typed graph as destinations (see the module).

    Pairs are numbered by destination, then relation; edge ids are the typed
    graph's (the same columns, only the destination replaced)."""

    #: `[2, E]`: row 0 the sources, row 1 each edge's pair.
    edge_index: torch.Tensor
    #: `[P]`: each pair's destination (sorted) and relation.
    vertex: torch.Tensor
    relation: torch.Tensor
    #: `[2, P]`: an edge from each pair to its destination (edge id = pair id; its type the pair's relation).
    to_destinations: torch.Tensor

    @property
    def num_pairs(self) -> int:
        return int(self.vertex.shape[0])


def derived_with_types(edge_index: torch.Tensor, edge_type: torch.Tensor, key: Any, make: Any) -> Any:
    """`make()`, kept with edge_index's graphs (`graphs.derived`) and made again when the types
    are another tensor or were edited in place (other types on the same edges)."""

    def made() -> tuple[weakref.ref, tuple, Any]:
        return weakref.ref(edge_type), graphs.state_of(edge_type), make()

    ref, state, value = graphs.derived(edge_index, key, made)
    if ref() is not edge_type or state != graphs.state_of(edge_type):
        ref, state, value = graphs.replace_derived(edge_index, key, made())
    return value


@untraced("the number of (destination, relation) pairs depends on the data")
def pair_graph(edges: TypedEdges, num_relations: int) -> PairGraph:
    """The pair graph of `edges`, made once per (edge_index, edge_type) while neither changes.

    Its size depends on the data: under torch.compile it is a graph break (as PyG's masks per relation)."""
    edge_index, edge_type = edges.edge_index, edges.edge_type

    def make() -> PairGraph:
        dst = edge_index[1].to(torch.int64)
        rel = edge_type.to(torch.int64)
        codes, pair = torch.unique(dst * num_relations + rel, return_inverse=True)
        vertex = torch.div(codes, num_relations, rounding_mode="floor")
        return PairGraph(
            torch.stack([edge_index[0].to(torch.int64), pair.view(-1)]),
            vertex,
            codes % num_relations,
            torch.stack([torch.arange(codes.shape[0], device=codes.device), vertex]),
        )

    return cast(PairGraph, derived_with_types(edge_index, edge_type, ("nn.pair_graph", int(num_relations)), make))


__all__ = [
    "PairGraph",
    "TypedEdges",
    "check_decomposition",
    "check_relations",
    "derived_with_types",
    "pair_graph",
    "typed_edges",
]
