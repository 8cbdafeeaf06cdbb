"""`GATv2Conv`: PyG's dynamic graph attention (Brody et al.), scores, softmax and sum fused.

Kernel, without self loops (`add_self_loops=False`), with `xl = lin_l(x_src)`
and `xr = lin_r(x_dst)` computed by torch and `att` the layer's `[H, C]`
attention vector:

    kernel gatv2_conv(xl: f32[V, H, F], xr: f32[V, H, F], att: f32[H, F]) -> f32[V, H, F] {
        s[e] = dot(leaky_relu(xl[u] + xr[v], 0.2), att)
        out[v] = sum(softmax(s[e]) * xl[u])
    }

Unlike GAT's, the score does not split into per-vertex terms (the
leaky_relu is inside the dot product), so it is computed per edge in the
kernel, never materialised as an E x H x C tensor. `edge_dim` adds
`ea[e] = lin_edge(edge_attr)` (an [E, H, C] input, as PyG computes it)
inside the leaky_relu; dropout, attention weights and self loops are as
in `GATConv` (`gnnc.nn.attention`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import attention, inputs
from gnnc.nn.attention import LoopKind
from gnnc.nn.init import glorot, zeros
from gnnc.nn.linear import Linear, projections
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "GATv2Conv"


class GATv2Conv(WarmUp, nn.Module):
    """PyG's `GATv2Conv(in_channels, out_channels, heads, concat, negative_slope, dropout,
    add_self_loops, edge_dim, fill_value, bias, share_weights, residual, **kwargs)`.

    `forward(x, edge_index, edge_attr=None, return_attention_weights=None)`;
    `x` may be a pair `(x_src, x_dst)` (both tensors, as PyG). Parameters as
    PyG's: `lin_l` and `lin_r` (weights and biases; one module twice with
    `share_weights`), `att` `[1, heads, out_channels]`, `lin_edge.weight` with
    `edge_dim`, `res.weight` with `residual`, `bias`. `in_channels=-1` sizes
    the projections by the first input.
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: int | None = None,
        fill_value: float | torch.Tensor | str = "mean",
        bias: bool = True,
        share_weights: bool = False,
        residual: bool = False,
        **kwargs: Any,
    ):
        super().__init__()
        check_options(LAYER, kwargs, node_dim=False)
        src_channels, dst_channels = inputs.channels(in_channels, LAYER)
        attention.check_heads(heads, out_channels)
        attention.check_fill_value(fill_value, LAYER)
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.negative_slope = concat, negative_slope
        self.dropout = attention.check_dropout(dropout, LAYER)
        self.add_self_loops, self.edge_dim = add_self_loops, edge_dim
        self.fill_value, self.residual, self.share_weights = fill_value, residual, share_weights
        self._slope = attention.slope(negative_slope)
        width = heads * out_channels
        self.lin_l = Linear(src_channels, width, bias=bias, weight_initializer="glorot")
        # PyG's share_weights: one module under both names (both appear in the state_dict)
        self.lin_r = (
            self.lin_l if share_weights else Linear(dst_channels, width, bias=bias, weight_initializer="glorot")
        )
        self.att = nn.Parameter(torch.empty(1, heads, out_channels))
        self.lin_edge: Linear | None = None
        if edge_dim is not None:
            self.lin_edge = Linear(edge_dim, width, bias=False, weight_initializer="glorot")
        total = out_channels * (heads if concat else 1)
        self.res = Linear(dst_channels, total, bias=False, weight_initializer="glorot") if residual else None
        self.bias = nn.Parameter(torch.empty(total)) if bias else None
        # every kernel a call may need, made now: torch.compile cannot trace making one
        self.make_kernels()
        self.reset_parameters()

    def make_kernels(self) -> None:
        """The kernels the layer's options call (what `warm_up` compiles): made in the constructor,
        and again by whoever changes `add_self_loops` or `dropout` afterwards (DirGNNConv's copies;
        a call finds a missing one itself, but a warm-up would not)."""
        self._kernels = {
            v: attention.compiled(self._config(*v))
            for v in attention.variants(self.add_self_loops, self.dropout > 0.0, self.edge_dim is not None)
        }

    def reset_parameters(self) -> None:
        self.lin_l.reset_parameters()
        self.lin_r.reset_parameters()
        for extra in (self.lin_edge, self.res):
            if extra is not None:
                extra.reset_parameters()
        glorot(self.att)
        zeros(self.bias)

    def _config(self, kind: LoopKind, mask: bool, weights: bool, edge: bool) -> attention.Config:
        return attention.Config(
            name="gatv2_conv",
            params=("xl: f32[V, H, F]", "xr: f32[V, H, F]", "att: f32[H, F]"),
            edge_params=("ea: f32[E, H, F]",) if edge else (),
            score=f"dot(leaky_relu(xl[u] + xr[v]{' + ea[e]' if edge else ''}, {self._slope}), att)",
            message="xl[u]",
            mask=mask,
            weights=weights,
            **attention.loop_fields(kind, "xl[v]"),
            loop_score=(
                f"dot(leaky_relu(xl[v] + xr[v], {self._slope}), att)"
                if attention.loop_score_in_kernel(kind, edge)
                else ""
            ),
        )

    def _project(self, x_src: torch.Tensor, x_dst: torch.Tensor, bipartite: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(lin_l(x_src), lin_r(x_dst)) as [N, H, C]: one product where the weights are shared and
        x_dst is x_src or its leading rows, both in one `projections` (one dx) where only the
        input is shared."""
        H, C = self.heads, self.out_channels
        if not bipartite and not self.share_weights:
            xl, xr = projections(x_src, self.lin_l, self.lin_r)
            return xl.view(-1, H, C), xr.view(-1, H, C)
        xl = self.lin_l(x_src).view(-1, H, C)
        if self.share_weights and not bipartite:
            return xl, xl
        if self.share_weights and inputs.prefix_rows(x_dst, x_src):
            return xl, xl[: x_dst.shape[0]]  # a block's x[:num_dst]: one product serves both
        return xl, self.lin_r(x_dst).view(-1, H, C)

    def forward(
        self,
        x: Any,
        edge_index: Any,
        edge_attr: torch.Tensor | None = None,
        return_attention_weights: bool | None = None,
    ) -> Any:
        H, C = self.heads, self.out_channels
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        if x_dst is None:
            raise ArgumentError(f"{LAYER}: x must be a tensor or a pair of tensors (x_src, x_dst), not (x_src, None)")
        if x_src.dim() != 2 or x_dst.dim() != 2:
            raise ArgumentError(f"{LAYER}: x must be [num_nodes, in_channels]")
        bipartite = not isinstance(x, torch.Tensor)
        res = self.res(x_dst) if self.res is not None else None
        xl, xr = self._project(x_src, x_dst, bipartite)
        num_src, num_dst = inputs.sizes(adj, x_src, x_dst, None, bipartite)
        edges = adj.edge_index
        num_edges = edges.shape[1]
        if edge_attr is not None and self.lin_edge is None:
            raise ArgumentError(
                f"{LAYER}: edge_attr needs a layer built with edge_dim (PyG ignores it there; "
                "gnnc refuses rather than drop the features silently)"
            )
        ea = inputs.edge_attributes(adj, edge_attr) if self.lin_edge is not None else None
        if ea is not None:
            assert self.edge_dim is not None
            ea = attention.edge_features(ea, num_edges, self.edge_dim, LAYER).to(xl.dtype)
        kind = attention.loop_kind(self.add_self_loops, num_src, num_dst)
        lp = attention.loops(edges, num_src, num_dst, xl.dtype) if kind != LoopKind.NONE else None
        drop = self.training and self.dropout > 0.0
        weights = bool(return_attention_weights)
        ranks = attention.pyg_ranks(edges, lp, adj.sparse, num_src) if lp is not None and (drop or weights) else None
        att = self.att.view(H, C)
        args: list[torch.Tensor] = [xl, xr, att]
        if ea is not None:
            assert self.lin_edge is not None
            args.append(self.lin_edge(ea).view(-1, H, C))
        if lp is not None:
            n = lp.count
            if kind == LoopKind.FEWER_SOURCES:  # the loop's message, a row per destination
                args.append(lp.pad(xl[:n]))
            if not attention.loop_score_in_kernel(kind, ea is not None):
                raw = xl[:n] + xr[:n]
                if ea is not None:
                    assert self.lin_edge is not None
                    raw = raw + self.lin_edge(attention.loop_attr(edges, ea, lp, self.fill_value)).view(-1, H, C)
                args.append(lp.pad((F.leaky_relu(raw, self.negative_slope) * att).sum(-1)))
            if kind == LoopKind.FEWER_SOURCES:
                args.append(lp.has(xl.dtype))
        if drop:
            mask, mloop = attention.dropout_masks(lp, ranks, num_edges, H, self.dropout, xl)
            args += [mask] if mloop is None else [mask, mloop]
        key = (kind, drop, weights, ea is not None)
        kernel = self._kernels.get(key)
        if kernel is None:  # add_self_loops or dropout set after construction (DirGNNConv's copies)
            kernel = self._kernels[key] = attention.compiled(self._config(*key))
        result = kernel(edges, *args, size=(num_src, num_dst))
        out = result.out if weights else result
        out = attention.heads_out(out, res, self.bias, H, C, self.concat)
        if not weights:
            return out
        return out, attention.returned_weights(result, adj, lp, ranks, num_src, num_dst)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


__all__ = ["GATv2Conv"]
