"""Loading gnnc shared objects and calling their kernels with plain ctypes (no xDSL, no llvmlite).

    library, metadata = open_shared_object(path)
    check_cpu_features(metadata)      # before any kernel in `library` is called
    function = Function(library, record["symbol"], arguments)
    function(inputs, outputs, graph_arguments, workspace)

Every gnnc `.so` exports `gnnc_metadata` (null-terminated JSON) and
`gnnc_metadata_size` (its length, an int64); see
`gnnc.target.cpu.codegen.embed_metadata`. The metadata's `cpu` record lists the
/proc/cpuinfo flags the code needs, so a `.so` built for AVX-512 on another
machine fails with a message naming the missing features instead of SIGILL.

Loading a shared object runs code: dlopen runs whatever constructors the
file has (gnnc emits none), and a kernel is machine code. So a `.so` is
trusted as a pickle is: load only files you or your own gnnc wrote
(docs/guide/security.md). What `open_shared_object` checks guards against
damage, not malice: the file's integrity trailer must match its bytes and
its ELF headers must lie within it before anything is mapped, and what is
mapped is the checked copy (a sealed memfd), so the file changing on disk
afterwards changes nothing, and loading a path again loads what is there
now (dlopen alone would return its handle of the old file by the path).
A library is closed (dlclose) once nothing in Python can call into it.
"""

from __future__ import annotations

import _ctypes
import ctypes
import json
import os
import stat
import struct
import sys
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gnnc import sharedlib
from gnnc.errors import ToolchainError
from gnnc.host import host_cpu_flags
from gnnc.ir import abi

METADATA_SYMBOL = "gnnc_metadata"
METADATA_SIZE_SYMBOL = "gnnc_metadata_size"
METADATA_FORMAT = "gnnc-shared-object"
_MAX_METADATA = 1 << 26  # a sanity bound: a size beyond this means the symbol is not ours


#: A shared object longer than this is refused unread (gnnc's are tens of KiB).
_MAX_OBJECT_BYTES = 1 << 30


def open_shared_object(path: str | os.PathLike) -> tuple[ctypes.CDLL, dict]:
    """Loads a gnnc shared object and returns it with its metadata record.

    Raises ToolchainError if the file is missing, is not a regular file, is
    damaged (its integrity trailer does not match), cannot be loaded, or is not
    a gnnc shared object (no or garbled metadata).
    """
    path = Path(path)
    data = _read_object(path)
    problem = abi.integrity_problem(data)
    if problem is not None:
        raise ToolchainError(
            f"cannot load {path}: it is not a gnnc shared object or it is damaged: {problem}; recompile it"
        )
    _check_elf_complete(path, data)
    library = _load_copy(path, data)
    return library, read_metadata(library, path)


