"""prefetch-neighbors: software prefetch of neighbour rows a few edges ahead.

A gather `x[u]` reads a row at a random address; the hardware prefetchers
cannot guess it, and one in-edge loop has a single miss outstanding at a time.
Reading `in_src[pos + D]` and prefetching that source's rows (every cache
line of each row the body gathers at `u`) keeps D misses in flight. Rows at
the user's edge id (`in_eid[pos + D]`) are prefetched the same way, for
writing where the body stores them: edge ids in source order scatter them.

The distance D is the `prefetch` entry of the destination loop's schedule
(default 8, `prefetch 0` turns it off); this pass consumes the entry.

A sweep in a destination order of the runtime's (`reorder`, `sort degree`)
also reads the destination's own rows at random: `er[v]`, `x[v]`, and
`out[v]` where it is not streamed; `er[v]` is the first thing a destination
needs. This pass leaves `prefetch_destinations` in such a sweep's schedule;
order-destinations, which maps positions to destinations, consumes it with
`prefetch_destination_rows`. Measurements: docs/design/locality.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    DictionaryAttr,
    Float64Type,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    UnitAttr,
    i64,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from gnnc.ir import llvm_ext, loop
from gnnc.ir.directives import check_directive_option
from gnnc.ir.loop_structure import SweepKind, give_schedule, kernel_buffer, schedule_text
from gnnc.ir.schedule import DEFAULT_PREFETCH_DISTANCE

index = IndexType()
CACHE_LINE_BYTES = 64
#: How many positions ahead a permuted sweep prefetches its destinations' own rows.
DESTINATIONS_AHEAD = 4
#: Marks the ops of a destination prefetch: they stay beside `loop.dst_at`, outside row slices.
DESTINATION_PREFETCH_ATTR = "gnnc.destination_prefetch"


def _const(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, index))


def _rows_at(scope: Operation, row_index: SSAValue) -> dict[tuple[SSAValue, SSAValue], bool]:
    """(buffer, row size) -> written?, for every buffer the body of `scope` accesses
    at row `row_index` (the source `u`, the edge id `e`, or the destination `v`).

    The lowering addresses a row as `row_index * row_size + offset`; a load or
    store whose index is computed from such a product accesses that buffer's row.
    """
    rows: dict[SSAValue, SSAValue] = {}  # muli result -> row size
    for use in row_index.uses:
        op = use.operation
        if isinstance(op, arith.MuliOp):
            other = op.rhs if op.lhs is row_index else op.lhs
            if other is not row_index:
                rows[op.result] = other
    found: dict[tuple[SSAValue, SSAValue], bool] = {}

    def derived_from(value: SSAValue, depth: int = 0) -> SSAValue | None:
        if value in rows:
            return value
        op = value.owner
        if depth < 8 and isinstance(op, arith.AddiOp | arith.MuliOp):
            return derived_from(op.lhs, depth + 1) or derived_from(op.rhs, depth + 1)
        return None

    for op in scope.walk():
        if op is scope:
            continue
        if isinstance(op, memref.LoadOp | memref.StoreOp) and len(op.indices) == 1:
            row = derived_from(op.indices[0])
            if row is not None:
                key = (op.memref, rows[row])
                found[key] = found.get(key, False) or isinstance(op, memref.StoreOp)
    return found


def _prefetch_rows(rows: dict[tuple[SSAValue, SSAValue], bool], row_ahead: SSAValue, zero: SSAValue) -> list[Operation]:
    ops: list[Operation] = []
    for (buffer, row_size), written in rows.items():
        buffer_type = buffer.type
        assert isinstance(buffer_type, MemRefType)
        elem_bytes = 8 if isinstance(buffer_type.element_type, Float64Type) else 4
        step = _const(CACHE_LINE_BYTES // elem_bytes)
        base = arith.MuliOp(row_ahead, row_size)
        line = Block(arg_types=[index])
        at = arith.AddiOp(base, line.args[0])
        line.add_ops([at, llvm_ext.PrefetchOp(buffer, at, write=written, locality=3), scf.YieldOp()])
        ops += [step, base, scf.ForOp(zero, row_size, step, [], line)]
    return ops


def _insert_prefetches(
    edge_loop: loop.ForInEdgesOp, distance: int, num_edges: SSAValue, ids_in_order: SSAValue | None = None
) -> None:
    body = edge_loop.body.block
    pos, u, e = body.args
    gathers = dict.fromkeys(_rows_at(edge_loop, u), False)  # source rows are only read
    # with `edges sorted` a walk over these edge ids reads its edge rows in order (sorted-edge-ids)
    edge_rows = {} if edge_loop.eid is ids_in_order else _rows_at(edge_loop, e)
    if not gathers and not edge_rows:
        return
    ops: list[Operation] = []
    d, one = _const(distance), _const(1)
    ahead = arith.AddiOp(pos, d)
    last = arith.SubiOp(num_edges, one)
    # never read in_src past its end: near the end, prefetch the last edge again
    clamped = arith.MinSIOp(ahead, last)
    zero = _const(0)
    ops += [d, one, ahead, last, clamped, zero]
    if gathers:
        src_raw = memref.LoadOp.get(edge_loop.src, [clamped])
        u_ahead = arith.IndexCastOp(src_raw, index)
        ops += [src_raw, u_ahead, *_prefetch_rows(gathers, u_ahead.result, zero.result)]
    if edge_rows:
        # edge rows (an edge input w[e], an edge result alpha[e]) are at the
        # user's edge ids, scattered unless the ids follow the in-CSR: a graph
        # built from COO sorted by source writes alpha at random
        eid_raw = memref.LoadOp.get(edge_loop.eid, [clamped])
        e_ahead = arith.IndexCastOp(eid_raw, index)
        ops += [eid_raw, e_ahead, *_prefetch_rows(edge_rows, e_ahead.result, zero.result)]
    first = body.first_op
    assert first is not None
    body.insert_ops_before(ops, first)


def _at_top(value: SSAValue, body: Block, ops: list[Operation]) -> SSAValue | None:
    """value as computed at the top of the sweep's body: itself if defined
    outside it (or a body argument), else a clone of its arith chain appended
    to ops; None if it depends on anything else (an inner loop's index, a load)."""
    owner = value.owner
    if isinstance(owner, Block):
        return value if owner is body or not body.is_ancestor(owner) else None
    if not body.is_ancestor(owner):
        return value
    if owner.dialect_name() != "arith" or len(owner.results) != 1 or owner.regions:
        return None
    operands = [_at_top(x, body, ops) for x in owner.operands]
    if any(x is None for x in operands):
        return None
    clone = owner.clone()
    for i, operand in enumerate(operands):
        clone.operands[i] = operand  # type: ignore[assignment]  # None was ruled out above
    ops.append(clone)
    return clone.results[0]


def prefetch_destination_rows(for_dst: loop.ForDstOp, dst: loop.DstAtOp, ahead: int) -> None:
    """Prefetches the rows the sweep accesses at its destination (`dst`, the
    destination at the current position) for the destination `ahead`
    positions on, right after `dst`."""
    body = for_dst.body.block
    # a row of an array the sweep also gathers (gin's x[v]) was, in a locality
    # order, just gathered for a neighbour: prefetching it again costs more than it saves
    gathered = {
        buffer
        for edge_loop in for_dst.walk()
        if isinstance(edge_loop, loop.ForInEdgesOp)
        for buffer, _ in _rows_at(edge_loop, edge_loop.body.block.args[1])
    }
    ops: list[Operation] = []
    rows: dict[SSAValue, tuple[SSAValue, bool]] = {}  # buffer -> (row size at the top, written?)
    for (buffer, row_size), written in _rows_at(for_dst, dst.result).items():
        if buffer in gathered:
            continue
        if buffer in rows:  # the same row, its size computed again further down
            rows[buffer] = (rows[buffer][0], rows[buffer][1] or written)
            continue
        kept = len(ops)
        size = _at_top(row_size, body, ops)
        if size is None:
            del ops[kept:]  # the start of a chain that could not be finished
        else:
            rows[buffer] = (size, written)
    if not rows:
        return
    d, one, zero = _const(ahead), _const(1), _const(0)
    later = arith.AddiOp(dst.position, d)
    last = arith.SubiOp(for_dst.num_vertices, one)
    clamped = arith.MinSIOp(later, last)
    dst_ahead = loop.DstAtOp(dst.order, clamped.result)
    ops += [
        d,
        one,
        zero,
        later,
        last,
        clamped,
        dst_ahead,
        *_prefetch_rows(
            {(buffer, size): written for buffer, (size, written) in rows.items()}, dst_ahead.result, zero.result
        ),
    ]
    for op in ops:
        op.attributes[DESTINATION_PREFETCH_ATTR] = UnitAttr()
    body.insert_ops_after(ops, dst)


@dataclass(frozen=True)
class PrefetchNeighborsPass(ModulePass):
    """Prefetches the rows gathered at `u`, `prefetch` edges ahead, in every in-edge loop."""

    name = "prefetch-neighbors"

    distance: int | None = None
    """`prefetch DISTANCE` for every kernel (0: none); none: each kernel's schedule decides."""

    def __post_init__(self) -> None:
        if self.distance is not None:
            check_directive_option(str(self.spec()), ["prefetch", str(self.distance)])

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.distance is not None:
            give_schedule(op, "prefetch", IntegerAttr(self.distance, i64), tuple(SweepKind))
        for fn in op.ops:
            if not isinstance(fn, func.FuncOp) or not fn.body.blocks:
                continue
            num_edges = fn.body.block.args[1] if len(fn.body.block.args) > 1 else None
            for for_dst in [o for o in fn.walk() if isinstance(o, loop.ForDstOp)]:
                schedule = dict(for_dst.schedule.data) if for_dst.schedule is not None else {}
                distance_attr = schedule.pop("prefetch", None)
                distance = DEFAULT_PREFETCH_DISTANCE
                if isinstance(distance_attr, IntegerAttr):
                    distance = distance_attr.value.data
                if distance > 0 and schedule_text(for_dst, "order") not in (None, "identity"):
                    schedule["prefetch_destinations"] = IntegerAttr(DESTINATIONS_AHEAD, i64)
                if for_dst.schedule is not None or schedule:
                    for_dst.schedule = DictionaryAttr(schedule)
                if distance <= 0 or num_edges is None:
                    continue
                in_order = kernel_buffer(fn, "in_eid") if schedule_text(for_dst, "edge_ids") == "sorted" else None
                for edge_loop in [o for o in for_dst.walk() if isinstance(o, loop.ForInEdgesOp)]:
                    _insert_prefetches(edge_loop, distance, num_edges, in_order)
