"""What gnnc.nn's attention layers share: their kernel's text, self loops, dropout masks.

GATConv, GATv2Conv and TransformerConv score every edge, normalise the
scores with a softmax over each destination's in-edges and sum the
messages weighted by the result. Each layer's message passing is one
kernel, written here from the layer's configuration: the score expression,
whether an attention-dropout mask is an input, whether the attention
weights are a result, and how self loops enter.

Self loops (GAT and GATv2). PyG removes a graph's self loops and appends
one loop (i, i) per vertex i < min(num_src, num_dst) on every call. gnnc
keeps the user's edges (so the graph is built once per edge_index) and
passes the loop as vertex tensors instead: the loop's score `sl[v]`
(computed in torch from per-vertex values) and, for its message, the
source row `h[v]` (on a bipartite graph, a per-destination input `hl[v]`
holding it: gradients of an input read at both u and v are refused on a
bipartite graph's reversal). Existing loops are masked by `keep[e]` (0 on
a loop).
The softmax over the in-edges and the loop is then written out, stable as
the built-in one (the shift `m[v]` is the largest score of the two):

    s[e] = SCORE
    m[v] = sl[v] + max(keep[e] * relu(s[e] - sl[v]))
    p[e] = keep[e] * exp(s[e] - m[v])
    q[v] = exp(sl[v] - m[v])
    z[v] = q[v] + sum(p[e])
    out[v] = (q[v] * h[v] + sum(p[e] * h[u])) / z[v]

z >= 1 (the largest term is exp(0)), so the division never meets 0. On a
bipartite graph with fewer sources than destinations only the first
num_src destinations get a loop (PyG's rule): `has[v]` says which, and the
others take the plain maximum of their in-edge scores as their shift.

Dropout in training mode is a mask input (`mask[e]`, and `mloop[v]` for the
loops), drawn in torch as PyG draws it: `F.dropout` on an [E', H] tensor
whose rows are PyG's edges in PyG's order (the graph's non-loop edges,
then the loops), so one seed gives both the same mask; the kernel stays
deterministic, and in eval mode it has no mask input at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from gnnc.errors import ArgumentError
from gnnc.nn.kernels import kernel, literal
from gnnc.torch.kernels import Kernel

#: The reductions PyG's `fill_value` may name for a loop's edge attributes.
FILL_REDUCTIONS = ("add", "sum", "mean", "min", "max", "mul")


@dataclass(frozen=True)
class Config:
    """One attention kernel's configuration: what it reads and what it returns."""

    #: Kernel name (the layer's module name: gat_conv, gatv2_conv, transformer_conv).
    name: str
    #: The layer's inputs, as signature entries, before the optional ones.
    params: tuple[str, ...]
    #: The edge score, an edge expression over `params` (and `ea[e]`).
    score: str
    #: The message of edge u -> v, an edge expression (`h[u]`).
    message: str
    #: Self loops: "none", "all" (every destination has one) or "some" (`has[v]` says).
    loops: str = "none"
    #: The loop's message read at the destination (`h[v]`), with loops.
    loop_message: str = ""
    #: Inputs only the loops read (`hl: f32[V, H, F]`, the loop's message on a bipartite graph).
    loop_params: tuple[str, ...] = ()
    #: Per-edge inputs appended to params when the layer has edge features (`ea: f32[E, H, F]`).
    edge_params: tuple[str, ...] = ()
    #: Whether an attention-dropout mask is an input.
    mask: bool = False
    #: Whether the attention weights are a result (`alpha`, and `alpha_loop` with loops).
    weights: bool = False
    #: Whether the weights returned are those after dropout (GAT) or before (TransformerConv).
    weights_after_dropout: bool = True


