"""`MixHopConv`: PyG's MixHop layer (Abu-El-Haija et al.): `concat_p lins[p](P^p x) + bias`.

P is the GCN-normalised adjacency, PyG's `gcn_norm` (self loops by
`add_self_loops`). Each application of P is one gnnc kernel with the
normalisation fused, GCNConv's (`gcn_conv.py`; loops as per-vertex weights,
the graph's own loops kept out of the sum without edge weights):

    kernel gcn_conv(x: f32[V, F], w: f32[E], loop: f32[V]) -> f32[V, F] {
        s[v] = sum(w[e])
        d[v] = loop[v] + s[v]
        n[v] = step(d[v]) * rsqrt(d[v] + 1 - step(d[v]))
        ...
        out[v] = c[v] * x[v] + sum(w[e] * n[u] * n[v] * x[u])
    }

and, with `add_self_loops=False`, LGConv's (`lg_conv.py`: deg^-1/2 0 at 0
and NaN below, as PyG's). The degrees are summed again in each step (O(E),
against the O(E F) of the sum) instead of kept as E normalised weights.

P is linear, so `lin_p(P^p x) = P^p (x W_p^T)`. Where that is fewer
columns propagated (the sum over the powers p >= 1 of p F_out against
max(P) F_in), the Linear layers run first, side by side, and the block of
power p leaves the propagated columns after step p: step s propagates the
blocks of the powers >= s only.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import derived, inputs, self_loops
from gnnc.nn.conv import gcn_conv, lg_conv
from gnnc.nn.conv.sg_conv import check_in_channels, check_out_channels, square_graph
from gnnc.nn.init import zeros
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear, add_bias
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "MixHopConv"


def _powers(powers: Any) -> list[int]:
    if powers is None:
        return [0, 1, 2]
    if (
        not isinstance(powers, (list, tuple))
        or not powers
        or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in powers)
    ):
        raise ArgumentError(f"{LAYER}: powers must be a non-empty list of non-negative integers, got {powers!r}")
    return list(powers)


class MixHopConv(WarmUp, nn.Module):
    """PyG's `MixHopConv(in_channels, out_channels, powers=None, add_self_loops=True, bias=True, **kwargs)`.

    `forward(x, edge_index, edge_weight=None)`; a sparse adjacency's values
    are the weights (a torch.sparse one gets a loop added beside its own, a
    SparseTensor has its own replaced, as PyG's `gcn_norm`). Parameters
    `lins` (a Linear without bias per power up to max(powers), `Identity`
    for the powers not listed) and `bias` `[len(powers) * out_channels]`,
    PyG's; `in_channels=-1` sizes them by the first input. The result is
    `[V, len(powers) * out_channels]`.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        powers: list[int] | None = None,
        add_self_loops: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        self.in_channels = check_in_channels(LAYER, in_channels)
        self.out_channels = check_out_channels(LAYER, out_channels)
        self.powers = _powers(powers)
        self.add_self_loops = add_self_loops
        self.lins = nn.ModuleList(
            [
                Linear(in_channels, out_channels, bias=False) if p in self.powers else nn.Identity()
                for p in range(max(self.powers) + 1)
            ]
        )
        self.bias = nn.Parameter(torch.empty(len(self.powers) * out_channels)) if bias else None
        self._looped = kernel(gcn_conv.NORMALIZED, "gcn_conv")
        self._looped_unweighted = kernel(gcn_conv.UNWEIGHTED, "gcn_conv_unweighted")
        self._plain = kernel(lg_conv.UNWEIGHTED, "lg_conv")
        self._weighted = kernel(lg_conv.WEIGHTED, "lg_conv_weighted")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.lins:
            if isinstance(lin, Linear):
                lin.reset_parameters()
        zeros(self.bias)

    def _lin(self, power: int) -> Linear:
        return cast(Linear, self.lins[power])

    def _propagation(self, adj: inputs.Adjacency, edge_weight: Any, n: int, x: torch.Tensor) -> Any:
        """h -> P h for this call's graph: its kernel and per-call weights chosen once."""
        weight = inputs.edge_values(adj, edge_weight)
        weight = None if weight is None else weight.to(x.dtype)
        edges = adj.index
        if not self.add_self_loops:
            if weight is None:
                return lambda h: self._plain(edges, h, num_vertices=n)
            return lambda h: self._weighted(edges, h, weight, num_vertices=n)
        if weight is None and not adj.sparse:
            # GCNConv's: the graph's own loops counted, made once per edge_index
            loops = derived.gcn_loops(edges, n, 1.0, x.dtype, True).to(x.device)
            c, loop = loops[0], loops[1]
            return lambda h: self._looped_unweighted(edges, h, c, loop, num_vertices=n)
        w, loop = self_loops.gcn_loops(adj, weight, n, True, 1.0, x.dtype)
        return lambda h: self._looped(edges, h, w, loop, num_vertices=n)

    def _transform_first(self, x: torch.Tensor) -> bool:
        """Whether the Linear layers run before the propagation: fewer columns propagated."""
        hops = sorted({p for p in self.powers if p > 0})
        if not hops or any(self._lin(p).lazy for p in hops):
            return False
        return sum(hops) * self.out_channels < hops[-1] * x.shape[-1]

    def forward(self, x: torch.Tensor, edge_index: Any, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        x, adj = square_graph(LAYER, x, edge_index)
        n = x.shape[0]
        propagate = self._propagation(adj, edge_weight, n, x)
        outs: dict[int, torch.Tensor] = {0: self.lins[0](x)}
        if self._transform_first(x):
            # blocks in decreasing power: the powers >= s are the first blocks
            hops, width = sorted({p for p in self.powers if p > 0}, reverse=True), self.out_channels
            h = F.linear(x, torch.cat([self._lin(p).weight for p in hops]))
            for s in range(1, hops[0] + 1):
                active = sum(p >= s for p in hops)
                h = propagate(h[:, : active * width])
                if s in hops:
                    outs[s] = h[:, (active - 1) * width : active * width]
        else:
            h = x
            for p in range(1, len(self.lins)):
                h = propagate(h)
                outs[p] = self.lins[p](h)
        out = torch.cat([outs[p] for p in self.powers], dim=-1)
        return add_bias(out, self.bias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, powers={self.powers})"


__all__ = ["MixHopConv"]
