"""Reading graphs from files: one loader for the runtime, the tuner and the benchmarks.

Formats are chosen by extension (a trailing ``.gz`` is decompressed first):

=====================  =====================================================
``.mtx``               Matrix Market, coordinate; general / symmetric /
                       skew-symmetric / hermitian; pattern, integer, real or
                       complex values (values are ignored); 1-based. Entry
                       ``(i, j)`` is the edge ``i-1 -> j-1`` (``A[u, v] != 0``
                       is ``u -> v``, as for scipy matrices); a general
                       ``rows x columns`` matrix with rows != columns is a
                       bipartite graph (rows sources, columns destinations).
``.txt .edges .el``    Edge lists: ``u v`` per line (0-based), extra columns
                       (weights) ignored; ``#`` or ``%`` starts a comment.
``.npz``               ``src``/``dst`` [+ ``num_vertices``, or ``num_src`` and
                       ``num_dst`` for a bipartite graph], or ``edge_index``
                       [+ the same], or a scipy sparse matrix saved by
                       ``scipy.sparse.save_npz`` (edges in ``A.tocoo()`` order;
                       a non-square one is bipartite).
``.graph .metis``      METIS: header ``n m [fmt [ncon]]``, then one 1-based
                       adjacency line per vertex; weights are skipped.
``.gt``                graph-tool's binary format (read without graph-tool).
=====================  =====================================================

Undirected files (symmetric Matrix Market, METIS, undirected ``.gt``) mean
both directions of every edge. ``symmetric`` changes that: ``None`` keeps the
file's meaning, ``True`` makes any graph symmetric (every ``u -> v`` also
``v -> u``; duplicates dropped; edges sorted by ``(src, dst)``), ``False``
keeps one direction per undirected edge, as stored in the file (METIS stores
both, so there ``u < v`` is kept). Otherwise the edge ids follow the file:
stored entries first, in file order, then the mirrored copies of the
off-diagonal entries of a symmetric Matrix Market or ``.gt`` file, in the same
order.

A bipartite file (sources and destinations counted separately, DGL's blocks)
loads with ``load_graph`` as a bipartite ``Graph``; ``read_edges``, whose
``(src, dst, num_vertices)`` cannot describe one, refuses it, and so does
``symmetric=True``, as the two sides' ids name different vertices.

Text formats are tokenised with numpy over the whole file (no per-line Python
loop), so a file of a million edges loads in about a second. Lines end at LF,
CR LF or a lone CR. Integers are an optional sign and digits, at most
``MAX_INT_TOKEN`` bytes.

Nothing in a file is trusted for a size (``limits.py``): a text file, or a
``.gz`` once decompressed, is read only up to ``limits.text_bytes_limit()``
bytes (a gzip bomb stops there); a file may declare, or imply by its largest
id, at most ``max(limits.MIN_FILE_VERTICES, limits.FILE_VERTICES_PER_BYTE x
its bytes)`` vertices unless ``max_vertices=`` says more; a ``.gt`` count or
degree, a ``.npz`` array header, or a Matrix Market entry count that claims
more than the file holds is a ``GraphError`` before anything is allocated for
it. Every failure is a ``GraphError`` naming the file (and the line, for text).
"""

from __future__ import annotations

import gzip
import os
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from gnnc.errors import GraphError
from gnnc.graph import limits

if TYPE_CHECKING:  # the runtime's Graph is imported only when a Graph is built
    from gnnc.graph.graph import Graph

__all__ = [
    "GtFile",
    "load_graph",
    "read_edges",
    "read_gt",
    "read_vertex_labels",
]

EdgeArrays = tuple[np.ndarray, np.ndarray, int]
#: A file's vertex count, or (num_src, num_dst) for a bipartite graph.
Sides = int | tuple[int, int]

_EDGE_LIST_EXTS = {".txt", ".edges", ".el", ".edgelist", ".tsv"}
_METIS_EXTS = {".graph", ".metis", ".mgraph"}


# --------------------------------------------------------------------------- API


def read_edges(
    path: str | os.PathLike[str], *, symmetric: bool | None = None, max_vertices: int | None = None
) -> EdgeArrays:
    """Read a graph file into ``(src, dst, num_vertices)``, int64 arrays, edge ``i`` is ``src[i] -> dst[i]``.

    A file may declare (or imply by its largest id) at most
    ``limits.MIN_FILE_VERTICES`` vertices or ``limits.FILE_VERTICES_PER_BYTE``
    per byte of its data, whichever is more; ``max_vertices=N`` replaces that
    bound for a file that truly holds so many isolated vertices.
    """
    src, dst, sides = _read(Path(path), symmetric, max_vertices)
    if isinstance(sides, tuple):
        raise GraphError(
            f"{path}: a bipartite graph ({sides[0]} sources, {sides[1]} destinations) has no single vertex "
            "count: load it with load_graph, which gives a bipartite Graph"
        )
    return src, dst, sides


