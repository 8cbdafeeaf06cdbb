"""The CPU backend: xDSL IR -> LLVM IR -> optimised object -> .so -> ctypes, end to end.

Modules are built with xDSL's Python API and parsed from text, compiled for
this machine, linked into a .so in tmp_path, loaded with gnnc.runtime.native,
and run on numpy arrays that are compared with numpy's own results.
"""

from __future__ import annotations

import ctypes
import math as pymath
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import arith, builtin, cf, func, llvm, math, memref, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IndexType,
    MemRefType,
    UnitAttr,
    f32,
)
from xdsl.ir import Block, Region
from xdsl.parser import Parser

from gnnc.errors import CompileError, ToolchainError
from gnnc.ir.llvm_ext import LlvmExt, PrefetchOp
from gnnc.runtime import native
from gnnc.target.cpu import codegen
from gnnc.target.llvm.translate import translate_module

needs_cc = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc").split()[0]) is None, reason="no C compiler")
x86_only = pytest.mark.skipif(not codegen._is_x86_64_host(), reason="x86-64 levels need an x86-64 host")

# ---------------------------------------------------------------- helpers


def make_ctx() -> Context:
    ctx = Context()
    for d in (builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf, cf.Cf, llvm.LLVM, LlvmExt):
        ctx.load_dialect(d)
    return ctx


def parse(text: str) -> builtin.ModuleOp:
    module = Parser(make_ctx(), textwrap.dedent(text)).parse_module()
    module.verify()
    return module


METADATA = {"format": "gnnc-shared-object", "abi_version": 0, "kernels": []}


def build_so(module: builtin.ModuleOp, tmp_path, name: str = "k", level: str = "native", metadata: dict | None = None):
    """Translates, optimises, links and loads; returns (library, metadata, ir text, optimised ir, asm)."""
    target = codegen.resolve_cpu(level)
    ir_module = translate_module(module, module_name=name)
    text = str(ir_module)
    record = dict(metadata if metadata is not None else METADATA)
    record.setdefault("cpu", target.metadata())
    codegen.embed_metadata(ir_module, record)
    opt, obj, asm = codegen.optimize_and_emit(ir_module, target)
    path = tmp_path / f"{name}.so"
    codegen.link_shared_object(obj, path)
    lib, md = native.open_shared_object(path)
    native.check_cpu_features(md)
    return lib, md, text, opt, asm


def ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def function_text(ir_text: str, name: str) -> str:
    m = re.search(rf'define [^@]*@"?{name}"?\(.*?\n}}', ir_text, re.S)
    assert m, f"no function {name} in IR"
    return m.group(0)


def memref_of(t) -> MemRefType:
    return MemRefType(t, [builtin.DYNAMIC_INDEX])


# ---------------------------------------------------------------- SAXPY from the Python API


def saxpy_module(prefetch: bool = False) -> builtin.ModuleOp:
    """y[i] = a * x[i] + y[i], built op by op; x is noalias readonly, y noalias."""
    buf = memref_of(f32)
    entry = Block(arg_types=[IndexType(), f32, buf, buf])
    n, a, x, y = entry.args
    for arg, hint in zip(entry.args, "naxy"):
        arg.name_hint = hint
    c0 = arith.ConstantOp.from_int_and_width(0, IndexType())
    c1 = arith.ConstantOp.from_int_and_width(1, IndexType())
    body = Block(arg_types=[IndexType()])
    i = body.args[0]
    xi = memref.LoadOp.get(x, [i])
    yi = memref.LoadOp.get(y, [i])
    ax = arith.MulfOp(a, xi)
    s = arith.AddfOp(ax, yi)
    ops = [xi, yi, ax, s, memref.StoreOp.get(s, y, [i])]
    if prefetch:
        ahead = arith.ConstantOp.from_int_and_width(64, IndexType())
        j = arith.AddiOp(i, ahead)
        ops += [ahead, j, PrefetchOp(x, j, write=False, locality=3), PrefetchOp(y, j, write=True, locality=1)]
    body.add_ops([*ops, scf.YieldOp()])
    loop = scf.ForOp(c0, n, c1, [], body)
    entry.add_ops([c0, c1, loop, func.ReturnOp()])
    none = DictionaryAttr({})
    arg_attrs = ArrayAttr(
        [none, none, DictionaryAttr({"llvm.noalias": UnitAttr(), "llvm.readonly": UnitAttr()}),
         DictionaryAttr({"llvm.noalias": UnitAttr()})]
    )  # fmt: skip
    fn = func.FuncOp("saxpy", ([IndexType(), f32, buf, buf], []), Region(entry), arg_attrs=arg_attrs)
    module = builtin.ModuleOp([fn])
    module.verify()
    return module


