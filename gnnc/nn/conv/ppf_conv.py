"""`PPFConv`: PyG's PPFNet layer (Deng et al.); its message passing is gnnc kernels.

PyG's message is `local_nn([x_j, ppf(pos_i, pos_j, n_i, n_j)])` per edge,
aggregated by max, then `global_nn`, where the point pair features are
`[|d|, angle(n_i, d), angle(n_j, d), angle(n_i, n_j)]` with `d = pos_j - pos_i`
and `angle(a, b) = atan2(|a x b|, a . b)`.

The language has no `atan2` (nor `atan`, `acos`, `asin`): its elementwise
functions are `exp log sqrt rsqrt abs relu sigmoid tanh step`. An arctangent
written with them (Cephes' `atanf`: a half-angle and a `tan(pi/8)` range
reduction selected by `step`, a polynomial of degree 9) is exact enough, but
its gradient is not expressible: gradient kernels recompute every edge value
at each read, and one angle's statement reads 2874 operations that way
(`autodiff.MAX_INLINED_NODES` is 1000). So the kernels compute what the
language can, and torch the three `atan2`s on `[E]` vectors between them:

    kernel ppf_parts(ps: f32[V, P], pd: f32[V, P], ns: f32[V, P], nd: f32[V, P],
                     r1: f32[P, P], r2: f32[P, P])
            -> (dist: f32[E], yi: f32[E], xi: f32[E], yj: f32[E], xj: f32[E],
                yn: f32[E], xn: f32[E]) {
        d[e] = ps[u] - pd[v]
        ci[e] = (nd[v] @ r1) * (d[e] @ r2) - (nd[v] @ r2) * (d[e] @ r1)
        ...
        dist[e] = sqrt(dot(d[e], d[e]) + (1 - step(dot(d[e], d[e])))) * step(dot(d[e], d[e]))
        yi[e] = (the same norm of ci[e])
        xi[e] = dot(nd[v], d[e])
        ...
    }

`r1`, `r2` are the permutations `(a_y, a_z, a_x)`, `(a_z, a_x, a_y)`, so that
`a x b = a' * b'' - a'' * b'` is torch.cross's products; a norm is
`sqrt(s + (1 - step(s))) * step(s)`: `sqrt(s)` for s > 0, and 0 with gradient 0
at s = 0 (torch's norm's gradient there, where `sqrt`'s is infinite). `atan2`
then makes the features `f = [dist, atan2(yi, xi), atan2(yj, xj),
atan2(yn, xn)]` (`[E, 4]`), and where `local_nn` begins with a Linear `W =
[W_x, W_f]` (`gnnc.nn.edge_mlp.split`) its product splits into `c = x_src
W_x^T + b` per source and `f W_f^T` per edge, inside the aggregation:

    kernel ppf_max(c: f32[V, H], f: f32[E, K], w: f32[K, H]) -> f32[V, H] {
        out[v] = max(c[u] + f[e] @ w)
    }

(`ppf_max_points`, `max(f[e] @ w + b)`, without x). No `[E, H]` tensor is
made. (The sizes 3 and 4 are named, P and K: a literal size in the type of a
parameter or a vertex result gives a library whose records the loader refuses.) Without `local_nn` the message is `[x_j, f]`: the same kernel with `c
= [x_src, 0]` and `w = [0, I]` (exact). A longer `local_nn` gets the messages
from an edge kernel (`ppf_messages`: `out[e] = c[u] + f[e] @ w`), the rest of
it in torch, then `out[v] = max(m[e])`; one that does not begin with a
Linear runs in torch on PyG's concatenation. aggr (a MessagePassing
option): "max" (PyG's default), "add"/"sum", "mean", "min".

`add_self_loops` (PyG's default) drops the graph's self loops and appends
one per destination, as PyG (the edge list made once per graph argument).
On a self loop `d = 0`: its crosses with the normals are exact zeros, whose
norms and `atan2(0, +-0)` have gradient 0, in torch as in the kernel.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from gnnc.errors import ArgumentError
from gnnc.nn import edge_mlp, inputs
from gnnc.nn.conv.point_net_conv import PointLayer, looped_edges
from gnnc.nn.kernels import kernel
from gnnc.torch import graphs
from gnnc.torch.kernels import Kernel

LAYER = "PPFConv"

#: The point pair features' parts, each a few products of the edge's rows (see the module).
PARTS = """
kernel ppf_parts(ps: f32[V, P], pd: f32[V, P], ns: f32[V, P], nd: f32[V, P], r1: f32[P, P], r2: f32[P, P])
        -> (dist: f32[E], yi: f32[E], xi: f32[E], yj: f32[E], xj: f32[E], yn: f32[E], xn: f32[E]) {
    d[e] = ps[u] - pd[v]
    ci[e] = (nd[v] @ r1) * (d[e] @ r2) - (nd[v] @ r2) * (d[e] @ r1)
    cj[e] = (ns[u] @ r1) * (d[e] @ r2) - (ns[u] @ r2) * (d[e] @ r1)
    cn[e] = (nd[v] @ r1) * (ns[u] @ r2) - (nd[v] @ r2) * (ns[u] @ r1)
    sd[e] = dot(d[e], d[e])
    si[e] = dot(ci[e], ci[e])
    sj[e] = dot(cj[e], cj[e])
    sn[e] = dot(cn[e], cn[e])
    dist[e] = sqrt(sd[e] + (1 - step(sd[e]))) * step(sd[e])
    yi[e] = sqrt(si[e] + (1 - step(si[e]))) * step(si[e])
    xi[e] = dot(nd[v], d[e])
    yj[e] = sqrt(sj[e] + (1 - step(sj[e]))) * step(sj[e])
    xj[e] = dot(ns[u], d[e])
    yn[e] = sqrt(sn[e] + (1 - step(sn[e]))) * step(sn[e])
    xn[e] = dot(nd[v], ns[u])
}
"""


def sources(aggr: str) -> dict[str, tuple[str, str]]:
    """The kernels (text, name) of aggregation `aggr` (a language name): the message fused with
    the aggregation (`pair`, `points` without x) or per edge (`messages`, `messages_points`)."""
    with_x = ("c: f32[V, H], f: f32[E, K], w: f32[K, H]", "c[u] + f[e] @ w")
    points = ("f: f32[E, K], w: f32[K, H], b: f32[H]", "f[e] @ w + b")
    made = {}
    for key, (params, message) in (("pair", with_x), ("points", points)):
        name = f"ppf_{aggr}" + ("_points" if key == "points" else "")
        made[key] = (f"kernel {name}({params}) -> f32[V, H] {{\n    out[v] = {aggr}({message})\n}}\n", name)
        edge = "ppf_messages" + ("_points" if key == "points" else "")
        made[f"messages_{key}"] = (f"kernel {edge}({params}) -> f32[E, H] {{\n    out[e] = {message}\n}}\n", edge)
    return made


def _rotations(like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(r1, r2): `a @ r1 = (a_y, a_z, a_x)`, `a @ r2 = (a_z, a_x, a_y)`."""
    eye = torch.eye(3, dtype=like.dtype, device=like.device)
    return eye[:, [1, 2, 0]], eye[:, [2, 0, 1]]


