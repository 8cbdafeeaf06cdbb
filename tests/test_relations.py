"""Relation types in the language: `W[rel(e)]`, `deg_in(v, rel(e))`, `@` by a per-edge matrix.

The numpy reference is checked against loops written out by hand and
against PyG's RGCNConv; the source errors point at the offending token.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc.lang import parse_and_check
from gnnc.lang.signature import kernel_signature
from tests.helpers import assert_matches
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
