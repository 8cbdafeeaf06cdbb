"""Relation types in the language: `W[rel(e)]`, `deg_in(v, rel(e))`, `@` by a per-edge matrix.

The numpy reference is checked against loops written out by hand and
against PyG's RGCNConv; the source errors point at the offending token.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc.api import compile_grad
from gnnc.graph import plans
from gnnc.lang import parse_and_check
from gnnc.lang.autodiff import gradient_program
from gnnc.lang.signature import kernel_signature
from gnnc.runtime import gradient as gradient_module
from tests.helpers import EXAMPLES, assert_matches, numeric_grad, slow_except
from tests.strategies import graphs, random_inputs, relation_graphs

RGCN = """kernel rgcn(x: f32[V, K], W: f32[R, K, N], root: f32[K, N]) -> f32[V, N] {
    out[v] = x[v] @ root + sum((x[u] @ W[rel(e)]) / deg_in(v, rel(e)))
}
"""

NNCONV = """kernel nnconv(x: f32[V, K], theta: f32[E, K, N]) -> f32[V, N] {
    out[v] = mean(x[u] @ theta[e])
}
"""

ATTENTION = """kernel rel_attention(q: f32[V, H, F], k: f32[V, H, F], att: f32[R, H, F]) -> f32[E, H] {
    out[e] = dot(q[v] * att[rel(e)], k[u]) / deg_out(u, rel(e))
}
"""


def _graph(seed: int = 0, v: int = 7, e: int = 30, r: int = 4) -> gnnc.Graph:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, v, e), rng.integers(0, v, e)
    # relation r - 1 has no edges
    return gnnc.Graph.from_coo(src, dst, num_vertices=v, edge_type=rng.integers(0, r - 1, e), num_relations=r)


def _arrays(seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


# ------------------------------------------------------------------ the reference


def test_reference_rgcn_by_hand():
    graph = _graph()
    x, w, root = _arrays(1, (7, 3), (4, 3, 5), (3, 5))
    got = gnnc.compile(RGCN, target="reference").rgcn(graph, x, w, root)
    want = x.astype(np.float64) @ root
    for v in range(graph.num_vertices):
        for r in range(graph.num_relations):
            edges = [i for i in range(graph.num_edges) if graph.dst[i] == v and graph.edge_type[i] == r]
            for i in edges:
                want[v] += x[graph.src[i]].astype(np.float64) @ w[r] / len(edges)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_reference_per_edge_matrix_and_relation_vectors_by_hand():
    graph = _graph(2)
    x, theta = _arrays(3, (7, 3), (30, 3, 2))
    got = gnnc.compile(NNCONV, target="reference").nnconv(graph, x, theta)
    want = np.zeros((7, 2))
    for v in range(7):
        edges = np.flatnonzero(graph.dst == v)
        for i in edges:
            want[v] += x[graph.src[i]].astype(np.float64) @ theta[i] / len(edges)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    q, k, att = _arrays(4, (7, 2, 3), (7, 2, 3), (4, 2, 3))
    got = gnnc.compile(ATTENTION, target="reference").rel_attention(graph, q, k, att)
    for i in range(graph.num_edges):
        u, v, r = graph.src[i], graph.dst[i], graph.edge_type[i]
        count = np.sum((graph.src == u) & (graph.edge_type == r))
        want_e = np.sum(q[v].astype(np.float64) * att[r] * k[u], axis=-1) / count
        np.testing.assert_allclose(got[i], want_e, rtol=1e-12)


def test_reference_matches_pyg_rgcnconv():
    torch = pytest.importorskip("torch")
    pyg = pytest.importorskip("torch_geometric.nn")
    graph = _graph(5, v=12, e=80, r=5)
    conv = pyg.RGCNConv(6, 4, num_relations=5, aggr="mean", bias=False)
    x = torch.randn(12, 6, generator=torch.Generator().manual_seed(0))
    edge_index = torch.tensor(np.stack([graph.src, graph.dst]))
    want = conv(x, edge_index, torch.tensor(graph.edge_type)).detach().numpy()
    got = gnnc.compile(RGCN, target="reference").rgcn(
        graph, x.numpy(), conv.weight.detach().numpy(), conv.root.detach().numpy()
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------- the signature


def test_signature_says_the_kernel_reads_relations():
    sig = kernel_signature(parse_and_check(RGCN).kernels[0])
    assert sig.relations
    assert [(p.name, p.domain, p.shape) for p in sig.params][1] == ("W", "R", ("K", "N"))
    assert type(sig).from_dict(sig.to_dict()) == sig
    plain = kernel_signature(parse_and_check("kernel k(x: f32[V, F]) -> f32[V, F] { out[v] = sum(x[u]) }").kernels[0])
    assert not plain.relations and "relations" not in plain.to_dict()


def test_calls_check_the_graph_and_the_relation_axis():
    module = gnnc.compile(RGCN, target="reference")
    x, w, root = _arrays(1, (7, 3), (4, 3, 5), (3, 5))
    untyped = gnnc.Graph.from_coo(_graph().src, _graph().dst, num_vertices=7)
    with pytest.raises(gnnc.ArgumentError, match=r"rgcn reads the edges' relation types \(rel\(e\)\), but the graph"):
        module.rgcn(untyped, x, w, root)
    with pytest.raises(gnnc.ArgumentError, match=r"its leading axis \(R\) has 3 entries but the graph has 4"):
        module.rgcn(_graph(), x, w[:3], root)
    degrees_only = gnnc.compile(
        "kernel k(x: f32[V, F]) -> f32[V, F] { out[v] = sum(x[u] / deg_in(v, rel(e))) }", target="reference"
    )
    with pytest.raises(gnnc.ArgumentError, match="relation types"):
        degrees_only.k(untyped, x)


# ------------------------------------------------------------ source errors


def _error(source: str) -> str:
    with pytest.raises(gnnc.SourceError) as info:
        parse_and_check(source, "t.gnn")
    return str(info.value)


def _assert_error(source: str, line: int, col: int, message: str, length: int = 1) -> None:
    text = _error(source)
    lines = text.splitlines()
    assert lines[0].startswith(f"t.gnn:{line}:{col}: error: "), text
    assert message in lines[0], text
    assert lines[1] == source.splitlines()[line - 1], text
    assert lines[2] == " " * (col - 1) + "^" + "~" * (length - 1), text


SIG = "kernel k(x: f32[V, K], W: f32[R, K, N], P: f32[K, N], a: f32[R, K]) -> f32[V, N] {\n"


@pytest.mark.parametrize(
    "body, col, message, length",
    [
        (
            "    out[v] = x[v] @ W[rel(e)]",
            21,
            "W[rel(e)] reads the relation type of an edge outside an edge context",
            9,
        ),
        ("    out[v] = sum(x[u] @ W)", 25, "'W' is a relation tensor (f32[R, K, N]): index it with the edge's", 1),
        ("    out[v] = sum(x[u] @ W[e])", 25, "read it at the edge's relation type, W[rel(e)], not W[e]", 4),
        ("    out[v] = sum(x[u] @ W[u])", 25, "read it at the edge's relation type, W[rel(e)], not W[u]", 4),
        ("    out[v] = sum(x[u] @ P[rel(e)])", 25, "rel(e) indexes a relation tensor, declared with a leading R", 9),
        ("    out[v] = sum(x[u] @ (x[rel(e)] @ P))", 26, "'x' is a vertex tensor: rel(e) indexes a relation tensor", 9),
        ("    out[v] = sum(x[u] * rel(e)) @ P", 25, "rel(e) is the edge's relation type: it indexes a relation", 3),
        ("    out[v] = (x[v] / deg_in(v, rel(e))) @ P", 22, "deg_in(v, rel(e)) reads the relation type of an edge", 6),
        ("    out[v] = sum(x[u] / deg_in(u, rel(e))) @ P", 25, "deg_in(v, rel(e)) (in-edges of the destination)", 6),
        ("    out[v] = sum(x[u] / deg_out(v, rel(e))) @ P", 25, "or deg_out(u, rel(e)) (out-edges of the source)", 7),
        ("    out[v] = sum(x[u] / deg_in(v, e)) @ P", 35, "the second argument of deg_in is the edge's relation", 1),
        ("    out[v] = sum(x[u] @ W[rel(u)])", 31, "rel takes the edge index e, found 'u'", 1),
        ("    out[v] = sum(x[u] @ (2.0 * P))", 30, "or an edge value of shape [K, N] (W[rel(e)], theta[e])", 1),
        ("    out[v] = sum(x[u] @ a[rel(e)])", 25, "the right operand of '@' must be a 2-D parameter matrix", 9),
        ("    out[v] = sum(x[v] @ W[rel(e)] @ W[rel(e)])", 35, "'@': the last axis of the left operand [N]", 1),
    ],
)
def test_relation_errors(body, col, message, length):
    _assert_error(SIG + body + "\n}\n", 2, col, message, length)


def test_relation_axis_errors_in_signatures():
    _assert_error(
        "kernel k(x: f32[V, K], t: f32[K, R]) -> f32[V, K] { out[v] = sum(x[u]) }",
        1,
        34,
        "'R' may only be the first axis of a type (it makes a relation tensor)",
    )
    _assert_error(
        "kernel k(x: f32[V, K], t: f32[R, K]) -> f32[R, K] { out[v] = sum(x[u]) }",
        1,
        41,
        "result 'out' must be a vertex or edge tensor",
        9,
    )
    _assert_error(
        "kernel k(x: f32[V, K]) -> f32[V, K] {\n    h[v] = sum(x[u])\n    out[v] = sum(x[u] * h[rel(e)])\n}\n",
        3,
        25,
        "'h' is a vertex value: rel(e) indexes a relation tensor parameter",
        9,
    )


def test_relation_values_are_edge_values():
    program = parse_and_check(RGCN + NNCONV + ATTENTION)
    rgcn = program.kernels[0].body[0].value
    edge_term = rgcn.rhs.operand  # (x[u] @ W[rel(e)]) / deg_in(v, rel(e))
    assert edge_term.gtype == "E" and edge_term.shape == ("N",)
    assert edge_term.lhs.rhs.gtype == "E" and edge_term.lhs.rhs.shape == ("K", "N")
    assert edge_term.rhs.gtype == "E" and edge_term.rhs.relation
    nnconv = program.kernels[1].body[0].value.operand
    assert nnconv.gtype == "E" and nnconv.shape == ("N",)
    assert program.kernels[2].body[0].value.shape == ("H",)


# ------------------------------------------------------------- compiled kernels


KERNELS = {"rgcn": RGCN, "nnconv": NNCONV, "rel_attention": ATTENTION}
KERNEL_DIMS = {"K": 5, "N": 17, "H": 2, "F": 3}


@functools.cache
def _compiled(name: str, schedule: str | None = None, target: str = "cpu"):
    return gnnc.compile(KERNELS[name], schedule=schedule, target=target)


@pytest.mark.parametrize("name", sorted(KERNELS))
@given(graph=relation_graphs(), threads=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=15)
def test_compiled_relation_kernels_match_the_reference(name, graph, threads, seed):
    kernel = getattr(_compiled(name), name)
    inputs = random_inputs(kernel.signature, graph, KERNEL_DIMS, np.float32, seed)
    got = kernel(graph, threads=threads, **inputs)
    want = getattr(gnnc.compile(KERNELS[name], target="reference"), name)(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


@pytest.mark.parametrize(
    "schedule",
    [
        "relations per_edge",  # one product per edge, in the walk
        "specialize K 5 N 17",  # segment-matmul: tiles of 4 pairs of one relation
        "specialize K 5 N 45",  # two 16-wide slices of a pair's row, then one overlapping the second
        "relations compact\nvectorize 8\nsort degree",  # pairs row by row, a destination order
    ],
)
@given(graph=relation_graphs(), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10)
def test_every_form_of_the_transform_matches_the_reference(schedule, graph, seed):
    kernel = _compiled("rgcn", schedule).rgcn
    assert bool(kernel._abi.pairs) == ("per_edge" not in schedule)
    assert (kernel._abi.pair_rows is not None) == ("specialize" in schedule)
    dims = {**KERNEL_DIMS, "N": 45} if "N 45" in schedule else KERNEL_DIMS
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, seed)
    want = gnnc.compile(RGCN, target="reference").rgcn(graph, **inputs)
    assert_matches(kernel(graph, threads=2, **inputs), want, graph, np.float32)


SCORES = """kernel scores(xs: f32[V, K], xd: f32[V, K], Wv: f32[R, K, M], Wq: f32[R, K, A], Wk: f32[R, K, A], J: f32[A, M]) -> f32[V, M] {
    s[e] = leaky_relu((xd[v] @ Wq[rel(e)]) + (xs[u] @ Wk[rel(e)]), 0.2)
    alpha[e] = softmax(s[e])
    out[v] = sum((alpha[e] @ J) * (xs[u] @ Wv[rel(e)]))
}
"""


@pytest.mark.parametrize("heads", [1, 2, 4, 6])
@given(graph=relation_graphs(), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=8)
def test_narrow_and_wide_transforms_of_one_side_share_its_tiles(heads, graph, seed):
    """RGAT's shape with its sizes compiled in: the source side's message transform (M = 17,
    tiles of 4 pairs) and score transform (A columns: tiles of one pair for 2 to 4) step
    through the same tiles; every pair row of both is written (a narrow product once
    computed only the first row of each tile)."""
    kernel = gnnc.compile(SCORES, schedule=f"specialize K 5 M 17 A {heads}").scores
    assert kernel._abi.pair_rows == 4
    dims = {"K": 5, "M": 17, "A": heads}
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, seed)
    want = gnnc.compile(SCORES, target="reference").scores(graph, **inputs)
    assert_matches(kernel(graph, threads=2, **inputs), want, graph, np.float32)


NARROW = """kernel narrow(xs: f32[V, K], Wk: f32[R, K, A], J: f32[A, M]) -> f32[V, M] {
    out[v] = sum((xs[u] @ Wk[rel(e)]) @ J)
}
"""


@pytest.mark.parametrize(
    "cpu, rows", [("znver5", 1), ("znver4", 1), ("rocketlake", 4), ("sapphirerapids", 4), ("x86-64-v4", 4)]
)
def test_a_narrow_transforms_tiles_follow_the_target_cpus_codegen(monkeypatch, cpu, rows):
    """LLVM's Zen tuning gathers a packed tile's rows (slow there: tiles of one pair); every
    other target permutes them, and 4 pairs a tile win (docs/design/heterogeneous.md)."""
    from gnnc.driver import compiler
    from gnnc.target.cpu import codegen

    host = codegen.resolve_cpu("native")
    monkeypatch.setattr(codegen, "resolve_cpu", lambda level: dataclasses.replace(host, name=cpu))
    options = compiler.CompileOptions(schedule="specialize K 128 A 4 M 16")
    stages = compiler.compile_source(NARROW, "narrow.gnn", options, stop_after="graph").stages
    assert f'"src" rows {rows} :' in stages["segment-matmul"]


@given(graph=graphs(), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10)
def test_one_relation_is_the_homogeneous_kernel(graph, seed):
    """With R = 1, R-GCN is a mean aggregation of x[u] @ W plus the root term."""
    typed = gnnc.Graph(graph, edge_type=np.zeros(graph.num_edges, np.int64), num_relations=1)
    homogeneous = gnnc.compile(
        "kernel k(x: f32[V, K], W: f32[K, N], root: f32[K, N]) -> f32[V, N] {\n"
        "    out[v] = x[v] @ root + mean(x[u] @ W)\n}\n"
    ).k
    rng = np.random.default_rng(seed)
    x, w, root = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((graph.num_vertices, 5), (1, 5, 17), (5, 17)))
    got = _compiled("rgcn").rgcn(typed, x, w, root)
    assert_matches(got, homogeneous(graph, x, w[0], root).astype(np.float64), graph, np.float32)


def test_compiled_kernels_refuse_graphs_without_types():
    graph = _graph()
    untyped = gnnc.Graph.from_coo(graph.src, graph.dst, num_vertices=7)
    x, w, root = _arrays(1, (7, 3), (4, 3, 5), (3, 5))
    with pytest.raises(gnnc.ArgumentError, match="relation types"):
        _compiled("rgcn").rgcn(untyped, x, w, root)


# -------------------------------------------------------------------- gradients

RGAT = (EXAMPLES / "rgat.gnn").read_text()
GRAD_KERNELS = {"rgcn": RGCN, "rgat": RGAT, "nnconv": NNCONV, "rel_attention": ATTENTION}
GRAD_DIMS = {"K": 3, "N": 4, "H": 2, "F": 3}


def _f64(source: str) -> str:
    return source.replace("f32", "f64")


def _inputs(kernel, graph: gnnc.Graph, dtype, seed: int, scale: float = 0.5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = {"V": [graph.num_vertices], "E": [graph.num_edges], "R": [graph.num_relations], None: []}
    return {
        p.name: (rng.standard_normal(rows[p.domain] + [GRAD_DIMS[d] for d in p.shape]) * scale).astype(dtype)
        for p in kernel.signature.params
    }


@pytest.mark.parametrize("name", slow_except(sorted(GRAD_KERNELS), "rgcn", "rgat"))
def test_gradients_match_finite_differences(name):
    source = _f64(GRAD_KERNELS[name])
    graph = _graph(11, v=9, e=40)
    forward = getattr(gnnc.compile(source, target="reference"), name)
    args = _inputs(forward, graph, np.float64, 0)
    gout = np.random.default_rng(1).standard_normal(forward(graph, **args).shape)
    compiled = compile_grad(source, name)(graph, gout=gout, **args)
    reference = compile_grad(source, name, target="reference")(graph, gout=gout, **args)
    assert set(compiled) == set(reference) == set(args)
    for p in args:
        want = numeric_grad(lambda **a: forward(graph, **a), args, p, gout)
        np.testing.assert_allclose(reference[p], want, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(compiled[p], reference[p], rtol=1e-10, atol=1e-12)


def test_relation_weight_gradient_is_one_product_per_relation():
    """dW of x[u] @ W[rel(e)]: an edge kernel of adjoints and the factor x at the sources, no
    [K, N] partial per destination or edge."""
    program = gradient_program(parse_and_check(RGCN).kernels[0])
    (w_kernel,) = [k for k in program.kernels if k.wrt == "W"]
    assert (w_kernel.relation, w_kernel.factor, w_kernel.reverse) == ("u", "x", False)
    assert "-> f32[E, N]" in program.source and "outer" not in program.source
    assert program.relation_transposes == ["W"]
    assert "W_T__: f32[R, N, K]" in program.source
    # the input gradient on the reversed graph reads the count of the same (vertex, relation) pair
    assert "sum(((((gout__[u]) / deg_out(u, rel(e)))) @ W_T__[rel(e)]))" in program.source
    # its adjoints summed per (source, relation) pair on the pair graph, read at the forward
    # destination (its source there), where that pair's count is deg_out(u, rel(e))
    assert w_kernel.pairs == "rgcn__grad_W_rel_pairs"
    assert "kernel rgcn__grad_W_rel_pairs(gout__: f32[V, N]) -> f32[V, N]" in program.pair_source
    assert "out[v] = sum(((gout__[u]) / deg_out(u, rel(e))))" in program.pair_source


def test_a_pair_kernel_needs_an_adjoint_without_the_pairs_own_end():
    """An adjoint that reads the source (`y[u]`) cannot be summed per (source, relation) pair on
    the pair graph: the edge kernel writes it and the runtime sums it, as the reference does."""
    source = """kernel scaled(x: f32[V, K], y: f32[V, N], W: f32[R, K, N]) -> f32[V, N] {
    out[v] = sum((x[u] @ W[rel(e)]) * y[u])
}
"""
    program = gradient_program(parse_and_check(source).kernels[0])
    assert [k.pairs for k in program.kernels if k.relation in ("u", "v")] == [""]
    assert program.pair_source == ""
    graph = _graph(6)
    args = _inputs(gnnc.compile(source, target="reference").scaled, graph, np.float32, 7)
    gout = np.random.default_rng(8).standard_normal((graph.num_vertices, GRAD_DIMS["N"])).astype(np.float32)
    got = compile_grad(source, "scaled")(graph, gout=gout, **args)
    want = compile_grad(source, "scaled", target="reference")(graph, gout=gout, **args)
    for p in args:
        assert_matches(got[p], want[p], graph, np.float32)


def test_rgat_scores_adjoint_is_one_intermediate_and_its_weights_take_pair_kernels():
    """RGAT's leaky ReLU reads a product at both ends: its adjoint is computed once (an edge
    intermediate), so no kernel recomputes the products for the slope, and the weights'
    adjoints read no end: each takes a pair kernel."""
    program = gradient_program(parse_and_check((EXAMPLES / "rgat.gnn").read_text()).kernels[0])
    relation = [k for k in program.kernels if k.relation in ("u", "v")]
    assert [k.pairs for k in relation] == [f"{k.name}_pairs" for k in relation] and len(relation) == 2
    readers = [p for p in program.source.split("kernel ")[1:] if "step(" in p]
    assert len(readers) == 1  # the intermediate's own kernel


class _Recording(gradient_module.HostArrays):
    """Host arrays that record the kernels run, and may turn the pair kernels off."""

    def __init__(self, pair_sums: bool) -> None:
        self.pair_sums = pair_sums
        self.ran: list[tuple[str, tuple[int, ...]]] = []

    def run(self, kernel, graph, named, threads):
        out = super().run(kernel, graph, named, threads)
        self.ran.append((kernel.name, np.shape(out)))
        return out


@pytest.mark.parametrize("bipartite", [False, True])
def test_relation_weight_gradient_runs_the_pair_kernel_and_no_edge_tensor(bipartite):
    """rgcn's dW through the pair kernel equals the edge kernel's rows summed by the runtime
    and the reference, and no [E, N] tensor of adjoints is made."""
    rng = np.random.default_rng(5)
    shape = (40, 15) if bipartite else (40, 40)
    graph = gnnc.Graph.from_coo(
        rng.integers(0, shape[0], 300), rng.integers(0, shape[1], 300), shape=shape, edge_type=rng.integers(0, 4, 300)
    )
    forward = gnnc.compile(RGCN, target="reference").rgcn
    args = _inputs(forward, graph, np.float32, 2)
    args["x"] = rng.standard_normal((shape[0], GRAD_DIMS["K"])).astype(np.float32)
    gout = rng.standard_normal((shape[1], GRAD_DIMS["N"])).astype(np.float32)
    grad = compile_grad(RGCN, "rgcn")
    fused, edges = _Recording(True), _Recording(False)
    got = grad.with_arrays(fused)(graph, gout=gout, **args)
    old = grad.with_arrays(edges)(graph, gout=gout, **args)
    want = compile_grad(RGCN, "rgcn", target="reference")(graph, gout=gout, **args)
    assert ("rgcn__grad_W_rel_pairs", (plans.relation_pairs(graph, "src").num_pairs, GRAD_DIMS["N"])) in fused.ran
    assert all(s[0] != graph.num_edges for _, s in fused.ran)
    assert ("rgcn__grad_W_rel", (graph.num_edges, GRAD_DIMS["N"])) in edges.ran
    for p in args:
        assert_matches(got[p], want[p], graph, np.float32)
        np.testing.assert_allclose(got[p], old[p], rtol=1e-5, atol=1e-5)


RGCN_MEAN = """kernel rgcn_mean(x: f32[V, K], W: f32[R, K, N]) -> f32[V, N] {
    out[v] = sum((x[u] @ W[rel(e)]) / deg_in(v, rel(e)))
}
"""


@pytest.mark.parametrize("bipartite", [False, True])
@pytest.mark.parametrize("wanted", [None, ("x",)])
def test_input_gradient_through_the_weights_pair_sums(bipartite, wanted):
    """dx of `x[u] @ W[rel(e)]` as one row per (source, relation) pair times W^T[r], summed per
    vertex (`via_pairs`): the pair sums are W's gradient's own, computed once, also when W
    needs no gradient (wanted x alone); equal to the reversed kernel's per-edge products and
    to the reference."""
    program = gradient_program(parse_and_check(RGCN_MEAN, "<t>").kernels[0])
    (x_kernel,) = [k for k in program.kernels if k.wrt == "x"]
    assert x_kernel.via_pairs == (("rgcn_mean__grad_W_rel_pairs", "rgcn_mean__grad_x_src_pairs_W", "W", "u"),)
    assert "out[v] = sum(s[e] @ W_T__[rel(e)])" in program.pair_source
    rng = np.random.default_rng(9)
    shape = (40, 15) if bipartite else (40, 40)
    graph = gnnc.Graph.from_coo(
        rng.integers(0, shape[0], 300), rng.integers(0, shape[1], 300), shape=shape, edge_type=rng.integers(0, 5, 300)
    )
    args = {
        "x": rng.standard_normal((shape[0], GRAD_DIMS["K"])).astype(np.float32),
        "W": rng.standard_normal((5, GRAD_DIMS["K"], GRAD_DIMS["N"])).astype(np.float32),
    }
    gout = rng.standard_normal((shape[1], GRAD_DIMS["N"])).astype(np.float32)
    grad = compile_grad(RGCN_MEAN, "rgcn_mean")
    if wanted:
        grad = grad.restricted_to(wanted)
    pairs, edges = _Recording(True), _Recording(False)
    got = grad.with_arrays(pairs)(graph, gout=gout, **args)
    old = grad.with_arrays(edges)(graph, gout=gout, **args)
    want = compile_grad(RGCN_MEAN, "rgcn_mean", target="reference")(graph, gout=gout, **args)
    ran = [name for name, _ in pairs.ran]
    assert ran.count("rgcn_mean__grad_W_rel_pairs") == 1
    assert ("rgcn_mean__grad_x_src_pairs_W", (shape[0], GRAD_DIMS["K"])) in pairs.ran
    assert "rgcn_mean__grad_x_src" not in ran and "rgcn_mean__grad_x_src" in [n for n, _ in edges.ran]
    for p in wanted or args:
        assert_matches(got[p], want[p], graph, np.float32)
        np.testing.assert_allclose(got[p], old[p], rtol=1e-5, atol=1e-5)


def test_rgat_input_gradients_through_pair_sums():
    """RGAT's xs (its message and key transforms) and xd (its query) take their gradients
    through the weights' pair sums, equal to the per-edge kernels and the reference."""
    source = (EXAMPLES / "rgat.gnn").read_text()
    program = gradient_program(parse_and_check(source, "<t>").kernels[0])
    via = {k.wrt: {w for _, _, w, _ in k.via_pairs} for k in program.kernels if k.via_pairs}
    assert via and all(via.values())
    graph = _graph(11, v=30, e=200, r=4)
    forward = gnnc.compile(source, target="reference").rgat
    args = _inputs(forward, graph, np.float32, 6)
    gout = np.random.default_rng(6).standard_normal(forward(graph, **args).shape).astype(np.float32)
    grad = compile_grad(source, "rgat")
    pairs, edges = _Recording(True), _Recording(False)
    got = grad.with_arrays(pairs)(graph, gout=gout, **args)
    old = grad.with_arrays(edges)(graph, gout=gout, **args)
    want = compile_grad(source, "rgat", target="reference")(graph, gout=gout, **args)
    assert any("_pairs_" in name for name, _ in pairs.ran)
    for p in args:
        assert_matches(got[p], want[p], graph, np.float32)
        np.testing.assert_allclose(got[p], old[p], rtol=1e-4, atol=1e-5)


