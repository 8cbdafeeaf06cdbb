"""Kernel signatures and the checking of a call's arguments.

A signature is what a compiled ``.so``'s metadata says about one kernel, in a
JSON-able form::

    {"name": "gat", "dtype": "f32",
     "params":  [{"name": "h", "domain": "V", "shape": ["H", "F"]},
                 {"name": "eps", "domain": null, "shape": []}],
     "results": [{"name": "out", "domain": "V", "shape": ["H", "F"]},
                 {"name": "alpha", "domain": "E", "shape": ["H"]}],
     "single_result": false}

``domain`` ``"V"`` / ``"E"`` means a leading axis of vertices / edges that
``shape`` does not list; ``null`` is a parameter (its ``shape`` is the full
shape). Shape entries are ints or symbolic names bound at the call. A vertex
input also lists the ``sides`` its kernel reads it at (``"src"`` for
``x[u]``, ``"dst"`` for ``x[v]``), which decide its rows on a bipartite
graph (docs/language.md, "Bipartite graphs"): ``num_src`` when read at
sources (DGL's block convention when read at both: destinations are the
first ``num_dst`` sources), ``num_dst`` when read only at destinations,
either when never read. Vertex results have ``num_dst`` rows.
``values_read_at_src`` names the kernel's own vertex values read at ``u``:
they exist only per destination, so such a kernel needs a square graph.

``prepare_call`` is shared by the native runtime and the numpy reference: it
binds the arguments to parameters, checks dtypes, ranks, leading axes and
symbolic dimensions, copies non-contiguous inputs, and allocates or checks the
outputs (exact dtype and shape, contiguous, writeable, aliasing nothing),
so that nothing is written half-way when an argument is bad.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from gnnc.errors import ArgumentError
from gnnc.runtime import memory

__all__ = ["KernelSignature", "TensorSig", "pack_results", "prepare_call"]

Dim = Union[int, str]

#: Call options: never the name of an input (the frontend rejects such parameters).
CALL_OPTIONS = ("out", "threads", "schedule", "graph")

_DTYPES = {"f32": np.dtype(np.float32), "f64": np.dtype(np.float64)}


@dataclass(frozen=True)
class TensorSig:
    """One parameter or result: ``domain`` ``"V"``, ``"E"`` or ``None`` (a parameter)."""

    name: str
    domain: str | None
    shape: tuple[Dim, ...]
    #: where the kernel reads a vertex input: a subset of ("src", "dst"), in that order
    sides: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, record: dict) -> TensorSig:
        return cls(record["name"], record.get("domain"), tuple(record.get("shape", ())), tuple(record.get("sides", ())))

    def to_dict(self) -> dict:
        record = {"name": self.name, "domain": self.domain, "shape": list(self.shape)}
        if self.sides:
            record["sides"] = list(self.sides)
        return record

    def row_elements(self, dims: dict[str, int]) -> int:
        """Elements of one vertex's or edge's row (of the whole tensor, for a
        parameter), named dimensions sized by ``dims``."""
        n = 1
        for d in self.shape:
            n *= d if isinstance(d, int) else dims[d]
        return n

    def describe(self) -> str:
        """The declared type without its dtype: ``[V, H, F]``, ``[D1, 64]``, ``scalar``."""
        dims = ([self.domain] if self.domain else []) + [str(d) for d in self.shape]
        return f"[{', '.join(dims)}]" if dims else "a scalar"


@dataclass(frozen=True)
class KernelSignature:
    name: str
    dtype: str
    params: tuple[TensorSig, ...]
    results: tuple[TensorSig, ...]
    single_result: bool
    #: the kernel's own vertex values it reads at `u` (a square graph only)
    values_read_at_src: tuple[str, ...] = ()

    @property
    def numpy_dtype(self) -> np.dtype:
        return _DTYPES[self.dtype]

    @classmethod
    def from_dict(cls, record: dict) -> KernelSignature:
        """From the metadata record (extra keys, such as ``symbol`` or ``abi``, are ignored)."""
        dtype = record["dtype"]
        if dtype not in _DTYPES:
            raise ArgumentError(f"kernel {record.get('name')!r} has an unknown element type {dtype!r}")
        return cls(
            name=record["name"],
            dtype=dtype,
            params=tuple(TensorSig.from_dict(p) for p in record["params"]),
            results=tuple(TensorSig.from_dict(r) for r in record["results"]),
            single_result=bool(record["single_result"]),
            values_read_at_src=tuple(record.get("values_read_at_src", ())),
        )

    def to_dict(self) -> dict:
        record = {
            "name": self.name,
            "dtype": self.dtype,
            "params": [p.to_dict() for p in self.params],
            "results": [r.to_dict() for r in self.results],
            "single_result": self.single_result,
        }
        if self.values_read_at_src:
            record["values_read_at_src"] = list(self.values_read_at_src)
        return record

    @classmethod
    def from_ast(cls, kernel: Any) -> KernelSignature:
        """From a checked ``gnnc.frontend.ast.Kernel``."""
        dtype = kernel.dtype
        if dtype is None:  # an unchecked tree: every declared type has the same dtype once checked
            typed = [p.type for p in kernel.params] + [r.type for r in kernel.results]
            dtype = typed[0].dtype if typed else "f32"
        reads = _vertex_reads(kernel)
        params = {p.name for p in kernel.params}
        side_of = {"u": "src", "v": "dst"}
        return cls(
            name=kernel.name,
            dtype=dtype,
            params=tuple(
                TensorSig(p.name, p.type.domain, tuple(p.type.shape),
                          tuple(side_of[i] for i in "uv" if (p.name, i) in reads) if p.type.domain == "V" else ())
                for p in kernel.params
            ),
            results=tuple(TensorSig(r.name, r.type.domain, tuple(r.type.shape)) for r in kernel.results),
            single_result=bool(kernel.single_result),
            values_read_at_src=tuple(sorted({n for n, i in reads if i == "u" and n not in params})),
        )

    def describe(self) -> str:
        return f"{self.name}({', '.join(p.name for p in self.params)})"


def _vertex_reads(kernel: Any) -> set[tuple[str, str]]:
    """Every (name, index) a kernel's body reads as `name[u]` / `name[v]` (duck-typed AST walk)."""
    found: set[tuple[str, str]] = set()

    def walk(e: Any) -> None:
        index = getattr(e, "index", None)
        if type(e).__name__ == "Index" and index in ("u", "v"):
            found.add((e.name, index))
        for child in ("operand", "lhs", "rhs"):
            if hasattr(e, child):
                walk(getattr(e, child))
        for arg in getattr(e, "args", ()) or ():
            walk(arg)

    for definition in kernel.body:
        walk(definition.value)
    return found


