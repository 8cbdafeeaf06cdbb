"""convert-loop-to-openmp: each `loop.for_dst` becomes a libgomp parallel region.

The loop body is outlined into a private function that GCC would have
written for

    #pragma omp parallel num_threads(T)
    #pragma omp for schedule(dynamic, 1) nowait
    for (b = 0; b < num_blocks; b++)
        for (v = blocks[b]; v < blocks[b + 1]; v++) body(v, omp_get_thread_num());

so a `.so` called from C is parallel too. A sweep inside tile or partition
loops (`loop.for_tile`, `loop.for_partition`, from the schedule passes) is
outlined with them: every worker runs those loops, the blocks of each sweep
are shared out, and a barrier ends each partition's or tile's sweep. The schedule
passes have rewritten the sweep by now; only the thread mapping (`parallel`)
is this pass's to implement. The kernel's arguments travel to the
outlined function in an i64 closure (buffers as pointers, sizes as integers);
values computed before the loop (dims, sizes, constants) are recomputed there,
which is cheaper than passing them. Blocks are balanced by edge count by the
runtime, so a hub cannot starve a thread of work.

Before outlining, the pass notes in the kernel's ABI record whether it reads
edge ids at all (`edge_ids`, `loop_structure.reads_edge_ids`) and, if
partitioned, `in_src` (`in_src`, `reads_in_src`): afterwards every argument
travels in the closure and looks read. A kernel that reads none lets the
runtime pass placeholders for `in_eid` and `part_eid` (or `in_src`).

libgomp's dynamic iterator is a while loop; it becomes an `scf.for` over at
most num_blocks chunk requests (a worker cannot receive more chunks than there
are blocks; a request after the work is exhausted just returns false).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects import arith, func, llvm, memref, scf
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    StringAttr,
    i32,
    i64,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from gnnc.errors import CompileError
from gnnc.ir import kernel_abi, llvm_ext, loop
from gnnc.ir.abi import SIMD_BITS_ATTR
from gnnc.ir.directives import check_directive_option
from gnnc.ir.loop_structure import WORKSHARING_KEYS, reads_edge_ids, reads_in_src, sweeps

index = IndexType()
i8 = IntegerType(8)
closure_type = MemRefType(i64, [DYNAMIC_INDEX])
ptr = llvm.LLVMPointerType()

#: libgomp entry points, as GCC calls them.
RUNTIME_FUNCTIONS: dict[str, tuple[list, list]] = {
    "GOMP_parallel": ([ptr, closure_type, i32, i32], []),
    "GOMP_loop_dynamic_start": ([i64, i64, i64, i64, closure_type, closure_type], [i8]),
    "GOMP_loop_dynamic_next": ([closure_type, closure_type], [i8]),
    "GOMP_loop_end_nowait": ([], []),
    "GOMP_loop_end": ([], []),
    "omp_get_thread_num": ([], [i32]),
}


def _const(value: int, type_: IntegerType | IndexType = index) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, type_))


def _declare_runtime(module: ModuleOp) -> None:
    present = {op.sym_name.data for op in module.ops if isinstance(op, func.FuncOp)}
    for name, (inputs, outputs) in RUNTIME_FUNCTIONS.items():
        if name not in present:
            module.body.block.add_op(func.FuncOp.external(name, inputs, outputs))


class _Outliner:
    def __init__(self, fn: func.FuncOp, phase: Operation, for_dst: loop.ForDstOp, name: str):
        self.fn, self.phase, self.for_dst, self.name = fn, phase, for_dst, name
        self.entry = fn.body.block
        self.mapping: dict[SSAValue, SSAValue] = {}

    def outline(self) -> tuple[func.FuncOp, func.FuncOp]:
        """(the function GOMP_parallel starts, the worker function it calls).

        The worker takes the kernel's own arguments with their `noalias`
        attributes: buffers that came out of a closure would lose them, and
        without them LLVM guards every vectorised loop with overlap checks.
        """
        kernel_types = [a.type for a in self.entry.args]
        work_body = Block(arg_types=kernel_types)
        for old, new in zip(self.entry.args, work_body.args):
            self.mapping[old] = new
        self._rematerialize(work_body)
        self._emit_worksharing(work_body)
        if any(isinstance(op, llvm_ext.StreamCopyOp) for op in work_body.walk()):
            # streaming stores are weakly ordered: the caller reads the rows once every worker has fenced
            work_body.add_op(llvm_ext.StoreFenceOp())
        work_body.add_op(func.ReturnOp())
        work = func.FuncOp(f"{self.name}_work", (kernel_types, []), Region(work_body), visibility="private")
        work.arg_attrs = self.fn.arg_attrs

        start = Block(arg_types=[closure_type])
        closure = start.args[0]
        call_args: list[SSAValue] = []
        for i, arg in enumerate(self.entry.args):
            slot = _const(i)
            start.add_op(slot)
            if isinstance(arg.type, MemRefType):
                load = llvm_ext.LoadBufferOp(closure, slot, arg.type)
                start.add_op(load)
                call_args.append(load.result)
            else:
                raw = memref.LoadOp.get(closure, [slot])
                cast = arith.IndexCastOp(raw, arg.type)
                start.add_ops([raw, cast])
                call_args.append(cast.result)
        start.add_ops([func.CallOp(work.sym_name.data, call_args, []), func.ReturnOp()])
        trampoline = func.FuncOp(self.name, ([closure_type], []), Region(start), visibility="private")
        # LLVM inlines the worker into the trampoline: both need the kernel's vector width
        if SIMD_BITS_ATTR in self.fn.attributes:
            for outlined in (work, trampoline):
                outlined.attributes[SIMD_BITS_ATTR] = self.fn.attributes[SIMD_BITS_ATTR]
        return trampoline, work

    def _rematerialize(self, body: Block) -> None:
        needed: list[Operation] = []
        seen: set[Operation] = set()

        def need(value: SSAValue) -> None:
            op = value.owner
            if isinstance(op, Operation) and op.parent_block() is self.entry and op not in seen:
                seen.add(op)
                for operand in op.operands:
                    need(operand)
                needed.append(op)

        for op in self.phase.walk():
            for operand in op.operands:
                need(operand)
        order = {op: i for i, op in enumerate(self.entry.ops)}
        for op in sorted(needed, key=order.__getitem__):
            if op is self.phase:
                continue
            clone = op.clone(value_mapper=self.mapping)
            body.add_op(clone)
            for old, new in zip(op.results, clone.results):
                self.mapping[old] = new

    def _emit_worksharing(self, body: Block) -> None:
        """Every worker runs the phase (its tile and partition loops); the sweep's blocks are shared out."""
        m = self.mapping
        d = self.for_dst
        num_blocks = m[d.num_blocks]
        blocks = m[d.blocks]
        c0, c1, c0_i64, c1_i64 = _const(0), _const(1), _const(0, i64), _const(1, i64)
        tid = func.CallOp("omp_get_thread_num", [], [i32])
        worker = arith.IndexCastOp(tid.res[0], index)
        # libgomp writes the chunk bounds through two `long *`
        istart = memref.AllocaOp.get(i64, shape=[DYNAMIC_INDEX], dynamic_sizes=[c1])
        iend = memref.AllocaOp.get(i64, shape=[DYNAMIC_INDEX], dynamic_sizes=[c1])
        istart_dyn, iend_dyn = istart.memref, iend.memref
        nb64 = arith.IndexCastOp(num_blocks, i64)
        body.add_ops([c0, c1, c0_i64, c1_i64, tid, worker, istart, iend, nb64])

        # for k in [0, num_blocks): got = k == 0 ? start(...) : next(...)
        chunk_loop = Block(arg_types=[index])
        k = chunk_loop.args[0]
        first = arith.CmpiOp(k, c0, "eq")
        start_block, next_block = Block(), Block()
        start = func.CallOp(
            "GOMP_loop_dynamic_start",
            [c0_i64, nb64, c1_i64, c1_i64, istart_dyn, iend_dyn],
            [i8],
        )
        start_block.add_ops([start, scf.YieldOp(start.res[0])])
        nxt = func.CallOp("GOMP_loop_dynamic_next", [istart_dyn, iend_dyn], [i8])
        next_block.add_ops([nxt, scf.YieldOp(nxt.res[0])])
        got_op = scf.IfOp(first, [i8], [start_block], [next_block])
        zero8 = _const(0, i8)
        got = arith.CmpiOp(got_op.results[0], zero8, "ne")
        chunk_loop.add_ops([first, got_op, zero8, got])

        # the chunk: blocks [istart, iend), positions blocks[b] .. blocks[b+1]
        chunk = Block()
        lo_raw = memref.LoadOp.get(istart_dyn, [c0])
        hi_raw = memref.LoadOp.get(iend_dyn, [c0])
        lo = arith.IndexCastOp(lo_raw, index)
        hi = arith.IndexCastOp(hi_raw, index)
        chunk.add_ops([lo_raw, hi_raw, lo, hi])
        per_block = Block(arg_types=[index])
        b = per_block.args[0]
        b1 = arith.AddiOp(b, c1)
        vlo_raw = memref.LoadOp.get(blocks, [b])
        vhi_raw = memref.LoadOp.get(blocks, [b1])
        vlo = arith.IndexCastOp(vlo_raw, index)
        vhi = arith.IndexCastOp(vhi_raw, index)
        per_block.add_ops([b1, vlo_raw, vhi_raw, vlo, vhi])

        per_position = Block(arg_types=[index])
        old_body = d.body.block
        old_position, old_worker = old_body.args
        # move the loop body into the outlined function
        for op in list(old_body.ops):
            op.detach()
            per_position.add_op(op)
        terminator = per_position.last_op
        assert isinstance(terminator, loop.YieldOp)
        terminator.detach()
        terminator.erase()
        per_position.add_op(scf.YieldOp())
        old_position.replace_all_uses_with(per_position.args[0])
        old_worker.replace_all_uses_with(worker.result)

        per_block.add_ops([scf.ForOp(vlo, vhi, c1, [], per_position), scf.YieldOp()])
        chunk.add_ops([scf.ForOp(lo, hi, c1, [], per_block), scf.YieldOp()])
        chunk_loop.add_ops([scf.IfOp(got, [], [chunk]), scf.YieldOp()])

        any_blocks = arith.CmpiOp(num_blocks, c0, "sgt")
        guarded = Block()
        # Partitions share destinations, and so do tiles: each tile's sweep redoes a
        # destination's per-edge work, writing its edge results (gat's alpha) again and
        # scaling them by the softmax sum, maybe on another thread than the tile before
        # (a scaling done twice, 1 call in 7 with `tile features 4` at 2 threads). The
        # next sweep starts after a barrier.
        shared = any(isinstance(a, loop.ForPartitionOp | loop.ForTileOp) for a in _enclosing(d, self.phase))
        end = "GOMP_loop_end" if shared else "GOMP_loop_end_nowait"
        guarded.add_ops(
            [
                scf.ForOp(c0, num_blocks, c1, [], chunk_loop),
                func.CallOp(end, [], []),
                scf.YieldOp(),
            ]
        )
        worksharing: list[Operation] = [any_blocks, scf.IfOp(any_blocks, [], [guarded])]
        if self.phase is d:
            body.add_ops(worksharing)
        else:
            # the tile and partition loops stay, for convert-loop-to-scf, around the shared sweep
            parent = d.parent_block()
            assert parent is not None
            parent.insert_ops_before(worksharing, d)
            self.phase.detach()
            body.add_op(self.phase)
        d.detach()
        d.erase()
        for old, new in self.mapping.items():
            old.replace_uses_with_if(new, lambda use: body.is_ancestor(use.operation))


