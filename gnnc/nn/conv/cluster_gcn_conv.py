"""`ClusterGCNConv`: PyG's Cluster-GCN layer (Chiang et al.): `lin_out(P x) + lin_root(x)`.

P averages over in-neighbours with a self loop weighted `1 + diag_lambda`:
`P x [v] = (1 + diag_lambda) x[v] / deg(v) + sum(x[u]) / deg(v)`, deg(v)
counting the loop (and clamped to 1); the weights are made in torch once
per call, and P is one gnnc kernel, SGConv's `gcn_propagate` (the loop as
a per-vertex weight: the graph's own loops are replaced, as PyG's are).
`lin_out` runs before P where it narrows the features (the bias after).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn.conv.sg_conv import PROPAGATE, check_in_channels, check_out_channels, square_graph
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear, add_bias, add_product
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "ClusterGCNConv"


def cluster_weights(
    edge_index: torch.Tensor, n: int, diag_lambda: float, add_loops: bool, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge weights, loop weights) of PyG's ClusterGCNConv normalisation."""
    src, dst = edge_index[0], edge_index[1]
    own = src == dst
    ones = torch.ones(src.shape[0], dtype=dtype, device=src.device)
    if add_loops:
        # PyG removes the graph's loops and adds one per vertex
        ones = ones.masked_fill(own, 0.0)
        deg = torch.ones(n, dtype=dtype, device=src.device).index_add(0, dst, ones)
        inv = 1.0 / deg.clamp(min=1.0)
        return inv[dst].masked_fill(own, 0.0), inv * (1.0 + diag_lambda)
    deg = torch.zeros(n, dtype=dtype, device=src.device).index_add(0, dst, ones)
    inv = 1.0 / deg.clamp(min=1.0)
    w = inv[dst] * torch.where(own, 1.0 + diag_lambda, 1.0).to(dtype)
    return w, torch.zeros(n, dtype=dtype, device=src.device)


class ClusterGCNConv(WarmUp, nn.Module):
    """PyG's `ClusterGCNConv(in_channels, out_channels, diag_lambda=0.0, add_self_loops=True, bias=True,
    **kwargs)`.

    `forward(x, edge_index)`; a sparse adjacency's structure is read (its
    values are replaced by the normalisation, as PyG's). Parameters
    `lin_out` (bias) and `lin_root` (no bias), glorot, PyG's.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        diag_lambda: float = 0.0,
        add_self_loops: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        if isinstance(diag_lambda, bool) or not isinstance(diag_lambda, (int, float)):
            raise ArgumentError(f"{LAYER}: diag_lambda must be a number, got {diag_lambda!r}")
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.diag_lambda, self.add_self_loops = float(diag_lambda), add_self_loops
        width = check_in_channels(LAYER, in_channels)
        self.lin_out = Linear(width, out_channels, bias=bias, weight_initializer="glorot")
        self.lin_root = Linear(width, out_channels, bias=False, weight_initializer="glorot")
        self._step = kernel(PROPAGATE, "gcn_propagate")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_out.reset_parameters()
        self.lin_root.reset_parameters()

    def forward(self, x: torch.Tensor, edge_index: Any) -> torch.Tensor:
        x, adj = square_graph(LAYER, x, edge_index)
        n, edges = x.shape[0], adj.edge_index
        w, loop = cluster_weights(edges, n, self.diag_lambda, self.add_self_loops, x.dtype)
        if not self.lin_out.lazy and self.out_channels < x.shape[-1]:
            out = add_bias(
                self._step(edges, F.linear(x, self.lin_out.weight), w, loop, num_vertices=n), self.lin_out.bias
            )
        else:
            out = self.lin_out(self._step(edges, x, w, loop, num_vertices=n))
        return add_product(out, self.lin_root, x)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, diag_lambda={self.diag_lambda})"


__all__ = ["ClusterGCNConv", "cluster_weights"]
