"""Weight gradients in bounded memory: dW of `a @ W` as a dense product, never a partial per destination.

The gradient of mlp_aggr's W used to be a kernel writing one [K, N] partial
per destination, which the runtime then summed: V x K x N floats. It is now
F^T G (`gnnc/lang/autodiff.py`, `product_kernels`): G the adjoints summed per
vertex ([V, N], as an input's gradient), F the input x itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.api import compile_grad
from tests.helpers import EXAMPLES, assert_matches

ROOT = Path(__file__).parent.parent

#: One gradient call on a graph of V = 20000 vertices, 80000 edges, K = N = 128, float32,
#: measured in a fresh process: the growth of its peak RSS during the call (graph plans
#: and the reversed graph included), and dW checked against numpy in float64.
_MEASURE = r"""
import json, resource, sys
import numpy as np
import gnnc
from gnnc.api import compile_grad

V, DEG, K, N = 20000, 4, 128, 128
rng = np.random.default_rng(0)
src = rng.integers(0, V, V * DEG)
dst = np.repeat(np.arange(V), DEG)
graph = gnnc.Graph(np.stack([src, dst]), num_vertices=V)
x = rng.standard_normal((V, K), dtype=np.float32)
W = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
gout = rng.standard_normal((V, N), dtype=np.float32)
# a schedule of its own, so the call compiles no variant inside the measurement
grad = compile_grad(sys.argv[1], "mlp_aggr", wrt=["W"], schedule="prefetch 8")
small = gnnc.Graph(np.stack([src[:64] % 16, dst[:64] % 16]), num_vertices=16)
grad(small, x[:16], W, gout=gout[:16])  # loads the kernels

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
dW = grad(graph, x, W, gout=gout, threads=2)["W"]
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

# the check, after the measurement: the winning edges as the kernel picked them (ties
# in float32 are its to break), the rest in float64
_, saved = grad.forward(graph, x, W, threads=2)
winner = saved["st0__"].astype(np.int64)  # per destination and column: the edge id of the max
a = x[src].astype(np.float64) + x[dst]
h = a @ W.astype(np.float64)
chosen = winner[dst] == np.arange(len(src))[:, None]
want = a.T @ (gout[dst] * chosen * (h > 0))
err = float(np.max(np.abs(dW - want)) / np.max(np.abs(want)))
print(json.dumps({"growth_mb": max(0, after - before) / 1024, "error": err, "dtype": str(dW.dtype)}))
"""


def _measure(root: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(root / "examples" / "mlp_aggr.gnn")],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_mlp_aggr_weight_gradient_runs_in_bounded_memory():
    """A partial per destination needed V x K x N x 4 = 20000 x 128 x 128 x 4 bytes = 1.31 GB
    more (1268 MiB peak growth measured before this change); the dense product needs the
    argmax stage and two [V, N] adjoint sums, 3 x 10.2 MB, plus the reversed graph (31 MiB
    measured)."""
    got = _measure(ROOT)
    assert got["dtype"] == "float32"
    assert got["growth_mb"] < 100, got
    assert got["error"] < 1e-4, got


def _graph(rng, n, m, bipartite=False):
    """Random edges with self loops, duplicates and isolated vertices (the last few ids)."""
    if bipartite:
        n_src, n_dst = n, n - 3
        edges = np.stack([rng.integers(0, n_src - 2, m), rng.integers(0, n_dst - 2, m)])
        return gnnc.Graph(np.concatenate([edges, [[1, 1], [1, 1]]], axis=1), shape=(n_src, n_dst))
    edges = np.stack([rng.integers(0, n - 2, m), rng.integers(0, n - 2, m)])
    edges = np.concatenate([edges, [[0, 0, 5], [3, 3, 5]]], axis=1)
    return gnnc.Graph(edges, num_vertices=n)


def _args(kernel: str, graph: gnnc.Graph, rng, dtype, f=5, n=3):
    rows = graph.num_src
    x = rng.uniform(-1, 1, (rows, f)).astype(dtype)
    if kernel == "mlp_aggr":
        return {"x": x, "W": rng.uniform(-1, 1, (f, n)).astype(dtype)}
    return {"x": x, "eps": dtype(0.3)}


def _source(kernel: str, dtype) -> str:
    text = (EXAMPLES / f"{kernel}.gnn").read_text()
    return text.replace("f32", "f64") if dtype == np.float64 else text


CASES = [
    # (kernel, schedule, threads, dtype, bipartite)
    ("mlp_aggr", None, 1, np.float32, False),
    ("mlp_aggr", None, 3, np.float64, False),
    ("mlp_aggr", "partition src 2", 2, np.float32, False),
    ("mlp_aggr", "sort degree", 3, np.float32, False),
    ("mlp_aggr", "vectorize 4", 1, np.float64, False),
    ("mlp_aggr", None, 2, np.float32, True),
    ("gin", None, 1, np.float32, False),
    ("gin", "sort degree", 3, np.float64, False),
    ("gin", "prefetch 0", 2, np.float32, False),
    ("gin", None, 2, np.float64, True),
]


@pytest.mark.parametrize(
    "kernel,schedule,threads,dtype,bipartite",
    CASES,
    ids=[f"{k}-{s or 'default'}-t{t}-{np.dtype(d).name}{'-bip' if b else ''}" for k, s, t, d, b in CASES],
)
def test_parameter_gradients_match_the_reference(kernel, schedule, threads, dtype, bipartite):
    """Every input's gradient, parameters included, on schedules and thread counts, against the
    numpy reference's evaluation of the same gradient program (itself checked against finite
    differences in test_autodiff.py); mlp_aggr's W through the dense product."""
    rng = np.random.default_rng(len(kernel) + threads)
    graph = _graph(rng, 40, 160, bipartite)
    source = _source(kernel, dtype)
    args = _args(kernel, graph, rng, dtype)
    out_rows = graph.num_dst
    gout = rng.uniform(-1, 1, (out_rows, 3 if kernel == "mlp_aggr" else 5)).astype(dtype)
    options = {} if schedule is None else {"schedule": schedule}
    got = compile_grad(source, kernel, **options)(graph, gout=gout, threads=threads, **args)
    want = compile_grad(source, kernel, target="reference")(graph, gout=gout, **args)
    assert set(got) == set(want) == set(args)
    for name in args:
        expected = np.asarray(want[name], dtype=np.float64).reshape(np.shape(args[name]))
        assert_matches(np.asarray(got[name]).reshape(np.shape(args[name])), expected, graph, dtype)


