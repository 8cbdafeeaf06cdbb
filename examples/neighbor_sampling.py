"""A small neighbour sampler in torch that makes batches in PyG's NeighborLoader format.

PyG's own sampler needs pyg-lib or torch-sparse (no wheels for every torch);
this one is plain torch, for the examples. `NeighborSampler(edge_index,
num_nodes, fanouts).sample(seeds)` returns a `SampledBatch` laid out as
NeighborLoader's: the seeds first, then each hop's new vertices; `n_id`
(global ids), `edge_index` (local ids, `[neighbour, vertex]`, hop by hop),
`batch_size`, `num_sampled_nodes`, `num_sampled_edges`. `gnnc.nn.blocks(batch)`
turns it into one block per layer.

Each vertex keeps at most `fanout` of its in-neighbours, drawn uniformly
with replacement and the repeats dropped (so a vertex of high degree may
keep a few fewer); the draw follows `torch.Generator` `generator`, so a
batch is reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class SampledBatch:
    """A sampled subgraph as PyG's NeighborLoader lays one out (attributes of the same names)."""

    n_id: torch.Tensor
    edge_index: torch.Tensor
    batch_size: int
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]

    @property
    def num_nodes(self) -> int:
        return int(self.n_id.shape[0])


class NeighborSampler:
    """Samples `fanouts[i]` in-neighbours per vertex at hop i + 1 (first hop first)."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int, fanouts: Sequence[int]):
        dst = edge_index[1]
        order = torch.argsort(dst, stable=True)
        self.sources = edge_index[0][order].contiguous()  # in-neighbours, grouped by vertex
        self.indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
        self.indptr[1:] = torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0)
        self.fanouts = list(fanouts)
        self._local = torch.full((num_nodes,), -1, dtype=torch.int64)

    @classmethod
    def from_csc(cls, indptr: torch.Tensor, indices: torch.Tensor, fanouts: Sequence[int]) -> NeighborSampler:
        """From an in-CSR (indices: each vertex's in-neighbours, grouped by vertex), used as it is:
        no sort, no copy (a memory-mapped one stays mapped)."""
        sampler = cls.__new__(cls)
        sampler.sources, sampler.indptr, sampler.fanouts = indices, indptr, list(fanouts)
        sampler._local = torch.full((indptr.shape[0] - 1,), -1, dtype=torch.int64)
        return sampler

    def sample(self, seeds: torch.Tensor, generator: torch.Generator | None = None) -> SampledBatch:
        local = self._local
        n_id = [seeds]
        local[seeds] = torch.arange(seeds.shape[0])
        count = seeds.shape[0]
        rows, cols, nodes, edges = [], [], [int(count)], []
        frontier = seeds
        for fanout in self.fanouts:
            start = self.indptr[frontier]
            degree = self.indptr[frontier + 1] - start
            # every in-edge of a vertex of degree <= fanout; `fanout` draws for the others
            small = degree <= fanout
            owner_all = torch.repeat_interleave(torch.nonzero(small).flatten(), degree[small])
            first = torch.repeat_interleave(
                start[small] - torch.cumsum(degree[small], 0) + degree[small], degree[small]
            )
            pos_all = first + torch.arange(owner_all.shape[0])
            big = torch.nonzero(~small).flatten()
            draws = torch.rand(big.shape[0], fanout, generator=generator)
            pos_big = (start[big, None] + (draws * degree[big, None]).long()).flatten()
            owner_big = big.repeat_interleave(fanout)
            owner = torch.cat([owner_all, owner_big])
            pos = torch.cat([pos_all, pos_big])
            keep = torch.unique(owner * self.sources.shape[0] + pos, return_inverse=False)
            owner, pos = keep // self.sources.shape[0], keep % self.sources.shape[0]
            neighbour = self.sources[pos]
            fresh = torch.unique(neighbour[local[neighbour] < 0])
            local[fresh] = count + torch.arange(fresh.shape[0])
            count += fresh.shape[0]
            rows.append(local[neighbour])
            cols.append(local[frontier[owner]])
            n_id.append(fresh)
            nodes.append(int(fresh.shape[0]))
            edges.append(int(neighbour.shape[0]))
            frontier = fresh
        ids = torch.cat(n_id)
        local[ids] = -1  # ready for the next batch
        return SampledBatch(ids, torch.stack([torch.cat(rows), torch.cat(cols)]), int(seeds.shape[0]), nodes, edges)
