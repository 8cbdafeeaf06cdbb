"""`PointTransformerConv`: PyG's Point Transformer layer (Zhao et al.); its message passing is one gnnc kernel.

PyG's message is `softmax(attn_nn(a_i - b_j + delta)) * (x_j + delta)`, the
softmax per channel over each destination's in-edges, with `a = lin_dst(x)`,
`b = lin_src(x)`, `x_j = lin(x)_j` and `delta = pos_nn(pos_i - pos_j)`. With
the default `pos_nn`, a Linear `P`, `delta = P pos_i - P pos_j + c` splits
into per-vertex products, and so does everything the edge reads: torch
computes `sd = a + pos_dst P^T + c`, `dd = pos_dst P^T + c` per destination and
`ss = b + pos_src P^T`, `xs = lin(x) - pos_src P^T` per source, and without
`attn_nn` the whole layer is one kernel that makes no `[E, C]` tensor:

    kernel point_transformer_sum(sd: f32[V, F], ss: f32[V, F], xs: f32[V, F], dd: f32[V, F])
            -> f32[V, F] {
        out[v] = sum(softmax(sd[v] - ss[u]) * (xs[u] + dd[v]))
    }

A deeper `pos_nn` (a Sequential or PyG MLP starting with a Linear,
`gnnc.nn.edge_mlp.split`) gets its first layer's outputs `pd[v] - ps[u] + c`
from an edge kernel (`edge_mlp_messages`) and the rest of it in torch; any
other `pos_nn` runs in torch on `pos_i - pos_j`. Either way `delta` is an
`[E, C]` input `dl[e]`, and the kernel fuses the rest:
`out[v] = sum(softmax(a[v] - b[u] + dl[e]) * (x[u] + dl[e]))`.

`attn_nn` is a network per edge: its input `a_i - b_j + delta` comes from an
edge kernel (`point_transformer_scores`: `out[e] = sd[v] - ss[u]`, or `a[v] -
b[u] + dl[e]`), it runs in torch, and its output `s[e]` goes to the kernel that
fuses the softmax with the weighted sum: `out[v] = sum(softmax(s[e]) * (xs[u]
+ dd[v]))` (an output of one column, `s: f32[E]`, weighs every channel, as
PyG's broadcast does). aggr (a MessagePassing option): "add"/"sum" (PyG's
default), "mean", "max", "min".

`add_self_loops` (PyG's default) drops the graph's self loops and appends
one per vertex below min(num_src, num_dst), as PyG (`PointNetConv`'s edge
list, made once per graph argument).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import edge_mlp, inputs
from gnnc.nn.conv.aggregate import aggregation
from gnnc.nn.conv.point_net_conv import looped_edges
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.init import reset
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp
from gnnc.torch import graphs
from gnnc.torch.kernels import Kernel

LAYER = "PointTransformerConv"

#: What an edge's score and value read, by how `delta` reaches the kernel: per-vertex products of
#: a Linear `pos_nn` ("split"), or an `[E, C]` input ("edges"); (parameters, expression) of each.
_SCORES = {
    "split": (["sd: f32[V, F]", "ss: f32[V, F]"], "sd[v] - ss[u]"),
    "edges": (["a: f32[V, F]", "b: f32[V, F]", "dl: f32[E, F]"], "a[v] - b[u] + dl[e]"),
}
_VALUES = {
    "split": (["xs: f32[V, F]", "dd: f32[V, F]"], "xs[u] + dd[v]"),
    "edges": (["x: f32[V, F]", "dl: f32[E, F]"], "x[u] + dl[e]"),
}


def source(aggr: str, form: str, scores: str | None) -> tuple[str, str]:
    """(kernel text, name) of aggregation `aggr` (a language name) with `delta` in `form`; `scores`
    None (the softmax of the edge's own score), "channels" (`s: f32[E, F]`, attn_nn's output)
    or "one" (`s: f32[E]`, an attn_nn of one output column)."""
    params, value = list(_VALUES[form][0]), _VALUES[form][1]
    name = f"point_transformer_{aggr}" + ("_edges" if form == "edges" else "")
    if scores is None:
        score_params, score = _SCORES[form]
        params = score_params + [p for p in params if p not in score_params]
    else:
        name += "_attn" if scores == "channels" else "_attn1"
        params.append("s: f32[E, F]" if scores == "channels" else "s: f32[E]")
        score = "s[e]"
    text = (
        f"kernel {name}({', '.join(params)}) -> f32[V, F] {{\n    out[v] = {aggr}(softmax({score}) * ({value}))\n}}\n"
    )
    return text, name


def scores_source(form: str) -> tuple[str, str]:
    """(kernel text, name) of the edge kernel that makes attn_nn's input `a_i - b_j + delta`."""
    params, score = _SCORES[form]
    name = "point_transformer_scores" + ("_edges" if form == "edges" else "")
    return f"kernel {name}({', '.join(params)}) -> f32[E, F] {{\n    out[e] = {score}\n}}\n", name


