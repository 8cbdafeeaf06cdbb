"""The checking of a call's arguments against a kernel's signature (`gnnc.ir.signature`).

``prepare_call`` is shared by the native runtime and the numpy reference: it
binds the arguments to parameters, checks dtypes, ranks, leading axes and
symbolic dimensions, copies non-contiguous inputs, and allocates or checks the
outputs (exact dtype and shape, contiguous, writeable, aliasing nothing),
so that nothing is written half-way when an argument is bad.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from gnnc.errors import ArgumentError
from gnnc.graph.tensors import is_torch_tensor
from gnnc.ir.signature import KernelSignature, TensorSig
from gnnc.runtime import memory

__all__ = ["KernelSignature", "TensorSig", "pack_results", "prepare_call", "result_shapes_on"]

#: Call options: never the name of an input (the frontend rejects such parameters).
CALL_OPTIONS = ("out", "threads", "schedule", "graph")

#: The default of a call's positional-only graph: none was given positionally.
NO_GRAPH: Any = object()


def take_graph(graph: Any, kwargs: dict) -> Any:
    """A call's graph: its first argument, or `graph=` (taken out of `kwargs`); one of them.

    Kernels take the graph positional-only, so `kernel(g, x, graph=h)` reaches
    here rather than ending in Python's TypeError of a doubled argument."""
    given = kwargs.pop("graph", NO_GRAPH)
    if graph is NO_GRAPH:
        if given is NO_GRAPH:
            raise ArgumentError("a kernel call needs the graph as its first argument: kernel(graph, *inputs)")
        return given
    if given is not NO_GRAPH:
        raise ArgumentError("the graph is given twice: as the first argument and as graph=")
    return graph


# ------------------------------------------------------------------ arguments


