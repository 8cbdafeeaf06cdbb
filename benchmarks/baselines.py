"""The baselines a user would otherwise pick, built on the same numpy arrays as gnnc.

For each kernel of ``examples/`` (gcn, sage_mean, sage_max, attention, gat,
mlp_aggr), ``make(kernel, problem, inputs, outputs)`` returns a list of
``Baseline`` objects. A baseline is described (name, library, bytes of memory it
will allocate) before anything heavy is built, so the runner can skip one that
would not fit; ``setup()`` then converts the arrays once (outside the timed
region) and returns the callable to time plus a function giving its result as
numpy arrays, in gnnc's layout, for the error check.

Like with like:

- every library reads the same float32 arrays (``torch.from_numpy`` shares
  memory; DGL and PyG get the same torch tensors);
- the edge ids are in CSR order (edges sorted by destination), for gnnc as for
  the baselines, so no one pays an edge permutation;
- outputs are preallocated wherever the API takes ``out=`` (fresh memory costs
  page faults), gathers use ``index_select``, not advanced indexing;
- torch runs under ``inference_mode`` (no autograd bookkeeping);
- inputs and gnnc's outputs start on a cache line, as torch allocates its
  tensors (numpy's 16-byte alignment puts every 128-byte row across three
  lines: see gnnc/runtime/memory.py).

The optional libraries (torch, torch_geometric, dgl, torch_scatter,
torch_sparse) are imported lazily; ``library_versions()`` reports each one as a
version or "not installed" / the import error.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

from gnnc.runtime.memory import aligned, zeros

F32 = 4  # bytes of a float32
I64 = 8  # bytes of an int64 index

KERNELS = ("gcn", "sage_mean", "sage_max", "attention", "gat", "mlp_aggr")


# ------------------------------------------------------------------ optional libraries

_MODULES: dict[str, Any] = {}
_ERRORS: dict[str, str] = {}


def _import_dgl() -> Any:
    """dgl 2.1.0 beside torch 2.13: its graphbolt C++ library is missing, so stub that subpackage.

    ``dgl/__init__`` imports ``dgl.distributed``, which imports ``dgl.graphbolt``,
    whose import loads ``libgraphbolt_pytorch_<torch version>.so`` and raises
    when there is none for this torch. g-SpMM / g-SDDMM / edge_softmax never use
    graphbolt, so a stub module that fails only when actually used is enough.
    """
    try:
        return importlib.import_module("dgl")
    except (FileNotFoundError, ImportError, OSError) as exc:
        if "graphbolt" not in str(exc).lower():
            raise
    for name in [m for m in sys.modules if m == "dgl" or m.startswith("dgl.")]:
        del sys.modules[name]
    stub = types.ModuleType("dgl.graphbolt")

    class _Unavailable:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise ImportError("dgl.graphbolt is unavailable: no graphbolt library for this torch")

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):  # module introspection (inspect, PyG's import checks) must see a plain module
            raise AttributeError(name)
        return _Unavailable

    stub.__getattr__ = __getattr__  # type: ignore[attr-defined]
    sys.modules["dgl.graphbolt"] = stub
    dgl = importlib.import_module("dgl")
    importlib.import_module("dgl.ops")
    return dgl


def optional(name: str) -> Any | None:
    """The module, or None (the reason is kept for ``library_versions``)."""
    if name in _MODULES:
        return _MODULES[name]
    module = None
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")
            module = _import_dgl() if name == "dgl" else importlib.import_module(name)
    except ModuleNotFoundError:
        _ERRORS[name] = "not installed"
    except Exception as exc:  # noqa: BLE001 - a broken optional library is reported, not fatal
        _ERRORS[name] = f"import failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
    _MODULES[name] = module
    return module


def library_versions() -> dict[str, str]:
    versions = {
        "numpy": np.__version__,
        "scipy": importlib.import_module("scipy").__version__,
        "numba": numba.__version__,
    }
    for name in ("torch", "torch_geometric", "dgl", "torch_scatter", "torch_sparse"):
        module = optional(name)
        versions[name] = getattr(module, "__version__", "?") if module is not None else _ERRORS[name]
    return versions


# ------------------------------------------------------------------ the shared arrays


@dataclass
class Problem:
    """One graph's arrays, shared by gnnc and every baseline; edge ids are in CSR order."""

    name: str
    graph: Any  # gnnc.Graph
    indptr: np.ndarray  # in-edge CSR by destination, int64
    src: np.ndarray  # source of edge e (== graph.in_src)
    dst: np.ndarray  # destination of edge e (nondecreasing)

    @property
    def V(self) -> int:  # noqa: N802 - the usual name
        return int(self.indptr.shape[0] - 1)

    @property
    def E(self) -> int:  # noqa: N802
        return int(self.src.shape[0])

    @cached_property
    def deg(self) -> np.ndarray:
        return np.diff(self.indptr)

    @cached_property
    def ones_csr(self) -> sp.csr_matrix:
        """Row v holds v's in-edges with value 1."""
        a = sp.csr_matrix((np.ones(self.E, np.float32), self.src, self.indptr), shape=(self.V, self.V))
        a.has_sorted_indices = False
        return a

    @cached_property
    def t(self) -> Any:
        torch = optional("torch")
        return types.SimpleNamespace(
            src=torch.from_numpy(self.src),
            dst=torch.from_numpy(self.dst),
            indptr=torch.from_numpy(self.indptr),
            edge_index=torch.stack([torch.from_numpy(self.src), torch.from_numpy(self.dst)]),
        )

    def torch_csr(self, values: Any) -> Any:
        torch = optional("torch")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.sparse_csr_tensor(self.t.indptr, self.t.src, values, (self.V, self.V), check_invariants=False)

    @cached_property
    def dgl_graph(self) -> Any:
        dgl = optional("dgl")
        g = dgl.graph((self.t.src, self.t.dst), num_nodes=self.V)
        # build the formats once, outside the timed region (g-SpMM wants CSC by destination)
        return g.formats(["csc", "coo", "csr"])


