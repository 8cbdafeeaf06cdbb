"""`ChebConv`: PyG's Chebyshev spectral graph convolution (Defferrard et al.).

`out = sum_k lins[k](T_k(L~) x) + bias`, L~ = 2 L / lambda_max - I the
scaled Laplacian (PyG's `get_laplacian`, "sym", "rw" or None, of the graph
without its self loops; made in torch once per call as per-edge weights
`w` and per-vertex loop weights `loop`). Each application of L~ is one gnnc
kernel: `T_1 = L~ x` is SGConv's `gcn_propagate`, and the recurrence
`T_k = 2 L~ T_(k-1) - T_(k-2)` is fused:

    kernel cheb_step(x: f32[V, F], t: f32[V, F], w: f32[E], loop: f32[V]) -> f32[V, F] {
        out[v] = 2 * (loop[v] * x[v] + sum(w[e] * x[u])) - t[v]
    }

Where the Linear layers narrow the features the sum runs by Clenshaw's
recurrence in the output space, `b_k = x W_k + 2 L~ b_(k+1) - b_(k+2)`,
`out = x W_0 + L~ b_1 - b_2` (the same maths: L~ acts on the vertices, W_k
on the features): its K - 1 steps at the output width.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs, static_graphs
from gnnc.nn.conv.sg_conv import PROPAGATE, check_in_channels, check_out_channels, square_graph
from gnnc.nn.init import zeros
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear, add_bias, add_product, linears
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "ChebConv"

STEP = """
kernel cheb_step(x: f32[V, F], t: f32[V, F], w: f32[E], loop: f32[V]) -> f32[V, F] {
    out[v] = 2 * (loop[v] * x[v] + sum(w[e] * x[u])) - t[v]
}
"""

NORMALIZATIONS = (None, "sym", "rw")


def scaled_laplacian(
    adj: inputs.Adjacency,
    edge_weight: Any,
    n: int,
    normalization: str | None,
    lambda_max: Any,
    batch: Any,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(w, loop): PyG's `ChebConv.__norm__` as per-edge and per-vertex weights. The graph's own
    self loops are removed (weight 0 here, the edge kept); degrees are by source, as PyG's."""
    edges = adj.edge_index
    src, dst = edges[0], edges[1]
    weight = inputs.edge_values(adj, edge_weight)
    if weight is None:
        weight = torch.ones(src.shape[0], dtype=dtype, device=src.device)
    own_loop = src == dst
    weight = weight.to(dtype).masked_fill(own_loop, 0.0)
    deg = torch.zeros(n, dtype=dtype, device=src.device).index_add(0, src, weight)
    if normalization is None:
        lap, lap_loop = -weight, deg
    elif normalization == "sym":
        dis = deg.pow(-0.5).masked_fill(deg == 0, 0.0)
        lap, lap_loop = -(dis[src] * weight * dis[dst]), torch.ones(n, dtype=dtype, device=src.device)
    else:
        inv = (1.0 / deg).masked_fill(deg == 0, 0.0)
        lap, lap_loop = -(inv[src] * weight), torch.ones(n, dtype=dtype, device=src.device)
    if lambda_max is None:
        # the graph's own loops are no Laplacian entries (PyG removed them): -inf never wins the max
        lam = 2.0 * torch.cat([lap.masked_fill(own_loop, float("-inf")), lap_loop]).max()
    elif isinstance(lambda_max, torch.Tensor):
        lam = lambda_max.to(dtype)
    else:
        lam = torch.full((), float(lambda_max), dtype=dtype, device=src.device)  # made on the device
    lam_edge, lam_loop = lam, lam
    if batch is not None and lam.numel() > 1:
        lam_edge, lam_loop = lam[batch[src]], lam[batch]
    w = 2.0 * lap / lam_edge
    w = w.masked_fill(w == float("inf"), 0.0).masked_fill(own_loop, 0.0)
    loop = 2.0 * lap_loop / lam_loop
    return w, loop.masked_fill(loop == float("inf"), 0.0) - 1.0


