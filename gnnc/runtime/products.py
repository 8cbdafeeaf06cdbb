"""Weight gradients' dense products F^T G on gnnc's workers, numpy's BLAS on one thread each.

A weight's gradient is F^T G over a long axis (vertices, or a relation's
edges) and a short result ([K, N]). Given its own threads, numpy's OpenBLAS
splits such a product across them and synchronises them per call; on a
machine whose cores are shared (other processes, or torch's and gnnc's own
worker pools spinning after their work) a sync waits for a core, and the
R-GCN backward's per-relation products took 1.4-4.6 s where single-threaded
ones took 0.1 s (docs/design/heterogeneous.md). So the products run here as
items of at most `CHUNK_ROWS` rows, spread over the call's threads, each a
single-threaded BLAS call; an item's partial sums are added per result in
item order, so the result does not depend on the thread count.

numpy's OpenBLAS is set to one thread (`openblas_set_num_threads`, found in
the library numpy loaded) while the items run and set back after: the count
is the process's, so numpy called from other Python threads meanwhile runs
single-threaded too. With another BLAS (none found) the items still run on
the call's threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import heapq
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

#: The most rows one product item takes: large enough for BLAS to run at full speed,
#: small enough that the gathered rows of one item per thread stay in a few MB.
CHUNK_ROWS = 4096

#: The thread-count functions' names in the OpenBLAS builds numpy ships (scipy-openblas: a prefix
#: and, for 64-bit integers, a suffix) and in a system OpenBLAS.
_SYMBOLS = (
    ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
    ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
    ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
    ("openblas_get_num_threads", "openblas_set_num_threads"),
)

_lock = threading.Lock()


def _candidate_libraries() -> list[str]:
    """numpy's bundled OpenBLAS (wheels: `numpy.libs/`), then any OpenBLAS this process mapped."""
    here = os.path.dirname(os.path.dirname(np.__file__))
    found = sorted(glob.glob(os.path.join(here, "numpy.libs", "*openblas*")))
    try:
        with open("/proc/self/maps") as maps:
            mapped = {line.split()[-1] for line in maps if "openblas" in line.rsplit("/", 1)[-1].lower()}
    except OSError:  # not Linux
        mapped = set()
    return found + sorted(p for p in mapped if p not in found and os.path.isfile(p))


@functools.cache
def blas_controls() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """(get, set) of numpy's OpenBLAS thread count, or None where numpy's BLAS is another."""
    for path in _candidate_libraries():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for get_name, set_name in _SYMBOLS:
            get, set_ = getattr(lib, get_name, None), getattr(lib, set_name, None)
            if get is not None and set_ is not None:
                get.restype, get.argtypes = ctypes.c_int, []
                set_.restype, set_.argtypes = None, [ctypes.c_int]
                return get, set_
    return None


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """numpy's OpenBLAS on one thread within the block (process-wide; see the module)."""
    controls = blas_controls()
    if controls is None:
        yield
        return
    get, set_ = controls
    with _lock:
        before = get()
        set_(1)
        try:
            yield
        finally:
            set_(before)


class _Pool:
    """A thread pool kept between calls, made anew in a forked child (threads do not survive fork)."""

    def __init__(self) -> None:
        self.executor: ThreadPoolExecutor | None = None
        self.size = 0
        self.pid = 0

    def get(self, workers: int) -> ThreadPoolExecutor:
        if self.executor is None or self.pid != os.getpid() or self.size < workers:
            if self.executor is not None and self.pid == os.getpid():
                self.executor.shutdown(wait=False)
            self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gnnc-products")
            self.size, self.pid = workers, os.getpid()
        return self.executor


_POOL = _Pool()


def _spread(costs: Sequence[int], workers: int) -> list[list[int]]:
    """Item indices in `workers` lists of about equal cost (largest first to the least loaded)."""
    loads = [(0, w) for w in range(workers)]
    lists: list[list[int]] = [[] for _ in range(workers)]
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        load, w = heapq.heappop(loads)
        lists[w].append(i)
        heapq.heappush(loads, (load + costs[i], w))
    return [sorted(items) for items in lists if items]


def run_items(work: Callable[[int], Any], costs: Sequence[int], threads: int) -> list[Any]:
    """`[work(i) for i in range(len(costs))]`, on up to `threads` threads, numpy's BLAS on one."""
    results: list[Any] = [None] * len(costs)

    def run(items: list[int]) -> None:
        for i in items:
            results[i] = work(i)

    with single_threaded_blas():
        lists = _spread(costs, max(1, min(threads, len(costs))))
        if len(lists) <= 1:
            run(lists[0] if lists else [])
        else:
            for future in [_POOL.get(len(lists)).submit(run, items) for items in lists]:
                future.result()
    return results


def chunks(start: int, stop: int) -> list[tuple[int, int]]:
    """[start, stop) in pieces of at most CHUNK_ROWS rows."""
    return [(a, min(a + CHUNK_ROWS, stop)) for a in range(start, stop, CHUNK_ROWS)]


def product(f: np.ndarray, g: np.ndarray, threads: int) -> np.ndarray:
    """F^T G for F [M, K], G [M, N]: [K, N], over row chunks (see the module)."""
    pieces = chunks(0, f.shape[0])
    if not pieces:
        return np.zeros((f.shape[1], g.shape[1]), dtype=g.dtype)
    partials = run_items(lambda i: f[slice(*pieces[i])].T @ g[slice(*pieces[i])], [b - a for a, b in pieces], threads)
    total = partials[0]
    for p in partials[1:]:
        total += p
    return np.ascontiguousarray(total)


__all__ = ["CHUNK_ROWS", "blas_controls", "chunks", "product", "run_items", "single_threaded_blas"]