def _read(p: Path, symmetric: bool | None, max_vertices: int | None) -> tuple[np.ndarray, np.ndarray, Sides]:
    if max_vertices is not None and (
        isinstance(max_vertices, bool) or not isinstance(max_vertices, (int, np.integer)) or max_vertices < 0
    ):
        raise GraphError(f"max_vertices must be a non-negative integer, got {max_vertices!r}")
    kind = _format_of(p)
    if kind == "npz":
        src, dst, sides, size = _read_npz(p)
        _check_sides(sides, size, p, max_vertices)
        if isinstance(sides, tuple):
            return _finish_bipartite(src, dst, sides, symmetric, p)
        n = sides
        undirected = False
    elif kind == "gt":
        # every vertex takes at least 8 bytes of a .gt file: no count to check
        gt = _parse_gt(_read_bytes(p), p, want_props=False)
        src, dst, n, undirected = gt.src, gt.dst, gt.num_vertices, not gt.directed
    else:
        data = _unify_line_ends(_read_bytes(p))
        if kind == "mtx":
            src, dst, sides, undirected = _parse_mtx(data, p)
            _check_sides(sides, len(data), p, max_vertices)
            if isinstance(sides, tuple):
                return _finish_bipartite(src, dst, sides, symmetric, p)
            n = sides
        elif kind == "metis":
            src, dst, n = _parse_metis(data, p)
            undirected = True
            if symmetric is False:
                keep = src < dst
                src, dst = src[keep], dst[keep]
            return _finish(src, dst, n, None if symmetric is False else symmetric)
        else:
            src, dst, n = _parse_edge_list(data, p)
            _check_sides(n, len(data), p, max_vertices)
            undirected = False
    if undirected and symmetric is None:
        src, dst = _mirror(src, dst)
    return _finish(src, dst, n, symmetric)


def _check_sides(sides: Sides, data_bytes: int, p: Path, max_vertices: int | None) -> None:
    """The vertex counts a file declares against what its data can fill (limits.check_file_vertices)."""
    for count in sides if isinstance(sides, tuple) else (sides,):
        limits.check_file_vertices(count, data_bytes, str(p), max_vertices)


def load_graph(
    path: str | os.PathLike[str], *, symmetric: bool | None = None, max_vertices: int | None = None
) -> Graph:
    """Read a graph file (see ``read_edges``, which says what ``max_vertices`` is) and build a runtime ``Graph``."""
    from gnnc.graph.graph import Graph  # lazy: graph_io is usable without the runtime's Graph

    src, dst, sides = _read(Path(path), symmetric, max_vertices)
    if isinstance(sides, tuple):
        return Graph.from_coo(src, dst, shape=sides)
    return Graph.from_coo(src, dst, num_vertices=sides)


def read_vertex_labels(path: str | os.PathLike[str], name: str) -> Any:
    """The vertex property map ``name`` of a ``.gt`` file (numpy array; list for strings and vectors)."""
    p = Path(path)
    if _format_of(p) != "gt":
        raise GraphError(f"{p}: vertex labels can only be read from a graph-tool .gt file")
    gt = _parse_gt(_read_bytes(p), p, want_props=True)
    if name not in gt.vertex_props:
        have = ", ".join(sorted(gt.vertex_props)) or "none"
        raise GraphError(f"{p}: no vertex property {name!r} (has: {have})")
    return gt.vertex_props[name]


def read_gt(path: str | os.PathLike[str]) -> GtFile:
    """Parse a whole ``.gt`` / ``.gt.gz`` file: edges as stored, and every property map."""
    p = Path(path)
    return _parse_gt(_read_bytes(p), p, want_props=True)


# ----------------------------------------------------------------------- helpers


def _format_of(p: Path) -> str:
    name = p.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    ext = os.path.splitext(name)[1]
    if ext == ".mtx":
        return "mtx"
    if ext == ".npz":
        return "npz"
    if ext == ".gt":
        return "gt"
    if ext in _METIS_EXTS:
        return "metis"
    if ext in _EDGE_LIST_EXTS:
        return "edges"
    raise GraphError(
        f"{p}: unknown graph file format {ext or '(no extension)'!r}; expected "
        ".mtx, .txt/.edges/.el, .npz, .graph (METIS) or .gt, optionally .gz"
    )


