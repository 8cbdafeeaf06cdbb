"""`GATConv`: PyG's graph attention layer (Velickovic et al.), scores, softmax and sum fused.

Kernel, without self loops (`add_self_loops=False`), with `a_src = <h, att_src>`
and `a_dst = <h, att_dst>` computed by torch per vertex:

    kernel gat_conv(h: f32[V, H, F], a_src: f32[V, H], a_dst: f32[V, H]) -> f32[V, H, F] {
        s[e] = leaky_relu(a_src[u] + a_dst[v], 0.2)
        out[v] = sum(softmax(s[e]) * h[u])
    }

The slope is the layer's `negative_slope`, written into the kernel as a
literal. `edge_dim` adds `a_edge[e]` (`<lin_edge(edge_attr), att_edge>`,
computed by torch) to the score; attention dropout in training mode
multiplies the softmax by a mask input; `return_attention_weights` makes
the weights a second result, `alpha`. With self loops (the default) the
graph is kept as given and the loops enter as vertex values, the softmax
written out over the in-edges and the loop (`gnnc.nn.attention`); where
every destination is a source (a square graph, a sampled block) and no edge
features enter, the kernel computes the loop's score itself:
`sl[v] = leaky_relu(a_src[v] + a_dst[v], 0.2)`.
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
from gnnc.nn.linear import Linear, products
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "GATConv"


#: `scores` folds the attention vector into the projection while in_channels <= this x out_channels.
FOLD_MAX_RATIO = 16


def scores(lin: Linear, x: Any, att: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
    """`<lin(x), att>` per head ([N, H]; `h` is lin(x) as [N, H, C] where it was computed).

    With lin's weight W ([H*C, in]) the score is `x @ M.T`, M[h] = sum_c att[h, c] W[h*C + c]:
    an [H, in] matrix, so no [N, H, C] product is made (nor its gradient), where PyG multiplies
    and sums h. The same sum in another order, for `in <= FOLD_MAX_RATIO * C` (beyond it the
    product costs more than the memory it saves: docs/design/training.md); a lazy `lin` not
    yet sized takes the product too."""
    heads, channels = att.shape[-2], att.shape[-1]
    if not folds(lin, channels):
        if h is None:
            h = lin(x).view(-1, heads, channels)
        return (h * att).sum(-1)
    folded, bias = _folded(lin, att)
    return F.linear(x, folded, bias)


def folds(lin: Linear, channels: int) -> bool:
    """Whether `scores` folds the attention vector into lin's weight (see there)."""
    return not lin.lazy and lin.weight.shape[1] <= FOLD_MAX_RATIO * channels


