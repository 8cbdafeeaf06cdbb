"""`SignedConv`: PyG's signed graph convolution (Derr et al., SGCN); each graph's aggregation is one gnnc kernel.

The layer aggregates over two graphs, the positive and the negative edges,
each with the mean (PyG's default; "add"/"sum", "max", "min" as PyG's
`aggr=`):

    kernel aggregate_mean(x: f32[V, F]) -> f32[V, F] { out[v] = mean(x[u]) }

With `first_aggr=False` the features are `[x_pos, x_neg]` and PyG aggregates
each half over each graph (four passes); a graph's two halves are one row,
so here each graph is walked once, for all of x. The Linear layers stay in
torch: `lin_pos_l` and `lin_neg_l` read the aggregations (for sum and mean,
the aggregation of their products where that narrows the rows the edges
gather: `mean(x) W^T = mean(x W^T)`, `aggregate.transform_first`), and
`lin_pos_r`, `lin_neg_r` the destinations' own features.

The two graphs stay two kernel calls: one kernel over both (their edges
concatenated, the sign as a relation type, `outer(sel[rel(e)], x[u]) /
deg_in(v, rel(e))`) would gather each row once per edge just the same, but
multiply each edge's row by both signs and need the union graph built for
every pair of edge tensors.

A torch.sparse adjacency's values weigh the aggregation, a SparseTensor's do
not (PyG's `spmm` after `set_value(None)`), as for SAGEConv.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.aggregate import aggregate, aggregation, kernels, sparse_weights, transform_first
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.linear import Linear
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "SignedConv"


class SignedConv(WarmUp, nn.Module):
    """PyG's `SignedConv(in_channels, out_channels, first_aggr, bias=True, **kwargs)`.

    `forward(x, pos_edge_index, neg_edge_index)`; x may be a pair `(x_src,
    x_dst)`; the result is `[out_pos, out_neg]` (`2 * out_channels` columns).
    With `first_aggr=False` x is `[x_pos, x_neg]` (`2 * in_channels` columns).
    Parameters `lin_pos_l`, `lin_neg_l` (no bias), `lin_pos_r`, `lin_neg_r`,
    PyG's; `in_channels=-1` sizes them by the first input (first_aggr=True).
    """

    def __init__(self, in_channels: int, out_channels: int, first_aggr: bool, bias: bool = True, **kwargs: Any):
        super().__init__()
        aggr = kwargs.pop("aggr", "mean")
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        self.aggr, self._aggr = aggr, aggregation(aggr, LAYER)
        if isinstance(in_channels, bool) or not isinstance(in_channels, int) or (in_channels < 1 and in_channels != -1):
            raise ArgumentError(f"{LAYER}: in_channels must be a positive integer or -1 (lazy), got {in_channels!r}")
        if in_channels == -1 and not first_aggr:
            raise ArgumentError(
                f"{LAYER}: in_channels=-1 needs first_aggr=True: with first_aggr=False the layer splits x at "
                "in_channels columns (PyG's slices x[..., :-1] and x[..., -1:] there)"
            )
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.first_aggr = bool(first_aggr)
        width = in_channels if first_aggr or in_channels == -1 else 2 * in_channels
        self.lin_pos_l = Linear(width, out_channels, bias=False)
        self.lin_pos_r = Linear(in_channels, out_channels, bias=bias)
        self.lin_neg_l = Linear(width, out_channels, bias=False)
        self.lin_neg_r = Linear(in_channels, out_channels, bias=bias)
        self._kernels = kernels(self._aggr)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_pos_l.reset_parameters()
        self.lin_pos_r.reset_parameters()
        self.lin_neg_l.reset_parameters()
        self.lin_neg_r.reset_parameters()

    def forward(self, x: Any, pos_edge_index: Any, neg_edge_index: Any) -> torch.Tensor:
        pos = inputs.adjacency(pos_edge_index, "pos_edge_index")
        neg = inputs.adjacency(neg_edge_index, "neg_edge_index")
        x = inputs.on_block(x, pos)
        x_src, x_dst = inputs.pair(x, LAYER)
        if x_dst is None:
            raise ArgumentError(f"{LAYER}: x[1] (the destinations' features) must be a tensor: lin_pos_r reads it")
        bipartite = not isinstance(x, torch.Tensor)
        sizes = inputs.sizes(pos, x_src, x_dst, None, bipartite=bipartite)
        if inputs.sizes(neg, x_src, x_dst, None, bipartite=bipartite) != sizes:
            raise ArgumentError(f"{LAYER}: pos_edge_index and neg_edge_index have different (num_src, num_dst)")
        graphs = ((pos.index, sparse_weights(pos)), (neg.index, sparse_weights(neg)))
        if self.first_aggr:
            if self.in_channels != -1 and (x_src.shape[-1], x_dst.shape[-1]) != (self.in_channels,) * 2:
                raise ArgumentError(
                    f"{LAYER}: x must have in_channels = {self.in_channels} columns, got {x_src.shape[-1]} "
                    f"(and {x_dst.shape[-1]} at the destinations)"
                )
            out = [self._side(graphs[i], sizes, x_src, lin_l) + lin_r(x_dst) for i, lin_l, lin_r in self._sides()]
            return torch.cat(out, dim=-1)
        half = self.in_channels
        if x_src.shape[-1] != 2 * half or x_dst.shape[-1] != 2 * half:
            raise ArgumentError(
                f"{LAYER}: with first_aggr=False x must have 2 * in_channels = {2 * half} columns "
                f"([x_pos, x_neg]), got {x_src.shape[-1]} (and {x_dst.shape[-1]} at the destinations)"
            )
        x_pos, x_neg = x_dst[..., :half], x_dst[..., half:]
        if transform_first(self._aggr, self.lin_pos_l, self.out_channels, x_src[..., :half]):
            # mean(x) W^T = mean(x W^T): each graph aggregates its two products, 2 * out wide
            out_pos, out_neg = self._products_first(graphs, sizes, x_src, half)
        else:
            a_pos, a_neg = (aggregate(self._kernels, g, x_src, sizes, w) for g, w in graphs)
            # PyG's [A+(x_pos), A-(x_neg)] and [A+(x_neg), A-(x_pos)], whole
            out_pos = self.lin_pos_l(torch.cat([a_pos[..., :half], a_neg[..., half:]], dim=-1))
            out_neg = self.lin_neg_l(torch.cat([a_pos[..., half:], a_neg[..., :half]], dim=-1))
        return torch.cat([out_pos + self.lin_pos_r(x_pos), out_neg + self.lin_neg_r(x_neg)], dim=-1)

    def _sides(self) -> tuple[tuple[int, Linear, Linear], tuple[int, Linear, Linear]]:
        return ((0, self.lin_pos_l, self.lin_pos_r), (1, self.lin_neg_l, self.lin_neg_r))

    def _side(self, graph: tuple, sizes: tuple, x_src: torch.Tensor, lin_l: Linear) -> torch.Tensor:
        """`lin_l(aggregate(x_src))` over one graph (first_aggr), products first where that narrows."""
        edges, weight = graph
        if transform_first(self._aggr, lin_l, self.out_channels, x_src):
            return aggregate(self._kernels, edges, F.linear(x_src, lin_l.weight), sizes, weight)
        return lin_l(aggregate(self._kernels, edges, x_src, sizes, weight))

    def _products_first(
        self, graphs: tuple, sizes: tuple, x_src: torch.Tensor, half: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(out_pos, out_neg) of first_aggr=False as aggregations of products: the positive graph
        aggregates `[x_pos W_pos1^T, x_neg W_neg1^T]`, the negative `[x_neg W_pos2^T, x_pos W_neg2^T]`."""
        w_pos, w_neg = self.lin_pos_l.weight, self.lin_neg_l.weight
        x_pos, x_neg = x_src[..., :half], x_src[..., half:]
        out = self.out_channels
        over_pos = torch.cat([F.linear(x_pos, w_pos[:, :half]), F.linear(x_neg, w_neg[:, :half])], dim=-1)
        over_neg = torch.cat([F.linear(x_neg, w_pos[:, half:]), F.linear(x_pos, w_neg[:, half:])], dim=-1)
        (g_pos, wt_pos), (g_neg, wt_neg) = graphs
        a_pos = aggregate(self._kernels, g_pos, over_pos, sizes, wt_pos)
        a_neg = aggregate(self._kernels, g_neg, over_neg, sizes, wt_neg)
        return a_pos[..., :out] + a_neg[..., :out], a_pos[..., out:] + a_neg[..., out:]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, first_aggr={self.first_aggr})"


__all__ = ["SignedConv"]
