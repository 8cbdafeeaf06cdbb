"""vectorize-edges: the scalar work of an in-edge walk runs W edges at a time (`vectorize edges W`).

A walk computes per edge a few scalars (gat: a score, its exponential, the
softmax maximum and sum; gcn_norm: a weight from two degrees) and then,
maybe, a row (`alpha * h[u]`, F wide). The row is a vector already; the
scalars are not, and with one head they are most of a walk's time. This
pass cuts the walk into chunks of W in-edges. Per chunk, the scalar work
runs in one `loop.lanes` op, edge j of the chunk on lane j (the CPU backend
makes it W-wide vector code: a masked load of the chunk's sources, gathers
of `el[u]`, masked loads and stores of edge rows by position); the rows then
run edge after edge, as before, reading what the lanes computed from a
W-element buffer on the stack.

What moves where:
- accumulations into one place (a softmax's running max and sum: `slot =
  max(slot, x)`, the slot the same for every edge) become reductions of the
  lanes' values, combined into the slot once per chunk; sums are
  reassociated, as schedules may (docs/language.md);
- per-edge temporaries in a scratch slot of the walk (the exponential the
  row multiplies by) get an element per lane;
- scalars of the lane work the rows use go through a W-element buffer;
  index arithmetic is recomputed instead;
- work that uses a row's result (a `tanh(dot(...))` weight) stays with the
  rows;
- only the rows' prefetches stay: a gather of W lanes has W misses in
  flight by itself, and a scalar prefetch loop per chunk cost five
  instructions an edge.

A walk qualifies when some float operation is left outside the rows (a head
axis of size 1 counts as none: specialize-unit-dims' copy, or a kernel
specialised to one head), the rows write nothing the lanes touch, the rows
read what the lanes stored only at the same edge, and every place the lanes
store to is per edge (at its position or id, not its source), an
accumulation, or a temporary of the walk. Walks over a partition's or a
group's own edge lists are left alone. A kernel given `vectorize edges W`
with no walk that qualifies is a CompileError naming why; every kernel's ABI
record says how many walks would qualify (`lanes.walks`), how many of them
reduce or have no rows (`lanes.reducing`), in which copy for a dimension of
size 1 they are (`lanes.unit_dims`), and whether their lanes address edge
rows by edge id (`lanes.edge_ids`): what the runtime's default heuristic
asks.

The lanes pay where destinations have many in-edges; with few (a mesh of 4
per destination) their fixed cost per walk is not paid back. Measurements:
docs/design/edge-lanes.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from gnnc.errors import CompileError
from gnnc.ir import abi, kernel_abi, llvm_ext, loop
from gnnc.ir.directives import check_directive_option
from gnnc.ir.loop import SCRATCH_BASE_ATTR
from gnnc.ir.loop_structure import SweepKind, constant_index, give_schedule, kernel_buffer, take_schedule
from gnnc.transforms.loop.specialize_unit_dims import UNIT_DIM_ATTR

index = IndexType()

#: The combining ops an accumulation may use, by loop.lanes reduction kind.
_COMBINERS: dict[type[arith.FloatingPointLikeBinaryOperation], str] = {
    arith.AddfOp: "addf",
    arith.MulfOp: "mulf",
    arith.MaxnumfOp: "maxnumf",
    arith.MinnumfOp: "minnumf",
    arith.MaximumfOp: "maximumf",
    arith.MinimumfOp: "minimumf",
}


def _const(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, index))


def _unit_extent(op: Operation, sized: bool = False) -> bool:
    """A feature loop of one iteration; with `sized`, also one of a size given at run time (what a
    call of size 1 would compile in)."""
    if not isinstance(op, loop.ForFeatureOp):
        return False
    extent = constant_index(op.extent)
    return extent == 1 or (sized and extent is None)


def _is_unit_loop(op: loop.ForFeatureOp, sized: bool = False) -> bool:
    """A feature loop of one iteration with no loop inside: scalar work."""
    return _unit_extent(op, sized) and not any(
        isinstance(o, loop.ForFeatureOp | scf.ForOp | scf.IfOp) for o in op.body.block.walk()
    )


def _is_prefetch_loop(op: Operation) -> bool:
    return isinstance(op, scf.ForOp) and any(isinstance(o, llvm_ext.PrefetchOp) for o in op.body.walk())


class _IndexKey:
    """A structural key of an index computed in a walk: equal keys, same place.

    The walk's (pos, u, e) are named, values from outside the walk are
    themselves, a unit loop's induction variable is 0."""

    def __init__(self, walk: loop.ForInEdgesOp, sized: bool = False):
        self.walk, self.sized = walk, sized
        self.args: dict[SSAValue, str] = dict(zip(walk.body.block.args, ("pos", "u", "e")))

    def __call__(self, v: SSAValue) -> object:
        if v in self.args:
            return self.args[v]
        constant = constant_index(v)
        if constant is not None:
            return constant
        owner = v.owner
        if isinstance(owner, Block):
            parent = owner.parent_op()
            if parent is not None and _unit_extent(parent, self.sized):
                return 0
            return ("value", id(v))
        if not self.walk.is_ancestor(owner):
            return ("value", id(v))
        if isinstance(owner, arith.IndexCastOp):
            return self(owner.input)
        if isinstance(owner, arith.AddiOp | arith.MuliOp):
            a, b = self(owner.lhs), self(owner.rhs)
            add = isinstance(owner, arith.AddiOp)
            neutral, absorbing = (0, None) if add else (1, 0)
            if a == neutral:
                return b
            if b == neutral:
                return a
            if absorbing is not None and absorbing in (a, b):
                return absorbing
            return ("add" if add else "mul", *sorted((a, b), key=repr))
        return ("value", id(v))


