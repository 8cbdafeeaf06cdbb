"""Train the schedule predictor on one set of graphs and judge it on graphs it never saw.

    python benchmarks/tune_predictor.py            # collect what is missing, fit, evaluate
    python benchmarks/tune_predictor.py --quick    # two graphs a side, two kernels
    python benchmarks/tune_predictor.py --evaluate-only

For every (graph, kernel, sizes) case it times *every* candidate of
`gnnc.runtime.tune`'s space, round robin, `--rounds` times (the exhaustive
mode of `tune`), and appends the record to `benchmarks/results/tune_records.jsonl`
(cases already there are not measured again, so an interrupted run resumes).

Then:

- the predictor is fit on the TRAIN graphs' records only and written to
  `gnnc/autotune/schedule_model.json`, the model gnnc ships (`--no-write` keeps
  the shipped one);
- on each HELD-OUT case the model predicts a schedule without looking at that
  case's times; the prediction counts as good when its measured time is within
  15% of the fastest candidate measured on that case (issue 7's target: >= 80%
  of cases);
- the tuned best against the unscheduled kernel (the plain parallel loop)
  must be >= 1.2x in geometric mean, and never slower than the default
  heuristic's pick (it is chosen among candidates that include the default, so
  this line checks the bookkeeping more than the search).

Graphs come from packages (`benchmarks/fetch_graphs.sh`) or are synthetic;
graphs not unpacked are skipped with a note. The machine and its load are
printed: records measured on another machine are not mixed in.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import graphs as bench_graphs  # noqa: E402

import gnnc  # noqa: E402
from gnnc.autotune import predictor  # noqa: E402
from gnnc.autotune.cache import machine_key, read_records  # noqa: E402
from gnnc.graph.io import load_graph  # noqa: E402
from gnnc.runtime import tune  # noqa: E402

RECORDS = REPO / "benchmarks" / "results" / "tune_records.jsonl"
GOOD_WITHIN = 1.15

_GT = bench_graphs._GT_DIR

# name -> how to build it; package graphs absent on this machine are skipped
TRAIN = {
    "4elt": ("package", "4elt"),
    "copter2": ("package", "copter2"),
    "email-Enron": ("package", "email-Enron"),
    "cond-mat-2005": ("package", "cond-mat-2005"),
    "hep-th": ("file", _GT / "hep-th.gt.gz"),
    "rmat-14": ("rmat", (14, 16, 0)),
    "rmat-16-ef8": ("rmat", (16, 8, 0)),
    # a graph as large as the largest held-out one (mdual, 258K vertices), where
    # rows stream from memory: without it the model extrapolated `prefetch 0`
    # from cache-resident graphs to mdual (1.2-1.6x slower than the best there)
    "rmat-17-ef8": ("rmat", (17, 8, 0)),
    "rand100k-0.01": ("featgraph", (0.01, 0)),
}
HELD_OUT = {
    "mdual": ("package", "mdual"),
    "astro-ph": ("package", "astro-ph"),
    "as-22july06": ("package", "as-22july06"),
    "pgp-strong": ("package", "pgp-strong"),
    "power": ("file", _GT / "power.gt.gz"),
    "rmat-15": ("rmat", (15, 16, 1)),
    "rand100k-0.02": ("featgraph", (0.02, 1)),
}
QUICK_TRAIN = ("4elt", "rmat-14")
QUICK_HELD_OUT = ("as-22july06", "rmat-15")

# (example file, kernel, sizes)
CASES = [
    ("gcn.gnn", "gcn", {"F": 32}),
    ("gcn.gnn", "gcn", {"F": 128}),
    ("sage_max.gnn", "sage_max", {"F": 32}),
    ("sage_max.gnn", "sage_max", {"F": 128}),
    ("sage_mean.gnn", "sage_mean", {"F": 64}),
    ("attention.gnn", "attention", {"H": 1, "D": 32}),
    ("attention.gnn", "attention", {"H": 4, "D": 32}),
    ("gat.gnn", "gat", {"H": 1, "F": 32}),
    ("gat.gnn", "gat", {"H": 4, "F": 64}),
]
QUICK_CASES = [CASES[0], CASES[2]]


def build_graph(spec: tuple):
    kind, arg = spec
    if kind == "package":
        return bench_graphs.load(arg, symmetric=None)
    if kind == "file":
        path = bench_graphs.data_dir() / arg
        if not path.is_file():
            raise FileNotFoundError(f"{path} (run benchmarks/fetch_graphs.sh)")
        return load_graph(path)
    if kind == "rmat":
        scale, ef, seed = arg
        return bench_graphs.rmat(scale, ef, seed=seed)
    if kind == "featgraph":
        scale, seed = arg
        return bench_graphs.featgraph_rand100k(seed=seed, scale=scale)
    raise ValueError(kind)


def case_id(graph_name: str, kernel: str, dims: dict) -> str:
    return json.dumps([graph_name, kernel, dims], sort_keys=True)


def existing_records(machine: str) -> dict[str, dict]:
    out = {}
    for r in read_records(RECORDS):
        if r.get("machine") == machine:
            out[case_id(r["graph_name"], r["kernel"], r["dims"])] = r
    return out


def collect(names: dict[str, tuple], cases: list, split: str, rounds: int, machine: str) -> None:
    have = existing_records(machine)
    modules: dict[str, object] = {}
    RECORDS.parent.mkdir(parents=True, exist_ok=True)
    for name, spec in names.items():
        todo = [c for c in cases if case_id(name, c[1], c[2]) not in have]
        if not todo:
            continue
        try:
            graph = build_graph(spec)
        except Exception as exc:  # noqa: BLE001 - a missing package graph is a note, not a failure
            print(f"  {split}: {name} skipped: {exc}", flush=True)
            continue
        for file, kname, dims in todo:
            mod = modules.get(file) or modules.setdefault(file, gnnc.compile(REPO / "examples" / file))
            kernel = mod.kernels[kname]
            t0 = time.perf_counter()
            result = tune.tune(kernel, graph, dict(dims), budget=None, exhaustive_rounds=rounds)
            record = tune.record_of(kernel, graph, result, name)
            record["split"] = split
            with open(RECORDS, "a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
            print(
                f"  {split}: {name} {kname} {dims}: best {result.best or '(as compiled)'} "
                f"{result.speedup_over_unscheduled:.2f}x unscheduled, {result.speedup_over_default:.2f}x default "
                f"({time.perf_counter() - t0:.0f}s)",
                flush=True,
            )


CONFIRM = REPO / "benchmarks" / "results" / "tune_confirm.jsonl"


def confirm(record: dict, keys: list[str], graph_cache: dict, modules: dict, rounds: int) -> dict[str, float]:
    """Times `keys` of one case again, head to head, round robin; the fastest sample of each.

    The tuned best is the fastest of some 25 noisy times, so its own time is
    biased low (the winner's curse); a prediction is judged against it in a
    fresh, interleaved measurement instead. Results are kept in CONFIRM.
    """
    cid = case_id(record["graph_name"], record["kernel"], record["dims"]) + json.dumps(sorted(keys))
    for line in CONFIRM.read_text().splitlines() if CONFIRM.exists() else []:
        saved = json.loads(line)
        if saved["id"] == cid and saved["machine"] == record["machine"]:
            return saved["times"]
    name = record["graph_name"]
    if name not in graph_cache:
        graph_cache[name] = build_graph({**TRAIN, **HELD_OUT}[name])
    graph = graph_cache[name]
    file = next(f for f, k, _ in CASES if k == record["kernel"])
    mod = modules.get(file) or modules.setdefault(file, gnnc.compile(REPO / "examples" / file))
    bench = tune._Bench(mod.kernels[record["kernel"]], graph, dict(record["dims"]), record["threads"], seed=1)
    calls = {}
    for key in keys:
        bench.prepare(key)
        warm = bench.time(key, 1)
        calls[key] = max(1, math.ceil(tune.MIN_SAMPLE_SECONDS / max(warm, 1e-7)))
    samples: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(rounds):
        for key in keys:
            samples[key].append(bench.time(key, calls[key]))
    times = {k: min(v) for k, v in samples.items()}
    with open(CONFIRM, "a") as f:
        f.write(json.dumps({"id": cid, "machine": record["machine"], "times": times}) + "\n")
    return times


def evaluate(model: predictor.Model, records: list[dict], rounds: int) -> bool:
    good, rows, gains, vs_default = 0, [], [], []
    graph_cache: dict = {}
    modules: dict = {}
    for r in records:
        times = r["times"]
        best_key = min(times, key=times.get)
        traits = r["traits"]
        keys = [_canonical(k, traits["row"]) for k in times]
        pred = model.predict(r["graph"], traits, keys)
        origin = "predicted"
        if pred is None or pred not in times:
            pred, origin = r["default"], "default (no prediction)"
        if pred == best_key:
            ratio = 1.0
        else:
            again = confirm(r, [pred, best_key], graph_cache, modules, rounds)
            ratio = again[pred] / again[best_key]
        good += ratio <= GOOD_WITHIN
        gains.append(times[r["baseline"]] / times[best_key])
        vs_default.append(times[r["default"]] / times[best_key])
        rows.append(
            (
                r["graph_name"],
                r["kernel"],
                _dims(r["dims"]),
                pred or "(as compiled)",
                origin,
                ratio,
                best_key or "(as compiled)",
                times[r["baseline"]] / times[best_key],
            )
        )
    print(
        f"\n{'graph':<14} {'kernel':<10} {'sizes':<10} {'predicted':<34} {'vs best':>8}  {'tuned best':<34} {'vs unsched':>10}"
    )
    for g, k, d, p, o, ratio, b, gain in rows:
        mark = "" if ratio <= GOOD_WITHIN else "  <- more than 15% slower"
        p_shown = p if o == "predicted" else f"{p} [default]"
        print(f"{g:<14} {k:<10} {d:<10} {p_shown:<34} {ratio:>7.2f}x  {b:<34} {gain:>9.2f}x{mark}")
    n = len(records)
    frac = good / n if n else 0.0
    geo = math.exp(sum(math.log(x) for x in gains) / n) if n else 0.0
    worst_default = min(vs_default) if vs_default else 0.0
    ok1, ok2, ok3 = frac >= 0.8, geo >= 1.2, worst_default >= 1.0
    print("\n('vs best': the predicted schedule's time over the tuned best's, both timed again head to head)")
    print(
        f"TARGET predicted within 15% of the tuned best on held-out graphs: {good}/{n} = {frac:.0%} "
        f"(target >= 80%): {'MET' if ok1 else 'NOT MET'}"
    )
    # three decimals: 1.198x printed as "1.20x ... NOT MET" read as a contradiction
    print(
        f"TARGET tuned best vs unscheduled kernel, geometric mean: {geo:.3f}x (target >= 1.2x): "
        f"{'MET' if ok2 else 'NOT MET'}"
    )
    print(
        f"TARGET tuned best never slower than the default heuristic: worst {worst_default:.2f}x "
        f"(target >= 1.00x): {'MET' if ok3 else 'NOT MET'}"
    )
    return ok1 and ok2 and ok3


def _canonical(key: str, row: int) -> str:
    sched, threads = predictor.split_threads(key)
    return predictor.join_threads(predictor.canonical_schedule(sched, row), threads)


def _dims(d: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(d.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="two graphs a side and two kernels")
    ap.add_argument("--rounds", type=int, default=5, help="round-robin timings of every candidate (median)")
    ap.add_argument("--evaluate-only", action="store_true", help="measure nothing; fit and evaluate the records")
    ap.add_argument("--no-write", action="store_true", help="do not overwrite gnnc/autotune/schedule_model.json")
    args = ap.parse_args(argv)

    machine = machine_key()
    train = {k: v for k, v in TRAIN.items() if not args.quick or k in QUICK_TRAIN}
    held = {k: v for k, v in HELD_OUT.items() if not args.quick or k in QUICK_HELD_OUT}
    cases = QUICK_CASES if args.quick else CASES
    print(f"machine: {machine}; load average {os.getloadavg()[0]:.2f}; records: {RECORDS}", flush=True)
    if not args.evaluate_only:
        collect(train, cases, "train", args.rounds, machine)
        collect(held, cases, "held-out", args.rounds, machine)

    wanted = {case_id(n, c[1], c[2]) for n in {**train, **held} for c in cases}
    records = [r for k, r in existing_records(machine).items() if k in wanted]
    train_records = [r for r in records if r["graph_name"] in train]
    held_records = [r for r in records if r["graph_name"] in held]
    if not train_records or not held_records:
        print("no records to fit or to evaluate (were the graphs found?)")
        return 1
    model = predictor.Model.fit(train_records, machine)
    print(
        f"\npredictor fit on {len(train_records)} cases of {len({r['graph_name'] for r in train_records})} "
        f"training graphs; evaluated on {len(held_records)} cases of "
        f"{len({r['graph_name'] for r in held_records})} held-out graphs"
    )
    if not args.no_write and not args.quick:
        predictor.SHIPPED_MODEL.write_text(model.to_json() + "\n")
        print(f"wrote {predictor.SHIPPED_MODEL.relative_to(REPO)}")
    return 0 if evaluate(model, held_records, args.rounds) else 2


if __name__ == "__main__":
    sys.exit(main())
