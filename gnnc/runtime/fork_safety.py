"""One thread in a process forked after gnnc ran a parallel kernel (libgomp is not fork-safe).

gnnc's CPU kernels run their parallel regions on libgomp, GCC's OpenMP
runtime. libgomp keeps its worker threads in a pool and registers no
`pthread_atfork` handler; `fork()` copies the pool's bookkeeping but not its
threads, so a child whose parent had started the pool waits forever at its
first parallel region of more than one thread (a DataLoader worker started
by fork, after the parent ran a kernel). A region of one thread never
touches the pool, so such a child runs every kernel on one thread. Children
started by 'spawn' or 'forkserver' get a fresh libgomp and all their threads.
"""

from __future__ import annotations

import logging
import os

_log = logging.getLogger(__name__)

#: This process may have started libgomp's pool (it ran a kernel on several threads).
_pool_started = False
#: This process was forked from one that had started the pool.
_forked_after_pool = False


def threads_for_call(n_threads: int) -> int:
    """The thread count a kernel call may use here: `n_threads`, or 1 in a forked child (see above)."""
    global _pool_started
    if _forked_after_pool:
        return 1
    if n_threads > 1:
        _pool_started = True
    return n_threads


def _after_fork_in_child() -> None:
    global _forked_after_pool
    if _pool_started and not _forked_after_pool:
        _forked_after_pool = True
        _log.debug("forked after libgomp's pool started: kernels run on one thread in this process")


if hasattr(os, "register_at_fork"):  # not on Windows, which cannot fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