def _mentions(key: object, name: str) -> bool:
    if key == name:
        return True
    return isinstance(key, tuple) and key[0] in ("add", "mul") and any(_mentions(k, name) for k in key[1:])


def _per_edge(key: object) -> bool:
    return _mentions(key, "pos") or _mentions(key, "e")


@dataclass
class _Accumulation:
    load: memref.LoadOp
    combine: arith.FloatingPointLikeBinaryOperation
    store: memref.StoreOp
    kind: str

    @property
    def term(self) -> SSAValue:
        """The edge's contribution: the combining op's operand that is not the loaded slot."""
        a, b = self.combine.operands
        return b if a is self.load.res else a


@dataclass
class _Plan:
    prefetch: list[Operation] = field(default_factory=list)
    lanes: list[Operation] = field(default_factory=list)
    rows: list[Operation] = field(default_factory=list)
    accumulations: list[_Accumulation] = field(default_factory=list)
    #: place key -> ops (in lanes and rows) that access a per-edge temporary there
    temps: dict[object, list[memref.LoadOp | memref.StoreOp]] = field(default_factory=dict)
    #: values of the lane work the rows use, passed through a buffer
    passed: list[SSAValue] = field(default_factory=list)


def _accesses(ops: list[Operation]) -> list[memref.LoadOp | memref.StoreOp]:
    return [o for top in ops for o in top.walk() if isinstance(o, memref.LoadOp | memref.StoreOp)]


def _place(key: _IndexKey, op: memref.LoadOp | memref.StoreOp) -> tuple[int, object]:
    return (id(op.memref), key(op.indices[0]))


def _recomputable(value: SSAValue, walk: loop.ForInEdgesOp) -> bool:
    """Index arithmetic of (pos, u, e) and values from outside the walk: the rows may recompute it."""
    owner = value.owner
    if isinstance(owner, Block):
        return True
    if not walk.is_ancestor(owner):
        return True
    if isinstance(owner, arith.ConstantOp):
        return True
    if isinstance(
        owner, arith.AddiOp | arith.MuliOp | arith.SubiOp | arith.IndexCastOp | arith.MinSIOp | arith.MaxSIOp
    ):
        return all(_recomputable(o, walk) for o in owner.operands)
    return False


