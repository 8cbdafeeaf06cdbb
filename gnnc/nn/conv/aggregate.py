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
from gnnc.nn.kernels import AGGREGATIONS, kernel


def aggregation(aggr: Any, layer: str) -> str:
    """The language's name of PyG aggregation `aggr` ('add' is 'sum'), or a clear error."""
    if not isinstance(aggr, str) or aggr not in AGGREGATIONS:
        raise ArgumentError(
            f"{layer}: aggr={aggr!r} is not supported by gnnc.nn; use one of {', '.join(map(repr, AGGREGATIONS))}"
        )
    return AGGREGATIONS[aggr]


def aggregate(
    aggr: str, edge_index: torch.Tensor, x: torch.Tensor, size: tuple, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """`aggr` over in-edges of `x[u]` (times `weight[e]`): a `[num_dst, F]` tensor."""
    if weight is None:
        source = f"kernel aggregate_{aggr}(x: f32[V, F]) -> f32[V, F] {{ out[v] = {aggr}(x[u]) }}"
        return kernel(source, f"aggregate_{aggr}")(edge_index, x, size=size)
    source = (
        f"kernel aggregate_{aggr}_weighted(x: f32[V, F], w: f32[E]) -> f32[V, F] {{ out[v] = {aggr}(w[e] * x[u]) }}"
    )
    return kernel(source, f"aggregate_{aggr}_weighted")(edge_index, x, weight.to(x.dtype), size=size)


#: Aggregations that commute with a linear map (aggregate then transform = transform then aggregate).
LINEAR = ("sum", "mean")


__all__ = ["LINEAR", "aggregate", "aggregation"]