def _read_bytes(p: Path) -> bytes:
    """The file's bytes (decompressed for .gz), at most `limits.text_bytes_limit()` of them."""
    limit = limits.text_bytes_limit()
    gz = p.name.lower().endswith(".gz")
    try:
        with gzip.open(p, "rb") if gz else open(p, "rb") as f:
            if not gz and os.fstat(f.fileno()).st_size > limit:
                data = b""
            else:
                # read one byte past the limit: a gzip bomb stops there, not at its end
                data = f.read(limit + 1)
    except FileNotFoundError:
        raise GraphError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise GraphError(f"{p}: is a directory") from None
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise GraphError(f"{p}: cannot read: {exc}") from None
    if len(data) > limit or (not data and not gz and _size(p) > limit):
        raise GraphError(
            f"{p}: the file is larger than {limit} bytes{' once decompressed' if gz else ''}, the most a graph "
            f"file may take on this machine (1/{limits.TEXT_AMPLIFICATION} of its memory, for the parser's arrays)"
        )
    return data


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _finish(src: np.ndarray, dst: np.ndarray, n: int, symmetric: bool | None) -> EdgeArrays:
    src = np.ascontiguousarray(src, dtype=np.int64)
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    if symmetric:
        both_s = np.concatenate([src, dst])
        both_d = np.concatenate([dst, src])
        key = np.unique(both_s * np.int64(max(n, 1)) + both_d) if n < 3_037_000_499 else None
        if key is not None:
            src, dst = key // max(n, 1), key % max(n, 1)
        else:  # n * n would overflow int64
            pairs = np.unique(np.stack([both_s, both_d], axis=1), axis=0)
            src, dst = pairs[:, 0].copy(), pairs[:, 1].copy()
    return src, dst, int(n)


def _finish_bipartite(
    src: np.ndarray, dst: np.ndarray, sides: tuple[int, int], symmetric: bool | None, p: Path
) -> tuple[np.ndarray, np.ndarray, Sides]:
    if symmetric:
        raise GraphError(
            f"{p}: a bipartite graph ({sides[0]} sources, {sides[1]} destinations) cannot be made symmetric: "
            "a source id and a destination id name different vertices"
        )
    return np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64), sides


