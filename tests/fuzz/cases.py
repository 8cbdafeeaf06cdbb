"""What one fuzz case does, per target: run in the child (tests/fuzz/runner.py), never in the test process.

Each executor takes a case (plain data from tests/fuzz/strategies.py) and the
child's `Context`, and returns `("ok", detail)`; a GnncError propagates (a
clean error), `Wrong` reports a result that breaks the rules, anything else
is a raw exception. Arrays whose layout matters (non-contiguous, read-only)
are described by the case and built here, since pickling makes them plain.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"


class Wrong(Exception):
    """A result that disagrees with the reference, or a Graph that breaks its invariants."""


@dataclass
class Context:
    """What the cases of one child share: a scratch folder, compiled kernels, references."""

    tmp: Path
    modules: dict[str, Any] = field(default_factory=dict)
    references: dict[str, Any] = field(default_factory=dict)
    counter: int = 0

    def module(self, source: str) -> Any:
        import gnnc

        if source not in self.modules:
            self.modules[source] = gnnc.compile(source)
        return self.modules[source]

    def reference(self, source: str) -> Any:
        import gnnc

        if source not in self.references:
            self.references[source] = gnnc.compile(source, target="reference")
        return self.references[source]

    def path(self, suffix: str) -> Path:
        self.counter += 1
        return self.tmp / f"case{self.counter}{suffix}"


# ------------------------------------------------------------------ kernels and graphs

#: Kernels the call and tuning targets run: name -> source (one kernel each).
KERNELS = {
    "gcn": (EXAMPLES / "gcn.gnn").read_text(),
    "gin": (EXAMPLES / "gin.gnn").read_text(),
    "gat": (EXAMPLES / "gat.gnn").read_text(),
    "attention": (EXAMPLES / "attention.gnn").read_text(),
    "sage_max": (EXAMPLES / "sage_max.gnn").read_text(),
    "edge_w": "kernel edge_w(x: f32[V, F], w: f32[E]) -> f32[E, F] {\n    out[e] = w[e] * x[u]\n}\n",
    "argmax64": "kernel argmax64(x: f64[V, F]) -> f64[V, F] {\n    out[v] = argmax(x[u])\n}\n",
}

#: Each kernel's parameters, in order.
PARAMS = {
    "gcn": ("x", "w"),
    "gin": ("x", "eps"),
    "gat": ("h", "el", "er"),
    "attention": ("q", "k"),
    "sage_max": ("x",),
    "edge_w": ("x", "w"),
    "argmax64": ("x",),
}

#: Small graphs the call target runs on: (src, dst, num_src, num_dst).
GRAPHS: list[tuple[list[int], list[int], int, int]] = [
    ([0, 1, 2, 2, 3, 0, 2, 3], [1, 2, 0, 2, 1, 1, 1, 0], 5, 5),  # loops, duplicates, an isolated vertex
    ([], [], 0, 0),  # empty
    ([], [], 4, 4),  # no edges
    ([0, 0, 0, 0], [0, 0, 0, 0], 1, 1),  # one vertex, four loops
    ([0, 1, 2, 0], [1, 0, 1, 2], 3, 3),
    ([0, 1, 2, 1], [0, 0, 1, 1], 3, 2),  # bipartite: 3 sources, 2 destinations
]


def make_graph(index: int) -> Any:
    import gnnc

    src, dst, ns, nd = GRAPHS[index]
    return gnnc.Graph.from_coo(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), shape=(ns, nd))


def check_graph(g: Any) -> None:
    """A Graph's invariants, which the native code relies on."""
    e, vd, vs = g.num_edges, g.num_dst, g.num_src
    ptr = g.in_indptr
    ok = (
        ptr.shape == (vd + 1,)
        and ptr[0] == 0
        and ptr[-1] == e
        and np.all(np.diff(ptr) >= 0)
        and g.src.shape == g.dst.shape == (e,)
        and (e == 0 or (g.src.min() >= 0 and g.src.max() < vs and g.dst.min() >= 0 and g.dst.max() < vd))
        and np.array_equal(np.sort(g.in_eid), np.arange(e))
        and np.array_equal(g.in_src, g.src[g.in_eid])
        and not g.src.flags.writeable
    )
    if not ok:
        raise Wrong(f"a Graph that breaks its invariants: {g!r}")


