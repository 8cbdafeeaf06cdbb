"""Static graphs: features with leading batch dimensions on one edge_index (PyG's `node_dim=-2`).

PyG's GCNConv, SAGEConv, GINConv, GINEConv, GraphConv, APPNP, SGConv and TAGConv take `x` of
`[*batch, num_nodes, channels]` (or a pair of such) with one `[2, E]`
edge_index that every graph of the batch shares, as spatio-temporal models
do (one road network, a batch of time steps). gnnc runs such a call as one
graph of `batch x num_nodes` vertices: the edge_index repeated once per
graph, its ids offset by the graph's first vertex (a block-diagonal graph).
Every per-vertex and per-edge computation is the same, degrees and
normalisation included, and the layer's kernels see one call; the dense
transforms run on the flattened rows as PyG runs them on the batched ones.

The repeated edge_index is made (and its ids checked against the graph's
sizes: an id past them would land in the next graph's vertices) once per
edge_index, batch shape and sizes, and kept with the edge_index as the
graph cache keeps its graphs (`derived.static_edges`: dropped with it,
made again after an in-place edit), so the gnnc graph behind it is built
once too. Under torch.compile it comes from a custom op, a copy each call
that shares the cached tensor's graphs (`graphs.share_conversions`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from gnnc.errors import ArgumentError
from gnnc.nn import derived, inputs
from gnnc.torch import graphs


def batched(x: Any) -> bool:
    """Whether `x` (a tensor or a pair) has leading batch dimensions: a static-graph call."""
    first = x[0] if isinstance(x, (tuple, list)) and len(x) == 2 else x
    return isinstance(first, torch.Tensor) and first.dim() > 2


def call(
    layer: str,
    forward: Callable[..., torch.Tensor],
    x: Any,
    edge_index: Any,
    size: Any = None,
    takes_size: bool = True,
    node_dim: int = -2,
    **edge_values: torch.Tensor | None,
) -> torch.Tensor:
    """`forward(x, edge_index, ..., size=...)` on a static-graph batch: x flattened to one row per
    vertex of every graph, the edge_index repeated with offsets, per-edge values (`edge_weight`
    [E], `edge_attr` [E, D]) repeated per graph (`edge_attr` may also be each graph's own,
    [*batch, E, D]); the result `[*batch, num_dst, channels]`."""
    if (
        not isinstance(edge_index, torch.Tensor)
        or edge_index.layout != torch.strided
        # a gnnc.Graph's handle: its values are not the edges (never a compiled graph's input)
        or (not torch.compiler.is_compiling() and graphs.graph_behind(edge_index) is not None)
    ):
        raise ArgumentError(
            f"{layer}: a static graph (x with leading batch dimensions) takes an edge_index tensor "
            f"shared by the batch, got {type(edge_index).__name__}"
            + ("" if not isinstance(edge_index, torch.Tensor) else f" ({edge_index.layout})")
        )
    if node_dim != -2:
        # PyG's node_dim=0 reads x of [num_nodes, *, channels]: another layout, refused rather than misread
        raise ArgumentError(
            f"{layer}: features of more than two axes are static graphs, [*batch, num_nodes, channels], "
            f"with node_dim=-2 (the default) only; this layer was built with node_dim={node_dim}"
        )
    pair = isinstance(x, (tuple, list))
    x_src, x_dst = (x[0], x[1]) if pair else (x, None)
    if pair and x_dst is not None and (not isinstance(x_dst, torch.Tensor) or x_dst.shape[:-2] != x_src.shape[:-2]):
        shape = tuple(x_dst.shape) if isinstance(x_dst, torch.Tensor) else type(x_dst).__name__
        raise ArgumentError(
            f"{layer}: x[1] must have x[0]'s batch dimensions {tuple(x_src.shape[:-2])}, got shape {shape}"
        )
    batch = tuple(x_src.shape[:-2])
    count = math.prod(batch)
    num_src = x_src.shape[-2]
    if size is not None:
        if not isinstance(size, (tuple, list, torch.Size)) or len(size) != 2:
            raise ArgumentError(f"size must be a pair (num_src, num_dst), got {size!r}")
        if size[0] is not None and size[0] != num_src:
            raise ArgumentError(f"x_src has {num_src} rows per graph but size gives {size[0]} sources")
        if size[1] is not None and x_dst is not None and size[1] != x_dst.shape[-2]:
            raise ArgumentError(f"x_dst has {x_dst.shape[-2]} rows per graph but size gives {size[1]} destinations")
    num_dst = (
        x_dst.shape[-2] if x_dst is not None else (size[1] if size is not None and size[1] is not None else num_src)
    )
    inputs.adjacency(edge_index)  # its shape and id type, checked as every layer checks them
    num_edges = edge_index.shape[1]
    repeated = derived.static_edges(edge_index, count, num_src, num_dst)
    flat_src = x_src.reshape(count * num_src, x_src.shape[-1])
    if pair:
        flat_dst = None if x_dst is None else x_dst.reshape(count * num_dst, x_dst.shape[-1])
        flat: Any = (flat_src, flat_dst)
    else:
        flat = flat_src
    values = {name: _repeat_edge_values(layer, name, v, num_edges, batch) for name, v in edge_values.items()}
    if takes_size:
        values["size"] = (count * num_src, count * num_dst) if (pair or size is not None) else None
    out = forward(flat, repeated, **values)
    return out.reshape(*batch, num_dst, *out.shape[1:])


def _repeat_edge_values(layer: str, name: str, value: Any, num_edges: int, batch: tuple) -> Any:
    """A per-edge tensor ([E] or [E, D]) repeated for each graph of the batch, or edge features of
    each graph (`edge_attr` of [*batch, E, D], as PyG's message broadcasts them) in the repeated
    edge_index's order; None as it is."""
    if value is None:
        return None
    count = math.prod(batch)
    if isinstance(value, torch.Tensor) and value.dim() in (1, 2) and value.shape[0] == num_edges:
        return value.repeat(count, *([1] * (value.dim() - 1)))
    if (
        name == "edge_attr"
        and isinstance(value, torch.Tensor)
        and value.dim() == len(batch) + 2
        and tuple(value.shape[:-1]) == (*batch, num_edges)
    ):
        return value.reshape(count * num_edges, value.shape[-1])
    shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
    per_graph = f" or [*batch, E, D] = [{', '.join(map(str, batch))}, {num_edges}, D]" if name == "edge_attr" else ""
    raise ArgumentError(
        f"{layer}: on a static graph {name} is per edge of the shared edge_index ([E] or [E, D] with "
        f"E = {num_edges}{per_graph}), got {shape}"
    )


__all__ = ["batched", "call"]
