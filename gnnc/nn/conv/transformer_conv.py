"""`TransformerConv`: PyG's graph transformer layer (Shi et al.), scores, softmax and sum fused.

Kernel, with the query, key and value projections computed by torch:

    kernel transformer_conv(q: f32[V, H, F], k: f32[V, H, F], val: f32[V, H, F]) -> f32[V, H, F] {
        s[e] = dot(q[v], k[u]) / 8.0
        out[v] = sum(softmax(s[e]) * val[u])
    }

The divisor is sqrt(out_channels), a literal. `edge_dim` adds
`ea[e] = lin_edge(edge_attr)` (an [E, H, C] input) to the key and to the
value of each edge (`dot(q[v], k[u] + ea[e])`, `val[u] + ea[e]`).
Attention dropout in training mode multiplies the weights by a mask input
(`F.dropout` of ones, drawn as PyG draws it); `return_attention_weights`
makes the weights (before dropout, as PyG returns them) a second result.
The skip connection and the `beta` gate are torch's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import attention, inputs
from gnnc.nn.attention import LoopKind
from gnnc.nn.linear import Linear, projections
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "TransformerConv"


class TransformerConv(WarmUp, nn.Module):
    """PyG's `TransformerConv(in_channels, out_channels, heads, concat, beta, dropout,
    edge_dim, bias, root_weight, **kwargs)`.

    `forward(x, edge_index, edge_attr=None, return_attention_weights=None)`;
    `x` may be a pair `(x_src, x_dst)`. Parameters as PyG's: `lin_key`,
    `lin_query`, `lin_value`, `lin_skip` (weights and biases), `lin_edge.weight`
    with `edge_dim`, `lin_beta.weight` with `beta`. As PyG, any bool
    `return_attention_weights` (False included) returns `(out, (edge_index, alpha))`.
    `in_channels=-1` sizes the projections by the first input.
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        beta: bool = False,
        dropout: float = 0.0,
        edge_dim: int | None = None,
        bias: bool = True,
        root_weight: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        check_options(LAYER, kwargs, node_dim=False)
        src_channels, dst_channels = inputs.channels(in_channels, LAYER)
        attention.check_heads(heads, out_channels)
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.beta = beta and root_weight
        self.root_weight, self.concat = root_weight, concat
        self.dropout = attention.check_dropout(dropout, LAYER)
        self.edge_dim = edge_dim
        width = heads * out_channels
        self.lin_key = Linear(src_channels, width, bias=bias)
        self.lin_query = Linear(dst_channels, width, bias=bias)
        self.lin_value = Linear(src_channels, width, bias=bias)
        self.lin_edge = Linear(edge_dim, width, bias=False) if edge_dim is not None else None
        skip = width if concat else out_channels
        self.lin_skip = Linear(dst_channels, skip, bias=bias)
        self.lin_beta = Linear(3 * skip, 1, bias=False) if self.beta else None
        # every kernel a call may need, made now: torch.compile cannot trace making one
        self._kernels = {
            v: attention.compiled(self._config(*v)) for v in attention.variants(False, self.dropout > 0.0, False)
        }
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_key, self.lin_query, self.lin_value, self.lin_edge, self.lin_skip, self.lin_beta):
            if lin is not None:
                lin.reset_parameters()

    def _config(self, kind: LoopKind, mask: bool, weights: bool, edge: bool) -> attention.Config:
        del kind, edge  # no self loops; edge features by the layer's edge_dim
        ea = " + ea[e]" if self.lin_edge is not None else ""
        return attention.Config(
            name="transformer_conv",
            params=("q: f32[V, H, F]", "k: f32[V, H, F]", "val: f32[V, H, F]"),
            edge_params=("ea: f32[E, H, F]",) if ea else (),
            score=f"dot(q[v], k[u]{ea}) / {attention.scale(self.out_channels)}",
            message=f"(val[u]{ea})" if ea else "val[u]",
            mask=mask,
            weights=weights,
            weights_after_dropout=False,
        )

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
        bipartite = not isinstance(x, torch.Tensor)
        num_src, num_dst = inputs.sizes(adj, x_src, x_dst, None, bipartite)
        edges = adj.edge_index
        num_edges = edges.shape[1]
        skip = None
        if not bipartite:  # one input: one dx in the backward (`projections`)
            lins = [self.lin_query, self.lin_key, self.lin_value] + ([self.lin_skip] if self.root_weight else [])
            made = projections(x_src, *lins)
            query, key, value = (t.view(-1, H, C) for t in made[:3])
            skip = made[3] if self.root_weight else None
        else:
            query = self.lin_query(x_dst).view(-1, H, C)
            key = self.lin_key(x_src).view(-1, H, C)
            value = self.lin_value(x_src).view(-1, H, C)
        ea = None
        if self.lin_edge is not None:
            features = inputs.edge_attributes(adj, edge_attr)
            if features is None:
                raise ArgumentError(f"{LAYER} with edge_dim={self.edge_dim} needs edge_attr")
            assert self.edge_dim is not None
            features = attention.edge_features(features, num_edges, self.edge_dim, LAYER).to(query.dtype)
            ea = self.lin_edge(features).view(-1, H, C)
        elif edge_attr is not None:
            raise ArgumentError(f"{LAYER}: edge_attr needs a layer built with edge_dim")
        drop = self.training and self.dropout > 0.0
        weights = isinstance(return_attention_weights, bool)
        args = [query, key, value] + ([ea] if ea is not None else [])
        if drop:
            args.append(attention.dropout_masks(None, None, num_edges, H, self.dropout, query)[0])
        result = self._kernels[(LoopKind.NONE, drop, weights, False)](edges, *args, size=(num_src, num_dst))
        out = result.out if weights else result
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.root_weight:
            x_r = self.lin_skip(x_dst) if skip is None else skip
            if self.lin_beta is not None:
                beta = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = beta * x_r + (1 - beta) * out
            else:
                out = out + x_r
        if not weights:
            return out
        if adj.sparse_tensor:  # as PyG: the SparseTensor with the weights as its values
            return out, edge_index.set_value(result.alpha, layout="coo")
        # as PyG: an edge_index or a torch.sparse adjacency comes back as given, alpha in its entries' order
        return out, (edge_index, result.alpha)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


__all__ = ["TransformerConv"]
