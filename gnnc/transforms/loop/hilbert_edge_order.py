"""hilbert-edge-order: an edge-wise kernel walks its edges along a Hilbert curve (`order edges hilbert`).

FeatGraph traverses the edges of an edge-wise kernel (SDDMM) along a
Hilbert curve over (src, dst), so that consecutive edges share source and
destination rows in cache. The runtime supplies the edges in that order
(`hilbert_src`, `hilbert_dst`, `hilbert_eid`, see abi.py); this pass turns
the destination sweep into a sweep over positions in that list: each
position is one edge, its destination `loop.dst_at %hilbert_dst[pos]`, and
the in-edge walk becomes that one edge. Only a kernel whose destinations do
nothing but visit their in-edges (edge results, no aggregation) can be
traversed edge by edge; any other is refused.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import IndexType, ModuleOp
from xdsl.passes import ModulePass

from gnnc.errors import CompileError
from gnnc.ir import loop
from gnnc.ir.loop_structure import kernel_buffer, schedule_text, sweeps, take_schedule

index = IndexType()

#: The directive that asks for each destination order, for messages.
ORDER_DIRECTIVES = {"degree": "sort degree", "locality": "reorder locality"}


def _one_edge_per_position(fn: func.FuncOp, for_dst: loop.ForDstOp) -> None:
    body = for_dst.body.block
    edge_loops = [op for op in body.ops if isinstance(op, loop.ForInEdgesOp)]
    nested = [op for op in body.walk() if isinstance(op, loop.ForInEdgesOp)]
    outside = [op for op in body.ops if isinstance(op, loop.ForFeatureOp | memref.StoreOp | scf.ForOp)]
    if len(edge_loops) != 1 or len(nested) != 1 or outside:
        raise CompileError(
            "order edges hilbert: needs an edge-wise kernel (results per edge, no aggregation "
            "or softmax); this kernel aggregates at its destinations"
        )
    hilbert_src, hilbert_dst, hilbert_eid = (
        kernel_buffer(fn, n) for n in ("hilbert_src", "hilbert_dst", "hilbert_eid")
    )
    position = body.args[0]
    dst = loop.DstAtOp(hilbert_dst, position)
    body.insert_op_before(dst, body.first_op)  # type: ignore[arg-type]  # a loop body is never empty: it ends in its yield
    position.replace_uses_with_if(dst.result, lambda use: use.operation is not dst)
    # the sweep runs over the edge list: E positions
    for_dst.operands[0] = fn.body.block.args[1]

    edge_loop = edge_loops[0]
    u_raw = memref.LoadOp.get(hilbert_src, [position])
    e_raw = memref.LoadOp.get(hilbert_eid, [position])
    u = arith.IndexCastOp(u_raw, index)
    e = arith.IndexCastOp(e_raw, index)
    body.insert_ops_before([u_raw, e_raw, u, e], edge_loop)
    edge_body = edge_loop.body.block
    old_src = edge_loop.src
    terminator = edge_body.last_op
    assert isinstance(terminator, loop.YieldOp)
    terminator.detach()
    terminator.erase()
    pos_arg, u_arg, e_arg = edge_body.args
    pos_arg.replace_all_uses_with(position)
    u_arg.replace_all_uses_with(u.result)
    e_arg.replace_all_uses_with(e.result)
    for op in list(edge_body.ops):
        op.detach()
        body.insert_op_before(op, edge_loop)
    # prefetching reads ahead in the traversal order, i.e. the Hilbert list
    old_src.replace_uses_with_if(hilbert_src, lambda use: for_dst.is_ancestor(use.operation))
    edge_loop.detach()
    edge_loop.erase()


class HilbertEdgeOrderPass(ModulePass):
    """Turns each destination sweep scheduled `edges = "hilbert"` into a sweep over Hilbert-ordered edges.

    `order edges hilbert` gives a kernel the Hilbert edge list's arguments:
    convert-graph-to-loop takes it as its option
    (`convert-graph-to-loop{edge-order=hilbert}`), and this pass implements
    what the lowering prepared.
    """

    name = "hilbert-edge-order"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks]:
            for _, for_dst in sweeps(fn):
                edges = take_schedule(for_dst, "edges")
                if edges is None:
                    continue
                order = schedule_text(for_dst, "order")
                if order not in (None, "identity"):
                    # the Hilbert list fixes the traversal: a destination order has nothing to reorder
                    raise CompileError(
                        f"'order edges hilbert' and '{ORDER_DIRECTIVES.get(order, order)}' cannot be combined: "
                        "choose one"
                    )
                _one_edge_per_position(fn, for_dst)
