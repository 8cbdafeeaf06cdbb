"""The building blocks of convert-graph-to-loop's emission: sizes, buffers, loop nests.

`LoopBuilder` holds what every part of the lowering shares (the emitter, the
kernel's dims, the per-worker scratch and acc_rows layouts) and emits the
small patterns they all use: element counts, row-major offsets, loads and
stores, `loop.for_feature` nests and scalar reduction loops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import AnyFloat, IndexType, IntegerAttr, UnitAttr, i64
from xdsl.dialects.utils import FastMathFlag
from xdsl.ir import Block, SSAValue

from gnnc.conversion.graph_to_loop.analysis import LoopContext
from gnnc.conversion.graph_to_loop.emitter import Emitter
from gnnc.ir import abi, loop

index = IndexType()
Dim = int | str

#: Flags for sums whose order does not matter (reductions inside one element).
REORDERABLE = arith.FastMathFlagsAttr([FastMathFlag.REASSOC, FastMathFlag.ALLOW_CONTRACT])


class LoopBuilder:
    """Emits sizes, offsets, loads, stores and loop nests into one kernel's body."""

    em: Emitter
    elem: AnyFloat
    elem_bytes: int
    #: the kernel's dims, loaded once in the prologue
    dims: dict[str, SSAValue]
    _size_cache: dict[tuple[Dim, ...], SSAValue]
    #: the per-worker scratch: its size so far and the shapes allocated in it
    scratch_top: SSAValue
    scratch_shapes: list[list[Dim]]
    #: index of element 0 of the current worker's scratch slice
    worker_base: SSAValue
    #: one row of acc_rows: its size so far, the shapes in it, a placeholder for its final size
    acc_row_top: SSAValue
    acc_row_shapes: list[list[Dim]]
    _acc_row_stride: arith.ConstantOp

    def _hoist(self, root: SSAValue, idx: list[SSAValue], ctx: LoopContext) -> None:
        """Computes the sub-values of root with exactly len(idx) axes (ValueEmission does)."""
        raise NotImplementedError

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
        ctx: LoopContext | None = None,
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
