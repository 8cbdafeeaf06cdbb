"""convert-loop-to-openmp: each `loop.for_dst` becomes a libgomp parallel region.

The loop body is outlined into a private function that GCC would have
written for

    #pragma omp parallel num_threads(T)
    #pragma omp for schedule(dynamic, 1) nowait
    for (b = 0; b < num_blocks; b++)
        for (v = blocks[b]; v < blocks[b + 1]; v++) body(v, omp_get_thread_num());

so a `.so` called from C is parallel too. The kernel's arguments travel to the
outlined function in an i64 closure (buffers as pointers, sizes as integers);
values computed before the loop (dims, sizes, constants) are recomputed there,
which is cheaper than passing them. Blocks are balanced by edge count by the
runtime, so a hub cannot starve a thread of work.

libgomp's dynamic iterator is a while loop; it becomes an `scf.for` over at
most num_blocks chunk requests (a worker cannot receive more chunks than there
are blocks; a request after the work is exhausted just returns false).
"""

from __future__ import annotations

import json
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

from gnnc import abi
from gnnc.dialects import llvm_ext, loop
from gnnc.errors import CompileError

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


def _const(value: int, type_=index) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, type_))


def _declare_runtime(module: ModuleOp) -> None:
    present = {op.sym_name.data for op in module.ops if isinstance(op, func.FuncOp)}
    for name, (inputs, outputs) in RUNTIME_FUNCTIONS.items():
        if name not in present:
            module.body.block.add_op(func.FuncOp.external(name, inputs, outputs))


