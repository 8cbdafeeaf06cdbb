"""The default schedule: what a call runs when nobody wrote a schedule.

A kernel compiled without a `schedule` block (and without `schedule=`) is
run with directives picked here from the graph and the call's feature sizes;
the runtime compiles that variant once (it needs the compiler, and the
source the `.so` carries) and keeps it. A kernel with a schedule of its own
runs as written.

Nine decisions so far, each a rule fit to what was measured (2 threads, edge
ids in CSR order, against the kernel as compiled in the same process): the
first five on an AMD EPYC with 32 MiB of L3, the sixth to ninth on the
Xeon this project later moved to (2 MiB of L2 a core, LLVM's 256-bit
vectors). The
first, FeatGraph's 1-D source partitioning (`partition src K`):

    graph (V, E / V)        kernel    F    rows / LLC   K=2    K=4    K=8
    rmat-17 (131K, 16)      gcn       512     8.0        -    1.48x     -   (K=16: 1.25x)
    rmat-17 (131K, 16)      sage_max  512     8.0      1.20x  1.33x  1.37x
    rmat-17 (131K, 16)      gcn       256     4.0      1.19x  1.11x  1.03x
    rmat-17 (131K, 16)      gcn       128     2.0        -    0.91x     -
    rmat-16 (65K, 16)       gcn       512     4.0      1.20x  1.28x  1.12x
    rmat-16 (65K, 16)       gcn       256     2.0      1.06x  1.00x  0.80x
    mdual (258K, 4.0)       gcn       512    15.8      0.97x  0.89x  0.82x
    mdual (258K, 4.0)       sage_max  512    15.8      1.01x  1.00x  0.80x

The second decision, `vectorize W` with W the whole feature row, for rows of
up to 512 bytes (eight AVX-512 registers), in kernels that walk each
destination's in-edges once: the row then stays in registers across the
walk instead of being loaded and stored on every edge. Measured (same runs):

    rmat-16 gcn F=16 1.33x, F=32 1.25x; sage_max F=32 1.29x; sage_mean F=32
    1.35x; rmat-17 gcn F=32 1.27x; mdual gcn F=32 1.01x.
    F=64 (vectorize 64, 7 round-robin samples): gcn / sage_max / sage_mean
    1.11 / 1.11 / 1.29x on rmat-15, 1.09 / 1.06 / 1.11x on mdual, 1.30 /
    1.22 / 1.35x on astro-ph, 1.21 / 1.20 / 1.30x on copter2: every cell.
    F=128 (vectorize 128, eight registers): a first measurement gave
    0.92-1.15x, mixed, and was not taken; measured again, 1.03-1.30x on
    mdual, rmat-16 and copter2 for gcn, sage_max and sage_mean (9
    round-robin samples, edge ids in CSR order), and in the tuning records
    of 16 graphs (gcn, sage_max) 1.10x geometric mean, 21 of 30 cases
    faster, the worst 0.86x (cond-mat-2005): taken. gat F=32: 0.57x on
    rmat-16, 0.71x on mdual while a sliced sweep lost its H == 1 copy
    (specialize-unit-dims), 1.01-1.04x on rmat-14 and cond-mat since: too
    little for a rule; an edge-wise kernel (attention, H=8, D=16, sliced over
    its heads) 0.88x: not for them.

The third, `specialize` (the kernel compiled for the call's sizes of its
dimensions, transforms/loop/specialize_sizes.py), for calls of at least 16K edges
whose gathered rows are at most 8 KiB (1 KiB on the EPYC). Against the
plain kernel (9 round-robin samples, R-MAT scale 15 / mdual):

    gcn F=32 1.18x / 1.19x (with vectorize 32: 1.12x / 1.27x); gcn F=128
    1.10x / 0.95x (with vectorize 128: 1.14x / 0.91x); sage_max F=32 1.60x /
    1.39x; sage_mean F=64 1.28x / 1.23x; attention H=1 D=32 1.17x / 1.08x,
    H=4 D=32 1.26x / 1.15x; gat H=1 F=32 1.17x / 1.10x; gat H=4 F=64
    (1 KiB of `h` per source and 16 B of `el`) 1.15x / 0.90x when its
    256-element row was unrolled into sixteen vector accumulators, 1.13x
    (R-MAT scale 16) / 1.05x since wide rows stay loops
    (convert-loop-to-scf). Rows over 1 KiB gained nothing there: gcn F=256
    0.92x (R-MAT 16), F=512 0.91-0.96x (mdual), gat H=4 F=128 0.98x (mdual).

    On the Xeon (the default's pick with and without it, 7 round-robin
    samples, rmat-16 / mdual), rows over 1 KiB lose nothing and multi-head
    softmax rows gain: gat H=4 F=64 1.35x / 1.16x, F=128 1.23x / 1.12x,
    F=256 1.06x / 1.05x, F=512 0.98x / 1.01x; attention H=4 D=64-256
    1.02-1.08x; gcn and sage_max F=256-1024 0.99-1.03x; gat H=1 F=512 and
    F=1024 0.99-1.07x. So rows of up to 8 KiB are specialised there.

A variant costs a compile (about a second, then cached on disk), hence the
floor on the edges: a smaller call gains less than that in a thousand runs.

The fourth, `prefetch D` for those same calls: about 8 KiB of gathered rows
in flight, D = 8192 / (bytes gathered per source), between 8 (the compiled
default) and 24. Against the default's pick with prefetch 8 (2 threads,
fastest of 11 round-robin samples, inputs on cache lines, one run):

    row (F)       rmat-16: gcn  sage_max  attention   mdual: gcn  sage_max  attention   D
    32 B (8)               1.12x  1.00x     1.03x             1.14x  1.04x     1.14x     24
    128 B (32)             1.08x  1.12x     1.07x             1.15x  1.20x     1.28x     24
    256 B (64)             1.10x  1.14x     1.16x             1.00x  1.05x     1.04x     24
    512 B (128)            1.01x  1.15x     1.13x             1.01x  1.01x     1.00x     16
    2 KiB (512)            0.99x  at D=16                     0.99x  at D=16             8

gat (H=1, F=32) 1.07x / 1.12x at D=24, H=4 F=32 (528 B) 1.04x / 0.98x at
16; copter2 gcn F=32 1.13x; graphs whose rows stay in the caches (4elt,
astro-ph) 0.99-1.05x. Further ahead the prefetches outrun what the line-fill
buffers hold (gcn F=128 at D=48: 0.79x on rmat-16). Rows 16 bytes past a
line (numpy's, three lines per 128 B row) gained as much: gcn and attention
F=32 1.08-1.15x at D=24.

The fifth, `edges sorted`, for those same calls on a graph whose edge ids
are its in-CSR positions (edges sorted by destination, `Graph.edges_sorted`):
edge rows are then read by position, not through `in_eid`
(transforms/loop/sorted_edge_ids.py: gcn F = 32 1.10-1.25x, attention 1.08x, gat
1.03-1.07x on mdual and rmat-16).

The sixth, `vectorize edges 16` (transforms/loop/vectorize_edges.py: a walk's
per-edge scalars 16 edges at a time), for those same calls of kernels whose
lanes would reduce (a softmax's maximum and sum) or carry a whole walk, on
graphs where at least half the in-edges belong to destinations with 8 or
more of them. Against the default's pick without it (2 threads, fastest of
11 round-robin samples, this Xeon; H = 1):

    graph (share of edges at in-degree >= 8)   gat F=32  gat_conv F=32  gat F=128  gat_conv F=128   W=8 instead, F=32
    rmat-14 (0.93)                              1.50x     1.62x          1.12x      1.11x            1.24x
    rmat-16 (0.94)                              1.51x     1.65x          1.06x      1.05x            1.21x
    rmat-17 (0.93)                              1.30x     1.51x          0.97x      0.97x            1.16x
    copter2 (0.94)                              1.70x     1.81x          1.11x      1.09x            1.15x
    4elt (0.97)                                 1.47x     1.60x          1.01x      1.05x            1.04x
    astro-ph (0.88)                             1.52x     1.51x          1.05x      1.04x            1.18x
    email-Enron (0.79)                          1.19x     1.31x          0.98x      1.03x            1.03x
    cond-mat (0.56)                             1.12x     1.06x          0.98x      0.97x            0.97x
    mdual (0.00)                                0.72x     0.76x          0.91x      0.95x            0.75x

gcn_norm, whose lanes only compute each edge's weight before its row:
0.84-1.04x on mdual, copter2 and 4elt, so kernels like it are left alone.
On a graph whose edge ids are not its in-CSR positions, lanes that write or
read edge rows (gat's alpha) gather and scatter them by id: gat 0.96x on
rmat-16 and 1.06x on astro-ph (gat_conv, without edge rows, 1.68x and
1.50x there), so those kernels take lanes only on graphs with sorted ids.
Later, on graphs of the predictor's: rand100k at 2% 2.31x (gat_conv 2.48x),
R-MAT 15 1.77x, pgp-strong (0.73) 1.18x, as-22july06 (0.56) 0.99x. Kernels
whose walks qualify only with their head count compiled in (`lanes.sized`:
gat's gradient stages, a softmax of edge values alone) take it with their
`specialize`: gat's whole backward (five kernels) 1.27x on rmat-16, 1.47x on
copter2, 1.00x on mdual (not taken there), gat_conv's 1.31x and 1.46x. So do
aggregations of one feature (F = 1: an SpMV), whose row loop is then a
scalar: gcn 1.52x / 1.58x, sage_mean 1.30x / 1.54x, sage_max 2.67x / 1.75x
on rmat-16 / copter2.

The seventh, `reorder rcm` with `stream outputs`, for calls of kernels
without edge results (or with, for rows of 2 KiB and more) whose source rows
exceed 64 MiB, on graphs where RCM
order makes at least 0.25 more of the gathers find their row among the last
64 MiB of rows gathered (`plans.gather_reuse_share`). Against the default's
pick with `edges sorted` instead (2 threads, medians of 7, interleaved):

    graph (reuse gain)   kernel     F=64    F=128   F=256   F=512
    mdual (0.14-0.44)    gcn        0.89x   1.09x   1.12x   1.15x
    mdual                sage_max           1.14x           1.08x
    mdual                sage_mean          1.20x           1.16x
    mdual                gin                1.28x           1.49x
    mdual                gcn_norm           1.10x           1.21x
    copter2 (0.16)       gcn                                0.86x
    copter2              sage_max                           0.93x
    rmat-16 (0.00)       gcn                                0.68x

mdual at F = 64 has a gain of 0.14; at F = 128 and up 0.28-0.44. RCM
order alone ran 0.89-1.10x (rows written at random, each read from memory
first). Kernels with edge results take it for rows of 2 KiB and more only:
gat ran 0.94-0.98x at 512-byte rows, 1.00-1.17x at 2 KiB and up (see
`_reorder_pays`). These were measured with the streamed rows built in
acc_rows. Built on the worker's stack (rows of up to 2 KiB whose size is
compiled in, kept in registers), the same schedules ran faster again on
mdual: gcn, sage_max, sage_mean and gcn_norm 1.07-1.14x at F = 128 and
1.16-1.25x at F = 512, gin about 1.1x and 1.01x, gat 1.21x at F = 512 and
1.24-1.46x at F = 128 with H = 4. At 512-byte rows gat still takes id
order: streamed in id order it ran 1.03x (F = 128, H = 1) and 1.12x (F = 32,
H = 4) faster than in RCM order.

The ninth, `stream outputs` alone, in id order, for calls whose vertex
results are 16 MiB or more and whose result rows are built on the stack
(`specialize` taken, rows of at most 2 KiB), unless source partitions build
them in pieces. With the rows in acc_rows this ran 0.92-0.99x; on the stack
(see `_streaming_pays`), against the default's pick without it:

    graph (results)      gcn    sage_max  sage_mean  gin    gcn_norm  gat
    mdual F=32 (33M)     1.11-1.26x 1.12-1.15x 1.14-1.15x 1.30-1.51x 1.14-1.18x 1.02-1.07x
    rmat-16 F=128 (34M)  0.97-1.07x 1.10-1.11x 1.05-1.09x 0.99-1.07x 0.93-1.08x 1.07-1.08x
    copter2 F=128 (28M)  1.05-1.11x 1.02-1.03x 1.07-1.09x 1.04-1.14x 1.01-1.09x 1.06-1.08x
    rmat-16 F=512 (134M) 1.05x  1.05x     1.07x      1.05x  1.05x     1.03x
    copter2 F=512 (113M) 1.07x  1.06x     1.03x      1.10x  1.06x     1.06x
    4elt F=512 (32M)     1.00x  1.02x               1.05x            1.00x
    mdual gat, 132M: F = 128 1.08-1.12x, F = 32 with H = 4 1.08-1.09x

(two or three runs where a range is given). Smaller results stay in the caches
between calls, and streaming them wins or loses by kernel and run: rmat-16
at F = 32 (8 MB) gin 0.88-1.05x, gcn 0.96-1.08x, gat 1.13-1.18x.

The eighth, `simd 512` (the generated code prefers 512-bit vectors), for
those same calls gathering rows of 512 bytes or more, when the kernel's CPU
has AVX-512. LLVM keeps to 256-bit vectors on Intel's AVX-512 cores (for the
clock of older server parts), so a walk over wide rows issues twice the
loads and FMAs it needs. Against the default's pick without it (2 threads,
medians of 7, interleaved, this Xeon; H = 1 but where said):

    kernel           mdual F=128  F=512   rmat-16 F=128  F=512
    gcn              1.09x        1.06x   1.02x          1.07x
    sage_max         1.09x        1.06x   1.10x          1.04x
    sage_mean        1.06x        1.02x   1.06x          1.09x
    gin              1.06x        0.97x   1.06x          1.01x
    gcn_norm         1.05x        1.04x   1.05x          1.14x
    attention        1.00x        1.08x   1.08x          1.17x
    gat              1.00x        1.03x   1.09x          1.11x
    gat H=4          1.07x        1.01x   1.12-1.26x     1.04x
    gat_conv H=4     1.11x        1.10x   1.08x          1.04x

gat with H = 4, F = 32 (528-byte rows of h and el) 1.06x on both graphs;
at F = 128 on copter2 gcn, sage_max, attention and gat 1.05-1.19x, on
4elt (whose rows stay in the caches) 1.01-1.03x.
Narrower rows gain nothing or lose: 256 bytes (F = 64) 0.96-1.02x, 128
bytes (F = 32) on mdual gin and sage_max 0.89-0.91x, gat 0.94x (gcn 1.06x).

Partitioning pays K extra sweeps over the destination rows to turn source
row misses into hits: it wins when the source rows are several times the
last-level cache and each row is gathered often enough (mean in-degree >= 8)
to be worth keeping. Partitions of about two caches of rows did best;
FeatGraph's half a cache per partition (`plans.default_partition_count`)
cut rmat-17 at F = 512 into 17, slower than 4. Kernels that partitioning
cannot apply to are refused by the compiler, and then run as compiled.

Softmax kernels (several walks over the in-edges) can be partitioned, but
are not by default: gat with H = 1, F = 512 (2 threads, medians of 5,
interleaved, `benchmarks/split_schedules.py partition`, load average 4-5)
ran 0.85-0.87x (K=2) and 0.85-0.98x (K=4) on rmat-16 in two runs, and
0.81-1.21x (K=2), 1.04-1.18x (K=4), 1.01-1.48x (K=8) on rmat-17; 0.55-0.69x
at F = 64. Too mixed and too noisy a picture for a rule yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gnnc.graph import plans
from gnnc.ir import abi
from gnnc.ir.schedule import REORDERING_DIRECTIVES, sizes_text

#: Source rows must exceed this many last-level caches before partitioning.
PARTITION_MIN_ROWS_OVER_LLC = 4
#: ... and each source row must be gathered this often on average.
PARTITION_MIN_MEAN_DEGREE = 8.0
#: One partition's source rows, in last-level caches.
PARTITION_ROWS_PER_PART_OVER_LLC = 2
PARTITION_MAX = 8

#: `vectorize W` with W the whole row: rows of this size fit in eight AVX-512 registers.
VECTORIZE_MAX_BYTES = 512
VECTORIZE_MIN_ELEMENTS = 8

#: `prefetch D`: about this many bytes of source rows in flight ...
PREFETCH_BYTES_IN_FLIGHT = 8192
#: ... D between the compiled default and this.
PREFETCH_DEFAULT = 8
PREFETCH_MAX = 24

#: The directive for graphs whose edge ids are their in-CSR positions (transforms/loop/sorted_edge_ids.py).
EDGES_SORTED = "edges sorted"

#: `vectorize edges W`: this many lanes, when at least this share of the in-edges
#: belong to destinations with this many or more of them.
EDGE_LANES = 16
EDGE_LANES_MIN_DEGREE = 8
EDGE_LANES_MIN_SHARE = 0.5

#: `reorder rcm` with `stream outputs`: source rows past this many bytes are
#: gathered at memory speed here (a random gather of 1M rows ran 46 GB/s over
#: 64 MiB of rows, 25 GB/s over 128 MiB; sysfs reports a 480 MiB L3 on this VM) ...
REORDER_MIN_ROWS_BYTES = 64 << 20
#: ... and in RCM order at least this much larger a share of the gathers finds
#: its row among the last (that many bytes of) rows gathered than in id order.
REORDER_MIN_REUSE_GAIN = 0.25
#: Kernels with edge results (gat's alpha, written at the edge ids, at random
#: in RCM order) take it only for rows of at least this many bytes.
REORDER_EDGE_RESULTS_MIN_ROW_BYTES = 2048
REORDER = "reorder rcm"
STREAM_OUTPUTS = "stream outputs"
#: `stream outputs` alone, in id order, for vertex results of at least this many bytes in all.
STREAM_MIN_RESULT_BYTES = 16 << 20

#: `simd 512` where the kernel's CPU has AVX-512 (LLVM keeps to 256-bit vectors on
#: Intel's cores otherwise), for gathered rows of at least this many bytes.
SIMD_512_MIN_ROW_BYTES = 512
SIMD_512 = "simd 512"

#: `specialize` the call's sizes: calls of at least this many edges ...
SPECIALIZE_MIN_EDGES = 1 << 14
#: ... gathering at most this many bytes per source.
SPECIALIZE_MAX_ROW_BYTES = 8192


def source_row_bytes(signature: Any, dims: dict[str, int], itemsize: int) -> int:
    """Bytes of one vertex's rows over the per-vertex inputs read at sources (what a gather at `u` reads).

    Inputs read only at destinations (attention's `q[v]`, gat's `er[v]`) do not
    count: source partitions do not make them cache-resident. Counting them
    partitioned attention (H = 4, D = 32) on R-MAT 17 with edge factor 8,
    0.80-0.89x of the kernel as compiled.
    """
    total = 0
    for p in signature.params:
        if p.domain != "V" or (p.sides and "src" not in p.sides):
            continue
        total += p.row_elements(dims) * itemsize
    return total


def result_row_bytes(signature: Any, dims: dict[str, int], itemsize: int) -> tuple[int, ...]:
    """Bytes of one vertex's row of each vertex result."""
    return tuple(r.row_elements(dims) * itemsize for r in signature.results if r.domain == "V")