def problem_from_graph(name: str, graph: Any) -> Problem:
    """Requires edge ids in CSR order (build the graph from dst-sorted COO)."""
    indptr = np.asarray(graph.in_indptr)
    src = np.asarray(graph.in_src)
    dst = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
    if not np.array_equal(np.asarray(graph.in_eid), np.arange(src.shape[0])):
        raise ValueError(f"{name}: edge ids are not in CSR order; rebuild the graph from dst-sorted COO")
    return Problem(name, graph, indptr, src, dst)


# ------------------------------------------------------------------ kernels: inputs, cost


@dataclass(frozen=True)
class Shape:
    F: int  # feature width (per head for attention / gat)
    H: int = 1  # heads


def make_inputs(kernel: str, p: Problem, s: Shape, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    V, E, F, H = p.V, p.E, s.F, s.H

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return aligned(rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))

    if kernel == "gcn":
        return {"x": normal(V, F), "w": normal(E)}
    if kernel in ("sage_mean", "sage_max"):
        return {"x": normal(V, F)}
    if kernel == "attention":
        return {"q": normal(V, H, F), "k": normal(V, H, F)}
    if kernel == "gat":
        return {"h": normal(V, H, F), "el": normal(V, H), "er": normal(V, H)}
    if kernel == "mlp_aggr":
        return {"x": normal(V, F), "W": normal(F, F, scale=1 / np.sqrt(F))}
    raise KeyError(kernel)


def make_outputs(kernel: str, p: Problem, s: Shape) -> dict[str, np.ndarray]:
    V, E, F, H = p.V, p.E, s.F, s.H
    if kernel == "attention":
        return {"out": zeros((E, H))}
    if kernel == "gat":
        return {"out": zeros((V, H, F)), "alpha": zeros((E, H))}
    return {"out": zeros((V, F))}


def flops(kernel: str, p: Problem, s: Shape) -> float:
    """Useful floating-point operations of the cheapest algorithm (transform-before-gather for mlp_aggr)."""
    V, E, F, H = p.V, p.E, s.F, s.H
    return {
        "gcn": 2.0 * E * F,
        "sage_mean": 1.0 * E * F + V * F,
        "sage_max": 1.0 * E * F,
        "attention": 2.0 * E * H * F,
        # score add + leaky_relu + max + sub + exp + sum + divide, then the weighted sum
        "gat": 7.0 * E * H + 2.0 * E * H * F,
        "mlp_aggr": 2.0 * V * F * F + 3.0 * E * F,
    }[kernel]