class _Outliner:
    def __init__(self, fn: func.FuncOp, for_dst: loop.ForDstOp, name: str, order: str,
                 tile: tuple[int, str] | None = None, partitions: int | None = None,
                 edge_order: str | None = None, vector_width: tuple[int, str] | None = None):
        self.fn, self.for_dst, self.name, self.order, self.tile = fn, for_dst, name, order, tile
        self.partitions, self.edge_order, self.vector_width = partitions, edge_order, vector_width
        self.entry = fn.body.block
        self.mapping: dict[SSAValue, SSAValue] = {}
        self.partitioned_walks = 0

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

        for op in self.for_dst.walk():
            for operand in op.operands:
                need(operand)
        order = {op: i for i, op in enumerate(self.entry.ops)}
        for op in sorted(needed, key=order.__getitem__):
            if op is self.for_dst:
                continue
            clone = op.clone(value_mapper=self.mapping)
            body.add_op(clone)
            for old, new in zip(op.results, clone.results):
                self.mapping[old] = new

    def _emit_worksharing(self, body: Block) -> None:
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

        # the chunk: blocks [istart, iend), destinations blocks[b] .. blocks[b+1]
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

        per_vertex = Block(arg_types=[index])
        v = per_vertex.args[0]
        if self.edge_order is not None:
            # position -> one edge of the Hilbert-ordered list: its destination
            hilbert_dst = m[self.entry.args[-2]]
            raw = memref.LoadOp.get(hilbert_dst, [v])
            cast = arith.IndexCastOp(raw, index)
            per_vertex.add_ops([raw, cast])
            v = cast.result
        elif self.order != "identity":
            # position -> destination through the runtime's permutation
            order_buf = m[self.entry.args[abi.GRAPH_ARGUMENTS.index("dst_order")]]
            raw = memref.LoadOp.get(order_buf, [v])
            cast = arith.IndexCastOp(raw, index)
            per_vertex.add_ops([raw, cast])
            v = cast.result
        old_body = d.body.block
        old_v, old_worker = old_body.args
        # move the loop body into the outlined function
        for op in list(old_body.ops):
            op.detach()
            per_vertex.add_op(op)
        terminator = per_vertex.last_op
        assert isinstance(terminator, loop.YieldOp)
        terminator.detach()
        terminator.erase()
        per_vertex.add_op(scf.YieldOp())
        old_v.replace_all_uses_with(v)
        old_worker.replace_all_uses_with(worker.result)
        for old, new in self.mapping.items():
            old.replace_uses_with_if(new, lambda use: per_vertex.is_ancestor(use.operation))

        per_block.add_ops([scf.ForOp(vlo, vhi, c1, [], per_vertex), scf.YieldOp()])
        chunk.add_ops([scf.ForOp(lo, hi, c1, [], per_block), scf.YieldOp()])
        chunk_loop.add_ops([scf.IfOp(got, [], [chunk]), scf.YieldOp()])

        any_blocks = arith.CmpiOp(num_blocks, c0, "sgt")
        guarded = Block()
        # partitions share destinations: the next one starts after a barrier
        end = "GOMP_loop_end" if self.partitions else "GOMP_loop_end_nowait"
        guarded.add_ops([
            scf.ForOp(c0, num_blocks, c1, [], chunk_loop),
            func.CallOp(end, [], []),
            scf.YieldOp(),
        ])
        worksharing: list[Operation] = [any_blocks, scf.IfOp(any_blocks, [], [guarded])]
        if self.edge_order is not None:
            self._one_edge_per_position(per_vertex, per_vertex.args[0])
        if self.partitions:
            worksharing = self._partition_sources(worksharing, per_vertex, v)
        if self.vector_width is not None:
            self._vectorize_rows(per_vertex, v)
        if self.tile is None:
            body.add_ops(worksharing)
        else:
            self._tile_features(body, worksharing, per_vertex)

    def _one_edge_per_position(self, per_vertex: Block, position: SSAValue) -> None:
        """`order edges hilbert`: each position is one edge of a Hilbert-ordered list.

        FeatGraph traverses the edges of an edge-wise kernel (SDDMM) along a
        Hilbert curve over (src, dst), so that consecutive edges share source
        and destination rows in cache. Only a kernel whose destinations do
        nothing but visit their in-edges (edge results, no aggregation) can
        be traversed edge by edge.
        """
        edge_loops = [op for op in per_vertex.ops if isinstance(op, loop.ForInEdgesOp)]
        nested = [op for op in per_vertex.walk() if isinstance(op, loop.ForInEdgesOp)]
        outside = [
            op for op in per_vertex.ops
            if isinstance(op, loop.ForFeatureOp | memref.StoreOp | scf.ForOp)
        ]
        if len(edge_loops) != 1 or len(nested) != 1 or outside:
            raise CompileError(
                "order edges hilbert: needs an edge-wise kernel (results per edge, no aggregation "
                "or softmax); this kernel aggregates at its destinations"
            )
        edge_loop = edge_loops[0]
        hilbert_src, hilbert_eid = self.mapping[self.entry.args[-3]], self.mapping[self.entry.args[-1]]
        u_raw = memref.LoadOp.get(hilbert_src, [position])
        e_raw = memref.LoadOp.get(hilbert_eid, [position])
        u = arith.IndexCastOp(u_raw, index)
        e = arith.IndexCastOp(e_raw, index)
        per_vertex.insert_ops_before([u_raw, e_raw, u, e], edge_loop)
        body = edge_loop.body.block
        old_src = edge_loop.src
        terminator = body.last_op
        assert isinstance(terminator, loop.YieldOp)
        terminator.detach()
        terminator.erase()
        pos_arg, u_arg, e_arg = body.args
        pos_arg.replace_all_uses_with(position)
        u_arg.replace_all_uses_with(u.result)
        e_arg.replace_all_uses_with(e.result)
        for op in list(body.ops):
            op.detach()
            per_vertex.insert_op_before(op, edge_loop)
        # prefetching reads ahead in the traversal order, i.e. the Hilbert list
        old_src.replace_uses_with_if(hilbert_src, lambda use: per_vertex.is_ancestor(use.operation))
        edge_loop.detach()
        edge_loop.erase()

    def _partition_sources(self, worksharing: list[Operation], per_vertex: Block, v: SSAValue) -> list[Operation]:
        """FeatGraph's 1-D source partitioning: one destination sweep per source partition.

        Partition p holds the edges whose sources lie in the p-th range of
        vertex ids, so the source rows a sweep gathers fit in the last-level
        cache. All threads work on one partition at a time (a barrier between
        partitions). Only one in-edge walk of a destination is partitioned:
        the one gathering the widest rows (the deepest feature nest). The
        work before it (initialising accumulators, and earlier walks over
        all in-edges, such as a softmax's maximum, which read only narrow
        score rows) runs in the first partition; the work after it
        (finishing mean / max / min, a softmax's normalisation, vertex
        results) in the last. Accumulators live in the output row or in the
        destination's row of acc_rows (convert-graph-to-loop puts them there
        under partitions), never in per-thread scratch, which another thread
        would own in the next partition.
        """
        k = self.partitions
        assert k is not None
        args = self.entry.args
        m = self.mapping
        scratch = m[args[abi.GRAPH_ARGUMENTS.index("scratch")]]
        part_indptr, part_src, part_eid = (m[a] for a in args[-3:])
        edge_loops = [op for op in per_vertex.ops if isinstance(op, loop.ForInEdgesOp)]
        nested = [op for op in per_vertex.walk() if isinstance(op, loop.ForInEdgesOp)]

        def refuse(reason: str) -> CompileError:
            return CompileError(f"partition src {k}: {reason}")

        if len(nested) != len(edge_loops):
            raise refuse("needs the kernel's in-edge walks directly in the destination loop")
        if not edge_loops:
            # a phase of only per-vertex work (a transform before a gather) has
            # nothing to partition; its barrier-separated sweep runs once
            return worksharing
        self.partitioned_walks += 1
        depths = [_feature_depth(op) for op in edge_loops]
        widest = max(depths)
        if depths.count(widest) != 1:
            raise refuse(
                "needs one in-edge walk that gathers wider rows than the others, to partition; "
                f"this kernel has {depths.count(widest)} walks of equal feature depth"
            )
        edge_loop = edge_loops[depths.index(widest)]
        ops = list(per_vertex.ops)
        split = ops.index(edge_loop)
        before, after = ops[:split], ops[split + 1 : -1]
        # per-edge scratch (a dot or @ of one edge) is fine; a per-destination
        # value in scratch set before the partitioned walk would be lost
        # between partitions
        for op in before:
            for inner in [op, *op.walk()] if op.regions else [op]:
                if (isinstance(inner, memref.LoadOp | memref.StoreOp) and inner.memref is scratch
                        and not any(isinstance(a, loop.ForInEdgesOp) for a in _ancestors(inner, per_vertex))):
                    raise refuse(
                        "needs per-destination values that persist across partitions in the output row or "
                        "acc_rows; this kernel keeps one in per-thread scratch"
                    )
        c0, c1, ck = _const(0), _const(1), _const(k)
        part_body = Block(arg_types=[index])
        p = part_body.args[0]
        last = arith.SubiOp(ck, c1)
        is_first = arith.CmpiOp(p, c0, "eq")
        is_last = arith.CmpiOp(p, last.result, "eq")
        part_body.add_ops([last, is_first, is_last])

        # where this destination's edges of partition p start in part_indptr
        vertices = m[args[0]]
        stride = arith.AddiOp(vertices, c1)
        row = arith.MuliOp(p, stride)
        at = arith.AddiOp(row, v)
        c1_v = _const(1)
        stride.operands[1] = c1_v.result
        defined_here = isinstance(v.owner, Operation) and v.owner.parent_block() is per_vertex
        if defined_here:
            per_vertex.insert_ops_after([c1_v, stride, row, at], v.owner)  # after the order lookup
        else:
            per_vertex.insert_ops_before([c1_v, stride, row, at], per_vertex.first_op)
        old_src = edge_loop.src
        edge_loop.operands[0] = at.result
        edge_loop.operands[1] = part_indptr
        edge_loop.operands[2] = part_src
        edge_loop.operands[3] = part_eid
        old_src.replace_uses_with_if(part_src, lambda use: edge_loop.is_ancestor(use.operation))

        # Everything before the walk runs in the first partition, except what
        # the walk or later work reads (addresses, counts: pure values of
        # read-only data); everything after it in the last partition.
        later = [edge_loop, *after]
        keep: set[Operation] = set()

        def need(value: SSAValue) -> None:
            owner = value.owner
            if isinstance(owner, Operation) and owner in before_set and owner not in keep:
                keep.add(owner)
                for operand in owner.operands:
                    need(operand)

        before_set = set(before)
        for op in later:
            for inner in op.walk():
                for operand in inner.operands:
                    need(operand)
        written = {inner.memref for op in ops for inner in op.walk() if isinstance(inner, memref.StoreOp)}
        for op in keep:
            if op.regions or isinstance(op, memref.StoreOp) or (isinstance(op, memref.LoadOp) and op.memref in written):
                raise refuse(f"the partitioned walk reads a value computed from memory the kernel writes ({op.name})")
        anchor = edge_loop
        for segment, condition, insert_before in (
            ([op for op in before if op not in keep], is_first, anchor),
            (after, is_last, per_vertex.last_op),
        ):
            if not segment:
                continue
            guarded = Block()
            for op in segment:
                op.detach()
                guarded.add_op(op)
            guarded.add_op(scf.YieldOp())
            per_vertex.insert_op_before(scf.IfOp(condition, [], [guarded]), insert_before)
        # the partition test is computed per partition, outside the destination loop
        for op in worksharing:
            part_body.add_op(op)
        part_body.add_op(scf.YieldOp())
        return [c0, c1, ck, scf.ForOp(c0, ck, c1, [], part_body)]

    def _vectorize_rows(self, per_vertex: Block, v: SSAValue) -> None:
        """`vectorize W`: a destination's work runs once per W-wide slice of its feature row.

        With a constant W the slice loops unroll into vector registers, and
        since the output row slice does not move while the in-edge loop runs,
        LLVM keeps the accumulator in registers across all in-edges instead
        of loading and storing the row once per edge. Full slices run with
        the constant width, the remainder once with what is left.
        """
        width, dim = self.vector_width
        features = [op for op in per_vertex.walk() if isinstance(op, loop.ForFeatureOp) and op.dim is not None and op.dim.data == dim]
        if not features:
            raise CompileError(f"vectorize {width}: the kernel has no loop over a feature axis '{dim}'")
        extent = features[0].extent
        for op in per_vertex.walk():
            if isinstance(op, scf.ForOp) and op.ub is extent:
                raise CompileError(
                    f"vectorize {width}: the kernel reduces over the feature axis '{dim}' "
                    "(a dot or @ along it), which row slicing would split"
                )
        if _nests_axis(per_vertex, dim):
            raise CompileError(
                f"vectorize {width}: the kernel nests two loops over the feature axis '{dim}' (a @ along it, "
                f"or a value of shape [{dim}, {dim}]), which row slicing would cut down to diagonal slices"
            )
        if self.partitions:
            # every slice repeats the destination's work; an accumulator
            # without the sliced axis, initialised in the first partition and
            # summed over all of them, would be summed once per slice
            acc_rows = self.mapping[self.entry.args[-4]]
            for op in per_vertex.walk():
                if isinstance(op, memref.StoreOp) and op.memref is acc_rows:
                    outer = _ancestors(op, per_vertex)
                    if any(isinstance(a, loop.ForInEdgesOp) for a in outer) and not any(
                        isinstance(a, loop.ForFeatureOp) and a.dim is not None and a.dim.data == dim for a in outer
                    ):
                        raise CompileError(
                            f"vectorize {width}: with partition src, this kernel accumulates a value without "
                            f"the feature axis '{dim}' (a softmax sum or a scalar aggregation) across "
                            "partitions, which row slicing would count once per slice"
                        )
        ops = list(per_vertex.ops)[:-1]
        if isinstance(v.owner, Operation) and v.owner in ops:
            ops = ops[ops.index(v.owner) + 1 :]
        terminator = per_vertex.last_op
        assert terminator is not None
        c0, w = _const(0), _const(width)
        remainder = arith.RemSIOp(extent, w)
        full = arith.SubiOp(extent, remainder)
        has_tail = arith.CmpiOp(full, extent, "slt")
        per_vertex.insert_ops_before([c0, w, remainder, full, has_tail], terminator)

        def copy(block: Block, offset: SSAValue, slice_width: SSAValue) -> None:
            mapping: dict[SSAValue, SSAValue] = {}
            for op in ops:
                clone = op.clone(value_mapper=mapping)
                for old, new in zip(op.results, clone.results):
                    mapping[old] = new
                block.add_op(clone)
            for op in block.walk():
                if isinstance(op, loop.ForFeatureOp) and op.extent is extent and op.dim is not None and op.dim.data == dim:
                    inner = op.body.block
                    i = inner.args[0]
                    shifted = arith.AddiOp(i, offset)
                    inner.insert_op_before(shifted, inner.first_op)
                    i.replace_uses_with_if(shifted.result, lambda use, s=shifted: use.operation is not s)
                    op.operands[0] = slice_width
            block.add_op(scf.YieldOp())

        slices = Block(arg_types=[index])
        copy(slices, slices.args[0], w.result)
        tail = Block()
        copy(tail, full.result, remainder.result)
        per_vertex.insert_ops_before(
            [scf.ForOp(c0, full, w, [], slices), scf.IfOp(has_tail, [], [tail])], terminator
        )
        for op in reversed(ops):
            op.detach()
            op.erase()

    def _tile_features(self, body: Block, worksharing: list[Operation], per_vertex: Block) -> None:
        """FeatGraph's feature tiling: the whole destination sweep runs once per feature tile.

        A tile of every source row (T features) is what the sweep gathers,
        so partitions of the source rows stay in cache between destinations.
        Each `loop.for_feature` over the tiled axis covers only the current
        tile; everything else a destination computes is recomputed per tile,
        which is idempotent. Reductions over the tiled axis (a `dot` or `@`
        along it) cannot be split this way and are refused.
        """
        tile, dim = self.tile
        features = [op for op in per_vertex.walk() if isinstance(op, loop.ForFeatureOp) and op.dim is not None and op.dim.data == dim]
        if not features:
            raise CompileError(f"tile features {tile}: the kernel has no loop over a feature axis '{dim}'")
        extent = features[0].extent
        for op in per_vertex.walk():
            if isinstance(op, scf.ForOp) and op.ub is extent:
                raise CompileError(
                    f"tile features {tile}: the kernel reduces over the feature axis '{dim}' "
                    "(a dot or @ along it), which feature tiling would split"
                )
        if _nests_axis(per_vertex, dim):
            raise CompileError(
                f"tile features {tile}: the kernel nests two loops over the feature axis '{dim}' (a @ along it, "
                f"or a value of shape [{dim}, {dim}]), which feature tiling would cut down to diagonal tiles"
            )
        c0, step = _const(0), _const(tile)
        tile_body = Block(arg_types=[index])
        t0 = tile_body.args[0]
        remaining = arith.SubiOp(extent, t0)
        width = arith.MinSIOp(remaining, step)
        tile_body.add_ops([remaining, width])
        for op in worksharing:
            tile_body.add_op(op)
        tile_body.add_op(scf.YieldOp())
        body.add_ops([c0, step, scf.ForOp(c0, extent, step, [], tile_body)])
        for op in features:
            if op.extent is not extent:
                continue
            inner = op.body.block
            i = inner.args[0]
            shifted = arith.AddiOp(i, t0)
            inner.insert_op_before(shifted, inner.first_op)
            i.replace_uses_with_if(shifted.result, lambda use: use.operation is not shifted)
            op.operands[0] = width.result


