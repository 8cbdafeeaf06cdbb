"""The neighbourhood aggregation kernels shared by SAGEConv, GraphConv and GINConv.

    kernel aggregate_mean(x: f32[V, F]) -> f32[V, F] { out[v] = mean(x[u]) }
    kernel aggregate_mean_weighted(x: f32[V, F], w: f32[E]) -> f32[V, F] { out[v] = mean(w[e] * x[u]) }

and likewise for sum, max and min. An empty aggregation is 0 (as PyG's
scatter); `mean` divides by the in-degree, weights or not (as PyG's
`propagate` with `aggr="mean"`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.kernels import AGGREGATIONS, kernel
from gnnc.torch.kernels import Kernel, eager

_log = logging.getLogger(__name__)


def aggregation(aggr: Any, layer: str) -> str:
    """The language's name of PyG aggregation `aggr` ('add' is 'sum'), or a clear error."""
    if not isinstance(aggr, str) or aggr not in AGGREGATIONS:
        raise ArgumentError(
            f"{layer}: aggr={aggr!r} is not supported by gnnc.nn; use one of {', '.join(map(repr, AGGREGATIONS))}"
        )
    return AGGREGATIONS[aggr]


def kernels(aggr: str) -> tuple[Kernel, Kernel]:
    """The (unweighted, weighted) aggregation kernels of `aggr` (a language name)."""
    plain = f"kernel aggregate_{aggr}(x: f32[V, F]) -> f32[V, F] {{ out[v] = {aggr}(x[u]) }}"
    weighted = (
        f"kernel aggregate_{aggr}_weighted(x: f32[V, F], w: f32[E]) -> f32[V, F] {{ out[v] = {aggr}(w[e] * x[u]) }}"
    )
    return kernel(plain, f"aggregate_{aggr}"), kernel(weighted, f"aggregate_{aggr}_weighted")


def aggregate(
    pair: tuple[Kernel, Kernel], edge_index: Any, x: torch.Tensor, size: tuple, weight: Any = None
) -> torch.Tensor:
    """The aggregation over in-edges of `x[u]` (times `weight[e]`): a `[num_dst, F]` tensor.
    `edge_index` is one, or a `gnnc.Graph` (`inputs.Adjacency.index`)."""
    if weight is None:
        return pair[0](edge_index, x, size=size)
    return pair[1](edge_index, x, weight.to(x.dtype), size=size)


def sparse_weights(adj: inputs.Adjacency) -> torch.Tensor | None:
    """The edge weights of SAGEConv's and GINConv's aggregation, as PyG's `spmm`: a torch.sparse
    adjacency's values; none for a SparseTensor (PyG drops its values: `set_value(None)`)."""
    return adj.values if adj.layout == inputs.Layout.TORCH_SPARSE else None


#: Aggregations that commute with a linear map (aggregate then transform = transform then aggregate).
LINEAR = ("sum", "mean")


def transform_first(aggr: str, lin: Any, out_channels: int, x: torch.Tensor) -> bool:
    """Whether `lin(aggregate(x))` runs as `aggregate(x @ lin.weight^T) + lin.bias` (the same maths
    for a LINEAR `aggr`): where it narrows the features (fewer flops), and at equal width where x
    needs a gradient: the backward then aggregates that width either way, and the aggregation's
    output, which lin's weight gradient would keep, is never made (a [V, F] tensor less through
    the backward; the transform's input is kept, x, which exists anyway). A first layer at equal
    width (x needs no gradient) aggregates first: the other order would add an aggregation to its
    backward, for the weight gradient."""
    if aggr not in LINEAR or lin.lazy:
        return False
    width = x.shape[-1]
    return out_channels < width or (out_channels == width and x.requires_grad and torch.is_grad_enabled())


#: An aggregation that `lin` reads is recomputed in the backward, not kept, when it would take at
#: least this share of the machine's memory (`linear_of_aggregate`).
RECOMPUTE_MIN_SHARE_OF_MEMORY = 1 / 16


def _physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0  # unknown: keep


#: read once, at import: torch.compile traces `recompute_aggregation` and cannot trace sysconf
PHYSICAL_MEMORY_BYTES = _physical_memory_bytes()


