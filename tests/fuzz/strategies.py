"""Hypothesis strategies of fuzz cases: plain data that tests/fuzz/cases.py turns into calls.

Each strategy mixes valid inputs (so the code past the checks runs too) with
every kind of broken one the issue named: sources that are mutated, not
UTF-8, nested too deep, of too many axes; call arguments of wrong shapes,
dtypes and layouts, out= buffers that alias inputs, thread counts and
schedules out of range; graph files truncated, bit-flipped, with huge
headers, CR line ends, gzip bombs and binary junk; constructor inputs with
broken indptrs, ids out of range and sizes past memory.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile

import numpy as np
from hypothesis import strategies as st

from tests.fuzz import cases
from tests.strategies import random_kernels

# ------------------------------------------------------------------ source text

_EXAMPLE_SOURCES = [p.read_text() for p in sorted(cases.EXAMPLES.glob("*.gnn"))]
_WORDS = [
    "kernel", "schedule", "for", "cpu", "cuda", "sum", "max", "min", "mean", "softmax", "argmax", "dot", "outer",
    "transpose", "exp", "tanh", "relu", "leaky_relu", "deg_in", "deg_out", "edge_id", "step", "rsqrt", "detach",
    "x", "y", "w", "W", "u", "v", "e", "V", "E", "F", "H", "f32", "f64", "out", "threads", "graph",
    "(", ")", "[", "]", "{", "}", ",", ":", "->", "+", "-", "*", "/", "@", "=", ";", "\n", "#",
    "0", "1", "2.5", "1e400", "0x1", "1.2.3", "partition", "src", "tile", "features", "vectorize", "edges",
    "sort", "degree", "group", "neighbors", "map", "warp_vertex", "specialize", "hilbert", "order",
]  # fmt: skip
_ODD_CHARS = ["\x00", "\r", "\t", "\u00a0", "\u2028", "é", "∑", "\ufeff", "\U0001f600", "\\", "'", '"', "$"]


@st.composite
def mutated_source(draw) -> str:
    text = draw(st.sampled_from(_EXAMPLE_SOURCES + [draw(random_kernels())]))
    for _ in range(draw(st.integers(1, 6))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        op = draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        piece = draw(st.sampled_from(_WORDS + _ODD_CHARS)) if op != "delete" else ""
        if op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 8)) :]
        elif op == "insert":
            text = text[:i] + piece + text[i:]
        elif op == "replace":
            text = text[:i] + piece + text[i + 1 :]
        else:
            j = draw(st.integers(i, min(len(text), i + 40)))
            text = text[:j] + text[i:j] + text[j:]
    return text


@st.composite
def deep_source(draw) -> str:
    """Long statement chains and deep nesting, around the checker's limits (MAX_DEPTH, MAX_NESTING)."""
    kind = draw(st.sampled_from(["chain", "nest", "rank", "parens", "twice"]))
    n = draw(st.integers(1, 260))
    if kind == "chain":
        body = ["s0[e] = x[u]"] + [f"s{i}[e] = tanh(s{i - 1}[e]) * 2" for i in range(1, n)]
        return (
            "kernel k(x: f32[V, F]) -> f32[V, F] {\n    "
            + "\n    ".join(body)
            + f"\n    out[v] = sum(s{n - 1}[e])\n}}\n"
        )
    if kind == "twice":
        n = min(n, 40)
        body = ["s0[e] = x[u]"] + [f"s{i}[e] = s{i - 1}[e] * s{i - 1}[e]" for i in range(1, n)]
        return (
            "kernel k(x: f32[V, F]) -> f32[V, F] {\n    "
            + "\n    ".join(body)
            + f"\n    out[v] = sum(s{n - 1}[e])\n}}\n"
        )
    if kind == "nest":
        expr = "x[u]"
        for _ in range(n):
            expr = f"tanh({expr})"
        return f"kernel k(x: f32[V, F]) -> f32[V, F] {{\n    out[v] = sum({expr})\n}}\n"
    if kind == "parens":
        return f"kernel k(x: f32[V, F]) -> f32[V, F] {{\n    out[v] = sum({'(' * n}x[u]{')' * n})\n}}\n"
    dims = ", ".join(f"D{i}" for i in range(min(n, 70)))
    return f"kernel k(x: f32[V, {dims}]) -> f32[V, {dims}] {{\n    out[v] = sum(x[u])\n}}\n"