def test_large_pair_sums_are_kept_for_the_next_call_of_their_shape(monkeypatch):
    """Pair sums above KEEP_PAIR_SUMS_BYTES go into an array kept between calls (no fresh
    pages each epoch); each call's gradient is still its own, for any shape, and a call on
    another graph keeps its own array."""
    rng = np.random.default_rng(7)
    graphs = [
        gnnc.Graph.from_coo(
            rng.integers(0, 40, e), rng.integers(0, 40, e), shape=(40, 40), edge_type=rng.integers(0, 4, e)
        )
        for e in (300, 200)
    ]
    grad = compile_grad(RGCN, "rgcn")
    forward = gnnc.compile(RGCN, target="reference").rgcn

    def call(graph, seed):
        args = _inputs(forward, graph, np.float32, seed)
        gout = np.random.default_rng(seed).standard_normal((40, GRAD_DIMS["N"])).astype(np.float32)
        return grad(graph, gout=gout, **args)

    monkeypatch.setattr(gradient_module, "KEEP_PAIR_SUMS_BYTES", 1 << 62)
    fresh = [call(g, seed) for g in graphs for seed in (1, 2)]
    assert not grad._kept._arrays
    monkeypatch.setattr(gradient_module, "KEEP_PAIR_SUMS_BYTES", 1)
    first = call(graphs[0], 1)
    ((key, kept),) = grad._kept._arrays.items()
    assert key[1] == (plans.relation_pairs(graphs[0], "src").num_pairs, GRAD_DIMS["N"])
    second = call(graphs[0], 2)
    assert next(iter(grad._kept._arrays.values())) is kept  # written again, not allocated
    others = [call(graphs[1], seed) for seed in (1, 2)]
    assert len(grad._kept._arrays) == 2
    for got, want in zip([first, second, *others], fresh):
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