def _mirror(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stored entries, then the reverse of each off-diagonal one (a loop is one edge, not two)."""
    off = src != dst
    return np.concatenate([src, dst[off]]), np.concatenate([dst, src[off]])


# ------------------------------------------------------------------ tokenising


_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 11, 12, 13, 32]] = True  # exactly the bytes that bytes.split() splits on
#: The longest integer token read (leading zeros and a sign included); an int64 needs 20.
MAX_INT_TOKEN = 64
#: Digits an int64 always holds (10^18 - 1 < 2^63): longer tokens are checked one by one.
_SAFE_DIGITS = 18


def _unify_line_ends(data: bytes) -> bytes:
    """CR LF and a lone CR (old Mac files) end a line as LF does."""
    if b"\r" not in data:
        return data
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


@dataclass
class _Tokens:
    """Whitespace-separated tokens of a text file: where each starts, its length and 0-based line.

    Tokens stay positions in the buffer; only the ones a parser reads as
    integers are copied out (`ints`), so an ignored column (a weight, a
    comment-free label) costs no memory however long its tokens are.
    """

    buf: np.ndarray  # uint8: the file's bytes, comments blanked
    start: np.ndarray  # int64
    length: np.ndarray  # int64
    line: np.ndarray  # int64: 0-based line number of each token
    num_lines: int

    def __len__(self) -> int:
        return len(self.start)

    def sub(self, idx: np.ndarray | slice) -> _Tokens:
        return _Tokens(self.buf, self.start[idx], self.length[idx], self.line[idx], self.num_lines)

    def word(self, i: int) -> bytes:
        return self.buf[self.start[i] : self.start[i] + self.length[i]].tobytes()

    def ints(self, idx: np.ndarray | slice, p: Path, what: str) -> np.ndarray:
        """The selected tokens as int64 (an optional sign, then digits), or a GraphError at the first bad one."""
        toks = self.sub(idx)
        n = len(toks)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        long_ = np.flatnonzero(toks.length > MAX_INT_TOKEN)
        if long_.size:
            i = int(long_[0])
            raise GraphError(
                f"{p}:{toks.line[i] + 1}: expected an integer {what}, found a token of {toks.length[i]} bytes"
            )
        # right-aligned in `width` columns, padded with '0': Horner's rule then needs no mask
        width = int(toks.length.max())
        chars = np.full((n, width), ord("0"), dtype=np.uint8)
        end = toks.start + toks.length
        for j in range(width):
            back = width - j
            has = toks.length >= back
            if has.all():
                chars[:, j] = toks.buf[end - back]
            else:
                rows = np.flatnonzero(has)
                chars[rows, j] = toks.buf[end[rows] - back]
        first = toks.buf[toks.start]
        negative = first == ord("-")
        signed = negative | (first == ord("+"))
        rows = np.flatnonzero(signed)
        chars[rows, width - toks.length[rows]] = ord("0")
        digits = chars - np.uint8(ord("0"))  # wraps below '0': anything but a digit is > 9
        bad = np.flatnonzero(~np.all(digits <= 9, axis=1) | (toks.length <= signed))
        if bad.size:
            i = int(bad[0])
            raise GraphError(
                f"{p}:{toks.line[i] + 1}: expected an integer {what}, found {toks.word(i).decode(errors='replace')!r}"
            )
        value = np.zeros(n, dtype=np.int64)
        for j in range(width):
            value *= 10
            value += digits[:, j]
        value[negative] *= -1
        for i in np.flatnonzero(toks.length - signed > _SAFE_DIGITS).tolist():
            exact = int(toks.word(i))  # a few tokens at most: where the vectorised sum may have wrapped
            if not -(1 << 63) <= exact < 1 << 63:
                raise GraphError(f"{p}:{toks.line[i] + 1}: {what} {toks.word(i).decode()} does not fit in int64")
            value[i] = exact
        return value


def _tokenize(data: bytes, comment: bytes) -> tuple[_Tokens, np.ndarray]:
    """Split ``data`` into tokens; text from a comment character to the end of its line is ignored.

    Returns the tokens and a boolean mask over lines: True where a line was a
    whole-line comment (its first non-blank byte is a comment character).
    Lines end at LF; `_read_text` turned CR LF and lone CRs into LF.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == 10)
    num_lines = len(newlines) + (1 if len(buf) and buf[-1] != 10 else 0)
    comment_line = np.zeros(num_lines, dtype=bool)
    marks = np.zeros(len(buf), dtype=bool)
    for c in comment:
        marks |= buf == c
    if marks.any():
        buf = buf.copy()
        starts = np.concatenate([[0], newlines + 1])
        ends = np.concatenate([newlines, [len(buf)]])
        pos = np.flatnonzero(marks)
        line = np.searchsorted(newlines, pos)
        # the first comment character on each line blanks the rest of that line
        first = np.ones(len(pos), dtype=bool)
        first[1:] = line[1:] != line[:-1]
        pos, line = pos[first], line[first]
        lengths = ends[line] - pos
        blank = np.repeat(pos - np.cumsum(np.concatenate([[0], lengths[:-1]])), lengths) + np.arange(lengths.sum())
        # is anything but whitespace before the comment character on its line?
        nonblank = np.cumsum(~_WS[buf], dtype=np.int32 if len(buf) < 1 << 31 else np.int64)
        before = nonblank[pos] - 1 - np.where(starts[line] > 0, nonblank[starts[line] - 1], 0)
        comment_line[line[before == 0]] = True
        buf[blank] = 32
    del marks
    ws = _WS[buf]
    is_start = ~ws
    is_start[1:] &= ws[:-1]
    tok_pos = np.flatnonzero(is_start)
    del is_start
    is_end = ~ws
    is_end[:-1] &= ws[1:]
    tok_len = np.flatnonzero(is_end) + 1 - tok_pos
    del is_end, ws
    tok_line = np.searchsorted(newlines, tok_pos).astype(np.int64)
    return _Tokens(buf, tok_pos.astype(np.int64), tok_len.astype(np.int64), tok_line, num_lines), comment_line


def _check_range(ids: np.ndarray, lo: int, hi: int, lines: np.ndarray, p: Path, what: str) -> None:
    bad = np.flatnonzero((ids < lo) | (ids > hi))
    if len(bad):
        i = bad[0]
        raise GraphError(f"{p}:{lines[i] + 1}: {what} {ids[i]} out of range [{lo}, {hi}]")


# ------------------------------------------------------------------ edge lists


def _parse_edge_list(data: bytes, p: Path) -> EdgeArrays:
    tok, _ = _tokenize(data, b"#%")
    if len(tok) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    counts = np.bincount(tok.line, minlength=tok.num_lines)
    used = np.flatnonzero(counts)
    k = int(counts[used[0]])
    short = used[counts[used] < 2]
    if len(short):
        raise GraphError(f"{p}:{short[0] + 1}: an edge needs two vertex ids, found {counts[short[0]]} value")
    bad = used[counts[used] != k]
    if len(bad):
        raise GraphError(f"{p}:{bad[0] + 1}: expected {k} values as on line {used[0] + 1}, found {counts[bad[0]]}")
    src = tok.ints(slice(0, None, k), p, "vertex id")
    dst = tok.ints(slice(1, None, k), p, "vertex id")
    line = tok.line[::k]
    neg = np.flatnonzero((src < 0) | (dst < 0))
    if len(neg):
        i = neg[0]
        raise GraphError(f"{p}:{line[i] + 1}: negative vertex id in edge {src[i]} {dst[i]}")
    n = int(max(src.max(), dst.max())) + 1
    return src, dst, n


# ------------------------------------------------------------------ Matrix Market


_MM_HEADER = re.compile(rb"%%MatrixMarket\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", re.IGNORECASE)


