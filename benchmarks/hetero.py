"""R-GCN and RGAT training epochs: gnnc.nn against PyG's RGCNConv, FastRGCNConv, RGATConv and DGL's RelGraphConv.

    python benchmarks/hetero.py                     # WordNet and the synthetic graph, hidden 64 and 256, both models
    python benchmarks/hetero.py --graphs wordnet --hidden 64 --models rgcn --parts time
    python benchmarks/hetero.py --quick             # CI size: a 2,000-synset piece of WordNet, a 65K-edge graph

Issue 28's target: an R-GCN and an RGAT training epoch (forward, backward,
Adam step) on WordNet and on a synthetic graph of >= 5M edges and 50
relations, hidden 64 and 256, at least 3x faster than the best of PyG's
RGCNConv / FastRGCNConv / RGATConv and DGL's RelGraphConv, with lower peak
memory than every one of them.

Graphs: `wordnet`, WordNet 3.0 (`graphs.wordnet()`: 117,659 synsets,
364,552 edges of 26 pointer types, gloss features hashed to
`--in-features`, the 45 lexicographer files as labels); `synthetic`, an
R-MAT graph of 2^`--synthetic-scale` vertices and `--edge-factor` edges per
vertex (scale 17 and 40: 131,072 vertices, 5,242,880 edges, about
ogbl-biokg's size and density) whose edges draw one of `--relations`
relation types from a Zipf distribution (`graphs.relational_edges`), random
`--in-features` inputs and 16 random classes. Edge ids are in CSR order
(sorted by destination) for every system; DGL runs twice, on those edges
(`dgl`: RelGraphConv's gather_mm, a weight per edge's type) and on the same
edges sorted by relation (`dgl-sorted`: `presorted=True`, its segment_mm
path, the order `dgl.to_homogeneous` gives).

Models (2 layers, ReLU between, cross-entropy over every vertex, Adam):
`rgcn`, RGCNConv(in, hidden, R) then RGCNConv(hidden, classes, R), mean per
relation and a root weight (R-GCN's c_{v,r}); the same from PyG's
FastRGCNConv, from DGL's RelGraphConv (self loop, the per-edge norm
1 / c_{v,r}) and from gnnc.nn; `rgat`, RGATConv(in, hidden / heads, R,
heads) then RGATConv(hidden, classes, R), from PyG, from gnnc.nn, and
written with DGL's ops (`gather_mm` of both ends' rows by their edge's
relation, `edge_softmax`, `copy_e_sum`: DGL has no RGAT layer, and PyG's
RGATConv, gathering a [K, N] matrix per edge, does not fit this machine's
memory at these sizes).
Every system starts from the same weights (PyG's state_dict, loaded), and
its first forward is compared with the first system's (`max|err|`).

Time: the median epoch per system, taken round-robin (the order rotating
each repetition) after `--warmup` epochs. A system whose warm-up epoch took
longer than `--budget` / `--reps` seconds runs fewer repetitions (at least
2), so that one slow baseline does not hold the run for an hour.

Memory (`--parts memory`): as benchmarks/nn.py measures it, each (graph,
model, hidden, system) in its own subprocess: the resident-set high-water
mark of one epoch after warm-up (VmHWM, reset through /proc/self/clear_refs
after `malloc_trim`) minus the RSS at the reset. Before a baseline runs, its
transient memory is estimated (`needs_bytes`: PyG's RGCNConv keeps a
[V, K] aggregate per relation, FastRGCNConv and RGATConv gather a [K, N]
matrix per edge, DGL an edge's source row and message); one that would need
more than `--mem-fraction` of MemAvailable is reported `skipped: needs N
GiB`, never run into an out-of-memory kill.

`--profile` prints torch.profiler's top operators of one gnnc epoch and one
epoch of the best baseline: where the time goes.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# torch, DGL and gnnc each bring an OpenMP runtime into the process: idle workers of the one that ran
# last, spinning, would steal the cores from the one being timed (benchmarks/run.py does the same)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import graphs  # noqa: E402
import procmem  # noqa: E402

SYSTEMS = {"rgcn": ("gnnc", "pyg", "pyg-fast", "dgl", "dgl-sorted"), "rgat": ("gnnc", "pyg", "dgl")}
BASELINES = ("pyg", "pyg-fast", "dgl", "dgl-sorted")
LABELS = {
    ("rgcn", "gnnc"): "gnnc.nn RGCNConv",
    ("rgcn", "pyg"): "PyG RGCNConv",
    ("rgcn", "pyg-fast"): "PyG FastRGCNConv",
    ("rgcn", "dgl"): "DGL RelGraphConv",
    ("rgcn", "dgl-sorted"): "DGL RelGraphConv sorted",
    ("rgat", "gnnc"): "gnnc.nn RGATConv",
    ("rgat", "pyg"): "PyG RGATConv",
    ("rgat", "dgl"): "DGL ops (hand-written)",
}
SYNTHETIC_CLASSES = 16
PROFILE_ROWS = 18
F32 = 4


def machine() -> str:
    """The CPU (lscpu's model name), Python, torch and the thread count."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        cpu = next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        cpu = platform.processor() or "?"
    threads = torch.get_num_threads()
    return f"{cpu}, Python {platform.python_version()}, torch {torch.__version__}, {threads} threads; {procmem.allocator()}"


def load() -> str:
    """`uptime`'s load averages, for the lines beside the numbers."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


# ------------------------------------------------------------------ data


@dataclass
class Data:
    """One graph's tensors, the same for every system (DGL's own edge order aside)."""

    name: str
    edge_index: torch.Tensor  # [2, E], sorted by destination
    edge_type: torch.Tensor  # [E]
    x: torch.Tensor
    y: torch.Tensor
    num_vertices: int
    num_relations: int
    num_classes: int

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])


def wordnet_piece(wn: Any, count: int) -> Any:
    """`count` synsets of WordNet in breadth-first order from vertex 0's component (edges both ways)."""
    import scipy.sparse as sp
    import scipy.sparse.csgraph as csgraph

    n = wn.num_vertices
    a = sp.coo_matrix((np.ones(wn.num_edges), (wn.src, wn.dst)), shape=(n, n)).tocsr()
    order = csgraph.breadth_first_order(a + a.T, 0, directed=False, return_predecessors=False)
    return wn.subgraph(order[:count])


