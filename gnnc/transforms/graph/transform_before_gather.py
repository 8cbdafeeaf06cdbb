"""transform-before-gather: dense transforms once per vertex, not once per edge.

Huang et al.'s redundancy bypassing. `x[u] @ W` inside an edge expression
costs K*N multiply-adds per edge, yet only depends on the source: it is the
same for every out-edge of u. Computed once per vertex (`y = x @ W`, a V*N
buffer written in an earlier phase) and gathered (`y[u]`), it costs V*K*N
plus an N-element read per edge. The same holds for a destination-only
operand (`x[v] @ W`), which the lowering would otherwise recompute in every
in-edge loop iteration of v.

The graph's size is unknown at compile time: the pass assumes E >= V (true of
every graph with at least as many edges as vertices, i.e. every GNN input
worth optimising), so hoisting wins whenever K >= 2 or K is symbolic. With
K == 1 a matvec per edge costs N multiplies, no more than the N-element read
that replaces it, and the pass leaves it alone (it would only add a phase).

`(x[u] + x[v]) @ W` is first distributed into `x[u] @ W + x[v] @ W` (exact in
real arithmetic; float32 rounding differs within the tests' tolerance), so
both halves hoist, and CSE then shares one `x @ W` for both.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint
from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination
from xdsl.transforms.dead_code_elimination import DeadCodeElimination

from gnnc.ir import graph


def _vtype(value: SSAValue) -> graph.ValueType:
    t = value.type
    assert isinstance(t, graph.ValueType)
    return t


def _reduced_operand(op: graph.MatVecOp | graph.DotOp) -> SSAValue:
    """The operand whose last axis the transform reduces: what the hoisted value is computed from."""
    return op.vector if isinstance(op, graph.MatVecOp) else op.lhs


def _worth_hoisting(op: graph.MatVecOp | graph.DotOp) -> bool:
    """Per vertex beats per edge when E >= V, unless K == 1 (see the module doc)."""
    k = _vtype(_reduced_operand(op)).shape[-1]
    return not (isinstance(k, int) and k < 2)


def _twin(op: graph.MatVecOp | graph.DotOp, rewriter: PatternRewriter) -> Operation:
    """The per-vertex form of a source-only transform: the same op on its operands' dst twins."""
    if isinstance(op, graph.MatVecOp):
        return graph.MatVecOp(_at_dst(op.vector, op, rewriter), op.matrix)
    return graph.DotOp(_at_dst(op.lhs, op, rewriter), _at_dst(op.rhs, op, rewriter))


def _same_op(op: graph.MatVecOp | graph.DotOp) -> Operation:
    if isinstance(op, graph.MatVecOp):
        return graph.MatVecOp(op.vector, op.matrix)
    return graph.DotOp(op.lhs, op.rhs)


def _separable(value: SSAValue) -> bool:
    """A sum / difference of source-only and destination-only terms of one shape."""
    t = _vtype(value)
    if t.kind in ("S", "D"):
        return True
    op = value.owner
    return (
        isinstance(op, graph.BinaryOp)
        and op.kind.data in ("add", "sub")
        and _vtype(op.lhs).shape == t.shape == _vtype(op.rhs).shape
        and _separable(op.lhs)
        and _separable(op.rhs)
    )


def _used_per_edge(value: SSAValue) -> bool:
    """Whether some use evaluates value in an in-edge loop (an edge-context consumer)."""
    for use in value.uses:
        user = use.operation
        if isinstance(user, graph.AggregateOp | graph.EdgeSoftmaxOp):
            return True
        if isinstance(user, graph.MaterializeOp | func.ReturnOp) or not user.results:
            continue
        rtype = user.results[0].type
        if isinstance(rtype, graph.ValueType):
            if rtype.kind in ("E", "S"):
                return True
            if rtype.kind in ("D", "A") and _used_per_edge(user.results[0]):
                return True
    return False


