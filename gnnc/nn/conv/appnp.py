"""`APPNP`: PyG's personalised-PageRank propagation; each of its K steps is one gnnc kernel.

    kernel appnp(x: f32[V, F], h: f32[V, F], w: f32[E], loop: f32[V], alpha: f32) -> f32[V, F] {
        out[v] = (1 - alpha) * (loop[v] * x[v] + sum(w[e] * x[u])) + alpha * h[v]
    }

`w` and `loop` are the GCN-normalised edge and self-loop weights
(deg^-1/2 A deg^-1/2 with self loops, computed once per call in torch, or
once per layer with `cached=True`), self loops kept as per-vertex weights
(`gnnc.nn.self_loops`). Edge dropout in training mode drops the normalised
weights of the edges and the loops, drawn as PyG draws them (one
`F.dropout` per step over the edges followed by the loops, each step
dropping from the previous step's weights).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs, self_loops
from gnnc.nn.kernels import kernel

STEP = """
kernel appnp(x: f32[V, F], h: f32[V, F], w: f32[E], loop: f32[V], alpha: f32) -> f32[V, F] {
    out[v] = (1 - alpha) * (loop[v] * x[v] + sum(w[e] * x[u])) + alpha * h[v]
}
"""


def gcn_weights(
    adj: inputs.Adjacency, edge_weight: Any, num_nodes: int, add_loops: bool, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The GCN-normalised (edge weights, self-loop weights) of PyG's `gcn_norm` (improved=False)."""
    weight = inputs.edge_values(adj, edge_weight)
    weight = None if weight is None else weight.to(dtype)
    num_edges = adj.edge_index.shape[1]
    if not add_loops:
        w, loop = self_loops.no_loops(weight, num_edges, num_nodes, dtype)
    elif adj.sparse:
        w, loop = self_loops.appended_loops(weight, num_edges, num_nodes, 1.0, dtype)
    else:
        w, loop = self_loops.remaining_loops(adj.edge_index, weight, num_nodes, 1.0, dtype)
    src, dst = adj.edge_index[0], adj.edge_index[1]
    deg = loop.index_add(0, dst, w)
    inv = deg.pow(-0.5)
    inv = inv.masked_fill(inv == float("inf"), 0.0)
    return inv[src] * w * inv[dst], loop * inv * inv


class APPNP(nn.Module):
    """PyG's `APPNP(K, alpha, dropout=0.0, cached=False, add_self_loops=True, normalize=True)`.

    `forward(x, edge_index, edge_weight=None)`; no parameters.
    """

    def __init__(
        self,
        K: int,
        alpha: float,
        dropout: float = 0.0,
        cached: bool = False,
        add_self_loops: bool = True,
        normalize: bool = True,
    ):
        super().__init__()
        if not isinstance(K, int) or K < 0:
            raise ArgumentError(f"APPNP: K must be a non-negative integer, got {K!r}")
        self.K, self.alpha, self.dropout = K, alpha, dropout
        self.cached, self.add_self_loops, self.normalize = cached, add_self_loops, normalize
        self._cached: tuple | None = None
        self._step = kernel(STEP, "appnp")

    def reset_parameters(self) -> None:
        self._cached = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cached"] = None
        return state

    def forward(self, x: torch.Tensor, edge_index: Any, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise ArgumentError("APPNP: x must be one tensor")
        adj = inputs.adjacency(edge_index)
        num_nodes = x.shape[0]
        inputs.sizes(adj, x, x, None, bipartite=False)
        edges = adj.edge_index
        if self.cached and self._cached is not None:
            edges, w, loop = self._cached
        else:
            if self.normalize:
                w, loop = gcn_weights(adj, edge_weight, num_nodes, self.add_self_loops, x.dtype)
            else:
                weight = inputs.edge_values(adj, edge_weight)
                weight = None if weight is None else weight.to(x.dtype)
                w, loop = self_loops.no_loops(weight, edges.shape[1], num_nodes, x.dtype)
            if self.cached:
                self._cached = (edges, w.detach(), loop.detach())
        h = x
        num_edges = w.shape[0]
        for _ in range(self.K):
            if self.dropout > 0 and self.training:
                # one draw over the edges, then the loops: the order of PyG's edge_weight;
                # as PyG, each step drops from the previous step's weights
                dropped = F.dropout(torch.cat([w, loop]), p=self.dropout)
                w, loop = dropped[:num_edges], dropped[num_edges:]
            x = self._step(edges, x, h, w, loop, self.alpha, num_vertices=num_nodes)
        return x

    def __repr__(self) -> str:
        return f"{type(self).__name__}(K={self.K}, alpha={self.alpha})"


__all__ = ["APPNP", "gcn_weights"]
