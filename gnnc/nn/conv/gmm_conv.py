"""`GMMConv`: PyG's Gaussian mixture model convolution (Monti et al., MoNet); one gnnc kernel.

Each edge weighs K Gaussian kernels of its pseudo-coordinates `edge_attr`
(`[E, D]`), `w_k(e) = exp(-1/2 sum_d (e_d - mu_kd)^2 / (1e-15 + sigma_kd^2))`,
and the message is `sum_k w_k(e) (x_j g)_k`, aggregated by mean (PyG's
default; "add"/"sum", "max", "min"). `x g` is a dense product per vertex,
made in torch and viewed `[V, K, M]` (as PyG does); the Gaussians are
computed in the kernel from `mu` and `sigma`, so their gradients are the
kernel's and no `[E, K]` weights nor `[E, M]` messages are made. A weight
whose exponent is -80 or less is 0 (PyG's is below 1.8e-35 there): the
subnormal floats PyG computes below -87 are 10x slower arithmetic.

    kernel gmm_conv_mean(xg: f32[V, K, M], ea: f32[E, D], mu: f32[K, D], sigma: f32[K, D],
                         onek: f32[K], onekd: f32[K, D], onem: f32[M]) -> f32[V, M] {
        z[e] = outer(onek, ea[e]) - mu
        a[e] = dot(-0.5 * (z[e] * z[e]) / (1e-15 + sigma * sigma), onekd)
        w[e] = exp(max(a[e], -80)) * step(a[e] + 80)
        out[v] = mean(dot(transpose(xg[u]), outer(onem, w[e])))
    }

The language broadcasts by leading axes, so `ea[e]` (`[D]`) reaches each
kernel's row through `outer` with ones (`onek`: `[K]`), `dot` with ones sums
over D, and `dot(transpose(xg[u]), outer(onem, w[e]))` is `sum_k w_k
xg[u]_k` (the `@` of the language takes a parameter or an edge matrix, not
a source row).

`separate_gaussians=True` gives every (input, output) channel pair its own
K Gaussians: the matrix of an edge is `W_e[f, m] = sum_k g[f, m, k] w_fmk(e)`
and the message `x_j @ W_e`, NNConv's product with the matrix made in the
kernel (`ea[e]` broadcast to `[F, M, K, D]` by a chain of `outer`s):

    kernel gmm_conv_separate_mean(x: f32[V, F], ea: f32[E, D], mu: f32[F, M, K, D],
                                  sigma: f32[F, M, K, D], g: f32[F, M, K], one1: f32[F],
                                  one2: f32[F, M], one3: f32[F, M, K], one4: f32[F, M, K, D]) -> f32[V, M] {
        z[e] = outer(one3, outer(one2, outer(one1, ea[e]))) - mu
        a[e] = dot(-0.5 * (z[e] * z[e]) / (1e-15 + sigma * sigma), one4)
        w[e] = dot(g, exp(max(a[e], -80)) * step(a[e] + 80))
        out[v] = mean(x[u] @ w[e])
    }

PyG materialises `[E, F, M, K, D]` there, forward and for its backward;
the kernel makes nothing per edge, and the gradients of `mu`, `sigma` and
`g`, parameters read per edge, are partials per destination summed by the
runtime (`[V, F, M, K, D]` at most). The root term and the bias are torch's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.parameter import UninitializedParameter

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.aggregate import aggregation
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.init import glorot, zeros
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear, add_bias, add_product, is_lazy
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "GMMConv"

#: `-1/2 sum_d (e_d - mu_d)^2 / (EPS + sigma_d^2)` of PyG's message, EPS = 1e-15, over the last axis.
#: The Gaussians' exponents, `a[e]`, and weights: `exp(a)` for `a > -80`, else exactly 0. PyG's weights
#: there are below 1.8e-35, and those from -87 down are subnormal floats, whose arithmetic took the
#: layer's kernel from 0.26 to 2.4 s on R-MAT 16 with PyG's initial `sigma` (docs/guide/nn.md)
EXPONENT = "dot(-0.5 * (z[e] * z[e]) / (1e-15 + sigma * sigma), {ones})"
GAUSSIAN = "exp(max(a[e], -80)) * step(a[e] + 80)"


def source(aggr: str, separate: bool) -> tuple[str, str]:
    """(kernel text, name) of the aggregation `aggr` (a language name), shared or separate Gaussians."""
    if separate:
        name = f"gmm_conv_separate_{aggr}"
        params = (
            "x: f32[V, F], ea: f32[E, D], mu: f32[F, M, K, D], sigma: f32[F, M, K, D], g: f32[F, M, K], "
            "one1: f32[F], one2: f32[F, M], one3: f32[F, M, K], one4: f32[F, M, K, D]"
        )
        body = (
            "    z[e] = outer(one3, outer(one2, outer(one1, ea[e]))) - mu\n"
            f"    a[e] = {EXPONENT.format(ones='one4')}\n"
            f"    w[e] = dot(g, {GAUSSIAN})\n"
            f"    out[v] = {aggr}(x[u] @ w[e])\n"
        )
    else:
        name = f"gmm_conv_{aggr}"
        params = (
            "xg: f32[V, K, M], ea: f32[E, D], mu: f32[K, D], sigma: f32[K, D], "
            "onek: f32[K], onekd: f32[K, D], onem: f32[M]"
        )
        body = (
            "    z[e] = outer(onek, ea[e]) - mu\n"
            f"    a[e] = {EXPONENT.format(ones='onekd')}\n"
            f"    w[e] = {GAUSSIAN}\n"
            f"    out[v] = {aggr}(dot(transpose(xg[u]), outer(onem, w[e])))\n"
        )
    return f"kernel {name}({params}) -> f32[V, M] {{\n{body}}}\n", name


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"{LAYER}: {what} must be a positive integer, got {value!r}")
    return value


class GMMConv(WarmUp, nn.Module):
    """PyG's `GMMConv(in_channels, out_channels, dim, kernel_size, separate_gaussians=False, aggr="mean",
    root_weight=True, bias=True, **kwargs)`.

    `forward(x, edge_index, edge_attr=None, size=None)`; x may be a pair
    `(x_src, x_dst)` (x_dst None: no root term); `edge_attr` the
    pseudo-coordinates, `[E, dim]`. Parameters `g` (`[in, out * K]`), `mu`
    and `sigma` (`[K, dim]`, or `[in, out, K, dim]` with separate Gaussians),
    `root` (with root_weight) and `bias`, PyG's; `in_channels=-1` (or -1
    first in a pair) sizes them by the first input, as PyG's. aggr:
    "mean", "add"/"sum", "max", "min".
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        dim: int,
        kernel_size: int,
        separate_gaussians: bool = False,
        aggr: str = "mean",
        root_weight: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        self.aggr, self._aggr = aggr, aggregation(aggr, LAYER)
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.dim, self.kernel_size = _positive(dim, "dim"), _positive(kernel_size, "kernel_size")
        self.separate_gaussians, self.root_weight = bool(separate_gaussians), root_weight
        src, dst = inputs.channels(in_channels, LAYER)
        self.rel_in_channels = src
        self.g: Any
        self.mu: Any
        self.sigma: Any
        if src > 0:
            self.g = nn.Parameter(torch.empty(src, out_channels * kernel_size))
            self.mu = nn.Parameter(torch.empty(self._gaussians(src)))
            self.sigma = nn.Parameter(torch.empty(self._gaussians(src)))
        else:
            self.g, self.mu, self.sigma = UninitializedParameter(), UninitializedParameter(), UninitializedParameter()
        self._hook: Any = self.register_forward_pre_hook(GMMConv._size_by_input) if src <= 0 else None
        self.root: Linear | None = (
            Linear(dst, out_channels, bias=False, weight_initializer="glorot") if root_weight else None
        )
        self.bias: nn.Parameter | None = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._kernel = kernel(*source(self._aggr, self.separate_gaussians))
        self.reset_parameters()

    def _gaussians(self, src: int) -> tuple[int, ...]:
        """The shape of `mu` and `sigma` for `src` source channels."""
        if self.separate_gaussians:
            return (src, self.out_channels, self.kernel_size, self.dim)
        return (self.kernel_size, self.dim)

    @property
    def lazy(self) -> bool:
        return is_lazy(self.g)

    def reset_parameters(self) -> None:
        """PyG's initialisation, draw for draw (nothing for `g`, `mu`, `sigma` until they are sized)."""
        if not self.lazy:
            glorot(self.g)
            glorot(self.mu)
            glorot(self.sigma)
        if self.root is not None:
            self.root.reset_parameters()
        zeros(self.bias)

    def _size(self, src: int) -> None:
        self.rel_in_channels = src
        self.g.materialize((src, self.out_channels * self.kernel_size))
        self.mu.materialize(self._gaussians(src))
        self.sigma.materialize(self._gaussians(src))
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    @staticmethod
    @torch.no_grad()
    def _size_by_input(module: GMMConv, args: tuple) -> None:
        """The first call sizes `g`, `mu`, `sigma` by x's source channels and draws them, before
        `root`'s own lazy sizing (PyG's order)."""
        if module.lazy and args:
            x = args[0]
            x_src = x if isinstance(x, torch.Tensor) else x[0] if isinstance(x, (tuple, list)) and x else None
            if isinstance(x_src, torch.Tensor):
                module._size(int(x_src.size(-1)))
                glorot(module.g)
                glorot(module.mu)
                glorot(module.sigma)

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        # lazy placeholders are saved as they are (as gnnc.nn's Linear does)
        super()._save_to_state_dict(destination, prefix, keep_vars=True)
        if not keep_vars:
            for name in (*self._parameters, *self._buffers):
                value = destination.get(prefix + name)
                if isinstance(value, torch.Tensor) and not is_lazy(value):
                    destination[prefix + name] = value.detach()

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        """A sized `g` sizes a lazy layer (PyG's state_dict of an initialised layer loads)."""
        g = state_dict.get(prefix + "g")
        if g is not None and not is_lazy(g) and self.lazy:
            self._size(int(g.shape[0]))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: Any, edge_index: Any, edge_attr: torch.Tensor | None = None, size: Any = None) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        sizes = inputs.sizes(adj, x_src, x_dst, size, bipartite=not isinstance(x, torch.Tensor))
        edge_attr = inputs.edge_attributes(adj, edge_attr)
        if edge_attr is None:
            raise ArgumentError(f"{LAYER}: forward needs edge_attr (the pseudo-coordinates, [E, dim])")
        ea = inputs.edge_features(edge_attr, adj.num_edges, self.dim, LAYER)
        channels = x_src.shape[-1]
        if channels != self.g.shape[0]:
            raise ArgumentError(f"{LAYER}: x_src has {channels} channels, the layer was built for {self.g.shape[0]}")
        dtype = x_src.dtype
        ea, mu, sigma = ea.to(dtype), self.mu.to(dtype), self.sigma.to(dtype)
        out_channels, kernel_size = self.out_channels, self.kernel_size
        if self.separate_gaussians:
            g = self.g.to(dtype).view(channels, out_channels, kernel_size)
            shape = (channels, out_channels, kernel_size, self.dim)
            ones = [x_src.new_ones(shape[: i + 1]) for i in range(4)]
            out = self._kernel(adj.index, x_src, ea, mu, sigma, g, *ones, size=sizes)
        else:
            xg = torch.matmul(x_src, self.g.to(dtype)).view(-1, kernel_size, out_channels)
            ones = [xg.new_ones(kernel_size), xg.new_ones(kernel_size, self.dim), xg.new_ones(out_channels)]
            out = self._kernel(adj.index, xg, ea, mu, sigma, *ones, size=sizes)
        if x_dst is not None and self.root is not None:
            out = add_product(out, self.root, x_dst)
        return add_bias(out, self.bias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, dim={self.dim})"


__all__ = ["GMMConv", "source"]
