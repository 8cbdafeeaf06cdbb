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
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

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


class EmulateGridPass(ModulePass):
    """Lowers loop.grid to sequential scf.for loops (the CPU emulation of a cuda grid)."""

    name = "emulate-grid"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(EmulateGrid(), apply_recursively=False).rewrite_module(op)
