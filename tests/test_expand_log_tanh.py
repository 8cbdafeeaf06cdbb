"""expand-log, expand-tanh: the inline log and tanh are within 1.5 ulp of the exact values, with IEEE specials.

The expansions are compiled for the CPU here (with expand-exp after them, as
the pipelines run them), so they are checked on this machine; the
reference is numpy's long double log / tanh, rounded only when ulps are counted.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.parser import Parser

import gnnc
from gnnc.driver import compiler, pipeline
from gnnc.transforms.math.expand_exp import ExpandExpPass
from gnnc.transforms.math.expand_log import ExpandLogPass
from gnnc.transforms.math.expand_tanh import ExpandTanhPass
from tests.helpers import assert_matches
from tests.strategies import graphs, random_inputs
from tests.test_cpu_backend import build_so, parse
from tests.test_expand_exp import KERNEL

DTYPES = [("f32", np.float32, np.uint32), ("f64", np.float64, np.uint64)]
SPECIALS = [
    np.nan,
    -np.nan,
    np.inf,
    -np.inf,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    2.0,
    0.625,
    -0.625,
    0.6249999,
    9.01,
    19.06,
    20.0,
    -20.0,
    1e-30,
    -1e-30,
    1e-300,
    5e-324,
    -5e-324,
    1.4e-45,
    -1.4e-45,
    1.1754942e-38,
    2.2250738585072e-308,
    3.4028235e38,
    1.7976931348623157e308,
    np.sqrt(0.5),
    np.sqrt(2.0),
]


def compiled(function: str, t: str, tmp_path):
    module = parse(KERNEL.format(t=t).replace("math.exp", f"math.{function}"))
    ctx = pipeline.make_context()
    ExpandLogPass().apply(ctx, module)
    ExpandTanhPass().apply(ctx, module)
    ExpandExpPass().apply(ctx, module)
    module.verify()
    assert f"math.{function}" not in str(module) and "math.exp" not in str(module)
    # the dump (NaN and infinity constants included) reads back, as every stage's must
    assert str(Parser(ctx, str(module)).parse_module()) == str(module)
    run = build_so(module, tmp_path, f"{function}_{t}")[0].vexp
    run.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]

    def evaluate(x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x)
        y = np.empty_like(x)
        run(len(x), x.ctypes.data, y.ctypes.data)
        return y

    return evaluate


def inputs(dtype, bits_type, lo: float, hi: float) -> np.ndarray:
    """Random bit patterns (every exponent, subnormals, NaNs), a dense range, the specials."""
    rng = np.random.default_rng(7)
    width = np.dtype(bits_type).itemsize * 8
    patterns = rng.integers(0, 2**width - 1, 300_000, dtype=bits_type, endpoint=True).view(dtype)
    with np.errstate(over="ignore"):
        specials = np.array(SPECIALS, dtype=dtype)
    return np.concatenate([patterns, np.abs(patterns), np.linspace(lo, hi, 200_001, dtype=dtype), specials])


def ulps(got: np.ndarray, exact: np.ndarray, dtype) -> np.ndarray:
    """|got - exact| in units of the spacing of dtype at the exact value."""
    spacing = np.spacing(np.abs(exact).astype(dtype)).astype(np.longdouble)
    return (np.abs(got.astype(np.longdouble) - exact) / spacing).astype(np.float64)


def check(got: np.ndarray, exact: np.ndarray, dtype) -> float:
    """Specials (NaN, infinities, signed zeros) exact; every other value within 1.5 ulp; the worst ulps."""
    rounded = exact.astype(dtype)
    regular = np.isfinite(exact) & (exact != 0)
    special = ~regular
    same = (got[special] == rounded[special]) & (np.signbit(got[special]) == np.signbit(rounded[special]))
    assert (same | (np.isnan(got[special]) & np.isnan(rounded[special]))).all()
    error = ulps(got[regular], exact[regular], dtype)
    assert error.max() <= 1.5, (error.max(), got[regular][error.argmax()])
    return float(error.max())


@pytest.mark.parametrize("t, dtype, bits_type", DTYPES)
def test_expanded_log_is_accurate(tmp_path, t, dtype, bits_type):
    x = inputs(dtype, bits_type, 0.0, 4.0)
    got = compiled("log", t, tmp_path)(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = np.log(x.astype(np.longdouble))
    check(got, exact, dtype)
    # the specials spelled out: 0 -> -inf (either sign), x < 0 -> NaN, +inf -> +inf, NaN -> NaN
    special = np.array([0.0, -0.0, -1.0, -np.inf, np.inf, np.nan], dtype)
    np.testing.assert_array_equal(
        compiled("log", t, tmp_path)(special), [-np.inf, -np.inf, np.nan, np.nan, np.inf, np.nan]
    )
    # subnormals: the exponent of the scaled value counts
    tiny = np.finfo(dtype).smallest_subnormal
    assert abs(compiled("log", t, tmp_path)(np.array([tiny], dtype))[0] - np.log(np.longdouble(tiny))) < 1e-5


@pytest.mark.parametrize("t, dtype, bits_type", DTYPES)
def test_expanded_tanh_is_accurate(tmp_path, t, dtype, bits_type):
    x = inputs(dtype, bits_type, -25.0, 25.0)
    evaluate = compiled("tanh", t, tmp_path)
    got = evaluate(x)
    with np.errstate(invalid="ignore"):
        exact = np.tanh(x.astype(np.longdouble))
    check(got, exact, dtype)
    # saturation, signed zeros and NaN, and relative accuracy near 0 (no cancellation)
    special = np.array([0.0, -0.0, np.inf, -np.inf, 30.0, -30.0, np.nan], dtype)
    got = evaluate(special)
    np.testing.assert_array_equal(got, [0.0, 0.0, 1.0, -1.0, 1.0, -1.0, np.nan])
    assert list(np.signbit(got[:2])) == [False, True]
    small = np.array([1e-3, -1e-6, 1e-20, np.finfo(dtype).smallest_subnormal], dtype)
    assert ulps(evaluate(small), np.tanh(small.astype(np.longdouble)), dtype).max() <= 1.0


def test_where_the_expansions_run():
    # the cpu target expands only the logs in feature loops; every target expands tanh before exp,
    # whose expansion tanh's needs
    assert pipeline.PASSES["expand-log"] is ExpandLogPass and pipeline.PASSES["expand-tanh"] is ExpandTanhPass
    cpu = pipeline.CPU_PIPELINE
    assert "expand-log{rows_only=true}" in cpu and "expand-log" not in cpu
    assert cpu.index("expand-log{rows_only=true}") < cpu.index("expand-exp")
    for names in (pipeline.CUDA_PIPELINE, pipeline.CUDA_EMULATION_PIPELINE):
        assert names.index("expand-log") < names.index("expand-exp") < names.index("convert-loop-to-scf")
    for names in (pipeline.CPU_PIPELINE, pipeline.CUDA_PIPELINE, pipeline.CUDA_EMULATION_PIPELINE):
        assert names.index("expand-tanh") < names.index("expand-exp") < names.index("convert-loop-to-scf")


def test_other_types_are_left_alone():
    text = KERNEL.format(t="f16").replace("math.exp", "math.tanh")
    module = parse(text)
    ExpandTanhPass().apply(pipeline.make_context(), module)
    assert "math.tanh" in str(module)


#: rows weighted by a per-head tanh (additive attention's shape)
TANH_WEIGHTS = """
kernel th(h: f32[V, H, F], el: f32[V, H], er: f32[V, H]) -> f32[V, H, F] {
    out[v] = sum(tanh(el[u] + er[v]) * h[u])
}
"""


def test_cpu_pipeline_calls_no_libm_tanh():
    inline = compiler.compile_source(TANH_WEIGHTS, stop_after="asm").stages
    assert "math.tanh" not in inline["expand-tanh"] and "tanhf" not in inline["emit-asm"]
    options = compiler.CompileOptions(disable_passes=("expand-tanh",))
    assert "tanhf" in compiler.compile_source(TANH_WEIGHTS, options=options, stop_after="asm").stages["emit-asm"]


@settings(max_examples=10, deadline=None)
@given(graph=graphs(), heads=st.sampled_from((1, 4)), f=st.sampled_from((1, 16)), seed=st.integers(0, 2**32 - 1))
def test_inline_tanh_kernel_matches_the_reference(graph, heads, f, seed):
    kernel = gnnc.compile(TANH_WEIGHTS, schedule=f"specialize H {heads} F {f}").th
    inputs = random_inputs(kernel.signature, graph, {"H": heads, "F": f}, np.float32, seed)
    want = gnnc.compile(TANH_WEIGHTS, target="reference").th(graph, **inputs)
    assert_matches(kernel(graph, **inputs), want, graph, np.float32)


#: a log per element of a row (CGConv's softplus) and a log per edge
ROW_LOG = """
kernel row_log(x: f32[V, F]) -> f32[V, F] {
    out[v] = sum(log(1 + exp(-abs(x[u]))))
}
"""
EDGE_LOG = """
kernel edge_log(x: f32[V, F], w: f32[E]) -> f32[V, F] {
    out[v] = sum(log(1 + w[e]) * x[u])
}
"""


def test_cpu_pipeline_expands_the_logs_in_feature_loops_only():
    """A log per row element is expanded (the row loop vectorises); one per edge stays glibc's."""
    rows = compiler.compile_source(ROW_LOG, stop_after="asm").stages
    assert "math.log" not in rows["expand-log"] and "logf" not in rows["emit-asm"]
    edges = compiler.compile_source(EDGE_LOG, stop_after="asm").stages
    assert "math.log" in edges["expand-log"] and "logf" in edges["emit-asm"]
    options = compiler.CompileOptions(disable_passes=("expand-log",))
    assert "logf" in compiler.compile_source(ROW_LOG, options=options, stop_after="asm").stages["emit-asm"]


@settings(max_examples=10, deadline=None)
@given(graph=graphs(), f=st.sampled_from((1, 16)), scale=st.sampled_from((1.0, 40.0)), seed=st.integers(0, 2**32 - 1))
def test_inline_row_log_kernel_matches_the_reference(graph, f, scale, seed):
    kernel = gnnc.compile(ROW_LOG).row_log
    x = (np.random.default_rng(seed).standard_normal((graph.num_vertices, f)) * scale).astype(np.float32)
    want = gnnc.compile(ROW_LOG, target="reference").row_log(graph, x=x)
    np.testing.assert_allclose(kernel(graph, x=x), want, rtol=2e-5, atol=1e-6)
