"""graph-canonicalize: algebraic simplifications of the graph dialect.

Constant arithmetic folds to one constant, and identities that cost a
multiply or an add per edge and feature (`x * 1`, `x + 0`, `x / 1`, `- - x`)
disappear. Broadcasting can change a shape, so an identity is removed only
when the surviving operand already has the result's type.
"""

from __future__ import annotations

import math

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from gnnc.ir import graph

_FOLD = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: (
        a / b if b != 0 else (math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b))
    ),
    "max": lambda a, b: math.nan if math.isnan(a) or math.isnan(b) else max(a, b),
    "min": lambda a, b: math.nan if math.isnan(a) or math.isnan(b) else min(a, b),
}


def _constant(value: SSAValue) -> float | None:
    op = value.owner
    if isinstance(op, graph.ConstantOp):
        return op.value.value.data
    return None


class FoldConstantBinary(RewritePattern):
    """graph.binary of two constants -> one graph.constant."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.BinaryOp, rewriter: PatternRewriter) -> None:
        a, b = _constant(op.lhs), _constant(op.rhs)
        if a is None or b is None:
            return
        t = op.result.type
        assert isinstance(t, graph.ValueType)
        rewriter.replace(op, graph.ConstantOp(_FOLD[op.kind.data](a, b), t.element_type))


class RemoveIdentity(RewritePattern):
    """x * 1, 1 * x, x + 0, 0 + x, x - 0, x / 1 -> x (when x has the result's type)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.BinaryOp, rewriter: PatternRewriter) -> None:
        kind = op.kind.data
        a, b = _constant(op.lhs), _constant(op.rhs)
        keep: SSAValue | None = None
        if kind in ("mul", "div") and b == 1.0:
            keep = op.lhs
        elif kind == "mul" and a == 1.0:
            keep = op.rhs
        elif kind in ("add", "sub") and b == 0.0:
            keep = op.lhs
        elif kind == "add" and a == 0.0:
            keep = op.rhs
        if keep is not None and keep.type == op.result.type:
            rewriter.replace(op, [], [keep])


class DoubleNegation(RewritePattern):
    """graph.unary neg (graph.unary neg x) -> x."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.UnaryOp, rewriter: PatternRewriter) -> None:
        inner = op.operand.owner
        if op.kind.data == "neg" and isinstance(inner, graph.UnaryOp) and inner.kind.data == "neg":
            rewriter.replace(op, [], [inner.operand])


class GraphCanonicalizePass(ModulePass):
    """Folds constants and removes arithmetic identities in graph-dialect kernels."""

    name = "graph-canonicalize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FoldConstantBinary(), RemoveIdentity(), DoubleNegation()])
        ).rewrite_module(op)
