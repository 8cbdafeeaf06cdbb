"""Arrays whose data starts on a cache line.

numpy's allocator gives 16-byte alignment: a large array starts 16 (or 48)
bytes past a cache line, so every 128-byte feature row spans three lines and
a kernel that gathers rows at random moves half as many bytes again. torch
allocates on 64-byte boundaries. Inputs gathered at random gain from being
aligned; where outputs start made no difference (measurements:
docs/design/locality.md).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from gnnc.ir.abi import CACHE_LINE_BYTES


def _addresses_by_ctypes(arrays: list[np.ndarray]) -> list[int]:
    return [a.ctypes.data for a in arrays]


def _addresses_by_struct(arrays: list[np.ndarray]) -> list[int]:
    # PyArrayObject begins with PyObject_HEAD and then the data pointer
    # (numpy's ndarraytypes.h, PyArrayObject_fields), in every numpy since 1.7
    return [_read_pointer(id(a) + _DATA_OFFSET).value or 0 for a in arrays]


_DATA_OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)
_read_pointer = ctypes.c_void_p.from_address


def _pick_addresses() -> Callable[[list[np.ndarray]], list[int]]:
    """Data pointers of the buffers a kernel is called with: `ndarray.ctypes.data`
    costs 1.3-1.9 us an array, most of a small graph's per-call overhead (14
    buffers: 26 of 43 us), where the struct field costs 0.1 us. The field is
    used only if it agrees with `.ctypes.data` here, on arrays of each kind a
    call passes (fresh, views at an offset, empty, read-only)."""
    base = np.arange(64, dtype=np.float64)
    probes: list[np.ndarray] = [
        base,
        base[3:],
        base[5:9],
        np.empty(0, np.int64),
        np.zeros((4, 3), np.float32)[1:],
        np.frombuffer(b"abcdefgh", dtype=np.uint8),
    ]
    try:
        if _addresses_by_struct(probes) == _addresses_by_ctypes(probes):
            return _addresses_by_struct
    except (OSError, ValueError):  # pragma: no cover - an interpreter without the layout
        pass
    return _addresses_by_ctypes  # pragma: no cover


#: The data addresses of numpy arrays, in order.
addresses = _pick_addresses()


def is_aligned(array: np.ndarray, alignment: int = CACHE_LINE_BYTES) -> bool:
    """True if the array's data starts on an `alignment`-byte boundary."""
    return array.ctypes.data % alignment == 0


def empty(shape: Any, dtype: Any = np.float32, alignment: int = CACHE_LINE_BYTES) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an `alignment`-byte
    boundary (unless it is empty: numpy points an empty slice at its base)."""
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two, not {alignment}")
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    count = math.prod(shape)
    itemsize = dtype.itemsize
    # the view keeps the buffer alive through .base; numpy's buffers start on 16 bytes at least,
    # so for the float and int types an offset in whole elements reaches the boundary
    if itemsize and alignment % itemsize == 0 and dtype.kind in "fiu":
        raw = np.empty(count + alignment // itemsize, dtype=dtype)
        start = -addresses([raw])[0] % alignment
        if start % itemsize == 0:
            start //= itemsize
            return raw[start : start + count].reshape(shape)
    nbytes = count * itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = -addresses([raw])[0] % alignment
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
