"""Schedule search: measure candidate schedules of one kernel on one graph, keep the best.

The space (CPU): the kernel as compiled (no partitioning, tiling, grouping
or reordering: the plain parallel loop, the *unscheduled* baseline), the
default heuristic's pick, prefetch distances (0: none), vector widths (slices of the
row and the whole row), FeatGraph's source partitions K alone and with
feature tiles, feature tiles alone, Seastar's degree sort, Huang et al.'s
locality order and neighbour groups, the Hilbert edge order for edge-wise
kernels, the kernel compiled for the call's sizes (`specialize`), and fewer
threads. A candidate the compiler refuses for this kernel
(partitioning a softmax, say) is dropped with its reason.

The search is successive halving, model-guided:

1. candidates are ordered by the predictor's guess (`predictor.py`), the
   unscheduled kernel and the default first; each is compiled (compiles are
   cached on disk), run once to warm its plans and caches, and timed once,
   until a quarter of the budget is left or all are in;
2. combinations: the single candidates measure one optimisation each, but
   they compose (a row held in registers and a longer prefetch distance,
   say). The best candidate of each family (vectorize, prefetch, partition
   and tiles, vertex order, neighbour groups, specialize) that beat the unscheduled
   kernel is joined with the best of the others, up to three families at a
   time (`combination_keys`), and the joins are compiled and timed like the
   rest; a join the compiler refuses is dropped;
3. the faster half, plus the unscheduled kernel and the default (the summary
   compares against them), is timed again, round robin, with twice the
   repetitions; this repeats until one candidate is left or the next round
   would overrun the budget.

Rounds run candidates in turn rather than one after another, so a noisy
neighbour on a shared machine slows them alike. A candidate's time is the
fastest of its samples (as `timeit` advises: another process can only slow a
sample down, so the minimum is the least disturbed estimate; under load the
median favours fewer threads, because a team of threads stalls whenever one
of them is descheduled). A sample of a fast kernel is several calls (at least
`MIN_SAMPLE_SECONDS`). The budget is checked before anything is started,
against estimates from what was measured so far, so the search ends within
the budget unless a single compile or call outlasts it. The winner is the
fastest candidate, which the default took part in: a tuned
schedule is never slower than the default as measured.

Why the search is built this way, and why some candidates are in the space:
docs/design/tuning.md.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from gnnc.autotune import heuristic, predictor
from gnnc.autotune.cache import TuningCache, entry_key, kernel_key, machine_key, usable_cores
from gnnc.errors import ArgumentError, GnncError
from gnnc.ir.schedule import directive_keyword
from gnnc.runtime import memory
from gnnc.runtime.signature import prepare_call, vertex_rows

#: A sample is at least this long (several calls of a fast kernel).
MIN_SAMPLE_SECONDS = 0.01
#: The first stage stops when this fraction of the budget is left for the halving rounds.
HALVING_RESERVE = 0.25
#: Compile time assumed before any compile was measured.
FIRST_COMPILE_ESTIMATE = 1.0

UNSCHEDULED = ""


# ------------------------------------------------------------------ the space


def candidate_keys(traits: dict, cores: int, default_key: str) -> list[str]:
    """Concrete candidate keys (directives, `; threads N` for fewer threads) for a kernel's traits."""
    row = traits["row"]
    keys = [UNSCHEDULED, default_key]
    # prefetch 0: rows that stay in the caches need no prefetch; big graphs lose without it
    keys += [f"prefetch {d}" for d in (0, 4, 16, 32)]
    keys += [f"vectorize {w}" for w in (8, 16, 32) if w < row and row % w == 0]
    if 2 <= row <= 128:  # a 128-float row is eight AVX-512 registers
        keys.append(f"vectorize {row}")
    keys += [f"partition src {k}" for k in (2, 4, 8, 16)]
    if row >= 64:
        keys += [f"tile features {row // k}" for k in (2, 4)]
        keys += [f"partition src {k}; tile features {row // 2}" for k in (4, 8)]
    keys += ["sort degree", "reorder locality", "reorder rcm"]
    if traits["vertex_result"]:
        keys.append(f"reorder rcm; {heuristic.STREAM_OUTPUTS}")
    if traits["edge_result"] and not traits["vertex_result"]:
        keys.append("order edges hilbert")
    keys += [f"group neighbors {g}" for g in (32, 256)]
    if traits.get("sizes"):
        keys.append(f"specialize {traits['sizes']}")
        if traits["vertex_result"]:
            # streamed in id order: with the sizes compiled in, the rows are built in registers
            keys.append(f"specialize {traits['sizes']}; {heuristic.STREAM_OUTPUTS}")
    if traits.get("lane_walks"):
        keys += [f"vectorize edges {w}" for w in (8, 16)]
    # 512-bit vectors pay at wide rows and lose at narrow ones (docs/design/tuning.md)
    keys += [f"simd {w}" for w in (256, 512)]
    if cores > 1:
        keys.append(predictor.join_threads(UNSCHEDULED, 1))
        keys.append(predictor.join_threads(default_key, 1))
    return list(dict.fromkeys(keys))


