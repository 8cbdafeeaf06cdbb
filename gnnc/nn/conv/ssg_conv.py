"""`SSGConv`: PyG's simple spectral graph convolution (Zhu and Koniusz):
`lin(alpha x + (1 - alpha) / K sum_k P^k x)`.

P is the GCN-normalised adjacency with self loops (`appnp.gcn_weights`,
once per call); each of its K applications is one gnnc kernel, SGConv's
`gcn_propagate`. Where the Linear narrows the features it runs first and
the steps at its width (`lin` is linear: `alpha x W + c sum P^k x W + b`);
`cached=True` keeps the propagated sum `h` after the first call and reuses
it whatever the next call's inputs, as PyG's cache does.
"""

from __future__ import annotations

from typing import Any

import torch

from gnnc.errors import ArgumentError
from gnnc.nn.conv.sg_conv import Propagated, check_steps

LAYER = "SSGConv"


class SSGConv(Propagated):
    """PyG's `SSGConv(in_channels, out_channels, alpha, K=1, cached=False, add_self_loops=True, bias=True,
    **kwargs)`.

    `forward(x, edge_index, edge_weight=None)`; a sparse adjacency's values
    are the weights. Parameter `lin`, PyG's; `in_channels=-1` sizes it by
    the first input.
    """

    LAYER = LAYER

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        alpha: float,
        K: int = 1,
        cached: bool = False,
        add_self_loops: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise ArgumentError(f"{LAYER}: alpha must be a number (the teleport weight), got {alpha!r}")
        if check_steps(LAYER, K) == 0:
            raise ArgumentError(f"{LAYER}: K must be at least 1 (PyG averages over K steps)")
        super().__init__(in_channels, out_channels, K, cached, add_self_loops, bias, kwargs)
        self.alpha = float(alpha)

    def _propagate(self, edges: torch.Tensor, x: torch.Tensor, w: torch.Tensor, loop: torch.Tensor, n: int) -> Any:
        h = x * self.alpha
        for _ in range(self.K):
            x = self._step(edges, x, w, loop, num_vertices=n)
            h = h + (1 - self.alpha) / self.K * x
        return h

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, K={self.K}, alpha={self.alpha})"


__all__ = ["SSGConv"]
