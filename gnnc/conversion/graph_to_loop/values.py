"""Values of convert-graph-to-loop: one element of a graph value, and values into scratch.

An elementwise expression is evaluated where it is read: `value_at` computes
one element of a value at the indices of its consumer's feature nest, and a
value with fewer axes than the nest is computed at the depth its indices are
known (`hoist`). Some values are computed once per edge (or destination)
into per-thread scratch first (`_precompute`), because evaluating them per
consumer element would multiply their cost:

- `dot` and `@` results (a reduction per consumer element);
- a value read at permuted indices with axes of its own broadcast, costing
  `_REUSE_COST` or more: an `outer`'s right operand, a broadcast operand
  under a `transpose`. Its reads run in loops inside its own axes' loops,
  so no depth computes it once (DNAConv's softmax over the layers, read
  once per feature: 330 -> 42 ms forward, one kernel, rmat-14);
- a value costing `_SHARED_COST` or more (an exponential) that two of
  these nests, or one and the consumer's, read: each nest's memo shares it
  only within the nest (the generated gradients of a softmax read its
  exponentials in half a dozen).

The last two are the CPU's (`scratch_values`): the cuda grids keep those
values inline, as a warp mapping's lanes split the feature loops and
map-threads refuses a kernel whose lanes would read each other's scratch.
A value no rule picks stays inline: scratch stores in the in-edge walk keep
LLVM from holding the accumulators in registers (GAT's `alpha`, both an
edge result and a term of the sum, stays inline: tests/test_cpu_backend.py).
"""

from __future__ import annotations

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import IndexType, UnitAttr, i64
from xdsl.ir import Operation, SSAValue

from gnnc.conversion.graph_to_loop.analysis import Accumulator, LoopContext
from gnnc.conversion.graph_to_loop.builder import REORDERABLE, LoopBuilder
from gnnc.ir import graph, loop

index = IndexType()


