"""`LEConv`: PyG's local extremum layer (Ranjan et al.); its message passing is one gnnc kernel.

    kernel le_conv_weighted(a: f32[V, F], b: f32[V, F], w: f32[E]) -> f32[V, F] {
        out[v] = sum(w[e] * (a[u] - b[v]))
    }

(`le_conv` without weights), `a = lin1(x_src)`, `b = lin2(x_dst)`, then
`out + lin3(x_dst)` in torch, as PyG's. A torch.sparse adjacency's values
are the edge weights (PyG passes them on as `edge_weight`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear, add_product
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "LEConv"

PLAIN = """
kernel le_conv(a: f32[V, F], b: f32[V, F]) -> f32[V, F] {
    out[v] = sum(a[u] - b[v])
}
"""
WEIGHTED = """
kernel le_conv_weighted(a: f32[V, F], b: f32[V, F], w: f32[E]) -> f32[V, F] {
    out[v] = sum(w[e] * (a[u] - b[v]))
}
"""


class LEConv(WarmUp, nn.Module):
    """PyG's `LEConv(in_channels, out_channels, bias=True, **kwargs)`.

    `forward(x, edge_index, edge_weight=None)`; x may be a pair `(x_src,
    x_dst)`. Parameters `lin1` (bias), `lin2` (no bias), `lin3` (bias),
    PyG's; `in_channels=-1` (or -1 in a pair) sizes them by the first input.
    """

    def __init__(self, in_channels: int | tuple[int, int], out_channels: int, bias: bool = True, **kwargs: Any):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        src, dst = inputs.channels(in_channels, LAYER)
        self.lin1 = Linear(src, out_channels, bias=bias)
        self.lin2 = Linear(dst, out_channels, bias=False)
        self.lin3 = Linear(dst, out_channels, bias=bias)
        self._plain, self._weighted = kernel(PLAIN, "le_conv"), kernel(WEIGHTED, "le_conv_weighted")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin1.reset_parameters()
        self.lin2.reset_parameters()
        self.lin3.reset_parameters()

    def forward(self, x: Any, edge_index: Any, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        if x_dst is None:
            raise ArgumentError(f"{LAYER}: x[1] (the destinations' features) must be a tensor: lin2 and lin3 read it")
        sizes = inputs.sizes(adj, x_src, x_dst, None, bipartite=not isinstance(x, torch.Tensor))
        weight = inputs.edge_values(adj, edge_weight)
        a, b = self.lin1(x_src), self.lin2(x_dst)
        if weight is None:
            out = self._plain(adj.index, a, b, size=sizes)
        else:
            out = self._weighted(adj.index, a, b, weight.to(a.dtype), size=sizes)
        if self.lin3.bias is None:
            return add_product(out, self.lin3, x_dst)
        return out + self.lin3(x_dst)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


__all__ = ["LEConv"]
