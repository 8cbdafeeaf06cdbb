"""PyG's node-classification models (GCN, GraphSAGE, GAT, GIN), run with PyG's layers or gnnc.nn's.

    python examples/pyg_node_classification.py --backend gnnc   # from gnnc.nn import ...
    python examples/pyg_node_classification.py --backend pyg    # from torch_geometric.nn import ...
    python examples/pyg_node_classification.py --compare --seeds 5   # both, the same seeds

The models are PyG's usual two-layer examples; the only difference between
the backends is the import line in `layers()`. Data: polblogs
(examples/data/polblogs.npz: 1,490 political blogs, their hyperlinks made
undirected, the blog's leaning as its label; from Debian's python3-graph-tool,
see examples/data/README.md). The blogs have no features, so each gets a
one-hot input. Splits are 60/20/20 per seed; accuracy is the test accuracy
at the epoch of best validation accuracy. Both backends start from the same
weights (the same seed, and gnnc.nn initialises as PyG does).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).parent


def layers(backend: str):
    """The one line that differs: where the layers come from."""
    if backend == "gnnc":
        from gnnc.nn import GATConv, GCNConv, GINConv, SAGEConv
    else:
        from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv
    return GCNConv, SAGEConv, GATConv, GINConv


def load_polblogs():
    data = np.load(HERE / "data" / "polblogs.npz")
    n = int(data["num_vertices"])
    src, dst = data["src"].astype(np.int64), data["dst"].astype(np.int64)
    pairs = np.unique(np.concatenate([np.stack([src, dst]), np.stack([dst, src])], axis=1), axis=1)
    pairs = pairs[:, pairs[0] != pairs[1]]
    return torch.from_numpy(pairs), torch.from_numpy(data["labels"].astype(np.int64)), n


def model(name: str, backend: str, n_in: int, hidden: int, n_out: int) -> torch.nn.Module:
    GCNConv, SAGEConv, GATConv, GINConv = layers(backend)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            if name == "gcn":
                self.conv1, self.conv2 = GCNConv(n_in, hidden), GCNConv(hidden, n_out)
            elif name == "sage":
                self.conv1, self.conv2 = SAGEConv(n_in, hidden), SAGEConv(hidden, n_out)
            elif name == "gat":
                self.conv1 = GATConv(n_in, hidden // 8, heads=8, dropout=0.6)
                self.conv2 = GATConv(hidden, n_out, heads=1, dropout=0.6)
            else:
                mlp = lambda i, o: torch.nn.Sequential(  # noqa: E731
                    torch.nn.Linear(i, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, o)
                )
                self.conv1, self.conv2 = GINConv(mlp(n_in, hidden)), GINConv(mlp(hidden, n_out))

        def forward(self, x, edge_index):
            x = F.dropout(x, p=0.5, training=self.training)
            x = F.elu(self.conv1(x, edge_index)) if name == "gat" else self.conv1(x, edge_index).relu()
            x = F.dropout(x, p=0.5, training=self.training)
            return self.conv2(x, edge_index)

    return Net()


def train(name: str, backend: str, seed: int, epochs: int, hidden: int, data) -> tuple[float, float]:
    """(test accuracy at the best validation epoch, seconds per epoch)."""
    edge_index, labels, n = data
    x = torch.eye(n)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g)
    train_idx, val_idx, test_idx = perm[: int(0.6 * n)], perm[int(0.6 * n) : int(0.8 * n)], perm[int(0.8 * n) :]
    torch.manual_seed(seed)
    net = model(name, backend, n, hidden, int(labels.max()) + 1)
    opt = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=5e-4)
    best_val, best_test, seconds = -1.0, 0.0, []
    for _ in range(epochs):
        start = time.perf_counter()
        net.train()
        opt.zero_grad()
        loss = F.cross_entropy(net(x, edge_index)[train_idx], labels[train_idx])
        loss.backward()
        opt.step()
        seconds.append(time.perf_counter() - start)
        net.eval()
        with torch.no_grad():
            pred = net(x, edge_index).argmax(-1)
        val = float((pred[val_idx] == labels[val_idx]).float().mean())
        if val > best_val:
            best_val, best_test = val, float((pred[test_idx] == labels[test_idx]).float().mean())
    return best_test, float(np.median(seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["gnnc", "pyg"], default="gnnc")
    parser.add_argument("--compare", action="store_true", help="run both backends and print the differences")
    parser.add_argument("--models", default="gcn,sage,gat,gin")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = load_polblogs()
    backends = ["gnnc", "pyg"] if args.compare else [args.backend]
    print(f"polblogs: {data[2]} vertices, {data[0].shape[1]} edges; {args.seeds} seeds, {args.epochs} epochs")
    for name in args.models.split(","):
        accs = {}
        for backend in backends:
            runs = [train(name, backend, seed, args.epochs, args.hidden, data) for seed in range(args.seeds)]
            accs[backend] = 100 * np.mean([a for a, _ in runs])
            ms = 1000 * np.median([s for _, s in runs])
            print(f"{name:5s} {backend:5s} accuracy {accs[backend]:.2f}% (mean of {args.seeds}), {ms:.1f} ms/epoch")
        if args.compare:
            print(f"{name:5s} gnnc - pyg: {accs['gnnc'] - accs['pyg']:+.2f} points")


if __name__ == "__main__":
    main()
