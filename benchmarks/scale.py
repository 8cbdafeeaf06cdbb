"""Training at scale: mini-batch and full-batch epochs of gnnc.nn against PyG and DGL; 2 ranks.

    python benchmarks/scale.py                                   # everything below on rmat-22 and mdual (long)
    python benchmarks/scale.py --graphs rmat-16 --batches 4 --parts minibatch   # a quick look
    python benchmarks/scale.py --parts fullbatch --models sage,gcn --frameworks gnnc
    python benchmarks/scale.py --json out.json --plot scale.png

Issue 27's targets, 2 threads: mini-batch GraphSAGE (mean) and GAT epochs
(fan-out 15, 10; batches of 1,024 seeds) at least 2x faster than PyG and DGL
end to end, sampling included, and 3x on the message passing; full-batch
GraphSAGE and GCN training on R-MAT scale 22 (4M vertices, 64M edges, 128
features) at hidden 128 in less than 12 GB; 2 ranks x 1 thread no slower
than 1 rank x 2 threads.

Graphs: `rmat-S` (Graph500's R-MAT, 2**S vertices, 16 x 2**S edges, made
once and kept as an in-CSR in `.npy` files under the data folder, then
memory-mapped), and the package graphs of benchmarks/graphs.py (the largest
is mdual: 258K vertices, 1M directed edges). Features are random
(`--features`, default 128), labels random over 32 classes.

Mini-batch (`--parts minibatch`, one subprocess per graph): one sampler for
all, DGL's `NeighborSampler` (`--fanouts`): each batch is sampled once and
every framework trains on it, in an order that rotates per batch, after a
warm-up pass over the same batches (each framework alone: compiles and first
calls; gnnc compiles each variant once per process, and a batch whose blocks
cross 16K edges may call another). An epoch is `--batches` batches of
`--batch-size` seeds (the seeds are a random 1% of the vertices unless --batches says);
its time is the sum of its phases: *sampling* (DGL's sampler and the feature
rows' gather, the same batches for all), *conversion* (the framework's graph
from the block: gnnc's `gnnc.nn.blocks` and its CSR build, PyG's edge_index;
DGL takes its own block), *kernels* and *dense* (the training step, split by
torch.profiler over `--profile-batches` batches spread over the epoch, the
median of their shares applied to the timed steps: the message passing is gnnc's ops, what DGL's `update_all`, `apply_edges` and
`edge_softmax` run (with GAT's leaky ReLU and attention dropout on the edge
scores), and what PyG's `propagate` and `edge_updater` run, with the
backward of each found by its autograd sequence number; the rest of the
step is dense).
Peak: the process's resident high-water mark over a framework's warm-up
pass, above the RSS before it (the graph, features and batches are shared).

Full-batch (`--parts fullbatch`): one subprocess per (graph, model,
framework), so that each peak is its own: the whole process's VmHWM,
graph, features and all. Before starting one, the estimate of what it needs
is checked against MemAvailable ("skipped: needs N GiB"), and the parent
kills a child when the machine's MemAvailable falls under `--reserve-gib`
("stopped: the machine ran low on memory"): the machine is shared. Each
framework gets the graph in its own form: gnnc a `gnnc.Graph` over the
memory-mapped in-CSR (its layers make no edge_index), DGL its graph (with
self loops for GCN), PyG a `2 x E` edge_index.

2 ranks (`--parts ranks`): gnnc's SAGE mini-batch epoch with torchrun, 2
ranks x 1 thread against 1 rank x 2 threads, the same batches (each rank
half), the sampler of examples/neighbor_sampling.py over the memory-mapped
in-CSR (the ranks share its pages), and one step's gradients compared with
one process's on the union of the two batches.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))
sys.path.insert(0, str(HERE.parent))  # this checkout's gnnc

import graphs  # noqa: E402
import procmem  # noqa: E402

FRAMEWORKS = ("gnnc", "pyg", "dgl")
MINIBATCH_MODELS = ("sage", "gat")
FULLBATCH_MODELS = ("sage", "gcn")
CLASSES = 32
HEADS = 4
GIB = 1 << 30


# ----------------------------------------------------------------------------- graphs


@dataclass
class GraphFiles:
    """A graph's in-CSR (edges sorted by destination), memory-mapped read-only."""

    name: str
    indptr: np.ndarray
    indices: np.ndarray

    @property
    def num_vertices(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])


def graph_files(name: str) -> GraphFiles:
    """The graph's in-CSR files, made on first use (R-MAT generated, package graphs read)."""
    folder = graphs.data_dir() / "scale" / name
    if not (folder / "indices.npy").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        if name.startswith("rmat-"):
            src, dst, n = graphs.rmat_edges(int(name.split("-")[1]))
        else:
            src, dst, n = graphs.edges(name)
        order = np.argsort(dst, kind="stable")
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
        np.save(folder / "indptr.tmp.npy", indptr)
        np.save(folder / "indices.tmp.npy", src[order].astype(np.int64))
        del src, dst, order
        os.replace(folder / "indptr.tmp.npy", folder / "indptr.npy")
        os.replace(folder / "indices.tmp.npy", folder / "indices.npy")
    load = {k: np.load(folder / f"{k}.npy", mmap_mode="r") for k in ("indptr", "indices")}
    return GraphFiles(name, load["indptr"], load["indices"])