def _lane_op(op: Operation, sized: bool = False) -> bool:
    """Whether a top-level op of a walk can run in lanes, by its kind: straight-line scalar code."""
    if isinstance(op, loop.ForFeatureOp):
        return _is_unit_loop(op, sized)
    return (op.dialect_name() in ("arith", "math") or isinstance(op, memref.LoadOp | memref.StoreOp)) and not op.regions


def plan_walk(walk: loop.ForInEdgesOp, sized: bool = False) -> _Plan | str:
    """How to split a walk into lanes and rows, or why it cannot be. With `sized`, how it would
    be split if its head loops of sizes given at run time had size 1 (a call specialised to one
    head): what the ABI record tells the runtime, not what the rewrite does."""
    block = walk.body.block
    body = list(block.ops)[:-1]
    plan = _Plan()
    prefetch: set[Operation] = set()
    for op in reversed(body):
        if _is_prefetch_loop(op):
            prefetch.add(op)
        elif (
            op.results
            and all(r.uses for r in op.results)
            and all(any(p.is_ancestor(use.operation) for p in prefetch) for r in op.results for use in r.uses)
        ):
            prefetch.add(op)
    # rows: loops over features (and what is not straight-line code), and whatever uses their values
    rows: set[Operation] = set()
    for op in body:
        if op in prefetch:
            continue
        uses_rows = any(
            isinstance(v.owner, Operation) and _top(v.owner, walk) in rows for o in op.walk() for v in o.operands
        )
        if not _lane_op(op, sized) or uses_rows:
            rows.add(op)
    row_buffers = {id(o.memref) for top in rows for o in top.walk() if isinstance(o, memref.LoadOp | memref.StoreOp)}
    position = {op: i for i, op in enumerate(body)}
    for op in body:
        if op in prefetch:
            # a gather of W lanes has W misses in flight by itself: only the rows' prefetches stay
            if _is_prefetch_loop(op) and not any(
                isinstance(o, llvm_ext.PrefetchOp) and id(o.memref) in row_buffers for o in op.walk()
            ):
                continue
            plan.prefetch.append(op)
        else:
            (plan.rows if op in rows else plan.lanes).append(op)
    lane_ops = [o for top in plan.lanes for o in top.walk()]
    if not any(
        o.dialect_name() in ("arith", "math")
        and not isinstance(o, arith.ConstantOp)
        and any(isinstance(r.type, Float32Type | Float64Type) for r in o.results)
        for o in lane_ops
    ):
        return "no float operation outside the rows"
    key = _IndexKey(walk, sized)
    lane_mem, row_mem = _accesses(plan.lanes), _accesses(plan.rows)
    row_written = {id(o.memref) for o in row_mem if isinstance(o, memref.StoreOp)}
    if any(id(o.memref) in row_written for o in lane_mem):
        return "the rows write what the per-edge work reads or writes"
    order = {o: i for i, o in enumerate(lane_mem)}
    one_place: dict[object, list[memref.LoadOp | memref.StoreOp]] = {}
    for o in lane_mem:
        k = key(o.indices[0])
        if isinstance(o, memref.StoreOp) and _mentions(k, "u"):
            return "a store at the source's row"
        if not _per_edge(k) and not _mentions(k, "u"):
            one_place.setdefault(_place(key, o), []).append(o)
    for place, accesses in one_place.items():
        stores = [o for o in accesses if isinstance(o, memref.StoreOp)]
        if not stores:
            continue  # read by every edge alike
        first = min(accesses, key=order.__getitem__)
        if isinstance(first, memref.StoreOp):
            if not _walk_scratch(first.indices[0], walk):
                return "a value kept in one place for after the walk"
            plan.temps[place] = list(accesses)
            continue
        # an accumulation: load, combine, store back, nothing else
        combine = stores[0].value.owner
        if not (
            len(accesses) == 2
            and len(stores) == 1
            and isinstance(combine, arith.FloatingPointLikeBinaryOperation)
            and type(combine) in _COMBINERS
            and first.res in combine.operands
            and first.res.has_one_use()
            and combine.results[0].has_one_use()
        ):
            return "a place the per-edge work both reads and writes, other than by an accumulation"
        acc = _Accumulation(first, combine, stores[0], _COMBINERS[type(combine)])
        if loop.depends_on(acc.term, first.res):
            return "an accumulation that reads itself"
        plan.accumulations.append(acc)
    accumulated = {_place(key, a.store) for a in plan.accumulations}
    lane_stores = [o for o in lane_mem if isinstance(o, memref.StoreOp)]
    first_row = min((position[op] for op in plan.rows), default=len(body))
    for o in row_mem:
        place = _place(key, o)
        if place in accumulated:
            return "the rows read an accumulation of the per-edge work"
        if place in plan.temps:
            plan.temps[place].append(o)
            continue
        for st in lane_stores:
            # a row may read what the lanes stored for its own edge, before any row ran
            if st.memref is o.memref and (
                _place(key, st) != place or position[cast(Operation, _top(st, walk))] > first_row
            ):
                return "the rows read what the per-edge work stores, in another order"
    lane_set = set(lane_ops)
    for top in plan.rows + plan.prefetch:
        for inner in top.walk():
            for operand in inner.operands:
                owner = operand.owner
                if isinstance(owner, Operation) and owner in lane_set and operand not in plan.passed:
                    if not _recomputable(operand, walk):
                        plan.passed.append(operand)
    return plan


