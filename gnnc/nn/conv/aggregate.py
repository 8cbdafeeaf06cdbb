"""The neighbourhood aggregation kernels shared by SAGEConv, GraphConv and GINConv.

    kernel aggregate_mean(x: f32[V, F]) -> f32[V, F] { out[v] = mean(x[u]) }
    kernel aggregate_mean_weighted(x: f32[V, F], w: f32[E]) -> f32[V, F] { out[v] = mean(w[e] * x[u]) }

and likewise for sum, max and min. An empty aggregation is 0 (as PyG's
scatter); `mean` divides by the in-degree, weights or not (as PyG's
`propagate` with `aggr="mean"`).
"""

from __future__ import annotations

from typing import Any

import torch

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.kernels import AGGREGATIONS, kernel
from gnnc.torch.kernels import Kernel


def aggregation(aggr: Any, layer: str) -> str:
    """The language's name of PyG aggregation `aggr` ('add' is 'sum'), or a clear error."""
    if not isinstance(aggr, str) or aggr not in AGGREGATIONS:
        raise ArgumentError(
            f"{layer}: aggr={aggr!r} is not supported by gnnc.nn; use one of {', '.join(map(repr, AGGREGATIONS))}"
        )
    return AGGREGATIONS[aggr]


def kernels(aggr: str) -> tuple[Kernel, Kernel]:
    """The (unweighted, weighted) aggregation kernels of `aggr` (a language name)."""
    plain = f"kernel aggregate_{aggr}(x: f32[V, F]) -> f32[V, F] {{ out[v] = {aggr}(x[u]) }}"
    weighted = (
        f"kernel aggregate_{aggr}_weighted(x: f32[V, F], w: f32[E]) -> f32[V, F] {{ out[v] = {aggr}(w[e] * x[u]) }}"
    )
    return kernel(plain, f"aggregate_{aggr}"), kernel(weighted, f"aggregate_{aggr}_weighted")


def aggregate(
    pair: tuple[Kernel, Kernel], edge_index: Any, x: torch.Tensor, size: tuple, weight: Any = None
) -> torch.Tensor:
    """The aggregation over in-edges of `x[u]` (times `weight[e]`): a `[num_dst, F]` tensor.
    `edge_index` is one, or a `gnnc.Graph` (`inputs.Adjacency.index`)."""
    if weight is None:
        return pair[0](edge_index, x, size=size)
    return pair[1](edge_index, x, weight.to(x.dtype), size=size)


def sparse_weights(adj: inputs.Adjacency) -> torch.Tensor | None:
    """The edge weights of SAGEConv's and GINConv's aggregation, as PyG's `spmm`: a torch.sparse
    adjacency's values; none for a SparseTensor (PyG drops its values: `set_value(None)`)."""
    return adj.values if adj.layout == inputs.Layout.TORCH_SPARSE else None


#: Aggregations that commute with a linear map (aggregate then transform = transform then aggregate).
LINEAR = ("sum", "mean")


def transform_first(aggr: str, lin: Any, out_channels: int, x: torch.Tensor) -> bool:
    """Whether `lin(aggregate(x))` runs as `aggregate(x @ lin.weight^T) + lin.bias` (the same maths
    for a LINEAR `aggr`): where it narrows the features (fewer flops), and at equal width where x
    needs a gradient: the backward then aggregates that width either way, and the aggregation's
    output, which lin's weight gradient would keep, is never made (a [V, F] tensor less through
    the backward; the transform's input is kept, x, which exists anyway). A first layer at equal
    width (x needs no gradient) aggregates first: the other order would add an aggregation to its
    backward, for the weight gradient."""
    if aggr not in LINEAR or lin.lazy:
        return False
    width = x.shape[-1]
    return out_channels < width or (out_channels == width and x.requires_grad and torch.is_grad_enabled())


__all__ = ["LINEAR", "aggregate", "aggregation", "kernels", "sparse_weights", "transform_first"]
