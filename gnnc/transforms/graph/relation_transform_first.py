"""relation-transform-first: a relation's transform once per (vertex, relation) pair, not per edge.

Hector's linear operator reordering and compact materialisation, for
`x[u] @ W[rel(e)]` (R-GCN, RGAT): the product depends on the edge only
through its source and its relation, so it is the same for every edge of one
(source, relation) pair. Computed once per distinct pair that the graph's
edges have (P of them, P <= E and P <= V x R) into compact rows, and gathered
per edge, it costs P x K x N multiply-adds instead of E x K x N; and since the
runtime numbers the pairs relation by relation, each relation's rows are one
contiguous run, a dense product by that relation's matrix (`segment-matmul`
makes it a blocked one). The same holds for a destination-only operand
(`x[v] @ W[rel(e)]`, RGAT's query) per (destination, relation) pair.

Before hoisting, a scalar factor of the matvec's operand is moved out
(`(a / c) @ M` -> `(a @ M) / c`, exact in real arithmetic), as the input
gradient of R-GCN has one (`gout[u] / deg_out(u, rel(e))`), and a sum of
source-only and destination-only terms is distributed (`(x[u] + x[v]) @
W[rel(e)]`), so both halves hoist.

Whether the compact form pays depends on the graph: P / E, which the
compiler does not know. The pass makes it (`form=compact`, or the kernel's
`relations compact` directive, the default); `form=per_edge` (`relations
per_edge`) keeps one transform per edge, fused into the edge walk. The
runtime picks per graph, at the first call, by counting pairs against edges
(`autotune/heuristic.py`, docs/design/heterogeneous.md): a decision made once
and cached on the graph, with the variant compiled once. The cuda grids have
no pair sweeps: their pipelines run the per-edge form.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr
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

from gnnc.errors import CompileError
from gnnc.ir import graph


class RelationForm(StrEnum):
    """Where a relation's transform of an edge's end is computed (`relations FORM`)."""

    #: once per distinct (vertex, relation) pair, in compact rows gathered per edge
    COMPACT = "compact"
    #: once per edge, inside the edge walk
    PER_EDGE = "per_edge"


#: The schedule entry of the directive this pass consumes (`relations compact|per_edge`).
SCHEDULE_KEY = "cpu.relations"


def _vtype(value: SSAValue) -> graph.ValueType:
    t = value.type
    assert isinstance(t, graph.ValueType)
    return t


def _side_of(value: SSAValue) -> str | None:
    """ "src" if value reads the edge only at its source and relation (inputs at `u`,
    parameters, relation rows, degrees at `u`), "dst" for the destination, None otherwise;
    a value reading neither end (a relation row alone) counts as the source's."""
    sides: set[str] = set()
    seen: set[SSAValue] = set()
    todo = [value]
    while todo:
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        op = x.owner
        if isinstance(op, graph.GatherOp):
            site = op.site.data
            if site in ("src", "dst"):
                sides.add(site)
            elif site not in ("param", "rel") or isinstance(op.tensor.owner, graph.MaterializeOp):
                return None
            continue
        if isinstance(op, graph.DegreeOp):
            if op.per_relation:
                return None
            sides.add(op.site.data)
            continue
        if isinstance(op, graph.ConstantOp):
            continue
        if not isinstance(op, graph.BinaryOp | graph.UnaryOp | graph.DotOp | graph.MatVecOp | graph.TransposeOp):
            return None
        todo.extend(op.operands)
    if len(sides) > 1:
        return None
    return next(iter(sides), "src")


def _reads_relation(value: SSAValue) -> bool:
    seen: set[SSAValue] = set()
    todo = [value]
    while todo:
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        op = x.owner
        if isinstance(op, graph.GatherOp) and op.site.data == "rel":
            return True
        if isinstance(op, Operation) and not isinstance(op, graph.GatherOp):
            todo.extend(op.operands)
    return False


def _computed_per_pair(value: SSAValue) -> bool:
    """Whether every use of value is (through elementwise ops) the operand of a pair materialisation."""
    uses = list(value.uses)
    for use in uses:
        user = use.operation
        if isinstance(user, graph.MaterializePairsOp):
            continue
        if not user.results or not all(_computed_per_pair(r) for r in user.results):
            return False
    return bool(uses)


def _worth_hoisting(op: graph.MatVecOp) -> bool:
    """A transform per pair beats one per edge when pairs are fewer than edges, unless K == 1:
    a product of one element per output costs no more than the read that replaces it."""
    k = _vtype(op.vector).shape[-1]
    return not (isinstance(k, int) and k < 2)


def _at_pair(value: SSAValue, before: Operation, rewriter: PatternRewriter) -> SSAValue:
    """The value at a pair of its side: every `src` read becomes `dst` (the pair's vertex,
    whichever side it is on in the graph), parameters and relation rows stay."""
    op = value.owner
    if isinstance(op, graph.GatherOp):
        if op.site.data != "src":
            return value
        new: Operation = graph.GatherOp(op.tensor, "dst")
    elif isinstance(op, graph.DegreeOp):
        if op.site.data != "src":
            return value
        new = graph.DegreeOp(op.direction.data, "dst", _vtype(value).element_type)
    elif isinstance(op, graph.ConstantOp):
        return value
    elif isinstance(op, graph.BinaryOp):
        new = graph.BinaryOp(op.kind.data, _at_pair(op.lhs, before, rewriter), _at_pair(op.rhs, before, rewriter))
    elif isinstance(op, graph.UnaryOp):
        slope = op.slope_value if op.slope is not None else None
        new = graph.UnaryOp(op.kind.data, _at_pair(op.operand, before, rewriter), slope)
    elif isinstance(op, graph.DotOp):
        new = graph.DotOp(_at_pair(op.lhs, before, rewriter), _at_pair(op.rhs, before, rewriter))
    elif isinstance(op, graph.MatVecOp):
        new = graph.MatVecOp(_at_pair(op.vector, before, rewriter), _at_pair(op.matrix, before, rewriter))
    elif isinstance(op, graph.TransposeOp):
        new = graph.TransposeOp(_at_pair(op.operand, before, rewriter))
    else:
        raise AssertionError(f"relation-transform-first: unexpected op in a pair value {op}")
    rewriter.insert(new, InsertPoint.before(before))
    return new.results[0]


