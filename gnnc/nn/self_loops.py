"""Self loops as per-vertex weights, so that adding them never rebuilds the graph.

PyG's `add_remaining_self_loops` drops a graph's self loops and appends one
loop per vertex, weighted by the vertex's existing loop weight or else by
`fill_value`; `add_self_loops` (its path for torch.sparse adjacencies) keeps
the existing loops and appends one more per vertex; torch_sparse's `fill_diag`
(its path for a SparseTensor) drops the existing loops, weights and all, and
gives every vertex a loop of `fill_value`. Appending edges makes a
new edge_index on every call, hence a new gnnc graph (a sort) per call.
gnnc.nn keeps the user's edges instead and passes the loops as a vertex
tensor `loop[v]` beside edge weights in which existing loops are zeroed
where PyG drops them. The kernels add `loop[v] * x[v]`: the same sum.

With duplicate self loops on one vertex PyG keeps whichever its index_put
writes last, which on the CPU is the last in edge id order: so does gnnc.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import torch

from gnnc.errors import ArgumentError


def remaining_loops(
    edge_index: torch.Tensor, edge_weight: torch.Tensor | None, num_nodes: int, fill_value: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge weights with self loops zeroed, loop weight per vertex): `add_remaining_self_loops`."""
    src, dst = edge_index[0], edge_index[1]
    device = edge_index.device
    is_loop = src == dst
    weight = torch.ones(src.shape[0], dtype=dtype, device=device) if edge_weight is None else edge_weight
    kept = torch.where(is_loop, torch.zeros((), dtype=weight.dtype, device=device), weight)
    ids = torch.arange(src.shape[0], dtype=torch.int64, device=device)
    last = torch.full((num_nodes,), -1, dtype=torch.int64, device=device)
    last = last.scatter_reduce(0, dst.to(torch.int64), torch.where(is_loop, ids, -1), "amax")
    fill = torch.full((), fill_value, dtype=weight.dtype, device=device)
    loop = torch.where(last >= 0, weight[last.clamp(min=0)] if src.shape[0] else fill, fill)
    return kept, loop


def unweighted_loops(
    edge_index: torch.Tensor, num_nodes: int, fill_value: float, dtype: torch.dtype, add_loops: bool = True
) -> torch.Tensor:
    """`[c, loop]` ([2, num_nodes]) of an unweighted edge_index for GCNConv's
    `gcn_conv_unweighted`, which sums over the edges that are not self loops
    (`self_loop(e)`), weighs v's own term by `loop[v]` and takes `c[v] + deg_in(v)` as
    v's degree: no per-edge weights.

    With `add_loops` (PyG's `add_remaining_self_loops`): `loop[v]` is 1 where the graph
    has a self loop at v and `fill_value` elsewhere, `c[v]` that less the count of v's own
    self-loop edges (PyG drops them for the one loop). Without, v's own loops stay edges
    like any other: `loop[v]` is their count and `c[v]` 0. The graph's loops never enter
    the sum, so a vertex with many of them cancels nothing (a kernel that summed them and
    subtracted their count lost a digit every 3x more loops: 6e-3 at 1,000)."""
    src, dst = edge_index[0], edge_index[1]
    own = torch.bincount(dst[src == dst].to(torch.int64), minlength=num_nodes)[:num_nodes]
    return _loops_of(own, fill_value, dtype, add_loops)


def _loops_of(own: torch.Tensor, fill_value: float, dtype: torch.dtype, add_loops: bool) -> torch.Tensor:
    """`[c, loop]` of `unweighted_loops` from the count of each vertex's own self-loop edges."""
    own = own.to(dtype)
    if not add_loops:
        return torch.stack([torch.zeros_like(own), own])
    one = torch.ones((), dtype=dtype, device=own.device)
    loop = torch.where(own > 0, one, torch.full_like(one, fill_value))
    return torch.stack([loop - own, loop])


def graph_loops(
    graph: Any, num_nodes: int, fill_value: float, dtype: torch.dtype, add_loops: bool = True
) -> torch.Tensor:
    """`unweighted_loops` of a `gnnc.Graph`'s edges, read from its in-CSR (no edge_index made),
    a million destinations at a time: no temporary of E entries."""
    if (graph.num_src, graph.num_dst) != (num_nodes, num_nodes):
        raise ArgumentError(
            f"GCNConv: the graph has (num_src, num_dst) = {(graph.num_src, graph.num_dst)}, x {num_nodes} rows"
        )
    own = np.zeros(num_nodes, dtype=np.int64)
    indptr, src = graph.in_indptr, graph.in_src
    step = 1 << 20
    for lo in range(0, num_nodes, step):
        hi = min(num_nodes, lo + step)
        counts = np.diff(indptr[lo : hi + 1])
        dst = np.repeat(np.arange(lo, hi, dtype=np.int64), counts)
        loops = dst[src[indptr[lo] : indptr[hi]] == dst]
        own[lo:hi] = np.bincount(loops - lo, minlength=hi - lo)
    return _loops_of(torch.from_numpy(own), fill_value, dtype, add_loops)