def run_saxpy(lib, n=1000, seed=0):
    """y <- 2.5 x + y through the compiled saxpy; returns (y, (exact value, error bound)):
    the product may be fused into the sum (one rounding, translator's `contract`) or not."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    exact = 2.5 * x.astype(np.float64) + y
    want = (exact, 2 * np.finfo(np.float32).eps * (np.abs(2.5 * x.astype(np.float64)) + np.abs(y)))
    lib.saxpy.argtypes = [ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]
    lib.saxpy.restype = None
    lib.saxpy(n, 2.5, ptr(x), ptr(y))
    return y, want


def assert_saxpy(got, want):
    exact, bound = want
    assert np.all(np.abs(got - exact) <= bound), np.max(np.abs(got - exact) / bound)


@needs_cc
def test_saxpy_python_api(tmp_path):
    lib, md, text, opt, _ = build_so(saxpy_module(), tmp_path)
    got, want = run_saxpy(lib)
    assert_saxpy(got, want)
    signature = next(line for line in text.splitlines() if "define" in line)
    assert re.search(r"ptr noalias readonly %\"?x", signature), signature
    assert re.search(r"ptr noalias %\"?y", signature), signature
    assert "llvm.loop.mustprogress" in text
    # noalias lets LLVM vectorise without runtime overlap checks
    assert re.search(r"<\d+ x float>", opt), "saxpy was not vectorised"


@needs_cc
def test_saxpy_text_round_trip(tmp_path):
    """The printed module parses back and translates to the same LLVM IR."""
    module = saxpy_module()
    again = parse(str(module))
    assert str(translate_module(module)) == str(translate_module(again))
    lib, *_ = build_so(again, tmp_path)
    got, want = run_saxpy(lib, n=37)
    assert_saxpy(got, want)


@needs_cc
def test_prefetch(tmp_path):
    module = saxpy_module(prefetch=True)
    again = parse(str(module))  # the custom syntax round-trips
    assert "llvm_ext.prefetch" in str(again)
    lib, _, text, _, _ = build_so(again, tmp_path)
    assert re.search(r"call void @\"?llvm\.prefetch\.p0\"?\(ptr %[^,]+, i32 0, i32 3, i32 1\)", text)
    assert re.search(r"call void @\"?llvm\.prefetch\.p0\"?\(ptr %[^,]+, i32 1, i32 1, i32 1\)", text)
    got, want = run_saxpy(lib, n=100)  # prefetches 64 past the end: harmless
    assert_saxpy(got, want)


def test_prefetch_verifier():
    with pytest.raises(Exception, match="locality must be 0..3"):
        parse(
            """
            func.func @f(%b: memref<?xf32>, %i: index) {
              llvm_ext.prefetch %b[%i] {write = false, locality = 7} : memref<?xf32>
              func.return
            }
            """
        )


# ---------------------------------------------------------------- elementwise ops vs numpy

KERNEL = """
func.func @{name}(%n: index, %x: memref<?x{T}>, %y: memref<?x{T}>, %z: memref<?x{T}>, %out: memref<?x{R}>) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {{
    %a = memref.load %x[%i] : memref<?x{T}>
    %b = memref.load %y[%i] : memref<?x{T}>
    %c = memref.load %z[%i] : memref<?x{T}>
    {body}
    memref.store %r, %out[%i] : memref<?x{R}>
  }}
  func.return
}}
"""

N = 257  # not a multiple of any vector width: exercises the remainder loops


def _float_inputs(dtype):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal(N) * 3).astype(dtype)
    b = (rng.standard_normal(N) * 3).astype(dtype)
    c = rng.standard_normal(N).astype(dtype)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, np.nan, 2.0], dtype=dtype)
    a[: len(specials)] = specials
    b[: len(specials)] = specials[::-1]
    a[10:14] = b[10:14]  # some equal pairs for the == predicates
    return a, b, c


def _int_inputs(_dtype):
    rng = np.random.default_rng(2)
    a = rng.integers(-(2**62), 2**62, N, dtype=np.int64)
    a[:6] = [0, -1, 1, np.iinfo(np.int64).max, np.iinfo(np.int64).min + 1, 7]
    b = rng.integers(-1000, 1000, N, dtype=np.int64)
    b[b == 0] = 3
    b[6:10] = a[6:10]
    c = rng.integers(0, 64, N, dtype=np.int64)  # shift amounts
    return a, b, c


def _safe_float_inputs(dtype):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(N) * 1e6).astype(dtype)
    return a, a, a


def _small_int_inputs(_dtype):
    rng = np.random.default_rng(4)
    a = rng.integers(-(2**40), 2**40, N, dtype=np.int64)
    return a, a, a


def _trunc_div(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _u(v):
    return v.view(np.uint64)


def _ordered(a, b):
    return ~np.isnan(a) & ~np.isnan(b)


CMPF = {
    "false": lambda a, b: np.zeros(a.shape, bool),
    "oeq": lambda a, b: a == b,
    "ogt": lambda a, b: a > b,
    "oge": lambda a, b: a >= b,
    "olt": lambda a, b: a < b,
    "ole": lambda a, b: a <= b,
    "one": lambda a, b: (a != b) & _ordered(a, b),
    "ord": _ordered,
    "ueq": lambda a, b: (a == b) | ~_ordered(a, b),
    "ugt": lambda a, b: (a > b) | ~_ordered(a, b),
    "uge": lambda a, b: (a >= b) | ~_ordered(a, b),
    "ult": lambda a, b: (a < b) | ~_ordered(a, b),
    "ule": lambda a, b: (a <= b) | ~_ordered(a, b),
    "une": lambda a, b: a != b,
    "uno": lambda a, b: ~_ordered(a, b),
    "true": lambda a, b: np.ones(a.shape, bool),
}

CMPI = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "slt": lambda a, b: a < b,
    "sle": lambda a, b: a <= b,
    "sgt": lambda a, b: a > b,
    "sge": lambda a, b: a >= b,
    "ult": lambda a, b: _u(a) < _u(b),
    "ule": lambda a, b: _u(a) <= _u(b),
    "ugt": lambda a, b: _u(a) > _u(b),
    "uge": lambda a, b: _u(a) >= _u(b),
}

# (name, T, R, body defining %r, numpy reference, inputs, ulps of tolerance; 0 = exact)
CASES: list[tuple] = []
for T in ("f32", "f64"):
    for op, ref in {
        "addf": np.add, "subf": np.subtract, "mulf": np.multiply, "divf": np.divide,
        "maximumf": np.maximum, "minimumf": np.minimum, "maxnumf": np.fmax, "minnumf": np.fmin,
    }.items():  # fmt: skip
        CASES.append(
            (f"{op}_{T}", T, T, f"%r = arith.{op} %a, %b : {T}", lambda a, b, c, ref=ref: ref(a, b), _float_inputs, 0)
        )
    CASES.append((f"negf_{T}", T, T, f"%r = arith.negf %a : {T}", lambda a, b, c: -a, _float_inputs, 0))
    for op, ref, ulps in (
        ("exp", np.exp, 4), ("log", np.log, 4), ("sqrt", np.sqrt, 0), ("absf", np.abs, 0), ("tanh", np.tanh, 4),
    ):  # fmt: skip
        CASES.append(
            (f"{op}_{T}", T, T, f"%r = math.{op} %a : {T}", lambda a, b, c, ref=ref: ref(a), _float_inputs, ulps)
        )
    for op, ref, ulps in (
        ("exp2", np.exp2, 4), ("log2", np.log2, 4), ("log10", np.log10, 4), ("sin", np.sin, 4), ("cos", np.cos, 4),
        ("floor", np.floor, 0), ("ceil", np.ceil, 0), ("trunc", np.trunc, 0),
        ("round", lambda a: np.copysign(np.floor(np.abs(a) + a.dtype.type(0.5)), a), 0),
        ("log1p", np.log1p, 4), ("expm1", np.expm1, 4), ("erf", np.vectorize(pymath.erf, otypes=[float]), 4),
    ):  # fmt: skip
        CASES.append(
            (f"{op}_{T}", T, T, f"%r = math.{op} %a : {T}", lambda a, b, c, ref=ref: ref(a), _float_inputs, ulps)
        )
    for op, ref, ulps in (("copysign", np.copysign, 0), ("powf", np.power, 4)):
        CASES.append(
            (f"{op}_{T}", T, T, f"%r = math.{op} %a, %b : {T}", lambda a, b, c, ref=ref: ref(a, b), _float_inputs, ulps)
        )
    CASES.append((f"rsqrt_{T}", T, T, f"%r = math.rsqrt %a : {T}", lambda a, b, c: 1 / np.sqrt(a), _float_inputs, 2))
    CASES.append(
        (f"fma_{T}", T, T, f"%r = math.fma %a, %b, %c : {T}",
         lambda a, b, c: (a.astype(np.longdouble) * b + c).astype(a.dtype), _float_inputs, 1)
    )  # fmt: skip
    CASES.append(
        (f"select_{T}", T, T, f"%p = arith.cmpf olt, %a, %b : {T}\n    %r = arith.select %p, %a, %c : {T}",
         lambda a, b, c: np.where(a < b, a, c), _float_inputs, 0)
    )  # fmt: skip
    for pred, ref in CMPF.items():
        CASES.append(
            (f"cmpf_{pred}_{T}", T, "i64", f"%p = arith.cmpf {pred}, %a, %b : {T}\n    %r = arith.extui %p : i1 to i64",
             lambda a, b, c, ref=ref: ref(a, b).astype(np.int64), _float_inputs, 0)
        )  # fmt: skip
    for lit, value in (("0x7F800000" if T == "f32" else "0x7FF0000000000000", np.inf),
                       ("0xFF800000" if T == "f32" else "0xFFF0000000000000", -np.inf),
                       ("0x7FC00000" if T == "f32" else "0x7FF8000000000000", np.nan),
                       ("-0.0", -0.0), ("0.1", 0.1)):  # fmt: skip
        tag = {np.inf: "inf", -np.inf: "ninf", -0.0: "nzero", 0.1: "tenth"}.get(value, "nan")
        CASES.append(
            (f"const_{tag}_{T}", T, T, f"%k = arith.constant {lit} : {T}\n    %r = arith.addf %c, %k : {T}",
             lambda a, b, c, v=value: c + c.dtype.type(v), _float_inputs, 0)
        )  # fmt: skip

for op, ref in {
    "addi": lambda a, b, c: a + b,
    "subi": lambda a, b, c: a - b,
    "muli": lambda a, b, c: a * b,
    "divsi": lambda a, b, c: _trunc_div(a, b),
    "remsi": lambda a, b, c: a - _trunc_div(a, b) * b,
    "divui": lambda a, b, c: (_u(a) // _u(b)).view(np.int64),
    "remui": lambda a, b, c: (_u(a) % _u(b)).view(np.int64),
    "andi": lambda a, b, c: a & b,
    "ori": lambda a, b, c: a | b,
    "xori": lambda a, b, c: a ^ b,
    "maxsi": lambda a, b, c: np.maximum(a, b),
    "minsi": lambda a, b, c: np.minimum(a, b),
}.items():
    CASES.append((op, "i64", "i64", f"%r = arith.{op} %a, %b : i64", ref, _int_inputs, 0))
CASES.append(("absi", "i64", "i64", "%r = math.absi %a : i64", lambda a, b, c: np.abs(a), _int_inputs, 0))
for op, ref in {
    "shli": lambda a, b, c: a << c,
    "shrsi": lambda a, b, c: a >> c,
    "shrui": lambda a, b, c: (_u(a) >> _u(c)).view(np.int64),
}.items():
    CASES.append((op, "i64", "i64", f"%r = arith.{op} %a, %c : i64", ref, _int_inputs, 0))
for pred, ref in CMPI.items():
    CASES.append(
        (f"cmpi_{pred}", "i64", "i64", f"%p = arith.cmpi {pred}, %a, %b : i64\n    %r = arith.extui %p : i1 to i64",
         lambda a, b, c, ref=ref: ref(a, b).astype(np.int64), _int_inputs, 0)
    )  # fmt: skip
CASES += [
    ("index_cast", "i64", "i64",
     "%ix = arith.index_cast %a : i64 to index\n    %t = arith.index_cast %ix : index to i32\n"
     "    %iy = arith.index_cast %t : i32 to index\n    %r = arith.index_cast %iy : index to i64",
     lambda a, b, c: a.astype(np.int32).astype(np.int64), _int_inputs, 0),
    ("trunci_extsi", "i64", "i64", "%t = arith.trunci %a : i64 to i32\n    %r = arith.extsi %t : i32 to i64",
     lambda a, b, c: a.astype(np.int32).astype(np.int64), _int_inputs, 0),
    ("sitofp", "i64", "f64", "%r = arith.sitofp %a : i64 to f64", lambda a, b, c: a.astype(np.float64), _int_inputs, 0),
    ("uitofp", "i64", "f64", "%r = arith.uitofp %a : i64 to f64", lambda a, b, c: _u(a).astype(np.float64), _int_inputs, 0),
    ("sitofp_f32", "i64", "f32", "%r = arith.sitofp %a : i64 to f32",
     lambda a, b, c: a.astype(np.float32), _small_int_inputs, 0),
    ("fptosi", "f64", "i64", "%r = arith.fptosi %a : f64 to i64",
     lambda a, b, c: np.trunc(a).astype(np.int64), _safe_float_inputs, 0),
    ("extf", "f32", "f64", "%r = arith.extf %a : f32 to f64", lambda a, b, c: a.astype(np.float64), _float_inputs, 0),
    ("truncf", "f64", "f32", "%r = arith.truncf %a : f64 to f32",
     lambda a, b, c: a.astype(np.float32), _float_inputs, 0),
]  # fmt: skip

_DTYPES = {"f32": np.float32, "f64": np.float64, "i64": np.int64}


@pytest.fixture(scope="module")
def elementwise_lib(tmp_path_factory):
    text = "\n".join(KERNEL.format(name=name, T=T, R=R, body=body) for name, T, R, body, *_ in CASES)
    lib, *_ = build_so(parse(text), tmp_path_factory.mktemp("elementwise"), "elementwise")
    return lib


@needs_cc
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_elementwise(elementwise_lib, case):
    name, T, R, _, ref, inputs, ulps = case
    a, b, c = inputs(_DTYPES[T])
    out = np.zeros(N, dtype=_DTYPES[R])
    fn = getattr(elementwise_lib, name)
    fn.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 4
    fn.restype = None
    fn(N, ptr(a), ptr(b), ptr(c), ptr(out))
    with np.errstate(all="ignore"):
        want = np.asarray(ref(a, b, c)).astype(out.dtype)
    if ulps == 0:
        np.testing.assert_array_equal(out, want)
    else:
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
        np.testing.assert_array_equal(out[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
        eps = np.finfo(out.dtype).eps
        np.testing.assert_allclose(out[finite], want[finite], rtol=ulps * eps, atol=ulps * np.finfo(out.dtype).tiny)


# ---------------------------------------------------------------- loops and branches

CONTROL = """
// sum, NaN-propagating max, NaN-ignoring max and a count over x[lb:ub:step]
func.func @reduce(%lb: index, %ub: index, %step: index, %x: memref<?xf32>, %out: memref<?xf32>) -> i64 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %k0 = arith.constant 0 : i64
  %k1 = arith.constant 1 : i64
  %s, %m, %mn, %n = scf.for %i = %lb to %ub step %step
      iter_args(%acc = %zero, %mx = %ninf, %mxn = %ninf, %cnt = %k0) -> (f32, f32, f32, i64) {
    %v = memref.load %x[%i] : memref<?xf32>
    %acc2 = arith.addf %acc, %v : f32
    %mx2 = arith.maximumf %mx, %v : f32
    %mxn2 = arith.maxnumf %mxn, %v : f32
    %cnt2 = arith.addi %cnt, %k1 : i64
    scf.yield %acc2, %mx2, %mxn2, %cnt2 : f32, f32, f32, i64
  }
  memref.store %s, %out[%c0] : memref<?xf32>
  memref.store %m, %out[%c1] : memref<?xf32>
  memref.store %mn, %out[%c2] : memref<?xf32>
  func.return %n : i64
}

