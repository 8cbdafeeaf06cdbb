"""`FiLMConv`: PyG's feature-wise linear modulation layer (Brockschmidt, GNN-FiLM); one gnnc kernel.

A message is `act(gamma_v * (W_r x_u) + beta_v)`, with `(beta, gamma) =
film_r(x_v)` split by columns, aggregated per relation r (mean by default)
and summed over the relations; the skip term `act(gamma * lin_skip(x_v) +
beta)` with `(beta, gamma) = film_skip(x_v)` is torch's. The activation is
compiled into the kernel (relu, leaky_relu, sigmoid, tanh, elu, silu, or none).
With one relation (PyG then reads no edge types), `h = lins[0](x_src)` and
`b, g = films[0](x_dst)` in torch:

    kernel film_conv_mean_relu(h: f32[V, F], b: f32[V, F], g: f32[V, F]) -> f32[V, F] {
        out[v] = mean(relu(g[v] * h[u] + b[v]))
    }

With several relations the same kernel runs on a graph of (vertex, relation)
pairs: an edge u -> v of type r becomes (u, r) -> (v, r), ids `u * R + r` and
`v * R + r` (fixed sizes, no data-dependent count). Every relation's `lins`
and `films` are dense products in torch on all rows, as PyG's are, viewed as
`[V * R, F]`; the kernel's aggregation at (v, r) is per relation (PyG's mean,
max or min per relation), and the relations' results are summed in torch.
So the kernel is elementwise per edge and every weight's gradient is a dense
product, not a sum of outer products per edge. The pair graph's edge_index is made once per
(edge_index, edge_type), under torch.compile by a custom op that reads that
cache (`derived.relation_pair_edges`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import derived, inputs, relations
from gnnc.nn.conv.aggregate import aggregation
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.init import reset
from gnnc.nn.kernels import kernel, literal
from gnnc.nn.linear import Linear, linears
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "FiLMConv"

#: Activations without parameters, by the torch modules and functions a user passes as `act`.
_NAMED: dict[Any, str] = {
    nn.ReLU: "relu",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.SiLU: "silu",
    nn.Identity: "identity",
    torch.relu: "relu",
    torch.sigmoid: "sigmoid",
    torch.tanh: "tanh",
    F.relu: "relu",
    F.sigmoid: "sigmoid",
    F.tanh: "tanh",
    F.silu: "silu",
    F.leaky_relu: "leaky_relu",  # torch's default slope
    F.elu: "elu",  # torch's default alpha
}


def activation(act: Any) -> tuple[str, Callable[[str], str]]:
    """(a name for kernel names, the expression of `act` applied to a term), or a clear error
    for an activation the kernel cannot compute exactly."""
    name = _NAMED.get(type(act)) if isinstance(act, nn.Module) else _NAMED.get(act) if act is not None else "identity"
    if isinstance(act, nn.LeakyReLU):
        name, slope = "leaky_relu", act.negative_slope
    elif isinstance(act, nn.ELU):
        name, slope = "elu", act.alpha
    else:
        slope = 0.01 if name == "leaky_relu" else 1.0
    if name is None or not math.isfinite(float(slope)):
        raise ArgumentError(
            f"{LAYER}: act must be None, relu (PyG's default), leaky_relu, sigmoid, tanh, elu, silu or "
            "identity, as a torch.nn module (nn.ReLU(), nn.LeakyReLU(0.2), ...) or function (torch.relu, "
            f"F.elu, ...): the activation is compiled into the kernel; got {act!r}"
        )
    s = literal(slope)
    forms: dict[str, Callable[[str], str]] = {
        "identity": lambda t: t,
        "relu": lambda t: f"relu({t})",
        "sigmoid": lambda t: f"sigmoid({t})",
        "tanh": lambda t: f"tanh({t})",
        "silu": lambda t: f"({t}) * sigmoid({t})",
        "leaky_relu": lambda t: f"leaky_relu({t}, {s})",
        "elu": lambda t: f"relu({t}) + {s} * (exp(min({t}, 0)) - 1)",
    }
    # a slope or alpha other than the default is part of the source: the kernel's name keeps its kind
    return name, forms[name]


def plain_source(aggr: str, act: str, apply: Callable[[str], str]) -> tuple[str, str]:
    """(kernel text, name) for one relation: messages from `h`, modulation `b`, `g` per destination."""
    name = f"film_conv_{aggr}_{act}"
    body = f"{aggr}({apply('g[v] * h[u] + b[v]')})"
    return f"kernel {name}(h: f32[V, F], b: f32[V, F], g: f32[V, F]) -> f32[V, F] {{\n    out[v] = {body}\n}}\n", name


class FiLMConv(WarmUp, nn.Module):
    """PyG's `FiLMConv(in_channels, out_channels, num_relations=1, nn=None, act=ReLU(), aggr="mean", **kwargs)`.

    `forward(x, edge_index, edge_type=None)`; x may be a pair `(x_src, x_dst)`;
    edge_type is read with num_relations > 1 only (as PyG; a SparseTensor's
    values are the types). Parameters `lins`, `films` (one per relation),
    `lin_skip`, `film_skip`, PyG's; `in_channels=-1` sizes them by the first
    input. aggr: "mean", "add"/"sum", "max", "min".
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        num_relations: int = 1,
        nn: torch.nn.Module | None = None,
        act: Callable | None = torch.nn.ReLU(),  # noqa: B008 (PyG's default, one shared module)
        aggr: str = "mean",
        **kwargs: Any,
    ):
        super().__init__()
        check_options(LAYER, kwargs, aggr=None)
        self.in_channels, self.out_channels = in_channels, check_out_channels(LAYER, out_channels)
        self.num_relations = relations.check_relations(num_relations, LAYER)
        self.act: Any = act
        self.aggr = aggr
        self._aggr = aggregation(aggr, LAYER)
        act_name, apply = activation(act)
        src, dst = inputs.channels(in_channels, LAYER)
        self.lins = torch.nn.ModuleList()
        self.films = torch.nn.ModuleList()
        for _ in range(num_relations):
            self.lins.append(Linear(src, out_channels, bias=False))
            self.films.append(Linear(dst, 2 * out_channels) if nn is None else copy.deepcopy(nn))
        self.lin_skip = Linear(dst, out_channels, bias=False)
        self.film_skip = Linear(dst, 2 * out_channels, bias=False) if nn is None else copy.deepcopy(nn)
        self._kernel = kernel(*plain_source(self._aggr, act_name, apply))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation, draw for draw."""
        for lin, film in zip(linears(self.lins), self.films):
            lin.reset_parameters()
            reset(film)
        self.lin_skip.reset_parameters()
        reset(self.film_skip)

    def _split(self, film: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(beta, gamma) = film(x), as PyG splits it; a clear error for the wrong width."""
        out = film(x)
        if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[-1] != 2 * self.out_channels:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ArgumentError(
                f"{LAYER}: nn must map x_dst to [num_dst, 2 * out_channels] = [-1, {2 * self.out_channels}], got {shape}"
            )
        beta, gamma = out.split(self.out_channels, dim=-1)
        return beta, gamma

    def forward(self, x: Any, edge_index: Any, edge_type: torch.Tensor | None = None) -> torch.Tensor:
        if self.num_relations == 1:
            adj = inputs.adjacency(edge_index)
            edges = None
        else:
            edges = relations.typed_edges(edge_index, edge_type, self.num_relations, LAYER)
            adj = edges.adj
        x = inputs.on_block(x, adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        if x_dst is None:
            raise ArgumentError(f"{LAYER}: x[1] (the destinations' features) must be a tensor: the film layers read it")
        sizes = inputs.sizes(adj, x_src, x_dst, None, bipartite=not isinstance(x, torch.Tensor))
        beta, gamma = self._split(self.film_skip, x_dst)
        out = gamma * self.lin_skip(x_dst) + beta
        if self.act is not None:
            out = self.act(out)
        if edges is None:
            b, g = self._split(self.films[0], x_dst)
            h = self.lins[0](x_src)
            return out + self._kernel(adj.index, h, b.to(h.dtype), g.to(h.dtype), size=sizes)
        return out + self._pairs_call(x_src, x_dst, edges, sizes)

    def _pairs_call(
        self, x_src: torch.Tensor, x_dst: torch.Tensor, edges: relations.TypedEdges, sizes: tuple
    ) -> torch.Tensor:
        """Every relation at once on the graph of (vertex, relation) pairs (see the module)."""
        r, f = self.num_relations, self.out_channels
        lins = linears(self.lins)
        for film, lin in zip(self.films, lins):
            # PyG's order of first calls (lazy layers): film(x[1]), then lin(x[0]), relation by relation
            if lin.lazy or (isinstance(film, Linear) and film.lazy):
                self._split(film, x_dst[:0])
                lin(x_src[:0])
        # one product for every relation's rows, [V, R * F] viewed as [V * R, F] (no stacking)
        h_pairs = x_src.matmul(torch.cat([lin.weight for lin in lins]).t()).view(-1, f)
        dtype = h_pairs.dtype
        if all(isinstance(film, Linear) and film.bias is not None for film in self.films):
            # beta's and gamma's rows of every film layer apart: two products, each [V, R * F]
            films = [cast(Linear, film) for film in self.films]
            biases = [cast(torch.Tensor, film.bias) for film in films]
            b_pairs, g_pairs = (
                torch.addmm(
                    torch.cat([b[part] for b in biases]), x_dst, torch.cat([film.weight[part] for film in films]).t()
                )
                .view(-1, f)
                .to(dtype)
                for part in (slice(0, f), slice(f, 2 * f))
            )
        else:
            modulation = torch.stack([torch.cat(self._split(film, x_dst), -1) for film in self.films], dim=1)
            b_pairs = modulation[..., :f].reshape(-1, f).to(dtype)
            g_pairs = modulation[..., f:].reshape(-1, f).to(dtype)
        pairs = derived.relation_pair_edges(edges.edge_index, edges.edge_type, r, LAYER)
        num_src, num_dst = sizes
        per_pair = self._kernel(pairs, h_pairs, b_pairs, g_pairs, size=(num_src * r, num_dst * r))
        return per_pair.view(-1, r, f).sum(dim=1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, num_relations={self.num_relations})"


__all__ = ["FiLMConv", "activation"]
