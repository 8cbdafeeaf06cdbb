"""Calling compiled kernels: a loaded `.so` becomes a `Module` of callables.

This module imports neither xDSL nor llvmlite: a script that only calls
pre-compiled kernels pays nothing for the compiler. Every argument is checked
(`signature.prepare_call`) before native code runs.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from gnnc.autotune import heuristic
from gnnc.errors import ArgumentError, CompileError, SourceError, ToolchainError
from gnnc.graph import plans
from gnnc.graph.graph import Graph
from gnnc.ir import abi
from gnnc.ir.signature import KernelSignature
from gnnc.runtime import compile_hook, fork_safety, memory, native
from gnnc.runtime.cuda import is_device_array
from gnnc.runtime.signature import check_bipartite, pack_results, prepare_call

_log = logging.getLogger(__name__)

_DTYPES = {"f32": np.float32, "f64": np.float64}
#: Schedules `schedule="auto"` tries before it runs the kernel as compiled.
AUTO_ATTEMPTS = 8


def _addresses_by_ctypes(arrays: list[np.ndarray]) -> list[int]:
    return [a.ctypes.data for a in arrays]


def _addresses_by_struct(arrays: list[np.ndarray]) -> list[int]:
    # PyArrayObject begins with PyObject_HEAD and then the data pointer
    # (numpy's ndarraytypes.h, PyArrayObject_fields), in every numpy since 1.7
    return [_read_pointer(id(a) + _DATA_OFFSET).value or 0 for a in arrays]


_DATA_OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)
_read_pointer = ctypes.c_void_p.from_address


def _pick_addresses() -> Any:
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


_addresses = _pick_addresses()


def _nonempty(arr: np.ndarray) -> np.ndarray:
    return arr if arr.shape[0] else np.zeros(1, dtype=arr.dtype)


def resolve_threads(threads: int | None) -> int:
    """`threads=` on the call, else OMP_NUM_THREADS, else every core this process may use."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ArgumentError(f"threads must be a positive integer, got {threads!r}")
        return threads
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _as_graph(graph: Any) -> Graph:
    if isinstance(graph, Graph):
        return graph
    raise ArgumentError(
        f"the first argument of a kernel must be a gnnc.Graph, got {type(graph).__name__}; "
        "build one with gnnc.Graph(edge_index) or gnnc.Graph.from_scipy(A)"
    )


def _one_line(directives: str) -> str:
    return "; ".join(line.strip() for line in directives.splitlines() if line.strip())


def _shape(graph: Graph, dims: dict[str, int]) -> tuple[int, int, dict[str, int]]:
    """What a schedule decision depends on, for the log: V, E and the kernel's sizes."""
    return graph.num_vertices, graph.num_edges, dims


def _refuse_device_arrays(sig: KernelSignature, args: tuple, kwargs: dict, out: Any) -> None:
    """A CUDA device array given to a CPU kernel: one clear error, not a dtype complaint."""
    outs = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else [out]
    for value in [*args, *kwargs.values(), *outs]:
        if is_device_array(value):
            raise ArgumentError(
                f"{sig.describe()} runs on the CPU but got a CUDA device array ({type(value).__name__}); "
                "copy it to the host (.cpu(), .get(), .copy_to_host()) or compile with target='cuda'"
            )


