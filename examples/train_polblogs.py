"""Trains 2-layer GCN, GraphSAGE (mean, max) and GAT models on polblogs with gnnc kernels and with PyG.

    python examples/train_polblogs.py [--seeds 5] [--epochs 200] [--hidden 64] [--threads 2]
                                      [--models gcn,sage_mean,sage_max,gat]

Data: examples/data/polblogs.npz (1,490 political blogs, hyperlinks, the
blog's leaning as its label; from Debian's python3-graph-tool, see
examples/data/README.md). The blogs have no features, so each vertex gets a
one-hot input (the first layer learns an embedding per blog). The hyperlinks
are made undirected, duplicates merged and one self loop per vertex added, so
that `gcn_norm`'s `rsqrt(deg_out(u) * deg_in(v))` is GCN's symmetric
normalisation; both frameworks get the same edges, splits (60/20/20 per seed)
and initial weights.

The gnnc models call the example kernels through `gnnc.torch` (forward and
generated gradient kernels); the PyG models use GCNConv / SAGEConv / GATConv.
Accuracy is the test accuracy at the epoch of best validation accuracy.
GraphSAGE-max aggregates the layer's input as SAGEConv(aggr="max") does
(max does not commute with the projection); GAT (8 heads of 8, then one head)
projects first and runs `gat_conv.gnn`, starting from a copy of the PyG
model's initial weights.

One run (`--seeds 5 --epochs 60 --hidden 64 --threads 2`, on a 2-core machine
shared with other jobs, so times are noisy): GCN gnnc 91.01% / PyG 89.80%,
78 ms / 411 ms per epoch; GraphSAGE-mean gnnc 90.34% / PyG 89.73%,
300 ms / 608 ms. The SAGE comparison is not like for like in cost: the gnnc
model aggregates after projecting (1490 -> 64), PyG's SAGEConv aggregates the
1490-wide one-hot input. `--seeds 5 --epochs 60 --models sage_max,gat` (same
machine, as noisy): GraphSAGE-max gnnc 89.66% / PyG 89.93%, 200 ms / 239 ms
per epoch (both aggregate the 1490-wide input in the first layer); GAT gnnc
89.73% / PyG 89.66%, 12 ms / 20 ms. Again after training started keeping
softmax weights and argmax ids from the forward pass (same accuracies, a
busier machine): 122 ms / 590 ms and 99 ms / 181 ms.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

import gnnc
import gnnc.torch as gt

HERE = Path(__file__).parent


def load_polblogs():
    data = np.load(HERE / "data" / "polblogs.npz")
    n = int(data["num_vertices"])
    src, dst = data["src"].astype(np.int64), data["dst"].astype(np.int64)
    pairs = np.unique(np.concatenate([np.stack([src, dst]), np.stack([dst, src])], axis=1), axis=1)
    pairs = pairs[:, pairs[0] != pairs[1]]
    loops = np.arange(n)
    edge_index = np.concatenate([pairs, np.stack([loops, loops])], axis=1)
    return torch.from_numpy(edge_index), torch.from_numpy(data["labels"].astype(np.int64)), n


class GnncGCN(torch.nn.Module):
    def __init__(self, n_in, hidden, n_out, graph):
        super().__init__()
        self.graph = graph
        self.conv = gt.kernel(HERE / "gcn_norm.gnn", "gcn_norm")
        self.lin1 = torch.nn.Linear(n_in, hidden, bias=False)
        self.b1 = torch.nn.Parameter(torch.zeros(hidden))
        self.lin2 = torch.nn.Linear(hidden, n_out, bias=False)
        self.b2 = torch.nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        h = F.relu(self.conv(self.graph, self.lin1(x)) + self.b1)
        h = F.dropout(h, 0.5, self.training)
        return self.conv(self.graph, self.lin2(h)) + self.b2


class GnncSAGE(torch.nn.Module):
    def __init__(self, n_in, hidden, n_out, graph):
        super().__init__()
        self.graph = graph
        self.mean = gt.kernel(HERE / "sage_mean.gnn", "sage_mean")
        self.l1, self.r1 = torch.nn.Linear(n_in, hidden), torch.nn.Linear(n_in, hidden, bias=False)
        self.l2, self.r2 = torch.nn.Linear(hidden, n_out), torch.nn.Linear(hidden, n_out, bias=False)

    def forward(self, x):
        # mean(x) W = mean(x W): the aggregation runs on the narrower side
        h = F.relu(self.mean(self.graph, self.l1(x)) + self.r1(x))
        h = F.dropout(h, 0.5, self.training)
        return self.mean(self.graph, self.l2(h)) + self.r2(h)


class GnncSAGEMax(torch.nn.Module):
    def __init__(self, n_in, hidden, n_out, graph):
        super().__init__()
        self.graph = graph
        self.max = gt.kernel(HERE / "sage_max.gnn", "sage_max")
        self.l1, self.r1 = torch.nn.Linear(n_in, hidden), torch.nn.Linear(n_in, hidden, bias=False)
        self.l2, self.r2 = torch.nn.Linear(hidden, n_out), torch.nn.Linear(hidden, n_out, bias=False)

    def forward(self, x):
        h = F.relu(self.l1(self.max(self.graph, x)) + self.r1(x))
        h = F.dropout(h, 0.5, self.training)
        return self.l2(self.max(self.graph, h)) + self.r2(h)


class GnncGATLayer(torch.nn.Module):
    """GATConv's parameters (lin, att_src, att_dst, bias) around the fused gat_conv kernel."""

    def __init__(self, conv, n_in, heads, channels, graph):
        super().__init__()
        self.conv, self.graph, self.heads, self.channels = conv, graph, heads, channels
        self.lin = torch.nn.Linear(n_in, heads * channels, bias=False)
        self.att_src = torch.nn.Parameter(torch.empty(1, heads, channels))
        self.att_dst = torch.nn.Parameter(torch.empty(1, heads, channels))
        self.bias = torch.nn.Parameter(torch.zeros(heads * channels))
        torch.nn.init.xavier_uniform_(self.lin.weight)
        torch.nn.init.xavier_uniform_(self.att_src)
        torch.nn.init.xavier_uniform_(self.att_dst)

    def forward(self, x):
        h = self.lin(x).view(-1, self.heads, self.channels)
        el, er = (h * self.att_src).sum(-1), (h * self.att_dst).sum(-1)
        return self.conv(self.graph, h, el, er).reshape(-1, self.heads * self.channels) + self.bias