@given(graph=relation_graphs(max_vertices=15, max_edges=60), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=8)
def test_f32_gradients_match_the_reference_on_random_graphs(graph, seed):
    for name in ("rgcn", "rgat"):
        forward = getattr(gnnc.compile(GRAD_KERNELS[name], target="reference"), name)
        args = _inputs(forward, graph, np.float32, seed)
        gout = np.random.default_rng(seed).uniform(-1, 1, forward(graph, **args).shape).astype(np.float32)
        got = compile_grad(GRAD_KERNELS[name], name)(graph, gout=gout, **args)
        want = compile_grad(GRAD_KERNELS[name], name, target="reference")(graph, gout=gout, **args)
        for p in args:
            assert got[p].dtype == np.float32 and got[p].shape == args[p].shape
            assert_matches(got[p], want[p], graph, np.float32)


def test_gradient_of_a_relation_matrix_reading_both_ends_is_refused():
    source = "kernel k(x: f32[V, K], W: f32[R, K, N]) -> f32[V, N] {\n    out[v] = sum((x[u] * x[v]) @ W[rel(e)])\n}\n"
    with pytest.raises(gnnc.CompileError, match="the gradient of the relation tensor 'W'"):
        compile_grad(source, "k")


# ---------------------------------------------------------------- PyTorch and PyG