def _at_dst(value: SSAValue, before: Operation, rewriter: PatternRewriter) -> SSAValue:
    """The destination-side twin of a source-only (S) value: every `src` read becomes `dst`."""
    t = _vtype(value)
    if t.kind == "P":
        return value
    assert t.kind == "S", "only source-only values have a destination twin"
    op = value.owner
    new: Operation
    if isinstance(op, graph.GatherOp):
        new = graph.GatherOp(op.tensor, "dst")
    elif isinstance(op, graph.DegreeOp):
        assert not op.per_relation, "a degree per relation is an edge value, not source-only"
        new = graph.DegreeOp(op.direction.data, "dst", t.element_type)
    elif isinstance(op, graph.BinaryOp):
        new = graph.BinaryOp(op.kind.data, _at_dst(op.lhs, before, rewriter), _at_dst(op.rhs, before, rewriter))
    elif isinstance(op, graph.UnaryOp):
        slope = op.slope_value if op.slope is not None else None
        new = graph.UnaryOp(op.kind.data, _at_dst(op.operand, before, rewriter), slope)
    elif isinstance(op, graph.DotOp):
        new = graph.DotOp(_at_dst(op.lhs, before, rewriter), _at_dst(op.rhs, before, rewriter))
    elif isinstance(op, graph.MatVecOp):
        new = graph.MatVecOp(_at_dst(op.vector, before, rewriter), op.matrix)
    elif isinstance(op, graph.OuterOp):
        new = graph.OuterOp(_at_dst(op.lhs, before, rewriter), _at_dst(op.rhs, before, rewriter))
    elif isinstance(op, graph.TransposeOp):
        new = graph.TransposeOp(_at_dst(op.operand, before, rewriter))
    else:
        raise AssertionError(f"transform-before-gather: unexpected source-only op {op}")
    rewriter.insert(new, InsertPoint.before(before))
    return new.results[0]


class DistributeMatVec(RewritePattern):
    """(a + b) @ W with a, b source- or destination-only -> a @ W + b @ W."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.MatVecOp, rewriter: PatternRewriter) -> None:
        inner = op.vector.owner
        if not (
            isinstance(inner, graph.BinaryOp)
            and not op.per_edge_matrix
            and _vtype(op.vector).kind == "E"
            and _separable(op.vector)
            and _worth_hoisting(op)
        ):
            return
        lhs = graph.MatVecOp(inner.lhs, op.matrix)
        rhs = graph.MatVecOp(inner.rhs, op.matrix)
        rewriter.replace(op, [lhs, rhs, graph.BinaryOp(inner.kind.data, lhs.result, rhs.result)])


class HoistSourceTransform(RewritePattern):
    """matvec(S value, W) -> gather(materialize(matvec(its dst twin, W)), src); the same for
    dot(S value, S or P value), e.g. GAT's attention projection `dot(h[u], a)`."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, graph.MatVecOp | graph.DotOp):
            return
        if _vtype(op.results[0]).kind != "S" or not _worth_hoisting(op) or not op.results[0].uses:
            return
        per_vertex = _twin(op, rewriter)
        tensor = graph.MaterializeOp(per_vertex.results[0])
        rewriter.replace(op, [per_vertex, tensor, graph.GatherOp(tensor.result, "src")])


class HoistDestinationTransform(RewritePattern):
    """matvec(D value, W) or dot(D, D or P) read in an edge loop -> gather(materialize(it), dst)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, graph.MatVecOp | graph.DotOp):
            return
        if _vtype(op.results[0]).kind != "D" or not _worth_hoisting(op) or not _used_per_edge(op.results[0]):
            return
        per_vertex = _same_op(op)
        tensor = graph.MaterializeOp(per_vertex.results[0])
        rewriter.replace(op, [per_vertex, tensor, graph.GatherOp(tensor.result, "dst")])


class MergeMaterialize(RewritePattern):
    """Two graph.materialize of one value -> the first one (one buffer, one phase)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.MaterializeOp, rewriter: PatternRewriter) -> None:
        for use in op.operand.uses:
            other = use.operation
            if other is not op and isinstance(other, graph.MaterializeOp) and other.parent_block() is op.parent_block():
                block = op.parent_block()
                assert block is not None
                if block.get_operation_index(other) < block.get_operation_index(op):
                    rewriter.replace_all_uses_with(op.result, other.result)
                    rewriter.erase(op)
                    return


class TransformBeforeGatherPass(ModulePass):
    """Computes source- and destination-only matvecs and dots once per vertex instead of per edge."""

    name = "transform-before-gather"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([DistributeMatVec(), HoistSourceTransform(), HoistDestinationTransform()])
        ).rewrite_module(op)
        # x[u] @ W and x[v] @ W both became x[v] @ W materialised: CSE makes
        # the twins one value, then their materialisations one tensor.
        CommonSubexpressionElimination().apply(ctx, op)
        PatternRewriteWalker(MergeMaterialize()).rewrite_module(op)
        CommonSubexpressionElimination().apply(ctx, op)
        DeadCodeElimination().apply(ctx, op)
