"""A layer's graph arguments in PyG's forms, as the edge_index and sizes gnnc's ops take.

PyG's `forward(x, edge_index, ...)` accepts a `[2, E]` edge_index (row 0
sources, row 1 destinations), a `torch.sparse` adjacency or a torch_sparse
`SparseTensor`; sparse ones are PyG's *transposed* adjacency `adj_t`, of
shape `[num_dst, num_src]`, whose entry `[v, u]` is the edge u -> v. `x` is
one tensor or a bipartite pair `(x_src, x_dst)` (x_dst may be None), and
`size=(num_src, num_dst)` gives the sizes where x does not.

A sparse adjacency becomes an edge_index once per tensor (cached with the
tensor, `gnnc.torch.graphs.derived`); its edge ids are its entries in
storage order (row-major; a COO tensor coalesced first). Its values are the
edge weights (`edge_values`) and, for a SparseTensor, the edge features
when none are given (`edge_attributes`), as PyG's `propagate` has them;
`Adjacency.layout` keeps the form, where PyG's layers treat them apart.

A `gnnc.Graph` is taken as is, with its sizes: the kernels get the Graph
itself (`Adjacency.index`), and its edge_index is made only for a layer
that reads the edges (`Adjacency.edge_index`).

A sampled block (`gnnc.nn.blocks`: a `Block`, a DGL block, an
`(edge_index, size)` pair) is an edge_index with its sizes; given one feature
tensor, a layer reads its first `num_dst` rows as the destinations'
(`on_block`), as DGL's layers do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import torch

from gnnc.errors import ArgumentError
from gnnc.graph.graph import Graph
from gnnc.nn.sampled import as_block
from gnnc.torch import graphs
from gnnc.torch.kernels import autocast_input

#: torch.sparse layouts an adjacency may have.
SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)

#: The feature dtypes gnnc's kernels take.
FEATURE_DTYPES = (torch.float32, torch.float64)


class Layout(enum.StrEnum):
    """What form a graph argument came in: PyG treats the three differently in places."""

    EDGE_INDEX = "edge_index"
    TORCH_SPARSE = "torch.sparse"
    SPARSE_TENSOR = "SparseTensor"


@dataclass(frozen=True)
class Adjacency:
    """A graph argument resolved: the edges, a sparse adjacency's values, its sizes."""

    #: What the kernels take: a `[2, E]` int64 edge_index (row 0 sources, row 1
    #: destinations, columns in edge id order), or a `gnnc.Graph` given as is.
    index: torch.Tensor | Graph
    #: The values of a sparse adjacency (`[E]`, or `[E, D]` for a SparseTensor), else None.
    values: torch.Tensor | None
    #: (num_src, num_dst) of a sparse adjacency, a Graph or a block, None for an edge_index.
    size: tuple[int, int] | None
    layout: Layout = Layout.EDGE_INDEX
    #: The argument as given (a SparseTensor's attention weights come back in its class).
    given: Any = None
    #: A sampled block: its destinations are its first `num_dst` sources.
    block: bool = False

    @property
    def edge_index(self) -> torch.Tensor:
        """The `[2, E]` int64 edges, for code that reads them: a Graph's made on first use
        (`gnnc.torch.graphs.edge_index_of`, kept while the Graph lives)."""
        if isinstance(self.index, Graph):
            return graphs.edge_index_of(self.index)
        return self.index

    @property
    def num_edges(self) -> int:
        return self.index.num_edges if isinstance(self.index, Graph) else int(self.index.shape[1])

    @property
    def sparse(self) -> bool:
        return self.layout != Layout.EDGE_INDEX

    @property
    def sparse_tensor(self) -> bool:
        return self.layout == Layout.SPARSE_TENSOR


def _is_sparse_tensor(obj: Any) -> bool:
    """torch_sparse's SparseTensor, without importing torch_sparse (optional)."""
    return type(obj).__name__ == "SparseTensor" and hasattr(obj, "storage") and hasattr(obj, "sparse_sizes")


