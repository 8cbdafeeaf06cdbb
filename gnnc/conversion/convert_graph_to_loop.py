"""convert-graph-to-loop: graph-dialect kernels become loop-dialect loop nests.

Each kernel becomes one `func.func` with the gnnc C ABI (see `abi.py`) whose
body is a sequence of *phases*, one `loop.for_dst` each. A phase ends where a
vertex value is read at a neighbour (`graph.materialize`): every destination
must be finished before any source reads it.

Inside a phase, each destination runs *levels* of in-edge loops: a level
computes the per-destination reductions (aggregations; softmax's max and sum
of exponentials) whose inputs are known, so `softmax` and aggregations of
softmax-weighted values stay inside one destination's iteration instead of
materialising edge-sized arrays. Edge results are stored in the first in-edge
loop where their inputs are known; vertex results after the last loop.

A vertex value read at sources that depends on nothing but inputs and
parameters (`x[u] @ W` hoisted by transform-before-gather) is computed in a
*source sweep* instead, over every source row (`num_src` of them, which on a
bipartite graph differ from the destinations), before the first phase; the
CPU target only (`SOURCE_SWEEP_TARGETS`): the cuda grids have no such sweep.

Elementwise expressions are never materialised: each is evaluated element by
element inside the `loop.for_feature` nest of its consumer. `dot` and `@`
results are computed once per edge (or destination) into per-thread scratch,
because recomputing a reduction per consumer element would multiply its cost.

Per-edge work over head axes shares one feature-loop nest with the row work
under those heads (a head's attention weight, then its row), except where it
takes a transcendental function (CPU target only, `HEAD_SPLIT_TARGETS`):
there it runs in a head loop of its own first, so that expand-exp's inline
exponentials vectorise across heads (see `_split_head_nest`).
"""

from __future__ import annotations

import functools
import json
import math as pymath
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import cast

from xdsl.context import Context
from xdsl.dialects import arith, func, math, memref, scf
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    AnyFloat,
    ArrayAttr,
    DictionaryAttr,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.dialects.utils import FastMathFlag
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from gnnc.errors import CompileError
from gnnc.ir import abi, graph, loop
from gnnc.ir.directives import check_directive_option, with_directives
from gnnc.ir.llvm_ext import StreamCopyOp
from gnnc.ir.loop_structure import check_row_split, edge_walks, row_dim
from gnnc.ir.schedule import CpuSchedule, sizes_text

index = IndexType()
Dim = int | str


class LoweringTarget(StrEnum):
    """What the kernels are lowered for (the pass's `target` option): the CPU, or the cuda
    grids (the cuda target and its CPU emulation)."""

    CPU = "cpu"
    CUDA = "cuda"


#: Targets whose lowering emits source sweeps (see the module doc).
SOURCE_SWEEP_TARGETS = (LoweringTarget.CPU,)

#: Targets whose edge walks split costly per-head work from the row loops.
#: The cuda mappings spread feature loops over lanes; the split would add a
#: scratch round trip per edge there, unmeasured on a GPU.
HEAD_SPLIT_TARGETS = (LoweringTarget.CPU,)

#: Targets whose vertex results may be written with streaming stores (`stream outputs`).
STREAM_TARGETS = (LoweringTarget.CPU,)

#: Flags for sums whose order does not matter (reductions inside one element).
REORDERABLE = arith.FastMathFlagsAttr([FastMathFlag.REASSOC, FastMathFlag.ALLOW_CONTRACT])


# ------------------------------------------------------------------ emitting


class Emitter:
    """Appends ops to a current block; keeps a prologue for loop-invariant values."""

    def __init__(self, prologue: Block):
        self.prologue = prologue
        self.block = prologue
        self._consts: dict[tuple[str, object], SSAValue] = {}
        # Values already computed, one scope per open block: an entry made in
        # an outer block dominates every inner one.
        self.memo: list[dict[object, SSAValue]] = [{}]

    def lookup(self, key: object) -> SSAValue | None:
        for scope in reversed(self.memo):
            if key in scope:
                return scope[key]
        return None

    def op(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]  # ops without results (stores, yields) give None, which no caller reads

    def pre(self, op: Operation) -> SSAValue:
        self.prologue.add_op(op)
        return op.results[0]

    def index_const(self, value: int) -> SSAValue:
        key = ("index", value)
        if key not in self._consts:
            self._consts[key] = self.pre(arith.ConstantOp(IntegerAttr(value, index)))
        return self._consts[key]

    def float_const(self, value: float, elem: AnyFloat) -> SSAValue:
        key = (str(elem), repr(value))
        if key not in self._consts:
            self._consts[key] = self.pre(arith.ConstantOp(FloatAttr(value, elem)))
        return self._consts[key]

    def nested(self, block: Block) -> _Nested:
        return _Nested(self, block)


class _Nested:
    def __init__(self, emitter: Emitter, block: Block):
        self.emitter, self.inner = emitter, block

    def __enter__(self) -> Block:
        self.outer = self.emitter.block
        self.emitter.block = self.inner
        self.emitter.memo.append({})
        return self.inner

    def __exit__(self, *exc: object) -> None:
        self.emitter.block = self.outer
        self.emitter.memo.pop()


# --------------------------------------------------------------- the lowering


@dataclass
class _Accumulator:
    """Where a per-destination reduction lives while a destination is processed."""

    buffer: SSAValue
    base: SSAValue  # index of element 0 of this destination's accumulator
    shape: tuple[Dim, ...]
    in_place: bool = False  # True when the accumulator is the output row itself


#: Row slice width of a source sweep whose schedule names none (see _emit_source_sweep).
SOURCE_SWEEP_WIDTH = 32


@dataclass
class _Reduction:
    kind: str  # sum, mean, max, stabilizer_max, min, argmax, argmin, softmax_max, softmax_sum
    value: SSAValue  # the graph value reduced over in-edges
    owner: Operation  # graph.aggregate or graph.edge_softmax
    level: int = 0