EMULATED = [
    ("mlp_aggr", ("W",), "map thread_vertex group 2"),
    ("mlp_aggr", ("W",), "map warp_vertex lanes 4"),
    ("gin", ("x", "eps"), "map thread_edge"),
    ("gin", ("x", "eps"), "map warp_edge"),
]


@pytest.mark.parametrize("kernel,wrt,mapping", EMULATED, ids=[f"{k}-{m[4:]}" for k, _, m in EMULATED])
def test_parameter_gradients_under_cuda_mappings(kernel, wrt, mapping):
    """The gradient kernels through the cuda pipeline, run as the CPU emulation of their grids.
    (mlp_aggr's x gradient chains two `@`, which warp mappings refuse, and its argmax stage
    the edge mappings: W alone there.)"""
    rng = np.random.default_rng(5)
    graph = _graph(rng, 40, 160)
    source = _source(kernel, np.float32)
    args = _args(kernel, graph, rng, np.float32)
    gout = rng.uniform(-1, 1, (graph.num_dst, 3 if kernel == "mlp_aggr" else 5)).astype(np.float32)
    grad = compile_grad(source, kernel, wrt=list(wrt), target="cuda-emulation", schedule=mapping)
    got = grad(graph, gout=gout, **args)
    want = compile_grad(source, kernel, target="reference")(graph, gout=gout, **args)
    for name in wrt:
        expected = np.asarray(want[name], dtype=np.float64).reshape(np.shape(args[name]))
        assert_matches(np.asarray(got[name]).reshape(np.shape(args[name])), expected, graph, np.float32)


