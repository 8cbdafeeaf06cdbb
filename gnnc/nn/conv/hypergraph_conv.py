"""`HypergraphConv`: PyG's hypergraph convolution (Bai et al.), two gnnc kernels on the incidence graph.

PyG computes `D^-1 H A B^-1 H^T x W` (`A` the attention weights of the
incidences, 1 without attention): a pass from the vertices to the
hyperedges, each hyperedge's sum scaled by `B^-1` (its number of
incidences), then back, each vertex's sum scaled by `D^-1` (the sum of its
incidences' hyperedge weights; PyG's weights enter nowhere else). Both
passes are kernels on the bipartite incidence graph, `hyperedge_index` as
an edge_index from vertices (`[V]` sources) to hyperedges (`[M]`
destinations) and the same flipped, with the normalisations fused:

    kernel hypergraph_conv_mean(x: f32[V, F]) -> f32[V, F] {
        out[v] = mean(x[u])
    }
    kernel hypergraph_conv_weighted(x: f32[V, F], w: f32[V]) -> f32[V, F] {
        d[v] = sum(w[u])
        z[v] = step(abs(d[v]))
        r[v] = z[v] / (d[v] + 1 - z[v])
        out[v] = sum(r[v] * x[u])
    }

(`B^-1 sum` is the mean over the incidences, 0 for none, as PyG's with its
infinities masked; so is `D^-1 sum` without hyperedge weights. With them,
`r` is 1/d, and 0 where d is 0; it scales the terms inside the sum, so
that the gradient of `w` reads no [V, F] sum kept from the forward.) With attention, the
incidence `(i, e)` is scored `leaky_relu(a[i] + b[e])` (`a = <lin(x),
att[:C]>`, `b = <lin(hyperedge_attr), att[C:]>` per vertex and per
hyperedge, torch), normalised over the vertices of each hyperedge
("node") or the hyperedges of each vertex ("edge"), dropout applied as
PyG's, and the same weight scales both passes. In "node" mode the softmax
groups are the first pass's destinations, so that pass computes it and
returns the weights beside its result:

    kernel hypergraph_conv_node(x: f32[V, H, F], a: f32[V, H], b: f32[V, H]) -> (out: f32[V, H, F], alpha: f32[E, H]) {
        s[e] = leaky_relu(a[u] + b[v], 0.2)
        alpha[e] = softmax(s[e])
        out[v] = mean(alpha[e] * x[u])
    }

and the second pass reads them (`mean(alpha[e] * y[u])`, or the weighted
form). In "edge" mode the groups are the second pass's destinations, but
the first pass needs the weights already: a third kernel on the flipped
graph, `out[e] = softmax(leaky_relu(a[v] + b[u], SLOPE))`, makes them
first. The flipped edge_index is made once per hyperedge_index tensor, so
each pass's graph is built once. The number of hyperedges is the largest
id plus one unless `num_edges` is given (a value of the data: under
torch.compile pass `num_edges`, as PyG requires).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import attention, inputs
from gnnc.nn.conv.gat_conv import scores
from gnnc.nn.derived import flipped_edges
from gnnc.nn.init import glorot, zeros
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "HypergraphConv"
MODES = ("node", "edge")


def pass_source(heads: bool, alpha: bool, weighted: bool) -> tuple[str, str]:
    """(kernel text, name) of a pass that scales by the mean (`weighted`: by 1 / sum(w[u]))
    over the incidences, weighted by `alpha[e]` or not; `heads`: rows of [H, F]."""
    name = "hypergraph_conv" + ("_alpha" if alpha else "") + ("_weighted" if weighted else "_mean")
    row = "f32[V, H, F]" if heads else "f32[V, F]"
    params = [f"x: {row}"] + (["alpha: f32[E, H]"] if alpha else []) + (["w: f32[V]"] if weighted else [])
    message = "alpha[e] * x[u]" if alpha else "x[u]"
    if weighted:
        # the scale inside the sum: scaling the sum after it, the generated gradient of w reads
        # that sum at the sources, which a bipartite graph refuses for rows of [H, F]
        body = (
            "    d[v] = sum(w[u])\n    z[v] = step(abs(d[v]))\n    r[v] = z[v] / (d[v] + 1 - z[v])\n"
            f"    out[v] = sum(r[v] * {message})\n"
        )
    else:
        body = f"    out[v] = mean({message})\n"
    return f"kernel {name}({', '.join(params)}) -> {row} {{\n{body}}}\n", name


def node_source(slope: str, mask: bool) -> tuple[str, str]:
    """(kernel text, name) of the first pass with "node" attention: the softmax over each
    hyperedge's incidences, the weights returned for the second pass."""
    name = "hypergraph_conv_node" + ("_mask" if mask else "")
    params = "x: f32[V, H, F], a: f32[V, H], b: f32[V, H]" + (", mask: f32[E, H]" if mask else "")
    masked = " * mask[e]" if mask else ""
    return (
        f"kernel {name}({params}) -> (out: f32[V, H, F], alpha: f32[E, H]) {{\n"
        f"    s[e] = leaky_relu(a[u] + b[v], {slope})\n"
        f"    alpha[e] = softmax(s[e]){masked}\n"
        "    out[v] = mean(alpha[e] * x[u])\n}\n",
        name,
    )


