"""What a kernel call runs: one `Decision` per graph and call shape, made once.

A call of a compiled kernel runs the kernel as compiled or one of its
variants (the kernel compiled again with other schedule directives; the
kernel builds them through the runtime's compile hook and keeps them).
`decide` picks, for one graph and one call shape (the kernel, its sizes, the
threads asked for, and the schedule asked for: none, `"auto"`, or directive
text), and returns a `Decision`: the directives that run and where they came
from (given, the default heuristic, tuned, predicted, or as compiled), the
worker count, the per-graph plans the variant reads (`plans.PlanSpec`, which
`plans.build` turns into arrays), the per-call workspace, and the line the
runtime logs for each call. On the way it checks that the variant can run
this call (a bipartite graph, `specialize`d sizes, `edges sorted`); a
decision that raises is not kept, so every such call raises.

Cached where: in the graph's `plans` dict, beside the plans, keyed by the
kernel (a serial number no other kernel object of this process gets, so a
collected kernel's decisions never serve another), the call's sizes, the
threads asked for, the default thread count (OMP_NUM_THREADS, else the
cores this process may use) and the schedule asked for. A later call of
the same shape reads it and enters neither the heuristic nor the tuner.

Invalidated when: never, but for a decision whose variant is gone (see
below); it goes with the graph. A Graph is immutable, and a change of the
default thread count is a new key. What else a decision
reads, it reads once: the heuristic's inputs (the graph, the sizes, the
host's caches), the tuning cache and the predictor's model for `"auto"` (a
schedule tuned later serves graphs built later), and the compiler's answers
(a schedule the compiler refused is remembered on the kernel, and not asked
for again). The decision refers to the kernel that runs weakly, and the
variants live in their module's bounded LRU (runtime/variants.py), so a
graph keeps no compiled code alive; a call whose variant was evicted makes
its decision again (which compiles the variant again, from the compile
cache).
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum, StrEnum
from types import MappingProxyType
from typing import Any

import numpy as np

from gnnc.autotune import heuristic
from gnnc.autotune.threads import check_threads, max_threads
from gnnc.errors import ArgumentError, CompileError, SourceError, ToolchainError
from gnnc.graph import plans
from gnnc.graph.plans import PlanSpec
from gnnc.ir import abi
from gnnc.ir.schedule import directives_text

#: Schedules `schedule="auto"` tries before it runs the kernel as compiled.
AUTO_ATTEMPTS = 8

_serials = itertools.count()
_log = logging.getLogger(__name__)


def next_serial() -> int:
    """A number for a new kernel object that no other one of this process gets: its part of
    the key of its decisions (an `id()` is reused once its object is collected)."""
    return next(_serials)


class Origin(StrEnum):
    """Where the schedule a call runs came from."""

    #: the call's `schedule=`
    GIVEN = "given"
    #: the default heuristic (autotune/heuristic.py), or the default cuda mapping
    DEFAULT = "default"
    #: `schedule="auto"`: the tuning cache's entry (`gnnc tune`)
    TUNED = "tuned"
    #: `schedule="auto"`: the predictor's pick (autotune/predictor.py)
    PREDICTED = "predicted"
    #: nobody picked: the kernel's own schedule was given, it has no source to vary, or the pick was refused
    AS_COMPILED = "as compiled"


class Request(Enum):
    """What a call may ask for besides nothing (None, the default) and directive text."""

    #: `schedule="auto"`: the tuned, else predicted, else default schedule (autoschedule.py)
    AUTO = "auto"
    #: this kernel exactly as compiled, checked but never varied (the tuner's timed runs)
    AS_COMPILED = "as compiled"


@dataclass(frozen=True, eq=False)
class Decision:
    """What one call shape of a kernel runs on one graph (see the module docstring)."""

    #: the directives the kernel that runs was compiled with; None: the called kernel as compiled
    schedule: str | None
    origin: Origin
    #: the workers (`num_threads`): the call's threads, or an emulated cuda grid's
    threads: int
    #: the per-graph arguments the kernel that runs reads (`plans.build`)
    plans: PlanSpec
    #: the arguments fixed by the decision, by name: `num_threads` and `dims`
    arguments: Mapping[str, Any]
    #: the per-call buffers, (argument name, elements); each call allocates its own
    workspace: tuple[tuple[str, int], ...]
    #: the blocks of each grid launch, in order (a cuda mapping); () without one
    launches: tuple[int, ...]
    #: what the runtime logs at DEBUG for every call of this shape
    reason: str
    #: the kernel that runs, the called kernel or one of its variants: `decision.kernel()`.
    #: Weakly: the variants live on the called kernel, which the key names
    kernel: weakref.ref[Any]


def decide(kernel: Any, graph: Any, dims: dict[str, int], threads: int | None = None, schedule: Any = None) -> Decision:
    """What this call of `kernel` runs on `graph`: made on the first call of its shape, then read from the graph.

    `kernel` is a runtime kernel (`module.Kernel`, `cuda.CudaKernel`: its
    `signature`, `_abi`, `_arguments`, `_metadata`, `_refused`, `_serial` and
    `_variant` are read), `dims` the call's sizes (`prepare_call`'s), `threads` its
    `threads=` (None: OMP_NUM_THREADS, else every core this process may
    use), `schedule` its `schedule=` (None, `"auto"`, directive text or a
    dict) or `Request.AS_COMPILED`. Raises what the compiler raises for a
    given schedule, and ArgumentError where the kernel that would run cannot
    run this call.
    """
    resolved = resolve_threads(threads)
    # a dict is not hashable: its text is the request (the variant's key)
    request = schedule if schedule is None or isinstance(schedule, (str, Request)) else directives_text(schedule)
    key = ("decision", kernel._serial, tuple(dims.items()), threads, resolved, request)
    decided = graph.plans.get(key)
    if decided is None or decided.kernel() is None:  # new, or its variant was evicted
        decided = _decide(kernel, graph, dims, threads, resolved, request)
        graph.plans[key] = decided
    return decided


#: How often `decide_and_hold` decides again when the variant it decided for is evicted at once.
_HOLD_ATTEMPTS = 4


def decide_and_hold(
    kernel: Any, graph: Any, dims: dict[str, int], threads: int | None = None, schedule: Any = None
) -> tuple[Decision, Any]:
    """`decide`, and the kernel that runs, held for the call: a variant another thread's call
    evicted between the decision and the call is decided (compiled) again."""
    for _ in range(_HOLD_ATTEMPTS):
        decided = decide(kernel, graph, dims, threads, schedule)
        runner = decided.kernel()
        if runner is not None:
            return decided, runner
    raise ToolchainError(
        f"{kernel.name}: the variant this call runs was evicted {_HOLD_ATTEMPTS} times before it could run: "
        "other threads' calls need more variants at once than a module keeps (gnnc.runtime.variants.MAX_VARIANTS)"
    )


def resolve_threads(threads: int | None) -> int:
    """`threads=` on the call (checked: ArgumentError outside 1 .. max_threads()), else
    OMP_NUM_THREADS (a value above the maximum is clamped to it: the environment is shared
    with other libraries), else every core this process may use."""
    if threads is not None:
        return check_threads(threads)
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return _clamped_env_threads(int(env))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@functools.lru_cache(maxsize=8)
def _clamped_env_threads(value: int) -> int:
    """OMP_NUM_THREADS within max_threads(), warned about once per value."""
    if value <= max_threads():
        return value
    _log.warning(
        "OMP_NUM_THREADS=%d is more than gnnc runs (at most %d): using %d", value, max_threads(), max_threads()
    )
    return max_threads()


# ------------------------------------------------------------- the choice


def _decide(
    kernel: Any, graph: Any, dims: dict[str, int], threads: int | None, resolved: int, request: str | Request | None
) -> Decision:
    if isinstance(request, str) and request.strip() == "auto":
        request = Request.AUTO
    if request is Request.AUTO:
        return _auto(kernel, graph, dims, threads)
    if request is Request.AS_COMPILED:
        return _made(kernel, graph, dims, resolved, None, Origin.AS_COMPILED, f"{kernel.name}: runs as compiled")
    if request is not None:
        return _given(kernel, graph, dims, threads, request)
    if kernel._abi.grid is not None:
        return _default_mapping(kernel, graph, dims, resolved, kernel._abi.grid)
    return _default(kernel, graph, dims, resolved)


def _refused(name: str, directives: str) -> str:
    return f"{name}: runs as compiled (the default {_one_line(directives)!r} does not apply to it)"


@functools.lru_cache(maxsize=256)
def _one_line(directives: str) -> str:
    return "; ".join(line.strip() for line in directives.splitlines() if line.strip())


def _shape(graph: Any, dims: dict[str, int]) -> str:
    """What a schedule decision depends on, for the log: V, E and the kernel's sizes."""
    return _shape_text(graph.num_vertices, graph.num_edges, tuple(dims.items()))