def kernel_default(kernel: Any, graph: Any, dims: dict[str, int]) -> str | None:
    """default_directives for a call of a compiled kernel (its signature and ABI record)."""
    itemsize = np.dtype(kernel.signature.numpy_dtype).itemsize
    return default_directives(
        graph,
        source_row_bytes(kernel.signature, dims, itemsize),
        phases=kernel._abi.phases,
        dims=dims,
        itemsize=itemsize,
        accumulates=any(r.domain == "V" for r in kernel.signature.results),
        edge_results=any(r.domain == "E" for r in kernel.signature.results),
        result_rows=result_row_bytes(kernel.signature, dims, itemsize),
        lane_walks=lane_walks_for(kernel._abi, dims, graph),
        lanes_need_sizes=kernel._abi.lanes is not None and kernel._abi.lanes.sized,
        wide_vectors="avx512f" in (getattr(kernel, "_metadata", {}).get("cpu") or {}).get("features", ()),
    )


def lane_walks_for(abi_record: abi.AbiRecord, dims: dict[str, int], graph: Any) -> int:
    """The walks `vectorize edges` would give reductions or whole walks in a call of these sizes
    on this graph: none when they are in a copy for a dimension of size 1 (one head) the call
    does not have, or when their lanes would gather and scatter edge rows by edge id (the
    graph's ids are not its in-CSR positions: gat's alpha, 0.96-1.06x instead of 1.5x)."""
    lanes = abi_record.lanes
    if lanes is None or any(dims.get(d, 1) != 1 for d in lanes.unit_dims):
        return 0
    if lanes.edge_ids and not getattr(graph, "edges_sorted", False):
        return 0
    return lanes.reducing


