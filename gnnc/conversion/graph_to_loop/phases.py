"""The sweeps of convert-graph-to-loop: phases, the source sweep, neighbour group sweeps.

A kernel's body is a sequence of *phases*, one `loop.for_dst` each. A phase
ends where a vertex value is read at a neighbour (`graph.materialize`):
every destination must be finished before any source reads it. A vertex
value read at sources that depends on nothing but inputs and parameters
(`x[u] @ W` hoisted by transform-before-gather) is computed in a *source
sweep* instead, over every source row, before the first phase (the CPU
target only: the cuda grids have no such sweep).
"""

from __future__ import annotations

from typing import cast

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Block, Operation, SSAValue

from gnnc.conversion.graph_to_loop.analysis import Accumulator, Sink, analyse
from gnnc.conversion.graph_to_loop.destination import DestinationEmission
from gnnc.conversion.graph_to_loop.emitter import index
from gnnc.conversion.graph_to_loop.schedule import cpu_schedule, loop_schedule
from gnnc.errors import CompileError
from gnnc.ir import graph, loop
from gnnc.ir.loop_structure import SweepKind, check_row_split, row_dim

#: Row slice width of a source sweep whose schedule names none (see _emit_source_sweep;
#: the widths compared: docs/design/fusion.md).
SOURCE_SWEEP_WIDTH = 32
#: Row slice width of a segment-matmul sweep: a tile's rows times this many accumulators
#: (4 x 16 floats: 4 AVX-512 or 8 AVX2 registers; the widths and tile heights compared:
#: docs/design/heterogeneous.md).
SEGMENT_WIDTH = 16


