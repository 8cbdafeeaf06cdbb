"""`EdgeConv`: PyG's edge convolution (DGCNN, Wang et al.); its message passing is gnnc kernels.

PyG's message is `nn([x_i, x_j - x_i])` per edge. Where `nn` begins with
a Linear `W = [W_a, W_b]` (`gnnc.nn.edge_mlp.split`), the product splits:
`[x_i, x_j - x_i] W^T = x_i (W_a - W_b)^T + x_j W_b^T`, so torch computes
`a = x_dst (W_a - W_b)^T + b` and `c = x_src W_b^T` per vertex, and a bare
Linear is one kernel:

    kernel edge_mlp_max(c: f32[V, H], a: f32[V, H]) -> f32[V, H] {
        out[v] = max(c[u] + a[v])
    }

A longer `nn` gets the messages `c[u] + a[v]` from an edge kernel, the rest
of `nn` in torch, then `out[v] = max(m[e])`; an `nn` that does not begin
with a Linear runs in torch on PyG's concatenation, and only the
aggregation is gnnc's. Likewise for mean, sum ("add") and min.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import edge_mlp, inputs
from gnnc.nn.conv.aggregate import aggregation
from gnnc.nn.init import reset
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "EdgeConv"


class EdgeConv(WarmUp, nn.Module):
    """PyG's `EdgeConv(nn, aggr="max", **kwargs)`: `aggr` over in-edges of `nn([x_i, x_j - x_i])`.

    `forward(x, edge_index)`; x may be a pair `(x_src, x_dst)` of equal
    widths. Parameters are `nn`'s (`nn.*`), reset as PyG does. aggr: "max",
    "mean", "sum"/"add" or "min".
    """

    def __init__(self, nn: Any, aggr: str = "max", **kwargs: Any):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        if not callable(nn):
            raise ArgumentError(f"{LAYER}: nn must be a module (or a callable), got {type(nn).__name__}")
        self.nn = nn
        self.aggr = aggr
        self._kernels = edge_mlp.kernels(aggregation(aggr, LAYER))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset(self.nn)

    def forward(self, x: Any, edge_index: Any) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        if x_dst is None:
            raise ArgumentError(f"{LAYER}: x[1] (the destinations' features) must be a tensor: x_i reads it")
        sizes = inputs.sizes(adj, x_src, x_dst, None, bipartite=not isinstance(x, torch.Tensor))
        width = x_src.shape[-1]
        if x_dst.shape[-1] != width:
            raise ArgumentError(
                f"{LAYER}: x_src and x_dst must have as many features (x_j - x_i), got {width} and {x_dst.shape[-1]}"
            )
        parts = edge_mlp.split(self.nn)
        if parts is None:
            src, dst = adj.edge_index
            x_i = x_dst.index_select(0, dst)
            messages = self.nn(torch.cat([x_i, x_src.index_select(0, src) - x_i], dim=-1))
            return self._kernels["aggregate"](adj.index, self._messages(messages), size=sizes)
        weight, bias = parts.weight, parts.bias
        if weight.shape[-1] != 2 * width:
            raise ArgumentError(
                f"{LAYER}: nn's first Linear takes {weight.shape[-1]} features, the messages [x_i, x_j - x_i] "
                f"have 2 x {width}"
            )
        w_dst, w_src = weight[:, :width], weight[:, width:]
        a = inputs.autocast_features(F.linear(x_dst, w_dst - w_src, bias))
        c = inputs.autocast_features(F.linear(x_src, w_src))
        return edge_mlp.propagate(self._kernels, adj.index, sizes, c, a, parts.rest, self._messages)

    def _messages(self, m: torch.Tensor) -> torch.Tensor:
        return inputs.check_features(m, LAYER, "nn's output")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(nn={self.nn})"


__all__ = ["EdgeConv"]
