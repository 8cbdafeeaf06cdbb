"""Translate gnnc's lowered IR (func / scf / arith / math / memref / llvm_ext) to LLVM IR.

xDSL 0.74 has no arith / func / scf / memref -> llvm conversions that fit gnnc,
so the structured dialects go straight to `llvmlite.ir`, here and nowhere else.

The contract with the lowering:
- A `builtin.module` of `func.func` ops. Defined ones are kernels; declared
  (body-less, private) ones are external C functions reached by `func.call`.
- Arguments are flat 1-D buffers (`memref<?xT>` -> an opaque `ptr`, indexed by
  one `index`) and scalars (`iN`, `index` = i64, `f32`, `f64`). An argument
  dictionary may carry `llvm.noalias`, `llvm.readonly`, `llvm.nocapture`, ...,
  which become LLVM parameter attributes.
- Bodies are one block of `scf.for` / `scf.if` / `arith` / `math` / `memref`
  / `llvm_ext` ops ending in `func.return`.
- Each `llvm.noalias` buffer argument is an alias scope of its own: every
  load, store, prefetch and lane access through one says so (`!alias.scope`,
  `!noalias`), which the parameter attribute alone stops saying once LLVM
  inlines the function (`FunctionTranslator._scope_noalias_arguments`).
- A function carrying `gnnc.simd_bits = W` (a schedule's `simd W`) gets
  LLVM's `"prefer-vector-width"="W"`.
- For OpenMP: `llvm.mlir.addressof @fn : !llvm.ptr` gives a function's address
  (`!llvm.ptr` is an opaque pointer anywhere), and `llvm_ext.store_buffer` /
  `llvm_ext.load_buffer` pass buffers through a `memref<?xi64>` closure, so
  `GOMP_parallel(fn, closure, threads, 0)` is an ordinary `func.call`.

Floating point is IEEE arithmetic with one liberty C compilers take by default
(GCC's -ffp-contract=fast): a product feeding a sum or difference may be
fused into one FMA, rounded once (`contract` on every fadd / fsub / fmul).
A row accumulation `acc + w * x[u]` is then one instruction per vector instead
of two, which narrow rows are bound by. Other flags come only from an op's
`arith.fastmath` attribute, copied onto the LLVM instruction; that is how the
lowering allows reassociation of one particular reduction. Any op not in the
tables below is a `CompileError` naming it: nothing is ever skipped.

Why these choices (FMA contraction, alias scopes, vector widths), with the
measurements: docs/design/llvm-translation.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import llvmlite.binding as llvm
import llvmlite.ir as ir
from xdsl.dialects import arith, builtin, func, math, memref, scf
from xdsl.dialects import llvm as llvm_dialect
from xdsl.dialects.utils.fast_math import FastMathAttrBase
from xdsl.ir import Block, Operation, Region, SSAValue

from gnnc.errors import CompileError
from gnnc.ir.abi import INTERLEAVE_ATTR, NO_UNROLL_ATTR, NO_VECTORIZE_ATTR, SIMD_BITS_ATTR
from gnnc.ir.llvm_ext import (
    AtomicRmwOp,
    BarrierOp,
    LoadBufferOp,
    NvvmSregOp,
    PrefetchOp,
    SharedMemoryOp,
    ShflBflyOp,
    StoreBufferOp,
    StoreFenceOp,
    StreamCopyOp,
)
from gnnc.ir.loop import LanesOp
from gnnc.ir.loop_structure import constant_index
from gnnc.target.llvm.lanes import LanesTranslator
from gnnc.target.llvm.types import I1, I32, I64, PTR, byte_size, convert_type, element_type, type_suffix

# ---------------------------------------------------------------- argument attributes


class _ArgAttributes(ir.values.ArgumentAttributes):
    """llvmlite's parameter attributes plus the memory ones it does not list."""

    _known = {**ir.values.ArgumentAttributes._known, "readonly": False, "writeonly": False, "readnone": False}


#: `llvm.*` argument-dictionary keys that become flag parameter attributes.
_ARG_FLAGS = {
    "llvm.noalias": "noalias",
    "llvm.readonly": "readonly",
    "llvm.writeonly": "writeonly",
    "llvm.nocapture": "captures(none)",
    "llvm.nonnull": "nonnull",
    "llvm.noundef": "noundef",
    "llvm.nofree": "nofree",
}
_ARG_INTS = {"llvm.align": "align", "llvm.dereferenceable": "dereferenceable"}


def _set_arg_attributes(arg: ir.Argument, attrs: builtin.DictionaryAttr, where: str) -> None:
    arg.attributes = _ArgAttributes()
    for key, value in attrs.data.items():
        if key in _ARG_FLAGS:
            arg.attributes.add(_ARG_FLAGS[key])
        elif key in _ARG_INTS:
            if not isinstance(value, builtin.IntegerAttr):
                raise CompileError(f"{where}: argument attribute '{key}' needs an integer, got {value}")
            setattr(arg.attributes, _ARG_INTS[key], value.value.data)
        elif key.startswith("llvm."):
            raise CompileError(f"{where}: argument attribute '{key}' has no LLVM translation in gnnc")
        # other dialects' argument attributes are annotations for earlier passes


class _FunctionAttributes(ir.values.FunctionAttributes):
    """llvmlite's function attributes plus quoted `"key"="value"` string attributes."""

    def add(self, name: str) -> None:
        if name.startswith('"'):
            set.add(self, name)
        else:
            super().add(name)


# ---------------------------------------------------------------- fast-math


#: The order LLVM prints fast-math flags in (arith's flags have the same names).
_LLVM_FASTMATH_ORDER = ("reassoc", "nnan", "ninf", "nsz", "arcp", "contract", "afn")


