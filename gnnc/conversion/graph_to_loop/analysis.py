"""What convert-graph-to-loop works out before it emits: phases, reductions, sinks.

A destination's work is a `Plan`: its reductions by *level* (a level needs
the results of the levels below it, so each level is one walk over the
in-edges), the edge and vertex results (*sinks*) each level writes, and the
aggregations that accumulate in their output row in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.ir import Operation, SSAValue

from gnnc.ir import graph

Dim = int | str


@dataclass
class Accumulator:
    """Where a per-destination reduction lives while a destination is processed."""

    buffer: SSAValue
    base: SSAValue  # index of element 0 of this destination's accumulator
    shape: tuple[Dim, ...]
    in_place: bool = False  # True when the accumulator is the output row itself


@dataclass
class Reduction:
    kind: str  # sum, mean, max, stabilizer_max, min, argmax, argmin, softmax_max, softmax_sum
    value: SSAValue  # the graph value reduced over in-edges
    owner: Operation  # graph.aggregate or graph.edge_softmax
    level: int = 0


@dataclass
class Sink:
    value: SSAValue
    buffer: SSAValue
    domain: str  # "V" or "E"
    shape: tuple[Dim, ...]
    name: str


@dataclass
class Plan:
    """What one destination computes: reductions by level, and where each result is written."""

    reductions: dict[tuple[Operation, str], Reduction]
    edge_sinks: dict[int, list[Sink]]
    vertex_sinks: list[Sink]
    rescaled: list[tuple[Sink, SSAValue]]
    in_place: dict[Operation, Sink]
    max_level: int


@dataclass
class LoopContext:
    v: SSAValue
    u: SSAValue | None = None
    e: SSAValue | None = None
    #: the relation type of the edge (or of the (vertex, relation) pair a sweep computes), once loaded
    rel: SSAValue | None = None
    #: the edge's (vertex, relation) pair of each side, once loaded
    pairs: dict[str, SSAValue] = field(default_factory=dict)
    # per-edge (or per-destination) scratch holding dot / matvec results
    computed: dict[SSAValue, tuple[SSAValue, SSAValue]] = field(default_factory=dict)


def collect_dims(fn: func.FuncOp) -> list[str]:
    """The kernel's symbolic dimensions, in the order its arguments first name them."""
    names: list[str] = []
    for arg in fn.body.block.args:
        assert isinstance(arg.type, graph.TensorType)
        for d in arg.type.shape:
            if isinstance(d, str) and d not in names:
                names.append(d)
    return names


def values_under(roots: list[SSAValue], descend: Callable[[SSAValue], bool]) -> Iterator[SSAValue]:
    """Every value reachable from roots through operands, once each; x's operands only where descend(x)."""
    seen: set[SSAValue] = set()
    todo = list(roots)
    while todo:
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        yield x
        if isinstance(x.owner, Operation) and descend(x):
            todo.extend(x.owner.operands)


def pure_vertex_map(value: SSAValue) -> bool:
    """Whether value is computed from inputs, degrees and parameters at one vertex alone."""
    t = value.type
    if not isinstance(t, graph.ValueType) or t.kind not in ("D", "P"):
        return False
    for x in values_under([value], lambda x: not isinstance(x.owner, graph.GatherOp)):
        op = x.owner
        if isinstance(op, graph.GatherOp):
            if isinstance(op.tensor.owner, graph.MaterializeOp) or op.site.data not in ("dst", "param"):
                return False
        if isinstance(op, (graph.AggregateOp, graph.EdgeSoftmaxOp)):
            return False
    return True


def read_at_src(m: graph.MaterializeOp) -> bool:
    return any(isinstance(use.operation, graph.GatherOp) and use.operation.site.data == "src" for use in m.result.uses)


#: Unary kinds that cost a call or a long polynomial per element.
TRANSCENDENTAL = frozenset({"exp", "log", "tanh", "sigmoid"})


def costly(roots: list[SSAValue]) -> bool:
    """Whether computing roots takes a transcendental function or an edge softmax."""
    for x in values_under(roots, lambda x: not isinstance(x.owner, graph.AggregateOp | graph.GatherOp)):
        op = x.owner
        if isinstance(op, graph.EdgeSoftmaxOp) or (isinstance(op, graph.UnaryOp) and op.kind.data in TRANSCENDENTAL):
            return True
    return False


def in_place_aggregate(sink: Sink) -> graph.AggregateOp | None:
    """The aggregation a vertex result can accumulate in its own row, or None.

    The result must read the aggregation only at the index it writes: the
    path from the result down to the aggregation is element-wise ops of the
    result's shape (`A`, `A * Q`, `A + P`, `relu(A + P)`; the other operands
    per destination, broadcast or not, other aggregations among them). Every
    value on that path, the result included, has one use: another reader
    would be emitted after the row is overwritten and would read the result
    instead of the sum.
    """
    return _aggregate_on_path(sink.value, tuple(sink.shape))