def source(c: Config) -> str:
    """The kernel text of a configuration (see the module docstring)."""
    params = list(c.params) + list(c.edge_params)
    results = ["out: f32[V, H, F]"]
    if c.weights:
        results.append("alpha: f32[E, H]")
    if c.loops == "none":
        if c.mask:
            params.append("mask: f32[E, H]")
        body = [f"s[e] = {c.score}"]
        masked = " * mask[e]" if c.mask else ""
        if c.weights:
            after = masked if c.weights_after_dropout else ""
            body.append(f"alpha[e] = softmax(s[e]){after}")
            used = masked if not c.weights_after_dropout else ""
            body.append(f"out[v] = sum(alpha[e]{used} * {c.message})")
        else:
            body.append(f"out[v] = sum(softmax(s[e]){masked} * {c.message})")
    else:
        params += [*c.loop_params, "sl: f32[V, H]", "keep: f32[E]"]
        if c.loops == "some":
            params.append("has: f32[V]")
        if c.mask:
            params += ["mask: f32[E, H]", "mloop: f32[V, H]"]
        if c.weights:
            results.append("alpha_loop: f32[V, H]")
        body = [f"s[e] = {c.score}"]
        shifted = "sl[v] + max(keep[e] * relu(s[e] - sl[v]))"
        if c.loops == "some":
            body.append(f"m[v] = has[v] * ({shifted}) + (1 - has[v]) * max(s[e])")
            body.append("q[v] = has[v] * exp(sl[v] - m[v])")
        else:
            body.append(f"m[v] = {shifted}")
            body.append("q[v] = exp(sl[v] - m[v])")
        body.append("p[e] = keep[e] * exp(s[e] - m[v])")
        body.append("z[v] = q[v] + sum(p[e])")
        # z >= 1 where a destination has a loop or an in-edge; 0 (no terms) else: divide by 1 there
        z = "z[v]" if c.loops == "all" else "(z[v] + (1 - step(z[v])))"
        edge_w, loop_w = ("p[e] * mask[e]", "q[v] * mloop[v]") if c.mask else ("p[e]", "q[v]")
        if c.weights:
            body.append(f"alpha[e] = {edge_w} / {z}")
            body.append(f"alpha_loop[v] = {loop_w} / {z}")
        body.append(f"out[v] = ({loop_w} * {c.loop_message} + sum({edge_w} * {c.message})) / {z}")
    result = results[0].split(": ")[1] if len(results) == 1 else "(" + ", ".join(results) + ")"
    lines = [f"kernel {c.name}({', '.join(params)}) -> {result} {{"]
    lines += [f"    {line}" for line in body]
    lines.append("}")
    return "\n".join(lines) + "\n"


