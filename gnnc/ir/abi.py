"""The C ABI of a compiled gnnc kernel, described once for the compiler, the runtimes and C.

Every kernel `K` of a `.so` (or each launch of a PTX kernel) is a C function
`void gnnc_K(...)` whose arguments are `ARGUMENT_GROUPS`, in order: the
graph arguments (counts, destination blocks and order, the in-CSR,
degrees, dims, scratch), one pointer per parameter, per result and per temp,
then the groups a kernel's schedule asks for, each present when its
predicate over the kernel's `AbiRecord` holds. `kernel_arguments` lists one
kernel's; the lowering's signature, the CPU and CUDA runtimes' calls and the
C header are all derived from it, and nothing else lists arguments
(`gnnc/ir/kernel_abi.py` reads and edits the record on a lowered function;
`gnnc/target/cpu/header.py` writes the prototypes and the C helpers that
fill the graph and schedule arguments).

The rules every caller keeps:

- Scalars are `int64_t`; every array is C-contiguous, row-major, of
  `int64_t` or of the kernel's float type T (float or double), and no two
  arrays overlap (the kernels are compiled with `noalias`). A pointer must be
  valid even where its array would be empty (pass a one-element array).
  A kernel whose record has `edge_ids` false reads neither `in_eid` nor
  `part_eid`: a one-element array may stand for each; one whose `in_src`
  is false (partitioned, `part_src` carries the sources) does not read
  `in_src`, nor one whose `deg_in` / `deg_out` is false that degree array.
- A tensor's rows: vertex tensors have num_dst rows (num_src for an input
  read at sources, see `gnnc/ir/signature.py`), edge tensors num_edges rows
  indexed by the user's edge id, parameters are whole (a scalar is a
  one-element array).
- Destination blocks `dst_blocks[b] .. dst_blocks[b + 1]` split positions
  0 .. V, which map to destinations through `dst_order` (a permutation; the
  identity for a kernel compiled for the identity `order`). Up to
  num_threads OpenMP workers (libgomp) take blocks dynamically; each worker
  uses its own slice of `scratch`, `scratch_slice_elements` of the summed
  scratch shapes long.
- The record (`AbiRecord`) travels in the `.so`'s metadata (symbol
  `gnnc_metadata`) and on the first line of a PTX file, as JSON; it says
  which optional groups a kernel takes and how large its buffers are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

Dim = int | str

#: Bump when the argument order or the metadata layout changes. 7: every
#: shared object ends with an integrity trailer and exports each kernel's
#: argument count (`arity_symbol`), which the runtime requires. 8: the
#: relation groups (`relations`, `relation_degrees`, `source_pairs`,
#: `destination_pairs`).
ABI_VERSION = 8

#: func.func attribute holding a kernel's ABI record (JSON) during compilation.
ABI_ATTR = "gnnc.ir.abi"

#: Discardable `scf.for` attribute: LLVM's interleave count for that loop
#: (`llvm.loop.interleave.count`), set by the lowering, read by the translator.
INTERLEAVE_ATTR = "gnnc.interleave_count"

#: Discardable `scf.for` attribute: LLVM must not vectorise this loop
#: (`llvm.loop.vectorize.enable` false). Set on in-edge walks, whose
#: iterations gather rows at random: vectorised across edges (which LLVM does
#: once no prefetch call is in the way) every feature becomes a gather and the
#: row a stack of spilled vectors. Set on head loops too (a feature loop
#: around other loops): with literal sizes LLVM unrolls the inner row loop
#: first, then vectorises the head loop, a gather and a scatter per feature
#: across the heads. Measurements: docs/design/specialization.md.
NO_VECTORIZE_ATTR = "gnnc.no_vectorize"

#: Discardable `scf.for` attribute: LLVM must not unroll this loop
#: (`llvm.loop.unroll.disable`). Set on a dot's reduction loop: at a literal
#: length LLVM unrolls it fully before the loop vectoriser runs, and the SLP
#: vectoriser leaves a chain of scalar FMAs; kept a loop, it is vectorised
#: like a loop of run-time length (docs/design/specialization.md).
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


def arity_symbol(symbol: str) -> str:
    """The exported `int64_t` that holds how many arguments the function `symbol` takes, as
    compiled: the runtime checks it against `kernel_arguments` of the metadata's record before
    any call. The dot keeps it out of C's namespace (no kernel symbol can have one)."""
    return f"{symbol}.nargs"


