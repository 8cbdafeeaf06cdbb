"""`PointNetConv`: PyG's PointNet set layer (Qi et al.); its message passing is gnnc kernels.

PyG's message is `local_nn([x_j, pos_j - pos_i])` per edge (`pos_j - pos_i`
alone without x), aggregated by max, then `global_nn`. Where `local_nn`
begins with a Linear `W = [W_x, W_p]` (`gnnc.nn.edge_mlp.split`), the
product splits: `[x_j, pos_j - pos_i] W^T = [x_j, pos_j] W^T - pos_i W_p^T`,
so torch computes `c = [x_src, pos_src] W^T + b` and `a = -pos_dst W_p^T`
per vertex, and a bare Linear is one kernel:

    kernel edge_mlp_max(c: f32[V, H], a: f32[V, H]) -> f32[V, H] {
        out[v] = max(c[u] + a[v])
    }

Without `local_nn` the message itself is aggregated, the same kernel with
`c = [x_src, pos_src]` and `a = [0, -pos_dst]` (exact: x_j + 0, pos_j +
-pos_i). A longer `local_nn` gets the messages `c[u] + a[v]` from an edge
kernel, the rest of it in torch, then `out[v] = max(m[e])`; one that does
not begin with a Linear runs in torch on PyG's concatenation.

`add_self_loops` (PyG's default) drops the graph's self loops and appends
one per vertex below min(num_src, num_dst), as PyG; that edge_index is made
once per graph argument (kept with it, `gnnc.torch.graphs.derived`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import edge_mlp, inputs
from gnnc.nn.conv.aggregate import aggregation
from gnnc.nn.init import reset
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp
from gnnc.torch import graphs

LAYER = "PointNetConv"


def _looped(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """PyG's `remove_self_loops` then `add_self_loops(num_nodes)`: the other edges in order, then
    a loop per vertex below num_nodes."""
    edge_index = edge_index.to(torch.int64)
    loops = torch.arange(num_nodes, dtype=torch.int64, device=edge_index.device).expand(2, num_nodes)
    return torch.cat([edge_index[:, edge_index[0] != edge_index[1]], loops], dim=1)


def looped_edges(adj: inputs.Adjacency, num_nodes: int) -> torch.Tensor:
    """`_looped` of the call's edges, made once per edge_index tensor, adjacency or Graph."""
    if torch.compiler.is_compiling():
        return _looped(adj.edge_index, num_nodes)

    def make() -> torch.Tensor:
        # an ordinary tensor even when first made under inference_mode: a later training call reuses it
        with torch.inference_mode(False):
            return _looped(adj.edge_index, num_nodes)

    # a sparse adjacency's edge_index is itself made once per adjacency (`inputs.adjacency`)
    return graphs.derived(adj.index, ("nn.point_net_loops", num_nodes), make)


def _optional_features(x: Any, what: str) -> torch.Tensor | None:
    if x is None:
        return None
    if not isinstance(x, torch.Tensor):
        raise ArgumentError(f"{LAYER}: {what} must be a tensor or None, got {type(x).__name__}")
    return inputs.check_features(x, LAYER, what)


class PointLayer(WarmUp, nn.Module):
    """What PyG's point-cloud layers (PointNetConv, PPFConv) share: `local_nn`, `global_nn`,
    `add_self_loops` and PyG's `aggr` keyword ("max" by default), checked; reset as PyG's."""

    def __init__(self, layer: str, local_nn: Any, global_nn: Any, add_self_loops: bool, kwargs: dict[str, Any]):
        super().__init__()
        aggr = kwargs.pop("aggr", "max")
        self._node_dim = check_options(layer, kwargs, aggr=None)
        for what, module in (("local_nn", local_nn), ("global_nn", global_nn)):
            if module is not None and not callable(module):
                raise ArgumentError(f"{layer}: {what} must be a module (or a callable) or None, got {module!r}")
        self.local_nn = local_nn
        self.global_nn = global_nn
        self.add_self_loops = add_self_loops
        self.aggr = aggr
        #: the aggregation by the language's name
        self._aggr = aggregation(aggr, layer)

    def reset_parameters(self) -> None:
        reset(self.local_nn)
        reset(self.global_nn)


