"""`GCN2Conv`: PyG's GCNII layer (Chen et al.): initial residual and identity mapping.

    h = (1 - alpha) P x + alpha x_0
    out = (1 - beta) h + beta h W1                                     (shared_weights)
    out = (1 - beta) (xp + x0) + beta (xp W1 + x0 W2),  xp = (1 - alpha) P x, x0 = alpha x_0

P is the GCN-normalised adjacency with self loops (`appnp.gcn_weights`: the
loops as per-vertex weights; once per call, or with `cached=True` once, the
first call's graph and weights reused by the next calls, as PyG's), or
the raw edge weights with `normalize=False`. With shared weights h is one
gnnc kernel, APPNP's step:

    kernel appnp(x: f32[V, F], h: f32[V, F], w: f32[E], loop: f32[V], alpha: f32) -> f32[V, F] {
        out[v] = (1 - alpha) * (loop[v] * x[v] + sum(w[e] * x[u])) + alpha * h[v]
    }

and without, P x is SGConv's `gcn_propagate`; the mixing with W1 and W2 is
torch's `addmm`, as in PyG.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs, self_loops
from gnnc.nn.conv.appnp import STEP, gcn_weights
from gnnc.nn.conv.sg_conv import PROPAGATE, square_graph
from gnnc.nn.init import glorot
from gnnc.nn.kernels import kernel
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "GCN2Conv"


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentError(f"{LAYER}: {name} must be a number, got {value!r}")
    return float(value)


class GCN2Conv(WarmUp, nn.Module):
    """PyG's `GCN2Conv(channels, alpha, theta=None, layer=None, shared_weights=True, cached=False,
    add_self_loops=True, normalize=True, **kwargs)`.

    `forward(x, x_0, edge_index, edge_weight=None)`: x_0 the initial features
    (its first `x.size(0)` rows are read, as PyG); a sparse adjacency's
    values are the weights. Parameters `weight1` and (without shared
    weights) `weight2`, `[channels, channels]`, PyG's.
    """

    def __init__(
        self,
        channels: int,
        alpha: float,
        theta: float | None = None,
        layer: int | None = None,
        shared_weights: bool = True,
        cached: bool = False,
        add_self_loops: bool = True,
        normalize: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
            raise ArgumentError(f"{LAYER}: channels must be a positive integer, got {channels!r}")
        self.channels, self.alpha = channels, _number("alpha", alpha)
        self.beta = 1.0
        if theta is not None or layer is not None:
            if theta is None or layer is None:
                raise ArgumentError(f"{LAYER}: theta and layer go together (beta = log(theta / layer + 1))")
            self.beta = math.log(_number("theta", theta) / _number("layer", layer) + 1)
        self.cached, self.normalize, self.add_self_loops = cached, normalize, add_self_loops
        self._cached: tuple | None = None
        self.weight1 = nn.Parameter(torch.empty(channels, channels))
        self.weight2 = None if shared_weights else nn.Parameter(torch.empty(channels, channels))
        self._step = kernel(STEP, "appnp")
        self._propagate = kernel(PROPAGATE, "gcn_propagate")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot(self.weight1)
        glorot(self.weight2)
        self._cached = None

    def forward(
        self, x: torch.Tensor, x_0: torch.Tensor, edge_index: Any, edge_weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        x, adj = square_graph(LAYER, x, edge_index)
        if not isinstance(x_0, torch.Tensor):
            raise ArgumentError(f"{LAYER}: x_0 must be a tensor (the initial features)")
        x_0 = inputs.check_features(x_0, LAYER, "x_0")
        n = x.shape[0]
        if x_0.shape[0] < n or x_0.shape[-1] != x.shape[-1]:
            raise ArgumentError(
                f"{LAYER}: x_0 must have at least x's {n} rows and its {x.shape[-1]} channels, "
                f"got shape {tuple(x_0.shape)}"
            )
        edges = adj.edge_index
        if self.cached and self._cached is not None:
            edges, w, loop = self._cached  # PyG's: the first call's graph, whatever this call's
        else:
            if self.normalize:
                w, loop = gcn_weights(adj, edge_weight, n, self.add_self_loops, x.dtype)
            else:
                weight = inputs.edge_values(adj, edge_weight)
                weight = None if weight is None else weight.to(x.dtype)
                w, loop = self_loops.no_loops(weight, adj.num_edges, n, x.dtype, x.device)
            if self.cached:
                self._cached = (edges, w.detach(), loop.detach())
        x_0 = x_0[:n]
        beta = self.beta
        if self.weight2 is None:
            h = self._step(edges, x, x_0, w, loop, self.alpha, num_vertices=n)
            return torch.addmm(h, h, self.weight1, beta=1.0 - beta, alpha=beta)
        xp = self._propagate(edges, x, w, loop, num_vertices=n).mul_(1 - self.alpha)
        x0 = self.alpha * x_0
        out = torch.addmm(xp, xp, self.weight1, beta=1.0 - beta, alpha=beta)
        return out + torch.addmm(x0, x0, self.weight2, beta=1.0 - beta, alpha=beta)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.channels}, alpha={self.alpha}, beta={self.beta})"


__all__ = ["GCN2Conv"]