def returned_weights(
    result: Any, sparse: bool, edges: torch.Tensor, lp: Any, num_src: Any, num_dst: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The GAT layers' `(edge_index, alpha)` as PyG returns them: the loops appended after
    the edges, and for a sparse adjacency its `adj_t` with the weights as values."""
    if lp is None:
        edges_out, alpha = edges, result.alpha
    else:
        edges_out, alpha = weights_with_loops(edges, lp, result.alpha, result.alpha_loop)
    if sparse:
        return torch.sparse_coo_tensor(edges_out.flip(0), alpha, (num_dst, num_src)), alpha
    return edges_out, alpha


def compiled(c: Config) -> Kernel:
    """The configuration's kernel as a torch op (made once per process)."""
    return kernel(source(c), c.name)


def slope(value: Any) -> str:
    """A leaky_relu slope as a literal (a clear error for what cannot be one)."""
    try:
        return literal(value)
    except (TypeError, ValueError):
        raise ArgumentError(f"negative_slope must be a finite number, got {value!r}") from None


def scale(channels: int) -> str:
    """sqrt(C) as a literal: the scores of TransformerConv are divided by it."""
    return literal(math.sqrt(channels))


def check_dropout(p: Any) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ArgumentError(f"dropout must be a probability in [0, 1], got {p!r}")
    return float(p)


def check_heads(heads: Any, out_channels: Any) -> None:
    for what, value in (("heads", heads), ("out_channels", out_channels)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArgumentError(f"{what} must be a positive integer, got {value!r}")


def channels(in_channels: Any, layer: str) -> tuple[int, int]:
    """(source, destination) input channels of `in_channels` (an int or a pair)."""
    pair = (in_channels, in_channels) if isinstance(in_channels, int) else in_channels
    if (
        not isinstance(pair, (tuple, list))
        or len(pair) != 2
        or any(isinstance(c, bool) or not isinstance(c, int) for c in pair)
    ):
        raise ArgumentError(f"{layer}: in_channels must be an int or a pair of ints, got {in_channels!r}")
    if any(c < 1 for c in pair):
        # PyG's -1 makes a lazy layer, sized at its first call: gnnc.nn's layers are sized up front
        raise ArgumentError(f"{layer}: in_channels must be positive (lazy initialisation, -1, is not supported)")
    return int(pair[0]), int(pair[1])


def edge_features(edge_attr: Any, num_edges: int, edge_dim: int, layer: str) -> torch.Tensor:
    """`edge_attr` as an [E, edge_dim] tensor (PyG takes [E] for edge_dim 1)."""
    if not isinstance(edge_attr, torch.Tensor):
        raise ArgumentError(f"{layer}: edge_attr must be a tensor, got {type(edge_attr).__name__}")
    ea = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
    if ea.dim() != 2 or ea.shape[0] != num_edges or ea.shape[1] != edge_dim:
        raise ArgumentError(
            f"{layer}: edge_attr must have shape [E, edge_dim] = [{num_edges}, {edge_dim}], got {tuple(edge_attr.shape)}"
        )
    return ea


def check_fill_value(fill_value: Any, layer: str) -> None:
    if isinstance(fill_value, str):
        if fill_value not in FILL_REDUCTIONS:
            raise ArgumentError(
                f"{layer}: fill_value {fill_value!r} must be a number, a tensor or one of {FILL_REDUCTIONS}"
            )
    elif isinstance(fill_value, bool) or not isinstance(fill_value, (int, float, torch.Tensor)):
        raise ArgumentError(f"{layer}: fill_value must be a number, a tensor or a reduction name, got {fill_value!r}")


@dataclass(frozen=True)
class Loops:
    """A call's self loops: PyG removes the graph's loops and appends (i, i) for i < count."""

    #: 1.0 on the edges PyG keeps, 0.0 on the graph's own self loops ([E]).
    keep: torch.Tensor
    #: Loops appended: min(num_src, num_dst).
    count: int
    #: Destinations of the call.
    num_dst: int

    @property
    def some(self) -> bool:
        """Whether only part of the destinations get a loop (fewer sources than destinations)."""
        return self.count < self.num_dst

    def pad(self, t: torch.Tensor) -> torch.Tensor:
        """A per-loop tensor ([count, ...]) as a per-destination one, zero past the loops."""
        if t.shape[0] == self.num_dst:
            return t
        return torch.cat([t, t.new_zeros((self.num_dst - t.shape[0], *t.shape[1:]))])

    def has(self, dtype: torch.dtype) -> torch.Tensor:
        return (torch.arange(self.num_dst) < self.count).to(dtype)


def loops(edge_index: torch.Tensor, num_src: int, num_dst: int, dtype: torch.dtype) -> Loops:
    keep = (edge_index[0] != edge_index[1]).to(dtype)
    return Loops(keep, min(num_src, num_dst), num_dst)


def loop_attr(edge_index: torch.Tensor, edge_attr: torch.Tensor, lp: Loops, fill_value: Any) -> torch.Tensor:
    """The edge features of the appended loops ([count, D]): PyG's `add_self_loops` fill.

    A number or tensor is every loop's value; a reduction name reduces the
    features of each vertex's in-edges (the graph's loops removed first, as
    PyG does), 0 where a vertex has none (1 for "mul").
    """
    shape = (lp.count, edge_attr.shape[1])
    if isinstance(fill_value, (int, float)):
        return edge_attr.new_full(shape, float(fill_value))
    if isinstance(fill_value, torch.Tensor):
        fill = fill_value.to(edge_attr.dtype)
        if fill.dim() != edge_attr.dim():
            fill = fill.unsqueeze(0)
        return fill.expand(shape).contiguous()
    keep = lp.keep.bool()
    dst, attr = edge_index[1][keep], edge_attr[keep]
    inside = dst < lp.count  # loops exist for the first `count` vertices only
    dst, attr = dst[inside], attr[inside]
    index = dst.view(-1, 1).expand_as(attr)
    zero = edge_attr.new_zeros(shape)
    if fill_value in ("add", "sum", "mean"):
        total = zero.scatter_add(0, index, attr)
        if fill_value != "mean":
            return total
        count = torch.zeros(lp.count, dtype=attr.dtype).scatter_add(0, dst, torch.ones_like(dst, dtype=attr.dtype))
        return total / count.clamp(min=1).view(-1, 1)
    if fill_value == "mul":  # PyG's product starts from 1: a vertex without in-edges gets 1
        return torch.ones_like(zero).scatter_reduce(0, index, attr, "prod", include_self=True)
    reduce = {"min": "amin", "max": "amax"}[fill_value]
    return zero.scatter_reduce(0, index, attr, reduce, include_self=False)


def dropout_masks(
    lp: Loops | None, num_edges: int, heads: int, p: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(mask[e], mloop[v]): `F.dropout` of ones on PyG's [E', H] edges, in PyG's edge order."""
    if lp is None:
        return F.dropout(torch.ones(num_edges, heads, dtype=dtype), p=p, training=True), None
    keep = lp.keep.bool()
    kept = int(keep.sum())
    drawn = F.dropout(torch.ones(kept + lp.count, heads, dtype=dtype), p=p, training=True)
    mask = torch.zeros(num_edges, heads, dtype=dtype)
    mask[keep] = drawn[:kept]
    return mask, lp.pad(drawn[kept:])


def weights_with_loops(
    edge_index: torch.Tensor, lp: Loops, alpha: torch.Tensor, alpha_loop: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge_index, alpha) in PyG's order: the graph's non-loop edges, then the loops."""
    keep = lp.keep.bool()
    ids = torch.arange(lp.count, dtype=edge_index.dtype)
    edges = torch.cat([edge_index[:, keep], torch.stack([ids, ids])], dim=1)
    return edges, torch.cat([alpha[keep], alpha_loop[: lp.count]])


__all__ = [
    "Config",
    "Loops",
    "check_dropout",
    "check_fill_value",
    "check_heads",
    "channels",
    "compiled",
    "dropout_masks",
    "edge_features",
    "loop_attr",
    "loops",
    "scale",
    "slope",
    "source",
    "weights_with_loops",
]