def test_mlp_aggr_weight_gradient_has_no_partial_per_destination():
    """W's kernels give [V, N] sums of adjoints that the runtime multiplies by x; none is [V, K, N]."""
    grad = compile_grad(EXAMPLES / "mlp_aggr.gnn", "mlp_aggr", target="reference")
    w_kernels = [k for k in grad.kernels if k[1] == "W"]
    assert [(k[0], k[5]) for k in w_kernels] == [
        ("mlp_aggr__grad_W_src", "x"),
        ("mlp_aggr__grad_W_dst", "x"),
    ]
    assert not any(k[3] for k in grad.kernels)


FACTORED = """
kernel scaled(x: f64[V, K], y: f64[V, K], W: f64[K, N], w: f64[E]) -> f64[V, N] {
    out[v] = sum(tanh((w[e] * x[u] - relu(y[v]) / deg_in(v)) @ W)) + sigmoid(y[v] @ W)
}
kernel heads(x: f64[V, H, K], W: f64[K, N], w: f64[E, H]) -> f64[V, H, N] {
    s[e] = w[e] * x[u]
    out[v] = sum(sigmoid((s[e] - x[v]) @ W))
}
kernel mixed(x: f64[V, K], W: f64[K, N]) -> f64[V, N] {
    out[v] = sum(tanh((x[u] * x[v]) @ W))
}
"""


@pytest.mark.parametrize(
    "name,products",
    [
        ("scaled", ["scaled__grad_W_src", "scaled__grad_W_dst", "scaled__grad_W_dst1"]),
        ("heads", ["heads__grad_W_src", "heads__grad_W_dst"]),
        ("mixed", []),
    ],
)
def test_factored_weight_gradients_match_finite_differences(name, products):
    """Scaled terms (`w[e] * x[u]`, `/ deg_in(v)`), a stage factor (`relu(y[v])`), a direct term
    at v, heads, an edge value inlined; `x[u] * x[v]` does not split and keeps the partials."""
    from gnnc.lang import parse_and_check
    from tests.helpers import numeric_grad
    from tests.test_autodiff import GRAPH, _inputs

    kernel = parse_and_check(FACTORED).kernel(name)
    rng = np.random.default_rng(3)
    args = _inputs(kernel, rng, {"K": 3, "N": 2, "H": 2})
    forward = getattr(gnnc.compile(FACTORED, target="reference"), name)
    gout = rng.normal(size=forward(GRAPH, **args).shape)
    grad = compile_grad(FACTORED, name)
    assert [k[0] for k in grad.kernels if k[5]] == products
    assert any(k[3] for k in grad.kernels) == (not products)  # partials per destination only for `mixed`
    got = grad(GRAPH, gout=gout, **args)
    for p in args:
        want = numeric_grad(lambda **a: forward(GRAPH, **a), args, p, gout)
        np.testing.assert_allclose(got[p], want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("layer", ["GINConv", "GINEConv"])
def test_gin_eps_gradient_is_one_reduction_not_a_partial_per_destination(layer):
    """With train_eps the kernel is the sum alone and `(1 + eps) * x` is torch's: the kernels
    that take eps (whose gradient would be a [V] partial) never run under autograd; outputs and
    gradients still equal PyG's."""
    torch = pytest.importorskip("torch")
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    import gnnc.nn as gnn

    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(4, 3))

    torch.manual_seed(0)
    kwargs = {"edge_dim": 2} if layer == "GINEConv" else {}
    pyg = getattr(pyg_nn, layer)(mlp(), eps=0.2, train_eps=True, **kwargs)
    ours = getattr(gnn, layer)(mlp(), eps=0.2, train_eps=True, **kwargs)
    ours.load_state_dict(pyg.state_dict())
    with_eps = [k for k in ("_square", "_pair", "_square_weighted", "_pair_weighted", "_root") if hasattr(ours, k)]
    assert with_eps

    def refuse(*args, **kwargs):
        raise AssertionError("a kernel that takes eps ran under autograd")

    for k in with_eps:
        setattr(ours, k, refuse)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 4, 1], [1, 2, 0, 0, 3, 1, 1]])
    x = torch.randn(5, 4)
    args = (x, edge_index) + ((torch.randn(7, 2),) if layer == "GINEConv" else ())
    expected, got = pyg(*args), ours(*args)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    expected.square().sum().backward()
    got.square().sum().backward()
    torch.testing.assert_close(ours.eps.grad, pyg.eps.grad, rtol=1e-4, atol=1e-5)