def make_data(graph: str, args: argparse.Namespace) -> Data:
    if graph == "wordnet":
        wn = graphs.wordnet()
        if args.wordnet_vertices:
            wn = wordnet_piece(wn, args.wordnet_vertices)
        src, dst, types, n = wn.src, wn.dst, wn.edge_type, wn.num_vertices
        x = torch.from_numpy(wn.features(args.in_features))
        y = torch.from_numpy(wn.labels)
        relations, classes = wn.num_relations, wn.num_classes
    elif graph == "synthetic":
        src, dst, types, n = graphs.relational_edges(args.synthetic_scale, args.edge_factor, args.relations)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(n, args.in_features, generator=g)
        y = torch.randint(0, SYNTHETIC_CLASSES, (n,), generator=g)
        relations, classes = args.relations, SYNTHETIC_CLASSES
    else:
        raise SystemExit(f"unknown graph {graph!r}: use wordnet or synthetic")
    order = np.lexsort((src, dst))  # CSR order (by destination) for every system
    edge_index = torch.from_numpy(np.ascontiguousarray(np.stack([src[order], dst[order]]).astype(np.int64)))
    edge_type = torch.from_numpy(np.ascontiguousarray(types[order].astype(np.int64)))
    return Data(graph, edge_index, edge_type, x, y, n, relations, classes)


# ------------------------------------------------------------------ models


class PygShaped(torch.nn.Module):
    """Two relational layers from `lib` (torch_geometric.nn or gnnc.nn: the same constructors)."""

    def __init__(self, model: str, lib: Any, fast: bool, d_in: int, hidden: int, d_out: int, r: int, heads: int):
        super().__init__()
        if model == "rgcn":
            conv = lib.FastRGCNConv if fast else lib.RGCNConv
            self.c1, self.c2 = conv(d_in, hidden, r), conv(hidden, d_out, r)
        else:
            self.c1 = lib.RGATConv(d_in, hidden // heads, r, heads=heads)
            self.c2 = lib.RGATConv(hidden, d_out, r, heads=1)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_type: torch.Tensor) -> torch.Tensor:
        return self.c2(self.c1(x, edge_index, edge_type).relu(), edge_index, edge_type)


