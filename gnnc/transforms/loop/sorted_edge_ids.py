"""sorted-edge-ids: edge rows addressed by the walk position when the edge ids are sorted (`edges sorted`).

An in-edge walk reads each edge's id from `in_eid[pos]` and addresses the
edge rows (an edge input `w[e]`, an edge result `alpha[e]`) through it: an
8-byte index stream per edge, a load on every edge row's address path, and
prefetches of edge rows at `in_eid[pos + D]`. When the caller's edge ids are
the in-CSR positions (edges sorted by destination: a graph built from
destination-sorted COO, or the benchmarks' graphs, whose numba baselines
read `w[pos]`), `e` is `pos` (measurements: docs/design/locality.md).

The pass consumes the sweeps' `edge_ids` schedule entry, replaces the edge
id of every walk over the kernel's own in-CSR by the position (a partition's
walks read their own id arrays and keep them; neighbour groups walk in-CSR
positions, so they are rewritten too), and records `edges_sorted` in the
ABI record: the runtime refuses a call on a graph whose edge ids are not
sorted before the native code runs (`Graph.edges_sorted`). Destination
orders and the Hilbert edge order lay the in-CSR out in orders of their
own; the frontend refuses them together with `edges sorted`.

Runs after the schedule passes: partition-sources first gives the walks it
partitions id arrays of their own, whose positions are not in-CSR positions.
prefetch-neighbors, earlier, reads the sweep's entry and prefetches no edge
rows for walks over the kernel's own ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from gnnc.errors import CompileError
from gnnc.ir import kernel_abi, loop
from gnnc.ir.loop_structure import SweepKind, give_schedule, kernel_buffer, take_schedule
from gnnc.ir.schedule import EXCLUSIVE_DIRECTIVES


@dataclass(frozen=True)
class SortedEdgeIdsPass(ModulePass):
    """Takes edge ids as in-CSR positions in the kernels whose schedule says `edges sorted`.

    Given `sorted=true`, every kernel takes them so. prefetch-neighbors,
    earlier, did not see it and prefetches edge rows at `in_eid[pos + D]`
    as for any edge order (correct, one index stream more).
    """

    name = "sorted-edge-ids"

    sorted: bool = False
    """`edges sorted` for every kernel; false: each kernel's schedule decides."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.sorted:
            for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks]:
                if any(
                    isinstance(o, loop.DstAtOp)
                    for d in fn.walk()
                    if isinstance(d, loop.ForDstOp)
                    for o in d.body.block.ops
                ):
                    raise CompileError(
                        f"{self.spec()}: 'edges sorted' cannot be combined with the order kernel "
                        f"'{fn.sym_name.data}' walks its destinations or edges in ('sort', 'reorder' or "
                        f"'order edges hilbert'): {EXCLUSIVE_DIRECTIVES['edges'][1]}"
                    )
            give_schedule(op, "edge_ids", StringAttr("sorted"), tuple(SweepKind))
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and kernel_abi.has_record(f)]:
            found = {take_schedule(for_dst, "edge_ids") for for_dst in fn.walk() if isinstance(for_dst, loop.ForDstOp)}
            found.discard(None)
            if not found:
                continue
            if found != {StringAttr("sorted")}:
                raise CompileError(
                    f"@{fn.sym_name.data}: unknown edge id layout " + ", ".join(sorted(str(a) for a in found))
                )
            eid = kernel_buffer(fn, "in_eid")
            for walk in [o for o in fn.walk() if isinstance(o, loop.ForInEdgesOp) and o.eid is eid]:
                position, _, edge = walk.body.block.args
                edge.replace_all_uses_with(position)
            record = kernel_abi.get_record(fn)
            record.edges_sorted = True
            kernel_abi.set_record(fn, record)