def test_torch_kernel_matches_pyg_rgcnconv_forward_and_backward():
    """gnnc.torch's rgcn with PyG's RGCNConv(aggr="mean") weights: the same outputs and gradients."""
    torch = pytest.importorskip("torch")
    pyg = pytest.importorskip("torch_geometric.nn")
    import gnnc.torch as gt

    graph = _graph(7, v=15, e=90, r=5)
    torch.manual_seed(0)
    conv = pyg.RGCNConv(6, 4, num_relations=5, aggr="mean", bias=False).double()
    x = torch.randn(15, 6, dtype=torch.float64, requires_grad=True)
    edge_index, edge_type = torch.tensor(np.stack([graph.src, graph.dst])), torch.tensor(graph.edge_type)
    want = conv(x, edge_index, edge_type)
    gout = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, (x, conv.weight, conv.root), gout)

    kernel = gt.kernel(EXAMPLES / "rgcn.gnn", "rgcn")
    weight, root = (conv.weight.detach().clone().requires_grad_(), conv.root.detach().clone().requires_grad_())
    x2 = x.detach().clone().requires_grad_()
    got = kernel(edge_index, x2, weight, root, edge_type=edge_type)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    got_grads = torch.autograd.grad(got, (x2, weight, root), gout)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
    # a typed gnnc.Graph brings its own types
    torch.testing.assert_close(kernel(graph, x2, weight, root), want, rtol=1e-10, atol=1e-10)


