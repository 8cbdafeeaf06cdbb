"""`EGConv`: PyG's efficient graph convolution (Tailor et al., EGC); every aggregator in one gnnc kernel.

PyG aggregates the bases `b = bases_lin(x)` ([V, B * C / H]) with each
aggregator over the graph with its self loops (PyG's `add_remaining_self_loops`:
the graph's own loops dropped, one appended per vertex), then combines them
per vertex and head with `comb_lin(x)`'s weightings. One kernel computes
every aggregator's result; the loops are not added to the graph but enter as
each vertex's own term, the graph's loops left out by `self_loop(e)`, and
`c[v] + deg_in(v)` is a vertex's count with its loop (`c` from
`gnnc.nn.self_loops.unweighted_loops`, made once per edge_index):

    kernel eg_conv_replaced_sum_mean_max_sq_sym(x: f32[V, G], c: f32[V])
            -> (s_sum: f32[V, G], s_mean: f32[V, G], s_max: f32[V, G], s_sq: f32[V, G], s_sym: f32[V, G]) {
        r[v] = 1 / (c[v] + deg_in(v))
        s_sum[v] = x[v] + sum((1 - self_loop(e)) * x[u])
        s_mean[v] = r[v] * x[v] + sum(r[v] * (1 - self_loop(e)) * x[u])
        s_max[v] = x[v] + max((1 - self_loop(e)) * relu(x[u] - x[v]))
        s_sq[v] = r[v] * x[v] * x[v] + sum(r[v] * (1 - self_loop(e)) * x[u] * x[u])
        s_sym[v] = r[v] * x[v] + sum((1 - self_loop(e)) * rsqrt(c[u] + deg_in(u)) * rsqrt(c[v] + deg_in(v)) * x[u])
    }

(only the results the aggregators read: "var" and "std" read `s_mean` and
`s_sq`, "symnorm" `s_sym`; "min" is `x[v] - max((1 - self_loop(e)) *
relu(x[v] - x[u]))`). The maximum with the loop is the loop's term plus the
largest excess of an in-edge over it, so the graph's own loops (excess 0)
and an empty in-edge list drop out. Without "symnorm" PyG adds an
edge_index's loops without its `num_nodes` (`add_remaining_self_loops(edge_index)`):
only the vertices up to the largest id in the edge_index get one, and the
others, which have no in-edge either, aggregate nothing (0); the kernel then
takes `has[v]`, 1 for the vertices with a loop, and its loop terms read
`has[v] * x[v]`. Without self loops the kernel is the plain `sum(x[u])`,
`mean`, `max`, `min`, `mean(x[u] * x[u])` and `sum(n(u) n(v) x[u])` with `n`
deg^-1/2 (0 at 0). var = s_sq - s_mean^2, std (PyG's
`clamp(min=1e-5).sqrt()`), the weightings' product and the bias are torch's.

Sparse adjacencies take PyG's other code path (`message_and_aggregate`),
with the same kernel weighted by an edge input `w[e]` where PyG's
products are: a torch.sparse adjacency's values weigh "symnorm" (its loops
added beside the graph's own, so a loop edge keeps its weight and the loop's
1 adds to it) and, without "symnorm", every aggregator (PyG adds no loops
to one: refused with them); a SparseTensor's values (loops replaced, as
torch_sparse's `fill_diag`) weigh "symnorm", or every aggregator without
it; the other aggregators beside "symnorm" count each entry once; std is
`sqrt(relu(var) + 1e-5)` there, as in PyG's path.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import derived, inputs
from gnnc.nn.init import zeros
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear
from gnnc.nn.message_passing import CachedGraph, check_options
from gnnc.nn.precompile import WarmUp
from gnnc.torch.kernels import Kernel

LAYER = "EGConv"

#: PyG's aggregators and the kernel results each reads.
AGGREGATORS = {
    "sum": ("sum",),
    "mean": ("mean",),
    "symnorm": ("sym",),
    "min": ("min",),
    "max": ("max",),
    "var": ("mean", "sq"),
    "std": ("mean", "sq"),
}
#: The kernel's results in signature order.
STATISTICS = ("sum", "mean", "max", "min", "sq", "sym")


class Loops(enum.StrEnum):
    """How self loops enter an aggregation (PyG's forms of adding them)."""

    NONE = "none"
    #: The graph's own loops dropped, one of weight 1 per vertex (add_remaining_self_loops, fill_diag).
    REPLACED = "replaced"
    #: One of weight 1 per vertex beside the graph's own (a torch.sparse adjacency's add_self_loops).
    APPENDED = "appended"


@dataclass(frozen=True)
class Form:
    """How one call's graph enters the kernel: loops and weights of the aggregators other than
    "symnorm", and of "symnorm"."""

    loops: Loops
    weighted: bool
    sym_loops: Loops
    sym_weighted: bool
    #: The loops only of vertices up to the graph's largest id (`has[v]`): PyG's
    #: `add_remaining_self_loops(edge_index)` without `num_nodes`, on an edge_index without "symnorm".
    partial: bool = False


def _inverse_sqrt(d: str, signed: bool = True) -> str:
    """d^-1/2, 0 at 0 and NaN below 0 (PyG's `pow(-0.5)` with its infinities masked); a degree
    that cannot be negative (`signed=False`) needs no test for it."""
    if not signed:
        return f"step({d}) * rsqrt({d} + 1 - step({d}))"
    return f"(step({d}) + step(-{d})) * rsqrt({d} + 1 - step({d}) - step(-{d}))"


def source(stats: tuple[str, ...], form: Form) -> tuple[str, str]:
    """(kernel text, name) of the aggregation kernel computing `stats` (of STATISTICS, in order)."""
    others = [s for s in stats if s != "sym"]
    sym = "sym" in stats
    replaced = bool(others) and form.loops == Loops.REPLACED
    sym_unit_replaced = sym and form.sym_loops == Loops.REPLACED and not form.sym_weighted
    weighted = (bool(others) and form.weighted) or (sym and form.sym_weighted)
    loops = form.loops if others else form.sym_loops
    name = "eg_conv" + ("" if loops == Loops.NONE else f"_{loops.value}") + "_" + "_".join(stats)
    name += "_weighted" if weighted else ""
    params = ["x: f32[V, G]"] + (["c: f32[V]"] if replaced or sym_unit_replaced else [])
    params += ["w: f32[E]"] if weighted else []
    partial = replaced and form.partial
    params += ["has: f32[V]"] if partial else []
    body: list[str] = []
    if (replaced and ("mean" in others or "sq" in others)) or sym_unit_replaced:
        body.append("r[v] = 1 / (c[v] + deg_in(v))")
    message = "w[e] * x[u]" if form.weighted else "x[u]"
    if replaced:
        # a vertex without a loop (`has[v]` 0) has no in-edge either: its loop term alone drops
        k, own = "(1 - self_loop(e))", "has[v] * x[v]" if partial else "x[v]"
        values = {
            "sum": f"{own} + sum({k} * {message})",
            "mean": f"r[v] * {own} + sum(r[v] * {k} * {message})",
            "max": f"{own} + max({k} * relu({message} - x[v]))",
            "min": f"{own} - max({k} * relu(x[v] - {message}))",
            "sq": f"r[v] * {own} * x[v] + sum(r[v] * {k} * {message} * x[u])",
        }
    else:
        values = {
            "sum": f"sum({message})",
            "mean": f"mean({message})",
            "max": f"max({message})",
            "min": f"min({message})",
            "sq": f"mean({message} * x[u])",
        }
    body += [f"s_{s}[v] = {values[s]}" for s in others]
    if sym:
        body += _symnorm(form)
    if len(stats) == 1:  # one result: `out`
        result = "f32[V, G]"
        body = [line.replace(f"s_{stats[0]}[v] =", "out[v] =") for line in body]
    else:
        result = "(" + ", ".join(f"s_{s}: f32[V, G]" for s in stats) + ")"
    lines = [f"kernel {name}({', '.join(params)}) -> {result} {{", *(f"    {line}" for line in body), "}"]
    return "\n".join(lines) + "\n", name


def _symnorm(form: Form) -> list[str]:
    """The lines computing "symnorm" (PyG's gcn_norm weights times the sum), `s_sym[v]`."""
    if not form.sym_weighted:
        if form.sym_loops == Loops.NONE:
            nu, nv = _inverse_sqrt("deg_in(u)", False), _inverse_sqrt("deg_in(v)", False)
            return [f"s_sym[v] = sum({nu} * {nv} * x[u])"]
        norm = "rsqrt(c[u] + deg_in(u)) * rsqrt(c[v] + deg_in(v))"
        return [f"s_sym[v] = r[v] * x[v] + sum((1 - self_loop(e)) * {norm} * x[u])"]
    if form.sym_loops == Loops.NONE:
        lines, edge = ["ds[v] = sum(w[e])"], "w[e]"
    elif form.sym_loops == Loops.REPLACED:
        lines, edge = ["ds[v] = 1 + sum((1 - self_loop(e)) * w[e])"], "(1 - self_loop(e)) * w[e]"
    else:
        lines, edge = ["ds[v] = 1 + sum(w[e])"], "w[e]"
    lines.append(f"ns[v] = {_inverse_sqrt('ds[v]')}")
    loop = "ns[v] * ns[v] * x[v] + " if form.sym_loops != Loops.NONE else ""
    lines.append(f"s_sym[v] = {loop}sum({edge} * ns[u] * ns[v] * x[u])")
    return lines


def forms(aggregators: list[str], add_self_loops: bool) -> dict[str, Form | None]:
    """The Form of each graph argument's kind ("edge_index", "torch.sparse", "SparseTensor",
    "SparseTensor-values"), None where PyG's EGConv cannot take it."""
    symnorm = "symnorm" in aggregators
    loops = Loops.REPLACED if add_self_loops else Loops.NONE
    plain = Form(loops, False, loops, False)
    # without "symnorm" PyG adds an edge_index's loops without num_nodes: up to its largest id
    first = plain if symnorm or not add_self_loops else Form(loops, False, loops, False, partial=True)
    if symnorm:
        torch_sparse: Form | None = Form(loops, False, Loops.APPENDED if add_self_loops else Loops.NONE, True)
        valued = Form(loops, False, loops, True)
    else:
        torch_sparse = None if add_self_loops else Form(Loops.NONE, True, Loops.NONE, True)
        valued = Form(loops, True, loops, True)
    return {"edge_index": first, "torch.sparse": torch_sparse, "SparseTensor": plain, "SparseTensor-values": valued}


@dataclass(frozen=True)
class _Graph:
    """A call's graph as the kernel takes it: the edges, its kind, and the extra inputs."""

    index: Any
    kind: str
    extra: tuple[torch.Tensor, ...]


class EGConv(CachedGraph, WarmUp, nn.Module):
    """PyG's `EGConv(in_channels, out_channels, aggregators=None, num_heads=8, num_bases=4,
    cached=False, add_self_loops=True, bias=True, **kwargs)`.

    `forward(x, edge_index)`; x is one tensor (or a sampled block's sources),
    `edge_index` may be a torch.sparse adjacency or a SparseTensor (PyG's
    fused path, see the module). Aggregators: "sum", "mean", "symnorm"
    (PyG's default), "max", "min", "var", "std". Parameters as PyG's:
    `bases_lin.weight`, `comb_lin.weight`, `comb_lin.bias`, `bias`;
    `in_channels=-1` sizes the Linear layers by the first input.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        aggregators: list[str] | None = None,
        num_heads: int = 8,
        num_bases: int = 4,
        cached: bool = False,
        add_self_loops: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        # PyG passes node_dim=0 to MessagePassing itself: another is a TypeError there
        check_options(LAYER, kwargs, node_dim=False)
        if isinstance(in_channels, bool) or not isinstance(in_channels, int) or (in_channels < 1 and in_channels != -1):
            raise ArgumentError(f"{LAYER}: in_channels must be a positive integer or -1 (lazy), got {in_channels!r}")
        for what, value in (("out_channels", out_channels), ("num_heads", num_heads), ("num_bases", num_bases)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArgumentError(f"{LAYER}: {what} must be a positive integer, got {value!r}")
        if out_channels % num_heads != 0:
            raise ArgumentError(
                f"{LAYER}: out_channels (got {out_channels}) must be divisible by the number of heads (got {num_heads})"
            )
        aggregators = list(aggregators) if aggregators else ["symnorm"]
        for a in aggregators:
            if a not in AGGREGATORS:
                raise ArgumentError(f"{LAYER}: unsupported aggregator {a!r} (it takes {', '.join(AGGREGATORS)})")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.num_heads, self.num_bases = num_heads, num_bases
        self.cached, self.add_self_loops, self.aggregators = cached, add_self_loops, aggregators
        self.bases_lin = Linear(
            in_channels, (out_channels // num_heads) * num_bases, bias=False, weight_initializer="glorot"
        )
        self.comb_lin = Linear(in_channels, num_heads * num_bases * len(aggregators))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._stats = tuple(s for s in STATISTICS if any(s in AGGREGATORS[a] for a in aggregators))
        # every kernel a call may need, made now: torch.compile cannot trace making one
        made = forms(aggregators, bool(add_self_loops)).values()
        self._kernels: dict[Form, Kernel] = {f: kernel(*source(self._stats, f)) for f in made if f is not None}
        self._cached: _Graph | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.bases_lin.reset_parameters()
        self.comb_lin.reset_parameters()
        zeros(self.bias)
        self._cached = None

    def _form(self, kind: str) -> Form | None:
        """The Form of a graph argument's kind with the layer's options as they are now."""
        return forms(self.aggregators, bool(self.add_self_loops))[kind]

    def _graph(self, adj: inputs.Adjacency, num_nodes: int, dtype: torch.dtype) -> _Graph:
        """The call's graph and the kernel's extra inputs (`c`, `w`) for its kind."""
        if adj.layout == inputs.Layout.TORCH_SPARSE:
            kind = "torch.sparse"
        elif adj.layout == inputs.Layout.SPARSE_TENSOR:
            kind = "SparseTensor-values" if adj.values is not None else "SparseTensor"
        else:
            kind = "edge_index"
        form = self._form(kind)
        if form is None:
            raise ArgumentError(
                f"{LAYER}: add_self_loops without 'symnorm' on a torch.sparse adjacency is not supported (PyG's "
                "EGConv cannot add the remaining self loops to one): pass an edge_index or a SparseTensor"
            )
        extra: list[torch.Tensor] = []
        stats = self._stats
        others = any(s != "sym" for s in stats)
        sym = "sym" in stats
        if (others and form.loops == Loops.REPLACED) or (
            sym and form.sym_loops == Loops.REPLACED and not form.sym_weighted
        ):
            extra.append(derived.gcn_loops(adj.index, num_nodes, 1.0, dtype)[0])
        if (others and form.weighted) or (sym and form.sym_weighted):
            weight = inputs.edge_values(adj, None)
            assert weight is not None
            extra.append(weight.to(dtype))
        if others and form.partial:
            edges = adj.edge_index
            ids = torch.arange(num_nodes, device=edges.device)
            has = ids <= edges.max() if edges.shape[1] else torch.zeros_like(ids, dtype=torch.bool)
            extra.append(has.to(dtype))
        return _Graph(adj.index, kind, tuple(extra))

    def forward(self, x: torch.Tensor, edge_index: Any) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise ArgumentError(f"{LAYER}: x must be one tensor (PyG's EGConv is not bipartite)")
        x = inputs.check_features(x, LAYER)
        adj, rows = inputs.square(inputs.adjacency(edge_index), x, LAYER)
        num_nodes = x.shape[0]
        inputs.sizes(adj, x, x, None, bipartite=False)
        # PyG caches the graph with its loops (and symnorm's weights): nothing to cache without either
        caches = self.cached and ("symnorm" in self.aggregators or self.add_self_loops)
        if caches and self._cached is not None:
            graph = self._cached
        else:
            graph = self._graph(adj, num_nodes, x.dtype)
            if caches:
                self._cached = _Graph(graph.index, graph.kind, tuple(t.detach() for t in graph.extra))
        form = self._form(graph.kind)
        assert form is not None
        made = self._kernels.get(form)
        if made is None:  # add_self_loops set after construction (DirGNNConv's copies)
            made = self._kernels[form] = kernel(*source(self._stats, form))
        bases = self.bases_lin(x)
        weightings = self.comb_lin(x)
        results = made(graph.index, bases, *graph.extra, num_vertices=num_nodes)
        values = tuple(results) if isinstance(results, tuple) else (results,)
        stat = dict(zip(self._stats, values))
        outs = [self._aggregated(a, stat, graph.kind != "edge_index") for a in self.aggregators]
        aggregated = torch.stack(outs, dim=1) if len(outs) > 1 else outs[0]
        if rows is not None:  # a block: its destinations' rows
            aggregated, weightings = aggregated[:rows], weightings[:rows]
        heads, bases_count, width = self.num_heads, self.num_bases, self.out_channels // self.num_heads
        weightings = weightings.view(-1, heads, bases_count * len(self.aggregators))
        aggregated = aggregated.reshape(-1, len(self.aggregators) * bases_count, width)
        out = torch.matmul(weightings, aggregated).view(-1, self.out_channels)
        if self.bias is not None:
            out = out + self.bias
        return out

    @staticmethod
    def _aggregated(aggregator: str, stat: dict[str, torch.Tensor], fused: bool) -> torch.Tensor:
        """One aggregator's result from the kernel's; `fused`: PyG's sparse path's std."""
        if aggregator in ("var", "std"):
            var = stat["sq"] - stat["mean"] * stat["mean"]
            if aggregator == "var":
                return var
            return torch.sqrt(var.relu() + 1e-5) if fused else var.clamp(min=1e-5).sqrt()
        return stat[AGGREGATORS[aggregator][0]]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, aggregators={self.aggregators})"


__all__ = ["EGConv", "Form", "Loops", "forms", "source"]
