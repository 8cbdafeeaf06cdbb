"""`APPNP`: PyG's personalised-PageRank propagation; each of its K steps is one gnnc kernel.

    kernel appnp(x: f32[V, F], h: f32[V, F], w: f32[E], loop: f32[V], alpha: f32) -> f32[V, F] {
        out[v] = (1 - alpha) * (loop[v] * x[v] + sum(w[e] * x[u])) + alpha * h[v]
    }

`w` and `loop` are the GCN-normalised edge and self-loop weights
(deg^-1/2 A deg^-1/2 with self loops, computed once per call in torch, or
once per layer with `cached=True`), self loops kept as per-vertex weights
(`gnnc.nn.self_loops`). Edge dropout in training mode drops the normalised
weights of the edges and the loops, drawn as PyG draws them: one
`F.dropout` per step over PyG's edge weights in PyG's order (an
edge_index's kept edges then the loops; a sparse adjacency's entries in
row-major order), each step dropping from the previous step's weights.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs, self_loops, static_graphs
from gnnc.nn.kernels import kernel
from gnnc.nn.message_passing import CachedGraph, check_options
from gnnc.nn.precompile import WarmUp

LAYER = "APPNP"

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
    w, loop = self_loops.gcn_loops(adj, weight, num_nodes, add_loops, 1.0, dtype)
    src, dst = adj.edge_index[0], adj.edge_index[1]
    deg = loop.index_add(0, dst, w)
    inv = deg.pow(-0.5)
    inv = inv.masked_fill(inv == float("inf"), 0.0)
    return inv[src] * w * inv[dst], loop * inv * inv


def dropout_order(adj: inputs.Adjacency, add_loops: bool) -> self_loops.Order:
    """Where PyG's `gcn_norm` puts the loops among the edges it drops from."""
    if not add_loops or not adj.sparse:
        return self_loops.Order.APPENDED
    # a SparseTensor's loops replace its own (fill_diag); a torch.sparse one's merge with them
    return self_loops.Order.ROW_MAJOR if adj.sparse_tensor else self_loops.Order.COALESCED


class APPNP(CachedGraph, WarmUp, nn.Module):
    """PyG's `APPNP(K, alpha, dropout=0.0, cached=False, add_self_loops=True, normalize=True, **kwargs)`.

    `forward(x, edge_index, edge_weight=None)`; no parameters. A sparse
    adjacency's values are the weights; a SparseTensor's own self loops are
    replaced (PyG's `fill_diag`), a torch.sparse one's kept beside the new.
    """

    def __init__(
        self,
        K: int,
        alpha: float,
        dropout: float = 0.0,
        cached: bool = False,
        add_self_loops: bool = True,
        normalize: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        if isinstance(K, bool) or not isinstance(K, int) or K < 0:
            raise ArgumentError(f"APPNP: K must be a non-negative integer, got {K!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise ArgumentError(f"APPNP: alpha must be a number (the teleport probability), got {alpha!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout <= 1.0:
            raise ArgumentError(f"APPNP: dropout must be a probability in [0, 1], got {dropout!r}")
        self.K, self.alpha, self.dropout = K, alpha, dropout
        self.cached, self.add_self_loops, self.normalize = cached, add_self_loops, normalize
        self._cached: tuple | None = None
        self._step = kernel(STEP, "appnp")

    def reset_parameters(self) -> None:
        self._cached = None

    def forward(self, x: torch.Tensor, edge_index: Any, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        if static_graphs.batched(x):
            return static_graphs.call(
                LAYER, self.forward, x, edge_index, takes_size=False, edge_weight=edge_weight, node_dim=self._node_dim
            )
        if not isinstance(x, torch.Tensor):
            raise ArgumentError("APPNP: x must be one tensor")
        x = inputs.check_features(x, LAYER)
        adj = inputs.adjacency(edge_index)
        if adj.block:
            raise ArgumentError(
                "APPNP propagates K times over one graph; a sampled block is one hop: pass the batch's "
                "edge_index (its square subgraph) instead"
            )
        num_nodes = x.shape[0]
        inputs.sizes(adj, x, x, None, bipartite=False)
        edges = adj.edge_index
        add_loops = self.add_self_loops and self.normalize
        if self.cached and self._cached is not None:
            edges, w, loop = self._cached
        else:
            if self.normalize:
                w, loop = gcn_weights(adj, edge_weight, num_nodes, self.add_self_loops, x.dtype)
            else:
                weight = inputs.edge_values(adj, edge_weight)
                weight = None if weight is None else weight.to(x.dtype)
                w, loop = self_loops.no_loops(weight, edges.shape[1], num_nodes, x.dtype, x.device)
            if self.cached:
                self._cached = (edges, w.detach(), loop.detach())
        h = x
        drop = self.dropout > 0 and self.training
        if drop:
            # PyG drops from its edge weights (the edges and loops in its order): each entry's row
            keep = torch.ones(edges.shape[1], dtype=torch.bool, device=edges.device)
            if add_loops and not adj.sparse:
                keep = edges[0] != edges[1]  # add_remaining_self_loops drops the graph's loops
            elif add_loops and adj.sparse_tensor:
                keep = edges[0] != edges[1]  # fill_diag replaces them
            count = num_nodes if add_loops else 0
            order = dropout_order(adj, add_loops)
            edge_rank, loop_rank = self_loops.pyg_ranks(edges, keep, count, num_nodes, num_nodes, order)
        for _ in range(self.K):
            if drop:
                # as PyG, each step drops from the previous step's weights; one F.dropout over
                # E + N rows (a fixed shape), whose first rows are PyG's draw (see attention.dropout_masks)
                drawn = F.dropout(torch.ones(w.shape[0] + count, dtype=w.dtype, device=w.device), p=self.dropout)
                w = w * drawn[edge_rank]
                if count:
                    loop = loop * drawn[loop_rank]
            x = self._step(edges, x, h, w, loop, self.alpha, num_vertices=num_nodes)
        return x

    def __repr__(self) -> str:
        return f"{type(self).__name__}(K={self.K}, alpha={self.alpha})"


__all__ = ["APPNP", "dropout_order", "gcn_weights"]