def _shape_text(v: int, e: int, dims: tuple[tuple[str, int], ...]) -> str:
    return f"V={v} E={e} {_dims_text(dims)}"


@functools.lru_cache(maxsize=256)
def _dims_text(items: tuple[tuple[str, int], ...]) -> str:
    # a dict's repr, made once per sizes: every mini-batch block's decision names its sizes
    return repr(dict(items))


def _given(kernel: Any, graph: Any, dims: dict[str, int], threads: int | None, text: str) -> Decision:
    """`schedule=` text: the variant compiled with it, run as that variant's own calls run it."""
    variant = kernel._variant(text)
    inner = decide(variant, graph, dims, threads)
    if inner.schedule is not None:
        return inner  # the text wrote no schedule (""): the default picked one for the variant
    return replace(inner, schedule=directives_text(text) or None, origin=Origin.GIVEN)


#: A class's decision, its reason's graph-free part and its variant's key (`_default_made`).
ClassHit = tuple[Decision, str, str]

#: Per kernel, its default decisions by (threads, sizes, `heuristic.default_class` of the
#: graph, whether the graph is bipartite, has relation types, has sorted ids), each with its
#: reason's graph-free part and its variant's key: a new graph of a known class (a mini-batch
#: block) takes one, rechecked, with its own workspace.
_CLASS_DECISIONS: weakref.WeakKeyDictionary[Any, dict[tuple, ClassHit]] = weakref.WeakKeyDictionary()