#: A CPU kernel's COO entry, `int gnnc_K__coo(...)` (`coo_symbol`): its graph built from COO
#: edges, its plan prepared, the kernel called and everything freed, in one function the linker
#: compiles into the shared object from the header's C helpers (`target/cpu/c_helpers.py`); the
#: kernel's metadata record names it under "coo" where the kernel has one (a CPU kernel reading
#: no relation types, not compiled for sorted edge ids). Its arguments, in order, and whether
#: each is a pointer: the counts, the edges `src[e] -> dst[e]` (int64, ids checked), the
#: workers, the dims in the record's `dims` order (int64), and an array of the kernel's
#: inputs' then results' addresses in declaration order. It returns 0, or a `COO_ERRORS` code
#: with no result written.
COO_ENTRY_ARGUMENTS: tuple[tuple[str, bool], ...] = (
    ("num_src", False),
    ("num_dst", False),
    ("num_edges", False),
    ("src", True),
    ("dst", True),
    ("num_threads", False),
    ("dims", True),
    ("args", True),
)

#: What a COO entry's nonzero return means (GNNC_ERROR_MEMORY, GNNC_ERROR_ARGUMENT of the helpers).
COO_ERRORS = {1: "an allocation failed", 2: "an id out of range, a bad thread count or bad dims"}


def coo_symbol(symbol: str) -> str:
    """The COO entry's name for kernel symbol `symbol` (two underscores: no kernel's own suffix)."""
    return f"{symbol}__coo"


#: The last bytes of every gnnc shared object, written at link time
#: (`target/cpu/codegen.link_shared_object`): this marker, then the SHA-256 of
#: every byte before the marker. The dynamic linker maps what the ELF program
#: headers name and never reads past the section headers, so dlopen from C
#: ignores it; `gnnc.load` refuses a file whose digest does not match (a bit
#: flipped anywhere, an edit, a truncation) before it maps any of it.
INTEGRITY_MARKER = b"\0gnnc-sha256-v1\0"
INTEGRITY_TRAILER_BYTES = len(INTEGRITY_MARKER) + hashlib.sha256().digest_size


def with_integrity(body: bytes) -> bytes:
    """A shared object's bytes with its integrity trailer appended."""
    return body + INTEGRITY_MARKER + hashlib.sha256(body).digest()


def integrity_problem(data: bytes) -> str | None:
    """What is wrong with a file's integrity trailer (None: the digest matches its bytes)."""
    if len(data) < INTEGRITY_TRAILER_BYTES or not data.endswith(INTEGRITY_MARKER, 0, -hashlib.sha256().digest_size):
        return "it has no gnnc integrity trailer (not written by this gnnc, stripped, or cut short)"
    body, digest = data[:-INTEGRITY_TRAILER_BYTES], data[-hashlib.sha256().digest_size :]
    if hashlib.sha256(body).digest() != digest:
        return "its bytes do not match the digest gnnc wrote (corrupted or modified)"
    return None


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


#: The most blocks one launch of a cuda kernel starts: its grid's blocks beyond
#: these are walked by the launched ones (a grid-stride loop, convert-grid-to-nvvm),
#: so per-thread scratch is sized by the launch, not by the work. 2048 blocks of
#: 256 threads are twice what an H100 / H200 (132 SMs x 2048 threads) keeps resident.
CUDA_MAX_BLOCKS = 2048


def launched_blocks(blocks: Sequence[int]) -> list[int]:
    """The blocks each launch of a cuda kernel starts for grids of `blocks` blocks."""
    return [min(b, CUDA_MAX_BLOCKS) for b in blocks]


