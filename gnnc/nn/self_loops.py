"""Self loops as per-vertex weights, so that adding them never rebuilds the graph.

PyG's `add_remaining_self_loops` drops a graph's self loops and appends one
loop per vertex, weighted by the vertex's existing loop weight or else by
`fill_value`; `add_self_loops` (its path for torch.sparse adjacencies) keeps
the existing loops and appends one more per vertex. Appending edges makes a
new edge_index on every call, hence a new gnnc graph (a sort) per call.
gnnc.nn keeps the user's edges instead and passes the loops as a vertex
tensor `loop[v]` beside edge weights in which existing loops are zeroed
where PyG drops them. The kernels add `loop[v] * x[v]`: the same sum.

With duplicate self loops on one vertex PyG keeps whichever its index_put
writes last, which on the CPU is the last in edge id order: so does gnnc.
"""

from __future__ import annotations

import torch


def remaining_loops(
    edge_index: torch.Tensor, edge_weight: torch.Tensor | None, num_nodes: int, fill_value: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge weights with self loops zeroed, loop weight per vertex): `add_remaining_self_loops`."""
    src, dst = edge_index[0], edge_index[1]
    is_loop = src == dst
    weight = torch.ones(src.shape[0], dtype=dtype) if edge_weight is None else edge_weight
    kept = torch.where(is_loop, torch.zeros((), dtype=weight.dtype), weight)
    ids = torch.arange(src.shape[0], dtype=torch.int64)
    last = torch.full((num_nodes,), -1, dtype=torch.int64)
    last = last.scatter_reduce(0, dst, torch.where(is_loop, ids, -1), "amax")
    fill = torch.full((), fill_value, dtype=weight.dtype)
    loop = torch.where(last >= 0, weight[last.clamp(min=0)] if src.shape[0] else fill, fill)
    return kept, loop


def appended_loops(
    edge_weight: torch.Tensor | None, num_edges: int, num_nodes: int, fill_value: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge weights, loop weight per vertex): `add_self_loops`, existing loops kept."""
    weight = torch.ones(num_edges, dtype=dtype) if edge_weight is None else edge_weight
    return weight, torch.full((num_nodes,), fill_value, dtype=weight.dtype)


def no_loops(
    edge_weight: torch.Tensor | None, num_edges: int, num_nodes: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge weights, zero loop weights): no self loops added."""
    return appended_loops(edge_weight, num_edges, num_nodes, 0.0, dtype)


__all__ = ["appended_loops", "no_loops", "remaining_loops"]
