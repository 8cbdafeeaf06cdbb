"""`GatedGraphConv`: PyG's gated graph sequence layer (Li et al.): num_layers rounds of
message passing, each one gnnc kernel, with a GRU cell between them.

Round i: `m = x @ weight[i]` (torch), `m = aggr(w[e] * m[u])` (the
aggregation kernel of `conv/aggregate.py`, weighted when `edge_weight` or a
sparse adjacency's values are given), `x = rnn(m, x)` (torch's GRUCell).
Features narrower than `out_channels` are padded with zeros first, as in PyG.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.aggregate import aggregate, aggregation, kernels
from gnnc.nn.conv.sg_conv import check_out_channels, check_steps, square_graph
from gnnc.nn.init import uniform
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "GatedGraphConv"


class GatedGraphConv(WarmUp, nn.Module):
    """PyG's `GatedGraphConv(out_channels, num_layers, aggr="add", bias=True, **kwargs)`.

    `forward(x, edge_index, edge_weight=None)`; x has at most `out_channels`
    columns. Parameters `weight` `[num_layers, out_channels, out_channels]`
    and `rnn` (a `torch.nn.GRUCell`), PyG's. aggr: "add"/"sum", "mean",
    "max", "min".
    """

    def __init__(self, out_channels: int, num_layers: int, aggr: str = "add", bias: bool = True, **kwargs: Any):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        self.out_channels = check_out_channels(LAYER, out_channels)
        self.num_layers = check_steps(LAYER, num_layers)
        self.aggr = aggr
        self._kernels = kernels(aggregation(aggr, LAYER))
        self.weight = nn.Parameter(torch.empty(num_layers, out_channels, out_channels))
        self.rnn = nn.GRUCell(out_channels, out_channels, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        uniform(self.out_channels, self.weight)
        self.rnn.reset_parameters()

    def forward(self, x: torch.Tensor, edge_index: Any, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        x, adj = square_graph(LAYER, x, edge_index)
        if x.shape[-1] > self.out_channels:
            raise ArgumentError(
                f"{LAYER}: x has {x.shape[-1]} channels, more than out_channels={self.out_channels} "
                "(PyG's rule: narrower inputs are padded with zeros)"
            )
        if x.shape[-1] < self.out_channels:
            x = torch.cat([x, x.new_zeros(x.shape[0], self.out_channels - x.shape[-1])], dim=1)
        n = x.shape[0]
        weight = inputs.edge_values(adj, edge_weight)
        for i in range(self.num_layers):
            m = aggregate(self._kernels, adj.index, x @ self.weight[i], (n, n), weight)
            x = self.rnn(m, x)
        return x

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.out_channels}, num_layers={self.num_layers})"


__all__ = ["GatedGraphConv"]