def default_directives(
    graph: Any,
    row_bytes: int,
    llc_bytes: int | None = None,
    *,
    phases: Sequence[abi.Phase] | None = None,
    dims: dict[str, int] | None = None,
    itemsize: int = 4,
    accumulates: bool = False,
    edge_results: bool = False,
    lane_walks: int = 0,
    lanes_need_sizes: bool = False,
    wide_vectors: bool = False,
    result_rows: tuple[int, ...] = (),
) -> str | None:
    """Schedule directives for a call without a schedule, or None for the kernel as compiled.

    `phases` is the kernel's ABI record of its destination loops (row axis,
    in-edge walks), `accumulates` says whether it has a vertex result and
    `edge_results` whether it has an edge result; without them only
    partitioning is considered. `lane_walks` counts the
    walks whose lanes `vectorize edges` would give reductions or the whole walk
    (the ABI record's `lanes.reducing`), and `lanes_need_sizes` says those walks
    exist only once the call's sizes are compiled in (`lanes.sized`).
    `wide_vectors` says the kernel's CPU has 512-bit vector registers.
    `result_rows` are the bytes of a vertex's row of each vertex result.
    """
    if llc_bytes is None:
        llc_bytes = plans.last_level_cache_bytes()
    v, e = graph.num_vertices, graph.num_edges
    if v == 0:
        return None
    rows = v * row_bytes
    single_walk = not phases or all(p.edge_walks <= 1 for p in phases)
    gathers_rows = row_bytes > 0 and rows >= PARTITION_MIN_ROWS_OVER_LLC * llc_bytes
    lines = []
    if gathers_rows and e / v >= PARTITION_MIN_MEAN_DEGREE and single_walk:
        parts = rows / (PARTITION_ROWS_PER_PART_OVER_LLC * llc_bytes)
        k = 2
        while k < PARTITION_MAX and k * 1.5 < parts:
            k *= 2
        lines.append(f"partition src {k}")
    elif accumulates and phases and dims and len(phases) == 1 and phases[0].edge_walks == 1:
        width = dims.get(phases[0].row_dim or "")
        if width is not None and VECTORIZE_MIN_ELEMENTS <= width and width * itemsize <= VECTORIZE_MAX_BYTES:
            lines.append(f"vectorize {width}")
    if e >= SPECIALIZE_MIN_EDGES and row_bytes > 0:
        distance = prefetch_distance(row_bytes)
        if distance != PREFETCH_DEFAULT:
            lines.append(f"prefetch {distance}")
    if dims and e >= SPECIALIZE_MIN_EDGES and row_bytes <= SPECIALIZE_MAX_ROW_BYTES:
        lines.append(f"specialize {sizes_text(dims)}")
    if (
        accumulates
        and (not edge_results or row_bytes >= REORDER_EDGE_RESULTS_MIN_ROW_BYTES)
        and e >= SPECIALIZE_MIN_EDGES
        and not any(line.startswith("partition") for line in lines)
        and _reorder_pays(graph, row_bytes, rows)
    ):
        lines += [REORDER, STREAM_OUTPUTS]
    elif e >= SPECIALIZE_MIN_EDGES and getattr(graph, "edges_sorted", False):
        lines.append(EDGES_SORTED)
    if STREAM_OUTPUTS not in lines and _streaming_pays(lines, v, result_rows):
        lines.append(STREAM_OUTPUTS)
    if _lanes_pay(lines, graph, lane_walks, lanes_need_sizes):
        lines.append(f"vectorize edges {EDGE_LANES}")
    if wide_vectors and e >= SPECIALIZE_MIN_EDGES and row_bytes >= SIMD_512_MIN_ROW_BYTES:
        lines.append(SIMD_512)
    return "\n".join(lines) or None