def _parse_mtx(data: bytes, p: Path) -> tuple[np.ndarray, np.ndarray, Sides, bool]:
    first = data[:4096].split(b"\n", 1)[0]  # a header is one short line
    m = _MM_HEADER.match(first)
    if not m:
        raise GraphError(f"{p}:1: not a Matrix Market file (expected a '%%MatrixMarket matrix coordinate ...' header)")
    obj, fmt, field_, sym = (g.decode(errors="replace").lower() for g in m.groups())
    if obj != "matrix":
        raise GraphError(f"{p}:1: Matrix Market object {obj!r} is not a matrix")
    if fmt != "coordinate":
        raise GraphError(f"{p}:1: Matrix Market format {fmt!r} is not supported: a graph needs 'coordinate'")
    width = {"pattern": 2, "integer": 3, "real": 3, "double": 3, "complex": 4}.get(field_)
    if width is None:
        raise GraphError(f"{p}:1: unknown Matrix Market field {field_!r}")
    if sym not in ("general", "symmetric", "skew-symmetric", "hermitian"):
        raise GraphError(f"{p}:1: unknown Matrix Market symmetry {sym!r}")
    tok, _ = _tokenize(data, b"%")
    if len(tok) == 0:
        raise GraphError(f"{p}: Matrix Market file has no size line")
    size_line = tok.line[0]
    if len(tok) < 3 or tok.line[2] != size_line or (len(tok) > 3 and tok.line[3] == size_line):
        raise GraphError(f"{p}:{size_line + 1}: the size line must be 'rows columns entries'")
    rows, cols, nnz = (int(v) for v in tok.ints(slice(0, 3), p, "size"))
    if rows < 0 or cols < 0 or nnz < 0:
        raise GraphError(f"{p}:{size_line + 1}: negative size")
    body = tok.sub(slice(3, None))
    counts = np.bincount(body.line, minlength=tok.num_lines)
    used = np.flatnonzero(counts)
    bad = used[counts[used] != width]
    if len(bad):
        raise GraphError(
            f"{p}:{bad[0] + 1}: expected {width} values per entry for a '{field_}' matrix, found {counts[bad[0]]}"
        )
    if len(used) != nnz:
        raise GraphError(f"{p}: the size line announces {nnz} entries, the file has {len(used)}")
    src = body.ints(slice(0, None, width), p, "row index")
    dst = body.ints(slice(1, None, width), p, "column index")
    line = body.line[::width]
    _check_range(src, 1, rows, line, p, "row index")
    _check_range(dst, 1, cols, line, p, "column index")
    if rows != cols and sym != "general":
        raise GraphError(f"{p}:1: a {sym} matrix is square, this one is {rows} x {cols}")
    return src - 1, dst - 1, rows if rows == cols else (rows, cols), sym != "general"


# ------------------------------------------------------------------ METIS


def _parse_metis(data: bytes, p: Path) -> EdgeArrays:
    tok, comment_line = _tokenize(data, b"%")
    # a blank line is a vertex without neighbours; only whole-line comments are skipped
    real_lines = np.flatnonzero(~comment_line)
    counts = np.bincount(tok.line, minlength=tok.num_lines)
    nonblank = real_lines[counts[real_lines] > 0]
    if len(nonblank) == 0:
        raise GraphError(f"{p}: empty METIS file (no header line)")
    header = nonblank[0]
    hlen = int(counts[header])
    if not 2 <= hlen <= 4:
        raise GraphError(f"{p}:{header + 1}: METIS header must be 'n m [fmt [ncon]]', found {hlen} values")
    n, m = (int(v) for v in tok.ints(slice(0, 2), p, "header value"))
    fmt = tok.word(2).decode(errors="replace")[:16] if hlen >= 3 else "0"
    if not re.fullmatch(r"[01]{1,3}", fmt):
        raise GraphError(f"{p}:{header + 1}: METIS fmt must be up to three 0/1 digits, found {fmt!r}")
    fmt = fmt.rjust(3, "0")
    has_vsize, has_vwgt, has_ewgt = fmt[0] == "1", fmt[1] == "1", fmt[2] == "1"
    ncon = int(tok.ints(slice(3, 4), p, "ncon")[0]) if hlen == 4 else 1
    if hlen == 4 and not has_vwgt:
        raise GraphError(f"{p}:{header + 1}: ncon given but fmt {fmt} has no vertex weights")
    if n < 0 or m < 0 or ncon < 1:
        raise GraphError(f"{p}:{header + 1}: bad METIS header")
    prefix = int(has_vsize) + (ncon if has_vwgt else 0)
    step = 2 if has_ewgt else 1

    vertex_lines = real_lines[real_lines > header]
    # trailing blank lines past the n-th vertex are allowed, anything else is not
    if len(vertex_lines) < n:
        raise GraphError(f"{p}: METIS header announces {n} vertices, the file has {len(vertex_lines)} vertex lines")
    extra = vertex_lines[n:]
    if len(extra) and counts[extra].any():
        raise GraphError(f"{p}:{extra[counts[extra] > 0][0] + 1}: more vertex lines than the {n} announced")
    vertex_lines = vertex_lines[:n]
    vertex_of_line = np.full(tok.num_lines, -1, dtype=np.int64)
    vertex_of_line[vertex_lines] = np.arange(n)

    body = slice(hlen, None)
    line = tok.line[body]
    per_line = counts[vertex_lines]
    bad = np.flatnonzero((per_line < prefix) | ((per_line - prefix) % step != 0))
    if len(bad):
        ln = vertex_lines[bad[0]]
        raise GraphError(
            f"{p}:{ln + 1}: a METIS line with fmt {fmt} holds {prefix} vertex value(s) then "
            f"{'(neighbour, weight) pairs' if has_ewgt else 'neighbours'}; found {per_line[bad[0]]} values"
        )
    first_tok = np.concatenate([[0], np.cumsum(per_line)[:-1]])
    vertex = vertex_of_line[line]
    offset = np.arange(len(line)) - first_tok[vertex]
    is_nbr = (offset >= prefix) & ((offset - prefix) % step == 0)
    idx = np.flatnonzero(is_nbr) + hlen
    dst = tok.ints(idx, p, "neighbour")
    src = vertex[is_nbr]
    _check_range(dst, 1, n, tok.line[idx], p, "neighbour")
    dst = dst - 1
    if len(dst) != 2 * m:
        raise GraphError(
            f"{p}:{header + 1}: METIS header announces {m} undirected edges, the adjacency lists "
            f"hold {len(dst)} entries (expected {2 * m})"
        )
    return src, dst, n