class ValueEmission(LoopBuilder):
    """Emits the elements of graph values, reading inputs, accumulators and scratch."""

    #: the kernel's buffer arguments the values read
    param_buf: dict[SSAValue, SSAValue]
    temp_buf: dict[Operation, SSAValue]
    deg_in: SSAValue
    deg_out: SSAValue
    scratch: SSAValue
    #: relation types by edge id, and the edges per (vertex, relation) pair (`relations` kernels only)
    edge_rel: SSAValue | None
    #: per pair side, its arrays by name (`edge_pair`: an edge's pair)
    pair_args: dict[str, dict[str, SSAValue]]
    rel_deg_in: SSAValue | None
    rel_deg_out: SSAValue | None
    #: the accumulators of the destination being emitted, by (owner, role)
    acc: dict[tuple[Operation, str], Accumulator]
    #: whether costly values go to scratch (`_scratch_order`) and a dot's operands are hoisted
    #: out of its sum; False: dots and matvecs alone (the cuda grids: convert_graph_to_loop.py)
    scratch_values: bool

    # ---------------------------------------------- dot / matvec into scratch

    def _precompute(self, root: SSAValue, ctx: LoopContext) -> None:
        """Computes into scratch, innermost first, every dot / matvec that root needs, every
        costly value it reads at permuted indices (`_REUSE_COST`), and every very costly value
        (`_SHARED_COST`) that two or more of these nests, or one and root's, would compute."""
        order = self._scratch_order(root, ctx, set())
        shared = _shared_values(root, order, set(ctx.computed)) if self.scratch_values else set()
        if shared:
            order = self._scratch_order(root, ctx, shared)
        for item in order:
            if isinstance(item, graph.DotOp):
                self._compute_dot(item, ctx)
            elif isinstance(item, graph.MatVecOp):
                self._compute_matvec(item, ctx)
            elif isinstance(item, SSAValue) and item not in ctx.computed:
                self._compute_elementwise(item, ctx)

    def _scratch_order(self, root: SSAValue, ctx: LoopContext, forced: set[SSAValue]) -> list[Operation | SSAValue]:
        """What `_precompute` computes into scratch for root, operands before their users: the
        dots and matvecs, the values of `forced`, and the costly values read at permuted indices."""
        order: list[Operation | SSAValue] = []
        seen: set[tuple[SSAValue, int]] = set()
        kept: set[SSAValue] = set(ctx.computed) | forced

        def visit(x: SSAValue, permuted: int = 0) -> None:
            """`permuted`: the axes of the value x is read in, where that value's indices run in
            another order than its nest's loops (an `outer`'s right operand, a transpose's)."""
            if (x, permuted) in seen or x in ctx.computed:
                return
            seen.add((x, permuted))
            op = x.owner
            if isinstance(op, graph.AggregateOp | graph.GatherOp) or not isinstance(op, Operation):
                return
            if isinstance(op, graph.EdgeSoftmaxOp) and ctx.u is None:
                return
            t = x.type
            assert isinstance(t, graph.ValueType)
            keep = x in forced or (
                self.scratch_values and permuted > len(t.shape) and _cost(x, kept - {x}) >= _REUSE_COST
            )
            if keep:
                permuted = 0  # its own nest computes it in loop order
            if isinstance(op, graph.TransposeOp):
                visit(op.operand, max(permuted, len(t.shape)))
            elif isinstance(op, graph.OuterOp):
                visit(op.lhs, permuted)  # read at leading indices: once per row where not permuted
                visit(op.rhs, max(permuted, len(t.shape)))
            elif isinstance(op, graph.DotOp | graph.MatVecOp):
                for o in op.operands:
                    visit(o)
            else:
                for o in op.operands:
                    visit(o, permuted)
            if isinstance(op, graph.DotOp | graph.MatVecOp):
                order.append(op)
            elif keep and x not in order:
                kept.add(x)
                order.append(x)

        visit(root)
        return order

    def _compute_elementwise(self, x: SSAValue, ctx: LoopContext) -> None:
        """x's elements into scratch, once. A value read at permuted indices with axes of its
        own broadcast (`outer(a, b)`'s b; `transpose(s * k)` with s per head and layer, k per
        head, layer and feature) is read for every index of the axes it lacks, in loops that
        run inside its own: inlined, it would be computed that many times over (DNAConv's
        softmax over the layers, once per feature)."""
        ctx.computed[x] = self.into_scratch(x, ctx)

    def into_scratch(self, x: SSAValue, ctx: LoopContext) -> tuple[SSAValue, SSAValue]:
        """Emits a nest that writes every element of x to a fresh scratch region: (scratch, base)."""
        t = x.type
        assert isinstance(t, graph.ValueType)
        base = self.alloc_scratch(t.shape)
        self.for_features(
            t.shape,
            lambda idx: self.store(self.value_at(x, idx, ctx), self.scratch, self.linear(base, t.shape, idx)),
            hoist=[x],
            ctx=ctx,
        )
        return self.scratch, base

    def _compute_dot(self, op: graph.DotOp, ctx: LoopContext) -> None:
        a = op.lhs.type
        assert isinstance(a, graph.ValueType)
        shape, k = a.shape[:-1], a.shape[-1]
        base = self.alloc_scratch(shape)
        zero = self.em.float_const(0.0, self.elem)

        def elem(idx: list[SSAValue]) -> None:
            if self.scratch_values:
                # what the operands read at these indices alone (an `outer`'s left operand), once
                # here and not once per step of the sum
                self._hoist(op.lhs, idx, ctx)
                self._hoist(op.rhs, idx, ctx)

            def step(i: SSAValue, acc: SSAValue) -> SSAValue:
                # a dot product may be summed in any order (DESIGN: sums may be
                # reordered): reassociation lets LLVM vectorise it
                prod = self.em.op(
                    arith.MulfOp(
                        self.value_at(op.lhs, idx + [i], ctx), self.value_at(op.rhs, idx + [i], ctx), REORDERABLE
                    )
                )
                return self.em.op(arith.AddfOp(acc, prod, REORDERABLE))

            total = self.scalar_loop(self.extent(k), zero, step)
            total.owner.attributes[loop.DOT_REDUCTION_ATTR] = UnitAttr()  # type: ignore[union-attr]
            self.store(total, self.scratch, self.linear(base, shape, idx))

        self.for_features(shape, elem)
        ctx.computed[op.result] = (self.scratch, base)

    def _compute_matvec(self, op: graph.MatVecOp, ctx: LoopContext) -> None:
        a, w = op.vector.type, op.matrix.type
        assert isinstance(a, graph.ValueType) and isinstance(w, graph.ValueType)
        prefix, (k, n) = a.shape[:-1], w.shape[-2:]
        batched = len(w.shape) > 2  # a matrix per leading index of the vector
        out_shape = prefix + (n,)
        base = self.alloc_scratch(out_shape)
        zero = self.em.float_const(0.0, self.elem)
        wbuf = None if op.per_edge_matrix else self._tensor_buffer(op.matrix)
        self.for_features(out_shape, lambda idx: self.store(zero, self.scratch, self.linear(base, out_shape, idx)))

        # out[.., n] += a[.., k] * W[k, n], n innermost: W's rows are
        # contiguous, so the inner loop vectorises.
        def row(idx: list[SSAValue]) -> None:
            ak = self.value_at(op.vector, idx[:-1] + [idx[-1]], ctx)
            wrow = self.em.op(arith.MuliOp(idx[-1], self.extent(n))) if wbuf is not None else None

            def col(jdx: list[SSAValue]) -> None:
                j = jdx[0]
                at = self.linear(base, out_shape, idx[:-1] + [j])
                if wbuf is not None and wrow is not None:
                    wv = self.load(wbuf, self.em.op(arith.AddiOp(wrow, j)))
                else:  # a matrix per edge (W[rel(e)], theta[e]): its element at (k, n)
                    wv = self.value_at(op.matrix, (idx[:-1] if batched else []) + [idx[-1], j], ctx)
                old = self.load(self.scratch, at)
                self.store(self.em.op(arith.AddfOp(old, self.em.op(arith.MulfOp(ak, wv)))), self.scratch, at)

            self.for_features((n,), col)

        self.for_features(prefix + (k,), row)
        ctx.computed[op.result] = (self.scratch, base)

    def _tensor_buffer(self, value: SSAValue) -> SSAValue:
        op = value.owner
        assert isinstance(op, graph.GatherOp) and op.site.data == "param", "matvec needs a parameter matrix"
        return self.param_buf[op.tensor]

    # ------------------------------------------------- one element of a value

    def _hoist(self, root: SSAValue, idx: list[SSAValue], ctx: LoopContext) -> None:
        """Computes the sub-values of root whose shape has exactly len(idx) axes."""
        for x in self._values_at_depth([root], len(idx), ctx):
            self.value_at(x, idx, ctx)

    def _values_at_depth(self, roots: list[SSAValue], depth: int, ctx: LoopContext) -> list[SSAValue]:
        """The sub-values of roots with exactly `depth` axes that a nest computes at that depth."""
        found: list[SSAValue] = []
        seen: set[SSAValue] = set()

        def visit(x: SSAValue) -> None:
            if x in seen:
                return
            seen.add(x)
            t = x.type
            assert isinstance(t, graph.ValueType)
            op = x.owner
            if len(t.shape) == depth and not isinstance(op, graph.ConstantOp):
                if ctx.u is not None or t.kind not in ("S", "E"):
                    found.append(x)
                return
            if isinstance(op, graph.AggregateOp | graph.GatherOp) or x in ctx.computed:
                return
            if isinstance(op, graph.DotOp | graph.MatVecOp):
                return
            if isinstance(op, graph.TransposeOp | graph.OuterOp) and depth > len(t.shape) - 2:
                # these read their (right) operand at permuted indices: the
                # known ones are its leading indices only above the last two axes
                if isinstance(op, graph.OuterOp):
                    visit(op.lhs)
                return
            if isinstance(op, Operation):
                for o in op.operands:
                    visit(o)

        for root in roots:
            visit(root)
        return found

    def value_at(self, x: SSAValue, idx: list[SSAValue], ctx: LoopContext) -> SSAValue:
        t = x.type
        assert isinstance(t, graph.ValueType)
        idx = idx[: len(t.shape)]
        key = (x, tuple(idx), id(ctx))
        found = self.em.lookup(key)
        if found is not None:
            return found
        result = self._value_at(x, idx, ctx)
        self.em.memo[-1][key] = result
        return result

    def _value_at(self, x: SSAValue, idx: list[SSAValue], ctx: LoopContext) -> SSAValue:
        t = x.type
        assert isinstance(t, graph.ValueType)
        op = x.owner
        if x in ctx.computed:
            buf, base = ctx.computed[x]
            return self.load(buf, self.linear(base, t.shape, idx))
        if isinstance(op, graph.GatherOp):
            return self._gather(op, idx, ctx)
        if isinstance(op, graph.ConstantOp):
            return self.em.float_const(op.value.value.data, self.elem)
        if isinstance(op, graph.EdgeIdOp):
            assert ctx.e is not None, "edge_id outside an edge loop"
            return self.em.op(arith.SIToFPOp(self.em.op(arith.IndexCastOp(ctx.e, i64)), self.elem))
        if isinstance(op, graph.SelfLoopOp):
            assert ctx.u is not None, "self_loop outside an edge loop"
            same = self.em.op(arith.CmpiOp(ctx.u, ctx.v, "eq"))
            return self.em.op(arith.UIToFPOp(same, self.elem))
        if isinstance(op, graph.DegreeOp) and op.per_relation:
            assert ctx.e is not None and self.rel_deg_in is not None and self.rel_deg_out is not None
            return self.load(self.rel_deg_in if op.direction.data == "in" else self.rel_deg_out, ctx.e)
        if isinstance(op, graph.DegreeOp):
            buf = self.deg_in if op.direction.data == "in" else self.deg_out
            at = ctx.u if op.site.data == "src" else ctx.v
            assert at is not None
            return self.load(buf, at)
        if isinstance(op, graph.BinaryOp):
            lhs = self.value_at(op.lhs, idx, ctx)
            rhs = self.value_at(op.rhs, idx, ctx)
            cls = {
                "add": arith.AddfOp,
                "sub": arith.SubfOp,
                "mul": arith.MulfOp,
                "div": arith.DivfOp,
                "max": arith.MaximumfOp,
                "min": arith.MinimumfOp,
            }[op.kind.data]
            return self.em.op(cls(lhs, rhs))
        if isinstance(op, graph.UnaryOp):
            return self._unary(op, self.value_at(op.operand, idx, ctx))
        if isinstance(op, graph.TransposeOp):
            return self.value_at(op.operand, idx[:-2] + [idx[-1], idx[-2]], ctx)
        if isinstance(op, graph.OuterOp):
            lhs = self.value_at(op.lhs, idx[:-1], ctx)
            rhs = self.value_at(op.rhs, idx[:-2] + idx[-1:], ctx)
            return self.em.op(arith.MulfOp(lhs, rhs))
        if isinstance(op, graph.AggregateOp):
            acc = self.acc[(op, "agg")]
            return self.load(acc.buffer, self.linear(acc.base, acc.shape, idx))
        if isinstance(op, graph.EdgeSoftmaxOp):
            s = self.value_at(op.operand, idx, ctx)
            m_acc, z_acc = self.acc[(op, "max")], self.acc[(op, "sum")]
            m = self.load(m_acc.buffer, self.linear(m_acc.base, m_acc.shape, idx))
            z = self.load(z_acc.buffer, self.linear(z_acc.base, z_acc.shape, idx))
            ex = self.em.op(math.ExpOp(self.em.op(arith.SubfOp(s, m))))
            return self.em.op(arith.DivfOp(ex, z))
        raise AssertionError(f"convert-graph-to-loop: cannot lower {op}")

    def _gather(self, op: graph.GatherOp, idx: list[SSAValue], ctx: LoopContext) -> SSAValue:
        site = op.site.data
        t = op.tensor.type
        assert isinstance(t, graph.TensorType)
        shape = t.shape
        owner = op.tensor.owner
        materialized = isinstance(owner, graph.MaterializeOp | graph.MaterializePairsOp | graph.SegmentMatMulOp)
        buf = self.temp_buf[owner] if materialized else self.param_buf[op.tensor]  # type: ignore[index]
        if site in ("src_rel", "dst_rel"):
            # the edge's row of a value per (vertex, relation) pair
            side = site[:3]
            if side not in ctx.pairs:
                assert ctx.e is not None, "a pair's row is read in an edge loop"
                with self.em.at_scope_of(ctx.e):
                    ctx.pairs[side] = self.em.op(
                        arith.IndexCastOp(self.load(self.pair_args[side]["edge_pair"], ctx.e), index)
                    )
            return self.load(buf, self.linear(self.row_base(ctx.pairs[side], shape), shape, idx))
        if site == "param":
            return self.load(buf, self.linear(self.em.index_const(0), shape, idx))
        if site == "rel":
            return self.load(buf, self.linear(self.row_base(self._relation(ctx), shape), shape, idx))
        row = {"src": ctx.u, "dst": ctx.v, "edge": ctx.e}[site]
        assert row is not None, f"gather at {site} outside an edge loop"
        return self.load(buf, self.linear(self.row_base(row, shape), shape, idx))

    def _relation(self, ctx: LoopContext) -> SSAValue:
        """The edge's relation type as an index: `edge_rel[e]`, loaded once per edge loop body."""
        if ctx.rel is None:
            assert ctx.e is not None and self.edge_rel is not None, "rel(e) outside an edge loop"
            with self.em.at_scope_of(ctx.e):
                ctx.rel = self.em.op(arith.IndexCastOp(self.load(self.edge_rel, ctx.e), index))
        return ctx.rel

    def _unary(self, op: graph.UnaryOp, x: SSAValue) -> SSAValue:
        kind = op.kind.data
        if kind == "neg":
            return self.em.op(arith.NegfOp(x))
        if kind in ("exp", "log", "sqrt", "rsqrt", "abs", "tanh"):
            cls = {
                "exp": math.ExpOp,
                "log": math.LogOp,
                "sqrt": math.SqrtOp,
                "rsqrt": math.RsqrtOp,
                "abs": math.AbsFOp,
                "tanh": math.TanhOp,
            }[kind]
            return self.em.op(cls(x))
        zero = self.em.float_const(0.0, self.elem)
        if kind == "relu":
            # max(x, 0) that keeps NaN: NaN > 0 is false, so select x when x is not > 0 ... only if NaN
            positive = self.em.op(arith.CmpfOp(x, zero, "ugt"))
            return self.em.op(arith.SelectOp(positive, x, zero))
        if kind == "step":
            # the Heaviside step with step(0) = 0: what generated gradients of relu, abs and max use;
            # an unordered x (NaN) falls through both compares and is returned itself
            one = self.em.float_const(1.0, self.elem)
            above = self.em.op(arith.CmpfOp(x, zero, "ogt"))
            at_or_below = self.em.op(arith.CmpfOp(x, zero, "ole"))
            return self.em.op(arith.SelectOp(above, one, self.em.op(arith.SelectOp(at_or_below, zero, x))))
        if kind == "sigmoid":
            one = self.em.float_const(1.0, self.elem)
            denom = self.em.op(arith.AddfOp(one, self.em.op(math.ExpOp(self.em.op(arith.NegfOp(x))))))
            return self.em.op(arith.DivfOp(one, denom))
        if kind == "leaky_relu":
            slope = self.em.float_const(op.slope_value, self.elem)
            positive = self.em.op(arith.CmpfOp(x, zero, "ugt"))
            return self.em.op(arith.SelectOp(positive, x, self.em.op(arith.MulfOp(x, slope))))
        raise AssertionError(f"unknown unary {kind}")