def _reorder_pays(graph: Any, row_bytes: int, rows: int) -> bool:
    """Whether destinations should run in RCM order, their rows streamed to memory: on
    graphs whose numbering scatters neighbours, rows too large to stay cached.

    Measured (2 threads, against the default with `edges sorted`): mdual
    gcn F = 128 1.09x, F = 256 1.12x, F = 512 1.15x, sage_max F = 128 1.14x,
    F = 512 1.08x (reuse gain 0.28-0.44); mdual F = 64 0.89x (0.14) and
    copter2 F = 512 0.86x (0.16) lose: their rows are mostly reused in id
    order already. Without streaming stores, RCM order alone ran 0.89-1.10x
    (the output rows are written at random, each first read from memory);
    streaming alone, 0.92-0.99x. Kernels with edge results take it only for
    rows of 2 KiB or more: gat, after a permuted sweep prefetched er[v], ran
    0.94-0.98x at rows of 512 bytes (F = 128, or F = 32 with H = 4; its alpha
    is written at the edge ids, now at random), 1.03x at 1 KiB, and 1.17x
    (F = 512, H = 1), 1.03x (F = 128 and 256, H = 4), 1.00x (F = 512, H = 4)
    at 2 KiB and more.
    """
    if row_bytes <= 0 or rows < REORDER_MIN_ROWS_BYTES:
        return False
    window = REORDER_MIN_ROWS_BYTES // row_bytes
    gain = plans.gather_reuse_share(graph, "rcm", window) - plans.gather_reuse_share(graph, "identity", window)
    return gain >= REORDER_MIN_REUSE_GAIN


