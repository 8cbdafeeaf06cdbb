"""How the lanes of a warp share one unit's work (warp_vertex, warp_edge; map-threads).

Every outermost feature loop is split over the lanes in tiles of `tile`
(default 1) consecutive indices, round robin, so a lane owns the same
feature elements in every loop of a destination and no lane reads what
another wrote. A loop writing per-thread scratch only at the index of a
loop inside it (a vector-matrix product) is interchanged with it first, so
the lanes split the written axis; a dot product's sum is split over the
lanes instead (`loop.warp_sum`); what still reads scratch at another lane's
indices is refused.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    FloatAttr,
    IndexType,
    IntegerAttr,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from gnnc.errors import CompileError
from gnnc.ir import abi, loop
from gnnc.ir.llvm_ext import AtomicRmwOp
from gnnc.ir.loop import DOT_REDUCTION_ATTR
from gnnc.ir.schedule import CudaSchedule
from gnnc.transforms.loop.thread_grids import PURE_OPS, Grid, const, scratch_access

index = IndexType()


def _outermost_feature_loops(grid_body: Block) -> list[loop.ForFeatureOp]:
    found = []
    for o in grid_body.walk():
        if isinstance(o, loop.ForFeatureOp):
            parent = o.parent_op()
            while parent is not None and not isinstance(parent, (loop.ForFeatureOp, loop.GridOp)):
                parent = parent.parent_op()
            if not isinstance(parent, loop.ForFeatureOp):
                found.append(o)
    return found


def _split_over_lanes(rewriter: Rewriter, op: loop.ForFeatureOp, lane: SSAValue, lanes: int, tile: int) -> None:
    """for_feature i < n -> lane `lane` runs tiles c = lane, lane + lanes, ... of `tile` indices each."""
    ops: list[Operation] = []
    one = const(ops, 1)
    tile_c = const(ops, tile)
    step = const(ops, lanes)
    less = arith.SubiOp(tile_c, one)
    total = arith.AddiOp(op.extent, less)
    tiles = arith.DivUIOp(total, tile_c)
    zero = const(ops, 0)
    ops += [less, total, tiles]
    tile_body = Block(arg_types=[index])
    c = tile_body.args[0]
    elem_body = Block(arg_types=[index])
    j = elem_body.args[0]
    base = arith.MuliOp(c, tile_c)
    i = arith.AddiOp(base, j)
    inside = arith.CmpiOp(i, op.extent, "ult")
    then = Block()
    elem_body.add_ops([base, i, inside, scf.IfOp(inside, [], [then]), scf.YieldOp()])
    tile_body.add_ops([scf.ForOp(zero, tile_c, one, [], elem_body), scf.YieldOp()])
    rewriter.inline_block(op.body.block, InsertPoint.at_end(then), [i.result])
    terminator = then.last_op
    assert isinstance(terminator, loop.YieldOp)
    rewriter.replace_op(terminator, scf.YieldOp())
    rewriter.replace_op(op, [*ops, scf.ForOp(lane, tiles, step, [], tile_body)], [])


def _outermost_feature_loop_of(op: Operation) -> loop.ForFeatureOp | None:
    found = None
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, loop.GridOp):
        if isinstance(parent, loop.ForFeatureOp):
            found = parent
        parent = parent.parent_op()
    return found


def _check_feeds_only(load: memref.LoadOp, stores: set[Operation], refuse: Callable[[str], CompileError]) -> None:
    """A shared buffer read where every lane runs the code may feed only the stores
    lane 0 makes: what another lane reads there is not ordered with lane 0's writes."""
    stack = [load.res]
    while stack:
        for use in stack.pop().uses:
            user = use.operation
            if user in stores:
                continue
            if (
                isinstance(
                    user,
                    memref.LoadOp
                    | memref.StoreOp
                    | AtomicRmwOp
                    | scf.ForOp
                    | scf.IfOp
                    | scf.YieldOp
                    | loop.YieldOp
                    | loop.ForFeatureOp
                    | loop.WarpSumOp,
                )
                or not user.results
            ):
                raise refuse(
                    "a result row is read back where every lane of the warp runs the code, and what it feeds is not "
                    "only lane 0's write of it"
                )
            stack.extend(user.results)


