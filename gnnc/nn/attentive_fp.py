"""`GATEConv`: the edge-aware attention layer of PyG's AttentiveFP, two gnnc kernels.

PyG's layer (`torch_geometric.nn.models.attentive_fp.GATEConv`) scores each
edge u -> v as `leaky_relu(att_l . leaky_relu(lin1([x_u, e_uv])) + att_r .
x_v)` (slopes 0.01), normalises the scores over each destination's in-edges
(softmax), drops attention weights out in training, and sums `lin2(x_u)`
weighted by them. `lin1` of the concatenation is split by its column blocks,
`[x_u, e] W^T = x_u W_x^T + e W_e^T`: `c = x W_x^T`, `r = x att_r^T` and `m =
lin2(x)` are per-vertex products in torch. One kernel scores the edges, one
attends:

    kernel gate_conv_scores_fused(c: f32[V, O], ea: f32[E, D], we: f32[D, O], att: f32[O]) -> f32[E] {
        out[e] = dot(leaky_relu(c[u] + ea[e] @ we, 0.01), att)
    }
    kernel gate_conv_attend(p: f32[E], r: f32[V], m: f32[V, O]) -> f32[V, O] {
        out[v] = sum(softmax(leaky_relu(p[e] + r[v], 0.01)) * m[u])
    }

Apart, each gradient reads the score `p` instead of computing its `[O]` dot
product again (one kernel made it again in five of its seven gradient
kernels). With more than `FUSED_EDGE_DIM` edge features the edge term `d =
e W_e^T` is made in torch and read as `d[e]`; up to it the kernel makes it
(`ea[e] @ we`) and no `[E, O]` tensor exists. A dropout mask `k[e]` (PyG's
draw, `F.dropout` of ones over the edges) multiplies the weights in
training. The bias is torch's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.attention import check_dropout
from gnnc.nn.init import glorot, zeros
from gnnc.nn.kernels import kernel

LAYER = "GATEConv"


#: Up to this many edge features the score kernel makes the edge term itself (`ea[e] @ we`),
#: above it reads an `[E, O]` tensor torch made: on R-MAT 16 at 64 channels (Xeon, 2 threads) the
#: fused form's forward and backward ran 1.4-1.9x faster at 4 and 10 edge features, 0.87-0.90x at 12 and 16
FUSED_EDGE_DIM = 10


def _scores(fused: bool) -> tuple[str, str]:
    name = "gate_conv_scores" + ("_fused" if fused else "")
    edge = "ea: f32[E, D], we: f32[D, O]" if fused else "d: f32[E, O]"
    term = "ea[e] @ we" if fused else "d[e]"
    return (
        f"kernel {name}(c: f32[V, O], {edge}, att: f32[O]) -> f32[E] {{\n"
        f"    out[e] = dot(leaky_relu(c[u] + {term}, 0.01), att)\n"
        "}\n",
        name,
    )


def _attend(dropout: bool) -> tuple[str, str]:
    name = "gate_conv_attend" + ("_dropout" if dropout else "")
    mask, weight = (", k: f32[E]", " * k[e]") if dropout else ("", "")
    return (
        f"kernel {name}(p: f32[E], r: f32[V], m: f32[V, O]{mask}) -> f32[V, O] {{\n"
        f"    out[v] = sum(softmax(leaky_relu(p[e] + r[v], 0.01)){weight} * m[u])\n"
        "}\n",
        name,
    )


class GATEConv(nn.Module):
    """PyG's `GATEConv(in_channels, out_channels, edge_dim, dropout=0.0)` (AttentiveFP's first layer).

    `forward(x, edge_index, edge_attr)`. Parameters `att_l` `[1, out]`,
    `att_r` `[1, in]`, `lin1` (`[out, in + edge_dim]`, no bias), `lin2`
    (`[out, out]`, no bias: it maps `x`, so `in_channels` must equal
    `out_channels`, as PyG's message needs) and `bias`, PyG's, initialised
    as PyG's.
    """

    def __init__(self, in_channels: int, out_channels: int, edge_dim: int, dropout: float = 0.0):
        super().__init__()
        for what, value in (("in_channels", in_channels), ("out_channels", out_channels), ("edge_dim", edge_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArgumentError(f"{LAYER}: {what} must be a positive integer, got {value!r}")
        if in_channels != out_channels:
            # PyG's message is lin2(x_j), lin2 taking out_channels: any other width fails there
            raise ArgumentError(
                f"{LAYER}: in_channels ({in_channels}) must equal out_channels ({out_channels}): "
                "its messages are lin2(x_j), lin2 mapping out_channels"
            )
        self.in_channels, self.out_channels, self.edge_dim = in_channels, out_channels, edge_dim
        self.dropout = check_dropout(dropout, LAYER)
        self.att_l = nn.Parameter(torch.empty(1, out_channels))
        self.att_r = nn.Parameter(torch.empty(1, in_channels))
        self.lin1 = nn.Linear(in_channels + edge_dim, out_channels, False)
        self.lin2 = nn.Linear(out_channels, out_channels, False)
        self.bias = nn.Parameter(torch.empty(out_channels))
        self._fused = edge_dim <= FUSED_EDGE_DIM
        self._scores = kernel(*_scores(self._fused))
        self._attend = {mask: kernel(*_attend(mask)) for mask in (False, True)}
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot(self.att_l)
        glorot(self.att_r)
        glorot(self.lin1.weight)
        glorot(self.lin2.weight)
        zeros(self.bias)

    def forward(self, x: torch.Tensor, edge_index: Any, edge_attr: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise ArgumentError(f"{LAYER}: x must be one tensor (PyG's GATEConv takes no bipartite pair)")
        x = inputs.check_features(x, LAYER)
        adj, keep = inputs.square(inputs.adjacency(edge_index), x, LAYER)
        n = x.shape[0]
        inputs.sizes(adj, x, x, None, bipartite=False)
        edge_attr = inputs.edge_features(edge_attr, adj.num_edges, self.edge_dim, LAYER).to(x.dtype)
        w_x, w_e = self.lin1.weight[:, : self.in_channels], self.lin1.weight[:, self.in_channels :]
        c, r, m = x @ w_x.t(), (x @ self.att_r.t()).view(-1), self.lin2(x)
        att = self.att_l.view(-1)
        edge = (edge_attr, w_e.t()) if self._fused else (edge_attr @ w_e.t(),)
        mask: tuple[torch.Tensor, ...] = ()
        if self.training and self.dropout > 0:
            mask = (F.dropout(x.new_ones(adj.num_edges), p=self.dropout, training=True),)
        p = self._scores(adj.index, c, *edge, att, num_vertices=n)
        out = self._attend[bool(mask)](adj.index, p, r, m, *mask, num_vertices=n)
        out = out + self.bias
        return out if keep is None else out[:keep]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, edge_dim={self.edge_dim})"


__all__ = ["FUSED_EDGE_DIM", "GATEConv"]
