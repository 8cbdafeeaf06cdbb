"""order-destinations: a destination sweep visits its destinations in the runtime's order.

`sort degree` (Seastar: destinations by in-degree, so that the threads'
blocks hold destinations of similar cost) and `reorder locality` (Huang et
al.: destinations whose in-neighbourhoods overlap, by MinHash, next to each
other) are permutations computed per graph by the runtime and passed as
`dst_order` (abi.py). The sweep then runs over positions, and its body starts
with `%v = loop.dst_at %dst_order[%pos]`. The identity order needs nothing.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from gnnc.dialects import loop
from gnnc.errors import CompileError
from gnnc.passes.loop_structure import kernel_buffer, sweeps, take_schedule
from gnnc.schedule import DESTINATION_ORDERS


class OrderDestinationsPass(ModulePass):
    """Maps each sweep position to a destination through dst_order when its schedule has a non-identity `order`."""

    name = "order-destinations"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks]:
            for _, for_dst in sweeps(fn):
                order = take_schedule(for_dst, "order")
                if order is None:
                    continue
                if not isinstance(order, StringAttr) or order.data not in DESTINATION_ORDERS:
                    raise CompileError(f"unknown destination order {order}: expected one of {', '.join(DESTINATION_ORDERS)}")
                if order.data == "identity":
                    continue
                body = for_dst.body.block
                position = body.args[0]
                dst = loop.DstAtOp(kernel_buffer(fn, "dst_order"), position)
                body.insert_op_before(dst, body.first_op)  # type: ignore[arg-type]
                position.replace_uses_with_if(dst.result, lambda use: use.operation is not dst)