// out[r] = sum_j x[r * cols + j]: nested loops, index arithmetic
func.func @row_sums(%rows: index, %cols: index, %x: memref<?xf64> {llvm.noalias, llvm.readonly},
                    %out: memref<?xf64> {llvm.noalias}) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f64
  scf.for %r = %c0 to %rows step %c1 {
    %base = arith.muli %r, %cols : index
    %s = scf.for %j = %c0 to %cols step %c1 iter_args(%acc = %zero) -> (f64) {
      %k = arith.addi %base, %j : index
      %v = memref.load %x[%k] : memref<?xf64>
      %acc2 = arith.addf %acc, %v : f64
      scf.yield %acc2 : f64
    }
    memref.store %s, %out[%r] : memref<?xf64>
  }
  func.return
}

// out[i] = x[i] > 0 ? 2 x[i] : (sum of x[0..i) if i is even else -1); flags[i] = 1 where x[i] is NaN
func.func @branches(%n: index, %x: memref<?xf32>, %out: memref<?xf32>, %flags: memref<?xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %two = arith.constant 2.0 : f32
  %m1 = arith.constant -1.0 : f32
  %one = arith.constant 1 : i64
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %x[%i] : memref<?xf32>
    %pos = arith.cmpf ogt, %v, %zero : f32
    %r = scf.if %pos -> (f32) {
      %d = arith.mulf %v, %two : f32
      scf.yield %d : f32
    } else {
      %rem = arith.remui %i, %c2 : index
      %even = arith.cmpi eq, %rem, %c0 : index
      %e = scf.if %even -> (f32) {
        %s = scf.for %j = %c0 to %i step %c1 iter_args(%acc = %zero) -> (f32) {
          %w = memref.load %x[%j] : memref<?xf32>
          %acc2 = arith.addf %acc, %w : f32
          scf.yield %acc2 : f32
        }
        scf.yield %s : f32
      } else {
        scf.yield %m1 : f32
      }
      scf.yield %e : f32
    }
    memref.store %r, %out[%i] : memref<?xf32>
    %nan = arith.cmpf uno, %v, %v : f32
    scf.if %nan {
      memref.store %one, %flags[%i] : memref<?xi64>
    }
  }
  func.return
}

