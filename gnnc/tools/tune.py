"""`gnnc tune`: the command around `tune.py` (sizes, budget, progress bar, summary, cache)."""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from gnnc.errors import ArgumentError, GnncError, ToolchainError


def parse_budget(text: str) -> float:
    """`60s`, `2m`, `1.5m`, `90` (seconds) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|sec|m|min)?\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise ArgumentError(f"--budget {text!r}: expected a positive time such as 60s or 2m")
    return float(m.group(1)) * (60.0 if m.group(2) in ("m", "min") else 1.0)


def parse_feats(items: list[str]) -> dict[str, int]:
    dims: dict[str, int] = {}
    for item in items:
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name.isidentifier() or not value.isdigit() or int(value) < 1:
            raise ArgumentError(f"--feat {item!r}: expected NAME=SIZE with a positive size, e.g. F=128")
        if name in dims:
            raise ArgumentError(f"--feat gives {name} twice")
        dims[name] = int(value)
    return dims


class ProgressBar:
    """The tuning budget's seconds as a tqdm bar, with the stage and the best schedule so far.

    On a terminal the bar is redrawn in place; in a log or a pipe, where a
    redrawn line would pile up, the bar is off and each halving round prints a line.
    """

    def __init__(self, label: str, budget: float | None, stream: TextIO = sys.stderr):
        self.label = label
        self.budget = budget
        self.stream = stream
        self.tty = stream.isatty()
        self.bar = tqdm(
            total=budget,
            desc=label,
            file=stream,
            disable=not self.tty,
            bar_format="{desc} |{bar:30}| {n:5.1f}/{total:.0f}s{postfix}" if budget else "{desc} {n:5.1f}s{postfix}",
        )

    def __call__(self, stage: str, elapsed: float, result: Any) -> None:
        best = ""
        if result is not None and result.measured:
            best = f"  best: {result.best or '(as compiled)'} {result.speedup_over_default:.2f}x vs default"
        if self.tty:
            self.bar.n = min(elapsed, self.budget) if self.budget else elapsed
            self.bar.set_postfix_str(f"{stage}{best}")
        elif stage.startswith("round"):
            total = f"/{self.budget:.0f}s" if self.budget else "s"
            self.stream.write(f"{self.label} {elapsed:5.1f}{total}  {stage}{best}\n")
            self.stream.flush()

    def done(self) -> None:
        self.bar.close()


def run(args: argparse.Namespace) -> int:
    from gnnc.autotune.cache import TuningCache
    from gnnc.runtime import tune

    cache = TuningCache()
    if args.file is None:
        if not args.retrain:
            raise ArgumentError("gnnc tune needs a .gnn file (or --retrain alone to refit the predictor)")
        return _retrain(cache)
    if args.graph is None:
        raise ArgumentError("gnnc tune needs --graph FILE: the graph to tune on")
    budget = parse_budget(args.budget)
    dims = parse_feats(args.feat)
    if args.threads is not None and args.threads < 1:
        raise ArgumentError(f"--threads must be a positive integer, got {args.threads}")
    if args.target == "cuda":
        from gnnc.runtime import cuda

        cuda.driver()  # no GPU: a ToolchainError naming what is missing
        raise ToolchainError("tuning cuda thread mappings is not implemented yet: gnnc tune measures CPU schedules")

    import gnnc
    from gnnc.graph.io import load_graph

    start = time.perf_counter()
    graph = load_graph(args.graph, symmetric=True if args.symmetric else None)
    module = gnnc.compile(args.file, kernels=args.kernels)
    names = list(module.kernels)
    print(
        f"tuning {', '.join(names)} from {args.file} on {Path(args.graph).name} "
        f"({graph.num_vertices} vertices, {graph.num_edges} edges), {_dims_text(dims)}, "
        f"budget {budget:g}s" + (f" ({budget / len(names):.0f}s per kernel)" if len(names) > 1 else "")
    )
    remaining = budget - (time.perf_counter() - start)
    results = []
    for i, name in enumerate(names):
        kernel = module.kernels[name]
        share = remaining / (len(names) - i)
        wanted = {d: dims[d] for d in dims if _uses(kernel, d)} if len(names) > 1 else dims
        bar = ProgressBar(name, share)
        t0 = time.perf_counter()
        try:
            if args.no_cache:
                result = tune.tune(kernel, graph, wanted, share, threads=args.threads, progress=bar)
            else:
                result = tune.tune_and_store(
                    kernel,
                    graph,
                    wanted,
                    share,
                    threads=args.threads,
                    progress=bar,
                    cache=cache,
                    graph_name=Path(args.graph).name,
                )
        finally:
            bar.done()
        remaining -= time.perf_counter() - t0
        _summary(result)
        results.append((kernel, wanted, result))
    _relabel_hint(graph, results, deadline=start + budget, threads=args.threads)
    if not args.no_cache:
        print(f"cached in {cache.cache_path}: calls with schedule='auto' on this graph and sizes use it")
    if args.retrain:
        return _retrain(cache)
    return 0


def _uses(kernel: Any, dim: str) -> bool:
    return any(dim in p.shape for p in kernel.signature.params)


def _dims_text(dims: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in dims.items()) or "no feature sizes"


def _summary(result: Any) -> None:
    from gnnc.runtime.tune import UNSCHEDULED

    n_timed = sum(1 for m in result.measured.values() if m.samples)
    print(
        f"\n{result.kernel} ({_dims_text(result.dims)}, {result.threads} threads): {n_timed} schedules measured in "
        f"{result.rounds} halving rounds, {result.elapsed:.1f}s"
        + (f"; {len(result.refused)} do not apply" if result.refused else "")
        + (f"; {len(result.skipped)} not reached within the budget" if result.skipped else "")
    )
    print(result.table())
    print(
        f"best: {result.best or '(as compiled)'}: {result.speedup_over_default:.2f}x the default "
        f"({result.default or 'as compiled'}), {result.time_of(UNSCHEDULED) / result.time_of(result.best):.2f}x "
        "the unscheduled kernel"
    )
    for key, why in sorted(result.refused.items()):
        print(f"  not applicable: {key}: {why}")
    if result.machine_was_busy:
        print(
            f"warning: the load average was {result.load_average:.1f} when tuning started: other processes "
            "share these cores, which makes fewer threads look faster than they are on a quiet machine; "
            "tune again when it is quiet"
        )


#: Relabelling is suggested when it makes the tuned schedule at least this much faster.
RELABEL_WORTH = 1.1


def _relabel_hint(graph: Any, results: list, deadline: float, threads: int | None) -> None:
    """Times the tuned schedules on the graph relabelled for locality, if the budget allows, and says what it buys."""
    from gnnc.runtime import tune

    if graph.bipartite or graph.num_edges == 0 or not results:
        return
    # each kernel's check runs two 5-round timings of its best schedule; the relabelling itself is O(E log E)
    cost = sum(10 * max(r.time_of(r.best), tune.MIN_SAMPLE_SECONDS) for _, _, r in results) + graph.num_edges * 2e-7
    if time.perf_counter() + cost > deadline:
        print("\n(not enough budget left to measure a relabelled graph: see README, graph.reordered('rcm'))")
        return
    relabelled = graph.reordered("rcm").graph
    gains = {}
    for kernel, dims, result in results:
        directives, n = result.best, threads
        try:
            gains[result.kernel] = tune.relabel_speedup(kernel, graph, relabelled, dims, directives, threads=n)
        except GnncError as exc:
            print(f"\nrelabelling not measured for {result.kernel}: {exc}")
    if not gains:
        return
    text = ", ".join(f"{k} {g:.2f}x" for k, g in gains.items())
    if max(gains.values()) >= RELABEL_WORTH:
        print(
            f"\nrelabelled for locality (graph.reordered('rcm')), the tuned schedules ran: {text}. The ids of "
            "this graph scatter neighbours: relabel it once and keep its features in the new order (README: graphs)."
        )
    else:
        print(
            f"\nrelabelled for locality (graph.reordered('rcm')), the tuned schedules ran {text}: "
            "this graph's numbering is already local enough."
        )


def _retrain(cache: Any) -> int:
    from gnnc.runtime import tune

    model, n = tune.retrain(cache)
    print(
        f"predictor refit from {n} local tuning records ({len(model.cases)} cases with the shipped ones): "
        f"{cache.directory / 'model.json'}"
    )
    return 0
