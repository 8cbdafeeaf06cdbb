"""WordNet 3.0 as a heterogeneous graph: synsets, typed pointers, lexicographer files, glosses.

    wn = load_wordnet("/usr/share/wordnet")          # the data.* files (Debian's wordnet-base)
    wn = load_wordnet("examples/data/wordnet.npz")   # the processed copy (`WordNet.save`)
    graph = wn.graph()                               # gnnc.Graph with edge_type, num_relations=26
    x, y = wn.features(256), wn.labels               # hashed gloss words; 45 lexicographer files

The four data files (``data.noun``, ``data.verb``, ``data.adj``,
``data.adv``; format wndb(5WN)) give one vertex per synset, numbered noun,
verb, adjective (satellites included), adverb synsets, each file in its
order. Each pointer ``symbol offset pos source/target`` is an edge from the
synset holding it to the target synset, of relation ``POINTERS.index`` of
its symbol (26 symbols; lexical pointers, between two words of the synsets,
are edges between the synsets too); a pointer repeated between the same two
synsets with the same symbol (several word pairs) is one edge, the first.
A vertex's label is its lexicographer file number (``LEXNAMES``, 45
files); its text is its gloss, lower-cased and cut into runs of ASCII
letters and digits (``tokens``).

The files are not trusted: each is read up to ``limits.text_bytes_limit()``
bytes; a field that is not the number or code wndb(5WN) says, a count that
does not match the fields after it, an unknown pointer symbol or part of
speech, a duplicate synset, or a pointer to a synset that no file holds is a
``GraphError`` naming the file and line. A processed ``.npz`` is checked
array by array (dtypes, shapes, ranges) before use.
"""

from __future__ import annotations

import dataclasses
import os
import re
import zipfile
import zlib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gnnc.errors import GraphError
from gnnc.graph.io import _npz_members_size, _read_bytes

if TYPE_CHECKING:
    from gnnc.graph.graph import Graph

__all__ = [
    "LEXNAMES",
    "POINTERS",
    "PARTS",
    "Pointer",
    "WordNet",
    "load_wordnet",
]


@dataclass(frozen=True)
class Pointer:
    """One WordNet pointer symbol (wninput(5WN)) and what it means; its index is its relation type."""

    symbol: str
    name: str


#: The 26 pointer symbols of WordNet 3.0, in this order: relation type r is POINTERS[r].
POINTERS: tuple[Pointer, ...] = (
    Pointer("@", "hypernym"),
    Pointer("~", "hyponym"),
    Pointer("@i", "instance hypernym"),
    Pointer("~i", "instance hyponym"),
    Pointer("#m", "member holonym"),
    Pointer("#s", "substance holonym"),
    Pointer("#p", "part holonym"),
    Pointer("%m", "member meronym"),
    Pointer("%s", "substance meronym"),
    Pointer("%p", "part meronym"),
    Pointer("!", "antonym"),
    Pointer("&", "similar to"),
    Pointer("^", "also see"),
    Pointer("=", "attribute"),
    Pointer("+", "derivationally related form"),
    Pointer(";c", "domain of synset: topic"),
    Pointer("-c", "member of domain: topic"),
    Pointer(";r", "domain of synset: region"),
    Pointer("-r", "member of domain: region"),
    Pointer(";u", "domain of synset: usage"),
    Pointer("-u", "member of domain: usage"),
    Pointer("*", "entailment"),
    Pointer(">", "cause"),
    Pointer("$", "verb group"),
    Pointer("<", "participle of verb"),
    Pointer("\\", "pertainym / derived from adjective"),
)
_RELATION_OF = {p.symbol: r for r, p in enumerate(POINTERS)}

