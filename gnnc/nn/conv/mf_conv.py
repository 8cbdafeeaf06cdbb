"""`MFConv`: PyG's molecular fingerprint layer (Duvenaud et al.); its aggregation is one gnnc kernel.

    kernel aggregate_sum(x: f32[V, F]) -> f32[V, F] {
        out[v] = sum(x[u])
    }

then, as PyG's, a Linear pair per in-degree (clamped to `max_degree`):
`out[v] = lins_l[d](h[v]) + lins_r[d](x_dst[v])`, the destinations of one
degree gathered, multiplied and scattered back in torch. The buckets'
sizes depend on the data, so under torch.compile the layer breaks the
graph there (as PyG's does).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.aggregate import aggregate, kernels, sparse_weights
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.linear import Linear, linears
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "MFConv"


class MFConv(WarmUp, nn.Module):
    """PyG's `MFConv(in_channels, out_channels, max_degree=10, bias=True, **kwargs)`.

    `forward(x, edge_index, size=None)`; x may be a pair `(x_src, x_dst)`
    (x_dst None: no root term). Parameters `lins_l` (bias) and `lins_r` (no
    bias), `max_degree + 1` of each, PyG's. A torch.sparse adjacency's
    values weigh the sum, a SparseTensor's do not (PyG drops them).
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        max_degree: int = 10,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        if isinstance(max_degree, bool) or not isinstance(max_degree, int) or max_degree < 0:
            raise ArgumentError(f"{LAYER}: max_degree must be a non-negative integer, got {max_degree!r}")
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.max_degree = max_degree
        src, dst = inputs.channels(in_channels, LAYER)
        self.lins_l = nn.ModuleList([Linear(src, out_channels, bias=bias) for _ in range(max_degree + 1)])
        self.lins_r = nn.ModuleList([Linear(dst, out_channels, bias=False) for _ in range(max_degree + 1)])
        self._kernels = kernels("sum")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (*linears(self.lins_l), *linears(self.lins_r)):
            lin.reset_parameters()

    def forward(self, x: Any, edge_index: Any, size: Any = None) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        num_src, num_dst = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        edges = adj.edge_index
        deg = torch.zeros(num_dst, dtype=torch.long, device=edges.device).index_add_(
            0, edges[1], torch.ones_like(edges[1])
        )
        deg = deg.clamp(max=self.max_degree)
        h = aggregate(self._kernels, adj.index, x_src, (num_src, num_dst), sparse_weights(adj))
        buckets = []
        for i, (lin_l, lin_r) in enumerate(zip(self.lins_l, self.lins_r)):
            idx = (deg == i).nonzero().view(-1)
            r = lin_l(h.index_select(0, idx))
            if x_dst is not None:
                r = r + lin_r(x_dst.index_select(0, idx))
            buckets.append((idx, r))
        # the Linear layers' dtype (under autocast, theirs, not the aggregation's float32)
        out = buckets[0][1].new_empty(h.shape[0], self.out_channels)
        for idx, r in buckets:
            out.index_copy_(0, idx, r)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


__all__ = ["MFConv"]
