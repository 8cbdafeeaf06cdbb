"""expand-exp: the inline exponential is within one ulp of exp, with IEEE specials; the CPU pipeline runs it."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc.driver import compiler
from gnnc.driver.pipeline import make_context
from gnnc.transforms.math.expand_exp import ExpandExpPass
from tests.helpers import assert_matches, slow_except
from tests.strategies import graphs, random_inputs
from tests.test_cpu_backend import build_so, parse

GAT = (Path(__file__).parent.parent / "examples" / "gat.gnn").read_text()

KERNEL = """
func.func @vexp(%n: index, %x: memref<?x{t}> {{llvm.noalias}}, %y: memref<?x{t}> {{llvm.noalias}}) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {{
    %v = memref.load %x[%i] : memref<?x{t}>
    %e = math.exp %v : {t}
    memref.store %e, %y[%i] : memref<?x{t}>
  }}
  func.return
}}
"""


@pytest.mark.parametrize("t, dtype", [("f32", np.float32), ("f64", np.float64)])
def test_expanded_exp_is_accurate(tmp_path, t, dtype):
    module = parse(KERNEL.format(t=t))
    ExpandExpPass().apply(make_context(), module)
    module.verify()
    assert "math.exp" not in str(module)
    lib = build_so(module, tmp_path, f"exp_{t}")[0]
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72, 88.73, -87.3, -103.9, 709.78, 709.79, -745.0]
    x = np.concatenate([np.linspace(-750, 750, 100_001), specials]).astype(dtype)
    y = np.empty_like(x)
    lib.vexp.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    lib.vexp(len(x), x.ctypes.data, y.ctypes.data)
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp(x.astype(np.float64))
    normal = np.isfinite(want) & (want >= np.finfo(dtype).tiny) & (want <= np.finfo(dtype).max)
    rel = np.abs(y[normal] - want[normal]) / want[normal]
    assert rel.max() <= 1.5 * np.finfo(dtype).eps
    assert np.isnan(y[np.isnan(x)]).all()
    assert (y[x == np.inf] == np.inf).all() and (y[x == -np.inf] == 0).all()
    overflow = want > np.finfo(dtype).max
    assert (y[overflow] == np.inf).all()


@pytest.mark.parametrize("schedule", slow_except([None, "specialize H 4 F 32"], "specialize H 4 F 32"))
def test_cpu_pipeline_calls_no_libm_exp(schedule):
    """gat's walks compute exp inline (no expf call); --disable-pass expand-exp brings the call back."""
    inline = compiler.compile_source(GAT, options=compiler.CompileOptions(schedule=schedule), stop_after="asm")
    assert "math.exp" not in inline.stages["expand-exp"]
    assert "expf" not in inline.stages["emit-asm"]
    libm = compiler.compile_source(
        GAT, options=compiler.CompileOptions(schedule=schedule, disable_passes=("expand-exp",)), stop_after="asm"
    )
    assert "expf" in libm.stages["emit-asm"]


def test_only_the_cpu_may_skip_expand_exp():
    from gnnc.driver.pipeline import pass_names
    from gnnc.errors import CompileError

    assert "expand-exp" not in pass_names(["expand-exp"])
    with pytest.raises(CompileError, match="needed to generate code for cuda"):
        pass_names(["expand-exp"], target="cuda")


@settings(max_examples=15, deadline=None)
@given(graph=graphs(), heads=st.sampled_from((1, 4)), f=st.sampled_from((1, 8, 32)), seed=st.integers(0, 2**32 - 1))
@pytest.mark.slow
def test_inline_and_libm_exp_agree_with_the_reference(graph, heads, f, seed):
    inline = gnnc.compile(GAT, schedule=f"specialize H {heads} F {f}").gat
    libm = gnnc.compile(GAT, schedule=f"specialize H {heads} F {f}", disable_passes=["expand-exp"]).gat
    inputs = random_inputs(inline.signature, graph, {"H": heads, "F": f}, np.float32, seed)
    want = gnnc.compile(GAT, target="reference").gat(graph, **inputs)
    assert_matches(inline(graph, **inputs), want, graph, np.float32)
    assert_matches(libm(graph, **inputs), want, graph, np.float32)