def _read_object(path: Path) -> bytes:
    """The file's bytes; never opens what is not a regular file (a FIFO would block)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ToolchainError(f"{path}: no such shared object (not a regular file)")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ToolchainError(f"{path}: no such shared object (not a regular file)")
            data = f.read(_MAX_OBJECT_BYTES + 1)
    except FileNotFoundError:
        raise ToolchainError(f"{path}: no such shared object") from None
    except OSError as exc:
        raise ToolchainError(f"{path}: cannot read shared object: {exc.strerror or exc}") from None
    if len(data) > _MAX_OBJECT_BYTES:
        raise ToolchainError(f"{path}: not a gnnc shared object (longer than {_MAX_OBJECT_BYTES >> 20} MiB)")
    return data


def _check_elf_complete(path: Path, data: bytes) -> None:
    """Refuses an ELF file whose headers or segments reach past its end.

    dlopen maps segments without checking the file's size, so a truncated
    object is mapped beyond its end and the dynamic linker dies with SIGBUS
    while relocating it; a size check first turns that into an error.
    """
    size = len(data)
    head = data[:64]
    if not head.startswith(b"\x7fELF"):
        return  # not ELF: dlopen gives its own error
    corrupt = f"{path}: cannot load shared object: the ELF file is truncated or corrupt"
    if len(head) < 6 or head[4] not in (1, 2) or head[5] not in (1, 2):
        raise ToolchainError(corrupt)
    end = "<" if head[5] == 1 else ">"
    wide = head[4] == 2
    fmt = end + ("HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH")
    if len(head) < 16 + struct.calcsize(fmt):
        raise ToolchainError(corrupt)
    fields = struct.unpack_from(fmt, head, 16)
    phoff, shoff, phentsize, phnum, shentsize, shnum = fields[4], fields[5], *fields[8:12]
    if phoff + phnum * phentsize > size or (shoff and shoff + shnum * shentsize > size):
        raise ToolchainError(corrupt)
    ph_fmt = end + ("IIQQQQQQ" if wide else "IIIIIIII")
    if phnum and phentsize < struct.calcsize(ph_fmt):
        raise ToolchainError(corrupt)
    for i in range(phnum):
        fields = struct.unpack_from(ph_fmt, data, phoff + i * phentsize)
        offset, filesz = (fields[2], fields[5]) if wide else (fields[1], fields[4])
        if offset + filesz > size:
            raise ToolchainError(corrupt)


def _load_copy(path: Path, data: bytes) -> ctypes.CDLL:
    """dlopen of a private copy of `data` (`sharedlib.load_private_copy`), unloaded once
    nothing in Python can call into it."""
    try:
        library, release = sharedlib.load_private_copy(path, data)
    except OSError as exc:
        raise ToolchainError(f"{path}: cannot load shared object: {exc}") from None
    finalizer = weakref.finalize(library, _unload, library._handle, release)
    finalizer.atexit = False  # at exit nothing is unloaded: another thread may still be in a kernel
    _keep_openmp_loaded()
    return library


def _unload(handle: int, release: Callable[[], None]) -> None:
    """dlclose once the library object is collected: every ctypes function pointer into it held
    the library, so no Python code can call into it any more."""
    _ctypes.dlclose(handle)
    release()


#: libgomp, kept loaded for the process's life once a kernel brought it in.
_openmp: list[ctypes.CDLL] = []


def _keep_openmp_loaded() -> None:
    """Unloading the last kernel that needs libgomp would unload libgomp under its idle worker
    threads; marked NODELETE (and held), it stays."""
    if _openmp or not hasattr(os, "RTLD_NOLOAD"):
        return
    try:
        _openmp.append(ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD | os.RTLD_NODELETE | os.RTLD_NOW))
    except OSError:
        pass  # not loaded (a kernel without threads): nothing to keep


def read_metadata(library: ctypes.CDLL, path: str | os.PathLike = "<library>") -> dict:
    """The JSON metadata record a gnnc shared object exports."""
    not_ours = f"{path} is not a gnnc shared object"
    try:
        size = ctypes.c_int64.in_dll(library, METADATA_SIZE_SYMBOL).value
    except ValueError:
        raise ToolchainError(f"{not_ours}: it exports no '{METADATA_SIZE_SYMBOL}'") from None
    if not 0 < size < _MAX_METADATA:
        raise ToolchainError(f"{not_ours}: implausible metadata size {size}")
    try:
        raw = (ctypes.c_char * (size + 1)).in_dll(library, METADATA_SYMBOL).raw
    except ValueError:
        raise ToolchainError(f"{not_ours}: it exports no '{METADATA_SYMBOL}'") from None
    if raw[size] != 0:
        raise ToolchainError(f"{not_ours}: its metadata is not null-terminated at the stated size")
    try:
        metadata = json.loads(raw[:size].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ToolchainError(f"{not_ours}: its metadata is not valid JSON ({exc})") from None
    if not isinstance(metadata, dict):
        raise ToolchainError(f"{not_ours}: its metadata is not a JSON object")
    fmt = metadata.get("format", METADATA_FORMAT)
    if fmt != METADATA_FORMAT:
        raise ToolchainError(f"{not_ours}: its metadata format is {fmt!r}, expected {METADATA_FORMAT!r}")
    cpu = metadata.get("cpu")
    if not isinstance(cpu, dict) or not isinstance(cpu.get("features", []), list):
        raise ToolchainError(f"{not_ours}: its metadata has no valid 'cpu' record")
    return metadata


def check_cpu_features(metadata: dict) -> None:
    """Raises ToolchainError if this CPU lacks a feature the shared object was compiled for."""
    cpu = metadata.get("cpu")
    if not isinstance(cpu, dict):
        raise ToolchainError("not a gnnc shared object: its metadata has no 'cpu' record")
    needed = [str(f) for f in cpu.get("features", [])]
    if not needed:
        return
    host = host_cpu_flags()
    if host is None:
        warnings.warn(
            f"cannot read /proc/cpuinfo on {sys.platform}: not checking that this CPU has {', '.join(needed)}",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    missing = [f for f in needed if f not in host]
    if missing:
        level = cpu.get("level", "?")
        built_for = level if level != "native" else f"the CPU it was built on ({cpu.get('name', '?')})"
        raise ToolchainError(
            f"this .so was compiled for {built_for} and needs {', '.join(needed)}; "
            f"this CPU lacks {', '.join(missing)}; recompile with --cpu native"
        )


# ------------------------------------------------------------------ calls


class Function:
    """One kernel's C function, `gnnc_K`, with its arguments (`abi.kernel_arguments`) in order."""

    def __init__(self, library: ctypes.CDLL, symbol: str, arguments: Sequence[abi.Argument]):
        try:
            # by item, not attribute: CDLL caches attributes, and the cycle would delay the unload
            self._function = library[symbol]
        except AttributeError as exc:
            raise ToolchainError(f"the shared object lacks the symbol {symbol}") from exc
        self._function.argtypes = [ctypes.c_void_p if a.pointer else ctypes.c_int64 for a in arguments]
        self._function.restype = None
        self._params = [a.name for a in arguments if a.group is abi.Group.PARAMS]
        self._results = [a.name for a in arguments if a.group is abi.Group.RESULTS]
        self._pointers = [a.name for a in arguments if a.pointer]
        self._layout = [(a.name, a.pointer) for a in arguments]

    def __call__(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], *named: Mapping[str, Any]) -> None:
        """Runs the kernel: `inputs` and `outputs` in parameter and result order, every
        other argument by name in one of the `named` mappings (scalars as ints)."""
        values: dict[str, Any] = dict(zip(self._params, inputs))
        values.update(zip(self._results, outputs))
        for arguments in named:
            values.update(arguments)
        if values.get("num_threads", 1) > 1:
            note_pool_started()
        addresses = iter(sharedlib.addresses([values[name] for name in self._pointers]))
        self._function(*[next(addresses) if pointer else values[name] for name, pointer in self._layout])

    def call(self, values: list[Any]) -> None:
        """Runs the kernel on its arguments in ABI order, pointers as addresses (a prepared call's)."""
        self._function(*values)


