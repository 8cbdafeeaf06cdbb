"""Writes the generated code of every example under every schedule the tests use.

    python tests/ir_snapshot.py OUT_DIR [--jobs N]

One file per (target, example, schedule): the LLVM IR gnnc translates to (CPU
and cuda-emulation) or the PTX (cuda), or the CompileError's message when the
schedule is refused. Two snapshots taken before and after a refactoring are
compared with `diff -r`: a move that changes no behaviour leaves them
byte-identical. The metadata record embedded in each object is written to a
separate `.meta.json` file, since an ABI change moves it on purpose.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: CPU schedules: tests/test_schedules.py's lists, and the ones the other tests name.
CPU_SCHEDULES = [
    None,
    "parallel dst",
    "prefetch 0",
    "prefetch 1",
    "prefetch 16",
    "sort degree",
    "reorder locality",
    "sort degree\nprefetch 3",
    "tile features 4",
    "tile features 16\nprefetch 2",
    "partition src 3",
    "partition src 2\ntile features 8\nsort degree",
    "order edges hilbert",
    "order edges hilbert\nprefetch 2\ntile features 2",
    "vectorize 16",
    "vectorize 4\npartition src 2\nsort degree",
    "tile features 8\nvectorize 4",
    "group neighbors 1",
    "group neighbors 4",
    "group neighbors 16\nvectorize 16",
    "group neighbors 3\ntile features 4\nsort degree",
    "group neighbors 8\nprefetch 0\nreorder locality",
    "reorder rcm",
    "stream outputs",
    "reorder rcm\nstream outputs\nvectorize 16",
    "stream outputs\ntile features 4\nprefetch 2",
    "stream outputs\ntile features 8\nvectorize 4\nreorder rcm",
    "simd 512",
    "simd 128\nvectorize 16\nprefetch 2",
    "group neighbors 7",
    "group neighbors 256\nvectorize 16",
    "partition src 4; tile features 64; vectorize 32; prefetch 16",
    "edges sorted",
    "edges sorted; prefetch 4",
    "prefetch 16; vectorize edges 16",
    "specialize F 32",
    "specialize F 128",
    "specialize F 32; stream outputs",
    "specialize F 64; stream outputs",
    "prefetch 16\nspecialize F 128",
    "prefetch 16; specialize F 512; edges sorted",
    "specialize H 4 F 64",
    "specialize H 1 F 128\nstream outputs\nprefetch 15",
    "prefetch 15\nspecialize H 4 F 32\nreorder rcm\nstream outputs",
    "specialize H 2 D 32",
    "specialize D1 5 D2 7",
    "partition src 2\ntile features 4\nvectorize 2",
    "order edges hilbert\ntile features 2\nvectorize 2",
    "group neighbors 2\ntile features 2\nvectorize 2",
    "specialize F 128\nsimd 512",
    "reorder rcm; vectorize 8",
]

#: CUDA mappings: tests/test_cuda_ptx.py's and the emulation tests'.
CUDA_MAPPINGS = [
    None,
    "map thread_vertex",
    "map thread_vertex group 4",
    "map warp_vertex",
    "map warp_vertex group 2 tile 4",
    "map thread_edge",
    "map thread_edge group 4",
    "map warp_edge",
    "map warp_edge group 2 tile 4",
    "map warp_vertex lanes 8",
    "map warp_edge lanes 4 group 2",
    "map thread_vertex hybrid 8",
    "map warp_vertex lanes 8 hybrid 4",
    "map thread_edge group 2 hybrid 8",
    "map warp_edge tile 2 hybrid 4",
    "map warp_vertex group 3 tile 2",
    "map warp_edge group 5",
    "map thread_edge group 2",
    "map warp_vertex lanes 4",
    "map warp_edge lanes 8 group 3",
    "map thread_vertex hybrid 3",
    "map warp_edge hybrid 2 tile 2",
]


def _compiler():
    try:
        from gnnc.driver import compiler  # the layout of the Architecture issue
    except ImportError:
        from gnnc.driver import compiler  # type: ignore[no-redef]
    return compiler


_METADATA = re.compile(r"^@gnnc_metadata = .*$", re.M)


def _one(job: tuple[str, str, str | None]) -> tuple[str, str, str]:
    target, name, schedule = job
    compiler = _compiler()
    from gnnc.errors import GnncError

    stem = f"{target}/{name}/{hashlib.sha1(str(schedule).encode()).hexdigest()[:12]}"
    opts = compiler.CompileOptions(target=target, cpu="x86-64-v4", schedule=schedule)
    source = (EXAMPLES / f"{name}.gnn").read_text()
    try:
        if target == "cuda":
            res = compiler.compile_source(source, f"{name}.gnn", opts, stop_after="ptx")
            text = res.ptx.split("\n", 1)[1]  # the first line is the metadata comment
        else:
            res = compiler.compile_source(source, f"{name}.gnn", opts, stop_after="llvm")
            text = _METADATA.sub("@gnnc_metadata = <metadata>", res.stages["translate-to-llvm"])
        meta = json.dumps(res.metadata.get("kernels"), indent=1, sort_keys=True)
    except GnncError as exc:
        text, meta = f"error: {exc}\n", ""
    return stem, f"// schedule: {schedule!r}\n{text}", meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    names = sorted(p.stem for p in EXAMPLES.glob("*.gnn"))
    jobs = [("cpu", n, s) for n in names for s in CPU_SCHEDULES]
    jobs += [(t, n, s) for t in ("cuda", "cuda-emulation") for n in names for s in CUDA_MAPPINGS]
    errors = 0
    with ProcessPoolExecutor(args.jobs) as pool:
        for stem, text, meta in pool.map(_one, jobs, chunksize=4):
            path = args.out / stem
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".txt").write_text(text)
            path.with_suffix(".meta.json").write_text(meta)
            errors += text.split("\n", 2)[1].startswith("error:")
    print(f"{len(jobs)} compiles, {errors} refused, written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
