"""gnnc against the baselines a user would otherwise pick, on the same arrays.

    python benchmarks/run.py            # the graphs found (see fetch_graphs.sh) + R-MAT
    python benchmarks/run.py --quick    # one mesh and one R-MAT, F = 64

Everything runs in one process on the same arrays; times are medians of
`--repeat` runs after a warm-up, outputs are preallocated where the API
allows (fresh memory costs page faults). The report prints, for each graph x
kernel x F, time, GFLOP/s, GB/s (the bytes a perfect cache would move) and
the ratio of each baseline's time to gnnc's (> 1: gnnc is faster).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import gnnc  # noqa: E402
import graphs as bench_graphs  # noqa: E402

EXAMPLES = HERE.parent / "examples"


def median_time(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@dataclass
class Row:
    graph: str
    kernel: str
    features: int
    impl: str
    seconds: float
    flops: float
    bytes_moved: float
    max_error: float | None = None

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9

    @property
    def gbs(self) -> float:
        return self.bytes_moved / self.seconds / 1e9


def in_csr_matrix(graph: gnnc.Graph, weights: np.ndarray) -> sp.csr_matrix:
    """The V x V matrix whose row v holds v's in-edges: out = A @ x sums them."""
    data = weights[graph.in_eid]
    return sp.csr_matrix((data, graph.in_src, graph.in_indptr), shape=(graph.num_vertices,) * 2)


def bench_gcn(name: str, graph: gnnc.Graph, f: int, repeat: int, module) -> list[Row]:
    rng = np.random.default_rng(0)
    v, e = graph.num_vertices, graph.num_edges
    x = rng.standard_normal((v, f), dtype=np.float32)
    w = rng.standard_normal(e, dtype=np.float32)
    flops = 2.0 * e * f
    bytes_moved = 4.0 * (2 * v * f + e) + 8.0 * (2 * e + v)
    out = np.empty((v, f), np.float32)
    gnnc_s = median_time(lambda: module.gcn(graph, x=x, w=w, out=out), repeat)
    rows = [Row(name, "gcn", f, "gnnc", gnnc_s, flops, bytes_moved)]

    a = in_csr_matrix(graph, w)
    a.sort_indices()
    want = a @ x
    rows[0].max_error = float(np.max(np.abs(out - want), initial=0.0))
    rows.append(Row(name, "gcn", f, "scipy A@X", median_time(lambda: a @ x, repeat), flops, bytes_moved))

    # scipy's own kernel into a preallocated output: the fairest scipy
    from scipy.sparse import _sparsetools

    y = np.zeros((v, f), np.float32)

    def scipy_inplace() -> None:
        y.fill(0)
        _sparsetools.csr_matvecs(v, v, f, a.indptr, a.indices, a.data, x.ravel(), y.ravel())

    rows.append(Row(name, "gcn", f, "scipy csr_matvecs(out)", median_time(scipy_inplace, repeat), flops, bytes_moved))
    return rows


def load_graphs(quick: bool) -> dict[str, gnnc.Graph]:
    found = bench_graphs.available_graphs()
    wanted = ["mdual"] if quick else ["copter2", "mdual", "email-Enron", "cond-mat-2005", "pgp-strong"]
    result = {n: bench_graphs.load(n) for n in wanted if n in found}
    if "mdual" not in result and "4elt" in found:
        result["4elt"] = bench_graphs.load("4elt")
    # R-MAT with Graph500 parameters: 2^17 vertices x 8 edges each ~ 1M edges
    result["rmat-17"] = bench_graphs.rmat(17, 8, seed=0)
    return result


def print_report(rows: list[Row]) -> None:
    print(f"{'graph':14s} {'kernel':8s} {'F':>4s} {'impl':26s} {'ms':>9s} {'GFLOP/s':>8s} {'GB/s':>7s} {'vs gnnc':>8s}")
    by_cell: dict[tuple, float] = {}
    for r in rows:
        if r.impl == "gnnc":
            by_cell[(r.graph, r.kernel, r.features)] = r.seconds
    for r in rows:
        ratio = r.seconds / by_cell[(r.graph, r.kernel, r.features)]
        err = f"  max|err| {r.max_error:.1e}" if r.max_error is not None else ""
        print(f"{r.graph:14s} {r.kernel:8s} {r.features:4d} {r.impl:26s} {r.seconds * 1e3:9.3f} "
              f"{r.gflops:8.2f} {r.gbs:7.2f} {ratio:8.2f}x{err}")


def main() -> None:
    parser = argparse.ArgumentParser(description="gnnc benchmarks")
    parser.add_argument("--quick", action="store_true", help="one mesh and one R-MAT at F = 64")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--features", type=int, nargs="*", default=None)
    args = parser.parse_args()
    features = args.features or ([64] if args.quick else [32, 64, 128])
    threads = os.environ.get("OMP_NUM_THREADS", "all")
    print(f"gnnc benchmark: threads={threads}, repeat={args.repeat} (median), float32")
    module = gnnc.compile(EXAMPLES / "gcn.gnn")
    rows: list[Row] = []
    for name, graph in load_graphs(args.quick).items():
        print(f"  {name}: V={graph.num_vertices} E={graph.num_edges}", flush=True)
        for f in features:
            rows += bench_gcn(name, graph, f, args.repeat, module)
    print()
    print_report(rows)
    print()
    print("target (issue 2): sum aggregation at least as fast as scipy's CSR product on ~1M edges at F = 64")
    for r in rows:
        if r.impl == "gnnc" and r.features == 64 and r.graph in ("mdual", "rmat-17"):
            best = min(x.seconds for x in rows if (x.graph, x.kernel, x.features) == (r.graph, r.kernel, 64) and x.impl != "gnnc")
            print(f"  {r.graph}: scipy best / gnnc = {best / r.seconds:.2f}x  {'met' if best >= r.seconds else 'NOT met'}")


if __name__ == "__main__":
    main()
