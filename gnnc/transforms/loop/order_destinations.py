"""order-destinations: a destination sweep visits its destinations in the runtime's order.

`sort degree` (Seastar: destinations by in-degree, so that the threads'
blocks hold destinations of similar cost) and `reorder locality` (Huang et
al.: destinations whose in-neighbourhoods overlap, by MinHash, next to each
other) are permutations computed per graph by the runtime and passed as
`dst_order` (abi.py). The sweep then runs over positions, and its body starts with
`%v = loop.dst_at %dst_order[%pos]`. The identity order needs nothing.

The in-edges are walked by position too: the runtime passes the in-CSR laid
out in the processing order (`plans.ordered_in_csr`), so `in_indptr` is
indexed by the position (the in-edge loops, the degree loads) and the index
streams stay sequential, and prefetching D edges ahead reaches the edges
that really run next. On the in-CSR, a reordered sweep took a cache miss on
every destination's indices and prefetched edges of destinations that ran
much later (measurements: docs/design/locality.md). The ABI record says so
(`ordered_edges`). Where prefetch-neighbors asked for it
(`prefetch_destinations`), the destination's own rows are prefetched a few
positions ahead. A kernel whose edge indices cannot all be
taken by position (a partitioned or grouped sweep, which walks plans of its
own) keeps the in-CSR, indexed by destination.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from gnnc.errors import CompileError
from gnnc.ir import kernel_abi, loop
from gnnc.ir.directives import directive_phrase, exclusion
from gnnc.ir.loop_structure import SweepKind, give_schedule, kernel_buffer, sweep_kind, sweeps, take_schedule
from gnnc.ir.schedule import DESTINATION_ORDERS, DestinationOrder
from gnnc.transforms.loop.prefetch_neighbors import prefetch_destination_rows

#: Schedule entries whose passes walk edge plans of their own, indexed by destination.
_OWN_EDGE_PLANS = ("partition", "group", "edges")


def _depends_on(value: SSAValue, root: SSAValue, scope: Block) -> bool:
    """Whether value is computed from root by ops inside scope."""
    if value is root:
        return True
    owner = value.owner
    if not isinstance(owner, Operation) or not scope.is_ancestor(owner):
        return False
    return any(_depends_on(x, root, scope) for x in owner.operands)


def _index_sites(body: Block, indptr: SSAValue) -> list[tuple[Operation, int]]:
    """(op, operand number) of every in_indptr index in the body: in-edge loops and loads."""
    sites: list[tuple[Operation, int]] = []
    for op in body.walk():
        if isinstance(op, loop.ForInEdgesOp) and op.indptr is indptr:
            sites.append((op, 0))
        elif isinstance(op, memref.LoadOp) and op.memref is indptr:
            sites.append((op, 1))
    return sites


def _positional(fn: func.FuncOp, for_dst: loop.ForDstOp) -> bool:
    """Whether the sweep's edge indices can all follow the ordered in-CSR (see the module docstring)."""
    schedule = for_dst.schedule.data if for_dst.schedule is not None else {}
    if any(key in schedule for key in _OWN_EDGE_PLANS):
        return False
    body = for_dst.body.block
    position = body.args[0]
    indptr, src, eid = (kernel_buffer(fn, n) for n in ("in_indptr", "in_src", "in_eid"))
    for op in body.walk():
        if isinstance(op, loop.ForInEdgesOp) and any(
            a is not b for a, b in zip((op.indptr, op.src, op.eid), (indptr, src, eid))
        ):
            return False
        # edge arrays are read at edge positions (the loops' own, prefetch distances ahead), never at a destination
        if isinstance(op, memref.LoadOp) and op.memref in (src, eid) and _depends_on(op.operands[1], position, body):
            return False
        if isinstance(op, memref.LoadOp) and op.memref is indptr:
            # a degree load: an index _rebuild can recompute from the position
            if not _arith_only(op.operands[1], position, body):
                return False
    return True


def _arith_only(value: SSAValue, root: SSAValue, scope: Block) -> bool:
    """Whether value derives from root, if at all, through arith ops alone (what _rebuild can clone)."""
    if value is root or not _depends_on(value, root, scope):
        return True
    owner = value.owner
    return (
        isinstance(owner, Operation)
        and owner.dialect_name() == "arith"
        and len(owner.results) == 1
        and all(_arith_only(x, root, scope) for x in owner.operands)
    )


def _rebuild(value: SSAValue, position: SSAValue, body: Block, before: Operation, kept: set[Operation]) -> SSAValue:
    """value as computed from the position (clones of its arith chain, inserted before `before`)."""
    if value is position or not _depends_on(value, position, body):
        return value
    owner = value.owner
    assert isinstance(owner, Operation)
    clone = owner.clone()
    for i, operand in enumerate(owner.operands):
        clone.operands[i] = _rebuild(operand, position, body, before, kept)
    before.parent_block().insert_op_before(clone, before)  # type: ignore[union-attr]  # `before` is an op of the loop body
    kept.add(clone)
    return clone.results[0]


