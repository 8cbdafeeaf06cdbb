"""`SimpleConv`: PyG's parameter-free propagation, `aggr(w[e] * x[u])`, as one gnnc kernel.

The aggregations are `conv/aggregate.py`'s (sum, mean, max, min, weighted
or not); `combine_root="sum"` adds the destination's row in the same kernel:

    kernel simple_conv_max_root_weighted(x: f32[V, F], r: f32[V, F], w: f32[E]) -> f32[V, F] {
        out[v] = max(w[e] * x[u]) + r[v]
    }

`combine_root="cat"` concatenates `[x_dst, out]` in torch, as PyG.
`combine_root="self_loop"` aggregates over the graph with PyG's self loops:
an edge_index's edges then a loop (i, i) of weight 1 per vertex (`add_self_loops`);
a SparseTensor's edges with its diagonal replaced by loops of weight 1
(`set_diag`); a torch.sparse adjacency's entries with a loop of weight 1
added to each diagonal entry, merged where one exists (its coalesced sum).
That edge list is made once per graph and kept with it (`graphs.derived`;
under torch.compile an edge_index's comes from a custom op that reads the
same cache), so its gnnc graph is built once too; only the weights are made
per call.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import derived, inputs
from gnnc.nn.conv.aggregate import aggregate, aggregation, kernels
from gnnc.nn.kernels import kernel
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp
from gnnc.torch import graphs
from gnnc.torch.kernels import Kernel

LAYER = "SimpleConv"

#: PyG's values of `combine_root`.
COMBINE_ROOTS = ("sum", "cat", "self_loop", None)


def root_kernels(aggr: str) -> tuple[Kernel, Kernel]:
    """The (unweighted, weighted) kernels of `aggr` (a language name) plus the destination's row."""
    name = f"simple_conv_{aggr}_root"
    plain = f"kernel {name}(x: f32[V, F], r: f32[V, F]) -> f32[V, F] {{ out[v] = {aggr}(x[u]) + r[v] }}"
    weighted = (
        f"kernel {name}_weighted(x: f32[V, F], r: f32[V, F], w: f32[E]) -> f32[V, F] "
        f"{{ out[v] = {aggr}(w[e] * x[u]) + r[v] }}"
    )
    return kernel(plain, name), kernel(weighted, f"{name}_weighted")


def _looped(adj: inputs.Adjacency, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """(edges with PyG's self loops, the edges kept or None for all, the loops appended) of `adj`,
    made once per graph (under torch.compile, an edge_index's by a custom op that reads the cache)."""
    if not adj.sparse:
        return derived.appended_loops(adj.index, num_nodes), None, num_nodes
    edges = adj.edge_index

    def make() -> tuple[torch.Tensor, torch.Tensor | None, int]:
        with torch.inference_mode(False):
            ids = torch.arange(num_nodes, dtype=edges.dtype, device=edges.device)
            is_loop = edges[0] == edges[1]
            if adj.sparse_tensor:  # set_diag: the diagonal replaced
                keep = ~is_loop
                return torch.cat([edges[:, keep], torch.stack([ids, ids])], dim=1), keep, num_nodes
            # a torch.sparse adjacency's coalesced sum: an existing diagonal entry takes the loop's weight
            has = torch.zeros(num_nodes, dtype=torch.bool, device=edges.device)
            has[edges[1][is_loop]] = True
            ids = ids[~has]
            return torch.cat([edges, torch.stack([ids, ids])], dim=1), None, int(ids.shape[0])

    return graphs.derived(adj.index, ("nn.simple_conv.self_loop", adj.layout, num_nodes), make)


def _loop_weights(
    adj: inputs.Adjacency, weight: torch.Tensor | None, keep: torch.Tensor | None, count: int
) -> torch.Tensor | None:
    """The weights of `_looped`'s edges: the kept edges' then 1 per loop appended."""
    if weight is None:
        return None
    if adj.sparse and not adj.sparse_tensor:
        edges = adj.edge_index
        weight = weight + (edges[0] == edges[1]).to(weight.dtype)
    elif keep is not None:
        weight = weight[keep]
    return torch.cat([weight, weight.new_ones(count)])


class SimpleConv(WarmUp, nn.Module):
    """PyG's `SimpleConv(aggr="sum", combine_root=None, **kwargs)`.

    `forward(x, edge_index, edge_weight=None, size=None)`; x may be a pair
    `(x_src, x_dst)` (x_dst may be None: nothing to combine), `edge_index` a
    torch.sparse adjacency or a SparseTensor (its values are the weights) or
    a sampled block. aggr: "sum"/"add", "mean", "max", "min" (PyG's "mul",
    lists and Aggregation modules are refused). No parameters.
    """

    def __init__(self, aggr: Any = "sum", combine_root: str | None = None, **kwargs: Any):
        super().__init__()
        if combine_root not in COMBINE_ROOTS:
            raise ArgumentError(
                f"{LAYER}: received invalid value for 'combine_root' (got {combine_root!r}); "
                f"use one of {', '.join(map(repr, COMBINE_ROOTS))}"
            )
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        self.aggr, self.combine_root = aggr, combine_root
        self._aggr = aggregation(aggr, LAYER)
        self._kernels = kernels(self._aggr)
        self._root = root_kernels(self._aggr) if combine_root == "sum" else None

    def reset_parameters(self) -> None:
        pass

    def forward(
        self, x: Any, edge_index: Any, edge_weight: torch.Tensor | None = None, size: Any = None
    ) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        bipartite = not isinstance(x, torch.Tensor) or adj.block
        if self.combine_root == "self_loop" and (
            bipartite or (isinstance(size, (tuple, list, torch.Size)) and len(size) == 2 and size[0] != size[1])
        ):
            raise ArgumentError(f"{LAYER}: cannot use `combine_root='self_loop'` for bipartite message passing")
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        sizes = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        weight = inputs.edge_values(adj, edge_weight)
        if weight is not None:
            weight = weight.to(x_src.dtype)
        graph: Any = adj.index
        if self.combine_root == "self_loop":
            graph, keep, count = _looped(adj, x_src.shape[0])
            weight = _loop_weights(adj, weight, keep, count)
        if self._root is not None and x_dst is not None:
            if x_dst.shape[-1] != x_src.shape[-1]:
                raise ArgumentError(
                    f"{LAYER}: combine_root='sum' adds x_dst ({x_dst.shape[-1]} channels) to the aggregation "
                    f"of x_src ({x_src.shape[-1]} channels): they must have as many"
                )
            if weight is None:
                return self._root[0](graph, x_src, x_dst, size=sizes)
            return self._root[1](graph, x_src, x_dst, weight, size=sizes)
        out = aggregate(self._kernels, graph, x_src, sizes, weight)
        if self.combine_root == "cat" and x_dst is not None:
            return torch.cat([x_dst, out], dim=-1)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


__all__ = ["COMBINE_ROOTS", "SimpleConv", "root_kernels"]