# ------------------------------------------------------------------ arguments


def _is_torch_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "detach") and hasattr(obj, "numpy")


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
        raise ArgumentError(
            f"unknown input{'s' if len(unknown) > 1 else ''} {listed} for {sig.describe()}"
        )
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
            raise ArgumentError(
                f"dimension '{dim}' is {have} in {self.bound_by[dim]} but {size} in {who}"
            )


def _convert_input(sig: KernelSignature, p: TensorSig, value: Any, graph: Any, dims: _Dims) -> np.ndarray:
    dtype = sig.numpy_dtype
    what = f"input '{p.name}' of {sig.name}"
    if _is_torch_tensor(value):
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
        raise ArgumentError(
            f"{what}: expected {lead + len(p.shape)} axes {p.describe()}, got shape {tuple(arr.shape)}"
        )
    if p.domain == "V":
        _check_vertex_rows(what, p, arr.shape[0], graph)
    if p.domain == "E" and arr.shape[0] != graph.num_edges:
        raise ArgumentError(
            f"{what}: its leading axis (E) has {arr.shape[0]} entries but the graph has "
            f"{graph.num_edges} edges"
        )
    for axis, (dim, size) in enumerate(zip(p.shape, arr.shape[lead:]), start=lead):
        if isinstance(dim, str):
            dims.bind(dim, int(size), f"'{p.name}' (axis {axis})")
        elif size != dim:
            raise ArgumentError(
                f"{what}: axis {axis} must have size {dim} ({p.describe()}), got shape {tuple(arr.shape)}"
            )
    # not np.ascontiguousarray: it turns a 0-d array into a 1-d one
    return arr if arr.flags.c_contiguous else np.array(arr, order="C")


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
        where = {("src",): "read at u: one row per source", ("dst",): "read at v: one row per destination",
                 ("src", "dst"): "read at u and v: one row per source, destinations first"}.get(
                     p.sides, "never read: a row per source or per destination")
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
            raise ArgumentError(f"out= has {len(out)} arrays but {sig.name} has {len(names)} results ({', '.join(names)})")
        return {n: v for n, v in zip(names, out) if v is not None}
    if len(names) == 1:
        return {names[0]: out}
    raise ArgumentError(
        f"{sig.name} has {len(names)} results ({', '.join(names)}): pass out= as a dict by name "
        "or a tuple in result order"
    )


def _check_output(sig: KernelSignature, name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    what = f"out= for result '{name}' of {sig.name}"
    if _is_torch_tensor(value):
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
    if graph.bipartite and sig.values_read_at_src:
        raise ArgumentError(
            f"{sig.name} reads its vertex value{'s' if len(sig.values_read_at_src) > 1 else ''} "
            f"{', '.join(repr(n) for n in sig.values_read_at_src)} at u, but a vertex value exists only at "
            f"destinations: on a bipartite graph ({graph.num_src} sources, {graph.num_dst} destinations) "
            "sources have none; call it on a square graph"
        )
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


def check_bipartite(name: str, record: dict, graph: Any) -> None:
    """Refuses what a kernel cannot run on a bipartite graph (prepare_call checked the rows)."""
    if any(t.get("read_at_src") for t in record["temps"]):
        raise ArgumentError(
            f"{name}: this compiled kernel computes a vertex value per destination and reads it at sources "
            f"(a cuda mapping has no source sweep), so it needs a square graph; the graph has "
            f"{graph.num_src} sources and {graph.num_dst} destinations"
        )
