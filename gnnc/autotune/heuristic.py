"""The default schedule: what a call runs when nobody wrote a schedule.

A kernel compiled without a `schedule` block (and without `schedule=`) is
run with directives picked here from the graph and the call's feature sizes;
the runtime compiles that variant once (it needs the compiler, and the
source the `.so` carries) and keeps it. A kernel with a schedule of its own
runs as written. `default_directives` decides, for a call gathering
`row_bytes` per source (a *large* call has at least 16K edges,
SPECIALIZE_MIN_EDGES):

- `partition src K` (FeatGraph) when the source rows exceed 4 last-level
  caches and the mean in-degree is at least 8, for kernels with one in-edge
  walk (softmax kernels are not partitioned); K = 2, 4 or 8, about two
  caches of rows per partition;
- otherwise `vectorize F`, the whole row in registers, for one walk into a
  vertex result with rows of 8 elements up to 512 bytes;
- for large calls, `prefetch D` with about 8 KiB of rows in flight (D
  between 8 and 24, `prefetch_distance`), and `specialize` the call's sizes
  when the rows are at most 8 KiB;
- for large unpartitioned calls with vertex results (with edge results too,
  at rows of 2 KiB or more) whose source rows exceed 64 MiB, on graphs where
  RCM order lets at least 0.25 more of the gathers reuse a recent row:
  `reorder rcm` and `stream outputs` (`_reorder_pays`); else `edges sorted`
  on large calls whose graph has its edge ids in in-CSR order;
- `stream outputs` alone for vertex results of 16 MiB or more whose rows are
  built on the worker's stack (`_streaming_pays`);
- `vectorize edges 16` for large calls whose walks reduce in lanes, where
  half the in-edges or more sit at destinations with 8 or more (`_lanes_pay`);
- `simd 512` for large calls gathering rows of 512 bytes or more on a CPU
  with AVX-512;
- `relations per_edge` for large calls of kernels that compute a relation's
  transform per (vertex, relation) pair (relation-transform-first) where
  the pairs are not enough fewer than the edges to pay for the rows they
  write and the edges gather: (E - P) x K < 12 (E + P), summed over the
  transforms (`pairs_pay`).

`group neighbors` is never picked. `default_cuda_mappings` is the CUDA
counterpart. The measurements behind each rule and threshold, the machines
they were taken on, and what was tried and dropped are in
docs/design/default-schedule.md.
"""

from __future__ import annotations

import weakref
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
#: gathered at memory speed (docs/design/default-schedule.md) ...
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

#: A relation's transform per (vertex, relation) pair pays where the multiply-adds it saves,
#: (E - P) x K x N, are at least this many times the row elements it moves, (E + P) x N.
PAIRS_MIN_SAVING = 12
RELATIONS_PER_EDGE = "relations per_edge"

#: `specialize` the call's sizes: calls of at least this many edges ...
SPECIALIZE_MIN_EDGES = 1 << 14
#: ... gathering at most this many bytes per source.
SPECIALIZE_MAX_ROW_BYTES = 8192


