"""What relabelling a graph for locality (`Graph.reordered("rcm")`) buys each kernel.

    python benchmarks/relabel.py                        # mdual, copter2, astro-ph, rmat-16
    python benchmarks/relabel.py --graphs mdual --threads 2

For each graph and kernel: gnnc on the graph as given and on the reverse
Cuthill-McKee relabelling of it, same kernel, same inputs moved to the new
ids, outputs preallocated, timed round robin in one process (fastest of
--repeat samples); the results are checked to agree once. The time to
relabel (once per graph) is printed beside. Any other library would gain
from the relabelling too: this is a data-layout choice for the user, not a
comparison with the baselines (`run.py` keeps the caller's order).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import graphs as bench_graphs  # noqa: E402
import numpy as np  # noqa: E402

import gnnc  # noqa: E402
from gnnc.runtime.tune import sample_inputs  # noqa: E402

KERNELS = [
    ("gcn", {"F": 32}),
    ("gcn", {"F": 128}),
    ("sage_max", {"F": 32}),
    ("sage_max", {"F": 128}),
    ("attention", {"H": 1, "D": 32}),
    ("gat", {"H": 1, "F": 32}),
    ("gat", {"H": 4, "F": 32}),
]


def load(name: str) -> gnnc.Graph:
    if name.startswith("rmat-"):
        return bench_graphs.rmat(int(name[5:]), 16, seed=0)
    return bench_graphs.load(name, symmetric=None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="+", default=["mdual", "copter2", "astro-ph", "rmat-16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    print(f"threads {args.threads}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'graph':<10} {'kernel':<10} {'sizes':<10} {'given ms':>9} {'relabelled ms':>14} {'speedup':>8}")
    for name in args.graphs:
        try:
            graph = load(name)
        except Exception as exc:  # noqa: BLE001 - a graph whose package is not unpacked is a note
            print(f"{name}: skipped ({exc})")
            continue
        t0 = time.perf_counter()
        r = graph.reordered("rcm")
        print(
            f"{name}: {graph.num_vertices} vertices, {graph.num_edges} edges; relabelled in {time.perf_counter() - t0:.2f} s"
        )
        for kname, dims in KERNELS:
            kernel = getattr(gnnc.compile(REPO / "examples" / f"{kname}.gnn"), kname)
            sig = kernel.signature
            given = sample_inputs(kernel, graph, dims)
            moved = [r.to_new(a, p.domain) for p, a in zip(sig.params, given)]
            runs = []
            for g, xs in ((graph, given), (r.graph, moved)):
                res = kernel(g, *xs, threads=args.threads)
                res = res if isinstance(res, dict) else {"out": res}
                outs = {n: np.empty_like(a) for n, a in res.items()}
                out = outs if len(outs) > 1 else outs["out"]
                runs.append((lambda g=g, xs=xs, out=out: kernel(g, *xs, out=out, threads=args.threads), res))
            domains = {x.name: x.domain for x in sig.results}
            for n, a in runs[0][1].items():
                np.testing.assert_allclose(r.to_old(runs[1][1][n], domains[n]), a, rtol=1e-4, atol=1e-4)
            t0 = time.perf_counter()
            runs[0][0]()
            calls = max(1, math.ceil(0.05 / max(time.perf_counter() - t0, 1e-6)))
            best = [math.inf, math.inf]
            for _ in range(args.repeat):
                for i, (run, _) in enumerate(runs):
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        run()
                    best[i] = min(best[i], (time.perf_counter() - t0) / calls)
            sizes = ",".join(f"{k}={v}" for k, v in dims.items())
            print(
                f"{name:<10} {kname:<10} {sizes:<10} {best[0] * 1e3:>9.2f} {best[1] * 1e3:>14.2f} {best[0] / best[1]:>7.2f}x",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
