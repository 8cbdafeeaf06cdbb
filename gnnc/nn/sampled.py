"""Sampled mini-batch blocks, as the samplers people use produce them, for gnnc.nn's layers.

A *block* is one layer's share of a sampled batch: edges (local ids) from
`num_src` sources into `num_dst` destinations, the destinations being the
first `num_dst` sources. DGL's `NeighborSampler` blocks and PyG's sampled
subgraphs both number their vertices that way (seeds first, then each hop's
new vertices), so a layer given a block and one feature tensor `x` of
`num_src` rows reads `x[:num_dst]` as the destinations' features (DGL's
convention) and returns `num_dst` rows: the rows of the destinations in the
same layer run on the square graph of the `num_src` vertices.

    for conv, block in zip(model.convs, gnnc.nn.blocks(batch)):   # PyG batch or DGL blocks
        x = conv(x, block)

`blocks(...)` takes a PyG `NeighborLoader` batch (a `Data` with a relabelled
`edge_index` and `batch_size`; with `num_sampled_nodes` / `num_sampled_edges`
each layer's block is a slice of the edges, without them it is found from the
seeds), a list of DGL blocks, or a list of `(edge_index, size)` pairs or PyG
`NeighborSampler` adjs `(edge_index, e_id, size)`. A layer also takes one such
block directly as its `edge_index` argument.

A block's edge_index is one tensor for the whole step, so its gnnc graph is
built once and serves the forward and backward of every kernel on it
(`gnnc.torch.graphs`); a DGL block is turned into a Block once per block object.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gnnc.errors import ArgumentError


@dataclass(frozen=True)
class Block:
    """One layer's bipartite graph of a sampled batch: `edge_index` ([2, E], row 0 sources),
    `num_src` sources, `num_dst` destinations (the first `num_dst` sources)."""

    edge_index: torch.Tensor
    num_src: int
    num_dst: int

    def __post_init__(self) -> None:
        ei = self.edge_index
        if not isinstance(ei, torch.Tensor) or ei.dim() != 2 or ei.shape[0] != 2:
            shape = tuple(ei.shape) if isinstance(ei, torch.Tensor) else type(ei).__name__
            raise ArgumentError(f"a block's edge_index must be a [2, E] tensor, got {shape}")
        if ei.dtype not in (torch.int64, torch.int32):
            raise ArgumentError(f"a block's edge_index must hold int64 (or int32) ids, got {ei.dtype}")
        for what, n in (("num_src", self.num_src), ("num_dst", self.num_dst)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ArgumentError(f"a block's {what} must be a non-negative integer, got {n!r}")
        if self.num_dst > self.num_src:
            raise ArgumentError(
                f"a block's destinations are its first num_dst sources: num_dst = {self.num_dst} "
                f"> num_src = {self.num_src}"
            )

    @property
    def size(self) -> tuple[int, int]:
        """(num_src, num_dst), PyG's `size`."""
        return self.num_src, self.num_dst

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    def to(self, device: Any) -> Block:
        """The block with its edge_index on `device`."""
        return Block(self.edge_index.to(device), self.num_src, self.num_dst)

    def __repr__(self) -> str:
        return f"Block(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.num_edges})"


def _int(value: Any, what: str) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"{what} must be an integer, got {value!r}")
    return value


def _is_dgl_graph(obj: Any) -> bool:
    """A DGLGraph or DGLBlock, without importing dgl (optional)."""
    return type(obj).__name__ in ("DGLGraph", "DGLBlock") and hasattr(obj, "num_src_nodes")


#: Blocks made from DGL graphs, by graph object: a DGL block given to every layer of a
#: step (forward and backward) is converted once.
_FROM_DGL: weakref.WeakKeyDictionary[Any, Block] = weakref.WeakKeyDictionary()


def from_dgl(graph: Any) -> Block:
    """A DGL block (or homogeneous DGLGraph, a square block) as a Block, made once per object."""
    made = _FROM_DGL.get(graph)
    if made is not None:
        return made
    if len(graph.canonical_etypes) != 1:
        raise ArgumentError(
            f"a DGL block with {len(graph.canonical_etypes)} edge types: gnnc.nn's layers take homogeneous "
            "blocks (one edge type)"
        )
    src, dst = graph.edges(order="eid")
    made = Block(torch.stack([src, dst]).to(torch.int64), int(graph.num_src_nodes()), int(graph.num_dst_nodes()))
    _FROM_DGL[graph] = made
    return made


