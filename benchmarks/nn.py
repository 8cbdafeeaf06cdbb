"""Training epochs of 2-layer models built from gnnc.nn against PyG (eager and compiled) and DGL.

    python benchmarks/nn.py                                    # mdual and rmat-16, hidden 64 and 256, every model
    python benchmarks/nn.py --graphs rmat-16 --hidden 64 --models gcn,gat --reps 3 --no-memory
    python benchmarks/nn.py --device cuda --graphs rmat-18 --frameworks pyg,gnnc   # on a GPU

Issue 26's target: every cell (GCN, GraphSAGE mean and max, GAT with 4
heads, GIN; mdual and an R-MAT graph of >= 1M edges; hidden 64 and 256) at
least 3x faster than the best of PyG eager, PyG under torch.compile and
DGL, with lower peak memory; and gnnc under torch.compile never slower than
gnnc eager.

Every framework trains the same model (`--in-features` random inputs,
random labels, cross-entropy over every vertex, Adam) on the same graph
(as read, edge ids in CSR order; the layers add their self loops where PyG's
do, DGL's GCN and GAT get `dgl.add_self_loop` once before timing). gnnc's
and PyG's models start from the same weights (the PyG state_dict is loaded
into the gnnc model). An epoch is forward, backward and step.

Frameworks: `pyg` (eager), `pyg-compile` (`torch.compile(model)`), `dgl`
(dgl.nn's GraphConv, SAGEConv, GATConv, GINConv; SAGE-max, which DGL's
SAGEConv lacks, is `update_all(copy_u, max)` between the same two Linear
layers as PyG's), `gnnc` (eager) and `gnnc-compile`
(`torch.compile(model, fullgraph=True)`).

Time: the median over `--reps` epochs per framework, taken round-robin
(the order rotating each repetition) after `--warmup` epochs, so that load
changes hit all alike. Ratios: best baseline / gnnc, and gnnc eager /
gnnc compiled.

Memory (unless `--no-memory`): torch's CPU tensors are malloc'd, which
neither tracemalloc nor torch's statistics see, so each (graph, model,
hidden, framework) runs in its own subprocess, which reports the transient
peak of an epoch: the resident-set high-water mark (VmHWM, reset through
`/proc/self/clear_refs` after the warm-up epochs) minus the RSS at the reset.
Before the reset the heap's free pages go back to the system (glibc's
`malloc_trim`), so that the RSS is what is live: without it, memory that
the warm-up epochs freed and malloc kept served the measured epoch without
raising VmHWM, and the peak measured which sizes the allocator happened to
keep (DGL's epochs showed 17 MiB, below the size of one of their arrays).
`--autocast bf16` runs every framework's forward and loss under
`torch.autocast(dtype=torch.bfloat16)` (mixed precision: the Linear layers
in bfloat16; PyG's and DGL's message passing too where their kernels take
it, gnnc's in float32). Not issue 26's setting, which is float32.

With `--device cuda` the peak is torch's own count of device memory
(`max_memory_allocated` over one epoch, less what was allocated before it),
taken in the same process, and an epoch ends with a synchronize.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import subprocess
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

FRAMEWORKS = ("pyg", "pyg-compile", "dgl", "gnnc", "gnnc-compile")
BASELINES = ("pyg", "pyg-compile", "dgl")
MODELS = ("gcn", "sage_mean", "sage_max", "gat", "gin")
HEADS = 4


def machine(device: str = "cpu") -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    text = f"{cpu}, Python {platform.python_version()}, torch {torch.__version__}, {torch.get_num_threads()} threads"
    text += f"; {procmem.allocator()}"
    if device.startswith("cuda"):
        text += f", {torch.cuda.get_device_name(torch.device(device))}"
    return text


# ------------------------------------------------------------------ models


def _mlp(i: int, hidden: int, o: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(i, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, o))


class PygShaped(torch.nn.Module):
    """A 2-layer model from `lib` (torch_geometric.nn or gnnc.nn: the same constructors).

    One class at module level for every model, so that torch.compile's guards
    see one type (a class per model would recompile each, up to its limit).
    """

    def __init__(self, name: str, lib: Any, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        if name == "gcn":
            self.c1, self.c2 = lib.GCNConv(d_in, hidden), lib.GCNConv(hidden, d_out)
        elif name.startswith("sage"):
            aggr = name.split("_")[1]
            self.c1, self.c2 = lib.SAGEConv(d_in, hidden, aggr=aggr), lib.SAGEConv(hidden, d_out, aggr=aggr)
        elif name == "gat":
            self.c1 = lib.GATConv(d_in, hidden // HEADS, heads=HEADS)
            self.c2 = lib.GATConv(hidden, d_out, heads=1)
        else:
            self.c1 = lib.GINConv(_mlp(d_in, hidden, hidden))
            self.c2 = lib.GINConv(_mlp(hidden, hidden, d_out))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.c2(self.c1(x, edge_index).relu(), edge_index)


def dgl_model(name: str, d_in: int, hidden: int, d_out: int) -> torch.nn.Module:
    """The same 2-layer model from dgl.nn; forward(x, g)."""
    from baselines import optional

    dgl = optional("dgl")
    if dgl is None:
        raise RuntimeError("dgl unavailable")
    import dgl.function as fn
    import dgl.nn as dglnn

    class SageMax(torch.nn.Module):
        """PyG's SAGEConv(aggr="max"): lin_l(max over in-edges of x_u) + lin_r(x_v)."""

        def __init__(self, i: int, o: int) -> None:
            super().__init__()
            self.lin_l, self.lin_r = torch.nn.Linear(i, o), torch.nn.Linear(i, o, bias=False)

        def forward(self, g: Any, x: torch.Tensor) -> torch.Tensor:
            with g.local_scope():
                g.srcdata["h"] = x
                g.update_all(fn.copy_u("h", "m"), fn.max("m", "n"))
                return self.lin_l(g.dstdata["n"]) + self.lin_r(x)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.flatten = name == "gat"
            if name == "gcn":
                self.c1, self.c2 = dglnn.GraphConv(d_in, hidden), dglnn.GraphConv(hidden, d_out)
            elif name == "sage_mean":
                self.c1, self.c2 = dglnn.SAGEConv(d_in, hidden, "mean"), dglnn.SAGEConv(hidden, d_out, "mean")
            elif name == "sage_max":
                self.c1, self.c2 = SageMax(d_in, hidden), SageMax(hidden, d_out)
            elif name == "gat":
                self.c1 = dglnn.GATConv(d_in, hidden // HEADS, HEADS)
                self.c2 = dglnn.GATConv(hidden, d_out, 1)
            else:
                self.c1 = dglnn.GINConv(_mlp(d_in, hidden, hidden), "sum")
                self.c2 = dglnn.GINConv(_mlp(hidden, hidden, d_out), "sum")

        def forward(self, x: torch.Tensor, g: Any) -> torch.Tensor:
            h = self.c1(g, x)
            h = h.flatten(1) if self.flatten else h
            h = self.c2(g, h.relu())
            return h.flatten(1) if self.flatten else h

    return Net()


def dgl_graph(name: str, edge_index: torch.Tensor, n: int) -> Any:
    """The DGL graph of `edge_index`, with self loops for the layers that PyG gives them, formats made."""
    from baselines import optional

    dgl = optional("dgl")
    g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=n)
    if name in ("gcn", "gat"):
        g = dgl.add_self_loop(dgl.remove_self_loop(g))
    return g.formats(["csc", "csr", "coo"])