class PhaseEmission(DestinationEmission):
    """Emits the kernel's sweeps over destinations, sources and neighbour groups."""

    src_fn: func.FuncOp
    ret: func.ReturnOp
    result_names: list[str]
    result_types: list[graph.TensorType]
    materializes: list[graph.MaterializeOp]
    segment_matmuls: list[graph.SegmentMatMulOp]
    swept: list[graph.MaterializeOp]
    #: per pair side, its arrays by name (`pair_vertex`, ...) and (pair count, pair blocks)
    pair_args: dict[str, dict[str, SSAValue]]
    pair_counts: dict[str, tuple[SSAValue, ...]]
    param_buf: dict[SSAValue, SSAValue]
    swept_sinks: list[Sink]
    group_size: int | None
    grouped_phases: int
    _scratch_total: arith.ConstantOp
    #: the arguments the sweeps take their extents and blocks from
    V: SSAValue
    blocks: SSAValue
    num_blocks: SSAValue
    num_threads: SSAValue
    num_src: SSAValue
    src_blocks: SSAValue
    num_src_blocks: SSAValue
    group_blocks: SSAValue
    num_group_blocks: SSAValue
    num_groups: SSAValue
    group_dst: SSAValue
    group_bounds: SSAValue

    # -------------------------------------------------------------- phases

    def _phases(self) -> list[list[Sink]]:
        sinks: list[Sink] = []
        for value, name, rtype, buf in zip(self.ret.operands, self.result_names, self.result_types, self.result_buf):
            sinks.append(Sink(value, buf, rtype.domain.data, rtype.shape, name))
        swept: list[Sink] = []
        for m in self.materializes:
            t = m.result.type
            assert isinstance(t, graph.TensorType)
            sink = Sink(m.operand, self.temp_buf[m], t.domain.data, t.shape, "materialized")
            (swept if m in self.swept else sinks).append(sink)
        phase_of: dict[SSAValue, int] = {}

        def phase(v: SSAValue) -> int:
            if v in phase_of:
                return phase_of[v]
            op = v.owner
            p = 0
            if isinstance(op, graph.GatherOp) and isinstance(op.tensor.owner, graph.MaterializeOp):
                p = phase(op.tensor.owner.operand) + 1
            elif isinstance(op, Operation):
                p = max((phase(o) for o in op.operands), default=0)
            phase_of[v] = p
            return p

        by_phase: dict[int, list[Sink]] = {}
        for s in sinks:
            by_phase.setdefault(phase(s.value), []).append(s)
        self.swept_sinks = swept
        return [by_phase[p] for p in sorted(by_phase)]

    def _emit_source_sweep(self, sinks: list[Sink]) -> None:
        """Source rows [0, num_src) in the runtime's src_blocks, in id order: no in-edges walked.

        The sweep's row is sliced (`vectorize`, by the schedule's width or
        SOURCE_SWEEP_WIDTH) wherever slicing is legal: a hoisted `x[u] @ W`
        then keeps a slice of its result row in registers over the whole
        input axis instead of loading and storing the row once per input
        element. Measurements: docs/design/fusion.md ("Transform before gather").
        """
        schedule = dict(loop_schedule(self.src_fn).data)
        schedule["parallel"] = StringAttr("sources")
        schedule["order"] = StringAttr("identity")
        width = cpu_schedule(self.src_fn).vector_width or SOURCE_SWEEP_WIDTH
        for key in ("partition", "edges", "vectorize", "tile"):
            schedule.pop(key, None)
        body = Block(arg_types=[index, index])
        row, worker = body.args
        self.worker = worker
        with self.em.nested(body):
            self.worker_base = self.em.op(arith.MuliOp(worker, self._scratch_total.result))
            self._emit_destination(row, sinks, None)
            self.em.op(loop.YieldOp())
        sweep = loop.ForDstOp(
            self.num_src, self.src_blocks, self.num_src_blocks, self.num_threads, body, DictionaryAttr(schedule)
        )
        try:
            check_row_split("vectorize", body, row_dim(sweep), "row slicing", "slices")
            schedule["vectorize"] = IntegerAttr(width, i64)
            sweep.schedule = DictionaryAttr(schedule)
        except CompileError:
            pass  # a dot along the row, or no row: the sweep runs unsliced
        self.em.op(sweep)

    def _emit_pair_sweep(self, side: str, pairs: list[graph.MaterializePairsOp]) -> None:
        """The (vertex, relation) pairs of one side, in the runtime's order (relation by
        relation), each computing its values into its row of their temps: a relation's
        transform once per pair instead of once per edge (relation-transform-first).

        The pair's vertex stands where the values read `x[v]` (the pass made them read
        the pair's vertex so), and its relation where they read `W[rel(e)]`; the row is
        sliced in vector registers as a source sweep's is (SOURCE_SWEEP_WIDTH).
        """
        args = self.pair_args[side]
        count, blocks = self.pair_counts[side][:2]
        sinks = []
        for p in pairs:
            t = p.result.type
            assert isinstance(t, graph.TensorType)
            sinks.append(Sink(p.operand, self.temp_buf[p], t.domain.data, t.shape, "pairs"))
        schedule = dict(loop_schedule(self.src_fn).data)
        schedule["parallel"] = StringAttr(SweepKind.PAIRS)
        schedule["order"] = StringAttr("identity")
        width = cpu_schedule(self.src_fn).vector_width or SOURCE_SWEEP_WIDTH
        for key in ("partition", "edges", "vectorize", "tile", "edge_ids", "vectorize_edges"):
            schedule.pop(key, None)
        body = Block(arg_types=[index, index])
        row, worker = body.args
        self.worker = worker
        with self.em.nested(body):
            self.worker_base = self.em.op(arith.MuliOp(worker, self._scratch_total.result))
            vertex = self.em.op(arith.IndexCastOp(self.load(args["pair_vertex"], row), index))
            rel = self.em.op(arith.IndexCastOp(self.load(args["pair_rel"], row), index))
            self._emit_destination(vertex, sinks, None, row=row, rel=rel)
            self.em.op(loop.YieldOp())
        sweep = loop.ForDstOp(count, args["pair_blocks"], blocks, self.num_threads, body, DictionaryAttr(schedule))
        try:
            check_row_split("vectorize", body, row_dim(sweep), "row slicing", "slices")
            schedule["vectorize"] = IntegerAttr(width, i64)
            sweep.schedule = DictionaryAttr(schedule)
        except CompileError:
            pass  # a dot along the row, or no row: the sweep runs unsliced
        self.em.op(sweep)

    def _emit_segment_matmul(self, op: graph.SegmentMatMulOp) -> None:
        """`x @ W[r]` for a side's pairs, tile by tile (segment-matmul): a tile is up to
        `rows` consecutive pairs of one relation, its rows of x read at the pairs'
        vertices, and every element of W[r] is loaded once per tile and multiplied into
        the `rows` accumulators (written out per row, so the tile's accumulators stay in
        vector registers across the K axis once vectorize-rows slices N). A tile shorter
        than `rows` repeats its last pair: the repeats compute and write that pair's row
        again, the same values, in the tile's own rows. The runtime cuts one set of tiles,
        as tall as the kernel's tallest product: a product of fewer rows (segment-matmul's
        narrow transforms) steps through each tile.
        """
        side = op.side.data
        args = self.pair_args[side]
        tiles, tile_blocks = self.pair_counts[side][2:]
        rows = op.rows.value.data
        tile_rows = max(s.rows.value.data for s in self.segment_matmuls)
        wt = op.w.type
        assert isinstance(wt, graph.TensorType)
        n_dim = wt.shape[1]
        schedule = dict(loop_schedule(self.src_fn).data)
        schedule["parallel"] = StringAttr(SweepKind.PAIRS)
        schedule["order"] = StringAttr("identity")
        for key in ("partition", "edges", "vectorize", "tile", "edge_ids", "vectorize_edges"):
            schedule.pop(key, None)
        schedule["vectorize"] = IntegerAttr(cpu_schedule(self.src_fn).vector_width or SEGMENT_WIDTH, i64)
        body = Block(arg_types=[index, index])
        t, worker = body.args
        self.worker = worker
        one = self.em.index_const(1)
        with self.em.nested(body):
            self.worker_base = self.em.op(arith.MuliOp(worker, self._scratch_total.result))
            lo = self.em.op(arith.IndexCastOp(self.load(args["pair_tiles"], t), index))
            hi = self.em.op(arith.IndexCastOp(self.load(args["pair_tiles"], self.em.op(arith.AddiOp(t, one))), index))
            last = self.em.op(arith.SubiOp(hi, one))
            rel = self.em.op(arith.IndexCastOp(self.load(args["pair_rel"], lo), index))
            acc = self.alloc_scratch((rows, n_dim))
            # the runtime's tiles have the height of the kernel's tallest product (the ABI's
            # pair_rows): a shorter product runs its rows over the tile in steps
            for start in range(0, tile_rows, rows):
                self._segment_rows(op, start, lo, last, rel, acc)
            self.em.op(loop.YieldOp())
        sweep = loop.ForDstOp(tiles, args["tile_blocks"], tile_blocks, self.num_threads, body, DictionaryAttr(schedule))
        self.em.op(sweep)

    def _segment_rows(
        self, op: graph.SegmentMatMulOp, start: int, lo: SSAValue, last: SSAValue, rel: SSAValue, acc: SSAValue
    ) -> None:
        """Rows start .. start + rows of a segment-matmul tile at `lo` (clamped to its `last`
        pair): their x rows times W[rel], accumulated in `acc` and written to the pair rows."""
        args = self.pair_args[op.side.data]
        rows = op.rows.value.data
        xt, wt = op.x.type, op.w.type
        assert isinstance(xt, graph.TensorType) and isinstance(wt, graph.TensorType)
        k_dim, n_dim = wt.shape
        x_buf, w_buf, out = self.param_buf[op.x], self.param_buf[op.w], self.temp_buf[op]
        zero = self.em.float_const(0.0, self.elem)
        w_base = self.row_base(rel, wt.shape)
        pairs, x_rows = [], []
        for i in range(start, start + rows):
            at = self.em.op(arith.AddiOp(lo, self.em.index_const(i))) if i else lo
            pair = self.em.op(arith.MinUIOp(at, last)) if i else lo
            vertex = self.em.op(arith.IndexCastOp(self.load(args["pair_vertex"], pair), index))
            pairs.append(pair)
            x_rows.append(self.row_base(vertex, xt.shape))
        self.for_features(
            (rows, n_dim), lambda idx: self.store(zero, self.scratch, self.linear(acc, (rows, n_dim), idx))
        )

        def k_step(kdx: list[SSAValue]) -> None:
            k = kdx[0]
            a = [self.load(x_buf, self.em.op(arith.AddiOp(x_row, k))) for x_row in x_rows]
            w_row = self.em.op(arith.AddiOp(w_base, self.em.op(arith.MuliOp(k, self.extent(n_dim)))))

            def n_step(ndx: list[SSAValue]) -> None:
                n = ndx[0]
                w = self.load(w_buf, self.em.op(arith.AddiOp(w_row, n)))
                for i in range(rows):
                    at = self.linear(acc, (rows, n_dim), [self.em.index_const(i), n])
                    product = self.em.op(arith.MulfOp(a[i], w))
                    self.store(self.em.op(arith.AddfOp(self.load(self.scratch, at), product)), self.scratch, at)

            self.for_features((n_dim,), n_step)

        self.for_features((k_dim,), k_step)

        def write(ndx: list[SSAValue]) -> None:
            for i in range(rows):
                value = self.load(self.scratch, self.linear(acc, (rows, n_dim), [self.em.index_const(i), ndx[0]]))
                self.store(value, out, self.linear(self.row_base(pairs[i], (n_dim,)), (n_dim,), ndx))

        self.for_features((n_dim,), write)

    def _emit_phase(self, sinks: list[Sink]) -> None:
        schedule = loop_schedule(self.src_fn)
        grouped = self._emit_group_sweep(sinks) if self.group_size is not None else None
        body = Block(arg_types=[index, index])
        v, worker = body.args
        self.worker = worker
        with self.em.nested(body):
            self.worker_base = self.em.op(arith.MuliOp(worker, self._scratch_total.result))
            self._emit_destination(v, sinks, grouped)
            self.em.op(loop.YieldOp())
        self.em.op(loop.ForDstOp(self.V, self.blocks, self.num_blocks, self.num_threads, body, schedule))

    def _emit_group_sweep(self, sinks: list[Sink]) -> dict[tuple[Operation, str], SSAValue] | None:
        """`group neighbors G` (Huang et al.): partial reductions per neighbour group, in parallel.

        The in-edges of every destination with more than G of them are cut
        into groups of at most G (`plans.split_neighbor_groups`); threads
        take groups, not destinations, so a hub's in-edges are spread over
        all threads. Each group reduces its edges, in edge order, into its
        own row of acc_rows (and stores its edges' edge values). The
        destination sweep after it merges a split destination's partial
        rows in group order instead of walking its in-edges: the result
        depends on G, never on the thread count. Returns the offset in an
        acc_rows row of each reduction's partial, or None when this phase
        walks no in-edges.
        """
        plan = analyse(sinks, self.result_buf)
        if plan.max_level == 0:
            return None
        if any(r.kind in ("argmax", "argmin") for r in plan.reductions.values()):
            raise CompileError(
                f"group neighbors {self.group_size}: argmax / argmin are not split into neighbour groups "
                "(merging the groups' ids is not implemented)"
            )
        if plan.max_level > 1 or plan.rescaled:
            raise CompileError(
                f"group neighbors {self.group_size}: needs a kernel whose destinations make one pass over "
                "their in-edges (sum, mean, max or min of an edge value, edge values, destination terms); "
                "this kernel needs several passes (softmax or an aggregation of an aggregation), whose "
                "per-destination results the groups of one destination cannot share"
            )
        self.grouped_phases += 1
        reductions = list(plan.reductions.items())
        stores = plan.edge_sinks.get(1, [])
        body = Block(arg_types=[index, index])
        g, worker = body.args
        offsets: dict[tuple[Operation, str], SSAValue] = {}
        with self.em.nested(body):
            self.worker_base = self.em.op(arith.MuliOp(worker, self._scratch_total.result))
            v = self.em.op(arith.IndexCastOp(self.load(self.group_dst, g), index))
            self.acc = {}
            for key, r in reductions:
                t = r.value.type
                assert isinstance(t, graph.ValueType)
                offsets[key] = self.alloc_acc_row(t.shape)
                self.acc[key] = Accumulator(cast(SSAValue, self.acc_rows), self.acc_row_base(g, offsets[key]), t.shape)
                self._fill_identity(self.acc[key], r.kind)
            # group g's positions are group_bounds[2g] .. group_bounds[2g+1]
            row = self.em.op(arith.MuliOp(g, self.em.index_const(2)))
            self._emit_edge_loop(v, reductions, stores, walk=(row, self.group_bounds))
            self.em.op(loop.YieldOp())
        schedule = dict(loop_schedule(self.src_fn).data)
        # groups are taken in plan order; a destination order does not apply to them
        schedule["parallel"] = StringAttr("groups")
        schedule["order"] = StringAttr("identity")
        self.em.op(
            loop.ForDstOp(
                self.num_groups,
                self.group_blocks,
                self.num_group_blocks,
                self.num_threads,
                body,
                DictionaryAttr(schedule),
            )
        )
        return offsets
