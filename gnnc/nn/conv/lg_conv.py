"""`LGConv`: PyG's light graph convolution (LightGCN, He et al.), normalisation and sum fused.

Kernel (`normalize=True`, edge weights `w`, PyG's `gcn_norm` without self loops):

    kernel lg_conv_weighted(x: f32[V, F], w: f32[E]) -> f32[V, F] {
        d[v] = sum(w[e])
        n[v] = (step(d[v]) + step(-d[v])) * rsqrt(d[v] + 1 - step(d[v]) - step(-d[v]))
        out[v] = sum(w[e] * n[u] * n[v] * x[u])
    }

`n` is deg^-1/2, 0 where the degree is 0 and NaN where it is negative, as
PyG's `deg.pow(-0.5)` with its infinities masked. Without weights the degree
is the in-degree (`lg_conv`: no edge is read, no E floats of ones made).
With `normalize=False` the kernel is `conv/aggregate.py`'s weighted sum.
A sparse adjacency's values are the weights (PyG normalises and multiplies
by them), a SparseTensor without values weighs every edge 1.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.aggregate import aggregate, kernels
from gnnc.nn.kernels import kernel
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "LGConv"

UNWEIGHTED = """
kernel lg_conv(x: f32[V, F]) -> f32[V, F] {
    n[v] = step(deg_in(v)) * rsqrt(deg_in(v) + 1 - step(deg_in(v)))
    out[v] = sum(n[u] * n[v] * x[u])
}
"""
WEIGHTED = """
kernel lg_conv_weighted(x: f32[V, F], w: f32[E]) -> f32[V, F] {
    d[v] = sum(w[e])
    n[v] = (step(d[v]) + step(-d[v])) * rsqrt(d[v] + 1 - step(d[v]) - step(-d[v]))
    out[v] = sum(w[e] * n[u] * n[v] * x[u])
}
"""


class LGConv(WarmUp, nn.Module):
    """PyG's `LGConv(normalize=True, **kwargs)`.

    `forward(x, edge_index, edge_weight=None)`; `edge_index` may be a
    torch.sparse adjacency or a SparseTensor `adj_t` (its values are the
    weights), or a sampled block (x its sources' rows, the result its
    destinations'). No parameters.
    """

    def __init__(self, normalize: bool = True, **kwargs: Any):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        self.normalize = normalize
        if normalize:
            self._unweighted, self._weighted = kernel(UNWEIGHTED, "lg_conv"), kernel(WEIGHTED, "lg_conv_weighted")
        else:
            self._sum = kernels("sum")

    def reset_parameters(self) -> None:
        pass

    def forward(self, x: torch.Tensor, edge_index: Any, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise ArgumentError(f"{LAYER}: x must be one tensor (PyG's LGConv takes no bipartite pair)")
        x = inputs.check_features(x, LAYER)
        adj, keep = inputs.square(inputs.adjacency(edge_index), x, LAYER)
        n = x.shape[0]
        inputs.sizes(adj, x, x, None, bipartite=False)
        weight = inputs.edge_values(adj, edge_weight)
        if weight is not None:
            weight = weight.to(x.dtype)
        if not self.normalize:
            out = aggregate(self._sum, adj.index, x, (n, n), weight)
        elif weight is None:
            out = self._unweighted(adj.index, x, num_vertices=n)
        else:
            out = self._weighted(adj.index, x, weight, num_vertices=n)
        return out if keep is None else out[:keep]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


__all__ = ["LGConv"]