def test_torch_kernel_relation_arguments_are_checked():
    torch = pytest.importorskip("torch")
    import gnnc.torch as gt

    graph = _graph()
    rgcn, gcn = gt.kernel(EXAMPLES / "rgcn.gnn", "rgcn"), gt.kernel(EXAMPLES / "gcn.gnn", "gcn")
    edge_index = torch.tensor(np.stack([graph.src, graph.dst]))
    x, w, root = (torch.tensor(a) for a in _arrays(1, (7, 3), (4, 3, 5), (3, 5)))
    with pytest.raises(gnnc.ArgumentError, match=r"reads the edges' relation types \(rel\(e\)\): pass edge_type="):
        rgcn(edge_index, x, w, root)
    with pytest.raises(gnnc.ArgumentError, match="does not read relation types"):
        gcn(edge_index, x, torch.ones(30), edge_type=torch.tensor(graph.edge_type))
    with pytest.raises(gnnc.ArgumentError, match="edge_type must have one relation type per edge"):
        rgcn(edge_index, x, w, root, edge_type=torch.zeros(3, dtype=torch.int64))
    with pytest.raises(gnnc.ArgumentError, match=r"its leading axis \(R\) has 4 entries but the graph has 5"):
        rgcn(edge_index, x, w, root, edge_type=torch.tensor(graph.edge_type), num_relations=5)


