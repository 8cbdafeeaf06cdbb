"""Graph.reordered: a relabelled graph, the maps between the ids, and kernels that agree across them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gnnc
from gnnc.graph.reorder import rcm_vertex_order

from .helpers import assert_matches, slow_except
from .strategies import graphs, random_inputs

EXAMPLES = Path(__file__).parent.parent / "examples"


def _edges(graph: gnnc.Graph) -> list[tuple[int, int]]:
    return sorted(zip(graph.src.tolist(), graph.dst.tolist()))


@given(graphs())
def test_the_relabelled_graph_is_the_same_graph_under_the_maps(graph):
    r = graph.reordered()
    v, e = graph.num_vertices, graph.num_edges
    assert r.graph.num_vertices == v and r.graph.num_edges == e
    assert sorted(r.vertex_order.tolist()) == list(range(v))
    assert sorted(r.edge_order.tolist()) == list(range(e))
    # new edge i is old edge edge_order[i], its ends relabelled
    assert np.array_equal(r.vertex_order[r.graph.src], graph.src[r.edge_order])
    assert np.array_equal(r.vertex_order[r.graph.dst], graph.dst[r.edge_order])
    # new edge ids follow the new in-CSR: edge tensors are walked in order
    assert np.array_equal(r.graph.in_eid, np.arange(e))
    # the maps are inverses of each other, on rows of any shape
    x = np.random.default_rng(0).standard_normal((v, 2, 3))
    w = np.arange(e, dtype=np.float32)
    assert np.array_equal(r.vertices_to_old(r.vertices_to_new(x)), x)
    assert np.array_equal(r.edges_to_old(r.edges_to_new(w)), w)
    assert not r.vertex_order.flags.writeable and not r.edge_order.flags.writeable


def test_rcm_gives_a_path_small_bandwidth():
    # a path numbered at random: neighbours end up next to each other
    n = 200
    perm = np.random.default_rng(1).permutation(n)
    src, dst = perm[:-1], perm[1:]
    graph = gnnc.Graph.from_coo(np.concatenate([src, dst]), np.concatenate([dst, src]), num_vertices=n)
    r = graph.reordered("rcm")
    assert np.abs(r.graph.src - r.graph.dst).max() == 1
    assert np.abs(graph.src - graph.dst).max() > 10
    assert np.array_equal(rcm_vertex_order(graph), r.vertex_order)


@pytest.mark.parametrize(
    "name,dims",
    slow_except(
        [
            ("gcn", {"F": 17}),
            ("sage_max", {"F": 3}),
            ("sage_mean", {"F": 8}),
            ("gat", {"H": 2, "F": 5}),
            ("attention", {"H": 2, "D": 4}),
            ("gcn_norm", {"F": 1}),
            ("gin", {"F": 4}),
        ],
        ("gcn", {"F": 17}),
    ),
)
@given(graph=graphs(), seed=st.integers(0, 2**32 - 1))
def test_kernels_on_the_relabelled_graph_give_the_same_results(name, dims, graph, seed):
    kernel = getattr(gnnc.compile(EXAMPLES / f"{name}.gnn"), name)
    sig = kernel.signature
    inputs = random_inputs(sig, graph, dims, np.float32, seed)
    r = graph.reordered()
    moved = {p.name: r.to_new(inputs[p.name], p.domain) for p in sig.params}
    got = kernel(r.graph, **moved)
    got = got if isinstance(got, dict) else {"out": got}
    domains = {res.name: res.domain for res in sig.results}
    back = {n: r.to_old(a, domains[n]) for n, a in got.items()}
    want = getattr(gnnc.compile(EXAMPLES / f"{name}.gnn", target="reference"), name)(graph, **inputs)
    want = want if isinstance(want, dict) else {"out": want}
    assert_matches(back, want, graph, np.float32)
    # each destination sums its in-edges in the same order as before: the same bits
    same = kernel(graph, **inputs)
    same = same if isinstance(same, dict) else {"out": same}
    for n in same:
        np.testing.assert_array_equal(back[n], same[n])


def test_bad_requests_are_clear_errors():
    graph = gnnc.Graph.from_coo([0, 1], [1, 2], num_vertices=3)
    with pytest.raises(gnnc.ArgumentError, match="unknown reordering 'metis'"):
        graph.reordered("metis")
    block = gnnc.Graph(np.array([[0, 1], [0, 0]]), shape=(2, 1))
    with pytest.raises(gnnc.GraphError, match="bipartite"):
        block.reordered()
    r = graph.reordered()
    with pytest.raises(gnnc.ArgumentError, match="needs 3 rows"):
        r.vertices_to_new(np.zeros((4, 2)))
    with pytest.raises(gnnc.ArgumentError, match="needs 2 rows"):
        r.edges_to_old(np.float32(1.0))


def test_torch_tensors_stay_torch_tensors_and_gradients_flow():
    torch = pytest.importorskip("torch")
    graph = gnnc.Graph.from_coo([0, 1, 2, 3], [1, 2, 3, 0], num_vertices=4)
    r = graph.reordered()
    x = torch.arange(8.0).reshape(4, 2).requires_grad_()
    moved = r.vertices_to_new(x)
    assert isinstance(moved, torch.Tensor)
    assert np.array_equal(moved.detach().numpy(), r.vertices_to_new(x.detach().numpy()))
    back = r.vertices_to_old(moved)
    assert torch.equal(back, x)
    back.sum().backward()
    assert torch.equal(x.grad, torch.ones(4, 2))
    w = torch.arange(4.0)
    assert torch.equal(r.edges_to_old(r.edges_to_new(w)), w)
