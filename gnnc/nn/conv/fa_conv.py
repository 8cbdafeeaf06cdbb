"""`FAConv`: PyG's frequency adaptive graph convolution (FAGCN, Bo et al.), coefficients and sum fused.

Kernel (with self loops, the default; `al = att_l(x)`, `ar = att_r(x)` by torch):

    kernel fa_conv(x: f32[V, F], al: f32[V], ar: f32[V], w: f32[E], loop: f32[V]) -> f32[V, F] {
        out[v] = tanh(al[v] + ar[v]) * loop[v] * x[v] + sum(tanh(al[u] + ar[v]) * w[e] * x[u])
    }

`w` and `loop` are the GCN-normalised edge and self-loop weights (PyG's
`gcn_norm`, made in torch once per call, or once with `cached=True`: the
first call's graph and weights, whatever the next calls pass), the loops
kept as per-vertex weights (`gnnc.nn.self_loops`); with `normalize=False`
`w` is the given weights and no loop is added. Dropout in training mode
multiplies each coefficient by a mask drawn as PyG draws it (one
`F.dropout` over PyG's edges in PyG's order: `mask[e]`, `mloop[v]`);
`return_attention_weights` makes the coefficients before dropout results
(`alpha[e]`, `alpha_loop[v]`), returned in PyG's order of its edges.
`eps * x_0` is added in torch, as PyG.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import attention, inputs, self_loops
from gnnc.nn.conv.appnp import dropout_order, gcn_weights
from gnnc.nn.conv.sg_conv import check_in_channels, square_graph
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp
from gnnc.torch.kernels import Kernel

LAYER = "FAConv"


def source(loops: bool, mask: bool, weights: bool) -> str:
    """The kernel text of a variant: self loops as per-vertex weights, a dropout mask, the
    coefficients as results."""
    params = ["x: f32[V, F]", "al: f32[V]", "ar: f32[V]", "w: f32[E]"]
    results = ["out: f32[V, F]"]
    body = []
    edge, loop = "tanh(al[u] + ar[v])", "tanh(al[v] + ar[v])"
    if weights:
        results.append("alpha: f32[E]")
        body.append(f"alpha[e] = {edge}")
        edge = "alpha[e]"
        if loops:
            results.append("alpha_loop: f32[V]")
            body.append(f"alpha_loop[v] = {loop}")
            loop = "alpha_loop[v]"
    if loops:
        params.append("loop: f32[V]")
    if mask:
        params.append("mask: f32[E]")
        edge += " * mask[e]"
        if loops:
            params.append("mloop: f32[V]")
            loop += " * mloop[v]"
    total = f"sum({edge} * w[e] * x[u])"
    body.append(f"out[v] = {loop} * loop[v] * x[v] + {total}" if loops else f"out[v] = {total}")
    result = results[0].split(": ")[1] if len(results) == 1 else "(" + ", ".join(results) + ")"
    lines = [f"kernel fa_conv({', '.join(params)}) -> {result} {{", *(f"    {b}" for b in body), "}"]
    return "\n".join(lines) + "\n"


class FAConv(WarmUp, nn.Module):
    """PyG's `FAConv(channels, eps=0.1, dropout=0.0, cached=False, add_self_loops=True, normalize=True, **kwargs)`.

    `forward(x, x_0, edge_index, edge_weight=None, return_attention_weights=None)`;
    `edge_index` may be a torch.sparse adjacency (its values are the weights)
    or a SparseTensor (without values when normalising, as PyG asserts).
    Parameters `att_l.weight`, `att_r.weight` `[1, channels]`, PyG's;
    `channels=-1` sizes them by the first input. A bool
    `return_attention_weights` (True or False, as PyG) returns
    `(out, (edge_index, alpha))` (a SparseTensor: `(out, adj_t)` with alpha
    as its values).
    """

    def __init__(
        self,
        channels: int,
        eps: float = 0.1,
        dropout: float = 0.0,
        cached: bool = False,
        add_self_loops: bool = True,
        normalize: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self._node_dim = check_options(LAYER, kwargs)
        self.channels = check_in_channels(LAYER, channels)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)):
            raise ArgumentError(f"{LAYER}: eps must be a number, got {eps!r}")
        self.eps = eps
        self.dropout = attention.check_dropout(dropout, LAYER)
        self.cached, self.add_self_loops, self.normalize = cached, add_self_loops, normalize
        # PyG keeps an edge_index's normalisation and a SparseTensor's apart (keyed by `adj.sparse_tensor`)
        self._cached: dict[bool, tuple] = {}
        self.att_l = Linear(channels, 1, bias=False)
        self.att_r = Linear(channels, 1, bias=False)
        loops = bool(normalize and add_self_loops)
        # every variant a call may need, made now: torch.compile cannot trace making one
        self._kernels: dict[tuple[bool, bool], Kernel] = {
            (mask, weights): kernel(source(loops, mask, weights), "fa_conv")
            for mask in ((False, True) if self.dropout > 0 else (False,))
            for weights in (False, True)
        }
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.att_l.reset_parameters()
        self.att_r.reset_parameters()
        self._cached = {}

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cached"] = {}  # recomputed from the next call's graph
        return state

    def _weights(
        self, adj: inputs.Adjacency, edge_weight: Any, n: int, dtype: torch.dtype
    ) -> tuple[inputs.Adjacency, torch.Tensor, torch.Tensor | None]:
        """(the graph, its edge weights, the self-loop weights or None) of a call, PyG's cache kept."""
        if not self.normalize:
            if not adj.sparse and edge_weight is None:
                raise ArgumentError(f"{LAYER}: normalize=False needs edge_weight (PyG asserts it is given)")
            if adj.sparse_tensor and adj.values is None:
                raise ArgumentError(f"{LAYER}: normalize=False needs a SparseTensor with values (PyG asserts it)")
            weight = inputs.edge_values(adj, edge_weight)
            assert weight is not None
            return adj, weight.to(dtype), None
        if edge_weight is not None:
            raise ArgumentError(
                f"{LAYER}: edge_weight is not taken with normalize=True (PyG asserts it is None: the weights "
                "are gcn_norm's); pass normalize=False with the weights to use, or a torch.sparse adjacency"
            )
        if adj.sparse_tensor and adj.values is not None:
            raise ArgumentError(f"{LAYER}: normalize=True takes a SparseTensor without values (PyG asserts it)")
        cached = self._cached.get(adj.sparse_tensor) if self.cached else None
        if cached is not None:
            return cached
        w, loop = gcn_weights(adj, None, n, bool(self.add_self_loops), dtype)
        if self.cached:
            self._cached[adj.sparse_tensor] = (adj, w.detach(), loop.detach() if self.add_self_loops else None)
        return adj, w, loop if self.add_self_loops else None

    def forward(
        self,
        x: torch.Tensor,
        x_0: torch.Tensor,
        edge_index: Any,
        edge_weight: torch.Tensor | None = None,
        return_attention_weights: bool | None = None,
    ) -> Any:
        x, adj = square_graph(LAYER, x, edge_index)
        n = x.shape[0]
        if self.eps != 0.0:  # PyG reads x_0 only then
            x_0 = self._initial(x_0, x)
        adj, w, loop = self._weights(adj, edge_weight, n, x.dtype)
        edges = adj.edge_index
        al, ar = self.att_l(x).view(-1), self.att_r(x).view(-1)
        args = [x, al, ar, w] + ([loop] if loop is not None else [])
        drop = self.training and self.dropout > 0
        if drop:
            args += self._masks(adj, loop is not None, n, x)
        weights = isinstance(return_attention_weights, bool)
        result = self._kernels[(drop, weights)](adj.index, *args, num_vertices=n)
        out = result.out if weights else result
        if self.eps != 0.0:
            out = out + self.eps * x_0
        if not weights:
            return out
        lp = attention.loops(edges, n, n, x.dtype) if loop is not None else None
        ranks = attention.pyg_ranks(edges, lp, adj.sparse, n) if lp is not None else None
        return out, attention.returned_weights(result, adj, lp, ranks, n, n)

    def _initial(self, x_0: Any, x: torch.Tensor) -> torch.Tensor:
        """x_0 checked: a tensor that broadcasts to the output's shape (x's), as PyG adds it."""
        if not isinstance(x_0, torch.Tensor):
            raise ArgumentError(f"{LAYER}: x_0 must be a tensor (the initial features, added times eps)")
        x_0 = inputs.autocast_features(x_0)
        try:
            fits = torch.broadcast_shapes(x_0.shape, x.shape) == x.shape
        except RuntimeError:
            fits = False
        if not fits:
            raise ArgumentError(
                f"{LAYER}: x_0 of shape {tuple(x_0.shape)} does not match the output's {tuple(x.shape)}"
            )
        return x_0

    def _masks(self, adj: inputs.Adjacency, loops: bool, n: int, x: torch.Tensor) -> list[torch.Tensor]:
        """[mask, mloop] (or [mask] without loops): PyG's dropout of its coefficients.

        One `F.dropout` over E + loops ones (a shape that does not depend on the data), each
        edge taking the draw at its rank in PyG's order (`appnp.dropout_order`): its first rows
        are PyG's draw. A torch.sparse adjacency's own loop and the loop added to it are one
        entry of PyG's (merged), so they share a draw.
        """
        edges = adj.edge_index
        keep = torch.ones(edges.shape[1], dtype=torch.bool, device=edges.device)
        if loops and (not adj.sparse or adj.sparse_tensor):
            keep = edges[0] != edges[1]  # dropped for the added loops (PyG's remaining loops, fill_diag)
        count = n if loops else 0
        edge_rank, loop_rank = self_loops.pyg_ranks(edges, keep, count, n, n, dropout_order(adj, loops))
        drawn = F.dropout(x.new_ones(edges.shape[1] + count), p=self.dropout)
        return [drawn[edge_rank], drawn[loop_rank]] if loops else [drawn[edge_rank]]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.channels}, eps={self.eps})"


__all__ = ["FAConv", "source"]