def _enclosing(op: Operation, stop: Operation) -> list[Operation]:
    """The ops between op and stop (stop included, op not)."""
    found = []
    parent = op.parent_op()
    while parent is not None:
        found.append(parent)
        if parent is stop:
            break
        parent = parent.parent_op()
    return found


def _launch(fn: func.FuncOp, num_threads: SSAValue, outlined: str) -> list[Operation]:
    """The ops that replace for_dst in the kernel: fill the closure, GOMP_parallel."""
    args = fn.body.block.args
    ops: list[Operation] = []
    n = _const(len(args))
    closure = memref.AllocaOp.get(i64, shape=[DYNAMIC_INDEX], dynamic_sizes=[n])
    ops += [n, closure]
    for i, arg in enumerate(args):
        slot = _const(i)
        ops.append(slot)
        if isinstance(arg.type, MemRefType):
            ops.append(llvm_ext.StoreBufferOp(arg, closure, slot))
        else:
            cast = arith.IndexCastOp(arg, i64)
            ops += [cast, memref.StoreOp.get(cast, closure, [slot])]
    address = llvm.AddressOfOp(outlined, ptr)
    threads = arith.IndexCastOp(num_threads, i32)
    flags = _const(0, i32)
    call = func.CallOp("GOMP_parallel", [address, closure, threads, flags], [])
    ops += [address, threads, flags, call]
    return ops