#: Ops whose elements cost no more than a load: read where they are used, never put in scratch.
_LEAVES = (graph.GatherOp, graph.ConstantOp, graph.EdgeIdOp, graph.SelfLoopOp, graph.DegreeOp, graph.AggregateOp)
#: ... and with them the ops that are already read from scratch: where an inline walk stops.
_NOT_INLINED = _LEAVES + (graph.DotOp, graph.MatVecOp)
#: A value read at permuted indices goes to scratch from this inline cost per element (`_cost`):
#: a product of two loads does not (its store and load cost what it does), a quotient does.
_REUSE_COST = 3
#: A value several ops read goes to scratch from this cost (an exponential).
_SHARED_COST = 8
_UNARY_COST = {"exp": 8, "log": 8, "tanh": 8, "sigmoid": 10, "sqrt": 4, "rsqrt": 4}
_DIV_COST = 4


def _shared_values(root: SSAValue, order: list[Operation | SSAValue], computed: set[SSAValue]) -> set[SSAValue]:
    """The values of cost `_SHARED_COST` or more that two or more of the nests `_precompute`
    emits inline (each of `order`'s, and root's own): each nest's memo shares a value only
    within the nest, so each would compute it again (the generated gradients of a softmax read
    its exponentials in half a dozen places)."""
    stops = computed | {item for item in order if isinstance(item, SSAValue)}
    counts: dict[SSAValue, int] = {}
    nests: list[list[SSAValue]] = [[root]]
    for item in order:
        nests.append(list(item.operands) if isinstance(item, Operation) else list(item.owner.operands))  # type: ignore[union-attr]
    for starts in nests:
        reached: set[SSAValue] = set()
        stack = list(starts)
        while stack:
            y = stack.pop()
            op = y.owner
            if y in reached or y in stops or not isinstance(op, Operation):
                continue
            if isinstance(op, _NOT_INLINED):
                continue
            reached.add(y)
            stack.extend(op.operands)
        for y in reached:
            counts[y] = counts.get(y, 0) + 1
    return {y for y, n in counts.items() if n > 1 and _cost(y, stops) >= _SHARED_COST}


def _cost(x: SSAValue, kept: set[SSAValue]) -> int:
    """The operations one element of x costs where it is inlined, roughly (a division 4, an
    exponential 8), down to leaves, dots and matvecs (loads from scratch); shared sub-values count
    once, as one nest's memo computes them once."""
    seen: set[SSAValue] = set()

    def walk(y: SSAValue) -> int:
        if y in seen:
            return 0
        seen.add(y)
        op = y.owner
        if y in kept or not isinstance(op, Operation) or isinstance(op, _NOT_INLINED):
            return 0
        own = 1
        if isinstance(op, graph.UnaryOp):
            own = _UNARY_COST.get(op.kind.data, 1)
        elif isinstance(op, graph.BinaryOp) and op.kind.data == "div":
            own = _DIV_COST
        elif isinstance(op, graph.EdgeSoftmaxOp):
            own = _UNARY_COST["exp"] + _DIV_COST
        return own + sum(walk(o) for o in op.operands)

    return walk(x)
