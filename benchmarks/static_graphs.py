"""Static graphs: gnnc.nn against PyG on x of [batch, num_nodes, channels] sharing one edge_index.

    python benchmarks/static_graphs.py                       # 207 vertices (METR-LA's sensors), 1,722 edges
    python benchmarks/static_graphs.py --nodes 2000 --edges 20000 --batch 32 --features 128

Spatio-temporal models run a GNN layer on a batch of time steps (or
samples) over one road network: PyG's `node_dim=-2`, which GCNConv,
SAGEConv and GraphConv take. gnnc runs the batch as one block-diagonal
graph (`gnnc/nn/static_graphs.py`). One forward and backward of each layer
(features need a gradient, edge weights for GCNConv and GraphConv), the
same edge_index every call; interleaved, medians of wall time, and each
framework's transient peak over its first call (the RSS high-water mark,
measured before the timings, each framework alone; gnnc's first call also
builds its graph). The graph is random: the traffic datasets are not in a
package.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from overhead import machine, peak_mib, wall_medians  # noqa: E402

LAYERS = ("GCNConv", "SAGEConv", "GraphConv")


def step(layer: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor, extra: tuple) -> None:
    layer(x, edge_index, *extra).sum().backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=207)
    parser.add_argument("--edges", type=int, default=1722)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import torch_geometric.nn as pyg

    import gnnc.nn as gnn

    print(f"# {machine()}")
    n, e, b, f = args.nodes, args.edges, args.batch, args.features
    print(f"# random graph: {n} vertices, {e} edges; x [{b}, {n}, {f}]; forward + backward, ms (median of {args.reps})")
    generator = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, n, (2, e), generator=generator)
    weight = torch.rand(e, generator=generator)
    x = torch.randn(b, n, f, generator=generator, requires_grad=True)
    print(f"{'layer':<10} {'pyg ms':>8} {'gnnc ms':>8} {'pyg/gnnc':>9} {'pyg MiB':>8} {'gnnc MiB':>9}")
    for name in LAYERS:
        torch.manual_seed(0)
        ours = getattr(gnn, name)(f, f)
        theirs = getattr(pyg, name)(f, f)
        ours.load_state_dict(theirs.state_dict())
        extra = (weight,) if name != "SAGEConv" else ()
        runs = {
            "pyg": lambda m=theirs: step(m, x, edge_index, extra),
            "gnnc": lambda m=ours: step(m, x, edge_index, extra),
        }
        peaks = {k: peak_mib(r) for k, r in runs.items()}  # the first call of each: its graph, its compile
        for r in runs.values():
            r()
        ms = wall_medians(runs, args.reps)
        print(
            f"{name:<10} {ms['pyg']:8.2f} {ms['gnnc']:8.2f} {ms['pyg'] / ms['gnnc']:9.2f} "
            f"{peaks['pyg']:8.0f} {peaks['gnnc']:9.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