# -------------------------------------------------------------------- the cuda target

#: Every cuda mapping, with grouping, tiling, lanes and hybrid staging.
MAPPINGS = (
    "map thread_vertex",
    "map thread_vertex group 3",
    "map warp_vertex",
    "map warp_vertex group 2 tile 4",
    "map warp_vertex lanes 8",
    "map thread_edge",
    "map thread_edge group 4",
    "map warp_edge",
    "map warp_edge lanes 4 group 2",
    "map thread_vertex hybrid 4",
    "map thread_edge group 2 hybrid 8",
)
EXAMPLE_DIMS = {"K": 5, "N": 17}


@functools.cache
def _example(name: str, schedule: str | None = None, target: str = "cpu"):
    try:
        return gnnc.compile(EXAMPLES / f"{name}.gnn", schedule=schedule, target=target)
    except gnnc.CompileError as exc:
        return exc


@pytest.mark.parametrize("mapping", slow_except(MAPPINGS, "map thread_vertex", "map warp_edge lanes 4 group 2"))
@pytest.mark.parametrize("name", ["rgcn", "rgat"])
@given(graph=relation_graphs(max_vertices=30, max_edges=150), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=5)
def test_emulated_cuda_mappings_match_the_reference(name, mapping, graph, seed):
    module = _example(name, mapping, "cuda-emulation")
    if isinstance(module, gnnc.CompileError):
        # rgat's scores read every column of x[u] @ W[rel(e)], which warp lanes split
        assert name == "rgat" and "warp_" in mapping, str(module)
        assert "read at feature indices other than the ones a lane owns" in str(module)
        return
    kernel = getattr(module, name)
    inputs = random_inputs(kernel.signature, graph, EXAMPLE_DIMS, np.float32, seed)
    want = getattr(gnnc.compile(EXAMPLES / f"{name}.gnn", target="reference"), name)(graph, **inputs)
    assert_matches(kernel(graph, **inputs), want, graph, np.float32)


@pytest.mark.parametrize("mapping", slow_except(MAPPINGS, "map warp_vertex", "map thread_edge group 2 hybrid 8"))
def test_emulated_cuda_gradients_match_the_reference(mapping):
    graph = _graph(3, v=12, e=60)
    forward = gnnc.compile(RGCN, target="reference").rgcn
    args = _inputs(forward, graph, np.float32, 5)
    gout = np.random.default_rng(2).uniform(-1, 1, forward(graph, **args).shape).astype(np.float32)
    source = RGCN + f"schedule rgcn for cuda {{ {mapping} }}\n"
    got = compile_grad(source, "rgcn", target="cuda-emulation")(graph, gout=gout, **args)
    want = compile_grad(RGCN, "rgcn", target="reference")(graph, gout=gout, **args)
    for p in args:
        assert_matches(got[p], want[p], graph, np.float32)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) not on PATH")
