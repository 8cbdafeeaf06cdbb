"""`GENConv`: PyG's generalized graph convolution (DeeperGCN, Li et al.); its aggregation is one gnnc kernel.

Messages `m = relu(x_j + edge_attr) + eps` aggregated by a softmax with
temperature `t` (PyG's default; per feature channel, over each
destination's in-edges), a power mean with exponent `p`, or a plain
"add"/"mean"/"max"/"min":

    kernel gen_softmax_edges(x: f32[V, F], ea: f32[E, F], t: f32) -> f32[V, F] {
        m[e] = relu(x[u] + ea[e]) + EPS
        out[v] = sum(softmax(t * m[e]) * m[e])
    }
    kernel gen_powermean_edges(x: f32[V, F], ea: f32[E, F], p: f32) -> f32[V, F] {
        m[e] = relu(x[u] + ea[e]) + EPS
        out[v] = mean(exp(p * log(min(max(m[e], 0.0001), 100))))
    }

(`softmax_sg` detaches the softmax weights, PyG's semi-gradient; no `ea`
without edge features; the power mean's `clamp(1e-4, 100) ** (1 / p)` after it
in torch: PyG's clamps to [1e-4, 100]). `lin_src`, `lin_dst`, the message norm and
the MLP (PyG's `gen_conv.MLP` layout: Linear, norm, ReLU, Dropout) are torch's; so is
`lin_edge` past `FUSED_EDGE_DIM` edge features, and up to it the kernel makes its products
per edge (`relu(x[u] + ea[e] @ W + b)`, as GINEConv's): no `[E, F]` tensor, nor its gradient.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.gin_conv import FUSED_EDGE_DIM
from gnnc.nn.init import reset
from gnnc.nn.kernels import AGGREGATIONS, kernel, literal
from gnnc.nn.linear import Linear
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "GENConv"

#: GENConv's aggregations beside the plain ones (PyG's names; "power" is "powermean").
LEARNED = ("softmax", "softmax_sg", "powermean", "power")


def source(aggr: str, eps: float, edges: bool, lin: bool | None = None) -> tuple[str, str]:
    """(kernel text, name) of an aggregation ("softmax", "softmax_sg", "powermean", or a language
    aggregation name) of GENConv's messages, with edge features or not; `lin` (True: with a bias,
    False: without) maps the edge features inside the kernel."""
    if lin is None:
        name = f"gen_{aggr}" + ("_edges" if edges else "")
        params = "x: f32[V, F]" + (", ea: f32[E, F]" if edges else "")
        term = " + ea[e]" if edges else ""
    else:
        name = f"gen_{aggr}_lin" + ("" if lin else "_no_bias")
        params = "x: f32[V, F], ea: f32[E, D], W: f32[D, F]" + (", b: f32[F]" if lin else "")
        term = " + ea[e] @ W" + (" + b" if lin else "")
    message = f"    m[e] = relu(x[u]{term}) + {literal(eps)}\n"
    if aggr == "softmax":
        params, body = params + ", t: f32", "sum(softmax(t * m[e]) * m[e])"
    elif aggr == "softmax_sg":
        params, body = params + ", t: f32", "sum(detach(softmax(t * m[e])) * m[e])"
    elif aggr == "powermean":
        params, body = params + ", p: f32", "mean(exp(p * log(min(max(m[e], 0.0001), 100))))"
    else:
        body = f"{aggr}(m[e])"
    return f"kernel {name}({params}) -> f32[V, F] {{\n{message}    out[v] = {body}\n}}\n", name


class _Aggregation(nn.Module):
    """Where PyG keeps a learned temperature (`aggr_module.t`) or power (`aggr_module.p`)."""

    def __init__(self, name: str, value: float, learn: bool) -> None:
        super().__init__()
        self._name, self._init = name, value
        if learn:
            self.register_parameter(name, nn.Parameter(torch.empty(1)))
        self.learn = learn
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.learn:
            with torch.no_grad():
                getattr(self, self._name).fill_(self._init)

    def value(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        if self.learn:
            return getattr(self, self._name).to(dtype)
        return torch.full((), self._init, dtype=dtype, device=device)


class MessageNorm(nn.Module):
    """PyG's `MessageNorm(learn_scale)`: `normalize(msg) * ||x|| * scale`."""

    def __init__(self, learn_scale: bool = False) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.empty(1), requires_grad=learn_scale)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.scale.fill_(1.0)

    def forward(self, x: torch.Tensor, msg: torch.Tensor, p: float = 2.0) -> torch.Tensor:
        msg = F.normalize(msg, p=p, dim=-1)
        return msg * x.norm(p=p, dim=-1, keepdim=True) * self.scale


