"""A native block call, prototyped: what one foreign call per kernel would save on a new block.

    python benchmarks/block_call.py                       # the small block of overhead.py, 1 thread
    python benchmarks/block_call.py --edges 29805 --sources 17651 --destinations 2903

Issue 26's per-call target (a small block's forward and backward no slower
than PyG's scatter path) and issue 27's message-passing ratio both pay, on
every new block, for turning its edge_index into a `gnnc.Graph`, its
reversed graph, their plans and two laid-out calls in Python
(docs/design/training.md, "Eighteenth session"). The C API that
`gnnc compile --header` writes already builds all of that in C
(`gnnc_graph_from_coo`, `gnnc_K_prepare`, `gnnc_K_run`). This script
compiles the mean aggregation and its gradient, wraps each kernel's
helpers in one C function that takes the edges as COO, builds that with
the C compiler gnnc links with ($CC, else cc), and times, on a new
edge_index every call and interleaved in one process:

- `native`: the forward kernel, then the features' gradient on the
  reversed edges, each one call through ctypes with the edge_index's memory;
- `runtime`: the same two kernels as gnnc runs them today,
  `Graph.from_edge_index`, the compiled kernel, then `Gradient` (which
  builds the reversed graph).

Both give the same arrays (checked). Thread CPU time, medians of 20
chunks. Not a layer of gnnc: what a native block call would leave in
Python is the torch Function and one foreign call per kernel.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import gnnc.torch
from gnnc.graph.graph import Graph

SOURCE = "kernel aggregate_mean(x: f32[V, F]) -> f32[V, F] { out[v] = mean(x[u]) }\n"

#: One function per kernel: the graph from COO (reversed for the gradient), its plan, the call.
WRAPPER = """#include <stdlib.h>
#include <string.h>
#include "{header}"
int coo_{kernel}(int64_t num_src, int64_t num_dst, int64_t num_edges, const int64_t *src, const int64_t *dst,
                 int64_t threads, int64_t features, {params})
{{
    gnnc_graph g;
    int status = {graph};
    if (status) return status;
    gnnc_{kernel}_plan plan;
    int64_t dims[1] = {{features}};
    status = gnnc_{kernel}_prepare(&plan, &g, threads, dims);
    if (!status) {{
        gnnc_{kernel}_run(&plan, {args});
        gnnc_{kernel}_free(&plan);
    }}
    gnnc_graph_free(&g);
    return status;
}}
"""


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    return f"{cpu}, Python {platform.python_version()}, torch {torch.__version__}, {torch.get_num_threads()} threads"


def build(work: Path, grad: bool) -> ctypes.CDLL:
    """The kernel's shared object and header from `gnnc compile`, and its COO wrapper built against it."""
    name = "meang" if grad else "mean"
    kernel = "aggregate_mean__grad_x_src" if grad else "aggregate_mean"
    (work / "mean.gnn").write_text(SOURCE)
    command = [
        sys.executable,
        "-m",
        "gnnc.tools.cli",
        "compile",
        str(work / "mean.gnn"),
        "-o",
        str(work / f"{name}.so"),
    ]
    command += ["--header", str(work / f"{name}.h")] + (["--grad"] if grad else [])
    subprocess.run(command, check=True)
    if grad:  # the reversed graph: the forward's destinations are its sources
        params, graph, args = (
            "const float *x, const float *gout, float *out",
            "gnnc_graph_from_coo(&g, num_dst, num_src, num_edges, dst, src)",
            "x, gout, out",
        )
    else:
        params, graph, args = (
            "const float *x, float *out",
            "gnnc_graph_from_coo(&g, num_src, num_dst, num_edges, src, dst)",
            "x, out",
        )
    c = work / f"coo_{name}.c"
    c.write_text(WRAPPER.format(header=f"{name}.h", kernel=kernel, params=params, graph=graph, args=args))
    compiler = shlex.split(os.environ.get("CC", "cc"))
    wrapper = work / f"coo_{name}.so"
    subprocess.run(
        [
            *compiler,
            "-O2",
            "-shared",
            "-fPIC",
            "-fopenmp",
            str(c),
            "-o",
            str(wrapper),
            str(work / f"{name}.so"),
            f"-Wl,-rpath,{work}",
        ],
        check=True,
    )
    function = getattr(ctypes.CDLL(str(wrapper)), f"coo_{kernel}")
    pointers = 3 if grad else 2
    function.argtypes = (
        [ctypes.c_int64] * 3 + [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2 + [ctypes.c_void_p] * pointers
    )
    function.restype = ctypes.c_int
    return function


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=1024)
    parser.add_argument("--destinations", type=int, default=128)
    parser.add_argument("--edges", type=int, default=1280)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {machine()}")
    s, d, e, f, threads = args.sources, args.destinations, args.edges, args.features, args.threads
    rng = np.random.default_rng(0)
    blocks = [torch.from_numpy(np.stack([rng.integers(0, s, e), rng.integers(0, d, e)])) for _ in range(64)]
    x = rng.standard_normal((s, f)).astype(np.float32)
    gout = rng.standard_normal((d, f)).astype(np.float32)
    kernel = gnnc.torch.kernel(SOURCE, "aggregate_mean")
    forward, gradient = kernel.forward_kernel("f32"), kernel.ops.gradient("f32", ("x",))
    with tempfile.TemporaryDirectory(prefix="gnnc-block-call-") as tmp:
        coo_forward, coo_gradient = build(Path(tmp), grad=False), build(Path(tmp), grad=True)

        def native(i: int) -> tuple[np.ndarray, np.ndarray]:
            edges = blocks[i % 64].clone().numpy()
            src, dst = edges.ctypes.data, edges.ctypes.data + 8 * e
            out, dx = np.empty((d, f), np.float32), np.empty((s, f), np.float32)
            assert coo_forward(s, d, e, src, dst, threads, f, x.ctypes.data, out.ctypes.data) == 0
            assert coo_gradient(s, d, e, src, dst, threads, f, x.ctypes.data, gout.ctypes.data, dx.ctypes.data) == 0
            return out, dx

        def runtime(i: int) -> tuple[np.ndarray, np.ndarray]:
            graph = Graph.from_edge_index(blocks[i % 64].clone(), shape=(s, d))
            return forward(graph, x, threads=threads), gradient(graph, x, gout=gout, threads=threads)["x"]

        for a, b in zip(native(3), runtime(3)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        runs = {"native": native, "runtime": runtime}
        times: dict[str, list[float]] = {n: [] for n in runs}
        for rep in range(22):
            for name, run in runs.items():
                start = time.thread_time()
                for i in range(300):
                    run(i)
                if rep >= 2:  # warm-up
                    times[name].append((time.thread_time() - start) / 300 * 1e6)
    print(
        f"# {s} sources, {d} destinations, {e} edges, {f} features; forward + the features' gradient, new edges each call"
    )
    ms = {n: statistics.median(t) for n, t in times.items()}
    print(
        f"native {ms['native']:.1f} us, runtime {ms['runtime']:.1f} us: {ms['runtime'] - ms['native']:.1f} us saved a call"
    )


if __name__ == "__main__":
    main()
