"""convert-grid-to-nvvm: each cuda grid becomes a kernel of its own, reading %ctaid / %tid.

A function with several grids (one per phase: a later phase reads what an
earlier one wrote at other destinations) needs a grid-wide barrier between
them, which one launch does not have; so grid `i` of kernel `K` becomes the
function `K` (grid 0) or `K_phase<i>` (i > 0), a copy of `K` that keeps grid
`i` only; the ABI record's `grid.phases` lists them in launch order. Each keeps the kernel's full argument list, so the
runtime passes the same buffers to every phase. Kernel functions carry
`gnnc.ptx_kernel`, which the translation turns into the `ptx_kernel`
calling convention. A `loop.warp_sum` over L lanes becomes each lane's strided
partial sum and log2(L) `shfl.sync.bfly` rounds (offsets L/2, ..., 1) adding
the partials of lanes l and l ^ offset: FeatGraph's tree reduction, in
registers.
"""

from __future__ import annotations

from typing import cast

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import (
    AnyFloat,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from gnnc.ir import kernel_abi, loop
from gnnc.ir.llvm_ext import BarrierOp, NvvmSregOp, ShflBflyOp
from gnnc.ir.loop import SCRATCH_BASE_ATTR

#: func.func attribute marking a function as a PTX kernel entry point.
PTX_KERNEL_ATTR = "gnnc.ptx_kernel"


def _keep_grid(fn: func.FuncOp, keep: int) -> None:
    """Erases every grid of fn but the `keep`-th and makes that one a grid-stride loop on
    %ctaid / %tid: block b = %ctaid, %ctaid + %nctaid, ... below the grid's block count, so
    the runtime may launch fewer blocks than the grid has (`abi.CUDA_MAX_BLOCKS`)."""
    rewriter = Rewriter()
    grids = [op for op in fn.walk() if isinstance(op, loop.GridOp)]
    for i, grid in reversed(list(enumerate(grids))):
        if i != keep:
            rewriter.erase_op(grid)
            continue
        block_id, thread_id, launched = NvvmSregOp("ctaid.x"), NvvmSregOp("tid.x"), NvvmSregOp("nctaid.x")
        rewriter.insert_op([block_id, thread_id, launched], InsertPoint.before(grid))
        body = grid.body.block
        terminator = body.last_op
        assert isinstance(terminator, loop.YieldOp)
        block_size = grid.block_size.value.data
        has_barrier = any(isinstance(o, BarrierOp) for o in body.walk())
        step_body = Block(arg_types=[IndexType()])
        rewriter.replace_op(terminator, [BarrierOp()] if has_barrier else [])
        rewriter.inline_block(body, InsertPoint.at_end(step_body), [step_body.args[0], thread_id.result])
        step_body.add_op(scf.YieldOp())
        slices = _scratch_slices(step_body, step_body.args[0], thread_id.result, block_size)
        if slices:
            # with blocks strided, the launch has fewer threads than the grid: a slice goes by
            # the thread's index in the launch (the runtime allocates one per launched thread)
            physical = _physical_thread(block_id.result, thread_id.result, block_size, rewriter, grid)
            for base in slices:
                base.operands = [physical, base.rhs]
        strided = scf.ForOp(block_id.result, grid.num_blocks, launched.result, [], step_body)
        rewriter.replace_op(grid, strided)


def _physical_thread(
    block_id: SSAValue, thread_id: SSAValue, block_size: int, rewriter: Rewriter, before: Operation
) -> SSAValue:
    """%ctaid * block_size + %tid: this thread's index in the launch (not in the grid)."""
    size = arith.ConstantOp(IntegerAttr(block_size, IndexType()))
    scaled = arith.MuliOp(block_id, size)
    physical = arith.AddiOp(scaled, thread_id)
    rewriter.insert_op([size, scaled, physical], InsertPoint.before(before))
    return physical.result


def _scratch_slices(body: Block, block: SSAValue, thread_id: SSAValue, block_size: int) -> list[arith.MuliOp]:
    """The products `grid thread * slice size` that place a thread's scratch slice: map-threads'
    worker is the grid thread `block * block_size + tid`. Only slices of `scratch`: a
    destination's rows in `dst_scratch` (edge mappings) are indexed by the destination."""
    slices = []
    for op in body.walk():
        if not (isinstance(op, arith.AddiOp) and op.rhs is thread_id):
            continue
        scaled = op.lhs.owner
        if not (
            isinstance(scaled, arith.MuliOp)
            and scaled.lhs is block
            and isinstance(scaled.rhs.owner, arith.ConstantOp)
            and cast(IntegerAttr, scaled.rhs.owner.value).value.data == block_size
        ):
            continue
        for use in op.result.uses:
            base = use.operation
            if isinstance(base, arith.MuliOp) and use.index == 0 and _feeds_scratch_base(base):
                slices.append(base)
    return slices


def _feeds_scratch_base(op: arith.MuliOp) -> bool:
    return any(
        isinstance(use.operation, arith.AddiOp) and SCRATCH_BASE_ATTR in use.operation.attributes
        for use in op.result.uses
    )


def _group_mask(lanes: int, lane: SSAValue, ops: list) -> SSAValue:
    """The 32-bit mask of the `lanes` consecutive lanes of this warp that make up lane's group."""
    if lanes == loop.WARP_SIZE:
        every = arith.ConstantOp.from_int_and_width(-1, 32)
        ops.append(every)
        return every.result
    laneid = NvvmSregOp("laneid")
    first = arith.SubiOp(laneid, lane)  # the group's first lane in the warp
    first_i64 = arith.IndexCastOp(first, i64)
    ones = arith.ConstantOp.from_int_and_width((1 << lanes) - 1, 64)
    shifted = arith.ShLIOp(ones, first_i64)
    mask = arith.TruncIOp(shifted, IntegerType(32))
    ops += [laneid, first, first_i64, ones, shifted, mask]
    return mask.result


def _lower_warp_sum(op: loop.WarpSumOp, rewriter: Rewriter) -> None:
    """loop.warp_sum -> for i = lane, lane + lanes, ... : acc += term(i); then the butterfly
    over the group's lanes (shuffles with the group's mask: other groups of the
    warp walk other destinations and need not be there)."""
    t = op.result.type
    lanes = op.lanes.value.data
    fzero = arith.ConstantOp(FloatAttr(0.0, cast(AnyFloat, t)))
    warp = arith.ConstantOp.from_int_and_width(lanes, IndexType())
    terminator = op.body.block.last_op
    assert isinstance(terminator, loop.YieldOp)
    rewriter.replace_op(terminator, scf.YieldOp(*terminator.values))
    body = Block(arg_types=[IndexType(), t])
    rewriter.inline_block(op.body.block, InsertPoint.at_end(body), list(body.args))
    fold = scf.ForOp(op.lane, op.extent, warp, [fzero.result], body)
    ops: list = [fzero, warp, fold]
    mask = _group_mask(lanes, op.lane, ops)
    total = fold.results[0]
    offset = lanes // 2
    while offset:
        other = ShflBflyOp(total, offset, mask)
        added = arith.AddfOp(total, other)
        ops += [other, added]
        total = added.result
        offset //= 2
    rewriter.replace_op(op, ops, [total])


class ConvertGridToNvvmPass(ModulePass):
    """Outlines every loop.grid into a `ptx_kernel` function reading the PTX special registers."""

    name = "convert-grid-to-nvvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewriter = Rewriter()
        for warp_sum in [o for o in op.walk() if isinstance(o, loop.WarpSumOp)]:
            _lower_warp_sum(warp_sum, rewriter)
        for fn in list(op.ops):
            if not isinstance(fn, func.FuncOp) or not kernel_abi.has_record(fn):
                continue
            count = sum(1 for o in fn.walk() if isinstance(o, loop.GridOp))
            record = kernel_abi.get_record(fn)
            name = fn.sym_name.data
            phases = [name] + [f"{name}_phase{i}" for i in range(1, count)]
            if record.grid is not None:  # map-threads' grid record: the runtime launches these in order
                record.grid.phases = phases
                kernel_abi.set_record(fn, record)
            for i in range(count - 1, 0, -1):
                copy = fn.clone()
                copy.sym_name = StringAttr(phases[i])
                kernel_abi.take_record(copy)  # the record stays on the first phase, naming them all
                _keep_grid(copy, i)
                copy.attributes[PTX_KERNEL_ATTR] = UnitAttr()
                op.body.block.insert_op_after(copy, fn)
            _keep_grid(fn, 0)
            fn.attributes[PTX_KERNEL_ATTR] = UnitAttr()