def _from_torch_sparse(adj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if adj.layout == torch.sparse_coo:
        adj = adj.coalesce() if not adj.is_coalesced() else adj
        rows, cols = adj.indices()
        values = adj.values()
    elif adj.layout == torch.sparse_csr:
        crow = adj.crow_indices()
        cols = adj.col_indices()
        rows = torch.repeat_interleave(torch.arange(adj.shape[0], device=crow.device), crow.diff())
        values = adj.values()
    else:  # CSC: compressed by column (source)
        ccol = adj.ccol_indices()
        rows = adj.row_indices()
        cols = torch.repeat_interleave(torch.arange(adj.shape[1], device=ccol.device), ccol.diff())
        values = adj.values()
    # adj_t[v, u] is the edge u -> v
    return torch.stack([cols, rows]).to(torch.int64), values


def _from_sparse_tensor(adj_t: Any) -> Adjacency:
    """A SparseTensor `adj_t` ([num_dst, num_src], row-major storage) as an Adjacency."""
    rows, cols, values = adj_t.coo()
    num_dst, num_src = adj_t.sparse_sizes()
    if values is not None and values.dim() not in (1, 2):
        raise ArgumentError(f"a SparseTensor's values must be [nnz] or [nnz, D], got {tuple(values.shape)}")
    # the edge list is made once per (row, col) storage pair, as a torch.sparse one per tensor
    key = ("nn.SparseTensor", cols.data_ptr(), tuple(cols.shape), cols._version)
    index = graphs.derived(rows, key, lambda: torch.stack([cols, rows]).to(torch.int64))
    return Adjacency(index, values, (int(num_src), int(num_dst)), Layout.SPARSE_TENSOR, adj_t)


def adjacency(edge_index: Any, what: str = "edge_index") -> Adjacency:
    """An edge_index tensor, a torch.sparse adjacency or a SparseTensor as an `Adjacency`."""
    if isinstance(edge_index, torch.Tensor) and edge_index.layout in SPARSE_LAYOUTS:
        adj = edge_index
        if adj.dim() != 2 or adj.dense_dim() != 0:
            raise ArgumentError(f"{what}: a sparse adjacency must be 2-D with scalar values, got {tuple(adj.shape)}")
        index, values = graphs.derived(adj, "nn.adjacency", lambda: _from_torch_sparse(adj))
        return Adjacency(index, values, (int(adj.shape[1]), int(adj.shape[0])), Layout.TORCH_SPARSE, adj)
    if _is_sparse_tensor(edge_index):
        return _from_sparse_tensor(edge_index)
    if isinstance(edge_index, Graph):
        # taken as is: the kernels get the Graph, no edge_index is made unless a layer reads the edges
        graph = edge_index
        return Adjacency(graph, None, (graph.num_src, graph.num_dst), Layout.EDGE_INDEX, graph)
    block = as_block(edge_index)
    if block is not None:
        return Adjacency(block.edge_index, None, block.size, Layout.EDGE_INDEX, edge_index, block=True)
    if not isinstance(edge_index, torch.Tensor):
        raise ArgumentError(
            f"{what} must be a [2, E] tensor, a torch.sparse adjacency, a SparseTensor, a gnnc.Graph or a "
            f"sampled block, got {type(edge_index).__name__}"
        )
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ArgumentError(f"{what} must have shape [2, E], got {tuple(edge_index.shape)}")
    if edge_index.dtype not in (torch.int64, torch.int32):
        raise ArgumentError(f"{what} must hold int64 (or int32) vertex ids, got {edge_index.dtype}")
    return Adjacency(edge_index, None, None, Layout.EDGE_INDEX, edge_index)


def on_block(x: Any, adj: Adjacency) -> Any:
    """`x` as the layer reads it: on a block, one tensor of `num_src` rows is the pair
    `(x, x[:num_dst])` (the destinations are the first sources, DGL's convention)."""
    if adj.block and isinstance(x, torch.Tensor):
        assert adj.size is not None
        if x.shape[0] != adj.size[0]:
            raise ArgumentError(f"x has {x.shape[0]} rows but the block has {adj.size[0]} sources")
        return x, x[: adj.size[1]]
    return x


def prefix_rows(x_dst: torch.Tensor | None, x_src: torch.Tensor) -> bool:
    """Whether x_dst is x_src's first rows (a block's `x[:num_dst]`): a product of x_src
    then serves both sides, sliced."""
    if x_dst is None or torch.compiler.is_compiling():
        return False
    return (
        x_dst.data_ptr() == x_src.data_ptr()
        and x_dst.stride() == x_src.stride()
        and x_dst.shape[1:] == x_src.shape[1:]
        and x_dst.shape[0] <= x_src.shape[0]
        and x_dst.dtype == x_src.dtype
        and x_dst.device == x_src.device
    )


def square(adj: Adjacency, x: torch.Tensor, layer: str) -> tuple[Adjacency, int | None]:
    """A block as the square graph of its `num_src` vertices, for layers that take one vertex set
    (GCNConv), and the destinations to keep of the result (None for other graphs)."""
    if not adj.block:
        return adj, None
    assert adj.size is not None
    if x.shape[0] != adj.size[0]:
        raise ArgumentError(f"{layer}: x has {x.shape[0]} rows but the block has {adj.size[0]} sources")
    return Adjacency(adj.index, None, None, Layout.EDGE_INDEX, adj.given), adj.size[1]


def autocast_features(x: torch.Tensor) -> torch.Tensor:
    """x as a gnnc op takes it under torch.autocast (`gnnc.torch.kernels.autocast_input`: half
    precision as float32), taken at a layer's entry: the layer then runs as on float32 features
    (its Linear layers still in autocast's lower precision), and what it derives from the
    features' dtype (normalisation weights, self-loop fills) is float32 too."""
    return autocast_input(x)


def check_features(x: torch.Tensor, layer: str, what: str = "x") -> torch.Tensor:
    """x as a layer takes it (`autocast_features`), or a clear error for features gnnc's kernels
    cannot take (half precision outside autocast, integers, other than one row per vertex: the
    layers that take PyG's static graphs, x of [batch, num_nodes, channels] on one edge_index,
    flatten them first, `static_graphs`)."""
    x = autocast_features(x)
    if x.dtype not in FEATURE_DTYPES:
        half = (
            " (half precision is not supported yet, on CPU or CUDA, outside torch.autocast; under"
            " autocast the layers take it and compute their message passing in float32)"
            if x.dtype in (torch.float16, torch.bfloat16)
            else ""
        )
        raise ArgumentError(f"{layer}: {what} is {x.dtype}: gnnc.nn's layers take float32 or float64 features{half}")
    if x.dim() > 2:
        raise ArgumentError(
            f"{layer}: {what} must be [num_nodes, channels], got shape {tuple(x.shape)}: static graphs (features "
            "with leading batch dimensions on one edge_index, PyG's node_dim=-2) are taken by GCNConv, SAGEConv, "
            "GINConv, GINEConv, GraphConv, APPNP, SGConv and TAGConv only, as in PyG; batch the graphs into one "
            "(torch_geometric.data.Batch) or call the layer per graph"
        )
    if x.dim() < 2:
        raise ArgumentError(f"{layer}: {what} must be [num_nodes, channels], got shape {tuple(x.shape)}")
    return x


def pair(x: Any, layer: str = "", what: str = "x") -> tuple[torch.Tensor, torch.Tensor | None]:
    """`x` as (x_src, x_dst): a tensor is both, a pair is itself (x_dst may be None)."""
    if isinstance(x, torch.Tensor):
        x = check_features(x, layer, what)
        return x, x
    if isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], torch.Tensor):
        if x[1] is not None and not isinstance(x[1], torch.Tensor):
            raise ArgumentError(f"{what}[1] must be a tensor or None, got {type(x[1]).__name__}")
        x_src = check_features(x[0], layer, f"{what}[0]")
        return x_src, None if x[1] is None else check_features(x[1], layer, f"{what}[1]")
    raise ArgumentError(f"{what} must be a tensor or a pair (x_src, x_dst), got {type(x).__name__}")