def ideal_bytes(kernel: str, p: Problem, s: Shape) -> float:
    """Bytes a perfect cache would move: every input read once, every output written once."""
    V, E, F, H = p.V, p.E, s.F, s.H
    csr = I64 * (V + 1) + I64 * E  # indptr + source ids
    eid = I64 * E  # gnnc reads in_eid for edge-indexed data
    return {
        "gcn": F32 * (2 * V * F + E) + csr + eid,
        "sage_mean": F32 * 2 * V * F + csr,
        "sage_max": F32 * 2 * V * F + csr,
        "attention": F32 * (2 * V * H * F + E * H) + csr + eid,
        "gat": F32 * (2 * V * H * F + 2 * V * H + E * H) + csr + eid,
        "mlp_aggr": F32 * (2 * V * F + F * F) + csr,
    }[kernel]


# ------------------------------------------------------------------ numba CSR loops


@numba.njit(parallel=True, cache=True)
def _nb_gcn(indptr, src, w, x, out):  # pragma: no cover - compiled
    V, F = out.shape
    for v in numba.prange(V):
        acc = np.zeros(F, np.float32)
        for e in range(indptr[v], indptr[v + 1]):
            u = src[e]
            we = w[e]
            for f in range(F):
                acc[f] += we * x[u, f]
        out[v, :] = acc


@numba.njit(parallel=True, cache=True)
def _nb_mean(indptr, src, x, out):  # pragma: no cover
    V, F = out.shape
    for v in numba.prange(V):
        acc = np.zeros(F, np.float32)
        lo, hi = indptr[v], indptr[v + 1]
        for e in range(lo, hi):
            u = src[e]
            for f in range(F):
                acc[f] += x[u, f]
        scale = np.float32(1.0) / np.float32(max(hi - lo, 1))
        for f in range(F):
            out[v, f] = acc[f] * scale


@numba.njit(parallel=True, cache=True)
def _nb_max(indptr, src, x, out):  # pragma: no cover
    V, F = out.shape
    for v in numba.prange(V):
        lo, hi = indptr[v], indptr[v + 1]
        if lo == hi:
            out[v, :] = 0.0
            continue
        acc = x[src[lo]].copy()
        for e in range(lo + 1, hi):
            u = src[e]
            for f in range(F):
                acc[f] = max(acc[f], x[u, f])
        out[v, :] = acc


@numba.njit(parallel=True, cache=True)
def _nb_sddmm(indptr, src, q, k, out):  # pragma: no cover
    V, H, D = q.shape
    for v in numba.prange(V):
        for e in range(indptr[v], indptr[v + 1]):
            u = src[e]
            for h in range(H):
                acc = np.float32(0.0)
                for d in range(D):
                    acc += q[v, h, d] * k[u, h, d]
                out[e, h] = acc


@numba.njit(parallel=True, cache=True)
def _nb_gat(indptr, src, h, el, er, out, alpha):  # pragma: no cover
    V, H, F = h.shape
    for v in numba.prange(V):
        lo, hi = indptr[v], indptr[v + 1]
        for hd in range(H):
            peak = np.float32(-np.inf)
            for e in range(lo, hi):
                s = el[src[e], hd] + er[v, hd]
                s = s if s > 0 else np.float32(0.2) * s
                alpha[e, hd] = s
                peak = max(peak, s)
            total = np.float32(0.0)
            acc = np.zeros(F, np.float32)
            for e in range(lo, hi):
                a = np.exp(alpha[e, hd] - peak)
                alpha[e, hd] = a
                total += a
                u = src[e]
                for f in range(F):
                    acc[f] += a * h[u, hd, f]
            inv = np.float32(1.0) / total if hi > lo else np.float32(0.0)
            for e in range(lo, hi):
                alpha[e, hd] *= inv
            for f in range(F):
                out[v, hd, f] = acc[f] * inv


