"""`FeaStConv`: PyG's feature-steered convolution (Verma et al., FeaStNet); one gnnc kernel.

A message is `sum_h q_h (W x_u)_h` with `q = softmax_h(u^T (x_u - x_v) + c)`,
a softmax over the H heads of each edge (not over edges), aggregated by mean
(PyG's default; "add"/"sum", "max", "min" as PyG's `aggr=`). `u^T x` is
linear, so the scores are `a[u] - b[v]` with `a = u(x_src) + c`, `b =
u(x_dst)` and `wx = lin(x_src)` (`[V, H, F]`, PyG's head-major view) in torch.
The language has no reduction over an axis but `dot`, so the softmax is
written as `q_h = 1 / sum_k exp(s_k - s_h)`: the head of the largest score
has a sum in [1, H], the others a sum that may grow without bound, their
weight then underflowing to 0 as softmax's does; the differences are capped
at 80 so that no term is inf (which the gradient would turn into 0 * inf):
a weight then errs by at most e^-80 absolutely. `one: [H]` and `onef: [F]`
are ones, `dot(transpose(wx[u]), outer(onef, q[e]))` the sum over the heads.

Self loops (PyG's default: the graph's own loops removed, one appended per
destination) are not added to the graph: the graph's own loops are left out
by `1 - self_loop(e)` and the loop's message enters as a per-destination
term `lm[v]`, computed in torch (`softmax(u(x_src[v] - x_dst[v]) + c)`
weighing `wx[v]`):

    kernel feast_conv_mean_loops(a: f32[V, H], b: f32[V, H], wx: f32[V, H, F], one: f32[H],
                                 onef: f32[F], lm: f32[V, F]) -> f32[V, F] {
        s[e] = a[u] - b[v]
        q[e] = 1 / dot(exp(min(outer(one, s[e]) - s[e], 80)), outer(one, one))
        m[e] = dot(transpose(wx[u]), outer(onef, q[e]))
        r[v] = 1 / (sum(1 - self_loop(e)) + 1)
        out[v] = r[v] * lm[v] + sum(r[v] * (1 - self_loop(e)) * m[e])
    }

("sum" without r; "max" as `lm[v] + max((1 - self_loop(e)) * relu(m[e] -
lm[v]))`, the loop's message being among the maximum's terms; "min" the
same mirrored). Without self loops, `out[v] = mean(m[e])`. The bias is torch's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.aggregate import aggregation
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear, add_bias
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "FeaStConv"

#: Each edge's softmax over the heads and its message (see the module).
MESSAGE = """
    s[e] = a[u] - b[v]
    q[e] = 1 / dot(exp(min(outer(one, s[e]) - s[e], 80)), outer(one, one))
    m[e] = dot(transpose(wx[u]), outer(onef, q[e]))
"""

#: The aggregations with the loop's message `lm[v]` among their terms.
LOOPED = {
    "sum": "    out[v] = lm[v] + sum((1 - self_loop(e)) * m[e])\n",
    "mean": "    r[v] = 1 / (sum(1 - self_loop(e)) + 1)\n"
    "    out[v] = r[v] * lm[v] + sum(r[v] * (1 - self_loop(e)) * m[e])\n",
    "max": "    out[v] = lm[v] + max((1 - self_loop(e)) * relu(m[e] - lm[v]))\n",
    "min": "    out[v] = lm[v] - max((1 - self_loop(e)) * relu(lm[v] - m[e]))\n",
}


def source(aggr: str, loops: bool) -> tuple[str, str]:
    """(kernel text, name) of aggregation `aggr` (a language name), with the loop term or not."""
    name = f"feast_conv_{aggr}" + ("_loops" if loops else "")
    params = "a: f32[V, H], b: f32[V, H], wx: f32[V, H, F], one: f32[H], onef: f32[F]"
    if loops:
        params, body = params + ", lm: f32[V, F]", LOOPED[aggr]
    else:
        body = f"    out[v] = {aggr}(m[e])\n"
    return f"kernel {name}({params}) -> f32[V, F] {{{MESSAGE}{body}}}\n", name


def _normal(t: torch.Tensor | None, std: float) -> None:
    """PyG's `normal(t, 0, std)`."""
    if t is not None:
        with torch.no_grad():
            t.normal_(0.0, std)