def features(num_vertices: int, width: int, seed: int = 0) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.empty(num_vertices, width)
    step = 1 << 20
    for start in range(0, num_vertices, step):  # in pieces: no float64 temporary of the whole
        stop = min(num_vertices, start + step)
        x[start:stop] = torch.randn(stop - start, width, generator=g)
    return x, torch.randint(0, CLASSES, (num_vertices,), generator=g)


# ----------------------------------------------------------------------------- models


def make_models(model: str, fw: str, d_in: int, hidden: int) -> Any:
    """A 2-layer model of `fw` whose forward takes (x, the framework's blocks)."""
    import torch

    if fw == "dgl":
        dgl = _dgl()
        from dgl import nn as dnn

        class DglNet(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                if model == "sage":
                    self.convs = torch.nn.ModuleList(
                        [dnn.SAGEConv(d_in, hidden, "mean"), dnn.SAGEConv(hidden, CLASSES, "mean")]
                    )
                elif model == "gcn":
                    self.convs = torch.nn.ModuleList(
                        [
                            dnn.GraphConv(d_in, hidden, allow_zero_in_degree=True),
                            dnn.GraphConv(hidden, CLASSES, allow_zero_in_degree=True),
                        ]
                    )
                else:
                    self.convs = torch.nn.ModuleList(
                        [
                            # a sampled block has destinations without in-edges: PyG and gnnc give them 0 (+ bias)
                            dnn.GATConv(d_in, hidden // HEADS, HEADS, allow_zero_in_degree=True),
                            dnn.GATConv(hidden, CLASSES, 1, allow_zero_in_degree=True),
                        ]
                    )

            def forward(self, x: torch.Tensor, blocks: list) -> torch.Tensor:
                for i, (conv, block) in enumerate(zip(self.convs, blocks)):
                    x = conv(block, x).flatten(1) if model == "gat" else conv(block, x)
                    x = torch.relu_(x) if i == 0 else x  # in place: one [V, hidden] tensor less
                return x

        del dgl
        return DglNet()
    lib = _pyg_nn() if fw == "pyg" else _gnnc_nn()

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if model == "sage":
                self.convs = torch.nn.ModuleList([lib.SAGEConv(d_in, hidden), lib.SAGEConv(hidden, CLASSES)])
            elif model == "gcn":
                self.convs = torch.nn.ModuleList([lib.GCNConv(d_in, hidden), lib.GCNConv(hidden, CLASSES)])
            else:
                self.convs = torch.nn.ModuleList(
                    [lib.GATConv(d_in, hidden // HEADS, heads=HEADS), lib.GATConv(hidden, CLASSES, heads=1)]
                )

        def forward(self, x: torch.Tensor, blocks: list) -> torch.Tensor:
            for i, (conv, block) in enumerate(zip(self.convs, blocks)):
                if fw == "pyg" and isinstance(block, tuple):  # PyG's bipartite call on a block
                    edge_index, size = block
                    x = conv((x, x[: size[1]]), edge_index, size=size) if model != "gcn" else conv(x, edge_index)
                else:
                    x = conv(x, block)
                x = torch.relu_(x) if i == 0 else x  # in place: one [V, hidden] tensor less
            return x

    return Net()


def _dgl() -> Any:
    import baselines

    dgl = baselines.optional("dgl")
    if dgl is None:
        raise RuntimeError(f"dgl: {baselines.library_versions()['dgl']}")
    return dgl


def _pyg_nn() -> Any:
    import torch_geometric.nn

    return torch_geometric.nn


def _gnnc_nn() -> Any:
    import gnnc.nn

    return gnnc.nn


# ----------------------------------------------------------------------------- phases


def message_passing_seconds(prof: Any, fw: str) -> float:
    """Seconds of a profiled run spent in message passing, forward and backward (see the module docstring)."""
    events = prof.events()
    forward_names = {
        "gnnc": lambda n: n.startswith("gnnc::") and not n.endswith("_backward"),
        # dgl_scopes' calls; a kernel function outside them (none in these models) counts alone
        "dgl": lambda n: (
            n.startswith("dgl::") or n in ("GSpMM", "GSDDMM", "EdgeSoftmax", "GSpMM_hetero", "GSDDMM_hetero")
        ),
        "pyg": lambda n: n in ("pyg::propagate", "pyg::edge_updater"),
    }[fw]
    marked: set[int] = set()
    total = 0.0
    for ev in events:
        if not forward_names(ev.name) or _has_ancestor(ev, forward_names):
            continue
        total += ev.cpu_time_total
        parent = ev.cpu_parent
        if fw == "gnnc" and parent is not None and parent.name == ev.name.removeprefix("gnnc::"):
            # an eager call's op runs inside its autograd Function (gnnc.torch.ops' `eager`):
            # the backward node, which runs the backward op, carries the Function's number
            marked.add(parent.sequence_nr)
        for child in _descendants(ev):
            if child.sequence_nr >= 0:
                marked.add(child.sequence_nr)
        if ev.sequence_nr >= 0:
            marked.add(ev.sequence_nr)
    # the backward nodes of the forward ops above: the engine's evaluate_function events
    for ev in events:
        if ev.name.startswith("autograd::engine::evaluate_function:") and ev.sequence_nr in marked:
            total += ev.cpu_time_total
    return total / 1e6


def _has_ancestor(ev: Any, pred: Any) -> bool:
    parent = ev.cpu_parent
    while parent is not None:
        if pred(parent.name):
            return True
        parent = parent.cpu_parent
    return False


def _descendants(ev: Any) -> list:
    out, stack = [], list(ev.cpu_children)
    while stack:
        e = stack.pop()
        out.append(e)
        stack.extend(e.cpu_children)
    return out


@contextlib.contextmanager
def pyg_scopes(model: Any) -> Any:
    """The propagate and edge_updater of PyG's layers in `model` inside record_function scopes
    the profiler names (each instance's: PyG generates them per layer class)."""
    import torch
    from torch_geometric.nn.conv import MessagePassing

    def scoped(fn: Any, name: str) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            with torch.profiler.record_function(name):
                return fn(*args, **kwargs)

        return run

    patched = []
    for module in model.modules():
        if isinstance(module, MessagePassing):
            for attr in ("propagate", "edge_updater"):
                had = attr in vars(module)
                previous = vars(module).get(attr)
                setattr(module, attr, scoped(getattr(module, attr), f"pyg::{attr}"))
                patched.append((module, attr, had, previous))
    try:
        yield
    finally:
        for module, attr, had, previous in patched:
            if had:
                setattr(module, attr, previous)
            else:
                delattr(module, attr)


@contextlib.contextmanager
def dgl_scopes(model: Any) -> Any:
    """DGL's message passing inside record_function scopes the profiler names, as PyG's
    `propagate`: `update_all` and `apply_edges` (the kernel functions, and around them the
    graph frames' work and the mean's division by the degrees), `edge_softmax`, and GAT's
    leaky ReLU and attention dropout on the edge scores (PyG's `edge_updater` holds both)."""
    import dgl
    import torch
    from dgl.nn.pytorch.conv import GATConv, gatconv

    def scoped(fn: Any, name: str) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            with torch.profiler.record_function(name):
                return fn(*args, **kwargs)

        return run

    restore: list[tuple[Any, str, Any, bool]] = []

    def patch(owner: Any, attr: str, name: str) -> None:
        had = attr in vars(owner)
        restore.append((owner, attr, vars(owner).get(attr), had))
        setattr(owner, attr, scoped(getattr(owner, attr), name))

    for attr in ("update_all", "apply_edges"):
        patch(dgl.DGLGraph, attr, f"dgl::{attr}")
    patch(gatconv, "edge_softmax", "dgl::edge_softmax")
    for module in model.modules():
        if isinstance(module, GATConv):
            patch(module.leaky_relu, "forward", "dgl::leaky_relu")
            patch(module.attn_drop, "forward", "dgl::attn_drop")
    try:
        yield
    finally:
        for owner, attr, previous, had in reversed(restore):
            if had:
                setattr(owner, attr, previous)
            else:
                delattr(owner, attr)


# ----------------------------------------------------------------------------- mini-batch


@dataclass
class Phases:
    sampling: float = 0.0
    conversion: float = 0.0
    step: float = 0.0
    kernels_share: float = 0.0  # of the step, from the profiled batches

    @property
    def kernels(self) -> float:
        return self.step * self.kernels_share

    @property
    def dense(self) -> float:
        return self.step - self.kernels

    @property
    def total(self) -> float:
        return self.sampling + self.conversion + self.step


@dataclass
class MiniBatchCell:
    graph: str
    model: str
    framework: str
    batches: int
    phases: dict = field(default_factory=dict)
    epoch_s: float = 0.0
    peak_mib: float = 0.0
    note: str = ""


def convert(fw: str, dgl_blocks: list) -> Any:
    """The framework's graph arguments for a batch (the conversion phase)."""
    import torch

    if fw == "dgl":
        return dgl_blocks
    if fw == "pyg":
        return [
            (torch.stack(b.edges(order="eid")), (int(b.num_src_nodes()), int(b.num_dst_nodes()))) for b in dgl_blocks
        ]
    from gnnc.nn import Block
    from gnnc.torch import graphs as gnnc_graphs

    # what gnnc.nn.blocks(dgl_blocks) does, without its cache per block object: a new batch's cost
    blocks = [
        Block(torch.stack(b.edges(order="eid")).to(torch.int64), int(b.num_src_nodes()), int(b.num_dst_nodes()))
        for b in dgl_blocks
    ]
    for b in blocks:  # the CSR build a first kernel call would do, here, to time it apart
        gnnc_graphs.graph_of(b.edge_index, b.size)
    return blocks


def minibatch(args: argparse.Namespace, graph_name: str) -> list[MiniBatchCell]:
    """Every (model, framework) mini-batch cell of one graph, in this process."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    dgl = _dgl()
    files = graph_files(graph_name)
    n = files.num_vertices
    graph = _dgl_graph(dgl, files)
    x_all, y_all = features(n, args.features)
    sampler = dgl.dataloading.NeighborSampler([int(f) for f in args.fanouts.split(",")])
    rng = torch.Generator().manual_seed(1)
    seeds = torch.randperm(n, generator=rng)
    num_batches = args.batches or max(1, n // 100 // args.batch_size)
    profiled = min(args.profile_batches, num_batches)
    seeds = seeds[: num_batches * args.batch_size]
    batches = seeds.split(args.batch_size)
    frameworks = [f for f in args.frameworks if f in FRAMEWORKS]
    cells = []
    for model in args.models:
        if model not in MINIBATCH_MODELS:
            continue
        nets, opts, phases, peaks = {}, {}, {fw: Phases() for fw in frameworks}, {}
        for fw in frameworks:
            torch.manual_seed(0)
            nets[fw] = make_models(model, fw, args.features, args.hidden)
            opts[fw] = torch.optim.Adam(nets[fw].parameters(), lr=0.01)

        def sample(seeds_b: torch.Tensor) -> tuple:
            input_nodes, output_nodes, blocks = sampler.sample_blocks(graph, seeds_b)
            return x_all[input_nodes], y_all[output_nodes], blocks

        def step(fw: str, x: torch.Tensor, y: torch.Tensor, converted: Any) -> None:
            opts[fw].zero_grad()
            loss = F.cross_entropy(nets[fw](x, converted), y)
            loss.backward()
            opts[fw].step()

        # the epoch's batches, sampled once: every framework trains on the same ones
        epoch, sampled = [], []
        for b in range(num_batches):
            start = time.perf_counter()
            epoch.append(sample(batches[b]))
            sampled.append(time.perf_counter() - start)
        # a warm-up pass over the epoch, each framework alone: compiles (gnnc compiles a variant once
        # per process, which a batch past 16K edges may need), first calls, and the transient peak
        compiles = _CompileCount()
        for fw in frameworks:
            base = procmem.reset_peak()
            for x, y, blocks in epoch:
                step(fw, x, y, convert(fw, blocks))
            peaks[fw] = (procmem.status("VmHWM") - base) / (1 << 20)
        compiles.stop()
        progress = _progress(num_batches, f"{graph_name} {model} mini-batch", args)
        for b, (x, y, blocks) in enumerate(epoch):
            order = frameworks[b % len(frameworks) :] + frameworks[: b % len(frameworks)]
            for fw in order:
                phases[fw].sampling += sampled[b]
                start = time.perf_counter()
                converted = convert(fw, blocks)
                phases[fw].conversion += time.perf_counter() - start
                start = time.perf_counter()
                step(fw, x, y, converted)
                phases[fw].step += time.perf_counter() - start
            progress.update(1)
        progress.close()
        # the message passing's share of the step, from batches spread over the epoch, the
        # frameworks in turns (a share from the first two batches moved 2.8x-3.2x between runs).
        # The share is the median of the batches' shares: a profiled step the machine stalls
        # outside the message passing (DGL's GAT: 106 and 161 ms among 26-36 ms steps) takes a
        # third off a share of summed times over 8 batches (GAT ratios of 2.4x-3.9x between runs)
        shares: dict[str, list[float]] = {fw: [] for fw in frameworks}
        for i, b in enumerate(np.linspace(0, num_batches - 1, profiled).round().astype(int)):
            x, y, blocks = epoch[b]
            for fw in frameworks[i % len(frameworks) :] + frameworks[: i % len(frameworks)]:
                converted = convert(fw, blocks)
                scopes = {"pyg": pyg_scopes, "dgl": dgl_scopes}.get(fw, lambda _: contextlib.nullcontext())(nets[fw])
                with scopes, profile(activities=[ProfilerActivity.CPU]) as prof:
                    start = time.perf_counter()
                    step(fw, x, y, converted)
                    took = time.perf_counter() - start
                if took > 0:
                    shares[fw].append(message_passing_seconds(prof, fw) / took)
        for fw in frameworks:
            phases[fw].kernels_share = min(1.0, float(np.median(shares[fw]))) if shares[fw] else 0.0
            cells.append(
                MiniBatchCell(
                    graph_name,
                    model,
                    fw,
                    num_batches,
                    {
                        "sampling": phases[fw].sampling,
                        "conversion": phases[fw].conversion,
                        "kernels": phases[fw].kernels,
                        "dense": phases[fw].dense,
                    },
                    phases[fw].total,
                    peaks[fw],
                    f"{compiles.count} gnnc compiles in the warm-up pass" if fw == "gnnc" else "",
                )
            )
    return cells


class _CompileCount(logging.Handler):
    """Counts gnnc's compiles (the compiler's INFO lines) until stopped."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0
        self.logger = logging.getLogger("gnnc.driver.compiler")
        self.level_before = self.logger.level
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if "compiled in" in record.getMessage():
            self.count += 1

    def stop(self) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_before)


def _dgl_graph(dgl: Any, files: GraphFiles, sampling: bool = True) -> Any:
    """The DGL graph of the in-CSR; for sampling, only its CSC (the sampler's format)."""
    import torch

    dst = torch.repeat_interleave(torch.arange(files.num_vertices), torch.from_numpy(np.diff(files.indptr)))
    src = torch.from_numpy(np.array(files.indices))
    g = dgl.graph((src, dst), num_nodes=files.num_vertices)
    del src, dst
    return g.formats(["csc"]) if sampling else g


def _progress(total: int, what: str, args: argparse.Namespace) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=what, disable=args.no_progress, file=sys.stderr, leave=False)


# ----------------------------------------------------------------------------- full-batch


@dataclass
class FullBatchCell:
    graph: str
    model: str
    framework: str
    epoch_s: float | None
    peak_gib: float | None
    note: str = ""


def fullbatch_estimate(fw: str, model: str, files: GraphFiles, args: argparse.Namespace) -> float:
    """Bytes a full-batch epoch of `fw` needs at the least (a floor, not a forecast): what
    decides whether it is tried; the watchdog guards the rest."""
    v, e = files.num_vertices, files.num_edges
    dense = v * (args.features + 3 * args.hidden) * 4  # the features, a layer's input, output and gradient
    if fw == "gnnc":
        return dense + e * 8 * 3  # in_eid, dst and the reversed graph's sources (the CSC itself is mapped)
    if fw == "dgl":
        return dense + e * 8 * 4  # the graph's COO and CSC
    # PyG's scatter path materialises a message per edge, and its gradient
    return dense + e * 8 * 2 + 2 * e * max(args.features, args.hidden) * 4


def fullbatch_child(args: argparse.Namespace) -> None:
    """One (graph, model, framework) full-batch run, reported as JSON on stdout."""
    import torch
    import torch.nn.functional as F

    files = graph_files(args.graph_name)
    n = files.num_vertices
    x, y = features(n, args.features)
    fw, model = args.framework, args.model_name
    if fw == "gnnc":
        import gnnc

        # the memory-mapped edges, not copied; the layers take the Graph itself (no 2 x E edge_index)
        g_arg: Any = gnnc.Graph.from_csc(files.indptr, files.indices)
    elif fw == "pyg":
        dst = torch.repeat_interleave(torch.arange(n), torch.from_numpy(np.diff(files.indptr)))
        g_arg = torch.stack([torch.from_numpy(np.array(files.indices)), dst])
        del dst
    else:
        dgl = _dgl()
        g_arg = _dgl_graph(dgl, files, sampling=False)
        if model == "gcn":
            g_arg = dgl.add_self_loop(g_arg)
    torch.manual_seed(0)
    net = make_models(model, fw, args.features, args.hidden)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)

    def epoch() -> None:
        opt.zero_grad()
        F.cross_entropy(net(x, [g_arg, g_arg]), y).backward()
        opt.step()

    base = procmem.reset_peak()
    epoch()  # warm-up: compiles, first calls
    times = []
    for _ in range(args.epochs):
        start = time.perf_counter()
        epoch()
        times.append(time.perf_counter() - start)
    print(json.dumps({"epoch_s": min(times), "peak": procmem.status("VmHWM"), "base": base}))


