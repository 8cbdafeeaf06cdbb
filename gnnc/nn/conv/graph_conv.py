"""`GraphConv`: PyG's higher-order GNN layer (Morris et al.); its aggregation is one gnnc kernel.

`out = lin_rel(aggr(w[e] * x[u])) + lin_root(x_dst)`, the aggregation as in
`conv/aggregate.py` (weighted when `edge_weight` or a sparse adjacency's
values are given); `lin_rel` runs first where the aggregation is linear and
`aggregate.transform_first` says so (fewer flops, or no aggregation kept);
otherwise a large aggregation may be made again in the backward instead of
kept (`aggregate.recompute_aggregation`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.nn import inputs, static_graphs
from gnnc.nn.conv.aggregate import aggregate, aggregation, kernels, linear_of_aggregate, transform_first
from gnnc.nn.linear import Linear, add_bias, add_product
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "GraphConv"


class GraphConv(WarmUp, nn.Module):
    """PyG's `GraphConv(in_channels, out_channels, aggr="add", bias=True, **kwargs)`.

    `forward(x, edge_index, edge_weight=None, size=None)`; a sparse
    adjacency's values are the weights. Parameters `lin_rel` (with the bias)
    and `lin_root` (no bias); `in_channels=-1` sizes them by the first input.
    """

    def __init__(
        self, in_channels: int | tuple[int, int], out_channels: int, aggr: str = "add", bias: bool = True, **kwargs: Any
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.aggr = aggr
        self._aggr = aggregation(aggr, LAYER)
        self._kernels = kernels(self._aggr)
        src, dst = inputs.channels(in_channels, LAYER)
        self.lin_rel = Linear(src, out_channels, bias=bias)
        self.lin_root = Linear(dst, out_channels, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_rel.reset_parameters()
        self.lin_root.reset_parameters()

    def forward(
        self, x: Any, edge_index: Any, edge_weight: torch.Tensor | None = None, size: Any = None
    ) -> torch.Tensor:
        if static_graphs.batched(x):
            return static_graphs.call(
                LAYER, self.forward, x, edge_index, size, edge_weight=edge_weight, node_dim=self._node_dim
            )
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        sizes = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        weight = inputs.edge_values(adj, edge_weight)
        if transform_first(self._aggr, self.lin_rel, self.out_channels, x_src):
            out = aggregate(self._kernels, adj.index, F.linear(x_src, self.lin_rel.weight), sizes, weight)
            out = add_bias(out, self.lin_rel.bias)
        else:
            out = linear_of_aggregate(self._kernels, adj.index, x_src, sizes, weight, self.lin_rel)
        if x_dst is not None:
            out = add_product(out, self.lin_root, x_dst)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


__all__ = ["GraphConv"]