def dgl_model(
    d_in: int, hidden: int, d_out: int, r: int, reference: torch.nn.Module, presorted: bool
) -> torch.nn.Module:
    """The R-GCN from DGL's RelGraphConv, with the PyG model's weights; forward(x, g, etypes, norm)."""
    from baselines import optional

    if optional("dgl") is None:  # installs the graphbolt stub before dgl.nn imports dgl
        raise RuntimeError("dgl unavailable")
    from dgl.nn import RelGraphConv

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = RelGraphConv(d_in, hidden, r, regularizer=None, self_loop=True, bias=True)
            self.c2 = RelGraphConv(hidden, d_out, r, regularizer=None, self_loop=True, bias=True)

        def forward(self, x: torch.Tensor, g: Any, etypes: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
            h = self.c1(g, x, etypes, norm, presorted=presorted).relu()
            return self.c2(g, h, etypes, norm, presorted=presorted)

    net = Net()
    with torch.no_grad():
        for mine, theirs in ((net.c1, reference.c1), (net.c2, reference.c2)):
            mine.linear_r.W.copy_(theirs.weight)
            mine.loop_weight.copy_(theirs.root)
            mine.h_bias.copy_(theirs.bias)
    return net


def dgl_rgat_model(reference: torch.nn.Module) -> torch.nn.Module:
    """PyG's RGATConv (across-relation additive attention, heads concatenated) written with DGL's ops, as a
    DGL user would (DGL has no RGAT layer), with the PyG model's weights; forward(x, g, etypes, norm)."""
    from baselines import optional

    dgl = optional("dgl")
    if dgl is None:
        raise RuntimeError("dgl unavailable")
    from dgl.nn.functional import edge_softmax

    class Conv(torch.nn.Module):
        def __init__(self, theirs: Any) -> None:
            super().__init__()
            self.heads, self.out_channels = theirs.heads, theirs.out_channels
            self.weight = torch.nn.Parameter(theirs.weight.detach().clone())  # [R, K, heads * F]
            self.q = torch.nn.Parameter(theirs.q.detach().clone())  # [heads * F, heads]
            self.k = torch.nn.Parameter(theirs.k.detach().clone())
            self.bias = torch.nn.Parameter(theirs.bias.detach().clone())

        def forward(self, g: Any, x: torch.Tensor, etypes: torch.Tensor) -> torch.Tensor:
            src, dst = g.edges()
            h_src = dgl.ops.gather_mm(x[src], self.weight, idx_b=etypes)  # x_u @ W[r], per edge
            h_dst = dgl.ops.gather_mm(x[dst], self.weight, idx_b=etypes)  # x_v @ W[r]
            score = F.leaky_relu(h_dst @ self.q + h_src @ self.k, 0.2)
            alpha = edge_softmax(g, score)  # over each destination's in-edges
            m = h_src.view(-1, self.heads, self.out_channels) * alpha.unsqueeze(-1)
            return dgl.ops.copy_e_sum(g, m.view(-1, self.heads * self.out_channels)) + self.bias

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = Conv(reference.c1), Conv(reference.c2)

        def forward(self, x: torch.Tensor, g: Any, etypes: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
            return self.c2(g, self.c1(g, x, etypes).relu(), etypes)

    return Net()


def dgl_inputs(data: Data, by_relation: bool) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """DGL's graph (the edges sorted by relation if `by_relation`), their types, and R-GCN's 1 / c_{v,r}
    per edge."""
    from baselines import optional

    dgl = optional("dgl")
    if dgl is None:
        raise RuntimeError("dgl unavailable")
    src, dst = data.edge_index[0].numpy(), data.edge_index[1].numpy()
    types = data.edge_type.numpy()
    if by_relation:
        order = np.argsort(types, kind="stable")
        src, dst, types = src[order], dst[order], types[order]
    pair = dst.astype(np.int64) * data.num_relations + types
    _, inverse, counts = np.unique(pair, return_inverse=True, return_counts=True)
    norm = torch.from_numpy((1.0 / counts[inverse]).astype(np.float32)).view(-1, 1)
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=data.num_vertices)
    g = g.formats(["csc", "csr", "coo"])
    return g, torch.from_numpy(types), norm


def needs_bytes(system: str, model: str, data: Data, dims: list[tuple[int, int]]) -> int:
    """About the transient bytes of one epoch, both layers (K inputs, N outputs each), from what each
    system keeps: the coefficients fit peaks measured on the synthetic graph at scale 15 (1.3M edges),
    rounded up by 10-25%."""
    v, e, r = data.num_vertices, data.num_edges, data.num_relations
    total = 0
    for k, n in dims:
        if system == "pyg" and model == "rgcn":  # a [V, K] mean per relation, kept for its product's gradient
            total += F32 * (2 * r * v * k + 4 * v * k + 2 * v * n)
        elif system in ("pyg-fast", "pyg"):  # a [K, N] matrix gathered per edge, and its gradient
            total += F32 * (2 * e * k * n + 2 * e * k + 6 * e * n)
        elif system.startswith("dgl") and model == "rgat":  # both ends' rows gathered, transformed, scored
            total += F32 * e * (3 * k + 3 * n)
        elif system.startswith("dgl"):  # the sources' rows per edge, sorted by type, the messages
            total += F32 * e * (16 * k + 22 * n) // 10
        else:  # gnnc: the edges' adjoints of a relation weight's gradient, [E, N]
            total += F32 * (e * n + 2 * v * (k + n))
    return total


class Run:
    """One system's model, optimizer and inputs: `epoch()` trains once, `forward()` evaluates once."""

    def __init__(self, system: str, model: str, hidden: int, data: Data, args: argparse.Namespace) -> None:
        import torch_geometric.nn

        dims = (data.x.shape[1], hidden, data.num_classes, data.num_relations, args.heads)
        torch.manual_seed(0)
        reference = PygShaped(model, torch_geometric.nn, False, *dims)
        self.inputs: tuple[Any, ...] = (data.x, data.edge_index, data.edge_type)
        if system == "pyg":
            net = reference
        elif system == "pyg-fast":
            net = PygShaped(model, torch_geometric.nn, True, *dims)
            net.load_state_dict(reference.state_dict())
        elif system == "gnnc":
            import gnnc.nn

            net = PygShaped(model, gnnc.nn, False, *dims)
            net.load_state_dict(reference.state_dict())
        elif model == "rgat":
            net = dgl_rgat_model(reference)
            self.inputs = (data.x, *dgl_inputs(data, False))
        else:
            by_relation = system == "dgl-sorted"
            net = dgl_model(dims[0], hidden, data.num_classes, data.num_relations, reference, by_relation)
            self.inputs = (data.x, *dgl_inputs(data, by_relation))
        self.model = net
        self.opt = torch.optim.Adam(net.parameters())
        self.y = data.y

    def epoch(self) -> None:
        self.opt.zero_grad()
        F.cross_entropy(self.model(*self.inputs), self.y).backward()
        self.opt.step()

    def forward(self) -> torch.Tensor:
        with torch.no_grad():
            return self.model(*self.inputs)


# ------------------------------------------------------------------ memory


def memory_child(args: argparse.Namespace) -> None:
    """In a subprocess: one system's transient epoch peak, as JSON {"delta": bytes}."""
    system, graph, model, hidden = args.memory_child.split(":")
    data = make_data(graph, args)
    run = Run(system, model, int(hidden), data, args)
    for _ in range(max(args.warmup, 1)):
        run.epoch()
    gc.collect()
    procmem.trim_heap()
    base = procmem.reset_peak()
    run.epoch()
    print(json.dumps({"delta": procmem.status("VmHWM") - base, "base": base}))


def child_args(args: argparse.Namespace) -> list[str]:
    """The options a subprocess needs to rebuild the same data."""
    out = ["--threads", str(args.threads), "--warmup", str(args.warmup), "--heads", str(args.heads)]
    out += ["--in-features", str(args.in_features), "--synthetic-scale", str(args.synthetic_scale)]
    out += ["--edge-factor", str(args.edge_factor), "--relations", str(args.relations)]
    out += ["--wordnet-vertices", str(args.wordnet_vertices)]
    return out


def measure_memory(system: str, graph: str, model: str, hidden: int, args: argparse.Namespace) -> float | str:
    """MiB of one system's transient epoch peak, from a fresh subprocess; or why it failed."""
    cmd = [sys.executable, __file__, *child_args(args), "--memory-child", f"{system}:{graph}:{model}:{hidden}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return f"failed: {lines[-1][:100] if lines else proc.returncode}"
    return json.loads(proc.stdout.strip().splitlines()[-1])["delta"] / 2**20


# ------------------------------------------------------------------ timing


def first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:100] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


def skip_reason(system: str, model: str, hidden: int, data: Data, args: argparse.Namespace) -> str | None:
    dims = [(data.x.shape[1], hidden), (hidden, data.num_classes)]
    need = needs_bytes(system, model, data, dims)
    if need > args.mem_fraction * procmem.mem_available(1 << 34):
        return f"skipped: needs {need / 2**30:.1f} GiB"
    return None


def time_cell(model: str, hidden: int, systems: list[str], data: Data, args: argparse.Namespace) -> dict[str, Any]:
    """Median epoch seconds per system (or why it did not run), round-robin; and max|err| of its forward."""
    runs: dict[str, Run] = {}
    result: dict[str, Any] = {}
    first: torch.Tensor | None = None
    for system in systems:
        reason = skip_reason(system, model, hidden, data, args)
        if reason:
            result[system] = reason
            continue
        try:
            run = Run(system, model, hidden, data, args)
            out = run.forward()
            if first is None:
                first, result["compared with"] = out, system
            result[f"{system} max|err|"] = float((out - first).abs().max())
            start = time.perf_counter()
            for _ in range(args.warmup):
                run.epoch()
            result[f"{system} warm-up s"] = time.perf_counter() - start
            runs[system] = run
        except Exception as exc:  # noqa: BLE001 - a system that fails is reported, not fatal
            result[system] = f"failed: {first_line(exc)}"
    reps = {
        s: max(2, min(args.reps, int(args.budget / max(result[f"{s} warm-up s"] / max(args.warmup, 1), 1e-9))))
        for s in runs
    }
    times: dict[str, list[float]] = {s: [] for s in runs}
    order = list(runs)
    for rep in range(max(reps.values(), default=0)):
        shift = rep % max(len(order), 1)
        for s in order[shift:] + order[:shift]:
            if len(times[s]) < reps[s]:
                start = time.perf_counter()
                runs[s].epoch()
                times[s].append(time.perf_counter() - start)
    for s, t in times.items():
        result[s] = statistics.median(t)
        result[f"{s} reps"] = len(t)
    if args.profile:
        profile_cell(model, runs, result)
    return result


def profile_cell(model: str, runs: dict[str, Run], result: dict[str, Any]) -> None:
    """torch.profiler's top operators (self CPU time) of one epoch of gnnc and of the best baseline."""
    from torch.profiler import ProfilerActivity, profile

    timed = {s: result[s] for s in runs if isinstance(result.get(s), float)}
    best = min((s for s in timed if s in BASELINES), key=lambda s: timed[s], default=None)
    for s in [x for x in ("gnnc", best) if x in runs]:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            runs[s].epoch()
        print(f"# profile of one {LABELS[model, s]} epoch")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=PROFILE_ROWS))


