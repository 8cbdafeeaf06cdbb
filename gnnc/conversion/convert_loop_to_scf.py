"""convert-loop-to-scf: the loop dialect's three loops become `scf.for`.

`loop.for_in_edges` reads its bounds from the in-CSR offsets and, per
position, the edge's source and user edge id; the other loops (destinations,
features, feature tiles, source partitions) are plain counted loops, and
`loop.dst_at` a load. Schedule dictionaries must have been consumed by the schedule
passes before this point: a loop that still carries one is an error, so a
schedule can never be dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.context import Context
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, IntegerType, ModuleOp, StringAttr, UnitAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from gnnc.errors import CompileError
from gnnc.ir import loop
from gnnc.ir.abi import INTERLEAVE_ATTR, NO_UNROLL_ATTR, NO_VECTORIZE_ATTR
from gnnc.ir.loop_structure import constant_index, encloses_loops

index = IndexType()


def _const(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, index))


PerIteration = Callable[[SSAValue], tuple[list[Operation], list[SSAValue]]]


def _to_scf_for(
    rewriter: PatternRewriter,
    op: Operation,
    lower: SSAValue,
    upper: SSAValue,
    prelude: list[Operation],
    body: Block,
    per_iteration: PerIteration | None = None,
    step: arith.ConstantOp | None = None,
    attributes: dict[str, Attribute] | None = None,
) -> None:
    """Replaces op by `scf.for` over [lower, upper) running body.

    `per_iteration(iv)` returns ops to run at the top of each iteration and
    the values that stand for body's arguments (default: just iv).
    """
    one = step or _const(1)
    new_body = Block(arg_types=[index])
    iv = new_body.args[0]
    ops, values = per_iteration(iv) if per_iteration else ([], [iv])
    new_body.add_ops(ops)
    rewriter.inline_block(body, InsertPoint.at_end(new_body), values)
    terminator = new_body.last_op
    assert isinstance(terminator, loop.YieldOp)
    rewriter.replace(terminator, scf.YieldOp())
    loop_op = scf.ForOp(lower, upper, one, [], new_body)
    loop_op.attributes.update(attributes or {})
    rewriter.replace(op, [*prelude, one, loop_op], [])


def _check_schedule_consumed(op: loop.ForDstOp | loop.ForInEdgesOp | loop.ForFeatureOp) -> None:
    left = dict(op.schedule.data) if op.schedule is not None else {}
    if isinstance(op, loop.ForDstOp):
        # a sequential loop in identity order is a valid execution of a parallel one
        left.pop("parallel", None)
        order = left.get("order")
        if isinstance(order, StringAttr) and order.data == "identity":
            del left["order"]
    if left:
        keys = ", ".join(sorted(left))
        raise CompileError(f"'{op.name}' still carries schedule {keys}: no pass implemented it")


class LowerForDst(RewritePattern):
    """loop.for_dst -> sequential scf.for over [0, num_vertices), worker 0.

    The CPU pipeline runs convert-loop-to-openmp first, which leaves no
    for_dst; this sequential form serves other pipelines and IR tests.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.ForDstOp, rewriter: PatternRewriter) -> None:
        _check_schedule_consumed(op)
        zero = _const(0)

        def per_vertex(v: SSAValue) -> tuple[list[Operation], list[SSAValue]]:
            return [], [v, zero.result]

        _to_scf_for(rewriter, op, zero.result, op.num_vertices, [zero], op.body.block, per_vertex)


class LowerForFeature(RewritePattern):
    """loop.for_feature -> scf.for over [0, extent); a head loop (one around other
    loops) is not to be vectorised (see abi.NO_VECTORIZE_ATTR); `rolled`, the
    loops LLVM is not to unroll (`_loops_kept_rolled`)."""

    def __init__(self, rolled: set[loop.ForFeatureOp]):
        self.rolled = rolled

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.ForFeatureOp, rewriter: PatternRewriter) -> None:
        _check_schedule_consumed(op)
        zero = _const(0)
        attributes: dict[str, Attribute] = {}
        if encloses_loops(op):
            attributes[NO_VECTORIZE_ATTR] = UnitAttr()
        if op in self.rolled:
            attributes[NO_UNROLL_ATTR] = UnitAttr()
            if NO_VECTORIZE_ATTR not in attributes:
                # four vectors per iteration, as LLVM picks for a row of run-time length
                attributes[INTERLEAVE_ATTR] = IntegerAttr(ROW_INTERLEAVE, IntegerType(64))
        _to_scf_for(rewriter, op, zero.result, op.extent, [zero], op.body.block, attributes=attributes)


#: A nest of feature loops of constant extents (a kernel specialised to its
#: sizes) is unrolled by LLVM into straight-line vector code when it covers at
#: most this many elements; a larger one stays a loop. Unrolled, a 256-element
#: row (gat at H = 4, F = 64) or a 512-element one (H = 4, F = 128) became
#: sixteen or thirty-two vector accumulators, more than the registers.
ROW_UNROLL_MAX_ELEMENTS = 128
#: The interleave count of such a row loop, innermost.
ROW_INTERLEAVE = 4