def _aggregate_on_path(value: SSAValue, shape: tuple[Dim, ...]) -> graph.AggregateOp | None:
    t = value.type
    if not isinstance(t, graph.ValueType) or t.shape != shape or len(list(value.uses)) != 1:
        return None
    op = value.owner
    if isinstance(op, graph.AggregateOp):
        return op
    if isinstance(op, graph.UnaryOp):
        return _aggregate_on_path(op.operand, shape)
    if not isinstance(op, graph.BinaryOp) or op.lhs is op.rhs:
        return None
    for on_path, other in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
        ot = other.type
        if isinstance(ot, graph.ValueType) and ot.kind in ("A", "D", "P"):
            found = _aggregate_on_path(on_path, shape)
            if found is not None:
                return found
    return None


def rescalable(sink: Sink, dep_level: Callable[[SSAValue], int]) -> tuple[SSAValue, SSAValue] | None:
    """(P, Q) when an edge result is P * Q with Q per destination and later than P."""
    op = sink.value.owner
    if not (isinstance(op, graph.BinaryOp) and op.kind.data == "mul"):
        return None
    for early, scale in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
        et, st = early.type, scale.type
        assert isinstance(et, graph.ValueType) and isinstance(st, graph.ValueType)
        if (
            st.kind in ("A", "D")
            and et.shape == tuple(sink.shape)
            and tuple(sink.shape[: len(st.shape)]) == st.shape
            and dep_level(early) < dep_level(scale)
        ):
            return early, scale
    return None


def analyse(sinks: list[Sink], result_buffers: list[SSAValue]) -> Plan:
    """The reductions of one destination, their levels, and where each sink is written."""
    reductions: dict[tuple[Operation, str], Reduction] = {}
    level_of: dict[SSAValue, int] = {}

    def dep_level(x: SSAValue) -> int:
        """The highest reduction level x needs (0: none)."""
        if x in level_of:
            return level_of[x]
        op = x.owner
        if isinstance(op, graph.AggregateOp):
            kind = "stabilizer_max" if op.stabilizer is not None else op.kind.data
            r = Reduction(kind, op.operand, op)
            r.level = 1 + dep_level(op.operand)
            reductions[(op, "agg")] = r
            if r.kind in ("argmax", "argmin"):
                # the id accumulates beside the best value so far, updated together
                reductions[(op, "best")] = Reduction(r.kind + "_best", op.operand, op, r.level)
            lvl = r.level
        elif isinstance(op, graph.EdgeSoftmaxOp):
            rmax = Reduction("softmax_max", op.operand, op, 1 + dep_level(op.operand))
            rsum = Reduction("softmax_sum", op.operand, op, rmax.level + 1)
            reductions[(op, "max")] = rmax
            reductions[(op, "sum")] = rsum
            lvl = rsum.level
        elif isinstance(op, graph.GatherOp) or not isinstance(op, Operation):
            lvl = 0
        else:
            lvl = max((dep_level(o) for o in op.operands), default=0)
        level_of[x] = lvl
        return lvl

    edge_sinks: dict[int, list[Sink]] = {}
    vertex_sinks: list[Sink] = []
    rescaled: list[tuple[Sink, SSAValue]] = []
    for s in sinks:
        lvl = dep_level(s.value)
        if s.domain != "E":
            vertex_sinks.append(s)
            continue
        split = rescalable(s, dep_level)
        if split is None:
            edge_sinks.setdefault(lvl + 1, []).append(s)
            continue
        # An edge result P * Q whose per-destination factor Q is known
        # only after the walk that can compute P: store P in that walk
        # and scale it by Q in a last walk that touches nothing else
        # (softmax weights: exp(s - m) stored beside the sums, times 1/z).
        early, scale = split
        edge_sinks.setdefault(dep_level(early) + 1, []).append(Sink(early, s.buffer, s.domain, s.shape, s.name))
        rescaled.append((s, scale))

    # An aggregation whose only use is a vertex result accumulates in the
    # output row itself: no scratch, no copy. So does one whose only use
    # is a per-destination scale of it (a deferred softmax division): the
    # row is then scaled in place. Accumulating in scratch instead, beside
    # the softmax sums, made the wide-row accumulation slower (the row and
    # the sums share the scratch pointer, so LLVM must assume they alias).
    in_place: dict[Operation, Sink] = {}
    for s in vertex_sinks:
        agg = in_place_aggregate(s)
        if agg is not None and s.buffer in result_buffers:
            in_place[agg] = s

    max_level = max([r.level for r in reductions.values()] + list(edge_sinks) + [0])
    return Plan(reductions, edge_sinks, vertex_sinks, rescaled, in_place, max_level)