def _launch(fn: func.FuncOp, for_dst: loop.ForDstOp, outlined: func.FuncOp) -> list[Operation]:
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
    address = llvm.AddressOfOp(outlined.sym_name.data, ptr)
    threads = arith.IndexCastOp(for_dst.num_threads, i32)
    flags = _const(0, i32)
    call = func.CallOp("GOMP_parallel", [address, closure, threads, flags], [])
    ops += [address, threads, flags, call]
    return ops


def _nests_axis(per_vertex: Block, dim: str) -> bool:
    """Whether a loop over feature axis `dim` encloses another: both would be sliced at one offset."""
    def over(op: Operation) -> bool:
        return isinstance(op, loop.ForFeatureOp) and op.dim is not None and op.dim.data == dim

    return any(over(op) and any(over(inner) for inner in op.body.walk()) for op in per_vertex.walk())


def _feature_depth(op: Operation) -> int:
    """The deepest nest of loop.for_feature inside op: how wide the rows it gathers are."""
    best = 0
    for block in (b for r in op.regions for b in r.blocks):
        for inner in block.ops:
            depth = _feature_depth(inner) + (1 if isinstance(inner, loop.ForFeatureOp) else 0)
            best = max(best, depth)
    return best


def _ancestors(op: Operation, stop: Block) -> list[Operation]:
    found = []
    parent = op.parent_op()
    while parent is not None and parent.parent_block() is not None and stop.is_ancestor(parent):
        found.append(parent)
        parent = parent.parent_op()
    return found