#: Families of directives, in the order a joined key lists them (one name per
#: combination, so records of different cases name the same join alike).
#: FeatGraph's source partitions and feature tiles are one family.
FAMILIES = ("partition", "order", "group", "vectorize", "lanes", "prefetch", "specialize", "simd")
#: How many families a combination joins at most.
MAX_JOINED = 3


def family_of(directive: str) -> str | None:
    """The family of one directive line; `sort degree` and `reorder locality` are vertex orders."""
    words = directive.split()
    word = directive_keyword(words) if words else ""
    if word == "vectorize_edges":
        return "lanes"
    if word in ("sort", "reorder", "order", "stream"):
        return "order"  # rows written out of order are what streaming stores pay for
    if word == "tile":
        return "partition"
    return word if word in FAMILIES else None


def combination_keys(times: dict[str, float], baseline: float) -> list[str]:
    """Joins of the best candidate of each family that beat `baseline` (see the module docstring).

    `times` maps measured keys to times; keys with a thread count, or that
    already join several families, take no part. The best family is joined
    with each of the next two, then all three.
    """
    best: dict[str, tuple[float, list[str]]] = {}
    for key, t in times.items():
        directives, threads = predictor.split_threads(key)
        lines = [line.strip() for line in directives.split(";") if line.strip()]
        families = {family_of(line) for line in lines}
        if threads is not None or not lines or None in families or not t < baseline:
            continue
        if len(families) > 1:
            continue  # already a join
        family = cast(str, families.pop())  # None was excluded above
        if family not in best or t < best[family][0]:
            best[family] = (t, lines)
    ranked = sorted(best, key=lambda f: best[f][0])[:MAX_JOINED]
    if len(ranked) < 2:
        return []
    groups = [ranked[:1] + [other] for other in ranked[1:]]
    if len(ranked) == 3:
        groups.append(ranked)
    keys = []
    for group in groups:
        lines = [line for f in FAMILIES if f in group for line in best[f][1]]
        keys.append("; ".join(lines))
    return keys


def default_key(kernel: Any, graph: Any, dims: dict[str, int]) -> str:
    """What a call without a schedule runs (the default heuristic's directives; '' for none)."""
    directives = heuristic.kernel_default(kernel, graph, dims)
    return "; ".join(directives.splitlines()) if directives else UNSCHEDULED


def traits_of(kernel: Any, dims: dict[str, int]) -> dict:
    sig = kernel.signature
    return predictor.kernel_traits(kernel._abi, sig.params, sig.results, dims, np.dtype(sig.numpy_dtype).itemsize)


def case_key(kernel: Any, graph: Any, dims: dict[str, int], target: str = "cpu") -> str:
    """The tuning-cache key of one call (kernel, graph signature, sizes, machine)."""
    source = kernel._metadata.get("source")
    if source is None:
        raise ArgumentError(f"{kernel.name}: this shared object carries no source: it cannot be tuned or recompiled")
    return entry_key(kernel_key(source, kernel.name, kernel.signature.dtype), graph.signature(), dims, target)


def sample_inputs(kernel: Any, graph: Any, dims: dict[str, int], seed: int = 0) -> list[np.ndarray | float]:
    """Random inputs of the kernel's signature for the sizes `dims` (every symbolic size must be given)."""
    sig = kernel.signature
    needed = sorted({d for p in sig.params for d in p.shape if isinstance(d, str)})
    missing = [d for d in needed if d not in dims]
    if missing:
        raise ArgumentError(
            f"kernel {sig.name} needs feature sizes for {', '.join(missing)}: give "
            + " ".join(f"--feat {d}=N" for d in missing)
        )
    unused = sorted(set(dims) - set(needed))
    if unused:
        raise ArgumentError(
            f"kernel {sig.name} has no size named {', '.join(unused)} (its sizes: {', '.join(needed) or 'none'})"
        )
    rng = np.random.default_rng(seed)
    out: list[np.ndarray | float] = []
    for p in sig.params:
        # a vertex input's rows depend on where the kernel reads it (bipartite graphs)
        rows = {"E": graph.num_edges, "R": graph.num_relations}
        lead = [vertex_rows(p, graph)[0]] if p.domain == "V" else [rows[p.domain]] if p.domain in rows else []
        shape = lead + [d if isinstance(d, int) else dims[d] for d in p.shape]
        arr = rng.standard_normal(shape).astype(sig.numpy_dtype) * 0.5
        # aligned as torch's tensors are: numpy's offset rows would time extra cache lines
        out.append(memory.aligned(arr) if shape else float(arr))
    return out