def _folded(lin: Linear, att: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(M, b): the score `<lin(x), att>` per head is `x @ M.T + b`."""
    heads, channels = att.shape[-2], att.shape[-1]
    folded = (lin.weight.view(heads, channels, -1) * att.view(heads, channels, 1)).sum(1)
    bias = None if lin.bias is None else (lin.bias.view(heads, channels) * att.view(heads, channels)).sum(-1)
    return folded, bias


def projected(
    lin: Linear, x: torch.Tensor, att_src: torch.Tensor, att_dst: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(lin(x) as [N, H, C], <lin(x), att_src>, <lin(x), att_dst>) for a lin that projects both
    sides: the two scores from one product, `x @ [M_src; M_dst].T` (`_folded`), where `folds`,
    for CPU tensors.

    Each score's product is thin ([in, H]): it costs a pass over x for little arithmetic, and
    its gradient another (dW) or an [N, in] term to add (dx); made together they pay one pass
    of each. h stays a product of its own: sliced from one product with the scores it would
    be strided, and the kernel's contiguous copy of it, with the gradient's concatenation,
    cost more than the product saved (docs/design/training.md). Both are one `products`,
    whose backward adds the scores' dx term into h's in place."""
    heads, channels = att_src.shape[-2], att_src.shape[-1]
    m_src, b_src = _folded(lin, att_src)
    m_dst, b_dst = _folded(lin, att_dst)
    bias = None if b_src is None or b_dst is None else torch.cat([b_src, b_dst])
    h, both = products(x, (lin.weight, lin.bias), (torch.cat([m_src, m_dst]), bias))
    a_src, a_dst = both.split([heads, heads], dim=1)
    # contiguous once here: the op would copy each column slice in the forward and again in the
    # backward, which keeps the slices it reads
    return h.view(-1, heads, channels), a_src.contiguous(), a_dst.contiguous()


class GATConv(WarmUp, nn.Module):
    """PyG's `GATConv(in_channels, out_channels, heads, concat, negative_slope, dropout,
    add_self_loops, edge_dim, fill_value, bias, residual, **kwargs)`.

    `forward(x, edge_index, edge_attr=None, size=None, return_attention_weights=None)`;
    `x` may be a pair `(x_src, x_dst)` (x_dst may be None), `edge_index` a
    torch.sparse adjacency or a SparseTensor. Parameters as PyG's: `lin.weight`
    (or `lin_src.weight` and `lin_dst.weight` for a pair of in_channels), `att_src`,
    `att_dst` `[1, heads, out_channels]`, `lin_edge.weight` and `att_edge` with
    `edge_dim`, `res.weight` with `residual`, `bias`. `in_channels=-1` sizes the
    projections by the first input (PyG's lazy initialisation).
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
        self.fill_value, self.residual = fill_value, residual
        self._slope = attention.slope(negative_slope)
        width = heads * out_channels
        self.lin: Linear | None = None
        self.lin_src: Linear | None = None
        self.lin_dst: Linear | None = None
        if isinstance(in_channels, int):
            self.lin = Linear(in_channels, width, bias=False, weight_initializer="glorot")
        else:
            self.lin_src = Linear(src_channels, width, bias=False, weight_initializer="glorot")
            self.lin_dst = Linear(dst_channels, width, bias=False, weight_initializer="glorot")
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.lin_edge: Linear | None = None
        self.att_edge: nn.Parameter | None = None
        if edge_dim is not None:
            self.lin_edge = Linear(edge_dim, width, bias=False, weight_initializer="glorot")
            self.att_edge = nn.Parameter(torch.empty(1, heads, out_channels))
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
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            if lin is not None:
                lin.reset_parameters()
        glorot(self.att_src)
        glorot(self.att_dst)
        glorot(self.att_edge)
        zeros(self.bias)

    def _config(self, kind: LoopKind, mask: bool, weights: bool, edge: bool) -> attention.Config:
        return attention.Config(
            name="gat_conv",
            params=("h: f32[V, H, F]", "a_src: f32[V, H]", "a_dst: f32[V, H]"),
            edge_params=("a_edge: f32[E, H]",) if edge else (),
            score=f"leaky_relu(a_src[u] + a_dst[v]{' + a_edge[e]' if edge else ''}, {self._slope})",
            message="h[u]",
            mask=mask,
            weights=weights,
            **attention.loop_fields(kind, "h[v]"),
            loop_score=(
                f"leaky_relu(a_src[v] + a_dst[v], {self._slope})" if attention.loop_score_in_kernel(kind, edge) else ""
            ),
        )

    def _project(
        self, x_src: torch.Tensor, x_dst: torch.Tensor | None, bipartite: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, tuple[torch.Tensor, torch.Tensor] | None]:
        """(h_src, h_dst, residual, scores): the linear transforms of x, as PyG's; `scores` is
        (a_src, a_dst) where one product made them with h (`projected`), else None."""
        H, C = self.heads, self.out_channels
        if x_src.dim() != 2 or (x_dst is not None and x_dst.dim() != 2):
            raise ArgumentError(f"{LAYER}: x must be [num_nodes, in_channels] (static graphs are not supported)")
        lin_src = self.lin if self.lin is not None else self.lin_src
        lin_dst = self.lin if self.lin is not None else self.lin_dst
        assert lin_src is not None and lin_dst is not None
        res = self.res(x_dst) if self.res is not None and x_dst is not None else None
        # a block's x[:num_dst]: one product serves both sides
        prefix = bipartite and self.lin is not None and x_dst is not None and inputs.prefix_rows(x_dst, x_src)
        # on the CPU, where the thin products are passes over memory (the scores come out as
        # column slices, made contiguous there: a device tensor's copy is the device's)
        if self.lin is not None and x_src.device.type == "cpu" and folds(self.lin, C) and (not bipartite or prefix):
            h_src, a_src, a_dst = projected(self.lin, x_src, self.att_src, self.att_dst)
            if not prefix:
                return h_src, h_src, res, (a_src, a_dst)
            assert x_dst is not None
            n = x_dst.shape[0]
            return h_src, h_src[:n], res, (a_src, a_dst[:n])
        h_src = lin_src(x_src).view(-1, H, C)
        if not bipartite and self.lin is not None:
            return h_src, h_src, res, None
        if prefix:
            assert x_dst is not None
            return h_src, h_src[: x_dst.shape[0]], res, None
        h_dst = lin_dst(x_dst).view(-1, H, C) if x_dst is not None else None
        return h_src, h_dst, res, None

    def forward(
        self,
        x: Any,
        edge_index: Any,
        edge_attr: torch.Tensor | None = None,
        size: Any = None,
        return_attention_weights: bool | None = None,
    ) -> Any:
        H, C = self.heads, self.out_channels
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        bipartite = not isinstance(x, torch.Tensor)
        h_src, h_dst, res, both = self._project(x_src, x_dst, bipartite)
        num_src, num_dst = inputs.sizes(adj, x_src, x_dst, size, bipartite)
        edges = adj.edge_index
        num_edges = edges.shape[1]
        lin_src = self.lin if self.lin is not None else self.lin_src
        lin_dst = self.lin if self.lin is not None else self.lin_dst
        assert lin_src is not None and lin_dst is not None
        if both is not None:
            a_src, a_dst = both
        else:
            a_src = scores(lin_src, x_src, self.att_src, h_src)
            a_dst = scores(lin_dst, x_dst, self.att_dst, h_dst) if h_dst is not None else h_src.new_zeros(num_dst, H)
        if edge_attr is not None and self.lin_edge is None:
            raise ArgumentError(
                f"{LAYER}: edge_attr needs a layer built with edge_dim (PyG ignores it there; "
                "gnnc refuses rather than drop the features silently)"
            )
        ea = inputs.edge_attributes(adj, edge_attr) if self.lin_edge is not None else None
        a_edge = None
        if ea is not None and self.lin_edge is not None and self.att_edge is not None:
            assert self.edge_dim is not None
            ea = attention.edge_features(ea, num_edges, self.edge_dim, LAYER).to(h_src.dtype)
            a_edge = scores(self.lin_edge, ea, self.att_edge)
        kind = attention.loop_kind(self.add_self_loops, num_src, num_dst)
        lp = attention.loops(edges, num_src, num_dst, h_src.dtype) if kind != LoopKind.NONE else None
        drop = self.training and self.dropout > 0.0
        weights = bool(return_attention_weights)
        ranks = attention.pyg_ranks(edges, lp, adj.sparse, num_src) if lp is not None and (drop or weights) else None
        args: list[torch.Tensor] = [h_src, a_src, a_dst] + ([a_edge] if a_edge is not None else [])
        if lp is not None:
            n = lp.count
            if kind == LoopKind.FEWER_SOURCES:  # the loop's message, a row per destination
                args.append(lp.pad(h_src[:n]))
            if not attention.loop_score_in_kernel(kind, a_edge is not None):
                raw = a_src[:n] + a_dst[:n]
                if a_edge is not None:
                    assert ea is not None and self.lin_edge is not None and self.att_edge is not None
                    loop_ea = attention.loop_attr(edges, ea, lp, self.fill_value)
                    raw = raw + scores(self.lin_edge, loop_ea, self.att_edge)
                args.append(lp.pad(F.leaky_relu(raw, self.negative_slope)))
            if kind == LoopKind.FEWER_SOURCES:
                args.append(lp.has(h_src.dtype))
        if drop:
            mask, mloop = attention.dropout_masks(lp, ranks, num_edges, H, self.dropout, h_src)
            args += [mask] if mloop is None else [mask, mloop]
        key = (kind, drop, weights, a_edge is not None)
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


__all__ = ["GATConv"]
