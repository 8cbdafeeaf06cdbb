"""The threads a gnnc kernel called from PyTorch runs on when the call does not say (`threads=`).

`torch.get_num_threads()` (what `torch.set_num_threads` sets), capped at
this process's share of the cores when several processes of one job share
the machine: under `torchrun` (and torch.distributed's other launchers),
which set `LOCAL_WORLD_SIZE`, the share is `cores // LOCAL_WORLD_SIZE`, at
least 1, the cores being those this process may run on. Without the cap,
N ranks started by a launcher that leaves torch's default thread count (every
core; `torch.multiprocessing.spawn`, or `torchrun` with OMP_NUM_THREADS set
to the core count) would run N x cores kernel threads on the machine's cores:
oversubscribed, every step waiting on its slowest thread. `torchrun` itself
sets OMP_NUM_THREADS=1 when it is unset, so there torch's count is already 1
and the cap changes nothing. docs/guide/minibatch.md says how to choose.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

#: This process's cores, counted once (its affinity does not change under a launcher).
_CORES: list[int] = []


def cores() -> int:
    """The cores this process may run on."""
    if not _CORES:
        try:
            _CORES.append(max(1, len(os.sched_getaffinity(0))))
        except AttributeError:  # not Linux
            _CORES.append(max(1, os.cpu_count() or 1))
    return _CORES[0]


def _environ_reader(name: str) -> Callable[[], str]:
    """A reader of environment variable `name` ("" when unset). `os.environ.get` of an unset
    name costs a KeyError raised and caught (2-4 us inside a training step's kernel calls,
    twice a layer); the mapping's own dict, keyed as `os.environ` keys it, is read in 0.1 us
    and is what `os.environ` (and pytest's monkeypatch) writes."""
    data = getattr(os.environ, "_data", None)
    encodekey = getattr(os.environ, "encodekey", None)
    decode = getattr(os.environ, "decodevalue", None)
    if isinstance(data, dict) and callable(encodekey) and callable(decode):
        key = encodekey(name)

        def read() -> str:
            value = data.get(key)
            return "" if value is None else decode(value)

        return read
    return lambda: os.environ.get(name, "")  # pragma: no cover - an interpreter without the layout


_local_world_size = _environ_reader("LOCAL_WORLD_SIZE")


def rank_share() -> int | None:
    """cores // LOCAL_WORLD_SIZE (at least 1) under a distributed launcher, else None."""
    local = _local_world_size()
    if not local.isdigit() or int(local) < 1:
        return None
    return max(1, cores() // int(local))


def default_threads() -> int:
    """torch's intra-op thread count, capped at this rank's share of the cores (see above)."""
    threads = torch.get_num_threads()
    share = rank_share()
    return threads if share is None else min(threads, share)


__all__ = ["cores", "default_threads", "rank_share"]
