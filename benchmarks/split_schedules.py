"""`group neighbors G` and softmax `partition src K` against the unsplit kernel.

Paired in one process, interleaved (A, B, A, B, ...), medians of --reps:

    python benchmarks/split_schedules.py group       # hub graphs, 2 threads
    python benchmarks/split_schedules.py hub         # one hub, 1 and 2 threads
    python benchmarks/split_schedules.py partition   # gat on R-MAT at F = 512

Grouping only pays through parallelism (a hub's in-edges spread over
threads), so its ratio means something only when the threads really run at
once: the script first times a pure-Python spin in 1 and in 2 processes and
prints how many cores were free.
"""

from __future__ import annotations

import argparse
import sys
import time
from multiprocessing import Process
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from graphs import rmat  # noqa: E402

import gnnc  # noqa: E402

EXAMPLES = Path(__file__).parent.parent / "examples"


def _spin() -> None:
    s = 0
    for i in range(3_000_000):
        s += i


def free_cores() -> float:
    """Two processes' throughput over one's: about 2.0 on an idle two-core machine."""

    def run(n: int) -> float:
        procs = [Process(target=_spin) for _ in range(n)]
        start = time.perf_counter()
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        return time.perf_counter() - start

    one, two = min(run(1) for _ in range(3)), min(run(2) for _ in range(3))
    return 2 * one / two


def hub_graph(
    v: int = 100_000, hub_edges: int = 2_000_000, rand_edges: int = 200_000, hubs: int = 1, seed: int = 0
) -> gnnc.Graph:
    """`hubs` destinations sharing `hub_edges` in-edges, plus uniform random edges."""
    rng = np.random.default_rng(seed)
    src = np.concatenate([rng.integers(0, v, hub_edges), rng.integers(0, v, rand_edges)])
    dst = np.concatenate([rng.integers(0, hubs, hub_edges), rng.integers(0, v, rand_edges)])
    return gnnc.Graph.from_coo(src, dst, num_vertices=v)


def paired(graph: gnnc.Graph, name: str, dims: dict[str, int], schedules: list[str], reps: int, threads: int) -> None:
    kernels = {s: getattr(gnnc.compile(EXAMPLES / f"{name}.gnn", schedule=s), name) for s in schedules}
    rng = np.random.default_rng(1)
    inputs = {}
    for p in kernels[schedules[0]].signature.params:
        lead = {"V": [graph.num_vertices], "E": [graph.num_edges], None: []}[p.domain]
        shape = [dims[d] if isinstance(d, str) else d for d in p.shape]
        inputs[p.name] = rng.uniform(-1, 1, lead + shape).astype(np.float32)
    for k in kernels.values():  # warm-up: plans, page faults
        k(graph, threads=threads, **inputs)
    times: dict[str, list[float]] = {s: [] for s in schedules}
    for _ in range(reps):
        for s in schedules:
            start = time.perf_counter()
            kernels[s](graph, threads=threads, **inputs)
            times[s].append(time.perf_counter() - start)
    base = float(np.median(times[schedules[0]]))
    cells = [
        f"[{s}] {1e3 * float(np.median(times[s])):.1f} ms {base / float(np.median(times[s])):.2f}x" for s in schedules
    ]
    print(f"{name} {dims} threads={threads}: " + "  ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=["group", "hub", "partition"])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(f"free cores (of 2): {free_cores():.2f}", flush=True)
    if args.which == "hub":
        # the one-hub graph, 1 and 2 threads in one interleaved run: how much
        # parallelism the machine gave, and what grouping made of it
        graph = hub_graph()
        for name in ("gcn", "sage_max", "gin"):
            for threads in (1, args.threads):
                paired(graph, name, {"F": 32}, ["parallel dst", "group neighbors 1024"], args.reps, threads)
    elif args.which == "group":
        for label, graph in [
            ("1 hub, 2M in-edges, + 200K random", hub_graph()),
            ("4 hubs, 500K in-edges each, + 200K random", hub_graph(hubs=4)),
            ("rmat-16", rmat(16)),
        ]:
            deg = np.diff(graph.in_indptr)
            print(f"# {label}: V={graph.num_vertices} E={graph.num_edges} max in-degree {deg.max()}", flush=True)
            for name in ("gcn", "sage_max", "gin"):
                paired(
                    graph,
                    name,
                    {"F": 32},
                    ["parallel dst", "group neighbors 1024", "group neighbors 8192"],
                    args.reps,
                    args.threads,
                )
    else:
        for scale in (16, 17):
            graph = rmat(scale)
            print(f"# rmat-{scale}: V={graph.num_vertices} E={graph.num_edges}", flush=True)
            for dims in ({"H": 1, "F": 512}, {"H": 4, "F": 128}, {"H": 1, "F": 64}):
                paired(
                    graph,
                    "gat",
                    dims,
                    ["parallel dst", "partition src 2", "partition src 4", "partition src 8"],
                    args.reps,
                    args.threads,
                )


if __name__ == "__main__":
    main()