class FeaStConv(WarmUp, nn.Module):
    """PyG's `FeaStConv(in_channels, out_channels, heads=1, add_self_loops=True, bias=True, **kwargs)`.

    `forward(x, edge_index)`; x may be a pair `(x_src, x_dst)` of equal widths.
    Parameters `lin` (`[heads * out, in]`), `u` (`[heads, in]`), `c`
    (`[heads]`), `bias`, PyG's; `in_channels=-1` sizes them by the first
    input. aggr (a MessagePassing option): "mean" (PyG's default),
    "add"/"sum", "max", "min".
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 1,
        add_self_loops: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        aggr = kwargs.pop("aggr", "mean")
        check_options(LAYER, kwargs, aggr=None)
        self.aggr, self._aggr = aggr, aggregation(aggr, LAYER)
        if isinstance(in_channels, bool) or not isinstance(in_channels, int) or (in_channels < 1 and in_channels != -1):
            raise ArgumentError(f"{LAYER}: in_channels must be a positive integer or -1 (lazy), got {in_channels!r}")
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
            raise ArgumentError(f"{LAYER}: heads must be a positive integer, got {heads!r}")
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.heads, self.add_self_loops = heads, add_self_loops
        self.lin = Linear(in_channels, heads * out_channels, bias=False, weight_initializer="uniform")
        self.u = Linear(in_channels, heads, bias=False, weight_initializer="uniform")
        self.c = nn.Parameter(torch.empty(heads))
        self.bias: nn.Parameter | None = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.make_kernels()
        self.reset_parameters()

    def make_kernels(self) -> None:
        """The kernel `add_self_loops` calls (what `warm_up` compiles), again after a change of it."""
        loops = bool(self.add_self_loops)
        self._kernels = {loops: kernel(*source(self._aggr, loops))}

    def reset_parameters(self) -> None:
        """PyG's initialisation, draw for draw."""
        self.lin.reset_parameters()
        self.u.reset_parameters()
        _normal(self.c, 0.1)
        _normal(self.bias, 0.1)

    def forward(self, x: Any, edge_index: Any) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        if x_dst is None:
            raise ArgumentError(f"{LAYER}: x[1] (the destinations' features) must be a tensor: the scores read it")
        square = isinstance(x, torch.Tensor)
        num_src, num_dst = inputs.sizes(adj, x_src, x_dst, None, bipartite=not square)
        if self.add_self_loops and num_src < num_dst:
            raise ArgumentError(
                f"{LAYER}: add_self_loops needs a source for every destination's loop (i, i), but the graph has "
                f"{num_src} sources and {num_dst} destinations: pass add_self_loops=False"
            )
        # PyG's first calls (u, then lin) size lazy weights in this order
        us = self.u(x_src)
        ud = us if square else self.u(x_dst)
        wx = self.lin(x_src).view(-1, self.heads, self.out_channels)
        c = self.c.to(us.dtype)
        one, onef = us.new_ones(self.heads), us.new_ones(self.out_channels)
        args = [us + c, ud.to(us.dtype), wx, one, onef]
        if self.add_self_loops:
            # the loop's message: x_u - x_v is 0 on one vertex set, so its scores are c
            q = torch.softmax(c if square else us[:num_dst] - ud.to(us.dtype) + c, dim=-1)
            wl = wx[:num_dst]
            args.append(torch.matmul(q, wl) if square else torch.bmm(q.unsqueeze(1), wl).squeeze(1))
        loops = bool(self.add_self_loops)
        call = self._kernels.get(loops) or kernel(*source(self._aggr, loops))
        out = call(adj.index, *args, size=(num_src, num_dst))
        return add_bias(out, self.bias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


__all__ = ["FeaStConv", "source"]
