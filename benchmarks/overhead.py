"""Per-call overhead of gnnc.nn on mini-batch blocks, against PyG's scatter path, in one process.

    python benchmarks/overhead.py                 # both parts, one thread
    python benchmarks/overhead.py --part call --reps 5000 --threads 1

Issue 26's target: on a small block (a bipartite block of 1,024 sources,
128 destinations and 1,280 edges, 64 features) one forward and backward of
gnnc's aggregation costs no more than PyG's scatter path (`x[src]` gathered
and `scatter(..., reduce="mean")`), both when the same edge_index comes
again and when each call brings a new one (mini-batch training: every batch
is a new graph, so its conversion -- checks, in-CSR and reversed CSR,
degrees, plans, the default schedule's decision -- is part of the call);
"new grouped" is a new block whose edges are listed destination by
destination, as samplers give them.

Issue 27's target (`--part block`): turning the blocks of a 1,024-seed,
fan-out (15, 10) batch into gnnc graphs costs well under 10% of a
GraphSAGE (mean) training step on them. The step runs on the same blocks
twice, interleaved: as new edge_index tensors (converted in the step) and as
the same tensors again (converted before); the difference is the conversion.

Times are per-thread CPU time (`time.thread_time`), medians of interleaved
repetitions, with the ratio of each interleaved pair: the machine these
targets were set on is shared, and CPU time is what the calls themselves cost.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import graphs  # noqa: E402
import procmem  # noqa: E402


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    threads = torch.get_num_threads()
    return f"{cpu}, Python {platform.python_version()}, torch {torch.__version__}, {threads} threads; {procmem.allocator()}"


def peak_mib(run: Any) -> float:
    """MiB of the transient RSS high-water mark over one call of `run`, above the RSS before it."""
    procmem.trim_heap()
    base = procmem.reset_peak()
    run()
    return (procmem.status("VmHWM") - base) / 2**20


def wall_medians(runs: dict[str, Any], reps: int) -> dict[str, float]:
    """Median wall ms of each callable in `runs`, interleaved (the order alternating each rep):
    wall time, where `paired`'s thread time would miss the kernels' other threads."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    for rep in range(reps):
        for k in list(runs) if rep % 2 == 0 else list(runs)[::-1]:
            start = time.perf_counter()
            runs[k]()
            times[k].append(time.perf_counter() - start)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def paired(runs: dict[str, Any], reps: int, make_args: Any, clock: Any = time.thread_time) -> dict[str, Any]:
    """Interleaved timings of each callable in `runs` (order alternating): medians and pair ratios.
    Thread CPU time by default (steadier on a shared machine); `time.perf_counter` where other
    threads do part of the work."""
    names = list(runs)
    times: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(reps):
        args = make_args(rep)
        order = names if rep % 2 == 0 else names[::-1]
        for name in order:
            start = clock()
            runs[name](*args[name])
            times[name].append(clock() - start)
    first, second = names
    ratios = [a / b for a, b in zip(times[first], times[second]) if b > 0]
    return {
        "ms": {n: statistics.median(t) * 1e3 for n, t in times.items()},
        "pair ratio": statistics.median(ratios),
    }


# ------------------------------------------------------------- small block


def small_block_calls(args: argparse.Namespace) -> None:
    """gnnc's mean aggregation against PyG's scatter on a 1,280-edge block, forward + backward."""
    from torch_geometric.utils import scatter

    from gnnc.nn.conv.aggregate import aggregate, kernels

    g = torch.Generator().manual_seed(0)
    num_src, num_dst, num_edges, features = 1024, 128, 1280, 64

    def block() -> torch.Tensor:
        src = torch.randint(0, num_src, (num_edges,), generator=g)
        dst = torch.randint(0, num_dst, (num_edges,), generator=g)
        return torch.stack([src, dst])

    blocks = [block() for _ in range(64)]
    # a sampler's blocks list their edges destination by destination (DGL's, PyG's)
    grouped = [b[:, torch.argsort(b[1], stable=True)] for b in blocks]
    x = torch.randn(num_src, features, requires_grad=True)
    pair = kernels("mean")

    def gnnc_call(edge_index: torch.Tensor) -> None:
        aggregate(pair, edge_index, x, (num_src, num_dst)).sum().backward()

    def pyg_call(edge_index: torch.Tensor) -> None:
        scatter(x[edge_index[0]], edge_index[1], dim=0, dim_size=num_dst, reduce="mean").sum().backward()

    runs = {"gnnc": gnnc_call, "pyg": pyg_call}
    print(f"# small block: {num_src} sources, {num_dst} destinations, {num_edges} edges, {features} features")
    clock = time.perf_counter if args.wall else time.thread_time
    print(f"# forward + backward, {'wall' if args.wall else 'thread CPU'} ms (median of {args.reps}, interleaved)")
    print(f"{'edge_index':12s} {'gnnc':>8s} {'pyg':>8s} {'gnnc/pyg':>9s}")
    for case, source, new in (("same", blocks, False), ("new", blocks, True), ("new grouped", grouped, True)):
        for i in range(100):  # warm-up: compiles, caches
            for f in runs.values():
                f(source[i % 64].clone() if new else source[0])

        def make(rep: int, source: list = source, new: bool = new) -> dict[str, tuple]:
            # a new tensor per call and framework: each converts its own
            return {n: ((source[rep % 64].clone() if new else source[0]),) for n in runs}

        got = paired(runs, args.reps, make, clock)
        ms = got["ms"]
        print(f"{case:12s} {ms['gnnc']:8.3f} {ms['pyg']:8.3f} {got['pair ratio']:9.2f}", flush=True)