def _streaming_pays(lines: list[str], v: int, result_rows: tuple[int, ...]) -> bool:
    """Whether a call's vertex results should be streamed in id order: results of
    STREAM_MIN_RESULT_BYTES or more, each row built on the worker's stack
    (`specialize` taken, rows of at most abi.STACK_ROW_BYTES), never with source
    partitions (which build rows in pieces).

    Measured (2 threads, medians of 7-9, interleaved, against the default without
    it; the table in the module docstring): 1.02-1.51x on mdual at F = 32 (33 MB of
    results), 1.03-1.14x on copter2 at F = 128 and 512 and on rmat-16 at F = 512,
    0.93-1.11x on rmat-16 at F = 128 (34 MB) in three runs, 1.00-1.05x on 4elt at
    F = 512; gat on mdual 1.12x at F = 128 and 1.08x at F = 32 with H = 4 (132 MB),
    where RCM order as well ran 0.97x and 0.89x of that. Smaller results, which
    stay in the caches between calls, gain or lose by kernel and run: rmat-16 at
    F = 32 (8 MB) 0.88-1.18x.
    """
    return (
        bool(result_rows)
        and v * sum(result_rows) >= STREAM_MIN_RESULT_BYTES
        and max(result_rows) <= abi.STACK_ROW_BYTES
        and any(line.startswith("specialize") for line in lines)
        and not any(line.startswith("partition") for line in lines)
    )