// out[i] = x[n - 1 - i] * 2 through a scratch buffer of dynamic size n (entry-block alloca),
// and prefix[i] = sum x[0..i] through a per-iteration buffer of size i + 1 (alloca in place)
func.func @scratch(%n: index, %x: memref<?xf32>, %out: memref<?xf32>, %prefix: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %two = arith.constant 2.0 : f32
  %zero = arith.constant 0.0 : f32
  %tmp = memref.alloca(%n) : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %x[%i] : memref<?xf32>
    %d = arith.mulf %v, %two : f32
    memref.store %d, %tmp[%i] : memref<?xf32>
  }
  %last = arith.subi %n, %c1 : index
  scf.for %i = %c0 to %n step %c1 {
    %k = arith.subi %last, %i : index
    %v = memref.load %tmp[%k] : memref<?xf32>
    memref.store %v, %out[%i] : memref<?xf32>
    %len = arith.addi %i, %c1 : index
    %buf = memref.alloca(%len) : memref<?xf32>
    scf.for %j = %c0 to %len step %c1 {
      %w = memref.load %x[%j] : memref<?xf32>
      memref.store %w, %buf[%j] : memref<?xf32>
    }
    %s = scf.for %j = %c0 to %len step %c1 iter_args(%acc = %zero) -> (f32) {
      %w = memref.load %buf[%j] : memref<?xf32>
      %acc2 = arith.addf %acc, %w : f32
      scf.yield %acc2 : f32
    }
    memref.store %s, %prefix[%i] : memref<?xf32>
  }
  func.return
}

func.func private @llabs(i64) -> i64
func.func private @sqrt(f64) -> f64

func.func private @twice(%v: i64) -> i64 {
  %r = arith.addi %v, %v : i64
  func.return %r : i64
}

func.func @calls(%a: i64, %b: f64, %out: memref<?xf64>) -> i64 {
  %c0 = arith.constant 0 : index
  %abs = func.call @llabs(%a) : (i64) -> i64
  %r = func.call @twice(%abs) : (i64) -> i64
  %s = func.call @sqrt(%b) : (f64) -> f64
  memref.store %s, %out[%c0] : memref<?xf64>
  func.return %r : i64
}

func.func @answer() -> i32 {
  %c = arith.constant 42 : i32
  func.return %c : i32
}

func.func @sum_strict(%n: index, %x: memref<?xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) {
    %v = memref.load %x[%i] : memref<?xf32>
    %acc2 = arith.addf %acc, %v : f32
    scf.yield %acc2 : f32
  }
  func.return %s : f32
}

