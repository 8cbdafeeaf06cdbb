"""Edges grouped by a key in native code: a new graph's in-CSR, its reversed graph's, and
FeatGraph's source partitions (`partition`: by source partition, then destination).

A mini-batch block is a new graph every call, and its CSRs cost numpy a
dozen calls of a few microseconds each (a range check, the grouped check,
a count, offsets, a radix argsort, a gather), more than the kernel on a
1,300-edge block. `group_edges.c` does the same in two passes: one counts
each key's edges while checking every id and noticing edges listed by key
already (a sampler's blocks, which then need no second pass), the other lays
the edges out in key order (stable, as numpy's sort: edges of one key keep
their id order). Large graphs gain too: one scatter instead of two radix
passes and a gather, without their temporaries; source partitions are a count
and a scatter over the in-CSR instead of a sort by partition.

The object is built with the C compiler that links gnnc's kernels ($CC, else
cc), once per compile cache (an entry as the kernels', digest-checked by
`cachedir.EntryStore`; built in a private temporary directory where the
cache cannot be used), and loaded from a private copy of the checked bytes.
Where no compiler or no build works, or $GNNC_NATIVE_GRAPHS is "0", the
graph layer's numpy code groups the edges (the same results: the tests run
both); why is logged once.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from gnnc import sharedlib
from gnnc.cachedir import CACHE_NAME, CACHE_SETTING, EntryStore, cache_dir, warn_unusable
from gnnc.errors import CacheError

_log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("group_edges.c")
_FLAGS = ("-O2", "-std=c99", "-shared", "-fPIC")
#: "0" keeps the numpy code (a comparison, or a system whose compiler misbehaves).
SETTING = "GNNC_NATIVE_GRAPHS"
#: gnnc_count_groups's results other than a position: the keys never decrease, or they do.
_GROUPED, _UNGROUPED = -1, -2
#: Graphs up to this many edges take one buffer and one call (a block is new every call); larger
#: ones allocate only what they keep.
_ONE_BUFFER_EDGES = 1 << 16
#: The built object is a few KiB; anything longer in the cache is not it.
_MAX_BYTES = 1 << 22


class Grouped(NamedTuple):
    """Edges grouped by key: offsets (n_keys + 1), the other ids in key order and each
    position's edge id, both None where the edges were grouped already (the other ids as
    they are, the identity); `order` None also where it was not asked for."""

    indptr: np.ndarray
    other: np.ndarray | None
    order: np.ndarray | None


class OutOfRange(Exception):
    """An id out of range, at the edge position `args[0]`: the caller's checks say which."""


class _Functions(NamedTuple):
    both: Any  # ctypes foreign functions, typed in `_bind`
    count: Any
    scatter: Any
    partition: Any
    split_work: Any
    library: ctypes.CDLL


_lock = threading.Lock()
_functions: _Functions | None = None
_unavailable: str | None = None


def available() -> bool:
    """Whether the native helper is loaded (built on the first call that asks)."""
    return _load() is not None


def group(
    keys: np.ndarray, other: np.ndarray, n_keys: int, n_other: int | None = None, order: bool = True
) -> Grouped | None:
    """The edges grouped by `keys` (each in [0, n_keys)), `other` laid out alike.

    `keys` and `other` are arrays of one length (None for any but C-contiguous int64). With
    `n_other`, every id of `other` is checked against it too. Raises `OutOfRange` where an
    id is not (the caller's checks then name it); None where the helper is unavailable."""
    functions = _load()
    if functions is None or not (_plain(keys) and _plain(other)):
        return None
    e = keys.shape[0]
    assert other.shape[0] == e, (keys.shape, other.shape)
    keys_at, other_at = _address(keys), _address(other)
    check = -1 if n_other is None else n_other
    if e <= _ONE_BUFFER_EDGES:
        # one allocation and one call: indptr, then room for the sorted ids and edge ids
        buffer = np.empty(n_keys + 1 + 2 * e, dtype=np.int64)
        at = _address(buffer)
        status = functions.both(
            keys_at, other_at, e, n_keys, check, at, at + 8 * (n_keys + 1), at + 8 * (n_keys + 1 + e)
        )
        if status >= 0:
            raise OutOfRange(status)
        indptr = buffer[: n_keys + 1]
        if status == _GROUPED:  # the room for the sort is not kept alive by the offsets
            return Grouped(indptr.copy() if 2 * e > n_keys else indptr, None, None)
        if status != _UNGROUPED:  # a shared array changed between the passes: numpy's way decides
            return None
        rest = buffer[n_keys + 1 :]
        return Grouped(indptr, rest[:e], rest[e:] if order else None)
    indptr = np.empty(n_keys + 1, dtype=np.int64)
    status = functions.count(keys_at, other_at, e, n_keys, check, _address(indptr))
    if status >= 0:
        raise OutOfRange(status)
    if status == _GROUPED:
        return Grouped(indptr, None, None)
    # a large graph allocates what it keeps only: the sorted ids, and their edge ids if asked
    out_other = np.empty(e, dtype=np.int64)
    out_order = np.empty(e, dtype=np.int64) if order else None
    status = functions.scatter(
        keys_at,
        other_at,
        e,
        n_keys,
        _address(indptr),
        _address(out_other),
        None if out_order is None else _address(out_order),
    )
    if status != _UNGROUPED:
        return None
    return Grouped(indptr, out_other, out_order)