class PointTransformerConv(WarmUp, nn.Module):
    """PyG's `PointTransformerConv(in_channels, out_channels, pos_nn=None, attn_nn=None,
    add_self_loops=True, **kwargs)`.

    `forward(x, pos, edge_index)`; x and pos may be pairs `(src, dst)`.
    Parameters `pos_nn` (a `Linear(3, out_channels)` by default), `attn_nn`,
    `lin`, `lin_src`, `lin_dst` (no biases), PyG's; `in_channels=-1` (or -1 in
    a pair) sizes them by the first input.
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        pos_nn: Any = None,
        attn_nn: Any = None,
        add_self_loops: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        aggr = kwargs.pop("aggr", "add")
        self._node_dim = check_options(LAYER, kwargs, aggr=None)
        self.aggr, self._aggr = aggr, aggregation(aggr, LAYER)
        for what, module in (("pos_nn", pos_nn), ("attn_nn", attn_nn)):
            if module is not None and not callable(module):
                raise ArgumentError(f"{LAYER}: {what} must be a module (or a callable) or None, got {module!r}")
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.add_self_loops = add_self_loops
        src, dst = inputs.channels(in_channels, LAYER)
        # PyG's construction order (each Linear draws as it is made), then its reset_parameters
        self.pos_nn = Linear(3, out_channels) if pos_nn is None else pos_nn
        self.attn_nn = attn_nn
        self.lin = Linear(src, out_channels, bias=False)
        self.lin_src = Linear(src, out_channels, bias=False)
        self.lin_dst = Linear(dst, out_channels, bias=False)
        self._kernels: dict[str, Kernel] = {}
        for form in _SCORES:
            if attn_nn is None:
                self._kernels[form] = kernel(*source(self._aggr, form, None))
            else:
                self._kernels[f"{form}_scores"] = kernel(*scores_source(form))
                self._kernels[f"{form}_attn"] = kernel(*source(self._aggr, form, "channels"))
                self._kernels[f"{form}_attn1"] = kernel(*source(self._aggr, form, "one"))
        self._kernels["messages"] = edge_mlp.kernels("sum")["messages"]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset(self.pos_nn)
        if self.attn_nn is not None:
            reset(self.attn_nn)
        self.lin.reset_parameters()
        self.lin_src.reset_parameters()
        self.lin_dst.reset_parameters()

    def forward(self, x: Any, pos: Any, edge_index: Any) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        if x_dst is None:
            raise ArgumentError(f"{LAYER}: x[1] (the destinations' features) must be a tensor: lin_dst reads it")
        pos = inputs.on_block(pos, adj)
        pos_src, pos_dst = inputs.pair(pos, LAYER, "pos")
        if pos_dst is None:
            raise ArgumentError(f"{LAYER}: pos[1] (the destinations' positions) must be a tensor: pos_i reads it")
        square = isinstance(x, torch.Tensor)
        sizes = inputs.sizes(adj, x_src, x_dst, None, bipartite=not square)
        for what, rows, n in (("pos[0]", pos_src.shape[0], sizes[0]), ("pos[1]", pos_dst.shape[0], sizes[1])):
            if rows != n:
                raise ArgumentError(f"{LAYER}: {what} has {rows} rows but the graph has {n} vertices on that side")
        if pos_src.shape[-1] != pos_dst.shape[-1]:
            raise ArgumentError(
                f"{LAYER}: pos[0] and pos[1] must have as many coordinates (pos_i - pos_j), "
                f"got {pos_src.shape[-1]} and {pos_dst.shape[-1]}"
            )
        # PyG's calls in its order (lazy Linear layers are sized by them)
        b, a, xl = (inputs.autocast_features(t) for t in (self.lin_src(x_src), self.lin_dst(x_dst), self.lin(x_src)))
        edges: Any = adj.index
        if self.add_self_loops:
            edges = looped_edges(adj, min(int(sizes[0]), int(sizes[1])))
        dtype = xl.dtype
        pos_src, pos_dst = pos_src.to(dtype), pos_dst.to(dtype)
        parts = edge_mlp.split(self.pos_nn)
        if parts is not None and parts.rest is None:
            weight, bias = self._pos_linear(parts, pos_src)
            ps, pd = (inputs.autocast_features(F.linear(p, weight)) for p in (pos_src, pos_dst))
            pd = pd if bias is None else pd + bias
            return self._attend("split", edges, sizes, {"sd": a + pd, "ss": b + ps, "xs": xl - ps, "dd": pd})
        if parts is not None:
            weight, bias = self._pos_linear(parts, pos_src)
            first = inputs.autocast_features(F.linear(pos_dst, weight, bias))
            c = inputs.autocast_features(-F.linear(pos_src, weight))
            hidden = self._kernels["messages"](edges, c, first.to(c.dtype), size=sizes)
            assert parts.rest is not None
            delta = parts.rest(hidden)
        else:
            index = edges if isinstance(edges, torch.Tensor) else graphs.edge_index_of(edges)
            delta = self.pos_nn(pos_dst.index_select(0, index[1]) - pos_src.index_select(0, index[0]))
        delta = self._checked(delta, "pos_nn's output", edges)
        return self._attend("edges", edges, sizes, {"a": a, "b": b, "x": xl, "dl": delta})

    def _pos_linear(self, parts: edge_mlp.Split, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        weight = parts.weight
        if weight.shape[-1] != pos.shape[-1]:
            raise ArgumentError(
                f"{LAYER}: pos_nn's first Linear takes {weight.shape[-1]} features, pos has {pos.shape[-1]} coordinates"
            )
        if parts.rest is None and weight.shape[0] != self.out_channels:
            raise ArgumentError(
                f"{LAYER}: pos_nn maps to {weight.shape[0]} channels, the layer has out_channels={self.out_channels}"
            )
        return weight.to(pos.dtype), None if parts.bias is None else parts.bias.to(pos.dtype)

    def _checked(self, t: Any, what: str, edges: Any) -> torch.Tensor:
        num_edges = edges.num_edges if not isinstance(edges, torch.Tensor) else edges.shape[1]
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.shape[0] != num_edges:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ArgumentError(f"{LAYER}: {what} must be [num_edges, channels] = [{num_edges}, *], got {got}")
        return inputs.check_features(t, LAYER, what)

    def _attend(self, form: str, edges: Any, sizes: tuple, named: dict[str, torch.Tensor]) -> torch.Tensor:
        """The aggregation of the messages from the edges' terms `named` (each kernel takes its own)."""
        width = self.out_channels
        delta = named["dd" if form == "split" else "dl"]
        if delta.shape[-1] != width:
            raise ArgumentError(
                f"{LAYER}: pos_nn maps to {delta.shape[-1]} channels, the layer has out_channels={width}"
            )
        dtype = named["xs" if form == "split" else "x"].dtype
        named = {key: t.to(dtype) for key, t in named.items()}

        def call(key: str, **scores: torch.Tensor) -> torch.Tensor:
            made, given = self._kernels[key], {**named, **scores}
            return made(edges, *(given[p] for p in made.params), size=sizes)

        if self.attn_nn is None:
            return call(form)
        scores = self._checked(self.attn_nn(call(f"{form}_scores")), "attn_nn's output", edges)
        if scores.shape[1] == 1:
            return call(f"{form}_attn1", s=scores.reshape(-1).to(dtype))
        if scores.shape[1] != width:
            raise ArgumentError(
                f"{LAYER}: attn_nn maps to {scores.shape[1]} channels; the attention weighs the "
                f"{width} channels of the messages, so it must map to {width} (or 1)"
            )
        return call(f"{form}_attn", s=scores.to(dtype))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


__all__ = ["PointTransformerConv", "scores_source", "source"]
