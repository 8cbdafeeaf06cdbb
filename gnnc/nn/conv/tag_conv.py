"""`TAGConv`: PyG's topology adaptive graph convolution (Du et al.): `sum_k lins[k](P^k x) + bias`.

P is the GCN-normalised adjacency without self loops (PyG's `gcn_norm`
with `add_self_loops=False`, made once per call in torch), or the raw edge
weights with `normalize=False`; each application of P is one gnnc kernel,
the weighted sum of `conv/aggregate.py`:

    kernel aggregate_sum_weighted(x: f32[V, F], w: f32[E]) -> f32[V, F] {
        out[v] = sum(w[e] * x[u])
    }

Where the Linear layers narrow the features, the sum runs in Horner's
order, `x W0 + P (x W1 + P (... + P (x WK)))`: the same maths (P is
linear), its K steps at the output width instead of the input's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.nn import inputs, static_graphs
from gnnc.nn.conv.aggregate import aggregate, kernels
from gnnc.nn.conv.appnp import gcn_weights
from gnnc.nn.conv.sg_conv import check_in_channels, check_out_channels, check_steps, square_graph
from gnnc.nn.init import zeros
from gnnc.nn.linear import Linear, add_bias, add_product, linears
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "TAGConv"


class TAGConv(WarmUp, nn.Module):
    """PyG's `TAGConv(in_channels, out_channels, K=3, bias=True, normalize=True, **kwargs)`.

    `forward(x, edge_index, edge_weight=None)`; a sparse adjacency's values
    are the weights. Parameters `lins` (K + 1 Linear layers without bias)
    and `bias`, PyG's; `in_channels=-1` sizes them by the first input.
    """

    def __init__(
        self, in_channels: int, out_channels: int, K: int = 3, bias: bool = True, normalize: bool = True, **kwargs: Any
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.K = check_steps(LAYER, K)
        self.normalize = normalize
        width = check_in_channels(LAYER, in_channels)
        self.lins = nn.ModuleList([Linear(width, out_channels, bias=False) for _ in range(K + 1)])
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._kernels = kernels("sum")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in linears(self.lins):
            lin.reset_parameters()
        zeros(self.bias)

    def forward(self, x: torch.Tensor, edge_index: Any, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        if static_graphs.batched(x):
            return static_graphs.call(
                LAYER, self.forward, x, edge_index, takes_size=False, edge_weight=edge_weight, node_dim=self._node_dim
            )
        x, adj = square_graph(LAYER, x, edge_index)
        n = x.shape[0]
        if self.normalize:
            w: torch.Tensor | None = gcn_weights(adj, edge_weight, n, False, x.dtype)[0]
        else:
            w = inputs.edge_values(adj, edge_weight)
        edges = adj.edge_index

        def propagate(h: torch.Tensor) -> torch.Tensor:
            return aggregate(self._kernels, edges, h, (n, n), w)

        lins = linears(self.lins)
        if self.K > 0 and not any(lin.lazy for lin in lins) and self.out_channels < x.shape[-1]:
            out = F.linear(x, lins[self.K].weight)
            for lin in reversed(lins[: self.K]):
                out = add_product(propagate(out), lin, x)
        else:
            out = lins[0](x)
            for lin in lins[1:]:
                x = propagate(x)
                out = out + lin(x)
        return add_bias(out, self.bias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, K={self.K})"


__all__ = ["TAGConv"]