def _pair_of(value: Any, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    src, dst = inputs.pair(value, LAYER, what)
    if dst is None:
        raise ArgumentError(f"{LAYER}: {what}[1] (the destinations') must be a tensor: the features read it")
    for side, t in (("0", src), ("1", dst)):
        if t.shape[-1] != 3:
            raise ArgumentError(
                f"{LAYER}: {what} must have 3 coordinates (the point pair features take cross products), "
                f"got {what}{'' if isinstance(value, torch.Tensor) else f'[{side}]'} of shape {tuple(t.shape)}"
            )
    return src, dst


class PPFConv(PointLayer):
    """PyG's `PPFConv(local_nn=None, global_nn=None, add_self_loops=True, **kwargs)`:
    `global_nn(max over in-edges of local_nn([x_j, ppf(pos_i, pos_j, n_i, n_j)]))`.

    `forward(x, pos, normal, edge_index)`; x None, a tensor (the sources') or a
    pair (whose second is unread, as PyG's), pos and normal tensors or pairs
    of 3-D points. Parameters are the modules' (`local_nn.*`, `global_nn.*`),
    reset as PyG does. aggr (PyG's MessagePassing argument, "max" by default):
    "max", "mean", "sum"/"add" or "min".
    """

    def __init__(self, local_nn: Any = None, global_nn: Any = None, add_self_loops: bool = True, **kwargs: Any):
        super().__init__(LAYER, local_nn, global_nn, add_self_loops, kwargs)
        self._kernels: dict[str, Kernel] = {key: kernel(*made) for key, made in sources(self._aggr).items()}
        self._kernels["parts"] = kernel(PARTS, "ppf_parts")
        self._kernels["aggregate"] = edge_mlp.kernels(self._aggr)["aggregate"]
        self.reset_parameters()

    def forward(self, x: Any, pos: Any, normal: Any, edge_index: Any) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x_src = x[0] if isinstance(x, (tuple, list)) else x
        if x_src is not None:
            if not isinstance(x_src, torch.Tensor):
                raise ArgumentError(f"{LAYER}: x must be a tensor, a pair or None, got {type(x_src).__name__}")
            x_src = inputs.check_features(x_src, LAYER)
        pos_src, pos_dst = _pair_of(inputs.on_block(pos, adj), "pos")
        normal_src, normal_dst = _pair_of(inputs.on_block(normal, adj), "normal")
        bipartite = not isinstance(pos, torch.Tensor) or adj.block
        sizes = inputs.sizes(adj, pos_src, pos_dst, None, bipartite=bipartite)
        for what, t, n in (
            ("normal[0]", normal_src, sizes[0]),
            ("normal[1]", normal_dst, sizes[1]),
            ("x", x_src, sizes[0]),
        ):
            if t is not None and t.shape[0] != n:
                raise ArgumentError(f"{LAYER}: {what} has {t.shape[0]} rows but the graph has {n} on that side")
        edges: Any = adj.index
        if self.add_self_loops:
            if int(sizes[1]) > int(sizes[0]):
                raise ArgumentError(
                    f"{LAYER}: add_self_loops adds a loop (i, i) per destination (PyG's), but the graph has "
                    f"{sizes[1]} destinations and only {sizes[0]} sources: pass add_self_loops=False"
                )
            edges = looped_edges(adj, int(sizes[1]))
        dtype = x_src.dtype if x_src is not None else pos_src.dtype
        f = self._features(edges, sizes, [t.to(dtype) for t in (pos_src, pos_dst, normal_src, normal_dst)])
        out = self._propagate(edges, sizes, x_src, f)
        return out if self.global_nn is None else self.global_nn(out)

    def _features(self, edges: Any, sizes: tuple, points: list[torch.Tensor]) -> torch.Tensor:
        """PyG's `point_pair_features`, `[E, 4]`: the kernel's parts, torch's atan2."""
        parts = self._kernels["parts"](edges, *points, *_rotations(points[0]), size=sizes)
        dist, yi, xi, yj, xj, yn, xn = parts
        return torch.stack([dist, torch.atan2(yi, xi), torch.atan2(yj, xj), torch.atan2(yn, xn)], dim=1)

    def _propagate(self, edges: Any, sizes: tuple, x_src: torch.Tensor | None, f: torch.Tensor) -> torch.Tensor:
        if self.local_nn is None:
            if x_src is None:
                return self._kernels["aggregate"](edges, f, size=sizes)
            width = x_src.shape[-1]
            c = torch.cat([x_src, x_src.new_zeros(x_src.shape[0], 4)], dim=-1)
            w = torch.cat([f.new_zeros(4, width), torch.eye(4, dtype=f.dtype, device=f.device)], dim=-1)
            return self._kernels["pair"](edges, c, f, w, size=sizes)
        parts = edge_mlp.split(self.local_nn)
        if parts is None:
            index = edges if isinstance(edges, torch.Tensor) else graphs.edge_index_of(edges)
            m = f if x_src is None else torch.cat([x_src.index_select(0, index[0]), f], dim=-1)
            return self._kernels["aggregate"](edges, self._messages(self.local_nn(m)), size=sizes)
        weight, bias = parts.weight, parts.bias
        width = 4 if x_src is None else x_src.shape[-1] + 4
        if weight.shape[-1] != width:
            raise ArgumentError(
                f"{LAYER}: local_nn's first Linear takes {weight.shape[-1]} features, the messages "
                f"[x_j, point pair features] have {width}"
            )
        w = weight[:, width - 4 :].t().to(f.dtype)
        if x_src is None:
            b = bias if bias is not None else f.new_zeros(weight.shape[0])
            args, key = [f, w, b.to(f.dtype)], "points"
        else:
            c = inputs.autocast_features(F.linear(x_src, weight[:, : width - 4], bias))
            args, key = [c, f, w], "pair"
        if parts.rest is None:
            return self._kernels[key](edges, *args, size=sizes)
        messages = self._kernels[f"messages_{key}"](edges, *args, size=sizes)
        return self._kernels["aggregate"](edges, self._messages(parts.rest(messages)), size=sizes)

    def _messages(self, m: torch.Tensor) -> torch.Tensor:
        return inputs.check_features(m, LAYER, "local_nn's output")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(local_nn={self.local_nn}, global_nn={self.global_nn})"


__all__ = ["PARTS", "PPFConv", "sources"]