@dataclass(frozen=True)
class ConvertLoopToOpenmpPass(ModulePass):
    """Outlines every destination sweep (with its tile and partition loops) into a libgomp parallel region."""

    name = "convert-loop-to-openmp"

    parallel: str | None = None
    """`parallel dst`: threads share the destinations, as they do without it (the only mapping)."""

    def __post_init__(self) -> None:
        if self.parallel is not None:
            check_directive_option(str(self.spec()), ["parallel", self.parallel])

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        kernels = [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks]
        if not any(isinstance(o, loop.ForDstOp) for f in kernels for o in f.walk()):
            return
        _declare_runtime(op)
        for fn in kernels:
            if kernel_abi.has_record(fn):
                # what the kernel reads, found now: once outlined, every argument travels in the
                # closure and looks read
                record = kernel_abi.get_record(fn)
                read = replace(
                    record,
                    edge_ids=record.edge_ids and reads_edge_ids(fn),
                    in_src=record.in_src and reads_in_src(fn),
                    deg_in=bool(kernel_abi.argument(fn, "deg_in").uses),
                    deg_out=bool(kernel_abi.argument(fn, "deg_out").uses),
                )
                if read != record:
                    kernel_abi.set_record(fn, read)
            for i, (phase, for_dst) in enumerate(sweeps(fn)):
                _check_schedule_consumed(for_dst)
                name = f"{fn.sym_name.data}_phase{i}"
                # no blocks (no vertices, or no split neighbour groups): no
                # parallel region, whose thread wake-up costs a time slice on
                # a loaded machine
                c0 = _const(0)
                any_blocks = arith.CmpiOp(for_dst.num_blocks, c0, "sgt")
                then = Block()
                then.add_ops([*_launch(fn, for_dst.num_threads, name), scf.YieldOp()])
                fn.body.block.insert_ops_before([c0, any_blocks, scf.IfOp(any_blocks, [], [then])], phase)
                outlined, work = _Outliner(fn, phase, for_dst, name).outline()
                op.body.block.insert_op_after(work, fn)
                op.body.block.insert_op_after(outlined, fn)


def _check_schedule_consumed(for_dst: loop.ForDstOp) -> None:
    """Only the thread mapping is this pass's to implement; the schedule passes consumed the rest."""
    left = dict(for_dst.schedule.data) if for_dst.schedule is not None else {}
    for key in WORKSHARING_KEYS:
        left.pop(key, None)
    order = left.get("order")
    if isinstance(order, StringAttr) and order.data == "identity":
        del left["order"]
    if left:
        keys = ", ".join(sorted(left))
        raise CompileError(f"'loop.for_dst' still carries schedule {keys}: no pass implemented it")
