"""`SGConv`: PyG's simplified graph convolution (Wu et al.): K propagation steps, then a Linear.

Each step is one gnnc kernel over the GCN-normalised weights (deg^-1/2 A
deg^-1/2 with self loops as per-vertex weights, `appnp.gcn_weights`, made
once per call):

    kernel gcn_propagate(x: f32[V, F], w: f32[E], loop: f32[V]) -> f32[V, F] {
        out[v] = loop[v] * x[v] + sum(w[e] * x[u])
    }

`lin(P^K x)` equals `P^K (x W^T) + b` (P is linear): where the Linear
narrows the features it runs first and the K steps at its width. With
`cached=True` the propagated features `P^K x` are kept after the first call
and reused whatever the next call's inputs, as PyG's cache is (then the
Linear runs last).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs, static_graphs
from gnnc.nn.conv.appnp import gcn_weights
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear, add_bias
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "SGConv"

PROPAGATE = """
kernel gcn_propagate(x: f32[V, F], w: f32[E], loop: f32[V]) -> f32[V, F] {
    out[v] = loop[v] * x[v] + sum(w[e] * x[u])
}
"""


def check_steps(layer: str, K: Any) -> int:
    if isinstance(K, bool) or not isinstance(K, int) or K < 0:
        raise ArgumentError(f"{layer}: K must be a non-negative integer (the propagation steps), got {K!r}")
    return K


def check_in_channels(layer: str, in_channels: Any) -> int:
    if isinstance(in_channels, bool) or not isinstance(in_channels, int) or (in_channels < 1 and in_channels != -1):
        raise ArgumentError(f"{layer}: in_channels must be a positive integer or -1 (lazy), got {in_channels!r}")
    return in_channels


def check_out_channels(layer: str, out_channels: Any) -> int:
    if isinstance(out_channels, bool) or not isinstance(out_channels, int) or out_channels < 1:
        raise ArgumentError(f"{layer}: out_channels must be a positive integer, got {out_channels!r}")
    return out_channels


def square_graph(layer: str, x: Any, edge_index: Any) -> tuple[torch.Tensor, inputs.Adjacency]:
    """(x, its adjacency) for a layer that propagates over one square graph several times."""
    if not isinstance(x, torch.Tensor):
        raise ArgumentError(f"{layer}: x must be one tensor (the layer propagates over one square graph)")
    x = inputs.check_features(x, layer)
    adj = inputs.adjacency(edge_index)
    if adj.block:
        raise ArgumentError(
            f"{layer} propagates over one square graph; a sampled block is one hop: pass the batch's "
            "edge_index (its square subgraph) instead"
        )
    inputs.sizes(adj, x, x, None, bipartite=False)
    return x, adj


class Propagated(WarmUp, nn.Module):
    """What SGConv and SSGConv share: `lin` after a propagation over GCN-normalised weights with
    self loops, `lin` first where it narrows the features (it is linear), PyG's cache of the
    propagated features (`cached=True`: reused whatever the next call's inputs)."""

    LAYER = ""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        K: int,
        cached: bool,
        add_self_loops: bool,
        bias: bool,
        options: dict[str, Any],
    ):
        super().__init__()
        self._node_dim = check_options(self.LAYER, options)
        self.in_channels, self.out_channels = in_channels, check_out_channels(self.LAYER, out_channels)
        self.K = check_steps(self.LAYER, K)
        self.cached, self.add_self_loops = cached, add_self_loops
        self.lin = Linear(check_in_channels(self.LAYER, in_channels), out_channels, bias=bias)
        self._step = kernel(PROPAGATE, "gcn_propagate")
        self.reset_parameters()

    def _propagate(self, edges: torch.Tensor, h: torch.Tensor, w: torch.Tensor, loop: torch.Tensor, n: int) -> Any:
        raise NotImplementedError

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()
        self._cached: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, edge_index: Any, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        if static_graphs.batched(x):
            return static_graphs.call(
                self.LAYER,
                self.forward,
                x,
                edge_index,
                takes_size=False,
                edge_weight=edge_weight,
                node_dim=self._node_dim,
            )
        if self._cached is not None:
            return self.lin(self._cached)
        x, adj = square_graph(self.LAYER, x, edge_index)
        n = x.shape[0]
        w, loop = gcn_weights(adj, edge_weight, n, self.add_self_loops, x.dtype)
        first = self.K > 0 and not self.cached and not self.lin.lazy and self.out_channels < x.shape[-1]
        h = self._propagate(adj.edge_index, F.linear(x, self.lin.weight) if first else x, w, loop, n)
        if self.cached and self.K > 0:  # PyG keeps the propagated features (none with K = 0)
            self._cached = h.detach()
        return add_bias(h, self.lin.bias) if first else self.lin(h)


class SGConv(Propagated):
    """PyG's `SGConv(in_channels, out_channels, K=1, cached=False, add_self_loops=True, bias=True, **kwargs)`.

    `forward(x, edge_index, edge_weight=None)`; a sparse adjacency's values
    are the weights. Parameter `lin` (PyG's); `in_channels=-1` sizes it by the
    first input.
    """

    LAYER = LAYER

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        K: int = 1,
        cached: bool = False,
        add_self_loops: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__(in_channels, out_channels, K, cached, add_self_loops, bias, kwargs)

    def _propagate(self, edges: torch.Tensor, h: torch.Tensor, w: torch.Tensor, loop: torch.Tensor, n: int) -> Any:
        for _ in range(self.K):
            h = self._step(edges, h, w, loop, num_vertices=n)
        return h

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, K={self.K})"


__all__ = [
    "PROPAGATE",
    "Propagated",
    "SGConv",
    "check_in_channels",
    "check_out_channels",
    "check_steps",
    "square_graph",
]
