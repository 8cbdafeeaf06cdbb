"""A graph given by its edges alone, converted only where a call needs a `Graph`.

A mini-batch block is a new graph every call and is used once or twice: a
forward kernel on it, the gradient kernels on its reverse. Converting it to
a `Graph` (the in-CSR, degrees), then building plans and a prepared call in
Python costs a small block several times what its kernels do. A `CooGraph`
keeps the edges, copied, and the sizes; the runtime runs a kernel on it in
one native call that builds the in-CSR and the plans in C (the kernel's COO
entry, `runtime.module.Kernel`), and where it cannot (no entry, a decision
not made yet for the block's class, a schedule whose plans C does not build
the same way) it asks for `graph()`, the `Graph` made from the same edges,
built once and shared with the reversed view.
"""

from __future__ import annotations

import numpy as np

from gnnc.graph.graph import Graph


class CooGraph:
    """Edges `src[e] -> dst[e]` of a graph with `num_src` sources and `num_dst` destinations,
    ids in range (checked where they are used: by the native entry, or by `Graph`)."""

    __slots__ = ("src", "dst", "num_src", "num_dst", "num_edges", "_graph", "_forward", "_edges_sorted")

    #: no relation types: a kernel that reads them takes a typed Graph
    has_relations = False

    def __init__(self, src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int):
        self.src = src
        self.dst = dst
        self.num_src = num_src
        self.num_dst = num_dst
        self.num_edges = int(src.shape[0])
        self._graph: Graph | None = None
        self._edges_sorted: bool | None = None
        #: the graph this one is the reverse of (its Graph's reverse is this one's Graph)
        self._forward: CooGraph | None = None

    @classmethod
    def from_edge_index(cls, edge_index: np.ndarray, num_src: int, num_dst: int) -> CooGraph:
        """A copy of an int64 `[2, E]` array's edges: the caller's array may change afterwards."""
        edges = np.array(edge_index, dtype=np.int64, order="C", copy=True)
        return cls(edges[0], edges[1], num_src, num_dst)

    @property
    def num_vertices(self) -> int:
        """The destinations (as `Graph.num_vertices`)."""
        return self.num_dst

    @property
    def bipartite(self) -> bool:
        return self.num_src != self.num_dst

    @property
    def edges_sorted(self) -> bool:
        """Whether the edges are sorted by destination (as `Graph.edges_sorted`: what the
        default schedule of a large graph reads)."""
        if self._edges_sorted is None:
            self._edges_sorted = bool(np.all(self.dst[1:] >= self.dst[:-1]))
        return self._edges_sorted

    def reversed(self) -> CooGraph:
        """Every edge turned around, same edge ids (a view of the same arrays; the reverse of a
        reverse is its forward graph, which it holds, so no cycle keeps either alive)."""
        if self._forward is not None:
            return self._forward
        other = CooGraph(self.dst, self.src, self.num_dst, self.num_src)
        other._forward = self
        return other

    def graph(self) -> Graph:
        """The `Graph` of these edges (built once; a reversed view's is its forward Graph's
        reverse, so that both share what `Graph.reversed` shares). Raises the Graph's clear
        error for ids out of range."""
        if self._graph is None:
            if self._forward is not None:
                self._graph = self._forward.graph().reversed()
            else:
                self._graph = Graph.from_edge_index(np.stack([self.src, self.dst]), shape=(self.num_src, self.num_dst))
        return self._graph

    @property
    def converted(self) -> bool:
        """Whether `graph()` was built."""
        return self._graph is not None

    def __repr__(self) -> str:
        return f"<gnnc CooGraph: {self.num_src} sources, {self.num_dst} destinations, {self.num_edges} edges>"


__all__ = ["CooGraph"]
