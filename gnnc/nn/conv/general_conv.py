"""`GeneralConv`: PyG's general GNN layer of the design space of You et al. (GraphGym); one gnnc kernel.

A message is a sum of per-source, per-destination and per-edge products,
`m = lin_msg(x_j) [+ lin_msg_i(x_i)] [+ lin_edge(edge_attr)]`, split per
head. Those products run in torch on vertices and edges; the kernel adds
them per edge and aggregates, with the attention's softmax fused in:

    kernel general_conv_sum_add(ms: f32[V, H, C], att: f32[H, C]) -> f32[V, H, C] {
        out[v] = sum(softmax(leaky_relu(dot(ms[u], att), 0.2)) * ms[u])
    }

(additive attention, PyG's `att_msg`); `dot_product` attention scores
`dot(m_i[e], m[e]) / sqrt(out_channels)` where `m_i` is the message read the
other way (`lin_msg(x_i) [+ lin_msg_i(x_j)] + lin_edge(edge_attr)`), and
without attention the kernel is the aggregation of `m`. The heads' mean,
`lin_self` and the L2 normalisation stay in torch, as PyG's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.init import glorot
from gnnc.nn.kernels import AGGREGATIONS, kernel
from gnnc.nn.linear import Linear
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "GeneralConv"
ATTENTIONS = ("additive", "dot_product")


def source(aggr: str, directed: bool, edges: bool, attention: str | None) -> tuple[str, str]:
    """(kernel text, name) of one configuration: the message's terms, its attention, the aggregation."""
    args = ["ms: f32[V, H, C]"]
    message, reverse = "ms[u]", "md[v]"
    if not directed:
        args.append("mi: f32[V, H, C]")
        message, reverse = message + " + mi[v]", reverse + " + mj[u]"
    if edges:
        args.append("me: f32[E, H, C]")
        message, reverse = message + " + me[e]", reverse + " + me[e]"
    name = f"general_conv_{aggr}" + ("" if directed else "_undirected") + ("_edges" if edges else "")
    if attention is None:
        body = f"    out[v] = {aggr}({message})\n"
    else:
        if attention == "additive":
            args.append("att: f32[H, C]")
            score = f"dot({message}, att)"
            name += "_add"
        else:
            args.append("md: f32[V, H, C]")
            if not directed:
                args.append("mj: f32[V, H, C]")
            args.append("scale: f32")
            score = f"dot({reverse}, {message}) / scale"
            name += "_dot"
        body = f"    s[e] = leaky_relu({score}, 0.2)\n    out[v] = {aggr}(softmax(s[e]) * ({message}))\n"
    return f"kernel {name}({', '.join(args)}) -> f32[V, H, C] {{\n{body}}}\n", name


