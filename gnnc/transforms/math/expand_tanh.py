"""expand-tanh: `math.tanh` becomes inline arithmetic (and one `math.exp`).

PTX has no libm, and LLVM's NVPTX backend aborts on `llvm.tanh` ("Cannot
select ftanh"), so the cuda pipelines run this pass. The CPU pipeline runs
it too: glibc's `tanhf` is a slow call that spills the vector registers,
and inline (with expand-exp after it) a kernel weighting rows by
tanh(el[u] + er[v]) vectorises (docs/design/llvm-translation.md).

Cephes: for |x| < 0.625 an odd polynomial (f32) or rational function (f64)
in x, which keeps the relative accuracy near 0 that 1 - 2 / (exp(2|x|) + 1)
loses to cancellation; that form for larger |x|, with |x| clamped to 20
where tanh is 1 in both precisions. The sign is copied from x afterwards,
so -0 stays -0; NaN stays NaN. Run before expand-exp.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from gnnc.transforms.math.emitter import MathEmitter, emitter_for

# Cephes tanhf: tanh(a) = a + a s P(s), s = a^2, highest coefficient first
_TANHF_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
# Cephes tanh: tanh(a) = a + a s P(s) / Q(s), Q monic, highest coefficient first
_TANH_P = (-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3)
_TANH_Q = (1.0, 1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3)
#: below this |x| tanh takes the polynomial
_TANH_SMALL = 0.625
#: tanh(20) rounds to 1 in f32 and f64 (1 - tanh(20) ~ 8.5e-18); clamping keeps exp(2|x|) finite
_TANH_SATURATED = 20.0


def _expand_tanh(em: MathEmitter, x: SSAValue) -> SSAValue:
    a = em.add(math.AbsFOp(x))
    s = em.mul(a, a)
    if em.width == 32:
        ratio = em.horner(_TANHF_P, s)
    else:
        ratio = em.add(arith.DivfOp(em.horner(_TANH_P, s), em.horner(_TANH_Q, s)))
    small = em.addf(a, em.mul(em.mul(a, s), ratio))
    # minnum maps NaN to the bound: no poison below; NaN is restored at the end
    clamped = em.add(arith.MinnumfOp(a, em.f(_TANH_SATURATED)))
    e2a = em.add(math.ExpOp(em.addf(clamped, clamped)))
    large = em.sub(em.f(1.0), em.add(arith.DivfOp(em.f(2.0), em.addf(e2a, em.f(1.0)))))
    magnitude = em.select(em.cmp(a, em.f(_TANH_SMALL), "olt"), small, large)
    result = em.add(math.CopySignOp(magnitude, x))
    return em.select(em.cmp(x, x, "uno"), x, result)


class ExpandTanh(RewritePattern):
    """math.tanh (f32, f64) -> a polynomial near 0, 1 - 2 / (exp(2|x|) + 1) elsewhere, x's sign."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: math.TanhOp, rewriter: PatternRewriter) -> None:
        if (em := emitter_for(op)) is not None:
            result = _expand_tanh(em, op.operand)
            rewriter.replace(op, em.ops, [result])


class ExpandTanhPass(ModulePass):
    """Replaces every f32 / f64 math.tanh by inline arithmetic around a math.exp."""

    name = "expand-tanh"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ExpandTanh()).rewrite_module(op)