def _top(op: Operation | None, walk: loop.ForInEdgesOp) -> Operation | None:
    """The op of the walk's body that op is or is inside, None outside the walk."""
    while op is not None and op.parent_op() is not walk:
        op = op.parent_op()
    return op


def _walk_scratch(index_value: SSAValue, walk: loop.ForInEdgesOp) -> bool:
    """Whether an index is in a scratch slot the walk allocated for itself (its base is computed
    in the walk), which nothing after the walk reads: a per-edge temporary."""
    stack, seen = [index_value], set()
    while stack:
        v = stack.pop()
        owner = v.owner
        if v in seen or not isinstance(owner, Operation) or not walk.is_ancestor(owner):
            continue
        seen.add(v)
        if SCRATCH_BASE_ATTR in owner.attributes:
            return True
        stack.extend(owner.operands)
    return False


def _inline_unit_loops(block: Block) -> None:
    """A unit feature loop's body in place of the loop, its induction variable 0."""
    for op in list(block.ops):
        if isinstance(op, loop.ForFeatureOp):
            zero = _const(0)
            block.insert_op_before(zero, op)
            inner = op.body.block
            inner.args[0].replace_all_uses_with(zero.result)
            for o in list(inner.ops)[:-1]:
                o.detach()
                block.insert_op_before(o, op)
            op.detach()
            op.erase()


