"""Arrays whose data starts on a cache line.

numpy's allocator gives 16-byte alignment: a large array starts 16 (or 48)
bytes past a cache line, so every 128-byte feature row spans three lines and
a kernel that gathers rows at random moves half as many bytes again. torch
allocates on 64-byte boundaries. Inputs gathered at random gain from being
aligned; where outputs start made no difference (measurements:
docs/design/locality.md).

Arrays of `POOL_MIN_BYTES` or more are leased from a pool: when the last
view of one dies (a torch tensor made by `torch.from_numpy`, a numpy view),
its memory goes back to the pool, and the next array of its size class
takes it. A fresh large block comes from the kernel as pages it must zero
on first touch, at about memory speed: a mini-batch GAT layer's [29K, 4,
32] source gradient spent more time faulting its 15 MB in than the kernel
spent computing it (docs/design/training.md, "Results from a pool"). The
pool holds at most `pool_limit()` bytes (`GNNC_POOL_MB`, default 64) of
free blocks, the most recently freed kept; a block larger than that is
never pooled.
"""

from __future__ import annotations

import collections
import math
import os
import threading
from typing import Any

import numpy as np

from gnnc.ir.abi import CACHE_LINE_BYTES
from gnnc.sharedlib import address


def is_aligned(array: np.ndarray, alignment: int = CACHE_LINE_BYTES) -> bool:
    """True if the array's data starts on an `alignment`-byte boundary."""
    return array.ctypes.data % alignment == 0


#: Arrays of at least this many bytes are leased from the pool.
POOL_MIN_BYTES = 1 << 20


def _limit_from_environment() -> int:
    text = os.environ.get("GNNC_POOL_MB", "64")
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = -1.0
    if not megabytes >= 0:
        raise ValueError(f"GNNC_POOL_MB must be a number of megabytes >= 0, got {text!r}")
    return int(megabytes * (1 << 20))


def size_class(nbytes: int) -> int:
    """The bytes a pooled block of `nbytes` holds: `nbytes` rounded up to a quarter of a
    power of two (at most 25% more), so that blocks of a mini-batch's varying sizes match."""
    quarter = 1 << max(nbytes.bit_length() - 3, 0)
    return -(-nbytes // quarter) * quarter


class _Pool:
    """Free blocks (uint8 arrays) in the order they were freed, `limit` bytes at most.

    A block comes back from a lease's `__del__`, which runs wherever the last reference
    drops: on any thread, and possibly in the middle of this pool's own code on the same
    thread (a garbage collection there). So `give` never waits for the lock: it appends to
    `returned` (a deque: atomic) and files the blocks only if it gets the lock at once;
    whoever holds it files them before letting go."""

    def __init__(self, limit: int):
        self.limit = limit
        self.blocks: list[np.ndarray] = []  # guarded by `lock`
        self.held = 0  # bytes in `blocks`
        self.returned: collections.deque[np.ndarray] = collections.deque()
        self.lock = threading.Lock()
        self.taken = 0  # counters, for tests and benchmarks
        self.made = 0
        #: fill a reused block with 0xFF bytes (NaN in floats): a kernel that reads a result
        #: before writing it then shows in a test (`set_pool_poison`)
        self.poison = False

    def take(self, nbytes: int) -> np.ndarray:
        block = None
        with self.lock:
            self._file()
            blocks = self.blocks
            for i in range(len(blocks) - 1, -1, -1):
                if blocks[i].nbytes == nbytes:
                    block = blocks.pop(i)
                    self.held -= nbytes
                    self.taken += 1
                    break
            else:
                self.made += 1
        self._settle()
        if block is None:
            return np.empty(nbytes, dtype=np.uint8)
        if self.poison:
            block.fill(0xFF)
        return block

    def give(self, block: np.ndarray) -> None:
        if block.nbytes <= self.limit:
            self.returned.append(block)
            self._settle()

    def trim(self) -> None:
        """Files the returned blocks and drops the oldest down to the limit."""
        with self.lock:
            self._file()
        self._settle()

    def clear(self) -> None:
        with self.lock:
            self._file()
            self.blocks = []
            self.held = 0

    def _settle(self) -> None:
        # a block returned while another call held the lock: filed by the first to get it
        while self.returned and self.lock.acquire(blocking=False):
            try:
                self._file()
            finally:
                self.lock.release()

    def _file(self) -> None:
        """Moves the returned blocks into `blocks`, then keeps to the limit (the lock held)."""
        returned = self.returned
        while returned:
            try:
                block = returned.popleft()
            except IndexError:
                break
            self.blocks.append(block)
            self.held += block.nbytes
        while self.held > self.limit and self.blocks:
            self.held -= self.blocks.pop(0).nbytes


_pool = _Pool(_limit_from_environment())


class _Lease:
    """One array's hold on a pooled block: numpy keeps it as the array's base (by its
    `__array_interface__`), so it dies with the last view, and gives the block back."""

    __slots__ = ("__array_interface__", "_block")

    def __init__(self, block: np.ndarray, start: int, nbytes: int):
        self._block = block
        self.__array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address(block) + start, False),
            "version": 3,
        }

    def __del__(self) -> None:
        try:
            _pool.give(self._block)
        except Exception:  # interpreter shutdown: the module's globals may be gone
            pass


