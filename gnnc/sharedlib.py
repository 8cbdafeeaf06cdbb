"""dlopen of a private copy of a shared object's bytes, checked by the caller.

Loading the bytes that were checked, not the file they came from, means a
file changed on disk after its check changes nothing: the copy is a sealed
memfd (`/proc/self/fd/N`), else (where memfds may not be executed, or there
is no /proc) a file in a new private temporary directory, removed once
mapped. Each load is a copy of its own under a name no loaded library has
(dlopen returns the handle it already has for a name). The runtime loads
kernels this way (runtime/native.py), the graph layer its edge-grouping
helper (graph/group_edges.py).

`addresses` gives the data pointers of numpy arrays passed to those
libraries' functions, at a tenth of `ndarray.ctypes.data`'s cost.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: The libraries' symbols stay out of the global namespace.
MODE = getattr(os, "RTLD_LOCAL", 0) | getattr(os, "RTLD_NOW", 0)


def load_private_copy(path: Path, data: bytes) -> tuple[ctypes.CDLL, Callable[[], None]]:
    """The library loaded from a private copy of `data` (`path` names it in messages), and what
    to call once it is unloaded. Raises OSError where neither copy can be loaded."""
    try:
        return _load_memfd(path, data)
    except OSError:
        return _load_file_copy(path, data)


#: The descriptor numbers in the names (/proc/self/fd/N) of the libraries loaded from memfds.
#: Their descriptors are closed once loaded (a process may load thousands), so a new load
#: picks a number none of them has.
_memfd_names: set[int] = set()


def _load_memfd(path: Path, data: bytes) -> tuple[ctypes.CDLL, Callable[[], None]]:
    fd = os.memfd_create(f"gnnc:{path.name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    opened = [fd]
    try:
        with open(fd, "wb", closefd=False) as f:
            f.write(data)
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)  # what was checked cannot change
        while opened[-1] in _memfd_names:
            opened.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, opened[-1] + 1))
        number = opened[-1]
        name = f"/proc/self/fd/{number}"
        try:
            library = ctypes.CDLL(name, mode=MODE)
        except OSError as exc:
            raise OSError(str(exc).replace(name, str(path))) from None
        _memfd_names.add(number)
    finally:
        for n in opened:
            os.close(n)  # the mapping keeps the memfd
    return library, functools.partial(_memfd_names.discard, number)


def _load_file_copy(path: Path, data: bytes) -> tuple[ctypes.CDLL, Callable[[], None]]:
    directory = tempfile.mkdtemp(prefix="gnnc-load-")  # 0700, a new name
    try:
        name = os.path.join(directory, path.name)
        with open(name, "wb") as f:
            f.write(data)
        try:
            library = ctypes.CDLL(name, mode=MODE)
        except OSError as exc:
            raise OSError(str(exc).replace(name, str(path))) from None
    finally:
        shutil.rmtree(directory, ignore_errors=True)  # mapped, the file can go
    return library, _nothing


def _nothing() -> None:
    pass


# ------------------------------------------------------------- addresses


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


def address(array: np.ndarray) -> int:
    """The data address of one numpy array (`addresses`' way)."""
    if addresses is _addresses_by_struct:
        return _read_pointer(id(array) + _DATA_OFFSET).value or 0
    return int(array.ctypes.data)  # pragma: no cover - an interpreter without the layout