@st.composite
def source_cases(draw) -> dict:
    kind = draw(st.sampled_from(["mutated", "mutated", "deep", "soup", "bytes", "valid"]))
    if kind == "bytes":
        text = draw(mutated_source()).encode("utf-8", errors="surrogatepass")
        junk = draw(st.binary(min_size=1, max_size=8))
        i = draw(st.integers(0, len(text)))
        return {"kind": "bytes", "data": text[:i] + junk + text[i:]}
    if kind == "deep":
        text = draw(deep_source())
    elif kind == "soup":
        text = " ".join(draw(st.lists(st.sampled_from(_WORDS + _ODD_CHARS), max_size=60)))
    elif kind == "valid":
        text = draw(random_kernels())
    else:
        text = draw(mutated_source())
    return {"kind": "text", "text": text, "compile": draw(st.integers(0, 9)) == 0}


# ------------------------------------------------------------------ call arguments

_DTYPES = [None, None, None, None, "float64", "float32", "int32", "int64", "bool", "complex64", "float16", "object"]
_PLAIN = [None, "x", 3, 2.5, [], [[1.0]], object.__name__]


#: (shape, dtype, layout, fill) of an argument: mostly right, then one thing wrong at a time.
_VARIANTS = [
    ("right", None, "c", "rand"), ("right", None, "c", "rand"), ("right", None, "c", "rand"),
    ("right", None, "c", "ints"), ("right", None, "f", "rand"), ("right", None, "strided", "rand"),
    ("right", None, "readonly", "rand"), ("right", None, "list", "rand"), ("right", None, "c", "nan"),
    ("right", None, "c", "inf"), ("right", "float64", "c", "rand"), ("right", "float32", "c", "rand"),
    ("right", "int32", "c", "ints"), ("right", "bool", "c", "rand"), ("right", "complex64", "c", "rand"),
    ("right", "float16", "c", "rand"), ("right", "object", "c", "rand"), ("drop", None, "c", "rand"),
    ("extra", None, "c", "rand"), ("bump", None, "c", "rand"), ((), None, "c", "rand"), ((0,), None, "c", "rand"),
]  # fmt: skip
_PLAIN = [None, "x", 3, 2.5, [], [[1.0]]]


#: Variants a call accepts: any layout (copied), any values.
_VALID = [v for v in _VARIANTS if v[0] == "right" and v[1] is None]


@st.composite
def argument(draw, valid: bool = False) -> object:
    if not valid and draw(st.integers(0, 12)) == 0:
        return draw(st.sampled_from(_PLAIN))
    shape, dtype, layout, fill = draw(st.sampled_from(_VALID if valid else _VARIANTS))
    return {"shape": shape, "dtype": dtype, "layout": layout, "fill": fill, "seed": draw(st.integers(0, 2**16))}


_SCHEDULES = [
    "auto", "auto", "", "prefetch 4", "sort degree", "partition src 2", "vectorize 4",
    "tile features 2", "not a schedule", "partition src 0", "vectorize edges 3", {"prefetch": 2}, {"bad": []}, 7,
    "specialize F 999", "group neighbors 2", "edges sorted", "order edges hilbert",
]  # fmt: skip
_THREADS = [1, 2, 3, 0, -1, 64, 65, 100_000, 2**63, 2.0, "2", True, None]