def grid_blocks(grid: Grid, num_vertices: int, num_edges: int = 0) -> list[int]:
    """Blocks of each grid (launch) of a kernel, in order: each `lanes` threads run
    `group` destinations (a vertex grid) or in-CSR positions (an edge grid)."""
    counts = {"V": num_vertices, "E": num_edges}
    launches = grid.grids or [Launch("V", grid.group)] * len(grid.phases or [None])
    blocks = []
    for launch in launches:
        units = -(-counts[launch.over] // launch.group)
        blocks.append(-(-units * grid.lanes // grid.block_size))
    return blocks


#: Shared memory a block may use without an opt-in (every architecture gnnc
#: targets): the budget of `map ... hybrid K`'s staged rows.
SHARED_MEMORY_BYTES = 48 << 10


def elements(shape: Sequence[Dim], dims: dict[str, int]) -> int:
    """The number of elements of a shape, named dimensions sized by `dims`."""
    n = 1
    for f in shape:
        n *= f if isinstance(f, int) else dims[f]
    return n


def hybrid_row_elements(grid: Grid, dims: dict[str, int]) -> list[int]:
    """Per launch of a `hybrid` grid, the shared-memory elements one staged source takes."""
    return [sum(elements(row, dims) for row in launch.shared or []) for launch in grid.grids]


# ---------------------------------------------------------------- the record


def _shape(value: Sequence[Any]) -> list[Dim]:
    return [d if isinstance(d, int) else str(d) for d in value]


@dataclass
class Temp:
    """A buffer between phases: a vertex value read at neighbours, V or E rows of `shape`; or a
    value per (vertex, relation) pair, one row per pair of the source side ("RS") or of the
    destination side ("RD", see `pair_sides`)."""

    domain: str  # "V", "E", "RS" or "RD"
    shape: list[Dim]
    #: one row per source (num_src), computed by the source sweep, not per destination
    source_rows: bool = False
    #: per destination but read at sources: the kernel needs a square graph
    read_at_src: bool = False
    #: a pair temp holding a relation's transform `a @ W[r]`: the axis it reduces (K), for the
    #: runtime's choice between pairs and edges (`autotune/heuristic.py`)
    reduced: Dim | None = None

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {"domain": self.domain, "shape": list(self.shape)}
        if self.source_rows:
            record["rows"] = "src"
        if self.read_at_src:
            record["read_at_src"] = True
        if self.reduced is not None:
            record["reduced"] = self.reduced
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Temp:
        reduced = record.get("reduced")
        return cls(
            record["domain"],
            _shape(record["shape"]),
            source_rows=record.get("rows") == "src",
            read_at_src=bool(record.get("read_at_src", False)),
            reduced=None if reduced is None else _shape([reduced])[0],
        )


@dataclass
class Phase:
    """One destination sweep as the lowering emitted it (for the runtime's default heuristic)."""

    row_dim: str | None  # the innermost row axis: a size's name, or a literal size ("3")
    edge_walks: int  # walks over a destination's in-edges

    def row_size(self, dims: Mapping[str, int]) -> int | None:
        """The row axis's size in a call of these sizes (a literal's own), None without one."""
        if self.row_dim is None:
            return None
        return int(self.row_dim) if self.row_dim.isdigit() else dims.get(self.row_dim)

    def to_dict(self) -> dict[str, Any]:
        return {"row_dim": self.row_dim, "edge_walks": self.edge_walks}

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Phase:
        return cls(record.get("row_dim"), int(record.get("edge_walks", 0)))


@dataclass
class Lanes:
    """What `vectorize edges` could do to a kernel's in-edge walks (vectorize-edges sets it)."""

    walks: int  # walks that qualify as compiled
    reducing: int  # of those it would take, the ones that reduce or have no rows
    unit_dims: list[str]  # dimensions that must be 1 for them
    edge_ids: bool  # whether the lanes read or write edge rows at the edge's id
    sized: bool  # whether they qualify only with the call's sizes compiled in

    def to_dict(self) -> dict[str, Any]:
        return {
            "walks": self.walks,
            "reducing": self.reducing,
            "unit_dims": list(self.unit_dims),
            "edge_ids": self.edge_ids,
            "sized": self.sized,
        }

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Lanes:
        return cls(
            int(record.get("walks", 0)),
            int(record.get("reducing", 0)),
            list(record.get("unit_dims", [])),
            bool(record.get("edge_ids", True)),
            bool(record.get("sized", False)),
        )


@dataclass
class Launch:
    """One grid of a cuda kernel: `group` destinations ("V") or in-CSR positions ("E") per lane group."""

    over: str
    group: int
    #: `hybrid`: the rows one staged source keeps in shared memory
    shared: list[list[Dim]] | None = None

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {"over": self.over, "group": self.group}
        if self.shared is not None:
            record["shared"] = [list(row) for row in self.shared]
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Launch:
        shared = record.get("shared")
        return cls(record["over"], int(record["group"]), None if shared is None else [_shape(r) for r in shared])


@dataclass
class Grid:
    """A cuda thread mapping (map-threads sets it): how the runtime sizes and launches the grids."""

    mapping: str
    block_size: int
    group: int
    lanes: int
    grids: list[Launch]
    hybrid: int | None = None
    #: one scratch slice per destination (an edge mapping's accumulators)
    dst_scratch: bool = False
    #: False: the runtime may pick a mapping per graph
    schedule_given: bool = True
    #: the PTX kernel of each launch, in order (convert-grid-to-nvvm sets it)
    phases: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "mapping": self.mapping,
            "block_size": self.block_size,
            "group": self.group,
            "lanes": self.lanes,
            "grids": [launch.to_dict() for launch in self.grids],
            "hybrid": self.hybrid,
            "dst_scratch": self.dst_scratch,
            "schedule_given": self.schedule_given,
        }
        if self.phases is not None:
            record["phases"] = list(self.phases)
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Grid:
        phases = record.get("phases")
        return cls(
            mapping=record["mapping"],
            block_size=int(record["block_size"]),
            group=int(record["group"]),
            lanes=int(record.get("lanes", 1)),
            grids=[Launch.from_dict(g) for g in record.get("grids", [])],
            hybrid=record.get("hybrid"),
            dst_scratch=bool(record.get("dst_scratch", False)),
            schedule_given=bool(record.get("schedule_given", True)),
            phases=None if phases is None else list(phases),
        )


@dataclass
class AbiRecord:
    """What the metadata says of one kernel's ABI beyond its signature.

    The lowering fills the first fields; schedule passes add theirs
    (`sizes`, `edges_sorted`, `ordered_edges`, `lanes`, `grid`). It is
    serialised in one place, `to_dict` / `from_dict`: fields a pass may not
    have set are left out of the JSON while unset.
    """

    #: the kernel's symbolic dims, in the order of the `dims` argument
    dims: list[str]
    #: the per-worker scratch, as the shapes allocated in it (summed)
    scratch: list[list[Dim]] = field(default_factory=list)
    temps: list[Temp] = field(default_factory=list)
    #: the destination order positions map through (`dst_order`)
    order: str = "identity"
    #: `partition src K`: K
    partitions: int | None = None
    #: `order edges hilbert`: "hilbert"
    edge_order: str | None = None
    #: `group neighbors G`: G
    groups: int | None = None
    #: one row of acc_rows, as the shapes allocated in it (summed)
    acc_rows: list[list[Dim]] = field(default_factory=list)
    #: `stream outputs`: acc_rows holds a row per worker, the vertex results it streams
    stream: bool = False
    #: a source sweep computes vertex values over every source row first
    source_sweep: bool = False
    #: False: no CPU schedule was written, the runtime's heuristic may pick one per call
    schedule_given: bool = True
    phases: list[Phase] = field(default_factory=list)
    lanes: Lanes | None = None
    #: `specialize`: the sizes compiled in; dims must hold exactly these
    sizes: dict[str, int] | None = None
    #: `edges sorted`: edge rows are addressed by in-CSR position
    edges_sorted: bool = False
    #: the in-CSR arguments are laid out by position in `order` (`plans.ordered_in_csr`)
    ordered_edges: bool = False
    grid: Grid | None = None
    #: the kernel reads edges' relation types (`W[rel(e)]`): `edge_rel`
    relations: bool = False
    #: it counts edges per (vertex, relation) (`deg_in(v, rel(e))`): `rel_deg_in`, `rel_deg_out`
    relation_degrees: bool = False
    #: the sides whose (vertex, relation) pairs it sweeps ("src", "dst"; relation-transform-first)
    pairs: list[str] = field(default_factory=list)
    #: `segment-matmul`: the pairs of one relation a tile computes at once; None: no tiles
    pair_rows: int | None = None
    #: whether the kernel reads `in_eid` / `part_eid` (convert-loop-to-openmp finds out, before
    #: outlining hides it). False: they may be one-element placeholders, so a graph need not
    #: hold its edge ids for it (0.5 GiB an array at 64M edges)
    edge_ids: bool = True
    #: whether the kernel reads `in_src` (convert-loop-to-openmp, as `edge_ids`). False only for
    #: a partitioned kernel, whose one walk reads `part_src`: in_src may be a one-element array
    in_src: bool = True
    #: whether the kernel reads `deg_in` / `deg_out` (convert-loop-to-openmp, as `edge_ids`).
    #: False: a one-element array may stand for it, so a new graph (a mini-batch block) need
    #: not count its degrees for a kernel that never reads them
    deg_in: bool = True
    deg_out: bool = True

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "dims": list(self.dims),
            "scratch": [list(s) for s in self.scratch],
            "temps": [t.to_dict() for t in self.temps],
            "order": self.order,
            "partitions": self.partitions,
            "edge_order": self.edge_order,
            "groups": self.groups,
            "acc_rows": [list(s) for s in self.acc_rows],
            "stream": self.stream,
            "source_sweep": self.source_sweep,
            "schedule_given": self.schedule_given,
            "phases": [p.to_dict() for p in self.phases],
        }
        if self.lanes is not None:
            record["lanes"] = self.lanes.to_dict()
        if self.sizes is not None:
            record["sizes"] = dict(self.sizes)
        if self.edges_sorted:
            record["edges_sorted"] = True
        if self.ordered_edges:
            record["ordered_edges"] = True
        if self.grid is not None:
            record["grid"] = self.grid.to_dict()
        if self.relations:
            record["relations"] = True
        if self.relation_degrees:
            record["relation_degrees"] = True
        if self.pairs:
            record["pairs"] = list(self.pairs)
        if self.pair_rows is not None:
            record["pair_rows"] = self.pair_rows
        if not self.edge_ids:
            record["edge_ids"] = False
        if not self.in_src:
            record["in_src"] = False
        if not self.deg_in:
            record["deg_in"] = False
        if not self.deg_out:
            record["deg_out"] = False
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> AbiRecord:
        lanes, sizes, grid = record.get("lanes"), record.get("sizes"), record.get("grid")
        return cls(
            dims=list(record.get("dims", [])),
            scratch=[_shape(s) for s in record.get("scratch", [])],
            temps=[Temp.from_dict(t) for t in record.get("temps", [])],
            order=record.get("order", "identity"),
            partitions=record.get("partitions"),
            edge_order=record.get("edge_order"),
            groups=record.get("groups"),
            acc_rows=[_shape(s) for s in record.get("acc_rows", [])],
            stream=bool(record.get("stream", False)),
            source_sweep=bool(record.get("source_sweep", False)),
            schedule_given=bool(record.get("schedule_given", True)),
            phases=[Phase.from_dict(p) for p in record.get("phases", [])],
            lanes=None if lanes is None else Lanes.from_dict(lanes),
            sizes=None if sizes is None else {str(k): int(v) for k, v in sizes.items()},
            edges_sorted=bool(record.get("edges_sorted", False)),
            ordered_edges=bool(record.get("ordered_edges", False)),
            grid=None if grid is None else Grid.from_dict(grid),
            relations=bool(record.get("relations", False)),
            relation_degrees=bool(record.get("relation_degrees", False)),
            pairs=[str(side) for side in record.get("pairs", [])],
            pair_rows=record.get("pair_rows"),
            edge_ids=bool(record.get("edge_ids", True)),
            in_src=bool(record.get("in_src", True)),
            deg_in=bool(record.get("deg_in", True)),
            deg_out=bool(record.get("deg_out", True)),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> AbiRecord:
        return cls.from_dict(json.loads(text))

    @property
    def has_acc_rows(self) -> bool:
        return self.partitions is not None or self.groups is not None or self.stream


# ------------------------------------------------------------- the arguments


class Element(StrEnum):
    """An argument's element type: `int64_t`, or the kernel's float type T (float or double)."""

    I64 = "i64"
    FLOAT = "float"


class Group(StrEnum):
    """A run of arguments that is present or absent as a whole."""

    GRAPH = "graph"
    PARAMS = "params"
    RESULTS = "results"
    TEMPS = "temps"
    SOURCE_SWEEP = "source_sweep"
    ACC_ROWS = "acc_rows"
    PARTITIONS = "partitions"
    HILBERT = "hilbert"
    NEIGHBOR_GROUPS = "neighbor_groups"
    DST_SCRATCH = "dst_scratch"
    HYBRID = "hybrid"
    RELATIONS = "relations"
    RELATION_DEGREES = "relation_degrees"
    SOURCE_PAIRS = "source_pairs"
    DESTINATION_PAIRS = "destination_pairs"


@dataclass(frozen=True)
class Argument:
    """One argument of a kernel: a scalar or a pointer to C-contiguous elements."""

    name: str
    group: Group
    element: Element
    pointer: bool = True
    #: the kernel never writes through it (`llvm.readonly`)
    readonly: bool = True
    #: no other argument overlaps it (`llvm.noalias`)
    noalias: bool = True
    #: its length and meaning, for the header
    doc: str = ""

    def c_type(self, float_type: str) -> str:
        """Its C type, T spelled `float_type`: `int64_t`, `const float *`, `double *`."""
        base = "int64_t" if self.element is Element.I64 else float_type
        if not self.pointer:
            return base
        return f"const {base} *" if self.readonly else f"{base} *"


def _scalar(name: str, doc: str) -> Argument:
    return Argument(name, Group.GRAPH, Element.I64, pointer=False, readonly=False, noalias=False, doc=doc)


def _array(name: str, group: Group, element: Element, doc: str, *, written: bool = False) -> Argument:
    return Argument(name, group, element, readonly=not written, doc=doc)


@dataclass(frozen=True)
class ArgumentGroup:
    """A group of arguments and the condition under which a kernel takes it.

    `arguments` lists a fixed group's arguments; a per-kernel group
    (parameters, results, temps) has one `template` argument per tensor,
    named after it.
    """

    group: Group
    #: the condition, in words (for the header and the docs)
    when: str
    present: Callable[[AbiRecord], bool]
    arguments: tuple[Argument, ...] = ()
    template: Argument | None = None


_I64, _T = Element.I64, Element.FLOAT


#: The pair sides and what a pair's vertex is on each.
PAIR_SIDES = {"src": "source", "dst": "destination"}


def _pair_arguments(side: str, group: Group) -> tuple[Argument, ...]:
    """The arrays of one side's (vertex, relation) pairs (`plans.relation_pairs`): the pairs
    of the edges, numbered relation by relation, each relation's a contiguous run."""
    vertex = PAIR_SIDES[side]
    return (
        _array(
            f"{side}_pair_meta",
            group,
            _I64,
            "4: P (the pairs), pair blocks, T (the tiles of pair_rows pairs), tile blocks",
        ),
        _array(f"{side}_pair_blocks", group, _I64, "pair blocks + 1 ascending boundaries of pairs"),
        _array(f"{side}_pair_vertex", group, _I64, f"P: each pair's {vertex}"),
        _array(f"{side}_pair_rel", group, _I64, "P: each pair's relation (ascending)"),
        _array(f"{side}_edge_pair", group, _I64, f"E: per edge id, its ({vertex}, relation) pair"),
        _array(
            f"{side}_pair_tiles",
            group,
            _I64,
            "T + 1 ascending boundaries of pairs, each tile at most pair_rows pairs of one relation",
        ),
        _array(f"{side}_tile_blocks", group, _I64, "tile blocks + 1 ascending boundaries of tiles"),
    )


#: Every argument group, in argument order. The cuda groups come last: map-threads
#: appends them to a function the lowering made with all the others.
ARGUMENT_GROUPS: tuple[ArgumentGroup, ...] = (
    ArgumentGroup(
        Group.GRAPH,
        "always",
        lambda r: True,
        (
            _scalar("num_vertices", "destinations (num_dst): the rows of vertex results"),
            _scalar("num_edges", "edges"),
            _scalar("num_threads", "workers; scratch holds one slice each"),
            _scalar("num_blocks", "blocks in dst_blocks"),
            _array(
                "dst_blocks",
                Group.GRAPH,
                _I64,
                "num_blocks + 1 ascending boundaries of positions in dst_order (in the Hilbert edge list "
                "with `order edges hilbert`)",
            ),
            _array("dst_order", Group.GRAPH, _I64, "V: the destination at each position (a permutation)"),
            _array(
                "in_indptr",
                Group.GRAPH,
                _I64,
                "V + 1: in-edge offsets by destination, or by position in dst_order with the record's "
                "ordered_edges (in_src and in_eid laid out so too)",
            ),
            _array("in_src", Group.GRAPH, _I64, "E: the source of the in-edge at each position"),
            _array("in_eid", Group.GRAPH, _I64, "E: the user's edge id of the in-edge at each position"),
            _array("deg_in", Group.GRAPH, _T, "max(num_src, num_dst): in-degrees as floats"),
            _array("deg_out", Group.GRAPH, _T, "max(num_src, num_dst): out-degrees as floats"),
            _array("dims", Group.GRAPH, _I64, "the kernel's dims, in the record's order"),
            _array(
                "scratch",
                Group.GRAPH,
                _T,
                "num_threads x scratch_slice_elements(sum of the scratch shapes): per-worker workspace",
                written=True,
            ),
        ),
    ),
    ArgumentGroup(
        Group.PARAMS, "always", lambda r: True, template=_array("", Group.PARAMS, _T, "a parameter (an input)")
    ),
    ArgumentGroup(
        Group.RESULTS,
        "always",
        lambda r: True,
        template=_array("", Group.RESULTS, _T, "a result", written=True),
    ),
    ArgumentGroup(
        Group.TEMPS,
        "always",
        lambda r: True,
        template=_array(
            "",
            Group.TEMPS,
            _T,
            "a vertex value between phases: num_dst rows (num_src for a source-swept one) or E rows",
            written=True,
        ),
    ),
    ArgumentGroup(
        Group.SOURCE_SWEEP,
        "with a source sweep (record source_sweep)",
        lambda r: r.source_sweep,
        (
            _array("src_meta", Group.SOURCE_SWEEP, _I64, "2: num_src, the number of source blocks"),
            _array("src_blocks", Group.SOURCE_SWEEP, _I64, "source blocks + 1 ascending boundaries of source rows"),
        ),
    ),
    ArgumentGroup(
        Group.ACC_ROWS,
        "with `partition src K`, `group neighbors G` or `stream outputs`",
        lambda r: r.has_acc_rows,
        (
            _array(
                "acc_rows",
                Group.ACC_ROWS,
                _T,
                "rows of the summed acc_rows shapes: one per destination (partitions), per split "
                "neighbour group, or per worker (stream outputs)",
                written=True,
            ),
        ),
    ),
    ArgumentGroup(
        Group.PARTITIONS,
        "with `partition src K` (record partitions)",
        lambda r: r.partitions is not None,
        (
            _array("part_indptr", Group.PARTITIONS, _I64, "K x (V + 1): per source partition, an in-CSR"),
            _array("part_src", Group.PARTITIONS, _I64, "E: sources, partition by partition"),
            _array("part_eid", Group.PARTITIONS, _I64, "E: edge ids, partition by partition"),
        ),
    ),
    ArgumentGroup(
        Group.HILBERT,
        "with `order edges hilbert` (record edge_order)",
        lambda r: r.edge_order is not None,
        (
            _array("hilbert_src", Group.HILBERT, _I64, "E: the sources along a Hilbert curve over (src, dst)"),
            _array("hilbert_dst", Group.HILBERT, _I64, "E: their destinations"),
            _array("hilbert_eid", Group.HILBERT, _I64, "E: their edge ids"),
        ),
    ),
    ArgumentGroup(
        Group.NEIGHBOR_GROUPS,
        "with `group neighbors G` (record groups)",
        lambda r: r.groups is not None,
        (
            _array("group_meta", Group.NEIGHBOR_GROUPS, _I64, "2: blocks of groups, n (groups of split destinations)"),
            _array("group_blocks", Group.NEIGHBOR_GROUPS, _I64, "blocks + 1 ascending boundaries of groups"),
            _array("group_dst", Group.NEIGHBOR_GROUPS, _I64, "n: each group's destination"),
            _array("group_bounds", Group.NEIGHBOR_GROUPS, _I64, "2n: each group's in-CSR positions [lo, hi)"),
            _array("group_offsets", Group.NEIGHBOR_GROUPS, _I64, "V + 1: each destination's range of groups"),
        ),
    ),
    ArgumentGroup(
        Group.RELATIONS,
        "reading relation types, `W[rel(e)]` (record relations)",
        lambda r: r.relations,
        (_array("edge_rel", Group.RELATIONS, _I64, "E: each edge's relation type, by edge id, in [0, R)"),),
    ),
    ArgumentGroup(
        Group.RELATION_DEGREES,
        "counting edges per relation, `deg_in(v, rel(e))` (record relation_degrees)",
        lambda r: r.relation_degrees,
        (
            _array(
                "rel_deg_in",
                Group.RELATION_DEGREES,
                _T,
                "E: per edge id, the edges of its (destination, relation) pair, as floats",
            ),
            _array(
                "rel_deg_out",
                Group.RELATION_DEGREES,
                _T,
                "E: per edge id, the edges of its (source, relation) pair, as floats",
            ),
        ),
    ),
    ArgumentGroup(
        Group.SOURCE_PAIRS,
        "computing values per (source, relation) pair (record pairs has src)",
        lambda r: "src" in r.pairs,
        _pair_arguments("src", Group.SOURCE_PAIRS),
    ),
    ArgumentGroup(
        Group.DESTINATION_PAIRS,
        "computing values per (destination, relation) pair (record pairs has dst)",
        lambda r: "dst" in r.pairs,
        _pair_arguments("dst", Group.DESTINATION_PAIRS),
    ),
    ArgumentGroup(
        Group.DST_SCRATCH,
        "cuda, with an edge mapping whose destinations keep accumulators (record grid.dst_scratch)",
        lambda r: r.grid is not None and r.grid.dst_scratch,
        (_array("dst_scratch", Group.DST_SCRATCH, _T, "V scratch slices, one per destination", written=True),),
    ),
    ArgumentGroup(
        Group.HYBRID,
        "cuda, with `map ... hybrid K` (record grid.hybrid)",
        lambda r: r.grid is not None and r.grid.hybrid is not None,
        (
            _array("hybrid_hot", Group.HYBRID, _I64, "1 + K': K', then the sources staged in shared memory"),
            _array("hybrid_slot", Group.HYBRID, _I64, "num_src: each source's slot, or -1"),
        ),
    ),
)

#: The fixed leading arguments, in order.
GRAPH_ARGUMENTS = tuple(a.name for a in ARGUMENT_GROUPS[0].arguments)

#: Names a parameter or result would not be given in C: C and C++ keywords.
_C_KEYWORDS = frozenset(
    "auto bool break case char class const continue default delete do double else enum extern false float for "
    "friend goto if inline int long namespace new operator private protected public register restrict return "
    "short signed sizeof static struct switch template this true typedef union unsigned virtual void volatile "
    "while".split()
)


def kernel_arguments(record: AbiRecord, params: Sequence[str], results: Sequence[str]) -> tuple[Argument, ...]:
    """One kernel's arguments, in order: every group whose predicate holds for its record.

    Parameters and results are named after the kernel's tensors, temps
    `temp0`, `temp1`, ...; a name that another argument or C already uses
    gets a trailing underscore.
    """
    taken = set(_C_KEYWORDS) | {a.name for g in ARGUMENT_GROUPS for a in g.arguments}
    per_kernel = {
        Group.PARAMS: list(params),
        Group.RESULTS: list(results),
        Group.TEMPS: [f"temp{i}" for i in range(len(record.temps))],
    }
    arguments: list[Argument] = []
    for group in ARGUMENT_GROUPS:
        if not group.present(record):
            continue
        if group.template is None:
            arguments += group.arguments
            continue
        for name in per_kernel[group.group]:
            while name in taken:
                name += "_"
            taken.add(name)
            arguments.append(replace(group.template, name=name))
    return tuple(arguments)


def fixed_argument(name: str) -> Argument:
    """An argument of a fixed group (not a parameter, result or temp), by name."""
    for group in ARGUMENT_GROUPS:
        for argument in group.arguments:
            if argument.name == name:
                return argument
    raise KeyError(f"the gnnc ABI has no argument {name!r}")


def trailing_arguments(record: AbiRecord) -> tuple[Argument, ...]:
    """The arguments after the temps: the optional groups the record asks for, in order."""
    groups = [g.group for g in ARGUMENT_GROUPS]
    after = ARGUMENT_GROUPS[groups.index(Group.TEMPS) + 1 :]
    return tuple(a for g in after if g.present(record) for a in g.arguments)
