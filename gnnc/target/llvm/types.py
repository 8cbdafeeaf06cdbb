"""LLVM types of xDSL types, shared by the translator and its lane (vector) half."""

from __future__ import annotations

import llvmlite.ir as ir
from xdsl.dialects import builtin
from xdsl.dialects import llvm as llvm_dialect
from xdsl.ir import Attribute

from gnnc.errors import CompileError

I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()


def convert_type(t: Attribute) -> ir.Type:
    """The LLVM type of an xDSL value type; every buffer is an opaque pointer."""
    if isinstance(t, builtin.IndexType):
        return I64
    if isinstance(t, builtin.IntegerType):
        return ir.IntType(t.width.data)
    if isinstance(t, builtin.Float32Type):
        return ir.FloatType()
    if isinstance(t, builtin.Float64Type):
        return ir.DoubleType()
    if isinstance(t, builtin.Float16Type):
        return ir.HalfType()
    if isinstance(t, llvm_dialect.LLVMPointerType):  # an opaque handle, e.g. a closure for GOMP
        return PTR
    if isinstance(t, builtin.MemRefType):
        if t.get_num_dims() != 1:
            raise CompileError(f"only 1-D buffers reach the CPU backend, got {t}")
        return PTR
    raise CompileError(f"type {t} has no LLVM translation in gnnc")


def element_type(t: Attribute) -> tuple[ir.Type, int]:
    """The element type of a 1-D buffer and its natural alignment in bytes."""
    if not isinstance(t, builtin.MemRefType) or t.get_num_dims() != 1:
        raise CompileError(f"expected a 1-D memref, got {t}")
    elem = convert_type(t.element_type)
    return elem, byte_size(elem)


def byte_size(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return max(1, t.width // 8)
    return {ir.HalfType: 2, ir.FloatType: 4, ir.DoubleType: 8}[type(t)]


def type_suffix(t: ir.Type) -> str:
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{type_suffix(t.element)}"
    return {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}[type(t)]
