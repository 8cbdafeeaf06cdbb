"""gnnc.nn's layers take a `gnnc.Graph` where PyG takes an edge_index.

The same outputs and gradients as the graph's edge_index, on hypothesis
graphs (isolated vertices, self loops, duplicates; square and bipartite);
the layers whose message passing is an aggregation or GCN's normalised sum
run without ever making the Graph's `2 x E` edge_index (`graphs.handle_of`:
1 GiB at R-MAT scale 22), layers that read the edges themselves make it once.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
import gnnc.nn as gnn
from gnnc.errors import ArgumentError
from gnnc.torch import graphs
from tests.nn_oracle import bipartite, close, features, pyg_graphs

#: Layers that read no edge themselves: a Graph reaches their kernels as is.
LEAN = {
    "gcn": lambda: gnn.GCNConv(6, 4),
    "gcn_narrowing": lambda: gnn.GCNConv(6, 3, improved=True),
    "sage_mean": lambda: gnn.SAGEConv(6, 4),
    "sage_max": lambda: gnn.SAGEConv(6, 4, aggr="max"),
    "sage_equal": lambda: gnn.SAGEConv(6, 6),
    "graph_conv": lambda: gnn.GraphConv(6, 4, aggr="add"),
    "gin": lambda: gnn.GINConv(torch.nn.Linear(6, 4), train_eps=True),
}
#: Layers that read the edges (self loops appended, attention): the edge_index is made once.
READING = {
    "gat": lambda: gnn.GATConv(6, 3, heads=2),
    "appnp": lambda: gnn.APPNP(K=2, alpha=0.1),
}


def _pair(make):
    torch.manual_seed(3)
    a = make()
    torch.manual_seed(3)
    b = make()
    return a, b


def _run(layer, x, graph, *args, **kwargs):
    out = layer(x, graph, *args, **kwargs)
    out.square().sum().backward()
    grads = [p.grad.clone() for p in layer.parameters() if p.grad is not None]
    return out.detach(), grads


def _compare(name, make, edge_index, n, seed, *args):
    graph = gnnc.Graph.from_edge_index(edge_index.numpy(), num_vertices=n)
    a, b = _pair(make)
    x = features(n, 6, seed)
    want, want_grads = _run(a, x, edge_index, *args)
    want_x, x.grad = x.grad.clone(), None
    got, got_grads = _run(b, x, graph, *args)
    close(got, want, f"{name}: output")
    close(x.grad, want_x, f"{name}: x's gradient")
    for g, w in zip(got_grads, want_grads, strict=True):
        close(g, w, f"{name}: a parameter's gradient")
    return graph


@settings(max_examples=12, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(LEAN)), seed=st.integers(0, 99))
def test_a_graph_gives_what_its_edge_index_gives_and_makes_no_edge_index(data, name, seed):
    unique = name == "sage_max"  # max ties split their gradient differently
    edge_index, n = data.draw(pyg_graphs(duplicates=not unique, loops=not unique))
    graph = _compare(name, LEAN[name], edge_index, n, seed)
    assert graph not in graphs._EDGE_INDEX  # the kernels got the Graph, not a 2 x E tensor


@pytest.mark.parametrize("name", sorted(READING))
def test_layers_that_read_the_edges_make_them_from_the_graph(name):
    edge_index, n = bipartite(12, 12, 50, seed=4), 12
    _compare(name, READING[name], edge_index, n, 5)


def test_gcn_with_edge_weights_on_a_graph():
    edge_index = bipartite(10, 10, 40, seed=6)
    weight = torch.rand(40, generator=torch.Generator().manual_seed(6))
    _compare("gcn weighted", LEAN["gcn"], edge_index, 10, 7, weight)


def test_a_bipartite_graph_takes_its_sizes_from_the_graph():
    edge_index = bipartite(9, 4, 30, seed=8)
    graph = gnnc.Graph.from_edge_index(edge_index.numpy(), shape=(9, 4))
    a, b = _pair(lambda: gnn.SAGEConv((6, 5), 3))
    x_src, x_dst = features(9, 6, 1), features(4, 5, 2)
    close(b((x_src, x_dst), graph), a((x_src, x_dst), edge_index, size=(9, 4)), "bipartite SAGEConv")
    with pytest.raises(ArgumentError, match="disagrees|sources"):
        b((x_src, x_dst), graph, size=(10, 4))


def test_features_of_another_vertex_count_are_refused():
    graph = gnnc.Graph.from_edge_index(np.array([[0, 1], [1, 2]]), num_vertices=3)
    with pytest.raises(ArgumentError, match="4 rows but the graph has 3"):
        gnn.SAGEConv(2, 2)(torch.randn(4, 2), graph)
    with pytest.raises(ArgumentError, match="3"):
        gnn.GCNConv(2, 2)(torch.randn(4, 2), graph)


def test_the_backward_finds_a_graph_the_caller_dropped():
    edge_index = bipartite(10, 10, 40, seed=9)
    a, b = _pair(lambda: gnn.GCNConv(6, 4))
    x = features(10, 6, 3)
    a(x, edge_index).sum().backward()
    want, x.grad = x.grad.clone(), None
    out = b(x, gnnc.Graph.from_edge_index(edge_index.numpy(), num_vertices=10))
    gc.collect()  # the Graph lives on in the handle the backward keeps
    out.sum().backward()
    close(x.grad, want, "x's gradient")


def test_a_handle_stands_for_its_graph_and_holds_no_edges():
    graph = gnnc.Graph.from_edge_index(np.array([[0, 1, 2], [1, 2, 0]]))
    handle = graphs.handle_of(graph)
    assert handle.shape == (2, 3) and handle.stride() == (1, 0)
    assert graphs.graph_behind(handle) is graph and graphs.graph_of(handle, (3, 3)) is graph
    assert graphs.graph_behind(torch.zeros(2, 3, dtype=torch.int64)) is None
    with pytest.raises(ArgumentError, match="asks for"):
        graphs.graph_of(handle, (4, 4))


def test_a_compiled_model_on_a_graph_matches_eager():
    edge_index = bipartite(15, 15, 60, seed=10)
    graph = gnnc.Graph.from_edge_index(edge_index.numpy(), num_vertices=15)
    a, b = _pair(lambda: gnn.SAGEConv(6, 4))
    x = features(15, 6, 4, grad=False)
    close(torch.compile(b)(x, graph), a(x, edge_index), "compiled SAGEConv on a Graph")