class Kernel:
    """One compiled kernel: `kernel(graph, *inputs, out=None, **named_inputs)`."""

    def __init__(self, library: ctypes.CDLL, record: dict, metadata: dict | None = None):
        self._metadata = metadata or {}
        self._variants: dict[str, Kernel] = {}
        self._refused: set[str] = set()
        self.signature = KernelSignature.from_dict(record)
        self.name = self.signature.name
        self._abi = abi.AbiRecord.from_dict(record["abi"])
        self._dtype = _DTYPES[self.signature.dtype]
        try:
            self._function = getattr(library, record["symbol"])
        except AttributeError as exc:
            raise ToolchainError(f"the shared object lacks the symbol {record['symbol']}") from exc
        # the argument layout, once: every call places its values by these names
        self._arguments = abi.kernel_arguments(
            self._abi, [p.name for p in self.signature.params], [r.name for r in self.signature.results]
        )
        self._pointers = [a.name for a in self._arguments if a.pointer]
        self._names = {g: [a.name for a in self._arguments if a.group is g] for g in abi.Group}
        self._layout = [(a.name, a.pointer) for a in self._arguments]
        self._function.argtypes = [ctypes.c_void_p if a.pointer else ctypes.c_int64 for a in self._arguments]
        self._function.restype = None

    def __repr__(self) -> str:
        params = ", ".join(p.name for p in self.signature.params)
        return f"<gnnc kernel {self.name}(graph, {params})>"

    def __call__(
        self,
        graph: Graph,
        *args: Any,
        out: Any = None,
        threads: int | None = None,
        schedule: Any = None,
        deterministic: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Runs the kernel; see `gnnc.runtime.signature.prepare_call` for the arguments.

        `deterministic=True` asks for results that are bit-identical for any
        thread count. Every CPU schedule gnnc implements already gives that
        (one destination is summed by one thread, in edge order; partitions
        run in order; `group neighbors G` cuts a destination's in-edges into
        groups fixed by G and the graph alone, and merges their partial
        results in group order), so the option only states the guarantee.
        """
        if not isinstance(deterministic, bool):
            raise ArgumentError(f"deterministic must be True or False, got {deterministic!r}")
        graph = _as_graph(graph)
        if isinstance(schedule, str) and schedule.strip() == "auto":
            return self._call_auto(graph, args, kwargs, out, threads)
        if schedule is not None:
            return self._variant(schedule)(graph, *args, out=out, threads=threads, **kwargs)
        _refuse_device_arrays(self.signature, args, kwargs, out)
        inputs, outputs, dims = prepare_call(self.signature, graph, args, kwargs, out=out)
        n_threads = resolve_threads(threads)
        chosen = self._default_variant(graph, dims)
        if chosen is not None:
            return chosen._run(graph, inputs, outputs, dims, n_threads)
        return self._run(graph, inputs, outputs, dims, n_threads)

    def _run(self, graph: Graph, inputs: list, outputs: list, dims: dict[str, int], n_threads: int) -> Any:
        """Calls the native kernel on checked arguments (`prepare_call`'s)."""
        n_threads = fork_safety.threads_for_call(n_threads)
        record = self._abi
        if graph.bipartite:
            check_bipartite(self.name, record, graph)
        for name, size in (record.sizes or {}).items():
            if dims.get(name) != size:
                # the native code reads and writes `size` columns of every row, whatever the arrays hold
                raise ArgumentError(
                    f"{self.name}: compiled for {name} = {size} (specialize {name} {size}), "
                    f"but this call has {name} = {dims.get(name)}"
                )
        if record.edges_sorted and not graph.edges_sorted:
            # the native code would read and write edge rows at in-CSR positions, not at the ids
            raise ArgumentError(
                f"{self.name}: compiled for edge ids sorted by destination (edges sorted), but this "
                "graph's are not: build it from destination-sorted edges, or compile without 'edges sorted'"
            )
        grid = record.grid
        if grid is not None:
            # a cuda grid emulated on the CPU: one scratch slice per grid thread
            n_threads = max(
                1, max(abi.grid_blocks(grid, graph.num_vertices, graph.num_edges), default=0) * grid.block_size
            )
        values = self._graph_arrays(graph, dims, n_threads)
        values.update(zip(self._names[abi.Group.PARAMS], inputs))
        values.update(zip(self._names[abi.Group.RESULTS], outputs))
        values.update(self._plan_arrays(graph, dims, n_threads))
        addresses = iter(_addresses([values[name] for name in self._pointers]))
        self._function(*[next(addresses) if pointer else values[name] for name, pointer in self._layout])
        return pack_results(self.signature, outputs)

    def _graph_arrays(self, graph: Graph, dims: dict[str, int], n_threads: int) -> dict[str, Any]:
        """The graph arguments and the per-call workspace (scratch, temps), by name."""
        record = self._abi
        order = plans.destination_order(graph, record.order)
        if record.edge_order == "hilbert":
            blocks = plans.edge_blocks(graph, plans.block_count_for(graph, n_threads))
        elif record.groups and order is plans.destination_order(graph, "identity"):
            blocks = plans.grouped_blocks(graph, record.groups, plans.block_count_for(graph, n_threads))
        else:
            blocks = plans.balanced_blocks(graph, plans.block_count_for(graph, n_threads), order=order)
        deg_in, deg_out = graph.kernel_degrees(self._dtype)
        in_csr = (graph.in_indptr, graph.in_src, graph.in_eid)
        if record.ordered_edges:
            # the sweep walks edges by position in its order (transforms/loop/order_destinations.py)
            in_csr = plans.ordered_in_csr(graph, record.order)
        per_thread = self._scratch_slice(dims)
        values: dict[str, Any] = {
            "num_vertices": graph.num_vertices,
            "num_edges": graph.num_edges,
            "num_threads": n_threads,
            "num_blocks": len(blocks) - 1,
            "dst_blocks": blocks,
            "dst_order": order,
            "in_indptr": in_csr[0],
            "in_src": in_csr[1],
            "in_eid": in_csr[2],
            "deg_in": _nonempty(deg_in),
            "deg_out": _nonempty(deg_out),
            "dims": np.array([dims[d] for d in record.dims], dtype=np.int64),
            "scratch": memory.empty(per_thread * n_threads, self._dtype),  # whole lines per worker
        }
        rows = {"V": graph.num_dst, "E": graph.num_edges}
        for name, temp in zip(self._names[abi.Group.TEMPS], record.temps):
            n = graph.num_src if temp.source_rows else rows[temp.domain]
            values[name] = memory.empty(max(1, n * abi.elements(temp.shape, dims)), self._dtype)
        return values

    def _scratch_slice(self, dims: dict[str, int]) -> int:
        elements = sum(abi.elements(s, dims) for s in self._abi.scratch)
        return abi.scratch_slice_elements(elements, np.dtype(self._dtype).itemsize)

    def _plan_arrays(self, graph: Graph, dims: dict[str, int], n_threads: int) -> dict[str, np.ndarray]:
        """The arrays of the optional argument groups the record asks for, by name."""
        record = self._abi
        values: dict[str, np.ndarray] = {}
        row_stride = sum(abi.elements(s, dims) for s in record.acc_rows)
        if record.source_sweep:
            src_blocks = plans.source_blocks(graph, n_threads)
            values["src_meta"] = np.array([graph.num_src, src_blocks.shape[0] - 1], dtype=np.int64)
            values["src_blocks"] = src_blocks
        if record.partitions:
            _, values["part_indptr"], values["part_src"], values["part_eid"] = plans.source_partitions(
                graph, record.partitions
            )
            values["acc_rows"] = memory.empty(max(1, graph.num_vertices * row_stride), self._dtype)
        elif record.edge_order == "hilbert":
            values["hilbert_src"], values["hilbert_dst"], values["hilbert_eid"] = plans.hilbert_edge_order(graph)
        if record.stream:
            values["acc_rows"] = memory.empty(max(1, n_threads * row_stride), self._dtype)
        if record.groups:
            group_dst, group_bounds, group_offsets = plans.split_neighbor_groups(graph, record.groups)
            n_groups = group_dst.shape[0]
            group_blocks = plans.group_blocks(graph, record.groups, n_threads)
            values["group_meta"] = np.array([group_blocks.shape[0] - 1, n_groups], dtype=np.int64)
            values["group_blocks"] = group_blocks
            # an empty array has no storage: every pointer the kernel may read must be valid
            values["group_dst"], values["group_bounds"] = _nonempty(group_dst), _nonempty(group_bounds)
            values["group_offsets"] = group_offsets
            values["acc_rows"] = memory.empty(max(1, n_groups * row_stride), self._dtype)
        grid = record.grid
        if grid is not None and grid.dst_scratch:
            # an edge mapping's per-destination accumulators: a scratch slice per vertex
            values["dst_scratch"] = memory.empty(max(1, self._scratch_slice(dims) * graph.num_vertices), self._dtype)
        if grid is not None and grid.hybrid is not None:
            # the cuda emulation stages the same rows the GPU would (one stack buffer for the blocks)
            hot, slot, _ = plans.hybrid_plan(graph, grid, dims, np.dtype(self._dtype).itemsize)
            values["hybrid_hot"], values["hybrid_slot"] = hot, slot
        return values

    def _call_auto(self, graph: Graph, args: tuple, kwargs: dict, out: Any, threads: int | None) -> Any:
        """`schedule="auto"`: the tuned, else predicted, else default schedule (autotune/autoschedule.py)."""
        from gnnc.autotune import autoschedule

        inputs, outputs, dims = prepare_call(self.signature, graph, args, kwargs, out=out)
        kernel, choice = self, None
        for _ in range(AUTO_ATTEMPTS):
            choice = autoschedule.choose(self, graph, dims)
            if choice.schedule in self._refused or (not choice.schedule and not self._abi.schedule_given):
                # the kernel as compiled: nothing to pick, or the pick was refused before
                kernel = self
                break
            try:
                kernel = self._variant(choice.schedule)
                break
            except (CompileError, SourceError):
                # a prediction this kernel cannot take (partitioning a softmax), or a
                # cache entry that does not parse (edited by hand): the next one
                self._refused.add(choice.schedule)
                autoschedule.forget(self, graph, dims)
                kernel = self
        n_threads = resolve_threads(threads if threads is not None or choice is None else choice.threads)
        if choice is not None:
            _log.debug(
                "%s: schedule='auto' runs %r (%s, threads=%d) for V=%d E=%d %s",
                self.name,
                choice.schedule if kernel is not self else "as compiled",
                choice.origin,
                n_threads,
                *_shape(graph, dims),
            )
        return kernel._run(graph, inputs, outputs, dims, n_threads)

    def _default_variant(self, graph: Graph, dims: dict[str, int]) -> Kernel | None:
        """The variant the default heuristic picks for this call, if any (see autotune/heuristic.py)."""
        grid = self._abi.grid
        if grid is not None:
            return self._default_mapping_variant(graph, dims, grid)
        if (
            self._abi.schedule_given
            or self._metadata.get("source") is None
            or self._metadata.get("target", "cpu") != "cpu"
        ):
            # a CPU variant would replace what a cuda emulation is there to check
            _log.debug("%s: runs as compiled (its schedule was given, or it has no source to vary)", self.name)
            return None
        directives = heuristic.kernel_default(self, graph, dims)
        if directives is None:
            _log.debug("%s: runs as compiled, the default for V=%d E=%d %s", self.name, *_shape(graph, dims))
            return None
        if directives in self._refused:
            _log.debug("%s: runs as compiled (the default %r does not apply to it)", self.name, _one_line(directives))
            return None
        try:
            variant = self._variant(directives)
        except CompileError:
            # the schedule cannot apply to this kernel (partitioning a softmax):
            # it runs as compiled, and the compiler is not asked again
            self._refused.add(directives)
            _log.debug("%s: runs as compiled (the default %r does not apply to it)", self.name, _one_line(directives))
            return None
        _log.debug("%s: default schedule %r for V=%d E=%d %s", self.name, _one_line(directives), *_shape(graph, dims))
        return variant

    def _default_mapping_variant(self, graph: Graph, dims: dict[str, int], grid: abi.Grid) -> Kernel | None:
        """A cuda emulation without a `for cuda` schedule runs the mapping the graph
        suggests (heuristic.default_cuda_mappings), as the GPU runtime does."""
        if grid.schedule_given or self._metadata.get("source") is None:
            _log.debug("%s: runs as compiled (its mapping was given, or it has no source to vary)", self.name)
            return None
        for mapping in heuristic.default_cuda_mappings(graph, heuristic.row_elements(self.signature, dims)):
            if mapping == "thread_vertex" and grid.mapping == mapping and grid.group == 1:
                _log.debug(
                    "%s: default mapping 'map %s' (as compiled) for V=%d E=%d %s",
                    self.name,
                    mapping,
                    *_shape(graph, dims),
                )
                return None  # what was compiled
            directive = f"map {mapping}"
            if directive in self._refused:
                continue
            try:
                variant = self._variant(directive)
            except CompileError:
                self._refused.add(directive)  # this kernel cannot take that mapping: the next one
                continue
            _log.debug("%s: default mapping %r for V=%d E=%d %s", self.name, directive, *_shape(graph, dims))
            return variant
        _log.debug("%s: runs as compiled (no default mapping applies to it)", self.name)
        return None

    def _variant(self, schedule: Any) -> Kernel:
        """This kernel compiled with another schedule (needs the compiler; cached)."""
        from gnnc.ir.schedule import directives_text

        key = directives_text(schedule)
        if key not in self._variants:
            source = self._metadata.get("source")
            if source is None:
                raise ArgumentError(f"{self.name}: this shared object carries no source to recompile with schedule=")
            options = self._metadata.get("options") or {}  # absent from objects of older gnnc versions
            module = compile_hook.compile_variant(
                source,
                cpu=self._metadata.get("cpu", {}).get("level", "native"),
                kernels=[self.name],
                schedule=key,
                target=self._metadata.get("target", "cpu"),
                opt_level=options.get("opt_level", 3),
                disable_passes=tuple(options.get("disable_passes", ())),
                fusion=options.get("fusion", True),
            )
            self._variants[key] = module.kernels[self.name]
        return self._variants[key]


class Module:
    """The kernels of one shared object, as attributes: `module.gat(graph, ...)`."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        library, metadata = native.open_shared_object(self.path)
        native.check_cpu_features(metadata)
        if metadata.get("abi_version") != abi.ABI_VERSION:
            raise ToolchainError(
                f"{self.path} uses gnnc ABI {metadata.get('abi_version')}, this runtime speaks "
                f"{abi.ABI_VERSION}: recompile it with this gnnc"
            )
        self.metadata = metadata
        self._library = library
        self.kernels: dict[str, Kernel] = {}
        for record in metadata["kernels"]:
            self.kernels[record["name"]] = Kernel(library, record, metadata)

    def __getattr__(self, name: str) -> Kernel:
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"no kernel named {name!r} in {self.__dict__.get('path')}; it has {sorted(kernels)}")

    def __getitem__(self, name: str) -> Kernel:
        return self.__getattr__(name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.kernels))

    def __repr__(self) -> str:
        return f"<gnnc module {self.path.name}: {', '.join(self.kernels)}>"


def load(path: str | os.PathLike) -> Module:
    """Loads a shared object written by `gnnc compile`."""
    return Module(path)