class Run:
    """One framework's model, optimizer and graph argument: `epoch()` trains once."""

    def __init__(self, framework: str, model: str, hidden: int, args: argparse.Namespace, data: tuple) -> None:
        import torch_geometric.nn

        import gnnc.nn

        edge_index, n, x, y = data
        device = torch.device(args.device)
        edge_index, x, y = edge_index.to(device), x.to(device), y.to(device)
        torch.manual_seed(0)
        reference = PygShaped(model, torch_geometric.nn, args.in_features, hidden, args.classes)
        if framework.startswith("pyg"):
            net = reference
            self.graph: Any = edge_index
        elif framework.startswith("gnnc"):
            net = PygShaped(model, gnnc.nn, args.in_features, hidden, args.classes)
            net.load_state_dict(reference.state_dict())
            self.graph = edge_index
        else:
            net = dgl_model(model, args.in_features, hidden, args.classes)
            self.graph = dgl_graph(model, edge_index, n).to(device)
        net = net.to(device)
        self.cuda = device.type == "cuda"
        self.model = net
        self.opt = torch.optim.Adam(net.parameters())
        self.call = torch.compile(net, fullgraph=framework == "gnnc-compile") if framework.endswith("compile") else net
        self.x, self.y = x, y
        self.autocast = args.autocast
        self.device_type = device.type

    def epoch(self) -> None:
        self.opt.zero_grad()
        with torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.autocast == "bf16"):
            loss = F.cross_entropy(self.call(self.x, self.graph), self.y)
        loss.backward()
        self.opt.step()
        if self.cuda:
            torch.cuda.synchronize()


