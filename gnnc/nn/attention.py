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
passes the loop as vertex values instead: the loop's score `sl[v]`
(computed in the kernel from per-vertex inputs read at v where every
destination is a source, `Config.loop_score`, else in torch and passed
in) and, for its message, the source row `h[v]`: on a bipartite graph
with more sources than destinations the destinations are the first
sources (the block convention), and the gradient of `h` read at v adds
into its leading rows;
with fewer, a per-destination input `hl[v]` holds the rows, zero past the
sources. Existing loops are left out by `1 - self_loop(e)` (no mask of E
floats is made or read).
The softmax over the in-edges and the loop is then written out, stable as
the built-in one (the shift `m[v]` is the largest score of the two):

    s[e] = SCORE
    m[v] = detach(sl[v] + max((1 - self_loop(e)) * relu(s[e] - sl[v])))
    p[e] = (1 - self_loop(e)) * exp(s[e] - m[v])
    q[v] = exp(sl[v] - m[v])
    z[v] = q[v] + sum(p[e])
    r[v] = 1.0 / z[v]
    out[v] = q[v] * r[v] * h[v] + sum(p[e] * r[v] * h[u])

z >= 1 (the largest term is exp(0)), so the division never meets 0. The
weights are scaled by r = 1 / z inside the sum rather than the sum divided
by z: the generated gradient then keeps no [V, H, F] sum from the forward
(the quotient rule's numerator). The
shift is `detach`ed: out and alpha do not depend on it, so its gradient is
zero, and without detach the generated gradient would save the max's
winning edge (an argmax, which no cuda edge mapping can compute) and walk
back through it. On a
bipartite graph with fewer sources than destinations only the first
num_src destinations get a loop (PyG's rule): `has[v]` says which, and the
others take the plain maximum of their in-edge scores as their shift.

Dropout in training mode is a mask input (`mask[e]`, and `mloop[v]` for the
loops), drawn in torch as PyG draws it: `F.dropout` of ones whose rows are
PyG's edges in PyG's order (an edge_index's non-loop edges, then the loops;
a sparse adjacency's entries merged in row-major order), so one seed gives
both the same mask (`dropout_masks`); the kernel stays deterministic, and in
eval mode it has no mask input at all.

Every kernel variant a layer may call (loop kind x mask x weights x edge
features, `variants`) is made in its constructor: making one (parsing,
registering its ops) cannot be traced, so torch.compile would break the
graph there. No shape in a layer's forward depends on the data, except the
attention weights returned with self loops (PyG's count of edges without
the graph's own loops), so a model compiles with `fullgraph=True`.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from gnnc.errors import ArgumentError
from gnnc.nn import derived, self_loops
from gnnc.nn.kernels import kernel, literal
from gnnc.nn.linear import add_bias
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
    #: The loop's score as a vertex expression the kernel computes (`sl[v] = ...`), where every
    #: destination has a loop; empty: `sl` is an input, made in torch.
    loop_score: str = ""
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
        assert not c.loop_score or c.loops == "all", "a loop score read at v needs every destination's loop"
        params += [*c.loop_params, *(() if c.loop_score else ("sl: f32[V, H]",))]
        if c.loops == "some":
            params.append("has: f32[V]")
        if c.mask:
            params += ["mask: f32[E, H]", "mloop: f32[V, H]"]
        if c.weights:
            results.append("alpha_loop: f32[V, H]")
        body = [f"s[e] = {c.score}"]
        if c.loop_score:
            body.insert(0, f"sl[v] = {c.loop_score}")
        shifted = "sl[v] + max((1 - self_loop(e)) * relu(s[e] - sl[v]))"
        if c.loops == "some":
            body.append(f"m[v] = detach(has[v] * ({shifted}) + (1 - has[v]) * max(s[e]))")
            body.append("q[v] = has[v] * exp(sl[v] - m[v])")
        else:
            body.append(f"m[v] = detach({shifted})")
            body.append("q[v] = exp(sl[v] - m[v])")
        body.append("p[e] = (1 - self_loop(e)) * exp(s[e] - m[v])")
        body.append("z[v] = q[v] + sum(p[e])")
        # z >= 1 where a destination has a loop or an in-edge; 0 (no terms) else: divide by 1 there
        z = "z[v]" if c.loops == "all" else "(z[v] + (1 - step(z[v])))"
        # the weights are scaled by 1 / z before the sum, not the sum divided after it: the
        # generated gradient then needs no [V, H, F] sum of the forward kept for the quotient rule
        body.append(f"r[v] = 1.0 / {z}")
        edge_w, loop_w = ("p[e] * mask[e]", "q[v] * mloop[v]") if c.mask else ("p[e]", "q[v]")
        if c.weights:
            body.append(f"alpha[e] = {edge_w} * r[v]")
            body.append(f"alpha_loop[v] = {loop_w} * r[v]")
        body.append(f"out[v] = {loop_w} * r[v] * {c.loop_message} + sum({edge_w} * r[v] * {c.message})")
    result = results[0].split(": ")[1] if len(results) == 1 else "(" + ", ".join(results) + ")"
    lines = [f"kernel {c.name}({', '.join(params)}) -> {result} {{"]
    lines += [f"    {line}" for line in body]
    lines.append("}")
    return "\n".join(lines) + "\n"


class LoopKind(enum.StrEnum):
    """How a call's self loops enter its kernel (the kernels differ: see the module docstring)."""

    NONE = "none"
    #: num_src == num_dst: every destination's loop reads its own source row.
    SQUARE = "square"
    #: num_src > num_dst: every destination has a loop, and reads its own source row (the
    #: block convention: destinations are the first sources).
    MORE_SOURCES = "more-sources"
    #: num_src < num_dst: only the first num_src destinations have one (`has[v]`).
    FEWER_SOURCES = "fewer-sources"


def loop_kind(add_self_loops: bool, num_src: Any, num_dst: Any) -> LoopKind:
    if not add_self_loops:
        return LoopKind.NONE
    if num_src == num_dst:
        return LoopKind.SQUARE
    return LoopKind.MORE_SOURCES if num_src > num_dst else LoopKind.FEWER_SOURCES


def loop_fields(kind: LoopKind, own_row: str) -> dict[str, Any]:
    """The Config fields of a loop kind; `own_row` is the loop's message read at the destination
    (`h[v]`) where every destination is a source too."""
    if kind == LoopKind.NONE:
        return {"loops": "none"}
    if kind in (LoopKind.SQUARE, LoopKind.MORE_SOURCES):
        # destinations are the first sources (the block convention): the loop's message is the
        # source row, read at v; its gradient's part per destination adds into the leading rows
        return {"loops": "all", "loop_message": own_row}
    return {  # FEWER_SOURCES: the loops' rows are an input, zero past the sources
        "loops": "some",
        "loop_message": "hl[v]",
        "loop_params": ("hl: f32[V, H, F]",),
    }


def loop_score_in_kernel(kind: LoopKind, edge_features: bool) -> bool:
    """Whether a GAT layer's kernel computes the loops' score (`Config.loop_score`) from inputs
    read at v: where every destination is a source (a square graph, a block) and no loop edge
    features enter it. In torch it was a slice of each input, their sum and the score of
    [num_dst, H(, C)] per call, and in the backward a zero tensor of the inputs' rows per slice
    to add into."""
    return kind in (LoopKind.SQUARE, LoopKind.MORE_SOURCES) and not edge_features


#: A kernel variant of a layer: (loop kind, dropout mask, attention weights returned, edge features).
Variant = tuple[LoopKind, bool, bool, bool]


def variants(add_self_loops: bool, dropout: bool, edge_features: bool) -> list[Variant]:
    """Every kernel variant a layer with these options may call (made up front, so that
    torch.compile finds each one made: making one is not traceable)."""
    kinds = [LoopKind.SQUARE, LoopKind.MORE_SOURCES, LoopKind.FEWER_SOURCES] if add_self_loops else [LoopKind.NONE]
    return [
        (kind, mask, weights, edge)
        for kind in kinds
        for mask in ((False, True) if dropout else (False,))
        for weights in (False, True)
        for edge in ((False, True) if edge_features else (False,))
    ]


def compiled(c: Config) -> Kernel:
    """The configuration's kernel as a torch op (made once per process)."""
    return kernel(source(c), c.name)


def slope(value: Any) -> str:
    """A leaky_relu slope as a literal (a clear error for what cannot be one)."""
    if isinstance(value, bool):
        raise ArgumentError(f"negative_slope must be a finite number, got {value!r}")
    try:
        return literal(value)
    except (TypeError, ValueError):
        raise ArgumentError(f"negative_slope must be a finite number, got {value!r}") from None


def scale(channels: int) -> str:
    """sqrt(C) as a literal: the scores of TransformerConv are divided by it."""
    return literal(math.sqrt(channels))


def check_dropout(p: Any, layer: str = "") -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ArgumentError(f"{layer + ': ' if layer else ''}dropout must be a probability in [0, 1], got {p!r}")
    return float(p)


def check_heads(heads: Any, out_channels: Any) -> None:
    for what, value in (("heads", heads), ("out_channels", out_channels)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArgumentError(f"{what} must be a positive integer, got {value!r}")


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

    #: The call's edge_index.
    edges: torch.Tensor
    #: The type of `keep`.
    dtype: torch.dtype
    #: Loops appended: min(num_src, num_dst).
    count: Any
    #: Destinations of the call.
    num_dst: Any

    @property
    def keep(self) -> torch.Tensor:
        """1.0 on the edges PyG keeps, 0.0 on the graph's own self loops ([E]), made once per
        edge_index where PyG's order of the edges is needed (dropout, returned weights, edge
        features of the loops); the kernels leave the loops out by `self_loop(e)`."""
        return derived.keep(self.edges, self.dtype)

    def pad(self, t: torch.Tensor) -> torch.Tensor:
        """A per-loop tensor ([count, ...]) as a per-destination one, zero past the loops."""
        if t.shape[0] == self.num_dst:
            return t
        return torch.cat([t, t.new_zeros((self.num_dst - t.shape[0], *t.shape[1:]))])

    def has(self, dtype: torch.dtype) -> torch.Tensor:
        return (torch.arange(self.num_dst, device=self.edges.device) < self.count).to(dtype)


def loops(edge_index: torch.Tensor, num_src: Any, num_dst: Any, dtype: torch.dtype) -> Loops:
    """The call's loops (`keep`, where asked for, depends on the edges alone: made once per
    edge_index, gnnc.nn.derived)."""
    return Loops(edge_index, dtype, min(num_src, num_dst), num_dst)


def loop_attr(edge_index: torch.Tensor, edge_attr: torch.Tensor, lp: Loops, fill_value: Any) -> torch.Tensor:
    """The edge features of the appended loops ([count, D]): PyG's `add_self_loops` fill.

    A number or tensor is every loop's value; a reduction name reduces the
    features of each vertex's in-edges (the graph's loops removed first, as
    PyG does), 0 where a vertex has none (1 for "mul"). The edges that feed
    no loop (the graph's own loops, destinations past `count`) go to a spare
    row that is dropped: no shape depends on the data, so torch.compile
    traces it whole.
    """
    shape = (lp.count, edge_attr.shape[1])
    if isinstance(fill_value, (int, float)):
        return edge_attr.new_full(shape, float(fill_value))
    if isinstance(fill_value, torch.Tensor):
        fill = fill_value.to(dtype=edge_attr.dtype, device=edge_attr.device)
        if fill.dim() != edge_attr.dim():
            fill = fill.unsqueeze(0)
        return fill.expand(shape).contiguous()
    dst = edge_index[1]
    feeds = lp.keep.bool() & (dst < lp.count)
    row = torch.where(feeds, dst, torch.full_like(dst, lp.count))  # the spare row: `count`
    index = row.view(-1, 1).expand_as(edge_attr)
    spare = (lp.count + 1, edge_attr.shape[1])
    if fill_value in ("add", "sum", "mean"):
        total = edge_attr.new_zeros(spare).scatter_add(0, index, edge_attr)[: lp.count]
        if fill_value != "mean":
            return total
        count = edge_attr.new_zeros(lp.count + 1).scatter_add(0, row, torch.ones_like(dst, dtype=edge_attr.dtype))
        return total / count[: lp.count].clamp(min=1).view(-1, 1)
    if fill_value == "mul":  # PyG's product starts from 1: a vertex without in-edges gets 1
        return edge_attr.new_ones(spare).scatter_reduce(0, index, edge_attr, "prod", include_self=True)[: lp.count]
    reduce = {"min": "amin", "max": "amax"}[fill_value]
    return edge_attr.new_zeros(spare).scatter_reduce(0, index, edge_attr, reduce, include_self=False)[: lp.count]


def pyg_ranks(edge_index: torch.Tensor, lp: Loops, sparse: bool, num_src: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(rank of each edge, rank of each appended loop) in PyG's order of the call's edges:
    for an edge_index the non-loop edges in order, then the loops; a sparse adjacency PyG
    rebuilds, so edges and loops merge in row-major order of `adj_t`."""
    order = self_loops.Order.ROW_MAJOR if sparse else self_loops.Order.APPENDED
    return self_loops.pyg_ranks(edge_index, lp.keep.bool(), lp.count, num_src, lp.num_dst, order)


def dropout_masks(
    lp: Loops | None, ranks: Any, num_edges: Any, heads: int, p: float, like: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(mask[e], mloop[v]): `F.dropout` of ones over PyG's [E', H] edges, in PyG's order.

    PyG draws E' = (non-loop edges + loops) rows; gnnc draws E + loops rows,
    a shape that does not depend on the data, and takes each edge's row at
    its rank in PyG's order. torch's CPU generator draws a tensor's elements
    in order, so the first E' rows are PyG's: the masks are PyG's for the
    same seed. A graph with its own self loops draws more rows than PyG, so
    later draws of the same generator differ from PyG's.
    """
    if lp is None:
        return F.dropout(like.new_ones(num_edges, heads), p=p, training=True), None
    edge_rank, loop_rank = ranks
    drawn = F.dropout(like.new_ones(num_edges + lp.count, heads), p=p, training=True)
    mask = drawn[edge_rank] * lp.keep.view(-1, 1)
    return mask, lp.pad(drawn[loop_rank])


def heads_out(
    out: torch.Tensor, res: torch.Tensor | None, bias: torch.Tensor | None, heads: int, channels: int, concat: bool
) -> torch.Tensor:
    """A GAT-family layer's output from its kernel's [N, heads, channels] result: the heads
    concatenated ([N, heads * channels]) or averaged ([N, channels]), plus the residual and
    the bias. Both are added into the kernel's fresh result, which no backward reads (a
    tensor less), and before the reshape: added in place into a view, autograd would copy
    the base back in the backward (docs/design/training.md, "Products' results from numpy")."""
    shape = (-1, heads, channels) if concat else (-1, channels)
    out = out if concat else out.mean(dim=1)
    if res is not None:
        out = add_bias(out, res.view(shape))
    if bias is not None:
        out = add_bias(out, bias.view(shape[1:]))
    return out.reshape(-1, heads * channels) if concat else out


def returned_weights(result: Any, adj: Any, lp: Loops | None, ranks: Any, num_src: Any, num_dst: Any) -> Any:
    """The attention weights as PyG returns them, after the graph's loops were replaced.

    An edge_index: `(edge_index, alpha)`, the graph's non-loop edges then
    the loops. A torch.sparse adjacency: `(adj_t, alpha)`, `adj_t` with the
    loops merged in row-major order and alpha as its values, in its layout.
    A SparseTensor: the SparseTensor with the loops and alpha as its values.
    """
    edges, alpha = adj.edge_index, result.alpha
    if lp is not None:
        edges, alpha = _with_loops(edges, lp, ranks, alpha, result.alpha_loop)
    if adj.layout == "SparseTensor":
        if lp is None:
            return adj.given.set_value(alpha, layout="coo")
        return type(adj.given)(row=edges[1], col=edges[0], value=alpha, sparse_sizes=(num_dst, num_src), is_sorted=True)
    if adj.layout == "torch.sparse":
        return _sparse_like(adj.given, edges, alpha, num_src, num_dst), alpha
    return edges, alpha


def _with_loops(
    edge_index: torch.Tensor, lp: Loops, ranks: Any, alpha: torch.Tensor, alpha_loop: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(edge_index, alpha) of PyG's edges in PyG's order: the kept edges and the loops by rank."""
    edge_rank, loop_rank = ranks
    keep = lp.keep.bool()
    ids = torch.arange(lp.count, dtype=edge_index.dtype, device=edge_index.device)
    edges = torch.cat([edge_index, torch.stack([ids, ids])], dim=1)
    weights = torch.cat([alpha, alpha_loop[: lp.count]])
    valid = torch.cat([keep, torch.ones(lp.count, dtype=torch.bool, device=keep.device)])
    rank = torch.cat([edge_rank, loop_rank])
    order = torch.argsort(torch.where(valid, rank, rank.numel() + torch.arange(rank.numel(), device=rank.device)))
    order = order[: int(valid.sum())]  # PyG's edge count depends on the data: so does this
    return edges[:, order], weights[order]


def _sparse_like(given: torch.Tensor, edges: torch.Tensor, alpha: torch.Tensor, num_src: Any, num_dst: Any) -> Any:
    """`adj_t` ([num_dst, num_src, H]) of these edges with alpha as values, in `given`'s layout
    (PyG's `set_sparse_value`: COO coalesced, CSR; a CSC adjacency comes back as COO)."""
    size = (num_dst, num_src, *alpha.shape[1:])
    coo = torch.sparse_coo_tensor(edges.flip(0), alpha, size).coalesce()
    if given.layout == torch.sparse_csr:
        rows, cols = coo.indices()
        crow = torch.zeros(num_dst + 1, dtype=torch.int64, device=rows.device)
        crow[1:] = torch.cumsum(torch.bincount(rows, minlength=num_dst), 0)
        return torch.sparse_csr_tensor(crow, cols, coo.values(), size)
    return coo


__all__ = [
    "Config",
    "LoopKind",
    "Loops",
    "Variant",
    "check_dropout",
    "check_fill_value",
    "check_heads",
    "compiled",
    "dropout_masks",
    "edge_features",
    "loop_attr",
    "loop_fields",
    "loop_kind",
    "loops",
    "pyg_ranks",
    "returned_weights",
    "scale",
    "slope",
    "source",
    "variants",
]
