"""vectorize-rows: a destination's work runs once per W-wide slice of its feature row (`vectorize W`).

With a constant W the slice loops unroll into vector registers, and since
the output row slice does not move while the in-edge loop runs, LLVM keeps
the accumulator in registers across all in-edges instead of loading and
storing the row once per edge. Full slices run with the constant width
(an `scf.for` over slice offsets), the remainder once with what is left (an
`scf.if`). The destination lookup (`loop.dst_at`) and the prefetch of later
destinations' rows stay outside the slices.

Runs after `tile-features`: a tile is then sliced like a whole row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, i64
from xdsl.ir import Block, SSAValue
from xdsl.passes import ModulePass

from gnnc.errors import CompileError
from gnnc.ir import loop
from gnnc.ir.directives import check_directive_option
from gnnc.ir.loop_structure import (
    SweepKind,
    ancestors,
    axis_loops,
    check_row_split,
    constant_index,
    give_schedule,
    kernel_buffer,
    narrow_row_pieces,
    over_axis,
    row_dim,
    sweep_kind,
    sweeps,
    take_schedule,
)
from gnnc.transforms.loop.prefetch_neighbors import DESTINATION_PREFETCH_ATTR

index = IndexType()


def _const(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, index))


def _check_partitioned_accumulators(fn: func.FuncOp, for_dst: loop.ForDstOp, width: int, dim: str) -> None:
    """Every slice repeats the destination's work; an accumulator without the
    sliced axis, initialised in the first partition and summed over all of
    them, would be summed once per slice."""
    acc_rows = kernel_buffer(fn, "acc_rows")
    body = for_dst.body.block
    for op in body.walk():
        if isinstance(op, memref.StoreOp) and op.memref is acc_rows:
            outer = ancestors(op, body)
            if any(isinstance(a, loop.ForInEdgesOp) for a in outer) and not any(over_axis(a, dim) for a in outer):
                raise CompileError(
                    f"vectorize {width}: with partition src, this kernel accumulates a value without "
                    f"the feature axis '{dim}' (a softmax sum or a scalar aggregation) across "
                    "partitions, which row slicing would count once per slice"
                )


def _slice_rows(for_dst: loop.ForDstOp, width: int, dim: str, extent: SSAValue) -> None:
    size = constant_index(extent)
    if size == width:
        # The row is one slice already, its loops of constant extent. A slice loop
        # of one trip would be worse than useless: LLVM finds the streamed row's
        # stores at one address in every trip, moves them after the loop and
        # drops their `!nontemporal` (docs/design/locality.md).
        return
    body = for_dst.body.block
    ops = list(body.ops)[:-1]
    while ops and (isinstance(ops[0], loop.DstAtOp) or DESTINATION_PREFETCH_ATTR in ops[0].attributes):
        ops.pop(0)
    terminator = body.last_op
    assert terminator is not None
    c0, w = _const(0), _const(width)
    body.insert_ops_before([c0, w], terminator)

    def copy(block: Block, offset: SSAValue, slice_width: SSAValue) -> None:
        mapping: dict[SSAValue, SSAValue] = {}
        for op in ops:
            clone = op.clone(value_mapper=mapping)
            for old, new in zip(op.results, clone.results):
                mapping[old] = new
            block.add_op(clone)
        for op in block.walk():
            if isinstance(op, loop.ForFeatureOp) and op.extent is extent and over_axis(op, dim):
                inner = op.body.block
                i = inner.args[0]
                shifted = arith.AddiOp(i, offset)
                inner.insert_op_before(shifted, inner.first_op)  # type: ignore[arg-type]  # a loop body is never empty: it ends in its yield
                i.replace_uses_with_if(shifted.result, lambda use, s=shifted: use.operation is not s)  # type: ignore[misc]  # mypy cannot type a lambda's defaults; s binds this iteration's op (B023)
                op.operands[0] = slice_width
        narrow_row_pieces(block, extent, offset, slice_width)
        block.add_op(scf.YieldOp())

    slices = Block(arg_types=[index])
    copy(slices, slices.args[0], w.result)
    tail = Block()
    if size is not None and size > width and size % width and sweep_kind(for_dst) is SweepKind.PAIRS:
        # The last slice full width, overlapping the one before: a pair's row is computed from
        # zero in each slice and only written, so the overlap writes the same values again,
        # and the tail keeps its accumulators in registers like every other slice (a tail of
        # N % W columns did not: docs/design/heterogeneous.md).
        whole, last = _const(size - size % width), _const(size - width)
        copy(tail, last.result, w.result)
        tail_ops = list(tail.ops)[:-1]  # without the yield
        for op in tail_ops:
            op.detach()
        body.insert_ops_before([whole, last, scf.ForOp(c0, whole, w, [], slices), *tail_ops], terminator)
    else:
        remainder = arith.RemSIOp(extent, w)
        full = arith.SubiOp(extent, remainder)
        has_tail = arith.CmpiOp(full, extent, "slt")
        copy(tail, full.result, remainder.result)
        body.insert_ops_before(
            [remainder, full, has_tail, scf.ForOp(c0, full, w, [], slices), scf.IfOp(has_tail, [], [tail])],
            terminator,
        )
    for op in reversed(ops):
        op.detach()
        op.erase()


@dataclass(frozen=True)
class VectorizeRowsPass(ModulePass):
    """Slices the work of each destination of a sweep scheduled `vectorize = W` into W-wide row slices."""

    name = "vectorize-rows"

    width: int | None = None
    """`vectorize WIDTH` for every kernel; none: each kernel's schedule decides."""

    def __post_init__(self) -> None:
        if self.width is not None:
            check_directive_option(str(self.spec()), ["vectorize", str(self.width)])

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.width is not None:
            # as the lowering gives it: a source sweep is sliced only where its row can be
            # (the lowering's own width is there then), the other sweeps always
            give_schedule(
                op,
                "vectorize",
                IntegerAttr(self.width, i64),
                tuple(SweepKind),
                lambda s: (
                    sweep_kind(s) not in (SweepKind.SOURCES, SweepKind.PAIRS)
                    or (s.schedule is not None and "vectorize" in s.schedule.data)
                ),
            )
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks]:
            for phase, for_dst in sweeps(fn):
                attr = take_schedule(for_dst, "vectorize")
                if attr is None:
                    continue
                width = cast(IntegerAttr, attr).value.data
                dim = row_dim(for_dst)
                loops = axis_loops(for_dst.body.block, dim)
                if loops and constant_index(loops[0].extent) == width:
                    # the row is one slice (a specialised extent): nothing is split, so a dot
                    # along it (a gradient's edge-score adjoint) is no obstacle
                    continue
                extent = check_row_split(f"vectorize {width}", for_dst.body.block, dim, "row slicing", "slices")
                if any(isinstance(a, loop.ForPartitionOp) for a in [phase, *ancestors(for_dst, fn.body.block)]):
                    _check_partitioned_accumulators(fn, for_dst, width, dim)
                _slice_rows(for_dst, width, dim, extent)