def fullbatch(args: argparse.Namespace, graph_name: str) -> list[FullBatchCell]:
    files = graph_files(graph_name)
    cells = []
    for model in args.models:
        if model not in FULLBATCH_MODELS:
            continue
        for fw in args.frameworks:
            need = fullbatch_estimate(fw, model, files, args)
            free = procmem.mem_available(0) - args.reserve_gib * GIB
            if need > free:
                note = f"skipped: needs ~{need / GIB:.0f} GiB, {max(0, free) / GIB:.0f} GiB available"
                cells.append(FullBatchCell(graph_name, model, fw, None, None, note))
                print(f"{graph_name} {model} {fw}: {note}", file=sys.stderr)
                continue
            cells.append(run_fullbatch_child(args, graph_name, model, fw))
            print(f"{graph_name} {model} {fw}: {cells[-1]}", file=sys.stderr)
    return cells


def run_fullbatch_child(args: argparse.Namespace, graph_name: str, model: str, fw: str) -> FullBatchCell:
    command = [sys.executable, __file__, "--fullbatch-child", "--graph-name", graph_name, "--model-name", model]
    command += ["--framework", fw, "--features", str(args.features), "--hidden", str(args.hidden)]
    command += ["--epochs", str(args.epochs), "--threads", str(args.threads)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(args))
    low = threading.Event()

    def watch() -> None:  # the machine is shared: stop the child before the OOM killer picks anyone
        while child.poll() is None:
            if procmem.mem_available(0) < args.reserve_gib * GIB:
                low.set()
                child.kill()
                return
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()
    try:
        out, err = child.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return FullBatchCell(graph_name, model, fw, None, None, f"stopped after {args.timeout} s")
    if low.is_set():
        return FullBatchCell(graph_name, model, fw, None, None, "stopped: the machine ran low on memory")
    if child.returncode != 0:
        lines = err.strip().splitlines() or ["?"]
        last = next((line for line in reversed(lines) if "Error" in line), lines[-1])[:200]
        return FullBatchCell(graph_name, model, fw, None, None, f"failed: {last}")
    got = json.loads(out.strip().splitlines()[-1])
    return FullBatchCell(graph_name, model, fw, got["epoch_s"], got["peak"] / GIB)


