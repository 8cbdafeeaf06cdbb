"""What expand-exp, expand-log and expand-tanh build their expansions with: an op collector of one float type.

Not a pass: the passes are `expand_exp.py`, `expand_log.py` and `expand_tanh.py`.
"""

from __future__ import annotations

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import Float32Type, Float64Type, FloatAttr, IntegerAttr, IntegerType
from xdsl.ir import Attribute, Operation, SSAValue

#: ln 2 = hi + lo, hi short enough that k * hi is exact for every exponent k (Cephes, fdlibm)
LN2_HI = {32: 0.693359375, 64: 6.93147180369123816490e-01}
LN2_LO = {32: -2.12194440e-4, 64: 1.90821492927058770002e-10}


class MathEmitter:
    """Collects the ops of one expansion, of the float type `t`."""

    def __init__(self, t: Float32Type | Float64Type) -> None:
        self.t = t
        self.width = 32 if isinstance(t, Float32Type) else 64
        self.ity = IntegerType(self.width)
        self.ops: list[Operation] = []

    def add(self, op: Operation) -> SSAValue:
        self.ops.append(op)
        return op.results[0]

    def f(self, v: float) -> SSAValue:
        return self.add(arith.ConstantOp(FloatAttr(v, self.t)))

    def i(self, v: int) -> SSAValue:
        return self.add(arith.ConstantOp(IntegerAttr(v, self.ity)))

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.MulfOp(a, b))

    def addf(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.AddfOp(a, b))

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.SubfOp(a, b))

    def fma(self, a: SSAValue, b: SSAValue, c: SSAValue) -> SSAValue:
        return self.add(math.FmaOp(a, b, c))

    def cmp(self, a: SSAValue, b: SSAValue, predicate: str) -> SSAValue:
        return self.add(arith.CmpfOp(a, b, predicate))

    def select(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.SelectOp(cond, a, b))

    def horner(self, coefficients: tuple[float, ...], x: SSAValue) -> SSAValue:
        p = self.f(coefficients[0])
        for c in coefficients[1:]:
            p = self.addf(self.mul(p, x), self.f(c))
        return p

    def bitcast(self, v: SSAValue, to: Attribute) -> SSAValue:
        return self.add(arith.BitcastOp(v, to))


def emitter_for(op: Operation) -> MathEmitter | None:
    """An emitter of op's result type, or None unless that is f32 or f64."""
    t = op.results[0].type
    return MathEmitter(t) if isinstance(t, Float32Type | Float64Type) else None
