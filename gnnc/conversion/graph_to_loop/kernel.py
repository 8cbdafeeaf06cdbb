"""One kernel's lowering: the graph func in, a loop-dialect func with the gnnc ABI out.

`KernelLowering.build` runs named steps: read the schedule, make the
entry block's arguments and bind them, load the prologue values (dims,
plan sizes), emit the sweeps, settle the per-worker scratch and acc_rows
sizes, then make the function and attach its ABI record.
"""

from __future__ import annotations

from typing import cast

from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import AnyFloat, ArrayAttr, DictionaryAttr, Float64Type, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute, Block, Region, SSAValue

from gnnc.conversion.graph_to_loop.analysis import Dim, collect_dims, pure_vertex_map, read_at_src
from gnnc.conversion.graph_to_loop.emitter import Emitter, index
from gnnc.conversion.graph_to_loop.phases import PhaseEmission
from gnnc.conversion.graph_to_loop.schedule import cpu_schedule, schedule_entries
from gnnc.errors import CompileError
from gnnc.ir import abi, graph, kernel_abi, loop
from gnnc.ir.loop_structure import axis_loops, edge_walks, row_dim


class KernelLowering(PhaseEmission):
    """Lowers one graph-dialect kernel (`build`); the options say what its target supports."""

    def __init__(
        self,
        fn: func.FuncOp,
        source_sweeps: bool = True,
        split_heads: bool = True,
        streams: bool = True,
        scratch_values: bool = True,
    ):
        self.src_fn = fn
        self.split_heads = split_heads
        self.streams = streams
        self.scratch_values = scratch_values
        result_types = fn.attributes[graph.RESULT_TYPES]
        assert isinstance(result_types, ArrayAttr)
        self.result_types: list[graph.TensorType] = list(result_types.data)
        self.result_names = [s.data for s in cast(ArrayAttr[StringAttr], fn.attributes[graph.RESULT_NAMES]).data]
        self.param_names = [s.data for s in cast(ArrayAttr[StringAttr], fn.attributes[graph.PARAM_NAMES]).data]
        self.elem = cast(AnyFloat, self.result_types[0].element_type)
        self.elem_bytes = 8 if isinstance(self.elem, Float64Type) else 4
        ret = fn.body.block.last_op
        assert isinstance(ret, func.ReturnOp)
        self.ret = ret
        self.materializes = [op for op in fn.body.walk() if isinstance(op, graph.MaterializeOp)]
        # values per (vertex, relation) pair: computed by a sweep over each side's pairs first
        self.pair_materializes = [op for op in fn.body.walk() if isinstance(op, graph.MaterializePairsOp)]
        # ... or by a blocked product per relation (segment-matmul)
        self.segment_matmuls = [op for op in fn.body.walk() if isinstance(op, graph.SegmentMatMulOp)]
        sides = {op.side.data for op in self.pair_materializes} | {op.side.data for op in self.segment_matmuls}
        self.pair_sides = sorted(sides, reverse=True)
        # computed over source rows before the phases (see phases.py)
        self.swept = [m for m in self.materializes if source_sweeps and read_at_src(m) and pure_vertex_map(m.operand)]
        self.dim_names = collect_dims(fn)
        self.scratch_shapes: list[list[Dim]] = []

    def _temps(self) -> list[abi.Temp]:
        """The record's temps: one per materialized vertex value, with where its rows are."""
        temps = []
        for m in self.materializes:
            t = m.result.type
            assert isinstance(t, graph.TensorType)
            swept = m in self.swept
            temps.append(
                abi.Temp(t.domain.data, list(t.shape), source_rows=swept, read_at_src=not swept and read_at_src(m))
            )
        for p in self.pair_materializes:
            t = p.result.type
            assert isinstance(t, graph.TensorType)
            transform = p.operand.owner
            reduced = None
            if isinstance(transform, graph.MatVecOp):
                vector = transform.vector.type
                assert isinstance(vector, graph.ValueType)
                reduced = vector.shape[-1]
            temps.append(abi.Temp(t.domain.data, list(t.shape), reduced=reduced))
        for s in self.segment_matmuls:
            t, xt = s.result.type, s.x.type
            assert isinstance(t, graph.TensorType) and isinstance(xt, graph.TensorType)
            temps.append(abi.Temp(t.domain.data, list(t.shape), reduced=xt.shape[-1]))
        return temps

    def build(self) -> func.FuncOp:
        self._read_schedule()
        self.arguments = abi.kernel_arguments(self.record, self.param_names, self.result_names)
        arg_types = kernel_abi.signature(self.arguments, self.elem)
        entry = Block(arg_types=arg_types)
        self._bind_arguments(entry)
        self.em = Emitter(entry)
        self._load_prologue()
        body = Block()
        with self.em.nested(body):
            phases = self._phases()
            for side in self.pair_sides:
                pairs = [p for p in self.pair_materializes if p.side.data == side]
                if pairs:
                    self._emit_pair_sweep(side, pairs)
                for s in self.segment_matmuls:
                    if s.side.data == side:
                        self._emit_segment_matmul(s)
            if self.swept_sinks:
                self._emit_source_sweep(self.swept_sinks)
            for phase_sinks in phases:
                self._emit_phase(phase_sinks)
        self._settle_sizes()
        if self.group_size is not None and not self.grouped_phases:
            raise CompileError(
                f"group neighbors {self.group_size}: the kernel has no aggregation or edge value "
                "over in-edges to split into groups"
            )
        # Prologue ops (dims, sizes, scratch offsets) precede the loops.
        for op in list(body.ops):
            op.detach()
            entry.add_op(op)
        entry.add_op(func.ReturnOp())
        fn = self._make_function(entry, arg_types)
        self._attach_records(fn, entry)
        return fn

    # ------------------------------------------------------------- the steps

    def _read_schedule(self) -> None:
        """The schedule's choices that shape the signature, refusing the combinations no kernel takes."""
        sched = cpu_schedule(self.src_fn)
        self.partitions, self.edge_order, self.group_size = sched.partitions, sched.edge_order, sched.group_size
        if self.partitions is not None and self.edge_order is not None:
            raise CompileError("'partition src' and 'order edges hilbert' cannot be combined: choose one")
        if self.group_size is not None and (self.partitions is not None or self.edge_order is not None):
            given = "partition src" if self.partitions is not None else "order edges hilbert"
            raise CompileError(f"'group neighbors' and '{given}' cannot be combined: choose one")
        self.stream = sched.stream_outputs and self.streams
        self.fixed_sizes = dict(sched.sizes or ())
        if self.stream and (self.partitions is not None or self.group_size is not None):
            given = "partition src" if self.partitions is not None else "group neighbors"
            raise CompileError(f"'stream outputs' and '{given}' cannot be combined: choose one")
        # the record as far as the signature needs it; the emission fills in the sizes
        self.record = abi.AbiRecord(
            dims=self.dim_names,
            temps=self._temps(),
            order=sched.order,
            partitions=self.partitions,
            edge_order=self.edge_order,
            groups=self.group_size,
            stream=self.stream,
            source_sweep=bool(self.swept),
            # False: nobody wrote a CPU schedule, so the runtime's default
            # heuristic may pick one per call (autotune/heuristic.py)
            schedule_given=any(k.startswith("cpu.") for k in schedule_entries(self.src_fn)),
            relations=any(isinstance(op, graph.GatherOp) and op.site.data == "rel" for op in self.src_fn.body.walk()),
            relation_degrees=any(isinstance(op, graph.DegreeOp) and op.per_relation for op in self.src_fn.body.walk()),
            pairs=list(self.pair_sides),
            pair_rows=max((s.rows.value.data for s in self.segment_matmuls), default=None),
        )

    def _bind_arguments(self, entry: Block) -> None:
        """The entry block's arguments, by the names abi.kernel_arguments gives them."""
        named = {a.name: arg for a, arg in zip(self.arguments, entry.args, strict=True)}

        def group(g: abi.Group) -> list[SSAValue]:
            return [arg for a, arg in zip(self.arguments, entry.args) if a.group is g]

        self.V, self.num_threads, self.num_blocks = named["num_vertices"], named["num_threads"], named["num_blocks"]
        self.blocks, self.indptr, self.src, self.eid = (
            named[n] for n in ("dst_blocks", "in_indptr", "in_src", "in_eid")
        )
        self.deg_in, self.deg_out, self.dims_buf, self.scratch = (
            named[n] for n in ("deg_in", "deg_out", "dims", "scratch")
        )
        self.param_buf = dict(zip(self.src_fn.body.block.args, group(abi.Group.PARAMS), strict=True))
        self.result_buf = group(abi.Group.RESULTS)
        written = [*self.materializes, *self.pair_materializes, *self.segment_matmuls]
        self.temp_buf = dict(zip(written, group(abi.Group.TEMPS), strict=True))
        names = ("pair_meta", "pair_blocks", "pair_vertex", "pair_rel", "edge_pair", "pair_tiles", "tile_blocks")
        self.pair_args = {side: {n: named[f"{side}_{n}"] for n in names} for side in self.pair_sides}
        if self.swept:
            self.src_meta, self.src_blocks = named["src_meta"], named["src_blocks"]
        self.acc_rows = named.get("acc_rows")
        self.edge_rel = named.get("edge_rel")
        self.rel_deg_in, self.rel_deg_out = named.get("rel_deg_in"), named.get("rel_deg_out")
        if self.group_size is not None:
            self.group_meta, self.group_blocks, self.group_dst, self.group_bounds, self.group_offsets = (
                named[n] for n in ("group_meta", "group_blocks", "group_dst", "group_bounds", "group_offsets")
            )

    def _load_prologue(self) -> None:
        """Dims and plan sizes, loaded once; placeholders for the sizes known only at the end."""
        self.dims: dict[str, SSAValue] = {}
        for i, name in enumerate(self.dim_names):
            raw = self.em.pre(memref.LoadOp.get(self.dims_buf, [self.em.index_const(i)]))
            self.dims[name] = self.em.pre(arith.IndexCastOp(raw, index))
        self.scratch_top = self.em.index_const(0)
        self._size_cache = {}
        # The per-worker scratch size is known only once everything is
        # emitted: a placeholder stands for it until then.
        self._scratch_total = arith.ConstantOp(IntegerAttr(0, index))
        self.em.pre(self._scratch_total)
        # the same for the stride of one accumulator row (acc_rows)
        self.acc_row_top = self.em.index_const(0)
        self.acc_row_shapes = []
        self._acc_row_stride = arith.ConstantOp(IntegerAttr(0, index))
        self.em.pre(self._acc_row_stride)
        self.grouped_phases = 0
        if self.group_size is not None:
            self.num_group_blocks = self._load_count(self.group_meta, 0)
            self.num_groups = self._load_count(self.group_meta, 1)
        if self.swept:
            self.num_src = self._load_count(self.src_meta, 0)
            self.num_src_blocks = self._load_count(self.src_meta, 1)
        # per side: pairs, pair blocks, tiles, tile blocks
        self.pair_counts = {
            side: tuple(self._load_count(args["pair_meta"], i) for i in range(4))
            for side, args in self.pair_args.items()
        }

    def _load_count(self, meta: SSAValue, at: int) -> SSAValue:
        return self.em.pre(arith.IndexCastOp(self.em.pre(memref.LoadOp.get(meta, [self.em.index_const(at)])), index))

    def _settle_sizes(self) -> None:
        """Replaces the placeholders by the scratch slice size and the acc_rows row stride."""
        # scratch_slice_elements(top) of abi.py: whole cache lines plus one
        line = self.em.index_const(abi.CACHE_LINE_BYTES // self.elem_bytes)
        rounded_up = self.em.pre(
            arith.AddiOp(self.scratch_top, self.em.pre(arith.SubiOp(line, self.em.index_const(1))))
        )
        lines = self.em.pre(arith.DivUIOp(rounded_up, line))
        padded = self.em.pre(arith.AddiOp(self.em.pre(arith.MuliOp(lines, line)), line))
        self._scratch_total.result.replace_all_uses_with(padded)
        self._scratch_total.detach()
        self._scratch_total.erase()
        self._acc_row_stride.result.replace_all_uses_with(self.acc_row_top)
        self._acc_row_stride.detach()
        self._acc_row_stride.erase()

    def _make_function(self, entry: Block, arg_types: list[Attribute]) -> func.FuncOp:
        # A prefix keeps kernel symbols apart from libc's (a kernel named `exp`).
        name = abi.SYMBOL_PREFIX + self.src_fn.sym_name.data
        fn = func.FuncOp(name, (arg_types, []), Region(entry))
        fn.arg_attrs = ArrayAttr(kernel_abi.argument_attrs(self.arguments))
        return fn

    def _attach_records(self, fn: func.FuncOp, entry: Block) -> None:
        """The ABI record, the cuda mapping and the vector width the later passes read."""
        record = self.record
        record.scratch = self.scratch_shapes
        record.acc_rows = self.acc_row_shapes
        # each phase's row axis and in-edge walk count, for the runtime's
        # default heuristic (`autotune/heuristic.py`: `vectorize` pays only
        # for a single walk over the in-edges), read before any schedule
        # pass restructures the sweeps
        phases = [o for o in entry.ops if isinstance(o, loop.ForDstOp)]
        # (a phase with no feature loop, a scalar per edge, has no row axis)
        record.phases = [abi.Phase(_row_axis(p), edge_walks(p)) for p in phases]
        kernel_abi.set_record(fn, record)
        # The cuda thread mapping travels to map-threads on the function; the
        # CPU pipeline has no use for it and leaves it as a plain attribute.
        attr = self.src_fn.attributes.get(graph.SCHEDULE)
        if isinstance(attr, DictionaryAttr) and "cuda.map" in attr.data:
            fn.attributes[loop.CUDA_MAP_ATTR] = attr.data["cuda.map"]
        simd_bits = cpu_schedule(self.src_fn).simd_bits
        if simd_bits is not None:
            fn.attributes[abi.SIMD_BITS_ATTR] = IntegerAttr(simd_bits, i64)


def _row_axis(phase: loop.ForDstOp) -> str | None:
    dim = row_dim(phase)
    return dim if axis_loops(phase, dim) else None