def _fastmath(op: Operation) -> tuple[str, ...]:
    """The LLVM fast-math flags of `op`: those of its `fastmath` attribute, else none."""
    attr = op.properties.get("fastmath") or op.attributes.get("fastmath")
    if attr is None:
        return ()
    if not isinstance(attr, FastMathAttrBase):
        raise CompileError(f"'{op.name}': attribute 'fastmath' must be #arith.fastmath, got {attr}")
    flags = {str(f.value) for f in attr.data}
    if flags >= set(_LLVM_FASTMATH_ORDER):
        return ("fast",)
    return tuple(f for f in _LLVM_FASTMATH_ORDER if f in flags)


def _overflow(op: Operation) -> tuple[str, ...]:
    attr = op.properties.get("overflowFlags")
    if attr is None:
        return ()
    return tuple(sorted(str(f.value) for f in cast(arith.IntegerOverflowAttr, attr).data))


# ---------------------------------------------------------------- the translator


class FunctionTranslator:
    """Translates the body of one `func.func` into an `ir.Function`."""

    def __init__(self, module: ir.Module, op: func.FuncOp, fn: ir.Function):
        self.module = module
        self.op = op
        self.fn = fn
        self.values: dict[SSAValue, ir.Value] = {}
        self.entry = fn.append_basic_block("entry")
        self.builder = ir.IRBuilder(self.entry)
        self.top_block: Block | None = None
        #: noalias buffer argument -> its (!alias.scope, !noalias) lists
        self.alias_tags: dict[SSAValue, tuple[ir.MDValue, ir.MDValue]] = {}

    # -- helpers used by the op translators

    def get(self, value: SSAValue) -> ir.Value:
        try:
            return self.values[value]
        except KeyError:
            raise CompileError(f"@{self.name}: value {value} used before it is defined") from None

    def set(self, op: Operation, results: Sequence[ir.Value]) -> None:
        if len(results) != len(op.results):
            raise CompileError(
                f"'{op.name}' in @{self.name}: produced {len(results)} values for {len(op.results)} results"
            )
        for r, v in zip(op.results, results):
            self.values[r] = v

    @property
    def name(self) -> str:
        return self.op.sym_name.data

    def new_block(self, label: str) -> ir.Block:
        return self.fn.append_basic_block(label)

    def intrinsic(self, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
        return _declare(self.module, name, ir.FunctionType(ret, args))

    def call_intrinsic(self, base: str, args: Sequence[ir.Value], flags: tuple[str, ...] = ()) -> ir.Value:
        """`llvm.<base>.<type>` on operands of one type, e.g. llvm.maximum.f32."""
        t = args[0].type
        fn = self.intrinsic(f"llvm.{base}.{type_suffix(t)}", t, [a.type for a in args])
        return self.builder.call(fn, list(args), fastmath=flags)

    # -- translation

    def translate(self) -> None:
        body = self.op.body
        if len(body.blocks) != 1:
            raise CompileError(
                f"@{self.name}: the CPU backend takes single-block function bodies (structured control flow "
                f"only), got {len(body.blocks)} blocks"
            )
        block = body.block
        self.top_block = block
        for arg, llarg in zip(block.args, self.fn.args):
            self.values[arg] = llarg
        self._scope_noalias_arguments(block)
        for op in block.ops:
            self.translate_op(op)
        if self.builder.block.terminator is None:
            raise CompileError(f"@{self.name}: body does not end with func.return")

    def _scope_noalias_arguments(self, block: Block) -> None:
        """One alias scope per `noalias` buffer argument, so that every access through
        one is known not to touch the others (see `tag_access`).

        The parameter attributes say as much, but once LLVM inlines a worker
        function into its caller it re-derives scopes for calls only where it can
        prove no pointer was captured before them. A buffer whose address is ever
        converted to an integer (a streamed row's alignment check) then looks as
        if a prefetch could read it, and LICM keeps the per-edge stores of a
        destination's accumulators in the loop: with 4 heads of 32 floats, 16
        vector stores per edge that the prefetch-free loop did not have.
        """
        attrs = self.op.arg_attrs.data if self.op.arg_attrs is not None else ()
        noalias = [
            arg
            for arg, arg_attrs in zip(block.args, attrs)
            if isinstance(arg.type, builtin.MemRefType) and "llvm.noalias" in arg_attrs.data
        ]
        if len(noalias) < 2:
            return
        md = self.module.add_metadata
        domain = md([ir.MetaDataString(self.module, f"gnnc.{self.name}")])
        scopes = {
            arg: md([ir.MetaDataString(self.module, f"gnnc.{self.name}.arg{arg.index}"), domain]) for arg in noalias
        }
        for arg in noalias:
            others = [scope for other, scope in scopes.items() if other is not arg]
            self.alias_tags[arg] = (md([scopes[arg]]), md(others))

    def tag_access(self, buf: SSAValue, instr: ir.Instruction) -> None:
        """Marks a load, store or prefetch through `buf` as touching its argument's scope only."""
        tags = self.alias_tags.get(buf)
        if tags is not None:
            instr.set_metadata("alias.scope", tags[0])
            instr.set_metadata("noalias", tags[1])

    def translate_op(self, op: Operation) -> None:
        handler = _HANDLERS.get(type(op))
        if handler is None:
            raise CompileError(
                f"cannot translate '{op.name}' to LLVM IR (in @{self.name}): gnnc's CPU backend does not support it"
            )
        handler(self, op)

    def translate_region(self, region: Region) -> list[ir.Value]:
        """Translates a single-block region ending in `scf.yield`; returns the yielded values."""
        if not region.blocks:
            return []
        if len(region.blocks) != 1:
            raise CompileError(f"@{self.name}: multi-block regions are not supported")
        block = region.block
        yielded: list[ir.Value] = []
        for op in block.ops:
            if isinstance(op, scf.YieldOp) and op is block.last_op:
                yielded = [self.get(v) for v in op.operands]
            else:
                self.translate_op(op)
        return yielded


def _declare(module: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, fnty, name=name)


# ---------------------------------------------------------------- func


def _func_return(t: FunctionTranslator, op: func.ReturnOp) -> None:
    if op.parent_block() is not t.top_block:
        raise CompileError(f"@{t.name}: func.return must end the function body")
    if not op.arguments:
        t.builder.ret_void()
    elif len(op.arguments) == 1:
        t.builder.ret(t.get(op.arguments[0]))
    else:
        raise CompileError(f"@{t.name}: functions return at most one value")


def _func_call(t: FunctionTranslator, op: func.CallOp) -> None:
    name = op.callee.root_reference.data
    callee = t.module.globals.get(name)
    if not isinstance(callee, ir.Function):
        raise CompileError(f"@{t.name} calls @{name}, which the module neither defines nor declares")
    args = [t.get(a) for a in op.arguments]
    if len(args) != len(callee.args):
        raise CompileError(f"@{t.name} calls @{name} with {len(args)} arguments, it takes {len(callee.args)}")
    call = t.builder.call(callee, args)
    t.set(op, [call] if op.res else [])


# ---------------------------------------------------------------- scf


def _loop_id(
    module: ir.Module, interleave: int | None = None, vectorize: bool = True, unroll: bool = True
) -> ir.values.MDValue:
    """A fresh `distinct !{self, !{"llvm.loop.mustprogress"}, ...}` loop identifier."""
    properties = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.mustprogress")])]
    if interleave is not None:
        properties.append(
            module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"), ir.Constant(I32, interleave)])
        )
    if not vectorize:
        properties.append(
            module.add_metadata(
                [ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.Constant(ir.IntType(1), 0)]
            )
        )
    if not unroll:
        properties.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]))
    return _LoopID(module, properties, name=str(len(module.metadata)))


