"""`GINConv` and `GINEConv`: PyG's graph isomorphism layers; each aggregation is one gnnc kernel.

    kernel gin_conv(x: f32[V, F], eps: f32) -> f32[V, F] {
        out[v] = (1 + eps) * x[v] + sum(x[u])
    }
    kernel gine_conv(xs: f32[V, F], xd: f32[V, F], ea: f32[E, F], eps: f32) -> f32[V, F] {
        out[v] = (1 + eps) * xd[v] + sum(relu(xs[u] + ea[e]))
    }

A bipartite pair reads the root term from `x_dst` (a kernel with `xs` and
`xd`); with `x_dst` None there is no root term. `nn` (the MLP) runs in torch
on the kernel's result.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.init import reset
from gnnc.nn.kernels import kernel

GIN = """
kernel gin_conv(x: f32[V, F], eps: f32) -> f32[V, F] {
    out[v] = (1 + eps) * x[v] + sum(x[u])
}
"""
GIN_PAIR = """
kernel gin_conv_pair(xs: f32[V, F], xd: f32[V, F], eps: f32) -> f32[V, F] {
    out[v] = (1 + eps) * xd[v] + sum(xs[u])
}
"""
GIN_NO_ROOT = """
kernel gin_conv_no_root(xs: f32[V, F]) -> f32[V, F] {
    out[v] = sum(xs[u])
}
"""
GINE = """
kernel gine_conv(xs: f32[V, F], xd: f32[V, F], ea: f32[E, F], eps: f32) -> f32[V, F] {
    out[v] = (1 + eps) * xd[v] + sum(relu(xs[u] + ea[e]))
}
"""
GINE_NO_ROOT = """
kernel gine_conv_no_root(xs: f32[V, F], ea: f32[E, F]) -> f32[V, F] {
    out[v] = sum(relu(xs[u] + ea[e]))
}
"""


class _GIN(nn.Module):
    """What GINConv and GINEConv share: `nn`, `eps` (a buffer, or a parameter with train_eps)."""

    def __init__(self, nn_module: nn.Module, eps: float, train_eps: bool):
        super().__init__()
        self.nn = nn_module
        self.initial_eps = eps
        if train_eps:
            self.eps = nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("eps", torch.empty(1))

    def reset_parameters(self) -> None:
        reset(self.nn)
        with torch.no_grad():
            self.eps.fill_(self.initial_eps)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(nn={self.nn})"


class GINConv(_GIN):
    """PyG's `GINConv(nn, eps=0.0, train_eps=False)`: `nn((1 + eps) * x + sum of neighbours)`.

    `forward(x, edge_index, size=None)`; parameters `eps` (`[1]`, a buffer
    unless train_eps) and `nn.*`.
    """

    def __init__(self, nn: nn.Module, eps: float = 0.0, train_eps: bool = False):
        super().__init__(nn, eps, train_eps)
        self._square = kernel(GIN, "gin_conv")
        self._pair = kernel(GIN_PAIR, "gin_conv_pair")
        self._no_root = kernel(GIN_NO_ROOT, "gin_conv_no_root")
        self.reset_parameters()

    def forward(self, x: Any, edge_index: Any, size: Any = None) -> torch.Tensor:
        x_src, x_dst = inputs.pair(x)
        adj = inputs.adjacency(edge_index)
        sizes = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        eps = self.eps.to(x_src.dtype)
        if isinstance(x, torch.Tensor) and size is None:
            out = self._square(adj.edge_index, x, eps, size=sizes)
        elif x_dst is None:
            out = self._no_root(adj.edge_index, x_src, size=sizes)
        else:
            out = self._pair(adj.edge_index, x_src, x_dst, eps, size=sizes)
        return self.nn(out)


class GINEConv(_GIN):
    """PyG's `GINEConv(nn, eps=0.0, train_eps=False, edge_dim=None)`:
    `nn((1 + eps) * x + sum of relu(x_j + edge_attr))`.

    `forward(x, edge_index, edge_attr, size=None)`; with `edge_dim`, `lin`
    maps edge_attr to the input width (taken from `nn`'s first layer, as PyG).
    """

    def __init__(self, nn: nn.Module, eps: float = 0.0, train_eps: bool = False, edge_dim: int | None = None):
        super().__init__(nn, eps, train_eps)
        self._root = kernel(GINE, "gine_conv")
        self._no_root = kernel(GINE_NO_ROOT, "gine_conv_no_root")
        self.lin: torch.nn.Linear | None = None
        if edge_dim is not None:
            first = nn[0] if isinstance(nn, torch.nn.Sequential) else nn
            in_channels: Any = getattr(first, "in_features", getattr(first, "in_channels", None))
            if not isinstance(in_channels, int):
                raise ArgumentError("GINEConv: could not infer input channels from `nn`")
            self.lin = torch.nn.Linear(edge_dim, int(in_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.lin is not None:
            self.lin.reset_parameters()

    def forward(self, x: Any, edge_index: Any, edge_attr: torch.Tensor | None = None, size: Any = None) -> torch.Tensor:
        x_src, x_dst = inputs.pair(x)
        adj = inputs.adjacency(edge_index)
        sizes = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        if edge_attr is None:
            raise ArgumentError("GINEConv needs edge_attr")
        if edge_attr.dim() == 1:
            edge_attr = edge_attr.view(-1, 1)
        if edge_attr.shape[0] != adj.edge_index.shape[1]:
            raise ArgumentError(f"edge_attr has {edge_attr.shape[0]} rows, the graph {adj.edge_index.shape[1]} edges")
        if self.lin is None and x_src.shape[-1] != edge_attr.shape[-1]:
            raise ArgumentError(
                "Node and edge feature dimensionalities do not match. Consider setting the 'edge_dim' "
                "attribute of 'GINEConv'"
            )
        if self.lin is not None:
            edge_attr = self.lin(edge_attr)
        if x_dst is None:
            out = self._no_root(adj.edge_index, x_src, edge_attr, size=sizes)
        else:
            eps = self.eps.to(x_src.dtype)
            out = self._root(adj.edge_index, x_src, x_dst, edge_attr, eps, size=sizes)
        return self.nn(out)


__all__ = ["GINConv", "GINEConv"]