def _lanes_pay(lines: list[str], graph: Any, lane_walks: int, need_sizes: bool) -> bool:
    """Whether a call with these directives should run `lane_walks` walks in lanes: calls that
    get a variant anyway, on graphs whose in-edges mostly sit at destinations with many, with
    the sizes compiled in if the lanes need them."""
    return (
        bool(lane_walks)
        and graph.num_edges >= SPECIALIZE_MIN_EDGES
        and (not need_sizes or any(line.startswith("specialize") for line in lines))
        and plans.edges_in_long_walks(graph, EDGE_LANES_MIN_DEGREE) >= EDGE_LANES_MIN_SHARE
    )


def fit_edge_ids(directives: str, graph: Any) -> str:
    """A schedule (`; `-separated) with `edges sorted` kept or added only where this graph's
    edge ids are sorted: a tuned or predicted schedule may come from another graph with the
    same statistics, and the runtime refuses `edges sorted` on a graph whose ids are not."""
    lines = [line for line in directives.split("; ") if line and line != EDGES_SORTED]
    reorders = any(line.split()[0] in REORDERING_DIRECTIVES for line in lines)
    if lines and getattr(graph, "edges_sorted", False) and not reorders:
        lines.append(EDGES_SORTED)
    return "; ".join(lines)


def fit_reorder(directives: str, kernel: Any, graph: Any, dims: dict[str, int]) -> str:
    """A predicted schedule (`; `-separated) with the default's `reorder rcm` and `stream
    outputs` added where the default takes them and the prediction chose no order, partition,
    groups or streaming of its own: the predictor's cases were tuned before these existed, and
    without them mdual's sums at F >= 128 ran 1.08-1.49x slower than the default."""
    lines = [line for line in directives.split("; ") if line]
    chosen = {line.split()[0] for line in lines}
    if not lines or chosen & {*REORDERING_DIRECTIVES, "partition", "group", "stream"}:
        return directives
    if REORDER not in (kernel_default(kernel, graph, dims) or "").splitlines():
        return directives
    return "; ".join([line for line in lines if line != EDGES_SORTED] + [REORDER, STREAM_OUTPUTS])