class ChebConv(WarmUp, nn.Module):
    """PyG's `ChebConv(in_channels, out_channels, K, normalization="sym", bias=True, **kwargs)`.

    `forward(x, edge_index, edge_weight=None, batch=None, lambda_max=None)`;
    a sparse adjacency's values are the weights. Parameters `lins` (K Linear
    layers without bias, glorot) and `bias`, PyG's; `in_channels=-1` sizes
    them by the first input.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        K: int,
        normalization: str | None = "sym",
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        if isinstance(K, bool) or not isinstance(K, int) or K < 1:
            raise ArgumentError(f"{LAYER}: K must be a positive integer (the Chebyshev order), got {K!r}")
        if normalization not in NORMALIZATIONS:
            raise ArgumentError(f"{LAYER}: normalization must be None, 'sym' or 'rw', got {normalization!r}")
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.normalization = normalization
        width = check_in_channels(LAYER, in_channels)
        self.lins = nn.ModuleList(
            [Linear(width, out_channels, bias=False, weight_initializer="glorot") for _ in range(K)]
        )
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._propagate, self._step = kernel(PROPAGATE, "gcn_propagate"), kernel(STEP, "cheb_step")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in linears(self.lins):
            lin.reset_parameters()
        zeros(self.bias)

    def forward(
        self,
        x: torch.Tensor,
        edge_index: Any,
        edge_weight: torch.Tensor | None = None,
        batch: torch.Tensor | None = None,
        lambda_max: Any = None,
    ) -> torch.Tensor:
        if static_graphs.batched(x):
            if batch is not None:
                raise ArgumentError(f"{LAYER}: batch= describes a batch of graphs in one x; a static graph has its own")

            def flat(x: Any, edge_index: Any, edge_weight: Any = None) -> torch.Tensor:
                return self.forward(x, edge_index, edge_weight, lambda_max=lambda_max)

            return static_graphs.call(
                LAYER, flat, x, edge_index, takes_size=False, edge_weight=edge_weight, node_dim=self._node_dim
            )
        x, adj = square_graph(LAYER, x, edge_index)
        n = x.shape[0]
        w, loop = scaled_laplacian(adj, edge_weight, n, self.normalization, lambda_max, batch, x.dtype)
        edges, lins = adj.edge_index, linears(self.lins)

        def step(h: torch.Tensor, t: torch.Tensor | None) -> torch.Tensor:
            if t is None:
                return self._propagate(edges, h, w, loop, num_vertices=n).mul_(2.0)
            return self._step(edges, h, t, w, loop, num_vertices=n)

        k = len(lins)
        if k > 1 and not any(lin.lazy for lin in lins) and self.out_channels < x.shape[-1]:
            # Clenshaw: b_(K-1) = y_(K-1), b_k = y_k + 2 L~ b_(k+1) - b_(k+2), out = y_0 + L~ b_1 - b_2
            b1, b2 = F.linear(x, lins[k - 1].weight), None
            for i in range(k - 2, 0, -1):
                b1, b2 = add_product(step(b1, b2), lins[i], x), b1
            out = self._propagate(edges, b1, w, loop, num_vertices=n)
            out = add_product(out if b2 is None else out.sub_(b2), lins[0], x)
        else:
            t0, out = x, lins[0](x)
            if k > 1:
                t1 = self._propagate(edges, x, w, loop, num_vertices=n)
                out = out + lins[1](t1)
                for lin in lins[2:]:
                    t0, t1 = t1, step(t1, t0)
                    out = out + lin(t1)
        return add_bias(out, self.bias)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.in_channels}, {self.out_channels}, K={len(self.lins)}, "
            f"normalization={self.normalization})"
        )


__all__ = ["ChebConv", "scaled_laplacian"]
