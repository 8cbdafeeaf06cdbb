"""`RGCNConv` and `FastRGCNConv`: PyG's relational graph convolution (Schlichtkrull et al.), one gnnc kernel.

    kernel rgcn_conv_mean(x: f32[V, K], W: f32[R, K, N]) -> f32[V, N] {
        out[v] = sum((x[u] @ W[rel(e)]) / deg_in(v, rel(e)))
    }

`aggr="mean"` averages each relation's in-edges apart (deg_in(v, rel(e)) is
R-GCN's c_{v,r}); "sum"/"add" drops the division. "max" (RGCNConv only, as
PyG) is PyG's max of each relation's in-edge features, transformed and
summed over relations: a max kernel over the graph whose destinations are the
(destination, relation) pairs (`relations.pair_graph`), then the sum kernel
on the graph from each pair to its destination, the pair's relation its type. The compiler computes
`x[u] @ W[rel(e)]` once per (source, relation) pair where that pays, one
dense product per relation (`relation-transform-first`, `segment-matmul`;
docs/design/heterogeneous.md). The root term `x_dst @ root` and the bias
are torch's. A basis decomposition forms W = comp @ weight in torch before
the call (as PyG); a block-diagonal one is the same kernel with x viewed
`[V, B, K / B]` and W `[R, B, K / B, N / B]`, a matrix per block. Without
features (x None, or a node index tensor) a message is a row of the
relation's weight, PyG's embedding lookup: those rows are gathered per edge
in torch and the kernel averages them (`sum(m[e] / deg_in(v, rel(e)))`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs, relations
from gnnc.nn.init import glorot, zeros
from gnnc.nn.kernels import kernel
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp
from gnnc.torch.kernels import Kernel

#: The aggregations of the relational layers, PyG's names to the kernels'.
AGGREGATIONS = {"mean": "mean", "sum": "sum", "add": "sum", "max": "max"}


def _source(aggr: str, blocks: bool, rows: bool) -> tuple[str, str]:
    """(source, name) of the kernel for an aggregation, weights in blocks or not, rows given per edge."""
    term = "m[e]" if rows else "(x[u] @ W[rel(e)])"
    if aggr == "mean":
        term = f"{term} / deg_in(v, rel(e))"
    if rows:
        name = f"rgcn_conv_rows_{aggr}"
        return f"kernel {name}(m: f32[E, N]) -> f32[V, N] {{\n    out[v] = sum({term})\n}}\n", name
    name = f"rgcn_conv{'_blocks' if blocks else ''}_{aggr}"
    x, w, out = (
        ("f32[V, B, K]", "f32[R, B, K, N]", "f32[V, B, N]") if blocks else ("f32[V, K]", "f32[R, K, N]", "f32[V, N]")
    )
    return f"kernel {name}(x: {x}, W: {w}) -> {out} {{\n    out[v] = sum({term})\n}}\n", name


def kernels(aggr: str) -> dict[str, Kernel]:
    """The layer's kernels for `aggr` (a kernel name): dense weights, blocks, rows per edge; for "max",
    the sums over the pairs' graph and the max over each pair's in-edges (features or rows)."""
    made = {
        form: kernel(*_source("sum" if aggr == "max" else aggr, form == "blocks", form == "rows"))
        for form in ("dense", "blocks", "rows")
    }
    if aggr == "max":
        made["pair_max"] = kernel(
            "kernel rgcn_pair_max(x: f32[V, K]) -> f32[V, K] { out[v] = max(x[u]) }\n", "rgcn_pair_max"
        )
        made["pair_max_rows"] = kernel(
            "kernel rgcn_pair_max_rows(m: f32[E, N]) -> f32[V, N] { out[v] = max(m[e]) }\n", "rgcn_pair_max_rows"
        )
    return made


def _is_index(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and not x.is_floating_point() and not x.is_complex()


class RGCNConv(WarmUp, nn.Module):
    """PyG's `RGCNConv(in_channels, out_channels, num_relations, num_bases=None, num_blocks=None,
    aggr="mean", root_weight=True, is_sorted=False, bias=True, **kwargs)`.

    `forward(x, edge_index, edge_type=None)`: x a `[N, in_channels]` tensor, a
    pair `(x_src, x_dst)`, None or a node index tensor (featureless: the
    weights are embeddings, `in_channels` the number of nodes); edge_type one
    relation per edge (None with a SparseTensor, whose values are the types).
    Parameters `weight` (`[R, in, out]`; `[B, in, out]` with num_bases,
    `[R, B, in / B, out / B]` with num_blocks), `comp` (`[R, B]`, bases only),
    `root` (`[in_dst, out]`), `bias`. aggr: "mean", "sum"/"add", "max"
    (RGCNConv only, as PyG). `is_sorted` tells PyG the edges are sorted by type; gnnc groups
    them by relation itself, so it changes nothing.
    """

    LAYER = "RGCNConv"

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        num_relations: int,
        num_bases: int | None = None,
        num_blocks: int | None = None,
        aggr: str = "mean",
        root_weight: bool = True,
        is_sorted: bool = False,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        layer = self.LAYER
        check_options(layer, kwargs, aggr=None, node_dim=False)
        if not isinstance(aggr, str) or aggr not in AGGREGATIONS:
            raise ArgumentError(
                f"{layer}: aggr={aggr!r} is not supported by gnnc.nn; use one of {', '.join(map(repr, AGGREGATIONS))}"
            )
        relations.check_decomposition(num_bases, num_blocks, layer)
        src, dst = inputs.channels(in_channels, layer)
        if src < 1 or dst < 1:
            raise ArgumentError(f"{layer}: in_channels must be positive (PyG's layer is not lazy), got {in_channels!r}")
        if isinstance(out_channels, bool) or not isinstance(out_channels, int) or out_channels < 1:
            raise ArgumentError(f"{layer}: out_channels must be a positive integer, got {out_channels!r}")
        if num_blocks is not None and (src % num_blocks or out_channels % num_blocks):
            raise ArgumentError(
                f"{layer}: in_channels ({src}) and out_channels ({out_channels}) must be multiples of "
                f"num_blocks ({num_blocks})"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.num_relations = relations.check_relations(num_relations, layer)
        self.num_bases, self.num_blocks = num_bases, num_blocks
        self.aggr, self.root_weight, self.is_sorted = aggr, root_weight, is_sorted
        self.in_channels_l = src
        if aggr == "max" and self.LAYER == "FastRGCNConv":
            raise ArgumentError(f"{layer}: aggr='max' is not supported (PyG's FastRGCNConv takes 'add', 'sum', 'mean')")
        self._kernels = kernels(AGGREGATIONS[aggr])
        if num_bases is not None:
            self.weight = nn.Parameter(torch.empty(num_bases, src, out_channels))
            self.comp: nn.Parameter | None = nn.Parameter(torch.empty(num_relations, num_bases))
        elif num_blocks is not None:
            self.weight = nn.Parameter(
                torch.empty(num_relations, num_blocks, src // num_blocks, out_channels // num_blocks)
            )
            self.register_parameter("comp", None)
        else:
            self.weight = nn.Parameter(torch.empty(num_relations, src, out_channels))
            self.register_parameter("comp", None)
        self.root: nn.Parameter | None = nn.Parameter(torch.empty(dst, out_channels)) if root_weight else None
        self.bias: nn.Parameter | None = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation, draw for draw."""
        glorot(self.weight)
        glorot(self.comp)
        glorot(self.root)
        zeros(self.bias)

    def relation_weights(self) -> torch.Tensor:
        """W: `[R, in, out]` (formed from the bases with num_bases), or `[R, B, in / B, out / B]` blocks."""
        if self.comp is None:
            return self.weight
        return (self.comp @ self.weight.view(self.comp.shape[1], -1)).view(
            self.num_relations, self.in_channels_l, self.out_channels
        )

    def _features(self, x: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(x_src, x_dst): float features or node index tensors, as PyG reads `x`."""
        layer = self.LAYER
        x_src, x_dst = (x[0], x[1]) if isinstance(x, (tuple, list)) and len(x) == 2 else (x, None)
        if isinstance(x, (tuple, list)) and len(x) != 2:
            raise ArgumentError(f"{layer}: x must be a tensor, None, or a pair (x_src, x_dst)")
        if x_src is None:
            x_src = torch.arange(self.in_channels_l, device=self.weight.device)
        checked: list[torch.Tensor | None] = []
        for what, t in (("x", x_src), ("x[1]", x_dst)):
            if t is not None:
                if not isinstance(t, torch.Tensor):
                    raise ArgumentError(f"{layer}: {what} must be a tensor (or None), got {type(t).__name__}")
                if _is_index(t):
                    if t.dim() != 1:
                        raise ArgumentError(f"{layer}: a node index tensor {what} must be 1-D, got {tuple(t.shape)}")
                else:
                    t = inputs.check_features(t, layer, what)
                    if t.dim() != 2:
                        raise ArgumentError(f"{layer}: {what} must be [num_nodes, channels], got {tuple(t.shape)}")
            checked.append(t)
        src, dst = checked
        assert src is not None
        if isinstance(x, (tuple, list)) and dst is None:
            raise ArgumentError(f"{layer}: x[1] (the destinations' features or indices) must be a tensor")
        return src, (src if dst is None else dst)

    def forward(self, x: Any, edge_index: Any, edge_type: torch.Tensor | None = None) -> torch.Tensor:
        layer = self.LAYER
        edges = relations.typed_edges(edge_index, edge_type, self.num_relations, layer)
        adj = edges.adj
        if adj.block and isinstance(x, torch.Tensor) and not _is_index(x):
            x = inputs.on_block(x, adj)
        x_src, x_dst = self._features(x)
        sizes = (x_src.shape[0], x_dst.shape[0])
        if adj.size is not None and sizes != adj.size:
            raise ArgumentError(f"{layer}: x gives (num_src, num_dst) = {sizes}, the graph {adj.size}")
        weight = self.relation_weights()
        # `out` is the kernel's fresh result, which its backward does not read: the root term and
        # the bias add into it in place (no copy of a [num_dst, out] tensor, nor its fresh pages)
        out = self._propagate(x_src, edges, weight, sizes)
        if self.root is not None:
            if _is_index(x_dst):
                out = out.add_(self.root[x_dst])
            else:
                self._check_width(x_dst, self.root.shape[0], "x_dst")
                out = out.addmm_(x_dst.to(out.dtype), self.root.to(out.dtype))
        if self.bias is not None:
            out = out.add_(self.bias)
        return out

    def _check_width(self, x: torch.Tensor, width: int, what: str) -> None:
        if x.shape[1] != width:
            raise ArgumentError(f"{self.LAYER}: {what} has {x.shape[1]} channels, the layer takes {width}")

    def _propagate(self, x_src: torch.Tensor, edges: relations.TypedEdges, weight: torch.Tensor, sizes: tuple) -> Any:
        """The relations' aggregation: `[num_dst, out_channels]`."""
        if _is_index(x_src) and self.num_blocks is not None:
            raise ArgumentError(
                f"{self.LAYER}: Block-diagonal decomposition not supported for non-continuous input features."
            )
        if not _is_index(x_src):
            self._check_width(x_src, self.in_channels_l, "x")
            weight = weight.to(x_src.dtype)
        if self.aggr == "max":
            return self._propagate_max(x_src, edges, weight, sizes)
        call: dict[str, Any] = {"size": sizes, "edge_type": edges.edge_type, "num_relations": self.num_relations}
        if _is_index(x_src):
            rows = self._kernels["rows"]
            if not rows.ops.relational:  # a plain sum of the rows reads no relation
                call = {"size": sizes}
            return rows(edges.edge_index, self._embedding_rows(x_src, edges, weight), **call)
        return self._transform(edges.edge_index, x_src, weight, call)

    def _transform(self, edge_index: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, call: dict) -> Any:
        """The dense or block kernel: `sum(x[u] @ W[rel(e)])` (divided by the pair's count with "mean")."""
        if self.num_blocks is None:
            return self._kernels["dense"](edge_index, x, weight, **call)
        blocks, k = weight.shape[1], weight.shape[2]
        return self._kernels["blocks"](edge_index, x.reshape(-1, blocks, k), weight, **call).reshape(
            -1, self.out_channels
        )

    def _propagate_max(
        self, x_src: torch.Tensor, edges: relations.TypedEdges, weight: torch.Tensor, sizes: tuple
    ) -> Any:
        """PyG's "max": per relation the max of the in-edges' features, then its transform, summed."""
        pairs = relations.pair_graph(edges, self.num_relations)
        to_pairs: dict[str, Any] = {"size": (sizes[0], pairs.num_pairs)}
        if _is_index(x_src):  # the max of the rows themselves, each pair's row added into its destination
            rows = self._kernels["pair_max_rows"](
                pairs.edge_index, self._embedding_rows(x_src, edges, weight), **to_pairs
            )
            return rows.new_zeros(sizes[1], rows.shape[1]).index_add(0, pairs.vertex, rows)
        per_pair = self._kernels["pair_max"](pairs.edge_index, x_src, **to_pairs)
        call = {"size": (pairs.num_pairs, sizes[1]), "edge_type": pairs.relation, "num_relations": self.num_relations}
        return self._transform(pairs.to_destinations, per_pair, weight, call)

    def _embedding_rows(self, x_src: torch.Tensor, edges: relations.TypedEdges, weight: torch.Tensor) -> torch.Tensor:
        """Each edge's message without features: row x_src[u] of its relation's weight (PyG's
        `weight[r, x_l]`)."""
        rows = weight.shape[1]
        if x_src.numel() and (int(x_src.min()) < 0 or int(x_src.max()) >= rows):
            raise ArgumentError(f"{self.LAYER}: node indices must lie in [0, {rows}) (in_channels)")
        index = edges.edge_type.to(torch.int64) * rows + x_src[edges.edge_index[0]].to(torch.int64)
        return weight.reshape(-1, self.out_channels)[index]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, num_relations={self.num_relations})"


class FastRGCNConv(RGCNConv):
    """PyG's `FastRGCNConv`: the arguments, parameters and results of `RGCNConv` (see there).

    PyG's two layers differ in how they compute (per relation or per edge);
    gnnc compiles both to the same kernel. One difference of PyG's is kept:
    given a node index tensor x, FastRGCNConv's messages read the weight rows
    of the source ids (`edge_index[0]`), RGCNConv's those of `x[source]`.
    """

    LAYER = "FastRGCNConv"

    def _embedding_rows(self, x_src: torch.Tensor, edges: relations.TypedEdges, weight: torch.Tensor) -> torch.Tensor:
        rows = weight.shape[1]
        src = edges.edge_index[0].to(torch.int64)
        if src.numel() and int(src.max()) >= rows:
            raise ArgumentError(f"{self.LAYER}: source ids must lie in [0, {rows}) (in_channels)")
        return weight.reshape(-1, self.out_channels)[edges.edge_type.to(torch.int64) * rows + src]


__all__ = ["AGGREGATIONS", "FastRGCNConv", "RGCNConv", "kernels"]
