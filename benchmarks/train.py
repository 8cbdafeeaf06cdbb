"""Training epoch time and peak memory: 2-layer GCN and GAT with gnnc.torch kernels against PyG.

    python benchmarks/train.py                                  # mdual, hidden 64 and 256, GCN and GAT
    python benchmarks/train.py --graph rmat-16 --hidden 64 --reps 5 --threads 2

The issue's target: a training epoch (forward + backward + optimizer step)
at least 3x faster than PyG, with lower peak memory, on the largest
benchmark graph at hidden sizes 64 and 256.

Both frameworks train the same model on the same data, in one process:

- the graph made undirected, duplicates merged, one self loop per vertex
  (so `gcn_norm`'s `rsqrt(deg_out(u) * deg_in(v))` is GCN's symmetric
  normalisation, and PyG's convolutions run with `add_self_loops=False`);
- random float32 features (`--in-features` wide) and random labels over
  `--classes` classes, cross-entropy over every vertex, Adam;
- GCN: `x @ W1 -> aggregate -> + b1 -> relu -> @ W2 -> aggregate -> + b2`,
  gnnc with examples/gcn_norm.gnn, PyG with GCNConv (`cached=True`: the
  normalisation is computed once, as PyG recommends for full-batch training;
  `--pyg-uncached` times PyG's default instead);
- GAT: `--heads` heads of hidden/heads features, leaky_relu(0.2) scores,
  softmax over in-edges, elu between the layers, one head in the second
  layer; gnnc with the GAT kernel below (the attention projections
  `el = h . att_src`, `er = h . att_dst` computed inside it, where PyG's
  GATConv computes them in torch), PyG with GATConv.
  If `gnnc.api.compile_grad` refuses a model's kernel, its rows say
  "skipped: <reason>".

Time: the median over `--reps` epochs per framework, taken round-robin (the
order alternating each repetition) after `--warmup` epochs, so that load
changes hit both alike. Ratio = PyG time / gnnc time.

Memory: torch allocates CPU tensors with malloc, which neither tracemalloc
nor torch's allocator statistics see, so each (model, hidden, framework) runs
in its own subprocess and reports its resident-set high-water mark (Linux
VmHWM): after loading the data, building the model and one warm-up epoch
(compiling kernels, building the reversed graph and PyG's cache), the mark
is reset (`/proc/self/clear_refs` = 5) and `--memory-epochs` epochs run;
"peak" is VmHWM minus VmRSS at the reset: the transient memory of an epoch
(activations, messages, gradients), persistent state (data, parameters,
optimizer state, graph structures) excluded. The absolute VmHWM over the
whole subprocess is printed beside it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import procmem  # noqa: E402

# The graph part of a GAT layer, attention projection included (PyG computes
# el and er in torch: `(h * att).sum(-1)`): gnnc computes them in the
# kernel's vertex sweep and generates their gradients, with the same math.
GAT_SOURCE = """
kernel gat_layer(h: f32[V, H, F], att_src: f32[H, F], att_dst: f32[H, F]) -> f32[V, H, F] {
    el[v]  = dot(h[v], att_src)
    er[v]  = dot(h[v], att_dst)
    s[e]   = leaky_relu(el[u] + er[v], 0.2)
    out[v] = sum(softmax(s[e]) * h[u])
}
"""

TARGET_SPEEDUP = 3.0


# ------------------------------------------------------------------ data


def load_edges(name: str) -> tuple[np.ndarray, int]:
    """A 2 x E edge_index, undirected, without duplicates, with one self loop per vertex."""
    import graphs as bench_graphs

    if name.startswith("rmat-"):
        src, dst, n = bench_graphs.rmat_edges(int(name.split("-", 1)[1]))
    else:
        src, dst, n = bench_graphs.edges(name)
    pairs = np.concatenate([np.stack([src, dst]), np.stack([dst, src])], axis=1)
    pairs = pairs[:, pairs[0] != pairs[1]]
    # unique pairs through one int64 key: faster than np.unique(axis=1)
    keys = np.unique(pairs[0] * n + pairs[1])
    loops = np.arange(n, dtype=np.int64)
    edge_index = np.concatenate([np.stack([keys // n, keys % n]), np.stack([loops, loops])], axis=1)
    return np.ascontiguousarray(edge_index), n


def make_data(args: argparse.Namespace):
    import torch

    edge_index, n = load_edges(args.graph)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, args.in_features, generator=gen)
    y = torch.randint(0, args.classes, (n,), generator=gen)
    return torch.from_numpy(edge_index), n, x, y


# ----------------------------------------------------------------- models


def gnnc_models():
    import torch
    import torch.nn.functional as F

    import gnnc.torch as gt

    class GnncGCN(torch.nn.Module):
        def __init__(self, n_in, hidden, n_out, graph, heads):
            super().__init__()
            self.graph = graph
            self.conv = gt.kernel(HERE.parent / "examples" / "gcn_norm.gnn", "gcn_norm")
            self.lin1 = torch.nn.Linear(n_in, hidden, bias=False)
            self.b1 = torch.nn.Parameter(torch.zeros(hidden))
            self.lin2 = torch.nn.Linear(hidden, n_out, bias=False)
            self.b2 = torch.nn.Parameter(torch.zeros(n_out))

        def forward(self, x):
            h = F.relu(self.conv(self.graph, self.lin1(x)) + self.b1)
            return self.conv(self.graph, self.lin2(h)) + self.b2

    class GnncGATLayer(torch.nn.Module):
        def __init__(self, n_in, n_out, heads, graph, conv):
            super().__init__()
            self.graph, self.conv, self.heads, self.n_out = graph, conv, heads, n_out
            self.lin = torch.nn.Linear(n_in, heads * n_out, bias=False)
            self.att_src = torch.nn.Parameter(torch.randn(heads, n_out) / n_out**0.5)
            self.att_dst = torch.nn.Parameter(torch.randn(heads, n_out) / n_out**0.5)
            self.bias = torch.nn.Parameter(torch.zeros(heads * n_out))

        def forward(self, x):
            h = self.lin(x).view(-1, self.heads, self.n_out)
            return self.conv(self.graph, h, self.att_src, self.att_dst).reshape(-1, self.heads * self.n_out) + self.bias

    class GnncGAT(torch.nn.Module):
        def __init__(self, n_in, hidden, n_out, graph, heads):
            super().__init__()
            conv = gt.kernel(GAT_SOURCE, "gat_layer")
            self.l1 = GnncGATLayer(n_in, hidden // heads, heads, graph, conv)
            self.l2 = GnncGATLayer(hidden, n_out, 1, graph, conv)

        def forward(self, x):
            return self.l2(F.elu(self.l1(x)))

    return {"gcn": GnncGCN, "gat": GnncGAT}


def pyg_models(cached: bool):
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv, GCNConv

    class PygGCN(torch.nn.Module):
        def __init__(self, n_in, hidden, n_out, edge_index, heads):
            super().__init__()
            self.edge_index = edge_index
            self.c1 = GCNConv(n_in, hidden, add_self_loops=False, cached=cached)
            self.c2 = GCNConv(hidden, n_out, add_self_loops=False, cached=cached)

        def forward(self, x):
            return self.c2(F.relu(self.c1(x, self.edge_index)), self.edge_index)

    class PygGAT(torch.nn.Module):
        def __init__(self, n_in, hidden, n_out, edge_index, heads):
            super().__init__()
            self.edge_index = edge_index
            self.c1 = GATConv(n_in, hidden // heads, heads=heads, add_self_loops=False, negative_slope=0.2)
            self.c2 = GATConv(hidden, n_out, heads=1, add_self_loops=False, negative_slope=0.2)

        def forward(self, x):
            return self.c2(F.elu(self.c1(x, self.edge_index)), self.edge_index)

    return {"gcn": PygGCN, "gat": PygGAT}


def gat_refusal() -> str | None:
    """Why gnnc cannot train the GAT layer yet (compile_grad's CompileError), or None."""
    from gnnc.api import compile_grad
    from gnnc.errors import CompileError

    try:
        compile_grad(GAT_SOURCE, "gat_layer")
    except CompileError as exc:
        return str(exc)
    return None


def build(framework: str, model: str, hidden: int, args: argparse.Namespace, data):
    import torch

    import gnnc

    edge_index, n, x, y = data
    torch.manual_seed(0)
    if framework == "gnnc":
        graph = gnnc.Graph(edge_index.numpy(), num_vertices=n)
        net = gnnc_models()[model](args.in_features, hidden, args.classes, graph, args.heads)
    else:
        net = pyg_models(not args.pyg_uncached)[model](args.in_features, hidden, args.classes, edge_index, args.heads)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)

    def epoch() -> None:
        net.train()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    return epoch