@dataclass
class _Sink:
    value: SSAValue
    buffer: SSAValue
    domain: str  # "V" or "E"
    shape: tuple[Dim, ...]
    name: str


@dataclass
class _Plan:
    """What one destination computes: reductions by level, and where each result is written."""

    reductions: dict[tuple[Operation, str], _Reduction]
    edge_sinks: dict[int, list[_Sink]]
    vertex_sinks: list[_Sink]
    rescaled: list[tuple[_Sink, SSAValue]]
    in_place: dict[Operation, _Sink]
    max_level: int


@dataclass
class _Context:
    v: SSAValue
    u: SSAValue | None = None
    e: SSAValue | None = None
    # per-edge (or per-destination) scratch holding dot / matvec results
    computed: dict[SSAValue, tuple[SSAValue, SSAValue]] = field(default_factory=dict)


def _values_under(roots: list[SSAValue], descend: Callable[[SSAValue], bool]) -> Iterator[SSAValue]:
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


def _pure_vertex_map(value: SSAValue) -> bool:
    """Whether value is computed from inputs, degrees and parameters at one vertex alone."""
    t = value.type
    if not isinstance(t, graph.ValueType) or t.kind not in ("D", "P"):
        return False
    for x in _values_under([value], lambda x: not isinstance(x.owner, graph.GatherOp)):
        op = x.owner
        if isinstance(op, graph.GatherOp):
            if isinstance(op.tensor.owner, graph.MaterializeOp) or op.site.data not in ("dst", "param"):
                return False
        if isinstance(op, (graph.AggregateOp, graph.EdgeSoftmaxOp)):
            return False
    return True


def _read_at_src(m: graph.MaterializeOp) -> bool:
    return any(isinstance(use.operation, graph.GatherOp) and use.operation.site.data == "src" for use in m.result.uses)