def replaced_loops(
    edge_index: torch.Tensor, edge_weight: torch.Tensor | None, num_nodes: int, fill_value: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge weights with self loops zeroed, `fill_value` per vertex): torch_sparse's `fill_diag`,
    PyG's self loops for a SparseTensor (its own loops dropped, their weights too)."""
    device = edge_index.device
    weight = torch.ones(edge_index.shape[1], dtype=dtype, device=device) if edge_weight is None else edge_weight
    kept = torch.where(edge_index[0] == edge_index[1], torch.zeros((), dtype=weight.dtype, device=device), weight)
    return kept, torch.full((num_nodes,), fill_value, dtype=weight.dtype, device=device)


def appended_loops(
    edge_weight: torch.Tensor | None,
    num_edges: int,
    num_nodes: int,
    fill_value: float,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge weights, loop weight per vertex): `add_self_loops`, existing loops kept."""
    weight = torch.ones(num_edges, dtype=dtype, device=device) if edge_weight is None else edge_weight
    return weight, torch.full((num_nodes,), fill_value, dtype=weight.dtype, device=device)


def no_loops(
    edge_weight: torch.Tensor | None, num_edges: int, num_nodes: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge weights, zero loop weights): no self loops added."""
    return appended_loops(edge_weight, num_edges, num_nodes, 0.0, dtype, device)


def gcn_loops(
    adj: Any, weight: torch.Tensor | None, num_nodes: int, add_loops: bool, fill: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge weights, loop weight per vertex) of PyG's `gcn_norm` for each form of graph:
    an edge_index adds the remaining loops, a torch.sparse adjacency appends one per vertex,
    a SparseTensor replaces its own (`fill_diag`)."""
    edges = adj.edge_index
    if not add_loops:
        return no_loops(weight, edges.shape[1], num_nodes, dtype, edges.device)
    if adj.sparse_tensor:
        return replaced_loops(edges, weight, num_nodes, fill, dtype)
    if adj.sparse:
        return appended_loops(weight, edges.shape[1], num_nodes, fill, dtype, edges.device)
    return remaining_loops(edges, weight, num_nodes, fill, dtype)


class Order(enum.StrEnum):
    """Where PyG puts a graph's edges and its appended self loops (dropout masks follow it)."""

    #: An edge_index: the kept edges in their order, then the loops.
    APPENDED = "appended"
    #: A rebuilt SparseTensor (or torch.sparse adjacency): merged in row-major order of adj_t.
    ROW_MAJOR = "row-major"
    #: A coalesced torch.sparse adjacency: row-major, equal entries (a loop the graph had
    #: and the loop appended to it) merged into one.
    COALESCED = "coalesced"


def pyg_ranks(
    edge_index: torch.Tensor, keep: torch.Tensor, count: Any, num_src: Any, num_dst: Any, order: Order
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rank of each edge, rank of each appended loop i < count) in PyG's order of the entries.

    `keep` (bool, [E]) marks the edges PyG keeps; the others rank after every
    kept entry (their rank is never used). Shapes never depend on the data.
    """
    device = keep.device
    ids = torch.arange(count, device=device)
    if order == Order.APPENDED:
        edge_rank = (torch.cumsum(keep.to(torch.int64), 0) - 1).clamp(min=0)
        return edge_rank, keep.sum() + ids
    num_edges = edge_index.shape[1]
    src, dst = edge_index[0].to(torch.int64), edge_index[1].to(torch.int64)
    past = num_dst * num_src + torch.arange(num_edges, device=device)
    keys = torch.cat([torch.where(keep, dst * num_src + src, past), ids * num_src + ids])
    if order == Order.COALESCED:
        rank = torch.unique(keys, sorted=True, return_inverse=True)[1]
    else:
        rank = torch.argsort(torch.argsort(keys, stable=True))
    return rank[:num_edges], rank[num_edges:]


__all__ = [
    "Order",
    "appended_loops",
    "gcn_loops",
    "graph_loops",
    "no_loops",
    "pyg_ranks",
    "remaining_loops",
    "replaced_loops",
    "unweighted_loops",
]
