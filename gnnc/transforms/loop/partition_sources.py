"""partition-sources: FeatGraph's 1-D source partitioning (`partition src K`).

Partition p holds the edges whose sources lie in the p-th range of vertex
ids, so the source rows a sweep gathers fit in the last-level cache. The
destination sweep is wrapped in `loop.for_partition K`: all threads work on
one partition at a time (a barrier between partitions), and the partitioned
in-edge walk reads partition p's in-CSR (`part_indptr` row p, `part_src`,
`part_eid`, see abi.py).

Only one in-edge walk of a destination is partitioned: the one gathering the
widest rows (the deepest feature nest). The work before it (initialising
accumulators, and earlier walks over all in-edges, such as a softmax's
maximum, which read only narrow score rows) runs in the first partition; the
work after it (finishing mean / max / min, a softmax's normalisation, vertex
results) in the last. Accumulators live in the output row or in the
destination's row of acc_rows (convert-graph-to-loop puts them there under
partitions), never in per-thread scratch, which another thread would own in
the next partition.
"""

from __future__ import annotations

from typing import cast

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from gnnc.errors import CompileError
from gnnc.ir import loop
from gnnc.ir.loop_structure import ancestors, feature_depth, kernel_buffer, sweeps, take_schedule

index = IndexType()


def _const(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, index))


def _partition(fn: func.FuncOp, for_dst: loop.ForDstOp, k: int) -> bool:
    """Wraps the sweep in k partitions; False if it walks no in-edges (nothing to partition)."""
    body = for_dst.body.block
    scratch = kernel_buffer(fn, "scratch")
    part_indptr, part_src, part_eid = (kernel_buffer(fn, n) for n in ("part_indptr", "part_src", "part_eid"))
    edge_loops = [op for op in body.ops if isinstance(op, loop.ForInEdgesOp)]
    nested = [op for op in body.walk() if isinstance(op, loop.ForInEdgesOp)]

    def refuse(reason: str) -> CompileError:
        return CompileError(f"partition src {k}: {reason}")

    if len(nested) != len(edge_loops):
        raise refuse("needs the kernel's in-edge walks directly in the destination loop")
    if not edge_loops:
        # a phase of only per-vertex work (a transform before a gather) has
        # nothing to partition; it runs once, before or after the partitioned sweeps
        return False
    depths = [feature_depth(op) for op in edge_loops]
    widest = max(depths)
    if depths.count(widest) != 1:
        raise refuse(
            "needs one in-edge walk that gathers wider rows than the others, to partition; "
            f"this kernel has {depths.count(widest)} walks of equal feature depth"
        )
    edge_loop = edge_loops[depths.index(widest)]
    ops = list(body.ops)
    split = ops.index(edge_loop)
    before, after = ops[:split], ops[split + 1 : -1]
    # per-edge scratch (a dot or @ of one edge) is fine; a per-destination
    # value in scratch set before the partitioned walk would be lost
    # between partitions
    for op in before:
        for inner in [op, *op.walk()] if op.regions else [op]:
            if (
                isinstance(inner, memref.LoadOp | memref.StoreOp)
                and inner.memref is scratch
                and not any(isinstance(a, loop.ForInEdgesOp) for a in ancestors(inner, body))
            ):
                raise refuse(
                    "needs per-destination values that persist across partitions in the output row or "
                    "acc_rows; this kernel keeps one in per-thread scratch"
                )

    part_body = Block(arg_types=[index])
    p = part_body.args[0]
    c0, c_last = _const(0), _const(k - 1)
    is_first = arith.CmpiOp(p, c0, "eq")
    is_last = arith.CmpiOp(p, c_last, "eq")
    part_body.add_ops([c0, c_last, is_first, is_last])

    # where this destination's edges of partition p start in part_indptr: row p of K x (V + 1)
    v = edge_loop.dst
    c1 = _const(1)
    stride = arith.AddiOp(fn.body.block.args[0], c1)
    row = arith.MuliOp(p, stride)
    at = arith.AddiOp(row, v)
    if isinstance(v.owner, Operation) and v.owner.parent_block() is body:
        body.insert_ops_after([c1, stride, row, at], v.owner)  # after the destination lookup
    else:
        body.insert_ops_before([c1, stride, row, at], body.first_op)  # type: ignore[arg-type]  # a loop body is never empty: it ends in its yield
    old_src = edge_loop.src
    edge_loop.operands[0] = at.result
    edge_loop.operands[1] = part_indptr
    edge_loop.operands[2] = part_src
    edge_loop.operands[3] = part_eid
    # prefetching reads ahead in the partition's source list
    old_src.replace_uses_with_if(part_src, lambda use: edge_loop.is_ancestor(use.operation))

    # Everything before the walk runs in the first partition, except what
    # the walk or later work reads (addresses, counts: pure values of
    # read-only data); everything after it in the last partition.
    later = [edge_loop, *after]
    keep: set[Operation] = set()
    before_set = set(before)

    def need(value: SSAValue) -> None:
        owner = value.owner
        if isinstance(owner, Operation) and owner in before_set and owner not in keep:
            keep.add(owner)
            for operand in owner.operands:
                need(operand)

    # the partition's row reads the destination: with `sort degree` a
    # `loop.dst_at` before the walk, which nothing else may read
    need(v)
    for op in later:
        for inner in op.walk():
            for operand in inner.operands:
                need(operand)
    written = {inner.memref for op in ops for inner in op.walk() if isinstance(inner, memref.StoreOp)}
    for op in keep:
        if op.regions or isinstance(op, memref.StoreOp) or (isinstance(op, memref.LoadOp) and op.memref in written):
            raise refuse(f"the partitioned walk reads a value computed from memory the kernel writes ({op.name})")
    for segment, condition, insert_before in (
        ([op for op in before if op not in keep], is_first, edge_loop),
        (after, is_last, body.last_op),
    ):
        if not segment:
            continue
        guarded = Block()
        for op in segment:
            op.detach()
            guarded.add_op(op)
        guarded.add_op(scf.YieldOp())
        body.insert_op_before(scf.IfOp(condition, [], [guarded]), insert_before)  # type: ignore[arg-type]  # at worst before the yield that ends the body

    parent = for_dst.parent_block()
    assert parent is not None
    partitions = loop.ForPartitionOp(k, part_body)
    parent.insert_op_before(partitions, for_dst)
    for_dst.detach()
    part_body.add_ops([for_dst, loop.YieldOp()])
    return True


class PartitionSourcesPass(ModulePass):
    """Wraps each sweep scheduled `partition = K` in `loop.for_partition K` over partitioned in-CSRs.

    `partition src K` gives a kernel the partitioned in-CSR's arguments and
    its accumulators rows that outlive a partition: convert-graph-to-loop
    takes it as its option (`convert-graph-to-loop{partition=K}`), and this
    pass implements what the lowering prepared.
    """

    name = "partition-sources"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks]:
            count, partitioned = None, 0
            for _, for_dst in sweeps(fn):
                attr = take_schedule(for_dst, "partition")
                if attr is None:
                    continue
                count = cast(IntegerAttr, attr).value.data
                partitioned += _partition(fn, for_dst, count)
            if count and not partitioned:
                raise CompileError(f"partition src {count}: the kernel walks no in-edges")