class KernelLowering:
    def __init__(self, fn: func.FuncOp, source_sweeps: bool = True, split_heads: bool = True, streams: bool = True):
        self.src_fn = fn
        self.split_heads = split_heads
        self.streams = streams
        result_types = fn.attributes[graph.RESULT_TYPES]
        assert isinstance(result_types, ArrayAttr)
        self.result_types: list[graph.TensorType] = list(result_types.data)
        self.result_names = [s.data for s in cast(ArrayAttr[StringAttr], fn.attributes[graph.RESULT_NAMES]).data]
        self.param_names = [s.data for s in cast(ArrayAttr[StringAttr], fn.attributes[graph.PARAM_NAMES]).data]
        self.elem = cast(AnyFloat, self.result_types[0].element_type)
        self.elem_bytes = 8 if isinstance(self.elem, Float64Type) else 4
        self.ret = cast(func.ReturnOp, fn.body.block.last_op)
        assert isinstance(self.ret, func.ReturnOp)
        self.materializes = [op for op in fn.body.walk() if isinstance(op, graph.MaterializeOp)]
        # computed over source rows before the phases (see the module doc)
        self.swept = [m for m in self.materializes if source_sweeps and _read_at_src(m) and _pure_vertex_map(m.operand)]
        self.dim_names = self._collect_dims()
        self.scratch_shapes: list[list[Dim]] = []
        self.temp_shapes: list[dict] = []

    # ---------------------------------------------------------- signature

    def _collect_dims(self) -> list[str]:
        names: list[str] = []
        for arg in self.src_fn.body.block.args:
            assert isinstance(arg.type, graph.TensorType)
            for d in arg.type.shape:
                if isinstance(d, str) and d not in names:
                    names.append(d)
        return names

    def build(self) -> func.FuncOp:
        buf = MemRefType(self.elem, [DYNAMIC_INDEX])
        ibuf = MemRefType(i64, [DYNAMIC_INDEX])
        n_params = len(self.param_names)
        arg_types: list[Attribute] = [index, index, index, index, ibuf, ibuf, ibuf, ibuf, ibuf, buf, buf, ibuf, buf]
        n_fixed = len(arg_types)
        assert n_fixed == len(abi.GRAPH_ARGUMENTS)
        arg_types += [buf] * (n_params + len(self.result_types) + len(self.materializes))
        sched = self.cpu_schedule()
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
        n_temps = len(self.materializes)
        if self.swept:
            # src_meta (num_src, number of source blocks), src_blocks; see abi.py
            arg_types += [ibuf] * 2
        n_before_extras = len(arg_types)
        has_acc_rows = self.partitions is not None or self.group_size is not None or self.stream
        if has_acc_rows:
            # per-row accumulators that outlive one destination visit: per
            # destination across partitions, or per neighbour group; or a
            # worker's rows of the results it streams; see abi.py
            arg_types.append(buf)
        if self.partitions is not None or self.edge_order is not None:
            # FeatGraph's source partitions (the in-CSR of each partition), or
            # the edges in Hilbert order (src, dst, eid); see abi.py
            arg_types += [ibuf] * 3
        if self.group_size is not None:
            # group_meta, group_blocks, group_dst, group_bounds, group_offsets
            arg_types += [ibuf] * 5
        entry = Block(arg_types=arg_types)
        (
            self.V,
            self.E,
            self.num_threads,
            self.num_blocks,
            self.blocks,
            self.order,
            self.indptr,
            self.src,
            self.eid,
            self.deg_in,
            self.deg_out,
            self.dims_buf,
            self.scratch,
        ) = entry.args[:n_fixed]
        rest = entry.args[n_fixed:]
        self.param_buf: dict[SSAValue, SSAValue] = dict(zip(self.src_fn.body.block.args, rest[:n_params]))
        self.result_buf = list(rest[n_params : n_params + len(self.result_types)])
        self.temp_buf = dict(zip(self.materializes, rest[n_params + len(self.result_types) :][:n_temps]))
        if self.swept:
            self.src_meta, self.src_blocks = rest[n_params + len(self.result_types) + n_temps :][:2]
        extras = list(entry.args[n_before_extras:])
        self.acc_rows = extras.pop(0) if has_acc_rows else None
        if self.group_size is not None:
            (self.group_meta, self.group_blocks, self.group_dst, self.group_bounds, self.group_offsets) = extras[-5:]

        self.em = Emitter(entry)
        self.dims: dict[str, SSAValue] = {}
        for i, name in enumerate(self.dim_names):
            raw = self.em.pre(memref.LoadOp.get(self.dims_buf, [self.em.index_const(i)]))
            self.dims[name] = self.em.pre(arith.IndexCastOp(raw, index))
        self.scratch_top: SSAValue = self.em.index_const(0)
        self._size_cache: dict[tuple[Dim, ...], SSAValue] = {}
        # The per-worker scratch size is known only once everything is
        # emitted: a placeholder stands for it until then.
        self._scratch_total = arith.ConstantOp(IntegerAttr(0, index))
        self.em.pre(self._scratch_total)
        # the same for the stride of one accumulator row (acc_rows)
        self.acc_row_top: SSAValue = self.em.index_const(0)
        self.acc_row_shapes: list[list[Dim]] = []
        self._acc_row_stride = arith.ConstantOp(IntegerAttr(0, index))
        self.em.pre(self._acc_row_stride)
        self.grouped_phases = 0
        if self.group_size is not None:
            self.num_group_blocks = self.em.pre(
                arith.IndexCastOp(self.em.pre(memref.LoadOp.get(self.group_meta, [self.em.index_const(0)])), index)
            )
            self.num_groups = self.em.pre(
                arith.IndexCastOp(self.em.pre(memref.LoadOp.get(self.group_meta, [self.em.index_const(1)])), index)
            )

        if self.swept:
            self.num_src = self.em.pre(
                arith.IndexCastOp(self.em.pre(memref.LoadOp.get(self.src_meta, [self.em.index_const(0)])), index)
            )
            self.num_src_blocks = self.em.pre(
                arith.IndexCastOp(self.em.pre(memref.LoadOp.get(self.src_meta, [self.em.index_const(1)])), index)
            )

        body = Block()
        with self.em.nested(body):
            phases = self._phases()
            if self.swept_sinks:
                self._emit_source_sweep(self.swept_sinks)
            for phase_sinks in phases:
                self._emit_phase(phase_sinks)
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

        # A prefix keeps kernel symbols apart from libc's (a kernel named `exp`).
        name = abi.SYMBOL_PREFIX + self.src_fn.sym_name.data
        fn = func.FuncOp(name, (arg_types, []), Region(entry))
        noalias = DictionaryAttr({"llvm.noalias": UnitAttr()})
        readonly = DictionaryAttr({"llvm.noalias": UnitAttr(), "llvm.readonly": UnitAttr()})
        attrs = [DictionaryAttr({})] * 4 + [readonly] * 7 + [readonly, noalias]
        attrs += [readonly] * n_params + [noalias] * (len(self.result_types) + len(self.materializes))
        if self.swept:
            attrs += [readonly] * 2
        if self.acc_rows is not None:
            attrs.append(noalias)
        if self.partitions is not None or self.edge_order is not None:
            attrs += [readonly] * 3
        if self.group_size is not None:
            attrs += [readonly] * 5
        fn.arg_attrs = ArrayAttr(attrs)
        record = self.abi_record()
        # each phase's row axis and in-edge walk count, for the runtime's
        # default heuristic (`autotune/heuristic.py`: `vectorize` pays only
        # for a single walk over the in-edges), read before any schedule
        # pass restructures the sweeps
        sweeps = [o for o in entry.ops if isinstance(o, loop.ForDstOp)]
        record["phases"] = [{"row_dim": row_dim(p), "edge_walks": edge_walks(p)} for p in sweeps]
        fn.attributes[abi.ABI_ATTR] = StringAttr(json.dumps(record, sort_keys=True))
        # The cuda thread mapping travels to map-threads on the function; the
        # CPU pipeline has no use for it and leaves it as a plain attribute.
        attr = self.src_fn.attributes.get(graph.SCHEDULE)
        if isinstance(attr, DictionaryAttr) and "cuda.map" in attr.data:
            fn.attributes[loop.CUDA_MAP_ATTR] = attr.data["cuda.map"]
        simd_bits = self.cpu_schedule().simd_bits
        if simd_bits is not None:
            fn.attributes[abi.SIMD_BITS_ATTR] = IntegerAttr(simd_bits, i64)
        return fn

    def abi_record(self) -> dict:
        return {
            "dims": self.dim_names,
            "scratch": self.scratch_shapes,
            "temps": self.temp_shapes,
            "order": cast(StringAttr, self.loop_schedule().data["order"]).data,
            "partitions": self.partitions,
            "edge_order": self.edge_order,
            "groups": self.group_size,
            "acc_rows": self.acc_row_shapes,
            # acc_rows holds a row per worker: the vertex results it streams
            "stream": self.stream,
            "source_sweep": bool(self.swept),
            # False: nobody wrote a CPU schedule, so the runtime's default
            # heuristic may pick one per call (autotune/heuristic.py)
            "schedule_given": any(k.startswith("cpu.") for k in self._schedule_entries()),
        }

    # ------------------------------------------------------------- helpers

    def size_of(self, shape: Sequence[Dim]) -> SSAValue:
        """The number of elements of a shape, computed once in the prologue."""
        key = tuple(shape)
        if key in self._size_cache:
            return self._size_cache[key]
        const = 1
        dynamic: list[SSAValue] = []
        for d in shape:
            if isinstance(d, int):
                const *= d
            else:
                dynamic.append(self.dims[d])
        result = self.em.index_const(const)
        for size in dynamic:
            result = self.em.pre(arith.MuliOp(result, size))
        self._size_cache[key] = result
        return result

    def extent(self, d: Dim) -> SSAValue:
        return self.em.index_const(d) if isinstance(d, int) else self.dims[d]

    def alloc_scratch(self, shape: Sequence[Dim]) -> SSAValue:
        """Per-worker scratch: the base index of a fresh region in this worker's slice."""
        offset = self.scratch_top
        self.scratch_top = self.em.pre(arith.AddiOp(offset, self.size_of(shape)))
        self.scratch_shapes.append(list(shape))
        base = arith.AddiOp(self.worker_base, offset)
        base.attributes[loop.SCRATCH_BASE_ATTR] = UnitAttr()
        return self.em.op(base)

    def alloc_acc_row(self, shape: Sequence[Dim]) -> SSAValue:
        """A fresh region in every row of acc_rows: its offset within a row (a prologue value)."""
        offset = self.acc_row_top
        self.acc_row_top = self.em.pre(arith.AddiOp(offset, self.size_of(shape)))
        self.acc_row_shapes.append(list(shape))
        return offset

    def acc_row_base(self, row: SSAValue, offset: SSAValue) -> SSAValue:
        return self.em.op(arith.AddiOp(self.em.op(arith.MuliOp(row, self._acc_row_stride.result)), offset))

    def linear(self, base: SSAValue, shape: Sequence[Dim], idx: Sequence[SSAValue]) -> SSAValue:
        """base + row-major offset of idx (a prefix-length index) in shape."""
        assert len(idx) == len(shape)
        offset: SSAValue | None = None
        for i, d in zip(idx, shape):
            offset = (
                i if offset is None else self.em.op(arith.AddiOp(self.em.op(arith.MuliOp(offset, self.extent(d))), i))
            )
        if offset is None:
            return base
        return self.em.op(arith.AddiOp(base, offset))

    def row_base(self, row: SSAValue, shape: Sequence[Dim]) -> SSAValue:
        return self.em.op(arith.MuliOp(row, self.size_of(shape)))

    def load(self, buf: SSAValue, i: SSAValue) -> SSAValue:
        return self.em.op(memref.LoadOp.get(buf, [i]))

    def store(self, value: SSAValue, buf: SSAValue, i: SSAValue) -> None:
        self.em.op(memref.StoreOp.get(value, buf, [i]))

    def for_features(
        self,
        shape: Sequence[Dim],
        body: Callable[[list[SSAValue]], None],
        idx: list[SSAValue] | None = None,
        hoist: Sequence[SSAValue] = (),
        ctx: _Context | None = None,
    ) -> None:
        """Emits a loop.for_feature nest over shape and calls body(indices) innermost.

        Sub-values of `hoist` whose shape is exactly the indices known at a
        depth are computed at that depth, not per element of the deeper
        loops (a per-head attention weight once per head, not per feature).
        """
        idx = idx or []
        if hoist and ctx is not None and len(idx) < len(shape):
            for root in hoist:
                self._hoist(root, idx, ctx)
        if len(idx) == len(shape):
            body(idx)
            return
        d = shape[len(idx)]
        block = Block(arg_types=[index])
        with self.em.nested(block):
            self.for_features(shape, body, idx + [block.args[0]], hoist, ctx)
            self.em.op(loop.YieldOp())
        self.em.op(loop.ForFeatureOp(self.extent(d), block, dim=str(d)))

    def scalar_loop(self, extent: SSAValue, init: SSAValue, body: Callable[[SSAValue, SSAValue], SSAValue]) -> SSAValue:
        """scf.for with one loop-carried scalar: a reduction inside one element.

        Tagged not to be interleaved: LLVM's default for a reassociable sum
        (16 lanes x 4 accumulators on AVX-512) needs 64 elements per
        iteration, so a 32-long dot, the common head size, ran entirely in
        the narrower remainder loop. And not to be unrolled
        (abi.NO_UNROLL_ATTR): a literal-length dot unrolled before the loop
        vectoriser saw it came out as a chain of scalar FMAs.
        """
        block = Block(arg_types=[index, init.type])
        with self.em.nested(block):
            result = body(block.args[0], block.args[1])
            self.em.op(scf.YieldOp(result))
        op = scf.ForOp(self.em.index_const(0), extent, self.em.index_const(1), [init], block)
        op.attributes[abi.INTERLEAVE_ATTR] = IntegerAttr(1, i64)
        op.attributes[abi.NO_UNROLL_ATTR] = UnitAttr()
        self.em.op(op)
        return op.results[0]

    # -------------------------------------------------------------- phases

    def _phases(self) -> list[list[_Sink]]:
        sinks: list[_Sink] = []
        for value, name, rtype, buf in zip(self.ret.operands, self.result_names, self.result_types, self.result_buf):
            sinks.append(_Sink(value, buf, rtype.domain.data, rtype.shape, name))
        swept: list[_Sink] = []
        for m in self.materializes:
            t = m.result.type
            assert isinstance(t, graph.TensorType)
            temp: dict[str, object] = {"domain": t.domain.data, "shape": list(t.shape)}
            sink = _Sink(m.operand, self.temp_buf[m], t.domain.data, t.shape, "materialized")
            if m in self.swept:
                temp["rows"] = "src"  # one per source, not per destination
                swept.append(sink)
            else:
                if _read_at_src(m):
                    temp["read_at_src"] = True  # per destination: the runtime needs a square graph
                sinks.append(sink)
            self.temp_shapes.append(temp)
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

        by_phase: dict[int, list[_Sink]] = {}
        for s in sinks:
            by_phase.setdefault(phase(s.value), []).append(s)
        self.swept_sinks = swept
        return [by_phase[p] for p in sorted(by_phase)]

    def _emit_source_sweep(self, sinks: list[_Sink]) -> None:
        """Source rows [0, num_src) in the runtime's src_blocks, in id order: no in-edges walked.

        The sweep's row is sliced (`vectorize`, by the schedule's width or
        SOURCE_SWEEP_WIDTH) wherever slicing is legal: a hoisted `x[u] @ W`
        then keeps a slice of its result row in registers over the whole
        input axis instead of loading and storing the row once per input
        element. mlp_aggr (2 threads, mdual): 1.30x at D = 128, 1.33x at
        D = 32; widths 16, 64 and 128 gained less.
        """
        schedule = dict(self.loop_schedule().data)
        schedule["parallel"] = StringAttr("sources")
        schedule["order"] = StringAttr("identity")
        width = self.cpu_schedule().vector_width or SOURCE_SWEEP_WIDTH
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

    def _emit_phase(self, sinks: list[_Sink]) -> None:
        schedule = self.loop_schedule()
        grouped = self._emit_group_sweep(sinks) if self.group_size is not None else None
        body = Block(arg_types=[index, index])
        v, worker = body.args
        self.worker = worker
        with self.em.nested(body):
            self.worker_base = self.em.op(arith.MuliOp(worker, self._scratch_total.result))
            self._emit_destination(v, sinks, grouped)
            self.em.op(loop.YieldOp())
        self.em.op(loop.ForDstOp(self.V, self.blocks, self.num_blocks, self.num_threads, body, schedule))

    def _emit_group_sweep(self, sinks: list[_Sink]) -> dict[tuple[Operation, str], SSAValue] | None:
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
        plan = self._analyse(sinks)
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
            self.acc: dict[tuple[Operation, str], _Accumulator] = {}
            for key, r in reductions:
                t = r.value.type
                assert isinstance(t, graph.ValueType)
                offsets[key] = self.alloc_acc_row(t.shape)
                self.acc[key] = _Accumulator(cast(SSAValue, self.acc_rows), self.acc_row_base(g, offsets[key]), t.shape)
                self._fill_identity(self.acc[key], r.kind)
            # group g's positions are group_bounds[2g] .. group_bounds[2g+1]
            row = self.em.op(arith.MuliOp(g, self.em.index_const(2)))
            self._emit_edge_loop(v, reductions, stores, walk=(row, self.group_bounds))
            self.em.op(loop.YieldOp())
        schedule = dict(self.loop_schedule().data)
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

    def _emit_group_merge(
        self,
        v: SSAValue,
        reductions: list[tuple[tuple[Operation, str], _Reduction]],
        stores: list[_Sink],
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
                    idx: list[SSAValue], acc: _Accumulator = acc, part: SSAValue = part, kind: str = r.kind
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

    def _schedule_entries(self) -> dict[str, str]:
        attr = self.src_fn.attributes.get(graph.SCHEDULE)
        return {k: cast(StringAttr, v).data for k, v in attr.data.items()} if isinstance(attr, DictionaryAttr) else {}

    def cpu_schedule(self) -> CpuSchedule:
        return CpuSchedule.from_attr(self._schedule_entries())

    def loop_schedule(self) -> DictionaryAttr:
        """The CPU schedule, defaults filled in, as the loop passes consume it."""
        sched = self.cpu_schedule()
        result: dict[str, Attribute] = {"parallel": StringAttr("dst"), "order": StringAttr(sched.order)}
        if "cpu.prefetch" in self._schedule_entries():
            # without it prefetch-neighbors takes its default distance; a pipeline without that
            # pass (gnnc-opt ... -p convert-graph-to-loop,convert-loop-to-scf) then runs unprefetched
            result["prefetch"] = IntegerAttr(sched.prefetch, i64)
        if sched.tile_features is not None:
            result["tile"] = IntegerAttr(sched.tile_features, i64)
        if sched.partitions is not None:
            result["partition"] = IntegerAttr(sched.partitions, i64)
        if sched.edge_order is not None:
            result["edges"] = StringAttr(sched.edge_order)
        if sched.vector_width is not None:
            result["vectorize"] = IntegerAttr(sched.vector_width, i64)
        if sched.sizes is not None:
            result["specialize"] = StringAttr(sizes_text(dict(sched.sizes)))
        if sched.edges_sorted:
            result["edge_ids"] = StringAttr("sorted")
        if sched.edge_lanes is not None:
            result["vectorize_edges"] = IntegerAttr(sched.edge_lanes, i64)
        return DictionaryAttr(result)

    # ------------------------------------------------- one destination's work

    def _analyse(self, sinks: list[_Sink]) -> _Plan:
        """The reductions of one destination, their levels, and where each sink is written."""
        reductions: dict[tuple[Operation, str], _Reduction] = {}
        level_of: dict[SSAValue, int] = {}

        def dep_level(x: SSAValue) -> int:
            """The highest reduction level x needs (0: none)."""
            if x in level_of:
                return level_of[x]
            op = x.owner
            if isinstance(op, graph.AggregateOp):
                kind = "stabilizer_max" if op.stabilizer is not None else op.kind.data
                r = _Reduction(kind, op.operand, op)
                r.level = 1 + dep_level(op.operand)
                reductions[(op, "agg")] = r
                if r.kind in ("argmax", "argmin"):
                    # the id accumulates beside the best value so far, updated together
                    reductions[(op, "best")] = _Reduction(r.kind + "_best", op.operand, op, r.level)
                lvl = r.level
            elif isinstance(op, graph.EdgeSoftmaxOp):
                rmax = _Reduction("softmax_max", op.operand, op, 1 + dep_level(op.operand))
                rsum = _Reduction("softmax_sum", op.operand, op, rmax.level + 1)
                reductions[(op, "max")] = rmax
                reductions[(op, "sum")] = rsum
                lvl = rsum.level
            elif isinstance(op, graph.GatherOp) or not isinstance(op, Operation):
                lvl = 0
            else:
                lvl = max((dep_level(o) for o in op.operands), default=0)
            level_of[x] = lvl
            return lvl

        edge_sinks: dict[int, list[_Sink]] = {}
        vertex_sinks: list[_Sink] = []
        rescaled: list[tuple[_Sink, SSAValue]] = []
        for s in sinks:
            lvl = dep_level(s.value)
            if s.domain != "E":
                vertex_sinks.append(s)
                continue
            split = _rescalable(s, dep_level)
            if split is None:
                edge_sinks.setdefault(lvl + 1, []).append(s)
                continue
            # An edge result P * Q whose per-destination factor Q is known
            # only after the walk that can compute P: store P in that walk
            # and scale it by Q in a last walk that touches nothing else
            # (softmax weights: exp(s - m) stored beside the sums, times 1/z).
            early, scale = split
            edge_sinks.setdefault(dep_level(early) + 1, []).append(_Sink(early, s.buffer, s.domain, s.shape, s.name))
            rescaled.append((s, scale))

        # An aggregation whose only use is a vertex result accumulates in the
        # output row itself: no scratch, no copy. So does one whose only use
        # is a per-destination scale of it (a deferred softmax division): the
        # row is then scaled in place. Accumulating in scratch instead, beside
        # the softmax sums, made the wide-row accumulation slower (the row and
        # the sums share the scratch pointer, so LLVM must assume they alias).
        in_place: dict[Operation, _Sink] = {}
        for s in vertex_sinks:
            agg = _in_place_aggregate(s)
            if agg is not None and s.buffer in self.result_buf:
                in_place[agg] = s

        max_level = max([r.level for r in reductions.values()] + list(edge_sinks) + [0])
        return _Plan(reductions, edge_sinks, vertex_sinks, rescaled, in_place, max_level)

    def _emit_destination(
        self, v: SSAValue, sinks: list[_Sink], grouped: dict[tuple[Operation, str], SSAValue] | None = None
    ) -> None:
        plan = self._analyse(sinks)
        reductions, edge_sinks, vertex_sinks = plan.reductions, plan.edge_sinks, plan.vertex_sinks
        rescaled, in_place, max_level = plan.rescaled, plan.in_place, plan.max_level
        self.acc = {}
        # `stream outputs`: each vertex result is built apart, on the worker's
        # stack or in its row of acc_rows (see _staging_row), and then streamed
        # to the output row, which is never read
        self.staged: dict[int, tuple[SSAValue, SSAValue]] = {}
        if self.stream:
            for s in vertex_sinks:
                if s.buffer in self.result_buf:
                    self.staged[id(s)] = self._staging_row(s.shape)
        vctx = _Context(v=v)
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
            buffer, base = self._sink_row(s, v)

            def store_elem(idx: list[SSAValue], s: _Sink = s, buffer: SSAValue = buffer, base: SSAValue = base) -> None:
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

    def _sink_row(self, s: _Sink, v: SSAValue) -> tuple[SSAValue, SSAValue]:
        """(buffer, index of element 0) where destination v's row of vertex result s is built."""
        if id(s) in self.staged:
            return self.staged[id(s)]
        return s.buffer, self.row_base(v, s.shape)

    def _in_degree(self, v: SSAValue) -> SSAValue:
        one = self.em.index_const(1)
        lo = self.load(self.indptr, v)
        hi = self.load(self.indptr, self.em.op(arith.AddiOp(v, one)))
        return self.em.op(arith.IndexCastOp(self.em.op(arith.SubiOp(hi, lo)), index))

    def _init_accumulator(self, key: tuple[Operation, str], r: _Reduction, v: SSAValue, in_place: dict) -> None:
        t = r.value.type
        assert isinstance(t, graph.ValueType)
        shape = t.shape
        if key[1] == "agg" and key[0] in in_place:
            buffer, base = self._sink_row(in_place[key[0]], v)
            acc = _Accumulator(buffer, base, shape, in_place=True)
        elif self.partitions is not None:
            # partitions are separate sweeps, possibly by other threads: an
            # accumulator must outlive the visit, in the destination's own row
            acc = _Accumulator(cast(SSAValue, self.acc_rows), self.acc_row_base(v, self.alloc_acc_row(shape)), shape)
        else:
            acc = _Accumulator(self.scratch, self.alloc_scratch(shape), shape)
        self.acc[key] = acc
        self._fill_identity(acc, r.kind)

    def _fill_identity(self, acc: _Accumulator, kind: str) -> None:
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

    def _finalize_accumulator(self, key: tuple[Operation, str], r: _Reduction, count: SSAValue) -> None:
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

    def _emit_edge_loop(
        self,
        v: SSAValue,
        reductions: list[tuple[tuple[Operation, str], _Reduction]],
        stores: list[_Sink],
        walk: tuple[SSAValue, SSAValue] | None = None,
    ) -> None:
        """One walk over v's in-edges, or, with `walk` = (row, offsets), over positions offsets[row] ..
        offsets[row + 1] of the in-CSR (a neighbour group of v)."""
        block = Block(arg_types=[index, index, index])
        _, u, e = block.args
        ctx = _Context(v=v, u=u, e=e)
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

    def _emit_rescale_loop(self, v: SSAValue, rescaled: list[tuple[_Sink, SSAValue]], vctx: _Context) -> None:
        """result[e] *= scale for stored edge results: the factors first, once per destination."""
        factors: dict[SSAValue, tuple[SSAValue, SSAValue]] = {}
        for _, scale in rescaled:
            if scale in factors:
                continue
            t = scale.type
            assert isinstance(t, graph.ValueType)
            self._precompute(scale, vctx)
            base = self.alloc_scratch(t.shape)
            self.for_features(
                t.shape,
                lambda idx, scale=scale, t=t, base=base: self.store(  # type: ignore[misc]  # mypy cannot type a lambda's defaults; they bind this iteration's values (B023)
                    self.value_at(scale, idx, vctx), self.scratch, self.linear(base, t.shape, idx)
                ),
                hoist=[scale],
                ctx=vctx,
            )
            factors[scale] = (self.scratch, base)
        block = Block(arg_types=[index, index, index])
        _, u, e = block.args
        ctx = _Context(v=v, u=u, e=e, computed=dict(factors))
        with self.em.nested(block):
            items: list[tuple[tuple[Dim, ...], Callable[[list[SSAValue]], None], SSAValue]] = []
            for s, scale in rescaled:
                base = self.row_base(e, s.shape)

                def rescale(idx: list[SSAValue], s: _Sink = s, base: SSAValue = base, scale: SSAValue = scale) -> None:
                    at = self.linear(base, s.shape, idx)
                    scaled = self.em.op(arith.MulfOp(self.load(s.buffer, at), self.value_at(scale, idx, ctx)))
                    self.store(scaled, s.buffer, at)

                items.append((s.shape, rescale, scale))
            self._shared_nests(items, ctx)
            self.em.op(loop.YieldOp())
        self.em.op(loop.ForInEdgesOp(v, self.indptr, self.src, self.eid, block))

    def _shared_nests(
        self, items: list[tuple[tuple[Dim, ...], Callable[[list[SSAValue]], None], SSAValue]], ctx: _Context
    ) -> None:
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
        group: list[tuple[tuple[Dim, ...], Callable[[list[SSAValue]], None], SSAValue]],
        ctx: _Context,
    ) -> bool:
        """Per-edge work over the head axes in its own loop before the row loop, when it is costly.

        In one shared nest, a head's exp runs between two heads' row loops:
        scalar, and with the row accumulators live across it. Split, the
        head loop has no loop inside, so LLVM vectorises it across heads
        (once expand-exp has made exp arithmetic); the values the rows need
        pass through a per-worker scratch row. gat, 2 threads, split against
        shared, both with inline exp: rmat-16 H=4 F=32 1.60x, H=8 F=16 1.99x,
        H=4 F=128 1.05x, unspecialised H=4 F=32 1.16x; mdual H=4 F=32 1.26x;
        H=1 unchanged. With libm's exp the split alone is neutral (1.01x).
        """
        heads = list(shape[:-1])
        depth = len(heads)
        deep = [it for it in group if len(it[0]) == len(shape)]
        carried = self._values_at_depth([it[2] for it in deep], depth, ctx)
        shallow_roots = [it[2] for it in group if len(it[0]) < len(shape)]
        if not _costly(carried + shallow_roots):
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
        ctx: _Context,
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
        self, key: tuple[Operation, str], r: _Reduction, acc: _Accumulator, idx: list[SSAValue], ctx: _Context
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
        r: _Reduction,
        acc: _Accumulator,
        at: SSAValue,
        old_id: SSAValue,
        x: SSAValue,
        idx: list[SSAValue],
        ctx: _Context,
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

    # ---------------------------------------------- dot / matvec into scratch

    def _precompute(self, root: SSAValue, ctx: _Context) -> None:
        """Computes every dot / matvec that root needs, innermost first."""
        order: list[Operation] = []
        seen: set[SSAValue] = set()

        def visit(x: SSAValue) -> None:
            if x in seen or x in ctx.computed:
                return
            seen.add(x)
            op = x.owner
            if isinstance(op, graph.AggregateOp | graph.GatherOp) or not isinstance(op, Operation):
                return
            if isinstance(op, graph.EdgeSoftmaxOp) and ctx.u is None:
                return
            for o in op.operands:
                visit(o)
            if isinstance(op, graph.DotOp | graph.MatVecOp):
                order.append(op)

        visit(root)
        for op in order:
            if isinstance(op, graph.DotOp):
                self._compute_dot(op, ctx)
            else:
                assert isinstance(op, graph.MatVecOp)
                self._compute_matvec(op, ctx)

    def _compute_dot(self, op: graph.DotOp, ctx: _Context) -> None:
        a = op.lhs.type
        assert isinstance(a, graph.ValueType)
        shape, k = a.shape[:-1], a.shape[-1]
        base = self.alloc_scratch(shape)
        zero = self.em.float_const(0.0, self.elem)

        def elem(idx: list[SSAValue]) -> None:
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
            total.owner.attributes[loop.DOT_REDUCTION_ATTR] = UnitAttr()  # type: ignore[union-attr]  # scalar_loop's value is its loop's result
            self.store(total, self.scratch, self.linear(base, shape, idx))

        self.for_features(shape, elem)
        ctx.computed[op.result] = (self.scratch, base)

    def _compute_matvec(self, op: graph.MatVecOp, ctx: _Context) -> None:
        a, w = op.vector.type, op.matrix.type
        assert isinstance(a, graph.ValueType) and isinstance(w, graph.ValueType)
        prefix, (k, n) = a.shape[:-1], w.shape
        out_shape = prefix + (n,)
        base = self.alloc_scratch(out_shape)
        zero = self.em.float_const(0.0, self.elem)
        wbuf = self._tensor_buffer(op.matrix)
        self.for_features(out_shape, lambda idx: self.store(zero, self.scratch, self.linear(base, out_shape, idx)))

        # out[.., n] += a[.., k] * W[k, n], n innermost: W's rows are
        # contiguous, so the inner loop vectorises.
        def row(idx: list[SSAValue]) -> None:
            ak = self.value_at(op.vector, idx[:-1] + [idx[-1]], ctx)
            wrow = self.em.op(arith.MuliOp(idx[-1], self.extent(n)))

            def col(jdx: list[SSAValue]) -> None:
                j = jdx[0]
                at = self.linear(base, out_shape, idx[:-1] + [j])
                wv = self.load(wbuf, self.em.op(arith.AddiOp(wrow, j)))
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

    def _hoist(self, root: SSAValue, idx: list[SSAValue], ctx: _Context) -> None:
        """Computes the sub-values of root whose shape has exactly len(idx) axes."""
        for x in self._values_at_depth([root], len(idx), ctx):
            self.value_at(x, idx, ctx)

    def _values_at_depth(self, roots: list[SSAValue], depth: int, ctx: _Context) -> list[SSAValue]:
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

    def value_at(self, x: SSAValue, idx: list[SSAValue], ctx: _Context) -> SSAValue:
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

    def _value_at(self, x: SSAValue, idx: list[SSAValue], ctx: _Context) -> SSAValue:
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

    def _gather(self, op: graph.GatherOp, idx: list[SSAValue], ctx: _Context) -> SSAValue:
        site = op.site.data
        t = op.tensor.type
        assert isinstance(t, graph.TensorType)
        shape = t.shape
        owner = op.tensor.owner
        buf = self.temp_buf[owner] if isinstance(owner, graph.MaterializeOp) else self.param_buf[op.tensor]
        if site == "param":
            return self.load(buf, self.linear(self.em.index_const(0), shape, idx))
        row = {"src": ctx.u, "dst": ctx.v, "edge": ctx.e}[site]
        assert row is not None, f"gather at {site} outside an edge loop"
        return self.load(buf, self.linear(self.row_base(row, shape), shape, idx))

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