func.func @sum_reassoc(%n: index, %x: memref<?xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) {
    %v = memref.load %x[%i] : memref<?xf32>
    %acc2 = arith.addf %acc, %v fastmath<reassoc,contract> : f32
    scf.yield %acc2 : f32
  }
  func.return %s : f32
}
"""


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    return build_so(parse(CONTROL), tmp_path_factory.mktemp("control"), "control")


def _reduce(lib, x, lb, ub, step):
    out = np.zeros(3, np.float32)
    lib.reduce.argtypes = [ctypes.c_int64] * 3 + [ctypes.c_void_p] * 2
    lib.reduce.restype = ctypes.c_int64
    count = lib.reduce(lb, ub, step, ptr(x), ptr(out))
    return count, out


@needs_cc
def test_loop_iter_args_sum_and_max(control):
    lib = control[0]
    rng = np.random.default_rng(5)
    x = rng.standard_normal(100).astype(np.float32)
    count, out = _reduce(lib, x, 3, 97, 5)
    part = x[3:97:5]
    assert count == len(part)
    np.testing.assert_allclose(out[0], part.astype(np.float64).sum(), rtol=1e-5)
    assert out[1] == part.max() and out[2] == part.max()
    x[8] = np.nan  # inside x[3:97:5]
    count, out = _reduce(lib, x, 3, 97, 5)
    assert np.isnan(out[0]) and np.isnan(out[1]), "sum and maximumf must propagate NaN"
    assert out[2] == np.nanmax(x[3:97:5]), "maxnumf ignores NaN"
    count, out = _reduce(lib, x, 10, 10, 1)  # empty loop: the initial values
    assert count == 0 and out[0] == 0 and out[1] == -np.inf


@needs_cc
def test_nested_loops(control):
    lib = control[0]
    x = np.random.default_rng(6).standard_normal(7 * 13)
    out = np.zeros(7)
    lib.row_sums.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    lib.row_sums(7, 13, ptr(x), ptr(out))
    np.testing.assert_allclose(out, x.reshape(7, 13).sum(axis=1), rtol=1e-12)


@needs_cc
def test_if_with_results_and_without_else(control):
    lib = control[0]
    x = np.random.default_rng(7).standard_normal(50).astype(np.float32)
    x[[5, 20]] = np.nan
    out = np.zeros_like(x)
    flags = np.zeros(50, np.int64)
    lib.branches.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 3
    lib.branches(50, ptr(x), ptr(out), ptr(flags))
    want = np.empty_like(x)
    for i, v in enumerate(x):
        if v > 0:
            want[i] = 2 * v
        elif i % 2 == 0:
            want[i] = np.float32(sum(x[:i].astype(np.float64)))  # may be NaN after x[5]
        else:
            want[i] = -1
    np.testing.assert_allclose(out, want, rtol=1e-5, equal_nan=True)
    np.testing.assert_array_equal(flags, np.isnan(x).astype(np.int64))


@needs_cc
def test_alloca(control):
    lib, _, text, _, _ = control
    x = np.random.default_rng(8).standard_normal(40).astype(np.float32)
    out, prefix = np.zeros_like(x), np.zeros_like(x)
    lib.scratch.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 3
    lib.scratch(40, ptr(x), ptr(out), ptr(prefix))
    np.testing.assert_array_equal(out, 2 * x[::-1])
    np.testing.assert_allclose(prefix, np.cumsum(x.astype(np.float64)), rtol=1e-5, atol=1e-5)
    fn = function_text(text, "scratch")
    entry = fn.split("entry:", 1)[1].split("br label", 1)[0]  # the entry block, up to its branch
    assert fn.count("alloca") == 2
    assert entry.count("alloca float, i64 %") == 1, "the alloca sized by an argument belongs in the entry block"


@needs_cc
def test_calls_and_return_values(control):
    lib = control[0]
    out = np.zeros(1)
    lib.calls.argtypes = [ctypes.c_int64, ctypes.c_double, ctypes.c_void_p]
    lib.calls.restype = ctypes.c_int64
    assert lib.calls(-21, 2.0, ptr(out)) == 42
    assert out[0] == np.sqrt(2.0)
    lib.answer.restype = ctypes.c_int32
    assert lib.answer() == 42
    with pytest.raises(AttributeError):
        lib.twice  # noqa: B018 - internal symbols are not exported


@needs_cc
def test_fastmath_only_where_asked(control):
    lib, _, text, opt, _ = control
    assert re.search(r"fadd reassoc contract float", function_text(text, "sum_reassoc"))
    strict = function_text(text, "sum_strict")
    # every fadd may fuse a product into it (`contract`), and that is all the strict one allows
    assert re.search(r"fadd contract float", strict) and "reassoc" not in strict and " fast " not in strict
    # reassociation lets LLVM vectorise the reduction; strict IEEE order keeps it scalar
    assert re.search(r"fadd reassoc contract <\d+ x float>", function_text(opt, "sum_reassoc"))
    assert not re.search(r"fadd <\d+ x float>", function_text(opt, "sum_strict"))
    x = np.random.default_rng(9).standard_normal(1001).astype(np.float32)
    for name in ("sum_strict", "sum_reassoc"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_int64, ctypes.c_void_p]
        fn.restype = ctypes.c_float
        np.testing.assert_allclose(fn(1001, ptr(x)), x.astype(np.float64).sum(), rtol=1e-4, atol=1e-4)


def test_nontemporal_and_pointer_arguments():
    module = parse(
        """
        func.func @f(%b: memref<?xf32> {llvm.nocapture, llvm.align = 64 : i64}, %i: index, %p: !llvm.ptr) {
          %v = memref.load %b[%i] {nontemporal = true} : memref<?xf32>
          memref.store %v, %b[%i] {nontemporal = true} : memref<?xf32>
          func.return
        }
        """
    )
    text = str(translate_module(module))
    assert re.search(r"ptr captures\(none\) align 64 %", text)
    assert text.count("!nontemporal") == 2
    bad = parse("func.func @g(%b: memref<?xf32> {llvm.byval = f32}) {\n func.return\n}")
    with pytest.raises(CompileError, match="llvm.byval"):
        translate_module(bad)


def test_fastmath_flags_map_to_llvm():
    module = parse(
        """
        func.func @f(%a: f32, %b: f32) -> f32 {
          %x = arith.mulf %a, %b fastmath<fast> : f32
          %y = arith.addf %x, %b fastmath<nnan,ninf> : f32
          %z = math.exp %y fastmath<afn> : f32
          %w = arith.maximumf %z, %a : f32
          func.return %w : f32
        }
        """
    )
    text = str(translate_module(module))
    assert "fmul fast float" in text
    assert "fadd nnan ninf contract float" in text
    assert re.search(r"call afn float @\"?llvm\.exp\.f32", text)
    assert re.search(r"call float @\"?llvm\.maximum\.f32", text)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "body, op_name",
    [
        ("%r = math.atan %a : f32", "math.atan"),
        ("%r = arith.ceildivsi %i, %i : i64", "arith.ceildivsi"),
        ("%r = scf.while (%v = %a) : (f32) -> f32 {\n scf.condition(%t) %v : f32\n} do {\n^b(%w: f32):\n scf.yield %w : f32\n}",
         "scf.while"),
    ],
)  # fmt: skip
def test_unknown_op_raises_compile_error(body, op_name):
    module = parse(
        f"""
        func.func @f(%a: f32, %i: i64, %t: i1) {{
          {body}
          func.return
        }}
        """
    )
    with pytest.raises(CompileError, match=re.escape(f"'{op_name}'")):
        translate_module(module)


def test_unsupported_structure_raises_compile_error():
    multi_block = parse(
        """
        func.func @f(%a: i64) -> i64 {
          cf.br ^next
        ^next:
          func.return %a : i64
        }
        """
    )
    with pytest.raises(CompileError, match="single-block"):
        translate_module(multi_block)
    two_d = parse(
        """
        func.func @g(%m: memref<4x4xf32>) {
          func.return
        }
        """
    )
    with pytest.raises(CompileError, match="1-D"):
        translate_module(two_d)


def test_module_level_op_raises_compile_error():
    module = parse('%0 = "arith.constant"() <{value = 1 : i64}> : () -> i64')
    with pytest.raises(CompileError, match="arith.constant"):
        translate_module(module)


@needs_cc
@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_opt_levels_and_text_input(tmp_path, opt_level):
    """optimize_and_emit takes LLVM IR text as well as an llvmlite module, at any -O level."""
    text = str(translate_module(saxpy_module()))
    opt, obj, asm = codegen.optimize_and_emit(text, codegen.resolve_cpu("native"), opt_level)
    assert "define" in opt and obj and "saxpy" in asm
    codegen.link_shared_object(obj, tmp_path / "o.so")
    got, want = run_saxpy(ctypes.CDLL(str(tmp_path / "o.so")))
    assert_saxpy(got, want)


def test_bad_llvm_ir_is_a_compile_error():
    with pytest.raises(CompileError, match="does not parse"):
        codegen.optimize_and_emit("define void @f( {", codegen.resolve_cpu("native"))
    with pytest.raises(CompileError, match="does not verify"):
        codegen.optimize_and_emit(
            "define i32 @f() {\nentry:\n  %a = add i32 %b, 1\n  %b = add i32 1, 1\n  ret i32 %a\n}\n",
            codegen.resolve_cpu("native"),
        )


# ---------------------------------------------------------------- CPU levels


def test_resolve_native():
    target = codegen.resolve_cpu("native")
    assert target.level == "native" and target.name
    md = target.metadata()
    assert md["level"] == "native" and md["name"] == target.name
    host = native.host_cpu_flags()
    if host is not None:
        assert set(md["features"]) <= host  # native code always runs where it was built


@x86_only
@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_resolve_levels(level):
    target = codegen.resolve_cpu(level)
    assert target.name == level
    feats = set(target.metadata()["features"])
    assert {"sse4_1", "sse4_2", "ssse3", "popcnt", "cx16"} <= feats
    assert ({"avx", "avx2", "bmi1", "bmi2", "fma", "f16c", "abm", "movbe", "xsave"} <= feats) == (level != "x86-64-v2")
    assert ({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= feats) == (level == "x86-64-v4")
    target.target_machine()  # LLVM knows the CPU name


def test_unknown_level():
    with pytest.raises(CompileError, match=r"x86-64-v2, x86-64-v3, x86-64-v4"):
        codegen.resolve_cpu("pentium-mmx")


@needs_cc
@x86_only
@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_compile_for_level(tmp_path, level):
    host = native.host_cpu_flags() or frozenset()
    target = codegen.resolve_cpu(level)
    ir_module = translate_module(saxpy_module())
    codegen.embed_metadata(ir_module, {**METADATA, "cpu": target.metadata()})
    _, obj, asm = codegen.optimize_and_emit(ir_module, target)
    if level == "x86-64-v2":
        assert "ymm" not in asm and "zmm" not in asm
    else:
        assert "ymm" in asm
    path = tmp_path / f"{level}.so"
    codegen.link_shared_object(obj, path)
    lib, md = native.open_shared_object(path)
    assert md["cpu"]["level"] == level
    if not set(md["cpu"]["features"]) <= host:
        with pytest.raises(ToolchainError, match=level):
            native.check_cpu_features(md)
        return
    native.check_cpu_features(md)
    got, want = run_saxpy(lib)
    assert_saxpy(got, want)


# ---------------------------------------------------------------- metadata and loading


@needs_cc
def test_metadata_round_trip(tmp_path):
    record = {
        "format": "gnnc-shared-object",
        "abi_version": 1,
        "kernels": [{"name": "gat", "dtype": "f32", "params": ["h", "el"], "note": 'quotes " and \\ and ünïcode'}],
        "cpu": codegen.resolve_cpu("native").metadata(),
    }
    lib, md, text, opt, _ = build_so(saxpy_module(), tmp_path, metadata=record)
    assert md == record
    assert "@gnnc_metadata" in opt and "@gnnc_metadata_size" in opt
    with pytest.raises(CompileError):  # once per module
        ir_module = translate_module(saxpy_module())
        codegen.embed_metadata(ir_module, record)
        codegen.embed_metadata(ir_module, record)


@needs_cc
def test_missing_cpu_feature_refused_before_any_call(tmp_path):
    target = codegen.resolve_cpu("native")
    cpu = {**target.metadata(), "level": "x86-64-v9", "features": ["sse4_2", "avx9000"]}
    ir_module = translate_module(saxpy_module())
    codegen.embed_metadata(ir_module, {**METADATA, "cpu": cpu})
    _, obj, _ = codegen.optimize_and_emit(ir_module, target)
    path = tmp_path / "future.so"
    codegen.link_shared_object(obj, path)
    if native.host_cpu_flags() is None:
        pytest.skip("no /proc/cpuinfo")
    # the runtime's sequence: open (runs none of our code), check, and only then call
    lib, md = native.open_shared_object(path)
    with pytest.raises(ToolchainError) as info:
        native.check_cpu_features(md)
    message = str(info.value)
    assert "x86-64-v9" in message and "avx9000" in message and "lacks avx9000" in message
    assert "recompile with --cpu native" in message
    assert "sse4_2" not in message.split("lacks", 1)[1]
    # and the runtime's Module refuses it the same way, before it looks up any kernel
    from gnnc.runtime.module import Module

    with pytest.raises(ToolchainError, match="lacks avx9000"):
        Module(path)


def _build_c_so(tmp_path, name: str, source: str):
    c = tmp_path / f"{name}.c"
    c.write_text(source)
    so = tmp_path / f"{name}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(c)], check=True, capture_output=True)
    return so


@needs_cc
def test_non_gnnc_shared_object(tmp_path):
    plain = _build_c_so(tmp_path, "plain", "int add(int a, int b) { return a + b; }\n")
    with pytest.raises(ToolchainError, match="not a gnnc shared object"):
        native.open_shared_object(plain)
    garbled = _build_c_so(
        tmp_path, "garbled",
        'const char gnnc_metadata[] = "{not json";\nconst long long gnnc_metadata_size = 9;\n',
    )  # fmt: skip
    with pytest.raises(ToolchainError, match="not a gnnc shared object"):
        native.open_shared_object(garbled)
    wrong_size = _build_c_so(
        tmp_path, "wrong_size",
        'const char gnnc_metadata[] = "{}";\nconst long long gnnc_metadata_size = 1;\n',
    )  # fmt: skip
    with pytest.raises(ToolchainError, match="not a gnnc shared object"):
        native.open_shared_object(wrong_size)
    with pytest.raises(ToolchainError, match="no such shared object"):
        native.open_shared_object(tmp_path / "missing.so")
    not_elf = tmp_path / "text.so"
    not_elf.write_text("hello")
    with pytest.raises(ToolchainError, match="cannot load"):
        native.open_shared_object(not_elf)


def test_check_cpu_features_without_cpuinfo(monkeypatch):
    monkeypatch.setattr(native, "host_cpu_flags", lambda: None)
    with pytest.warns(RuntimeWarning, match="not checking"):
        native.check_cpu_features({"cpu": {"level": "x86-64-v4", "features": ["avx512f"]}})


def test_runtime_loader_imports_no_compiler():
    code = "import sys, gnnc.runtime.native; bad = {'xdsl', 'llvmlite'} & {m.split('.')[0] for m in sys.modules}; assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(__file__)))


# ---------------------------------------------------------------- linking


def _object():
    target = codegen.resolve_cpu("native")
    return codegen.optimize_and_emit(translate_module(saxpy_module()), target)[1]


@needs_cc
def test_link_errors_are_toolchain_errors(tmp_path, monkeypatch):
    obj = _object()
    out = tmp_path / "x.so"
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(ToolchainError, match="no C compiler"):
        codegen.link_shared_object(obj, out)
    monkeypatch.setenv("CC", "cc")
    with pytest.raises(ToolchainError, match=r"linking failed.*cc -shared"):
        codegen.link_shared_object(b"this is not an object file", out)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [], "a failed link leaves nothing behind"


@needs_cc
def test_link_without_libgomp(tmp_path, monkeypatch):
    """A toolchain without libgomp still links kernels that call no GOMP_ symbol."""
    fake = tmp_path / "fakecc"
    fake.write_text(
        '#!/bin/sh\nfor a in "$@"; do [ "$a" = -lgomp ] && { echo "ld: cannot find -lgomp" >&2; exit 1; }; done\n'
        'exec cc "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    out = tmp_path / "serial.so"
    codegen.link_shared_object(_object(), out)
    got, want = run_saxpy(ctypes.CDLL(str(out)))
    assert_saxpy(got, want)
    parallel = parse(
        """
        func.func private @GOMP_barrier()
        func.func @f() {
          func.call @GOMP_barrier() : () -> ()
          func.return
        }
        """
    )
    obj = codegen.optimize_and_emit(translate_module(parallel), codegen.resolve_cpu("native"))[1]
    with pytest.raises(ToolchainError, match="libgomp"):
        codegen.link_shared_object(obj, tmp_path / "parallel.so")
    assert not (tmp_path / "parallel.so").exists()


@needs_cc
def test_link_with_libgomp(tmp_path):
    parallel = parse(
        """
        func.func private @omp_get_max_threads() -> i32
        func.func @threads() -> i32 {
          %n = func.call @omp_get_max_threads() : () -> i32
          func.return %n : i32
        }
        """
    )
    obj = codegen.optimize_and_emit(translate_module(parallel), codegen.resolve_cpu("native"))[1]
    out = tmp_path / "omp.so"
    codegen.link_shared_object(obj, out)
    lib = ctypes.CDLL(str(out))
    lib.threads.restype = ctypes.c_int32
    assert lib.threads() >= 1


# ---------------------------------------------------------------- OpenMP through the same translation

PARALLEL = """
func.func private @GOMP_parallel(!llvm.ptr, memref<?xi64>, i32, i32)
func.func private @omp_get_thread_num() -> i32
func.func private @omp_get_num_threads() -> i32