# ------------------------------------------------------------------ npz


def _read_npz(p: Path) -> tuple[np.ndarray, np.ndarray, Sides, int]:
    """(src, dst, sides, the bytes of its arrays) of a .npz (or .npz.gz) graph."""
    import io

    try:
        source: Any = io.BytesIO(_read_bytes(p)) if p.name.lower().endswith(".gz") else p
        size = _npz_members_size(source, p)
        if isinstance(source, io.BytesIO):
            source.seek(0)
        z = np.load(source, allow_pickle=False)
    except FileNotFoundError:
        raise GraphError(f"{p}: no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise GraphError(f"{p}: not a readable .npz file: {exc}") from None
    try:
        with z:
            src, dst, sides = _npz_edges(z, p)
    except GraphError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, zlib.error, KeyError) as exc:
        raise GraphError(f"{p}: not a readable .npz file: {exc}") from None
    if sides is None:
        return _read_scipy_npz(source, p) + (size,)
    return src, dst, sides, size


def _npz_members_size(source: Any, p: Path) -> int:
    """The bytes a .npz's arrays hold, after checking that each array's header claims no more than its
    member holds (numpy allocates what the header says before reading) and that they fit the limit."""
    total = 0
    limit = limits.text_bytes_limit()
    with zipfile.ZipFile(source) as zf:
        for info in zf.infolist():
            total += info.file_size
            if total > limit:
                raise GraphError(f"{p}: its arrays take more than {limit} bytes, the most a graph file may take here")
            if not info.filename.endswith(".npy"):
                continue
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                header = (
                    np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = header(f)
                count = 1
                for d in shape:
                    count *= int(d)
                if count * dtype.itemsize > info.file_size:
                    raise GraphError(
                        f"{p}: array {info.filename[:-4]!r} claims shape {shape} of {dtype} "
                        f"({count * dtype.itemsize} bytes) but holds {info.file_size} bytes"
                    )
    return total


def _npz_count(z: Any, key: str, p: Path) -> int:
    value = np.asarray(z[key])
    if value.size != 1 or value.dtype.kind not in "iu" or int(value.reshape(())) < 0:
        raise GraphError(f"{p}: {key!r} must be one non-negative integer, has {value.dtype} of shape {value.shape}")
    return int(value.reshape(()))


def _npz_edges(z: Any, p: Path) -> tuple[np.ndarray, np.ndarray, Sides | None]:
    """src, dst and sides of an npz of arrays; sides None for a scipy matrix (read by _read_scipy_npz)."""
    keys = set(z.files)
    n_given = None
    for k in ("num_vertices", "num_nodes"):
        if k in keys:
            n_given = _npz_count(z, k, p)
    sides = None
    if "num_src" in keys or "num_dst" in keys:
        if not {"num_src", "num_dst"} <= keys or n_given is not None:
            raise GraphError(f"{p}: a bipartite graph needs both 'num_src' and 'num_dst' (and no 'num_vertices')")
        sides = (_npz_count(z, "num_src", p), _npz_count(z, "num_dst", p))
    if {"src", "dst"} <= keys:
        src, dst = np.asarray(z["src"]), np.asarray(z["dst"])
    elif "edge_index" in keys:
        ei = np.asarray(z["edge_index"])
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise GraphError(f"{p}: edge_index must have shape (2, E), has {ei.shape}")
        src, dst = ei[0], ei[1]
    elif "format" in keys and "shape" in keys:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), None
    else:
        raise GraphError(
            f"{p}: .npz needs 'src' and 'dst', or 'edge_index', or a scipy sparse matrix; has {sorted(keys)}"
        )
    if src.ndim != 1 or dst.ndim != 1 or src.shape != dst.shape:
        raise GraphError(f"{p}: src and dst must be 1-D arrays of one length, have {src.shape} and {dst.shape}")
    if src.dtype.kind not in "iu" or dst.dtype.kind not in "iu":
        raise GraphError(f"{p}: vertex ids must be integers, have {src.dtype} and {dst.dtype}")
    for ids in (src, dst):
        if ids.dtype == np.uint64 and len(ids) and int(ids.max()) >= 1 << 63:
            raise GraphError(f"{p}: vertex id {int(ids.max())} does not fit in int64")
    src, dst = src.astype(np.int64), dst.astype(np.int64)
    if len(src) and (src.min() < 0 or dst.min() < 0):
        raise GraphError(f"{p}: negative vertex id")
    if sides is not None:
        for ids, key, side, count in ((src, "num_src", "source", sides[0]), (dst, "num_dst", "destination", sides[1])):
            if len(ids) and int(ids.max()) >= count:
                raise GraphError(f"{p}: {key} is {count} but {side} id {int(ids.max())} occurs")
        return src, dst, sides
    top = int(max(src.max(), dst.max())) + 1 if len(src) else 0
    if n_given is None:
        n_given = top
    elif n_given < top:
        raise GraphError(f"{p}: num_vertices is {n_given} but vertex id {top - 1} occurs")
    return src, dst, n_given