def fit_edge_lanes(directives: str, graph: Any, lane_walks: int, need_sizes: bool = False) -> str:
    """A predicted schedule (`; `-separated) with the default's `vectorize edges` added where the
    default would take it: the predictor's cases were tuned on graphs whose edge ids are not
    sorted, so a prediction of gat never holds it, and without it gat ran up to 1.8x slower
    than the default on sorted ones. `need_sizes`: the lanes exist only with `specialize`."""
    lines = [line for line in directives.split("; ") if line]
    if any(line.startswith("vectorize edges") for line in lines) or not lines:
        return directives
    if _lanes_pay(lines, graph, lane_walks, need_sizes):
        lines.append(f"vectorize edges {EDGE_LANES}")
    return "; ".join(lines)


def prefetch_distance(row_bytes: int) -> int:
    """Edges ahead to prefetch source rows of `row_bytes`: about PREFETCH_BYTES_IN_FLIGHT of them."""
    return min(PREFETCH_MAX, max(PREFETCH_DEFAULT, PREFETCH_BYTES_IN_FLIGHT // max(1, row_bytes)))


# ------------------------------------------------------------------ cuda

#: A hub: this many in-edges at one destination ...
CUDA_HUB_MIN_DEGREE = 1024
#: ... and this many times the mean in-degree.
CUDA_HUB_MIN_SKEW = 32.0
#: Rows at least this wide keep a warp's 32 lanes busy on features.
CUDA_WARP_MIN_ROW = 32
#: Narrower rows still go to warps when each destination has this many in-edges.
CUDA_WARP_MIN_MEAN_DEGREE = 16.0
CUDA_WARP_MIN_ROW_DEEP = 8


def default_cuda_mappings(graph: Any, row_elements: int) -> list[str]:
    """The cuda thread mappings (`map` directives without `map`) to try for a kernel
    without a `for cuda` schedule, best first.

    uGrapher's observation, as a rule (not measured: this machine has no GPU,
    so the thresholds are the papers' reasoning, not fits):

    - a hub (an in-degree >= 1024 and >= 32x the mean) makes vertex mappings
      wait on the one thread or warp that walks the hub's edges while the
      rest of the grid idles; edge mappings spread its edges over the grid
      (atomics on its row): warp_edge when rows are wide enough for the lanes
      (>= 32 elements), else thread_edge;
    - wide rows (>= 32 elements) keep a warp's lanes busy on features, and
      the lanes' reads of a row coalesce: warp_vertex;
    - rows of 8 to 31 elements with a mean in-degree >= 16: Seastar's
      feature-adaptive groups, `warp_vertex lanes L` with L the row rounded up
      to a power of two, so 32 / L destinations share a warp and few lanes idle;
    - otherwise (narrow rows, few edges) a warp's lanes would mostly idle:
      thread_vertex, one thread per destination.

    Each list ends in thread_vertex, which every kernel compiles to; the
    runtime takes the first mapping the compiler accepts for the kernel (a
    warp mapping refuses a chain of two `@`).
    """
    v, e = graph.num_vertices, graph.num_edges
    if v == 0 or e == 0:
        return ["thread_vertex"]
    mean = e / v
    degrees = graph.in_indptr[1:] - graph.in_indptr[:-1]
    hub = int(degrees.max())
    wide = row_elements >= CUDA_WARP_MIN_ROW
    if hub >= CUDA_HUB_MIN_DEGREE and hub >= CUDA_HUB_MIN_SKEW * mean:
        if wide:
            return ["warp_edge", "thread_edge", "warp_vertex", "thread_vertex"]
        return ["thread_edge", "thread_vertex"]
    if wide:
        return ["warp_vertex", "thread_vertex"]
    if row_elements >= CUDA_WARP_MIN_ROW_DEEP and mean >= CUDA_WARP_MIN_MEAN_DEGREE:
        lanes = 1 << (row_elements - 1).bit_length()
        return [f"warp_vertex lanes {lanes}" if lanes < CUDA_WARP_MIN_ROW else "warp_vertex", "thread_vertex"]
    return ["thread_vertex"]


def row_elements(signature: Any, dims: dict[str, int]) -> int:
    """The widest per-vertex or per-edge row a kernel reads or writes, in elements."""
    widest = 0
    for t in [*signature.params, *signature.results]:
        if t.domain not in ("V", "E"):
            continue
        widest = max(widest, t.row_elements(dims))
    return widest