@st.composite
def call_cases(draw) -> dict:
    kernel = draw(st.sampled_from(sorted(cases.KERNELS)))
    valid = draw(st.booleans())  # half the calls are valid but for layouts and values: they run
    case: dict = {
        "kernel": kernel,
        "graph": draw(st.integers(0, len(cases.GRAPHS) - 1)),
        "dims": {d: draw(st.sampled_from([1, 2, 3, 4, 17])) for d in ("F", "H", "D")},
        "args": {name: draw(argument(valid)) for name in cases.PARAMS[kernel]},
        "positional": draw(st.integers(0, 3)),
    }
    if valid:
        out = draw(st.sampled_from([None, None, "array", "alias"]))
        if out == "array":
            case["out"] = {**draw(argument(valid=True)), "as_dict": draw(st.booleans())}
        elif out == "alias":
            case["out"] = out
        if draw(st.booleans()):
            case["threads"] = draw(st.sampled_from([1, 2, 3, 64]))
        if draw(st.integers(0, 3)) == 0:
            case["schedule"] = draw(st.sampled_from(["auto", "prefetch 4", "sort degree", "vectorize 4", ""]))
        return case
    if draw(st.integers(0, 15)) == 0:
        case["graph_kind"] = "other"
        case["graph_value"] = draw(st.sampled_from([None, "graph", np.zeros((2, 3), np.int64), [[0, 1], [1, 0]]]))
    if draw(st.integers(0, 5)) == 0:
        case["omit"] = [draw(st.sampled_from(["x", "w", "h", "q", "eps"]))]
    if draw(st.integers(0, 8)) == 0:
        case["extra"] = {draw(st.sampled_from(["bogus", "x", "graph", "out_"])): 1.0}
    out = draw(st.sampled_from([None, None, "alias", "array"]))
    if out == "alias":
        case["out"] = "alias"
    elif out == "array":
        spec = draw(argument())
        case["out"] = {**spec, "as_dict": draw(st.booleans())} if isinstance(spec, dict) else spec
    if draw(st.booleans()):
        case["threads"] = draw(st.sampled_from(_THREADS))
    if draw(st.integers(0, 3)) == 0:
        case["schedule"] = draw(st.sampled_from(_SCHEDULES))
    if draw(st.integers(0, 9)) == 0:
        case["deterministic"] = draw(st.sampled_from([True, False, 1, "yes"]))
    return case


# ------------------------------------------------------------------ graph files


def _edges(draw) -> tuple[list[int], list[int], int]:
    n = draw(st.integers(0, 12))
    m = draw(st.integers(0, 30))
    if n == 0:
        return [], [], 0
    src = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    dst = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    return src, dst, n


def _gt(n: int, src: list[int], dst: list[int], directed: bool, degree_lie: int | None) -> bytes:
    out = bytearray("⛾ gt".encode() + bytes([1, 0]))
    out += struct.pack("<Q", 4) + b"fuzz" + bytes([1 if directed else 0]) + struct.pack("<Q", n)
    width = "B" if n < 1 << 8 else "H"
    for v in range(n):
        nbrs = [d for s, d in zip(src, dst) if s == v]
        out += struct.pack("<Q", degree_lie if degree_lie is not None and v == 0 else len(nbrs))
        out += struct.pack("<" + width * len(nbrs), *nbrs)
    out += struct.pack("<Q", 0)
    return bytes(out)