def run_on(graph: Any, context: Context) -> None:
    """A checked graph must be safe for native code: gcn on it (small graphs only) against the reference."""
    if graph.num_ids > 100_000 or graph.num_edges > 100_000:
        return
    source = KERNELS["gcn"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((graph.num_src, 3)).astype(np.float32)
    w = rng.standard_normal(graph.num_edges).astype(np.float32)
    got = context.module(source).gcn(graph, x, w)
    want = context.reference(source).gcn(graph, x, w)
    if not np.allclose(got, want, rtol=1e-4, atol=1e-4 * (1 + np.abs(want).max(initial=0))):
        raise Wrong("gcn on a loaded graph disagrees with the reference")


# ------------------------------------------------------------------ source text


def run_source(case: dict, context: Context) -> tuple[str, str]:
    """Source text (or raw bytes of a file) through the checker, and a compile when asked."""
    import gnnc
    from gnnc.lang import parse_and_check

    if case["kind"] == "bytes":
        path = context.path(".gnn")
        path.write_bytes(case["data"])
        source = gnnc.lang.read_source_file(path)
        file = str(path)
    else:
        source, file = case["text"], "<fuzz>"
    program = parse_and_check(source, file)
    if case.get("compile") and program.kernels:
        gnnc.compile(source)
        return "ok", "compiled"
    return "ok", "checked"


# ------------------------------------------------------------------ call arguments


def _array(spec: Any, right: tuple[int, ...], dtype: Any) -> Any:
    """An argument built from its description (see strategies.arguments)."""
    if not isinstance(spec, dict):
        return spec  # a plain Python value: None, a string, a list, a number
    rng = np.random.default_rng(spec.get("seed", 0))
    shape = right
    how = spec.get("shape", "right")
    if how == "drop" and shape:
        shape = shape[:-1]
    elif how == "extra":
        shape = shape + (2,)
    elif how == "bump" and shape:
        i = int(rng.integers(0, len(shape)))
        shape = shape[:i] + (max(0, shape[i] + int(rng.choice([-1, 1, 5]))),) + shape[i + 1 :]
    elif isinstance(how, tuple):
        shape = how
    dt = np.dtype(spec.get("dtype") or dtype)
    fill = spec.get("fill", "rand")
    if fill == "rand":
        base = rng.uniform(-1, 1, shape)
    elif fill == "ints":
        base = rng.integers(-3, 4, shape).astype(np.float64)
    elif fill == "nan":
        base = np.full(shape, np.nan)
    elif fill == "inf":
        base = np.where(rng.random(shape) < 0.5, np.inf, -np.inf)
    else:
        base = np.zeros(shape)
    if dt.kind == "b":
        arr = base > 0
    elif dt.kind in "iu":
        arr = np.nan_to_num(base).astype(dt)
    elif dt.kind == "O":
        arr = base.astype(object)
    else:
        arr = base.astype(dt)
    layout = spec.get("layout", "c")
    if layout == "f" and arr.ndim >= 2:
        arr = np.asfortranarray(arr)
    elif layout == "strided" and arr.ndim >= 1:
        wide = np.zeros(arr.shape[:-1] + (2 * arr.shape[-1],), arr.dtype) if arr.shape else arr
        if arr.shape:
            wide[..., ::2] = arr
            arr = wide[..., ::2]
    elif layout == "readonly":
        arr.flags.writeable = False
    elif layout == "list":
        return arr.tolist()
    return arr


def _right_shapes(kernel: Any, graph: Any, dims: dict[str, int]) -> tuple[dict[str, tuple], dict[str, tuple]]:
    sig = kernel.signature

    def shape(t: Any, rows: dict) -> tuple[int, ...]:
        lead = () if t.domain is None else (rows[t.domain],)
        return lead + tuple(dims.get(d, 2) if isinstance(d, str) else d for d in t.shape)

    inputs = {
        p.name: shape(p, {"V": graph.num_src if p.domain == "V" else 0, "E": graph.num_edges}) for p in sig.params
    }
    results = {r.name: shape(r, {"V": graph.num_dst, "E": graph.num_edges}) for r in sig.results}
    return inputs, results


def run_call(case: dict, context: Context) -> tuple[str, str]:
    """One call of a compiled kernel with fuzzed arguments; where it runs, it must match the reference."""
    source = KERNELS[case["kernel"]]
    module = context.module(source)
    kernel = next(iter(module.kernels.values()))
    reference = getattr(context.reference(source), kernel.name)
    graph = make_graph(case["graph"]) if case.get("graph_kind", "graph") == "graph" else case.get("graph_value")
    dims = dict(case.get("dims", {}))
    real = graph if hasattr(graph, "num_src") else make_graph(0)
    inputs, results = _right_shapes(kernel, real, dims)
    dtype = kernel.signature.numpy_dtype
    args = {name: _array(case["args"].get(name, {}), shape, dtype) for name, shape in inputs.items()}
    for name in case.get("omit", []):
        args.pop(name, None)
    call_kwargs: dict[str, Any] = {}
    positional = [args.pop(n) for n in list(args)[: case.get("positional", 0)]]
    call_kwargs.update(args)
    call_kwargs.update(case.get("extra", {}))
    out_spec = case.get("out")
    out: Any = None
    if out_spec == "alias":
        # the first input of a result's shape, given as out=: the kernels assume no aliasing
        first_name = next(iter(results))
        out = next((a for a in [*positional, *args.values()] if getattr(a, "shape", None) == results[first_name]), None)
    elif out_spec is not None and not isinstance(out_spec, dict):
        out = out_spec  # a plain value as out=: refused
    elif isinstance(out_spec, dict):
        made = {name: _array(out_spec, shape, dtype) for name, shape in results.items()}
        out = made if len(made) > 1 or out_spec.get("as_dict") else next(iter(made.values()))
    if out is not None:
        call_kwargs["out"] = out
    for option in ("threads", "schedule", "deterministic"):
        if option in case:
            call_kwargs[option] = case[option]
    # the reference first, on copies (an out= the kernel writes may alias an input)
    copies = [np.array(a) if isinstance(a, np.ndarray) else a for a in positional]
    ref_kwargs = {k: (np.array(v) if isinstance(v, np.ndarray) else v) for k, v in call_kwargs.items()}
    ref_kwargs.pop("out", None)
    ref_kwargs.pop("deterministic", None)
    try:
        want = reference(graph, *copies, **ref_kwargs)
    except Exception:  # the reference need not accept what the kernel refuses
        want = None
    got = kernel(graph, *positional, **call_kwargs)
    if want is None:
        raise Wrong("the compiled kernel accepted a call the reference refused")
    _compare(got, want, real, dtype)
    return "ok", "matched the reference"


def _compare(got: Any, want: Any, graph: Any, dtype: Any) -> None:
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            raise Wrong(f"results {type(got).__name__} do not match the reference's {sorted(want)}")
        for name in want:
            _compare(got[name], want[name], graph, dtype)
        return
    got = np.asarray(got)
    if got.shape != want.shape:
        raise Wrong(f"result shape {got.shape}, reference {want.shape}")
    want = np.asarray(want, dtype=np.float64)
    g64 = got.astype(np.float64)
    nan = np.isnan(want)
    if not np.array_equal(nan, np.isnan(g64)):
        raise Wrong("NaN positions differ from the reference")
    finite = want[np.isfinite(want)]
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    deg = int(np.diff(graph.in_indptr).max()) if graph.num_dst else 0
    atol = 64 * np.finfo(dtype).eps * (1 + scale) * (1 + deg)
    rtol = 1e-3 if np.dtype(dtype) == np.float32 else 1e-9
    ok = ~nan
    if not np.allclose(g64[ok], want[ok], rtol=rtol, atol=atol):
        raise Wrong(f"results differ from the reference by {np.abs(g64[ok] - want[ok]).max():.3g}")


# ------------------------------------------------------------------ graph files


def run_file(case: dict, context: Context) -> tuple[str, str]:
    """A graph file's bytes through load_graph; a graph that loads must hold its invariants and run."""
    from gnnc.graph.io import load_graph

    path = context.path(case["ext"])
    path.write_bytes(case["data"])
    graph = load_graph(path, **case.get("options", {}))
    check_graph(graph)
    run_on(graph, context)
    return "ok", repr(graph)


# ------------------------------------------------------------------ graph constructors


def _scipy(case: dict) -> Any:
    import scipy.sparse as sp

    fmt = case["format"]
    n_rows, n_cols = case["shape"]
    base = sp.random(n_rows, n_cols, density=0.4, format="csr", random_state=case.get("seed", 0))
    matrix = base.asformat(fmt) if fmt != "bsr" else sp.bsr_matrix(base.toarray())
    for name, value in case.get("set", {}).items():
        setattr(matrix, name, np.asarray(value) if isinstance(value, list) else value)
    return matrix


def run_graph(case: dict, context: Context) -> tuple[str, str]:
    """A Graph built from fuzzed arrays and sizes; a graph that builds must hold its invariants and run."""
    import gnnc

    kind, kwargs = case["ctor"], dict(case.get("kwargs", {}))
    if kind == "edge_index":
        graph = gnnc.Graph(case["edge_index"], **kwargs)
    elif kind == "coo":
        graph = gnnc.Graph.from_coo(case["src"], case["dst"], **kwargs)
    elif kind == "csr":
        graph = gnnc.Graph.from_csr(case["indptr"], case["indices"], **kwargs)
    elif kind == "pair":
        graph = gnnc.Graph((case["src"], case["dst"]), **kwargs)
    else:
        graph = gnnc.Graph.from_scipy(_scipy(case))
    check_graph(graph)
    run_on(graph, context)
    return "ok", repr(graph)


# ------------------------------------------------------------------ schedules x kernels

#: Kernels the schedule target compiles (the examples and a few edge-wise shapes).
SCHEDULE_KERNELS = {
    **{p.stem: p.read_text() for p in sorted(EXAMPLES.glob("*.gnn"))},
    "edge_w": KERNELS["edge_w"],
    "edge_1d": "kernel edge_1d(x: f32[V]) -> f32[E] {\n    out[e] = x[u]\n}\n",
    "edge_uv": "kernel edge_uv(x: f32[V, F]) -> f32[E, F] {\n    out[e] = x[u] + x[v]\n}\n",
    "both": (
        "kernel both(x: f32[V, F], w: f32[E]) -> (out: f32[V, F], s: f32[E]) {\n"
        "    s[e] = tanh(w[e])\n    out[v] = sum(softmax(s[e]) * x[u])\n}\n"
    ),
    "two_phase": "kernel two_phase(x: f32[V, F]) -> f32[V, F] {\n    h[v] = sum(x[u])\n    out[v] = max(h[u]) + h[v]\n}\n",
    "argmax": "kernel argmax(x: f32[V, F]) -> f32[V, F] {\n    out[v] = argmax(x[u])\n}\n",
}


def run_schedule(case: dict, context: Context) -> tuple[str, str]:
    """A kernel compiled with a fuzzed schedule: refused by the checker (a SourceError) or by the pass
    that cannot apply a directive (a CompileError naming it), never by a verifier; if it compiles, it
    must match the reference."""
    import gnnc
    from gnnc.lang import parse_and_check
    from tests.strategies import random_inputs

    source = SCHEDULE_KERNELS[case["kernel"]]
    name = parse_and_check(source).kernels[0].name
    text = source + f"\nschedule {name} for cpu {{\n" + "\n".join(case["directives"]) + "\n}\n"
    try:
        module = gnnc.compile(text)
    except gnnc.SourceError:
        raise
    except gnnc.CompileError as exc:
        message = str(exc)
        named = [d for d in case["directives"] if " ".join(d.split()[:2]) in message or d.split()[0] in message]
        if "internal error" in message or not named:
            raise Wrong(f"refused by no checker and naming no directive: {message[:500]}") from None
        raise
    kernel = getattr(module, name)
    reference = getattr(context.reference(source), name)
    rng = np.random.default_rng(case.get("seed", 0))
    v = 30
    graph = gnnc.Graph.from_coo(rng.integers(0, v, 200), rng.integers(0, v, 200), num_vertices=v)
    if "edges sorted" in case["directives"]:
        graph = graph.sorted_by_destination()[0]
    dims = {d: 3 for p in kernel.signature.params for d in p.shape if isinstance(d, str)}
    for d in case["directives"]:
        words = d.split()
        if words[0] == "specialize":
            dims.update({words[i]: int(words[i + 1]) for i in range(1, len(words) - 1, 2)})
    inputs = random_inputs(kernel.signature, graph, dims, kernel.signature.numpy_dtype, case.get("seed", 0))
    got = kernel(graph, **inputs)
    _compare(got, reference(graph, **inputs), graph, kernel.signature.numpy_dtype)
    return "ok", "compiled and matched the reference"


# ------------------------------------------------------------------ tuning files


def run_tuning(case: dict, context: Context) -> tuple[str, str]:
    """`schedule="auto"` with fuzzed cache.json / model.json: ignored or skipped, never an error."""
    import gnnc
    from gnnc.autotune import autoschedule, predictor
    from gnnc.autotune.cache import TuningCache
    from gnnc.runtime import tune

    directory = Path(os.environ["GNNC_TUNE_DIR"])
    directory.mkdir(parents=True, exist_ok=True)
    source = KERNELS["gcn"]
    kernel = context.module(source).gcn
    rng = np.random.default_rng(case.get("seed", 0))
    graph = gnnc.Graph.from_coo(rng.integers(0, 40, 300), rng.integers(0, 40, 300), num_vertices=40)
    dims = {"F": 4}
    cache = case.get("cache")
    if cache is not None:
        if isinstance(cache, dict) and "entry" in cache:
            key = tune.case_key(kernel, graph, dims)
            cache = json.dumps({"version": cache.get("version", 1), "entries": {key: cache["entry"]}}).encode()
        (directory / "cache.json").write_bytes(cache if isinstance(cache, bytes) else json.dumps(cache).encode())
    model = case.get("model")
    if model is not None:
        (directory / predictor.LOCAL_MODEL).write_bytes(
            model if isinstance(model, bytes) else json.dumps(model).encode()
        )
    autoschedule._CACHE = TuningCache()
    predictor._load.cache_clear()
    x = rng.standard_normal((40, 4)).astype(np.float32)
    w = rng.standard_normal(300).astype(np.float32)
    got = kernel(graph, x, w, schedule="auto")
    _compare(got, context.reference(source).gcn(graph, x, w), graph, np.float32)
    return "ok", "auto ran and matched the reference"


def gzip_bytes(data: bytes) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as f:
        f.write(data)
    return out.getvalue()


def run_selftest(case: str, context: Context) -> tuple[str, str]:
    """What the harness must tell apart (test_fuzz.py checks it does): each outcome on demand."""
    import ctypes
    import time

    from gnnc.errors import GraphError

    if case == "clean":
        raise GraphError("a clean error")
    if case == "raw":
        raise KeyError("a raw exception")
    if case == "wrong":
        raise Wrong("a wrong answer")
    if case == "crash":
        ctypes.string_at(0)  # SIGSEGV, as a bad pointer in native code would
    if case == "hang":
        time.sleep(600)
    return "ok", "ran"


TARGETS: dict[str, Callable[[Any, Context], tuple[str, str]]] = {
    "selftest": run_selftest,
    "source": run_source,
    "call": run_call,
    "file": run_file,
    "graph": run_graph,
    "schedule": run_schedule,
    "tuning": run_tuning,
}