def _read_scipy_npz(source: Any, p: Path) -> tuple[np.ndarray, np.ndarray, Sides]:
    """A matrix saved by scipy.sparse.save_npz, its arrays checked before scipy converts it (Graph.from_scipy's rules)."""
    import scipy.sparse as sp

    from gnnc.graph.graph import _coo_from_scipy  # lazy, as load_graph's Graph

    if not isinstance(source, Path):
        source.seek(0)
    try:
        a = sp.load_npz(source)
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise GraphError(f"{p}: not a scipy sparse .npz: {exc}") from None
    try:
        src, dst, rows, cols = _coo_from_scipy(a)
    except GraphError as exc:
        raise GraphError(f"{p}: {exc}") from None
    return src, dst, rows if rows == cols else (rows, cols)


# ------------------------------------------------------------------ graph-tool .gt

_GT_MAGIC = "⛾ gt".encode()
# graph-tool's value type indices -> numpy type codes of the scalars and of the vectors' elements
_GT_SCALARS: dict[int, str] = {0: "u1", 1: "i2", 2: "i4", 3: "i8", 4: "f8", 5: "f16"}
_GT_VECTORS: dict[int, str] = {7: "u1", 8: "i2", 9: "i4", 10: "i8", 11: "f8", 12: "f16"}
_GT_STRING, _GT_VSTRING, _GT_PYOBJ = 6, 13, 14


@dataclass
class GtFile:
    """A parsed graph-tool binary file; edges in the file's order (undirected ones once)."""

    directed: bool
    num_vertices: int
    src: np.ndarray
    dst: np.ndarray
    comment: str = ""
    graph_props: dict[str, Any] = field(default_factory=dict)
    vertex_props: dict[str, Any] = field(default_factory=dict)
    edge_props: dict[str, Any] = field(default_factory=dict)


class _Reader:
    def __init__(self, data: bytes, p: Path, big: bool = False):
        self.data, self.p, self.pos = data, p, 0
        self.end: Literal["<", ">"] = ">" if big else "<"

    def take(self, k: int) -> bytes:
        if k < 0 or self.pos + k > len(self.data):
            raise GraphError(f"{self.p}: truncated .gt file (at byte {self.pos}, needed {k} more)")
        b = self.data[self.pos : self.pos + k]
        self.pos += k
        return b

    def array(self, code: str, count: int) -> np.ndarray:
        dt = np.dtype(self.end + code)
        if code == "f16":  # long double: x87 80-bit in 16 bytes; read as float64 through numpy's longdouble
            dt = np.dtype(np.longdouble).newbyteorder(self.end)
            if dt.itemsize != 16:
                raise GraphError(f"{self.p}: long double properties are not readable on this platform")
        raw = self.take(dt.itemsize * count)
        return np.frombuffer(raw, dtype=dt, count=count).astype(dt.newbyteorder("="))

    def u64(self) -> int:
        return int(self.array("u8", 1)[0])

    def u8(self) -> int:
        return self.take(1)[0]

    def string(self) -> bytes:
        return self.take(self.u64())