def channels(in_channels: Any, layer: str) -> tuple[int, int]:
    """(source, destination) input channels of an int or a pair; -1 sizes a side by its first input
    (PyG's lazy initialisation)."""
    pair = (in_channels, in_channels) if isinstance(in_channels, int) else in_channels
    if (
        not isinstance(pair, (tuple, list))
        or len(pair) != 2
        or any(isinstance(c, bool) or not isinstance(c, int) or (c < 1 and c != -1) for c in pair)
    ):
        raise ArgumentError(
            f"{layer}: in_channels must be a positive integer, -1 (sized by the first input) or a pair of them, "
            f"got {in_channels!r}"
        )
    return int(pair[0]), int(pair[1])


def sizes(
    adj: Adjacency, x_src: torch.Tensor, x_dst: torch.Tensor | None, size: Any, bipartite: bool
) -> tuple[Any, Any]:
    """(num_src, num_dst): `size=`, else a sparse adjacency's shape, else the rows of x.

    A pair without x_dst and without `size=` has as many destinations as sources
    (PyG's rule: it takes the sizes it knows, and x_src's rows for the rest).
    """
    if size is not None and adj.block:
        if not isinstance(size, (tuple, list, torch.Size)) or tuple(size) != adj.size:
            raise ArgumentError(f"size={size!r} disagrees with the block's (num_src, num_dst) = {adj.size}")
        size = None
    if size is not None:
        if not isinstance(size, (tuple, list, torch.Size)) or len(size) != 2:
            raise ArgumentError(f"size must be a pair (num_src, num_dst), got {size!r}")
        num_src, num_dst = size
        num_src = x_src.shape[0] if num_src is None else num_src
        num_dst = (x_dst.shape[0] if x_dst is not None else num_src) if num_dst is None else num_dst
    elif adj.size is not None:
        num_src, num_dst = adj.size
    else:
        num_src = x_src.shape[0]
        num_dst = x_dst.shape[0] if (bipartite and x_dst is not None) else num_src
    if x_src.shape[0] != num_src and not isinstance(num_src, torch.SymInt):
        raise ArgumentError(f"x_src has {x_src.shape[0]} rows but the graph has {num_src} sources")
    if x_dst is not None and x_dst.shape[0] != num_dst and not isinstance(num_dst, torch.SymInt):
        raise ArgumentError(f"x_dst has {x_dst.shape[0]} rows but the graph has {num_dst} destinations")
    return num_src, num_dst