def _npz(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _npy_member(shape: tuple, payload: bytes) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": "<i8", "fortran_order": False, "shape": shape})
    return f.getvalue() + payload


@st.composite
def file_content(draw) -> tuple[str, bytes]:
    src, dst, n = _edges(draw)
    fmt = draw(st.sampled_from(["txt", "mtx", "graph", "gt", "npz", "npz_scipy", "npz_lie", "junk"]))
    if fmt == "txt":
        return ".txt", "".join(f"{s} {d}\n" for s, d in zip(src, dst)).encode()
    if fmt == "mtx":
        sym = draw(st.sampled_from(["general", "symmetric"]))
        field = draw(st.sampled_from(["pattern", "real"]))
        if sym == "symmetric":
            src, dst = [max(a, b) for a, b in zip(src, dst)], [min(a, b) for a, b in zip(src, dst)]
        value = " 1.5" if field == "real" else ""
        lines = [f"%%MatrixMarket matrix coordinate {field} {sym}", f"{n} {n} {len(src)}"]
        lines += [f"{s + 1} {d + 1}{value}" for s, d in zip(src, dst)]
        return ".mtx", ("\n".join(lines) + "\n").encode()
    if fmt == "graph":
        adj: list[set[int]] = [set() for _ in range(n)]
        for s, d in zip(src, dst):
            if s != d:
                adj[s].add(d)
                adj[d].add(s)
        m = sum(len(a) for a in adj) // 2
        body = "\n".join(" ".join(str(x + 1) for x in sorted(a)) for a in adj)
        return ".graph", f"{n} {m}\n{body}\n".encode()
    if fmt == "gt":
        lie = draw(st.sampled_from([None, None, 2**63, 2**64 - 1, 10**9]))
        return ".gt", _gt(n, src, dst, draw(st.booleans()), lie)
    if fmt == "npz":
        arrays: dict = {"src": np.array(src, dtype=np.int64), "dst": np.array(dst, dtype=np.int64)}
        extra = draw(st.sampled_from([None, "n", "huge", "bad", "float", "bip"]))
        if extra == "n":
            arrays["num_vertices"] = np.array(n)
        elif extra == "huge":
            arrays["num_vertices"] = np.array(10**15)
        elif extra == "bad":
            arrays["num_vertices"] = np.array([1, 2])
        elif extra == "float":
            arrays["src"] = arrays["src"].astype(np.float64)
        elif extra == "bip":
            arrays["num_src"], arrays["num_dst"] = np.array(n), np.array(max(n - 1, 0))
        return ".npz", _npz(arrays)
    if fmt == "npz_scipy":
        indptr = draw(
            st.sampled_from([[0, 1, 2, 3], [0, 3, 1, 3], [0, 2, 1, 3], [1, 2, 3, 3], [0, 1, 2], [0, 1, 2, 9]])
        )
        indices = draw(st.sampled_from([[0, 1, 2], [0, 1, 7], [0, -1, 2], [0, 1]]))
        shape = draw(st.sampled_from([(3, 3), (3, 4), (10**12, 10**12)]))
        arrays = {
            "format": np.array(b"csr"),
            "shape": np.array(shape),
            "indptr": np.array(indptr, dtype=np.int32),
            "indices": np.array(indices, dtype=np.int32),
            "data": np.ones(len(indices)),
        }
        return ".npz", _npz(arrays)
    if fmt == "npz_lie":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            claim = draw(st.sampled_from([(2,), (10**12,), (2**40, 2**30)]))
            z.writestr("src.npy", _npy_member(claim, b"\0" * 16))
            z.writestr("dst.npy", _npy_member((2,), b"\0" * 16))
        return ".npz", buf.getvalue()
    ext = draw(st.sampled_from([".txt", ".mtx", ".graph", ".gt", ".npz", ".el"]))
    return ext, draw(st.binary(max_size=200))


def _mutate(draw, data: bytes) -> bytes:
    kind = draw(st.sampled_from(["none", "none", "truncate", "flip", "insert", "huge", "cr", "crlf", "long_token"]))
    if kind == "truncate" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if kind == "flip" and data:
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(out) - 1))
            out[i] ^= 1 << draw(st.integers(0, 7))
        return bytes(out)
    if kind == "insert":
        i = draw(st.integers(0, len(data)))
        return data[:i] + draw(st.binary(min_size=1, max_size=16)) + data[i:]
    if kind == "huge":
        # every number in the first lines (a header, sizes, ids) made enormous
        big = draw(st.sampled_from([b"1000000000", b"99999999999999999999", b"9223372036854775807", b"-5"]))
        head, _, tail = data.partition(b"\n")
        second, _, rest = tail.partition(b"\n")
        return re.sub(rb"\d+", big, head, count=2) + b"\n" + re.sub(rb"\d+", big, second, count=1) + b"\n" + rest
    if kind == "cr":
        return data.replace(b"\n", b"\r")
    if kind == "crlf":
        return data.replace(b"\n", b"\r\n")
    if kind == "long_token":
        i = data.find(b" ")
        return data if i < 0 else data[:i] + b"7" * draw(st.sampled_from([70, 100_000])) + data[i:]
    return data