@pytest.mark.parametrize("mapping", slow_except(MAPPINGS, "map thread_vertex", "map warp_edge"))
def test_rgcn_and_its_gradient_assemble_for_several_architectures(mapping):
    from gnnc.driver import compiler
    from gnnc.target.cuda import codegen

    sources = {"rgcn": RGCN, **{k.name: k.source for k in _gradient_kernels()}}
    for name, source in sources.items():
        options = compiler.CompileOptions(target="cuda", schedule=mapping)
        try:
            result = compiler.compile_source(source, f"{name}.gnn", options, stop_after="nvvm")
        except gnnc.CompileError as exc:
            if "hybrid" in mapping:  # the weight's edge kernel reads no source rows to stage
                assert name == "rgcn__grad_W_rel" and "read no source rows" in str(exc), str(exc)
                continue
            # the input gradient's (gout[u] / c) @ W^T: a quotient's row the warp lanes split
            # (its bipartite part, or the square graphs' kernel fusing both parts)
            assert name in ("rgcn__grad_x_src", "rgcn__grad_x") and "warp_" in mapping, str(exc)
            continue
        ir_text = result.stages["translate-to-nvvm"]
        for arch in ("sm_75", "sm_80", "sm_90"):
            _, ptx = codegen.optimize_and_emit_ptx(ir_text, arch)
            assert ".entry gnnc_" in ptx and "call.uni" not in ptx
            codegen.ptxas(ptx, arch)


@dataclasses.dataclass(frozen=True)
class _Source:
    name: str
    source: str


def _gradient_kernels() -> list[_Source]:
    """rgcn's gradient kernels, each as a source of its own (the input and weight gradients)."""
    program = gradient_program(parse_and_check(RGCN).kernels[0])
    pieces = program.source.split("\nkernel ")
    texts = [pieces[0]] + ["kernel " + p for p in pieces[1:]]
    return [_Source(t.split("(")[0].split()[-1], t) for t in texts if "rel(e)" in t]


# ------------------------------------------------- pairs or edges: the runtime's decision


def test_pairs_pay_rule():
    from gnnc.autotune.heuristic import PAIRS_MIN_SAVING, pairs_pay

    e = 1000
    # one transform: pairs pay up to P / E = (K - 12) / (K + 12)
    assert pairs_pay(e, [(680, 64, 32)]) and not pairs_pay(e, [(700, 64, 32)])
    assert pairs_pay(e, [(450, 32, 32)]) and not pairs_pay(e, [(500, 32, 32)])
    assert not pairs_pay(e, [(10, 12, 32)])
    # several are summed: rgat's source pairs pay for its destination pairs
    assert pairs_pay(e, [(100, 64, 32), (800, 64, 32)])
    assert PAIRS_MIN_SAVING == 12


def _typed(v: int, e: int, r: int, seed: int) -> gnnc.Graph:
    rng = np.random.default_rng(seed)
    return gnnc.Graph.from_coo(
        rng.integers(0, v, e), rng.integers(0, v, e), num_vertices=v, edge_type=rng.integers(0, r, e), num_relations=r
    )


@pytest.mark.parametrize(
    "v, r, k, form",
    [
        (500, 2, 32, "compact"),  # 16K edges on 1000 (source, relation) pairs: P / E = 0.06
        (20000, 50, 8, "per_edge"),  # pairs as many as edges, a narrow transform
    ],
)
def test_the_runtime_decides_pairs_or_edges_per_graph(v, r, k, form):
    from gnnc.autotune.decision import decide
    from gnnc.graph import plans

    graph = _typed(v, 1 << 14, r, 0)
    kernel = gnnc.compile(EXAMPLES / "rgcn.gnn").rgcn
    dims = {"K": k, "N": 8}
    decided = decide(kernel, graph, dims, 2)
    # the pairs (an edge-to-pair map of E int64) are built for a kernel that runs per pair only
    assert (("relation_pairs", "src") in graph.plans) == (form == "compact")
    ratio = plans.relation_pairs(graph, "src").num_pairs / graph.num_edges
    assert plans.relation_pair_count(graph, "src") == plans.relation_pairs(graph, "src").num_pairs
    assert (ratio < 0.1) == (form == "compact")
    assert ("relations per_edge" in (decided.schedule or "")) == (form == "per_edge"), decided.reason
    runs = decided.kernel()
    assert runs._abi.pairs == (["src"] if form == "compact" else [])
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, 1)
    want = gnnc.compile(EXAMPLES / "rgcn.gnn", target="reference").rgcn(graph, **inputs)
    assert_matches(kernel(graph, **inputs), want, graph, np.float32)


def test_a_given_relations_directive_is_not_second_guessed():
    from gnnc.autotune.decision import decide

    graph = _typed(20000, 50, 8, 0)
    kernel = gnnc.compile(EXAMPLES / "rgcn.gnn", schedule="relations compact").rgcn
    decided = decide(kernel, graph, {"K": 8, "N": 8}, 2)
    assert decided.kernel() is kernel and kernel._abi.pairs == ["src"]
    per_edge = gnnc.compile(EXAMPLES / "rgcn.gnn", schedule="relations per_edge").rgcn
    assert per_edge._abi.pairs == [] and not per_edge._abi.temps


def test_the_relations_directive_is_checked():
    with pytest.raises(gnnc.SourceError, match="expected 'compact' or 'per_edge' after 'relations'"):
        gnnc.compile(RGCN + "schedule rgcn for cpu { relations diagonal }\n")


# ----------------------------------------------- R-GCN's basis and block-diagonal weights

RGCN_BLOCKS = """kernel rgcn_blocks(x: f32[V, B, Kb], W: f32[R, B, Kb, Nb]) -> f32[V, B, Nb] {
    out[v] = sum((x[u] @ W[rel(e)]) / deg_in(v, rel(e)))
}
"""


