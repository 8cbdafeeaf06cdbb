"""`AGNNConv`: PyG's attention-based propagation (Thekumparampil et al.); one gnnc kernel.

The scores are `beta` times the cosine of the two ends' features, softmax-
normalised over each destination's in-edges, and weigh the neighbours'
features. With self loops (PyG's default: the graph's own loops replaced by
one per vertex) the loop enters as a per-vertex term, written out as the
attention layers write it (`gnnc.nn.attention`: a stable softmax over the
in-edges and the loop, the graph's own loops left out by `self_loop(e)`):

    kernel agnn_loops(x: f32[V, F], xn: f32[V, F], beta: f32) -> f32[V, F] {
        sl[v] = beta * dot(xn[v], xn[v])
        s[e] = beta * dot(xn[v], xn[u])
        m[v] = detach(sl[v] + max((1 - self_loop(e)) * relu(s[e] - sl[v])))
        p[e] = (1 - self_loop(e)) * exp(s[e] - m[v])
        q[v] = exp(sl[v] - m[v])
        z[v] = q[v] + sum(p[e])
        r[v] = 1.0 / z[v]
        out[v] = q[v] * r[v] * x[v] + sum(p[e] * r[v] * x[u])
    }

and without, `out[v] = sum(softmax(beta * dot(xn[v], xn[u])) * x[u])`.
`xn` is `F.normalize(x)`, in torch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.nn.conv.sg_conv import square_graph
from gnnc.nn.kernels import kernel
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp
from gnnc.torch.kernels import Kernel

LAYER = "AGNNConv"

LOOPS = """
kernel agnn_loops(x: f32[V, F], xn: f32[V, F], beta: f32) -> f32[V, F] {
    sl[v] = beta * dot(xn[v], xn[v])
    s[e] = beta * dot(xn[v], xn[u])
    m[v] = detach(sl[v] + max((1 - self_loop(e)) * relu(s[e] - sl[v])))
    p[e] = (1 - self_loop(e)) * exp(s[e] - m[v])
    q[v] = exp(sl[v] - m[v])
    z[v] = q[v] + sum(p[e])
    r[v] = 1.0 / z[v]
    out[v] = q[v] * r[v] * x[v] + sum(p[e] * r[v] * x[u])
}
"""
PLAIN = """
kernel agnn(x: f32[V, F], xn: f32[V, F], beta: f32) -> f32[V, F] {
    s[e] = beta * dot(xn[v], xn[u])
    out[v] = sum(softmax(s[e]) * x[u])
}
"""


def _kernel(loops: bool) -> Kernel:
    return kernel(LOOPS, "agnn_loops") if loops else kernel(PLAIN, "agnn")


class AGNNConv(WarmUp, nn.Module):
    """PyG's `AGNNConv(requires_grad=True, add_self_loops=True, **kwargs)`.

    `forward(x, edge_index)`; `beta` is a `[1]` parameter (a buffer of 1
    without `requires_grad`), PyG's. A sparse adjacency's structure is read.
    """

    def __init__(self, requires_grad: bool = True, add_self_loops: bool = True, **kwargs: Any):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        self.requires_grad, self.add_self_loops = requires_grad, add_self_loops
        if requires_grad:
            self.beta = nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("beta", torch.ones(1))
        self.make_kernels()
        self.reset_parameters()

    def make_kernels(self) -> None:
        """The kernel `add_self_loops` calls (what `warm_up` compiles), again after a change of it."""
        self._kernels = {bool(self.add_self_loops): _kernel(bool(self.add_self_loops))}

    def reset_parameters(self) -> None:
        if self.requires_grad:
            with torch.no_grad():
                self.beta.fill_(1.0)

    def forward(self, x: torch.Tensor, edge_index: Any) -> torch.Tensor:
        x, adj = square_graph(LAYER, x, edge_index)
        xn = F.normalize(x, p=2.0, dim=-1)
        loops = bool(self.add_self_loops)
        call = self._kernels.get(loops) or _kernel(loops)
        return call(adj.index, x, xn, self.beta.to(x.dtype), num_vertices=x.shape[0])

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


__all__ = ["AGNNConv"]