def _tiled_dim(for_dst: loop.ForDstOp) -> str:
    """The feature axis `tile features` splits: F if the kernel has one, else its innermost axis."""
    dims = [op.dim.data for op in for_dst.walk() if isinstance(op, loop.ForFeatureOp) and op.dim is not None]
    if "F" in dims:
        return "F"
    innermost = [
        op.dim.data for op in for_dst.walk()
        if isinstance(op, loop.ForFeatureOp) and op.dim is not None
        and not any(isinstance(inner, loop.ForFeatureOp) for inner in op.body.block.walk())
    ]
    return max(set(innermost), key=innermost.count) if innermost else "F"


def _edge_walks(for_dst: loop.ForDstOp) -> int:
    """In-edge loops per destination; a body versioned by specialize-unit-dims counts once."""
    versioned = [op for op in for_dst.body.block.ops if isinstance(op, scf.IfOp) and op.false_region.blocks]
    scope = versioned[0].false_region if versioned else for_dst.body
    return sum(isinstance(op, loop.ForInEdgesOp) for op in scope.walk())


def _record_phases(fn: func.FuncOp, phases: list[loop.ForDstOp]) -> None:
    """Adds each phase's row axis and in-edge walk count to the kernel's ABI record.

    The runtime's default heuristic reads them (`runtime/heuristic.py`):
    `vectorize` pays only for a single walk over the in-edges.
    """
    attr = fn.attributes.get(abi.ABI_ATTR)
    if not isinstance(attr, StringAttr):
        return
    record = json.loads(attr.data)
    record["phases"] = [{"row_dim": _tiled_dim(p), "edge_walks": _edge_walks(p)} for p in phases]
    fn.attributes[abi.ABI_ATTR] = StringAttr(json.dumps(record, sort_keys=True))