// the outlined body: closure = [x, y, owner, n]; each thread takes one contiguous chunk
func.func private @saxpy_body(%closure: memref<?xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %x = llvm_ext.load_buffer %closure[%c0] : memref<?xi64> -> memref<?xf32>
  %y = llvm_ext.load_buffer %closure[%c1] : memref<?xi64> -> memref<?xf32>
  %owner = llvm_ext.load_buffer %closure[%c2] : memref<?xi64> -> memref<?xi64>
  %n64 = memref.load %closure[%c3] : memref<?xi64>
  %n = arith.index_cast %n64 : i64 to index
  %tid32 = func.call @omp_get_thread_num() : () -> i32
  %nt32 = func.call @omp_get_num_threads() : () -> i32
  %tid = arith.index_cast %tid32 : i32 to index
  %nt = arith.index_cast %nt32 : i32 to index
  %ntm1 = arith.subi %nt, %c1 : index
  %up = arith.addi %n, %ntm1 : index
  %chunk = arith.divui %up, %nt : index
  %lo = arith.muli %tid, %chunk : index
  %hi0 = arith.addi %lo, %chunk : index
  %hi = arith.minsi %hi0, %n : index
  %two = arith.constant 2.0 : f32
  %tid64 = arith.extsi %tid32 : i32 to i64
  scf.for %i = %lo to %hi step %c1 {
    %xv = memref.load %x[%i] : memref<?xf32>
    %yv = memref.load %y[%i] : memref<?xf32>
    %p = arith.mulf %two, %xv : f32
    %s = arith.addf %p, %yv : f32
    memref.store %s, %y[%i] : memref<?xf32>
    memref.store %tid64, %owner[%i] : memref<?xi64>
  }
  func.return
}

