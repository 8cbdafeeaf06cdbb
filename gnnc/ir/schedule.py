"""Schedules: how a kernel runs, kept apart from what it computes.

A schedule comes from a `schedule K for cpu { ... }` block, from a Python
`schedule=` argument (the same directives as text, `"prefetch 16; sort
degree"`, or a dict `{"prefetch": 16, "sort": "degree"}`), or from the
default heuristic. In the IR it travels as the `graph.schedule` dictionary of
a kernel (`{"cpu.prefetch" = "16"}`), then on each `loop.for_dst`; every
schedule pass consumes its keys, and a key left over when the loops are
lowered is a compile error: a schedule is never dropped silently. A pass
given its directive as an option (`gnnc-opt -p 'tile-features{size=64}'`)
puts the key on every kernel's sweeps first, then consumes it alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gnnc.errors import ArgumentError

#: The distance, in edges, at which neighbour rows are prefetched by default.
#: A random-row gather is several times faster 8 rows ahead (docs/design/locality.md).
DEFAULT_PREFETCH_DISTANCE = 8

#: CPU directives implemented by the pipeline (the frontend rejects others).
IMPLEMENTED_CPU_DIRECTIVES = frozenset(
    {
        "parallel",
        "prefetch",
        "sort",
        "reorder",
        "tile",
        "partition",
        "order",
        "vectorize",
        "group",
        "specialize",
        "edges",
        "vectorize_edges",
        "stream",
        "simd",
        "relations",
    }
)

#: Where `x[u] @ W[rel(e)]` is computed (`relations FORM`, relation-transform-first): once per
#: distinct (vertex, relation) pair in compact rows, or once per edge.
RELATION_FORMS = ("compact", "per_edge")

#: Lane counts `vectorize edges W` takes: a power of two, at most a 64-byte
#: vector of f32 four times over.
EDGE_LANES = (2, 4, 8, 16, 32, 64)

#: Vector widths in bits `simd W` takes (SSE, AVX2, AVX-512 registers).
SIMD_WIDTHS = (128, 256, 512)


def directive_keyword(words: Sequence[str]) -> str:
    """The key a directive is known by: its first word, but `vectorize edges W` is
    `vectorize_edges` (a schedule may vectorise rows and edges both)."""
    if len(words) >= 2 and words[0] == "vectorize" and words[1] == "edges":
        return "vectorize_edges"
    return words[0]


#: Directive keywords that walk the in-CSR in a layout of their own, where an
#: in-edge's position is not its edge id: `edges sorted` cannot join them.
REORDERING_DIRECTIVES = ("sort", "reorder", "order")

#: Directive keyword -> (the keywords it cannot join in one schedule, why); the
#: frontend refuses such a schedule, pointing at the first.
EXCLUSIVE_DIRECTIVES: dict[str, tuple[tuple[str, ...], str]] = {
    "edges": (
        REORDERING_DIRECTIVES,
        "that walks the in-edges in a layout of its own, where an edge's position is not its id",
    ),
    "stream": (
        ("partition", "group"),
        "that builds a destination's row in pieces, each written to memory before the next, "
        "and a streamed row is written once, whole",
    ),
    "sort": (("reorder",), "both choose the order destinations run in"),
    "order": (
        ("partition", "group", "sort", "reorder"),
        "the Hilbert edge list fixes the whole traversal: no destination's walk is left to partition, split or reorder",
    ),
    "group": (("partition",), "both split each destination's in-edges, each its own way"),
}


def excludes(a: str, b: str) -> bool:
    """Whether directive keywords a and b cannot be given together (either way round)."""
    return b in EXCLUSIVE_DIRECTIVES.get(a, ((), ""))[0] or a in EXCLUSIVE_DIRECTIVES.get(b, ((), ""))[0]


class DestinationOrder(StrEnum):
    """The order a sweep visits destinations in; the runtime supplies the permutation."""

    IDENTITY = "identity"
    #: `sort degree` (Seastar)
    DEGREE = "degree"
    #: `reorder locality` (Huang et al.)
    LOCALITY = "locality"
    #: `reorder rcm` (reverse Cuthill-McKee)
    RCM = "rcm"

    @property
    def directive(self) -> list[str]:
        """The directive that asks for this order (none for the identity)."""
        return {"degree": ["sort", "degree"], "identity": []}.get(self.value, ["reorder", self.value])


#: Destination orders a kernel can be compiled for, by name.
DESTINATION_ORDERS = tuple(o.value for o in DestinationOrder)


@dataclass(frozen=True)
class CpuSchedule:
    """The CPU schedule of one kernel, as the passes apply it."""

    prefetch: int = DEFAULT_PREFETCH_DISTANCE
    #: destination order: identity, degree (Seastar), locality (Huang et al.) or rcm (reverse Cuthill-McKee)
    order: str = "identity"
    #: feature tile size (FeatGraph), None for no tiling
    tile_features: int | None = None
    #: 1-D source partitions (FeatGraph), None for none
    partitions: int | None = None
    #: edge traversal order of an edge-wise kernel: None (by destination) or "hilbert"
    edge_order: str | None = None
    #: feature-row slice kept in vector registers across the in-edge loop
    vector_width: int | None = None
    #: neighbour group size (Huang et al.): in-edge lists longer than this are
    #: cut into groups of at most this many edges, None for no grouping
    group_size: int | None = None
    #: (dimension, size) pairs the kernel is compiled for (`specialize F 32`), None for sizes given at run time
    sizes: tuple[tuple[str, int], ...] | None = None
    #: `edges sorted`: the graph's edge ids are its in-CSR positions (edges sorted by destination)
    edges_sorted: bool = False
    #: `vectorize edges W`: in-edge walks run their per-edge scalars W edges at a time, None for one
    edge_lanes: int | None = None
    #: `stream outputs`: vertex results are built in a per-worker row and written with streaming stores
    stream_outputs: bool = False
    #: `simd W`: the generated code prefers vectors of W bits (where the target has them),
    #: None for the target's own preference
    simd_bits: int | None = None
    #: `relations FORM`: a relation's transform per (vertex, relation) pair ("compact") or per edge
    relations: str = "compact"

    @classmethod
    def from_attr(cls, entries: Mapping[str, str]) -> CpuSchedule:
        """From the `cpu.*` entries of a `graph.schedule` dictionary."""
        prefetch = int(entries.get("cpu.prefetch", DEFAULT_PREFETCH_DISTANCE))
        order = "identity"
        if "cpu.sort" in entries:
            order = "degree"
        if "cpu.reorder" in entries:
            order = entries["cpu.reorder"].split()[-1]
        tile = entries.get("cpu.tile")
        partition = entries.get("cpu.partition")
        group = entries.get("cpu.group")
        return cls(
            prefetch=prefetch,
            order=order,
            tile_features=int(tile.split()[-1]) if tile else None,
            partitions=int(partition.split()[-1]) if partition else None,
            edge_order="hilbert" if entries.get("cpu.order") == "edges hilbert" else None,
            vector_width=int(entries["cpu.vectorize"]) if "cpu.vectorize" in entries else None,
            group_size=int(group.split()[-1]) if group else None,
            sizes=parse_sizes(entries["cpu.specialize"]) if "cpu.specialize" in entries else None,
            edges_sorted=entries.get("cpu.edges") == "sorted",
            edge_lanes=int(entries["cpu.vectorize_edges"].split()[-1]) if "cpu.vectorize_edges" in entries else None,
            stream_outputs=entries.get("cpu.stream") == "outputs",
            simd_bits=int(entries["cpu.simd"]) if "cpu.simd" in entries else None,
            relations=entries.get("cpu.relations", "compact"),
        )


def parse_sizes(text: str) -> tuple[tuple[str, int], ...]:
    """The words after `specialize` (`H 4 F 32`) as (dimension, size) pairs."""
    words = text.split()
    return tuple((name, int(size)) for name, size in zip(words[::2], words[1::2]))


def sizes_text(sizes: Mapping[str, int]) -> str:
    """(dimension, size) pairs as the words after `specialize`."""
    return " ".join(f"{name} {size}" for name, size in sizes.items())


def directives_text(schedule: str | Mapping[str, object]) -> str:
    """A Python `schedule=` value as directive lines for a schedule block."""
    if isinstance(schedule, str):
        lines = [part.strip() for part in schedule.replace(";", "\n").splitlines()]
        return "\n".join(line for line in lines if line)
    if isinstance(schedule, Mapping):
        lines = []
        for key, value in schedule.items():
            if value is True or value is None:
                lines.append(str(key))
            elif value is False:
                continue
            else:
                lines.append(f"{key} {value}")
        return "\n".join(lines)
    raise ArgumentError(
        f"schedule= must be directive text ('prefetch 16; sort degree') or a dict, got {type(schedule).__name__}"
    )


class CudaStrategy(StrEnum):
    """A cuda thread mapping (uGrapher's four strategies): a thread or a warp per destination or per edge group."""

    THREAD_VERTEX = "thread_vertex"
    THREAD_EDGE = "thread_edge"
    WARP_VERTEX = "warp_vertex"
    WARP_EDGE = "warp_edge"


#: cuda thread mappings, by name.
CUDA_STRATEGIES = tuple(s.value for s in CudaStrategy)

#: Threads per block of every cuda mapping: a multiple of the warp size that
#: keeps occupancy high on sm_75..sm_90 without limiting registers.
CUDA_BLOCK_SIZE = 256


@dataclass(frozen=True)
class CudaSchedule:
    """The cuda thread mapping of one kernel (`map STRATEGY [group G] [tile T] [lanes L] [hybrid K]`)."""

    strategy: str = "thread_vertex"
    #: vertices (or edges) per thread / warp (uGrapher's grouping)
    group: int = 1
    #: feature tile (uGrapher's tiling), None for none
    tile: int | None = None
    block_size: int = CUDA_BLOCK_SIZE
    #: lanes per destination (edge group) of a warp mapping: Seastar's
    #: feature-adaptive groups, 32 // lanes destinations per warp; None for 32
    lanes: int | None = None
    #: FeatGraph's hybrid partitioning: each block keeps the rows of up to K
    #: sources of highest out-degree in shared memory; None for none
    hybrid: int | None = None

    @classmethod
    def parse(cls, text: str) -> CudaSchedule:
        """From the words after `map` (`warp_vertex group 4 tile 2`); checked by the frontend."""
        from gnnc.errors import CompileError

        words = text.split()
        if not words or words[0] not in CUDA_STRATEGIES:
            raise CompileError(
                f"unknown thread mapping {' '.join(words[:1]) or '(none)'!r}: "
                f"expected one of {', '.join(CUDA_STRATEGIES)}"
            )
        options: dict[str, int] = {}
        rest = words[1:]
        if len(rest) % 2:
            raise CompileError(f"map {text}: each option takes one value (group G, tile T, lanes L, hybrid K)")
        for key, value in zip(rest[::2], rest[1::2]):
            if key not in ("group", "tile", "lanes", "hybrid") or key in options:
                raise CompileError(f"map {text}: unknown or repeated option {key!r}")
            if not value.isdigit() or int(value) < 1:
                raise CompileError(f"map {text}: {key} must be a positive integer, got {value!r}")
            options[key] = int(value)
        lanes = options.get("lanes")
        if lanes is not None and lanes not in (1, 2, 4, 8, 16, 32):
            raise CompileError(f"map {text}: lanes must be a power of two up to 32, got {lanes}")
        return cls(
            strategy=words[0],
            group=options.get("group", 1),
            tile=options.get("tile"),
            lanes=lanes,
            hybrid=options.get("hybrid"),
        )