class CooEntry:
    """One kernel's COO entry, `gnnc_K__coo` (`abi.COO_ENTRY_ARGUMENTS`): graph, plan and call
    in one native call, for a graph the runtime has not converted (`gnnc.graph.coo.CooGraph`)."""

    def __init__(self, function: Any):
        self._function = function

    @classmethod
    def find(cls, library: ctypes.CDLL, symbol: str) -> CooEntry | None:
        """The entry, or None where the object lacks it (linked by hand from `--emit obj`)."""
        try:
            function = library[symbol]
        except AttributeError:
            return None
        function.argtypes = [ctypes.c_void_p if pointer else ctypes.c_int64 for _, pointer in abi.COO_ENTRY_ARGUMENTS]
        function.restype = ctypes.c_int
        return cls(function)

    def __call__(
        self, src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int, threads: int, dims: np.ndarray, arrays: list
    ) -> int:
        """Runs it: int64 C-contiguous `src` / `dst` and `dims`, the kernel's inputs then results
        (C-contiguous, checked by the caller); 0, or an `abi.COO_ERRORS` code."""
        pointers = sharedlib.addresses([src, dst, dims, *arrays])
        args = (ctypes.c_void_p * len(arrays))(*pointers[3:])
        if threads > 1:
            note_pool_started()
        return int(self._function(num_src, num_dst, src.shape[0], pointers[0], pointers[1], threads, pointers[2], args))


# libgomp is not fork-safe. It keeps its worker threads in a pool and registers
# no pthread_atfork handler; fork() copies the pool's bookkeeping but not its
# threads, so a child whose parent had started the pool waits forever at its
# first parallel region of more than one thread (a DataLoader worker started by
# fork, after the parent ran a kernel). A region of one thread never touches
# the pool: the runtime asks for one thread in such a child (`forked_after_pool`).
# Children started by 'spawn' or 'forkserver' get a fresh libgomp.

#: This process ran a kernel on several threads: libgomp's pool may exist.
_pool_started = False
#: This process was forked from one whose pool had started: kernels run on one thread.
forked_after_pool = False


def note_pool_started() -> None:
    """A kernel runs on several threads: from here on a forked child must run on one."""
    global _pool_started
    _pool_started = True


def _after_fork_in_child() -> None:
    global forked_after_pool
    if _pool_started:
        forked_after_pool = True


if hasattr(os, "register_at_fork"):  # not on Windows, which cannot fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = [
    "METADATA_FORMAT",
    "Function",
    "check_cpu_features",
    "host_cpu_flags",
    "note_pool_started",
    "open_shared_object",
    "read_metadata",
]