# ------------------------------------------------------------------ results


@dataclass
class Measured:
    key: str
    samples: list[float] = field(default_factory=list)
    calls_per_sample: int = 1
    compile_seconds: float = 0.0

    @property
    def time(self) -> float:
        """The fastest sample (see the module docstring)."""
        return min(self.samples) if self.samples else math.inf

    @property
    def median(self) -> float:
        return float(np.median(self.samples)) if self.samples else math.inf


@dataclass
class TuneResult:
    kernel: str
    dims: dict[str, int]
    best: str
    default: str
    measured: dict[str, Measured]
    refused: dict[str, str]
    skipped: list[str]
    elapsed: float
    budget: float | None
    rounds: int
    threads: int
    #: The 1-minute load average when the search started: other processes'
    #: load makes a team of threads wait for a descheduled member, so a busy
    #: machine's timings favour fewer threads (docs/design/tuning.md).
    load_average: float = 0.0

    @property
    def machine_was_busy(self) -> bool:
        return self.load_average >= 1.0

    def time_of(self, key: str) -> float:
        m = self.measured.get(key)
        return m.time if m else math.inf

    @property
    def speedup_over_unscheduled(self) -> float:
        return self.time_of(UNSCHEDULED) / self.time_of(self.best)

    @property
    def speedup_over_default(self) -> float:
        return self.time_of(self.default) / self.time_of(self.best)

    def ranking(self) -> list[Measured]:
        return sorted((m for m in self.measured.values() if m.samples), key=lambda m: m.time)

    def table(self, top: int = 8) -> str:
        """The summary: the fastest candidates, the default and the unscheduled kernel."""
        base = self.time_of(UNSCHEDULED)
        default = self.time_of(self.default)
        shown = self.ranking()[:top]
        for key in (self.default, UNSCHEDULED):
            if key in self.measured and self.measured[key] not in shown:
                shown.append(self.measured[key])
        width = max([len(_label(m.key)) for m in shown] + [8])
        lines = [f"  {'schedule':<{width}}  {'time':>10}  {'samples':>7}  {'vs unscheduled':>14}  {'vs default':>10}"]
        for m in shown:
            tags = []
            if m.key == self.best:
                tags.append("best")
            if m.key == self.default:
                tags.append("default")
            if m.key == UNSCHEDULED:
                tags.append("unscheduled")
            lines.append(
                f"  {_label(m.key):<{width}}  {_ms(m.time):>10}  {len(m.samples):>7}  "
                f"{base / m.time:>13.2f}x  {default / m.time:>9.2f}x" + (f"   <- {', '.join(tags)}" if tags else "")
            )
        return "\n".join(lines)


def _label(key: str) -> str:
    return key or "(as compiled)"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else f"{seconds:.3f} s"


# ------------------------------------------------------------------ search


class _Bench:
    """Runs candidates of one kernel on fixed inputs and reused output buffers."""

    def __init__(self, kernel: Any, graph: Any, dims: dict[str, int], cores: int, seed: int):
        self.kernel = kernel
        self.graph = graph
        self.cores = cores
        args = sample_inputs(kernel, graph, dims, seed)
        self.inputs, self.outputs, self.dims = prepare_call(kernel.signature, graph, tuple(args), {})
        self.runners: dict[str, Callable[[], None]] = {}

    def prepare(self, key: str) -> None:
        """Compiles the candidate (raises GnncError when the compiler refuses it)."""
        directives, threads = predictor.split_threads(key)
        variant = self.kernel._variant(directives.replace("; ", "\n")) if directives else self.kernel._variant("")
        n = threads or self.cores

        def run() -> None:
            variant._run(self.graph, self.inputs, self.outputs, self.dims, n)

        self.runners[key] = run

    def time(self, key: str, calls: int) -> float:
        run = self.runners[key]
        start = time.perf_counter()
        for _ in range(calls):
            run()
        return (time.perf_counter() - start) / calls


