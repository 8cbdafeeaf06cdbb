"""expand-exp: the inline exponential is within one ulp of exp, with IEEE specials."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from gnnc.passes.expand_exp import ExpandExpPass
from gnnc.passes.pipeline import make_context
from tests.test_cpu_backend import build_so, parse

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
