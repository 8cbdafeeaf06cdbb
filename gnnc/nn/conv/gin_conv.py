"""`GINConv` and `GINEConv`: PyG's graph isomorphism layers; each aggregation is one gnnc kernel.

    kernel gin_conv(x: f32[V, F], eps: f32) -> f32[V, F] {
        out[v] = (1 + eps) * x[v] + sum(x[u])
    }
    kernel gine_conv(xs: f32[V, F], xd: f32[V, F], ea: f32[E, F], eps: f32) -> f32[V, F] {
        out[v] = (1 + eps) * xd[v] + sum(relu(xs[u] + ea[e]))
    }

With `edge_dim` of at most `FUSED_EDGE_DIM`, GINEConv's `lin` runs inside
the kernel, per edge, instead of making its `[E, in_channels]` result in
torch (the E x F tensor, its gradient and their memory traffic are gone;
the weight's gradient is accumulated in bounded memory by the runtime):

    kernel gine_conv_lin(xs: f32[V, F], xd: f32[V, F], ea: f32[E, D], W: f32[D, F], b: f32[F], eps: f32)
        -> f32[V, F] {
        out[v] = (1 + eps) * xd[v] + sum(relu(xs[u] + ea[e] @ W + b))
    }

A bipartite pair reads the root term from `x_dst` (a kernel with `xs` and
`xd`); with `x_dst` None there is no root term. `nn` (the MLP) runs in torch
on the kernel's result. With `train_eps` (and autograd on) the kernel is the
sum alone and `(1 + eps) * x` is added in torch, so that eps's gradient is
one reduction, not a partial per destination.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs, static_graphs
from gnnc.nn.conv.aggregate import sparse_weights
from gnnc.nn.init import reset
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

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
# a torch.sparse adjacency's values weigh the sum (PyG's spmm)
GIN_WEIGHTED = """
kernel gin_conv_weighted(x: f32[V, F], w: f32[E], eps: f32) -> f32[V, F] {
    out[v] = (1 + eps) * x[v] + sum(w[e] * x[u])
}
"""
GIN_PAIR_WEIGHTED = """
kernel gin_conv_pair_weighted(xs: f32[V, F], xd: f32[V, F], w: f32[E], eps: f32) -> f32[V, F] {
    out[v] = (1 + eps) * xd[v] + sum(w[e] * xs[u])
}
"""
GIN_NO_ROOT_WEIGHTED = """
kernel gin_conv_no_root_weighted(xs: f32[V, F], w: f32[E]) -> f32[V, F] {
    out[v] = sum(w[e] * xs[u])
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


GINE_LIN = """
kernel gine_conv_lin(xs: f32[V, F], xd: f32[V, F], ea: f32[E, D], W: f32[D, F], b: f32[F], eps: f32) -> f32[V, F] {
    out[v] = (1 + eps) * xd[v] + sum(relu(xs[u] + ea[e] @ W + b))
}
"""
GINE_LIN_NO_ROOT = """
kernel gine_conv_lin_no_root(xs: f32[V, F], ea: f32[E, D], W: f32[D, F], b: f32[F]) -> f32[V, F] {
    out[v] = sum(relu(xs[u] + ea[e] @ W + b))
}
"""

#: GINEConv's edge Linear runs per edge inside the kernel up to this edge_dim: each edge then
#: costs D x F multiply-adds in the kernel instead of an [E, F] tensor made, read and
#: differentiated in torch. Forward + backward against the unfused layer (rmat-16 / 14, Intel
#: Xeon, 2 threads): D = 4 1.7-2.9x faster, D = 8 1.2-2.0x, D = 12 1.1-1.7x, D = 16 0.8-1.4x,
#: D = 32 0.4-0.8x (F = 16, 64, 256; docs/design/training.md).
FUSED_EDGE_DIM = 8


def _eps_trained(eps: torch.Tensor) -> bool:
    """Whether this call needs eps's gradient (train_eps, under autograd)."""
    return torch.is_grad_enabled() and eps.requires_grad


def _plus_root(aggregate: torch.Tensor, x_dst: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """`(1 + eps) * x_dst + aggregate` in torch: with eps trained, its gradient is then torch's
    reduction of `x_dst * grad` (one scalar), where the fused kernel's would be a partial per
    destination ([V]) that the runtime sums."""
    return aggregate + (1 + eps.to(x_dst.dtype)) * x_dst


class _GIN(WarmUp, nn.Module):
    """What GINConv and GINEConv share: `nn`, `eps` (a buffer, or a parameter with train_eps)."""

    def __init__(self, nn_module: Any, eps: float, train_eps: bool, layer: str, options: dict[str, Any]):
        super().__init__()
        self._node_dim = check_options(layer, options)
        if not callable(nn_module):
            raise ArgumentError(f"{layer}: nn must be a module (or a callable), got {type(nn_module).__name__}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)):
            raise ArgumentError(f"{layer}: eps must be a number, got {eps!r}")
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
    """PyG's `GINConv(nn, eps=0.0, train_eps=False, **kwargs)`: `nn((1 + eps) * x + sum of neighbours)`.

    `forward(x, edge_index, size=None)`; parameters `eps` (`[1]`, a buffer
    unless train_eps) and `nn.*`. A torch.sparse adjacency's values weigh
    the sum, a SparseTensor's do not (as PyG).
    """

    def __init__(self, nn: Any, eps: float = 0.0, train_eps: bool = False, **kwargs: Any):
        super().__init__(nn, eps, train_eps, "GINConv", kwargs)
        self._square = kernel(GIN, "gin_conv")
        self._pair = kernel(GIN_PAIR, "gin_conv_pair")
        self._no_root = kernel(GIN_NO_ROOT, "gin_conv_no_root")
        self._square_weighted = kernel(GIN_WEIGHTED, "gin_conv_weighted")
        self._pair_weighted = kernel(GIN_PAIR_WEIGHTED, "gin_conv_pair_weighted")
        self._no_root_weighted = kernel(GIN_NO_ROOT_WEIGHTED, "gin_conv_no_root_weighted")
        self.reset_parameters()

    def forward(self, x: Any, edge_index: Any, size: Any = None) -> torch.Tensor:
        if static_graphs.batched(x):
            return static_graphs.call("GINConv", self.forward, x, edge_index, size, node_dim=self._node_dim)
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, "GINConv")
        sizes = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        eps = self.eps.to(x_src.dtype)
        w = sparse_weights(adj)
        edges = adj.index
        if w is not None:
            w = w.to(x_src.dtype)
        if x_dst is not None and _eps_trained(self.eps):
            out = (
                self._no_root(edges, x_src, size=sizes)
                if w is None
                else self._no_root_weighted(edges, x_src, w, size=sizes)
            )
            out = _plus_root(out, x_dst, eps)
        elif isinstance(x, torch.Tensor) and size is None:
            if w is None:
                out = self._square(edges, x, eps, size=sizes)
            else:
                out = self._square_weighted(edges, x, w, eps, size=sizes)
        elif x_dst is None:
            if w is None:
                out = self._no_root(edges, x_src, size=sizes)
            else:
                out = self._no_root_weighted(edges, x_src, w, size=sizes)
        elif w is None:
            out = self._pair(edges, x_src, x_dst, eps, size=sizes)
        else:
            out = self._pair_weighted(edges, x_src, x_dst, w, eps, size=sizes)
        return self.nn(out)


class GINEConv(_GIN):
    """PyG's `GINEConv(nn, eps=0.0, train_eps=False, edge_dim=None, **kwargs)`:
    `nn((1 + eps) * x + sum of relu(x_j + edge_attr))`.

    `forward(x, edge_index, edge_attr, size=None)`; with `edge_dim`, `lin`
    maps edge_attr to the input width (taken from `nn`'s first layer, as PyG).
    A SparseTensor's values are the edge features when edge_attr is None (as PyG).
    """

    def __init__(self, nn: Any, eps: float = 0.0, train_eps: bool = False, edge_dim: int | None = None, **kwargs: Any):
        super().__init__(nn, eps, train_eps, "GINEConv", kwargs)
        self._root = kernel(GINE, "gine_conv")
        self._no_root = kernel(GINE_NO_ROOT, "gine_conv_no_root")
        fused = edge_dim is not None and edge_dim <= FUSED_EDGE_DIM
        self._lin_root = kernel(GINE_LIN, "gine_conv_lin") if fused else None
        self._lin_no_root = kernel(GINE_LIN_NO_ROOT, "gine_conv_lin_no_root") if fused else None
        self.edge_dim = edge_dim
        self.lin: Linear | None = None
        if edge_dim is not None:
            first = nn[0] if isinstance(nn, torch.nn.Sequential) else nn
            in_channels: Any = getattr(first, "in_features", getattr(first, "in_channels", None))
            if not isinstance(in_channels, int):
                raise ArgumentError("GINEConv: could not infer input channels from `nn`")
            self.lin = Linear(edge_dim, int(in_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.lin is not None:
            self.lin.reset_parameters()

    def forward(self, x: Any, edge_index: Any, edge_attr: torch.Tensor | None = None, size: Any = None) -> torch.Tensor:
        if static_graphs.batched(x):
            return static_graphs.call(
                "GINEConv", self.forward, x, edge_index, size, edge_attr=edge_attr, node_dim=self._node_dim
            )
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, "GINEConv")
        sizes = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        edge_attr = inputs.edge_attributes(adj, edge_attr)
        if edge_attr is None:
            raise ArgumentError("GINEConv needs edge_attr")
        if edge_attr.dim() == 1:
            edge_attr = edge_attr.view(-1, 1)
        if edge_attr.shape[0] != adj.num_edges:
            raise ArgumentError(f"edge_attr has {edge_attr.shape[0]} rows, the graph {adj.num_edges} edges")
        if self.lin is None and x_src.shape[-1] != edge_attr.shape[-1]:
            raise ArgumentError(
                "Node and edge feature dimensionalities do not match. Consider setting the 'edge_dim' "
                "attribute of 'GINEConv'"
            )
        if self._lin_no_root is not None and self.lin is not None and not self.lin.lazy:
            return self.nn(self._fused(adj.index, x_src, x_dst, edge_attr, sizes))
        if self.lin is not None:
            edge_attr = self.lin(edge_attr)
        edge_attr = edge_attr.to(x_src.dtype)
        if x_dst is None:
            out = self._no_root(adj.index, x_src, edge_attr, size=sizes)
        elif _eps_trained(self.eps):
            out = _plus_root(self._no_root(adj.index, x_src, edge_attr, size=sizes), x_dst, self.eps)
        else:
            eps = self.eps.to(x_src.dtype)
            out = self._root(adj.index, x_src, x_dst, edge_attr, eps, size=sizes)
        return self.nn(out)

    def _fused(self, edges: Any, x_src: torch.Tensor, x_dst: Any, edge_attr: torch.Tensor, sizes: tuple) -> Any:
        """The aggregation with `lin` inside the kernel (`FUSED_EDGE_DIM`)."""
        assert self.lin is not None and self._lin_root is not None and self._lin_no_root is not None
        dtype = x_src.dtype
        assert self.lin.bias is not None  # GINEConv's lin always has one (PyG's Linear default)
        weight, bias = self.lin.weight.t().to(dtype), self.lin.bias.to(dtype)
        edge_attr = edge_attr.to(dtype)
        if x_dst is None:
            return self._lin_no_root(edges, x_src, edge_attr, weight, bias, size=sizes)
        if _eps_trained(self.eps):
            out = self._lin_no_root(edges, x_src, edge_attr, weight, bias, size=sizes)
            return _plus_root(out, x_dst, self.eps)
        eps = self.eps.to(dtype)
        return self._lin_root(edges, x_src, x_dst, edge_attr, weight, bias, eps, size=sizes)


__all__ = ["FUSED_EDGE_DIM", "GINConv", "GINEConv"]