def tune(
    kernel: Any,
    graph: Any,
    dims: dict[str, int],
    budget: float | None = 60.0,
    *,
    threads: int | None = None,
    exhaustive_rounds: int = 0,
    seed: int = 0,
    progress: Callable[[str, float, TuneResult | None], None] | None = None,
) -> TuneResult:
    """Searches the schedule space of `kernel` on `graph` at sizes `dims` (see the module docstring).

    `budget` is in seconds (None: no limit). `exhaustive_rounds` > 0 skips
    the halving: every candidate is timed in that many round-robin rounds
    (for predictor training data). `threads` is the most threads a call may
    use (default: every usable core).
    """
    start = time.perf_counter()
    load_at_start = os.getloadavg()[0]
    deadline = math.inf if budget is None else start + budget
    cores = threads or usable_cores()
    bench = _Bench(kernel, graph, dims, cores, seed)
    default = default_key(kernel, graph, bench.dims)
    traits = traits_of(kernel, bench.dims)
    keys = candidate_keys(traits, cores, default)
    refs = [UNSCHEDULED, default]

    model = predictor.load_model()
    guessed = []
    if model is not None:
        row = traits["row"]
        canon = {
            predictor.join_threads(
                predictor.canonical_schedule(predictor.split_threads(k)[0], row), predictor.split_threads(k)[1]
            ): k
            for k in keys
        }
        guessed = [canon[p.key] for p in model.rank(graph.signature(), traits, list(canon))]
        # a join the nearest cases found fastest is tried up front, not only if this case's singles suggest it
        top = model.predict(graph.signature(), traits)
        if top is not None and top not in keys:
            guessed.insert(0, top)
    order = refs + [k for k in guessed if k not in refs] + [k for k in keys if k not in refs and k not in guessed]
    order = list(dict.fromkeys(order))

    measured: dict[str, Measured] = {}
    refused: dict[str, str] = {}
    skipped: list[str] = []
    compile_times: list[float] = []
    state = {"rounds": 0}

    def report(stage: str) -> None:
        if progress is not None:
            progress(stage, time.perf_counter() - start, _result())

    def _result() -> TuneResult:
        timed = [m for m in measured.values() if m.samples]
        best = min(timed, key=lambda m: m.time).key if timed else UNSCHEDULED
        return TuneResult(
            kernel.name,
            dict(bench.dims),
            best,
            default,
            dict(measured),
            dict(refused),
            list(skipped),
            time.perf_counter() - start,
            budget,
            state["rounds"],
            cores,
            load_at_start,
        )

    def typical_time() -> float:
        times = [m.time for m in measured.values() if m.samples]
        return float(np.median(times)) if times else 0.0

    # stage 1: compile, warm up and time each candidate once
    stage_one_end = deadline - (HALVING_RESERVE * budget if budget is not None and not exhaustive_rounds else 0.0)

    def measure_each(keys_in_order: list[str]) -> None:
        for i, key in enumerate(keys_in_order):
            if key in measured or key in refused:
                continue
            compile_estimate = max(compile_times) if compile_times else FIRST_COMPILE_ESTIMATE
            per_call = typical_time()
            if (
                key not in refs
                and time.perf_counter() + compile_estimate + 3 * max(per_call, MIN_SAMPLE_SECONDS) > stage_one_end
            ):
                skipped.extend(k for k in keys_in_order[i:] if k not in measured and k not in refs)
                return
            t0 = time.perf_counter()
            try:
                bench.prepare(key)
            except GnncError as exc:
                refused[key] = str(exc).splitlines()[0]
                continue
            compile_s = time.perf_counter() - t0
            compile_times.append(compile_s)
            warm = bench.time(key, 1)  # plans (partitions, orders) are built here, once per graph
            calls = max(1, math.ceil(MIN_SAMPLE_SECONDS / max(warm, 1e-7)))
            m = measured[key] = Measured(key, calls_per_sample=calls, compile_seconds=compile_s)
            m.samples.append(bench.time(key, calls))
            report(f"measured {_label(key)}")

    measure_each(order)
    # stage 2: joins of the families that paid off on their own (within what is left of stage 1's time)
    if UNSCHEDULED in measured:
        singles = {k: m.time for k, m in measured.items() if m.samples}
        measure_each(combination_keys(singles, measured[UNSCHEDULED].time))

    # stage 3: halving rounds (or the fixed rounds of an exhaustive run)
    survivors = sorted((m for m in measured.values() if m.samples), key=lambda m: m.time)
    reps = 2
    rounds_left = exhaustive_rounds
    while survivors:
        if exhaustive_rounds:
            if rounds_left == 0:
                break
            rounds_left -= 1
            keep = survivors
            reps = 1
        else:
            contenders = [m for m in survivors if m.key not in refs]
            if len(contenders) <= 1 and state["rounds"] > 0:
                break
            half = contenders[: max(1, math.ceil(len(contenders) / 2))]
            keep = half + [measured[k] for k in refs if k in measured]
        cost = sum(m.median * m.calls_per_sample for m in keep) * reps
        if time.perf_counter() + cost > deadline:
            break
        for _ in range(reps):
            for m in keep:
                m.samples.append(bench.time(m.key, m.calls_per_sample))
        state["rounds"] += 1
        survivors = sorted(keep, key=lambda m: m.time)
        reps *= 2
        report(f"round {state['rounds']}: {len(keep)} candidates")
    return _result()