class _LoopID(ir.values.MDValue):
    """A self-referential distinct metadata node, as loop metadata must be."""

    def descr(self, buf: list[str]) -> None:
        ops = ", ".join([self.get_reference(), *(o.get_reference() for o in self.operands)])
        buf += (f"distinct !{{ {ops} }}", "\n")


def _scf_for(t: FunctionTranslator, op: scf.ForOp) -> None:
    """header: iv, carried = phi; iv < ub ? body : exit.  body ... latch: iv += step."""
    b = t.builder
    lb, ub, step = t.get(op.lb), t.get(op.ub), t.get(op.step)
    inits = [t.get(v) for v in op.iter_args]
    preheader = b.block
    header, body, exit_ = t.new_block("for.header"), t.new_block("for.body"), t.new_block("for.exit")
    b.branch(header)

    b.position_at_end(header)
    iv = b.phi(lb.type, name="iv")
    iv.add_incoming(lb, preheader)
    carried = []
    for init in inits:
        phi = b.phi(init.type)
        phi.add_incoming(init, preheader)
        carried.append(phi)
    signed = not op.properties.get("unsignedCmp")
    cond = b.icmp_signed("<", iv, ub) if signed else b.icmp_unsigned("<", iv, ub)
    b.cbranch(cond, body, exit_)

    b.position_at_end(body)
    block = op.body.block
    t.values[block.args[0]] = iv
    for arg, phi in zip(block.args[1:], carried):
        t.values[arg] = phi
    yielded = t.translate_region(op.body)
    if len(yielded) != len(carried):
        raise CompileError(f"@{t.name}: scf.for yields {len(yielded)} values for {len(carried)} iter_args")
    latch = b.block
    # An scf.for whose induction variable overflows is undefined; saying so (nsw)
    # lets LLVM compute trip counts for non-unit steps.
    next_iv = b.add(iv, step, name="iv.next", flags=("nsw",) if signed else ("nuw",))
    backedge = b.branch(header)
    interleave = op.attributes.get(INTERLEAVE_ATTR)
    backedge.set_metadata(
        "llvm.loop",
        _loop_id(
            t.module,
            interleave.value.data if isinstance(interleave, builtin.IntegerAttr) else None,
            vectorize=NO_VECTORIZE_ATTR not in op.attributes,
            unroll=NO_UNROLL_ATTR not in op.attributes,
        ),
    )
    iv.add_incoming(next_iv, latch)
    for phi, v in zip(carried, yielded):
        phi.add_incoming(v, latch)

    b.position_at_end(exit_)
    t.set(op, carried)


def _scf_if(t: FunctionTranslator, op: scf.IfOp) -> None:
    b = t.builder
    cond = t.get(op.cond)
    has_else = bool(op.false_region.blocks)
    then_bb = t.new_block("if.then")
    else_bb = t.new_block("if.else") if has_else else None
    merge = t.new_block("if.end")
    b.cbranch(cond, then_bb, else_bb or merge)

    b.position_at_end(then_bb)
    then_vals = t.translate_region(op.true_region)
    then_end = b.block
    b.branch(merge)
    arms = [(then_vals, then_end)]
    if else_bb is not None:
        b.position_at_end(else_bb)
        else_vals = t.translate_region(op.false_region)
        arms.append((else_vals, b.block))
        b.branch(merge)
    elif op.output:
        raise CompileError(f"@{t.name}: scf.if with results needs an else region")

    b.position_at_end(merge)
    results = []
    for i, r in enumerate(op.output):
        phi = b.phi(convert_type(r.type))
        for vals, bb in arms:
            phi.add_incoming(vals[i], bb)
        results.append(phi)
    t.set(op, results)


# ---------------------------------------------------------------- arith


def _constant(t: FunctionTranslator, op: arith.ConstantOp) -> None:
    value = op.value
    ty = convert_type(op.result.type)
    if isinstance(value, builtin.IntegerAttr):
        v = value.value.data
        if isinstance(ty, ir.IntType):
            v &= (1 << ty.width) - 1  # i1 true may be stored as -1
        t.set(op, [ir.Constant(ty, v)])
    elif isinstance(value, builtin.FloatAttr):
        t.set(op, [ir.Constant(ty, float(value.value.data))])
    else:
        raise CompileError(f"@{t.name}: arith.constant of {value} is not supported (scalars only)")