@st.composite
def file_cases(draw) -> dict:
    ext, data = draw(file_content())
    data = _mutate(draw, data)
    if draw(st.integers(0, 4)) == 0:
        blank = draw(st.integers(0, 3)) == 0
        data = cases.gzip_bytes(b"\n" * 2_000_000 if blank else data)  # blank lines: a small gzip bomb
        if draw(st.integers(0, 3)) == 0:
            data = data[: len(data) // 2]
        ext += ".gz"
    options = {}
    if draw(st.integers(0, 5)) == 0:
        options["symmetric"] = draw(st.sampled_from([True, False]))
    if draw(st.integers(0, 7)) == 0:
        options["max_vertices"] = draw(st.sampled_from([0, 3, 10**6, -1, 2.5]))
    return {"ext": ext, "data": data, "options": options}


# ------------------------------------------------------------------ graph constructors

_ID_DTYPES = ["int64", "int32", "int8", "uint8", "uint64", "float64", "bool", "object"]
_COUNTS = [None, None, None, 0, 1, 5, 12, -1, 10**12, 2**63, 2.0, True, "5", np.int32(7)]


@st.composite
def id_array(draw, length: int | None = None) -> object:
    n = length if length is not None else draw(st.integers(0, 20))
    values = draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 11, -1, 2**31, 2**63 - 1]), min_size=n, max_size=n))
    dtype = draw(st.sampled_from(_ID_DTYPES))
    if dtype == "uint64":
        return np.array([v % 2**64 for v in values] + ([2**63] if draw(st.booleans()) else []), dtype=np.uint64)
    if dtype == "object":
        return np.array(values, dtype=object)
    with np.errstate(over="ignore"):
        try:
            return np.array(values).astype(dtype)
        except OverflowError:
            return np.array(values, dtype=np.int64)


@st.composite
def graph_cases(draw) -> dict:
    ctor = draw(st.sampled_from(["edge_index", "coo", "csr", "pair", "scipy", "scipy"]))
    kwargs: dict = {}
    if ctor != "scipy" and draw(st.booleans()):
        if draw(st.booleans()):
            kwargs["num_vertices"] = draw(st.sampled_from(_COUNTS))
        else:
            kwargs["shape"] = draw(st.sampled_from([(3, 4), (12, 12), (0, 0), (-1, 2), (10**12, 3), (2,), "ab"]))
    if ctor == "edge_index":
        e = draw(st.integers(0, 20))
        shape = draw(st.sampled_from([(2, e), (2, e), (e, 2), (3, e), (e,), (2, e, 1)]))
        arr = np.array(draw(id_array(int(np.prod(shape)))))
        return {"ctor": ctor, "edge_index": arr.reshape(shape) if arr.size == np.prod(shape) else arr, "kwargs": kwargs}
    if ctor in ("coo", "pair"):
        n = draw(st.integers(0, 20))
        m = n if draw(st.integers(0, 5)) else draw(st.integers(0, 20))
        return {"ctor": ctor, "src": draw(id_array(n)), "dst": draw(id_array(m)), "kwargs": kwargs}
    if ctor == "csr":
        ptr = draw(st.lists(st.integers(-2, 12), min_size=0, max_size=8))
        if draw(st.booleans()):
            ptr = sorted(ptr)
        return {"ctor": ctor, "indptr": np.array(ptr, dtype=np.int64), "indices": draw(id_array()), "kwargs": kwargs}
    fmt = draw(st.sampled_from(["csr", "csc", "coo", "bsr", "dia", "lil", "dok"]))
    shape = draw(st.sampled_from([(4, 4), (4, 6), (6, 4), (0, 3)]))
    case: dict = {"ctor": "scipy", "format": fmt, "shape": shape, "seed": draw(st.integers(0, 999))}
    broken = draw(st.sampled_from(["none", "none", "indptr", "indices", "data", "row", "offsets"]))
    if broken == "indptr" and fmt in ("csr", "csc", "bsr"):
        case["set"] = {"indptr": draw(st.lists(st.integers(-1, 9), min_size=1, max_size=8))}
    elif broken == "indices" and fmt in ("csr", "csc", "bsr"):
        case["set"] = {"indices": draw(st.lists(st.integers(-3, 9), max_size=12))}
    elif broken == "data" and fmt in ("csr", "csc", "coo"):
        case["set"] = {"data": np.ones(draw(st.integers(0, 12)))}
    elif broken == "row" and fmt == "coo":
        case["set"] = {"row": draw(st.lists(st.integers(-2, 9), max_size=12))}
    elif broken == "offsets" and fmt == "dia":
        case["set"] = {"offsets": draw(st.lists(st.integers(-5, 5), max_size=4))}
    return case