def source_row_bytes(signature: Any, dims: dict[str, int], itemsize: int) -> int:
    """Bytes of one vertex's rows over the per-vertex inputs read at sources (what a gather at `u` reads).

    Inputs read only at destinations (attention's `q[v]`, gat's `er[v]`) do not
    count: source partitions do not make them cache-resident, and counting
    them partitioned calls that then ran slower.
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


#: Per kernel, the defaults of its calls by sizes and class of graph (`default_class`).
_CLASS_DEFAULTS: weakref.WeakKeyDictionary[Any, dict[tuple, str | None]] = weakref.WeakKeyDictionary()


def default_class(kernel: Any, graph: Any, dims: dict[str, int]) -> tuple | None:
    """What `default_directives` reads of `graph` for a call of `kernel` with sizes `dims`,
    where that is a few thresholds: the class of the graph, equal for every graph that gets
    the same default. None where a rule would look at the graph itself (the reuse of
    gathers under RCM order, the in-degrees edge lanes need, relation pairs: large calls
    only): its default is made for that graph.

    Mini-batch blocks are a new graph each call, of a few classes: their defaults (and the
    runtime's decisions, `autotune.decision`) are looked up, not made. Every threshold
    `default_directives` compares the graph with is here; a test checks the two agree.
    """
    v, e = graph.num_vertices, graph.num_edges
    if v == 0:
        return ("empty",)
    record = kernel._abi
    row_bytes, result_bytes, pair_reductions = _class_inputs(kernel, dims)
    rows = v * row_bytes
    large = e >= SPECIALIZE_MIN_EDGES
    if large and (rows >= REORDER_MIN_ROWS_BYTES or lane_walks_for(record, dims, graph) or pair_reductions):
        return None
    llc_bytes = plans.last_level_cache_bytes()
    gathers = row_bytes > 0 and rows >= PARTITION_MIN_ROWS_OVER_LLC * llc_bytes
    parts = partition_count(rows, llc_bytes) if gathers and e / v >= PARTITION_MIN_MEAN_DEGREE else 0
    streams = v * result_bytes >= STREAM_MIN_RESULT_BYTES
    sorted_ids = large and record.edge_ids and bool(getattr(graph, "edges_sorted", False))
    return (large, gathers, parts, streams, sorted_ids)


#: Per kernel, by sizes, what `default_class` reads of it whatever the graph (`_class_inputs`).
_CLASS_INPUTS: weakref.WeakKeyDictionary[Any, dict[tuple, tuple[int, int, bool]]] = weakref.WeakKeyDictionary()


def _class_inputs(kernel: Any, dims: dict[str, int]) -> tuple[int, int, bool]:
    """(bytes gathered per source, bytes of a vertex's rows of results, whether a temporary
    reduces over relation pairs) of `kernel` at sizes `dims`, made once: a new mini-batch
    block asks for its class every call."""
    try:
        per_kernel: dict[tuple, tuple[int, int, bool]] | None = _CLASS_INPUTS.setdefault(kernel, {})
    except TypeError:  # a kernel that cannot be weakly referenced or hashed: computed each time
        per_kernel = None
    key = tuple(dims.items())
    made = None if per_kernel is None else per_kernel.get(key)
    if made is None:
        itemsize = np.dtype(kernel.signature.numpy_dtype).itemsize
        made = (
            source_row_bytes(kernel.signature, dims, itemsize),
            sum(result_row_bytes(kernel.signature, dims, itemsize)),
            any(t.domain in ("RS", "RD") and t.reduced is not None for t in kernel._abi.temps),
        )
        if per_kernel is not None:
            per_kernel[key] = made
    return made


def kernel_default(kernel: Any, graph: Any, dims: dict[str, int]) -> str | None:
    """default_directives for a call of a compiled kernel (its signature and ABI record),
    computed once per kernel, sizes and `default_class` of graph where it has one."""
    cls = default_class(kernel, graph, dims)
    memo: dict[tuple, str | None] | None = None
    if cls is not None:
        try:
            memo = _CLASS_DEFAULTS.setdefault(kernel, {})
        except TypeError:  # a kernel that cannot be weakly referenced or hashed: computed each time
            memo = None
        key = (tuple(dims.items()), cls)
        if memo is not None and key in memo:
            return memo[key]
    itemsize = np.dtype(kernel.signature.numpy_dtype).itemsize
    directives = _kernel_default(kernel, graph, dims, itemsize, _class_inputs(kernel, dims)[0])
    if memo is not None:
        memo[key] = directives
    return directives


def _kernel_default(kernel: Any, graph: Any, dims: dict[str, int], itemsize: int, row_bytes: int) -> str | None:
    return default_directives(
        graph,
        row_bytes,
        phases=kernel._abi.phases,
        dims=dims,
        itemsize=itemsize,
        accumulates=any(r.domain == "V" for r in kernel.signature.results),
        edge_results=any(r.domain == "E" for r in kernel.signature.results),
        result_rows=result_row_bytes(kernel.signature, dims, itemsize),
        lane_walks=lane_walks_for(kernel._abi, dims, graph),
        lanes_need_sizes=kernel._abi.lanes is not None and kernel._abi.lanes.sized,
        wide_vectors="avx512f" in (getattr(kernel, "_metadata", {}).get("cpu") or {}).get("features", ()),
        # only calls of SPECIALIZE_MIN_EDGES or more weigh pairs against edges: a small one counts none
        pair_transforms=pair_transforms_for(kernel._abi, dims, graph)
        if graph.num_edges >= SPECIALIZE_MIN_EDGES
        else (),
        edge_rows=kernel._abi.edge_ids,
    )


def pair_transforms_for(
    abi_record: abi.AbiRecord, dims: dict[str, int], graph: Any
) -> tuple[tuple[int, int, int], ...]:
    """Per relation transform a kernel computes per (vertex, relation) pair: (P, K, N), the
    pairs of its side on this graph, the axis it reduces and the row it writes."""
    found = []
    for temp in abi_record.temps:
        if temp.domain not in ("RS", "RD") or temp.reduced is None:
            continue
        side = "src" if temp.domain == "RS" else "dst"
        k = temp.reduced if isinstance(temp.reduced, int) else dims.get(temp.reduced, 0)
        found.append((plans.relation_pair_count(graph, side), k, abi.elements(temp.shape, dims)))
    return tuple(found)


def lane_walks_for(abi_record: abi.AbiRecord, dims: dict[str, int], graph: Any) -> int:
    """The walks `vectorize edges` would give reductions or whole walks in a call of these sizes
    on this graph: none when they are in a copy for a dimension of size 1 (one head) the call
    does not have, or when their lanes would gather and scatter edge rows by edge id (the
    graph's ids are not its in-CSR positions: gat's alpha), which costs what the lanes gain."""
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
    pair_transforms: tuple[tuple[int, int, int], ...] = (),
    edge_rows: bool = True,
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
    `pair_transforms` are the kernel's relation transforms per (vertex, relation)
    pair, (P, K, N) each (`pair_transforms_for`). `edge_rows` says whether the
    kernel reads edge ids (its ABI record's `edge_ids`): `edges sorted` replaces
    them by walk positions and changes nothing else, so a kernel without them
    does not take it, nor ask whether the graph's ids are sorted (a pass over
    the edges of every new mini-batch block).
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
        lines.append(f"partition src {partition_count(rows, llc_bytes)}")
    elif accumulates and phases and dims and len(phases) == 1 and phases[0].edge_walks == 1:
        width = phases[0].row_size(dims)
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
    elif edge_rows and e >= SPECIALIZE_MIN_EDGES and getattr(graph, "edges_sorted", False):
        lines.append(EDGES_SORTED)
    if STREAM_OUTPUTS not in lines and _streaming_pays(lines, v, result_rows):
        lines.append(STREAM_OUTPUTS)
    if _lanes_pay(lines, graph, lane_walks, lanes_need_sizes):
        lines.append(f"vectorize edges {EDGE_LANES}")
    if wide_vectors and e >= SPECIALIZE_MIN_EDGES and row_bytes >= SIMD_512_MIN_ROW_BYTES:
        lines.append(SIMD_512)
    if pair_transforms and e >= SPECIALIZE_MIN_EDGES and not pairs_pay(e, pair_transforms):
        lines.append(RELATIONS_PER_EDGE)
    return "\n".join(lines) or None


def partition_count(rows: int, llc_bytes: int) -> int:
    """Source partitions for `rows` bytes of gathered rows: a power of two, about
    PARTITION_ROWS_PER_PART_OVER_LLC caches of rows each, at most PARTITION_MAX."""
    parts = rows / (PARTITION_ROWS_PER_PART_OVER_LLC * llc_bytes)
    k = 2
    while k < PARTITION_MAX and k * 1.5 < parts:
        k *= 2
    return k


def pairs_pay(num_edges: int, transforms: Sequence[tuple[int, int, int]]) -> bool:
    """Whether relation transforms pay per (vertex, relation) pair rather than per edge.

    Per pair, a transform `a @ W[r]` of K x N costs P x K x N multiply-adds and moves
    (P + E) x N row elements (written per pair, gathered per edge); per edge, fused in
    the walk, E x K x N multiply-adds. Pairs pay where the multiply-adds saved are at
    least PAIRS_MIN_SAVING times the elements moved, summed over the transforms: for
    one transform, P / E at most (K - 12) / (K + 12), 0.68 for K = 64, 0.45 for K = 32,
    0.14 for K = 16, never for K <= 12 (with the call's sizes compiled in, the per-edge
    product stays in registers). Measurements: docs/design/heterogeneous.md.
    """
    saved = sum((num_edges - p) * k * n for p, k, n in transforms)
    moved = sum((num_edges + p) * n for p, _, n in transforms)
    return saved >= PAIRS_MIN_SAVING * moved


def _reorder_pays(graph: Any, row_bytes: int, rows: int) -> bool:
    """Whether destinations should run in RCM order, their rows streamed to memory: on
    graphs whose numbering scatters neighbours, rows too large to stay cached.

    Source rows of REORDER_MIN_ROWS_BYTES or more, and RCM order must raise the
    share of gathers that find their row among the last REORDER_MIN_ROWS_BYTES
    of rows gathered by REORDER_MIN_REUSE_GAIN: graphs whose rows are mostly
    reused in id order already lose. Without streaming stores RCM order does
    not pay (the output rows are written at random, each first read from
    memory); kernels with edge results also write those at random, hence
    their higher floor on the row (REORDER_EDGE_RESULTS_MIN_ROW_BYTES, checked
    by the caller). Measurements: docs/design/default-schedule.md.
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

    Smaller results stay in the caches between calls, and streaming them gains or
    loses by kernel and run; rows built in acc_rows instead of on the stack do not
    gain. Measurements: docs/design/default-schedule.md.
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
    lines = [line.strip() for line in directives.split(";") if line.strip() and line.strip() != EDGES_SORTED]
    reorders = any(line.split()[0] in REORDERING_DIRECTIVES for line in lines)
    if lines and getattr(graph, "edges_sorted", False) and not reorders:
        lines.append(EDGES_SORTED)
    return "; ".join(lines)


def fit_reorder(directives: str, kernel: Any, graph: Any, dims: dict[str, int]) -> str:
    """A predicted schedule (`; `-separated) with the default's `reorder rcm` and `stream
    outputs` added where the default takes them and the prediction chose no order, partition,
    groups or streaming of its own: the predictor's cases were tuned before these existed, and
    without them a prediction runs slower than the default where the default takes them."""
    lines = [line.strip() for line in directives.split(";") if line.strip()]
    chosen = {line.split()[0] for line in lines}
    if not lines or chosen & {*REORDERING_DIRECTIVES, "partition", "group", "stream"}:
        return directives
    if REORDER not in (kernel_default(kernel, graph, dims) or "").splitlines():
        return directives
    return "; ".join([line for line in lines if line != EDGES_SORTED] + [REORDER, STREAM_OUTPUTS])


def fit_edge_lanes(directives: str, graph: Any, lane_walks: int, need_sizes: bool = False) -> str:
    """A predicted schedule (`; `-separated) with the default's `vectorize edges` added where the
    default would take it: the predictor's cases were tuned on graphs whose edge ids are not
    sorted, so a prediction of gat never holds it, and without it gat runs slower than the
    default on sorted ones. `need_sizes`: the lanes exist only with `specialize`."""
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

    uGrapher's observation, as a rule; its thresholds are the papers' reasoning,
    not fits to measurements (docs/design/cuda.md):

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
