"""Arrays whose data starts on a cache line.

numpy's allocator gives 16-byte alignment: a large array starts 16 (or 48)
bytes past a cache line, so every 128-byte feature row spans three lines and
a kernel that gathers rows at random moves half as many bytes again. torch
allocates on 64-byte boundaries. Inputs gathered at random gain from being
aligned; where outputs start made no difference (measurements:
docs/design/locality.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gnnc.ir.abi import CACHE_LINE_BYTES
from gnnc.sharedlib import address


def is_aligned(array: np.ndarray, alignment: int = CACHE_LINE_BYTES) -> bool:
    """True if the array's data starts on an `alignment`-byte boundary."""
    return array.ctypes.data % alignment == 0


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
    # the view keeps the buffer alive through .base; numpy's buffers start on 16 bytes at least,
    # so for the float and int types an offset in whole elements reaches the boundary
    if itemsize and alignment % itemsize == 0 and dtype.kind in "fiu":
        raw = np.empty(count + alignment // itemsize, dtype=dtype)
        start = -address(raw) % alignment
        if start % itemsize == 0:
            start //= itemsize
            return raw[start : start + count].reshape(shape)
    nbytes = count * itemsize
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
