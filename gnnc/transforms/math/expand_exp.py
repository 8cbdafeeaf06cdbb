"""expand-exp: `math.exp` becomes inline arithmetic LLVM can vectorise.

LLVM lowers `llvm.exp` to a call into libm, one element at a time, and the
call clobbers every vector register: in gat's edge walk the row
accumulators were spilled and reloaded around each head's `expf`. Inline,
nothing is spilled, and the exponentials of a head loop with no loop
inside (convert-graph-to-loop gives costly per-head work one, on the CPU)
vectorise across heads (measurements: docs/design/llvm-translation.md).

The expansion is Cephes': exp(x) = 2^k * exp(r) with k = round(x / ln 2)
and |r| <= ln(2) / 2, r reduced with two fused multiply-adds. For f32,
exp(r) = 1 + r + r^2 P(r) with Cephes' degree-5 minimax P, evaluated by
Estrin's scheme (depth 3), within about one ulp of the exact value over
[-104, 88.7] (tests/test_expand_exp.py bounds it). For f64, a degree-13
Taylor polynomial (under one ulp of truncation error on that interval). 2^k
is built from the exponent bits in two halves so that results near overflow
and in the subnormal range stay exact. NaN stays NaN, large x gives +inf,
very negative x gives 0. `--disable-pass expand-exp` keeps the libm call on
the CPU.
"""

from __future__ import annotations

import math as pymath

from xdsl.context import Context
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from gnnc.transforms.math.emitter import LN2_HI, LN2_LO, MathEmitter, emitter_for

# (mantissa bits, exponent bias, polynomial degree, lowest x, highest finite x)
_FORMATS = {
    32: (23, 127, 5, -104.0, 88.72283935546875),
    64: (52, 1023, 13, -745.2, 709.782712893384),
}
# Cephes expf: exp(r) = 1 + r + r^2 * P(r) on |r| <= ln(2) / 2, P of degree 5 (minimax)
_CEPHES_F32 = (5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3, 1.3981999507e-3, 1.9875691500e-4)


def _estrin_cephes_f32(em: MathEmitter, r: SSAValue) -> SSAValue:
    """1 + r + r^2 * P(r), P by Estrin's scheme: depth 3 instead of Horner's 5 fused steps."""
    c = [em.f(v) for v in _CEPHES_F32]
    r2 = em.mul(r, r)
    low, mid, high = em.fma(c[1], r, c[0]), em.fma(c[3], r, c[2]), em.fma(c[5], r, c[4])
    poly = em.fma(em.fma(high, r2, mid), r2, low)
    return em.addf(em.fma(poly, r2, r), em.f(1.0))


def _expand_exp(em: MathEmitter, x: SSAValue) -> SSAValue:
    width = em.width
    mantissa, bias, degree, lowest, highest = _FORMATS[width]
    # maxnum/minnum map NaN to the bound: no poison below; NaN is restored at the end
    xc = em.add(arith.MinnumfOp(em.add(arith.MaxnumfOp(x, em.f(lowest))), em.f(highest)))
    k = em.add(math.FloorOp(em.fma(xc, em.f(1 / pymath.log(2)), em.f(0.5))))
    r = em.fma(k, em.f(-LN2_HI[width]), xc)
    r = em.fma(k, em.f(-LN2_LO[width]), r)
    if width == 32:
        p = _estrin_cephes_f32(em, r)
    else:
        p = em.f(1 / pymath.factorial(degree))
        for n in range(degree - 1, -1, -1):
            p = em.fma(p, r, em.f(1 / pymath.factorial(n)))
    ki = em.add(arith.FPToSIOp(k, em.ity))
    half = em.add(arith.ShRSIOp(ki, em.i(1)))
    rest = em.add(arith.SubiOp(ki, half))
    scale = []
    for part in (half, rest):
        bits = em.add(arith.ShLIOp(em.add(arith.AddiOp(part, em.i(bias))), em.i(mantissa)))
        scale.append(em.bitcast(bits, em.t))
    result = em.mul(em.mul(p, scale[0]), scale[1])
    result = em.select(em.cmp(x, em.f(highest), "ogt"), em.f(pymath.inf), result)
    return em.select(em.cmp(x, x, "uno"), x, result)


class ExpandExp(RewritePattern):
    """math.exp (f32, f64) -> range reduction, a polynomial and exponent bits."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: math.ExpOp, rewriter: PatternRewriter) -> None:
        if (em := emitter_for(op)) is not None:
            result = _expand_exp(em, op.operand)
            rewriter.replace(op, em.ops, [result])


class ExpandExpPass(ModulePass):
    """Replaces every f32 / f64 math.exp by inline, vectorisable arithmetic."""

    name = "expand-exp"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ExpandExp()).rewrite_module(op)