#: Unary kinds that cost a call or a long polynomial per element.
_TRANSCENDENTAL = frozenset({"exp", "log", "tanh", "sigmoid"})


def _costly(roots: list[SSAValue]) -> bool:
    """Whether computing roots takes a transcendental function or an edge softmax."""
    for x in _values_under(roots, lambda x: not isinstance(x.owner, graph.AggregateOp | graph.GatherOp)):
        op = x.owner
        if isinstance(op, graph.EdgeSoftmaxOp) or (isinstance(op, graph.UnaryOp) and op.kind.data in _TRANSCENDENTAL):
            return True
    return False


def _in_place_aggregate(sink: _Sink) -> graph.AggregateOp | None:
    """The aggregation a vertex result can accumulate in its own row: the result, or A in A * Q."""
    value = sink.value
    op = value.owner
    if isinstance(op, graph.AggregateOp):
        return op if len(list(value.uses)) == 1 else None
    if not (isinstance(op, graph.BinaryOp) and op.kind.data == "mul"):
        return None
    for agg, scale in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
        at, st = agg.type, scale.type
        assert isinstance(at, graph.ValueType) and isinstance(st, graph.ValueType)
        if (
            isinstance(agg.owner, graph.AggregateOp)
            and len(list(agg.uses)) == 1
            and agg is not scale
            and at.shape == tuple(sink.shape)
            and st.kind in ("A", "D", "P")
        ):
            return agg.owner
    return None