class GnncGAT(torch.nn.Module):
    HEADS = 8

    def __init__(self, n_in, hidden, n_out, graph):
        super().__init__()
        conv = gt.kernel(HERE / "gat_conv.gnn", "gat_conv")
        self.g1 = GnncGATLayer(conv, n_in, self.HEADS, hidden // self.HEADS, graph)
        self.g2 = GnncGATLayer(conv, hidden, 1, n_out, graph)

    def forward(self, x):
        h = F.dropout(F.elu(self.g1(x)), 0.5, self.training)
        return self.g2(h)

    def copy_from(self, pyg):
        """The PyG model's initial weights (GATConv keeps lin as [out, in], as torch.nn.Linear)."""
        with torch.no_grad():
            for mine, theirs in ((self.g1, pyg.c1), (self.g2, pyg.c2)):
                mine.lin.weight.copy_(theirs.lin.weight)
                mine.att_src.copy_(theirs.att_src)
                mine.att_dst.copy_(theirs.att_dst)
                mine.bias.copy_(theirs.bias)
        return self


def pyg_models():
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    class PygGCN(torch.nn.Module):
        def __init__(self, n_in, hidden, n_out, edge_index):
            super().__init__()
            self.edge_index = edge_index
            self.c1 = GCNConv(n_in, hidden, add_self_loops=False)
            self.c2 = GCNConv(hidden, n_out, add_self_loops=False)

        def forward(self, x):
            h = F.dropout(F.relu(self.c1(x, self.edge_index)), 0.5, self.training)
            return self.c2(h, self.edge_index)

    class PygSAGE(torch.nn.Module):
        def __init__(self, n_in, hidden, n_out, edge_index):
            super().__init__()
            self.edge_index = edge_index
            self.c1 = SAGEConv(n_in, hidden, aggr="mean")
            self.c2 = SAGEConv(hidden, n_out, aggr="mean")

        def forward(self, x):
            h = F.dropout(F.relu(self.c1(x, self.edge_index)), 0.5, self.training)
            return self.c2(h, self.edge_index)

    class PygSAGEMax(PygSAGE):
        def __init__(self, n_in, hidden, n_out, edge_index):
            torch.nn.Module.__init__(self)
            self.edge_index = edge_index
            self.c1 = SAGEConv(n_in, hidden, aggr="max")
            self.c2 = SAGEConv(hidden, n_out, aggr="max")

    class PygGAT(torch.nn.Module):
        def __init__(self, n_in, hidden, n_out, edge_index):
            super().__init__()
            self.edge_index = edge_index
            heads = GnncGAT.HEADS
            self.c1 = GATConv(n_in, hidden // heads, heads=heads, add_self_loops=False)
            self.c2 = GATConv(hidden, n_out, heads=1, add_self_loops=False)

        def forward(self, x):
            h = F.dropout(F.elu(self.c1(x, self.edge_index)), 0.5, self.training)
            return self.c2(h, self.edge_index)

    return {"gcn": PygGCN, "sage_mean": PygSAGE, "sage_max": PygSAGEMax, "gat": PygGAT}


def train(model, x, y, masks, epochs, desc):
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    train_mask, val_mask, test_mask = masks
    best_val, test_at_best, times = -1.0, 0.0, []
    for _ in tqdm(range(epochs), desc=desc, leave=False, mininterval=0.5):
        start = time.perf_counter()
        model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model(x)[train_mask], y[train_mask])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        model.eval()
        with torch.no_grad():
            pred = model(x).argmax(1)
        val = float((pred[val_mask] == y[val_mask]).float().mean())
        if val > best_val:
            best_val, test_at_best = val, float((pred[test_mask] == y[test_mask]).float().mean())
    return test_at_best, float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="gcn,sage_mean,sage_max,gat")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    edge_index, y, n = load_polblogs()
    graph = gnnc.Graph(edge_index.numpy(), num_vertices=n)
    x = torch.eye(n)
    pyg = pyg_models()
    gnnc_models = {"gcn": GnncGCN, "sage_mean": GnncSAGE, "sage_max": GnncSAGEMax, "gat": GnncGAT}
    print(f"polblogs: {n} vertices, {edge_index.shape[1]} edges (undirected, self loops), 2 classes")
    for name in args.models.split(","):
        results = {"gnnc": [], "pyg": []}
        for seed in range(args.seeds):
            perm = torch.from_numpy(np.random.default_rng(seed).permutation(n))
            masks = tuple(
                torch.zeros(n, dtype=torch.bool).index_fill_(0, perm[a:b], True)
                for a, b in ((0, int(0.6 * n)), (int(0.6 * n), int(0.8 * n)), (int(0.8 * n), n))
            )
            for framework in ("gnnc", "pyg"):
                torch.manual_seed(seed)
                if framework == "gnnc" and name == "gat":  # the same initial weights as PyG's
                    model = GnncGAT(n, args.hidden, 2, graph).copy_from(pyg[name](n, args.hidden, 2, edge_index))
                elif framework == "gnnc":
                    model = gnnc_models[name](n, args.hidden, 2, graph)
                else:
                    model = pyg[name](n, args.hidden, 2, edge_index)
                results[framework].append(train(model, x, y, masks, args.epochs, f"{name} {framework} seed {seed}"))
        for framework, runs in results.items():
            acc = np.mean([r[0] for r in runs]) * 100
            epoch = np.median([r[1] for r in runs]) * 1000
            print(
                f"{name:10s} {framework:5s} test accuracy {acc:6.2f}% (mean of {args.seeds} seeds)  "
                f"epoch (forward + backward) {epoch:7.2f} ms"
            )


if __name__ == "__main__":
    main()
