"""`ResGatedGraphConv`: PyG's residual gated graph convnet layer (Bresson and Laurent); one gnnc kernel.

    kernel res_gated_sigmoid(k: f32[V, F], q: f32[V, F], val: f32[V, F]) -> f32[V, F] {
        out[v] = sum(sigmoid(k[v] + q[u]) * val[u])
    }

`k = lin_key(x_dst)`, `q = lin_query(x_src)`, `val = lin_value(x_src)` in
torch; the gate is `act` (sigmoid, PyG's default, tanh or relu). With
`edge_dim`, PyG's Linear layers read `[features, edge_attr]`
concatenations per edge; the same products split by columns, `W [x, a] =
W_x x + W_a a`, give per-vertex terms and two per-edge ones, `g = a
(W_key,a + W_query,a)^T` and `ve = a W_value,a^T`:

    out[v] = sum(sigmoid(k[v] + q[u] + g[e]) * (val[u] + ve[e]))

then `lin_skip(x_dst)` and the bias in torch. A sparse adjacency's values
are not read (PyG's messages do not read them either).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.init import zeros
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear, add_bias, add_product, projections
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "ResGatedGraphConv"

#: The gates the kernel can apply, by the torch modules and functions a user passes as `act`.
GATES: dict[Any, str] = {
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.ReLU: "relu",
    torch.sigmoid: "sigmoid",
    torch.tanh: "tanh",
    torch.relu: "relu",
    F.sigmoid: "sigmoid",
    F.tanh: "tanh",
    F.relu: "relu",
}


def gate_of(act: Any) -> str:
    """The kernel's name for `act`, or a clear error for one it cannot compile."""
    gate = GATES.get(type(act)) if isinstance(act, nn.Module) else GATES.get(act)
    if gate is None or (isinstance(act, nn.ReLU) and act.inplace):
        raise ArgumentError(
            f"{LAYER}: act must be sigmoid (PyG's default), tanh or relu, as a torch.nn module "
            f"(nn.Sigmoid(), ...) or function (torch.sigmoid, ...): the gate is compiled into the kernel; got {act!r}"
        )
    return gate


def source(gate: str, edges: bool) -> tuple[str, str]:
    """(kernel text, name) of the gate's kernel, with edge terms or without."""
    if not edges:
        name = f"res_gated_{gate}"
        return (
            f"kernel {name}(k: f32[V, F], q: f32[V, F], val: f32[V, F]) -> f32[V, F] {{\n"
            f"    out[v] = sum({gate}(k[v] + q[u]) * val[u])\n}}\n",
            name,
        )
    name = f"res_gated_{gate}_edges"
    return (
        f"kernel {name}(k: f32[V, F], q: f32[V, F], val: f32[V, F], g: f32[E, F], ve: f32[E, F]) -> f32[V, F] {{\n"
        f"    out[v] = sum({gate}(k[v] + q[u] + g[e]) * (val[u] + ve[e]))\n}}\n",
        name,
    )


class ResGatedGraphConv(WarmUp, nn.Module):
    """PyG's `ResGatedGraphConv(in_channels, out_channels, act=Sigmoid(), edge_dim=None, root_weight=True,
    bias=True, **kwargs)`.

    `forward(x, edge_index, edge_attr=None)`; x may be a pair `(x_src,
    x_dst)`. Parameters `lin_key`, `lin_query`, `lin_value` (with biases),
    `lin_skip` (no bias; with `root_weight`) and `bias`, PyG's;
    `in_channels=-1` sizes them by the first input (not with `edge_dim`).
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        act: Any = None,
        edge_dim: int | None = None,
        root_weight: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.act = nn.Sigmoid() if act is None else act
        self._gate = gate_of(self.act)
        if edge_dim is not None and (isinstance(edge_dim, bool) or not isinstance(edge_dim, int) or edge_dim < 1):
            raise ArgumentError(f"{LAYER}: edge_dim must be a positive integer or None, got {edge_dim!r}")
        self.edge_dim, self.root_weight = edge_dim, root_weight
        src, dst = inputs.channels(in_channels, LAYER)
        if edge_dim is not None and (src < 0 or dst < 0):
            raise ArgumentError(f"{LAYER}: in_channels=-1 (lazy) with edge_dim is not supported: give the channels")
        extra = edge_dim or 0
        self.lin_key = Linear(dst + extra if dst > 0 else -1, out_channels)
        self.lin_query = Linear(src + extra if src > 0 else -1, out_channels)
        self.lin_value = Linear(src + extra if src > 0 else -1, out_channels)
        self.lin_skip = Linear(dst, out_channels, bias=False) if root_weight else None
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._kernel = kernel(*source(self._gate, edge_dim is not None))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_key.reset_parameters()
        self.lin_query.reset_parameters()
        self.lin_value.reset_parameters()
        if self.lin_skip is not None:
            self.lin_skip.reset_parameters()
        zeros(self.bias)

    def forward(self, x: Any, edge_index: Any, edge_attr: torch.Tensor | None = None) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        if x_dst is None:
            raise ArgumentError(f"{LAYER}: x[1] (the destinations' features) must be a tensor: the keys read it")
        sizes = inputs.sizes(adj, x_src, x_dst, None, bipartite=not isinstance(x, torch.Tensor))
        if (edge_attr is None) != (self.edge_dim is None):
            raise ArgumentError(
                f"{LAYER}: edge_attr is read exactly when the layer has edge_dim (edge_dim={self.edge_dim}, "
                f"edge_attr {'given' if edge_attr is not None else 'not given'})"
            )
        if edge_attr is None:
            if x_src is x_dst:  # one input: one dx in the backward (`projections`)
                k, q, val = projections(x_src, self.lin_key, self.lin_query, self.lin_value)
            else:
                k, q, val = self.lin_key(x_dst), self.lin_query(x_src), self.lin_value(x_src)
            out = self._kernel(adj.index, k, q, val, size=sizes)
        else:
            edge_attr = inputs.edge_features(edge_attr, adj.num_edges, self.edge_dim, LAYER)
            src, dst = x_src.shape[-1], x_dst.shape[-1]
            wk, wq, wv = self.lin_key.weight, self.lin_query.weight, self.lin_value.weight
            k = F.linear(x_dst, wk[:, :dst], self.lin_key.bias)
            q = F.linear(x_src, wq[:, :src], self.lin_query.bias)
            val = F.linear(x_src, wv[:, :src], self.lin_value.bias)
            g = F.linear(edge_attr, wk[:, dst:] + wq[:, src:])
            ve = F.linear(edge_attr, wv[:, src:])
            out = self._kernel(adj.index, k, q, val, g, ve, size=sizes)
        if self.root_weight:  # read per call, as PyG's (DirGNNConv's copies turn it off)
            if self.lin_skip is None:
                raise ArgumentError(f"{LAYER}: root_weight was turned on after construction, which made no lin_skip")
            out = add_product(out, self.lin_skip, x_dst)
        return add_bias(out, self.bias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


__all__ = ["GATES", "ResGatedGraphConv", "gate_of"]
