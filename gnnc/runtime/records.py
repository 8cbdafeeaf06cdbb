"""The checks a loaded object's kernel records pass before any of its kernels is called.

The runtime sizes every buffer it passes from a kernel's record (its
signature and ABI record, `gnnc.ir.abi`): the results it allocates, the dims
it passes, the scratch, temps and accumulator rows. A record that names a
size the call cannot bind, or a kernel whose compiled code takes another
number of arguments than the record lists, would have the native code read
or write past what was allocated; here it is a ToolchainError at load
instead. `check_records` reads the JSON alone (the CPU and CUDA runtimes);
`check_symbols` checks each record against the shared object's own exports:
the kernel's symbol and its argument count as compiled (`abi.arity_symbol`).

The integrity trailer (`abi.integrity_problem`) already refuses a damaged
file; these checks refuse a file that is whole but inconsistent.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Sequence
from typing import Any

from gnnc.errors import ToolchainError
from gnnc.ir import abi
from gnnc.ir.signature import KernelSignature

#: A size written into a record (a literal dimension, `specialize F N`, a partition count) beyond
#: this is not one a compiler wrote.
_MAX_SIZE = 1 << 40
_DOMAINS = ("V", "E", "R", None)


def check_records(metadata: dict, path: object) -> None:
    """Raises ToolchainError unless every kernel record of the metadata is well formed and
    every size it names is bound by the kernel's inputs."""
    kernels = metadata.get("kernels")
    if not isinstance(kernels, list):
        raise ToolchainError(f"{path}: its metadata has no list of kernels")
    names: set[str] = set()
    for record in kernels:
        name = record.get("name") if isinstance(record, dict) else None
        problem = _record_problem(record) if isinstance(name, str) else "it is not a kernel record"
        if problem is None and name in names:
            problem = "another kernel has its name"
        if problem is not None:
            raise ToolchainError(
                f"{path}: the metadata of kernel {name!r} is inconsistent ({problem}): "
                "the file was not written by this gnnc, or was edited; recompile it"
            )
        names.add(name)  # type: ignore[arg-type]  # a str: _record_problem checked it


def check_symbols(library: ctypes.CDLL, metadata: dict, path: object) -> None:
    """Raises ToolchainError unless each kernel's symbol is exported and takes as many arguments,
    as compiled, as its record lists (`check_records` first)."""
    for record in metadata["kernels"]:
        symbol = record["symbol"]
        try:
            library[symbol]
            arity = ctypes.c_int64.in_dll(library, abi.arity_symbol(symbol)).value
        except (AttributeError, ValueError):
            raise ToolchainError(
                f"{path}: kernel {record['name']!r} is listed in the metadata but the object does not export "
                f"{symbol} and its argument count: recompile it with this gnnc"
            ) from None
        listed = len(_arguments(record))
        if arity != listed:
            raise ToolchainError(
                f"{path}: kernel {record['name']!r} was compiled with {arity} arguments but its metadata lists "
                f"{listed}: the file was not written by this gnnc, or was edited; recompile it"
            )


def _arguments(record: dict) -> Sequence[abi.Argument]:
    signature = KernelSignature.from_dict(record)
    return abi.kernel_arguments(
        abi.AbiRecord.from_dict(record["abi"]),
        [p.name for p in signature.params],
        [r.name for r in signature.results],
    )


def _record_problem(record: dict) -> str | None:
    """What is wrong with one kernel's record, in a few words (None: nothing)."""
    name = record["name"]
    if not name.isidentifier():
        return "its name is not an identifier"
    if record.get("symbol") != abi.SYMBOL_PREFIX + name:
        return f"its symbol is not {abi.SYMBOL_PREFIX + name}"
    try:
        signature = KernelSignature.from_dict(record)
        if not isinstance(record.get("abi"), dict):
            return "it has no ABI record"
        rec = abi.AbiRecord.from_dict(record["abi"])
        _arguments(record)
    except Exception as exc:  # a record of any shape: every way it fails to parse is this one error
        return f"it does not parse: {type(exc).__name__} {exc}"
    tensors = [*signature.params, *signature.results]
    if len({t.name for t in tensors}) != len(tensors) or not all(isinstance(t.name, str) for t in tensors):
        return "its parameters and results do not have distinct names"
    bound: set[str] = set()
    for t in tensors:
        if t.domain not in _DOMAINS or not set(t.sides) <= {"src", "dst"}:
            return f"{t.name!r} has an unknown domain or side"
        problem = _shape_problem(t.shape)
        if problem is not None:
            return f"the shape of {t.name!r} {problem}"
        if t in signature.params:
            bound |= {d for d in t.shape if isinstance(d, str)}
    used = {d for t in signature.results for d in t.shape if isinstance(d, str)}
    for shape in [*rec.scratch, *rec.acc_rows, *(t.shape for t in rec.temps), *_grid_rows(rec)]:
        problem = _shape_problem(shape)
        if problem is not None:
            return f"a buffer's shape {problem}"
        used |= {d for d in shape if isinstance(d, str)}
    # a literal row axis ("3": f32[V, 3]) is its own size
    used |= (
        set(rec.dims) | set(rec.sizes or {}) | {p.row_dim for p in rec.phases if p.row_dim and not p.row_dim.isdigit()}
    )
    unbound = sorted(str(d) for d in used - bound)
    if unbound:
        return f"it sizes buffers by {', '.join(unbound)}, which no input binds"
    if any(t.domain not in ("V", "E", "RS", "RD") for t in rec.temps):
        return "a temp has no vertex, edge or pair rows"
    counts = [*(rec.sizes or {}).values(), rec.partitions, rec.groups]
    if not all(c is None or _size(c, least=1) for c in counts):
        return "a size or count it was compiled for is out of range"
    if rec.grid is not None:
        grid = rec.grid
        if not all(_size(n, least=1) for n in (grid.block_size, grid.group, grid.lanes)):
            return "its grid has an empty block, group or lane count"
        if any(launch.over not in ("V", "E") or not _size(launch.group, least=1) for launch in grid.grids):
            return "a grid launch is neither over vertices nor over edges"
    return None


def _grid_rows(rec: abi.AbiRecord) -> Iterable[list[abi.Dim]]:
    if rec.grid is None:
        return []
    return [row for launch in rec.grid.grids for row in launch.shared or []]


def _size(value: Any, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and least <= value < _MAX_SIZE


def _shape_problem(shape: Iterable[Any]) -> str | None:
    for d in shape:
        if isinstance(d, str):
            if not d.isidentifier():
                return f"names {d!r}, not a dimension"
        elif not _size(d):
            return f"has a size {d!r} out of range"
    return None


__all__ = ["check_records", "check_symbols"]