# ------------------------------------------------------------------ schedules

_DIRECTIVES = [
    "partition src 2", "partition src 3", "tile features 2", "tile features 4", "parallel dst",
    "order edges hilbert", "sort degree", "group neighbors 2", "group neighbors 5", "reorder locality",
    "reorder rcm", "vectorize 4", "vectorize 8", "vectorize edges 4", "vectorize edges 16", "prefetch 4",
    "prefetch 0", "edges sorted", "stream outputs", "simd 256", "simd 512", "specialize F 3", "specialize H 3",
    "partition src 0", "tile features", "vectorize edges 3", "bogus directive",
]  # fmt: skip


@st.composite
def schedule_cases(draw) -> dict:
    return {
        "kernel": draw(st.sampled_from(sorted(cases.SCHEDULE_KERNELS))),
        "directives": draw(st.lists(st.sampled_from(_DIRECTIVES), min_size=1, max_size=4, unique=True)),
        "seed": draw(st.integers(0, 2**16)),
    }


# ------------------------------------------------------------------ tuning files

_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def tuning_cases(draw) -> dict:
    case: dict = {"seed": draw(st.integers(0, 2**16))}
    kind = draw(st.sampled_from(["entry", "entry", "json", "bytes", "none"]))
    if kind == "entry":
        entry = {
            "schedule": draw(st.sampled_from(["prefetch 4", "specialize F 999", "sort degree; ; ", "x", "", 3])),
            "threads": draw(st.sampled_from([None, 1, 2, 0, -4, 100_000, "2", 2.5, True])),
        }
        if draw(st.booleans()):
            entry = draw(_JSONISH) if draw(st.integers(0, 3)) == 0 else entry
        case["cache"] = {"entry": entry, "version": draw(st.sampled_from([1, 1, 2, "1"]))}
    elif kind == "json":
        case["cache"] = draw(_JSONISH)
    elif kind == "bytes":
        case["cache"] = draw(st.binary(max_size=64))
    model_kind = draw(st.sampled_from(["none", "none", "json", "bytes", "cases"]))
    if model_kind == "json":
        case["model"] = draw(_JSONISH)
    elif model_kind == "bytes":
        case["model"] = draw(st.binary(max_size=64))
    elif model_kind == "cases":
        from gnnc.autotune import predictor

        case["model"] = {
            "version": predictor.MODEL_VERSION,
            "features": list(predictor.FEATURE_NAMES),
            "cases": draw(_JSONISH),
        }
    return case