@numba.njit(parallel=True, cache=True)
def _nb_mlp_max(indptr, src, xw, out):  # pragma: no cover
    V, F = out.shape
    for v in numba.prange(V):
        lo, hi = indptr[v], indptr[v + 1]
        acc = np.zeros(F, np.float32)  # relu >= 0, and an empty max is 0
        for e in range(lo, hi):
            u = src[e]
            for f in range(F):
                acc[f] = max(acc[f], xw[u, f] + xw[v, f])
        out[v, :] = acc


# ------------------------------------------------------------------ baseline objects


@dataclass
class Baseline:
    name: str
    library: str  # a key of library_versions(), or "numpy"
    mem_bytes: int  # extra memory it allocates (estimated before it runs)
    setup: Callable[[], tuple[Callable[[], Any], Callable[[], dict[str, np.ndarray]]]]
    note: str = ""
    available: str | None = None  # None: available; else why not
    quick: bool = True  # False: left out of --quick (never a cell's best; PyG covers the same gather/scatter)


def _np(t: Any) -> np.ndarray:
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


def make(kernel: str, p: Problem, inputs: dict[str, np.ndarray], s: Shape) -> list[Baseline]:
    """Every baseline of ``kernel``; libraries that are missing give an entry with ``available`` set."""
    builders = {
        "gcn": _gcn,
        "sage_mean": _sage_mean,
        "sage_max": _sage_max,
        "attention": _attention,
        "gat": _gat,
        "mlp_aggr": _mlp_aggr,
    }
    result = []
    for b in builders[kernel](p, inputs, s):
        if b.available is None and b.library not in ("numpy", "scipy", "numba") and optional(b.library) is None:
            b.available = _ERRORS.get(b.library, "not installed")
        result.append(b)
    return result


def _wrap_torch(fn: Callable[[], Any]) -> Callable[[], Any]:
    torch = optional("torch")

    def run() -> Any:
        with torch.inference_mode():
            return fn()

    return run


# -- gcn: out[v] = sum_e w[e] * x[src[e]]


def _gcn(p: Problem, inp: dict[str, np.ndarray], s: Shape) -> list[Baseline]:
    V, E, F = p.V, p.E, s.F
    x, w = inp["x"], inp["w"]
    out_b = V * F * F32
    csr_b = E * (F32 + I64)

    def scipy_matmul():
        a = sp.csr_matrix((w, p.src, p.indptr), shape=(V, V))
        box = {}

        def run():
            box["y"] = a @ x

        return run, lambda: {"out": box["y"]}

    def scipy_inplace():
        from scipy.sparse import _sparsetools

        a = sp.csr_matrix((w, p.src, p.indptr), shape=(V, V))
        y = np.zeros((V, F), np.float32)
        xr, yr = x.ravel(), y.ravel()

        def run():
            y.fill(0)  # csr_matvecs accumulates into y
            _sparsetools.csr_matvecs(V, V, F, a.indptr, a.indices, a.data, xr, yr)

        return run, lambda: {"out": y}

    def torch_sparse_mm():
        torch = optional("torch")
        a, tx, box = p.torch_csr(torch.from_numpy(w)), torch.from_numpy(x), {}

        def run():
            box["y"] = torch.sparse.mm(a, tx)

        return _wrap_torch(run), lambda: {"out": _np(box["y"])}

    def torch_addmm_out():
        torch = optional("torch")
        a, tx = p.torch_csr(torch.from_numpy(w)), torch.from_numpy(x)
        y = torch.zeros(V, F)

        def run():
            torch.addmm(y, a, tx, beta=0, out=y)

        return _wrap_torch(run), lambda: {"out": _np(y)}

    def pyg_spmm():
        torch = optional("torch")
        from torch_geometric.utils import spmm

        a, tx, box = p.torch_csr(torch.from_numpy(w)), torch.from_numpy(x), {}

        def run():
            box["y"] = spmm(a, tx, reduce="sum")

        return _wrap_torch(run), lambda: {"out": _np(box["y"])}

    def pyg_mp():
        torch = optional("torch")
        conv = _pyg_mp_class()(aggr="sum")
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        box = {}

        def run():
            box["y"] = conv(tx, p.t.edge_index, tw)

        return _wrap_torch(run), lambda: {"out": _np(box["y"])}

    def index_add():
        torch = optional("torch")
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        y = torch.zeros(V, F)

        def run():
            msg = tx.index_select(0, p.t.src)
            msg.mul_(tw.unsqueeze(1))
            y.zero_()
            y.index_add_(0, p.t.dst, msg)

        return _wrap_torch(run), lambda: {"out": _np(y)}

    def dgl_gspmm():
        torch = optional("torch")
        dgl = optional("dgl")
        g, tx, tw, box = p.dgl_graph, torch.from_numpy(x), torch.from_numpy(w), {}

        def run():
            box["y"] = dgl.ops.gspmm(g, "mul", "sum", tx, tw)

        return _wrap_torch(run), lambda: {"out": _np(box["y"])}

    def numba_csr():
        y = np.zeros((V, F), np.float32)
        return (lambda: _nb_gcn(p.indptr, p.src, w, x, y)), lambda: {"out": y}

    return [
        Baseline("scipy A@X", "scipy", csr_b + out_b, scipy_matmul),
        Baseline("scipy csr_matvecs(out)", "scipy", csr_b + out_b, scipy_inplace, "one thread"),
        Baseline("torch.sparse.mm", "torch", out_b, torch_sparse_mm),
        Baseline("torch.addmm(csr, out=)", "torch", out_b, torch_addmm_out),
        Baseline("pyg spmm", "torch_geometric", out_b, pyg_spmm),
        Baseline("pyg MessagePassing(sum)", "torch_geometric", 2 * E * F * F32 + out_b, pyg_mp),
        Baseline("torch index_add_", "torch", E * F * F32 + out_b, index_add, quick=False),
        Baseline("dgl gspmm(mul,sum)", "dgl", out_b, dgl_gspmm),
        Baseline("numba prange CSR", "numba", out_b, numba_csr),
    ]


