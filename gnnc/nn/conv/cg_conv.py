"""`CGConv`: PyG's crystal graph convolution (Xie and Grossman); one gnnc kernel.

PyG's message is `sigmoid(lin_f(z)) * softplus(lin_s(z))` on the
concatenation `z = [x_i, x_j, edge_attr]` per edge. A Linear over a
concatenation is a sum of products by column blocks, so each splits into a
destination term, a source term and an edge term, made in torch (the
vertex terms per vertex, `[V, C]`, the edge terms per edge, `[E, C]`):

    kernel cg_conv_sum_edges(fd: f32[V, F], fs: f32[V, F], fe: f32[E, F],
                             sd: f32[V, F], ss: f32[V, F], se: f32[E, F]) -> f32[V, F] {
        a[e] = sd[v] + ss[u] + se[e]
        out[v] = sum(sigmoid(fd[v] + fs[u] + fe[e]) * (relu(a[e]) + log(1 + exp(-abs(a[e])))))
    }

(softplus written stably; "mean", "max", "min" for "sum", and no edge
terms without `dim`). With `dim` of at most `FUSED_EDGE_DIM` the edge terms
are products inside the kernel, `ea[e] @ wf` and `ea[e] @ ws` (as
GINEConv's `lin`): no `[E, F]` tensor, nor its gradient, is made. The
batch norm and the residual `+ x_dst` are torch's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.aggregate import aggregation
from gnnc.nn.conv.gin_conv import FUSED_EDGE_DIM
from gnnc.nn.kernels import kernel
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "CGConv"


def source(aggr: str, edges: bool, fused: bool = False) -> tuple[str, str]:
    """(kernel text, name) of the aggregation `aggr` (a language name), with edge terms or not; `fused`:
    the edge terms as products of the edge features inside the kernel."""
    if fused:
        name = f"cg_conv_{aggr}_lin"
        params = "fd: f32[V, F], fs: f32[V, F], sd: f32[V, F], ss: f32[V, F], ea: f32[E, D], wf: f32[D, F], "
        params += "ws: f32[D, F]"
        fe, se = " + ea[e] @ wf", " + ea[e] @ ws"
    else:
        name = f"cg_conv_{aggr}" + ("_edges" if edges else "")
        params = "fd: f32[V, F], fs: f32[V, F], " + ("fe: f32[E, F], " if edges else "")
        params += "sd: f32[V, F], ss: f32[V, F]" + (", se: f32[E, F]" if edges else "")
        fe, se = (" + fe[e]", " + se[e]") if edges else ("", "")
    return (
        f"kernel {name}({params}) -> f32[V, F] {{\n"
        f"    a[e] = sd[v] + ss[u]{se}\n"
        f"    out[v] = {aggr}(sigmoid(fd[v] + fs[u]{fe}) * (relu(a[e]) + log(1 + exp(-abs(a[e])))))\n"
        "}\n",
        name,
    )


def _split(lin: nn.Linear, dst: int, src: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """lin's weight by the column blocks of `[x_i, x_j, edge_attr]`."""
    w = lin.weight
    return w[:, :dst], w[:, dst : dst + src], w[:, dst + src :]


class CGConv(WarmUp, nn.Module):
    """PyG's `CGConv(channels, dim=0, aggr="add", batch_norm=False, bias=True, **kwargs)`.

    `forward(x, edge_index, edge_attr=None)`; x may be a pair `(x_src,
    x_dst)`. Parameters `lin_f`, `lin_s` (torch Linear layers over `[x_i,
    x_j, edge_attr]`) and `bn` (with batch_norm), PyG's. aggr: "add"/"sum",
    "mean", "max", "min".
    """

    def __init__(
        self,
        channels: int | tuple[int, int],
        dim: int = 0,
        aggr: str = "add",
        batch_norm: bool = False,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        src, dst = inputs.channels(channels, LAYER)
        if src < 1 or dst < 1:
            raise ArgumentError(f"{LAYER}: channels must be given (no lazy sizing, as in PyG), got {channels!r}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise ArgumentError(f"{LAYER}: dim (the edge features' width) must be a non-negative integer, got {dim!r}")
        self.channels, self.dim, self.aggr, self.batch_norm = channels, dim, aggr, batch_norm
        self._aggr = aggregation(aggr, LAYER)
        self.lin_f = nn.Linear(src + dst + dim, dst, bias=bias)
        self.lin_s = nn.Linear(src + dst + dim, dst, bias=bias)
        self.bn = nn.BatchNorm1d(dst) if batch_norm else None
        self._plain = kernel(*source(self._aggr, False))
        self._fused = dim <= FUSED_EDGE_DIM
        self._edges = kernel(*source(self._aggr, True, fused=self._fused)) if dim else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_f.reset_parameters()
        self.lin_s.reset_parameters()
        if self.bn is not None:
            self.bn.reset_parameters()

    def forward(self, x: Any, edge_index: Any, edge_attr: torch.Tensor | None = None) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        if x_dst is None:
            raise ArgumentError(f"{LAYER}: x[1] (the destinations' features) must be a tensor: the messages read it")
        sizes = inputs.sizes(adj, x_src, x_dst, None, bipartite=not isinstance(x, torch.Tensor))
        src, dst = x_src.shape[-1], x_dst.shape[-1]
        if src + dst + self.dim != self.lin_f.in_features:
            raise ArgumentError(
                f"{LAYER}: x has {src} (source) and {dst} (destination) channels, the layer was built for "
                f"{self.channels!r}"
            )
        edge_attr = inputs.edge_attributes(adj, edge_attr)
        if (edge_attr is None) != (self.dim == 0):
            raise ArgumentError(
                f"{LAYER}: edge_attr is read exactly when the layer has dim > 0 (dim={self.dim}, edge_attr "
                f"{'given' if edge_attr is not None else 'not given'})"
            )
        fd_w, fs_w, fe_w = _split(self.lin_f, dst, src)
        sd_w, ss_w, se_w = _split(self.lin_s, dst, src)
        fd, sd = F.linear(x_dst, fd_w, self.lin_f.bias), F.linear(x_dst, sd_w, self.lin_s.bias)
        fs, ss = F.linear(x_src, fs_w), F.linear(x_src, ss_w)
        if edge_attr is None:
            out = self._plain(adj.index, fd, fs, sd, ss, size=sizes)
        else:
            assert self._edges is not None
            edge_attr = inputs.edge_features(edge_attr, adj.num_edges, self.dim, LAYER)
            if self._fused:
                ea = edge_attr.to(fd.dtype)
                out = self._edges(
                    adj.index, fd, fs, sd, ss, ea, fe_w.t().to(fd.dtype), se_w.t().to(fd.dtype), size=sizes
                )
            else:
                fe, se = F.linear(edge_attr, fe_w), F.linear(edge_attr, se_w)
                out = self._edges(adj.index, fd, fs, fe, sd, ss, se, size=sizes)
        if self.bn is not None:
            out = self.bn(out)
        return out + x_dst

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.channels}, dim={self.dim})"


__all__ = ["CGConv"]