def _binary(method: str, *, fast: bool = False, overflow: bool = False, contract: bool = False) -> Callable:
    def translate(t: FunctionTranslator, op: Operation) -> None:
        lhs, rhs = (t.get(v) for v in op.operands)
        flags = _fastmath(op) if fast else _overflow(op) if overflow else ()
        if contract and "contract" not in flags and "fast" not in flags:
            flags = (*flags, "contract")
        t.set(op, [getattr(t.builder, method)(lhs, rhs, flags=flags)])

    return translate


def _intrinsic_op(base: str) -> Callable:
    def translate(t: FunctionTranslator, op: Operation) -> None:
        t.set(op, [t.call_intrinsic(base, [t.get(v) for v in op.operands], _fastmath(op))])

    return translate


def _negf(t: FunctionTranslator, op: arith.NegfOp) -> None:
    t.set(op, [t.builder.fneg(t.get(op.operand), flags=_fastmath(op))])


_CMPI = {
    "eq": (True, "=="), "ne": (True, "!="),
    "slt": (True, "<"), "sle": (True, "<="), "sgt": (True, ">"), "sge": (True, ">="),
    "ult": (False, "<"), "ule": (False, "<="), "ugt": (False, ">"), "uge": (False, ">="),
}  # fmt: skip

_CMPF_OPS = {"eq": "==", "gt": ">", "ge": ">=", "lt": "<", "le": "<=", "ne": "!="}


def _cmpi(t: FunctionTranslator, op: arith.CmpiOp) -> None:
    pred = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
    signed, cmp = _CMPI[pred]
    lhs, rhs = t.get(op.lhs), t.get(op.rhs)
    fn = t.builder.icmp_signed if signed else t.builder.icmp_unsigned
    t.set(op, [fn(cmp, lhs, rhs)])


def _cmpf(t: FunctionTranslator, op: arith.CmpfOp) -> None:
    pred = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
    lhs, rhs = t.get(op.lhs), t.get(op.rhs)
    flags = _fastmath(op)
    if pred in ("false", "true"):
        result = ir.Constant(I1, pred == "true")
    elif pred == "ord":
        result = t.builder.fcmp_ordered("ord", lhs, rhs, flags=flags)
    elif pred == "uno":
        result = t.builder.fcmp_unordered("uno", lhs, rhs, flags=flags)
    elif pred[0] == "o":
        result = t.builder.fcmp_ordered(_CMPF_OPS[pred[1:]], lhs, rhs, flags=flags)
    else:
        result = t.builder.fcmp_unordered(_CMPF_OPS[pred[1:]], lhs, rhs, flags=flags)
    t.set(op, [result])


def _select(t: FunctionTranslator, op: arith.SelectOp) -> None:
    t.set(op, [t.builder.select(t.get(op.cond), t.get(op.lhs), t.get(op.rhs), flags=_fastmath(op))])


def _cast(method: str) -> Callable:
    def translate(t: FunctionTranslator, op: Operation) -> None:
        t.set(op, [getattr(t.builder, method)(t.get(op.operands[0]), convert_type(op.results[0].type))])

    return translate


def _index_cast(t: FunctionTranslator, op: arith.IndexCastOp) -> None:
    """index <-> iN: sign-extends when widening, truncates when narrowing (as MLIR)."""
    value = t.get(op.input)
    to = convert_type(op.result.type)
    if value.type.width == to.width:
        result = value
    elif value.type.width < to.width:
        result = t.builder.sext(value, to)
    else:
        result = t.builder.trunc(value, to)
    t.set(op, [result])


# ---------------------------------------------------------------- math


def _rsqrt(t: FunctionTranslator, op: math.RsqrtOp) -> None:
    x = t.get(op.operand)
    flags = _fastmath(op)
    root = t.call_intrinsic("sqrt", [x], flags)
    t.set(op, [t.builder.fdiv(ir.Constant(x.type, 1.0), root, flags=flags)])


#: math ops with no LLVM intrinsic: a call to the C library (`f` suffix for f32).
def _libm(name: str) -> Callable:
    def translate(t: FunctionTranslator, op: Operation) -> None:
        args = [t.get(v) for v in op.operands]
        ty = args[0].type
        if not isinstance(ty, (ir.FloatType, ir.DoubleType)):
            raise CompileError(f"'{op.name}' on {ty} is not supported")
        symbol = name + ("f" if isinstance(ty, ir.FloatType) else "")
        fn = _declare(t.module, symbol, ir.FunctionType(ty, [ty] * len(args)))
        t.set(op, [t.builder.call(fn, args, fastmath=_fastmath(op))])

    return translate


# ---------------------------------------------------------------- memref


def _address(
    t: FunctionTranslator, buf: SSAValue, indices: Sequence[SSAValue], *, inbounds: bool = True
) -> tuple[ir.Value, ir.Type, int]:
    elem, align = element_type(buf.type)
    if len(indices) != 1:
        raise CompileError(f"@{t.name}: a 1-D buffer is indexed with one index, got {len(indices)}")
    ptr = t.builder.gep(t.get(buf), [t.get(indices[0])], inbounds=inbounds, source_etype=elem)
    return ptr, elem, align


def _nontemporal(t: FunctionTranslator, op: Operation, instr: ir.Instruction) -> None:
    attr = op.properties.get("nontemporal")
    if isinstance(attr, builtin.IntegerAttr) and attr.value.data:
        instr.set_metadata("nontemporal", t.module.add_metadata([ir.Constant(I32, 1)]))


def _load(t: FunctionTranslator, op: memref.LoadOp) -> None:
    ptr, elem, align = _address(t, op.memref, op.indices)
    value = t.builder.load(ptr, typ=elem, align=align)
    _nontemporal(t, op, value)
    t.tag_access(op.memref, value)
    t.set(op, [value])


def _store(t: FunctionTranslator, op: memref.StoreOp) -> None:
    ptr, _, align = _address(t, op.memref, op.indices)
    instr = t.builder.store(t.get(op.value), ptr, align=align)
    _nontemporal(t, op, instr)
    t.tag_access(op.memref, instr)