_MP_CLASS: Any = None


def _pyg_mp_class() -> Any:
    """A MessagePassing whose message is x_j, or w * x_j when an edge weight is given."""
    global _MP_CLASS
    if _MP_CLASS is None:
        from torch_geometric.nn import MessagePassing

        class Aggregate(MessagePassing):
            def forward(self, x, edge_index, edge_weight=None):  # noqa: ANN001
                return self.propagate(edge_index, x=x, edge_weight=edge_weight)

            def message(self, x_j, edge_weight):  # noqa: ANN001
                return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j

        _MP_CLASS = Aggregate
    return _MP_CLASS


# -- sage_mean / sage_max: out[v] = mean / max of x[src[e]]


def _reduce_baselines(p: Problem, inp: dict[str, np.ndarray], s: Shape, reduce: str) -> list[Baseline]:
    V, E, F = p.V, p.E, s.F
    x = inp["x"]
    out_b = V * F * F32
    torch_reduce = {"mean": "mean", "max": "amax"}[reduce]

    def scipy_mean():
        a = p.ones_csr
        inv = (1.0 / np.maximum(p.deg, 1)).astype(np.float32)[:, None]
        box = {}

        def run():
            y = a @ x
            y *= inv
            box["y"] = y

        return run, lambda: {"out": box["y"]}

    def torch_sparse_mm():
        torch = optional("torch")
        a, tx, box = p.torch_csr(torch.ones(E)), torch.from_numpy(x), {}

        def run():
            box["y"] = torch.sparse.mm(a, tx, torch_reduce)

        return _wrap_torch(run), lambda: {"out": _np(box["y"])}

    def pyg_spmm():
        torch = optional("torch")
        from torch_geometric.utils import spmm

        a, tx, box = p.torch_csr(torch.ones(E)), torch.from_numpy(x), {}

        def run():
            box["y"] = spmm(a, tx, reduce=reduce)

        return _wrap_torch(run), lambda: {"out": _np(box["y"])}

    def pyg_mp():
        torch = optional("torch")
        conv = _pyg_mp_class()(aggr=reduce)
        tx, box = torch.from_numpy(x), {}

        def run():
            box["y"] = conv(tx, p.t.edge_index)

        return _wrap_torch(run), lambda: {"out": _np(box["y"])}

    def scatter_reduce():
        torch = optional("torch")
        tx = torch.from_numpy(x)
        y = torch.zeros(V, F)
        index = p.t.dst.view(-1, 1).expand(E, F)

        def run():
            msg = tx.index_select(0, p.t.src)
            y.zero_()
            y.scatter_reduce_(0, index, msg, reduce=torch_reduce, include_self=False)

        return _wrap_torch(run), lambda: {"out": _np(y)}

    def dgl_gspmm():
        torch = optional("torch")
        dgl = optional("dgl")
        g, tx, box = p.dgl_graph, torch.from_numpy(x), {}

        empty = torch.from_numpy(np.flatnonzero(p.deg == 0))

        def run():
            y = dgl.ops.gspmm(g, "copy_lhs", reduce, tx, None)
            if reduce == "max":
                y.index_fill_(0, empty, 0.0)  # dgl leaves -inf at a vertex without in-edges; gnnc gives 0
            box["y"] = y

        return _wrap_torch(run), lambda: {"out": _np(box["y"])}

    def torch_scatter():
        torch = optional("torch")
        ts = optional("torch_scatter")
        tx = torch.from_numpy(x)
        y = torch.zeros(V, F)

        def run():
            ts.segment_csr(tx.index_select(0, p.t.src), p.t.indptr, out=y, reduce=reduce)

        return _wrap_torch(run), lambda: {"out": _np(y)}

    def numba_csr():
        y = np.zeros((V, F), np.float32)
        fn = _nb_mean if reduce == "mean" else _nb_max
        return (lambda: fn(p.indptr, p.src, x, y)), lambda: {"out": y}

    result = []
    if reduce == "mean":
        result.append(Baseline("scipy A@X * 1/deg", "scipy", E * (F32 + I64) + out_b, scipy_mean))
    result += [
        Baseline(f"torch.sparse.mm({torch_reduce})", "torch", out_b, torch_sparse_mm),
        Baseline(f"pyg spmm({reduce})", "torch_geometric", out_b, pyg_spmm),
        Baseline(f"pyg MessagePassing({reduce})", "torch_geometric", 2 * E * F * F32 + E * I64 * F + out_b, pyg_mp),
        Baseline(f"torch scatter_reduce_({torch_reduce})", "torch", E * F * F32 + out_b, scatter_reduce, quick=False),
        Baseline(f"torch_scatter segment_csr({reduce})", "torch_scatter", E * F * F32 + out_b, torch_scatter),
        Baseline(
            f"dgl gspmm(copy_lhs,{reduce})",
            "dgl",
            out_b * (2 if reduce == "max" else 1),
            dgl_gspmm,
            "empty rows set to 0" if reduce == "max" else "",
        ),
        Baseline("numba prange CSR", "numba", out_b, numba_csr),
    ]
    return result