def edge_source(slope: str, mask: bool) -> tuple[str, str]:
    """(kernel text, name) of the "edge" attention weights, on the flipped incidence graph (the
    softmax over each vertex's incidences)."""
    name = "hypergraph_conv_edge" + ("_mask" if mask else "")
    params = "a: f32[V, H], b: f32[V, H]" + (", mask: f32[E, H]" if mask else "")
    masked = " * mask[e]" if mask else ""
    return (
        f"kernel {name}({params}) -> f32[E, H] {{\n    out[e] = softmax(leaky_relu(a[v] + b[u], {slope})){masked}\n}}\n",
        name,
    )


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"{LAYER}: {what} must be a positive integer, got {value!r}")
    return value


class HypergraphConv(WarmUp, nn.Module):
    """PyG's `HypergraphConv(in_channels, out_channels, use_attention=False, attention_mode="node",
    heads=1, concat=True, negative_slope=0.2, dropout=0, bias=True, **kwargs)`.

    `forward(x, hyperedge_index, hyperedge_weight=None, hyperedge_attr=None,
    num_edges=None)`; `hyperedge_index` is a `[2, K]` tensor of (vertex,
    hyperedge) incidences. Parameters as PyG's: `lin.weight`, `att`
    (`[1, heads, 2 * out_channels]`, with attention), `bias`;
    `in_channels=-1` sizes `lin` by the first input. Without attention PyG
    takes `heads` and `concat` for the bias's size only.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        use_attention: bool = False,
        attention_mode: str = "node",
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        # PyG passes flow and node_dim to MessagePassing itself: either again is a TypeError there
        for fixed in ("flow", "node_dim"):
            if fixed in kwargs:
                raise ArgumentError(f"{LAYER} got an unexpected keyword argument {fixed!r} (PyG fixes it)")
        check_options(LAYER, kwargs, node_dim=False)
        if isinstance(in_channels, bool) or not isinstance(in_channels, int) or (in_channels < 1 and in_channels != -1):
            raise ArgumentError(f"{LAYER}: in_channels must be a positive integer or -1 (lazy), got {in_channels!r}")
        _positive(out_channels, "out_channels")
        _positive(heads, "heads")
        if attention_mode not in MODES:
            raise ArgumentError(f"{LAYER}: attention_mode must be 'node' or 'edge', got {attention_mode!r}")
        if not use_attention and bias and concat and heads != 1:
            raise ArgumentError(
                f"{LAYER}: heads={heads} without use_attention: PyG's bias then has heads * out_channels entries "
                "for an output of out_channels (its forward fails); pass heads=1, concat=False or use_attention=True"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.use_attention, self.attention_mode = use_attention, attention_mode
        self.att: nn.Parameter | None = None
        if use_attention:
            self.heads, self.concat, self.negative_slope = heads, concat, negative_slope
            self.dropout = attention.check_dropout(dropout, LAYER)
            self._slope = attention.slope(negative_slope)
            self.lin = Linear(in_channels, heads * out_channels, bias=False, weight_initializer="glorot")
            self.att = nn.Parameter(torch.empty(1, heads, 2 * out_channels))
        else:
            self.heads, self.concat = 1, True
            self.lin = Linear(in_channels, out_channels, bias=False, weight_initializer="glorot")
        # PyG sizes the bias by the arguments, not by what it set (see the check above)
        self.bias = nn.Parameter(torch.empty(heads * out_channels if concat else out_channels)) if bias else None
        # every kernel a call may need, made now: torch.compile cannot trace making one
        self._passes = {w: kernel(*pass_source(use_attention, use_attention, w)) for w in (False, True)}
        self._attention = {}
        if use_attention:
            made = node_source if attention_mode == "node" else edge_source
            masks = (False, True) if self.dropout > 0.0 else (False,)
            self._attention = {m: kernel(*made(self._slope, m)) for m in masks}
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()
        glorot(self.att)
        zeros(self.bias)

    def forward(
        self,
        x: torch.Tensor,
        hyperedge_index: torch.Tensor,
        hyperedge_weight: torch.Tensor | None = None,
        hyperedge_attr: torch.Tensor | None = None,
        num_edges: int | None = None,
    ) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise ArgumentError(f"{LAYER}: x must be one tensor of vertex features")
        x = inputs.check_features(x, LAYER)
        incidences = _checked_incidences(hyperedge_index)
        num_nodes = x.shape[0]
        if num_edges is None:
            num_edges = int(incidences[1].max()) + 1 if incidences.numel() else 0
        elif isinstance(num_edges, bool) or not isinstance(num_edges, (int, torch.SymInt)) or num_edges < 0:
            raise ArgumentError(f"{LAYER}: num_edges must be a non-negative integer, got {num_edges!r}")
        weight = None
        if hyperedge_weight is not None:
            weight = _rows(hyperedge_weight, num_edges, "hyperedge_weight", 1).to(x.dtype)
        h = self.lin(x)
        back = flipped_edges(incidences)
        forward_size, back_size = (num_nodes, num_edges), (num_edges, num_nodes)
        if self.att is None:
            y = self._passes[False](incidences, h, size=forward_size)
            extra = [] if weight is None else [weight]
            return self._finish(self._passes[weight is not None](back, y, *extra, size=back_size))
        if hyperedge_attr is None:
            raise ArgumentError(f"{LAYER}: use_attention needs hyperedge_attr (the hyperedges' features)")
        H, C = self.heads, self.out_channels
        attr = _rows(hyperedge_attr, num_edges, "hyperedge_attr", 2)
        h = h.view(-1, H, C)
        a = scores(self.lin, x, self.att[..., :C], h)
        b = scores(self.lin, attr.to(x.dtype), self.att[..., C:])
        args = [a, b]
        drop = self.training and self.dropout > 0.0
        if drop:
            args.append(F.dropout(h.new_ones(incidences.shape[1], H), p=self.dropout, training=True))
        if self.attention_mode == "node":
            y, alpha = self._attention[drop](incidences, h, *args, size=forward_size)
        else:
            alpha = self._attention[drop](back, *args, size=back_size)
            y = self._passes[False](incidences, h, alpha, size=forward_size)
        extra = [alpha] + ([] if weight is None else [weight])
        return self._finish(self._passes[weight is not None](back, y, *extra, size=back_size))

    def _finish(self, out: torch.Tensor) -> torch.Tensor:
        if self.att is not None:
            out = out.reshape(-1, self.heads * self.out_channels) if self.concat else out.mean(dim=1)
        if self.bias is not None:
            out = out + self.bias
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


def _checked_incidences(hyperedge_index: Any) -> torch.Tensor:
    """`hyperedge_index` as a [2, K] integer tensor, or a clear error."""
    if not isinstance(hyperedge_index, torch.Tensor) or hyperedge_index.layout != torch.strided:
        raise ArgumentError(
            f"{LAYER}: hyperedge_index must be a [2, K] tensor of (vertex, hyperedge) ids, got "
            f"{type(hyperedge_index).__name__}"
        )
    if hyperedge_index.dim() != 2 or hyperedge_index.shape[0] != 2:
        raise ArgumentError(f"{LAYER}: hyperedge_index must have shape [2, K], got {tuple(hyperedge_index.shape)}")
    if hyperedge_index.dtype not in (torch.int64, torch.int32):
        raise ArgumentError(f"{LAYER}: hyperedge_index must hold int64 (or int32) ids, got {hyperedge_index.dtype}")
    return hyperedge_index


def _rows(t: Any, num_edges: Any, what: str, dim: int) -> torch.Tensor:
    """A per-hyperedge tensor's first num_edges rows (PyG indexes it by hyperedge id: more rows
    are allowed), or a clear error."""
    if not isinstance(t, torch.Tensor) or t.dim() != dim:
        shape = "[M]" if dim == 1 else "[M, in_channels]"
        got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ArgumentError(f"{LAYER}: {what} must be a {shape} tensor, one row per hyperedge, got {got}")
    if t.shape[0] < num_edges:
        raise ArgumentError(f"{LAYER}: {what} has {t.shape[0]} rows for {num_edges} hyperedges")
    t = inputs.check_features(t.view(-1, 1) if dim == 1 else t, LAYER, what)
    return t[:num_edges] if dim == 2 else t[:num_edges, 0]


__all__ = ["HypergraphConv", "edge_source", "node_source", "pass_source"]