def _default(kernel: Any, graph: Any, dims: dict[str, int], threads: int) -> Decision:
    """A CPU kernel's call without `schedule=`: the default heuristic's pick (autotune/heuristic.py)."""
    if not _varies(kernel):
        # a CPU variant would replace what a cuda emulation is there to check
        reason = f"{kernel.name}: runs as compiled (its schedule was given, or it has no source to vary)"
        return _made(kernel, graph, dims, threads, None, Origin.AS_COMPILED, reason)
    of_graph = graph_class(kernel, graph, dims)
    if of_graph is None:
        return _default_made(kernel, graph, dims, threads)[0]
    memo = _CLASS_DECISIONS.setdefault(kernel, {})
    key = _class_key(threads, dims, of_graph)
    hit = memo.get(key)
    if hit is None or not live(kernel, hit):
        hit = memo[key] = _default_made(kernel, graph, dims, threads)
        return hit[0]
    return _for_graph(hit, graph, dims, threads)


def graph_class(kernel: Any, graph: Any, dims: dict[str, int]) -> tuple | None:
    """What a class decision's key (`_class_key`) reads of `graph` for a call of `kernel` with
    sizes `dims`: its class (`heuristic.default_class`) and what `check_runs` reads; None
    where the graph has no class (its default is made for it)."""
    cls = heuristic.default_class(kernel, graph, dims)
    if cls is None:
        return None
    # only a large graph's default may compile for sorted ids (`default_class`): a small one's
    # key leaves them out, as a new block's check of its order costs what its call does
    return (cls, graph.bipartite, graph.has_relations, cls[0] is True and graph.edges_sorted)


def class_hit(kernel: Any, graph: Any, dims: dict[str, int], threads: int) -> ClassHit | None:
    """What a call of `kernel` without `schedule=` on a CPU graph decides (`_default`), where the
    kernel has decided for a graph of the same class (`graph_class`) at these sizes and threads
    before and the variant that runs is still there (`live`); None otherwise, and `decide`
    then decides. The hit was checked (`check_runs`) on a graph of the same `_class_key`,
    which holds everything that check reads of a graph. A mini-batch block is a new graph
    every call, seen once: its call takes the hit without `decide`'s layers and its entry in
    the graph's plans (`class_call`, `runtime.module.Kernel._run_as_before`)."""
    if not varies_by_class(kernel):
        return None
    of_graph = graph_class(kernel, graph, dims)
    memo = _CLASS_DECISIONS.get(kernel)
    if of_graph is None or memo is None:
        return None
    hit = memo.get(_class_key(threads, dims, of_graph))
    return hit if hit is not None and live(kernel, hit) else None


