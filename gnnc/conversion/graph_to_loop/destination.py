"""One destination's work in convert-graph-to-loop: levels of walks, then vertex results.

Each destination runs *levels* of in-edge walks: a level computes the
per-destination reductions (aggregations; softmax's max and sum of
exponentials) whose inputs are known, so `softmax` and aggregations of
softmax-weighted values stay inside one destination's iteration instead of
materialising edge-sized arrays. Edge results are stored in the first walk
where their inputs are known; vertex results after the last walk.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Sequence
from typing import cast

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import DYNAMIC_INDEX, i64
from xdsl.ir import Block, Operation, SSAValue

from gnnc.conversion.graph_to_loop.analysis import Accumulator, LoopContext, Reduction, Sink, analyse
from gnnc.conversion.graph_to_loop.edges import EdgeEmission, KeyedReduction
from gnnc.conversion.graph_to_loop.emitter import index
from gnnc.ir import abi, graph
from gnnc.ir.llvm_ext import StreamCopyOp

Dim = int | str


class DestinationEmission(EdgeEmission):
    """Emits the body of a destination sweep: accumulators, walks, vertex results."""

    result_buf: list[SSAValue]
    #: `partition src K`: accumulators live in acc_rows, per destination
    partitions: int | None
    #: `stream outputs`: vertex results are built apart and streamed to their rows
    stream: bool
    #: the sizes the schedule compiles in (`specialize`)
    fixed_sizes: dict[str, int]
    acc_rows: SSAValue | None
    worker: SSAValue
    #: `group neighbors G`: each split destination's range of groups
    group_offsets: SSAValue

    def _emit_destination(
        self,
        v: SSAValue,
        sinks: list[Sink],
        grouped: dict[tuple[Operation, str], SSAValue] | None = None,
        row: SSAValue | None = None,
        rel: SSAValue | None = None,
    ) -> None:
        """Destination v's work; with `row`, a (vertex, relation) pair's (v its vertex, `rel`
        its relation), whose values are written at `row` of their temps instead."""
        plan = analyse(sinks, self.result_buf)
        reductions, edge_sinks, vertex_sinks = plan.reductions, plan.edge_sinks, plan.vertex_sinks
        rescaled, in_place, max_level = plan.rescaled, plan.in_place, plan.max_level
        self.acc: dict[tuple[Operation, str], Accumulator] = {}
        # `stream outputs`: each vertex result is built apart, on the worker's
        # stack or in its row of acc_rows (see _staging_row), and then streamed
        # to the output row, which is never read
        self.staged: dict[int, tuple[SSAValue, SSAValue]] = {}
        if self.stream:
            for s in vertex_sinks:
                if s.buffer in self.result_buf:
                    self.staged[id(s)] = self._staging_row(s.shape)
        vctx = LoopContext(v=v, rel=rel)
        count = None
        for lvl in range(1, max_level + 1):
            at_level = [(key, r) for key, r in reductions.items() if r.level == lvl]
            for key, r in at_level:
                self._init_accumulator(key, r, v, in_place)
            stores = edge_sinks.get(lvl, [])
            if (at_level or stores) and grouped is not None:
                self._emit_group_merge(v, at_level, stores, grouped)
            elif at_level or stores:
                self._emit_edge_loop(v, at_level, stores)
            if count is None and at_level:
                count = self._in_degree(v)
            for key, r in at_level:
                self._finalize_accumulator(key, r, cast(SSAValue, count))  # set above: at_level is not empty
        if rescaled:
            self._emit_rescale_loop(v, rescaled, vctx)

        for s in vertex_sinks:
            owner = s.value.owner
            if isinstance(owner, graph.AggregateOp) and in_place.get(owner) is s:
                continue
            self._precompute(s.value, vctx)
            buffer, base = self._sink_row(s, v if row is None else row)

            def store_elem(idx: list[SSAValue], s: Sink = s, buffer: SSAValue = buffer, base: SSAValue = base) -> None:
                val = self.value_at(s.value, idx, vctx)
                self.store(val, buffer, self.linear(base, s.shape, idx))

            self.for_features(s.shape, store_elem, hoist=[s.value], ctx=vctx)
        for s in vertex_sinks:
            if id(s) in self.staged:
                staged, at = self.staged[id(s)]
                self.em.op(StreamCopyOp(staged, at, s.buffer, self.row_base(v, s.shape), self.size_of(s.shape)))

    def _staging_row(self, shape: Sequence[Dim]) -> tuple[SSAValue, SSAValue]:
        """(buffer, index of element 0) of the row where a streamed result is built.

        A row whose size the schedule fixes (`specialize`) and that is at most
        abi.STACK_ROW_BYTES is a stack array of the worker (an alloca that
        convert-loop-to-openmp recomputes in each worker). Its length is the
        row's size as computed, a constant once specialize-sizes has run;
        were the sizes not compiled in, it would still fit the row. Once
        LLVM has unrolled the row loops, every access to it is at a constant
        offset, and SROA turns the row into vector registers: the
        accumulators start as zeros, are scaled, and reach the streaming
        stores without a trip through memory. Any other row is built in the
        worker's row of acc_rows (its own noalias buffer), where LLVM zeroed
        it, reloaded the zeros, stored the sums after the walk, and reloaded
        them to scale them and again to stream them.
        """
        count = self._fixed_size(shape)
        if count is not None and 0 < count * self.elem_bytes <= abi.STACK_ROW_BYTES:
            row = self.em.pre(
                memref.AllocaOp.get(
                    self.elem, abi.CACHE_LINE_BYTES, [DYNAMIC_INDEX], dynamic_sizes=[self.size_of(shape)]
                )
            )
            return row, self.em.index_const(0)
        return cast(SSAValue, self.acc_rows), self.acc_row_base(self.worker, self.alloc_acc_row(shape))

    def _fixed_size(self, shape: Sequence[Dim]) -> int | None:
        """The number of elements of shape, if the schedule fixes every dimension in it."""
        count = 1
        for d in shape:
            size = d if isinstance(d, int) else self.fixed_sizes.get(d)
            if size is None:
                return None
            count *= size
        return count

    def _sink_row(self, s: Sink, v: SSAValue) -> tuple[SSAValue, SSAValue]:
        """(buffer, index of element 0) where destination v's row of vertex result s is built."""
        if id(s) in self.staged:
            return self.staged[id(s)]
        return s.buffer, self.row_base(v, s.shape)

    def _in_degree(self, v: SSAValue) -> SSAValue:
        one = self.em.index_const(1)
        lo = self.load(self.indptr, v)
        hi = self.load(self.indptr, self.em.op(arith.AddiOp(v, one)))
        return self.em.op(arith.IndexCastOp(self.em.op(arith.SubiOp(hi, lo)), index))

    def _emit_group_merge(
        self,
        v: SSAValue,
        reductions: list[KeyedReduction],
        stores: list[Sink],
        offsets: dict[tuple[Operation, str], SSAValue],
    ) -> None:
        """A split destination combines its groups' partial rows in group order; others walk their edges."""
        one = self.em.index_const(1)
        lo = self.em.op(arith.IndexCastOp(self.load(self.group_offsets, v), index))
        hi = self.em.op(arith.IndexCastOp(self.load(self.group_offsets, self.em.op(arith.AddiOp(v, one))), index))
        split = self.em.op(arith.CmpiOp(hi, lo, "ugt"))
        merge = Block(arg_types=[index])
        g = merge.args[0]
        with self.em.nested(merge):
            for key, r in reductions:
                acc = self.acc[key]
                part = self.acc_row_base(g, offsets[key])

                def combine(
                    idx: list[SSAValue], acc: Accumulator = acc, part: SSAValue = part, kind: str = r.kind
                ) -> None:
                    at = self.linear(acc.base, acc.shape, idx)
                    x = self.load(cast(SSAValue, self.acc_rows), self.linear(part, acc.shape, idx))
                    cls = {
                        "sum": arith.AddfOp,
                        "mean": arith.AddfOp,
                        "max": arith.MaximumfOp,
                        "stabilizer_max": arith.MaxnumfOp,
                        "min": arith.MinimumfOp,
                    }[kind]
                    self.store(self.em.op(cls(self.load(acc.buffer, at), x)), acc.buffer, at)

                self.for_features(acc.shape, combine)
            self.em.op(scf.YieldOp())
        then = Block()
        with self.em.nested(then):
            self.em.op(scf.ForOp(lo, hi, one, [], merge))
            self.em.op(scf.YieldOp())
        walk = Block()
        with self.em.nested(walk):
            self._emit_edge_loop(v, reductions, stores)
            self.em.op(scf.YieldOp())
        self.em.op(scf.IfOp(split, [], [then], [walk]))

    def _init_accumulator(self, key: tuple[Operation, str], r: Reduction, v: SSAValue, in_place: dict) -> None:
        t = r.value.type
        assert isinstance(t, graph.ValueType)
        shape = t.shape
        if key[1] == "agg" and key[0] in in_place:
            buffer, base = self._sink_row(in_place[key[0]], v)
            acc = Accumulator(buffer, base, shape, in_place=True)
        elif self.partitions is not None:
            # partitions are separate sweeps, possibly by other threads: an
            # accumulator must outlive the visit, in the destination's own row
            acc = Accumulator(cast(SSAValue, self.acc_rows), self.acc_row_base(v, self.alloc_acc_row(shape)), shape)
        else:
            acc = Accumulator(self.scratch, self.alloc_scratch(shape), shape)
        self.acc[key] = acc
        self._fill_identity(acc, r.kind)

    def _fill_identity(self, acc: Accumulator, kind: str) -> None:
        init = {
            "sum": 0.0,
            "mean": 0.0,
            "softmax_sum": 0.0,
            "max": -pymath.inf,
            "stabilizer_max": -pymath.inf,
            "softmax_max": -pymath.inf,
            "min": pymath.inf,
            "argmax": -1.0,
            "argmin": -1.0,
            "argmax_best": -pymath.inf,
            "argmin_best": pymath.inf,
        }[kind]
        c = self.em.float_const(init, self.elem)
        self.for_features(acc.shape, lambda idx: self.store(c, acc.buffer, self.linear(acc.base, acc.shape, idx)))

    def _finalize_accumulator(self, key: tuple[Operation, str], r: Reduction, count: SSAValue) -> None:
        acc = self.acc[key]
        # a stabilizer's m is read only by v's in-edges: without any, no fix
        if r.kind not in ("mean", "max", "min"):
            return
        zero_i = self.em.index_const(0)
        zero = self.em.float_const(0.0, self.elem)
        empty = self.em.op(arith.CmpiOp(count, zero_i, "eq"))
        if r.kind == "mean":
            as_int = self.em.op(arith.IndexCastOp(count, i64))
            n = self.em.op(arith.SIToFPOp(as_int, self.elem))

        def fix(idx: list[SSAValue]) -> None:
            at = self.linear(acc.base, acc.shape, idx)
            val = self.load(acc.buffer, at)
            if r.kind == "mean":
                val = self.em.op(arith.DivfOp(val, n))
            self.store(self.em.op(arith.SelectOp(empty, zero, val)), acc.buffer, at)

        self.for_features(acc.shape, fix)