class _WalkRewriter:
    """Builds the chunked walk of a plan."""

    TEMP = "gnnc.vectorize_edges.temp"
    ACCUMULATION = "gnnc.vectorize_edges.accumulation"

    def __init__(self, walk: loop.ForInEdgesOp, plan: _Plan, width: int):
        self.walk, self.plan, self.width = walk, plan, width
        self.pos, self.src_arg, self.eid_arg = walk.body.block.args

    def _edge(self, block: Block, chunk: SSAValue, lane: SSAValue) -> dict[SSAValue, SSAValue]:
        """Position, source and edge id of the chunk's lane-th edge, as the walk's arguments map."""
        position = arith.AddiOp(chunk, lane)
        block.add_op(position)
        mapping: dict[SSAValue, SSAValue] = {self.pos: position.result}
        for arg, ids in ((self.src_arg, self.walk.src), (self.eid_arg, self.walk.eid)):
            if arg.uses:
                raw = memref.LoadOp.get(ids, [position])
                cast = arith.IndexCastOp(raw, index)
                block.add_ops([raw, cast])
                mapping[arg] = cast.result
        return mapping

    def _materialize(self, value: SSAValue, block: Block, mapping: dict[SSAValue, SSAValue]) -> SSAValue:
        """`value` computed in block: index arithmetic of the walk cloned, a unit loop's variable 0."""
        if value in mapping:
            return mapping[value]
        owner = value.owner
        if isinstance(owner, Block):
            parent = owner.parent_op()
            if parent is not None and _unit_extent(parent) and self.walk.is_ancestor(parent):
                zero = _const(0)
                block.add_op(zero)
                mapping[value] = zero.result
                return zero.result
            return value
        if not self.walk.is_ancestor(owner):
            return value
        for operand in owner.operands:
            self._materialize(operand, block, mapping)
        clone = owner.clone(value_mapper=mapping)
        block.add_op(clone)
        for old, new in zip(owner.results, clone.results):
            mapping[old] = new
        return mapping[value]

    def _redirect_temps(self, block: Block, lane: SSAValue, buffers: Sequence[SSAValue]) -> None:
        for o in list(block.walk()):
            mark = o.attributes.pop(self.TEMP, None)
            if isinstance(mark, IntegerAttr):
                buffer = buffers[mark.value.data]
                if isinstance(o, memref.StoreOp):
                    o.operands[1], o.operands[2] = buffer, lane
                    o.attributes[loop.WHOLE_VECTOR_ATTR] = UnitAttr()
                else:
                    o.operands[0], o.operands[1] = buffer, lane

    def _mark(self) -> None:
        for i, place in enumerate(self.plan.temps):
            for o in self.plan.temps[place]:
                o.attributes[self.TEMP] = IntegerAttr(i, IntegerType(64))
        for i, a in enumerate(self.plan.accumulations):
            for op in (a.load, a.combine, a.store):
                op.attributes[self.ACCUMULATION] = IntegerAttr(i, IntegerType(64))

    def _lanes_block(
        self, start: SSAValue, passing: Sequence[SSAValue], buffers: Sequence[SSAValue]
    ) -> tuple[Block, list[SSAValue]]:
        """The per-edge work of one lane; accumulations yield their terms instead of storing."""
        plan = self.plan
        block = Block(arg_types=[index])
        lane = block.args[0]
        mapping = self._edge(block, start, lane)
        for top in plan.lanes:
            block.add_op(top.clone(value_mapper=mapping))
        _inline_unit_loops(block)
        terms: list[SSAValue | None] = [None] * len(plan.accumulations)
        marked: dict[int, list[Operation]] = {}
        for o in list(block.ops):
            mark = o.attributes.pop(self.ACCUMULATION, None)
            if isinstance(mark, IntegerAttr):
                marked.setdefault(mark.value.data, []).append(o)
        for i, ops in marked.items():
            load = next(o for o in ops if isinstance(o, memref.LoadOp))
            combine = next(o for o in ops if not isinstance(o, memref.LoadOp | memref.StoreOp))
            store = next(o for o in ops if isinstance(o, memref.StoreOp))
            a, b = combine.operands
            terms[i] = b if a is load.results[0] else a
            for o in (store, combine, load):
                o.detach()
                o.erase()
        for v, buf in zip(plan.passed, passing):
            store = memref.StoreOp.get(mapping[v], buf, [lane])
            store.attributes[loop.WHOLE_VECTOR_ATTR] = UnitAttr()
            block.add_op(store)
        assert all(t is not None for t in terms)
        block.add_op(loop.YieldOp(*terms))  # type: ignore[arg-type]  # none is None: asserted above
        self._redirect_temps(block, lane, buffers)
        return block, terms  # type: ignore[return-value]  # none is None: asserted above

    def _rows_block(self, start: SSAValue, passing: Sequence[SSAValue], buffers: Sequence[SSAValue]) -> Block:
        """The rows, edge after edge, with their prefetches; lane values from the buffers."""
        plan = self.plan
        block = Block(arg_types=[index])
        lane = block.args[0]
        mapping = self._edge(block, start, lane)
        for v, buf in zip(plan.passed, passing):
            load = memref.LoadOp.get(buf, [lane])
            block.add_op(load)
            mapping[v] = load.res
        lane_ops = _lane_set(plan)
        for top in plan.prefetch + plan.rows:
            for o in top.walk():
                for operand in o.operands:
                    if isinstance(operand.owner, Operation) and operand.owner in lane_ops:
                        self._materialize(operand, block, mapping)
        for top in plan.prefetch + plan.rows:
            block.add_op(top.clone(value_mapper=mapping))
        self._redirect_temps(block, lane, buffers)
        block.add_op(scf.YieldOp())
        return block

    def rewrite(self) -> None:
        walk, plan, width = self.walk, self.plan, self.width
        self._mark()
        one, step, zero = _const(1), _const(width), _const(0)
        next_dst = arith.AddiOp(walk.dst, one)
        lo_raw, hi_raw = memref.LoadOp.get(walk.indptr, [walk.dst]), memref.LoadOp.get(walk.indptr, [next_dst])
        lo, hi = arith.IndexCastOp(lo_raw, index), arith.IndexCastOp(hi_raw, index)
        temp_buffers = [
            memref.AllocaOp.get(cast(MemRefType, accesses[0].memref.type).element_type, 64, [width])
            for accesses in plan.temps.values()
        ]
        pass_buffers = [memref.AllocaOp.get(v.type, 64, [width]) for v in plan.passed]
        before: list[Operation] = [one, step, zero, next_dst, lo_raw, hi_raw, lo, hi, *temp_buffers, *pass_buffers]
        temps = [b.memref for b in temp_buffers]
        passing = [b.memref for b in pass_buffers]

        chunk = Block(arg_types=[index])
        start = chunk.args[0]
        left = arith.SubiOp(hi, start)
        count = arith.MinSIOp(left, step)
        chunk.add_ops([left, count])
        if plan.prefetch and not plan.rows:
            ahead = Block(arg_types=[index])
            mapping = self._edge(ahead, start, ahead.args[0])
            for top in plan.prefetch:
                ahead.add_op(top.clone(value_mapper=mapping))
            ahead.add_op(scf.YieldOp())
            chunk.add_op(scf.ForOp(zero, count, one, [], ahead))
        lanes, terms = self._lanes_block(start, passing, temps)
        lanes_op = loop.LanesOp(
            count.result, width, lanes, [a.kind for a in plan.accumulations], [t.type for t in terms]
        )
        chunk.add_op(lanes_op)
        # each accumulation takes the chunk's reduction once
        for a, reduced in zip(plan.accumulations, lanes_op.res):
            place = self._materialize(a.store.indices[0], chunk, {self.pos: start})
            old = memref.LoadOp.get(a.store.memref, [place])
            new = type(a.combine)(old, reduced)
            chunk.add_ops([old, new, memref.StoreOp.get(new.results[0], a.store.memref, [place])])
        if plan.rows:
            row_loop = scf.ForOp(zero, count, one, [], self._rows_block(start, passing, temps))
            row_loop.attributes[abi.NO_VECTORIZE_ATTR] = UnitAttr()
            chunk.add_op(row_loop)
        chunk.add_op(scf.YieldOp())
        parent = walk.parent_block()
        assert parent is not None
        parent.insert_ops_before([*before, scf.ForOp(lo, hi, step, [], chunk)], walk)
        walk.detach()
        walk.erase()


