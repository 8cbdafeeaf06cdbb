"""The C ABI of a compiled gnnc kernel, shared by the compiler and the runtime.

Every kernel `K` in a `.so` is a C function

    void K(int64_t num_vertices,      /* destinations (num_dst)               */
           int64_t num_edges,
           int64_t num_threads,        /* workers; the scratch holds one slice each */
           int64_t num_blocks,
           const int64_t *dst_blocks,  /* num_blocks + 1 boundaries of positions  */
           const int64_t *dst_order,   /* V: the destination at each position    */
           const int64_t *in_indptr,   /* V + 1: in-edge offsets by destination,
                                          or by position in dst_order when the
                                          record says "ordered_edges"; in_src
                                          and in_eid are then laid out so too */
           const int64_t *in_src,      /* E: source of the edge at a position   */
           const int64_t *in_eid,      /* E: the user's edge id at a position;
                                          with "edges_sorted" in the record,
                                          edge rows are addressed by position */
           const T *deg_in, const T *deg_out,   /* max(num_src, num_dst) each */
           const int64_t *dims,        /* the kernel's symbolic dims, in order  */
           T *scratch,                 /* num_threads x per-thread workspace    */
           const T *param_0, ...,      /* parameters, in declaration order      */
           T *result_0, ...,           /* results, in declaration order         */
           T *temp_0, ...,             /* V- or E-sized buffers between phases:
                                          num_dst rows, or num_src for a temp
                                          the record marks "rows": "src"      */
           /* only with a source sweep (the record's "source_sweep"): */
           const int64_t *src_meta,    /* 2: num_src, number of source blocks */
           const int64_t *src_blocks,  /* blocks + 1 boundaries of source rows */
           /* only with `partition src K`, `group neighbors G` or
              `stream outputs` (the record's "stream"): */
           T *acc_rows,                /* rows x the record's acc_rows shapes: V
                                          rows (partitions), one per split
                                          neighbour group, or one per worker
                                          (the rows it streams to the results) */
           /* only with `partition src K` (FeatGraph's 1-D source partitions): */
           const int64_t *part_indptr, /* K x (V + 1): per partition, an in-CSR */
           const int64_t *part_src, const int64_t *part_eid);  /* E each      */
           /* or, only with `order edges hilbert`: the edges along a Hilbert
              curve over (src, dst), as src, dst, eid (E each); dst_blocks then
              splits positions in that list, not destinations */
           /* or, only with `group neighbors G` (graph/plans.py,
              split_neighbor_groups and group_blocks), over the n groups of
              the destinations with more than G in-edges: */
           const int64_t *group_meta,  /* 2: blocks of groups, n             */
           const int64_t *group_blocks,   /* blocks + 1 boundaries of groups  */
           const int64_t *group_dst,      /* n: each group's destination      */
           const int64_t *group_bounds,   /* 2n: in-CSR positions [lo, hi)    */
           const int64_t *group_offsets); /* V + 1: each destination's groups */
           /* cuda only, with an edge mapping whose destinations keep
              accumulators (gin's sum beside (1 + eps) * x[v]): */
           T *dst_scratch,             /* V x one scratch slice            */
           /* cuda only, with `map ... hybrid K` (graph/plans.py,
              hybrid_sources): */
           const int64_t *hybrid_hot,  /* 1 + K': K', the staged sources    */
           const int64_t *hybrid_slot);   /* V: each source's slot, or -1   */

with T = float or double. All arrays are C-contiguous, row-major, and never
alias each other (the kernels are compiled with `noalias`). Scalars are passed
as one-element arrays. The per-kernel record in the `.so` metadata names the
dims, the scratch shapes (summed, per thread) and the temp shapes. Destination
blocks are processed by up to num_threads OpenMP workers (libgomp), taking
blocks dynamically. Positions map to destinations through dst_order (a degree
locality or RCM order, `sort degree` / `reorder locality` / `reorder rcm`); a kernel compiled
for the identity order ignores it.
"""

from __future__ import annotations

#: Bump when the argument order or the metadata layout changes.
ABI_VERSION = 6

#: func.func attribute holding a kernel's ABI record (JSON) during compilation.
ABI_ATTR = "gnnc.ir.abi"

#: The fixed leading arguments, in order.
GRAPH_ARGUMENTS = (
    "num_vertices",
    "num_edges",
    "num_threads",
    "num_blocks",
    "dst_blocks",
    "dst_order",
    "in_indptr",
    "in_src",
    "in_eid",
    "deg_in",
    "deg_out",
    "dims",
    "scratch",
)

