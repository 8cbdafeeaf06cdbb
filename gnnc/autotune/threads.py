"""How many workers a call may ask for: checked before any native code runs.

libgomp creates every worker a call asks for, each with its stack:
`threads=100_000` ended in a SIGSEGV in GOMP_parallel (or "Thread creation
failed"). A call's `threads=` (and gnnc.torch's) outside 1 .. max_threads()
is an ArgumentError; a tuning-cache entry outside it is skipped;
OMP_NUM_THREADS and torch's own count are clamped to it
(`decision.resolve_threads`, `torch/ops.py`).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from gnnc.errors import ArgumentError

__all__ = ["MIN_THREAD_LIMIT", "THREADS_PER_CORE", "check_threads", "max_threads", "thread_count_problem"]

#: The fewest workers `max_threads()` allows, however few cores: oversubscribing a
#: small machine a little is a user's choice, not a danger.
MIN_THREAD_LIMIT = 64
#: `max_threads()` allows this many workers per core.
THREADS_PER_CORE = 4


@functools.cache
def max_threads() -> int:
    """The most workers a call may ask for: THREADS_PER_CORE x os.cpu_count(), at least MIN_THREAD_LIMIT.

    Read once: os.cpu_count() reads sysfs (13 us, five times a small call's forward and
    backward), and the machine's cores do not change under a process."""
    return max(MIN_THREAD_LIMIT, THREADS_PER_CORE * (os.cpu_count() or 1))


def thread_count_problem(threads: Any) -> str | None:
    """Why `threads` is not a worker count a call may ask for (an int in 1 .. max_threads()), or None."""
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        return f"threads must be a positive integer, got {threads!r}"
    if threads > max_threads():
        return (
            f"threads={threads} is more than this machine allows: at most {max_threads()} "
            f"({THREADS_PER_CORE} per core, at least {MIN_THREAD_LIMIT})"
        )
    return None


def check_threads(threads: Any) -> int:
    """`threads` as an int, or ArgumentError (see thread_count_problem)."""
    problem = thread_count_problem(threads)
    if problem is not None:
        raise ArgumentError(problem)
    return int(threads)