#: The 45 lexicographer files (lexnames(5WN)): label c is LEXNAMES[c].
LEXNAMES: tuple[str, ...] = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event", "noun.feeling",
    "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object", "noun.person",
    "noun.phenomenon", "noun.plant", "noun.possession", "noun.process", "noun.quantity", "noun.relation",
    "noun.shape", "noun.state", "noun.substance", "noun.time", "verb.body", "verb.change", "verb.cognition",
    "verb.communication", "verb.competition", "verb.consumption", "verb.contact", "verb.creation",
    "verb.emotion", "verb.motion", "verb.perception", "verb.possession", "verb.social", "verb.stative",
    "verb.weather", "adj.ppl",
)  # fmt: skip


class Part(StrEnum):
    """A data file's part of speech, by the name of its file (``data.noun``)."""

    NOUN = "noun"
    VERB = "verb"
    ADJ = "adj"
    ADV = "adv"


#: The data files, in vertex order.
PARTS: tuple[Part, ...] = (Part.NOUN, Part.VERB, Part.ADJ, Part.ADV)
#: A synset's type (ss_type) and a pointer's pos field -> the file its synset is in.
_PART_OF_POS = {"n": Part.NOUN, "v": Part.VERB, "a": Part.ADJ, "s": Part.ADJ, "r": Part.ADV}
#: Synset types as stored in `WordNet.synset_type` (ASCII codes).
SYNSET_TYPES = "nvasr"

_DIGITS = re.compile(rb"[0-9]{1,10}")
_HEX = re.compile(rb"[0-9a-fA-F]{1,4}")
_WORD = re.compile(rb"[a-z0-9]+")
#: The processed file's layout; `load_wordnet` refuses another.
FORMAT_VERSION = 1