def recompute_aggregation(x: torch.Tensor, size: tuple, lin: Any, weight: Any = None) -> bool:
    """Whether `lin(aggregate(x))` recomputes the aggregation for `lin`'s weight gradient instead
    of keeping it from the forward to the backward: only where nothing else needs a gradient
    through it (x and the edge weights need none: the first layer, whose input is the features),
    for an eager CPU aggregation of at least RECOMPUTE_MIN_SHARE_OF_MEMORY of the machine's memory.

    The trade is one aggregation more in the backward for a `[num_dst, F]` tensor less through
    it (at R-MAT scale 22, 128 features, 2 GiB of a GraphSAGE epoch's peak: docs/design/scale.md);
    where memory is plentiful, keeping it is the cheaper side.
    """
    if not eager():
        # dynamo traces an autograd.Function's forward in a strict mode that refuses the ops'
        # argument checks (`Tensor.layout`), and functorch's transforms need a `setup_context`:
        # a compiled or transformed model keeps the aggregation
        return False
    if not torch.is_grad_enabled() or lin.lazy or x.requires_grad or x.device.type != "cpu":
        return False
    if not (lin.weight.requires_grad or (lin.bias is not None and lin.bias.requires_grad)):
        return False
    if isinstance(weight, torch.Tensor) and weight.requires_grad:
        return False
    kept = size[1] * x.shape[-1] * x.element_size()
    return PHYSICAL_MEMORY_BYTES > 0 and kept >= RECOMPUTE_MIN_SHARE_OF_MEMORY * PHYSICAL_MEMORY_BYTES


def linear_of_aggregate(
    pair: tuple[Kernel, Kernel], edge_index: Any, x: torch.Tensor, size: tuple, weight: Any, lin: Any
) -> torch.Tensor:
    """`lin(aggregate(pair, edge_index, x, size, weight))`, the aggregation kept for `lin`'s weight
    gradient or made again in the backward (`recompute_aggregation`)."""
    if not recompute_aggregation(x, size, lin, weight):
        return lin(aggregate(pair, edge_index, x, size, weight))
    _log.debug(
        "%s: its [%d, %d] aggregation is made again in the backward, not kept (at least %g of memory)",
        (pair[0] if weight is None else pair[1]).name,
        size[1],
        x.shape[-1],
        RECOMPUTE_MIN_SHARE_OF_MEMORY,
    )
    return _RecomputedAggregation.apply(x, lin.weight, lin.bias, weight, edge_index, pair, size)


class _RecomputedAggregation(torch.autograd.Function):
    """`F.linear(aggregate(x), W, b)` that keeps x, not the aggregation: the backward aggregates
    again for `W`'s gradient. x and the edge weights get no gradient (`recompute_aggregation`)."""

    @staticmethod
    def forward(ctx: Any, x: Any, w: Any, b: Any, weight: Any, edge_index: Any, pair: Any, size: Any) -> Any:
        out = F.linear(aggregate(pair, edge_index, x, size, weight), w, b)
        index = edge_index if isinstance(edge_index, torch.Tensor) else None
        ctx.save_for_backward(x, weight, index)
        ctx.graph = None if index is not None else edge_index  # a gnnc.Graph
        ctx.pair, ctx.size = pair, size
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Any) -> Any:
        x, weight, index = ctx.saved_tensors
        grad_w = grad_b = None
        if ctx.needs_input_grad[1]:
            again = aggregate(ctx.pair, ctx.graph if index is None else index, x, ctx.size, weight)
            # under autocast the forward's Linear ran in lower precision and so is grad: the weight
            # gradient is taken in the aggregation's (and the weight's) precision
            grad_w = grad.to(again.dtype).t().mm(again)
        if ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return None, grad_w, grad_b, None, None, None, None


__all__ = [
    "LINEAR",
    "RECOMPUTE_MIN_SHARE_OF_MEMORY",
    "aggregate",
    "aggregation",
    "kernels",
    "linear_of_aggregate",
    "recompute_aggregation",
    "sparse_weights",
    "transform_first",
]