def _lane_set(plan: _Plan) -> set[Operation]:
    return {o for top in plan.lanes for o in top.walk()}


def _lanes_read_edge_ids(walk: loop.ForInEdgesOp, plan: _Plan, sized: bool = False) -> bool:
    """Whether the lane work loads or stores an edge row at the edge's id (not its position)."""
    key = _IndexKey(walk, sized)
    return any(_mentions(key(o.indices[0]), "e") for o in _accesses(plan.lanes))


def _lanes_record(
    found: list[tuple[loop.ForInEdgesOp, _Plan]], sized: list[tuple[loop.ForInEdgesOp, _Plan]]
) -> abi.Lanes:
    """What the runtime's default heuristic asks of a kernel's walks (ABI record `lanes`):

    - walks: how many qualify as compiled (what `vectorize edges` would split);
    - reducing: how many of the ones it would take reduce or have no rows; a weight per edge
      before a row gains nothing from lanes, a softmax does (docs/design/edge-lanes.md).
      They are the walks as compiled, or, if none, those that would qualify were the head
      loops of run-time size of size 1 (a softmax of edge values alone, gat's gradient stages),
      and then `sized` says the call's sizes must be compiled in (`specialize`) first;
    - unit_dims: the dimensions that must be 1: the copy specialize-unit-dims made for them, or
      those head loops;
    - edge_ids: whether the lanes load or store edge rows at the edge's id: then gathers and
      scatters (gat's alpha) cost the gain (by position, with `edges sorted`, they do not).
    """

    def reduces(plans: list[tuple[loop.ForInEdgesOp, _Plan]]) -> list[tuple[loop.ForInEdgesOp, _Plan]]:
        return [(w, p) for w, p in plans if p.accumulations or not p.rows]

    taken, needs_sizes = reduces(found), False
    if not taken and reduces(sized):
        taken, needs_sizes = reduces(sized), True
    dims: set[str] = set()
    for w, _ in taken:
        dims.update(_unit_dims(w))
        if needs_sizes:
            dims.update(
                o.dim.data
                for o in w.body.walk()
                if isinstance(o, loop.ForFeatureOp)
                and o.dim is not None
                and _is_unit_loop(o, True)
                and constant_index(o.extent) is None
            )
    return abi.Lanes(
        walks=len(found),
        reducing=len(taken),
        unit_dims=sorted(dims),
        sized=needs_sizes,
        edge_ids=any(_lanes_read_edge_ids(w, p, needs_sizes) for w, p in taken),
    )


