"""The pieces every cuda mapping builds its grids from (map-threads).

A grid runs `units` groups of `lanes` threads, each group `group`
consecutive items (destinations or in-CSR positions) of a count; the
mapping's index arithmetic is explicit IR in the grid's body. Also here:
where a kernel's per-thread scratch is and which region an access to it is
in, as convert-graph-to-loop's `linear` builds the index.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    IndexType,
    IntegerAttr,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import Rewriter

from gnnc.ir import abi, loop
from gnnc.ir.loop import SCRATCH_BASE_ATTR

index = IndexType()


def const(ops: list[Operation], value: int) -> SSAValue:
    op = arith.ConstantOp(IntegerAttr(value, index))
    ops.append(op)
    return op.result


def ceil_div(pre: list[Operation], a: SSAValue, b: SSAValue) -> SSAValue:
    one = const(pre, 1)
    less = arith.SubiOp(b, one)
    total = arith.AddiOp(a, less)
    quotient = arith.DivUIOp(total, b)
    pre.extend([less, total, quotient])
    return quotient.result


@dataclass
class Grid:
    """A grid whose `units` groups of `lanes` threads each run `group` consecutive items
    of [0, count): `then` runs for item `item` (guarded by item < count)."""

    pre: list[Operation]
    op: loop.GridOp
    then: Block
    item: SSAValue
    gid: SSAValue
    lane: SSAValue


def build_grid(count: SSAValue, group_size: int, lanes: int, block_size_value: int, mapping: str) -> Grid:
    pre: list[Operation] = []
    group = const(pre, group_size)
    block_size = const(pre, block_size_value)
    lanes_c = const(pre, lanes)
    one = const(pre, 1)
    units = ceil_div(pre, count, group)
    threads = arith.MuliOp(units, lanes_c)
    pre.append(threads)
    blocks = ceil_div(pre, threads.result, block_size)

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
    item = arith.AddiOp(first, k)
    inside = arith.CmpiOp(item, count, "ult")
    then = Block()
    inner.add_ops([item, inside, scf.IfOp(inside, [], [then]), scf.YieldOp()])
    for_k = scf.ForOp(zero, group, one, [], inner)
    body.add_ops([scaled, gid, unit, lane, first, zero, for_k, loop.YieldOp()])
    grid = loop.GridOp(blocks, block_size_value, mapping, body)
    return Grid(pre, grid, then, item.result, gid.result, lane.result)


def end_then(rewriter: Rewriter, then: Block) -> None:
    terminator = then.last_op
    assert isinstance(terminator, loop.YieldOp)
    rewriter.replace_op(terminator, scf.YieldOp())


def scratch_of(fn: func.FuncOp) -> SSAValue:
    return fn.body.block.args[abi.GRAPH_ARGUMENTS.index("scratch")]


def scratch_access(index_value: SSAValue) -> tuple[SSAValue, SSAValue | None] | None:
    """(region, leading index) of a scratch access `base + row-major offset`, as
    convert-graph-to-loop's `linear` builds it; the region is the base's offset."""
    owner = index_value.owner
    if isinstance(owner, arith.AddiOp) and SCRATCH_BASE_ATTR in owner.attributes:
        return owner.rhs, None  # a scalar region
    if not (
        isinstance(owner, arith.AddiOp)
        and isinstance(owner.lhs.owner, arith.AddiOp)
        and SCRATCH_BASE_ATTR in owner.lhs.owner.attributes
    ):
        return None
    offset = owner.rhs
    while isinstance(offset.owner, arith.AddiOp) and isinstance(offset.owner.lhs.owner, arith.MuliOp):
        offset = offset.owner.lhs.owner.lhs
    return owner.lhs.owner.rhs, offset


#: Ops a destination's work may drop from a grid when their results are unused.
PURE_OPS = (
    arith.ConstantOp,
    arith.AddiOp,
    arith.SubiOp,
    arith.MuliOp,
    arith.DivUIOp,
    arith.RemUIOp,
    arith.IndexCastOp,
    arith.CmpiOp,
    arith.SIToFPOp,
    memref.LoadOp,
)