def relabel_speedup(
    kernel: Any,
    graph: Any,
    relabelled: Any,
    dims: dict[str, int],
    key: str,
    *,
    threads: int | None = None,
    rounds: int = 5,
    seed: int = 0,
) -> float:
    """How much faster `key` runs on `relabelled` (a `Graph.reordered` graph) than on `graph`.

    Not a schedule: relabelling changes the ids the caller's tensors are
    indexed by, so it is the caller's choice to make once (README: graphs).
    `gnnc tune` measures it so the user learns what it would buy. Both runs
    are timed round robin; the fastest sample of each counts.
    """
    cores = threads or usable_cores()
    benches = [_Bench(kernel, g, dims, cores, seed) for g in (graph, relabelled)]
    calls = []
    for bench in benches:
        bench.prepare(key)
        warm = bench.time(key, 1)
        calls.append(max(1, math.ceil(MIN_SAMPLE_SECONDS / max(warm, 1e-7))))
    best = [math.inf, math.inf]
    for _ in range(rounds):
        for i, bench in enumerate(benches):
            best[i] = min(best[i], bench.time(key, calls[i]))
    return best[0] / best[1]


def tune_and_store(
    kernel: Any,
    graph: Any,
    dims: dict[str, int],
    budget: float | None = 60.0,
    *,
    cache: TuningCache | None = None,
    graph_name: str = "",
    **options: Any,
) -> TuneResult:
    """`tune`, then the best schedule into the tuning cache and the measurements into its records."""
    cache = cache or TuningCache()
    result = tune(kernel, graph, dims, budget, **options)
    directives, threads = predictor.split_threads(result.best)
    key = case_key(kernel, graph, result.dims)
    cache.store(
        key,
        {
            "schedule": directives,
            "threads": threads,
            "time_s": result.time_of(result.best),
            "default_schedule": result.default,
            "default_time_s": result.time_of(result.default),
            "unscheduled_time_s": result.time_of(UNSCHEDULED),
            "graph_name": graph_name,
        },
    )
    cache.append_record(record_of(kernel, graph, result, graph_name))
    return result


def record_of(kernel: Any, graph: Any, result: TuneResult, graph_name: str = "") -> dict:
    """One tuning run as a predictor training record."""
    return {
        "kernel": kernel.name,
        "kernel_key": case_key(kernel, graph, result.dims).split(" | ")[0],
        "graph": graph.signature(),
        "graph_name": graph_name,
        "dims": result.dims,
        "traits": traits_of(kernel, result.dims),
        "machine": machine_key(),
        "threads": result.threads,
        "times": {m.key: m.time for m in result.measured.values() if m.samples},
        "medians": {m.key: m.median for m in result.measured.values() if m.samples},
        "samples": {m.key: len(m.samples) for m in result.measured.values() if m.samples},
        "baseline": UNSCHEDULED,
        "default": result.default,
        "best": result.best,
        "load_average": result.load_average,
    }


def retrain(cache: TuningCache | None = None, *, include_shipped: bool = True) -> tuple[predictor.Model, int]:
    """Refits the predictor from the local records (and the shipped model's cases); writes the local model."""
    cache = cache or TuningCache()
    records = cache.records()
    if not records:
        raise ArgumentError(f"no tuning records in {cache.records_path}: run `gnnc tune` first")
    model = predictor.Model.fit(records, machine_key())
    if include_shipped:
        shipped = (
            predictor.Model.from_json(predictor.SHIPPED_MODEL.read_text()) if predictor.SHIPPED_MODEL.exists() else None
        )
        if shipped is not None:
            model = predictor.Model(shipped.cases + model.cases, model.machine)
    path = cache.directory / predictor.LOCAL_MODEL
    cache.make_directory()
    from gnnc.autotune.cache import _write_atomically

    _write_atomically(path, model.to_json())
    return model, len(records)