#: A row loop inside a head loop that stays a loop is unrolled up to this
#: many elements only; a longer one stays a loop too, four vectors an
#: iteration. Each head's row of 128 (H = 4) or 64 (H = 8) unrolled into
#: one block of loads and FMAs ran slower than the same row as a loop, the
#: more where the gathers are quick enough to queue up behind it
#: (docs/design/specialization.md).
ROW_UNROLL_MAX_IN_HEADS = 32


def _loops_kept_rolled(module: Operation) -> set[loop.ForFeatureOp]:
    """The feature loops to keep as loops: nests of more than ROW_UNROLL_MAX_ELEMENTS
    constant elements, and inside such a nest, rows of more than ROW_UNROLL_MAX_IN_HEADS."""
    kept = set()
    for outer in module.walk():
        if isinstance(outer, loop.ForFeatureOp):
            elements = _unrolled_elements(outer)
            if elements is not None and elements > ROW_UNROLL_MAX_ELEMENTS:
                kept.add(outer)
                for inner in outer.body.walk():
                    if isinstance(inner, loop.ForFeatureOp) and inner is not outer:
                        n = _unrolled_elements(inner)
                        if n is not None and n > ROW_UNROLL_MAX_IN_HEADS:
                            kept.add(inner)
    return kept


def _unrolled_elements(op: loop.ForFeatureOp) -> int | None:
    """Iterations of op's innermost bodies, over op and the feature loops inside it, if all are constant."""
    extent = constant_index(op.extent)
    if extent is None:
        return None
    inner = 1
    for nested in op.body.walk():
        if isinstance(nested, loop.ForFeatureOp) and nested is not op:
            n = _unrolled_elements(nested)
            if n is None:
                return None
            inner = max(inner, n)
    return extent * inner


class LowerForInEdges(RewritePattern):
    """loop.for_in_edges -> scf.for over [indptr[v], indptr[v+1]) loading src and eid; a walk
    over rows is not to be vectorised across edges (see abi.NO_VECTORIZE_ATTR). A walk of
    one scalar per edge (a kernel without feature dimensions) keeps LLVM's choice: its
    gathers are single values, not rows."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.ForInEdgesOp, rewriter: PatternRewriter) -> None:
        _check_schedule_consumed(op)
        one = _const(1)
        next_v = arith.AddiOp(op.dst, one)
        lo_raw = memref.LoadOp.get(op.indptr, [op.dst])
        hi_raw = memref.LoadOp.get(op.indptr, [next_v])
        lo = arith.IndexCastOp(lo_raw, index)
        hi = arith.IndexCastOp(hi_raw, index)

        def per_edge(pos: SSAValue) -> tuple[list[Operation], list[SSAValue]]:
            u_raw = memref.LoadOp.get(op.src, [pos])
            e_raw = memref.LoadOp.get(op.eid, [pos])
            u = arith.IndexCastOp(u_raw, index)
            e = arith.IndexCastOp(e_raw, index)
            return [u_raw, e_raw, u, e], [pos, u.result, e.result]

        _to_scf_for(
            rewriter,
            op,
            lo.result,
            hi.result,
            [one, next_v, lo_raw, hi_raw, lo, hi],
            op.body.block,
            per_edge,
            attributes={NO_VECTORIZE_ATTR: UnitAttr()} if encloses_loops(op) else None,
        )


class LowerForTile(RewritePattern):
    """loop.for_tile -> scf.for over [0, extent) by the tile size, width = min(size, extent - start)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.ForTileOp, rewriter: PatternRewriter) -> None:
        zero = _const(0)
        step = _const(op.size.value.data)

        def per_tile(start: SSAValue) -> tuple[list[Operation], list[SSAValue]]:
            remaining = arith.SubiOp(op.extent, start)
            width = arith.MinSIOp(remaining, step)
            return [remaining, width], [start, width.result]

        _to_scf_for(rewriter, op, zero.result, op.extent, [zero], op.body.block, per_tile, step)


class LowerForPartition(RewritePattern):
    """loop.for_partition -> scf.for over [0, count); the barrier is the worksharing's (convert-loop-to-openmp)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.ForPartitionOp, rewriter: PatternRewriter) -> None:
        zero, count = _const(0), _const(op.count.value.data)
        _to_scf_for(rewriter, op, zero.result, count.result, [zero, count], op.body.block)


class LowerDstAt(RewritePattern):
    """loop.dst_at -> memref.load + index_cast."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: loop.DstAtOp, rewriter: PatternRewriter) -> None:
        raw = memref.LoadOp.get(op.order, [op.position])
        cast = arith.IndexCastOp(raw, index)
        rewriter.replace(op, [raw, cast], [cast.result])


class ConvertLoopToScfPass(ModulePass):
    """Lowers the loop dialect's loops to scf.for and loop.dst_at to a load."""

    name = "convert-loop-to-scf"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [
                    LowerForTile(),
                    LowerForPartition(),
                    LowerForDst(),
                    LowerForInEdges(),
                    LowerForFeature(_loops_kept_rolled(op)),
                    LowerDstAt(),
                ]
            ),
            apply_recursively=True,
        ).rewrite_module(op)
