"""Calling compiled kernels: a loaded `.so` becomes a `Module` of callables.

This module imports neither xDSL nor llvmlite: a script that only calls
pre-compiled kernels pays nothing for the compiler. A call walks one way:
its arguments are checked (`signature.prepare_call`), the decision of what
runs for this graph and these sizes is taken (`autotune.decision.decide`:
made on the first call, then read from the graph), the plans it reads are
built or fetched (`graph.plans.build`), its native arguments are laid out
(`prepared.make`) and the native code is called with its workspace. A call
whose inputs the check would pass as they are keeps that `Prepared` call on
the graph, and the next call of its shape runs it directly.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from gnnc.autotune.decision import (
    Request,
    check_runs,
    class_call,
    class_hit,
    decide,
    decide_and_hold,
    graph_class,
    live,
    next_serial,
    resolve_threads,
    varies_by_class,
)
from gnnc.errors import ArgumentError, ToolchainError
from gnnc.graph import plans
from gnnc.graph.coo import CooGraph
from gnnc.graph.graph import Graph
from gnnc.ir import abi
from gnnc.ir.signature import KernelSignature
from gnnc.runtime import compile_hook, memory, native, prepared, records
from gnnc.runtime.cuda import is_device_array
from gnnc.runtime.signature import NO_GRAPH, pack_results, prepare_call, result_shapes_on, take_graph
from gnnc.runtime.variants import Variants

_log = logging.getLogger(__name__)

_DTYPES = {"f32": np.float32, "f64": np.float64}


def _as_graph(graph: Any) -> Graph:
    if isinstance(graph, Graph):
        return graph
    raise ArgumentError(
        f"the first argument of a kernel must be a gnnc.Graph, got {type(graph).__name__}; "
        "build one with gnnc.Graph(edge_index) or gnnc.Graph.from_scipy(A)"
    )


def _refuse_device_arrays(sig: KernelSignature, args: tuple, kwargs: dict, out: Any) -> None:
    """A CUDA device array given to a CPU kernel: one clear error, not a dtype complaint."""
    outs = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else [out]
    for value in [*args, *kwargs.values(), *outs]:
        if value is not None and not isinstance(value, np.ndarray) and is_device_array(value):
            raise ArgumentError(
                f"{sig.describe()} runs on the CPU but got a CUDA device array ({type(value).__name__}); "
                "copy it to the host (.cpu(), .get(), .copy_to_host()) or compile with target='cuda'"
            )


def _positional(names: tuple[str, ...], args: tuple, kwargs: dict[str, Any]) -> tuple | None:
    """The inputs in parameter order when `args` and `kwargs` give each parameter exactly once,
    else None (the check then says what is wrong)."""
    if not kwargs:
        return args if len(args) == len(names) else None
    if len(args) + len(kwargs) != len(names):
        return None
    try:
        return args + tuple(kwargs[n] for n in names[len(args) :])
    except KeyError:
        return None


#: Argument layouts a kernel keeps for calls on new graphs (`Kernel._run_as_before`), by call shape.
MAX_LAYOUTS = 16


def _layout_key(leading: tuple[bool, ...], shape: tuple) -> tuple:
    """A call shape (`call_key`) without the inputs' rows over V, E and R: what the argument
    layout depends on whatever the graph."""
    _, serial, shapes, *rest = shape
    return (serial, tuple(s[1:] if lead else s for lead, s in zip(leading, shapes)), *rest)


def call_key(serial: int, inputs: tuple, threads: int | None, schedule: str | None) -> tuple | None:
    """The key of a call's shape in `graph.plans`, where its `Prepared` call is kept: the kernel,
    the inputs' shapes, the threads asked for and what they mean now, the schedule asked for;
    None when the call cannot run prepared (an input that is not a C-contiguous numpy array;
    `Prepared.accepts` checks the dtype)."""
    shapes = []
    for a in inputs:
        if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
            return None
        shapes.append(a.shape)
    # threads=None follows OMP_NUM_THREADS and the affinity mask, which may change between calls;
    # a child forked after libgomp's pool started runs on one thread (native.py)
    resolved = resolve_threads(threads) if threads is None else threads
    return ("prepared", serial, tuple(shapes), threads, resolved, native.forked_after_pool, schedule)


class Kernel:
    """One compiled kernel: `kernel(graph, *inputs, out=None, **named_inputs)`."""

    def __init__(
        self, library: ctypes.CDLL, record: dict, metadata: dict | None = None, variants: Variants | None = None
    ):
        self._metadata = metadata or {}
        #: its module's compiled variants (`_variant`), shared by the module's kernels
        self._variant_cache = variants if variants is not None else Variants()
        #: schedules the compiler refused for this kernel: not asked for again
        self._refused: set[str] = set()
        #: this kernel's part of the key of its decisions (autotune/decision.py)
        self._serial = next_serial()
        self.signature = KernelSignature.from_dict(record)
        self.name = self.signature.name
        self._abi = abi.AbiRecord.from_dict(record["abi"])
        self._dtype = np.dtype(_DTYPES[self.signature.dtype])
        self._param_names = tuple(p.name for p in self.signature.params)
        #: which inputs have a leading axis over V, E or R (rows that follow the graph)
        self._leading = tuple(bool(p.domain) for p in self.signature.params)
        #: the argument layouts of recent call shapes, for calls on new graphs (`_run_as_before`),
        #: with their sizes and, by `decision.graph_class`, the class decision they run and its `Bound`
        self._layouts: dict[tuple, tuple[prepared.Prepared, dict[str, int], dict[tuple | None, tuple]]] = {}
        self._result_names = tuple(r.name for r in self.signature.results)
        self._single_result = self.signature.single_result
        # the argument layout, once: every call places its values by these names
        arguments = abi.kernel_arguments(
            self._abi, [p.name for p in self.signature.params], [r.name for r in self.signature.results]
        )
        self._arguments = arguments
        self._native = native.Function(library, record["symbol"], arguments)
        #: its COO entry (`abi.COO_ENTRY_ARGUMENTS`), where it has one
        self._coo = native.CooEntry.find(library, record["coo"]) if record.get("coo") else None

    def __repr__(self) -> str:
        params = ", ".join(p.name for p in self.signature.params)
        return f"<gnnc kernel {self.name}(graph, {params})>"

    def __call__(
        self,
        graph: Any = NO_GRAPH,
        /,
        *args: Any,
        out: Any = None,
        threads: int | None = None,
        schedule: Any = None,
        deterministic: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Runs the kernel; see `gnnc.runtime.signature.prepare_call` for the arguments.

        `schedule=` runs the kernel compiled with these directives (text or a
        dict), or with `"auto"` the tuned, else predicted, else default ones;
        without it a kernel compiled without a schedule runs the default
        heuristic's pick for the graph and sizes. `threads=` sets the workers
        (default: OMP_NUM_THREADS, else every core this process may use): at
        most `autotune.threads.max_threads()`, 4 a core and at least 64, or an
        ArgumentError before any native code runs. The graph may be given as
        `graph=` instead of first.

        `deterministic=True` asks for results that are bit-identical for any
        thread count. Every CPU schedule gnnc implements already gives that
        (one destination is summed by one thread, in edge order; partitions
        run in order; `group neighbors G` cuts a destination's in-edges into
        groups fixed by G and the graph alone, and merges their partial
        results in group order), so the option only states the guarantee.
        """
        if isinstance(graph, CooGraph):  # edges not converted (a mini-batch block): one native call
            if not graph.converted:
                result = self._run_on_edges(graph, args, kwargs, threads, schedule, out, deterministic)
                if result is not None:
                    return result
            graph = graph.graph()
        # a call of a shape this graph has seen runs as prepared (runtime/prepared.py)
        shape = given = None
        if out is None and deterministic is False and (schedule is None or isinstance(schedule, str)):
            given = _positional(self._param_names, args, kwargs)
            shape = call_key(self._serial, given, threads, schedule) if given is not None else None
            if shape is not None and isinstance(graph, Graph):
                ready = graph.plans.get(shape)
                if ready is not None and ready.accepts(given):
                    _log.debug("%s", ready.reason)
                    result = ready(given)
                    if result is not None:
                        return result
                elif ready is None and given is not None:
                    result = self._run_as_before(shape, graph, given, threads, schedule)
                    if result is not None:
                        return result
        if not isinstance(deterministic, bool):
            raise ArgumentError(f"deterministic must be True or False, got {deterministic!r}")
        if graph is NO_GRAPH or "graph" in kwargs:  # a warm call's path stays in this module
            graph = take_graph(graph, kwargs)
        graph = _as_graph(graph)
        _refuse_device_arrays(self.signature, args, kwargs, out)
        inputs, outputs, dims = prepare_call(self.signature, graph, args, kwargs, out=out)
        results = pack_results(self.signature, outputs)
        # a child forked after libgomp's pool started runs on one thread (runtime/native.py)
        decided, kernel = decide_and_hold(self, graph, dims, 1 if native.forked_after_pool else threads, schedule)
        _log.debug("%s", decided.reason)
        call = prepared.make(kernel, decided, plans.build(graph, decided.plans), outputs)
        call(inputs, outputs)
        if shape is not None and given is not None and all(a is i for a, i in zip(given, inputs)):
            graph.plans[shape] = call  # the check passed these arrays as they are: so will it again
            self._keep_layout(_layout_key(self._leading, shape), call.layout(), dims)
        return results

    def _keep_layout(self, key: tuple, call: prepared.Prepared, dims: dict[str, int]) -> None:
        """`call` (a `Prepared.layout`) as the layout of its shape, the MAX_LAYOUTS most recent kept."""
        layouts = self._layouts
        layouts.pop(key, None)
        layouts[key] = (call, dims, {})
        while len(layouts) > MAX_LAYOUTS:
            try:  # another thread's call may drop the same entry
                del layouts[next(iter(layouts))]
            except (KeyError, RuntimeError, StopIteration):
                break

    def _run_as_before(self, shape: tuple, graph: Graph, given: tuple, threads: int | None, schedule: Any) -> Any:
        """A call on a graph new to this kernel, of a shape it ran on another graph (the same
        inputs but their rows): that call's argument layout, refilled with this graph's arrays
        (`Prepared.bound`, `Bound.on`), where the inputs fit this graph and its decision runs the
        same; None otherwise, for the checked way. Every mini-batch block is a new graph: this
        leaves out the check and the layout, and for a graph of a class decided before
        (`decision.class_hit`) the decision's layers too."""
        before = self._layout_for(shape, graph, given)
        if before is None:
            return None
        call, dims, bindings, results = before
        asked = 1 if native.forked_after_pool else threads
        workers = resolve_threads(asked)
        found = None
        if schedule is None and varies_by_class(self):
            # a class decided before, bound to this layout (the layout fixes the sizes and threads)
            of_graph = graph_class(self, graph, dims)
            found = bindings.get(of_graph)
            if found is None or not live(self, found[0]):
                hit = class_hit(self, graph, dims, workers)
                if hit is None:
                    found = None
                elif not call.runs_as(hit[0]):
                    return None
                else:
                    if len(bindings) >= MAX_LAYOUTS:
                        bindings.clear()
                    found = bindings[of_graph] = (hit, call.bound(hit[0]))
        reason: Any
        if found is not None:
            hit, bound = found
            workspace, reason = class_call(hit, graph, dims, workers)
        else:
            decided, _ = decide_and_hold(self, graph, dims, asked, schedule)
            if not call.runs_as(decided):
                return None
            bound, workspace, reason = call.bound(decided), decided.workspace, decided.reason
        ready = bound.on(plans.build(graph, bound.decided.plans), workspace, results, reason)
        graph.plans[shape] = ready
        _log.debug("%s", reason)
        return ready(given)

    def _layout_for(self, shape: tuple, graph: Any, given: tuple) -> tuple | None:
        """(layout, sizes, class bindings, result shapes) of a call of `shape` made before on
        another graph, where `given` fits `graph`; None otherwise."""
        before = self._layouts.get(_layout_key(self._leading, shape))
        if before is None:
            return None
        call, dims, bindings = before
        if not call.accepts(given):
            return None
        results = result_shapes_on(self.signature, graph, given, dims)
        return None if results is None else (call, dims, bindings, results)

    def _run_on_edges(
        self, graph: CooGraph, args: tuple, kwargs: dict, threads: Any, schedule: Any, out: Any, deterministic: Any
    ) -> Any:
        """A call on edges not converted to a Graph, by the COO entry of the variant a graph of
        this class runs (`decision.class_hit`), with the argument layout of a call of this shape
        before (`_run_as_before`'s checks): the in-CSR, the plans and the call in one native
        function. None where any of that is missing, or where the variant's plans depend on
        more than each destination's in-edges in id order (source partitions, a Hilbert edge
        order: the C helpers cut them their own way, and the sums' order would differ from a
        Graph's call); the caller then converts the edges and takes the checked way, which
        also gives bad ids their error."""
        if out is not None or deterministic is not False or schedule is not None or "graph" in kwargs:
            return None
        given = _positional(self._param_names, args, kwargs)
        if given is None or threads is not None and not isinstance(threads, int):
            return None
        shape = call_key(self._serial, given, threads, None)
        before = None if shape is None else self._layout_for(shape, graph, given)
        if before is None:
            return None
        _, dims, _, results = before
        workers = resolve_threads(1 if native.forked_after_pool else threads)
        runner: Kernel | None = self
        if varies_by_class(self):
            hit = class_hit(self, graph, dims, workers)
            runner = None if hit is None else hit[0].kernel()
        if runner is None or runner._coo is None:
            return None
        record = runner._abi
        if record.partitions is not None or record.edge_order is not None:
            return None
        try:
            check_runs(runner.name, record, graph, dims)
        except ArgumentError:
            return None
        outputs = [memory.empty(r, self._dtype) for r in results]
        sizes = np.array([dims[d] for d in record.dims] or [0], dtype=np.int64)
        status = runner._coo(graph.src, graph.dst, graph.num_src, graph.num_dst, workers, sizes, [*given, *outputs])
        if status:
            _log.debug("%s: its COO entry refused %s (%s)", runner.name, graph, abi.COO_ERRORS.get(status, status))
            return None
        _log.debug("%s: ran by its COO entry on %s", runner.name, graph)
        return pack_results(self.signature, outputs)

    def _run(self, graph: Graph, inputs: list, outputs: list, dims: dict[str, int], n_threads: int) -> None:
        """Runs this kernel exactly as compiled, with `n_threads` workers, on checked
        arguments (`prepare_call`'s): the tuner's timed runs (runtime/tune.py)."""
        decided = decide(self, graph, dims, 1 if native.forked_after_pool else n_threads, Request.AS_COMPILED)
        arguments = plans.build(graph, decided.plans)
        workspace = {name: memory.empty(n, self._dtype) for name, n in decided.workspace}
        self._native(inputs, outputs, arguments, decided.arguments, workspace)

    def _default_variant(self, graph: Graph, dims: dict[str, int]) -> Kernel | None:
        """The variant a call without `schedule=` runs on this graph with these sizes,
        or None for this kernel as compiled; logs the decision as such a call does."""
        decided = decide(self, graph, dims)
        _log.debug("%s", decided.reason)
        return None if decided.kernel() is self else decided.kernel()

    def _variant(self, schedule: Any) -> Kernel:
        """This kernel compiled with another schedule (needs the compiler; cached)."""
        from gnnc.ir.schedule import directives_text

        key = directives_text(schedule)
        variant = self._variant_cache.get(self.name, key)
        if variant is None:
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
            variant = module.kernels[self.name]
            self._variant_cache.put(self.name, key, variant)
        return variant

    @property
    def _variants(self) -> dict[str, Kernel]:
        """This kernel's variants its module keeps now, by directive text."""
        return self._variant_cache.of(self.name)


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
        records.check_records(metadata, self.path)
        records.check_symbols(library, metadata, self.path)
        self.metadata = metadata
        self._library = library
        self.kernels: dict[str, Kernel] = {}
        variants = Variants()
        for record in metadata["kernels"]:
            self.kernels[record["name"]] = Kernel(library, record, metadata, variants)

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
