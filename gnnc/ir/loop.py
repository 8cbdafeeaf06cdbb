"""The `loop` dialect: uGrapher's unified sparse-dense loop nest.

Every graph operator becomes the same three loops, nested:

    loop.for_dst       for v in destinations          (parallel; schedules)
      loop.for_in_edges  for (u, e) in in_edges(v)     (sparse; edge order)
        loop.for_feature   for f in range(extent)      (dense; tiling, vectors)

Bodies hold scalar `arith` / `math` code and `memref` loads and stores on the
kernel's flat buffers. The CPU schedule passes consume the loops' `schedule`
dictionaries and rewrite the nest, so each dump shows what its schedule did:

    loop.for_tile %F by 64 dim "F"     feature tiles around a sweep    (tile-features)
      loop.for_partition 4               source partitions, barriers   (partition-sources)
        loop.for_dst ...                   the destination sweep
          %v = loop.dst_at %order[%pos]      position -> destination   (order-destinations,
                                                                        hilbert-edge-order)

`convert-loop-to-openmp` then only outlines and shares the sweep out among
threads; `convert-loop-to-scf` lowers what is left to `scf.for`.
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    DictionaryAttr,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SpacedOpaqueSyntaxAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import IsTerminator, RecursiveMemoryEffect
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from gnnc.ir.schedule import CudaStrategy


# CudaStrategy lives in the compiler-free ir/schedule.py: Python's StrEnum, not xDSL's
@irdl_attr_definition
class CudaMappingAttr(EnumAttribute[CudaStrategy], SpacedOpaqueSyntaxAttribute):  # type: ignore[type-var]
    """`loop.grid`'s thread mapping: `mapping warp_vertex`, generic `#loop<mapping warp_vertex>`."""

    name = "loop.mapping"


class LaneReduction(StrEnum):
    """How `loop.lanes` combines its lanes' values: the arith op of the same name."""

    ADDF = "addf"
    MULF = "mulf"
    MAXNUMF = "maxnumf"
    MINNUMF = "minnumf"
    MAXIMUMF = "maximumf"
    MINIMUMF = "minimumf"


