"""`PDNConv`: PyG's pathfinder discovery network convolution (Rozemberczki et al.); one gnnc kernel.

An MLP of the edge features gives each edge a scalar weight in (0, 1)
(`mlp`, torch's: `[E, edge_dim] -> [E]`, the layer's own per-edge input),
and the layer is GCN's propagation with those weights: self loops added,
symmetric normalisation, `sum(w[e] n[u] n[v] x[u])`. The normalisation is
fused as in GCNConv (`gcn_conv.py`): the self loops are a weight per vertex
`loop[v]`, never new edges, the graph's own loops zeroed in `w` where PyG
drops them, and the degrees, `n = deg^-1/2` and the sum are one kernel,
GCNConv's `gcn_conv` for "add" (`gcn_conv_unweighted` on an edge_index
without edge features: no E weights made). PyG's other aggregations (its
`aggr=`, and the spmm `reduce` of a sparse adjacency) take the loop's
message `l[v] = loop[v] n[v]^2 x[v]` among their terms, leaving the graph's
own loops out by `self_loop(e)`:

    kernel pdn_conv_max_loops(x: f32[V, F], w: f32[E], loop: f32[V]) -> f32[V, F] {
        s[v] = sum(w[e])
        d[v] = loop[v] + s[v]
        n[v] = step(d[v]) * rsqrt(d[v] + 1 - step(d[v]))
        r[v] = step(d[v]) - s[v] * n[v] * n[v]
        l[v] = (detach(loop[v] * n[v] * n[v]) + (r[v] - detach(r[v]))) * x[v]
        out[v] = l[v] + max((1 - self_loop(e)) * relu(w[e] * n[u] * n[v] * x[u] - l[v]))
    }

(`loop n^2` differentiated as `1 - s n^2`, its equal, as GCNConv's kernel
does; "mean" divides `l[v] + sum(...)` by `sum(1 - self_loop(e)) + 1`, "min"
mirrors "max"). Without self loops the kernel is `aggr(w[e] n[u] n[v]
x[u])`, without normalisation `aggr(w[e] x[u])` (`aggregate_<aggr>_weighted`).
`lin` runs before the kernel, the bias after it, as PyG's.

The graph's own loops: an edge_index keeps the last one's weight for the
added loop (`add_remaining_self_loops`), a SparseTensor replaces them by a
loop of weight 1 (`fill_diag`), and a torch.sparse adjacency adds 1 to
them (PyG's `add_self_loops` coalesces the appended loop into the entry).
A torch.sparse adjacency's values are the weights and no MLP runs (PyG's
`gcn_norm` and `spmm` read the adjacency's values, not `edge_attr`).
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import derived, inputs, self_loops
from gnnc.nn.conv.aggregate import aggregate, aggregation, kernels
from gnnc.nn.conv.gcn_conv import NORMALIZED, UNWEIGHTED
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.init import glorot, zeros
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import add_bias
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "PDNConv"

#: Degrees and deg^-1/2 of the weights, and the loop's message `l[v]` (see the module).
LOOP_TERM = """
    s[v] = sum(w[e])
    d[v] = loop[v] + s[v]
    n[v] = step(d[v]) * rsqrt(d[v] + 1 - step(d[v]))
    r[v] = step(d[v]) - s[v] * n[v] * n[v]
    l[v] = (detach(loop[v] * n[v] * n[v]) + (r[v] - detach(r[v]))) * x[v]
