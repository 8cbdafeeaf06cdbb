"""In-edge walks of convert-graph-to-loop: reductions and edge results, per edge.

A walk (`loop.for_in_edges`) runs the per-edge work of one level of a
destination's plan: every reduction of that level accumulates, every edge
result of that level is stored. Work over head axes shares one feature-loop
nest with the row work under those heads (a head's attention weight, then
its row), except where it takes a transcendental function (the CPU target,
`split_heads`): there it runs in a head loop of its own first, so that
expand-exp's inline exponentials vectorise across heads (`_split_head_nest`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import i64
from xdsl.ir import Block, Operation, SSAValue

from gnnc.conversion.graph_to_loop.analysis import Accumulator, LoopContext, Reduction, Sink, costly
from gnnc.conversion.graph_to_loop.emitter import index
from gnnc.conversion.graph_to_loop.values import ValueEmission
from gnnc.ir import loop

Dim = int | str

#: Per-edge work: its shape, what it does at a feature index, and the value it computes.
WorkItem = tuple[tuple[Dim, ...], Callable[[list[SSAValue]], None], SSAValue]
#: A reduction by its (operation, kind) key.
KeyedReduction = tuple[tuple[Operation, str], Reduction]


class EdgeEmission(ValueEmission):
    """Emits walks over a destination's in-edges and the feature nests inside them."""

    #: the in-CSR the walks read
    indptr: SSAValue
    src: SSAValue
    eid: SSAValue
    #: whether costly per-head work gets a head loop of its own (see the module doc)
    split_heads: bool

    def _emit_edge_loop(
        self,
        v: SSAValue,
        reductions: list[KeyedReduction],
        stores: list[Sink],
        walk: tuple[SSAValue, SSAValue] | None = None,
    ) -> None:
        """One walk over v's in-edges, or, with `walk` = (row, offsets), over positions offsets[row] ..
        offsets[row + 1] of the in-CSR (a neighbour group of v)."""
        block = Block(arg_types=[index, index, index])
        _, u, e = block.args
        ctx = LoopContext(v=v, u=u, e=e)
        with self.em.nested(block):
            items: list[tuple[tuple[Dim, ...], Callable[[list[SSAValue]], None], SSAValue]] = []
            for key, r in reductions:
                self._precompute(r.value, ctx)
                acc = self.acc[key]
                items.append((acc.shape, functools.partial(self._accumulate, key, r, acc, ctx=ctx), r.value))
            for s in stores:
                self._precompute(s.value, ctx)
                base = self.row_base(e, s.shape)
                items.append(
                    (
                        s.shape,
                        lambda idx, s=s, base=base: self.store(  # type: ignore[misc]  # mypy cannot type a lambda's defaults; they bind this iteration's values (B023)
                            self.value_at(s.value, idx, ctx), s.buffer, self.linear(base, s.shape, idx)
                        ),
                        s.value,
                    )
                )
            self._shared_nests(items, ctx)
            self.em.op(loop.YieldOp())
        row, offsets = walk if walk is not None else (v, self.indptr)
        self.em.op(loop.ForInEdgesOp(row, offsets, self.src, self.eid, block))

    def _emit_rescale_loop(self, v: SSAValue, rescaled: list[tuple[Sink, SSAValue]], vctx: LoopContext) -> None:
        """result[e] *= scale for stored edge results: the factors first, once per destination."""
        factors: dict[SSAValue, tuple[SSAValue, SSAValue]] = {}
        for _, scale in rescaled:
            if scale in factors:
                continue
            self._precompute(scale, vctx)
            factors[scale] = self.into_scratch(scale, vctx)
        block = Block(arg_types=[index, index, index])
        _, u, e = block.args
        ctx = LoopContext(v=v, u=u, e=e, computed=dict(factors))
        with self.em.nested(block):
            items: list[WorkItem] = []
            for s, scale in rescaled:
                base = self.row_base(e, s.shape)

                def rescale(idx: list[SSAValue], s: Sink = s, base: SSAValue = base, scale: SSAValue = scale) -> None:
                    at = self.linear(base, s.shape, idx)
                    scaled = self.em.op(arith.MulfOp(self.load(s.buffer, at), self.value_at(scale, idx, ctx)))
                    self.store(scaled, s.buffer, at)

                items.append((s.shape, rescale, scale))
            self._shared_nests(items, ctx)
            self.em.op(loop.YieldOp())
        self.em.op(loop.ForInEdgesOp(v, self.indptr, self.src, self.eid, block))

    def _shared_nests(self, items: list[WorkItem], ctx: LoopContext) -> None:
        """Runs per-edge work in as few feature-loop nests as the shapes allow.

        Work of shape [H] and work of shape [H, F] share one nest (the [H]
        part runs before the inner F loop), so a value both need, such as a
        per-head attention weight, is computed once per edge and head.
        """
        groups: list[list] = []
        for item in sorted(items, key=lambda it: -len(it[0])):
            for group in groups:
                longest = group[0][0]
                if longest[: len(item[0])] == item[0]:
                    group.append(item)
                    break
            else:
                groups.append([item])
        for group in groups:
            shape = group[0][0]
            by_depth: dict[int, list] = {}
            for item_shape, action, _ in group:
                by_depth.setdefault(len(item_shape), []).append(action)
            if (
                self.split_heads
                and ctx.u is not None
                and len(shape) >= 2
                and self._split_head_nest(shape, by_depth, group, ctx)
            ):
                continue
            self._nest(shape, by_depth, [it[2] for it in group], ctx, [])

    def _split_head_nest(
        self,
        shape: tuple[Dim, ...],
        by_depth: dict[int, list[Callable[[list[SSAValue]], None]]],
        group: list[WorkItem],
        ctx: LoopContext,
    ) -> bool:
        """Per-edge work over the head axes in its own loop before the row loop, when it is costly.

        In one shared nest, a head's exp runs between two heads' row loops:
        scalar, and with the row accumulators live across it. Split, the
        head loop has no loop inside, so LLVM vectorises it across heads
        (once expand-exp has made exp arithmetic); the values the rows need
        pass through a per-worker scratch row. Split where the work takes a
        transcendental function or an edge softmax (`costly`), and only with
        `split_heads` (the CPU). Measurements: docs/design/llvm-translation.md
        ("Head loops split for exp").
        """
        heads = list(shape[:-1])
        depth = len(heads)
        deep = [it for it in group if len(it[0]) == len(shape)]
        carried = self._values_at_depth([it[2] for it in deep], depth, ctx)
        shallow_roots = [it[2] for it in group if len(it[0]) < len(shape)]
        if not costly(carried + shallow_roots):
            return False
        bases = {x: self.alloc_scratch(heads) for x in carried}

        def keep(idx: list[SSAValue]) -> None:
            for x, base in bases.items():
                self.store(self.value_at(x, idx, ctx), self.scratch, self.linear(base, heads, idx))

        shallow = {d: list(acts) for d, acts in by_depth.items() if d < len(shape)}
        shallow.setdefault(depth, []).append(keep)
        self._nest(heads, shallow, [it[2] for it in group], ctx, [])
        added = [x for x in bases if x not in ctx.computed]
        ctx.computed.update({x: (self.scratch, base) for x, base in bases.items()})
        try:
            self._nest(shape, {len(shape): by_depth[len(shape)]}, [it[2] for it in deep], ctx, [])
        finally:
            for x in added:
                del ctx.computed[x]
        return True

    def _nest(
        self,
        shape: Sequence[Dim],
        by_depth: dict[int, list[Callable[[list[SSAValue]], None]]],
        hoist: list[SSAValue],
        ctx: LoopContext,
        idx: list[SSAValue],
    ) -> None:
        depth = len(idx)
        if depth < len(shape):
            for root in hoist:
                self._hoist(root, idx, ctx)
        for action in by_depth.get(depth, []):
            action(idx)
        if depth == len(shape):
            return
        d = shape[depth]
        block = Block(arg_types=[index])
        with self.em.nested(block):
            self._nest(shape, by_depth, hoist, ctx, idx + [block.args[0]])
            self.em.op(loop.YieldOp())
        self.em.op(loop.ForFeatureOp(self.extent(d), block, dim=str(d)))

    def _accumulate(
        self, key: tuple[Operation, str], r: Reduction, acc: Accumulator, idx: list[SSAValue], ctx: LoopContext
    ) -> None:
        at = self.linear(acc.base, acc.shape, idx)
        old = self.load(acc.buffer, at)
        x = self.value_at(r.value, idx, ctx)
        if r.kind in ("sum", "mean"):
            new = self.em.op(arith.AddfOp(old, x))
        elif r.kind == "max":
            new = self.em.op(arith.MaximumfOp(old, x))
        elif r.kind in ("stabilizer_max", "softmax_max"):
            # a NaN in the scores reaches the result through exp(s - m) without
            # the max carrying it (graph.aggregate's stabilizer)
            new = self.em.op(arith.MaxnumfOp(old, x))
        elif r.kind == "min":
            new = self.em.op(arith.MinimumfOp(old, x))
        elif r.kind in ("argmax_best", "argmin_best"):
            return  # updated with its id, below
        elif r.kind in ("argmax", "argmin"):
            self._accumulate_arg(r, acc, at, old, x, idx, ctx)
            return
        else:  # softmax_sum: sum of exp(s - max)
            m = self.load(
                self.acc[(r.owner, "max")].buffer, self.linear(self.acc[(r.owner, "max")].base, acc.shape, idx)
            )
            new = self.em.op(arith.AddfOp(old, self.em.op(math.ExpOp(self.em.op(arith.SubfOp(x, m))))))
        self.store(new, acc.buffer, at)

    def _accumulate_arg(
        self,
        r: Reduction,
        acc: Accumulator,
        at: SSAValue,
        old_id: SSAValue,
        x: SSAValue,
        idx: list[SSAValue],
        ctx: LoopContext,
    ) -> None:
        """argmax / argmin: the best value and its edge id, kept whatever order the in-edges come in.

        The lowest id wins a tie and the first NaN wins over numbers, by
        comparing ids rather than relying on the walk's order: `partition
        src` walks a destination's in-edges partition by partition.
        """
        best_acc = self.acc[(r.owner, "best")]
        best_at = self.linear(best_acc.base, best_acc.shape, idx)
        best = self.load(best_acc.buffer, best_at)
        assert ctx.e is not None
        e = self.em.op(arith.SIToFPOp(self.em.op(arith.IndexCastOp(ctx.e, i64)), self.elem))
        zero = self.em.float_const(0.0, self.elem)
        cmp = lambda a, b, p: self.em.op(arith.CmpfOp(a, b, p))  # noqa: E731
        first = cmp(old_id, zero, "olt")
        better = cmp(x, best, "ogt" if r.kind == "argmax" else "olt")
        lower = cmp(e, old_id, "olt")
        tie = self.em.op(arith.AndIOp(cmp(x, best, "oeq"), lower))
        x_nan = cmp(x, x, "uno")
        best_num = cmp(best, best, "ord")
        nan_wins = self.em.op(arith.AndIOp(x_nan, self.em.op(arith.OrIOp(best_num, lower))))
        take = first
        for c in (better, tie, nan_wins):
            take = self.em.op(arith.OrIOp(take, c))
        self.store(self.em.op(arith.SelectOp(take, x, best)), best_acc.buffer, best_at)
        self.store(self.em.op(arith.SelectOp(take, e, old_id)), acc.buffer, at)