class ClassReason:
    """A class decision's reason for one graph (`Decision.reason`), formatted when it is read:
    the runtime logs it at DEBUG, and a mini-batch block's call is made once."""

    __slots__ = ("head", "graph_shape")

    def __init__(self, head: str, graph: Any, dims: dict[str, int]):
        self.head = head
        self.graph_shape = (graph.num_vertices, graph.num_edges, tuple(dims.items()))

    def __str__(self) -> str:
        return f"{self.head} for {_shape_text(*self.graph_shape)}"


def class_call(
    hit: ClassHit, graph: Any, dims: dict[str, int], threads: int
) -> tuple[tuple[tuple[str, int], ...], ClassReason]:
    """(workspace, reason) of a `class_hit`'s decision on `graph`: the graph's own workspace
    where the kernel sizes buffers by the graph, and the line a call logs."""
    made, head, _ = hit
    workspace = made.workspace
    runner = made.kernel()
    if runner is not None and _workspace_reads_graph(runner._abi):
        workspace = _workspace(runner, graph, dims, threads, runner.signature.numpy_dtype.itemsize)
    return workspace, ClassReason(head, graph, dims)


def class_default(kernel: Any, graph: Any, dims: dict[str, int], threads: int) -> Decision | None:
    """`class_hit`'s decision for `graph`, checked and described as `decide` would make it; None
    where there is no hit."""
    hit = class_hit(kernel, graph, dims, threads)
    return None if hit is None else _for_graph(hit, graph, dims, threads)


def varies_by_class(kernel: Any) -> bool:
    """Whether calls of `kernel` without `schedule=` take class decisions (`class_hit`): a CPU
    kernel the default may vary."""
    return kernel._abi.grid is None and _varies(kernel)


def _varies(kernel: Any) -> bool:
    """Whether the default may pick a variant of `kernel`: a CPU kernel with its source and no schedule of its own."""
    metadata = kernel._metadata
    return (
        not kernel._abi.schedule_given and metadata.get("source") is not None and metadata.get("target", "cpu") == "cpu"
    )


def _class_key(threads: int, dims: dict[str, int], of_graph: tuple) -> tuple:
    # the graph's part (`graph_class`): its class and what `_made` checks of it (`check_runs`)
    return (threads, tuple(dims.items()), *of_graph)


def live(kernel: Any, hit: ClassHit) -> bool:
    """Whether a class's decision (`_CLASS_DECISIONS`) may run: its kernel is there, a variant
    looked up in its module's cache as `_variant` does (marked used; gone once evicted)."""
    made, _, variant_key = hit
    runner = made.kernel()
    return runner is not None and (runner is kernel or kernel._variant_cache.get(kernel.name, variant_key) is not None)


def _for_graph(hit: ClassHit, graph: Any, dims: dict[str, int], threads: int) -> Decision:
    """A live class's decision (`_CLASS_DECISIONS`) for `graph`: rechecked, with the graph's own
    workspace where the kernel sizes buffers by the graph."""
    made = hit[0]
    runner = made.kernel()
    assert runner is not None, "a live hit's kernel"
    check_runs(runner.name, runner._abi, graph, dims)
    workspace, reason = class_call(hit, graph, dims, threads)
    # `replace` of the hit, field by field (dataclasses.replace costs twice the constructor)
    return Decision(
        made.schedule,
        made.origin,
        made.threads,
        made.plans,
        made.arguments,
        workspace,
        made.launches,
        str(reason),
        made.kernel,
    )


def _default_made(kernel: Any, graph: Any, dims: dict[str, int], threads: int) -> ClassHit:
    """The default's decision, made for this graph, its reason without the graph's shape, and
    the key of its variant in the module's cache ("" for the kernel as compiled)."""
    name = kernel.name
    runner, schedule, origin = kernel, None, Origin.AS_COMPILED
    directives = heuristic.kernel_default(kernel, graph, dims)
    if directives is None:
        head, origin = f"{name}: runs as compiled, the default", Origin.DEFAULT
    elif directives in kernel._refused:
        head = _refused(name, directives)
    else:
        try:
            runner, schedule, origin = kernel._variant(directives), directives, Origin.DEFAULT
            head = f"{name}: default schedule {_one_line(directives)!r}"
        except CompileError:
            # the schedule cannot apply to this kernel (partitioning a softmax):
            # it runs as compiled, and the compiler is not asked again
            kernel._refused.add(directives)
            head = _refused(name, directives)
    made = _made(runner, graph, dims, threads, schedule, origin, f"{head} for {_shape(graph, dims)}")
    return made, head, directives_text(schedule) if schedule else ""