@irdl_attr_definition
class LaneReductionAttr(EnumAttribute[LaneReduction], SpacedOpaqueSyntaxAttribute):
    """One reduction of `loop.lanes`: generic `#loop<lane_reduction addf>`."""

    name = "loop.lane_reduction"


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends the body of a loop-dialect loop; `loop.warp_sum` yields its running sum."""

    name = "loop.yield"

    values = var_operand_def()

    assembly_format = "attr-dict ($values^ `:` type($values))?"
    traits = traits_def(IsTerminator())

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[list(values)])


def _check_body(op: IRDLOperation, region: Region, nargs: int) -> None:
    if len(region.blocks) != 1:
        raise VerifyException(f"'{op.name}' body must be a single block")
    block = region.block
    if len(block.args) != nargs or any(not isinstance(a.type, IndexType) for a in block.args):
        raise VerifyException(f"'{op.name}' body takes {nargs} index argument(s)")
    if not isinstance(block.last_op, YieldOp):
        raise VerifyException(f"'{op.name}' body must end with loop.yield")
    if block.last_op.values and not isinstance(op, WarpSumOp | LanesOp):
        raise VerifyException(f"'{op.name}' body yields no values")


@irdl_op_definition
class ForDstOp(IRDLOperation):
    """For every position `v` in [0, num_vertices): body(v, worker).

    A position is a destination vertex unless a schedule pass maps it to one
    (`loop.dst_at` at the top of the body: a destination order, or the edges
    of a Hilbert order, for which the positions number the edges).
    Positions come in contiguous blocks (`blocks` holds num_blocks + 1
    boundaries, balanced by edge count by the runtime); up to `num_threads`
    workers take blocks dynamically. `worker` (in [0, num_threads)) selects a
    worker's slice of the per-thread scratch. One destination is always
    handled by one worker, in edge order: results do not depend on the
    thread count.
    """

    name = "loop.for_dst"

    num_vertices = operand_def(IndexType)
    blocks = operand_def(MemRefType)
    num_blocks = operand_def(IndexType)
    num_threads = operand_def(IndexType)
    schedule = opt_prop_def(DictionaryAttr)
    body = region_def("single_block")

    assembly_format = (
        "$num_vertices `blocks` $blocks `[` $num_blocks `]` `threads` $num_threads "
        "(`schedule` $schedule^)? attr-dict-with-keyword `:` type($blocks) $body"
    )
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(
        self,
        num_vertices: SSAValue,
        blocks: SSAValue,
        num_blocks: SSAValue,
        num_threads: SSAValue,
        body: Block,
        schedule: DictionaryAttr | None = None,
    ):
        super().__init__(
            operands=[num_vertices, blocks, num_blocks, num_threads],
            regions=[Region(body)],
            properties={"schedule": schedule} if schedule is not None else {},
        )

    def verify_(self) -> None:
        _check_body(self, self.body, 2)


@irdl_op_definition
class ForInEdgesOp(IRDLOperation):
    """For every in-edge of `v` in the in-CSR: body(position, u, e).

    `u` is the edge's source and `e` the user's edge id; the position indexes
    the CSR arrays (prefetching reads ahead from it).
    """

    name = "loop.for_in_edges"

    dst = operand_def(IndexType)
    indptr = operand_def(MemRefType)
    src = operand_def(MemRefType)
    eid = operand_def(MemRefType)
    schedule = opt_prop_def(DictionaryAttr)
    body = region_def("single_block")

    assembly_format = (
        "$dst `in` $indptr `,` $src `,` $eid (`schedule` $schedule^)? attr-dict-with-keyword "
        "`:` type($indptr) `,` type($src) `,` type($eid) $body"
    )
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(
        self,
        dst: SSAValue,
        indptr: SSAValue,
        src: SSAValue,
        eid: SSAValue,
        body: Block,
        schedule: DictionaryAttr | None = None,
    ):
        super().__init__(
            operands=[dst, indptr, src, eid],
            regions=[Region(body)],
            properties={"schedule": schedule} if schedule is not None else {},
        )

    def verify_(self) -> None:
        _check_body(self, self.body, 3)


@irdl_op_definition
class ForFeatureOp(IRDLOperation):
    """For every index of one feature axis in [0, extent): body(i).

    `dim` names the axis (`F`, `H`, or a number) so dumps and schedules can
    refer to it.
    """

    name = "loop.for_feature"

    extent = operand_def(IndexType)
    dim = opt_prop_def(StringAttr)
    schedule = opt_prop_def(DictionaryAttr)
    body = region_def("single_block")

    assembly_format = "$extent (`dim` $dim^)? (`schedule` $schedule^)? attr-dict-with-keyword $body"
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(
        self,
        extent: SSAValue,
        body: Block,
        dim: str | None = None,
        schedule: DictionaryAttr | None = None,
    ):
        props: dict[str, Attribute] = {}
        if dim is not None:
            props["dim"] = StringAttr(dim)
        if schedule is not None:
            props["schedule"] = schedule
        super().__init__(operands=[extent], regions=[Region(body)], properties=props)

    def verify_(self) -> None:
        _check_body(self, self.body, 1)


def _check_sweep(op: IRDLOperation, region: Region, nargs: int) -> None:
    """A sweep wrapper holds one destination sweep (maybe wrapped again) and pure index arithmetic.

    Every worker of the parallel region runs the wrapper's iterations, so
    anything besides the sweep must be side-effect free and cheap to repeat.
    After convert-loop-to-openmp the sweep has become its worksharing code,
    and the wrapper is just a loop every worker runs.
    """
    _check_body(op, region, nargs)
    sweeps = [o for o in region.block.ops if isinstance(o, ForDstOp | ForTileOp | ForPartitionOp)]
    if len(sweeps) > 1:
        raise VerifyException(f"'{op.name}' body must hold one destination sweep, got {len(sweeps)}")
    for inner in region.block.ops:
        if sweeps and inner is not sweeps[0] and not isinstance(inner, YieldOp) and not inner.name.startswith("arith."):
            raise VerifyException(f"'{op.name}' body may hold only the sweep and arith ops, got '{inner.name}'")


@irdl_op_definition
class ForTileOp(IRDLOperation):
    """For every tile of a feature axis: body(start, width) for start = 0, size, 2 size, ... < extent
    and width = min(size, extent - start).

    FeatGraph's feature tiling (`tile-features`): the destination sweep
    inside runs once per tile, and the feature loops over the axis cover only
    [start, start + width), so a tile of every source row is what a sweep
    gathers and stays in cache. Every worker runs all tiles; each tile's
    destinations are shared out among them (tiles write disjoint columns, so
    no barrier separates them).
    """

    name = "loop.for_tile"

    extent = operand_def(IndexType)
    size = prop_def(IntegerAttr[I64])
    dim = opt_prop_def(StringAttr)
    body = region_def("single_block")

    assembly_format = "$extent `by` $size (`dim` $dim^)? attr-dict-with-keyword $body"
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(self, extent: SSAValue, size: int, body: Block, dim: str | None = None):
        props: dict = {"size": IntegerAttr(size, i64)}
        if dim is not None:
            props["dim"] = StringAttr(dim)
        super().__init__(operands=[extent], regions=[Region(body)], properties=props)

    def verify_(self) -> None:
        if self.size.value.data < 1:
            raise VerifyException(f"'{self.name}' tile size must be positive, got {self.size.value.data}")
        _check_sweep(self, self.body, 2)


@irdl_op_definition
class ForPartitionOp(IRDLOperation):
    """For every source partition p in [0, count): body(p), with a barrier between partitions.

    FeatGraph's 1-D source partitioning (`partition-sources`): the sweep
    inside runs once per partition, its partitioned in-edge walk over the
    in-CSR of partition p, whose sources fit in the cache. A destination's
    accumulators carry over from one partition to the next (in acc_rows or
    the output row), and another worker may take the destination then: all
    workers finish a partition before any starts the next.
    """

    name = "loop.for_partition"

    count = prop_def(IntegerAttr[I64])
    body = region_def("single_block")

    assembly_format = "$count attr-dict-with-keyword $body"
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(self, count: int, body: Block):
        super().__init__(regions=[Region(body)], properties={"count": IntegerAttr(count, i64)})

    def verify_(self) -> None:
        if self.count.value.data < 1:
            raise VerifyException(f"'{self.name}' needs at least one partition, got {self.count.value.data}")
        _check_sweep(self, self.body, 1)


@irdl_op_definition
class DstAtOp(IRDLOperation):
    """The destination at a position of the sweep: `order[position]`.

    `order` is a permutation of the destinations (`sort degree`, `reorder
    locality`) or the destinations of a Hilbert-ordered edge list.
    """

    name = "loop.dst_at"

    order = operand_def(MemRefType)
    position = operand_def(IndexType)
    result = result_def(IndexType)

    assembly_format = "$order `[` $position `]` attr-dict `:` type($order)"

    def __init__(self, order: SSAValue, position: SSAValue):
        super().__init__(operands=[order, position], result_types=[IndexType()])

    def verify_(self) -> None:
        t = self.order.type
        assert isinstance(t, MemRefType)
        if t.element_type != i64 or len(t.shape) != 1:
            raise VerifyException(f"'{self.name}' reads a 1-D i64 buffer, got {t}")


#: Threads in a warp on every NVIDIA GPU gnnc targets.
#: func.func attribute holding the `map ...` directive of a cuda schedule.
CUDA_MAP_ATTR = "gnnc.cuda_map"

#: Marks the scf.for summing a `dot` over its reduced axis, which warp mappings
#: split over a warp's lanes (`loop.warp_sum`); the CPU ignores it.
DOT_REDUCTION_ATTR = "gnnc.dot_reduction"

#: Marks the index op giving the base of a per-thread scratch region, so that
#: map-threads can tell which region an access is in and at which index.
SCRATCH_BASE_ATTR = "gnnc.scratch_base"

WARP_SIZE = 32


@irdl_op_definition
class GridOp(IRDLOperation):
    """A cuda grid: body(block, thread) for every block in [0, num_blocks) and
    thread in [0, block_size).

    `map-threads` builds it from a `loop.for_dst` and puts the mapping's index
    arithmetic (which destinations a thread handles, and guards) in the body;
    `mapping` names the strategy for dumps and the runtime. Threads of a grid
    share nothing but the kernel's buffers: the NVVM lowering reads the
    indices from %ctaid / %tid, the CPU emulation (`emulate-grid`) runs
    blocks and threads as two loops.
    """

    name = "loop.grid"

    num_blocks = operand_def(IndexType)
    block_size = prop_def(IntegerAttr[I64])
    mapping = prop_def(CudaMappingAttr)
    body = region_def("single_block")

    assembly_format = "`blocks` $num_blocks `threads` $block_size `mapping` $mapping attr-dict-with-keyword $body"
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(self, num_blocks: SSAValue, block_size: int, mapping: str | CudaStrategy, body: Block):
        super().__init__(
            operands=[num_blocks],
            regions=[Region(body)],
            properties={"block_size": IntegerAttr(block_size, 64), "mapping": CudaMappingAttr(CudaStrategy(mapping))},
        )

    def verify_(self) -> None:
        _check_body(self, self.body, 2)
        size = self.block_size.value.data
        if not 0 < size <= 1024 or size % WARP_SIZE:
            raise VerifyException(
                f"'{self.name}' block size must be a multiple of {WARP_SIZE} in [32, 1024], got {size}"
            )


@irdl_op_definition
class WarpSumOp(IRDLOperation):
    """A sum over i in [0, extent), computed by a group of `lanes` lanes of a warp
    together (FeatGraph's tree reduction for dot products):

        %s = loop.warp_sum %extent lane %lane of 32 : f32 {
        ^bb0(%i: index, %acc: f32):
          ...
          loop.yield %next : f32      // %acc + the term of i
        }

    Lane `lane` (in [0, lanes)) folds the terms of i = lane, lane + lanes, ...
    from 0 (consecutive lanes read consecutive elements); the partial sums are
    then added by a butterfly, so every lane of the group gets the whole sum.
    A group is `lanes` consecutive lanes of one warp, and all of them must
    reach it together. The NVVM lowering uses `shfl.sync.bfly`; the CPU
    emulation runs the lanes as a loop over partials kept in memory.
    """

    name = "loop.warp_sum"

    extent = operand_def(IndexType)
    lane = operand_def(IndexType)
    lanes = prop_def(IntegerAttr[I64])
    result = result_def()
    body = region_def("single_block")

    assembly_format = "$extent `lane` $lane `of` $lanes attr-dict-with-keyword `:` type($result) $body"
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(self, extent: SSAValue, lane: SSAValue, body: Block, result_type: Attribute, lanes: int = WARP_SIZE):
        super().__init__(
            operands=[extent, lane],
            regions=[Region(body)],
            result_types=[result_type],
            properties={"lanes": IntegerAttr(lanes, 64)},
        )

    def verify_(self) -> None:
        if self.lanes.value.data not in (2, 4, 8, 16, 32):
            raise VerifyException(f"'{self.name}' lanes must be a power of two in [2, 32], got {self.lanes.value.data}")
        t = self.result.type
        if not isinstance(t, Float32Type | Float64Type):
            raise VerifyException(f"'{self.name}' sums f32 or f64, got {t}")
        block = self.body.block
        if len(block.args) != 2 or not isinstance(block.args[0].type, IndexType) or block.args[1].type != t:
            raise VerifyException(f"'{self.name}' body takes (index, {t})")
        last = block.last_op
        if not isinstance(last, YieldOp) or len(last.values) != 1 or last.values[0].type != t:
            raise VerifyException(f"'{self.name}' body must end with loop.yield of one {t}")


#: Discardable memref.store attribute inside loop.lanes (see LanesOp).
WHOLE_VECTOR_ATTR = "gnnc.whole_vector"

#: The value an inactive lane contributes to each reduction of `loop.lanes`.
LANE_REDUCTIONS: dict[str, float] = {
    LaneReduction.ADDF: -0.0,
    LaneReduction.MULF: 1.0,
    LaneReduction.MAXNUMF: float("-inf"),
    LaneReduction.MINNUMF: float("inf"),
    LaneReduction.MAXIMUMF: float("-inf"),
    LaneReduction.MINIMUMF: float("inf"),
}


@irdl_op_definition
class LanesOp(IRDLOperation):
    """The body for every lane in [0, count), count <= width, run as one SIMD step:

        %m, %s = loop.lanes %n width 16 reduce [#loop<lane_reduction maxnumf>,
                                                #loop<lane_reduction addf>] : f32, f32 {
        ^bb0(%lane: index):
          ...
          loop.yield %score, %weight : f32, f32
        }

    The CPU backend runs the body once on `width`-wide vectors, lanes at and
    past `count` masked off: a value that depends on the lane is a vector, a
    load or store at a lane-dependent index is a (masked) vector access or a
    gather / scatter, anything else stays scalar. Result i combines the
    lanes' i-th yielded values with `reduce[i]` in an unspecified order.
    Lanes must not store to one address (an index that does not depend on
    the lane) and must not read what another lane writes: they run at once.
    A store marked `gnnc.whole_vector`, at `lane` in a buffer of `width`
    elements that only these lanes use, may also write the masked-off lanes'
    elements: one full vector store, which a scalar load of one element can
    then take from the store buffer (a masked store cannot forward to it).
    Count must be in [1, width].
    """

    name = "loop.lanes"

    count = operand_def(IndexType)
    width = prop_def(IntegerAttr[I64])
    reduce = prop_def(ArrayAttr[LaneReductionAttr])
    res = var_result_def()
    body = region_def("single_block")

    assembly_format = "$count `width` $width `reduce` $reduce attr-dict-with-keyword (`:` type($res)^)? $body"
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(
        self, count: SSAValue, width: int, body: Block, reduce: list[str] | list[LaneReduction], result_types: list
    ):
        super().__init__(
            operands=[count],
            regions=[Region(body)],
            result_types=[result_types],
            properties={
                "width": IntegerAttr(width, 64),
                "reduce": ArrayAttr([LaneReductionAttr(LaneReduction(k)) for k in reduce]),
            },
        )

    def verify_(self) -> None:
        width = self.width.value.data
        if width not in (2, 4, 8, 16, 32, 64):
            raise VerifyException(f"'{self.name}' width must be a power of two in [2, 64], got {width}")
        _check_body(self, self.body, 1)
        reductions = len(self.reduce.data)
        yielded = self.body.block.last_op.values  # type: ignore[union-attr]
        if not reductions == len(yielded) == len(self.res):
            raise VerifyException(
                f"'{self.name}' yields {len(yielded)} values for {reductions} reductions and {len(self.res)} results"
            )
        for r, y in zip(self.res, yielded):
            if r.type != y.type or not isinstance(r.type, Float32Type | Float64Type):
                raise VerifyException(f"'{self.name}' reduces f32 or f64 values into results of their type")
        lane = self.body.block.args[0]
        for op in self.body.block.walk():
            if op.regions and op is not self:
                raise VerifyException(f"'{self.name}' body must be straight-line code, found '{op.name}'")
            if op.name == "memref.store" and not depends_on(op.operands[2], lane, self.body.block):
                raise VerifyException(
                    f"'{self.name}': every lane stores to one address (the index does not depend on the lane)"
                )


def depends_on(value: SSAValue, root: SSAValue, scope: Block | None = None) -> bool:
    """Whether value is computed from root (through ops in `scope` only, if given)."""
    seen: set[SSAValue] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if v is root:
            return True
        if v in seen or not isinstance(v.owner, Operation):
            continue
        seen.add(v)
        if scope is None or v.owner.parent_block() is scope:
            stack.extend(v.owner.operands)
    return False


Loop = Dialect(
    "loop",
    [ForDstOp, ForInEdgesOp, ForFeatureOp, ForTileOp, ForPartitionOp, DstAtOp, GridOp, WarpSumOp, LanesOp, YieldOp],
    [CudaMappingAttr, LaneReductionAttr],
)
