"""`ARMAConv`: PyG's ARMA filter layer (Bianchi et al.); each propagation step is one gnnc kernel.

K stacks of T layers, `X_k^(t+1) = act(L X_k^(t) W_k^(t) + dropout(X) V_k^(t) + b_k^(t))`,
the stacks' last layers averaged; L is the GCN-normalised adjacency
without self loops (PyG's `gcn_norm(add_self_loops=False)`). The K stacks
run side by side as the columns of one `[V, K * F_out]` tensor (a per-edge
weight is the same for every stack), and a step is one kernel with the
normalisation and the root term fused:

    kernel arma_step_weighted(h: f32[V, F], r: f32[V, F], w: f32[E]) -> f32[V, F] {
        d[v] = sum(w[e])
        n[v] = (step(d[v]) + step(-d[v])) * rsqrt(d[v] + 1 - step(d[v]) - step(-d[v]))
        out[v] = r[v] + n[v] * sum(w[e] * n[u] * h[u])
    }

`n` is deg^-1/2, 0 where the degree is 0 and NaN where it is negative (as
PyG's `deg.pow(-0.5)` with its infinities masked, `lg_conv.py`); without
edge weights the degree is `deg_in(v)` and no edge is read (`arma_step`).
`r = dropout(x) V + b` is one `addmm` in torch, so the kernel's result is
the pre-activation; `act` runs in torch on PyG's `[K, V, F_out]` view of it
(an activation that is not elementwise sees PyG's axes). The first layer's
`x W^(0)` runs after the propagation where `x` is the narrower side
(`L (x W) = (L x) W`): then the step is `lg_conv.py`'s kernel on `x` and
`(L x) W + r` one `addmm`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parameter import UninitializedParameter

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv import lg_conv
from gnnc.nn.conv.sg_conv import check_in_channels, check_out_channels, square_graph
from gnnc.nn.init import glorot, zeros
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import is_lazy
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "ARMAConv"

#: PyG's default activation, one module shared by the layers that take the default (it holds nothing)
RELU = nn.ReLU()

STEP = """
kernel arma_step(h: f32[V, F], r: f32[V, F]) -> f32[V, F] {
    n[v] = step(deg_in(v)) * rsqrt(deg_in(v) + 1 - step(deg_in(v)))
    out[v] = r[v] + n[v] * sum(n[u] * h[u])
}
"""
STEP_WEIGHTED = """
kernel arma_step_weighted(h: f32[V, F], r: f32[V, F], w: f32[E]) -> f32[V, F] {
    d[v] = sum(w[e])
    n[v] = (step(d[v]) + step(-d[v])) * rsqrt(d[v] + 1 - step(d[v]) - step(-d[v]))
    out[v] = r[v] + n[v] * sum(w[e] * n[u] * h[u])
}
"""


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"{LAYER}: {what} must be a positive integer, got {value!r}")
    return value


def _stacked(weight: torch.Tensor) -> torch.Tensor:
    """`[K, F_in, F_out]` per-stack matrices as one `[F_in, K * F_out]`: x times it is every stack's
    product side by side."""
    k, f_in, f_out = weight.shape
    return weight.permute(1, 0, 2).reshape(f_in, k * f_out)


class ARMAConv(WarmUp, nn.Module):
    """PyG's `ARMAConv(in_channels, out_channels, num_stacks=1, num_layers=1, shared_weights=False,
    act=ReLU(), dropout=0.0, bias=True, **kwargs)`.

    `forward(x, edge_index, edge_weight=None)`; a sparse adjacency's values
    are the weights. Parameters `weight` `[max(1, T - 1), K, F_out, F_out]`,
    `init_weight` `[K, F_in, F_out]`, `root_weight` `[T, K, F_in, F_out]` and
    `bias` `[T, K, 1, F_out]` (T = 1 with `shared_weights`), PyG's;
    `in_channels=-1` sizes them by the first input. The root term's dropout
    is drawn as PyG's (one `F.dropout` of x per layer).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        num_stacks: int = 1,
        num_layers: int = 1,
        shared_weights: bool = False,
        act: Callable | None = RELU,
        dropout: float = 0.0,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        self.in_channels = check_in_channels(LAYER, in_channels)
        self.out_channels = check_out_channels(LAYER, out_channels)
        self.num_stacks, self.num_layers = _count(num_stacks, "num_stacks"), _count(num_layers, "num_layers")
        if act is not None and not callable(act):
            raise ArgumentError(f"{LAYER}: act must be a callable (a torch.nn activation) or None, got {act!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout <= 1.0:
            raise ArgumentError(f"{LAYER}: dropout must be a probability in [0, 1], got {dropout!r}")
        self.act, self.shared_weights, self.dropout = act, shared_weights, dropout
        k, t = num_stacks, 1 if shared_weights else num_layers
        self.weight = nn.Parameter(torch.empty(max(1, t - 1), k, out_channels, out_channels))
        self.init_weight: Any
        self.root_weight: Any
        if in_channels > 0:
            self.init_weight = nn.Parameter(torch.empty(k, in_channels, out_channels))
            self.root_weight = nn.Parameter(torch.empty(t, k, in_channels, out_channels))
        else:
            self.init_weight = UninitializedParameter()
            self.root_weight = UninitializedParameter()
        self._hook: Any = self.register_forward_pre_hook(ARMAConv._size_by_input) if in_channels < 0 else None
        self.bias = nn.Parameter(torch.empty(t, k, 1, out_channels)) if bias else None
        self._step, self._step_weighted = kernel(STEP, "arma_step"), kernel(STEP_WEIGHTED, "arma_step_weighted")
        self._plain = kernel(lg_conv.UNWEIGHTED, "lg_conv")
        self._weighted = kernel(lg_conv.WEIGHTED, "lg_conv_weighted")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation, draw for draw (the input weights once sized)."""
        glorot(self.weight)
        if not is_lazy(self.init_weight):
            glorot(self.init_weight)
            glorot(self.root_weight)
        zeros(self.bias)

    def _size(self, in_channels: int) -> None:
        t, k = self.weight.size(0) + 1, self.weight.size(1)
        if self.shared_weights:
            t = 1
        self.init_weight.materialize((k, in_channels, self.out_channels))
        self.root_weight.materialize((t, k, in_channels, self.out_channels))
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    @staticmethod
    @torch.no_grad()
    def _size_by_input(module: ARMAConv, args: tuple) -> None:
        """The first call sizes lazy input weights by x and initialises them, as PyG's hook."""
        if is_lazy(module.init_weight) and args and isinstance(args[0], torch.Tensor):
            module._size(int(args[0].size(-1)))
            glorot(module.init_weight)
            glorot(module.root_weight)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        # a sized state sizes a lazy layer (PyG's cannot load one)
        init = state_dict.get(prefix + "init_weight")
        if init is not None and not is_lazy(init) and is_lazy(self.init_weight):
            self._size(int(init.size(-2)))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _activate(self, out: torch.Tensor, n: int) -> torch.Tensor:
        """act on PyG's [K, V, F_out] view of the [V, K * F_out] columns."""
        if self.act is None:
            return out
        view = out.view(n, self.num_stacks, self.out_channels).transpose(0, 1)
        return self.act(view).transpose(0, 1).reshape(n, -1)

    def forward(self, x: torch.Tensor, edge_index: Any, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        x, adj = square_graph(LAYER, x, edge_index)
        n, k, width = x.shape[0], self.num_stacks, self.out_channels
        if x.shape[-1] != self.init_weight.shape[1]:
            raise ArgumentError(f"{LAYER}: x has {x.shape[-1]} channels, the layer {self.init_weight.shape[1]}")
        weight = inputs.edge_values(adj, edge_weight)
        w = None if weight is None else weight.to(x.dtype)
        edges = adj.index
        out = x
        for t in range(self.num_layers):
            at = 0 if self.shared_weights else t
            root = F.dropout(x, p=self.dropout, training=self.training)
            wr = _stacked(self.root_weight[at])
            r = root @ wr if self.bias is None else torch.addmm(self.bias[at].reshape(-1), root, wr)
            if t == 0 and x.shape[-1] < k * width:
                # the narrower side: L (x W) as (L x) W
                px = self._plain(edges, x, num_vertices=n) if w is None else self._weighted(edges, x, w, num_vertices=n)
                out = torch.addmm(r, px, _stacked(self.init_weight))
            else:
                if t == 0:
                    h = x @ _stacked(self.init_weight)
                else:
                    step = self.weight[0 if self.shared_weights else t - 1]
                    if k == 1:
                        h = out @ step[0]
                    else:
                        h = torch.einsum("vkf,kfg->vkg", out.view(n, k, width), step).reshape(n, k * width)
                if w is None:
                    out = self._step(edges, h, r, num_vertices=n)
                else:
                    out = self._step_weighted(edges, h, r, w, num_vertices=n)
            out = self._activate(out, n)
        return out.view(n, k, width).mean(dim=1)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.in_channels}, {self.out_channels}, "
            f"num_stacks={self.num_stacks}, num_layers={self.num_layers})"
        )


__all__ = ["ARMAConv"]
