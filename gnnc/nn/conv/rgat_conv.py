"""`RGATConv`: PyG's relational graph attention (Busbridge et al.); scores, softmax and sum one gnnc kernel.

With one head and dim 1 (PyG's defaults), additive self-attention across
relations:

    kernel rgat_conv(xs: f32[V, K], xd: f32[V, K], Wv: f32[R, K, M], wq: f32[R, K], wk: f32[R, K])
            -> f32[V, M] {
        s[e] = leaky_relu(dot(xd[v], wq[rel(e)]) + dot(xs[u], wk[rel(e)]), 0.2)
        alpha[e] = softmax(s[e])
        out[v] = sum(alpha[e] * (xs[u] @ Wv[rel(e)]))
    }

PyG computes outi = x_i @ W[r], outj = x_j @ W[r] per edge and the scores
outi @ q, outj @ k; the kernel folds q and k into the relation weights
(`Wq = W @ q`, `Wk = W @ k`, formed in torch: R x K x HC x HD multiply-adds)
so every transform is `x @ W[rel(e)]`, computed once per (vertex, relation)
pair where that pays. With H heads and dim D the scores have A = H x D
columns and the messages M = H x D x C: the softmax's [A] weights are
spread over the message columns by a constant 0/1 matrix `J` ([A, M],
`alpha @ J`), and for D > 1 W is widened to M columns (each head's C
columns repeated D times). Multiplicative self-attention multiplies the two
scores; `edge_dim` adds (or multiplies) `lin_edge(edge_attr) @ e`, computed
by torch per edge. `mod`: "f-additive" adds `step(alpha)`, "f-scaled"
multiplies by the destination's in-degree, "additive" adds `w` (per
message column) to the weights, "scaled" multiplies the result by torch's
function of the in-degree. Attention dropout (training, `mod=None`)
multiplies the weights by a mask drawn as PyG draws it.

"within-relation" attention normalises each (destination, relation) pair's
in-edges apart: the same kernel runs on the graph whose destinations are
those pairs (`relations.pair_graph`), and torch adds each pair's row into its
destination. A basis decomposition forms W from the bases before the call;
block-diagonal weights are expanded to their dense matrices in torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import attention, inputs, relations
from gnnc.nn.init import glorot, zeros
from gnnc.nn.kernels import kernel, literal
from gnnc.nn.linear import Linear
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp
from gnnc.torch.kernels import Kernel

LAYER = "RGATConv"
MECHANISMS = ("within-relation", "across-relation")
MODES = ("additive-self-attention", "multiplicative-self-attention")
MODS = (None, "additive", "scaled", "f-additive", "f-scaled")


@dataclass(frozen=True)
class Variant:
    """One kernel of the layer: its fixed configuration and a call's options."""

    multiplicative: bool
    #: score columns, H x D (1: scalar scores, vector relation weights)
    scores: int
    mod: str | None
    slope: float
    edge: bool
    mask: bool
    weights: bool

    def source(self) -> tuple[str, str]:
        one = self.scores == 1
        name = "rgat_conv_{}{}{}{}{}{}".format(
            "mul" if self.multiplicative else "add",
            "_1" if one else "",
            f"_{self.mod.replace('-', '_')}" if self.mod else "",
            "_edge" if self.edge else "",
            "_mask" if self.mask else "",
            "_alpha" if self.weights else "",
        )
        params = ["xs: f32[V, K]", "xd: f32[V, K]", "Wv: f32[R, K, M]"]
        if one:
            params += ["wq: f32[R, K]", "wk: f32[R, K]"]
            q, k = "dot(xd[v], wq[rel(e)])", "dot(xs[u], wk[rel(e)])"
        else:
            params += ["Wq: f32[R, K, A]", "Wk: f32[R, K, A]", "J: f32[A, M]"]
            q, k = "(xd[v] @ Wq[rel(e)])", "(xs[u] @ Wk[rel(e)])"
        per_edge = "f32[E]" if one else "f32[E, A]"
        if self.multiplicative:
            score = f"{q} * {k}" + (" * ae[e]" if self.edge else "")
        else:
            score = f"leaky_relu({q} + {k}" + (" + ae[e]" if self.edge else "") + f", {literal(self.slope)})"
        if self.edge:
            params.append(f"ae: {per_edge}")
        a = "alpha[e]"
        if self.mask:
            params.append(f"mask: {per_edge}")
            a = f"{a} * mask[e]"
        if self.mod == "f-additive":
            a = f"({a} + step({a}))"
        elif self.mod == "f-scaled":
            params.append("dg: f32[V]")
            a = f"{a} * dg[v]"
        if not one:
            a = f"(({a}) @ J)"
        if self.mod == "additive":
            params.append("wt: f32[M]")
            a = f"({a} + wt)"
        results = f"(out: f32[V, M], alpha: {per_edge})" if self.weights else "f32[V, M]"
        body = [f"s[e] = {score}", "alpha[e] = softmax(s[e])"]
        body.append(f"out[v] = sum({a} * (xs[u] @ Wv[rel(e)]))")
        text = f"kernel {name}({', '.join(params)}) -> {results} {{\n" + "".join(f"    {b}\n" for b in body) + "}\n"
        return text, name