func.func @saxpy_parallel(%n: index, %x: memref<?xf32> {llvm.noalias, llvm.readonly},
                          %y: memref<?xf32> {llvm.noalias}, %owner: memref<?xi64> {llvm.noalias}, %threads: i32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %closure = memref.alloca(%c4) : memref<?xi64>
  llvm_ext.store_buffer %x, %closure[%c0] : memref<?xf32>, memref<?xi64>
  llvm_ext.store_buffer %y, %closure[%c1] : memref<?xf32>, memref<?xi64>
  llvm_ext.store_buffer %owner, %closure[%c2] : memref<?xi64>, memref<?xi64>
  %n64 = arith.index_cast %n : index to i64
  memref.store %n64, %closure[%c3] : memref<?xi64>
  %fn = llvm.mlir.addressof @saxpy_body : !llvm.ptr
  %flags = arith.constant 0 : i32
  func.call @GOMP_parallel(%fn, %closure, %threads, %flags) : (!llvm.ptr, memref<?xi64>, i32, i32) -> ()
  func.return
}
"""


@needs_cc
def test_gomp_parallel_with_closure(tmp_path):
    module = parse(PARALLEL)
    assert str(parse(str(module))) == str(module)  # the closure ops round-trip
    lib, _, text, _, _ = build_so(module, tmp_path, "parallel")
    assert re.search(r"call void @\"?GOMP_parallel\"?\(ptr @\"?saxpy_body\"?, ptr %", text)
    n = 10_000
    rng = np.random.default_rng(10)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    want = np.float32(2) * x + y
    owner = np.full(n, -1, np.int64)
    lib.saxpy_parallel.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]
    lib.saxpy_parallel(n, ptr(x), ptr(y), ptr(owner), 4)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    threads = set(np.unique(owner).tolist())
    assert threads == set(range(len(threads))), "every element was written by some thread"
    if not any(v in os.environ for v in ("OMP_THREAD_LIMIT", "OMP_DYNAMIC")):
        assert len(threads) == 4, "four threads each took a chunk"


def test_closure_op_verifiers():
    with pytest.raises(Exception, match="i64 slots"):
        parse(
            """
            func.func @f(%c: memref<?xf32>, %i: index) {
              %b = llvm_ext.load_buffer %c[%i] : memref<?xf32> -> memref<?xf32>
              func.return
            }
            """
        )


@pytest.mark.parametrize("name,tagged", [("attention", True), ("gcn", False), ("gat", False)])
def test_dot_reductions_are_not_interleaved(name, tagged):
    """A dot's loop carries interleave count 1 to LLVM (a 32-long dot otherwise missed the wide loop)."""
    from pathlib import Path

    from gnnc.driver import compiler

    path = Path(__file__).parent.parent / "examples" / f"{name}.gnn"
    stages = compiler.compile_source(path.read_text(), str(path), stop_after="llvm").stages
    assert ("gnnc.interleave_count = 1" in stages["convert-loop-to-scf"]) == tagged
    assert ('!"llvm.loop.interleave.count", i32 1' in stages["translate-to-llvm"]) == tagged


