"""A destination sweep as a grid over destinations (thread_vertex, warp_vertex; map-threads)."""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.rewriter import InsertPoint, Rewriter

from gnnc.ir import loop
from gnnc.ir.schedule import CudaSchedule
from gnnc.transforms.loop.thread_grids import build_grid, end_then
from gnnc.transforms.loop.warp_lanes import distribute_over_lanes


def map_vertex(
    op: loop.ForDstOp,
    sched: CudaSchedule,
    lanes: int,
    fn: func.FuncOp,
    kernel: str,
    mapping: str | None = None,
    group: int | None = None,
) -> loop.GridOp:
    """for_dst -> a grid where each group of `lanes` threads runs `group` consecutive
    destinations; with several lanes, the lanes split every outermost feature loop
    in tiles of `sched.tile` (default 1) indices, round robin."""
    rewriter = Rewriter()
    g = build_grid(op.num_vertices, group or sched.group, lanes, sched.block_size, mapping or sched.strategy)
    rewriter.inline_block(op.body.block, InsertPoint.at_end(g.then), [g.item, g.gid])
    end_then(rewriter, g.then)
    if lanes > 1:
        distribute_over_lanes(rewriter, g, sched, lanes, fn, kernel)
    rewriter.replace_op(op, [*g.pre, g.op], [])
    return g.op
