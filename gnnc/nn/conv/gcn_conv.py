"""`GCNConv`: PyG's graph convolution (Kipf and Welling), normalisation and aggregation fused.

Kernel (`normalize=True`): with `w` the edge weights and `loop` the self-loop
weight per vertex (`gnnc.nn.self_loops`),

    kernel gcn_conv(x: f32[V, F], w: f32[E], loop: f32[V]) -> f32[V, F] {
        s[v] = sum(w[e])
        d[v] = loop[v] + s[v]
        n[v] = step(d[v]) * rsqrt(d[v] + 1 - step(d[v]))
        r[v] = step(d[v]) - s[v] * n[v] * n[v]
        c[v] = detach(loop[v] * n[v] * n[v]) + (r[v] - detach(r[v]))
        out[v] = c[v] * x[v] + sum(w[e] * n[u] * n[v] * x[u])
    }

`n` is deg^-1/2, 0 where the degree is 0 (as PyG). v's own coefficient,
loop / d, is computed as `loop n^2` and differentiated as `1 - s / d`, its
equal (`r - detach(r)` is 0 with r's gradient): autodiff of `loop n^2`
gives d/dloop as `n^2 - loop n^4`, two terms of 1 / d that cancel where v
has no other in-edge (s = 0, the true gradient 0): in float32, 5.5e-4 off
at a loop weight of 0.0059 (a hypothesis case). From `1 - s n^2` it is
`s n^4`, exactly 0 there; the forward keeps `loop n^2`, which `1 - s n^2`
would round badly where loop is small against s (a hub). On an edge_index
without edge weights the kernel reads no edge at all (`gcn_conv_unweighted`):
it sums over the edges that are not self loops (`self_loop(e)`), weighs v's
own term by `loop[v]`, and `c[v]` is that weight less the count of v's own
loop edges (`self_loops.unweighted_loops`), so `c[v] + deg_in(v)` is the
degree. With no edge data there is no `w[e]` to read by edge id: neither
the graph nor its reversed one (the gradient's) keeps its edge ids for it,
and no E floats of ones are made (1.25 GiB at 64M edges). (The kernel once
summed the graph's own loops too and took their count back out of `c[v]`
n[v]^2 x[v]: a vertex with k loops then lost about k^2 ulps, 6e-3 of its
value at k = 1,000.) Without normalisation
the kernel is `sum(w[e] * x[u])` (or `sum(x[u])`). The linear transform
runs before the aggregation when it shrinks the features (as PyG always
does) and after it when it widens them: the same product, fewer flops.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import derived, inputs, self_loops, static_graphs
from gnnc.nn.init import zeros
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear, add_bias
from gnnc.nn.message_passing import CachedGraph, check_options
from gnnc.nn.precompile import WarmUp

NORMALIZED = """
kernel gcn_conv(x: f32[V, F], w: f32[E], loop: f32[V]) -> f32[V, F] {
    s[v] = sum(w[e])
    d[v] = loop[v] + s[v]
    n[v] = step(d[v]) * rsqrt(d[v] + 1 - step(d[v]))
    r[v] = step(d[v]) - s[v] * n[v] * n[v]
    c[v] = detach(loop[v] * n[v] * n[v]) + (r[v] - detach(r[v]))
    out[v] = c[v] * x[v] + sum(w[e] * n[u] * n[v] * x[u])
}
"""
UNWEIGHTED = """
kernel gcn_conv_unweighted(x: f32[V, F], c: f32[V], loop: f32[V]) -> f32[V, F] {
    d[v] = c[v] + deg_in(v)
    n[v] = step(d[v]) * rsqrt(d[v] + 1 - step(d[v]))
    out[v] = loop[v] * n[v] * n[v] * x[v] + sum((1 - self_loop(e)) * n[u] * n[v] * x[u])
}
"""
WEIGHTED = """
kernel gcn_conv_weighted(x: f32[V, F], w: f32[E]) -> f32[V, F] {
    out[v] = sum(w[e] * x[u])
}
"""
LAYER = "GCNConv"

PLAIN = """
kernel gcn_conv_plain(x: f32[V, F]) -> f32[V, F] {
    out[v] = sum(x[u])
}
"""


class GCNConv(CachedGraph, WarmUp, nn.Module):
    """PyG's `GCNConv(in_channels, out_channels, improved, cached, add_self_loops, normalize, bias, **kwargs)`.

    `forward(x, edge_index, edge_weight=None)`; `edge_index` may be a
    torch.sparse adjacency or a SparseTensor `adj_t` (its values are the
    weights). Parameters `lin.weight` `[out, in]` and `bias` `[out]`, as
    PyG's; `in_channels=-1` sizes `lin` by the first input.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        improved: bool = False,
        cached: bool = False,
        add_self_loops: bool | None = None,
        normalize: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        if isinstance(in_channels, bool) or not isinstance(in_channels, int) or (in_channels < 1 and in_channels != -1):
            raise ArgumentError(f"{LAYER}: in_channels must be a positive integer or -1 (lazy), got {in_channels!r}")
        if add_self_loops is None:
            add_self_loops = normalize
        if add_self_loops and not normalize:
            raise ArgumentError(
                "GCNConv does not support adding self-loops to the graph when no on-the-fly normalization is applied"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.improved, self.cached = improved, cached
        self.add_self_loops, self.normalize = add_self_loops, normalize
        self._cached: tuple | None = None
        if normalize:
            self._normalized = kernel(NORMALIZED, "gcn_conv")
            self._unweighted = kernel(UNWEIGHTED, "gcn_conv_unweighted")
        else:
            self._plain, self._weighted = kernel(PLAIN, "gcn_conv_plain"), kernel(WEIGHTED, "gcn_conv_weighted")
        self.lin = Linear(in_channels, out_channels, bias=False, weight_initializer="glorot")
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()
        zeros(self.bias)
        self._cached = None

    def _weights(self, adj: inputs.Adjacency, edge_weight: Any, num_nodes: int, x: torch.Tensor) -> tuple:
        """(unweighted, args): for `gcn_conv`, (w, loop), the edge weights and the self-loop
        weight per vertex; for an edge_index without weights, `gcn_conv_unweighted`'s (c, loop)
        (`self_loops.unweighted_loops`); in x's dtype, on x's device."""
        dtype = x.dtype
        weight = inputs.edge_values(adj, edge_weight)
        if weight is None and not adj.sparse:
            # PyG 2.8 fills remaining loops with 1 for an unweighted graph, improved or not;
            # without added loops the graph's own are edges like any other.
            # A Graph's are made on the host, where its edges are
            loops = derived.gcn_loops(adj.index, num_nodes, 1.0, dtype, self.add_self_loops).to(x.device)
            return True, (loops[0], loops[1])
        if weight is not None:
            weight = weight.to(dtype)
        # weighted (or a sparse adjacency): PyG 2.8 fills remaining loops with 2 when improved
        fill = 2.0 if self.improved else 1.0
        return False, self_loops.gcn_loops(adj, weight, num_nodes, self.add_self_loops, fill, dtype)

    def forward(self, x: torch.Tensor, edge_index: Any, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        if static_graphs.batched(x):
            return static_graphs.call(
                LAYER, self.forward, x, edge_index, takes_size=False, edge_weight=edge_weight, node_dim=self._node_dim
            )
        if not isinstance(x, torch.Tensor):
            raise ArgumentError("GCNConv does not support bipartite message passing: x must be one tensor")
        x = inputs.check_features(x, LAYER)
        adj, keep = inputs.square(inputs.adjacency(edge_index), x, LAYER)
        num_nodes = x.shape[0]
        inputs.sizes(adj, x, x, None, bipartite=False)
        # the product runs on the narrower side of the aggregation: the same result, fewer flops
        widen = self.out_channels > x.shape[-1]
        if not widen:
            x = self.lin(x)
        if self.normalize:
            edges = adj.index
            if self.cached and self._cached is not None:
                # as PyG: the first call's graph and normalisation, whatever the call passes
                edges, unweighted, weights = self._cached
            else:
                unweighted, weights = self._weights(adj, edge_weight, num_nodes, x)
                if self.cached:
                    self._cached = (edges, unweighted, tuple(t.detach() for t in weights))
            normalized = self._unweighted if unweighted else self._normalized
            out = normalized(edges, x, *weights, num_vertices=num_nodes)
        else:
            weight = inputs.edge_values(adj, edge_weight)
            if weight is None:
                out = self._plain(adj.index, x, num_vertices=num_nodes)
            else:
                out = self._weighted(adj.index, x, weight.to(x.dtype), num_vertices=num_nodes)
        if keep is not None:  # a block: the rows of its destinations
            out = out[:keep]
        if widen:
            out = self.lin(out)
        return add_bias(out, self.bias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


__all__ = ["GCNConv"]