def _unit_dims(walk: loop.ForInEdgesOp) -> list[str]:
    """The dimensions that must be 1 for the walk to run: it is in the copy specialize-unit-dims made."""
    found: list[str] = []
    op: Operation | None = walk
    while op is not None:
        parent = op.parent_op()
        if (
            isinstance(parent, scf.IfOp)
            and UNIT_DIM_ATTR in parent.attributes
            and op.parent_region() is parent.true_region
        ):
            found.append(cast(StringAttr, parent.attributes[UNIT_DIM_ATTR]).data)
        op = parent
    return found


@dataclass(frozen=True)
class VectorizeEdgesPass(ModulePass):
    """Runs the scalar work of in-edge walks W edges at a time (`vectorize edges W`)."""

    name = "vectorize-edges"

    lanes: int | None = None
    """`vectorize edges LANES` for every kernel (2 to 64, a power of two); none: each kernel's schedule decides."""

    def __post_init__(self) -> None:
        if self.lanes is not None:
            check_directive_option(str(self.spec()), ["vectorize", "edges", str(self.lanes)])

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.lanes is not None:
            give_schedule(op, "vectorize_edges", IntegerAttr(self.lanes, i64), tuple(SweepKind))
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and kernel_abi.has_record(f)]:
            in_src = kernel_buffer(fn, "in_src")
            record = kernel_abi.get_record(fn)
            found: list[tuple[loop.ForInEdgesOp, _Plan]] = []  # qualifying walks, as compiled
            sized: list[tuple[loop.ForInEdgesOp, _Plan]] = []  # ... if run-time head sizes were 1
            for for_dst in [o for o in fn.walk() if isinstance(o, loop.ForDstOp)]:
                width = cast(IntegerAttr | None, take_schedule(for_dst, "vectorize_edges"))
                plans = [
                    (w, plan_walk(w)) for w in for_dst.walk() if isinstance(w, loop.ForInEdgesOp) and w.src is in_src
                ]
                ok = [(w, p) for w, p in plans if not isinstance(p, str)]
                found += ok
                sized += [
                    (w, q)
                    for w, p in plans
                    if isinstance(p, str) and not isinstance(q := plan_walk(w, sized=True), str)
                ]
                if width is None:
                    continue
                if not ok:
                    reasons = sorted({p for _, p in plans if isinstance(p, str)}) or ["no in-edge walk"]
                    raise CompileError(
                        f"@{fn.sym_name.data}: vectorize edges {width.value.data}: no in-edge walk of this kernel "
                        f"computes scalars per edge that could run in lanes ({'; '.join(reasons)})"
                    )
                for w, p in ok:
                    _WalkRewriter(w, p, width.value.data).rewrite()
            record.lanes = _lanes_record(found, sized)
            kernel_abi.set_record(fn, record)
