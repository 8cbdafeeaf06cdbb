"""unfuse: every graph operation in its own loop nest (`--no-fusion`, ablation only).

What an unfused pipeline of library calls does (a DGL / PyG layer written op
by op): each edge-context operation writes an E tensor (edge-sized
intermediates), each per-destination one a V tensor, and the next operation
reads it back. Here: the result of every op of graph type S or E (gathers,
degrees and constants excepted: they are the library's inputs) is written by
`graph.materialize` and read back with `graph.gather ... edge`; every A / D op
likewise through a V tensor read with `gather dst`. Each read of a
materialised tensor starts a new phase of the lowering, so each operation runs
in its own `loop.for_dst` nest. Parameter-only (P) arithmetic stays inline.

The kernel is rebuilt op by op rather than patched: reading an aggregate back
through `gather dst` turns its graph type A into D, which changes the types of
its users (`x[v] + sum(...)` is then D, not A).
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from gnnc.ir import graph

#: Ops whose results an unfused pipeline writes out (leaves and P stay inline).
_COMPUTE_OPS = (graph.BinaryOp, graph.UnaryOp, graph.DotOp, graph.MatVecOp, graph.AggregateOp, graph.EdgeSoftmaxOp)


def _rebuild(op: Operation, operands: list[SSAValue]) -> Operation:
    """A fresh copy of a graph op on new operands, its result type recomputed."""
    if isinstance(op, graph.GatherOp):
        return graph.GatherOp(operands[0], op.site.data)
    if isinstance(op, graph.BinaryOp):
        return graph.BinaryOp(op.kind.data, *operands)
    if isinstance(op, graph.UnaryOp):
        return graph.UnaryOp(op.kind.data, operands[0], op.slope_value if op.slope is not None else None)
    if isinstance(op, graph.DotOp):
        return graph.DotOp(*operands)
    if isinstance(op, graph.MatVecOp):
        return graph.MatVecOp(*operands)
    if isinstance(op, graph.OuterOp):
        return graph.OuterOp(*operands)
    if isinstance(op, graph.TransposeOp):
        return graph.TransposeOp(operands[0])
    if isinstance(op, graph.AggregateOp):
        return graph.AggregateOp(op.kind.data, operands[0])
    if isinstance(op, graph.EdgeSoftmaxOp):
        return graph.EdgeSoftmaxOp(operands[0])
    if isinstance(op, graph.MaterializeOp):
        return graph.MaterializeOp(operands[0])
    if isinstance(op, func.ReturnOp):
        return func.ReturnOp(*operands)
    return op.clone(value_mapper=dict(zip(op.operands, operands)))


def _needs_tensor(op: Operation) -> bool:
    """Whether some use of op's result would read it inside another operation."""
    return any(not isinstance(use.operation, func.ReturnOp | graph.MaterializeOp) for use in op.results[0].uses)


def _pair_values(block: Block) -> set[SSAValue]:
    """The values computed per (vertex, relation) pair: a pair sweep writes them out
    already (`graph.materialize_pairs`), and inside it they read no edge rows."""
    found: set[SSAValue] = set()
    todo = [op.operand for op in block.ops if isinstance(op, graph.MaterializePairsOp)]
    while todo:
        value = todo.pop()
        if value in found:
            continue
        found.add(value)
        if isinstance(value.owner, Operation) and not isinstance(value.owner, graph.GatherOp):
            todo.extend(value.owner.operands)
    return found


def unfuse_kernel(fn: func.FuncOp) -> None:
    """Rebuilds fn with every non-leaf graph op's result written out and read back."""
    block = fn.body.block
    old_ops = list(block.ops)
    per_pair = _pair_values(block)
    mapping: dict[SSAValue, SSAValue] = {}  # old value -> what its graph users read
    direct: dict[SSAValue, SSAValue] = {}  # old value -> its rebuilt value (returns, materialize)
    # The rebuilt kernel is appended after the old one, which is then erased.
    for op in old_ops:
        rebuilt_whole = isinstance(op, func.ReturnOp | graph.MaterializeOp | graph.MaterializePairsOp)
        table = direct if rebuilt_whole else mapping
        new = _rebuild(op, [table.get(o, o) for o in op.operands])
        block.add_op(new)
        if not new.results:
            continue
        old, value = op.results[0], new.results[0]
        mapping[old] = direct[old] = value
        t = value.type
        if (
            isinstance(op, _COMPUTE_OPS)
            and isinstance(t, graph.ValueType)
            and t.kind != "P"
            and old not in per_pair
            and _needs_tensor(op)
        ):
            tensor = graph.MaterializeOp(value)
            read = graph.GatherOp(tensor.result, "dst" if t.kind in ("A", "D") else "edge")
            block.add_op(tensor)
            block.add_op(read)
            mapping[old] = read.result
    for op in reversed(old_ops):
        op.detach()
        op.erase()
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    fn.function_type = FunctionType.from_lists(fn.function_type.inputs.data, [v.type for v in ret.operands])


class UnfusePass(ModulePass):
    """Materialises every graph operation's result: one loop nest per operation."""

    name = "unfuse"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in op.ops:
            if isinstance(fn, func.FuncOp) and graph.RESULT_NAMES in fn.attributes:
                unfuse_kernel(fn)
