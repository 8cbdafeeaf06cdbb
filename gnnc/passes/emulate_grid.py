"""emulate-grid: a cuda grid becomes two loops, blocks then threads, on the CPU.

Threads of a grid have no barriers; they share memory only through atomics
(`llvm_ext.atomic_rmw`, the edge mappings' destination updates), and one
thread's atomic update, run alone, is the plain update. So running threads
one after another is one valid schedule of the GPU's execution; the body's
index arithmetic is unchanged, which is what the emulation tests check
against the reference. The atomics stay atomics: the CPU backend translates
them too, so the emulation also runs their compare-and-swap loops.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import FloatAttr, IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint, Rewriter

from gnnc.dialects import loop

index = IndexType()


class EmulateGrid(RewritePattern):
    """loop.grid -> scf.for over blocks { scf.for over threads { body } }."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.GridOp, rewriter: PatternRewriter) -> None:
        zero = arith.ConstantOp(IntegerAttr(0, index))
        one = arith.ConstantOp(IntegerAttr(1, index))
        size = arith.ConstantOp(IntegerAttr(op.block_size.value.data, index))
        thread_body = Block(arg_types=[index])
        block_body = Block(arg_types=[index])
        rewriter.inline_block(op.body.block, InsertPoint.at_end(thread_body), [block_body.args[0], thread_body.args[0]])
        terminator = thread_body.last_op
        assert isinstance(terminator, loop.YieldOp)
        rewriter.replace_op(terminator, scf.YieldOp())
        block_body.add_ops([scf.ForOp(zero, size, one, [], thread_body), scf.YieldOp()])
        rewriter.replace_op(op, [zero, one, size, scf.ForOp(zero, op.num_blocks, one, [], block_body)], [])


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

    def const(value: int):
        c = arith.ConstantOp(IntegerAttr(value, index))
        ops.append(c)
        return c.result

    zero, one, warp = const(0), const(1), const(lanes)
    fzero = arith.ConstantOp(FloatAttr(0.0, t))
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
        l = pair_body.args[0]
        offset_c = arith.ConstantOp(IntegerAttr(offset, index))
        partner = arith.XOrIOp(l, offset_c)
        first = arith.CmpiOp(l, partner, "ult")
        then = Block()
        a = memref.LoadOp.get(partials.memref, [l])
        b = memref.LoadOp.get(partials.memref, [partner])
        total = arith.AddfOp(a, b)
        then.add_ops([a, b, total, memref.StoreOp.get(total, partials.memref, [l]),
                      memref.StoreOp.get(total, partials.memref, [partner]), scf.YieldOp()])
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
        PatternRewriteWalker(EmulateGrid(), apply_recursively=False).rewrite_module(op)