def _default_mapping(kernel: Any, graph: Any, dims: dict[str, int], threads: int, grid: abi.Grid) -> Decision:
    """A cuda kernel (or its CPU emulation) without a `for cuda` schedule: the first mapping the
    graph suggests (heuristic.default_cuda_mappings) that the compiler accepts for it."""
    name = kernel.name
    if grid.schedule_given or kernel._metadata.get("source") is None:
        reason = f"{name}: runs as compiled (its mapping was given, or it has no source to vary)"
        return _made(kernel, graph, dims, threads, None, Origin.AS_COMPILED, reason)
    for mapping in heuristic.default_cuda_mappings(graph, heuristic.row_elements(kernel.signature, dims)):
        if mapping == "thread_vertex" and grid.mapping == mapping and grid.group == 1:
            reason = f"{name}: default mapping 'map {mapping}' (as compiled) for {_shape(graph, dims)}"
            return _made(kernel, graph, dims, threads, None, Origin.DEFAULT, reason)
        directive = f"map {mapping}"
        if directive in kernel._refused:
            continue
        try:
            variant = kernel._variant(directive)
        except CompileError:
            kernel._refused.add(directive)  # this kernel cannot take that mapping: the next one
            continue
        reason = f"{name}: default mapping {directive!r} for {_shape(graph, dims)}"
        return _made(variant, graph, dims, threads, directive, Origin.DEFAULT, reason)
    reason = f"{name}: runs as compiled (no default mapping applies to it)"
    return _made(kernel, graph, dims, threads, None, Origin.AS_COMPILED, reason)


def _auto(kernel: Any, graph: Any, dims: dict[str, int], threads: int | None) -> Decision:
    """`schedule="auto"`: the tuned, else predicted, else default schedule (autoschedule.choose)."""
    from gnnc.autotune import autoschedule  # the tuning cache and the predictor: only "auto" reads them

    runner, choice = kernel, None
    failed: set[str] = set()  # schedules that cannot run this call: the next choice
    for _ in range(AUTO_ATTEMPTS):
        choice = autoschedule.choose(kernel, graph, dims, skip=failed)
        if choice.schedule in kernel._refused or (not choice.schedule and not kernel._abi.schedule_given):
            # the kernel as compiled: nothing to pick, or the pick was refused before
            runner = kernel
            break
        try:
            runner = kernel._variant(choice.schedule)
        except (CompileError, SourceError) as exc:
            # a prediction this kernel cannot take (partitioning a softmax), or a
            # cache entry that does not parse (edited by hand): the next one
            _log.debug("%s: %s schedule %r refused: %s", kernel.name, choice.origin, choice.schedule, exc)
            kernel._refused.add(choice.schedule)
            runner = kernel
            continue
        try:
            check_runs(runner.name, runner._abi, graph, dims)
            break
        except ArgumentError as exc:
            # a stale tuning entry (`specialize F 999` for a call with F = 4): the
            # variant is sound, for other calls; this one takes the next choice
            _log.warning(
                "%s: %s schedule %r cannot run this call: %s", kernel.name, choice.origin, choice.schedule, exc
            )
            failed.add(choice.schedule)
            runner = kernel
    assert choice is not None, "AUTO_ATTEMPTS is at least 1"
    picked = runner is not kernel or not choice.schedule  # else every pick failed: the kernel as compiled
    origin = Origin(choice.origin) if picked else Origin.AS_COMPILED
    n_threads = resolve_threads(threads if threads is not None else choice.threads if picked else None)
    runs = choice.schedule if runner is not kernel else "as compiled"
    reason = f"{kernel.name}: schedule='auto' runs {runs!r} ({origin}, threads={n_threads}) for {_shape(graph, dims)}"
    schedule = choice.schedule if runner is not kernel else None
    return _made(runner, graph, dims, n_threads, schedule, origin, reason)


