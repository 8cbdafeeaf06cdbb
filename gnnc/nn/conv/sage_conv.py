"""`SAGEConv`: PyG's GraphSAGE layer; its aggregation is one gnnc kernel (`conv/aggregate.py`).

For "mean" and "sum", `lin_l` is applied before the aggregation when it
shrinks the features (the aggregation is linear: the same result, fewer
flops), or keeps their width for an input that needs a gradient (no
aggregation kept for the backward: `aggregate.transform_first`); "max" and
"min" aggregate the (projected) features themselves. A first layer that
aggregates first makes a large aggregation again in the backward rather
than keep it (`aggregate.recompute_aggregation`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs, static_graphs
from gnnc.nn.conv.aggregate import aggregate, aggregation, kernels, linear_of_aggregate, sparse_weights, transform_first
from gnnc.nn.linear import Linear, add_bias, add_product
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "SAGEConv"


class SAGEConv(WarmUp, nn.Module):
    """PyG's `SAGEConv(in_channels, out_channels, aggr="mean", normalize, root_weight, project, bias, **kwargs)`.

    `forward(x, edge_index, size=None)`; x may be a pair `(x_src, x_dst)`
    (x_dst None: no root term). Parameters `lin_l` (with the bias), `lin_r`
    (no bias) and, with `project=True`, `lin`. aggr: "mean", "sum"/"add",
    "max", "min" (PyG's lists and Aggregation modules are not supported).
    `in_channels=-1` (or -1 in a pair) sizes the layer by the first input.
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        aggr: str = "mean",
        normalize: bool = False,
        root_weight: bool = True,
        project: bool = False,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.aggr = aggr
        self._aggr = aggregation(aggr, LAYER)
        self._kernels = kernels(self._aggr)
        self.normalize, self.root_weight, self.project = normalize, root_weight, project
        src, dst = inputs.channels(in_channels, LAYER)
        if project:
            if src <= 0:
                raise ArgumentError(f"'{LAYER}' does not support lazy initialization with `project=True`")
            self.lin = Linear(src, src, bias=True)
        self.lin_l = Linear(src, out_channels, bias=bias)
        if root_weight:
            self.lin_r = Linear(dst, out_channels, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # PyG's order and condition: lin_r only while root_weight is on (DirGNNConv's copies turn it off)
        if self.project and hasattr(self, "lin"):
            self.lin.reset_parameters()
        self.lin_l.reset_parameters()
        if self.root_weight and hasattr(self, "lin_r"):
            self.lin_r.reset_parameters()

    def forward(self, x: Any, edge_index: Any, size: Any = None) -> torch.Tensor:
        if static_graphs.batched(x):
            return static_graphs.call(LAYER, self.forward, x, edge_index, size, node_dim=self._node_dim)
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        sizes = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        weight = sparse_weights(adj)
        if self.project:
            x_src = self.lin(x_src).relu()
        if transform_first(self._aggr, self.lin_l, self.out_channels, x_src):
            out = aggregate(self._kernels, adj.index, F.linear(x_src, self.lin_l.weight), sizes, weight)
            out = add_bias(out, self.lin_l.bias)
        else:
            out = linear_of_aggregate(self._kernels, adj.index, x_src, sizes, weight, self.lin_l)
        if self.root_weight and x_dst is not None:
            out = add_product(out, self.lin_r, x_dst)
        if self.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, aggr={self.aggr})"


__all__ = ["SAGEConv"]