#: Discardable `scf.for` attribute: LLVM's interleave count for that loop
#: (`llvm.loop.interleave.count`), set by the lowering, read by the translator.
INTERLEAVE_ATTR = "gnnc.interleave_count"

#: Discardable `scf.for` attribute: LLVM must not vectorise this loop
#: (`llvm.loop.vectorize.enable` false). Set on in-edge walks, whose
#: iterations gather rows at random: vectorised across edges (which LLVM does
#: once no prefetch call is in the way) every feature becomes a gather and the
#: row a stack of spilled vectors (sage_max, `vectorize 32; prefetch 0`: 3-4x
#: slower than scalar edges). Set on head loops too (a feature loop around
#: other loops): with literal sizes LLVM unrolls the inner row loop first,
#: then vectorised the head loop, a gather and a scatter per feature across
#: the heads (gat at H = 4, F = 32 written with literal sizes: 3.5x slower
#: than with the sizes given at run time).
NO_VECTORIZE_ATTR = "gnnc.no_vectorize"

#: Discardable `scf.for` attribute: LLVM must not unroll this loop
#: (`llvm.loop.unroll.disable`). Set on a dot's reduction loop: at a literal
#: length LLVM unrolled it fully before the loop vectoriser ran, and the SLP
#: vectoriser left a chain of scalar FMAs (attention at H = 4, D = 32
#: written with literal sizes: 2.6x slower than with the sizes at run time);
#: kept a loop, it is vectorised like a loop of run-time length.
NO_UNROLL_ATTR = "gnnc.no_unroll"

#: Discardable `func.func` attribute: the width in bits of the vectors LLVM
#: should prefer in this function (the `prefer-vector-width` function
#: attribute), from a schedule's `simd W`. Set on a kernel by the lowering,
#: copied to its OpenMP worker functions, read by the translator. Without it
#: LLVM keeps the CPU's own preference: 256 bits on Intel's AVX-512 cores.
SIMD_BITS_ATTR = "gnnc.simd_bits"

#: Symbol of the JSON metadata record in every gnnc shared object.
METADATA_SYMBOL = "gnnc_metadata"

#: Prefix of every kernel's C symbol.
SYMBOL_PREFIX = "gnnc_"


#: Bytes between two workers' scratch slices at least: a cache line, plus one
#: so that slices never share a line however the buffer is aligned (two
#: threads updating accumulators on one line made a kernel slower on two
#: threads than on one).
CACHE_LINE_BYTES = 64

#: Under `stream outputs`, a vertex result row of a size compiled in (`specialize`)
#: and at most this many bytes is built on the worker's stack, where LLVM keeps it
#: in registers; a larger one, or one of a size known only at run time, in acc_rows.
STACK_ROW_BYTES = 2048


def scratch_slice_elements(elements: int, itemsize: int) -> int:
    """Elements of one worker's scratch slice: `elements` rounded up to whole
    cache lines, plus one line of padding. The kernels compute the same."""
    line = CACHE_LINE_BYTES // itemsize
    return -(-elements // line) * line + line


#: First line of a gnnc PTX file: this prefix, then the JSON metadata record
#: (ptxas and the CUDA driver ignore comments).
PTX_METADATA_PREFIX = "// gnnc-metadata: "


def grid_blocks(grid: dict, num_vertices: int, num_edges: int = 0) -> list[int]:
    """Blocks of each grid (launch) of a kernel, in order: each `lanes` threads run
    `group` destinations (a vertex grid) or in-CSR positions (an edge grid)."""
    counts = {"V": num_vertices, "E": num_edges}
    launches = grid.get("grids") or [{"over": "V", "group": grid["group"]}] * len(grid.get("phases", [None]))
    blocks = []
    for launch in launches:
        units = -(-counts[launch["over"]] // launch["group"])
        blocks.append(-(-units * grid.get("lanes", 1) // grid["block_size"]))
    return blocks


#: Shared memory a block may use without an opt-in (every architecture gnnc
#: targets): the budget of `map ... hybrid K`'s staged rows.
SHARED_MEMORY_BYTES = 48 << 10


def _product(factors: list, dims: dict[str, int]) -> int:
    n = 1
    for f in factors:
        n *= f if isinstance(f, int) else dims[f]
    return n


def hybrid_row_elements(grid: dict, dims: dict[str, int]) -> list[int]:
    """Per launch of a `hybrid` grid, the shared-memory elements one staged source takes."""
    launches = grid.get("grids") or []
    return [sum(_product(row, dims) for row in launch.get("shared", [])) for launch in launches]
