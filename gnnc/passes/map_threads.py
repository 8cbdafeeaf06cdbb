"""map-threads: a kernel's `loop.for_dst` loops become cuda grids (`loop.grid`).

The mapping comes from the kernel's `schedule K for cuda { map ... }` (carried
on the function as `gnnc.cuda_map`) or the default, thread_vertex. In a grid,
the index arithmetic of the mapping is explicit IR in the grid's body, so the
CPU emulation (`emulate-grid`) and the NVVM lowering run the same arithmetic,
and the emulation's comparison with the reference checks it.

thread_vertex (uGrapher; Seastar's vertex-parallel, edge-sequential form):
thread `g = block * block_size + thread` handles the `group` consecutive
destinations `g * group + k`, each with its in-edges in order; scratch slice
`g` is the thread's own.

warp_vertex (uGrapher): the 32 lanes of warp `w = g / 32` handle the `group`
destinations `w * group + k`; every outermost feature loop is split over the
lanes in tiles of `tile` (default 1) consecutive indices, round robin, so a
lane owns the same feature elements in every loop of a destination and no
lane reads what another wrote. Kernels with per-thread scratch are refused.

Edge mappings (thread_edge, warp_edge) need atomics and are refused with the
reason until they exist: a mapping is never accepted and ignored.
"""

from __future__ import annotations

import json

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from gnnc import abi
from gnnc.dialects import loop
from gnnc.errors import CompileError
from gnnc.passes.convert_graph_to_loop import CUDA_MAP_ATTR
from gnnc.schedule import CudaSchedule

index = IndexType()

#: Why each mapping not implemented yet is refused.
_NOT_YET = {
    "thread_edge": "one thread per edge needs atomic updates of the destination rows, "
    "which the cuda lowering does not emit yet",
    "warp_edge": "a warp per edge group needs atomic updates of the destination rows, "
    "which the cuda lowering does not emit yet",
}

#: Threads that share one destination, per vertex mapping.
LANES = {"thread_vertex": 1, "warp_vertex": loop.WARP_SIZE}


def _const(ops: list[Operation], value: int) -> SSAValue:
    op = arith.ConstantOp(IntegerAttr(value, index))
    ops.append(op)
    return op.result


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


def _outermost_feature_loops(grid_body: Block) -> list[loop.ForFeatureOp]:
    found = []
    for o in grid_body.walk():
        if isinstance(o, loop.ForFeatureOp):
            parent = o.parent_op()
            while parent is not None and not isinstance(parent, (loop.ForFeatureOp, loop.GridOp)):
                parent = parent.parent_op()
            if not isinstance(parent, loop.ForFeatureOp):
                found.append(o)
    return found


def _split_over_lanes(rewriter: Rewriter, op: loop.ForFeatureOp, lane: SSAValue, lanes: int, tile: int) -> None:
    """for_feature i < n -> lane `lane` runs tiles c = lane, lane + lanes, ... of `tile` indices each."""
    ops: list[Operation] = []
    one = _const(ops, 1)
    tile_c = _const(ops, tile)
    step = _const(ops, lanes)
    less = arith.SubiOp(tile_c, one)
    total = arith.AddiOp(op.extent, less)
    tiles = arith.DivUIOp(total, tile_c)
    zero = _const(ops, 0)
    ops += [less, total, tiles]
    tile_body = Block(arg_types=[index])
    c = tile_body.args[0]
    elem_body = Block(arg_types=[index])
    j = elem_body.args[0]
    base = arith.MuliOp(c, tile_c)
    i = arith.AddiOp(base, j)
    inside = arith.CmpiOp(i, op.extent, "ult")
    then = Block()
    elem_body.add_ops([base, i, inside, scf.IfOp(inside, [], [then]), scf.YieldOp()])
    tile_body.add_ops([scf.ForOp(zero, tile_c, one, [], elem_body), scf.YieldOp()])
    rewriter.inline_block(op.body.block, InsertPoint.at_end(then), [i.result])
    terminator = then.last_op
    assert isinstance(terminator, loop.YieldOp)
    rewriter.replace_op(terminator, scf.YieldOp())
    rewriter.replace_op(op, [*ops, scf.ForOp(lane, tiles, step, [], tile_body)], [])