def pool_limit() -> int:
    """The most bytes of free blocks the pool keeps."""
    return _pool.limit


def set_pool_limit(nbytes: int) -> int:
    """Sets the pool's limit (0: no pooling; blocks over it are dropped); returns the old one."""
    if not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"the pool limit must be a number of bytes >= 0, got {nbytes!r}")
    old, _pool.limit = _pool.limit, nbytes
    _pool.trim()
    return old


def pool_stats() -> dict[str, int]:
    """Free bytes held, blocks held, blocks reused and blocks made since the process started."""
    return {"held": _pool.held, "blocks": len(_pool.blocks), "taken": _pool.taken, "made": _pool.made}


def set_pool_poison(poison: bool) -> bool:
    """For tests: whether reused blocks are filled with 0xFF bytes (NaN as floats, -1 as
    integers) before they are handed out; returns the old setting."""
    old, _pool.poison = _pool.poison, bool(poison)
    return old


def clear_pool() -> None:
    """Drops every free block (their memory goes back to the allocator)."""
    _pool.clear()


def _leased(nbytes: int, dtype: np.dtype, shape: tuple, alignment: int) -> np.ndarray:
    block = _pool.take(size_class(nbytes + alignment))
    start = -address(block) % alignment
    return np.asarray(_Lease(block, start, nbytes)).view(dtype).reshape(shape)


def empty(shape: Any, dtype: Any = np.float32, alignment: int = CACHE_LINE_BYTES) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an `alignment`-byte
    boundary (unless it is empty: numpy points an empty slice at its base)."""
    # the runtime's results and workspace come at the cache line with a numpy dtype: no conversion
    if alignment != CACHE_LINE_BYTES and (alignment <= 0 or alignment & (alignment - 1)):
        raise ValueError(f"alignment must be a power of two, not {alignment}")
    if not isinstance(dtype, np.dtype):
        dtype = np.dtype(dtype)
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    elif not isinstance(shape, tuple):
        shape = tuple(shape)
    count = math.prod(shape)
    itemsize = dtype.itemsize
    nbytes = count * itemsize
    if POOL_MIN_BYTES <= nbytes + alignment <= _pool.limit and not dtype.hasobject:
        return _leased(nbytes, dtype, shape, alignment)
    # the view keeps the buffer alive through .base; numpy's buffers start on 16 bytes at least,
    # so for the float and int types an offset in whole elements reaches the boundary
    if itemsize and alignment % itemsize == 0 and dtype.kind in "fiu":
        raw = np.empty(count + alignment // itemsize, dtype=dtype)
        start = -address(raw) % alignment
        if start % itemsize == 0:
            start //= itemsize
            return raw[start : start + count].reshape(shape)
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = -address(raw) % alignment
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def zeros(shape: Any, dtype: Any = np.float32, alignment: int = CACHE_LINE_BYTES) -> np.ndarray:
    """Like `empty`, filled with zeros."""
    out = empty(shape, dtype, alignment)
    out.fill(0)
    return out


def aligned(array: Any, alignment: int = CACHE_LINE_BYTES) -> np.ndarray:
    """The array itself if it is C-contiguous and starts on an `alignment`-byte
    boundary, else an aligned C-contiguous copy (same dtype and values)."""
    array = np.asarray(array)
    if array.flags.c_contiguous and is_aligned(array, alignment):
        return array
    out = empty(array.shape, array.dtype, alignment)
    out[...] = array
    return out
