"""map-threads: a kernel's `loop.for_dst` loops become cuda grids (`loop.grid`).

The mapping comes from the kernel's `schedule K for cuda { map ... }` (carried
on the function as `gnnc.cuda_map`) or the default, thread_vertex. In a grid,
the index arithmetic of the mapping is explicit IR in the grid's body, so the
CPU emulation (`emulate-grid`) and the NVVM lowering run the same arithmetic,
and the emulation's comparison with the reference checks it.

thread_vertex (uGrapher; Seastar's vertex-parallel, edge-sequential form):
thread `g = block * block_size + thread` handles the `group` consecutive
destinations `g * group + k`, each with its in-edges in order; scratch slice
`g` is the thread's own. Mappings that split one destination over several
threads (warp_*, thread_edge) are refused with the reason until they exist:
a mapping is never accepted and ignored.
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
    "warp_vertex": "splitting a destination's features over a warp's lanes needs warp-shuffle "
    "reductions for dot and @, which the cuda lowering does not emit yet",
}


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


def map_thread_vertex(op: loop.ForDstOp, sched: CudaSchedule) -> loop.GridOp:
    """for_dst -> a grid where each thread runs `group` consecutive destinations."""
    rewriter = Rewriter()
    pre: list[Operation] = []
    group = _const(pre, sched.group)
    block_size = _const(pre, sched.block_size)
    one = _const(pre, 1)

    def ceil_div(a: SSAValue, b: SSAValue) -> SSAValue:
        less = arith.SubiOp(b, one)
        total = arith.AddiOp(a, less)
        quotient = arith.DivUIOp(total, b)
        pre.extend([less, total, quotient])
        return quotient.result

    blocks = ceil_div(ceil_div(op.num_vertices, group), block_size)

    body = Block(arg_types=[index, index])
    b, t = body.args
    scaled = arith.MuliOp(b, block_size)
    gid = arith.AddiOp(scaled, t)
    first = arith.MuliOp(gid, group)
    zero = arith.ConstantOp(IntegerAttr(0, index))
    inner = Block(arg_types=[index])
    k = inner.args[0]
    v = arith.AddiOp(first, k)
    inside = arith.CmpiOp(v, op.num_vertices, "ult")
    then = Block()
    if_op = scf.IfOp(inside, [], [then])
    inner.add_ops([v, inside, if_op, scf.YieldOp()])
    for_k = scf.ForOp(zero, group, one, [], inner)
    body.add_ops([scaled, gid, first, zero, for_k, loop.YieldOp()])

    old = op.body.block
    rewriter.inline_block(old, InsertPoint.at_end(then), [v.result, gid.result])
    terminator = then.last_op
    assert isinstance(terminator, loop.YieldOp)
    rewriter.replace_op(terminator, scf.YieldOp())
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
            if sched.strategy in _NOT_YET:
                raise CompileError(f"kernel '{kernel}': map {sched.strategy} is refused: {_NOT_YET[sched.strategy]}")
            if sched.tile is not None:
                raise CompileError(
                    f"kernel '{kernel}': map {sched.strategy} tile {sched.tile} is refused: "
                    "with one thread per destination every thread runs the whole feature row, "
                    "there is nothing to tile over threads"
                )
            for dst in [o for o in fn.walk() if isinstance(o, loop.ForDstOp)]:
                _check_loop_schedule(dst)
                map_thread_vertex(dst, sched)
            if CUDA_MAP_ATTR in fn.attributes:
                del fn.attributes[CUDA_MAP_ATTR]
            record = json.loads(fn.attributes[abi.ABI_ATTR].data)  # type: ignore[union-attr]
            # the runtime sizes the grid (and one scratch slice per thread) from this
            record["grid"] = {"mapping": sched.strategy, "block_size": sched.block_size, "group": sched.group}
            fn.attributes[abi.ABI_ATTR] = StringAttr(json.dumps(record, sort_keys=True))
