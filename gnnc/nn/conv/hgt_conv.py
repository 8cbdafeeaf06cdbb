"""`HGTConv`: PyG's heterogeneous graph transformer (Hu et al.); attention and sum one gnnc kernel.

Every node type's nodes are numbered one after the other and every edge type
is a relation (its position in `metadata[1]`): one typed graph
(`gnnc.nn.hetero.homogeneous`), on which

    kernel hgt_conv(qs: f32[V, H, D], ks: f32[V, H, D], vs: f32[V, H, D],
                    Wk: f32[R, H, D, D], Wv: f32[R, H, D, D], p: f32[R, H]) -> f32[V, H, D] {
        s[e] = dot(qs[v], ks[u] @ Wk[rel(e)]) * p[rel(e)] * (1 / sqrt(D))
        out[v] = sum(softmax(s[e]) * (vs[u] @ Wv[rel(e)]))
    }

`ks[u] @ Wk[rel(e)]` is a [D, D] matrix per head and relation (PyG's
`k_rel`), computed once per (source, relation) pair where that pays, as
PyG's per-edge-type source rows do. The softmax runs over all of a node's
in-edges, across edge types, as PyG's. The projections (`kqv_lin`,
`out_lin`), GELU and the gated skip connection are torch's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import hetero, inputs
from gnnc.nn.kernels import kernel, literal
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp

LAYER = "HGTConv"


def _source(scale: float) -> tuple[str, str]:
    name = "hgt_conv"
    text = (
        f"kernel {name}(qs: f32[V, H, D], ks: f32[V, H, D], vs: f32[V, H, D], "
        "Wk: f32[R, H, D, D], Wv: f32[R, H, D, D], p: f32[R, H]) -> f32[V, H, D] {\n"
        f"    s[e] = dot(qs[v], ks[u] @ Wk[rel(e)]) * p[rel(e)] * {literal(scale)}\n"
        "    out[v] = sum(softmax(s[e]) * (vs[u] @ Wv[rel(e)]))\n"
        "}\n"
    )
    return text, name


def _metadata(metadata: Any) -> tuple[list[str], list[tuple[str, str, str]]]:
    if not isinstance(metadata, (tuple, list)) or len(metadata) != 2:
        raise ArgumentError(f"{LAYER}: metadata must be (node_types, edge_types), as HeteroData.metadata() gives")
    node_types, edge_types = list(metadata[0]), [tuple(t) for t in metadata[1]]
    if not all(isinstance(t, str) for t in node_types):
        raise ArgumentError(f"{LAYER}: node types must be strings, got {node_types!r}")
    for t in edge_types:
        if len(t) != 3 or not all(isinstance(k, str) for k in t):
            raise ArgumentError(f"{LAYER}: edge types must be (src, relation, dst) string triples, got {t!r}")
        if t[0] not in node_types or t[2] not in node_types:
            raise ArgumentError(f"{LAYER}: edge type {t!r} names a node type that metadata[0] lacks")
    return node_types, edge_types


class HGTConv(WarmUp, nn.Module):
    """PyG's `HGTConv(in_channels, out_channels, metadata, heads=1, **kwargs)`.

    `forward(x_dict, edge_index_dict)` -> {node type: [N, out_channels]} for the node types some
    edge type of `metadata` points to (as PyG). `in_channels` is an int or a dict per node type
    (-1: sized by the first input). Parameters as PyG's: `kqv_lin.lins.<type>`,
    `out_lin.lins.<type>`, `k_rel.weight`, `v_rel.weight` (`[heads x edge types, D, D]`, head-major),
    `skip.<type>`, `p_rel.<src__rel__dst>`.
    """

    def __init__(self, in_channels: Any, out_channels: int, metadata: Any, heads: int = 1, **kwargs: Any):
        super().__init__()
        check_options(LAYER, kwargs, node_dim=False)
        for what, value in (("out_channels", out_channels), ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArgumentError(f"{LAYER}: {what} must be a positive integer, got {value!r}")
        if out_channels % heads != 0:
            raise ArgumentError(
                f"{LAYER}: 'out_channels' (got {out_channels}) must be divisible by the number of heads (got {heads})"
            )
        node_types, edge_types = _metadata(metadata)
        if not isinstance(in_channels, dict):
            in_channels = dict.fromkeys(node_types, in_channels)
        for t, c in in_channels.items():
            inputs.channels(c, f"{LAYER} ({t!r})")
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.node_types, self.edge_types = node_types, edge_types
        self.edge_types_map = {t: i for i, t in enumerate(edge_types)}
        self.dst_node_types = {t[-1] for t in edge_types}
        self.kqv_lin = hetero.HeteroDictLinear(self.in_channels, out_channels * 3)
        self.out_lin = hetero.HeteroDictLinear(out_channels, out_channels, types=node_types)
        dim = out_channels // heads
        self.k_rel = hetero.HeteroLinear(dim, dim, heads * len(edge_types))
        self.v_rel = hetero.HeteroLinear(dim, dim, heads * len(edge_types))
        self.skip = hetero.ParameterDict({t: nn.Parameter(torch.empty(1)) for t in node_types})
        self.p_rel = hetero.ParameterDict({"__".join(t): nn.Parameter(torch.empty(1, heads)) for t in edge_types})
        self._kernel = kernel(*_source(1.0 / math.sqrt(dim)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation, draw for draw."""
        self.kqv_lin.reset_parameters()
        self.out_lin.reset_parameters()
        self.k_rel.reset_parameters()
        self.v_rel.reset_parameters()
        with torch.no_grad():
            for p in self.skip.values():
                p.fill_(1.0)
            for p in self.p_rel.values():
                p.fill_(1.0)

    def _relation_matrices(self, lin: hetero.HeteroLinear, dtype: torch.dtype) -> torch.Tensor:
        """`[R, H, D, D]` from PyG's `[H x R, D, D]` (type h x R + r)."""
        h, r, d = self.heads, len(self.edge_types), self.out_channels // self.heads
        return lin.weight.view(h, r, d, d).transpose(0, 1).to(dtype)

    def forward(
        self, x_dict: Mapping[str, torch.Tensor], edge_index_dict: Mapping[Any, Any]
    ) -> dict[str, torch.Tensor]:
        if not isinstance(x_dict, Mapping) or not isinstance(edge_index_dict, Mapping):
            raise ArgumentError(f"{LAYER}: forward takes x_dict and edge_index_dict, dictionaries by type")
        h, f = self.heads, self.out_channels
        d = f // h
        x_dict = {t: inputs.check_features(x, LAYER, f"x_dict[{t!r}]") for t, x in x_dict.items()}
        kqv = self.kqv_lin(x_dict)
        missing = [t for t in x_dict if t not in kqv]
        if missing:
            raise ArgumentError(f"{LAYER}: x_dict has node types {missing} that metadata lacks")
        dtype = next(iter(x_dict.values())).dtype if x_dict else torch.float32
        offsets, total = {}, 0
        for t, x in x_dict.items():
            offsets[t] = total
            total += x.shape[0]
        parts = [torch.tensor_split(kqv[t], 3, dim=1) for t in x_dict]
        ks, qs, vs = (torch.cat([p[i] for p in parts]).view(-1, h, d) for i in range(3))
        graph = hetero.homogeneous(edge_index_dict, offsets, total, self.edge_types_map, LAYER, qs.device)
        p = torch.cat([self.p_rel["__".join(t)] for t in self.edge_types]).to(dtype)
        out = self._kernel(
            graph.edge_index,
            qs,
            ks,
            vs,
            self._relation_matrices(self.k_rel, dtype),
            self._relation_matrices(self.v_rel, dtype),
            p,
            num_vertices=total,
            edge_type=graph.edge_type,
            num_relations=len(self.edge_types),
        ).reshape(-1, f)
        out_dict = {t: out[offsets[t] : offsets[t] + x.shape[0]] for t, x in x_dict.items() if t in self.dst_node_types}
        a_dict = self.out_lin({t: F.gelu(o) for t, o in out_dict.items()})
        for t in out_dict:
            o = a_dict[t]
            if o.shape[-1] == x_dict[t].shape[-1]:
                alpha = self.skip[t].sigmoid()
                o = alpha * o + (1 - alpha) * x_dict[t]
            out_dict[t] = o
        return out_dict

    def __repr__(self) -> str:
        return f"{type(self).__name__}(-1, {self.out_channels}, heads={self.heads})"


__all__ = ["HGTConv"]
