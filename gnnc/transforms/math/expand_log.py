"""expand-log: `math.log` becomes inline arithmetic.

PTX has no libm, and LLVM's NVPTX backend cannot lower `llvm.log` (it
fails), so the cuda pipelines run this pass on every log. The CPU pipeline
runs it with `rows_only=true`: a log inside a feature loop (`loop.for_feature`,
a row or a head loop) is expanded, so that the loop vectorises, and any
other log stays a call into glibc, whose table-driven `logf` was faster
than this expansion for one value per edge (docs/design/llvm-translation.md).

f32 as Cephes' logf, f64 as fdlibm's log: the bits of x give its exponent k
and a mantissa m in [sqrt(1/2), sqrt(2)), and log(x) = k ln 2 + log(1 + f)
with f = m - 1, by a polynomial in f (f32) or in s = f / (2 + f) (f64);
ln 2 is split in two so that k ln 2 adds no rounding error. Subnormals are
scaled into the normal range first; 0 gives -inf, x < 0 NaN, +inf +inf,
NaN itself.
"""

from __future__ import annotations

import math as pymath
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from gnnc.ir import loop
from gnnc.transforms.math.emitter import LN2_HI, LN2_LO, MathEmitter, emitter_for

# width -> (mantissa bits, exponent bias, bits of the lowest reduced mantissa (just below sqrt(1/2)),
#           scale exponent that brings every subnormal into the normal range)
_LOG_FORMATS = {
    32: (23, 127, 0x3F3504F3, 24),
    64: (52, 1023, 0x3FE6A09E << 32, 54),
}
# Cephes logf: log(1 + f) = f - f^2 / 2 + f^3 P(f), highest coefficient first
_LOGF_P = (
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
)
# fdlibm log: log(1 + f) = 2s + s R(s^2), R's coefficients Lg1 .. Lg7
_LOG_LG = (
    6.666666666666735130e-01,
    3.999999999940941908e-01,
    2.857142874366239149e-01,
    2.222219843214978396e-01,
    1.818357216161805012e-01,
    1.531383769920937332e-01,
    1.479819860511658591e-01,
)


def _expand_log(em: MathEmitter, x: SSAValue) -> SSAValue:
    width = em.width
    mantissa, bias, low_mantissa, scale = _LOG_FORMATS[width]
    # a subnormal (and 0 or a negative, whose results are replaced below) is scaled up by 2^scale
    subnormal = em.cmp(x, em.f(pymath.ldexp(1.0, 1 - bias)), "olt")
    xs = em.select(subnormal, em.mul(x, em.f(pymath.ldexp(1.0, scale))), x)
    bits = em.bitcast(xs, em.ity)
    # adding (1 - lowest mantissa) carries into the exponent exactly when m would be >= sqrt(2)
    one = bias << mantissa
    bits = em.add(arith.AddiOp(bits, em.i(one - low_mantissa)))
    k = em.add(arith.SubiOp(em.add(arith.ShRSIOp(bits, em.i(mantissa))), em.i(bias)))
    k = em.add(arith.SubiOp(k, em.add(arith.SelectOp(subnormal, em.i(scale), em.i(0)))))
    m_bits = em.add(arith.AddiOp(em.add(arith.AndIOp(bits, em.i((1 << mantissa) - 1))), em.i(low_mantissa)))
    f = em.sub(em.bitcast(m_bits, em.t), em.f(1.0))
    kf = em.add(arith.SIToFPOp(k, em.t))
    if width == 32:
        z = em.mul(f, f)
        y = em.mul(em.mul(em.horner(_LOGF_P, f), f), z)
        y = em.addf(y, em.mul(kf, em.f(LN2_LO[32])))
        y = em.sub(y, em.mul(em.f(0.5), z))
        result = em.addf(em.addf(f, y), em.mul(kf, em.f(LN2_HI[32])))
    else:
        s = em.add(arith.DivfOp(f, em.addf(em.f(2.0), f)))
        z = em.mul(s, s)
        w = em.mul(z, z)
        lg = _LOG_LG
        t1 = em.mul(w, em.horner((lg[5], lg[3], lg[1]), w))
        t2 = em.mul(z, em.horner((lg[6], lg[4], lg[2], lg[0]), w))
        r = em.addf(t2, t1)
        hfsq = em.mul(em.f(0.5), em.mul(f, f))
        inner = em.addf(em.mul(s, em.addf(hfsq, r)), em.mul(kf, em.f(LN2_LO[64])))
        result = em.sub(em.mul(kf, em.f(LN2_HI[64])), em.sub(em.sub(hfsq, inner), f))
    result = em.select(em.cmp(x, em.f(pymath.inf), "oeq"), em.f(pymath.inf), result)
    result = em.select(em.cmp(x, em.f(0.0), "oeq"), em.f(-pymath.inf), result)
    result = em.select(em.cmp(x, em.f(0.0), "olt"), em.f(pymath.nan), result)
    return em.select(em.cmp(x, x, "uno"), x, result)


def in_feature_loop(op: Operation) -> bool:
    """Whether `op` runs inside a `loop.for_feature` (once per element of a row or per head)."""
    parent = op.parent_op()
    while parent is not None:
        if isinstance(parent, loop.ForFeatureOp):
            return True
        parent = parent.parent_op()
    return False


@dataclass
class ExpandLog(RewritePattern):
    """math.log (f32, f64) -> exponent bits, a polynomial in the mantissa, IEEE specials."""

    rows_only: bool = False

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: math.LogOp, rewriter: PatternRewriter) -> None:
        if self.rows_only and not in_feature_loop(op):
            return
        if (em := emitter_for(op)) is not None:
            result = _expand_log(em, op.operand)
            rewriter.replace(op, em.ops, [result])


@dataclass(frozen=True)
class ExpandLogPass(ModulePass):
    """Replaces f32 / f64 math.log by inline arithmetic: every one, or with `rows_only` those
    inside a feature loop (the CPU pipeline's choice)."""

    name = "expand-log"

    rows_only: bool = False
    """Expand only the logs inside a `loop.for_feature`; the others stay libm calls."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ExpandLog(self.rows_only)).rewrite_module(op)
