"""Questions the CPU schedule passes ask about a loop nest, and where a kernel's buffers are.

Shared by the schedule passes (`partition-sources`, `tile-features`,
`vectorize-rows`, ...) and by convert-graph-to-loop's ABI record, so that a
pass and the runtime's heuristic agree on which axis is a kernel's row.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from enum import StrEnum
from typing import TypeGuard

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import DictionaryAttr, IndexType, IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue

from gnnc.errors import CompileError
from gnnc.ir import kernel_abi, llvm_ext, loop

#: Schedule entries `convert-loop-to-openmp` implements itself (thread mapping).
WORKSHARING_KEYS = ("parallel",)


def constant_index(value: SSAValue) -> int | None:
    """The value of an index computed from constants only (a size compiled in by `specialize`,
    a stride of 1 x 1), else None."""
    op = value.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    if isinstance(op, arith.IndexCastOp):
        return constant_index(op.input)
    if isinstance(op, arith.MuliOp | arith.AddiOp):
        a, b = constant_index(op.lhs), constant_index(op.rhs)
        if a is None or b is None:
            return None
        return a * b if isinstance(op, arith.MuliOp) else a + b
    return None


def row_dim(for_dst: loop.ForDstOp) -> str:
    """The feature axis `tile features` and `vectorize` split: F if the kernel has one, else its innermost axis."""
    dims = [op.dim.data for op in for_dst.walk() if isinstance(op, loop.ForFeatureOp) and op.dim is not None]
    if "F" in dims:
        return "F"
    innermost = [
        op.dim.data
        for op in for_dst.walk()
        if isinstance(op, loop.ForFeatureOp)
        and op.dim is not None
        and not any(isinstance(inner, loop.ForFeatureOp) for inner in op.body.block.walk())
    ]
    # the first of the most frequent in walk order: max over a set broke ties by string hash,
    # which differs between processes (DNAConv's oned gradient got H, D or L)
    return max(innermost, key=innermost.count) if innermost else "F"


def edge_walks(for_dst: loop.ForDstOp) -> int:
    """In-edge loops per destination; a body versioned by specialize-unit-dims counts once."""
    versioned = [op for op in for_dst.body.block.ops if isinstance(op, scf.IfOp) and op.false_region.blocks]
    scope = versioned[0].false_region if versioned else for_dst.body
    return sum(isinstance(op, loop.ForInEdgesOp) for op in scope.walk())


def over_axis(op: Operation, dim: str) -> TypeGuard[loop.ForFeatureOp]:
    return isinstance(op, loop.ForFeatureOp) and op.dim is not None and op.dim.data == dim


def axis_loops(scope: Operation | Block, dim: str) -> list[loop.ForFeatureOp]:
    """Every loop.for_feature over axis `dim` inside scope, in program order."""
    return [op for op in scope.walk() if over_axis(op, dim)]


def nests_axis(scope: Block, dim: str) -> bool:
    """Whether a loop over feature axis `dim` encloses another: both would be sliced at one offset."""
    return any(over_axis(op, dim) and any(over_axis(inner, dim) for inner in op.body.walk()) for op in scope.walk())


def check_row_split(directive: str, scope: Block, dim: str, splitting: str, pieces: str) -> SSAValue:
    """The extent of axis `dim` in scope, if its loops can be split into column ranges; else a CompileError.

    Splitting runs a destination's work once per range of the axis, so the
    axis must exist, no reduction may run along it (a dot or @ along it,
    an `scf.for` up to its extent), and no loop over it may enclose another.
    """
    loops = axis_loops(scope, dim)
    if not loops:
        raise CompileError(f"{directive}: the kernel has no loop over a feature axis '{dim}'")
    extent = loops[0].extent
    for op in scope.walk():
        if isinstance(op, scf.ForOp) and op.ub is extent:
            raise CompileError(
                f"{directive}: the kernel reduces over the feature axis '{dim}' "
                f"(a dot or @ along it), which {splitting} would split"
            )
    if nests_axis(scope, dim):
        raise CompileError(
            f"{directive}: the kernel nests two loops over the feature axis '{dim}' (a @ along it, "
            f"or a value of shape [{dim}, {dim}]), which {splitting} would cut down to diagonal {pieces}"
        )
    return extent


def shift_axis(loops: list[loop.ForFeatureOp], extent: SSAValue, offset: SSAValue, width: SSAValue) -> None:
    """Loops over `extent` cover [offset, offset + width) instead of [0, extent)."""
    for op in loops:
        if op.extent is not extent:
            continue
        inner = op.body.block
        i = inner.args[0]
        shifted = arith.AddiOp(i, offset)
        inner.insert_op_before(shifted, inner.first_op)  # type: ignore[arg-type]  # a loop body is never empty: it ends in its yield
        i.replace_uses_with_if(shifted.result, lambda use, s=shifted: use.operation is not s)  # type: ignore[misc]  # mypy cannot type a lambda's defaults; s binds this iteration's op (B023)
        op.operands[0] = width


def _same_size(a: SSAValue, b: SSAValue) -> bool:
    return a is b or (constant_index(a) is not None and constant_index(a) == constant_index(b))


def narrow_row_pieces(scope: Operation | Block, extent: SSAValue, offset: SSAValue, width: SSAValue) -> None:
    """Whole-row work beside the row loops (prefetches of gathered rows, streamed
    result rows) covers only the columns [offset, offset + width) of each row
    `[..., extent]`, as the row loops now do.

    prefetch-neighbors fetches every line of a gathered row
    (`scf.for %l = 0 to %row step LINE`). Once a row is split into tiles or
    slices, the walk runs once per piece, and a whole-row prefetch per walk
    moves the row from memory once per piece (docs/design/locality.md). A
    streamed row (`llvm_ext.stream_copy`) would be written whole per piece,
    with the columns of the other pieces not built yet. A row whose size is `extent`, or `outer * extent`, is
    handled piece by piece; a row whose innermost axis is another is left
    whole (its work does not depend on the piece).
    """
    for op in list(scope.walk()):
        if isinstance(op, scf.ForOp) and any(isinstance(o, llvm_ext.PrefetchOp) for o in op.body.walk()):
            if constant_index(op.lb) != 0:
                continue  # already narrowed, or not a whole-row loop

            def fetch_piece(lo: SSAValue, op: scf.ForOp = op) -> list[Operation]:
                hi = arith.AddiOp(lo, width)
                op.operands[0], op.operands[1] = lo, hi.result
                op.detach()
                return [hi, op]

            _per_piece(op, op.ub, extent, offset, fetch_piece)
        elif isinstance(op, llvm_ext.StreamCopyOp):

            def copy_piece(lo: SSAValue, op: llvm_ext.StreamCopyOp = op) -> list[Operation]:
                src, dst = arith.AddiOp(op.src_index, lo), arith.AddiOp(op.dst_index, lo)
                return [src, dst, llvm_ext.StreamCopyOp(op.src, src, op.dst, dst, width)]

            if _per_piece(op, op.count, extent, offset, copy_piece):
                op.detach()
                op.erase()


def _per_piece(
    op: Operation, row: SSAValue, extent: SSAValue, offset: SSAValue, piece: Callable[[SSAValue], list[Operation]]
) -> bool:
    """Puts what `piece(lo)` builds where op stands, once per `extent`-long chunk of
    `row` (lo: where the piece starts in the row); False if row is not such chunks."""
    if _same_size(row, extent):
        outer = None
    elif isinstance(row.owner, arith.MuliOp) and _same_size(row.owner.rhs, extent):
        outer = row.owner.lhs
    else:
        return False
    block, after = op.parent_block(), op.next_op
    assert block is not None

    def put(ops: list[Operation]) -> None:
        if after is None:  # a block still being built, its terminator not there yet
            block.add_ops(ops)
        else:
            block.insert_ops_before(ops, after)

    if outer is None:
        put(piece(offset))
        return True
    zero, one = arith.ConstantOp(IntegerAttr(0, IndexType())), arith.ConstantOp(IntegerAttr(1, IndexType()))
    chunks = Block(arg_types=[IndexType()])
    start = arith.MuliOp(chunks.args[0], extent)
    lo = arith.AddiOp(start, offset)
    chunks.add_ops([start, lo, *piece(lo.result), scf.YieldOp()])
    put([zero, one, scf.ForOp(zero, outer, one, [], chunks)])
    return True


def encloses_loops(op: loop.ForInEdgesOp | loop.ForFeatureOp) -> bool:
    """Whether a loop has a loop inside (a feature loop or a dot's reduction): an
    in-edge walk over a row per edge, or a head loop."""
    return any(isinstance(inner, loop.ForFeatureOp | scf.ForOp) for inner in op.body.walk())


def feature_depth(op: Operation) -> int:
    """The deepest nest of loop.for_feature inside op: how wide the rows it gathers are."""
    best = 0
    for block in (b for r in op.regions for b in r.blocks):
        for inner in block.ops:
            depth = feature_depth(inner) + (1 if isinstance(inner, loop.ForFeatureOp) else 0)
            best = max(best, depth)
    return best


def ancestors(op: Operation, stop: Block) -> list[Operation]:
    """The ops enclosing op inside block `stop`, innermost first."""
    found = []
    parent = op.parent_op()
    while parent is not None and parent.parent_block() is not None and stop.is_ancestor(parent):
        found.append(parent)
        parent = parent.parent_op()
    return found


def sweeps(fn: func.FuncOp) -> list[tuple[Operation, loop.ForDstOp]]:
    """Each phase of a kernel: (its top-level op, maybe a tile or partition loop, and the destination sweep)."""
    found: list[tuple[Operation, loop.ForDstOp]] = []
    for op in fn.body.block.ops:
        if isinstance(op, loop.ForDstOp | loop.ForTileOp | loop.ForPartitionOp):
            inner = next(o for o in op.walk() if isinstance(o, loop.ForDstOp))
            found.append((op, inner))
    return found


def take_schedule(for_dst: loop.ForDstOp, key: str) -> Attribute | None:
    """Removes entry `key` from the sweep's schedule and returns it (None if absent): the pass implements it."""
    if for_dst.schedule is None or key not in for_dst.schedule.data:
        return None
    entries = dict(for_dst.schedule.data)
    value = entries.pop(key)
    for_dst.schedule = type(for_dst.schedule)(entries)
    return value


class SweepKind(StrEnum):
    """What a sweep's positions run over: its `parallel` entry, set by convert-graph-to-loop."""

    #: the destinations (the sweep of a phase)
    DESTINATIONS = "dst"
    #: every source row, before the phases (a hoisted `x[u] @ W`)
    SOURCES = "sources"
    #: the neighbour groups of `group neighbors G`, before their destinations merge them
    GROUPS = "groups"
    #: a side's (vertex, relation) pairs, before the phases (a hoisted `x[u] @ W[rel(e)]`)
    PAIRS = "pairs"


def sweep_kind(for_dst: loop.ForDstOp) -> SweepKind:
    """The sweep's kind; a sweep without a `parallel` entry (hand-written IR) runs over destinations."""
    return SweepKind(schedule_text(for_dst, "parallel") or SweepKind.DESTINATIONS)


def give_schedule(
    module: ModuleOp,
    key: str,
    value: Attribute,
    kinds: Collection[SweepKind],
    where: Callable[[loop.ForDstOp], bool] = lambda for_dst: True,
) -> None:
    """Entry `key` = value in the schedule of every sweep of these kinds (and `where`) in the
    module's kernels, as convert-graph-to-loop puts it there for a kernel whose schedule
    gives the directive: a schedule pass given its directive as an option applies it to
    every kernel, then consumes the entry as it would the schedule's."""
    for fn in module.ops:
        if not isinstance(fn, func.FuncOp) or not fn.body.blocks:
            continue
        for for_dst in [o for o in fn.walk() if isinstance(o, loop.ForDstOp)]:
            if sweep_kind(for_dst) in kinds and where(for_dst):
                entries = dict(for_dst.schedule.data) if for_dst.schedule is not None else {}
                entries[key] = value
                for_dst.schedule = DictionaryAttr(entries)


def schedule_text(for_dst: loop.ForDstOp, key: str) -> str | None:
    value = for_dst.schedule.data.get(key) if for_dst.schedule is not None else None
    return value.data if isinstance(value, StringAttr) else None


def kernel_buffer(fn: func.FuncOp, name: str) -> SSAValue:
    """A graph argument of a kernel, or one of a schedule's own (partitions, Hilbert order), by ABI name."""
    return kernel_abi.argument(fn, name)


#: The edge-id arrays a kernel may take: the in-CSR's, and `partition src K`'s.
EDGE_ID_BUFFERS = ("in_eid", "part_eid")


def reads_in_src(fn: func.FuncOp) -> bool:
    """Whether partitioned kernel `fn` reads `in_src` before outlining: any use counts (a walk
    that is not partitioned, a prefetch). True for a kernel without partitions."""
    if kernel_abi.get_record(fn).partitions is None:
        return True
    return bool(kernel_abi.argument(fn, "in_src").uses)


def reads_edge_ids(fn: func.FuncOp) -> bool:
    """Whether kernel `fn` reads an edge-id array (`EDGE_ID_BUFFERS`) before outlining.

    An in-edge walk that leaves its edge-id argument unused (a plain
    aggregation) does not count: its lowering loads no id. Any other use
    does, so the answer errs towards reading.
    """
    record = kernel_abi.get_record(fn)
    names = [n for n in EDGE_ID_BUFFERS if n != "part_eid" or record.partitions is not None]
    for name in names:
        for use in kernel_abi.argument(fn, name).uses:
            walk = use.operation
            if not (isinstance(walk, loop.ForInEdgesOp) and use.index == 3 and not walk.body.block.args[2].uses):
                return True
    return False
