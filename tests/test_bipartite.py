"""Bipartite graphs (num_src != num_dst, as DGL's blocks): runtime, language, reference, gradients.

Compiled kernels are compared with the numpy reference on random bipartite
graphs; gradients with central finite differences of the reference.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import gnnc
from gnnc import reference
from gnnc.api import compile_grad
from gnnc.errors import ArgumentError, GraphError
from gnnc.graph import plans
from gnnc.lang import parse_and_check
from gnnc.lang.signature import kernel_signature
from gnnc.runtime.signature import vertex_rows

from .helpers import assert_matches, numeric_grad, slow_except

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_KERNELS = ["attention", "gat", "gcn", "gcn_norm", "gin", "mlp_aggr", "sage_max", "sage_mean"]
DIMS = {"F": 3, "H": 2, "D": 4, "D1": 5, "D2": 3}

# a source-side matvec (hoisted into a source sweep over num_src rows) and
# degrees read at the other side (deg_in(u), deg_out(v))
EXTRA = """
kernel hoisted(x: f32[V, D1], W: f32[D1, D2]) -> f32[V, D2] {
    out[v] = sum(relu((x[u] * rsqrt(1 + deg_out(u))) @ W))
}
kernel cross_degrees(x: f32[V, F]) -> f32[V, F] {
    out[v] = sum(x[u] * (1 + deg_in(u))) + deg_out(v)
}
kernel edgy(x: f32[V, F], y: f32[V, F], w: f32[E]) -> f32[V, F] {
    out[v] = sum(sigmoid(w[e]) * x[u] * y[v]) + y[v] * mean(x[u])
}
kernel two_layers(x: f32[V, F]) -> f32[V, F] {
    h[v]   = sum(x[u])
    out[v] = sum(h[u])
}
"""


@st.composite
def bipartite_edge_lists(draw, max_side: int = 30, max_edges: int = 150):
    """(src, dst, num_src, num_dst), num_src != num_dst: either side bigger or empty,
    isolated vertices on both sides, duplicate edges, a hub destination."""
    n_src = draw(st.integers(0, max_side))
    n_dst = draw(st.integers(0, max_side).filter(lambda n: n != n_src))
    if n_src == 0 or n_dst == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), n_src, n_dst
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    kind = draw(st.sampled_from(["random", "isolated", "hub", "no_edges"]))
    n = draw(st.integers(0, max_edges)) if kind != "no_edges" else 0
    if kind == "isolated":  # only some ids on each side take part
        src = rng.integers(0, max(1, n_src // 2), n)
        dst = rng.integers(n_dst // 2, n_dst, n)
    elif kind == "hub":
        src = rng.integers(0, n_src, n + 500)
        dst = np.concatenate([np.full(500, rng.integers(0, n_dst)), rng.integers(0, n_dst, n)])
    else:
        src = rng.integers(0, n_src, n)
        dst = rng.integers(0, n_dst, n)
    if src.size and draw(st.booleans()):  # duplicates
        k = draw(st.integers(1, src.size))
        src, dst = np.concatenate([src, src[:k]]), np.concatenate([dst, dst[:k]])
    return src.astype(np.int64), dst.astype(np.int64), n_src, n_dst


@functools.cache
def _program(source_key: str):
    text = EXTRA if source_key == "extra" else (EXAMPLES / f"{source_key}.gnn").read_text()
    return parse_and_check(text, source_key), text


@functools.cache
def _compiled(source_key: str, schedule: str | None = None):
    _, text = _program(source_key)
    return gnnc.compile(text, schedule=schedule) if schedule else gnnc.compile(text)


def _kernel(name: str):
    key = name if name in EXAMPLE_KERNELS else "extra"
    program, _ = _program(key)
    return key, program.kernel(name)


def _inputs(kernel, graph, rng, dtype=np.float32):
    sig = kernel_signature(kernel)
    args = {}
    for p in sig.params:
        lead = {"V": [vertex_rows(p, graph)[0]] if p.domain == "V" else [], "E": [graph.num_edges], None: []}[p.domain]
        shape = lead + [DIMS[d] if isinstance(d, str) else d for d in p.shape]
        args[p.name] = rng.uniform(0.1, 1.5, size=shape).astype(dtype)
    return args


def _reads_both_sides(kernel) -> bool:
    return any(p.sides == ("src", "dst") for p in kernel_signature(kernel).params)


@pytest.mark.parametrize(
    "name", slow_except(EXAMPLE_KERNELS + ["hoisted", "cross_degrees", "edgy"], "cross_degrees", "edgy")
)
@given(edges=bipartite_edge_lists(), seed=st.integers(0, 2**31 - 1))
def test_kernels_match_reference_on_bipartite_graphs(name, edges, seed):
    src, dst, n_src, n_dst = edges
    key, kernel = _kernel(name)
    if _reads_both_sides(kernel) and n_dst > n_src:
        # DGL's block convention needs the destinations among the sources: swap the sides
        src, dst, n_src, n_dst = dst, src, n_dst, n_src
    graph = gnnc.Graph.from_coo(src, dst, shape=(n_src, n_dst))
    assert graph.bipartite
    args = _inputs(kernel, graph, np.random.default_rng(seed))
    got = getattr(_compiled(key), name)(graph, **args)
    want = reference.evaluate(kernel, graph, **args)
    for r in kernel.results:
        value = got[r.name] if isinstance(got, dict) else got
        assert value.shape[0] == (n_dst if r.type.domain == "V" else graph.num_edges)
    assert_matches(got, want, graph, np.float32)


@pytest.mark.parametrize(
    "schedule",
    slow_except(
        [
            "partition src 3",
            "group neighbors 4",
            "sort degree",
            "reorder locality",
            "tile features 2",
            "parallel dst; prefetch 4",
        ],
        "partition src 3",
        "group neighbors 4",
        "reorder locality",
    ),
)
@pytest.mark.parametrize("name", slow_except(["gcn", "mlp_aggr"], "gcn"))  # mlp_aggr: a source sweep beside the plan
@given(edges=bipartite_edge_lists(), seed=st.integers(0, 2**31 - 1))
def test_graph_plans_on_bipartite_graphs(name, schedule, edges, seed):
    src, dst, n_src, n_dst = edges
    _, kernel = _kernel(name)
    if _reads_both_sides(kernel) and n_dst > n_src:
        src, dst, n_src, n_dst = dst, src, n_dst, n_src
    graph = gnnc.Graph.from_coo(src, dst, shape=(n_src, n_dst))
    args = _inputs(kernel, graph, np.random.default_rng(seed))
    got = getattr(_compiled(name, schedule), name)(graph, threads=2, **args)
    assert_matches(got, reference.evaluate(kernel, graph, **args), graph, np.float32)


@given(edges=bipartite_edge_lists(), seed=st.integers(0, 2**31 - 1))
def test_hilbert_edge_order_on_bipartite_graphs(edges, seed):
    src, dst, n_src, n_dst = edges
    graph = gnnc.Graph.from_coo(src, dst, shape=(n_src, n_dst))
    _, kernel = _kernel("attention")
    args = _inputs(kernel, graph, np.random.default_rng(seed))
    got = _compiled("attention", "order edges hilbert").attention(graph, threads=2, **args)
    assert_matches(got, reference.evaluate(kernel, graph, **args), graph, np.float32)


def test_source_partitions_split_sources():
    graph = gnnc.Graph.from_coo([0, 9, 5, 9, 1], [1, 0, 2, 2, 1], shape=(10, 3))
    bounds, part_indptr, part_src, _ = plans.source_partitions(graph, 2)
    assert bounds[-1] == 10 and part_indptr.shape == (2 * (3 + 1),)
    assert sorted(part_src.tolist()) == sorted(graph.src.tolist())
    assert plans.default_partition_count(graph, 4, llc_bytes=16) == 5  # ten source rows of 4 bytes, 8 per half


# ------------------------------------------------------------------ checking


def test_wrong_row_counts_are_argument_errors():
    graph = gnnc.Graph.from_coo([0, 4, 2], [1, 0, 1], shape=(5, 2))
    gcn = _compiled("gcn").gcn
    w = np.ones(3, np.float32)
    with pytest.raises(ArgumentError, match=r"'x'.*2 entries.*needs 5 \(read at u: one row per source"):
        gcn(graph, np.ones((2, 3), np.float32), w)
    assert gcn(graph, np.ones((5, 3), np.float32), w).shape == (2, 3)
    gin = _compiled("gin").gin
    with pytest.raises(ArgumentError, match=r"'x'.*2 entries.*read at u and v: one row per source"):
        gin(graph, np.ones((2, 3), np.float32), 0.5)
    with pytest.raises(ArgumentError, match=r"block convention.*5 destinations and only 2 sources"):
        gin(graph.reversed(), np.ones((2, 3), np.float32), 0.5)
    attention = _compiled("attention").attention
    q, k = np.ones((2, 2, 4), np.float32), np.ones((5, 2, 4), np.float32)
    assert attention(graph, q, k).shape == (3, 2)
    with pytest.raises(ArgumentError, match=r"'q'.*5 entries.*needs 2 \(read at v: one row per destination"):
        attention(graph, k, k)
    out = np.empty((5, 3), np.float32)
    with pytest.raises(ArgumentError, match=r"out=.*expected shape \(2, 3\)"):
        gcn(graph, np.ones((5, 3), np.float32), w, out=out)
    with pytest.raises(ArgumentError, match=r"'x'.*needs 5"):  # the reference checks the same way
        reference.evaluate(_kernel("gcn")[1], graph, np.ones((2, 3), np.float32), w)


def test_vertex_values_read_at_sources_need_a_square_graph():
    two_layers = _compiled("extra").two_layers
    square = gnnc.Graph.from_coo([0, 1, 2], [1, 2, 0], num_vertices=3)
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    np.testing.assert_allclose(two_layers(square, x), reference.evaluate(_kernel("two_layers")[1], square, x))
    bip = gnnc.Graph.from_coo([0, 1, 2], [1, 0, 0], shape=(3, 2))
    for run in (two_layers, functools.partial(reference.evaluate, _kernel("two_layers")[1])):
        with pytest.raises(ArgumentError, match=r"vertex value 'h' at u.*square graph"):
            run(bip, x)


# ------------------------------------------------------------------ graphs


def test_constructors_take_a_shape():
    ei = np.array([[0, 4, 4], [1, 0, 1]])
    for g in (
        gnnc.Graph(ei, shape=(5, 2)),
        gnnc.Graph.from_edge_index(ei, shape=(5, 2)),
        gnnc.Graph.from_coo(ei[0], ei[1], shape=(5, 2)),
        gnnc.Graph((ei[0], ei[1]), shape=(5, 2)),
        gnnc.Graph.from_csr([0, 1, 1, 1, 1, 3], [1, 0, 1], shape=(5, 2)),
        gnnc.Graph.from_scipy(sp.coo_matrix((np.ones(3), (ei[0], ei[1])), shape=(5, 2))),
    ):
        assert (g.num_src, g.num_dst, g.num_edges, g.num_vertices, g.bipartite) == (5, 2, 3, 2, True)
        np.testing.assert_array_equal(g.deg_out(), [1, 0, 0, 0, 2])
        np.testing.assert_array_equal(g.deg_in(), [1, 2])
        assert g.out_indptr.shape == (6,) and g.in_indptr.shape == (3,)
        assert "5 sources, 2 destinations" in repr(g)
        copy = gnnc.Graph(g)
        assert (copy.num_src, copy.num_dst) == (5, 2)
        with pytest.raises(GraphError, match=r"\(num_src, num_dst\) = \(5, 2\), not \(2, 2\)"):
            gnnc.Graph(g, num_vertices=2)
    square = gnnc.Graph(ei, shape=(5, 5))
    assert not square.bipartite and square.num_vertices == 5


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: gnnc.Graph.from_coo([0, 5], [1, 0], shape=(5, 2)), r"src\[1\] = 5.*num_src is 5"),
        (lambda: gnnc.Graph.from_coo([0, 1], [1, 2], shape=(5, 2)), r"dst\[1\] = 2.*num_dst is 2"),
        (lambda: gnnc.Graph.from_coo([0], [0], num_vertices=3, shape=(3, 3)), "not both"),
        (lambda: gnnc.Graph.from_coo([0], [0], shape=(3,)), r"pair \(num_src, num_dst\)"),
        (lambda: gnnc.Graph.from_coo([0], [0], shape=(3, -1)), "num_dst must be a non-negative"),
        (lambda: gnnc.Graph.from_csr([0, 1, 2], [0, 3], shape=(2, 3)), r"indices\[1\] = 3.*num_dst is 3"),
        (lambda: gnnc.Graph.from_csr([0, 1, 2], [0, 1], shape=(1, 3)), "num_src = 1 is less than the 2 rows"),
    ],
)
def test_bad_shapes_are_graph_errors(build, message):
    with pytest.raises(GraphError, match=message):
        build()


def test_reversed_swaps_sides_and_keeps_edge_ids():
    g = gnnc.Graph.from_coo([3, 0, 3, 1], [1, 0, 1, 0], shape=(4, 2))
    r = g.reversed()
    assert (r.num_src, r.num_dst) == (2, 4) and r.reversed() is g
    np.testing.assert_array_equal(r.src, g.dst)
    np.testing.assert_array_equal(r.dst, g.src)
    np.testing.assert_array_equal(r.deg_in(), g.deg_out())


# ------------------------------------------------------------------ gradients

GRAD_CASES = ["gcn", "gcn_norm", "gin", "sage_mean", "edgy"]


def _fd(kernel, graph, args, name, gout):
    return numeric_grad(lambda **a: reference.evaluate(kernel, graph, **a), args, name, gout)


@pytest.mark.parametrize("name", slow_except(GRAD_CASES, "gcn"))
@pytest.mark.parametrize("sides", [(6, 3), (3, 6)])
def test_gradients_on_bipartite_graphs_match_finite_differences(name, sides):
    n_src, n_dst = sides
    _, kernel32 = _kernel(name)
    if _reads_both_sides(kernel32) and n_dst > n_src:
        n_src, n_dst = n_dst, n_src
    # duplicates (0->1 twice), isolated sources and a destination without in-edges
    src, dst = np.array([0, 0, 1, 1, 2, 0]), np.array([1, 1, 0, 2, 2, 0])
    graph = gnnc.Graph.from_coo(src, dst, shape=(n_src, n_dst))
    source = _program(_kernel(name)[0])[1].replace("f32", "f64")
    kernel = parse_and_check(source, name).kernel(name)
    rng = np.random.default_rng(7)
    args = _inputs(kernel, graph, rng, np.float64)
    gout = rng.uniform(-1, 1, size=reference.evaluate(kernel, graph, **args).shape)
    grads = compile_grad(source, name)(graph, gout=gout, **args)
    for p in kernel.params:
        if p.type.domain is None and p.type.shape == []:
            continue  # scalar parameters: not generated
        assert grads[p.name].shape == args[p.name].shape
        np.testing.assert_allclose(grads[p.name], _fd(kernel, graph, args, p.name, gout), rtol=1e-6, atol=1e-6)


def test_torch_bipartite_edge_index_and_backward():
    torch = pytest.importorskip("torch")
    import gnnc.torch as gt

    edge_index = torch.tensor([[0, 4, 4, 2], [1, 0, 1, 1]])
    graph = gt.as_graph(edge_index, size=(5, 2))
    assert (graph.num_src, graph.num_dst) == (5, 2)
    assert gt.as_graph(edge_index, size=(5, 2)) is graph
    assert not gt.as_graph(edge_index).bipartite  # without size: square, max id + 1
    conv = gt.kernel(EXAMPLES / "gin.gnn", "gin")
    x = torch.rand(5, 3, dtype=torch.float64, requires_grad=True)
    eps = torch.tensor(0.25, dtype=torch.float64)
    out = conv(edge_index, x, eps, size=(5, 2))
    assert out.shape == (2, 3)
    gout = torch.rand(2, 3, dtype=torch.float64)
    out.backward(gout)
    kernel = parse_and_check((EXAMPLES / "gin.gnn").read_text().replace("f32", "f64"), "gin").kernel("gin")
    args = {"x": x.detach().numpy().copy(), "eps": np.float64(0.25)}
    want = _fd(kernel, graph, args, "x", gout.numpy())
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ cuda emulation


@pytest.mark.parametrize("name", slow_except(["gcn", "gat", "gin", "attention"], "gat"))
@given(edges=bipartite_edge_lists(max_edges=60), seed=st.integers(0, 2**31 - 1))
def test_cuda_emulation_on_bipartite_graphs(name, edges, seed):
    src, dst, n_src, n_dst = edges
    key, kernel = _kernel(name)
    if _reads_both_sides(kernel) and n_dst > n_src:
        src, dst, n_src, n_dst = dst, src, n_dst, n_src
    graph = gnnc.Graph.from_coo(src, dst, shape=(n_src, n_dst))
    args = _inputs(kernel, graph, np.random.default_rng(seed))
    got = getattr(_emulated(key), name)(graph, **args)
    assert_matches(got, reference.evaluate(kernel, graph, **args), graph, np.float32)


@functools.cache
def _emulated(key: str):
    return gnnc.compile(_program(key)[1], target="cuda-emulation")


def test_cuda_mappings_without_a_source_sweep_refuse_bipartite_graphs():
    # the hoisted x @ W is computed per destination in the grids: no row for sources beyond them
    graph = gnnc.Graph.from_coo([0, 4, 2], [1, 0, 1], shape=(5, 2))
    x, w = np.ones((5, 5), np.float32), np.ones((5, 3), np.float32)
    with pytest.raises(ArgumentError, match=r"no source sweep.*square graph"):
        _emulated("mlp_aggr").mlp_aggr(graph, x, w)
    square = gnnc.Graph.from_coo([0, 4, 2], [1, 0, 1], num_vertices=5)
    assert_matches(
        _emulated("mlp_aggr").mlp_aggr(square, x, w),
        reference.evaluate(_kernel("mlp_aggr")[1], square, x, w),
        square,
        np.float32,
    )


@pytest.mark.parametrize("mapping", ["map thread_vertex hybrid 4", "map warp_edge hybrid 4"])
def test_hybrid_slots_cover_every_source_of_a_bipartite_graph(mapping):
    # more sources than destinations, and the busiest sources have ids beyond num_dst:
    # the slot table must be indexed by source id, not sized by the destinations
    from gnnc.graph import plans

    rng = np.random.default_rng(7)
    n_src, n_dst, n = 40, 6, 300
    src = np.where(rng.random(n) < 0.6, rng.integers(30, 34, n), rng.integers(0, n_src, n))
    graph = gnnc.Graph.from_coo(src, rng.integers(0, n_dst, n), shape=(n_src, n_dst))
    hot, slot = plans.hybrid_sources(graph, 4, 16, 48 << 10)
    assert slot.shape == (n_src,) and set(hot[1:].tolist()) == {30, 31, 32, 33}
    key, kernel = _kernel("gcn")
    compiled = gnnc.compile(_program(key)[1], target="cuda-emulation", schedule=mapping).gcn
    args = _inputs(kernel, graph, np.random.default_rng(1))
    assert_matches(compiled(graph, **args), reference.evaluate(kernel, graph, **args), graph, np.float32)