def _from_torch(value: Any, what: str) -> np.ndarray:
    device = getattr(value, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        raise ArgumentError(f"{what} is a tensor on {device}; this runtime needs CPU tensors (.cpu())")
    return value.detach().numpy()


def _dtype_name(dt: np.dtype) -> str:
    return str(dt) if dt.isnative else dt.str


def _bind_args(sig: KernelSignature, args: tuple, kwargs: dict) -> dict[str, Any]:
    names = [p.name for p in sig.params]
    if len(args) > len(names):
        raise ArgumentError(
            f"{sig.describe()} takes {len(names)} input{'s' if len(names) != 1 else ''} after the graph "
            f"but {len(args)} were given positionally"
        )
    bound = dict(zip(names, args))
    options = [k for k in kwargs if k in CALL_OPTIONS]
    if options:
        k = options[0]
        how = "the graph is the first argument" if k == "graph" else f"{k}= is not accepted here"
        raise ArgumentError(f"'{k}' is a call option, not an input of {sig.describe()} ({how})")
    unknown = [k for k in kwargs if k not in names]
    if unknown:
        listed = ", ".join(f"'{k}'" for k in unknown)
        raise ArgumentError(f"unknown input{'s' if len(unknown) > 1 else ''} {listed} for {sig.describe()}")
    twice = [k for k in kwargs if k in bound]
    if twice:
        listed = ", ".join(f"'{k}'" for k in twice)
        raise ArgumentError(f"{sig.describe()} got {listed} both positionally and by name")
    bound.update(kwargs)
    missing = [n for n in names if n not in bound]
    if missing:
        listed = ", ".join(f"'{k}'" for k in missing)
        raise ArgumentError(f"missing input{'s' if len(missing) > 1 else ''} {listed} of {sig.describe()}")
    return bound


class _Dims:
    """Symbolic dimensions bound while checking, with who bound each."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}
        self.bound_by: dict[str, str] = {}

    def bind(self, dim: str, size: int, who: str) -> None:
        have = self.sizes.get(dim)
        if have is None:
            self.sizes[dim] = size
            self.bound_by[dim] = who
        elif have != size:
            raise ArgumentError(f"dimension '{dim}' is {have} in {self.bound_by[dim]} but {size} in {who}")


def _convert_input(sig: KernelSignature, p: TensorSig, value: Any, graph: Any, dims: _Dims) -> np.ndarray:
    dtype = sig.numpy_dtype
    what = f"input '{p.name}' of {sig.name}"
    if is_torch_tensor(value):
        value = _from_torch(value, what)
    scalar = p.domain is None and not p.shape
    if scalar and not isinstance(value, np.ndarray):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ArgumentError(f"{what} is a scalar ({sig.dtype}): expected a number, got {type(value).__name__}")
        try:
            with np.errstate(over="ignore"):
                arr = np.array(value, dtype=dtype)
            overflow = bool(np.isinf(arr)) and math.isfinite(float(value))
        except OverflowError:
            overflow = True
        if overflow:
            raise ArgumentError(f"{what}: {value} is out of range for {dtype}")
        return arr
    if isinstance(value, np.ndarray):
        arr = value
    else:
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as exc:
            raise ArgumentError(f"{what} is not an array: {exc}") from exc
        if isinstance(value, (list, tuple)) and arr.dtype.kind in "iuf":
            arr = arr.astype(dtype)  # a Python list has no dtype to get wrong
    if arr.dtype != dtype:
        hint = f" (convert it with .astype(np.{dtype}))" if arr.dtype.kind in "iuf" else ""
        raise ArgumentError(f"{what}: expected {dtype}, got {_dtype_name(arr.dtype)}{hint}")
    lead = 1 if p.domain else 0
    if arr.ndim != lead + len(p.shape):
        raise ArgumentError(f"{what}: expected {lead + len(p.shape)} axes {p.describe()}, got shape {tuple(arr.shape)}")
    if p.domain:
        _check_rows(what, p, arr.shape[0], graph)
    for axis, (dim, size) in enumerate(zip(p.shape, arr.shape[lead:]), start=lead):
        if isinstance(dim, str):
            dims.bind(dim, int(size), f"'{p.name}' (axis {axis})")
        elif size != dim:
            raise ArgumentError(
                f"{what}: axis {axis} must have size {dim} ({p.describe()}), got shape {tuple(arr.shape)}"
            )
    if arr.flags.c_contiguous or (p.domain == "V" and not p.sides):
        return arr  # a vertex input the kernel never reads is not copied (a gradient's stand-in)
    return np.array(arr, order="C")  # not np.ascontiguousarray: it turns a 0-d array into a 1-d one


def _check_rows(what: str, p: TensorSig, rows: int, graph: Any) -> None:
    """The leading axis of an input over V, E or R against the graph's sizes."""
    if p.domain == "V":
        _check_vertex_rows(what, p, rows, graph)
    elif p.domain == "E" and rows != graph.num_edges:
        raise ArgumentError(
            f"{what}: its leading axis (E) has {rows} entries but the graph has {graph.num_edges} edges"
        )
    elif p.domain == "R" and rows != graph.num_relations:
        raise ArgumentError(
            f"{what}: its leading axis (R) has {rows} entries but the graph has "
            f"{graph.num_relations} relation types (num_relations)"
        )


def _check_graph(sig: KernelSignature, graph: Any) -> None:
    """What the kernel needs of any graph it runs on, whatever its inputs."""
    if graph.bipartite and sig.values_read_at_src:
        raise ArgumentError(
            f"{sig.name} reads its vertex value{'s' if len(sig.values_read_at_src) > 1 else ''} "
            f"{', '.join(repr(n) for n in sig.values_read_at_src)} at u, but a vertex value exists only at "
            f"destinations: on a bipartite graph ({graph.num_src} sources, {graph.num_dst} destinations) "
            "sources have none; call it on a square graph"
        )
    if (sig.relations or any(p.domain == "R" for p in sig.params)) and not graph.has_relations:
        raise ArgumentError(
            f"{sig.name} reads the edges' relation types (rel(e)), but the graph has none: build it with "
            "gnnc.Graph(edge_index, edge_type=..., num_relations=...)"
        )


def result_shapes_on(
    sig: KernelSignature, graph: Any, inputs: Sequence[np.ndarray], dims: dict[str, int]
) -> tuple[tuple[int, ...], ...] | None:
    """The result shapes of a call on `graph` with `inputs`: C-contiguous arrays of the kernel's
    dtype that `prepare_call` accepted on another graph with these sizes (`dims`) and the same
    axes past the leading one; None where they may not fit this graph (`prepare_call` then
    says why). The part of `prepare_call`'s check that depends on the graph."""
    try:
        _check_graph(sig, graph)
        for p, arr in zip(sig.params, inputs):
            if p.domain:
                _check_rows(p.name, p, arr.shape[0], graph)
        return tuple(_result_shape(sig, r, graph, dims) for r in sig.results)
    except ArgumentError:
        return None


def vertex_rows(p: TensorSig, graph: Any) -> tuple[int, ...]:
    """The row counts a vertex input may have on `graph` (see the module doc)."""
    if "src" in p.sides:
        return (graph.num_src,)
    if "dst" in p.sides:
        return (graph.num_dst,)
    return tuple(sorted({graph.num_src, graph.num_dst}))


def _check_vertex_rows(what: str, p: TensorSig, rows: int, graph: Any) -> None:
    if not graph.bipartite:
        if rows != graph.num_vertices:
            raise ArgumentError(
                f"{what}: its leading axis (V) has {rows} entries but the graph has {graph.num_vertices} vertices"
            )
        return
    if p.sides == ("src", "dst") and graph.num_dst > graph.num_src:
        raise ArgumentError(
            f"{what} is read at both u and v, so on a bipartite graph destinations must be the first "
            f"sources (DGL's block convention), but the graph has {graph.num_dst} destinations and only "
            f"{graph.num_src} sources"
        )
    allowed = vertex_rows(p, graph)
    if rows not in allowed:
        where = {
            ("src",): "read at u: one row per source",
            ("dst",): "read at v: one row per destination",
            ("src", "dst"): "read at u and v: one row per source, destinations first",
        }.get(p.sides, "never read: a row per source or per destination")
        raise ArgumentError(
            f"{what}: its leading axis (V) has {rows} entries but the bipartite graph needs "
            f"{' or '.join(map(str, allowed))} ({where}; the graph has {graph.num_src} sources, "
            f"{graph.num_dst} destinations)"
        )


def _result_shape(sig: KernelSignature, r: TensorSig, graph: Any, dims: dict[str, int]) -> tuple[int, ...]:
    lead = {"V": (graph.num_vertices,), "E": (graph.num_edges,), None: ()}[r.domain]
    shape = []
    for d in r.shape:
        if isinstance(d, str):
            if d not in dims:
                raise ArgumentError(f"dimension '{d}' of result '{r.name}' of {sig.name} is bound by no input")
            shape.append(dims[d])
        else:
            shape.append(int(d))
    return lead + tuple(shape)


def _given_outputs(sig: KernelSignature, out: Any) -> dict[str, Any]:
    names = [r.name for r in sig.results]
    if out is None:
        return {}
    if isinstance(out, dict):
        unknown = [k for k in out if k not in names]
        if unknown:
            raise ArgumentError(
                f"out= names unknown result{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(k) for k in unknown)}; {sig.name} returns {', '.join(names)}"
            )
        return {k: v for k, v in out.items() if v is not None}
    if len(names) == 1 and sig.single_result:
        return {names[0]: out}
    if isinstance(out, (tuple, list)):
        if len(out) > len(names):
            raise ArgumentError(
                f"out= has {len(out)} arrays but {sig.name} has {len(names)} results ({', '.join(names)})"
            )
        return {n: v for n, v in zip(names, out) if v is not None}
    if len(names) == 1:
        return {names[0]: out}
    raise ArgumentError(
        f"{sig.name} has {len(names)} results ({', '.join(names)}): pass out= as a dict by name "
        "or a tuple in result order"
    )


def _check_output(sig: KernelSignature, name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    what = f"out= for result '{name}' of {sig.name}"
    if is_torch_tensor(value):
        value = _from_torch(value, what)
    if not isinstance(value, np.ndarray):
        raise ArgumentError(f"{what} must be a numpy array, got {type(value).__name__}")
    dtype = sig.numpy_dtype
    if value.dtype != dtype:
        raise ArgumentError(f"{what}: expected {dtype}, got {_dtype_name(value.dtype)}")
    if tuple(value.shape) != shape:
        raise ArgumentError(f"{what}: expected shape {shape}, got {tuple(value.shape)}")
    if not value.flags.c_contiguous:
        raise ArgumentError(f"{what} must be C-contiguous (np.ascontiguousarray, or allocate it with np.empty)")
    if not value.flags.writeable:
        raise ArgumentError(f"{what} is read-only")
    return value


def prepare_call(
    sig: KernelSignature, graph: Any, args: tuple, kwargs: dict, out: Any = None
) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, int]]:
    """Checks a call; returns ``(inputs, outputs, dims)``, inputs in parameter order.

    Inputs are C-contiguous arrays of the kernel's dtype (non-contiguous ones
    are copied); outputs are the given ``out=`` arrays or fresh ones, starting
    on a cache line (`memory.empty`), in result order; ``dims`` maps each
    symbolic dimension to its size.
    """
    bound = _bind_args(sig, tuple(args), dict(kwargs))
    _check_graph(sig, graph)
    dims = _Dims()
    inputs = [_convert_input(sig, p, bound[p.name], graph, dims) for p in sig.params]
    given = _given_outputs(sig, out)
    outputs: list[np.ndarray] = []
    checked: list[tuple[str, np.ndarray]] = []
    for r in sig.results:
        shape = _result_shape(sig, r, graph, dims.sizes)
        if r.name not in given:
            outputs.append(memory.empty(shape, sig.numpy_dtype))
            continue
        arr = _check_output(sig, r.name, given[r.name], shape)
        for p, inp in zip(sig.params, inputs):
            if np.shares_memory(arr, inp):
                raise ArgumentError(
                    f"out= for result '{r.name}' of {sig.name} overlaps input '{p.name}' "
                    "(the kernels assume no aliasing: pass a separate array)"
                )
        for other, prev in checked:
            if np.shares_memory(arr, prev):
                raise ArgumentError(f"out= arrays for results '{other}' and '{r.name}' of {sig.name} overlap")
        checked.append((r.name, arr))
        outputs.append(arr)
    return inputs, outputs, dict(dims.sizes)


def pack_results(sig: KernelSignature, outputs: list[np.ndarray]) -> Any:
    """The single result's array, or a dict name -> array for several results."""
    if sig.single_result:
        return outputs[0]
    return {r.name: o for r, o in zip(sig.results, outputs)}