def _sage_mean(p, inp, s):  # noqa: ANN001, ANN202
    return _reduce_baselines(p, inp, s, "mean")


def _sage_max(p, inp, s):  # noqa: ANN001, ANN202
    return _reduce_baselines(p, inp, s, "max")


# -- attention (SDDMM dot): out[e, h] = dot(q[dst[e], h], k[src[e], h])


def _attention(p: Problem, inp: dict[str, np.ndarray], s: Shape) -> list[Baseline]:
    V, E, F, H = p.V, p.E, s.F, s.H
    q, k = inp["q"], inp["k"]
    out_b = E * H * F32

    def sampled_addmm():
        torch = optional("torch")
        tq, tk = torch.from_numpy(q), torch.from_numpy(k)
        # one CSR per head: sampled_addmm takes 2-D operands (a batched CSR would need equal nnz per batch)
        outs = [p.torch_csr(torch.zeros(E)) for _ in range(H)]
        kt = [tk[:, h, :].contiguous().T for h in range(H)]
        qh = [tq[:, h, :].contiguous() for h in range(H)]

        def run():
            for h in range(H):
                torch.sparse.sampled_addmm(outs[h], qh[h], kt[h], beta=0, out=outs[h])

        return _wrap_torch(run), lambda: {"out": np.stack([_np(o.values()) for o in outs], axis=1)}

    def gather_dot():
        torch = optional("torch")
        tq, tk = torch.from_numpy(q), torch.from_numpy(k)
        y = torch.zeros(E, H)

        def run():
            prod = tq.index_select(0, p.t.dst)
            prod.mul_(tk.index_select(0, p.t.src))
            torch.sum(prod, dim=-1, out=y)

        return _wrap_torch(run), lambda: {"out": _np(y)}

    def dgl_gsddmm():
        torch = optional("torch")
        dgl = optional("dgl")
        g, tq, tk, box = p.dgl_graph, torch.from_numpy(q), torch.from_numpy(k), {}

        def run():
            box["y"] = dgl.ops.gsddmm(g, "dot", tk, tq, lhs_target="u", rhs_target="v")

        return _wrap_torch(run), lambda: {"out": _np(box["y"]).reshape(E, H)}

    def numba_csr():
        y = np.zeros((E, H), np.float32)
        return (lambda: _nb_sddmm(p.indptr, p.src, q, k, y)), lambda: {"out": y}

    extra_copies = 2 * V * H * F * F32 if H > 1 else 0
    return [
        Baseline(
            "torch.sparse.sampled_addmm",
            "torch",
            out_b + E * I64 * 2 + extra_copies,
            sampled_addmm,
            "one call per head" if H > 1 else "",
        ),
        Baseline("torch index_select*mul.sum", "torch", 2 * E * H * F * F32 + out_b, gather_dot, quick=False),
        Baseline("dgl gsddmm(dot)", "dgl", out_b, dgl_gsddmm),
        Baseline("numba prange CSR", "numba", out_b, numba_csr),
    ]