@pytest.mark.parametrize(
    "name,schedule",
    [
        ("sage_max", "vectorize 32\nprefetch 0"),  # vectorised across edges: 3-4x slower
        ("gat", "prefetch 0"),
        ("gcn", None),
    ],
)
def test_row_walks_are_not_vectorized_across_edges(name, schedule):
    """Every in-edge walk over rows tells LLVM not to vectorise it across edges."""
    from pathlib import Path

    from gnnc.driver import compiler

    path = Path(__file__).parent.parent / "examples" / f"{name}.gnn"
    options = compiler.CompileOptions(schedule=schedule)
    stages = compiler.compile_source(path.read_text(), str(path), options, stop_after="llvm").stages
    walks = stages["convert-loop-to-openmp"].count("loop.for_in_edges")
    assert walks >= 1
    scf_text = stages["convert-loop-to-scf"]
    # the tag follows the closing brace of each walk, whose body ends in a yield
    assert scf_text.count("} {gnnc.no_vectorize}") >= walks
    assert '!"llvm.loop.vectorize.enable", i1 0' in stages["translate-to-llvm"]


LITERAL_GAT = """kernel gat(h: f32[V, 4, 32], el: f32[V, 4], er: f32[V, 4]) -> (out: f32[V, 4, 32], alpha: f32[E, 4]) {
    s[e]     = leaky_relu(el[u] + er[v], 0.2)
    alpha[e] = softmax(s[e])
    out[v]   = sum(alpha[e] * h[u])
}
"""
LITERAL_ATTENTION = """kernel attention(q: f32[V, 4, 32], k: f32[V, 4, 32]) -> f32[E, 4] {
    out[e] = dot(q[v], k[u])
}
"""


@pytest.mark.parametrize("source", [LITERAL_GAT, LITERAL_ATTENTION], ids=["gat", "attention"])
def test_literal_sizes_keep_rows_in_vector_lanes(source):
    """With literal sizes, LLVM vectorised gat's head loop (a gather and a scatter per
    feature: 3.5x slower) and left attention's unrolled dot a chain of scalar FMAs
    (2.6x slower); head loops are tagged not to vectorise, dots not to unroll."""
    import re

    from gnnc.driver import compiler

    result = compiler.compile_source(source, "literal.gnn", stop_after="asm")
    scf_text = result.stages["convert-loop-to-scf"]
    assert "gnnc.no_unroll" in scf_text or "dot" not in source
    assert '!"llvm.loop.unroll.disable"' in result.stages["translate-to-llvm"] or "dot" not in source
    asm = result.stages["emit-asm"]
    assert not re.search(r"\bvgather|\bvscatter", asm)
    # the rows are summed or dotted 8 or 16 lanes at a time (LLVM takes 256-bit vectors on
    # Intel CPUs with AVX-512 unless told otherwise, 512-bit ones on AMD's)
    assert re.search(r"\bv(fmadd\w*|mul|add)ps\s+[^\n]*%[yz]mm", asm)


def test_scalar_walks_may_vectorize():
    """A walk of one value per edge has no row loop and keeps LLVM's choice."""
    from gnnc.driver import compiler

    source = "kernel wsum(w: f32[E]) -> f32[V] {\n    out[v] = sum(w[e])\n}\n"
    options = compiler.CompileOptions(schedule="prefetch 0")  # the prefetch loop walks a row's cache lines
    stages = compiler.compile_source(source, "wsum.gnn", options, stop_after="llvm").stages
    assert stages["convert-loop-to-openmp"].count("loop.for_in_edges") >= 1
    assert "gnnc.no_vectorize" not in stages["convert-loop-to-scf"]
    assert "llvm.loop.vectorize.enable" not in stages["translate-to-llvm"]


# ---------------------------------------------------------------- alias scopes


def test_noalias_buffers_get_alias_scopes():
    """Every access through a noalias buffer names its scope and the other buffers'."""
    text = str(translate_module(saxpy_module(prefetch=True)))
    accesses = [
        line for line in text.splitlines() if re.search(r'\bload float|\bstore float|call void @"?llvm\.prefetch', line)
    ]
    assert len(accesses) == 5  # x, y, y and the two prefetches
    for line in accesses:
        assert re.search(r"!alias\.scope !\d+, !noalias !\d+", line), line
    scopes = {re.search(r"!alias\.scope (!\d+)", line).group(1) for line in accesses}
    assert len(scopes) == 2, "x and y each have a scope of their own"


@needs_cc
def test_prefetches_leave_accumulators_in_registers():
    """Once inlined into its OpenMP caller, a worker's prefetch calls looked to LLVM as if
    they could read a streamed row (its address is tested for alignment), and LICM kept
    the row's 16 vector stores in every edge's iteration (gat, 4 heads of 32 floats)."""
    from pathlib import Path

    from gnnc.driver import compiler

    path = Path(__file__).parent.parent / "examples" / "gat.gnn"
    options = compiler.CompileOptions(schedule="prefetch 15\nspecialize H 4 F 32\nreorder rcm\nstream outputs")
    opt = compiler.compile_source(path.read_text(), str(path), options, stop_after="asm").stages["llvm-opt"]
    blocks = re.split(r"\n(?=[\w.]+:)", opt)
    walks = [
        b
        for b in blocks
        if "@llvm.prefetch" in b
        and re.search(r"fmul contract <\d+ x float>", b)
        and re.search(r"br i1 [^\n]*label %" + re.escape(b.split(":")[0]) + r"\b", b)
    ]
    assert walks, "the in-edge walk that gathers h is one block"
    for walk in walks:
        # alpha's store and the weight's are scalar rows of 4; the accumulators stay in registers
        assert len(re.findall(r"\bstore <(8|16) x float>", walk)) == 0, walk