@dataclass(frozen=True, eq=False)
class WordNet:
    """WordNet's synsets as vertices, its pointers as typed edges, lexicographer files as labels.

    Arrays are int64 unless said: edge ``i`` is ``src[i] -> dst[i]`` of
    relation ``edge_type[i]`` (``POINTERS``); ``labels[v]`` is the
    lexicographer file of synset ``v`` (``LEXNAMES``); ``synset_type[v]``
    (uint8, an ASCII code of ``SYNSET_TYPES``) and ``synset_offset[v]`` name
    the synset in the data files (``n`` 00001740 is "entity"); the words of
    ``v``'s gloss are ``vocabulary[tokens[token_ptr[v]:token_ptr[v + 1]]]``.
    """

    src: np.ndarray
    dst: np.ndarray
    edge_type: np.ndarray
    labels: np.ndarray
    synset_type: np.ndarray
    synset_offset: np.ndarray
    token_ptr: np.ndarray
    tokens: np.ndarray
    vocabulary: tuple[str, ...]

    @property
    def num_vertices(self) -> int:
        return len(self.labels)

    @property
    def num_edges(self) -> int:
        return len(self.src)

    @property
    def num_relations(self) -> int:
        """Always ``len(POINTERS)``: a relation without edges in a subgraph keeps its type."""
        return len(POINTERS)

    @property
    def num_classes(self) -> int:
        return len(LEXNAMES)

    def edge_index(self) -> np.ndarray:
        """``[2, E]`` int64, PyG's layout (row 0 sources)."""
        return np.stack([self.src, self.dst])

    def synset_id(self, v: int) -> str:
        """WordNet's name of vertex ``v``'s synset: its type and offset, ``n00001740``."""
        return f"{chr(self.synset_type[v])}{int(self.synset_offset[v]):08d}"

    def gloss_words(self, v: int) -> list[str]:
        """The words of vertex ``v``'s gloss, in order (as tokenised: lower case, letters and digits)."""
        return [self.vocabulary[t] for t in self.tokens[self.token_ptr[v] : self.token_ptr[v + 1]]]

    def graph(self) -> Graph:
        """A ``gnnc.Graph`` of the synsets with each edge's relation type (``num_relations`` 26)."""
        from gnnc.graph.graph import Graph  # lazy, as io.load_graph's

        return Graph.from_coo(
            self.src,
            self.dst,
            num_vertices=self.num_vertices,
            edge_type=self.edge_type,
            num_relations=self.num_relations,
        )

    def features(self, dim: int = 256, dtype: Any = np.float32) -> np.ndarray:
        """Hashed bag of gloss words: ``[V, dim]``, each row's word counts scaled to unit L2 norm.

        Word ``w`` counts in column ``zlib.crc32(w) % dim`` (the same on every
        machine and run, unlike Python's ``hash``); a synset without gloss words
        has a zero row.
        """
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise GraphError(f"dim must be a positive integer, got {dim!r}")
        column = np.array([zlib.crc32(w.encode()) % dim for w in self.vocabulary], dtype=np.int64)
        rows = np.repeat(np.arange(self.num_vertices, dtype=np.int64), np.diff(self.token_ptr))
        cells, counts = np.unique(rows * dim + column[self.tokens], return_counts=True)
        row = cells // dim
        norm = np.sqrt(np.bincount(row, weights=counts.astype(np.float64) ** 2, minlength=self.num_vertices))
        x = np.zeros((self.num_vertices, dim), dtype=dtype)
        x.reshape(-1)[cells] = counts / norm[row]
        return x

    def subgraph(self, vertices: Any) -> WordNet:
        """The synsets ``vertices`` (distinct ids, renumbered in that order) and the edges between them."""
        keep = np.asarray(vertices)
        if keep.ndim != 1 or (keep.size and keep.dtype.kind not in "iu"):
            raise GraphError(f"vertices must be a 1-D array of vertex ids, got {keep.dtype} of shape {keep.shape}")
        keep = keep.astype(np.int64)
        if keep.size and (keep.min() < 0 or keep.max() >= self.num_vertices):
            raise GraphError(f"vertex ids must lie in [0, {self.num_vertices}), got {keep.min()}..{keep.max()}")
        new = np.full(self.num_vertices, -1, dtype=np.int64)
        new[keep] = np.arange(len(keep))
        if np.count_nonzero(new >= 0) != len(keep):
            raise GraphError("vertices must be distinct")
        edges = np.flatnonzero((new[self.src] >= 0) & (new[self.dst] >= 0))
        starts, ends = self.token_ptr[keep], self.token_ptr[keep + 1]
        counts = ends - starts
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        take = np.repeat(starts - ptr[:-1], counts) + np.arange(ptr[-1])
        return WordNet(
            new[self.src[edges]],
            new[self.dst[edges]],
            self.edge_type[edges],
            self.labels[keep],
            self.synset_type[keep],
            self.synset_offset[keep],
            ptr,
            self.tokens[take],
            self.vocabulary,
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the processed graph as a compressed ``.npz`` that ``load_wordnet`` reads back.

        Ids are stored in the narrowest integer type that holds them; the
        vocabulary as one newline-joined UTF-8 byte array (no pickled objects).
        """
        n = max(self.num_vertices, len(self.vocabulary), 1)
        ids = np.int32 if n < 1 << 31 else np.int64
        arrays = {
            "format_version": np.int64(FORMAT_VERSION),
            "src": self.src.astype(ids),
            "dst": self.dst.astype(ids),
            "edge_type": self.edge_type.astype(np.uint8),
            "labels": self.labels.astype(np.uint8),
            "synset_type": self.synset_type.astype(np.uint8),
            "synset_offset": self.synset_offset.astype(np.int64),
            "token_ptr": self.token_ptr.astype(np.int64),
            "tokens": self.tokens.astype(np.uint16 if len(self.vocabulary) <= 1 << 16 else ids),
            "vocabulary": np.frombuffer("\n".join(self.vocabulary).encode(), dtype=np.uint8),
        }
        with open(path, "wb") as f:
            np.savez_compressed(f, **arrays)  # type: ignore[arg-type]


# ------------------------------------------------------------------ loading


def load_wordnet(path: str | os.PathLike[str]) -> WordNet:
    """WordNet from a directory holding ``data.noun``, ``data.verb``, ``data.adj`` and ``data.adv``
    (Debian's ``wordnet-base`` puts them in ``/usr/share/wordnet``), or from a ``.npz`` written by
    ``WordNet.save``."""
    p = Path(path)
    if p.is_dir():
        return _parse_directory(p)
    if p.name.lower().endswith(".npz"):
        return _read_npz(p)
    if not p.exists():
        raise GraphError(f"{p}: no such file or directory")
    raise GraphError(f"{p}: expected a directory of WordNet data files or a .npz written by WordNet.save")


@dataclass
class _Synset:
    """One data line, parsed: its pointers still name their targets by (part, offset)."""

    offset: int
    lexname: int
    ss_type: str
    line: int
    targets: list[tuple[int, Part, int]]  # (relation, part, offset)
    words: list[bytes]


def _parse_directory(d: Path) -> WordNet:
    files = {part: d / f"data.{part}" for part in PARTS}
    missing = [str(f.name) for f in files.values() if not f.is_file()]
    if missing:
        raise GraphError(f"{d}: not a WordNet database directory: no {', '.join(missing)}")
    parsed = {part: _parse_data_file(files[part], part) for part in PARTS}
    ids: dict[tuple[Part, int], int] = {}
    synsets: list[_Synset] = []
    for part in PARTS:
        for s in parsed[part]:
            ids[(part, s.offset)] = len(synsets)
            synsets.append(s)
    src: list[int] = []
    dst: list[int] = []
    rel: list[int] = []
    for v, s in enumerate(synsets):
        part = _PART_OF_POS[s.ss_type]
        for r, target_part, offset in s.targets:
            u = ids.get((target_part, offset))
            if u is None:
                raise GraphError(
                    f"{files[part]}:{s.line}: a {POINTERS[r].symbol!r} pointer to offset {offset:08d}, "
                    f"which is no synset of {files[target_part].name}"
                )
            src.append(v)
            dst.append(u)
            rel.append(r)
    s_arr, d_arr, t_arr = (np.asarray(a, dtype=np.int64) for a in (src, dst, rel))
    s_arr, d_arr, t_arr = _first_of_each(s_arr, d_arr, t_arr, len(synsets))
    vocabulary, tokens, token_ptr = _vocabulary([s.words for s in synsets])
    return WordNet(
        s_arr,
        d_arr,
        t_arr,
        np.array([s.lexname for s in synsets], dtype=np.int64),
        np.frombuffer("".join(s.ss_type for s in synsets).encode(), dtype=np.uint8).copy(),
        np.array([s.offset for s in synsets], dtype=np.int64),
        token_ptr,
        tokens,
        vocabulary,
    )


def _first_of_each(src: np.ndarray, dst: np.ndarray, rel: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """One edge per distinct (src, dst, relation), the first, in the order of the files."""
    key = (src * max(n, 1) + dst) * len(POINTERS) + rel
    _, first = np.unique(key, return_index=True)
    first.sort()
    return src[first], dst[first], rel[first]


def _vocabulary(words: list[list[bytes]]) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """Words sorted by count (most frequent first, ties alphabetically), and each gloss as word ids."""
    counts: dict[bytes, int] = {}
    for ws in words:
        for w in ws:
            counts[w] = counts.get(w, 0) + 1
    order = sorted(counts, key=lambda w: (-counts[w], w))
    index = {w: i for i, w in enumerate(order)}
    tokens = np.fromiter((index[w] for ws in words for w in ws), dtype=np.int64, count=sum(map(len, words)))
    token_ptr = np.concatenate([[0], np.cumsum([len(ws) for ws in words])]).astype(np.int64)
    return tuple(w.decode() for w in order), tokens, token_ptr


def _parse_data_file(path: Path, part: Part) -> list[_Synset]:
    data = _read_bytes(path)
    synsets: list[_Synset] = []
    seen: dict[int, int] = {}
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip() or line.startswith(b"  "):  # the licence: lines start with two spaces
            continue
        s = _parse_line(line.rstrip(b"\r"), path, number, part)
        if s.offset in seen:
            raise GraphError(f"{path}:{number}: synset offset {s.offset:08d} already defined on line {seen[s.offset]}")
        seen[s.offset] = number
        synsets.append(s)
    return synsets


def _parse_line(line: bytes, path: Path, number: int, part: Part) -> _Synset:
    where = f"{path}:{number}"
    head, bar, gloss = line.partition(b"|")
    if not bar:
        raise GraphError(f"{where}: a synset line ends with '| gloss'; found no '|'")
    f = head.split()
    fields = _Fields(f, where)
    offset = fields.decimal("synset_offset")
    lexname = fields.decimal("lex_filenum")
    if lexname >= len(LEXNAMES):
        raise GraphError(f"{where}: lex_filenum {lexname} out of range [0, {len(LEXNAMES) - 1}]")
    ss_type = fields.code("ss_type", SYNSET_TYPES)
    if _PART_OF_POS[ss_type] != part:
        raise GraphError(f"{where}: a synset of type {ss_type!r} in data.{part}")
    w_cnt = fields.hexadecimal("w_cnt")
    if w_cnt == 0:
        raise GraphError(f"{where}: w_cnt is 0: a synset has at least one word")
    for _ in range(w_cnt):
        fields.take("word")
        fields.hexadecimal("lex_id")
    p_cnt = fields.decimal("p_cnt")
    targets = []
    for _ in range(p_cnt):
        symbol = fields.take("pointer_symbol").decode(errors="replace")
        r = _RELATION_OF.get(symbol)
        if r is None:
            raise GraphError(f"{where}: unknown pointer symbol {symbol!r}")
        target = fields.decimal("pointer's synset_offset")
        pos = fields.code("pointer's pos", SYNSET_TYPES)
        fields.hexadecimal("pointer's source/target")
        targets.append((r, _PART_OF_POS[pos], target))
    if part == Part.VERB and fields.left():
        f_cnt = fields.decimal("f_cnt")
        for _ in range(f_cnt):
            if fields.take("'+' of a frame") != b"+":
                raise GraphError(f"{where}: a verb frame starts with '+'")
            fields.decimal("f_num")
            fields.hexadecimal("w_num")
    if fields.left():
        raise GraphError(f"{where}: {fields.left()} unexpected field(s) before the gloss, from {fields.next()!r}")
    return _Synset(offset, lexname, ss_type, number, targets, _WORD.findall(gloss.lower()))


class _Fields:
    """The space-separated fields of a line's head, taken in order, each checked as wndb(5WN) says."""

    def __init__(self, fields: list[bytes], where: str) -> None:
        self.fields, self.where, self.i = fields, where, 0

    def left(self) -> int:
        return len(self.fields) - self.i

    def next(self) -> str:
        return self.fields[self.i].decode(errors="replace")[:40]

    def take(self, what: str) -> bytes:
        if self.i >= len(self.fields):
            raise GraphError(f"{self.where}: the line ends before its {what} (its counts announce more fields)")
        self.i += 1
        return self.fields[self.i - 1]

    def decimal(self, what: str) -> int:
        token = self.take(what)
        if not _DIGITS.fullmatch(token):
            raise GraphError(
                f"{self.where}: {what} must be a decimal number, found {token[:40].decode(errors='replace')!r}"
            )
        return int(token)

    def hexadecimal(self, what: str) -> int:
        token = self.take(what)
        if not _HEX.fullmatch(token):
            raise GraphError(
                f"{self.where}: {what} must be a hexadecimal number, found {token[:40].decode(errors='replace')!r}"
            )
        return int(token, 16)

    def code(self, what: str, allowed: str) -> str:
        token = self.take(what).decode(errors="replace")
        if len(token) != 1 or token not in allowed:
            raise GraphError(f"{self.where}: {what} must be one of {', '.join(allowed)}; found {token[:40]!r}")
        return token


# ------------------------------------------------------------------ the processed file

_INT = "iu"


def _read_npz(p: Path) -> WordNet:
    try:
        _npz_members_size(p, p)
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: np.asarray(z[k]) for k in z.files}
    except FileNotFoundError:
        raise GraphError(f"{p}: no such file") from None
    except GraphError:
        raise
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise GraphError(f"{p}: not a readable .npz file: {exc}") from None
    return _from_arrays(arrays, p)


def _from_arrays(a: dict[str, np.ndarray], p: Path) -> WordNet:
    need = [f.name for f in dataclasses.fields(WordNet)] + ["format_version"]
    missing = [k for k in need if k not in a]
    if missing:
        raise GraphError(f"{p}: not a WordNet file written by WordNet.save: no {', '.join(missing)}")
    version = a["format_version"]
    if version.shape != () or version.dtype.kind not in _INT or int(version) != FORMAT_VERSION:
        raise GraphError(f"{p}: format version {version!r}, this gnnc reads version {FORMAT_VERSION}")

    def ids(key: str, bound: int, length: int | None = None) -> np.ndarray:
        arr = a[key]
        if arr.ndim != 1 or arr.dtype.kind not in _INT:
            raise GraphError(f"{p}: {key!r} must be a 1-D integer array, has {arr.dtype} of shape {arr.shape}")
        if length is not None and len(arr) != length:
            raise GraphError(f"{p}: {key!r} has {len(arr)} entries, expected {length}")
        if arr.dtype == np.uint64 and len(arr) and int(arr.max()) >= 1 << 63:
            raise GraphError(f"{p}: {key!r} holds {int(arr.max())}, which does not fit in int64")
        out = arr.astype(np.int64)
        if len(out) and (out.min() < 0 or out.max() >= bound):
            raise GraphError(f"{p}: {key!r} holds values in [{out.min()}, {out.max()}], outside [0, {bound})")
        return out

    blob = a["vocabulary"]
    if blob.ndim != 1 or blob.dtype != np.uint8:
        raise GraphError(f"{p}: 'vocabulary' must be a 1-D uint8 array (newline-joined UTF-8)")
    try:
        text = blob.tobytes().decode()
    except UnicodeDecodeError:
        raise GraphError(f"{p}: 'vocabulary' is not UTF-8") from None
    vocabulary = tuple(text.split("\n")) if text else ()
    labels = ids("labels", len(LEXNAMES))
    n = len(labels)
    src, dst = ids("src", n), ids("dst", n)
    edge_type = ids("edge_type", len(POINTERS), len(src))
    if len(dst) != len(src):
        raise GraphError(f"{p}: 'src' and 'dst' have {len(src)} and {len(dst)} entries")
    synset_type = ids("synset_type", 256, n).astype(np.uint8)
    if not np.isin(synset_type, np.frombuffer(SYNSET_TYPES.encode(), dtype=np.uint8)).all():
        raise GraphError(f"{p}: 'synset_type' holds a code that is not one of {', '.join(SYNSET_TYPES)}")
    synset_offset = ids("synset_offset", 1 << 62, n)
    tokens = ids("tokens", max(len(vocabulary), 0))
    token_ptr = ids("token_ptr", len(tokens) + 1, n + 1)
    if token_ptr[0] != 0 or token_ptr[-1] != len(tokens) or (np.diff(token_ptr) < 0).any():
        raise GraphError(f"{p}: 'token_ptr' must rise from 0 to the number of tokens ({len(tokens)})")
    return WordNet(src, dst, edge_type, labels, synset_type, synset_offset, token_ptr, tokens, vocabulary)