# -- gat: alpha = softmax_v(leaky_relu(el[u] + er[v])), out[v] = sum alpha * h[u]


def _gat(p: Problem, inp: dict[str, np.ndarray], s: Shape) -> list[Baseline]:
    V, E, F, H = p.V, p.E, s.F, s.H
    h, el, er = inp["h"], inp["el"], inp["er"]
    ehf = E * H * F * F32
    eh = E * H * F32
    out_b = V * H * F * F32

    def gatconv():
        torch = optional("torch")
        from torch_geometric.nn import GATConv

        conv = GATConv(H * F, F, heads=H, add_self_loops=False, bias=False).eval()
        th, tel, ter = torch.from_numpy(h), torch.from_numpy(el), torch.from_numpy(er)
        box = {}

        def run():
            a = conv.edge_updater(p.t.edge_index, alpha=(tel, ter), edge_attr=None, size=None)
            box["alpha"] = a
            box["y"] = conv.propagate(p.t.edge_index, x=(th, th), alpha=a, size=None)

        return _wrap_torch(run), lambda: {"out": _np(box["y"]), "alpha": _np(box["alpha"])}

    def unfused_torch():
        torch = optional("torch")
        from torch_geometric.utils import softmax

        th, tel, ter = torch.from_numpy(h), torch.from_numpy(el), torch.from_numpy(er)
        y = torch.zeros(V, H, F)
        box = {}

        def run():
            score = tel.index_select(0, p.t.src)
            score.add_(ter.index_select(0, p.t.dst))
            torch.nn.functional.leaky_relu(score, 0.2, inplace=True)
            a = softmax(score, p.t.dst, num_nodes=V)
            msg = th.index_select(0, p.t.src)
            msg.mul_(a.unsqueeze(-1))
            y.zero_()
            y.index_add_(0, p.t.dst, msg)
            box["alpha"] = a

        return _wrap_torch(run), lambda: {"out": _np(y), "alpha": _np(box["alpha"])}

    def dgl_pipeline():
        torch = optional("torch")
        dgl = optional("dgl")
        from dgl.ops import edge_softmax

        g = p.dgl_graph
        th, tel, ter = torch.from_numpy(h), torch.from_numpy(el), torch.from_numpy(er)
        box = {}

        def run():
            score = dgl.ops.gsddmm(g, "add", tel, ter, lhs_target="u", rhs_target="v")
            torch.nn.functional.leaky_relu(score, 0.2, inplace=True)
            a = edge_softmax(g, score)
            box["alpha"] = a
            box["y"] = dgl.ops.gspmm(g, "mul", "sum", th, a.unsqueeze(-1))

        return _wrap_torch(run), lambda: {"out": _np(box["y"]), "alpha": _np(box["alpha"])}

    def numba_fused():
        y = np.zeros((V, H, F), np.float32)
        a = np.zeros((E, H), np.float32)
        return (lambda: _nb_gat(p.indptr, p.src, h, el, er, y, a)), lambda: {"out": y, "alpha": a}

    return [
        Baseline(
            "pyg GATConv edge_updater+propagate",
            "torch_geometric",
            2 * ehf + 8 * eh + out_b,
            gatconv,
            "precomputed h, el, er: no linear transform, no self loops",
        ),
        Baseline(
            "torch+pyg softmax unfused",
            "torch_geometric",
            ehf + 8 * eh + out_b,
            unfused_torch,
            "index_select, leaky_relu, utils.softmax, index_add_",
        ),
        Baseline("dgl gsddmm+edge_softmax+gspmm", "dgl", 6 * eh + out_b, dgl_pipeline),
        Baseline("numba prange fused", "numba", out_b + eh, numba_fused),
    ]


