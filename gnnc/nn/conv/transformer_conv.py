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

LAYER = "TransformerConv"


class TransformerConv(nn.Module):
    """PyG's `TransformerConv(in_channels, out_channels, heads, concat, beta, dropout,
    edge_dim, bias, root_weight)`.

    `forward(x, edge_index, edge_attr=None, return_attention_weights=None)`;
    `x` may be a pair `(x_src, x_dst)`. Parameters as PyG's: `lin_key`,
    `lin_query`, `lin_value`, `lin_skip` (weights and biases), `lin_edge.weight`
    with `edge_dim`, `lin_beta.weight` with `beta`. As PyG, any bool
    `return_attention_weights` (False included) returns `(out, (edge_index, alpha))`.
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
    ):
        super().__init__()
        src_channels, dst_channels = attention.channels(in_channels, LAYER)
        attention.check_heads(heads, out_channels)
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.beta = beta and root_weight
        self.root_weight, self.concat = root_weight, concat
        self.dropout = attention.check_dropout(dropout)
        self.edge_dim = edge_dim
        width = heads * out_channels
        self.lin_key = nn.Linear(src_channels, width, bias=bias)
        self.lin_query = nn.Linear(dst_channels, width, bias=bias)
        self.lin_value = nn.Linear(src_channels, width, bias=bias)
        self.lin_edge = nn.Linear(edge_dim, width, bias=False) if edge_dim is not None else None
        skip = width if concat else out_channels
        self.lin_skip = nn.Linear(dst_channels, skip, bias=bias)
        self.lin_beta = nn.Linear(3 * skip, 1, bias=False) if self.beta else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # PyG's Linear without an initializer is torch's (kaiming uniform, a = sqrt(5))
        for lin in (self.lin_key, self.lin_query, self.lin_value, self.lin_edge, self.lin_skip, self.lin_beta):
            if lin is not None:
                lin.reset_parameters()

    def forward(
        self,
        x: Any,
        edge_index: Any,
        edge_attr: torch.Tensor | None = None,
        return_attention_weights: bool | None = None,
    ) -> Any:
        H, C = self.heads, self.out_channels
        adj = inputs.adjacency(edge_index)
        x_src, x_dst = inputs.pair(x)
        if x_dst is None:
            raise ArgumentError(f"{LAYER}: x must be a tensor or a pair of tensors (x_src, x_dst), not (x_src, None)")
        bipartite = not isinstance(x, torch.Tensor)
        num_src, num_dst = inputs.sizes(adj, x_src, x_dst, None, bipartite)
        edges = adj.edge_index
        num_edges = edges.shape[1]
        query = self.lin_query(x_dst).view(-1, H, C)
        key = self.lin_key(x_src).view(-1, H, C)
        value = self.lin_value(x_src).view(-1, H, C)
        dtype = query.dtype
        ea = None
        if self.lin_edge is not None:
            if edge_attr is None:
                raise ArgumentError(f"{LAYER} with edge_dim={self.edge_dim} needs edge_attr")
            assert self.edge_dim is not None
            features = attention.edge_features(edge_attr, num_edges, self.edge_dim, LAYER).to(dtype)
            ea = self.lin_edge(features).view(-1, H, C)
        elif edge_attr is not None:
            raise ArgumentError(f"{LAYER}: edge_attr needs a layer built with edge_dim")
        drop = self.training and self.dropout > 0.0
        weights = isinstance(return_attention_weights, bool)
        edge = " + ea[e]" if ea is not None else ""
        config = attention.Config(
            name="transformer_conv",
            params=("q: f32[V, H, F]", "k: f32[V, H, F]", "val: f32[V, H, F]"),
            edge_params=("ea: f32[E, H, F]",) if ea is not None else (),
            score=f"dot(q[v], k[u]{edge}) / {attention.scale(C)}",
            message=f"(val[u]{edge})" if ea is not None else "val[u]",
            mask=drop,
            weights=weights,
            weights_after_dropout=False,
        )
        args = [query, key, value] + ([ea] if ea is not None else [])
        if drop:
            args.append(attention.dropout_masks(None, num_edges, H, self.dropout, dtype)[0])
        result = attention.compiled(config)(edges, *args, size=(num_src, num_dst))
        out = result.out if weights else result
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.root_weight:
            x_r = self.lin_skip(x_dst)
            if self.lin_beta is not None:
                beta = self.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
                out = beta * x_r + (1 - beta) * out
            else:
                out = out + x_r
        if not weights:
            return out
        # as PyG: a torch.sparse adjacency comes back as given, alpha in its entries' order
        return out, (edge_index if adj.sparse else edges, result.alpha)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


__all__ = ["TransformerConv"]
