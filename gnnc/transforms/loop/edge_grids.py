"""A destination sweep as grids over in-edges (thread_edge, warp_edge; map-threads).

Thread (warp) `g` handles the `group` consecutive in-CSR positions
`g * group + k`; an edge finds its destination by a binary search of
`in_indptr` (so the compiled code needs no per-edge destination array), and
updates the destination's row with atomics (`llvm_ext.atomic_rmw`: fadd for
sum / mean, fmaximum / fminimum for max / min, which propagate NaN as the
sequential code does, fmax for a softmax's stabilizing max, which need
not). A destination's per-vertex work around its edge walk runs in vertex
grids of its own, one thread (warp) per destination: initialising the rows
(0, -inf, +inf) before the edge grid, and after it dividing means, setting
the rows of vertices with no in-edges to 0 and storing vertex results. Each
grid is a launch of its own, which orders them. An aggregation kept in
per-thread scratch because it is combined with other terms at `v` (gin's
sum beside (1 + eps) * x[v], a quotient of two sums) moves to the
destination's row of `dst_scratch`, a scratch slice per vertex the runtime
passes after the temps: edge threads update it with atomics, the vertex
launch after the edges reads it. A destination that walks its edges several
times (softmax: the max, then the exponentials' sum beside the weighted
sum, then the normalised weights) becomes an edge launch per walk with
vertex launches between them, the values between walks kept in
`dst_scratch` too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from xdsl.dialects import arith, func, math, memref, scf
from xdsl.dialects.builtin import (
    IndexType,
    IntegerAttr,
    i64,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from gnnc.errors import CompileError
from gnnc.ir import abi, loop
from gnnc.ir.llvm_ext import AtomicRmwOp
from gnnc.ir.loop import SCRATCH_BASE_ATTR
from gnnc.ir.schedule import CudaSchedule
from gnnc.transforms.loop.thread_grids import (
    PURE_OPS,
    build_grid,
    const,
    end_then,
    scratch_access,
    scratch_of,
)
from gnnc.transforms.loop.vertex_grids import map_vertex
from gnnc.transforms.loop.warp_lanes import distribute_over_lanes

index = IndexType()


#: The vertex mapping an edge mapping runs its per-destination work with.
VERTEX_MAPPING_OF = {"thread_edge": "thread_vertex", "warp_edge": "warp_vertex"}


def _destination_of(ops: list[Operation], position: SSAValue, num_vertices: SSAValue, indptr: SSAValue) -> SSAValue:
    """The destination whose in-edges hold CSR position `position` (< E): the last v
    with indptr[v] <= position, by a binary search of bit_length(V) halvings.

    Empty destinations share their indptr value with the next one, and the
    last of equal values is taken, so they are skipped. The search is a
    counted loop with selects, no data-dependent exit: lanes of a warp stay
    converged."""
    zero = const(ops, 0)
    one = const(ops, 1)
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
        if isinstance(op, PURE_OPS) and not any(r.uses for r in op.results):
            op.detach()
            op.erase()


def accumulator_regions(op: loop.ForDstOp, scratch: SSAValue) -> set[SSAValue]:
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
                found = scratch_access(o.indices[0])
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
    regions = accumulator_regions(op, scratch)
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
            found = scratch_access(o.indices[0])
            if found is None:
                raise CompileError(
                    f"kernel '{kernel}': map {strategy} is refused: a per-thread scratch access "
                    "has an index map-threads cannot attribute to a region"
                )
            if found[0] in regions:
                o.operands = [dst_scratch if operand is scratch else operand for operand in o.operands]


def _location(buf: SSAValue, index_value: SSAValue) -> tuple[SSAValue, SSAValue | None]:
    found = scratch_access(index_value)
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
    if accumulator_regions(op, scratch):
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
        _prune(segment.body.block, lambda i, o, k=k: starts[k] < i < ends[k] or (i < starts[k] and not effect(o)))  # type: ignore[misc]  # mypy cannot type a lambda's defaults; k binds this iteration's segment (B023)
        parts.append(("V", segment))
        if k < len(walks):
            # walk k + 1's body, with the pure values before it
            edges = op.clone()
            _prune(edges.body.block, lambda i, o, k=k: i == at[k] or (i < at[k] and not effect(o)))  # type: ignore[misc]  # mypy cannot type a lambda's defaults; k binds this iteration's segment (B023)
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
        g = build_grid(num_edges, sched.group, lanes, sched.block_size, strategy)
        found: list[Operation] = []
        v = _destination_of(found, g.item, part.num_vertices, walk.indptr)
        u_raw = memref.LoadOp.get(walk.src, [g.item])
        u = arith.IndexCastOp(u_raw, index)
        e_raw = memref.LoadOp.get(walk.eid, [g.item])
        e = arith.IndexCastOp(e_raw, index)
        g.then.add_ops([*found, u_raw, u, e_raw, e])
        rewriter.inline_block(part.body.block, InsertPoint.at_end(g.then), [v, g.gid])
        walk_body = walk.body.block
        rewriter.erase_op(cast(Operation, walk_body.last_op))  # loop.yield
        rewriter.inline_block(walk_body, InsertPoint.before(walk), [g.item, u.result, e.result])
        rewriter.erase_op(walk)
        end_then(rewriter, g.then)
        _atomic_updates(rewriter, g.then, scratch, e.result, kernel, strategy)
        if lanes > 1:
            distribute_over_lanes(rewriter, g, sched, lanes, fn, kernel)
        rewriter.replace_op(part, [*g.pre, g.op], [])
        grids.append(g.op)
        if sources is not None:
            sources[g.op] = [u.result]
    return grids
