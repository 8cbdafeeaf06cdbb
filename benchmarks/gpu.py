"""The GPU section of the benchmark: gnnc's cuda kernels against cuSPARSE and DGL.

Runs where a GPU, a CUDA driver and cuda-python are present; elsewhere it
prints one line saying it was skipped and why. Baselines: `torch.sparse.mm`
on a CUDA CSR tensor (cuSPARSE's SpMM) and DGL's `update_all` on the GPU if
DGL is installed with CUDA. gnnc's runtime copies inputs to the device and
results back on every call, so its times include those transfers; the
baselines' inputs already live on the GPU (this is stated in the output).
The torch path (gnnc.nn layers on CUDA tensors, borrowed without copies) is
timed by `benchmarks/nn.py --device cuda`.

    python benchmarks/gpu.py --scales 16,18 --features 32,128   # standalone: R-MAT graphs
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import gnnc

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def skip_reason() -> str | None:
    """Why the GPU section cannot run here, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    try:
        from gnnc.runtime.cuda import driver

        driver()
    except gnnc.GnncError as exc:
        return str(exc)
    return None


def _median(fn, repeat: int, sync) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def run(problems: dict[str, Any], features: list[int], repeat: int = 5) -> list[dict]:
    """gcn (SpMM) on every graph and feature size; one row per (graph, F, implementation)."""
    reason = skip_reason()
    if reason is not None:
        print(f"\n#### GPU section skipped: {reason}")
        return []
    import torch

    print("\n#### GPU section (gnnc times include host<->device copies; baselines' data is on the GPU)")
    from gnnc.torch.cuda import arch_for

    arch = arch_for(torch.cuda.get_device_capability())
    print(f"# {torch.cuda.get_device_name()}, gnnc's PTX for {arch}")
    module = gnnc.compile(EXAMPLES / "gcn.gnn", target="cuda", arch=arch)
    rows = []
    for name, p in problems.items():
        for f in features:
            rng = np.random.default_rng(0)
            x = rng.random((p.V, f), dtype=np.float32)
            w = rng.random(p.E, dtype=np.float32)
            t_gnnc = _median(lambda: module.gcn(p.graph, x=x, w=w), repeat, lambda: None)
            a = torch.sparse_csr_tensor(
                torch.from_numpy(p.indptr), torch.from_numpy(p.src), torch.from_numpy(w), (p.V, p.V), device="cuda"
            )
            xd = torch.from_numpy(x).cuda()
            t_cusparse = _median(lambda: torch.sparse.mm(a, xd), repeat, torch.cuda.synchronize)
            row = {"graph": name, "F": f, "gnnc_cuda_s": t_gnnc, "torch_cusparse_s": t_cusparse}
            try:
                import dgl
                import dgl.function as fn

                g = dgl.graph((torch.from_numpy(p.src), torch.from_numpy(p.dst)), num_nodes=p.V).to("cuda")
                g.ndata["x"], g.edata["w"] = xd, torch.from_numpy(w).cuda()
                row["dgl_s"] = _median(
                    lambda: g.update_all(fn.u_mul_e("x", "w", "m"), fn.sum("m", "o")), repeat, torch.cuda.synchronize
                )
            except Exception as exc:  # DGL absent or built without CUDA: say so, keep the other rows
                row["dgl_skipped"] = str(exc)[:80]
            print(
                f"{name} F={f}: "
                + ", ".join(
                    f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in row.items()
                    if k not in ("graph", "F")
                )
            )
            rows.append(row)
    return rows


def main() -> None:
    """The GPU section on its own, on R-MAT graphs (no graph files needed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="16,18", help="R-MAT scales (edge factor 16)")
    parser.add_argument("--features", default="32,128")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    import baselines
    import graphs

    problems = {}
    for scale in map(int, args.scales.split(",")):
        src, dst, n = graphs.rmat_edges(scale, 16, seed=0)
        order = np.lexsort((src, dst))  # edge ids in CSR order
        graph = gnnc.Graph.from_coo(np.asarray(src)[order], np.asarray(dst)[order], num_vertices=n)
        problems[f"rmat-{scale}"] = baselines.problem_from_graph(f"rmat-{scale}", graph)
    run(problems, [int(f) for f in args.features.split(",")], args.repeat)


if __name__ == "__main__":
    main()
