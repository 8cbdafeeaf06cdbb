"""The `llvm_ext` dialect: the few LLVM-level ops the upstream dialects lack.

gnnc translates `scf` / `arith` / `math` / `memref` straight to LLVM IR
(`gnnc/target/llvm/translate.py`); the ops here are the ones with no
upstream structured counterpart, each mapping to one LLVM intrinsic.

    llvm_ext.prefetch %buf[%i] {write = false, locality = 3} : memref<?xf32>
    llvm_ext.store_buffer %buf, %closure[%c0] : memref<?xf32>, memref<?xi64>
    %b = llvm_ext.load_buffer %closure[%c0] : memref<?xi64> -> memref<?xf32>
    llvm_ext.atomic_rmw "fadd" %out[%i], %x : memref<?xf32>, f32
    %y = llvm_ext.shfl_bfly %x, 16 : i32 mask %m : f32
    %s = llvm_ext.shared_memory %n : memref<?xf32>
    llvm_ext.barrier
    llvm_ext.stream_copy %acc[%i] to %out[%j] count %n : memref<?xf32>, memref<?xf32>
    llvm_ext.store_fence

Function addresses (for GOMP_parallel's outlined body) use the upstream
`llvm.mlir.addressof @fn : !llvm.ptr`, which the translation also handles.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import (
    BoolAttr,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class PrefetchOp(IRDLOperation):
    """A cache hint for `buf[index]` of a 1-D buffer: `llvm.prefetch.p0`.

    `write` asks for the line in a writable state; `locality` is LLVM's temporal
    locality, 0 (none, streaming) .. 3 (keep in all cache levels). A prefetch
    never faults, so an index past the end is harmless.
    """

    name = "llvm_ext.prefetch"

    T: ClassVar = VarConstraint("T", AnyAttr())

    memref = operand_def(MemRefType.constr(T))
    index = operand_def(IndexType())
    write = opt_attr_def(IntegerAttr)
    locality = opt_attr_def(IntegerAttr)

    assembly_format = "$memref `[` $index `]` attr-dict `:` type($memref)"

    def __init__(
        self, memref: SSAValue | Operation, index: SSAValue | Operation, *, write: bool = False, locality: int = 3
    ):
        super().__init__(
            operands=[memref, index],
            attributes={"write": BoolAttr.from_bool(write), "locality": IntegerAttr(locality, IntegerType(32))},
        )

    @property
    def is_write(self) -> bool:
        return self.write is not None and bool(self.write.value.data)

    @property
    def locality_level(self) -> int:
        return 3 if self.locality is None else self.locality.value.data

    def verify_(self) -> None:
        memref_type = self.memref.type
        assert isinstance(memref_type, MemRefType)
        if memref_type.get_num_dims() != 1:
            raise VerifyException(f"'{self.name}' expects a 1-D memref, got {memref_type}")
        if self.write is not None and not (
            isinstance(self.write.type, IntegerType) and self.write.type.width.data == 1
        ):
            raise VerifyException(f"'{self.name}' attribute 'write' must be a bool (true / false)")
        if not 0 <= self.locality_level <= 3:
            raise VerifyException(f"'{self.name}' locality must be 0..3, got {self.locality_level}")


def _check_float_buffer(op: IRDLOperation, buffer_type: Attribute, what: str) -> None:
    if not (
        isinstance(buffer_type, MemRefType)
        and buffer_type.get_num_dims() == 1
        and isinstance(buffer_type.element_type, Float32Type | Float64Type)
    ):
        raise VerifyException(f"'{op.name}' {what} 1-D buffers of f32 or f64, got {buffer_type}")


def _check_slot_buffer(op: IRDLOperation, slots: SSAValue, buffer_type: Attribute) -> None:
    slots_type = slots.type
    if not (isinstance(slots_type, MemRefType) and slots_type.get_num_dims() == 1
            and slots_type.element_type == IntegerType(64)):  # fmt: skip
        raise VerifyException(f"'{op.name}' keeps buffers in a 1-D memref of i64 slots, got {slots_type}")
    if not (isinstance(buffer_type, MemRefType) and buffer_type.get_num_dims() == 1):
        raise VerifyException(f"'{op.name}' moves 1-D buffers, got {buffer_type}")


@irdl_op_definition
class LoadBufferOp(IRDLOperation):
    """Reads the buffer (its base pointer) kept in `slots[index]`.

    With `store_buffer`, a parallel region passes its buffers to an outlined
    body through one closure array (`GOMP_parallel(fn, closure, ...)`) without
    integer casts, so pointer provenance survives for alias analysis.
    """

    name = "llvm_ext.load_buffer"

    slots = operand_def(MemRefType)
    index = operand_def(IndexType())
    result = result_def(MemRefType)

    assembly_format = "$slots `[` $index `]` attr-dict `:` type($slots) `->` type($result)"

    def __init__(self, slots: SSAValue | Operation, index: SSAValue | Operation, result_type: MemRefType):
        super().__init__(operands=[slots, index], result_types=[result_type])

    def verify_(self) -> None:
        _check_slot_buffer(self, self.slots, self.result.type)


@irdl_op_definition
class StoreBufferOp(IRDLOperation):
    """Writes the base pointer of `buffer` into `slots[index]` (see `load_buffer`)."""

    name = "llvm_ext.store_buffer"

    buffer = operand_def(MemRefType)
    slots = operand_def(MemRefType)
    index = operand_def(IndexType())

    assembly_format = "$buffer `,` $slots `[` $index `]` attr-dict `:` type($buffer) `,` type($slots)"

    def __init__(self, buffer: SSAValue | Operation, slots: SSAValue | Operation, index: SSAValue | Operation):
        super().__init__(operands=[buffer, slots, index])

    def verify_(self) -> None:
        _check_slot_buffer(self, self.slots, self.buffer.type)


#: PTX special registers a kernel reads, each an `llvm.nvvm.read.ptx.sreg.*` intrinsic.
NVVM_SPECIAL_REGISTERS = ("ctaid.x", "tid.x", "ntid.x", "nctaid.x", "laneid")


@irdl_op_definition
class NvvmSregOp(IRDLOperation):
    """A PTX special register (block or thread index, block or grid size) as an index:

        %b = llvm_ext.nvvm_sreg "ctaid.x"

    translated to `llvm.nvvm.read.ptx.sreg.ctaid.x` (i32, zero-extended)."""

    name = "llvm_ext.nvvm_sreg"

    register = prop_def(StringAttr)
    result = result_def(IndexType())

    assembly_format = "$register attr-dict"

    def __init__(self, register: str):
        super().__init__(properties={"register": StringAttr(register)}, result_types=[IndexType()])

    def verify_(self) -> None:
        if self.register.data not in NVVM_SPECIAL_REGISTERS:
            raise VerifyException(
                f"'{self.name}': unknown special register {self.register.data!r} "
                f"(known: {', '.join(NVVM_SPECIAL_REGISTERS)})"
            )


#: Read-modify-write updates `atomic_rmw` performs, as LLVM's `atomicrmw` names them.
#: `fmaximum` / `fminimum` propagate NaN like `arith.maximumf` / `minimumf`, so a
#: max aggregation gives the same value however its edges' updates interleave;
#: `fmax` ignores NaN like `arith.maxnumf` (a softmax's stabilizing max).
ATOMIC_KINDS = ("fadd", "fmaximum", "fminimum", "fmax")


@irdl_op_definition
class AtomicRmwOp(IRDLOperation):
    """`buf[index] = buf[index] <kind> value`, atomically: LLVM's `atomicrmw <kind>`
    (monotonic ordering; a later phase is a later launch, which orders it).

        llvm_ext.atomic_rmw "fmaximum" %out[%i], %x : memref<?xf32>, f32

    Edge mappings update a destination row from several threads with it.
    NVPTX has `atom.add.f32/f64`; LLVM expands fmaximum / fminimum into a
    compare-and-swap loop on the value's bits; the translation does fmax as
    one integer atom.max or atom.min on the bits, chosen by the sign. Run by one thread, as in the
    sequential grid emulation, it is exactly the plain update."""

    name = "llvm_ext.atomic_rmw"

    kind = prop_def(StringAttr)
    memref = operand_def(MemRefType)
    index = operand_def(IndexType())
    value = operand_def(AnyAttr())

    assembly_format = "$kind $memref `[` $index `]` `,` $value attr-dict `:` type($memref) `,` type($value)"

    def __init__(
        self, kind: str, value: SSAValue | Operation, memref: SSAValue | Operation, index: SSAValue | Operation
    ):
        super().__init__(operands=[memref, index, value], properties={"kind": StringAttr(kind)})

    def verify_(self) -> None:
        if self.kind.data not in ATOMIC_KINDS:
            raise VerifyException(f"'{self.name}': unknown kind {self.kind.data!r} (known: {', '.join(ATOMIC_KINDS)})")
        memref_type = self.memref.type
        assert isinstance(memref_type, MemRefType)
        if memref_type.get_num_dims() != 1:
            raise VerifyException(f"'{self.name}' expects a 1-D memref, got {memref_type}")
        if memref_type.element_type != self.value.type:
            raise VerifyException(
                f"'{self.name}': value of type {self.value.type} does not match the buffer's {memref_type.element_type}"
            )
        if not isinstance(self.value.type, Float32Type | Float64Type):
            raise VerifyException(f"'{self.name}' updates f32 or f64 elements, got {self.value.type}")


@irdl_op_definition
class ShflBflyOp(IRDLOperation):
    """The value of `value` in lane `lane ^ offset` of this warp; the lanes in the
    32-bit `mask` take part (they must all reach it):

        %y = llvm_ext.shfl_bfly %x, 16 : i32 mask %m : f32
    %s = llvm_ext.shared_memory %n : memref<?xf32>
    llvm_ext.barrier

    translated to `llvm.nvvm.shfl.sync.bfly.f32` (an f64 moves as two i32 halves)."""

    name = "llvm_ext.shfl_bfly"

    T: ClassVar = VarConstraint("T", AnyAttr())

    value = operand_def(T)
    mask = operand_def(IntegerType(32))
    offset = prop_def(IntegerAttr)
    result = result_def(T)

    assembly_format = "$value `,` $offset `mask` $mask attr-dict `:` type($value)"

    def __init__(self, value: SSAValue | Operation, offset: int, mask: SSAValue | Operation):
        value = SSAValue.get(value)
        super().__init__(
            operands=[value, mask],
            properties={"offset": IntegerAttr(offset, IntegerType(32))},
            result_types=[value.type],
        )

    def verify_(self) -> None:
        offset = self.offset.value.data
        if offset not in (1, 2, 4, 8, 16):
            raise VerifyException(f"'{self.name}': lane offset must be 1, 2, 4, 8 or 16, got {offset}")
        if not isinstance(self.value.type, Float32Type | Float64Type) or self.result.type != self.value.type:
            raise VerifyException(f"'{self.name}' moves an f32 or f64 to a result of its type")


@irdl_op_definition
class SharedMemoryOp(IRDLOperation):
    """The block's dynamic shared memory as a buffer of at least `size` elements:

        %s = llvm_ext.shared_memory %n : memref<?xf32>

    translated to the address of `@gnnc_shared`, an `external addrspace(3)`
    array (PTX `.extern .shared`), cast to a generic pointer (LLVM's address
    space inference turns its loads and stores back into ld.shared /
    st.shared). Its size is the launch's: the runtime passes at least `size`
    elements' bytes to cuLaunchKernel. Every block has its own; the CPU
    emulation, which runs blocks one after another, allocates one buffer of
    `size` elements instead (`emulate-grid`)."""

    name = "llvm_ext.shared_memory"

    size = operand_def(IndexType())
    result = result_def(MemRefType)

    assembly_format = "$size attr-dict `:` type($result)"

    def __init__(self, size: SSAValue | Operation, result_type: MemRefType):
        super().__init__(operands=[size], result_types=[result_type])

    def verify_(self) -> None:
        _check_float_buffer(self, self.result.type, "is")


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """Every thread of the block waits here until all of them have arrived, and
    their shared-memory writes before it are visible to all after it
    (`llvm.nvvm.barrier.cta.sync.aligned.all(0)`, PTX `bar.sync 0`). Every
    thread of the block must reach it, so it stands only at the top level of
    a `loop.grid`'s body, where the CPU emulation splits the thread loop
    (MCUDA): all threads run up to it, then all run on."""

    name = "llvm_ext.barrier"

    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__()


@irdl_op_definition
class StreamCopyOp(IRDLOperation):
    """`dst[dst_index + k] = src[src_index + k]` for k < count, the stores
    non-temporal (streaming) where `dst` is on a cache line.

    An ordinary store first reads the line it writes into (a read for
    ownership): a kernel that writes a large output once moves it twice, and
    the output evicts the rows it gathers. Streaming stores write whole lines
    past the caches. Only a row written once, whole, is worth streaming:
    what is read soon after should stay in the cache. Other threads see the
    stores only after a `store_fence` on the thread that made them.
    """

    name = "llvm_ext.stream_copy"

    T: ClassVar = VarConstraint("T", AnyAttr())

    src = operand_def(MemRefType.constr(T))
    src_index = operand_def(IndexType())
    dst = operand_def(MemRefType.constr(T))
    dst_index = operand_def(IndexType())
    count = operand_def(IndexType())

    assembly_format = (
        "$src `[` $src_index `]` `to` $dst `[` $dst_index `]` `count` $count attr-dict `:` type($src) `,` type($dst)"
    )

    def __init__(
        self,
        src: SSAValue | Operation,
        src_index: SSAValue | Operation,
        dst: SSAValue | Operation,
        dst_index: SSAValue | Operation,
        count: SSAValue | Operation,
    ):
        super().__init__(operands=[src, src_index, dst, dst_index, count])

    def verify_(self) -> None:
        _check_float_buffer(self, self.dst.type, "copies between")


@irdl_op_definition
class StoreFenceOp(IRDLOperation):
    """The streaming stores of this thread before it are visible to every
    thread before any store after it is (x86 `sfence`). A worker that
    streamed its rows ends with one, not one per row (a fence is costly)."""

    name = "llvm_ext.store_fence"

    assembly_format = "attr-dict"

    def __init__(self) -> None:
        super().__init__()


LlvmExt = Dialect(
    "llvm_ext",
    [
        PrefetchOp,
        LoadBufferOp,
        StoreBufferOp,
        NvvmSregOp,
        AtomicRmwOp,
        ShflBflyOp,
        SharedMemoryOp,
        BarrierOp,
        StreamCopyOp,
        StoreFenceOp,
    ],
    [],
)

#: The dialect object under its IR name, as `xdsl.dialects` spells its own.
llvm_ext = LlvmExt

__all__ = [
    "ATOMIC_KINDS",
    "AtomicRmwOp",
    "BarrierOp",
    "LlvmExt",
    "LoadBufferOp",
    "NvvmSregOp",
    "PrefetchOp",
    "SharedMemoryOp",
    "ShflBflyOp",
    "StoreBufferOp",
    "StoreFenceOp",
    "StreamCopyOp",
    "llvm_ext",
]