def _rescalable(sink: _Sink, dep_level: Callable[[SSAValue], int]) -> tuple[SSAValue, SSAValue] | None:
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


@dataclass(frozen=True)
class ConvertGraphToLoopPass(ModulePass):
    """Lowers every graph-dialect kernel to a loop-dialect function with the gnnc ABI.

    The directives that decide a kernel's arguments and accumulators are
    consumed here; given as options, they apply to every kernel as if its
    schedule said so (`convert-graph-to-loop{partition=4}` is `partition src 4`).
    The loop passes after it implement what it prepared.
    """

    name = "convert-graph-to-loop"

    target: str = LoweringTarget.CPU
    """cpu, or cuda for the cuda grids (driver/pipeline.py sets it for the cuda targets)."""
    partition: int | None = None
    """`partition src K`: the kernels take the in-CSR of K source partitions (partition-sources)."""
    edge_order: str | None = None
    """`order edges hilbert`: the kernels take their edges in Hilbert order (hilbert-edge-order)."""
    group: int | None = None
    """`group neighbors G`: in-edge lists longer than G are reduced in groups of G, in parallel."""
    stream: bool = False
    """`stream outputs`: vertex results are built per worker and written with streaming stores."""
    simd: int | None = None
    """`simd W`: the generated code prefers vectors of W bits (128, 256 or 512)."""

    def __post_init__(self) -> None:
        if self.target not in tuple(LoweringTarget):
            raise CompileError(f"{self.spec()}: unknown target; use one of {', '.join(LoweringTarget)}")
        for words in self._directives():
            check_directive_option(str(self.spec()), words)

    def _directives(self) -> list[list[str]]:
        """The options as the directives they stand for."""
        found = []
        if self.partition is not None:
            found.append(["partition", "src", str(self.partition)])
        if self.edge_order is not None:
            found.append(["order", "edges", self.edge_order])
        if self.group is not None:
            found.append(["group", "neighbors", str(self.group)])
        if self.stream:
            found.append(["stream", "outputs"])
        if self.simd is not None:
            found.append(["simd", str(self.simd)])
        return found

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = LoweringTarget(self.target)
        directives = self._directives()
        for fn in list(op.ops):
            if isinstance(fn, func.FuncOp) and graph.RESULT_NAMES in fn.attributes:
                if directives:
                    attr = fn.attributes.get(graph.SCHEDULE)
                    entries = {k: v.data for k, v in attr.data.items()} if isinstance(attr, DictionaryAttr) else {}  # type: ignore[attr-defined]
                    given = with_directives(fn.sym_name.data, entries, directives, str(self.spec()))
                    fn.attributes[graph.SCHEDULE] = DictionaryAttr({k: StringAttr(v) for k, v in given.items()})
                sweeps = target in SOURCE_SWEEP_TARGETS
                split = target in HEAD_SPLIT_TARGETS
                streams = target in STREAM_TARGETS
                new = KernelLowering(fn, source_sweeps=sweeps, split_heads=split, streams=streams).build()
                op.body.block.insert_op_before(new, fn)
                fn.detach()
                fn.erase()
