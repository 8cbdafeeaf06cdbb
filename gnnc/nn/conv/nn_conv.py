"""`NNConv`: PyG's edge-conditioned convolution (Gilmer et al.; Simonovsky and Komodakis); one gnnc kernel.

A message is the source row times a matrix per edge, `x_j @ theta_e`, the
matrix being the user's network `nn` of the edge features, `[E, in * out]`
viewed `[E, in, out]` (a view, not a copy). The kernel multiplies and
aggregates in one walk:

    kernel nn_conv_sum(x: f32[V, K], theta: f32[E, K, N]) -> f32[V, N] {
        out[v] = sum(x[u] @ theta[e])
    }

("mean", "max", "min" for "sum"). PyG materialises the `[E, out]` messages
(and `x_j`, `[E, in]`) before its scatter; here neither exists, forward or
backward: theta's gradient, `outer(x[u], gout[v])` per edge, is the only
edge-sized tensor the backward writes, theta's own size, and x's gradient
is a walk of the reversed graph. `theta` itself is the layer's input (the
network's output), `[E, in * out]` in PyG too. The root term `lin(x_dst)`
and the bias are torch's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.aggregate import aggregation
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.init import reset, zeros
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear, add_bias, add_product
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "NNConv"


def source(aggr: str) -> tuple[str, str]:
    """(kernel text, name) of the aggregation `aggr` (a language name) of `x[u] @ theta[e]`."""
    name = f"nn_conv_{aggr}"
    return (
        f"kernel {name}(x: f32[V, K], theta: f32[E, K, N]) -> f32[V, N] {{\n    out[v] = {aggr}(x[u] @ theta[e])\n}}\n",
        name,
    )


class NNConv(WarmUp, nn.Module):
    """PyG's `NNConv(in_channels, out_channels, nn, aggr="add", root_weight=True, bias=True, **kwargs)`
    (also PyG's `ECConv`).

    `forward(x, edge_index, edge_attr=None, size=None)`; x may be a pair
    `(x_src, x_dst)` (x_dst None: no root term, as PyG). `nn` maps
    `edge_attr` to `[E, in_channels * out_channels]` (PyG's source
    channels). Parameters `nn.*`, `lin` (the root weight, without bias) and
    `bias`, PyG's; `in_channels=-1` (or -1 in a pair) sizes `lin` by the
    first input and reads the source channels off x (PyG's view of theta
    fails there). aggr: "add"/"sum", "mean", "max", "min".
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        nn: Callable[..., Any],
        aggr: str = "add",
        root_weight: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        if not callable(nn):
            raise ArgumentError(f"{LAYER}: nn must be a module or function mapping edge_attr to theta, got {nn!r}")
        self.aggr, self._aggr = aggr, aggregation(aggr, LAYER)
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.nn, self.root_weight = nn, root_weight
        src, dst = inputs.channels(in_channels, LAYER)
        self.in_channels_l = src
        self.lin: Linear | None = (
            Linear(dst, out_channels, bias=False, weight_initializer="uniform") if root_weight else None
        )
        self.bias: torch.nn.Parameter | None = torch.nn.Parameter(torch.empty(out_channels)) if bias else None
        self._kernel = kernel(*source(self._aggr))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation, draw for draw: `nn`'s, then `lin`'s."""
        reset(self.nn)
        if self.lin is not None:
            self.lin.reset_parameters()
        zeros(self.bias)

    def _theta(self, edge_attr: Any, num_edges: int, channels: int, dtype: torch.dtype) -> torch.Tensor:
        """`nn(edge_attr)` as `[E, in, out]`, or a clear error where it is not `[E, in * out]`."""
        theta = self.nn(edge_attr)
        if not isinstance(theta, torch.Tensor):
            raise ArgumentError(f"{LAYER}: nn must return a tensor, got {type(theta).__name__}")
        theta = inputs.autocast_features(theta)
        width = channels * self.out_channels
        if theta.dim() != 2 or theta.shape[0] != num_edges or theta.shape[1] != width:
            raise ArgumentError(
                f"{LAYER}: nn(edge_attr) must be [E, in_channels * out_channels] = [{num_edges}, {width}] "
                f"({channels} source channels times {self.out_channels}), got {tuple(theta.shape)}"
            )
        if theta.dtype != dtype:
            raise ArgumentError(f"{LAYER}: nn(edge_attr) is {theta.dtype} but x is {dtype}: they must agree")
        return theta.view(num_edges, channels, self.out_channels)

    def forward(self, x: Any, edge_index: Any, edge_attr: torch.Tensor | None = None, size: Any = None) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        sizes = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        edge_attr = inputs.edge_attributes(adj, edge_attr)
        if edge_attr is None:
            raise ArgumentError(f"{LAYER}: forward needs edge_attr (nn maps it to each edge's matrix)")
        channels = x_src.shape[-1]
        if self.in_channels_l > 0 and channels != self.in_channels_l:
            raise ArgumentError(f"{LAYER}: x_src has {channels} channels, the layer was built for {self.in_channels_l}")
        theta = self._theta(edge_attr, adj.num_edges, channels, x_src.dtype)
        out = self._kernel(adj.index, x_src, theta, size=sizes)
        if x_dst is not None and self.lin is not None:
            out = add_product(out, self.lin, x_dst)
        return add_bias(out, self.bias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, aggr={self.aggr}, nn={self.nn})"


__all__ = ["NNConv", "source"]