@pytest.mark.parametrize("target", ["cpu", "cuda-emulation"])
def test_block_diagonal_weights_match_pyg(target):
    """PyG's RGCNConv(num_blocks=B): a matrix per block of x's features, as `@` by a matrix per
    leading index (x viewed [V, B, K / B]); the root weight stays a dense product beside it."""
    torch = pytest.importorskip("torch")
    pyg = pytest.importorskip("torch_geometric.nn")
    graph = _graph(13, v=15, e=90, r=5)
    blocks, kb, nb = 2, 3, 2
    torch.manual_seed(0)
    conv = pyg.RGCNConv(blocks * kb, blocks * nb, num_relations=5, num_blocks=blocks, aggr="mean", bias=False)
    conv = conv.double()
    x = torch.randn(15, blocks * kb, dtype=torch.float64, requires_grad=True)
    edge_index, edge_type = torch.tensor(np.stack([graph.src, graph.dst])), torch.tensor(graph.edge_type)
    want = conv(x, edge_index, edge_type)
    gout = torch.randn_like(want)
    want_x, want_w = torch.autograd.grad(want, (x, conv.weight), gout)
    source = _f64(RGCN_BLOCKS)
    xb, w, root = x.detach().numpy().reshape(15, blocks, kb), conv.weight.detach().numpy(), conv.root.detach().numpy()
    got = gnnc.compile(source, target=target).rgcn_blocks(graph, xb, w).reshape(15, -1)
    np.testing.assert_allclose(got + x.detach().numpy() @ root, want.detach().numpy(), rtol=1e-10, atol=1e-12)
    grads = compile_grad(source, "rgcn_blocks", target=target)(graph, xb, w, gout=gout.numpy().reshape(15, blocks, nb))
    got_x = grads["x"].reshape(15, -1) + gout.numpy() @ root.T
    np.testing.assert_allclose(got_x, want_x.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads["W"], want_w.numpy(), rtol=1e-10, atol=1e-12)


def test_basis_decomposition_is_the_dense_weight():
    """PyG's RGCNConv(num_bases=B): W[r] = sum_b comp[r, b] basis[b], formed before the call
    (R x B x K x N multiply-adds); the kernel then transforms per (source, relation) pair."""
    torch = pytest.importorskip("torch")
    pyg = pytest.importorskip("torch_geometric.nn")
    import gnnc.torch as gt

    graph = _graph(17, v=15, e=90, r=5)
    torch.manual_seed(1)
    conv = pyg.RGCNConv(6, 4, num_relations=5, num_bases=3, aggr="mean", bias=False).double()
    x = torch.randn(15, 6, dtype=torch.float64)
    edge_index, edge_type = torch.tensor(np.stack([graph.src, graph.dst])), torch.tensor(graph.edge_type)
    want = conv(x, edge_index, edge_type)
    weight = (conv.comp @ conv.weight.view(3, -1)).view(5, 6, 4)
    got = gt.kernel(EXAMPLES / "rgcn.gnn", "rgcn")(edge_index, x, weight, conv.root, edge_type=edge_type)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    # the gradients reach the basis and the coefficients through the dense product, in torch
    got.sum().backward()
    want_comp, want_basis = torch.autograd.grad(conv(x, edge_index, edge_type).sum(), (conv.comp, conv.weight))
    torch.testing.assert_close(conv.comp.grad, want_comp, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(conv.weight.grad, want_basis, rtol=1e-10, atol=1e-12)


def test_a_matrix_per_leading_index_needs_those_axes():
    _assert_error(
        "kernel k(x: f32[V, H, K], W: f32[R, B, K, N]) -> f32[V, H, N] {\n    out[v] = sum(x[u] @ W[rel(e)])\n}\n",
        2,
        23,
        "'@': a right operand of shape [B, K, N] is a matrix per leading index of the left operand",
    )


@pytest.mark.parametrize("schedule", [None, "specialize K 5 N 17", "relations per_edge"])
def test_bipartite_blocks_with_relation_types(schedule):
    """DGL's blocks with edge types: pairs of a source side are of source ids (x has num_src rows,
    destinations first), forward and backward."""
    rng = np.random.default_rng(3)
    graph = gnnc.Graph.from_coo(
        rng.integers(0, 30, 150), rng.integers(0, 12, 150), shape=(30, 12), edge_type=rng.integers(0, 4, 150)
    )
    for name in ("rgcn", "rgat"):
        kernel = getattr(_example(name, schedule), name)
        inputs = random_inputs(kernel.signature, graph, KERNEL_DIMS, np.float32, 4)
        inputs["x"] = rng.uniform(-1, 1, (30, 5)).astype(np.float32)  # read at u and v: num_src rows
        source = (EXAMPLES / f"{name}.gnn").read_text()
        want = getattr(gnnc.compile(source, target="reference"), name)(graph, **inputs)
        assert_matches(kernel(graph, **inputs), want, graph, np.float32)
        gout = rng.uniform(-1, 1, want.shape).astype(np.float32)
        got = compile_grad(source, name, schedule=schedule)(graph, gout=gout, **inputs)
        expected = compile_grad(source, name, target="reference")(graph, gout=gout, **inputs)
        for p in inputs:
            assert_matches(got[p], expected[p], graph, np.float32)


def test_a_weight_gradient_alone_runs_no_kernel_of_its_factor():
    """dW alone (a first layer's features need no gradient): the factor x is read, not
    differentiated, so x's kernels are left out."""
    grad = compile_grad(RGCN, "rgcn")
    kept = grad.restricted_to(("W",))
    assert {k[1] for k in kept.kernels} == {"W"}
    graph = _graph(4)
    args = _inputs(gnnc.compile(RGCN, target="reference").rgcn, graph, np.float32, 3)
    gout = np.random.default_rng(4).standard_normal((graph.num_vertices, GRAD_DIMS["N"])).astype(np.float32)
    np.testing.assert_allclose(kept(graph, gout=gout, **args)["W"], grad(graph, gout=gout, **args)["W"], rtol=1e-6)
