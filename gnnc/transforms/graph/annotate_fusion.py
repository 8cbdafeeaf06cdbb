"""annotate-fusion: tags each graph op with the loop nest it will run in.

A report, not a transformation: the semantics do not change. Each op gets
discardable attributes that the graph dump shows:

- `fusion_group`: which `loop.for_dst` nest (phase) of convert-graph-to-loop
  computes it, counted from 0 in execution order. A phase ends where a vertex
  or edge value is materialised and read back (`gather` of a
  `graph.materialize`). Ops in one group are fused: Seastar's source-edge,
  edge-edge and edge-aggregate fusion put a whole `gat` in group 0.
- `fusion_level`: inside one destination's iteration, the in-edge loop that
  computes it (1, 2, ...: a reduction at level L needs the results of level
  L - 1), or 0 for per-destination code outside the in-edge loops.

Both are computed as the lowering computes phases and levels. Elementwise ops
are evaluated inline wherever they are consumed; an op consumed by several
nests (a cheap leaf read) is tagged with the first of them.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from gnnc.ir import graph

GROUP_ATTR = "fusion_group"
LEVEL_ATTR = "fusion_level"


class _Analysis:
    """Phases and levels, as KernelLowering._phases and _emit_destination compute them."""

    def __init__(self) -> None:
        self.phase_of: dict[SSAValue, int] = {}
        self.level_of: dict[SSAValue, int] = {}

    def phase(self, v: SSAValue) -> int:
        if v not in self.phase_of:
            op = v.owner
            p = 0
            if isinstance(op, graph.GatherOp) and isinstance(op.tensor.owner, graph.MaterializeOp):
                p = self.phase(op.tensor.owner.operand) + 1
            elif isinstance(op, Operation):
                p = max((self.phase(o) for o in op.operands), default=0)
            self.phase_of[v] = p
        return self.phase_of[v]

    def level(self, v: SSAValue) -> int:
        """The highest reduction level v needs (0: none)."""
        if v not in self.level_of:
            op = v.owner
            if isinstance(op, graph.AggregateOp):
                lvl = 1 + self.level(op.operand)
            elif isinstance(op, graph.EdgeSoftmaxOp):
                lvl = 2 + self.level(op.operand)  # a max, then a sum of exponentials
            elif isinstance(op, graph.GatherOp) or not isinstance(op, Operation):
                lvl = 0
            else:
                lvl = max((self.level(o) for o in op.operands), default=0)
            self.level_of[v] = lvl
        return self.level_of[v]


def _is_edge(value: SSAValue) -> bool:
    t = value.type
    return isinstance(t, graph.ValueType) and t.kind in ("S", "E")


def annotate_kernel(fn: func.FuncOp) -> None:
    an = _Analysis()
    ret = fn.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    sinks = list(ret.operands) + [op.operand for op in fn.body.walk() if isinstance(op, graph.MaterializeOp)]
    # the lowering emits one for_dst per distinct sink phase, in order
    rank = {p: i for i, p in enumerate(sorted({an.phase(s) for s in sinks}))}
    group: dict[Operation, int] = {}

    def visit(v: SSAValue, g: int) -> None:
        op = v.owner
        if not isinstance(op, Operation) or group.get(op, g + 1) <= g:
            return
        group[op] = g
        if isinstance(op, graph.GatherOp):
            return  # a materialised tensor belongs to the nest that wrote it
        for o in op.operands:
            visit(o, g)

    for s in sinks:
        visit(s, rank[an.phase(s)])
    for op in fn.body.walk():
        if isinstance(op, graph.MaterializeOp):
            group[op] = group.get(op.operand.owner, rank[an.phase(op.operand)])  # type: ignore[arg-type]  # a block argument's owner is no key: get gives the default
        if op not in group or not op.results:
            continue
        value: SSAValue = op.results[0]
        if isinstance(op, graph.MaterializeOp):
            value = op.operand
        if isinstance(op, graph.AggregateOp | graph.EdgeSoftmaxOp):
            level = an.level(value)  # accumulated in (for softmax: finished by) this loop
        elif _is_edge(value) or (isinstance(op, graph.MaterializeOp) and _is_edge(op.operand)):
            level = an.level(value) + 1  # evaluated in the first loop where its inputs are known
        else:
            level = 0
        op.attributes[GROUP_ATTR] = IntegerAttr(group[op], i64)
        op.attributes[LEVEL_ATTR] = IntegerAttr(level, i64)


class AnnotateFusionPass(ModulePass):
    """Tags every graph op with its loop nest (`fusion_group`) and in-edge loop (`fusion_level`)."""

    name = "annotate-fusion"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in op.ops:
            if isinstance(fn, func.FuncOp) and graph.RESULT_NAMES in fn.attributes:
                annotate_kernel(fn)
