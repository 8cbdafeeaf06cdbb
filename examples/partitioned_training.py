"""Full-batch GraphSAGE on a graph split over ranks: METIS parts, halo vertices, DDP.

    torchrun --nproc_per_node 2 examples/partitioned_training.py             # polblogs, split in 2
    python examples/partitioned_training.py --save /tmp/polblogs             # write the graph as .npy files
    torchrun --nproc_per_node 2 examples/partitioned_training.py --data /tmp/polblogs   # read them memory-mapped

Not an engine: a recipe on top of gnnc.nn and PyTorch's DDP. METIS
(`pymetis`, `pip install pymetis`) cuts the vertices into one part per
rank. Rank r owns its part and builds, from the in-CSR, its *halo*: the
vertices within L hops upstream of its own (L = layers), numbered after
them hop by hop, so that each layer is a block (`gnnc.nn.Block`) whose
destinations are the first vertices of its sources. It reads only those
vertices' feature rows (from a memory-mapped file with `--data`: the whole
feature matrix need not fit one rank's memory), runs the model on its
blocks, and takes the loss over its own training vertices, scaled so that
DDP's average of the ranks' gradients is the gradient of the whole graph's
mean loss: every epoch is exactly a full-batch epoch, computed in parts
(`tests/test_partitioned.py` checks it). The halo's vertices are computed
again by every rank that needs them; that redundancy is the price of no
communication inside the forward pass.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from distributed_training import Sage, load_polblogs  # noqa: E402

import gnnc  # noqa: E402
import gnnc.nn  # noqa: E402


def save(directory: Path) -> None:
    """polblogs as files: the in-CSR (indptr, indices), features, labels, a training mask."""
    edge_index, x, labels, n = load_polblogs()
    graph = gnnc.Graph(edge_index, num_vertices=n)
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / "indptr.npy", graph.in_indptr)
    np.save(directory / "indices.npy", graph.in_src)
    np.save(directory / "x.npy", x.numpy())
    np.save(directory / "labels.npy", labels.numpy())
    train = np.zeros(n, dtype=bool)
    train[torch.randperm(n, generator=torch.Generator().manual_seed(0))[: int(0.6 * n)].numpy()] = True
    np.save(directory / "train.npy", train)


def load(directory: Path | None) -> dict[str, np.ndarray]:
    """The graph's arrays: from `directory`'s files, memory-mapped read-only, or polblogs in memory."""
    if directory is not None:
        return {
            name: np.load(directory / f"{name}.npy", mmap_mode="r")
            for name in ("indptr", "indices", "x", "labels", "train")
        }
    edge_index, x, labels, n = load_polblogs()
    graph = gnnc.Graph(edge_index, num_vertices=n)
    train = np.zeros(n, dtype=bool)
    train[torch.randperm(n, generator=torch.Generator().manual_seed(0))[: int(0.6 * n)].numpy()] = True
    return {
        "indptr": graph.in_indptr,
        "indices": graph.in_src,
        "x": x.numpy(),
        "labels": labels.numpy(),
        "train": train,
    }


def metis_parts(indptr: np.ndarray, indices: np.ndarray, parts: int) -> np.ndarray:
    """The part of each vertex (METIS on the graph as undirected, self loops dropped)."""
    if parts == 1:
        return np.zeros(indptr.shape[0] - 1, dtype=np.int64)
    import pymetis

    n = indptr.shape[0] - 1
    dst = np.repeat(np.arange(n), np.diff(indptr))
    src = np.asarray(indices)
    keep = src != dst
    # each neighbour once, either way round
    pairs = np.unique(
        np.stack([np.concatenate([src[keep], dst[keep]]), np.concatenate([dst[keep], src[keep]])]), axis=1
    )
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs[0], minlength=n), out=xadj[1:])
    _, membership = pymetis.part_graph(parts, adjacency=pymetis.CSRAdjacency(xadj, pairs[1]))
    return np.asarray(membership, dtype=np.int64)


def in_neighbours(indptr: np.ndarray, indices: np.ndarray, vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sources, destination position in `vertices`) of every in-edge of `vertices`."""
    starts, ends = indptr[vertices], indptr[vertices + 1]
    degree = ends - starts
    owner = np.repeat(np.arange(vertices.shape[0]), degree)
    positions = np.repeat(starts - np.cumsum(degree) + degree, degree) + np.arange(owner.shape[0])
    return np.asarray(indices[positions]), owner


def halo_blocks(indptr: np.ndarray, indices: np.ndarray, owned: np.ndarray, layers: int):
    """(local vertex ids: the owned ones first, then each hop of halo; the blocks, first layer first)."""
    seen = np.zeros(indptr.shape[0] - 1, dtype=bool)
    seen[owned] = True
    hops, frontier = [owned], owned
    for _ in range(layers):
        sources, _ = in_neighbours(indptr, indices, frontier)
        new = np.unique(sources[~seen[sources]])
        seen[new] = True
        hops.append(new)
        frontier = new
    ids = np.concatenate(hops)
    local = np.full(indptr.shape[0] - 1, -1, dtype=np.int64)
    local[ids] = np.arange(ids.shape[0])
    counts = np.cumsum([h.shape[0] for h in hops])
    blocks = []
    for i in range(layers):
        num_dst, num_src = int(counts[layers - 1 - i]), int(counts[layers - i])
        sources, owner = in_neighbours(indptr, indices, ids[:num_dst])
        edge_index = torch.from_numpy(np.stack([local[sources], owner]))
        blocks.append(gnnc.nn.Block(edge_index, num_src, num_dst))
    return ids, blocks


def part_loss(model: torch.nn.Module, data: dict, ids: np.ndarray, blocks: list, num_owned: int, world: int):
    """The part's loss, scaled so that the mean over the ranks is the whole graph's mean loss."""
    x = torch.from_numpy(np.asarray(data["x"][ids], dtype=np.float32))  # only this part's rows are read
    owned = ids[:num_owned]
    train = np.asarray(data["train"][owned])
    labels = torch.from_numpy(np.asarray(data["labels"][owned[train]], dtype=np.int64))
    out = model(x, blocks)[torch.from_numpy(train)]
    total = int(np.count_nonzero(data["train"]))
    return F.cross_entropy(out, labels, reduction="sum") * world / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="a folder of .npy files (see --save), read memory-mapped")
    parser.add_argument("--save", type=Path, help="write polblogs there as .npy files and stop")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=32)
    args = parser.parse_args()
    if args.save:
        save(args.save)
        return
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)

    data = load(args.data)
    parts = metis_parts(data["indptr"], data["indices"], world)
    owned = np.flatnonzero(parts == rank)
    ids, blocks = halo_blocks(data["indptr"], data["indices"], owned, layers=2)
    print(f"rank {rank}: {owned.shape[0]} vertices of its own, {ids.shape[0] - owned.shape[0]} in its halo")
    torch.manual_seed(0)
    model = Sage(data["x"].shape[1], args.hidden, int(np.max(data["labels"])) + 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = part_loss(ddp, data, ids, blocks, owned.shape[0], world)
        loss.backward()
        optimizer.step()
        if rank == 0 and (epoch % 5 == 0 or epoch == args.epochs - 1):
            print(f"epoch {epoch}: loss of part 0 {loss.item() / world:.4f}, {time.perf_counter() - start:.3f} s")
    if distributed:
        # DDP's Reducer holds the process group: dropped first, so that the group is destroyed with
        # the GIL released (distributed_training.py says why)
        del ddp
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
