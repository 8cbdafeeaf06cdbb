"""`hybrid K`: FeatGraph's hybrid partitioning in a cuda grid (any mapping; map-threads).

The rows of the up to K sources of highest out-degree are kept in each
block's shared memory. The runtime ranks the sources once per graph
(`plans.hybrid_sources`) and passes two arrays after the kernel's others:
`hybrid_hot` (K', then the K' staged sources by slot) and `hybrid_slot`
(per vertex its slot, -1 for none); K' is K capped by the 48 KB a block may
use. A grid whose edges read source rows (`x[u]`, any V-leading buffer it
does not write) starts with every thread of the block copying a strided
share of the K' rows of each such buffer into shared memory
(`llvm_ext.shared_memory`, coalesced: thread t copies elements t,
t + block_size, ...), then `llvm_ext.barrier`; an edge then reads `x[u]`
from shared memory when `slot[u] >= 0`, else from global memory (the code
after the slot is emitted once for each case, so that each version's loads
have one address space). The shared layout is, per staged buffer in order,
K' rows of its row size; the record lists the row sizes of each launch
(`shared`), from which the runtime sizes the launch's dynamic shared memory.
"""

from __future__ import annotations

from typing import cast

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    IndexType,
    IntegerAttr,
    MemRefType,
    i64,
)
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from gnnc.errors import CompileError
from gnnc.ir import abi, kernel_abi, loop
from gnnc.ir.llvm_ext import AtomicRmwOp, BarrierOp, SharedMemoryOp
from gnnc.transforms.loop.thread_grids import const

index = IndexType()


#: The arguments a `hybrid K` kernel takes after all others (see the module docstring).
HYBRID_ARGUMENTS = ("hybrid_hot", "hybrid_slot")


def _factors(value: SSAValue, dims: SSAValue, dim_names: list[str]) -> list[int | str] | None:
    """`value` as a product of constants and kernel dims (`[2, "F"]`), None when it is
    not one: the row size of a staged buffer, which the runtime recomputes from
    the dims to size the shared memory."""
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return [owner.value.value.data]
    if isinstance(owner, arith.MuliOp):
        lhs, rhs = _factors(owner.lhs, dims, dim_names), _factors(owner.rhs, dims, dim_names)
        return None if lhs is None or rhs is None else lhs + rhs
    if isinstance(owner, arith.IndexCastOp) and isinstance(owner.input.owner, memref.LoadOp):
        load = owner.input.owner
        position = load.indices[0].owner
        if load.memref is dims and isinstance(position, arith.ConstantOp) and isinstance(position.value, IntegerAttr):
            return [dim_names[position.value.value.data]]
    return None


def _normal(factors: list[int | str]) -> tuple[int | str, ...]:
    constant = 1
    for f in factors:
        if isinstance(f, int):
            constant *= f
    names = sorted(f for f in factors if isinstance(f, str))
    return (*([constant] if constant != 1 else []), *names)