def _interchange_for_lanes(op: loop.ForFeatureOp, scratch: SSAValue) -> bool:
    """for i { pure(i); for j { t[j] = t[j] + f(i, j) } } -> for j { for i { pure(i); ... } },
    where the loop writes scratch only at the inner index: the lanes then split j and
    each owns its t[j] (a vector-matrix product `x @ W`, whose sum over i keeps
    its order). Returns whether it did."""
    i = op.body.block.args[0]
    ops = list(op.body.block.ops)[:-1]
    if not ops or not isinstance(ops[-1], loop.ForFeatureOp):
        return False
    inner = ops[-1]
    j = inner.body.block.args[0]
    if inner.extent.owner is not None and _inside(inner.extent, op):
        return False
    written: set[SSAValue] = set()
    for o in inner.walk():
        if isinstance(o, AtomicRmwOp):
            return False
        if isinstance(o, memref.StoreOp):
            found = scratch_access(o.indices[0]) if o.memref is scratch else None
            if found is None or found[1] is not j:
                return False
            written.add(found[0])
    if not written:
        return False
    for o in ops[:-1]:
        if o.regions or not isinstance(o, PURE_OPS + (arith.MulfOp, arith.AddfOp, arith.SubfOp)):
            return False
        if isinstance(o, memref.LoadOp) and o.memref is scratch:
            found = scratch_access(o.indices[0])
            if found is None or found[0] in written:
                return False
    inner_body = Block(arg_types=[index])
    new_i = inner_body.args[0]
    outer_body = Block(arg_types=[index])
    new_j = outer_body.args[0]
    mapper: dict[SSAValue, SSAValue] = {i: new_i, j: new_j}
    for o in ops[:-1]:
        inner_body.add_op(o.clone(value_mapper=mapper))
    for o in inner.body.block.ops:
        inner_body.add_op(o.clone(value_mapper=mapper))
    dim_i = op.dim.data if op.dim is not None else None
    dim_j = inner.dim.data if inner.dim is not None else None
    outer_body.add_ops([loop.ForFeatureOp(op.extent, inner_body, dim_i), loop.YieldOp()])
    Rewriter().replace_op(op, loop.ForFeatureOp(inner.extent, outer_body, dim_j), [])
    return True


def _inside(value: SSAValue, op: Operation) -> bool:
    owner = value.owner
    parent = owner.parent_op() if isinstance(owner, Operation) else owner.parent_op()
    while parent is not None:
        if parent is op:
            return True
        parent = parent.parent_op()
    return False