# ---------------------------------------------------------------- memory


def memory_child(args: argparse.Namespace) -> None:
    """Runs in a subprocess: prints {"delta": bytes, "hwm": bytes} as JSON."""
    data = make_data(args)
    epoch = build(args.memory_child, args.models[0], args.hidden[0], args, data)
    epoch()  # compiles, builds caches
    gc.collect()
    base = procmem.reset_peak()
    for _ in range(args.memory_epochs):
        epoch()
    hwm = procmem.status("VmHWM")
    print(json.dumps({"delta": hwm - base, "base": base, "hwm": hwm}))


def measure_memory(framework: str, model: str, hidden: int, args: argparse.Namespace) -> dict | str:
    cmd = [
        sys.executable,
        __file__,
        "--graph",
        args.graph,
        "--models",
        model,
        "--hidden",
        str(hidden),
        "--in-features",
        str(args.in_features),
        "--classes",
        str(args.classes),
        "--heads",
        str(args.heads),
        "--threads",
        str(args.threads),
        "--memory-epochs",
        str(args.memory_epochs),
        "--memory-child",
        framework,
    ]
    if args.pyg_uncached:
        cmd.append("--pyg-uncached")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return f"failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ main


def time_pair(model: str, hidden: int, args: argparse.Namespace, data) -> dict[str, float]:
    epochs = {fw: build(fw, model, hidden, args, data) for fw in ("gnnc", "pyg")}
    for _ in range(args.warmup):
        for fw in epochs:
            epochs[fw]()
    times: dict[str, list[float]] = {fw: [] for fw in epochs}
    order = list(epochs)
    for rep in range(args.reps):
        for fw in order if rep % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            epochs[fw]()
            times[fw].append(time.perf_counter() - start)
    return {fw: statistics.median(t) for fw, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", default="mdual", help="a benchmark graph (graphs.py) or rmat-SCALE (default mdual)")
    ap.add_argument("--models", nargs="+", default=["gcn", "gat"], choices=["gcn", "gat"])
    ap.add_argument("--hidden", nargs="+", type=int, default=[64, 256])
    ap.add_argument("--in-features", type=int, default=128)
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--heads", type=int, default=4, help="GAT heads of the first layer")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5, help="timed epochs per framework")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--memory-epochs", type=int, default=2)
    ap.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")
    ap.add_argument("--pyg-uncached", action="store_true", help="GCNConv(cached=False), PyG's default")
    ap.add_argument("--memory-child", choices=["gnnc", "pyg"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    # gnnc's kernels and torch's ops get the same number of threads
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(args)
        return

    data = make_data(args)
    edge_index, n = data[0], data[1]
    print(
        f"graph {args.graph}: {n} vertices, {edge_index.shape[1]} edges (undirected, self loops); "
        f"{args.in_features} input features, {args.classes} classes; {args.threads} threads; "
        f"median of {args.reps} round-robin epochs; load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'model':5s} {'hidden':>6s} {'gnnc ms':>9s} {'PyG ms':>9s} {'PyG/gnnc':>8s} "
        f"{'gnnc MB':>8s} {'PyG MB':>8s}  target (>= {TARGET_SPEEDUP:g}x, less memory)"
    )
    refusal = gat_refusal() if "gat" in args.models else None
    for model in args.models:
        for hidden in args.hidden:
            if model == "gat" and refusal is not None:
                print(f"{model:5s} {hidden:6d}  skipped: {refusal}")
                continue
            t = time_pair(model, hidden, args, data)
            ratio = t["pyg"] / t["gnnc"]
            mem = {}
            if not args.no_memory:
                mem = {fw: measure_memory(fw, model, hidden, args) for fw in ("gnnc", "pyg")}

            def mb(fw: str) -> str:
                m = mem.get(fw)
                return "-" if m is None else m if isinstance(m, str) else f"{m['delta'] / 2**20:.0f}"

            if mem and all(isinstance(m, dict) for m in mem.values()):
                less = mem["gnnc"]["delta"] < mem["pyg"]["delta"]
                met = "met" if ratio >= TARGET_SPEEDUP and less else "NOT met"
                detail = (
                    f"({ratio:.2f}x, memory {'lower' if less else 'higher'}; whole-process peak "
                    f"{mem['gnnc']['hwm'] / 2**20:.0f} / {mem['pyg']['hwm'] / 2**20:.0f} MB)"
                )
            else:
                met = "met (time)" if ratio >= TARGET_SPEEDUP else "NOT met (time)"
                detail = f"({ratio:.2f}x; memory not measured)"
            print(
                f"{model:5s} {hidden:6d} {t['gnnc'] * 1e3:9.1f} {t['pyg'] * 1e3:9.1f} {ratio:8.2f} "
                f"{mb('gnnc'):>8s} {mb('pyg'):>8s}  {met} {detail}",
                flush=True,
            )


if __name__ == "__main__":
    main()