# ------------------------------------------------------------- what it runs


def _made(
    runner: Any, graph: Any, dims: dict[str, int], threads: int, schedule: str | None, origin: Origin, reason: str
) -> Decision:
    """The decision to run `runner` with `threads` workers: checked against this call, with its plans and workspace."""
    record = runner._abi
    check_runs(runner.name, record, graph, dims)
    grid = record.grid
    launches: tuple[int, ...] = ()
    if grid is not None:
        launches = tuple(abi.grid_blocks(grid, graph.num_vertices, graph.num_edges))
        if runner._metadata.get("target") == "cuda":
            launches = tuple(abi.launched_blocks(launches))  # the launched blocks stride over the rest
        # one scratch slice per launched thread (a cuda emulation runs each grid thread as a worker)
        threads = max(1, max(launches, default=0) * grid.block_size)
    spec, arguments = _graph_free(runner, threads, dims)
    return Decision(
        schedule=schedule,
        origin=origin,
        threads=threads,
        plans=spec,
        arguments=arguments,
        workspace=_workspace(runner, graph, dims, threads, runner.signature.numpy_dtype.itemsize),
        launches=launches,
        reason=reason,
        kernel=weakref.ref(runner),
    )


#: Per kernel that runs, what its decisions share whatever the graph: by (threads, sizes),
#: the plan spec and the `num_threads` / `dims` arguments (read-only, so decisions share them).
_GRAPH_FREE: weakref.WeakKeyDictionary[Any, dict[tuple, tuple[PlanSpec, Mapping[str, Any]]]] = (
    weakref.WeakKeyDictionary()
)


def _graph_free(runner: Any, threads: int, dims: dict[str, int]) -> tuple[PlanSpec, Mapping[str, Any]]:
    """The parts of a decision to run `runner` that depend on no graph, made once per threads and sizes."""
    per_runner = _GRAPH_FREE.setdefault(runner, {})
    key = (threads, tuple(dims.items()))
    made = per_runner.get(key)
    if made is None:
        dims_array = np.array([dims[d] for d in runner._abi.dims], dtype=np.int64)
        dims_array.flags.writeable = False
        spec = _plan_spec(runner, threads, dims, runner.signature.numpy_dtype.itemsize)
        made = per_runner[key] = (spec, MappingProxyType({"num_threads": threads, "dims": dims_array}))
    return made


def check_runs(name: str, record: abi.AbiRecord, graph: Any, dims: dict[str, int]) -> None:
    """Refuses a call the compiled kernel cannot run (prepare_call checked the arrays)."""
    if graph.bipartite and any(t.read_at_src for t in record.temps):
        raise ArgumentError(
            f"{name}: this compiled kernel computes a vertex value per destination and reads it at sources "
            f"(a cuda mapping has no source sweep), so it needs a square graph; the graph has "
            f"{graph.num_src} sources and {graph.num_dst} destinations"
        )
    for dim, size in (record.sizes or {}).items():
        if dims.get(dim) != size:
            # the native code reads and writes `size` columns of every row, whatever the arrays hold
            raise ArgumentError(
                f"{name}: compiled for {dim} = {size} (specialize {dim} {size}), "
                f"but this call has {dim} = {dims.get(dim)}"
            )
    if (record.relations or record.relation_degrees or record.pairs) and not graph.has_relations:
        raise ArgumentError(
            f"{name}: this compiled kernel reads the edges' relation types, but the graph has none: "
            "build it with gnnc.Graph(edge_index, edge_type=..., num_relations=...)"
        )
    if record.edges_sorted and not graph.edges_sorted:
        # the native code would read and write edge rows at in-CSR positions, not at the ids
        raise ArgumentError(
            f"{name}: compiled for edge ids sorted by destination (edges sorted), but this "
            "graph's are not: build it from destination-sorted edges, or compile without 'edges sorted'"
        )