def _alloca(t: FunctionTranslator, op: memref.AllocaOp) -> None:
    """Stack scratch. In the entry block when its size is known there (a constant
    or an argument), so it is allocated once; else where the op stands."""
    mtype = op.memref.type
    elem, elem_align = element_type(mtype)
    align = op.alignment.value.data if op.alignment is not None else max(elem_align, 64)
    if op.symbol_operands:
        raise CompileError(f"@{t.name}: memref.alloca with symbol operands is not supported")
    if op.dynamic_sizes:
        size_value = op.dynamic_sizes[0]
        fixed = constant_index(size_value)
        size = t.get(size_value) if fixed is None else ir.Constant(I64, fixed)
        owner = size_value.owner
        hoist = (isinstance(owner, Block) and owner is t.top_block) or isinstance(size, ir.Constant)
    else:
        size = ir.Constant(I64, mtype.get_shape()[0])
        hoist = True
    b = t.builder
    if hoist:
        saved = b.block
        first = t.entry.instructions[0] if t.entry.instructions else None
        if first is not None:
            b.position_before(first)
        else:
            b.position_at_end(t.entry)
        ptr = b.alloca(elem, size=size)
        b.position_at_end(saved)
    else:
        ptr = b.alloca(elem, size=size)
    ptr.align = align
    ptr.type = PTR  # every buffer is an opaque pointer, whatever llvmlite typed the alloca as
    t.set(op, [ptr])


# ---------------------------------------------------------------- llvm_ext


