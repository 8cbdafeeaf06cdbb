"""deferred-division: softmax-weighted sums divide once per destination.

The linear property (Huang et al.): with m = max(s) and z = sum(exp(s - m))
over v's in-edges,

    sum(softmax(s) * X) = sum(exp(s - m) * X) / z

so the per-edge division by z disappears: one reciprocal per destination (and
head: z has s's shape, X may have more axes) and one multiply per output
element remain. More important on the CPU, the weighted sum no longer waits
for z: it accumulates in the same in-edge loop as z (two loops per
destination, max then sum, instead of three).

Empty in-edge sets: both sums are 0 there, and softmax's answer is 0, so the
reciprocal is of max(z, 1e-30) (0 * 1e30 = 0; 1e30 is a finite f32). For a
non-empty set z >= 1 (the largest term is exp(0)), and the max is a no-op;
NaN in s makes z NaN through exp(NaN - m), which max propagates (as the
reference's softmax does); so m itself need not carry NaN, and is marked a
`stabilizer` (NaN-ignoring maxnum, atomic fmax on the GPU).

Other uses of the softmax (an `alpha[e]` result) become exp(s - m) * (1 / z).
The lowering stores exp(s - m) in the walk that accumulates z and the
weighted sum, and scales the stored weights by 1 / z in a last walk that only
reads and writes them (`convert-graph-to-loop`'s rescaled edge results), so
each weight's exp is evaluated once, not twice, and no walk waits for z
except that light one. The accumulating row stays in the output (see
`convert-graph-to-loop`). Measurements: docs/design/fusion.md.
"""

from __future__ import annotations

from typing import cast

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from gnnc.ir import graph

#: Divides the empty-set 0 by something nonzero; below every non-empty sum (>= 1).
TINY = 1e-30


def _weighted_sums(softmax: SSAValue) -> list[tuple[graph.AggregateOp, graph.BinaryOp, int]]:
    """(aggregate sum, mul, position of the softmax in the mul) for each sum(softmax * X)."""
    found = []
    for use in softmax.uses:
        mul = use.operation
        if not (isinstance(mul, graph.BinaryOp) and mul.kind.data == "mul"):
            continue
        for mul_use in mul.result.uses:
            agg = mul_use.operation
            if isinstance(agg, graph.AggregateOp) and agg.kind.data == "sum":
                found.append((agg, mul, use.index))
    return found


class DeferSoftmaxDivision(RewritePattern):
    """sum(edge_softmax(s) * X) -> sum(exp(s - m) * X) * (1 / max(sum(exp(s - m)), tiny))."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.EdgeSoftmaxOp, rewriter: PatternRewriter) -> None:
        s = op.operand
        t = s.type
        assert isinstance(t, graph.ValueType)
        # s - m must be an edge value: a destination-only s would make it A
        if t.kind not in ("S", "E"):
            return
        sums = _weighted_sums(op.result)
        if not sums:
            return
        if any(len(list(mul.result.uses)) != 1 for _, mul, _ in sums):
            return
        m = graph.AggregateOp("max", s, stabilizer=True)
        ex = graph.UnaryOp("exp", graph.BinaryOp("sub", s, m.result).result)
        shifted = cast(graph.BinaryOp, ex.operand.owner)
        z = graph.AggregateOp("sum", ex.result)
        tiny = graph.ConstantOp(TINY, t.element_type)
        one = graph.ConstantOp(1.0, t.element_type)
        safe_z = graph.BinaryOp("max", z.result, tiny.result)
        inv_z = graph.BinaryOp("div", one.result, safe_z.result)
        for new in (m, shifted, ex, z, tiny, one, safe_z, inv_z):
            rewriter.insert(new, InsertPoint.before(op))
        for agg, mul, position in sums:
            operands = [mul.lhs, mul.rhs]
            operands[position] = ex.result
            weighted = graph.BinaryOp("mul", *operands)
            numerator = graph.AggregateOp("sum", weighted.result)
            rewriter.replace(agg, [weighted, numerator, graph.BinaryOp("mul", numerator.result, inv_z.result)])
            if not mul.result.uses:
                rewriter.erase(mul)
        if op.result.uses:
            # exp(s - m) * (1 / z), not exp(s - m) / z: the lowering can then
            # store the exponentials early and scale them once z is known
            rewriter.replace(op, graph.BinaryOp("mul", ex.result, inv_z.result))
        else:
            rewriter.erase(op)


class DeferredDivisionPass(ModulePass):
    """Divides softmax-weighted sums once per destination instead of once per edge."""

    name = "deferred-division"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(DeferSoftmaxDivision()).rewrite_module(op)