def map_vertex(op: loop.ForDstOp, sched: CudaSchedule, lanes: int) -> loop.GridOp:
    """for_dst -> a grid where each group of `lanes` threads runs `group` consecutive
    destinations; with several lanes, the lanes split every outermost feature loop
    in tiles of `sched.tile` (default 1) indices, round robin."""
    rewriter = Rewriter()
    pre: list[Operation] = []
    group = _const(pre, sched.group)
    block_size = _const(pre, sched.block_size)
    lanes_c = _const(pre, lanes)
    one = _const(pre, 1)

    def ceil_div(a: SSAValue, b: SSAValue) -> SSAValue:
        less = arith.SubiOp(b, one)
        total = arith.AddiOp(a, less)
        quotient = arith.DivUIOp(total, b)
        pre.extend([less, total, quotient])
        return quotient.result

    units = ceil_div(op.num_vertices, group)
    threads = arith.MuliOp(units, lanes_c)
    pre.append(threads)
    blocks = ceil_div(threads.result, block_size)

    body = Block(arg_types=[index, index])
    b, t = body.args
    scaled = arith.MuliOp(b, block_size)
    gid = arith.AddiOp(scaled, t)
    unit = arith.DivUIOp(gid, lanes_c)
    lane = arith.RemUIOp(gid, lanes_c)
    first = arith.MuliOp(unit, group)
    zero = arith.ConstantOp(IntegerAttr(0, index))
    inner = Block(arg_types=[index])
    k = inner.args[0]
    v = arith.AddiOp(first, k)
    inside = arith.CmpiOp(v, op.num_vertices, "ult")
    then = Block()
    if_op = scf.IfOp(inside, [], [then])
    inner.add_ops([v, inside, if_op, scf.YieldOp()])
    for_k = scf.ForOp(zero, group, one, [], inner)
    body.add_ops([scaled, gid, unit, lane, first, zero, for_k, loop.YieldOp()])

    old = op.body.block
    rewriter.inline_block(old, InsertPoint.at_end(then), [v.result, gid.result])
    terminator = then.last_op
    assert isinstance(terminator, loop.YieldOp)
    rewriter.replace_op(terminator, scf.YieldOp())
    if lanes > 1:
        for feature_loop in _outermost_feature_loops(body):
            _split_over_lanes(rewriter, feature_loop, lane.result, lanes, sched.tile or 1)
    grid = loop.GridOp(blocks, sched.block_size, sched.strategy, body)
    rewriter.replace_op(op, [*pre, grid], [])
    return grid


class MapThreadsPass(ModulePass):
    """Replaces every loop.for_dst by a loop.grid for the kernel's cuda mapping."""

    name = "map-threads"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in list(op.ops):
            if not isinstance(fn, func.FuncOp) or abi.ABI_ATTR not in fn.attributes:
                continue
            text = fn.attributes.get(CUDA_MAP_ATTR)
            sched = CudaSchedule.parse(text.data) if isinstance(text, StringAttr) else CudaSchedule()
            kernel = fn.sym_name.data.removeprefix(abi.SYMBOL_PREFIX)
            record = json.loads(fn.attributes[abi.ABI_ATTR].data)  # type: ignore[union-attr]
            if sched.strategy in _NOT_YET:
                raise CompileError(f"kernel '{kernel}': map {sched.strategy} is refused: {_NOT_YET[sched.strategy]}")
            lanes = LANES[sched.strategy]
            if sched.tile is not None and lanes == 1:
                raise CompileError(
                    f"kernel '{kernel}': map {sched.strategy} tile {sched.tile} is refused: "
                    "with one thread per destination every thread runs the whole feature row, "
                    "there is nothing to tile over threads"
                )
            if lanes > 1 and record["scratch"]:
                # Accumulators, dot, @ and softmax keep per-destination values in
                # the thread's scratch. Splitting features over lanes is only
                # sound when each lane reads back just what it wrote (a dot over
                # the split axis needs a warp-shuffle reduction instead); that
                # is not proven yet, so such kernels are refused, not guessed.
                raise CompileError(
                    f"kernel '{kernel}': map {sched.strategy} is refused: the kernel keeps per-destination "
                    "values in per-thread scratch (accumulators, dot, @ or softmax), and splitting them over a "
                    "warp's lanes needs warp-shuffle reductions the cuda lowering does not emit yet; "
                    "use map thread_vertex"
                )
            for dst in [o for o in fn.walk() if isinstance(o, loop.ForDstOp)]:
                _check_loop_schedule(dst)
                map_vertex(dst, sched, lanes)
            if CUDA_MAP_ATTR in fn.attributes:
                del fn.attributes[CUDA_MAP_ATTR]
            # the runtime sizes the grid (and one scratch slice per thread) from this
            record["grid"] = {"mapping": sched.strategy, "block_size": sched.block_size, "group": sched.group,
                              "lanes": lanes}
            fn.attributes[abi.ABI_ATTR] = StringAttr(json.dumps(record, sort_keys=True))
