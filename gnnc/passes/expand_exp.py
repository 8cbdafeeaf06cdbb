"""expand-exp: `math.exp` becomes inline arithmetic LLVM can vectorise.

LLVM lowers `llvm.exp` to a call into libm, one element at a time, and the
call clobbers every vector register: in gat's edge walk the row
accumulators were spilled and reloaded around each head's `expf`. Inline,
nothing is spilled, and the exponentials of a head loop with no loop
inside (convert-graph-to-loop gives costly per-head work one, on the CPU)
vectorise across heads. gat, 2 threads, specialised, against
`--disable-pass expand-exp` in one process: rmat-16 H=4 F=32 1.57x,
H=1 F=32 1.05x; mdual H=1 F=32 1.08x. An earlier form (a Taylor
polynomial by Horner's rule, no FMA) lost to glibc with one head: its
dependency chain was twice as long.

The expansion is Cephes': exp(x) = 2^k * exp(r) with k = round(x / ln 2)
and |r| <= ln(2) / 2, r reduced with two fused multiply-adds. For f32,
exp(r) = 1 + r + r^2 P(r) with Cephes' degree-5 minimax P, evaluated by
Estrin's scheme (depth 3); measured within 1.02 ulp of the exact value
over [-104, 88.7]. For f64, a degree-13 Taylor polynomial (under one ulp of
truncation error on that interval). 2^k is built from the exponent bits in
two halves so that results near overflow and in the subnormal range stay
exact. NaN stays NaN, large x gives +inf, very negative x gives 0.
`--disable-pass expand-exp` keeps the libm call on the CPU.
"""

from __future__ import annotations

import math as pymath

from xdsl.context import Context
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import Float32Type, Float64Type, FloatAttr, IntegerAttr, IntegerType, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

# (mantissa bits, exponent bias, integer width, polynomial degree, lowest x, highest finite x)
_FORMATS = {
    32: (23, 127, 32, 5, -104.0, 88.72283935546875),
    64: (52, 1023, 64, 13, -745.2, 709.782712893384),
}
_LN2_HI = {32: 0.693359375, 64: 6.93147180369123816490e-01}
_LN2_LO = {32: -2.12194440e-4, 64: 1.90821492927058770002e-10}
# Cephes expf: exp(r) = 1 + r + r^2 * P(r) on |r| <= ln(2) / 2, P of degree 5 (minimax)
_CEPHES_F32 = (5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3, 1.3981999507e-3, 1.9875691500e-4)


def _estrin_cephes_f32(r, fconst, fma, add):  # noqa: ANN001, ANN202 - the closures of ExpandExp
    """1 + r + r^2 * P(r), P by Estrin's scheme: depth 3 instead of Horner's 5 fused steps."""
    c = [fconst(v) for v in _CEPHES_F32]
    r2 = add(arith.MulfOp(r, r))
    low, mid, high = fma(c[1], r, c[0]), fma(c[3], r, c[2]), fma(c[5], r, c[4])
    poly = fma(fma(high, r2, mid), r2, low)
    return add(arith.AddfOp(fma(poly, r2, r), fconst(1.0)))


class ExpandExp(RewritePattern):
    """math.exp (f32, f64) -> range reduction, a polynomial and exponent bits."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: math.ExpOp, rewriter: PatternRewriter) -> None:
        t = op.result.type
        if not isinstance(t, Float32Type | Float64Type):
            return
        width = 32 if isinstance(t, Float32Type) else 64
        mantissa, bias, int_width, degree, lowest, highest = _FORMATS[width]
        ity = IntegerType(int_width)
        ops: list[Operation] = []

        def add(o: Operation) -> SSAValue:
            ops.append(o)
            return o.results[0]

        def fconst(v: float) -> SSAValue:
            return add(arith.ConstantOp(FloatAttr(v, t)))

        def iconst(v: int) -> SSAValue:
            return add(arith.ConstantOp(IntegerAttr(v, ity)))

        def fma(a: SSAValue, b: SSAValue, c: SSAValue) -> SSAValue:
            return add(math.FmaOp(a, b, c))

        x = op.operand
        # maxnum/minnum map NaN to the bound: no poison below; NaN is restored at the end
        xc = add(arith.MinnumfOp(add(arith.MaxnumfOp(x, fconst(lowest))), fconst(highest)))
        k = add(math.FloorOp(fma(xc, fconst(1 / pymath.log(2)), fconst(0.5))))
        r = fma(k, fconst(-_LN2_HI[width]), xc)
        r = fma(k, fconst(-_LN2_LO[width]), r)
        if width == 32:
            p = _estrin_cephes_f32(r, fconst, fma, add)
        else:
            p = fconst(1 / pymath.factorial(degree))
            for n in range(degree - 1, -1, -1):
                p = fma(p, r, fconst(1 / pymath.factorial(n)))
        ki = add(arith.FPToSIOp(k, ity))
        half = add(arith.ShRSIOp(ki, iconst(1)))
        rest = add(arith.SubiOp(ki, half))
        scale = []
        for part in (half, rest):
            bits = add(arith.ShLIOp(add(arith.AddiOp(part, iconst(bias))), iconst(mantissa)))
            scale.append(add(arith.BitcastOp(bits, t)))
        result = add(arith.MulfOp(add(arith.MulfOp(p, scale[0])), scale[1]))
        too_big = add(arith.CmpfOp(x, fconst(highest), "ogt"))
        result = add(arith.SelectOp(too_big, fconst(pymath.inf), result))
        is_nan = add(arith.CmpfOp(x, x, "uno"))
        result = add(arith.SelectOp(is_nan, x, result))
        rewriter.replace(op, ops, [result])


class ExpandExpPass(ModulePass):
    """Replaces every f32 / f64 math.exp by inline, vectorisable arithmetic."""

    name = "expand-exp"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ExpandExp()).rewrite_module(op)
