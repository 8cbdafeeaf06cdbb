"""Mini-batch GraphSAGE with gnnc.nn under PyTorch's DistributedDataParallel.

    torchrun --nproc_per_node 2 examples/distributed_training.py             # gloo on CPU, NCCL on GPUs
    torchrun --nproc_per_node 2 examples/distributed_training.py --epochs 5 --fanouts 10,5
    python examples/distributed_training.py                                  # one process, no launcher

gnnc runs inside PyTorch's distributed training; it has no engine of its
own. Every rank holds the graph and the features (polblogs, examples/data:
1,490 blogs, one-hot inputs, the blog's leaning as its label), takes its share
of the training vertices (the same shuffled list on every rank, rank r
taking every world-th one), samples a PyG NeighborLoader-format batch of
its seeds (`neighbor_sampling.py`; DGL's sampler serves as well), and runs a
2-layer gnnc.nn SAGEConv model on the batch's blocks (`gnnc.nn.blocks`).
DDP averages the gradients over the ranks after each backward. Every rank
runs the same number of steps (the shares are cut to equal lengths), as DDP's
collectives need.

gnnc's kernels run on the rank's share of the cores by default
(`gnnc.torch.threads`: torch's thread count capped at cores //
LOCAL_WORLD_SIZE). `--check-gradients DIR` runs one step and saves each
rank's averaged gradients and seeds there (tests/test_distributed.py compares
them with one process's gradients on the union of the ranks' batches).
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
from neighbor_sampling import NeighborSampler  # noqa: E402

import gnnc.nn  # noqa: E402
from gnnc.torch.threads import default_threads  # noqa: E402


def load_polblogs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(edge_index both ways, one-hot features, labels, vertices)."""
    data = np.load(HERE / "data" / "polblogs.npz")
    n = int(data["num_vertices"])
    src, dst = data["src"].astype(np.int64), data["dst"].astype(np.int64)
    pairs = np.unique(np.concatenate([np.stack([src, dst]), np.stack([dst, src])], axis=1), axis=1)
    pairs = pairs[:, pairs[0] != pairs[1]]
    return torch.from_numpy(pairs), torch.eye(n), torch.from_numpy(data["labels"].astype(np.int64)), n


class Sage(torch.nn.Module):
    """Two gnnc.nn SAGEConv layers on a batch's blocks."""

    def __init__(self, n_in: int, hidden: int, n_out: int):
        super().__init__()
        self.convs = torch.nn.ModuleList([gnnc.nn.SAGEConv(n_in, hidden), gnnc.nn.SAGEConv(hidden, n_out)])

    def forward(self, x: torch.Tensor, blocks: list) -> torch.Tensor:
        for i, (conv, block) in enumerate(zip(self.convs, blocks)):
            x = conv(x, block)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


def make_model(n_in: int, hidden: int, n_out: int, seed: int) -> Sage:
    torch.manual_seed(seed)  # every rank starts from the same weights (DDP also broadcasts rank 0's)
    return Sage(n_in, hidden, n_out)


def rank_seeds(train: torch.Tensor, rank: int, world: int, batch_size: int, epoch: int) -> list[torch.Tensor]:
    """This rank's batches of seeds for an epoch: its share of a shuffle all ranks agree on,
    cut so that every rank runs the same number of steps."""
    order = train[torch.randperm(train.shape[0], generator=torch.Generator().manual_seed(1000 + epoch))]
    steps = order.shape[0] // (world * batch_size)
    share = order[rank::world][: steps * batch_size]
    return list(share.split(batch_size))


def step_loss(model: torch.nn.Module, sampler: NeighborSampler, x, labels, seeds, seed: int) -> torch.Tensor:
    """The loss of one batch: sampled (reproducibly, from `seed`), its blocks, the model, cross-entropy."""
    batch = sampler.sample(seeds, torch.Generator().manual_seed(seed))
    out = model(x[batch.n_id], gnnc.nn.blocks(batch))
    return F.cross_entropy(out, labels[seeds])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--fanouts", default="10,5")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--check-gradients", metavar="DIR", help="one step; save the averaged gradients in DIR")
    args = parser.parse_args()

    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu")

    edge_index, x, labels, n = load_polblogs()
    train = torch.randperm(n, generator=torch.Generator().manual_seed(0))[: int(0.6 * n)]
    sampler = NeighborSampler(edge_index, n, [int(f) for f in args.fanouts.split(",")])
    model = make_model(x.shape[1], args.hidden, int(labels.max()) + 1, seed=0).to(device)
    x, labels = x.to(device), labels.to(device)
    # compile before the first step, on a batch like the ones to come: no rank waits for another's compile
    example = sampler.sample(train[: args.batch_size])
    gnnc.nn.warm_up(model, (x[example.n_id], [b.to(device) for b in gnnc.nn.blocks(example)]), kernels=False)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    if rank == 0:
        print(f"{world} rank(s); gnnc threads per rank: {default_threads()} (torch: {torch.get_num_threads()})")

    if args.check_gradients:
        seeds = rank_seeds(train, rank, world, args.batch_size, epoch=0)[0]
        step_loss(ddp, sampler, x, labels, seeds, seed=rank).backward()
        grads = {name: p.grad.detach().cpu() for name, p in model.named_parameters()}
        torch.save(
            {"grads": grads, "seeds": seeds, "threads": default_threads(), "world": world},
            Path(args.check_gradients) / f"rank{rank}.pt",
        )
        if distributed:
            del ddp  # before the group: see the end of main
            dist.destroy_process_group()
        return

    for epoch in range(args.epochs):
        start = time.perf_counter()
        ddp.train()
        total = 0.0
        batches = rank_seeds(train, rank, world, args.batch_size, epoch)
        for step, seeds in enumerate(batches):
            optimizer.zero_grad()
            loss = step_loss(ddp, sampler, x, labels, seeds.to(device), seed=epoch * 100_000 + step * world + rank)
            loss.backward()
            optimizer.step()
            total += loss.item()
        seconds = time.perf_counter() - start
        if rank == 0:
            print(
                f"epoch {epoch}: {len(batches)} steps per rank, loss {total / max(1, len(batches)):.4f}, {seconds:.2f} s"
            )
    if rank == 0:
        model.eval()
        with torch.no_grad():
            test = torch.arange(n)[~torch.isin(torch.arange(n), train)]
            batch = sampler.sample(test, torch.Generator().manual_seed(1))
            pred = model(x[batch.n_id], [b.to(device) for b in gnnc.nn.blocks(batch)]).argmax(-1)
            print(f"test accuracy {float((pred == labels[test]).float().mean()):.3f}")
    if distributed:
        # DDP's Reducer holds the process group: destroyed with it (when main returns), the group
        # joins gloo's threads holding the GIL, and a thread that needs the GIL to free a finished
        # collective's tensors hangs the exit now and then (torch issue 56297). Dropped first, the
        # group goes in destroy_process_group, whose binding releases the GIL.
        del ddp
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
