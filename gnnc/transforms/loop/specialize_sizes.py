"""specialize-sizes: the kernel compiled for given sizes of its dimensions (`specialize F 32`).

A kernel's dimensions (the `H` and `F` of `h: f32[V, H, F]`) are read at
run time from the `dims` argument, so every row loop has a trip count LLVM
does not know: it vectorises with a remainder loop, cannot keep a row in
registers across the in-edges, and runs per-head scalars (softmax maxima
and sums, scores) through memory. With the sizes as constants the row loops
unroll into vector registers and the head loops into straight-line code, as
for a kernel written with literal sizes. Rows of more than 128 elements stay
loops (convert-loop-to-scf): unrolled, they needed more vector registers
than there are. Measurements: docs/design/specialization.md.

The pass replaces each load of a specialised dimension from `dims` with
its size and records the sizes in the kernel's ABI record (`sizes`); the
runtime refuses a call with other sizes before the native code runs (a
kernel compiled for F = 32 would read and write 32 columns of any row).
The runtime's default heuristic compiles such a variant per call sizes
(autotune/heuristic.py), as `gnnc tune` may.

Runs first among the loop passes: those after it see constant extents,
as they would for a kernel written with literal sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import IntegerAttr, IntegerType, ModuleOp, StringAttr
from xdsl.passes import ModulePass

from gnnc.errors import CompileError
from gnnc.ir import kernel_abi, loop
from gnnc.ir.directives import check_directive_option
from gnnc.ir.loop_structure import SweepKind, give_schedule, kernel_buffer, take_schedule
from gnnc.ir.schedule import parse_sizes


def _sizes_of(fn: func.FuncOp) -> dict[str, int] | None:
    """The `specialize` entry of the kernel's sweeps (all carry the same), consumed."""
    found = {take_schedule(op, "specialize") for op in fn.walk() if isinstance(op, loop.ForDstOp)}
    found.discard(None)
    if not found:
        return None
    if len(found) > 1:
        raise CompileError(
            f"@{fn.sym_name.data}: its sweeps are specialised to different sizes: "
            + ", ".join(sorted(cast(StringAttr, a).data for a in found))
        )
    (entry,) = found
    assert isinstance(entry, StringAttr)
    return dict(parse_sizes(entry.data))


@dataclass(frozen=True)
class SpecializeSizesPass(ModulePass):
    """Replaces the run-time sizes of the dimensions a kernel's schedule specialises with constants.

    Given sizes, every kernel is specialised to them. convert-graph-to-loop
    did not see them: a `stream outputs` row stays in acc_rows, where the
    schedule's `specialize` would put a short one on the stack.
    """

    name = "specialize-sizes"

    sizes: str | None = None
    """`specialize SIZES` for every kernel (`sizes="F 32"`, `"H 4 F 64"`); none: each kernel's schedule decides."""

    def __post_init__(self) -> None:
        if self.sizes is not None:
            check_directive_option(str(self.spec()), ["specialize", *self.sizes.split()])

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.sizes is not None:
            give_schedule(op, "specialize", StringAttr(" ".join(self.sizes.split())), tuple(SweepKind))
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and kernel_abi.has_record(f)]:
            sizes = _sizes_of(fn)
            if sizes is None:
                continue
            record = kernel_abi.get_record(fn)
            names = record.dims
            unknown = sorted(set(sizes) - set(names))
            if unknown:
                raise CompileError(
                    f"specialize: kernel @{fn.sym_name.data} has no dimension "
                    f"{', '.join(unknown)} (its dimensions: {', '.join(names) or 'none'})"
                )
            dims = kernel_buffer(fn, "dims")
            for use in list(dims.uses):
                load = use.operation
                if not isinstance(load, memref.LoadOp) or load.memref is not dims:
                    continue
                at = load.indices[0].owner
                if not (isinstance(at, arith.ConstantOp) and isinstance(at.value, IntegerAttr)):
                    raise CompileError(f"@{fn.sym_name.data}: a dimension is read at a computed position")
                name = names[at.value.value.data]
                if name in sizes:
                    size = arith.ConstantOp(IntegerAttr(sizes[name], cast(IntegerType, load.res.type)))
                    load.parent_block().insert_op_before(size, load)  # type: ignore[union-attr]  # the load is in the kernel's body
                    load.res.replace_all_uses_with(size.result)
                    load.detach()
                    load.erase()
            record.sizes = sizes
            kernel_abi.set_record(fn, record)