# One node on loopback by address: with --standalone, torchrun gives the ranks MASTER_ADDR =
# socket.getfqdn(), which some machines resolve to an interface the ranks cannot reach.
LOOPBACK = ["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--local-addr", "127.0.0.1"]


def _env(args: argparse.Namespace) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(HERE.parent)}


# ----------------------------------------------------------------------------- 2 ranks


@dataclass
class RanksCell:
    graph: str
    batches: int
    one_rank_two_threads_s: float
    two_ranks_one_thread_s: float
    max_gradient_error: float
    note: str = ""


def ranks_worker(args: argparse.Namespace) -> None:
    """One rank (torchrun) or the single process: gnnc SAGE mini-batch epoch; times and gradients."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from neighbor_sampling import NeighborSampler

    import gnnc.nn

    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    files = graph_files(args.graph_name)
    n = files.num_vertices
    with _quiet():
        sampler = NeighborSampler.from_csc(
            torch.from_numpy(files.indptr), torch.from_numpy(files.indices), [int(f) for f in args.fanouts.split(",")]
        )
    x_all = np.load(_features_file(files, args.features), mmap_mode="r")
    y_all = torch.randint(0, CLASSES, (n,), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    net = make_models("sage", "gnnc", args.features, args.hidden)
    model = torch.nn.parallel.DistributedDataParallel(net) if distributed else net
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    seeds = torch.randperm(n, generator=torch.Generator().manual_seed(1))[: (args.batches + 1) * args.batch_size]
    if seeds.shape[0] < 2 * args.batch_size:
        raise SystemExit(f"{args.graph_name} has too few vertices for a gradient batch and an epoch")
    batches = list(seeds.split(args.batch_size))

    def loss_of(seed_batch: torch.Tensor, seed: int) -> torch.Tensor:
        batch = sampler.sample(seed_batch, torch.Generator().manual_seed(seed))
        x = torch.from_numpy(np.asarray(x_all[batch.n_id.numpy()]))
        return F.cross_entropy(model(x, gnnc.nn.blocks(batch)), y_all[seed_batch])

    # one step's gradients: each rank its half of batch 0 (checked against one process on the union)
    half = batches[0].shape[0] // 2
    mine = [batches[0][:half], batches[0][half:]]
    if world == 1:
        total = sum(loss_of(part, seed=i) for i, part in enumerate(mine)) / 2
        total.backward()
    else:
        loss_of(mine[rank], seed=rank).backward()
    grads = {k: p.grad.detach().clone() for k, p in net.named_parameters()}
    opt.zero_grad()
    # the epoch: batches 1.., split over the ranks
    epoch = batches[1 : 1 + (len(batches) - 1) // world * world]  # as many steps on every rank
    start = time.perf_counter()
    for i, b in enumerate(epoch):
        if i % world != rank:
            continue
        opt.zero_grad()
        loss_of(b, seed=100 + i).backward()
        opt.step()
    seconds = time.perf_counter() - start
    if distributed:
        times = [torch.zeros(1) for _ in range(world)]
        dist.all_gather(times, torch.tensor([seconds]))
        seconds = max(float(t) for t in times)
    if rank == 0:
        torch.save({"grads": grads, "seconds": seconds}, args.ranks_out)
    if distributed:
        # DDP's Reducer holds the process group. Destroyed with the Reducer (at this function's
        # end), the group joined gloo's threads holding the GIL while one of them waited for it to
        # free the all_gather's tensors: a hang at exit, now and then (torch issue 56297). Dropped
        # first, the group goes in destroy_process_group, whose binding releases the GIL.
        del model
        dist.destroy_process_group()


@contextlib.contextmanager
def _quiet() -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: a read-only numpy array (the memory map) as a tensor
        yield


def _features_file(files: GraphFiles, width: int) -> Path:
    path = graphs.data_dir() / "scale" / files.name / f"x{width}.npy"
    if not path.is_file():
        x, _ = features(files.num_vertices, width)
        np.save(path.with_suffix(".tmp.npy"), x.numpy())
        os.replace(path.with_suffix(".tmp.npy"), path)
    return path


def ranks(args: argparse.Namespace, graph_name: str) -> RanksCell:
    import torch

    files = graph_files(graph_name)
    _features_file(files, args.features)
    out = {}
    common = ["--ranks-worker", "--graph-name", graph_name, "--features", str(args.features)]
    common += ["--hidden", str(args.hidden), "--batches", str(args.batches or 8), "--batch-size", str(args.batch_size)]
    common += ["--fanouts", args.fanouts]
    for label, launcher, threads in (
        ("one", [sys.executable, __file__], 2),
        ("two", [sys.executable, "-m", "torch.distributed.run", *LOOPBACK, "--nproc_per_node", "2", __file__], 1),
    ):
        path = Path(f"/tmp/gnnc-scale-ranks-{os.getpid()}-{label}.pt")
        env = {**_env(args), "OMP_NUM_THREADS": str(threads), "GLOO_SOCKET_IFNAME": "lo"}
        # --threads too: the worker's main() sets torch's threads from it (2 by default, which
        # gave each of 2 ranks 2 threads on 2 cores: 3x slower than one process)
        done = subprocess.run(
            [*launcher, *common, "--threads", str(threads), "--ranks-out", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
        if done.returncode != 0:
            return RanksCell(
                graph_name,
                args.batches or 8,
                0,
                0,
                float("nan"),
                f"failed: {done.stderr.strip().splitlines()[-1][:160]}",
            )
        out[label] = torch.load(path)
        path.unlink()
    err = max(
        float(
            (out["one"]["grads"][k] - out["two"]["grads"][k]).abs().max()
            / max(1.0, float(out["one"]["grads"][k].abs().max()))
        )
        for k in out["one"]["grads"]
    )
    return RanksCell(graph_name, args.batches or 8, out["one"]["seconds"], out["two"]["seconds"], err)


# ----------------------------------------------------------------------------- report


def machine() -> str:
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    load = os.getloadavg()
    return (
        f"{cpu}; Python {platform.python_version()}, torch {torch.__version__}; {time.strftime('%Y-%m-%d %H:%M')}; "
        f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (a shared machine); {procmem.allocator()}"
    )


def print_minibatch(cells: list[MiniBatchCell]) -> None:
    print("\n## Mini-batch epochs (same sampled batches for every framework)\n")
    print(
        "| graph | model | framework | batches | epoch s | sampling | conversion | kernels | dense | peak MiB | end-to-end vs gnnc | message passing vs gnnc |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in cells:
        ours = next((d for d in cells if (d.graph, d.model, d.framework) == (c.graph, c.model, "gnnc")), None)
        ratio = f"{c.epoch_s / ours.epoch_s:.2f}x" if ours and ours.epoch_s else "-"
        mp = f"{c.phases['kernels'] / ours.phases['kernels']:.2f}x" if ours and ours.phases["kernels"] else "-"
        p = c.phases
        print(
            f"| {c.graph} | {c.model} | {c.framework} | {c.batches} | {c.epoch_s:.2f} | {p['sampling']:.2f} | "
            f"{p['conversion']:.2f} | {p['kernels']:.2f} | {p['dense']:.2f} | {c.peak_mib:.0f} | {ratio} | {mp} |"
        )


def print_fullbatch(cells: list[FullBatchCell]) -> None:
    print("\n## Full-batch epochs\n")
    print("| graph | model | framework | epoch s | peak GiB (process) | note |")
    print("|---|---|---|---:|---:|---|")
    for c in cells:
        t = f"{c.epoch_s:.2f}" if c.epoch_s is not None else "-"
        m = f"{c.peak_gib:.2f}" if c.peak_gib is not None else "-"
        print(f"| {c.graph} | {c.model} | {c.framework} | {t} | {m} | {c.note} |")


def print_ranks(cells: list[RanksCell]) -> None:
    print("\n## 2 ranks x 1 thread against 1 rank x 2 threads (gnnc SAGE mini-batch)\n")
    print("| graph | batches | 1 x 2 s | 2 x 1 s | ratio | max gradient error (relative) | note |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for c in cells:
        ratio = f"{c.one_rank_two_threads_s / c.two_ranks_one_thread_s:.2f}x" if c.two_ranks_one_thread_s else "-"
        print(
            f"| {c.graph} | {c.batches} | {c.one_rank_two_threads_s:.2f} | {c.two_ranks_one_thread_s:.2f} | {ratio} | "
            f"{c.max_gradient_error:.2e} | {c.note} |"
        )


def plot(path: str, mini: list[MiniBatchCell], full: list[FullBatchCell]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    keys = sorted({(c.graph, c.model) for c in mini})
    phases = ("sampling", "conversion", "kernels", "dense")
    colors = ("#9e9e9e", "#ffb74d", "#1976d2", "#81c784")
    xs, labels = 0.0, []
    for g, m in keys:
        for fw in FRAMEWORKS:
            c = next((d for d in mini if (d.graph, d.model, d.framework) == (g, m, fw)), None)
            if c is None:
                continue
            bottom = 0.0
            for ph, col in zip(phases, colors):
                axes[0].bar(xs, c.phases[ph], bottom=bottom, color=col, label=ph if xs == 0 else None)
                bottom += c.phases[ph]
            labels.append((xs, f"{g}\n{m}\n{fw}"))
            xs += 1
        xs += 0.5
    axes[0].set_xticks([x for x, _ in labels], [t for _, t in labels], fontsize=7)
    axes[0].set_ylabel("seconds per epoch")
    axes[0].set_title("mini-batch epoch, by phase")
    axes[0].legend()
    done = [c for c in full if c.peak_gib is not None]
    if not done:
        axes[1].text(0.5, 0.5, "no full-batch run in this report", ha="center", va="center")
    axes[1].bar(range(len(done)), [c.peak_gib for c in done], color="#1976d2")
    axes[1].set_xticks(range(len(done)), [f"{c.graph}\n{c.model}\n{c.framework}" for c in done], fontsize=7)
    axes[1].axhline(12 / 1.073741824, color="red", linestyle="--", label="12 GB")
    axes[1].set_ylabel("peak GiB (process)")
    axes[1].set_title("full-batch training peak memory")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", default="rmat-22,mdual")
    parser.add_argument("--parts", default="minibatch,fullbatch,ranks")
    parser.add_argument("--models", default="sage,gat,gcn")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--fanouts", default="15,10")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=0, help="batches per mini-batch epoch (0: 1%% of the vertices)")
    parser.add_argument("--profile-batches", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2, help="timed full-batch epochs (the best is kept)")
    parser.add_argument("--reserve-gib", type=float, default=3.0, help="memory left to the rest of the machine")
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("--json", help="write the results there")
    parser.add_argument("--plot", help="write a plot there (png)")
    parser.add_argument("--no-progress", action="store_true")
    # internal: the subprocesses
    parser.add_argument("--fullbatch-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ranks-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--minibatch-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--graph-name", help=argparse.SUPPRESS)
    parser.add_argument("--model-name", help=argparse.SUPPRESS)
    parser.add_argument("--framework", help=argparse.SUPPRESS)
    parser.add_argument("--ranks-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.models = args.models.split(",")
    args.frameworks = args.frameworks.split(",")

    import torch

    torch.set_num_threads(args.threads)
    if args.fullbatch_child:
        return fullbatch_child(args)
    if args.ranks_worker:
        return ranks_worker(args)
    if args.minibatch_child:
        print(json.dumps([asdict(c) for c in minibatch(args, args.graph_name)]))
        return None

    parts = args.parts.split(",")
    print(f"# benchmarks/scale.py\n\n{machine()}; {args.threads} threads\n")
    mini: list[MiniBatchCell] = []
    full: list[FullBatchCell] = []
    rank_cells: list[RanksCell] = []
    for g in args.graphs.split(","):
        graph_files(g)
        if "minibatch" in parts:
            mini += run_minibatch_child(args, g)
        if "fullbatch" in parts:
            full += fullbatch(args, g)
        if "ranks" in parts:
            rank_cells.append(ranks(args, g))
    if mini:
        print_minibatch(mini)
    if full:
        print_fullbatch(full)
    if rank_cells:
        print_ranks(rank_cells)
    print(f"\nafter: load average {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "minibatch": [asdict(c) for c in mini],
                    "fullbatch": [asdict(c) for c in full],
                    "ranks": [asdict(c) for c in rank_cells],
                },
                indent=1,
            )
        )
    if args.plot:
        plot(args.plot, mini, full)
    return None


def run_minibatch_child(args: argparse.Namespace, graph_name: str) -> list[MiniBatchCell]:
    """The mini-batch cells of a graph, measured in a subprocess (its memory is its own)."""
    command = [sys.executable, __file__, "--minibatch-child", "--graph-name", graph_name]
    for opt in ("features", "hidden", "fanouts", "batch_size", "batches", "profile_batches", "threads"):
        command += [f"--{opt.replace('_', '-')}", str(getattr(args, opt))]
    command += ["--models", ",".join(args.models), "--frameworks", ",".join(args.frameworks)]
    if args.no_progress:
        command.append("--no-progress")
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, env=_env(args), timeout=args.timeout)
    if done.returncode != 0:
        print(f"{graph_name}: the mini-batch run failed (exit {done.returncode})", file=sys.stderr)
        return []
    return [MiniBatchCell(**c) for c in json.loads(done.stdout.strip().splitlines()[-1])]


if __name__ == "__main__":
    main()