class HybridStaging:
    """Stages the hot sources' rows of one kernel's grids in shared memory."""

    def __init__(self, fn: func.FuncOp, record: abi.AbiRecord, kernel: str, strategy: str, limit: int):
        self.fn, self.kernel, self.strategy, self.limit = fn, kernel, strategy, limit
        self.dim_names: list[str] = record.dims
        args = fn.body.block.args
        self.dims = args[abi.GRAPH_ARGUMENTS.index("dims")]
        self.first_data = len(abi.GRAPH_ARGUMENTS)
        self.data_args = len(args)  # params, results, temps, ...: what a grid may stage
        self.hot: SSAValue | None = None
        self.slot: SSAValue | None = None
        self.staged_any = False

    def _arguments(self) -> tuple[SSAValue, SSAValue]:
        if self.hot is None:
            self.hot = kernel_abi.append_argument(self.fn, "hybrid_hot")
            self.slot = kernel_abi.append_argument(self.fn, "hybrid_slot")
        assert self.slot is not None
        return self.hot, self.slot

    def stage(self, grid: loop.GridOp, sources: list[SSAValue]) -> list[list[int | str]]:
        """Rewrites the grid's reads of source rows (`buf[u * S + rest]`, u in
        `sources`) to read shared memory for staged sources, and prepends the
        block's staging loops and barrier; returns the staged row sizes."""
        body = grid.body.block
        written = {o.memref for o in body.walk() if isinstance(o, memref.StoreOp | AtomicRmwOp)}
        reads: list[tuple[memref.LoadOp, SSAValue, tuple, SSAValue | None]] = []
        regions: dict[tuple, BlockArgument] = {}
        for load in [o for o in body.walk() if isinstance(o, memref.LoadOp)]:
            buf = load.memref
            if not (
                isinstance(buf, BlockArgument)
                and buf.owner is self.fn.body.block
                and self.first_data <= buf.index < self.data_args
                and buf not in written
            ):
                continue
            index_value = load.indices[0]
            owner = index_value.owner
            rest: SSAValue | None = None
            factors: list[int | str] | None
            if index_value in sources:
                u, factors = index_value, []
            elif isinstance(owner, arith.MuliOp) and owner.lhs in sources:
                u, factors = owner.lhs, _factors(owner.rhs, self.dims, self.dim_names)
            elif (
                isinstance(owner, arith.AddiOp)
                and isinstance(owner.lhs.owner, arith.MuliOp)
                and owner.lhs.owner.lhs in sources
            ):
                u, factors, rest = (
                    owner.lhs.owner.lhs,
                    _factors(owner.lhs.owner.rhs, self.dims, self.dim_names),
                    owner.rhs,
                )
            else:
                continue
            if factors is None:
                continue
            key = (buf.index, _normal(factors))
            regions.setdefault(key, buf)
            reads.append((load, u, key, rest))
        if not reads:
            return []
        self.staged_any = True
        hot, slot_table = self._arguments()
        element = next(iter(regions.values())).type
        assert isinstance(element, MemRefType)

        # before the grid: K', each region's row size and offset, the shared buffer
        pre: list[Operation] = []
        c0, c1 = const(pre, 0), const(pre, 1)
        k_raw = memref.LoadOp.get(hot, [c0])
        k = arith.IndexCastOp(k_raw, index)
        pre += [k_raw, k]
        row_size: dict[tuple, SSAValue] = {}
        offset: dict[tuple, SSAValue] = {}
        elements = c0
        for key in regions:
            size = const(pre, 1)
            for f in key[1]:
                if isinstance(f, int):
                    factor = const(pre, f)
                else:
                    dim_at = const(pre, self.dim_names.index(f))
                    raw = memref.LoadOp.get(self.dims, [dim_at])
                    as_index = arith.IndexCastOp(raw, index)
                    pre += [raw, as_index]
                    factor = as_index.result
                product = arith.MuliOp(size, factor)
                pre.append(product)
                size = product.result
            start = arith.MuliOp(k, elements)
            total = arith.AddiOp(elements, size)
            pre += [start, total]
            row_size[key], offset[key], elements = size, start.result, total.result
        shared_elements = arith.MuliOp(k, elements)
        shared = SharedMemoryOp(shared_elements, MemRefType(element.element_type, [DYNAMIC_INDEX]))
        pre += [shared_elements, shared]
        Rewriter.insert_op(pre, InsertPoint.before(grid))

        # the block's threads copy the K' rows of each region, then wait for each other
        staging: list[Operation] = []
        thread = body.args[1]
        step = const(staging, grid.block_size.value.data)
        for key, buf in regions.items():
            count = arith.MuliOp(k, row_size[key])
            copy = Block(arg_types=[index])
            i = copy.args[0]
            row = arith.DivUIOp(i, row_size[key])
            column = arith.RemUIOp(i, row_size[key])
            position = arith.AddiOp(row, c1)
            source_raw = memref.LoadOp.get(hot, [position])
            source = arith.IndexCastOp(source_raw, index)
            base = arith.MuliOp(source, row_size[key])
            at = arith.AddiOp(base, column)
            value = memref.LoadOp.get(buf, [at])
            into = arith.AddiOp(offset[key], i)
            copy.add_ops(
                [
                    row,
                    column,
                    position,
                    source_raw,
                    source,
                    base,
                    at,
                    value,
                    into,
                    memref.StoreOp.get(value, shared.result, [into]),
                    scf.YieldOp(),
                ]
            )
            staging += [count, scf.ForOp(thread, count, step, [], copy)]
        staging.append(BarrierOp())
        Rewriter.insert_op(staging, InsertPoint.at_start(body))

        # each source's slot, once where it is defined; then the code after it
        # twice: reading staged rows (shared memory) or the others (global),
        # so each version's loads have one address space (ld.shared /
        # ld.global, where one load of either would be a generic ld)
        for u in {u: None for _, u, _, _ in reads}:
            zero64 = arith.ConstantOp(IntegerAttr(0, i64))
            raw = memref.LoadOp.get(slot_table, [u])
            is_hot = arith.CmpiOp(raw, zero64, "sge")
            slot = arith.IndexCastOp(raw, index)
            ops = [zero64, raw, is_hot, slot]
            if isinstance(u, BlockArgument):
                Rewriter.insert_op(ops, InsertPoint.at_start(u.owner))
            else:
                Rewriter.insert_op(ops, InsertPoint.after(cast(Operation, u.owner)))
            scope = slot.parent_block()
            assert scope is not None and scope.last_op is not None
            terminator = scope.last_op
            after = list(scope.ops)
            after = after[after.index(slot) + 1 : -1]
            if terminator.operands or terminator.results:
                raise CompileError(
                    f"kernel '{self.kernel}': map {self.strategy} hybrid {self.limit}: internal "
                    "error: an edge walk yields values"
                )
            global_version = Block()
            mapper: dict[SSAValue, SSAValue] = {}
            for o in after:
                global_version.add_op(o.clone(value_mapper=mapper))
            global_version.add_op(scf.YieldOp())
            staged_version = Block()
            for o in after:
                o.detach()
                staged_version.add_op(o)
            staged_version.add_op(scf.YieldOp())
            Rewriter.insert_op(
                scf.IfOp(is_hot.result, [], [staged_version], [global_version]), InsertPoint.before(terminator)
            )
            for load, source_id, key, rest in reads:
                if source_id is not u:
                    continue
                row_base = arith.MuliOp(slot, row_size[key])
                first = arith.AddiOp(offset[key], row_base)
                new_ops: list[Operation] = [row_base, first]
                at = first
                if rest is not None:
                    at = arith.AddiOp(first, rest)
                    new_ops.append(at)
                staged = memref.LoadOp.get(shared.result, [at])
                Rewriter().replace_op(load, [*new_ops, staged], [staged.res])
        return [list(key[1]) for key in regions]

    def check_used(self) -> None:
        if not self.staged_any:
            raise CompileError(
                f"kernel '{self.kernel}': map {self.strategy} hybrid {self.limit} is refused: its edges read no "
                "source rows (x[u] of a vertex tensor) that shared memory could hold"
            )