# -- mlp_aggr: out[v] = max_e relu((x[u] + x[v]) @ W)


def _mlp_aggr(p: Problem, inp: dict[str, np.ndarray], s: Shape) -> list[Baseline]:
    V, E, F = p.V, p.E, s.F
    x, W = inp["x"], inp["W"]
    out_b = V * F * F32
    ef = E * F * F32

    def per_edge():
        torch = optional("torch")
        tx, tW = torch.from_numpy(x), torch.from_numpy(W)
        y = torch.zeros(V, F)
        index = p.t.dst.view(-1, 1).expand(E, F)

        def run():
            m = tx.index_select(0, p.t.src)
            m.add_(tx.index_select(0, p.t.dst))
            m = torch.relu_(m @ tW)
            y.zero_()
            y.scatter_reduce_(0, index, m, reduce="amax", include_self=False)

        return _wrap_torch(run), lambda: {"out": _np(y)}

    def transformed_first():
        torch = optional("torch")
        tx, tW = torch.from_numpy(x), torch.from_numpy(W)
        y = torch.zeros(V, F)
        xw = torch.zeros(V, F)
        index = p.t.dst.view(-1, 1).expand(E, F)

        def run():
            torch.mm(tx, tW, out=xw)
            m = xw.index_select(0, p.t.src)
            m.add_(xw.index_select(0, p.t.dst))
            torch.relu_(m)
            y.zero_()
            y.scatter_reduce_(0, index, m, reduce="amax", include_self=False)

        return _wrap_torch(run), lambda: {"out": _np(y)}

    def dgl_pipeline():
        torch = optional("torch")
        dgl = optional("dgl")
        g, tx, tW, box = p.dgl_graph, torch.from_numpy(x), torch.from_numpy(W), {}
        xw = torch.zeros(V, F)

        empty = torch.from_numpy(np.flatnonzero(p.deg == 0))

        def run():
            torch.mm(tx, tW, out=xw)
            m = torch.relu_(dgl.ops.gsddmm(g, "add", xw, xw, lhs_target="u", rhs_target="v"))
            y = dgl.ops.gspmm(g, "copy_rhs", "max", None, m)
            y.index_fill_(0, empty, 0.0)  # -inf at a vertex without in-edges, as above
            box["y"] = y

        return _wrap_torch(run), lambda: {"out": _np(box["y"])}

    def numba_csr():
        y = np.zeros((V, F), np.float32)
        xw = np.zeros((V, F), np.float32)

        def run():
            np.matmul(x, W, out=xw)
            _nb_mlp_max(p.indptr, p.src, xw, y)

        return run, lambda: {"out": y}

    return [
        Baseline("torch per-edge matmul", "torch", 3 * ef + out_b, per_edge, "gather, add, (E x F) @ W, scatter amax"),
        Baseline("torch transform-first", "torch", 2 * ef + 2 * out_b, transformed_first, "X@W, gather, scatter amax"),
        Baseline("dgl gsddmm+gspmm(max)", "dgl", 2 * ef + 3 * out_b, dgl_pipeline, "X@W first"),
        Baseline("numba prange (X@W first)", "numba", 2 * out_b, numba_csr),
    ]