def partition(
    indptr: np.ndarray, in_src: np.ndarray, in_eid: np.ndarray | None, bounds: np.ndarray, eids: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """An in-CSR's edges grouped by their source's partition (``bounds``: k + 1 source
    boundaries), each partition an in-CSR by destination: (part_indptr, part_src, part_eid)
    as `plans.source_partitions` lays them out; `in_eid` None where the edge ids are the
    in-CSR positions, part_eid None unless `eids`. None where the helper is unavailable
    (or the sources changed between its passes): numpy's way then."""
    functions = _load()
    if functions is None or not all(_plain(a) for a in (indptr, in_src, bounds)):
        return None
    if in_eid is not None and not _plain(in_eid):
        return None
    v, k, e = indptr.shape[0] - 1, bounds.shape[0] - 1, in_src.shape[0]
    part_indptr = np.empty(k * (v + 1), dtype=np.int64)
    part_src = np.empty(e, dtype=np.int64)
    part_eid = np.empty(e, dtype=np.int64) if eids else None
    status = functions.partition(
        _address(indptr),
        _address(in_src),
        None if in_eid is None else _address(in_eid),
        v,
        _address(bounds),
        k,
        _address(part_indptr),
        _address(part_src),
        None if part_eid is None else _address(part_eid),
    )
    return None if status else (part_indptr, part_src, part_eid)


def split_work(indptr: np.ndarray, n: int) -> np.ndarray | None:
    """`plans.balanced_blocks`' n + 1 boundaries (n >= 1) of the destinations in id order, the
    work of each its in-degree + 1, from the in-CSR's offsets: the same as `plans._split_prefix`
    on the prefix `indptr + arange`, without that array. None where the helper is unavailable."""
    functions = _load()
    if functions is None or not _plain(indptr) or n < 1:
        return None
    bounds = np.empty(n + 1, dtype=np.int64)
    functions.split_work(_address(indptr), indptr.shape[0] - 1, n, _address(bounds))
    return bounds


_address = sharedlib.address


def _plain(ids: np.ndarray) -> bool:
    return ids.dtype == np.int64 and ids.ndim == 1 and ids.flags.c_contiguous


# ------------------------------------------------------------------ building


def _load() -> _Functions | None:
    global _functions, _unavailable
    if _functions is not None or _unavailable is not None:
        return _functions
    with _lock:
        if _functions is None and _unavailable is None:
            if os.environ.get(SETTING, "1") == "0":
                _unavailable = f"${SETTING} is 0"
            else:
                try:
                    _functions = _bind(_library_bytes())
                except (OSError, CacheError, subprocess.SubprocessError, _BuildError) as exc:
                    _unavailable = str(exc)
            if _unavailable is not None:
                _log.info("graphs are grouped by numpy, not natively: %s", _unavailable)
    return _functions


class _BuildError(Exception):
    pass


def _compiler() -> list[str]:
    cc = shlex.split(os.environ.get("CC", "")) or ["cc"]
    if shutil.which(cc[0]) is None:
        raise _BuildError(f"no C compiler ({cc[0]!r} not found)")
    return cc


def _library_bytes() -> bytes:
    """The built object: from the compile cache, else built (and stored where the cache works)."""
    source = _SOURCE.read_bytes()
    cc = _compiler()
    key = hashlib.sha256(repr((source, cc, _FLAGS, platform.machine())).encode()).hexdigest()
    name = f"graph-group-edges-{key[:32]}.so"
    directory = cache_dir()
    try:
        store = EntryStore(directory, CACHE_NAME, CACHE_SETTING)
    except OSError as exc:
        warn_unusable(directory, CACHE_NAME, exc)
        return _build(cc)
    with store:
        return store.lookup_or_build(name, key, _MAX_BYTES, lambda: _build(cc))[0]


def _build(cc: list[str]) -> bytes:
    with tempfile.TemporaryDirectory(prefix="gnnc-graph-") as tmp:
        out = Path(tmp) / "group_edges.so"
        cmd = [*cc, *_FLAGS, "-o", str(out), str(_SOURCE)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise _BuildError(f"{shlex.join(cmd)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return out.read_bytes()


def _bind(data: bytes) -> _Functions:
    """Loads `data` from a private copy (the checked bytes are the loaded ones) and types its functions."""
    library, _ = sharedlib.load_private_copy(Path("group_edges.so"), data)  # loaded for the process's life
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    count = library.gnnc_count_groups
    count.argtypes = [ptr, ptr, i64, i64, i64, ptr]
    count.restype = i64
    scatter = library.gnnc_scatter_groups
    scatter.argtypes = [ptr, ptr, i64, i64, ptr, ptr, ptr]
    scatter.restype = i64
    both = library.gnnc_group_edges
    both.argtypes = [ptr, ptr, i64, i64, i64, ptr, ptr, ptr]
    both.restype = i64
    partition = library.gnnc_partition_edges
    partition.argtypes = [ptr, ptr, ptr, i64, ptr, i64, ptr, ptr, ptr]
    partition.restype = i64
    split_work = library.gnnc_split_work
    split_work.argtypes = [ptr, i64, i64, ptr]
    split_work.restype = None
    return _Functions(both, count, scatter, partition, split_work, library)


def _reset_for_tests() -> None:
    """Forgets the loaded helper: the next use loads it again (as $GNNC_NATIVE_GRAPHS says then)."""
    global _functions, _unavailable
    with _lock:
        _functions, _unavailable = None, None