def make_data(graph: str, args: argparse.Namespace) -> tuple:
    if graph.startswith("rmat-"):
        src, dst, n = graphs.rmat_edges(int(graph.split("-")[1]), 16, seed=0)
    else:
        src, dst, n = graphs.edges(graph)
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    order = np.lexsort((src, dst))  # edge ids in CSR order (by destination) for every framework
    edge_index = torch.from_numpy(np.ascontiguousarray(np.stack([src[order], dst[order]])))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, args.in_features, generator=g)
    y = torch.randint(0, args.classes, (n,), generator=g)
    return edge_index, n, x, y


# ------------------------------------------------------------------ memory


def memory_child(args: argparse.Namespace) -> None:
    """In a subprocess: one framework's transient epoch peak, as JSON {"delta": bytes}."""
    framework, graph, model, hidden = args.memory_child.split(":")
    data = make_data(graph, args)
    run = Run(framework, model, int(hidden), args, data)
    for _ in range(max(args.warmup, 1)):
        run.epoch()  # compiles, builds caches and optimizer state
    gc.collect()
    procmem.trim_heap()
    base = procmem.reset_peak()
    for _ in range(2):
        run.epoch()
    print(json.dumps({"delta": procmem.status("VmHWM") - base, "base": base}))


def measure_memory(framework: str, graph: str, model: str, hidden: int, args: argparse.Namespace) -> float | str:
    """MiB of one framework's transient epoch peak, from a fresh subprocess; or why it failed."""
    cmd = [
        sys.executable,
        __file__,
        "--in-features",
        str(args.in_features),
        "--classes",
        str(args.classes),
        "--threads",
        str(args.threads),
        "--warmup",
        str(args.warmup),
        "--autocast",
        args.autocast,
        "--memory-child",
        f"{framework}:{graph}:{model}:{hidden}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return f"failed: {lines[-1][:80] if lines else proc.returncode}"
    return json.loads(proc.stdout.strip().splitlines()[-1])["delta"] / 2**20


# -------------------------------------------------------------------- main


def time_cell(graph: str, model: str, hidden: int, frameworks: list[str], args: argparse.Namespace, data) -> dict:
    """Median epoch seconds per framework (or the reason it did not run), round-robin."""
    runs: dict[str, Run] = {}
    result: dict[str, Any] = {}
    for fw in frameworks:
        try:
            run = Run(fw, model, hidden, args, data)
            start = time.perf_counter()
            for _ in range(args.warmup):
                run.epoch()
            result[f"{fw} warm-up s"] = time.perf_counter() - start
            runs[fw] = run
        except Exception as exc:  # noqa: BLE001 - a baseline that fails is reported, not fatal
            result[fw] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
    times: dict[str, list[float]] = {fw: [] for fw in runs}
    order = list(runs)
    for rep in range(args.reps):
        shift = rep % max(len(order), 1)
        for fw in order[shift:] + order[:shift]:
            start = time.perf_counter()
            runs[fw].epoch()
            times[fw].append(time.perf_counter() - start)
    for fw, t in times.items():
        result[fw] = statistics.median(t)
    if args.device.startswith("cuda") and not args.no_memory:
        result["memory MiB"] = {fw: _cuda_epoch_peak(run) for fw, run in runs.items()}
    return result


def _cuda_epoch_peak(run: Run) -> float:
    """MiB of device memory one epoch allocates beyond what was live before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    run.epoch()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="mdual,rmat-16")
    parser.add_argument("--hidden", default="64,256")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--in-features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda to train every framework on the GPU")
    parser.add_argument(
        "--autocast",
        default="none",
        choices=("none", "bf16"),
        help="bf16: every framework's forward and loss under torch.autocast(dtype=torch.bfloat16)",
    )
    parser.add_argument("--json", help="write every cell's numbers to this file")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    # every cell compiles the same forward for other layer types: one recompile each
    torch._dynamo.config.recompile_limit = 256
    if args.memory_child:
        memory_child(args)
        return
    frameworks = args.frameworks.split(",")
    for kind, given, known in (("framework", frameworks, FRAMEWORKS), ("model", args.models.split(","), MODELS)):
        unknown = [name for name in given if name not in known]
        if unknown:
            parser.error(f"unknown {kind} {unknown[0]!r}: use {', '.join(known)}")
    print(f"# {machine(args.device)}")
    if args.autocast != "none":
        print(f"# under torch.autocast({args.autocast}): mixed precision, not issue 26's float32 setting")
    cells = []
    header = f"{'graph':9s} {'model':9s} {'hid':>4s} " + " ".join(f"{fw:>12s}" for fw in frameworks)
    header += f" {'best/gnnc':>9s} {'eager/cmp':>9s}"
    for graph in args.graphs.split(","):
        data = make_data(graph, args)
        print(f"# {graph}: {data[1]} vertices, {data[0].shape[1]} edges, {args.in_features} input features")
        print(f"# epoch ms (median of {args.reps}, round-robin after {args.warmup} warm-up epochs)")
        print(header)
        for hidden in map(int, args.hidden.split(",")):
            for model in args.models.split(","):
                cell = time_cell(graph, model, hidden, frameworks, args, data)
                ms = {fw: cell[fw] * 1e3 for fw in frameworks if isinstance(cell.get(fw), float)}
                best = min((ms[fw] for fw in BASELINES if fw in ms), default=float("nan"))
                row = f"{graph:9s} {model:9s} {hidden:4d} "
                row += " ".join(f"{ms[fw]:12.1f}" if fw in ms else f"{'-':>12s}" for fw in frameworks)
                ratio = best / ms["gnnc"] if "gnnc" in ms else float("nan")
                compiled = ms["gnnc"] / ms["gnnc-compile"] if {"gnnc", "gnnc-compile"} <= set(ms) else float("nan")
                print(f"{row} {ratio:9.2f} {compiled:9.2f}", flush=True)
                for fw in frameworks:
                    if isinstance(cell.get(fw), str):
                        print(f"#   {fw}: {cell[fw]}")
                if args.device.startswith("cuda") and "memory MiB" in cell:
                    mem = cell["memory MiB"]
                    print(
                        f"{'':9s} {'peak MiB':9s} {'':4s} "
                        + " ".join(f"{mem[fw]:12.0f}" if fw in mem else f"{'-':>12s}" for fw in frameworks),
                        flush=True,
                    )
                elif not args.no_memory:
                    mem = {fw: measure_memory(fw, graph, model, hidden, args) for fw in frameworks}
                    print(
                        f"{'':9s} {'peak MiB':9s} {'':4s} "
                        + " ".join(f"{m:12.0f}" if isinstance(m, float) else f"{'fail':>12s}" for m in mem.values()),
                        flush=True,
                    )
                    cell["memory MiB"] = mem
                cells.append({"graph": graph, "model": model, "hidden": hidden, **cell})
        del data
        gc.collect()
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "cells": cells}, indent=1, default=str))


if __name__ == "__main__":
    main()