class RGATConv(WarmUp, nn.Module):
    """PyG's `RGATConv(in_channels, out_channels, num_relations, num_bases=None, num_blocks=None, mod=None,
    attention_mechanism="across-relation", attention_mode="additive-self-attention", heads=1, dim=1,
    concat=True, negative_slope=0.2, dropout=0.0, edge_dim=None, bias=True, **kwargs)`.

    `forward(x, edge_index, edge_type=None, edge_attr=None, size=None, return_attention_weights=None)`:
    x a `[N, in_channels]` tensor or a pair `(x_src, x_dst)`; edge_type one relation per edge
    (None with a SparseTensor, whose values are the types). Every mode, mechanism and `mod` of
    PyG's layer is supported; node index tensors as x are not (PyG's layer cannot multiply them).
    Parameters as PyG's: `weight` (or `basis` and `att`), `q`, `k`, `e` and `lin_edge` with edge_dim,
    `bias`, `w`, `l1`, `b1`, `l2`, `b2`.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        num_relations: int,
        num_bases: int | None = None,
        num_blocks: int | None = None,
        mod: str | None = None,
        attention_mechanism: str = "across-relation",
        attention_mode: str = "additive-self-attention",
        heads: int = 1,
        dim: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        edge_dim: int | None = None,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        check_options(LAYER, kwargs, node_dim=False)
        for what, value in (
            ("in_channels", in_channels),
            ("out_channels", out_channels),
            ("heads", heads),
            ("dim", dim),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArgumentError(f"{LAYER}: {what} must be a positive integer, got {value!r}")
        if attention_mechanism not in MECHANISMS:
            raise ArgumentError(f'{LAYER}: attention mechanism must either be "within-relation" or "across-relation"')
        if attention_mode not in MODES:
            raise ArgumentError(
                f'{LAYER}: attention mode must either be "additive-self-attention" or "multiplicative-self-attention"'
            )
        if attention_mode == "additive-self-attention" and dim > 1:
            raise ArgumentError(
                f'{LAYER}: "additive-self-attention" mode cannot be applied when value of d is greater than 1. '
                'Use "multiplicative-self-attention" instead.'
            )
        if mod not in MODS:
            raise ArgumentError(f"{LAYER}: mod must be one of {MODS}, got {mod!r}")
        self.dropout = attention.check_dropout(dropout, LAYER)
        if self.dropout > 0.0 and mod is not None:
            raise ArgumentError(
                f"{LAYER}: mod must be None with dropout value greater than 0 in order to sample attention "
                "coefficients stochastically"
            )
        relations.check_decomposition(num_bases, num_blocks, LAYER)
        if edge_dim is not None and (isinstance(edge_dim, bool) or not isinstance(edge_dim, int) or edge_dim < 1):
            raise ArgumentError(f"{LAYER}: edge_dim must be a positive integer or None, got {edge_dim!r}")
        if num_blocks is not None and (in_channels % num_blocks or (heads * out_channels) % num_blocks):
            raise ArgumentError(
                f"{LAYER}: both 'in_channels' and 'heads * out_channels' must be multiple of 'num_blocks' used"
            )
        self.in_channels, self.out_channels, self.heads, self.dim = in_channels, out_channels, heads, dim
        self.num_relations = relations.check_relations(num_relations, LAYER)
        self.num_bases, self.num_blocks, self.mod = num_bases, num_blocks, mod
        self.attention_mechanism, self.attention_mode = attention_mechanism, attention_mode
        self.concat, self.negative_slope, self.edge_dim = concat, float(negative_slope), edge_dim
        hc, hd = heads * out_channels, heads * dim
        self.q = nn.Parameter(torch.empty(hc, hd))
        self.k = nn.Parameter(torch.empty(hc, hd))
        self.bias: nn.Parameter | None = None
        if bias:
            self.bias = nn.Parameter(torch.empty(hd * out_channels if concat else dim * out_channels))
        self.lin_edge: Linear | None = None
        self.e: nn.Parameter | None = None
        if edge_dim is not None:
            self.lin_edge = Linear(edge_dim, hc, bias=False, weight_initializer="glorot")
            self.e = nn.Parameter(torch.empty(hc, hd))
        if num_bases is not None:
            self.att = nn.Parameter(torch.empty(num_relations, num_bases))
            self.basis = nn.Parameter(torch.empty(num_bases, in_channels, hc))
        elif num_blocks is not None:
            self.weight = nn.Parameter(
                torch.empty(num_relations, num_blocks, in_channels // num_blocks, hc // num_blocks)
            )
        else:
            self.weight = nn.Parameter(torch.empty(num_relations, in_channels, hc))
        self.w = nn.Parameter(torch.ones(out_channels))
        self.l1 = nn.Parameter(torch.empty(1, out_channels))
        self.b1 = nn.Parameter(torch.empty(1, out_channels))
        self.l2 = nn.Parameter(torch.empty(out_channels, out_channels))
        self.b2 = nn.Parameter(torch.empty(1, out_channels))
        self._kernels: dict[Variant, Kernel] = {}
        for variant in self._variants():
            self._kernels[variant] = kernel(*variant.source())
        self.reset_parameters()

    def _variant(self, edge: bool, mask: bool, weights: bool) -> Variant:
        multiplicative = self.attention_mode == "multiplicative-self-attention"
        return Variant(multiplicative, self.heads * self.dim, self.mod, self.negative_slope, edge, mask, weights)

    def _variants(self) -> list[Variant]:
        """The kernels a call may need, made up front (so torch.compile traces no construction)."""
        return [
            self._variant(edge, mask, weights)
            for edge in ((False, True) if self.edge_dim is not None else (False,))
            for mask in ((False, True) if self.dropout > 0 else (False,))
            for weights in (False, True)
        ]

    def reset_parameters(self) -> None:
        """PyG's initialisation, draw for draw (PyG leaves `l2` uninitialised; gnnc sets it to
        1 / out_channels, the value PyG's code computes and drops)."""
        if self.num_bases is not None:
            glorot(self.basis)
            glorot(self.att)
        else:
            glorot(self.weight)
        glorot(self.q)
        glorot(self.k)
        zeros(self.bias)
        with torch.no_grad():
            self.l1.fill_(1.0)
            self.l2.fill_(1.0 / self.out_channels)
        zeros(self.b1)
        zeros(self.b2)
        if self.lin_edge is not None:
            glorot(self.lin_edge.weight)
            glorot(self.e)

    def relation_weights(self) -> torch.Tensor:
        """W: `[R, in, heads * out]`, formed from the bases, or the blocks' dense matrices."""
        r, hc = self.num_relations, self.heads * self.out_channels
        if self.num_bases is not None:
            return (self.att @ self.basis.view(self.num_bases, -1)).view(r, self.in_channels, hc)
        if self.num_blocks is not None:
            b = self.num_blocks
            eye = torch.eye(b, dtype=self.weight.dtype, device=self.weight.device)
            return torch.einsum("rbkn,bc->rbkcn", self.weight, eye).reshape(r, self.in_channels, hc)
        return self.weight

    def forward(
        self,
        x: Any,
        edge_index: Any,
        edge_type: torch.Tensor | None = None,
        edge_attr: torch.Tensor | None = None,
        size: Any = None,
        return_attention_weights: Any = None,
    ) -> Any:
        edges = relations.typed_edges(edge_index, edge_type, self.num_relations, LAYER)
        adj = edges.adj
        if isinstance(x, torch.Tensor) and not x.is_floating_point():
            raise ArgumentError(f"{LAYER}: x must hold float features (PyG's layer cannot take node indices)")
        if isinstance(x, torch.Tensor) and not adj.block:
            # one x: PyG reads x_j = x[src] and x_i = x[dst], so the destinations are its leading rows
            x_src, _ = inputs.pair(x, LAYER)
            num_src, num_dst = inputs.sizes(adj, x_src, None, size, bipartite=False)
            x_dst = x_src[:num_dst]
        else:
            x_src, given_dst = inputs.pair(inputs.on_block(x, adj), LAYER)
            if given_dst is None:
                raise ArgumentError(f"{LAYER}: x[1] (the destinations' features) must be a tensor")
            x_dst = given_dst
            num_src, num_dst = inputs.sizes(adj, x_src, x_dst, size, bipartite=True)
        for what, t in (("x", x_src), ("x_dst", x_dst)):
            if t.dim() != 2 or t.shape[-1] != self.in_channels:
                raise ArgumentError(f"{LAYER}: {what} must be [num_nodes, {self.in_channels}], got {tuple(t.shape)}")
        if x_dst.shape[0] != num_dst:
            raise ArgumentError(f"{LAYER}: x has {x_dst.shape[0]} rows for the graph's {num_dst} destinations")
        dtype = x_src.dtype
        args, variant = self._inputs(edges, x_src, x_dst, edge_attr, num_dst, return_attention_weights)
        within = self.attention_mechanism == "within-relation"
        call: dict[str, Any] = {"edge_type": edges.edge_type, "num_relations": self.num_relations}
        if within:
            pairs = relations.pair_graph(edges, self.num_relations)
            args[1] = x_dst[pairs.vertex]
            if self.mod == "f-scaled":
                args[-1] = args[-1][pairs.vertex]
            result = self._kernels[variant](pairs.edge_index, *args, size=(num_src, pairs.num_pairs), **call)
        else:
            result = self._kernels[variant](edges.edge_index, *args, size=(num_src, num_dst), **call)
        out, alpha = (result.out, result.alpha) if variant.weights else (result, None)
        if within:
            out = out.new_zeros(num_dst, out.shape[1]).index_add(0, pairs.vertex, out)
        out = self._update(out, edges, num_dst, dtype)
        if variant.weights:
            assert alpha is not None
            alpha = alpha.view(-1, 1) if alpha.dim() == 1 else alpha
            if adj.sparse_tensor:
                return out, adj.given.set_value(alpha, layout="coo")
            return out, (adj.edge_index, alpha)
        return out

    def _inputs(
        self,
        edges: relations.TypedEdges,
        x_src: torch.Tensor,
        x_dst: torch.Tensor,
        edge_attr: torch.Tensor | None,
        num_dst: int,
        return_attention_weights: Any,
    ) -> tuple[list[Any], Variant]:
        """The kernel's inputs (xs, xd, Wv, the score weights, ...) and its variant."""
        dtype = x_src.dtype
        h, c, d = self.heads, self.out_channels, self.dim
        weight = self.relation_weights().to(dtype)
        wq, wk = weight @ self.q.to(dtype), weight @ self.k.to(dtype)
        if d > 1:  # each head's C columns repeated for its D scores: M = H x D x C
            r, k = weight.shape[0], weight.shape[1]
            weight = weight.view(r, k, h, 1, c).expand(r, k, h, d, c).reshape(r, k, h * d * c)
        args: list[Any] = [x_src, x_dst, weight]
        scores = h * d
        if scores == 1:
            args += [wq.squeeze(-1), wk.squeeze(-1)]
        else:
            spread = torch.eye(scores, dtype=dtype, device=x_src.device).repeat_interleave(c, dim=1)
            args += [wq, wk, spread]
        num_edges = edges.edge_index.shape[1]
        edge = edge_attr is not None
        if edge_attr is not None:
            if self.lin_edge is None or self.e is None:
                raise ArgumentError(f"{LAYER}: edge_attr needs edge_dim: set 'edge_dim = edge_attr.size(-1)'")
            ea = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
            if ea.shape[0] != num_edges:
                raise ArgumentError(f"{LAYER}: edge_attr has {ea.shape[0]} rows, the graph {num_edges} edges")
            ae = (self.lin_edge(ea.to(self.lin_edge.weight.dtype)) @ self.e).to(dtype)
            args.append(ae.view(-1) if scores == 1 else ae)
        mask = self.training and self.dropout > 0
        if mask:
            drawn = F.dropout(x_src.new_ones(num_edges, scores), p=self.dropout, training=True)
            args.append(drawn.view(-1) if scores == 1 else drawn)
        if self.mod == "f-scaled":
            args.append(self._in_degrees(edges, num_dst, dtype))
        if self.mod == "additive":
            args.append(self.w.to(dtype).repeat(scores))
        weights = isinstance(return_attention_weights, bool)
        return args, self._variant(edge, mask, weights)

    @staticmethod
    def _in_degrees(edges: relations.TypedEdges, num_dst: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.bincount(edges.edge_index[1], minlength=num_dst).to(dtype)

    def _update(self, out: torch.Tensor, edges: relations.TypedEdges, num_dst: int, dtype: torch.dtype) -> Any:
        """PyG's `scaled` factor, the heads concatenated or averaged, the bias."""
        h, c, d = self.heads, self.out_channels, self.dim
        if self.mod == "scaled":
            degree = self._in_degrees(edges, num_dst, dtype).view(-1, 1)
            factor = F.relu(degree @ self.l1.to(dtype) + self.b1.to(dtype)) @ self.l2.to(dtype) + self.b2.to(dtype)
            out = (out.view(-1, h * d, c) * factor.view(-1, 1, c)).reshape(-1, h * d * c)
        if not self.concat:
            out = out.view(-1, h, d * c).mean(dim=1)
        if self.bias is not None:  # into the kernel's fresh result (or a product of it): nothing saved reads it
            out = out.add_(self.bias)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


__all__ = ["RGATConv", "Variant"]
