"""map-threads: a kernel's `loop.for_dst` loops become cuda grids (`loop.grid`).

The mapping comes from the kernel's `schedule K for cuda { map ... }` (carried
on the function as `gnnc.cuda_map`) or the default, thread_vertex. In a grid,
the index arithmetic of the mapping is explicit IR in the grid's body, so the
CPU emulation (`emulate-grid`) and the NVVM lowering run the same arithmetic,
and the emulation's comparison with the reference checks it.

thread_vertex (uGrapher; Seastar's vertex-parallel, edge-sequential form):
thread `g = block * block_size + thread` handles the `group` consecutive
destinations `g * group + k`, each with its in-edges in order; scratch slice
`g` is the thread's own.

warp_vertex (uGrapher): the 32 lanes of warp `w = g / 32` handle the `group`
destinations `w * group + k`; every outermost feature loop is split over the
lanes in tiles of `tile` (default 1) consecutive indices, round robin, so a
lane owns the same feature elements in every loop of a destination and no
lane reads what another wrote. A loop writing per-thread scratch only at the
index of a loop inside it (a vector-matrix product) is interchanged with it
first, so the lanes split the written axis; what still reads scratch at
another lane's indices is refused.

thread_edge / warp_edge (uGrapher): thread (warp) `g` handles the `group`
consecutive in-CSR positions `g * group + k`; an edge finds its destination
by a binary search of `in_indptr` (so the compiled code needs no per-edge
destination array), and updates the destination's row with atomics
(`llvm_ext.atomic_rmw`: fadd for sum / mean, fmaximum / fminimum for max /
min, which propagate NaN as the sequential code does, fmax for a softmax's
stabilizing max, which need not). A destination's
per-vertex work around its edge walk runs in vertex grids of its own, one
thread (warp) per destination: initialising the rows (0, -inf, +inf) before
the edge grid, and after it dividing means, setting the rows of vertices
with no in-edges to 0 and storing vertex results. Each grid is a launch of
its own, which orders them. An aggregation kept in per-thread scratch
because it is combined with other terms at `v` (gin's sum beside
(1 + eps) * x[v], a quotient of two sums) moves to the destination's row of
`dst_scratch`, a scratch slice per vertex the runtime passes after the
temps: edge threads update it with atomics, the vertex launch after the
edges reads it. A destination that walks its edges several times (softmax:
the max, then the exponentials' sum beside the weighted sum, then the
normalised weights) becomes an edge launch per walk with vertex launches
between them, the values between walks kept in `dst_scratch` too.

`hybrid K` (FeatGraph's hybrid partitioning, any mapping): the rows of the up
to K sources of highest out-degree are kept in each block's shared memory.
The runtime ranks the sources once per graph (`plans.hybrid_sources`) and
passes two arrays after the kernel's others: `hybrid_hot` (K', then the K'
staged sources by slot) and `hybrid_slot` (per vertex its slot, -1 for
none); K' is K capped by the 48 KB a block may use. A grid whose edges read
source rows (`x[u]`, any V-leading buffer it does not write) starts with
every thread of the block copying a strided share of the K' rows of each
such buffer into shared memory (`llvm_ext.shared_memory`, coalesced: thread
t copies elements t, t + block_size, ...), then `llvm_ext.barrier`; an edge
then reads `x[u]` from shared memory when `slot[u] >= 0`, else from global
memory (the code after the slot is emitted once for each case, so that
each version's loads have one address space). The shared layout is, per
staged buffer in order, K' rows of its
row size; the record lists the row sizes of each launch (`shared`), from
which the runtime sizes the launch's dynamic shared memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, math, memref, scf
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from gnnc.errors import CompileError
from gnnc.ir import abi, kernel_abi, loop
from gnnc.ir.llvm_ext import AtomicRmwOp, BarrierOp, SharedMemoryOp
from gnnc.ir.loop import CUDA_MAP_ATTR, DOT_REDUCTION_ATTR, SCRATCH_BASE_ATTR
from gnnc.ir.schedule import CudaSchedule

index = IndexType()

#: Threads that share one destination (or edge group), per mapping.
LANES = {"thread_vertex": 1, "warp_vertex": loop.WARP_SIZE, "thread_edge": 1, "warp_edge": loop.WARP_SIZE}

#: The vertex mapping an edge mapping runs its per-destination work with.
VERTEX_MAPPING_OF = {"thread_edge": "thread_vertex", "warp_edge": "warp_vertex"}


def _const(ops: list[Operation], value: int) -> SSAValue:
    op = arith.ConstantOp(IntegerAttr(value, index))
    ops.append(op)
    return op.result


def _check_loop_schedule(op: loop.ForDstOp) -> None:
    """Only the CPU defaults may remain: cuda compiles drop `for cpu` schedules."""
    left = dict(op.schedule.data) if op.schedule is not None else {}
    left.pop("parallel", None)
    left.pop("prefetch", None)  # a CPU cache hint; GPUs hide latency with warps instead
    order = left.pop("order", None)
    if isinstance(order, StringAttr) and order.data != "identity":
        raise CompileError(f"destination order '{order.data}' is not implemented for the cuda target")
    if left:
        raise CompileError(f"CPU schedule {', '.join(sorted(left))} does not apply to the cuda target")


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
    one = _const(ops, 1)
    tile_c = _const(ops, tile)
    step = _const(ops, lanes)
    less = arith.SubiOp(tile_c, one)
    total = arith.AddiOp(op.extent, less)
    tiles = arith.DivUIOp(total, tile_c)
    zero = _const(ops, 0)
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


def _ceil_div(pre: list[Operation], a: SSAValue, b: SSAValue) -> SSAValue:
    one = _const(pre, 1)
    less = arith.SubiOp(b, one)
    total = arith.AddiOp(a, less)
    quotient = arith.DivUIOp(total, b)
    pre.extend([less, total, quotient])
    return quotient.result


@dataclass
class _Grid:
    """A grid whose `units` groups of `lanes` threads each run `group` consecutive items
    of [0, count): `then` runs for item `item` (guarded by item < count)."""

    pre: list[Operation]
    op: loop.GridOp
    then: Block
    item: SSAValue
    gid: SSAValue
    lane: SSAValue


def _build_grid(count: SSAValue, group_size: int, lanes: int, block_size_value: int, mapping: str) -> _Grid:
    pre: list[Operation] = []
    group = _const(pre, group_size)
    block_size = _const(pre, block_size_value)
    lanes_c = _const(pre, lanes)
    one = _const(pre, 1)
    units = _ceil_div(pre, count, group)
    threads = arith.MuliOp(units, lanes_c)
    pre.append(threads)
    blocks = _ceil_div(pre, threads.result, block_size)

    body = Block(arg_types=[index, index])
    b, t = body.args
    scaled = arith.MuliOp(b, block_size)
    gid = arith.AddiOp(scaled, t)
    unit = arith.DivUIOp(gid, lanes_c)
    lane = arith.RemUIOp(gid, lanes_c)
    first = arith.MuliOp(unit, group)
    zero = arith.ConstantOp(IntegerAttr(0, index))
    inner = Block(arg_types=[index])
    k = inner.args[0]
    item = arith.AddiOp(first, k)
    inside = arith.CmpiOp(item, count, "ult")
    then = Block()
    inner.add_ops([item, inside, scf.IfOp(inside, [], [then]), scf.YieldOp()])
    for_k = scf.ForOp(zero, group, one, [], inner)
    body.add_ops([scaled, gid, unit, lane, first, zero, for_k, loop.YieldOp()])
    grid = loop.GridOp(blocks, block_size_value, mapping, body)
    return _Grid(pre, grid, then, item.result, gid.result, lane.result)


def _end_then(rewriter: Rewriter, then: Block) -> None:
    terminator = then.last_op
    assert isinstance(terminator, loop.YieldOp)
    rewriter.replace_op(terminator, scf.YieldOp())


def map_vertex(
    op: loop.ForDstOp,
    sched: CudaSchedule,
    lanes: int,
    fn: func.FuncOp,
    kernel: str,
    mapping: str | None = None,
    group: int | None = None,
) -> loop.GridOp:
    """for_dst -> a grid where each group of `lanes` threads runs `group` consecutive
    destinations; with several lanes, the lanes split every outermost feature loop
    in tiles of `sched.tile` (default 1) indices, round robin."""
    rewriter = Rewriter()
    g = _build_grid(op.num_vertices, group or sched.group, lanes, sched.block_size, mapping or sched.strategy)
    rewriter.inline_block(op.body.block, InsertPoint.at_end(g.then), [g.item, g.gid])
    _end_then(rewriter, g.then)
    if lanes > 1:
        _distribute_over_lanes(rewriter, g, sched, lanes, fn, kernel)
    rewriter.replace_op(op, [*g.pre, g.op], [])
    return g.op


# ------------------------------------------------- a warp's lanes on one unit


def _outermost_feature_loop_of(op: Operation) -> loop.ForFeatureOp | None:
    found = None
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, loop.GridOp):
        if isinstance(parent, loop.ForFeatureOp):
            found = parent
        parent = parent.parent_op()
    return found


def _scratch_access(index_value: SSAValue) -> tuple[SSAValue, SSAValue | None] | None:
    """(region, leading index) of a scratch access `base + row-major offset`, as
    convert-graph-to-loop's `linear` builds it; the region is the base's offset."""
    owner = index_value.owner
    if isinstance(owner, arith.AddiOp) and SCRATCH_BASE_ATTR in owner.attributes:
        return owner.rhs, None  # a scalar region
    if not (
        isinstance(owner, arith.AddiOp)
        and isinstance(owner.lhs.owner, arith.AddiOp)
        and SCRATCH_BASE_ATTR in owner.lhs.owner.attributes
    ):
        return None
    offset = owner.rhs
    while isinstance(offset.owner, arith.AddiOp) and isinstance(offset.owner.lhs.owner, arith.MuliOp):
        offset = offset.owner.lhs.owner.lhs
    return owner.lhs.owner.rhs, offset


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
            found = _scratch_access(o.indices[0]) if o.memref is scratch else None
            if found is None or found[1] is not j:
                return False
            written.add(found[0])
    if not written:
        return False
    for o in ops[:-1]:
        if o.regions or not isinstance(o, _PURE + (arith.MulfOp, arith.AddfOp, arith.SubfOp)):
            return False
        if isinstance(o, memref.LoadOp) and o.memref is scratch:
            found = _scratch_access(o.indices[0])
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


def _distribute_over_lanes(
    rewriter: Rewriter, g: _Grid, sched: CudaSchedule, lanes: int, fn: func.FuncOp, kernel: str
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
            found = _scratch_access(o.indices[0])
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
            found = _scratch_access(o.index if isinstance(o, AtomicRmwOp) else o.indices[0])
            if found is not None:
                destination_regions.setdefault((o.memref, found[0]), []).append((o, found[1], split_index(o)))
    for uses in destination_regions.values():
        if all(isinstance(o, memref.LoadOp) for o, _, _ in uses):
            continue
        if all(split is not None and lead is split for _, lead, split in uses):
            continue
        if all(split is None for _, _, split in uses):
            for o, _, _ in uses:
                if isinstance(o, memref.LoadOp):
                    _check_feeds_only(o, set(replicated_stores), refuse)
            continue
        raise refuse(
            "a per-destination value the lanes share is written and read at feature indices other than the ones "
            "a lane owns"
        )
    for o in body.walk():
        if isinstance(o, memref.LoadOp) and o.memref in shared and split_index(o) is None:
            found = _scratch_access(o.indices[0])
            if found is not None:
                continue  # a per-destination row: checked above
            _check_feeds_only(o, set(replicated_stores), refuse)
    for r in reductions:
        init = r.iter_args[0].owner
        if not (len(r.iter_args) == 1 and isinstance(init, arith.ConstantOp) and init.value.value.data == 0.0):
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


# ------------------------------------------------------------ edge mappings


def _destination_of(ops: list[Operation], position: SSAValue, num_vertices: SSAValue, indptr: SSAValue) -> SSAValue:
    """The destination whose in-edges hold CSR position `position` (< E): the last v
    with indptr[v] <= position, by a binary search of bit_length(V) halvings.

    Empty destinations share their indptr value with the next one, and the
    last of equal values is taken, so they are skipped. The search is a
    counted loop with selects, no data-dependent exit: lanes of a warp stay
    converged."""
    zero = _const(ops, 0)
    one = _const(ops, 1)
    as_i64 = arith.IndexCastOp(num_vertices, i64)
    leading = math.CountLeadingZerosOp(as_i64)
    width = arith.ConstantOp(IntegerAttr(64, i64))
    bits = arith.SubiOp(width, leading)
    steps = arith.IndexCastOp(bits, index)
    ops += [as_i64, leading, width, bits, steps]
    body = Block(arg_types=[index, index, index])
    _, lo, hi = body.args
    total = arith.AddiOp(lo, hi)
    mid = arith.DivUIOp(total, _const_in(body, 2))
    start = memref.LoadOp.get(indptr, [mid])
    start_index = arith.IndexCastOp(start, index)
    at_or_before = arith.CmpiOp(start_index, position, "ule")
    new_lo = arith.SelectOp(at_or_before, mid, lo)
    new_hi = arith.SelectOp(at_or_before, hi, mid)
    body.add_ops([total, mid, start, start_index, at_or_before, new_lo, new_hi, scf.YieldOp(new_lo, new_hi)])
    search = scf.ForOp(zero, steps.result, one, [zero, num_vertices], body)
    ops.append(search)
    return search.results[0]


def _const_in(block: Block, value: int) -> SSAValue:
    op = arith.ConstantOp(IntegerAttr(value, index))
    block.add_op(op)
    return op.result


_ATOMIC_OF = {arith.AddfOp: "fadd", arith.MaximumfOp: "fmaximum", arith.MinimumfOp: "fminimum", arith.MaxnumfOp: "fmax"}


def _atomic_updates(
    rewriter: Rewriter, body: Block, scratch: SSAValue, edge: SSAValue, kernel: str, strategy: str
) -> None:
    """In an edge grid's body: `buf[i] = buf[i] op x` on a shared buffer -> atomic_rmw;
    any other store to a shared buffer must be at a row of the edge itself."""
    for store in [o for o in body.walk() if isinstance(o, memref.StoreOp)]:
        if store.memref is scratch:
            continue  # this thread's own slice: per-edge temporaries (dot, @)
        update = store.value.owner
        kind = _ATOMIC_OF.get(type(update))  # type: ignore[arg-type]
        if kind is not None and store.value.has_one_use():
            assert isinstance(update, arith.FloatingPointLikeBinaryOperation)
            for old, x in ((update.lhs, update.rhs), (update.rhs, update.lhs)):
                load = old.owner
                if (
                    isinstance(load, memref.LoadOp)
                    and load.memref is store.memref
                    and load.indices[0] is store.indices[0]
                    and old.has_one_use()
                ):
                    rewriter.replace_op(store, AtomicRmwOp(kind, x, store.memref, store.indices[0]), [])
                    rewriter.erase_op(update)
                    rewriter.erase_op(load)
                    break
            else:
                kind = None
        if kind is None and not loop.depends_on(store.indices[0], edge):
            raise CompileError(
                f"kernel '{kernel}': map {strategy} is refused: an edge writes a vertex row other than by a "
                "sum / max / min update, which threads of several edges cannot share"
            )


def _has_stores(ops: list[Operation]) -> bool:
    return any(isinstance(o, memref.StoreOp | AtomicRmwOp) for op in ops for o in op.walk())


def _prune(block: Block, keep: Callable[[int, Operation], bool]) -> None:
    """Erases the ops of block (but its terminator) that `keep(position, op)` rejects,
    then the pure ones left unused."""
    ops = list(block.ops)[:-1]
    for i, op in reversed(list(enumerate(ops))):
        if not keep(i, op):
            op.detach()
            op.erase()
    for op in reversed(list(block.ops)[:-1]):
        if isinstance(op, _PURE) and not any(r.uses for r in op.results):
            op.detach()
            op.erase()


#: Ops a destination's work may drop from a grid when their results are unused.
_PURE = (
    arith.ConstantOp,
    arith.AddiOp,
    arith.SubiOp,
    arith.MuliOp,
    arith.DivUIOp,
    arith.RemUIOp,
    arith.IndexCastOp,
    arith.CmpiOp,
    arith.SIToFPOp,
    memref.LoadOp,
)


def _accumulator_regions(op: loop.ForDstOp, scratch: SSAValue) -> set[SSAValue]:
    """The scratch regions that outlive a launch once an edge mapping cuts a destination's
    work at its edge walks: written outside the walks and used in a walk or in
    more than one stretch between walks. These are the accumulators of
    aggregations combined with other terms at v (gin's sum beside
    (1 + eps) * x[v], a quotient of two sums) and the values between walks
    (softmax's max, sum and reciprocal); a temporary used within one stretch
    (a vertex's x[v] @ W) stays in the thread's slice."""
    tops = list(op.body.block.ops)
    if not any(isinstance(top, loop.ForInEdgesOp) for top in tops):
        return set()  # a vertex phase: one thread per destination anyway
    written: set[SSAValue] = set()
    places: dict[SSAValue, set[int | str]] = {}
    stretch = 0
    for top in tops:
        if isinstance(top, loop.ForInEdgesOp):
            stretch += 1
        for o in top.walk():
            if isinstance(o, memref.StoreOp | memref.LoadOp) and o.memref is scratch:
                found = _scratch_access(o.indices[0])
                if found is None:
                    continue
                region = found[0]
                places.setdefault(region, set()).add("walk" if isinstance(top, loop.ForInEdgesOp) else stretch)
                if isinstance(o, memref.StoreOp) and not isinstance(top, loop.ForInEdgesOp):
                    written.add(region)
    return {r for r in written if len(places[r]) > 1 or "walk" in places[r]}


def _move_accumulators_to_destinations(
    op: loop.ForDstOp, scratch: SSAValue, dst_scratch: SSAValue, kernel: str, strategy: str
) -> None:
    """Moves a destination's accumulator regions from the worker's scratch slice to
    the destination's row of `dst_scratch` (V rows of a scratch slice each), so
    that threads of its edges update them with atomics and the vertex launch
    after the edges reads them; per-edge temporaries stay in the thread's slice."""
    regions = _accumulator_regions(op, scratch)
    v = op.body.block.args[0]
    for base in [o for o in op.body.walk() if isinstance(o, arith.AddiOp) and SCRATCH_BASE_ATTR in o.attributes]:
        if base.rhs not in regions:
            continue
        worker_base = base.lhs.owner
        if not isinstance(worker_base, arith.MuliOp):
            raise CompileError(
                f"kernel '{kernel}': map {strategy} is refused: a scratch region's base is not "
                "a worker's slice map-threads can move to the destination's row"
            )
        row = arith.MuliOp(v, worker_base.rhs)
        Rewriter.insert_op(row, InsertPoint.before(base))
        base.operands = [row.result, base.rhs]
    for o in list(op.body.walk()):
        if isinstance(o, memref.LoadOp | memref.StoreOp) and o.memref is scratch:
            found = _scratch_access(o.indices[0])
            if found is None:
                raise CompileError(
                    f"kernel '{kernel}': map {strategy} is refused: a per-thread scratch access "
                    "has an index map-threads cannot attribute to a region"
                )
            if found[0] in regions:
                o.operands = [dst_scratch if operand is scratch else operand for operand in o.operands]


def _location(buf: SSAValue, index_value: SSAValue) -> tuple[SSAValue, SSAValue | None]:
    found = _scratch_access(index_value)
    return buf, found[0] if found is not None else None


def _check_recomputed_reads(ops: list[Operation], parts: list[tuple[range, int]], kernel: str, strategy: str) -> None:
    """A launch recomputes the top-level reads of the stretches before it that its own
    ops (positions `own`, after `limit`) use: each must still read what it read in
    place, so nothing between it and the launch may have written there (the
    buffer, or the region of a per-destination row)."""
    position = {o: i for i, o in enumerate(ops)}
    for own, limit in parts:
        needed: set[Operation] = set()
        stack = [operand for i in own for o in ops[i].walk() for operand in o.operands]
        while stack:
            owner = stack.pop().owner
            if isinstance(owner, Operation) and position.get(owner, limit) < limit and owner not in needed:
                needed.add(owner)
                stack.extend(operand for o in owner.walk() for operand in o.operands)
        for load in needed:
            if not isinstance(load, memref.LoadOp):
                continue
            where = _location(load.memref, load.indices[0])
            for later in ops[position[load] + 1 : limit]:
                for o in later.walk():
                    if isinstance(o, memref.StoreOp | AtomicRmwOp):
                        index_value = o.index if isinstance(o, AtomicRmwOp) else o.indices[0]
                        written = _location(o.memref, index_value)
                        if written[0] is where[0] and (
                            where[1] is None or written[1] is None or written[1] is where[1]
                        ):
                            raise CompileError(
                                f"kernel '{kernel}': map {strategy} is refused: a value a destination reads "
                                "between its edge walks is overwritten before a later launch that would read it again"
                            )


def map_edges(
    op: loop.ForDstOp,
    sched: CudaSchedule,
    lanes: int,
    fn: func.FuncOp,
    kernel: str,
    sources: dict[loop.GridOp, list[SSAValue]] | None = None,
    dst_scratch: SSAValue | None = None,
) -> list[loop.GridOp]:
    """for_dst { s0; walk 1; s1; ...; walk n; sn } -> vertex grid (s0), edge grid (walk 1,
    atomics), vertex grid (s1), ..., vertex grid (sn); vertex grids with no effect are
    left out. Each grid recomputes the pure values of the segments before it.
    `sources`, if given, gets each edge grid's source vertex value."""
    strategy = sched.strategy
    vertex_mapping = VERTEX_MAPPING_OF[strategy]
    walks = [o for o in op.body.block.ops if isinstance(o, loop.ForInEdgesOp)]
    if not walks:  # a phase of per-vertex work only
        return [map_vertex(op, sched, lanes, fn, kernel, vertex_mapping, group=1)]
    scratch = scratch_of(fn)
    if _accumulator_regions(op, scratch):
        assert dst_scratch is not None, "map-threads adds dst_scratch before mapping a kernel that needs it"
        _move_accumulators_to_destinations(op, scratch, dst_scratch, kernel, strategy)
    ops = list(op.body.block.ops)
    at = [ops.index(w) for w in walks]
    starts = [-1, *at]  # segment k holds the ops strictly between starts[k] and ends[k]
    ends = [*at, len(ops)]

    def effect(o: Operation) -> bool:
        return isinstance(o, loop.ForFeatureOp | loop.ForInEdgesOp) or _has_stores([o])

    _check_recomputed_reads(
        ops,
        [(range(starts[k] + 1, ends[k]), starts[k]) for k in range(1, len(walks) + 1)]
        + [(range(a, a + 1), a) for a in at],
        kernel,
        strategy,
    )
    rewriter = Rewriter()
    parts: list[tuple[str, loop.ForDstOp]] = []
    for k in range(len(walks) + 1):
        # segment k: the destination's work between walks, the pure values before it recomputed
        segment = op.clone()
        _prune(segment.body.block, lambda i, o, k=k: starts[k] < i < ends[k] or (i < starts[k] and not effect(o)))
        parts.append(("V", segment))
        if k < len(walks):
            # walk k + 1's body, with the pure values before it
            edges = op.clone()
            _prune(edges.body.block, lambda i, o, k=k: i == at[k] or (i < at[k] and not effect(o)))
            parts.append(("E", edges))
    for _, part in parts:
        rewriter.insert_op(part, InsertPoint.before(op))
    rewriter.erase_op(op)

    grids: list[loop.GridOp] = []
    num_edges = fn.body.block.args[abi.GRAPH_ARGUMENTS.index("num_edges")]
    for over, part in parts:
        if over == "V":
            if _has_stores(list(part.body.block.ops)):
                grids.append(map_vertex(part, sched, lanes, fn, kernel, vertex_mapping, group=1))
            else:
                rewriter.erase_op(part)
            continue
        walk = next(o for o in part.body.block.ops if isinstance(o, loop.ForInEdgesOp))
        g = _build_grid(num_edges, sched.group, lanes, sched.block_size, strategy)
        found: list[Operation] = []
        v = _destination_of(found, g.item, part.num_vertices, walk.indptr)
        u_raw = memref.LoadOp.get(walk.src, [g.item])
        u = arith.IndexCastOp(u_raw, index)
        e_raw = memref.LoadOp.get(walk.eid, [g.item])
        e = arith.IndexCastOp(e_raw, index)
        g.then.add_ops([*found, u_raw, u, e_raw, e])
        rewriter.inline_block(part.body.block, InsertPoint.at_end(g.then), [v, g.gid])
        walk_body = walk.body.block
        rewriter.erase_op(walk_body.last_op)  # loop.yield
        rewriter.inline_block(walk_body, InsertPoint.before(walk), [g.item, u.result, e.result])
        rewriter.erase_op(walk)
        _end_then(rewriter, g.then)
        _atomic_updates(rewriter, g.then, scratch, e.result, kernel, strategy)
        if lanes > 1:
            _distribute_over_lanes(rewriter, g, sched, lanes, fn, kernel)
        rewriter.replace_op(part, [*g.pre, g.op], [])
        grids.append(g.op)
        if sources is not None:
            sources[g.op] = [u.result]
    return grids


# ------------------------------------------------ hybrid partitioning (FeatGraph)


#: The arguments a `hybrid K` kernel takes after all others (see the module docstring).
HYBRID_ARGUMENTS = ("hybrid_hot", "hybrid_slot")


def _factors(value: SSAValue, dims: SSAValue, dim_names: list[str]) -> list[int | str] | None:
    """`value` as a product of constants and kernel dims (`[2, "F"]`), None when it is
    not one: the row size of a staged buffer, which the runtime recomputes from
    the dims to size the shared memory."""
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return [owner.value.value.data]
    if isinstance(owner, arith.MuliOp):
        lhs, rhs = _factors(owner.lhs, dims, dim_names), _factors(owner.rhs, dims, dim_names)
        return None if lhs is None or rhs is None else lhs + rhs
    if isinstance(owner, arith.IndexCastOp) and isinstance(owner.input.owner, memref.LoadOp):
        load = owner.input.owner
        position = load.indices[0].owner
        if load.memref is dims and isinstance(position, arith.ConstantOp):
            return [dim_names[position.value.value.data]]
    return None


def _normal(factors: list[int | str]) -> tuple[int | str, ...]:
    constant = 1
    for f in factors:
        if isinstance(f, int):
            constant *= f
    names = sorted(f for f in factors if isinstance(f, str))
    return tuple(([constant] if constant != 1 else []) + names)


class _HybridStaging:
    """Stages the hot sources' rows of one kernel's grids in shared memory."""

    def __init__(self, fn: func.FuncOp, record: abi.AbiRecord, kernel: str, strategy: str, limit: int):
        self.fn, self.kernel, self.strategy, self.limit = fn, kernel, strategy, limit
        self.dim_names: list[str] = record.dims
        args = fn.body.block.args
        self.dims = args[abi.GRAPH_ARGUMENTS.index("dims")]
        self.first_data = len(abi.GRAPH_ARGUMENTS)
        self.data_args = len(args)  # params, results, temps, ...: what a grid may stage
        self.hot: SSAValue | None = None
        self.slot: SSAValue | None = None
        self.staged_any = False

    def _arguments(self) -> tuple[SSAValue, SSAValue]:
        if self.hot is None:
            self.hot = kernel_abi.append_argument(self.fn, "hybrid_hot")
            self.slot = kernel_abi.append_argument(self.fn, "hybrid_slot")
        assert self.slot is not None
        return self.hot, self.slot

    def stage(self, grid: loop.GridOp, sources: list[SSAValue]) -> list[list[int | str]]:
        """Rewrites the grid's reads of source rows (`buf[u * S + rest]`, u in
        `sources`) to read shared memory for staged sources, and prepends the
        block's staging loops and barrier; returns the staged row sizes."""
        body = grid.body.block
        written = {o.memref for o in body.walk() if isinstance(o, memref.StoreOp | AtomicRmwOp)}
        reads: list[tuple[memref.LoadOp, SSAValue, tuple, SSAValue | None]] = []
        regions: dict[tuple, BlockArgument] = {}
        for load in [o for o in body.walk() if isinstance(o, memref.LoadOp)]:
            buf = load.memref
            if not (
                isinstance(buf, BlockArgument)
                and buf.owner is self.fn.body.block
                and self.first_data <= buf.index < self.data_args
                and buf not in written
            ):
                continue
            index_value = load.indices[0]
            owner = index_value.owner
            rest: SSAValue | None = None
            if index_value in sources:
                u, factors = index_value, []
            elif isinstance(owner, arith.MuliOp) and owner.lhs in sources:
                u, factors = owner.lhs, _factors(owner.rhs, self.dims, self.dim_names)
            elif (
                isinstance(owner, arith.AddiOp)
                and isinstance(owner.lhs.owner, arith.MuliOp)
                and owner.lhs.owner.lhs in sources
            ):
                u, factors, rest = (
                    owner.lhs.owner.lhs,
                    _factors(owner.lhs.owner.rhs, self.dims, self.dim_names),
                    owner.rhs,
                )
            else:
                continue
            if factors is None:
                continue
            key = (buf.index, _normal(factors))
            regions.setdefault(key, buf)
            reads.append((load, u, key, rest))
        if not reads:
            return []
        self.staged_any = True
        hot, slot_table = self._arguments()
        element = next(iter(regions.values())).type
        assert isinstance(element, MemRefType)

        # before the grid: K', each region's row size and offset, the shared buffer
        pre: list[Operation] = []
        c0, c1 = _const(pre, 0), _const(pre, 1)
        k_raw = memref.LoadOp.get(hot, [c0])
        k = arith.IndexCastOp(k_raw, index)
        pre += [k_raw, k]
        row_size: dict[tuple, SSAValue] = {}
        offset: dict[tuple, SSAValue] = {}
        elements = c0
        for key in regions:
            size = _const(pre, 1)
            for f in key[1]:
                if isinstance(f, int):
                    factor = _const(pre, f)
                else:
                    position = _const(pre, self.dim_names.index(f))
                    raw = memref.LoadOp.get(self.dims, [position])
                    cast = arith.IndexCastOp(raw, index)
                    pre += [raw, cast]
                    factor = cast.result
                product = arith.MuliOp(size, factor)
                pre.append(product)
                size = product.result
            start = arith.MuliOp(k, elements)
            total = arith.AddiOp(elements, size)
            pre += [start, total]
            row_size[key], offset[key], elements = size, start.result, total.result
        shared_elements = arith.MuliOp(k, elements)
        shared = SharedMemoryOp(shared_elements, MemRefType(element.element_type, [DYNAMIC_INDEX]))
        pre += [shared_elements, shared]
        Rewriter.insert_op(pre, InsertPoint.before(grid))

        # the block's threads copy the K' rows of each region, then wait for each other
        staging: list[Operation] = []
        thread = body.args[1]
        step = _const(staging, grid.block_size.value.data)
        for key, buf in regions.items():
            count = arith.MuliOp(k, row_size[key])
            copy = Block(arg_types=[index])
            i = copy.args[0]
            row = arith.DivUIOp(i, row_size[key])
            column = arith.RemUIOp(i, row_size[key])
            position = arith.AddiOp(row, c1)
            source_raw = memref.LoadOp.get(hot, [position])
            source = arith.IndexCastOp(source_raw, index)
            base = arith.MuliOp(source, row_size[key])
            at = arith.AddiOp(base, column)
            value = memref.LoadOp.get(buf, [at])
            into = arith.AddiOp(offset[key], i)
            copy.add_ops(
                [
                    row,
                    column,
                    position,
                    source_raw,
                    source,
                    base,
                    at,
                    value,
                    into,
                    memref.StoreOp.get(value, shared.result, [into]),
                    scf.YieldOp(),
                ]
            )
            staging += [count, scf.ForOp(thread, count, step, [], copy)]
        staging.append(BarrierOp())
        Rewriter.insert_op(staging, InsertPoint.at_start(body))

        # each source's slot, once where it is defined; then the code after it
        # twice: reading staged rows (shared memory) or the others (global),
        # so each version's loads have one address space (ld.shared /
        # ld.global, where one load of either would be a generic ld)
        for u in {u: None for _, u, _, _ in reads}:
            zero64 = arith.ConstantOp(IntegerAttr(0, i64))
            raw = memref.LoadOp.get(slot_table, [u])
            is_hot = arith.CmpiOp(raw, zero64, "sge")
            slot = arith.IndexCastOp(raw, index)
            ops = [zero64, raw, is_hot, slot]
            if isinstance(u, BlockArgument):
                Rewriter.insert_op(ops, InsertPoint.at_start(u.owner))
            else:
                Rewriter.insert_op(ops, InsertPoint.after(u.owner))
            scope = slot.parent_block()
            assert scope is not None and scope.last_op is not None
            terminator = scope.last_op
            after = list(scope.ops)
            after = after[after.index(slot) + 1 : -1]
            if terminator.operands or terminator.results:
                raise CompileError(
                    f"kernel '{self.kernel}': map {self.strategy} hybrid {self.limit}: internal "
                    "error: an edge walk yields values"
                )
            global_version = Block()
            mapper: dict[SSAValue, SSAValue] = {}
            for o in after:
                global_version.add_op(o.clone(value_mapper=mapper))
            global_version.add_op(scf.YieldOp())
            staged_version = Block()
            for o in after:
                o.detach()
                staged_version.add_op(o)
            staged_version.add_op(scf.YieldOp())
            Rewriter.insert_op(
                scf.IfOp(is_hot.result, [], [staged_version], [global_version]), InsertPoint.before(terminator)
            )
            for load, source, key, rest in reads:
                if source is not u:
                    continue
                row_base = arith.MuliOp(slot, row_size[key])
                first = arith.AddiOp(offset[key], row_base)
                new_ops: list[Operation] = [row_base, first]
                at = first
                if rest is not None:
                    at = arith.AddiOp(first, rest)
                    new_ops.append(at)
                staged = memref.LoadOp.get(shared.result, [at])
                Rewriter().replace_op(load, [*new_ops, staged], [staged.res])
        return [list(key[1]) for key in regions]

    def check_used(self) -> None:
        if not self.staged_any:
            raise CompileError(
                f"kernel '{self.kernel}': map {self.strategy} hybrid {self.limit} is refused: its edges read no "
                "source rows (x[u] of a vertex tensor) that shared memory could hold"
            )


def scratch_of(fn: func.FuncOp) -> SSAValue:
    return fn.body.block.args[abi.GRAPH_ARGUMENTS.index("scratch")]


def _walk_sources(grid: loop.GridOp) -> list[SSAValue]:
    return [w.body.block.args[1] for w in grid.walk() if isinstance(w, loop.ForInEdgesOp)]


class MapThreadsPass(ModulePass):
    """Replaces every loop.for_dst by a loop.grid for the kernel's cuda mapping."""

    name = "map-threads"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in list(op.ops):
            if not isinstance(fn, func.FuncOp) or not kernel_abi.has_record(fn):
                continue
            text = fn.attributes.get(CUDA_MAP_ATTR)
            sched = CudaSchedule.parse(text.data) if isinstance(text, StringAttr) else CudaSchedule()
            kernel = fn.sym_name.data.removeprefix(abi.SYMBOL_PREFIX)
            record = kernel_abi.get_record(fn)
            lanes = LANES[sched.strategy]
            if sched.lanes is not None:
                if lanes == 1:
                    raise CompileError(
                        f"kernel '{kernel}': map {sched.strategy} lanes {sched.lanes} is refused: a thread mapping "
                        f"runs one thread per destination (or edge group); use map "
                        f"{sched.strategy.replace('thread', 'warp')} lanes {sched.lanes}"
                    )
                lanes = sched.lanes
            if sched.tile is not None and lanes == 1:
                raise CompileError(
                    f"kernel '{kernel}': map {sched.strategy} tile {sched.tile} is refused: "
                    "with one thread per destination (or edge) every thread runs the whole feature row, "
                    "there is nothing to tile over threads"
                )
            grids: list[abi.Launch] = []
            staging = (
                _HybridStaging(fn, record, kernel, sched.strategy, sched.hybrid) if sched.hybrid is not None else None
            )
            dst_scratch = None
            if sched.strategy in VERTEX_MAPPING_OF and any(
                _accumulator_regions(dst, scratch_of(fn)) for dst in fn.walk() if isinstance(dst, loop.ForDstOp)
            ):
                # the accumulators edge threads share: one scratch slice per destination
                dst_scratch = kernel_abi.append_argument(fn, "dst_scratch")
            for dst in [o for o in fn.walk() if isinstance(o, loop.ForDstOp)]:
                _check_loop_schedule(dst)
                mapped: list[tuple[loop.GridOp, abi.Launch]] = []
                edge_sources: dict[loop.GridOp, list[SSAValue]] = {}
                if sched.strategy in VERTEX_MAPPING_OF:
                    for grid in map_edges(dst, sched, lanes, fn, kernel, edge_sources, dst_scratch):
                        over_edges = grid.mapping.data == sched.strategy
                        mapped.append((grid, abi.Launch("E" if over_edges else "V", sched.group if over_edges else 1)))
                else:
                    grid = map_vertex(dst, sched, lanes, fn, kernel)
                    edge_sources[grid] = _walk_sources(grid)
                    mapped.append((grid, abi.Launch("V", sched.group)))
                for grid, launch in mapped:
                    if staging is not None:
                        # the rows each launch keeps in shared memory, per hot source
                        launch.shared = staging.stage(grid, edge_sources.get(grid, []))
                    grids.append(launch)
            if staging is not None:
                staging.check_used()
            if CUDA_MAP_ATTR in fn.attributes:
                del fn.attributes[CUDA_MAP_ATTR]
            # the runtime sizes the grid (and one scratch slice per thread) from this
            record.grid = abi.Grid(
                mapping=sched.strategy,
                block_size=sched.block_size,
                group=sched.group,
                lanes=lanes,
                grids=grids,
                hybrid=sched.hybrid,
                # V scratch slices, one per destination, after the temps
                dst_scratch=dst_scratch is not None,
                # False: the runtime may pick a mapping per graph (autotune/heuristic.py)
                schedule_given=isinstance(text, StringAttr),
            )
            kernel_abi.set_record(fn, record)
