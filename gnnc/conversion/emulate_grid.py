"""emulate-grid: a cuda grid becomes two loops, blocks then threads, on the CPU.

Between barriers, threads of a grid share memory only through atomics
(`llvm_ext.atomic_rmw`, the edge mappings' destination updates), and one
thread's atomic update, run alone, is the plain update. So running threads
one after another is one valid schedule of the GPU's execution; the body's
index arithmetic is unchanged, which is what the emulation tests check
against the reference. The atomics stay atomics: the CPU backend translates
them too, so the emulation also runs their compare-and-swap loops.

A block barrier (`llvm_ext.barrier`, at the top level of a grid's body) is
modelled as MCUDA does: the thread loop is split there, so every thread of
the block runs the code before it, then every thread the code after it. No
value may cross a barrier (each thread would need its own copy); the
grid's builder keeps the code before a barrier self-contained. A block's
shared memory (`llvm_ext.shared_memory`) becomes one stack buffer: blocks run
one after another, so they can use the same one.
"""

from __future__ import annotations

from typing import cast

from xdsl.context import Context
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import DYNAMIC_INDEX, AnyFloat, FloatAttr, IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint, Rewriter

from gnnc.errors import CompileError
from gnnc.ir import loop
from gnnc.ir.llvm_ext import BarrierOp, SharedMemoryOp

index = IndexType()


class EmulateGrid(RewritePattern):
    """loop.grid -> scf.for over blocks { scf.for over threads { body } }, one thread
    loop per stretch of the body between barriers."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.GridOp, rewriter: PatternRewriter) -> None:
        zero = arith.ConstantOp(IntegerAttr(0, index))
        one = arith.ConstantOp(IntegerAttr(1, index))
        size = arith.ConstantOp(IntegerAttr(op.block_size.value.data, index))
        body = op.body.block
        for nested in body.walk():
            if isinstance(nested, BarrierOp) and nested.parent_block() is not body:
                raise CompileError(
                    "internal error: a block barrier inside control flow of a grid "
                    "(every thread of the block must reach it)"
                )
        block_body = Block(arg_types=[index])
        stretches: list[list[Operation]] = [[]]
        for o in list(body.ops)[:-1]:
            if isinstance(o, BarrierOp):
                stretches.append([])
            else:
                stretches[-1].append(o)
        stretch_of: dict[Operation | Block, int] = {o: i for i, stretch in enumerate(stretches) for o in stretch}
        for i, stretch in enumerate(stretches):
            for o in stretch:
                for nested in o.walk():
                    if any(stretch_of.get(operand.owner, i) != i for operand in nested.operands):
                        raise CompileError("internal error: a value crosses a block barrier of a grid")
        block_id, thread_id = body.args
        for stretch in stretches:
            thread_body = Block(arg_types=[index])
            _replace_uses_within(thread_id, thread_body.args[0], stretch)
            for o in stretch:
                o.detach()
            thread_body.add_ops([*stretch, scf.YieldOp()])
            block_body.add_op(scf.ForOp(zero, size, one, [], thread_body))
        block_id.replace_all_uses_with(block_body.args[0])
        block_body.add_op(scf.YieldOp())
        rewriter.replace(op, [zero, one, size, scf.ForOp(zero, op.num_blocks, one, [], block_body)], [])


def _replace_uses_within(value: SSAValue, new: SSAValue, ops: list[Operation]) -> None:
    inside = {nested for o in ops for nested in o.walk()}
    value.replace_uses_with_if(new, lambda use: use.operation in inside)


def _lower_shared_memory(op: SharedMemoryOp, rewriter: Rewriter) -> None:
    alloca = memref.AllocaOp.get(op.result.type.element_type, shape=[DYNAMIC_INDEX], dynamic_sizes=[op.size])
    rewriter.replace_op(op, alloca, [alloca.memref])


def _lower_warp_sum(op: loop.WarpSumOp, rewriter: Rewriter) -> None:
    """loop.warp_sum -> every lane's partial sum into memory, then the butterfly over them.

    MCUDA's way with a warp collective in a sequential emulation: the
    thread that reaches it runs the whole warp's part as a loop over lanes.
    Lane l's partial is the fold of the terms l, l + lanes, ... (the split the
    NVVM lowering makes); round `offset` adds partials l and l ^ offset, as
    `shfl.sync.bfly` does, into both; the thread takes its own lane's sum.
    """
    t = op.result.type
    lanes = op.lanes.value.data
    ops: list = []

    def const(value: int) -> SSAValue:
        c = arith.ConstantOp(IntegerAttr(value, index))
        ops.append(c)
        return c.result

    zero, one, warp = const(0), const(1), const(lanes)
    fzero = arith.ConstantOp(FloatAttr(0.0, cast(AnyFloat, t)))
    partials = memref.AllocaOp.get(t, shape=[lanes])
    ops += [fzero, partials]

    lane_body = Block(arg_types=[index])
    lane = lane_body.args[0]
    term_body = Block(arg_types=[index, t])
    terminator = op.body.block.last_op
    assert isinstance(terminator, loop.YieldOp)
    rewriter.replace_op(terminator, scf.YieldOp(*terminator.values))
    rewriter.inline_block(op.body.block, InsertPoint.at_end(term_body), list(term_body.args))
    fold = scf.ForOp(lane, op.extent, warp, [fzero.result], term_body)
    lane_body.add_ops([fold, memref.StoreOp.get(fold.results[0], partials.memref, [lane]), scf.YieldOp()])
    ops.append(scf.ForOp(zero, warp, one, [], lane_body))

    offset = lanes // 2
    while offset:
        pair_body = Block(arg_types=[index])
        lane = pair_body.args[0]
        offset_c = arith.ConstantOp(IntegerAttr(offset, index))
        partner = arith.XOrIOp(lane, offset_c)
        first = arith.CmpiOp(lane, partner, "ult")
        then = Block()
        a = memref.LoadOp.get(partials.memref, [lane])
        b = memref.LoadOp.get(partials.memref, [partner])
        total = arith.AddfOp(a, b)
        then.add_ops(
            [
                a,
                b,
                total,
                memref.StoreOp.get(total, partials.memref, [lane]),
                memref.StoreOp.get(total, partials.memref, [partner]),
                scf.YieldOp(),
            ]
        )
        pair_body.add_ops([offset_c, partner, first, scf.IfOp(first, [], [then]), scf.YieldOp()])
        ops.append(scf.ForOp(zero, warp, one, [], pair_body))
        offset //= 2
    mine = memref.LoadOp.get(partials.memref, [op.lane])
    ops.append(mine)
    rewriter.replace_op(op, ops, [mine.res])


class EmulateGridPass(ModulePass):
    """Lowers loop.grid to sequential scf.for loops (the CPU emulation of a cuda grid)."""

    name = "emulate-grid"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewriter = Rewriter()
        for warp_sum in [o for o in op.walk() if isinstance(o, loop.WarpSumOp)]:
            _lower_warp_sum(warp_sum, rewriter)
        for shared in [o for o in op.walk() if isinstance(o, SharedMemoryOp)]:
            _lower_shared_memory(shared, rewriter)
        PatternRewriteWalker(EmulateGrid(), apply_recursively=False).rewrite_module(op)
