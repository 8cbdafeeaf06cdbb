"""Compiles every example kernel and runs it on a small real graph.

    python examples/run_examples.py [--graph examples/data/4elt.npz] [--features 64]

The graph is the METIS `4elt` finite-element mesh (see examples/data/README.md).
Each kernel's output is compared with gnnc's numpy reference.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import gnnc

HERE = Path(__file__).parent

#: Example -> values for its symbolic dims (F is taken from --features).
DIMS = {
    "gcn": {},
    "gcn_norm": {},
    "gin": {},
    "sage_max": {},
    "sage_mean": {},
    "attention": {"H": 4, "D": 16},
    "mlp_aggr": {"D1": 32, "D2": 32},
    "gat": {"H": 4},
    "gat_conv": {"H": 4},
    "rgcn": {"K": 32, "N": 32},
    "rgat": {"K": 32, "N": 32},
}

#: Relation types for the kernels that read them (`rel(e)`): random, 8 relations.
NUM_RELATIONS = 8


def load_graph(path: Path) -> gnnc.Graph:
    data = np.load(path)
    return gnnc.Graph.from_coo(data["src"], data["dst"], num_vertices=int(data["num_vertices"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", type=Path, default=HERE / "data" / "4elt.npz")
    parser.add_argument("--features", type=int, default=64)
    args = parser.parse_args()

    plain = load_graph(args.graph)
    print(f"graph {args.graph.name}: {plain.num_vertices} vertices, {plain.num_edges} edges")
    rng = np.random.default_rng(0)
    typed = gnnc.Graph(plain, edge_type=rng.integers(0, NUM_RELATIONS, plain.num_edges), num_relations=NUM_RELATIONS)
    failures = 0
    for name, extra in DIMS.items():
        source = HERE / f"{name}.gnn"
        t0 = time.perf_counter()
        module = gnnc.compile(source)
        compile_s = time.perf_counter() - t0
        kernel = getattr(module, name)
        graph = typed if kernel.signature.relations else plain
        dims = {"F": args.features, **extra}
        inputs = {}
        for p in kernel.signature.params:
            lead = {"V": [graph.num_vertices], "E": [graph.num_edges], "R": [NUM_RELATIONS], None: []}[p.domain]
            shape = lead + [dims[d] if isinstance(d, str) else d for d in p.shape]
            inputs[p.name] = rng.uniform(-1, 1, shape).astype(np.float32)
        kernel(graph, **inputs)  # warm up
        t0 = time.perf_counter()
        result = kernel(graph, **inputs)
        run_ms = (time.perf_counter() - t0) * 1e3
        want = getattr(gnnc.compile(source, target="reference"), name)(graph, **inputs)
        results = result if isinstance(result, dict) else {"out": result}
        wants = want if isinstance(want, dict) else {"out": want}
        err = max(float(np.max(np.abs(results[k] - wants[k]), initial=0.0)) for k in wants)
        ok = err < 1e-3
        failures += not ok
        shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in results.items())
        print(
            f"  {name:10s} compile {compile_s:6.2f} s   run {run_ms:8.2f} ms   {shapes:32s} "
            f"max |error| {err:.2e}  {'ok' if ok else 'MISMATCH'}"
        )
    if failures:
        raise SystemExit(f"{failures} kernel(s) disagree with the reference")


if __name__ == "__main__":
    main()
