"""Training epochs of 2-layer models built from gnnc.nn against the same models from PyG.

    python benchmarks/nn.py                                   # rmat-16 (1M edges), hidden 64
    python benchmarks/nn.py --graph polblogs --hidden 64,256 --models gcn,sage_mean --reps 5

Issue 26's target: every cell (GCN, GraphSAGE mean and max, GAT with 4
heads, GIN; mdual and an R-MAT graph of >= 1M edges; hidden 64 and 256) at
least 3x faster than the best of PyG eager, PyG under torch.compile and
DGL, with lower peak memory. This script measures gnnc.nn against PyG
eager so far (the other baselines and peak memory are still to add).

Both frameworks train the same model (`--in-features` random inputs,
random labels, cross-entropy over every vertex, Adam) from the same
weights (the PyG model's state_dict is loaded into the gnnc one); an epoch
is forward, backward and step. Times are medians over `--reps` epochs
taken round-robin, the order alternating, after one warm-up epoch each
(which compiles gnnc's kernels). Ratio = PyG time / gnnc time.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import graphs  # noqa: E402


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    return f"{cpu}, {platform.python_version()}, torch {torch.__version__}, {torch.get_num_threads()} threads"


def build(name: str, lib: Any, d_in: int, hidden: int, d_out: int) -> torch.nn.Module:
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            if name == "gcn":
                self.c1, self.c2 = lib.GCNConv(d_in, hidden), lib.GCNConv(hidden, d_out)
            elif name.startswith("sage"):
                aggr = name.split("_")[1]
                self.c1, self.c2 = lib.SAGEConv(d_in, hidden, aggr=aggr), lib.SAGEConv(hidden, d_out, aggr=aggr)
            elif name == "gat":
                self.c1 = lib.GATConv(d_in, hidden // 4, heads=4)
                self.c2 = lib.GATConv(hidden, d_out, heads=1)
            else:
                torch.manual_seed(0)

                def mlp(i: int, o: int) -> torch.nn.Module:
                    return torch.nn.Sequential(torch.nn.Linear(i, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, o))

                self.c1, self.c2 = lib.GINConv(mlp(d_in, hidden)), lib.GINConv(mlp(hidden, d_out))

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    return Net()


def epoch(model, opt, x, edge_index, y) -> float:
    start = time.perf_counter()
    opt.zero_grad()
    F.cross_entropy(model(x, edge_index), y).backward()
    opt.step()
    return time.perf_counter() - start


def main() -> None:
    import torch_geometric.nn

    import gnnc.nn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="rmat-16")
    parser.add_argument("--hidden", default="64")
    parser.add_argument("--models", default="gcn,sage_mean,sage_max,gat,gin")
    parser.add_argument("--in-features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.graph.startswith("rmat-"):
        src, dst, n = graphs.rmat_edges(int(args.graph.split("-")[1]), 16, seed=0)
    else:
        src, dst, n = graphs.edges(args.graph)
    edge_index = torch.from_numpy(np.stack([np.asarray(src, np.int64), np.asarray(dst, np.int64)]))
    print(f"# {machine()}")
    print(f"# {args.graph}: {n} vertices, {edge_index.shape[1]} edges, {args.in_features} input features")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, args.in_features, generator=g)
    y = torch.randint(0, args.classes, (n,), generator=g)
    print(f"{'model':10s} {'hidden':>6s} {'pyg ms':>9s} {'gnnc ms':>9s} {'ratio':>6s}")
    for hidden in map(int, args.hidden.split(",")):
        for name in args.models.split(","):
            torch.manual_seed(0)
            pyg = build(name, torch_geometric.nn, args.in_features, hidden, args.classes)
            ours = build(name, gnnc.nn, args.in_features, hidden, args.classes)
            ours.load_state_dict(pyg.state_dict())
            runs = {
                "pyg": (pyg, torch.optim.Adam(pyg.parameters())),
                "gnnc": (ours, torch.optim.Adam(ours.parameters())),
            }
            times: dict[str, list[float]] = {"pyg": [], "gnnc": []}
            for m, opt in runs.values():
                epoch(m, opt, x, edge_index, y)  # warm-up: gnnc compiles here
            for rep in range(args.reps):
                for key in ("pyg", "gnnc") if rep % 2 == 0 else ("gnnc", "pyg"):
                    times[key].append(epoch(*runs[key], x, edge_index, y))
            p, q = 1000 * np.median(times["pyg"]), 1000 * np.median(times["gnnc"])
            print(f"{name:10s} {hidden:6d} {p:9.1f} {q:9.1f} {p / q:6.2f}", flush=True)


if __name__ == "__main__":
    main()