"""

MESSAGE = "w[e] * n[u] * n[v] * x[u]"

#: The aggregations with the loop's message among their terms, the graph's own loops left out.
LOOPED = {
    "mean": f"    out[v] = (l[v] + sum((1 - self_loop(e)) * {MESSAGE})) / (sum(1 - self_loop(e)) + 1)\n",
    "max": f"    out[v] = l[v] + max((1 - self_loop(e)) * relu({MESSAGE} - l[v]))\n",
    "min": f"    out[v] = l[v] - max((1 - self_loop(e)) * relu(l[v] - {MESSAGE}))\n",
}


def source(aggr: str, loops: bool) -> tuple[str, str]:
    """(kernel text, name) of the normalised propagation with aggregation `aggr` (a language name),
    with self loops (not "sum": that is GCNConv's `gcn_conv`) or without."""
    if loops:
        name = f"pdn_conv_{aggr}_loops"
        params, body = "x: f32[V, F], w: f32[E], loop: f32[V]", LOOP_TERM + LOOPED[aggr]
    else:
        name = f"pdn_conv_{aggr}"
        params = "x: f32[V, F], w: f32[E]"
        body = (
            "\n    d[v] = sum(w[e])\n    n[v] = step(d[v]) * rsqrt(d[v] + 1 - step(d[v]))\n"
            f"    out[v] = {aggr}({MESSAGE})\n"
        )
    return f"kernel {name}({params}) -> f32[V, F] {{{body}}}\n", name


def merged_loops(
    edge_index: torch.Tensor, weight: torch.Tensor, num_nodes: int, fill: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights with self loops zeroed, loop weight per vertex): PyG's `add_self_loops` on a
    torch.sparse adjacency, whose coalescing adds the appended loop into a vertex's own entry."""
    is_loop = edge_index[0] == edge_index[1]
    own = torch.where(is_loop, weight, torch.zeros((), dtype=weight.dtype, device=weight.device))
    loop = torch.full((num_nodes,), fill, dtype=weight.dtype, device=weight.device)
    loop = loop.index_add(0, edge_index[1].to(torch.int64), own)
    return weight - own, loop


class PDNConv(WarmUp, nn.Module):
    """PyG's `PDNConv(in_channels, out_channels, edge_dim, hidden_channels, add_self_loops=True,
    normalize=True, bias=True, **kwargs)`.

    `forward(x, edge_index, edge_attr=None)`; x one tensor (PyG's layer is
    not bipartite; a sampled block is run on its sources' square graph).
    Parameters `lin` (torch's Linear, no bias), `mlp` (`Linear(edge_dim,
    hidden)`, ReLU, `Linear(hidden, 1)`, Sigmoid) and `bias`, PyG's. A
    SparseTensor's values are the edge features (PyG's); without edge
    features every edge weighs 1. aggr (a MessagePassing option): "add"
    (PyG's default)/"sum", "mean", "max", "min". As in PyG, self loops are
    added only with `normalize`.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        edge_dim: int,
        hidden_channels: int,
        add_self_loops: bool = True,
        normalize: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        aggr = kwargs.pop("aggr", "add")
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        self.aggr, self._aggr = aggr, aggregation(aggr, LAYER)
        for what, value in (("in_channels", in_channels), ("edge_dim", edge_dim), ("hidden_channels", hidden_channels)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArgumentError(
                    f"{LAYER}: {what} must be a positive integer (no lazy sizing, as PyG), got {value!r}"
                )
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.edge_dim, self.hidden_channels = edge_dim, hidden_channels
        self.add_self_loops, self.normalize = add_self_loops, normalize
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.mlp = nn.Sequential(
            nn.Linear(edge_dim, hidden_channels), nn.ReLU(inplace=True), nn.Linear(hidden_channels, 1), nn.Sigmoid()
        )
        self.bias: nn.Parameter | None = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._plain, self._weighted = kernels(self._aggr)
        self._kernel: Any = None
        self._unweighted: Any = None
        if normalize:
            loops = bool(add_self_loops)
            if loops and self._aggr == "sum":
                self._kernel, self._unweighted = (
                    kernel(NORMALIZED, "gcn_conv"),
                    kernel(UNWEIGHTED, "gcn_conv_unweighted"),
                )
            else:
                self._kernel = kernel(*source(self._aggr, loops))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation, draw for draw."""
        first, last = cast(nn.Linear, self.mlp[0]), cast(nn.Linear, self.mlp[2])
        glorot(self.lin.weight)
        glorot(first.weight)
        glorot(last.weight)
        zeros(first.bias)
        zeros(last.bias)
        zeros(self.bias)

    def _weights(self, adj: inputs.Adjacency, edge_attr: Any) -> torch.Tensor | None:
        """The edge weights: the MLP of the edge features (a SparseTensor's values), a torch.sparse
        adjacency's values, or None (every edge 1)."""
        if adj.sparse and edge_attr is not None:
            raise ArgumentError(
                f"{LAYER}: edge_attr was given with a sparse adjacency ({adj.layout}), whose values PyG's "
                "PDNConv reads instead: pass the edge features as a SparseTensor's values, or an edge_index "
                "with edge_attr"
            )
        if adj.layout == inputs.Layout.TORCH_SPARSE:
            return inputs.edge_values(adj, None)
        features = inputs.edge_attributes(adj, edge_attr)
        if features is None:
            return None
        features = inputs.edge_features(features, adj.num_edges, self.edge_dim, LAYER)
        return self.mlp(features).squeeze(-1)

    def _loops(
        self, adj: inputs.Adjacency, weight: torch.Tensor, num_nodes: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights, loop weight per vertex) of PyG's `gcn_norm` with self loops, per graph form."""
        if adj.layout == inputs.Layout.TORCH_SPARSE:
            return merged_loops(adj.edge_index, weight, num_nodes, 1.0)
        return self_loops.gcn_loops(adj, weight, num_nodes, True, 1.0, dtype)

    def forward(self, x: torch.Tensor, edge_index: Any, edge_attr: torch.Tensor | None = None) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise ArgumentError(f"{LAYER} does not support bipartite message passing: x must be one tensor")
        x = inputs.check_features(x, LAYER)
        adj, keep = inputs.square(inputs.adjacency(edge_index), x, LAYER)
        num_nodes = x.shape[0]
        sizes = inputs.sizes(adj, x, x, None, bipartite=False)
        weight = self._weights(adj, edge_attr)
        h = self.lin(x)
        # the weights in x's precision (under autocast the MLP's are half, the kernel's float32)
        dtype = x.dtype
        if weight is not None:
            weight = weight.to(dtype)
        if not self.normalize:
            out = aggregate((self._plain, self._weighted), adj.index, h, sizes, weight)
        elif not self.add_self_loops:
            if weight is None:
                weight = x.new_ones(adj.num_edges)
            out = self._kernel(adj.index, h, weight, size=sizes)
        elif weight is None and self._unweighted is not None and not adj.sparse:
            # GCNConv's kernel of an unweighted edge_index: no E weights made
            loops = derived.gcn_loops(adj.index, num_nodes, 1.0, dtype).to(h.device)
            out = self._unweighted(adj.index, h, loops[0], loops[1], size=sizes)
        else:
            if weight is None:
                weight = x.new_ones(adj.num_edges)
            out = self._kernel(adj.index, h, *self._loops(adj, weight, num_nodes, dtype), size=sizes)
        if keep is not None:  # a block: the rows of its destinations
            out = out[:keep]
        return add_bias(out, self.bias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


__all__ = ["PDNConv", "merged_loops", "source"]