class PointNetConv(PointLayer):
    """PyG's `PointNetConv(local_nn=None, global_nn=None, add_self_loops=True, **kwargs)`:
    `global_nn(max over in-edges of local_nn([x_j, pos_j - pos_i]))`.

    `forward(x, pos, edge_index)`; x None, a tensor (the sources') or a pair,
    pos a tensor or a pair. Parameters are the modules' (`local_nn.*`,
    `global_nn.*`), reset as PyG does. aggr (PyG's MessagePassing argument,
    "max" by default): "max", "mean", "sum"/"add" or "min".
    """

    def __init__(self, local_nn: Any = None, global_nn: Any = None, add_self_loops: bool = True, **kwargs: Any):
        super().__init__(LAYER, local_nn, global_nn, add_self_loops, kwargs)
        self._kernels = edge_mlp.kernels(self._aggr)
        self.reset_parameters()

    def forward(self, x: Any, pos: Any, edge_index: Any) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        x_src, x_dst = (x[0], x[1]) if isinstance(x, (tuple, list)) and len(x) == 2 else (x, None)
        x_src, x_dst = _optional_features(x_src, "x[0]"), _optional_features(x_dst, "x[1]")
        pos = inputs.on_block(pos, adj)
        pos_src, pos_dst = inputs.pair(pos, LAYER, "pos")
        if pos_dst is None:
            raise ArgumentError(f"{LAYER}: pos[1] (the destinations' positions) must be a tensor: pos_i reads it")
        sizes = inputs.sizes(adj, pos_src, pos_dst, None, bipartite=not isinstance(pos, torch.Tensor))
        if pos_src.shape[-1] != pos_dst.shape[-1]:
            raise ArgumentError(
                f"{LAYER}: pos[0] and pos[1] must have as many coordinates (pos_j - pos_i), "
                f"got {pos_src.shape[-1]} and {pos_dst.shape[-1]}"
            )
        if x_src is not None and x_src.shape[0] != sizes[0]:
            raise ArgumentError(f"{LAYER}: x has {x_src.shape[0]} rows but the graph has {sizes[0]} sources")
        if x_dst is not None and x_dst.shape[0] != sizes[1]:
            raise ArgumentError(f"{LAYER}: x[1] has {x_dst.shape[0]} rows but the graph has {sizes[1]} destinations")
        edges: Any = adj.index
        if self.add_self_loops:
            edges = looped_edges(adj, min(int(sizes[0]), int(sizes[1])))
        out = self._propagate(edges, sizes, x_src, pos_src, pos_dst)
        return out if self.global_nn is None else self.global_nn(out)

    def _propagate(
        self, edges: Any, sizes: tuple, x_src: torch.Tensor | None, pos_src: torch.Tensor, pos_dst: torch.Tensor
    ) -> torch.Tensor:
        points = pos_src if x_src is None else torch.cat([x_src, pos_src], dim=-1)
        if self.local_nn is None:
            a = (
                -pos_dst
                if x_src is None
                else torch.cat([pos_dst.new_zeros(pos_dst.shape[0], x_src.shape[-1]), -pos_dst], -1)
            )
            return self._kernels["pair"](edges, points, a.to(points.dtype), size=sizes)
        parts = edge_mlp.split(self.local_nn)
        if parts is None:
            index = edges if isinstance(edges, torch.Tensor) else graphs.edge_index_of(edges)
            src, dst = index
            rel = pos_src.index_select(0, src) - pos_dst.index_select(0, dst)
            messages = self.local_nn(rel if x_src is None else torch.cat([x_src.index_select(0, src), rel], dim=-1))
            return self._kernels["aggregate"](edges, self._messages(messages), size=sizes)
        weight, bias = parts.weight, parts.bias
        if weight.shape[-1] != points.shape[-1]:
            raise ArgumentError(
                f"{LAYER}: local_nn's first Linear takes {weight.shape[-1]} features, the messages "
                f"[x_j, pos_j - pos_i] have {points.shape[-1]}"
            )
        c = inputs.autocast_features(F.linear(points, weight, bias))
        a = inputs.autocast_features(-F.linear(pos_dst, weight[:, points.shape[-1] - pos_dst.shape[-1] :]))
        return edge_mlp.propagate(self._kernels, edges, sizes, c, a, parts.rest, self._messages)

    def _messages(self, m: torch.Tensor) -> torch.Tensor:
        return inputs.check_features(m, LAYER, "local_nn's output")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(local_nn={self.local_nn}, global_nn={self.global_nn})"


__all__ = ["PointNetConv"]
