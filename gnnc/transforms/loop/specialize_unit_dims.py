"""specialize-unit-dims: a second copy of each destination's work for a head axis of size 1.

A head axis (the `H` of `h: f32[V, H, F]`) is an outer feature axis: its
loops enclose other loops. Its size is known only at call time, so
per-head accumulators (softmax maxima and sums, one per head) live in
scratch memory indexed by the head, and every edge updates them through a
load and a store. Most models run one head, and then the accumulators could
be registers: with `H == 1` every loop over the axis is one iteration, LLVM
deletes it, the addresses become loop-invariant and the accumulators are
promoted.

This pass versions the body of every `loop.for_dst` on `H == 1`: the copy
has the axis's loops at extent 1, the original stays for other sizes. Any
outer axis qualifies (the input axis of a `@` encloses its output axis too;
the heads of a multi-head `dot` enclose its reduction); the first one
found is versioned, so the code at most doubles.

Destination loops whose schedule restructures the body later
(hilbert-edge-order, partition-sources, tile-features) are left alone: those
passes expect the body's loops directly in it. vectorize-rows does not: it
copies the whole body, versioned or not, into each row slice, so a sliced
gat keeps its literal head count (without it a sliced gat ran slower than
the kernel as compiled). Measurements: docs/design/specialization.md.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from gnnc.ir import loop
from gnnc.ir.loop_structure import axis_loops, constant_index, encloses_loops, row_dim

index = IndexType()

#: Discardable scf.if attribute: the dimension whose size 1 the then-copy is for.
UNIT_DIM_ATTR = "gnnc.unit_dim"

#: Schedule entries whose transformations need the destination body unversioned.
RESTRUCTURING = ("partition", "edges", "tile")


def head_axes(for_dst: loop.ForDstOp) -> list[SSAValue]:
    """Extents of feature loops that enclose another loop (a feature loop or a dot's reduction)."""
    found: list[SSAValue] = []
    for op in for_dst.body.walk():
        if isinstance(op, loop.ForFeatureOp) and op.extent not in found:
            if encloses_loops(op):
                found.append(op.extent)
    return found


def _derived_outside(for_dst: loop.ForDstOp, axis: SSAValue) -> list[Operation]:
    """The arith ops before for_dst (in its block and the blocks around it) that compute
    from the axis: strides, row sizes, scratch offsets, in program order."""
    chain: list[Operation] = []
    derived = {axis}
    inner: Operation = for_dst
    while (block := inner.parent_block()) is not None:
        before = []
        for op in block.ops:
            if op is inner:
                break
            before.append(op)
        for op in before:
            if op.dialect_name() == "arith" and len(op.results) == 1 and any(x in derived for x in op.operands):
                derived.add(op.results[0])
                chain.append(op)
        parent = block.parent_op()
        if parent is None or isinstance(parent, func.FuncOp):
            break
        inner = parent
    return chain


def _specialize(for_dst: loop.ForDstOp, axis: SSAValue) -> None:
    names = {
        op.dim.data
        for op in for_dst.body.walk()
        if isinstance(op, loop.ForFeatureOp) and op.extent is axis and op.dim is not None
    }
    body = for_dst.body.block
    terminator = body.last_op
    assert isinstance(terminator, loop.YieldOp)
    work = list(body.ops)[:-1]
    one = arith.ConstantOp(IntegerAttr(1, index))
    is_one = arith.CmpiOp(axis, one, "eq")

    unit, general = Block(), Block()
    # the copy recomputes what derives from the axis with 1 for it, so that
    # LLVM folds strides and offsets to constants and drops loops over the axis
    # (a prefetch loop over an H-wide row, say), not only the copy's own loops
    mapping: dict[SSAValue, SSAValue] = {axis: one.result}
    for op in _derived_outside(for_dst, axis):
        unit.add_op(op.clone(value_mapper=mapping))
    for op in work:
        unit.add_op(op.clone(value_mapper=mapping))
    for op in work:
        op.detach()
        general.add_op(op)
    unit.add_op(scf.YieldOp())
    general.add_op(scf.YieldOp())
    versioned = scf.IfOp(is_one, [], Region(unit), Region(general))
    if names:
        versioned.attributes[UNIT_DIM_ATTR] = StringAttr(min(names))
    body.insert_ops_before([one, is_one, versioned], terminator)


def versioned_axis(for_dst: loop.ForDstOp) -> SSAValue | None:
    """The axis a sweep's body is versioned on by this pass (its whole body an `scf.if` on
    axis == 1), else None."""
    ops = list(for_dst.body.block.ops)
    if len(ops) != 4:
        return None
    one, is_one, versioned, _ = ops
    if (
        isinstance(one, arith.ConstantOp)
        and isinstance(is_one, arith.CmpiOp)
        and is_one.rhs is one.result
        and isinstance(versioned, scf.IfOp)
        and versioned.cond is is_one.result
        and versioned.false_region.blocks
    ):
        return is_one.lhs
    return None


def unversion(for_dst: loop.ForDstOp) -> None:
    """Undoes this pass on a sweep: its body is the general copy again, as if the pass had
    left it alone. A pass given a restructuring directive as an option, which this pass
    would have seen in the schedule, calls it first."""
    if versioned_axis(for_dst) is None:
        return
    body = for_dst.body.block
    one, is_one, versioned, terminator = list(body.ops)
    assert isinstance(versioned, scf.IfOp)
    general = versioned.false_region.block
    for op in list(general.ops)[:-1]:
        op.detach()
        body.insert_op_before(op, terminator)
    for op in (versioned, is_one, one):
        op.detach()
        op.erase()


class SpecializeUnitDimsPass(ModulePass):
    """Versions each destination loop's body on its head axis being 1."""

    name = "specialize-unit-dims"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for for_dst in [o for o in op.walk() if isinstance(o, loop.ForDstOp)]:
            schedule = for_dst.schedule.data if for_dst.schedule is not None else {}
            if any(key in schedule for key in RESTRUCTURING):
                continue
            if not any(isinstance(o, loop.ForInEdgesOp) for o in for_dst.body.walk()):
                # a source sweep (a hoisted x[u] @ W) keeps nothing per head across edges
                continue
            axes = head_axes(for_dst)
            if "vectorize" in schedule:
                # vectorize-rows slices the row axis: a versioned copy with that axis at 1 has nothing to slice
                sliced = {o.extent for o in axis_loops(for_dst.body.block, row_dim(for_dst))}
                axes = [a for a in axes if a not in sliced]
            # an axis of a size compiled in (`specialize H 4`) has its loops' trip count already:
            # a copy for 1 would be dead code (or the code itself, at 1)
            axes = [a for a in axes if constant_index(a) is None]
            if axes:
                # one axis: two copies of the body, not 2^axes
                _specialize(for_dst, axes[0])