class MLP(nn.Sequential):
    """PyG's `gen_conv.MLP`: Linear, then (but after the last) norm, ReLU, Dropout."""

    def __init__(self, channels: list[int], norm: str | None = None, bias: bool = True, dropout: float = 0.0):
        layers: list[nn.Module] = []
        for i in range(1, len(channels)):
            layers.append(Linear(channels[i - 1], channels[i], bias=bias))
            if i < len(channels) - 1:
                if norm == "batch":
                    layers.append(nn.BatchNorm1d(channels[i], affine=True))
                elif norm == "layer":
                    layers.append(nn.LayerNorm(channels[i], elementwise_affine=True))
                elif norm == "instance":
                    layers.append(nn.InstanceNorm1d(channels[i], affine=False))
                elif norm:
                    raise ArgumentError(f"{LAYER}: norm must be 'batch', 'layer', 'instance' or None, got {norm!r}")
                layers.append(nn.ReLU())
                layers.append(nn.Dropout(dropout))
        super().__init__(*layers)


class GENConv(WarmUp, nn.Module):
    """PyG's `GENConv(in_channels, out_channels, aggr="softmax", t=1.0, learn_t=False, p=1.0, learn_p=False,
    msg_norm=False, learn_msg_scale=False, norm="batch", num_layers=2, expansion=2, eps=1e-7, bias=False,
    edge_dim=None, **kwargs)`.

    `forward(x, edge_index, edge_attr=None, size=None)`; x may be a pair.
    aggr: "softmax", "softmax_sg", "powermean" ("power"), "add"/"sum",
    "mean", "max", "min" (PyG's lists and Aggregation modules are not
    supported). Parameters PyG's: `lin_src`, `lin_edge`, `lin_dst` where
    the widths differ, `mlp`, `aggr_module.t` / `.p` when learned,
    `msg_norm.scale`.
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        aggr: str = "softmax",
        t: float = 1.0,
        learn_t: bool = False,
        p: float = 1.0,
        learn_p: bool = False,
        msg_norm: bool = False,
        learn_msg_scale: bool = False,
        norm: str | None = "batch",
        num_layers: int = 2,
        expansion: int = 2,
        eps: float = 1e-7,
        bias: bool = False,
        edge_dim: int | None = None,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        if not isinstance(aggr, str) or (aggr not in LEARNED and aggr not in AGGREGATIONS):
            raise ArgumentError(
                f"{LAYER}: aggr={aggr!r} is not supported by gnnc.nn; use 'softmax', 'softmax_sg', 'powermean', "
                f"or one of {', '.join(map(repr, AGGREGATIONS))}"
            )
        if aggr == "softmax_sg" and learn_t:
            raise ArgumentError(f"{LAYER}: 'softmax_sg' detaches the softmax, so t cannot be learned (as PyG)")
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ArgumentError(f"{LAYER}: num_layers must be a positive integer, got {num_layers!r}")
        self._aggr = "powermean" if aggr == "power" else aggr if aggr in LEARNED else AGGREGATIONS[aggr]
        self.in_channels, self.out_channels, self.eps = in_channels, out_channels, float(eps)
        self.aggr = aggr
        if self._aggr in ("softmax", "softmax_sg"):
            self.aggr_module = _Aggregation("t", float(t), learn_t)
        elif self._aggr == "powermean":
            self.aggr_module = _Aggregation("p", float(p), learn_p)
        src, dst = inputs.channels(in_channels, LAYER)
        if src != out_channels:
            self.lin_src = Linear(src, out_channels, bias=bias)
        if edge_dim is not None and edge_dim != out_channels:
            self.lin_edge = Linear(edge_dim, out_channels, bias=bias)
        if dst != out_channels:
            self.lin_dst = Linear(dst, out_channels, bias=bias)
        channels = [out_channels] + [out_channels * expansion] * (num_layers - 1) + [out_channels]
        self.mlp = MLP(channels, norm=norm, bias=bias)
        if msg_norm:
            self.msg_norm = MessageNorm(learn_msg_scale)
        # the kernel's aggregation: a fixed power of 1 is PyG's plain mean (it skips the powers)
        self._powered = self._aggr == "powermean" and (learn_p or float(p) != 1.0)
        self._parameter = self._aggr in ("softmax", "softmax_sg") or self._powered
        kind = "mean" if self._aggr == "powermean" and not self._powered else self._aggr
        self._kernels = (kernel(*source(kind, self.eps, False)), kernel(*source(kind, self.eps, True)))
        self._fused = None
        if hasattr(self, "lin_edge") and edge_dim is not None and edge_dim <= FUSED_EDGE_DIM:
            self._fused = kernel(*source(kind, self.eps, True, lin=bias))
        # no reset_parameters() here: PyG's GENConv does not call it, so its draws are its modules'
        # own at construction, in this order

    def reset_parameters(self) -> None:
        if hasattr(self, "aggr_module"):
            self.aggr_module.reset_parameters()
        reset(self.mlp)
        for name in ("msg_norm", "lin_src", "lin_edge", "lin_dst"):
            if hasattr(self, name):
                getattr(self, name).reset_parameters()

    def forward(self, x: Any, edge_index: Any, edge_attr: torch.Tensor | None = None, size: Any = None) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        sizes = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        if hasattr(self, "lin_src"):
            x_src = self.lin_src(x_src)
        edge_attr = inputs.edge_attributes(adj, edge_attr)
        fused: list[Any] = []
        if edge_attr is not None:
            edge_attr = inputs.edge_features(edge_attr, adj.num_edges, None, LAYER)
            if self._fused is not None and edge_attr.shape[-1] == self.lin_edge.in_channels:
                # lin_edge's products inside the kernel; the message reads ea[e] @ W (+ b)
                dtype = x_src.dtype
                fused = [self.lin_edge.weight.t().to(dtype)]
                if self.lin_edge.bias is not None:
                    fused.append(self.lin_edge.bias.to(dtype))
            elif hasattr(self, "lin_edge"):
                edge_attr = self.lin_edge(edge_attr)
            if not fused and edge_attr.shape[-1] != x_src.shape[-1]:
                raise ArgumentError(
                    f"{LAYER}: edge_attr has {edge_attr.shape[-1]} channels, the messages {x_src.shape[-1]}: "
                    "give edge_dim to map them"
                )
        args: list[Any] = [x_src] if edge_attr is None else [x_src, edge_attr.to(x_src.dtype), *fused]
        if self._parameter:
            args.append(self.aggr_module.value(x_src.dtype, x_src.device))
        call = self._fused if fused else self._kernels[edge_attr is not None]
        assert call is not None
        out = call(adj.index, *args, size=sizes)
        if self._powered:
            out = out.clamp(min=1e-4, max=100.0).pow(1.0 / args[-1])  # PyG's clamp_min and clamp_max
        if hasattr(self, "msg_norm"):
            out = self.msg_norm(x_dst if x_dst is not None else x_src, out)
        if x_dst is not None:
            out = out + (self.lin_dst(x_dst) if hasattr(self, "lin_dst") else x_dst)
        return self.mlp(out)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, aggr={self.aggr})"


__all__ = ["GENConv", "MLP", "MessageNorm"]