def _prefetch(t: FunctionTranslator, op: PrefetchOp) -> None:
    # Not inbounds: a prefetch may run past the end of its buffer and must not be poison.
    ptr, _, _ = _address(t, op.memref, [op.index], inbounds=False)
    fn = t.intrinsic("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
    data_cache = ir.Constant(I32, 1)
    call = t.builder.call(
        fn, [ptr, ir.Constant(I32, int(op.is_write)), ir.Constant(I32, op.locality_level), data_cache]
    )
    t.tag_access(op.memref, call)
    t.set(op, [])


#: Streaming stores write one cache line per vector.
STREAM_VECTOR_BYTES = 64
#: Copies of up to this many bytes known when compiling are straight-line code (_stream_copy_unrolled).
STREAM_UNROLL_BYTES = 4096


def _counted_loop(
    t: FunctionTranslator, lo: ir.Value, hi: ir.Value, step: int, body: Callable[[ir.Value], None], label: str
) -> None:
    """for (i = lo; i < hi; i += step) body(i), unsigned, left as it is by LLVM's vectoriser."""
    b = t.builder
    before = b.block
    header, inner, done = t.new_block(f"{label}.header"), t.new_block(f"{label}.body"), t.new_block(f"{label}.exit")
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(I64, name=f"{label}.i")
    i.add_incoming(lo, before)
    b.cbranch(b.icmp_unsigned("<", i, hi), inner, done)
    b.position_at_end(inner)
    body(i)
    latch = b.block
    nxt = b.add(i, ir.Constant(I64, step), flags=("nuw",))
    b.branch(header).set_metadata("llvm.loop", _loop_id(t.module, vectorize=False, unroll=False))
    i.add_incoming(nxt, latch)
    b.position_at_end(done)


def _stream_copy(t: FunctionTranslator, op: StreamCopyOp) -> None:
    """Ordinary stores up to dst's first cache line boundary and after its last
    whole line; between them one non-temporal vector store per line.

    The buffers' alignment is not known when compiling (a caller's `out=`
    may start anywhere), and LLVM neither vectorises nor keeps a
    `!nontemporal` store it cannot prove aligned: it wrote scalar `vmovss`.
    """
    b = t.builder
    elem, align = element_type(op.dst.type)
    size = byte_size(elem)
    lanes = STREAM_VECTOR_BYTES // size
    vector = ir.VectorType(elem, lanes)
    dst = b.gep(t.get(op.dst), [t.get(op.dst_index)], inbounds=True, source_etype=elem)
    src = b.gep(t.get(op.src), [t.get(op.src_index)], inbounds=True, source_etype=elem)
    fixed = constant_index(op.count)
    if fixed is not None and 0 < fixed * size <= STREAM_UNROLL_BYTES:
        _stream_copy_unrolled(t, op, src, dst, vector, align, fixed)
        t.set(op, [])
        return
    count = t.get(op.count)
    address = b.ptrtoint(dst, I64)
    line_mask = ir.Constant(I64, STREAM_VECTOR_BYTES - 1)
    to_boundary = b.and_(b.sub(ir.Constant(I64, STREAM_VECTOR_BYTES), b.and_(address, line_mask)), line_mask)
    # an element that straddles lines (dst not on an element boundary) never meets one: all ordinary stores
    whole_elements = b.icmp_unsigned("==", b.and_(address, ir.Constant(I64, size - 1)), ir.Constant(I64, 0))
    head = b.select(whole_elements, b.udiv(to_boundary, ir.Constant(I64, size)), count)
    head = b.select(b.icmp_unsigned("<", head, count), head, count)
    body_end = b.add(head, b.and_(b.sub(count, head), ir.Constant(I64, -lanes)))

    def copy_one(i: ir.Value) -> None:
        value = b.load(b.gep(src, [i], inbounds=True, source_etype=elem), typ=elem, align=align)
        b.store(value, b.gep(dst, [i], inbounds=True, source_etype=elem), align=align)

    def stream_line(i: ir.Value) -> None:
        value = b.load(b.gep(src, [i], inbounds=True, source_etype=elem), typ=vector, align=align)
        store = b.store(value, b.gep(dst, [i], inbounds=True, source_etype=elem), align=STREAM_VECTOR_BYTES)
        store.set_metadata("nontemporal", t.module.add_metadata([ir.Constant(I32, 1)]))

    _counted_loop(t, ir.Constant(I64, 0), head, 1, copy_one, "stream.head")
    _counted_loop(t, head, body_end, lanes, stream_line, "stream.lines")
    _counted_loop(t, body_end, count, 1, copy_one, "stream.tail")
    t.set(op, [])


def _stream_copy_unrolled(
    t: FunctionTranslator, op: StreamCopyOp, src: ir.Value, dst: ir.Value, vector: ir.VectorType, align: int, count: int
) -> None:
    """A copy of a size known when compiling, as straight-line code: one
    vector per line, streamed when dst starts on a line, ordinary stores
    when it does not (a caller's `out=` may start anywhere).

    Every load of src is then at a constant offset from it; for a row on
    the worker's stack (convert-graph-to-loop's _staging_row) that is what
    lets SROA keep the whole row in registers. The loop form's head and
    tail, whose lengths depend on dst's address, read the row at variable
    offsets. `vector` is one line of elements, `align` an element's alignment.
    """
    b = t.builder
    elem, lanes = vector.element, vector.count
    on_line = b.icmp_unsigned(
        "==", b.and_(b.ptrtoint(dst, I64), ir.Constant(I64, STREAM_VECTOR_BYTES - 1)), ir.Constant(I64, 0)
    )
    nontemporal = t.module.add_metadata([ir.Constant(I32, 1)])

    def move(at: int, typ: ir.Type, stream: bool) -> None:
        offset = ir.Constant(I64, at)
        value = b.load(b.gep(src, [offset], inbounds=True, source_etype=elem), typ=typ, align=align)
        t.tag_access(op.src, value)
        store = b.store(
            value,
            b.gep(dst, [offset], inbounds=True, source_etype=elem),
            align=STREAM_VECTOR_BYTES if stream else align,
        )
        if stream:
            store.set_metadata("nontemporal", nontemporal)
        t.tag_access(op.dst, store)

    whole_lines = count - count % lanes

    def copy(stream: bool) -> None:
        for first in range(0, whole_lines, lanes):
            move(first, vector, stream)
        for last in range(whole_lines, count):  # the part of a line after the last whole one
            move(last, elem, False)

    with b.if_else(on_line) as (streamed, ordinary):
        with streamed:
            copy(True)
        with ordinary:
            copy(False)


def _store_fence(t: FunctionTranslator, op: StoreFenceOp) -> None:
    if t.module.triple == NVPTX_TRIPLE:
        raise CompileError(f"@{t.name}: llvm_ext.store_fence exists on the CPU only")
    t.builder.call(t.intrinsic("llvm.x86.sse.sfence", ir.VoidType(), []), [])
    t.set(op, [])


def _nvvm_sreg(t: FunctionTranslator, op: NvvmSregOp) -> None:
    fn = t.intrinsic(f"llvm.nvvm.read.ptx.sreg.{op.register.data}", I32, [])
    t.set(op, [t.builder.zext(t.builder.call(fn, []), I64)])


def _atomic_rmw(t: FunctionTranslator, op: AtomicRmwOp) -> None:
    # monotonic: updates of one element need only be atomic among themselves;
    # whatever reads them runs in a later launch (phase)
    ptr, _, _ = _address(t, op.memref, [op.index])
    if op.kind.data == "fmax":
        _atomic_fmax_by_bits(t, ptr, t.get(op.value))
    else:
        t.builder.atomic_rmw(op.kind.data, ptr, t.get(op.value), "monotonic")
    t.set(op, [])


def _atomic_fmax_by_bits(t: FunctionTranslator, ptr: ir.Value, x: ir.Value) -> None:
    """A NaN-ignoring atomic float max as one integer atomic, where LLVM would emit a
    compare-and-swap loop (PTX's atom.max and atom.min take integers).

    IEEE floats order like their bits read as sign-magnitude integers: a
    non-negative x beats exactly the values whose bits are smaller as signed
    integers (every negative float is a negative integer), and a negative x,
    sign bit set, beats exactly those whose bits are larger as unsigned
    integers (every non-negative float is below 2^(N-1)). So `max` on the
    signed bits, or `umin` on the unsigned bits, by x's sign bit; -0.0 goes by
    its sign bit too and beats -inf. A NaN x changes nothing (maxnum); the
    element itself is never NaN (it starts at -inf and only takes numbers).
    """
    b = t.builder
    bits_type = ir.IntType(64 if isinstance(x.type, ir.DoubleType) else 32)
    bits = b.bitcast(x, bits_type)
    is_number = b.fcmp_ordered("ord", x, x)
    update, done = t.new_block("fmax.update"), t.new_block("fmax.done")
    b.cbranch(is_number, update, done)
    b.position_at_end(update)
    negative = b.icmp_signed("<", bits, ir.Constant(bits_type, 0))
    as_max, as_min = t.new_block("fmax.nonneg"), t.new_block("fmax.neg")
    b.cbranch(negative, as_min, as_max)
    b.position_at_end(as_max)
    b.atomic_rmw("max", ptr, bits, "monotonic")
    b.branch(done)
    b.position_at_end(as_min)
    b.atomic_rmw("umin", ptr, bits, "monotonic")
    b.branch(done)
    b.position_at_end(done)


def _shfl_bfly(t: FunctionTranslator, op: ShflBflyOp) -> None:
    b = t.builder
    all_lanes, clamp = t.get(op.mask), ir.Constant(I32, 31)
    offset = ir.Constant(I32, op.offset.value.data)
    x = t.get(op.value)
    if isinstance(x.type, ir.FloatType):
        fn = t.intrinsic("llvm.nvvm.shfl.sync.bfly.f32", x.type, [I32, x.type, I32, I32])
        t.set(op, [b.call(fn, [all_lanes, x, offset, clamp])])
        return
    # PTX shuffles 32-bit registers: a double moves as its two halves
    fn = t.intrinsic("llvm.nvvm.shfl.sync.bfly.i32", I32, [I32, I32, I32, I32])
    bits = b.bitcast(x, I64)
    low = b.call(fn, [all_lanes, b.trunc(bits, I32), offset, clamp])
    high = b.call(fn, [all_lanes, b.trunc(b.lshr(bits, ir.Constant(I64, 32)), I32), offset, clamp])
    joined = b.or_(b.shl(b.zext(high, I64), ir.Constant(I64, 32)), b.zext(low, I64))
    t.set(op, [b.bitcast(joined, x.type)])


#: The block's dynamic shared memory (`.extern .shared`), shared by every kernel of a module.
SHARED_MEMORY_SYMBOL = "gnnc_shared"
_SHARED_ADDRSPACE = 3


def _shared_memory(t: FunctionTranslator, op: SharedMemoryOp) -> None:
    if t.module.triple != NVPTX_TRIPLE:
        raise CompileError(
            f"@{t.name}: llvm_ext.shared_memory exists on the GPU only (emulate-grid replaces it on the CPU)"
        )
    shared = t.module.globals.get(SHARED_MEMORY_SYMBOL)
    if shared is None:
        shared = ir.GlobalVariable(
            t.module, ir.ArrayType(ir.IntType(8), 0), SHARED_MEMORY_SYMBOL, addrspace=_SHARED_ADDRSPACE
        )
        shared.linkage = "external"
        shared.align = 16
    t.set(op, [t.builder.addrspacecast(shared, PTR)])


def _barrier(t: FunctionTranslator, op: BarrierOp) -> None:
    if t.module.triple != NVPTX_TRIPLE:
        raise CompileError(
            f"@{t.name}: llvm_ext.barrier exists on the GPU only (emulate-grid splits the threads there)"
        )
    fn = t.intrinsic("llvm.nvvm.barrier.cta.sync.aligned.all", ir.VoidType(), [I32])
    t.builder.call(fn, [ir.Constant(I32, 0)])
    t.set(op, [])


def _slot_address(t: FunctionTranslator, slots: SSAValue, index: SSAValue) -> ir.Value:
    # A slot is an i64; indexing it as `ptr` (also 8 bytes on 64-bit targets) lets the
    # pointer be stored and loaded as a pointer, without ptrtoint / inttoptr.
    return t.builder.gep(t.get(slots), [t.get(index)], inbounds=True, source_etype=PTR)


def _load_buffer(t: FunctionTranslator, op: LoadBufferOp) -> None:
    t.set(op, [t.builder.load(_slot_address(t, op.slots, op.index), typ=PTR, align=8)])


def _store_buffer(t: FunctionTranslator, op: StoreBufferOp) -> None:
    t.builder.store(t.get(op.buffer), _slot_address(t, op.slots, op.index), align=8)


class _FunctionAddress(ir.values.Value):
    """`@fn` as an opaque `ptr` constant (llvmlite would print a typed function pointer)."""

    def __init__(self, fn: ir.Function):
        self.type = PTR
        self.function = fn

    def get_reference(self) -> str:
        return self.function.get_reference()

    def __str__(self) -> str:
        return f"ptr {self.get_reference()}"


def _addressof(t: FunctionTranslator, op: llvm_dialect.AddressOfOp) -> None:
    name = op.global_name.root_reference.data
    target = t.module.globals.get(name)
    if not isinstance(target, ir.Function):
        raise CompileError(f"@{t.name}: llvm.mlir.addressof @{name}: no function of that name in the module")
    t.set(op, [_FunctionAddress(target)])


def _lanes(t: FunctionTranslator, op: LanesOp) -> None:
    LanesTranslator(t, op).translate()


# ---------------------------------------------------------------- the dispatch table

# each handler is called with an op of the type it is keyed by (Any: the table mixes op types)
_HANDLERS: dict[type[Operation], Callable[[FunctionTranslator, Any], None]] = {
    func.ReturnOp: _func_return,
    func.CallOp: _func_call,
    scf.ForOp: _scf_for,
    scf.IfOp: _scf_if,
    arith.ConstantOp: _constant,
    arith.AddfOp: _binary("fadd", fast=True, contract=True),
    arith.SubfOp: _binary("fsub", fast=True, contract=True),
    arith.MulfOp: _binary("fmul", fast=True, contract=True),
    arith.DivfOp: _binary("fdiv", fast=True),
    arith.NegfOp: _negf,
    # maximumf / minimumf propagate NaN (IEEE 754-2019 maximum); the *numf ones drop it.
    arith.MaximumfOp: _intrinsic_op("maximum"),
    arith.MinimumfOp: _intrinsic_op("minimum"),
    arith.MaxnumfOp: _intrinsic_op("maxnum"),
    arith.MinnumfOp: _intrinsic_op("minnum"),
    arith.CmpfOp: _cmpf,
    arith.CmpiOp: _cmpi,
    arith.SelectOp: _select,
    arith.AddiOp: _binary("add", overflow=True),
    arith.SubiOp: _binary("sub", overflow=True),
    arith.MuliOp: _binary("mul", overflow=True),
    arith.DivSIOp: _binary("sdiv"),
    arith.RemSIOp: _binary("srem"),
    arith.DivUIOp: _binary("udiv"),
    arith.RemUIOp: _binary("urem"),
    arith.AndIOp: _binary("and_"),
    arith.OrIOp: _binary("or_"),
    arith.XOrIOp: _binary("xor"),
    arith.ShLIOp: _binary("shl", overflow=True),
    arith.ShRSIOp: _binary("ashr"),
    arith.ShRUIOp: _binary("lshr"),
    arith.MaxSIOp: _intrinsic_op("smax"),
    arith.MinSIOp: _intrinsic_op("smin"),
    arith.MaxUIOp: _intrinsic_op("umax"),
    arith.MinUIOp: _intrinsic_op("umin"),
    arith.IndexCastOp: _index_cast,
    arith.SIToFPOp: _cast("sitofp"),
    arith.UIToFPOp: _cast("uitofp"),
    arith.FPToSIOp: _cast("fptosi"),
    arith.FPToUIOp: _cast("fptoui"),
    arith.ExtFOp: _cast("fpext"),
    arith.TruncFOp: _cast("fptrunc"),
    arith.ExtSIOp: _cast("sext"),
    arith.ExtUIOp: _cast("zext"),
    arith.TruncIOp: _cast("trunc"),
    arith.BitcastOp: _cast("bitcast"),
    math.ExpOp: _intrinsic_op("exp"),
    math.Exp2Op: _intrinsic_op("exp2"),
    math.LogOp: _intrinsic_op("log"),
    math.Log2Op: _intrinsic_op("log2"),
    math.Log10Op: _intrinsic_op("log10"),
    math.SqrtOp: _intrinsic_op("sqrt"),
    math.RsqrtOp: _rsqrt,
    math.AbsFOp: _intrinsic_op("fabs"),
    math.TanhOp: _intrinsic_op("tanh"),
    math.SinOp: _intrinsic_op("sin"),
    math.CosOp: _intrinsic_op("cos"),
    math.PowFOp: _intrinsic_op("pow"),
    math.FloorOp: _intrinsic_op("floor"),
    math.CeilOp: _intrinsic_op("ceil"),
    math.RoundOp: _intrinsic_op("round"),
    math.TruncOp: _intrinsic_op("trunc"),
    math.CopySignOp: _intrinsic_op("copysign"),
    math.FmaOp: _intrinsic_op("fma"),
    math.ErfOp: _libm("erf"),
    math.Log1pOp: _libm("log1p"),
    math.ExpM1Op: _libm("expm1"),
    # is_zero_poison false: ctlz(0) is the bit width
    math.CountLeadingZerosOp: lambda t, op: t.set(
        op, [t.call_intrinsic("ctlz", [t.get(op.operand), ir.Constant(I1, 0)])]
    ),
    math.AbsIOp: lambda t, op: t.set(op, [t.call_intrinsic("abs", [t.get(op.operand), ir.Constant(I1, 0)])]),
    memref.LoadOp: _load,
    memref.StoreOp: _store,
    memref.AllocaOp: _alloca,
    PrefetchOp: _prefetch,
    LoadBufferOp: _load_buffer,
    StoreBufferOp: _store_buffer,
    NvvmSregOp: _nvvm_sreg,
    AtomicRmwOp: _atomic_rmw,
    ShflBflyOp: _shfl_bfly,
    SharedMemoryOp: _shared_memory,
    BarrierOp: _barrier,
    StreamCopyOp: _stream_copy,
    StoreFenceOp: _store_fence,
    llvm_dialect.AddressOfOp: _addressof,
    memref.ExtractAlignedPointerAsIndexOp: lambda t, op: t.set(op, [t.builder.ptrtoint(t.get(op.source), I64)]),
    LanesOp: _lanes,
}


def supported_ops() -> list[str]:
    """The names of the ops this translation handles (for docs and `gnnc passes`)."""
    return sorted(op.name for op in _HANDLERS)


# ---------------------------------------------------------------- the module


def _declare_function(module: ir.Module, op: func.FuncOp) -> ir.Function:
    ftype = op.function_type
    outputs = ftype.outputs.data
    if len(outputs) > 1:
        raise CompileError(f"@{op.sym_name.data}: functions return at most one value")
    ret = convert_type(outputs[0]) if outputs else ir.VoidType()
    fn = ir.Function(module, ir.FunctionType(ret, [convert_type(i) for i in ftype.inputs.data]), name=op.sym_name.data)
    if op.arg_attrs is not None:
        for arg, attrs in zip(fn.args, op.arg_attrs.data):
            _set_arg_attributes(arg, attrs, f"@{op.sym_name.data}")
    if op.body.blocks:
        if op.sym_visibility is not None and op.sym_visibility.data == "private":
            fn.linkage = "internal"
        fn.attributes = _FunctionAttributes()
        fn.attributes.add("nounwind")
        simd = op.attributes.get(SIMD_BITS_ATTR)
        if isinstance(simd, builtin.IntegerAttr):
            fn.attributes.add(f'"prefer-vector-width"="{simd.value.data}"')
        for i, block_arg in enumerate(op.body.blocks[0].args):
            fn.args[i].name = block_arg.name_hint or f"arg{i}"
    return fn


#: func.func attribute (set by convert-grid-to-nvvm) for the `ptx_kernel` calling convention.
PTX_KERNEL_ATTR = "gnnc.ptx_kernel"

#: The triple of NVVM IR: 64-bit PTX for the CUDA driver.
NVPTX_TRIPLE = "nvptx64-nvidia-cuda"


def translate_module(module: builtin.ModuleOp, *, module_name: str = "gnnc", triple: str | None = None) -> ir.Module:
    """The LLVM IR of a module of `func.func` ops (see the module docstring for the contract).

    `triple` defaults to this process's; with NVPTX_TRIPLE the result is NVVM
    IR, functions marked `gnnc.ptx_kernel` being kernel entry points."""
    llmod = ir.Module(name=module_name)
    llmod.triple = triple or llvm.get_process_triple()
    functions: list[tuple[func.FuncOp, ir.Function]] = []
    for op in module.ops:
        if not isinstance(op, func.FuncOp):
            raise CompileError(f"cannot translate '{op.name}' at module level to LLVM IR: only func.func is supported")
        if op.sym_name.data in llmod.globals:
            raise CompileError(f"function @{op.sym_name.data} is defined twice")
        fn = _declare_function(llmod, op)
        if PTX_KERNEL_ATTR in op.attributes:
            fn.calling_convention = "ptx_kernel"
        functions.append((op, fn))
    for op, fn in functions:
        if op.body.blocks:
            FunctionTranslator(llmod, op, fn).translate()
    return llmod


__all__ = ["FunctionTranslator", "convert_type", "supported_ops", "translate_module"]
