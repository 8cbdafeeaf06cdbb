"""map-threads: a kernel's `loop.for_dst` loops become cuda grids (`loop.grid`).

The mapping comes from the kernel's `schedule K for cuda { map ... }` (carried
on the function as `gnnc.cuda_map`) or the default, thread_vertex. In a grid,
the index arithmetic of the mapping is explicit IR in the grid's body, so the
CPU emulation (`emulate-grid`) and the NVVM lowering run the same arithmetic,
and the emulation's comparison with the reference checks it.

thread_vertex (uGrapher; Seastar's vertex-parallel, edge-sequential form):
thread `g = block * block_size + thread` handles the `group` consecutive
destinations `g * group + k`, each with its in-edges in order; scratch slice
`g` is the thread's own (vertex_grids.py).

warp_vertex (uGrapher): the 32 lanes of warp `w = g / 32` handle the `group`
destinations `w * group + k`, sharing each destination's feature loops
(warp_lanes.py).

thread_edge / warp_edge (uGrapher): thread (warp) `g` handles the `group`
consecutive in-CSR positions `g * group + k` and updates the destinations'
rows with atomics; per-vertex work runs in vertex grids of its own around
each edge launch (edge_grids.py).

`hybrid K` (FeatGraph's hybrid partitioning, any mapping): the rows of the
up to K sources of highest out-degree are kept in each block's shared
memory (hybrid_staging.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass

from gnnc.errors import CompileError
from gnnc.ir import abi, kernel_abi, loop
from gnnc.ir.directives import check_directive_option
from gnnc.ir.loop import CUDA_MAP_ATTR
from gnnc.ir.schedule import CudaSchedule
from gnnc.transforms.loop.edge_grids import VERTEX_MAPPING_OF, accumulator_regions, map_edges
from gnnc.transforms.loop.hybrid_staging import HybridStaging
from gnnc.transforms.loop.thread_grids import scratch_of
from gnnc.transforms.loop.vertex_grids import map_vertex

#: Threads that share one destination (or edge group), per mapping.
LANES = {"thread_vertex": 1, "warp_vertex": loop.WARP_SIZE, "thread_edge": 1, "warp_edge": loop.WARP_SIZE}


def _check_loop_schedule(op: loop.ForDstOp) -> None:
    """Only the CPU defaults may remain: cuda compiles drop `for cpu` schedules."""
    left = dict(op.schedule.data) if op.schedule is not None else {}
    left.pop("parallel", None)
    left.pop("prefetch", None)  # a CPU cache hint; GPUs hide latency with warps instead
    order = left.pop("order", None)
    if isinstance(order, StringAttr) and order.data != "identity":
        raise CompileError(f"destination order '{order.data}' is not implemented for the cuda target")
    if left:
        raise CompileError(f"CPU schedule {', '.join(sorted(left))} does not apply to the cuda target")


def _walk_sources(grid: loop.GridOp) -> list[SSAValue]:
    return [w.body.block.args[1] for w in grid.walk() if isinstance(w, loop.ForInEdgesOp)]


@dataclass(frozen=True)
class MapThreadsPass(ModulePass):
    """Replaces every loop.for_dst by a loop.grid for the kernel's cuda mapping.

    Given a strategy, every kernel runs `map STRATEGY [group G] [tile T]
    [lanes L] [hybrid K]` as if its cuda schedule said so.
    """

    name = "map-threads"

    strategy: str | None = None
    """thread_vertex, thread_edge, warp_vertex or warp_edge; none: each kernel's cuda schedule decides."""
    group: int | None = None
    """Destinations (or in-CSR positions) per thread or warp (uGrapher's grouping)."""
    tile: int | None = None
    """Feature indices a lane takes at a time (warp mappings)."""
    lanes: int | None = None
    """Lanes per destination of a warp mapping (Seastar's feature-adaptive groups), up to 32."""
    hybrid: int | None = None
    """The most high-degree sources whose rows each block keeps in shared memory (FeatGraph)."""

    def _directive(self) -> list[str] | None:
        """The options as the `map` directive they stand for; None when no strategy is given."""
        if self.strategy is None:
            return None
        words = ["map", self.strategy]
        for option in ("group", "tile", "lanes", "hybrid"):
            value = getattr(self, option)
            if value is not None:
                words += [option, str(value)]
        return words

    def __post_init__(self) -> None:
        words = self._directive()
        if words is None:
            if any(getattr(self, o) is not None for o in ("group", "tile", "lanes", "hybrid")):
                raise CompileError(f"{self.spec()}: give the mapping's strategy too (strategy=thread_vertex, ...)")
            return
        check_directive_option(str(self.spec()), words)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        given = self._directive()
        for fn in list(op.ops):
            if not isinstance(fn, func.FuncOp) or not kernel_abi.has_record(fn):
                continue
            text = fn.attributes.get(CUDA_MAP_ATTR)
            if given is not None:
                text = StringAttr(" ".join(given[1:]))
            sched = CudaSchedule.parse(text.data) if isinstance(text, StringAttr) else CudaSchedule()
            kernel = fn.sym_name.data.removeprefix(abi.SYMBOL_PREFIX)
            record = kernel_abi.get_record(fn)
            lanes = LANES[sched.strategy]
            if sched.lanes is not None:
                if lanes == 1:
                    raise CompileError(
                        f"kernel '{kernel}': map {sched.strategy} lanes {sched.lanes} is refused: a thread mapping "
                        f"runs one thread per destination (or edge group); use map "
                        f"{sched.strategy.replace('thread', 'warp')} lanes {sched.lanes}"
                    )
                lanes = sched.lanes
            if sched.tile is not None and lanes == 1:
                raise CompileError(
                    f"kernel '{kernel}': map {sched.strategy} tile {sched.tile} is refused: "
                    "with one thread per destination (or edge) every thread runs the whole feature row, "
                    "there is nothing to tile over threads"
                )
            grids: list[abi.Launch] = []
            staging = (
                HybridStaging(fn, record, kernel, sched.strategy, sched.hybrid) if sched.hybrid is not None else None
            )
            dst_scratch = None
            if sched.strategy in VERTEX_MAPPING_OF and any(
                accumulator_regions(dst, scratch_of(fn)) for dst in fn.walk() if isinstance(dst, loop.ForDstOp)
            ):
                # the accumulators edge threads share: one scratch slice per destination
                dst_scratch = kernel_abi.append_argument(fn, "dst_scratch")
            for dst in [o for o in fn.walk() if isinstance(o, loop.ForDstOp)]:
                _check_loop_schedule(dst)
                mapped: list[tuple[loop.GridOp, abi.Launch]] = []
                edge_sources: dict[loop.GridOp, list[SSAValue]] = {}
                if sched.strategy in VERTEX_MAPPING_OF:
                    for grid in map_edges(dst, sched, lanes, fn, kernel, edge_sources, dst_scratch):
                        over_edges = grid.mapping.data == sched.strategy
                        mapped.append((grid, abi.Launch("E" if over_edges else "V", sched.group if over_edges else 1)))
                else:
                    grid = map_vertex(dst, sched, lanes, fn, kernel)
                    edge_sources[grid] = _walk_sources(grid)
                    mapped.append((grid, abi.Launch("V", sched.group)))
                for grid, launch in mapped:
                    if staging is not None:
                        # the rows each launch keeps in shared memory, per hot source
                        launch.shared = staging.stage(grid, edge_sources.get(grid, []))
                    grids.append(launch)
            if staging is not None:
                staging.check_used()
            if CUDA_MAP_ATTR in fn.attributes:
                del fn.attributes[CUDA_MAP_ATTR]
            # the runtime sizes the grid (and one scratch slice per thread) from this
            record.grid = abi.Grid(
                mapping=sched.strategy,
                block_size=sched.block_size,
                group=sched.group,
                lanes=lanes,
                grids=grids,
                hybrid=sched.hybrid,
                # V scratch slices, one per destination, after the temps
                dst_scratch=dst_scratch is not None,
                # False: the runtime may pick a mapping per graph (autotune/heuristic.py)
                schedule_given=isinstance(text, StringAttr),
            )
            kernel_abi.set_record(fn, record)