def verdict(ms: dict[str, float], mem: dict[str, Any]) -> str:
    """Issue 28's target for one cell: >= 3x the best baseline and less memory than each (the parts run)."""
    parts, met = [], True
    base = {s: t for s, t in ms.items() if s in BASELINES}
    if ms and "gnnc" in ms and base:
        best = min(base, key=lambda s: base[s])
        ratio = base[best] / ms["gnnc"]
        parts.append(f"{ratio:.2f}x {best}")
        met = ratio >= 3
    elif ms:
        return "n/a (gnnc did not run)" if "gnnc" not in ms else "n/a (no baseline ran)"
    else:
        parts.append("time not measured")
    theirs = {s: m for s, m in mem.items() if s in BASELINES and isinstance(m, float)}
    if isinstance(mem.get("gnnc"), float) and theirs:
        least = min(theirs, key=lambda s: theirs[s])
        parts.append(f"{mem['gnnc']:.0f} MiB against {theirs[least]:.0f} MiB ({least}, the least)")
        met = met and mem["gnnc"] < theirs[least]
    elif mem:
        return (
            "n/a (" + ("no baseline ran" if isinstance(mem.get("gnnc"), float) else "gnnc's memory not measured") + ")"
        )
    else:
        parts.append("memory not measured")
    if not ms or not mem:
        return f"{'met' if met else 'NOT met'} so far ({'; '.join(parts)})"
    return f"{'met' if met else 'NOT met'} ({'; '.join(parts)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="wordnet,synthetic")
    parser.add_argument("--hidden", default="64,256")
    parser.add_argument("--models", default="rgcn,rgat")
    parser.add_argument("--systems", default=",".join(SYSTEMS["rgcn"]), help="those of each model's that run")
    parser.add_argument("--parts", default="time,memory", help="time, memory or both")
    parser.add_argument("--in-features", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4, help="RGAT's first layer")
    parser.add_argument("--synthetic-scale", type=int, default=17)
    parser.add_argument("--edge-factor", type=int, default=40)
    parser.add_argument("--relations", type=int, default=50)
    parser.add_argument("--wordnet-vertices", type=int, default=0, help="a piece of WordNet (0: all of it)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of timed epochs per system, about")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mem-fraction", type=float, default=0.6)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--quick", action="store_true", help="CI size: small graphs, hidden 16, 2 repetitions")
    parser.add_argument("--json", help="write every cell's numbers to this file")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.wordnet_vertices = args.wordnet_vertices or 2000
        args.synthetic_scale, args.edge_factor = 12, 16
        args.hidden, args.in_features, args.reps, args.warmup = "16", 32, 2, 1
    torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(args)
        return
    parts = set(args.parts.split(","))
    wanted = args.systems.split(",")
    print(f"# {machine()}")
    print(f"# {load()} at the start")
    cells = []
    for graph in args.graphs.split(","):
        data = make_data(graph, args)
        print(
            f"# {graph}: {data.num_vertices} vertices, {data.num_edges} edges, {data.num_relations} relations, "
            f"{data.x.shape[1]} input features, {data.num_classes} classes"
        )
        for hidden in map(int, args.hidden.split(",")):
            for model in args.models.split(","):
                systems = [s for s in SYSTEMS[model] if s in wanted]
                cell: dict[str, Any] = {"graph": graph, "model": model, "hidden": hidden}
                ms: dict[str, float] = {}
                if "time" in parts:
                    cell.update(time_cell(model, hidden, systems, data, args))
                    ms = {s: cell[s] * 1e3 for s in systems if isinstance(cell.get(s), float)}
                mem: dict[str, Any] = {}
                if "memory" in parts:
                    for s in systems:
                        reason = skip_reason(s, model, hidden, data, args)
                        mem[s] = reason or measure_memory(s, graph, model, hidden, args)
                    cell["memory MiB"] = mem
                report(graph, model, hidden, systems, cell, ms, mem)
                cells.append(cell)
        del data
        gc.collect()
    print(f"# {load()} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "cells": cells}, indent=1, default=str))


def report(graph: str, model: str, hidden: int, systems: list[str], cell: dict, ms: dict, mem: dict) -> None:
    print(f"\n{graph} {model} hidden {hidden} ({load()})")
    for s in systems:
        t = f"{ms[s]:10.1f} ms" if s in ms else f"{'':13s}"
        ratio = f"{ms[s] / ms['gnnc']:7.2f}x gnnc" if s in ms and "gnnc" in ms else " " * 13
        m = mem.get(s)
        m_text = f"{m:8.0f} MiB" if isinstance(m, float) else ""
        err = cell.get(f"{s} max|err|")
        err_text = f"max|err| {err:.1e}" if isinstance(err, float) and s != cell.get("compared with") else ""
        reps = f"({cell[f'{s} reps']} reps)" if f"{s} reps" in cell else ""
        note = cell[s] if isinstance(cell.get(s), str) else (m if isinstance(m, str) else "")
        print(f"  {LABELS[model, s]:24s} {t} {ratio} {m_text:12s} {err_text:16s} {reps} {note}".rstrip(), flush=True)
    print(f"  target (>= 3x the best baseline, less memory than each): {verdict(ms, mem)}", flush=True)


if __name__ == "__main__":
    main()