def as_block(obj: Any) -> Block | None:
    """`obj` as a Block if it is one: a Block, a DGL block, an `(edge_index, size)` pair or a PyG
    NeighborSampler adj `(edge_index, e_id, size)`; None for anything else."""
    if isinstance(obj, Block):
        return obj
    if _is_dgl_graph(obj):
        return from_dgl(obj)
    if isinstance(obj, tuple) and len(obj) in (2, 3) and isinstance(obj[0], torch.Tensor):
        size = obj[-1]
        if isinstance(size, (tuple, list, torch.Size)) and len(size) == 2:
            return Block(obj[0], _int(size[0], "size[0] (num_src)"), _int(size[1], "size[1] (num_dst)"))
    return None


def blocks(sampled: Any, num_layers: int | None = None) -> list[Block]:
    """The blocks of a sampled batch, first layer first (see the module docstring).

    `sampled`: a PyG batch (`edge_index`, `batch_size`, optionally
    `num_sampled_nodes` / `num_sampled_edges`), a list of DGL blocks, or a
    list of `(edge_index, size)` / `(edge_index, e_id, size)`. `num_layers`
    is needed for a PyG batch without `num_sampled_edges`, and checked
    otherwise.
    """
    if isinstance(sampled, (list, tuple)) and not _is_pair(sampled):
        made = []
        for i, item in enumerate(sampled):
            b = as_block(item)
            if b is None:
                raise ArgumentError(
                    f"blocks: item {i} is a {type(item).__name__}, not a DGL block, an (edge_index, size) pair "
                    "or an (edge_index, e_id, size) adj"
                )
            made.append(b)
        _check_layers(len(made), num_layers)
        return made
    if hasattr(sampled, "edge_index") and hasattr(sampled, "batch_size"):
        return _from_pyg(sampled, num_layers)
    raise ArgumentError(
        f"blocks: expected a PyG NeighborLoader batch (a Data with edge_index and batch_size), a list of DGL "
        f"blocks or a list of (edge_index, size) pairs, got {type(sampled).__name__}"
    )


def _is_pair(obj: Sequence) -> bool:
    """One (edge_index, size) pair or adj, rather than a list of them."""
    return isinstance(obj, tuple) and len(obj) in (2, 3) and isinstance(obj[0], torch.Tensor)


def _check_layers(found: int, num_layers: int | None) -> None:
    if num_layers is not None and num_layers != found:
        raise ArgumentError(f"blocks: num_layers={num_layers}, but the batch was sampled for {found} layers")


def _from_pyg(batch: Any, num_layers: int | None) -> list[Block]:
    """A PyG sampled subgraph's blocks: seeds first, each hop's vertices after the previous hop's.

    With `num_sampled_nodes` [n0, n1, ..., nL] and `num_sampled_edges`
    [e1, ..., eL] (PyG's sampler, hop by hop), layer i of L has the first
    n0 + ... + n(L-i) vertices as destinations, one hop more as sources, and
    the first e1 + ... + e(L-i) edges (PyG's `trim_to_layer` slices). Without
    them, each layer's destinations are the previous layer's sources, starting
    from the `batch_size` seeds, and its edges those into them.
    """
    edge_index = batch.edge_index
    if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ArgumentError("blocks: the batch's edge_index must be a [2, E] tensor")
    num_nodes = _int(batch.num_nodes, "the batch's num_nodes")
    seeds = _int(batch.batch_size, "the batch's batch_size")
    nodes = getattr(batch, "num_sampled_nodes", None)
    edges = getattr(batch, "num_sampled_edges", None)
    if nodes is not None and edges is not None:
        nodes = [_int(n, "num_sampled_nodes") for n in nodes]
        edges = [_int(e, "num_sampled_edges") for e in edges]
        if len(nodes) != len(edges) + 1 or nodes[0] != seeds:
            raise ArgumentError(
                f"blocks: num_sampled_nodes {nodes} and num_sampled_edges {edges} are not PyG's hops "
                f"(one more node count than edge counts, the first the batch_size {seeds})"
            )
        _check_layers(len(edges), num_layers)
        layers = len(edges)
        made = []
        for i in range(layers):
            hops = layers - i
            e = sum(edges[:hops])
            made.append(Block(edge_index[:, :e], sum(nodes[: hops + 1]), sum(nodes[:hops])))
        return made
    if num_layers is None:
        raise ArgumentError(
            "blocks: a batch without num_sampled_nodes / num_sampled_edges needs num_layers= to find its blocks"
        )
    dst = edge_index[1]
    made = []
    num_dst = seeds
    for _ in range(num_layers):
        keep = dst < num_dst
        kept = edge_index[:, keep]
        num_src = max(num_dst, int(kept[0].max()) + 1) if kept.shape[1] else num_dst
        if num_src > num_nodes:
            raise ArgumentError(f"blocks: the batch's edge_index names vertex {num_src - 1} of {num_nodes}")
        made.append(Block(kept, num_src, num_dst))
        num_dst = num_src
    return made[::-1]


__all__ = ["Block", "as_block", "blocks", "from_dgl"]
