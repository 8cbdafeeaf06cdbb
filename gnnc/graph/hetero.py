"""Heterogeneous graphs from PyG and DGL as one gnnc Graph with node and relation types.

`Graph.from_hetero(data)` takes a PyG `HeteroData` (through its
`to_homogeneous()`) or a DGL heterograph and numbers, as both libraries' own
`to_homogeneous` do, the nodes type after type (`node_types` order: type t's
nodes are the ids `offsets[t]` to `offsets[t + 1]`) and the relations by
their position in the edge types (`HeteroData.edge_types`, DGL's
`canonical_etypes`); an edge id is the edge's position in that
concatenation, each type's edges in their own order. The Graph carries the
relation types (`edge_type`, `num_relations`) and, in `Graph.types`, the
node types: names, offsets, one type per node. Neither library is imported
here: the objects are read through their public methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gnnc.errors import GraphError
from gnnc.graph.tensors import is_torch_tensor


@dataclass(frozen=True)
class GraphTypes:
    """The node and edge types of a graph made from a heterogeneous one (see the module)."""

    node_types: tuple[str, ...]
    #: (source type, relation, destination type) per relation id.
    edge_types: tuple[tuple[str, str, str], ...]
    #: `[T + 1]` int64, read-only: type t's nodes are ids `offsets[t]` .. `offsets[t + 1] - 1`.
    offsets: np.ndarray
    #: `[V]` int64, read-only: each node's type (its position in node_types).
    node_type: np.ndarray

    def nodes(self, node_type: str) -> slice:
        """The ids of `node_type`'s nodes, as a slice (rows of features concatenated in type order)."""
        t = self._index(self.node_types, node_type, "node type")
        return slice(int(self.offsets[t]), int(self.offsets[t + 1]))

    def relation(self, edge_type: Any) -> int:
        """The relation id of an edge type: a (src, rel, dst) triple, or a relation name that is unique."""
        if isinstance(edge_type, tuple):
            return self._index(self.edge_types, edge_type, "edge type")
        matches = [i for i, t in enumerate(self.edge_types) if t[1] == edge_type]
        if len(matches) != 1:
            raise GraphError(f"relation {edge_type!r} names {len(matches)} edge types: give the (src, rel, dst) triple")
        return matches[0]

    @staticmethod
    def _index(names: tuple, name: Any, what: str) -> int:
        try:
            return names.index(name)
        except ValueError:
            raise GraphError(f"no {what} {name!r}; the graph has {list(names)}") from None


def _numpy(value: Any, what: str) -> np.ndarray:
    if is_torch_tensor(value):
        value = value.detach().cpu().numpy()
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise GraphError(f"{what} is not an array: {exc}") from exc


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.int64).copy()
    a.flags.writeable = False
    return a


def _types(node_types: list[str], counts: list[int], edge_types: list[tuple[str, str, str]]) -> GraphTypes:
    offsets = np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))])
    node_type = np.repeat(np.arange(len(node_types), dtype=np.int64), counts)
    return GraphTypes(tuple(node_types), tuple(edge_types), _readonly(offsets), _readonly(node_type))


def from_pyg(data: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, GraphTypes]:
    """(src, dst, edge_type, num_nodes, types) of a PyG HeteroData, through `to_homogeneous()`."""
    node_types = [str(t) for t in data.node_types]
    edge_types = [tuple(str(k) for k in t) for t in data.edge_types]
    counts = [int(data[t].num_nodes or 0) for t in data.node_types]
    # node_attrs/edge_attrs empty: only the structure (features of different widths do not concatenate)
    homogeneous = data.to_homogeneous(node_attrs=[], edge_attrs=[], add_node_type=True, add_edge_type=True)
    edge_index = _numpy(homogeneous.edge_index, "edge_index")
    types = _types(node_types, counts, edge_types)  # type: ignore[arg-type]
    node_type = _numpy(homogeneous.node_type, "node_type") if "node_type" in homogeneous else types.node_type
    if not np.array_equal(node_type, types.node_type):
        raise GraphError("HeteroData.to_homogeneous() numbered the nodes in an order other than node_types'")
    edge_type = _numpy(homogeneous.edge_type, "edge_type") if "edge_type" in homogeneous else np.zeros(0, np.int64)
    return edge_index[0], edge_index[1], edge_type, int(types.offsets[-1]), types


def from_dgl(graph: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, GraphTypes]:
    """(src, dst, edge_type, num_nodes, types) of a DGL heterograph, numbered as `dgl.to_homogeneous`."""
    node_types = [str(t) for t in graph.ntypes]
    counts = [int(graph.num_nodes(t)) for t in graph.ntypes]
    types = _types(node_types, counts, [tuple(str(k) for k in t) for t in graph.canonical_etypes])  # type: ignore[misc]
    srcs, dsts, rels = [], [], []
    for r, etype in enumerate(graph.canonical_etypes):
        src, dst = graph.edges(order="eid", etype=etype)
        src, dst = _numpy(src, "src").astype(np.int64), _numpy(dst, "dst").astype(np.int64)
        srcs.append(src + types.offsets[node_types.index(etype[0])])
        dsts.append(dst + types.offsets[node_types.index(etype[2])])
        rels.append(np.full(src.shape[0], r, dtype=np.int64))
    empty = np.zeros(0, np.int64)
    cat = (lambda parts: np.concatenate(parts)) if rels else (lambda parts: empty)
    return cat(srcs), cat(dsts), cat(rels), int(types.offsets[-1]), types


def hetero_parts(data: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, GraphTypes]:
    """`from_pyg` or `from_dgl` by what `data` is, or a clear error."""
    if hasattr(data, "to_homogeneous") and hasattr(data, "node_types") and hasattr(data, "edge_types"):
        return from_pyg(data)
    if hasattr(data, "canonical_etypes") and hasattr(data, "ntypes") and hasattr(data, "edges"):
        return from_dgl(data)
    raise GraphError(f"Graph.from_hetero takes a PyG HeteroData or a DGL heterograph, got {type(data).__name__}")


__all__ = ["GraphTypes", "from_dgl", "from_pyg", "hetero_parts"]