class ConvertLoopToOpenmpPass(ModulePass):
    """Outlines every loop.for_dst into a libgomp parallel region with dynamic block scheduling."""

    name = "convert-loop-to-openmp"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        kernels = [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks]
        if not any(isinstance(o, loop.ForDstOp) for f in kernels for o in f.walk()):
            return
        _declare_runtime(op)
        for fn in kernels:
            phases = [o for o in fn.body.block.ops if isinstance(o, loop.ForDstOp)]
            _record_phases(fn, phases)
            partitioned, partitions = 0, None
            for i, for_dst in enumerate(phases):
                schedule = dict(for_dst.schedule.data) if for_dst.schedule is not None else {}
                schedule.pop("parallel", None)
                order_attr = schedule.pop("order", None)
                order = order_attr.data if isinstance(order_attr, StringAttr) else "identity"
                tile_attr = schedule.pop("tile", None)
                tile = (tile_attr.value.data, _tiled_dim(for_dst)) if tile_attr is not None else None  # type: ignore[union-attr]
                partition_attr = schedule.pop("partition", None)
                partitions = partition_attr.value.data if partition_attr is not None else None  # type: ignore[union-attr]
                vector_attr = schedule.pop("vectorize", None)
                vector_width = (vector_attr.value.data, _tiled_dim(for_dst)) if vector_attr is not None else None  # type: ignore[union-attr]
                edges_attr = schedule.pop("edges", None)
                edge_order = edges_attr.data if isinstance(edges_attr, StringAttr) else None
                if schedule:
                    keys = ", ".join(sorted(schedule))
                    raise CompileError(f"'loop.for_dst' still carries schedule {keys}: no pass implemented it")
                outliner = _Outliner(fn, for_dst, f"{fn.sym_name.data}_phase{i}", order, tile, partitions, edge_order, vector_width)
                outlined, work = outliner.outline()
                partitioned += outliner.partitioned_walks
                op.body.block.insert_op_after(work, fn)
                op.body.block.insert_op_after(outlined, fn)
                # no blocks (no vertices, or no split neighbour groups): no
                # parallel region, whose thread wake-up costs a time slice on
                # a loaded machine
                c0 = _const(0)
                any_blocks = arith.CmpiOp(for_dst.num_blocks, c0, "sgt")
                then = Block()
                then.add_ops([*_launch(fn, for_dst, outlined), scf.YieldOp()])
                fn.body.block.insert_ops_before([c0, any_blocks, scf.IfOp(any_blocks, [], [then])], for_dst)
                for_dst.detach()
                for_dst.erase()
            if partitions and not partitioned:
                raise CompileError(f"partition src {partitions}: the kernel walks no in-edges")