def _plan_spec(runner: Any, threads: int, dims: dict[str, int], itemsize: int) -> PlanSpec:
    """The per-graph arguments the kernel's ABI record asks for."""
    record = runner._abi
    grid = record.grid
    hybrid = None
    if grid is not None and grid.hybrid is not None:
        hybrid = plans.Hybrid(grid.mapping, grid.hybrid, tuple(abi.hybrid_row_elements(grid, dims)), itemsize)
    if grid is not None and runner._metadata.get("target") == "cuda":
        blocks = plans.Blocks.WHOLE  # a GPU grid; its CPU emulation takes blocks as every CPU kernel
    elif record.edge_order == "hilbert":
        blocks = plans.Blocks.EDGES
    elif record.groups and record.order == "identity":
        blocks = plans.Blocks.GROUPED
    else:
        blocks = plans.Blocks.BALANCED
    return PlanSpec(
        threads=threads,
        dtype=runner.signature.dtype,
        order=record.order,
        blocks=blocks,
        ordered_edges=record.ordered_edges,
        source_blocks=record.source_sweep,
        partitions=record.partitions or None,
        # partitions carry the sweep's edges themselves
        hilbert=not record.partitions and record.edge_order == "hilbert",
        groups=record.groups or None,
        hybrid=hybrid,
        relations=record.relations,
        relation_degrees=record.relation_degrees,
        pairs=tuple(record.pairs),
        pair_rows=record.pair_rows,
        edge_ids=record.edge_ids,
        in_src=record.in_src,
        deg_in=record.deg_in,
        deg_out=record.deg_out,
    )


def _workspace_reads_graph(record: abi.AbiRecord) -> bool:
    """Whether `_workspace` sizes any buffer of a kernel with this record by its graph."""
    return bool(
        record.temps
        or record.partitions
        or record.groups
        or record.pairs
        or (record.grid is not None and record.grid.dst_scratch)
    )


def _workspace(
    runner: Any, graph: Any, dims: dict[str, int], threads: int, itemsize: int
) -> tuple[tuple[str, int], ...]:
    """The per-call buffers the kernel's arguments name, in elements: never read before written."""
    record = runner._abi
    per_thread, temps, row_stride = _workspace_rows(runner, tuple(dims.items()), itemsize)
    sizes = {"scratch": per_thread * threads}  # whole lines per worker
    rows = {"V": graph.num_dst, "E": graph.num_edges}
    for side, domain in (("src", "RS"), ("dst", "RD")):
        if side in record.pairs:
            rows[domain] = plans.relation_pairs(graph, side).num_pairs
    for name, source_rows, domain, row in temps:
        n = graph.num_src if source_rows else rows[domain]
        sizes[name] = max(1, n * row)
    if record.partitions:
        sizes["acc_rows"] = max(1, graph.num_vertices * row_stride)
    if record.stream:
        sizes["acc_rows"] = max(1, threads * row_stride)
    if record.groups:
        n_groups = plans.split_neighbor_groups(graph, record.groups)[0].shape[0]
        sizes["acc_rows"] = max(1, n_groups * row_stride)
    if record.grid is not None and record.grid.dst_scratch:
        # an edge mapping's per-destination accumulators: a scratch slice per vertex
        sizes["dst_scratch"] = max(1, per_thread * graph.num_vertices)
    return tuple(sizes.items())


#: Per kernel that runs, by (sizes, itemsize): what `_workspace` reads of it whatever the graph.
_WORKSPACE_ROWS: weakref.WeakKeyDictionary[Any, dict[tuple, tuple]] = weakref.WeakKeyDictionary()


def _workspace_rows(runner: Any, dims: tuple, itemsize: int) -> tuple[int, tuple, int]:
    """(one worker's scratch elements, per temporary (argument name, rows at sources, row
    domain, elements per row), accumulator row elements) of `runner` at sizes `dims`, made once."""
    per_runner = _WORKSPACE_ROWS.setdefault(runner, {})
    made = per_runner.get((dims, itemsize))
    if made is None:
        record, sizes = runner._abi, dict(dims)
        per_thread = abi.scratch_slice_elements(sum(abi.elements(s, sizes) for s in record.scratch), itemsize)
        # abi.kernel_arguments of its record, listed once by the runtime
        names = [a.name for a in runner._arguments if a.group is abi.Group.TEMPS]
        temps = tuple(
            (name, temp.source_rows, temp.domain, abi.elements(temp.shape, sizes))
            for name, temp in zip(names, record.temps, strict=True)
        )
        row_stride = sum(abi.elements(s, sizes) for s in record.acc_rows)
        made = per_runner[(dims, itemsize)] = (per_thread, temps, row_stride)
    return made
