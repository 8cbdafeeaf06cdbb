"""Entity classification on WordNet with R-GCN and RGAT, from PyG's layers or gnnc.nn's.

    python examples/wordnet_rgcn.py --backend gnnc      # from gnnc.nn import RGATConv, RGCNConv
    python examples/wordnet_rgcn.py --backend pyg       # from torch_geometric.nn import RGATConv, RGCNConv
    python examples/wordnet_rgcn.py --compare --seeds 5 # both, the same seeds and splits
    python examples/wordnet_rgcn.py --vertices 3000 --epochs 5 --seeds 1   # a quick look on a subgraph

Data: WordNet 3.0 (Princeton University), from Debian's wordnet-base
package, committed processed as examples/data/wordnet.npz (see
examples/data/README.md; `--data` reads the package's data files instead,
e.g. the `wordnet-base/usr/share/wordnet` that benchmarks/fetch_graphs.sh
unpacks). Every synset is a vertex; its 26 kinds of pointers (hypernym,
hyponym, meronyms, antonym, similar to, derivationally related, ...) are
the relations; the task is to predict the synset's lexicographer file (45
classes: noun.animal, verb.motion, adj.all, ...) from its gloss (a hashed
bag of words, `WordNet.features`) and its neighbours. The split (30% train,
10% validation, 60% test, stratified by nothing) is the same for every
seed; a seed sets the weights and dropout. Accuracy is the test accuracy at
the epoch of best validation accuracy.

Models: R-GCN, two RGCNConv (mean per relation, a root weight) with ReLU and
dropout between; RGAT, a linear projection to `--hidden`, two RGATConv
(across-relation additive attention, `--heads` heads) each added to its
input (PyG's RGATConv has no weight for the vertex itself), then a linear
classifier. PyG's RGATConv gathers a [K, N] matrix per edge (E x K x N
floats: 0.6 GB at K = N = 32 on WordNet), which sets the RGAT's width.
The only difference between the backends is the import line in `layers()`.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

# torch's and gnnc's OpenMP runtimes share the process (--compare): an idle one's workers, spinning,
# would slow the other down
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.csgraph as csgraph  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from gnnc.graph.wordnet import WordNet, load_wordnet  # noqa: E402

HERE = Path(__file__).parent
DATA = HERE / "data" / "wordnet.npz"
MODELS = ("rgcn", "rgat")


def layers(backend: str):
    """The one line that differs: where the layers come from."""
    if backend == "gnnc":
        from gnnc.nn import RGATConv, RGCNConv
    else:
        from torch_geometric.nn import RGATConv, RGCNConv
    return RGCNConv, RGATConv


@dataclass
class Task:
    """The graph as tensors, the features, the labels and the split."""

    edge_index: torch.Tensor
    edge_type: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor
    num_relations: int
    num_classes: int


def neighbourhood(wn: WordNet, count: int, seed: int) -> np.ndarray:
    """`count` synsets in breadth-first order (edges taken both ways) from random starts: a connected
    piece of WordNet rather than a scatter of vertices with no edges between them."""
    n = wn.num_vertices
    a = sp.coo_matrix((np.ones(wn.num_edges), (wn.src, wn.dst)), shape=(n, n)).tocsr()
    a = (a + a.T).tocsr()
    rng = np.random.default_rng(seed)
    taken = np.zeros(n, dtype=bool)
    order: list[np.ndarray] = []
    while taken.sum() < min(count, n):
        start = int(rng.choice(np.flatnonzero(~taken)))
        reached = csgraph.breadth_first_order(a, start, directed=False, return_predecessors=False)
        reached = reached[~taken[reached]][: count - int(taken.sum())]
        taken[reached] = True
        order.append(reached)
    return np.concatenate(order)


def make_task(wn: WordNet, features: int, split_seed: int = 0) -> Task:
    n = wn.num_vertices
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(split_seed))
    a, b = int(0.3 * n), int(0.4 * n)
    return Task(
        torch.from_numpy(wn.edge_index()),
        torch.from_numpy(wn.edge_type),
        torch.from_numpy(wn.features(features)),
        torch.from_numpy(wn.labels),
        perm[:a],
        perm[a:b],
        perm[b:],
        wn.num_relations,
        wn.num_classes,
    )


class RGCN(torch.nn.Module):
    def __init__(self, backend: str, n_in: int, hidden: int, n_out: int, relations: int) -> None:
        super().__init__()
        RGCNConv, _ = layers(backend)
        self.conv1 = RGCNConv(n_in, hidden, relations)
        self.conv2 = RGCNConv(hidden, n_out, relations)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_type: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv1(x, edge_index, edge_type).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index, edge_type)


class RGAT(torch.nn.Module):
    def __init__(self, backend: str, n_in: int, hidden: int, n_out: int, relations: int, heads: int) -> None:
        super().__init__()
        _, RGATConv = layers(backend)
        self.lin_in = torch.nn.Linear(n_in, hidden)
        self.conv1 = RGATConv(hidden, hidden // heads, relations, heads=heads)
        self.conv2 = RGATConv(hidden, hidden // heads, relations, heads=heads)
        self.lin_out = torch.nn.Linear(hidden, n_out)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_type: torch.Tensor) -> torch.Tensor:
        x = F.dropout(x, p=0.5, training=self.training)
        h = self.lin_in(x).relu()
        h = F.elu(self.conv1(h, edge_index, edge_type) + h)
        h = F.dropout(h, p=0.5, training=self.training)
        h = F.elu(self.conv2(h, edge_index, edge_type) + h)
        return self.lin_out(h)


def build(name: str, backend: str, task: Task, hidden: int, heads: int) -> torch.nn.Module:
    n_in = task.x.shape[1]
    if name == "rgcn":
        return RGCN(backend, n_in, hidden, task.num_classes, task.num_relations)
    return RGAT(backend, n_in, hidden, task.num_classes, task.num_relations, heads)


@dataclass
class Result:
    test_accuracy: float  # at the epoch of best validation accuracy
    epoch_seconds: float  # median of the training epochs (forward, backward, step)


def train(name: str, backend: str, seed: int, task: Task, args: argparse.Namespace) -> Result:
    torch.manual_seed(seed)
    net = build(name, backend, task, args.hidden, args.heads)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr, weight_decay=5e-4)
    best_val, best_test, seconds = -1.0, 0.0, []
    graph = (task.edge_index, task.edge_type)
    for _ in range(args.epochs):
        start = time.perf_counter()
        net.train()
        opt.zero_grad()
        loss = F.cross_entropy(net(task.x, *graph)[task.train], task.y[task.train])
        loss.backward()
        opt.step()
        seconds.append(time.perf_counter() - start)
        net.eval()
        with torch.no_grad():
            pred = net(task.x, *graph).argmax(-1)
        val = float((pred[task.val] == task.y[task.val]).float().mean())
        if val > best_val:
            best_val, best_test = val, float((pred[task.test] == task.y[task.test]).float().mean())
    return Result(best_test, float(np.median(seconds)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["gnnc", "pyg"], default="gnnc")
    parser.add_argument("--compare", action="store_true", help="run both backends and print the differences")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--data", type=Path, default=DATA, help="wordnet.npz, or a directory with WordNet's data.*")
    parser.add_argument("--vertices", type=int, default=0, help="a connected piece of this many synsets (0: all)")
    parser.add_argument("--features", type=int, default=64, help="hashed bag-of-words width of the glosses")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Runs the comparison; returns the mean test accuracy (%) per model and backend."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    wn = load_wordnet(args.data)
    if args.vertices:
        wn = wn.subgraph(neighbourhood(wn, args.vertices, seed=0))
    task = make_task(wn, args.features)
    backends = ["gnnc", "pyg"] if args.compare else [args.backend]
    print(
        f"WordNet 3.0 ({args.data}): {wn.num_vertices} synsets, {wn.num_edges} edges, "
        f"{wn.num_relations} relations, {wn.num_classes} classes; {args.seeds} seeds, {args.epochs} epochs"
    )
    accuracy: dict[str, dict[str, float]] = {}
    for name in args.models.split(","):
        accuracy[name] = {}
        for backend in backends:
            runs = [train(name, backend, seed, task, args) for seed in range(args.seeds)]
            accs = [100 * r.test_accuracy for r in runs]
            accuracy[name][backend] = float(np.mean(accs))
            ms = 1000 * float(np.median([r.epoch_seconds for r in runs]))
            print(
                f"{name:5s} {backend:5s} accuracy {np.mean(accs):.2f}% +- {np.std(accs):.2f} "
                f"(mean of {args.seeds}: {', '.join(f'{a:.2f}' for a in accs)}), {ms:.0f} ms/epoch",
                flush=True,
            )
        if args.compare:
            print(f"{name:5s} gnnc - pyg: {accuracy[name]['gnnc'] - accuracy[name]['pyg']:+.2f} points")
    return accuracy


if __name__ == "__main__":
    main()