def distribute_over_lanes(
    rewriter: Rewriter, g: Grid, sched: CudaSchedule, lanes: int, fn: func.FuncOp, kernel: str
) -> None:
    """Shares one unit's work among a warp's lanes, or refuses the kernel with the reason.

    Every outermost feature loop is split over the lanes (lane-owned: a lane
    computes the elements of the tiles it owns) unless it holds a dot
    product: then the dot's sum is split over the lanes instead
    (`loop.warp_sum`, a butterfly of shuffles) and every lane runs the loop
    whole (replicated), so each lane's scratch slice holds every element of
    the dot. Each lane's scratch slice is its own, so a scratch region is
    sound when it is written only where replicated, or written and read only
    in split loops at their own index (a lane reads back what it wrote);
    writes to buffers shared by the lanes outside split loops are made by
    lane 0 alone, and what the lanes read there may feed only those writes.
    """
    strategy = sched.strategy
    fallback = strategy.replace("warp", "thread")
    body = g.op.body.block
    scratch = fn.body.block.args[abi.GRAPH_ARGUMENTS.index("scratch")]
    for candidate in _outermost_feature_loops(body):
        if not any(isinstance(o, scf.ForOp) and DOT_REDUCTION_ATTR in o.attributes for o in candidate.walk()):
            _interchange_for_lanes(candidate, scratch)
    reductions = [o for o in body.walk() if isinstance(o, scf.ForOp) and DOT_REDUCTION_ATTR in o.attributes]
    outer = _outermost_feature_loops(body)
    replicated_loops = {_outermost_feature_loop_of(r) for r in reductions} - {None}
    split_loops = [o for o in outer if o not in replicated_loops]

    def refuse(reason: str) -> CompileError:
        return CompileError(f"kernel '{kernel}': map {strategy} is refused: {reason}; use map {fallback}")

    def split_index(op: Operation) -> SSAValue | None:
        """The index of the split loop op is in, None where every lane runs it."""
        loop_op = _outermost_feature_loop_of(op)
        return loop_op.body.block.args[0] if loop_op is not None and loop_op not in replicated_loops else None

    accesses: dict[SSAValue, list[tuple[bool, SSAValue | None, SSAValue | None]]] = {}
    shared: set[SSAValue] = set()
    for o in body.walk():
        if isinstance(o, memref.StoreOp | memref.LoadOp) and o.memref is scratch:
            found = scratch_access(o.indices[0])
            if found is None:
                raise refuse("a per-thread scratch access has an index map-threads cannot attribute to a region")
            region, lead = found
            accesses.setdefault(region, []).append((isinstance(o, memref.StoreOp), lead, split_index(o)))
        elif isinstance(o, memref.StoreOp | AtomicRmwOp):
            shared.add(o.memref)
    for uses in accesses.values():
        if all(split is None for is_store, _, split in uses if is_store):
            continue  # replicated: every lane computes all of it in its own slice
        for is_store, lead, split in uses:
            if split is None or lead is not split:
                raise refuse(
                    "a value kept in per-thread scratch is "
                    + ("written" if is_store else "read")
                    + " at feature indices other than the ones a lane owns (the lanes split the feature loops; "
                    "a vector-matrix product `@`, or a per-destination value read across the split axis, would "
                    "need the lanes to exchange it)"
                )
    replicated_stores = [
        o
        for o in body.walk()
        if isinstance(o, memref.StoreOp | AtomicRmwOp) and o.memref is not scratch and split_index(o) is None
    ]
    # per-destination rows (an edge mapping's dst_scratch), which the lanes of a
    # group share: a region this grid only reads, any lane may read; one it
    # writes only outside split loops (lane 0 does) it may read there only to
    # feed those writes; else every access must be in a split loop at the
    # lane's own index
    destination_regions: dict[tuple, list[tuple[Operation, SSAValue | None, SSAValue | None]]] = {}
    for o in body.walk():
        if isinstance(o, memref.StoreOp | memref.LoadOp | AtomicRmwOp) and o.memref is not scratch:
            found = scratch_access(o.index if isinstance(o, AtomicRmwOp) else o.indices[0])
            if found is not None:
                destination_regions.setdefault((o.memref, found[0]), []).append((o, found[1], split_index(o)))
    for region_uses in destination_regions.values():
        if all(isinstance(o, memref.LoadOp) for o, _, _ in region_uses):
            continue
        if all(split is not None and lead is split for _, lead, split in region_uses):
            continue
        if all(split is None for _, _, split in region_uses):
            for o, _, _ in region_uses:
                if isinstance(o, memref.LoadOp):
                    _check_feeds_only(o, set(replicated_stores), refuse)
            continue
        raise refuse(
            "a per-destination value the lanes share is written and read at feature indices other than the ones "
            "a lane owns"
        )
    for o in body.walk():
        if isinstance(o, memref.LoadOp) and o.memref in shared and split_index(o) is None:
            found = scratch_access(o.indices[0])
            if found is not None:
                continue  # a per-destination row: checked above
            _check_feeds_only(o, set(replicated_stores), refuse)
    for r in reductions:
        init = r.iter_args[0].owner
        if not (
            len(r.iter_args) == 1
            and isinstance(init, arith.ConstantOp)
            and isinstance(init.value, FloatAttr | IntegerAttr)
            and init.value.value.data == 0.0
        ):
            raise refuse("a dot product's sum does not start at 0")
        block = r.body.block
        terminator = block.last_op
        assert isinstance(terminator, scf.YieldOp)
        rewriter.replace_op(terminator, loop.YieldOp(*terminator.operands))
        new_block = Block(arg_types=[index, r.results[0].type])
        rewriter.inline_block(block, InsertPoint.at_end(new_block), list(new_block.args))
        rewriter.replace_op(r, loop.WarpSumOp(r.ub, g.lane, new_block, r.results[0].type, lanes))
    for o in replicated_stores:
        # every lane reaches it with the same value: one of them writes it (an
        # update made by every lane would be made 32 times)
        zero = arith.ConstantOp(IntegerAttr(0, index))
        first_lane = arith.CmpiOp(g.lane, zero, "eq")
        then = Block()
        rewriter.insert_op([zero, first_lane, scf.IfOp(first_lane, [], [then])], InsertPoint.before(o))
        o.detach()
        then.add_ops([o, scf.YieldOp()])
    for feature_loop in split_loops:
        _split_over_lanes(rewriter, feature_loop, g.lane, lanes, sched.tile or 1)
