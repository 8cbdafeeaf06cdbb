"""Relabelling a graph for locality: new vertex and edge ids, and the maps between old and new.

    r = graph.reordered("rcm")
    x_new = r.vertices_to_new(x)          # rows in the new vertex order (once, then kept)
    w_new = r.edges_to_new(w)
    out_new = module.gcn(r.graph, x_new, w_new)
    out = r.vertices_to_old(out_new)      # back in the caller's order, when needed

A kernel gathers a source row per edge. When the vertex numbering scatters
neighbours over the whole id range (as many real graphs' numbering does:
mdual, a METIS mesh of 258K vertices, has a median |u - v| of 36K over its
edges) every gather misses the caches. The reverse Cuthill-McKee order is a
breadth-first order of small bandwidth: neighbours get nearby ids, so the
rows a destination gathers were mostly brought in for the destinations just
before it, and the output rows and edge values are still written in order.

Relabelling is data layout, not a schedule: a destination order alone
(`reorder locality`) keeps the caller's rows where they are, and the
scattered output rows and edge values it then writes cost more than the
shared source rows save. A user who relabels once, before training, and
keeps features in the new order pays the permutation once. Measurements:
docs/design/locality.md and benchmarks/README.md.

New edge ids follow the new in-CSR (by destination, then by the old edge id),
so a kernel's edge tensors are read and written in order too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gnnc.errors import ArgumentError, GraphError
from gnnc.graph.tensors import is_torch_tensor

METHODS = ("rcm",)


@dataclass(frozen=True)
class Reordering:
    """A relabelled graph and the permutations to and from the caller's ids.

    The maps take numpy arrays (and give numpy arrays) or torch tensors (and
    give torch tensors, through `index_select`, so gradients flow).
    """

    #: the relabelled graph
    graph: Any
    #: new vertex id -> old vertex id (``x_new = x[vertex_order]``)
    vertex_order: np.ndarray
    #: new edge id -> old edge id (``w_new = w[edge_order]``)
    edge_order: np.ndarray

    def vertices_to_new(self, x: Any) -> Any:
        """Rows of a per-vertex tensor (old ids) in the new vertex order."""
        return _take(x, self.vertex_order, self.graph.num_vertices, "vertex")

    def vertices_to_old(self, x: Any) -> Any:
        """Rows of a per-vertex tensor (new ids) back in the caller's vertex order."""
        return _put(x, self.vertex_order, self.graph.num_vertices, "vertex")

    def edges_to_new(self, w: Any) -> Any:
        """Rows of a per-edge tensor (old edge ids) in the new edge order."""
        return _take(w, self.edge_order, self.graph.num_edges, "edge")

    def edges_to_old(self, w: Any) -> Any:
        """Rows of a per-edge tensor (new edge ids) back in the caller's edge order."""
        return _put(w, self.edge_order, self.graph.num_edges, "edge")

    def to_new(self, x: Any, domain: str | None) -> Any:
        """A kernel tensor of `domain` ("V", "E", or a parameter's None) in the new ids."""
        return self.vertices_to_new(x) if domain == "V" else self.edges_to_new(x) if domain == "E" else x

    def to_old(self, x: Any, domain: str | None) -> Any:
        """A kernel tensor of `domain` back in the caller's ids."""
        return self.vertices_to_old(x) if domain == "V" else self.edges_to_old(x) if domain == "E" else x


def _rows(x: Any, n: int, what: str) -> Any:
    shape = tuple(x.shape) if is_torch_tensor(x) else np.shape(x)
    if not shape or shape[0] != n:
        raise ArgumentError(f"a per-{what} tensor needs {n} rows, got shape {shape}")
    return x if is_torch_tensor(x) else np.asarray(x)


def _index(x: Any, order: np.ndarray) -> Any:
    import torch  # only for a caller's torch tensor: torch is loaded already

    return torch.tensor(order, device=x.device)  # a copy: torch refuses read-only arrays


def _take(x: Any, order: np.ndarray, n: int, what: str) -> Any:
    """x[order]: a torch tensor stays a torch tensor (on its device, in autograd)."""
    x = _rows(x, n, what)
    if is_torch_tensor(x):
        return x.index_select(0, _index(x, order))
    return np.take(x, order, axis=0)


def _put(x: Any, order: np.ndarray, n: int, what: str) -> Any:
    """out with out[order] = x: the inverse of _take."""
    x = _rows(x, n, what)
    if is_torch_tensor(x):
        return x.new_empty(x.shape).index_copy(0, _index(x, order), x)
    out = np.empty_like(x)
    out[order] = x
    return out


def rcm_vertex_order(graph: Any) -> np.ndarray:
    """Vertices in reverse Cuthill-McKee order of the undirected graph (new id -> old id)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    v = graph.num_vertices
    if v == 0:
        return np.zeros(0, dtype=np.int64)
    a = sp.csr_matrix((np.ones(graph.num_edges, dtype=np.int32), graph.in_src, graph.in_indptr), shape=(v, v))
    return reverse_cuthill_mckee((a + a.T).tocsr(), symmetric_mode=True).astype(np.int64)


def reorder(graph: Any, method: str = "rcm") -> Reordering:
    """The graph relabelled by `method` (see the module docstring)."""
    if method not in METHODS:
        raise ArgumentError(f"unknown reordering {method!r}: expected one of {', '.join(METHODS)}")
    if graph.bipartite:
        raise GraphError("a bipartite graph cannot be relabelled: its sources and destinations are different vertices")
    vertex_order = rcm_vertex_order(graph)
    new_id = np.empty_like(vertex_order)
    new_id[vertex_order] = np.arange(vertex_order.shape[0], dtype=np.int64)
    src, dst = new_id[graph.src], new_id[graph.dst]
    # by new destination, then by old edge id (a stable sort keeps the caller's order within a row)
    edge_order = np.argsort(dst, kind="stable").astype(np.int64)
    types = None if graph.edge_type is None else graph.edge_type[edge_order]
    relabelled = type(graph).from_coo(
        src[edge_order],
        dst[edge_order],
        num_vertices=graph.num_vertices,
        edge_type=types,
        num_relations=graph.num_relations,
    )
    vertex_order.setflags(write=False)
    edge_order.setflags(write=False)
    return Reordering(relabelled, vertex_order, edge_order)