# ------------------------------------------------------- sampled blocks


def sample_blocks(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, fanouts: list[int], rng: Any) -> list:
    """Uniform neighbour sampling, DGL's block convention: per layer, from the seeds outward,
    (edge_index, num_src, num_dst, source ids) with each block's destinations its first sources."""
    blocks = []
    frontier = seeds
    for fanout in fanouts:
        deg = indptr[frontier + 1] - indptr[frontier]
        take = np.minimum(deg, fanout)
        owner = np.repeat(np.arange(frontier.shape[0]), take)
        # fanout draws with replacement, as many samplers do for speed
        offsets = (rng.random(owner.shape[0]) * deg[owner]).astype(np.int64)
        neighbours = indices[indptr[frontier][owner] + offsets]
        ids, inverse = np.unique(np.concatenate([frontier, neighbours]), return_inverse=True)
        # relabel: destinations first (their own ids), then the new sources
        order = np.full(ids.shape[0], -1, dtype=np.int64)
        order[inverse[: frontier.shape[0]]] = np.arange(frontier.shape[0])
        rest = np.flatnonzero(order < 0)
        order[rest] = frontier.shape[0] + np.arange(rest.shape[0])
        src = order[inverse[frontier.shape[0] :]]
        edge_index = torch.from_numpy(np.stack([src, owner]))
        sources = np.empty(ids.shape[0], dtype=np.int64)
        sources[order] = ids
        blocks.append((edge_index, ids.shape[0], frontier.shape[0], sources))
        frontier = sources
    return blocks[::-1]  # the input layer first


def block_conversion_share(args: argparse.Namespace) -> None:
    """The share of a GraphSAGE step on a 1,024-seed, fan-out (15, 10) batch spent converting its blocks."""
    import gnnc.nn

    src, dst, n = graphs.rmat_edges(args.scale, 16, seed=0)
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    indices = src[order]
    rng = np.random.default_rng(0)
    features, hidden, classes = 128, 256, 16
    x_all = torch.randn(n, features)
    y_all = torch.randint(0, classes, (n,))
    torch.manual_seed(0)
    layers = torch.nn.ModuleList([gnnc.nn.SAGEConv(features, hidden), gnnc.nn.SAGEConv(hidden, classes)])
    opt = torch.optim.Adam(layers.parameters())
    batches = []
    for _ in range(8):
        seeds = rng.choice(n, 1024, replace=False)
        batches.append((sample_blocks(indptr, indices, seeds, [10, 15], rng), seeds))

    def step(blocks: list, seeds: np.ndarray) -> None:
        opt.zero_grad()
        h = x_all[torch.from_numpy(blocks[0][3])]
        for i, (edge_index, num_src, num_dst, _) in enumerate(blocks):
            h = layers[i]((h, h[:num_dst]), edge_index, size=(num_src, num_dst))
            if i + 1 < len(blocks):
                h = h.relu()
        F.cross_entropy(h, y_all[torch.from_numpy(seeds)]).backward()
        opt.step()

    def fresh(blocks: list) -> list:
        return [(e.clone(), s, d, ids) for e, s, d, ids in blocks]

    for blocks, seeds in batches:  # warm-up: every block's sizes compiled and decided once
        step(fresh(blocks), seeds)
        step(blocks, seeds)
    runs = {"new blocks": step, "converted": step}

    def make(rep: int) -> dict[str, tuple]:
        blocks, seeds = batches[rep % len(batches)]
        return {"new blocks": (fresh(blocks), seeds), "converted": (blocks, seeds)}

    got = paired(runs, args.block_reps, make)
    ms = got["ms"]
    share = 1 - 1 / got["pair ratio"]
    sizes = ", ".join(f"{e.shape[1]} edges {s}->{d}" for e, s, d, _ in batches[0][0])
    print(f"# GraphSAGE (mean) step, R-MAT scale {args.scale}, 1,024 seeds, fan-out (15, 10): {sizes}")
    print(f"# {features} -> {hidden} -> {classes}, thread CPU ms (median of {args.block_reps}, interleaved)")
    print(f"step with new blocks {ms['new blocks']:.2f} ms, with converted blocks {ms['converted']:.2f} ms")
    print(f"block conversion: {100 * share:.1f}% of the step (median pair ratio {got['pair ratio']:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["call", "block", "all"], default="all")
    parser.add_argument("--reps", type=int, default=3000, help="repetitions of the small-block calls")
    parser.add_argument("--block-reps", type=int, default=40, help="repetitions of the training steps")
    parser.add_argument("--scale", type=int, default=18, help="R-MAT scale of the sampled graph")
    parser.add_argument("--threads", type=int, default=1, help="torch's and gnnc's threads (CPU time is per thread)")
    parser.add_argument(
        "--wall", action="store_true", help="time the small-block calls by wall clock (other threads' work included)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {machine()}")
    if args.part in ("call", "all"):
        small_block_calls(args)
    if args.part in ("block", "all"):
        block_conversion_share(args)


if __name__ == "__main__":
    main()