def _check_reorderable(fn: func.FuncOp, order: DestinationOrder, given_as: str) -> None:
    """A kernel the option would give a destination order its schedule could not have had."""
    phrase = directive_phrase(order.directive)
    for _, for_dst in sweeps(fn):
        if sweep_kind(for_dst) != SweepKind.DESTINATIONS:
            continue
        if any(isinstance(o, loop.DstAtOp) for o in for_dst.body.block.ops):
            # hilbert-edge-order ran: the sweep is over the Hilbert edge list
            raise CompileError(f"{given_as}: 'order edges hilbert' and '{phrase}' cannot be combined: choose one")
        if for_dst.schedule is not None and "edge_ids" in for_dst.schedule.data:
            found = exclusion("edges", [order.directive[0]])
            assert found is not None
            raise CompileError(
                f"{given_as}: '{phrase}' cannot be combined with 'edges sorted' "
                f"(the schedule of kernel '{fn.sym_name.data}'): {found[1]}"
            )


@dataclass(frozen=True)
class OrderDestinationsPass(ModulePass):
    """Maps each sweep position to a destination through dst_order when its schedule has a non-identity `order`.

    Given an order, every kernel's destination sweeps take it, and the ABI
    record names it for the runtime. prefetch-neighbors, earlier, did not
    see it: the destinations' own rows are not prefetched ahead, as they
    are when the schedule gives the order.
    """

    name = "order-destinations"

    order: str | None = None
    """The destination order of every kernel: identity, degree (`sort degree`), locality or rcm
    (`reorder locality`, `reorder rcm`); none: each kernel's schedule decides."""

    def __post_init__(self) -> None:
        if self.order is not None and self.order not in DESTINATION_ORDERS:
            raise CompileError(
                f"{self.spec()}: unknown destination order '{self.order}': expected one of "
                f"{', '.join(DESTINATION_ORDERS)}"
            )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.order is not None:
            given = DestinationOrder(self.order)
            for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks]:
                if given != DestinationOrder.IDENTITY:
                    _check_reorderable(fn, given, str(self.spec()))
            give_schedule(op, "order", StringAttr(given), (SweepKind.DESTINATIONS,))
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks]:
            ordered = []
            walking = []  # sweeps that walk the in-CSR
            indptr = kernel_buffer(fn, "in_indptr")
            for _, for_dst in sweeps(fn):
                order = take_schedule(for_dst, "order")
                if any(
                    isinstance(o, loop.ForInEdgesOp) or (isinstance(o, memref.LoadOp) and o.memref is indptr)
                    for o in for_dst.body.walk()
                ):
                    walking.append(for_dst)
                if order is None:
                    continue
                if not isinstance(order, StringAttr) or order.data not in DESTINATION_ORDERS:
                    raise CompileError(
                        f"unknown destination order {order}: expected one of {', '.join(DESTINATION_ORDERS)}"
                    )
                if order.data != "identity":
                    ordered.append(for_dst)
            # the runtime passes one in-CSR to the whole kernel: positional only if every sweep on it can be
            positional = bool(ordered) and all(s in ordered and _positional(fn, s) for s in walking)
            for for_dst in ordered:
                self._order(fn, for_dst, positional)
            if (positional or self.order is not None) and kernel_abi.has_record(fn):
                record = kernel_abi.get_record(fn)
                if positional:
                    record.ordered_edges = True
                if self.order is not None:
                    # the runtime supplies the permutation the record names
                    record.order = self.order
                kernel_abi.set_record(fn, record)

    @staticmethod
    def _order(fn: func.FuncOp, for_dst: loop.ForDstOp, positional: bool) -> None:
        body = for_dst.body.block
        position = body.args[0]
        kept: set[Operation] = set()
        if positional:
            for site, operand in _index_sites(body, kernel_buffer(fn, "in_indptr")):
                site.operands[operand] = _rebuild(site.operands[operand], position, body, site, kept)
                if site.operands[operand] is position:
                    kept.add(site)
        dst = loop.DstAtOp(kernel_buffer(fn, "dst_order"), position)
        body.insert_op_before(dst, body.first_op)  # type: ignore[arg-type]  # a loop body is never empty: it ends in its yield
        position.replace_uses_with_if(dst.result, lambda use: use.operation is not dst and use.operation not in kept)
        ahead = take_schedule(for_dst, "prefetch_destinations")
        if ahead is not None:
            prefetch_destination_rows(for_dst, dst, cast(IntegerAttr, ahead).value.data)
