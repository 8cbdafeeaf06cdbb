"""How large a graph may be: checked before anything is allocated for it.

Two bounds, both raising ``GraphError``:

- a ``Graph`` whose arrays (edges, in- and out-CSR, degrees) would need more
  bytes than this machine's memory (physical memory, or a lower
  ``RLIMIT_AS`` / ``RLIMIT_DATA``) is refused before they are allocated, so
  ``Graph(edge_index, num_vertices=10**12)`` is an error and not a
  ``MemoryError`` half-way through;
- a graph *file* may not declare, or imply through its largest id, more
  vertices than its data can fill: ``max(MIN_FILE_VERTICES,
  FILE_VERTICES_PER_BYTE x its decompressed size)`` (``load_graph(...,
  max_vertices=N)`` raises the bound for a file that truly holds that many
  isolated vertices), and a text file is read only while its decompressed
  size stays below ``text_bytes_limit()``, a share of memory that leaves room
  for the tokenizer's working arrays. A 76-byte ``.mtx`` declaring 10^9
  vertices, or a gzip of gigabytes of blank lines, is an error, not a
  7-GiB allocation.
"""

from __future__ import annotations

import functools
import os

from gnnc.errors import GraphError

__all__ = [
    "FILE_VERTICES_PER_BYTE",
    "MIN_FILE_VERTICES",
    "check_file_vertices",
    "check_graph_size",
    "graph_bytes",
    "memory_bytes",
    "text_bytes_limit",
]

#: Vertices a graph file may declare per byte of its (decompressed) data; every
#: edge of a text file takes at least 4 bytes ("1 2\n"), so this allows 32
#: vertices per edge.
FILE_VERTICES_PER_BYTE = 8
#: Vertices any graph file may declare, however small (2^22: 32 MiB per offset array).
MIN_FILE_VERTICES = 1 << 22
#: Bytes of working arrays the text tokenizer and parsers need per byte of
#: text, at most (line starts; token starts, lengths and lines; masks; the
#: ids); a text file may take 1 / TEXT_AMPLIFICATION of memory.
TEXT_AMPLIFICATION = 48
#: Bytes per vertex and per edge of a Graph's arrays: offsets and degrees per
#: vertex (in- and out-CSR, a bincount); src, dst, in_src, in_eid, out_dst,
#: out_eid and the sort's packed keys per edge.
_BYTES_PER_VERTEX = 4 * 8
_BYTES_PER_EDGE = 7 * 8


@functools.lru_cache(maxsize=1)
def memory_bytes() -> int:
    """This process's memory: physical memory, or a lower address-space / data limit (setrlimit)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        total = 1 << 40
    try:
        import resource

        for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
            soft = resource.getrlimit(which)[0]
            if soft != resource.RLIM_INFINITY and soft > 0:
                total = min(total, soft)
    except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX
        pass
    return max(total, 1 << 26)


def text_bytes_limit() -> int:
    """The largest decompressed text graph file read: memory / TEXT_AMPLIFICATION."""
    return memory_bytes() // TEXT_AMPLIFICATION


def graph_bytes(num_src: int, num_dst: int, num_edges: int) -> int:
    """About how many bytes a Graph of these sizes keeps and builds (Python ints: no overflow)."""
    return _BYTES_PER_VERTEX * (max(num_src, num_dst) + 1) + _BYTES_PER_EDGE * num_edges


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.3g} GiB"


def check_graph_size(num_src: int, num_dst: int, num_edges: int) -> None:
    """Raises GraphError if a graph of these sizes cannot fit in this machine's memory."""
    need = graph_bytes(num_src, num_dst, num_edges)
    have = memory_bytes()
    if need > have:
        sides = f"{num_dst} vertices" if num_src == num_dst else f"{num_src} sources, {num_dst} destinations"
        raise GraphError(
            f"a graph of {sides} and {num_edges} edges needs about {_gib(need)} for its arrays, "
            f"more than this machine's {_gib(have)} of memory"
        )


def check_file_vertices(count: int, data_bytes: int, where: str, max_vertices: int | None = None) -> None:
    """A file's vertex count (declared, or its largest id + 1) against what its data can fill.

    `max_vertices` (load_graph's) replaces the bound; memory is checked when the Graph is built.
    """
    bound = max_vertices if max_vertices is not None else max(MIN_FILE_VERTICES, FILE_VERTICES_PER_BYTE * data_bytes)
    if count > bound:
        how = (
            f"more than max_vertices={max_vertices}"
            if max_vertices is not None
            else f"more than a file of {data_bytes} bytes may declare ({bound}; "
            "pass max_vertices= to load_graph or read_edges if the file truly has that many vertices)"
        )
        raise GraphError(f"{where}: the file declares {count} vertices, {how}")