class GeneralConv(WarmUp, nn.Module):
    """PyG's `GeneralConv(in_channels, out_channels, in_edge_channels=None, aggr="add", skip_linear=False,
    directed_msg=True, heads=1, attention=False, attention_type="additive", l2_normalize=False, bias=True,
    **kwargs)`.

    `forward(x, edge_index, edge_attr=None, size=None)`; x may be a pair
    `(x_src, x_dst)`. Parameters `lin_msg`, `lin_msg_i` (undirected),
    `lin_self` (a Linear where `skip_linear` or in_channels != out_channels,
    else the identity), `lin_edge` (with `in_edge_channels`), `att_msg`
    (additive attention) and the `scaler` buffer (dot product), PyG's, drawn
    in PyG's order (PyG's `reset_parameters` leaves `lin_msg_i` as built).
    """

    scaler: torch.Tensor

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        in_edge_channels: int | None = None,
        aggr: str = "add",
        skip_linear: bool = False,
        directed_msg: bool = True,
        heads: int = 1,
        attention: bool = False,
        attention_type: str = "additive",
        l2_normalize: bool = False,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        # PyG fixes node_dim=0 itself, so a node_dim given fails there as here
        self._node_dim = check_options(LAYER, kwargs, aggr=None, node_dim=False)
        aggr = kwargs.get("aggr", aggr)
        if not isinstance(aggr, str) or aggr not in AGGREGATIONS:
            raise ArgumentError(
                f"{LAYER}: aggr must be one of {sorted(AGGREGATIONS)} (compiled into the kernel), got {aggr!r}"
            )
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
            raise ArgumentError(f"{LAYER}: heads must be a positive integer, got {heads!r}")
        if attention and attention_type not in ATTENTIONS:
            raise ArgumentError(f"{LAYER}: attention type {attention_type!r} not supported (one of {ATTENTIONS})")
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.in_edge_channels, self.aggr, self.skip_linear = in_edge_channels, aggr, skip_linear
        self.directed_msg, self.heads, self.attention = directed_msg, heads, attention
        self.attention_type, self.normalize_l2 = attention_type, l2_normalize
        src, dst = inputs.channels(in_channels, LAYER)
        self.lin_msg = Linear(src, out_channels * heads, bias=bias)
        self.lin_msg_i = None if directed_msg else Linear(src, out_channels * heads, bias=bias)
        self.lin_self: nn.Module = (
            Linear(dst, out_channels, bias=bias) if skip_linear or in_channels != out_channels else nn.Identity()
        )
        self.lin_edge = None if in_edge_channels is None else Linear(in_edge_channels, out_channels * heads, bias=bias)
        self.att_msg: nn.Parameter | None = None
        if attention and attention_type == "additive":
            self.att_msg = nn.Parameter(torch.empty(1, heads, out_channels))
        elif attention:
            self.register_buffer("scaler", torch.tensor(out_channels, dtype=torch.float).sqrt())
        self._kernels: dict[bool, Any] = {
            edges: kernel(*source(AGGREGATIONS[aggr], directed_msg, edges, attention_type if attention else None))
            for edges in ((False, True) if in_edge_channels is not None else (False,))
        }
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_msg.reset_parameters()
        if isinstance(self.lin_self, Linear):
            self.lin_self.reset_parameters()
        if self.lin_edge is not None:
            self.lin_edge.reset_parameters()
        glorot(self.att_msg)

    def forward(self, x: Any, edge_index: Any, edge_attr: torch.Tensor | None = None, size: Any = None) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        if x_dst is None:
            raise ArgumentError(f"{LAYER}: x[1] (the destinations' features) must be a tensor: lin_self reads it")
        sizes = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        edge_attr = inputs.edge_attributes(adj, edge_attr)
        if edge_attr is not None and self.lin_edge is None:
            raise ArgumentError(f"{LAYER}: edge_attr needs a layer built with in_edge_channels")
        heads, channels = self.heads, self.out_channels

        def split(h: torch.Tensor) -> torch.Tensor:
            return h.view(-1, heads, channels)

        args = [split(self.lin_msg(x_src))]
        if self.lin_msg_i is not None:
            args.append(split(self.lin_msg_i(x_dst)))
        if edge_attr is not None:
            assert self.lin_edge is not None
            edge_attr = inputs.edge_features(edge_attr, adj.num_edges, None, LAYER)
            args.append(split(self.lin_edge(edge_attr)))
        if self.attention and self.att_msg is not None:
            args.append(self.att_msg.view(heads, channels))
        elif self.attention:
            # the message read from the other end: lin_msg at the destination (lin_msg_i at the source)
            if x_dst.shape[-1] != x_src.shape[-1]:
                raise ArgumentError(
                    f"{LAYER}: dot_product attention reads lin_msg at the destinations too, so x_dst must have "
                    f"x_src's {x_src.shape[-1]} channels, got {x_dst.shape[-1]}"
                )
            args.append(split(self.lin_msg(x_dst)))
            if self.lin_msg_i is not None:
                args.append(split(self.lin_msg_i(x_src)))
            args.append(self.scaler.to(args[0].dtype))
        out = self._kernels[edge_attr is not None](adj.index, *args, size=sizes)
        out = out.mean(dim=1) + self.lin_self(x_dst)
        if self.normalize_l2:
            out = F.normalize(out, p=2, dim=-1)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


__all__ = ["GeneralConv"]