def edge_values(adj: Adjacency, edge_weight: torch.Tensor | None, what: str = "edge_weight") -> torch.Tensor | None:
    """The edge weights of a call: `edge_weight`, else a sparse adjacency's values.

    PyG ignores `edge_weight` beside a sparse adjacency (its values are the
    weights): gnnc refuses the pair rather than drop one silently.
    """
    if edge_weight is not None:
        if adj.sparse:
            raise ArgumentError(
                f"{what} was given with a sparse adjacency ({adj.layout}), whose values are the edge weights: "
                "pass the weights as its values, or an edge_index with edge_weight"
            )
        if not isinstance(edge_weight, torch.Tensor):
            raise ArgumentError(f"{what} must be a tensor or None, got {type(edge_weight).__name__}")
        if edge_weight.dim() != 1 or edge_weight.shape[0] != adj.num_edges:
            raise ArgumentError(f"{what} must have shape [E] = [{adj.num_edges}], got {tuple(edge_weight.shape)}")
        return edge_weight
    if adj.values is not None and adj.values.dim() != 1:
        raise ArgumentError(
            f"the adjacency's values are edge weights here and must be [nnz], got {tuple(adj.values.shape)}"
        )
    return adj.values


def edge_features(edge_attr: Any, num_edges: int, dim: int | None, layer: str) -> torch.Tensor:
    """`edge_attr` as `[num_edges, dim]` floats (a 1-D one is a column), or a clear error."""
    if not isinstance(edge_attr, torch.Tensor):
        raise ArgumentError(f"{layer}: edge_attr must be a tensor, got {type(edge_attr).__name__}")
    edge_attr = check_features(edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr, layer, "edge_attr")
    if edge_attr.shape[0] != num_edges or (dim is not None and edge_attr.shape[1] != dim):
        raise ArgumentError(
            f"{layer}: edge_attr must be [{num_edges}, {dim}] (one row per edge, edge_dim columns), "
            f"got {tuple(edge_attr.shape)}"
        )
    return edge_attr


def edge_attributes(adj: Adjacency, edge_attr: torch.Tensor | None) -> torch.Tensor | None:
    """A call's edge features: `edge_attr`, else a SparseTensor's values (PyG's `propagate`
    passes those as `edge_attr` when none is given; a torch.sparse adjacency's scalar
    values it does not)."""
    if edge_attr is not None or not adj.sparse_tensor:
        return edge_attr
    return adj.values


__all__ = [
    "Adjacency",
    "Layout",
    "adjacency",
    "channels",
    "autocast_features",
    "check_features",
    "edge_attributes",
    "edge_features",
    "edge_values",
    "on_block",
    "pair",
    "prefix_rows",
    "sizes",
    "square",
]
