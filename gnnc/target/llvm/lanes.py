"""The CPU backend's `loop.lanes`: its scalar body run once on W-wide vectors.

Called by `llvm_translate` for each `loop.lanes` op (not a pass). A value
computed from the lane variable is *varying*: an LLVM vector of W elements,
lane i in element i. Everything else is *uniform* and stays the scalar the
ordinary translation makes. So the body translates op by op:

- an op with a varying operand becomes its vector form, uniform operands
  broadcast; math that LLVM has no vector instruction for becomes its
  vector intrinsic anyway, which LLVM's legaliser splits into scalar calls;
- a load or store at a varying index is a masked vector access when the
  index is a uniform base plus the lane (the edges of a chunk lie side by
  side in the in-CSR, and so do their edge rows when edges are sorted),
  else a masked gather or scatter; at a uniform index, a load is a scalar
  load (a store there is refused by the op's verifier: lanes would race);
- lanes at and past the op's count are masked off: their loads and stores
  do not happen, and their yielded values are replaced by the reduction's
  identity before the lanes are combined (a tree, `reassoc` for sums).

Integer division by a varying divisor takes 1 in masked-off lanes: their
values are garbage, and x86 has no vector division to ignore them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import llvmlite.ir as ir
from xdsl.dialects import arith, math, memref
from xdsl.ir import Operation, SSAValue

from gnnc.errors import CompileError
from gnnc.ir import loop
from gnnc.ir.loop_structure import constant_index
from gnnc.target.llvm.types import I32, I64, PTR, convert_type, element_type, type_suffix


class FunctionTranslator(Protocol):
    """What a lanes translation uses of translate.py's FunctionTranslator (which imports this module)."""

    values: dict[SSAValue, ir.Value]
    builder: ir.IRBuilder

    @property
    def name(self) -> str: ...
    def get(self, value: SSAValue) -> ir.Value: ...
    def set(self, op: Operation, results: Sequence[ir.Value]) -> None: ...
    def intrinsic(self, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function: ...
    def call_intrinsic(self, base: str, args: Sequence[ir.Value], flags: tuple[str, ...] = ()) -> ir.Value: ...
    def tag_access(self, buf: SSAValue, instr: ir.Instruction) -> None: ...
    def translate_op(self, op: Operation) -> None: ...


#: ops whose LLVM form is the same instruction or intrinsic on vectors as on scalars
_ELEMENTWISE = (
    arith.AddfOp, arith.SubfOp, arith.MulfOp, arith.DivfOp, arith.NegfOp,
    arith.MaximumfOp, arith.MinimumfOp, arith.MaxnumfOp, arith.MinnumfOp,
    arith.CmpfOp, arith.CmpiOp, arith.SelectOp,
    arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.AndIOp, arith.OrIOp, arith.XOrIOp,
    arith.ShLIOp, arith.ShRSIOp, arith.ShRUIOp, arith.MaxSIOp, arith.MinSIOp, arith.MaxUIOp, arith.MinUIOp,
    math.ExpOp, math.Exp2Op, math.LogOp, math.Log2Op, math.Log10Op, math.SqrtOp, math.AbsFOp, math.TanhOp,
    math.SinOp, math.CosOp, math.PowFOp, math.FloorOp, math.CeilOp, math.RoundOp, math.TruncOp,
    math.CopySignOp, math.FmaOp, math.AbsIOp, math.CountLeadingZerosOp,
)  # fmt: skip
_DIVISIONS = (arith.DivSIOp, arith.DivUIOp, arith.RemSIOp, arith.RemUIOp)
_CASTS = (
    arith.IndexCastOp, arith.SIToFPOp, arith.UIToFPOp, arith.FPToSIOp, arith.FPToUIOp, arith.ExtFOp,
    arith.TruncFOp, arith.ExtSIOp, arith.ExtUIOp, arith.TruncIOp, arith.BitcastOp,
)  # fmt: skip
_CAST_METHODS = {
    arith.SIToFPOp: "sitofp",
    arith.UIToFPOp: "uitofp",
    arith.FPToSIOp: "fptosi",
    arith.FPToUIOp: "fptoui",
    arith.ExtFOp: "fpext",
    arith.TruncFOp: "fptrunc",
    arith.ExtSIOp: "sext",
    arith.ExtUIOp: "zext",
    arith.TruncIOp: "trunc",
    arith.BitcastOp: "bitcast",
}

#: sums and products: llvm.vector.reduce.* with `reassoc` (a tree); the others, the
#: elementwise intrinsic over halves: LLVM scalarises llvm.vector.reduce.fmax into a
#: chain of W compares and NaN checks (gat's softmax maximum: 16 dependent steps)
_REDUCE_INTRINSIC = {"addf": "fadd", "mulf": "fmul"}
_REDUCE_HALVES = {"maxnumf": "maxnum", "minnumf": "minnum", "maximumf": "maximum", "minimumf": "minimum"}


def _is_vector(value: ir.Value) -> bool:
    return isinstance(value.type, ir.VectorType)


class LanesTranslator:
    """Translates one `loop.lanes` op with the function's translator `t`."""

    def __init__(self, t: FunctionTranslator, op: loop.LanesOp):
        self.t, self.op = t, op
        self.width = op.width.value.data
        #: id(vector) -> the scalar value of lane 0, for varying values that are that plus the lane
        self.consecutive: dict[int, ir.Value] = {}

    # -- helpers

    @property
    def b(self) -> ir.IRBuilder:
        return self.t.builder

    def vector_of(self, scalar_type: ir.Type) -> ir.VectorType:
        return ir.VectorType(scalar_type, self.width)

    def splat(self, value: ir.Value) -> ir.Value:
        if _is_vector(value):
            return value
        if isinstance(value, ir.Constant):
            return ir.Constant(self.vector_of(value.type), [value.constant] * self.width)
        vt = self.vector_of(value.type)
        one = self.b.insert_element(ir.Constant(vt, None), value, ir.Constant(I32, 0))
        return self.b.shuffle_vector(one, ir.Constant(vt, None), ir.Constant(ir.VectorType(I32, self.width), None))

    def constant(self, scalar_type: ir.Type, value: float | int) -> ir.Constant:
        return ir.Constant(self.vector_of(scalar_type), [value] * self.width)

    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        fn = self.t.intrinsic(name, ret, [a.type for a in args])
        return self.b.call(fn, args)

    # -- the body

    def translate(self) -> None:
        t, op = self.t, self.op
        count = t.get(op.count)
        iota = ir.Constant(self.vector_of(I64), list(range(self.width)))
        self.mask = self.b.icmp_unsigned("<", iota, self.splat(count))
        block = op.body.block
        t.values[block.args[0]] = iota
        self.consecutive[id(iota)] = ir.Constant(I64, 0)
        for inner in block.ops:
            if isinstance(inner, loop.YieldOp):
                t.set(op, [self.reduce(t.get(v), k.data) for v, k in zip(inner.values, op.reduce.data)])
            else:
                self.translate_op(inner)

    def translate_op(self, op: Operation) -> None:
        t = self.t
        if isinstance(op, memref.LoadOp):
            return self.load(op)
        if isinstance(op, memref.StoreOp):
            return self.store(op)
        if not any(_is_vector(t.get(v)) for v in op.operands):
            return t.translate_op(op)
        base = self.consecutive_base(op)
        self.widen(op)
        if base is not None:
            self.consecutive[id(t.get(op.results[0]))] = base

    def widen(self, op: Operation) -> None:
        """op on vectors, some of its operands varying."""
        t = self.t
        if isinstance(op, _ELEMENTWISE):
            return self.with_vector_operands(op, op.operands, lambda: t.translate_op(op))
        if isinstance(op, _DIVISIONS):
            return self.division(op)
        if isinstance(op, _CASTS):
            return self.cast(op)
        if isinstance(op, math.RsqrtOp):
            x = t.get(op.operand)
            root = t.call_intrinsic("sqrt", [x])
            return t.set(op, [self.b.fdiv(self.constant(x.type.element, 1.0), root)])
        if op.dialect_name() == "math" and len(op.results) == 1:
            return self.per_lane(op)
        raise CompileError(f"'{op.name}' on values that differ between lanes is not supported (in @{t.name})")

    def with_vector_operands(self, op: Operation, operands: Sequence[SSAValue], emit: Callable[[], None]) -> None:
        """Runs emit with every uniform operand broadcast for the duration."""
        t = self.t
        saved = {v: t.values[v] for v in operands}
        try:
            for v in operands:
                t.values[v] = self.splat(saved[v])
            emit()
        finally:
            for v, value in saved.items():
                t.values[v] = value

    def consecutive_base(self, op: Operation) -> ir.Value | None:
        """Lane 0's value of op's result if that is a uniform base plus the lane: base + lane stays
        so under adding or subtracting a uniform value, an index cast to 64 bits, and `* 1`."""
        values = [self.t.get(v) for v in op.operands]
        bases = [self.consecutive.get(id(v)) for v in values]
        if isinstance(op, arith.IndexCastOp):
            # the identity on i64
            return bases[0] if values[0].type.element.width == convert_type(op.result.type).width == 64 else None
        if isinstance(op, arith.AddiOp | arith.SubiOp):
            (a, b), (base_a, base_b) = values, bases
            if base_a is not None and not _is_vector(b):
                return self.b.add(base_a, b) if isinstance(op, arith.AddiOp) else self.b.sub(base_a, b)
            if base_b is not None and not _is_vector(a) and isinstance(op, arith.AddiOp):
                return self.b.add(a, base_b)
        if isinstance(op, arith.MuliOp):
            for v, other in ((0, 1), (1, 0)):
                if bases[v] is not None and constant_index(op.operands[other]) == 1:
                    return bases[v]
        return None

    def division(self, op: Operation) -> None:
        t = self.t
        lhs, rhs = (self.splat(t.get(v)) for v in op.operands)
        rhs = self.b.select(self.mask, rhs, self.constant(rhs.type.element, 1))
        method: dict[type[Operation], str] = {
            arith.DivSIOp: "sdiv",
            arith.DivUIOp: "udiv",
            arith.RemSIOp: "srem",
            arith.RemUIOp: "urem",
        }
        t.set(op, [getattr(self.b, method[type(op)])(lhs, rhs)])

    def cast(self, op: Operation) -> None:
        t = self.t
        value = t.get(op.operands[0])
        to = self.vector_of(convert_type(op.results[0].type))
        if isinstance(op, arith.IndexCastOp):
            width, to_width = value.type.element.width, to.element.width
            result = value if width == to_width else (self.b.sext if width < to_width else self.b.trunc)(value, to)
        else:
            result = getattr(self.b, _CAST_METHODS[type(op)])(value, to)
        t.set(op, [result])

    def per_lane(self, op: Operation) -> None:
        """A math op with no vector form (a C library call): once per lane, active or not."""
        t = self.t
        args = [self.splat(t.get(v)) for v in op.operands]
        result = ir.Constant(args[0].type, None)
        for i in range(self.width):
            lane = ir.Constant(I32, i)
            saved = {v: t.values[v] for v in op.operands}
            scalars = [self.b.extract_element(a, lane) for a in args]
            for v, s in zip(op.operands, scalars):
                t.values[v] = s
            t.translate_op(op)
            one = t.values[op.results[0]]
            for v, value in saved.items():
                t.values[v] = value
            result = self.b.insert_element(result, one, lane)
        t.set(op, [result])

    # -- memory

    def _pointers(self, buf: SSAValue, index: ir.Value) -> tuple[ir.Value, ir.Type, int]:
        elem, align = element_type(buf.type)
        base = self.consecutive.get(id(index))
        if base is not None:
            return self.b.gep(self.t.get(buf), [base], inbounds=True, source_etype=elem), elem, align
        ptrs = self.b.gep(self.t.get(buf), [index], inbounds=True, source_etype=elem)
        ptrs.type = self.vector_of(PTR)  # llvmlite types a GEP by its base, LLVM by its vector index
        return ptrs, elem, align

    def load(self, op: memref.LoadOp) -> None:
        t = self.t
        index = t.get(op.indices[0])
        if not _is_vector(index):
            return t.translate_op(op)
        ptr, elem, align = self._pointers(op.memref, index)
        vt = self.vector_of(elem)
        zero = ir.Constant(vt, None)
        align_arg = ir.Constant(I32, align)
        if _is_vector(ptr):
            value = self.intrinsic(
                f"llvm.masked.gather.{type_suffix(vt)}.v{self.width}p0", vt, [ptr, align_arg, self.mask, zero]
            )
        else:
            value = self.intrinsic(f"llvm.masked.load.{type_suffix(vt)}.p0", vt, [ptr, align_arg, self.mask, zero])
        t.tag_access(op.memref, value)
        t.set(op, [value])

    def store(self, op: memref.StoreOp) -> None:
        t = self.t
        index = t.get(op.indices[0])
        if not _is_vector(index):
            raise CompileError(f"@{t.name}: every lane of a loop.lanes stores to one address")
        ptr, elem, align = self._pointers(op.memref, index)
        value = self.splat(t.get(op.value))
        align_arg = ir.Constant(I32, align)
        void = ir.VoidType()
        if _is_vector(ptr):
            instr = self.intrinsic(
                f"llvm.masked.scatter.{type_suffix(value.type)}.v{self.width}p0",
                void,
                [value, ptr, align_arg, self.mask],
            )
        elif loop.WHOLE_VECTOR_ATTR in op.attributes:
            instr = self.b.store(value, ptr, align=align)
        else:
            instr = self.intrinsic(
                f"llvm.masked.store.{type_suffix(value.type)}.p0", void, [value, ptr, align_arg, self.mask]
            )
        t.tag_access(op.memref, instr)
        t.set(op, [])

    # -- the result

    def reduce(self, value: ir.Value, kind: str) -> ir.Value:
        vec = self.splat(value)
        elem = vec.type.element
        identity = loop.LANE_REDUCTIONS[kind]
        vec = self.b.select(self.mask, vec, self.constant(elem, identity))
        if kind in _REDUCE_INTRINSIC:
            fn = self.t.intrinsic(
                f"llvm.vector.reduce.{_REDUCE_INTRINSIC[kind]}.{type_suffix(vec.type)}", elem, [elem, vec.type]
            )
            return self.b.call(fn, [ir.Constant(elem, identity), vec], fastmath=("reassoc",))
        width = self.width
        while width > 1:
            width //= 2
            low = self.b.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(I32, width), list(range(width))))
            high = self.b.shuffle_vector(
                vec, vec, ir.Constant(ir.VectorType(I32, width), list(range(width, 2 * width)))
            )
            vec = self.t.call_intrinsic(_REDUCE_HALVES[kind], [low, high])
        return self.b.extract_element(vec, ir.Constant(I32, 0))