class ScalarOutOfMatVec(RewritePattern):
    """matvec(a * s, M) or matvec(a / s, M) with s a scalar per edge -> matvec(a, M) * s (/ s)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.MatVecOp, rewriter: PatternRewriter) -> None:
        inner = op.vector.owner
        if not (op.per_edge_matrix and isinstance(inner, graph.BinaryOp) and inner.kind.data in ("mul", "div")):
            return
        want = _vtype(op.vector).shape
        for vector, scale in ((inner.lhs, inner.rhs), (inner.rhs, inner.lhs)):
            if inner.kind.data == "div" and vector is not inner.lhs:
                continue
            if _vtype(scale).shape == () and _vtype(vector).shape == want and _reads_relation(op.matrix):
                product = graph.MatVecOp(vector, op.matrix)
                rewriter.replace(op, [product, graph.BinaryOp(inner.kind.data, product.result, scale)])
                return


class DistributeRelationMatVec(RewritePattern):
    """(a + b) @ M[rel(e)] with a, b each of one end -> a @ M[rel(e)] + b @ M[rel(e)]."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.MatVecOp, rewriter: PatternRewriter) -> None:
        inner = op.vector.owner
        if not (
            op.per_edge_matrix
            and isinstance(inner, graph.BinaryOp)
            and inner.kind.data in ("add", "sub")
            and _vtype(inner.lhs).shape == _vtype(inner.rhs).shape == _vtype(op.vector).shape
            and _side_of(op.matrix) is not None
            and _side_of(op.vector) is None
            and _side_of(inner.lhs) is not None
            and _side_of(inner.rhs) is not None
            and _worth_hoisting(op)
        ):
            return
        lhs = graph.MatVecOp(inner.lhs, op.matrix)
        rhs = graph.MatVecOp(inner.rhs, op.matrix)
        rewriter.replace(op, [lhs, rhs, graph.BinaryOp(inner.kind.data, lhs.result, rhs.result)])


class HoistPairTransform(RewritePattern):
    """matvec(v, M[rel(e)]) reading one end of the edge and its relation ->
    gather(materialize_pairs(the matvec at the pair), src_rel or dst_rel)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.MatVecOp, rewriter: PatternRewriter) -> None:
        if not op.result.uses or not _worth_hoisting(op) or not _reads_relation(op.matrix):
            return
        if _computed_per_pair(op.result):
            return  # a value at the pair already: a pair sweep computes it
        side = _side_of(op.result)
        if side is None:
            return
        at_pair = _at_pair(op.result, op, rewriter)
        rows = graph.MaterializePairsOp(at_pair, side)
        rewriter.replace(op, [rows, graph.GatherOp(rows.result, graph.PAIR_SITES[side])])


def _form_of(fn: func.FuncOp, forced: RelationForm | None) -> RelationForm:
    if forced is not None:
        return forced
    attr = fn.attributes.get(graph.SCHEDULE)
    entry = attr.data.get(SCHEDULE_KEY) if isinstance(attr, DictionaryAttr) else None
    return RelationForm(entry.data) if isinstance(entry, StringAttr) else RelationForm.COMPACT


@dataclass(frozen=True)
class RelationTransformFirstPass(ModulePass):
    """Computes `x[u] @ W[rel(e)]` (and `x[v] @ W[rel(e)]`) once per (vertex, relation) pair."""

    name = "relation-transform-first"

    form: str | None = None
    """compact or per_edge for every kernel (`relations FORM`); none: each kernel's schedule
    decides, compact without one."""

    def __post_init__(self) -> None:
        if self.form is not None and self.form not in tuple(RelationForm):
            raise CompileError(f"{self.spec()}: unknown form; use one of {', '.join(RelationForm)}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        forced = RelationForm(self.form) if self.form is not None else None
        # the entry stays on the kernel (it is part of the schedule it was compiled with);
        # nothing after this pass reads it
        compact = [
            f
            for f in op.ops
            if isinstance(f, func.FuncOp)
            and graph.RESULT_NAMES in f.attributes
            and _form_of(f, forced) is RelationForm.COMPACT
        ]
        for fn in compact:
            PatternRewriteWalker(
                GreedyRewritePatternApplier([ScalarOutOfMatVec(), DistributeRelationMatVec()])
            ).rewrite_region(fn.body)
        # x[u] @ W[rel(e)] written twice (a training forward's saved intermediate repeats its
        # definition) is one product before it is hoisted: graph.materialize_pairs writes a
        # tensor, which CSE does not merge, so two hoists were two pair sweeps (RGAT's
        # training forward computed each transform twice)
        CommonSubexpressionElimination().apply(ctx, op)
        for fn in compact:
            PatternRewriteWalker(HoistPairTransform()).rewrite_region(fn.body)
        CommonSubexpressionElimination().apply(ctx, op)
        DeadCodeElimination().apply(ctx, op)