def _parse_gt(data: bytes, p: Path, *, want_props: bool) -> GtFile:
    if data[:6] != _GT_MAGIC:
        raise GraphError(f"{p}: not a graph-tool .gt file (bad magic)")
    if len(data) < 8 or data[6] != 1:
        raise GraphError(f"{p}: unsupported .gt version {data[6] if len(data) > 6 else '?'}")
    if data[7] not in (0, 1):
        raise GraphError(f"{p}: bad endianness byte {data[7]} in .gt header")
    r = _Reader(data, p, big=data[7] == 1)
    r.pos = 8
    comment = r.string().decode(errors="replace")
    directed = r.u8()
    if directed not in (0, 1):
        raise GraphError(f"{p}: bad 'directed' byte {directed} in .gt header")
    n = r.u64()
    code = "u1" if n < 1 << 8 else "u2" if n < 1 << 16 else "u4" if n < 1 << 32 else "u8"
    width = int(code[1])
    if n * 8 > len(data) - r.pos:  # each vertex needs at least its 8-byte count
        raise GraphError(f"{p}: truncated .gt file: it announces {n} vertices but has only {len(data)} bytes")
    # adjacency: per vertex a uint64 count then that many indices; sequential by nature
    degrees = np.empty(n, dtype=np.int64)
    starts = np.empty(n, dtype=np.int64)
    pos, buf, end = r.pos, data, r.end
    unpack = struct.Struct(end + "Q").unpack_from
    size = len(buf)
    for v in range(n):
        if pos + 8 > size:
            raise GraphError(f"{p}: truncated .gt file in the adjacency list of vertex {v}")
        (d,) = unpack(buf, pos)
        if d > (size - pos - 8) // width:  # also keeps d within int64
            raise GraphError(f"{p}: truncated .gt file: vertex {v} announces {d} neighbours, the file holds fewer")
        starts[v] = pos + 8
        degrees[v] = d
        pos += 8 + d * width
    if pos + 8 > len(buf):  # the adjacency lists, then at least the count of property maps
        raise GraphError(f"{p}: truncated .gt file in the adjacency lists")
    r.pos = pos
    m = int(degrees.sum())
    # gather every index with one fancy-indexing step over the raw bytes
    raw = np.frombuffer(buf, dtype=np.uint8)
    first = np.repeat(starts, degrees)
    within = np.arange(m, dtype=np.int64) - np.repeat(np.cumsum(degrees) - degrees, degrees)
    byte_pos = first + within * width
    dst = np.zeros(m, dtype=np.int64)
    for b in range(width):
        shift = 8 * (b if end == "<" else width - 1 - b)
        dst |= raw[byte_pos + b].astype(np.int64) << shift
    src = np.repeat(np.arange(n, dtype=np.int64), degrees)
    if m and dst.max() >= n:
        bad = int(np.flatnonzero(dst >= n)[0])
        raise GraphError(f"{p}: .gt edge {bad} points to vertex {dst[bad]}, but there are {n} vertices")
    gt = GtFile(bool(directed), int(n), src, dst, comment)
    if want_props:
        _parse_gt_props(r, gt)
    return gt


def _parse_gt_props(r: _Reader, gt: GtFile) -> None:
    count = r.u64()
    for _ in range(count):
        key = r.u8()
        if key not in (0, 1, 2):
            raise GraphError(f"{r.p}: bad property key type {key} at byte {r.pos - 1}")
        name = r.string().decode(errors="replace")
        vtype = r.u8()
        size = 1 if key == 0 else gt.num_vertices if key == 1 else len(gt.src)
        value = _read_gt_values(r, vtype, size)
        target = (gt.graph_props, gt.vertex_props, gt.edge_props)[key]
        target[name] = value[0] if key == 0 else value
    if r.pos != len(r.data):
        raise GraphError(f"{r.p}: {len(r.data) - r.pos} unexpected bytes after the last .gt property map")


def _read_gt_values(r: _Reader, vtype: int, size: int) -> Any:
    if vtype in _GT_SCALARS:
        return r.array(_GT_SCALARS[vtype], size)
    if vtype in (_GT_STRING, _GT_PYOBJ):
        return [r.string().decode(errors="replace") for _ in range(size)]
    if vtype in _GT_VECTORS:
        code = _GT_VECTORS[vtype]
        return [r.array(code, r.u64()) for _ in range(size)]
    if vtype == _GT_VSTRING:
        return [[r.string().decode(errors="replace") for _ in range(r.u64())] for _ in range(size)]
    raise GraphError(f"{r.p}: unknown .gt value type {vtype} at byte {r.pos - 1}")
