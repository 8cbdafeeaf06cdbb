"""gnnc.nn's SGConv, SSGConv, TAGConv, GCN2Conv and ClusterGCNConv (GCN-style propagation) against PyG's.

The same seed gives PyG's parameters; outputs and gradients (features,
edge weights, every parameter) agree on hypothesis graphs (isolated
vertices, self loops, duplicate edges) for every option, weighted or not,
both orders of the dense work (Linear first where it narrows), sparse
adjacencies, static graphs, and the caches (PyG's: reused whatever the
next call's inputs).
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import close, compare, edge_weights, features, one_loop_per_vertex, pyg_graphs, same_start

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402

#: PyG's advice when given a COO adjacency (intended here)
pytestmark = pytest.mark.filterwarnings("ignore:Converting sparse tensor to CSR")


@given(
    graph=pyg_graphs(),
    K=st.sampled_from([0, 1, 3]),
    widths=st.sampled_from([(6, 3), (3, 6)]),  # Linear first / last
    options=st.sampled_from([{}, {"add_self_loops": False}, {"bias": False}]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_sgconv_matches_pyg(graph, K, widths, options, weighted, seed):
    edge_index, n = graph
    if weighted and options.get("add_self_loops", True):
        edge_index = one_loop_per_vertex(edge_index)  # see test_nn_gcn: PyG's loop gradient
    w = edge_weights(edge_index, seed) if weighted else None
    compare(*same_start("SGConv", *widths, K=K, **options), (features(n, widths[0], seed), edge_index, w))


@given(
    graph=pyg_graphs(),
    K=st.sampled_from([1, 3]),
    widths=st.sampled_from([(6, 3), (3, 6)]),  # Linear first / last
    options=st.sampled_from([{}, {"add_self_loops": False}, {"bias": False}]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_ssgconv_matches_pyg(graph, K, widths, options, weighted, seed):
    edge_index, n = graph
    if weighted and options.get("add_self_loops", True):
        edge_index = one_loop_per_vertex(edge_index)
    w = edge_weights(edge_index, seed) if weighted else None
    compare(*same_start("SSGConv", *widths, 0.2, K=K, **options), (features(n, widths[0], seed), edge_index, w))


@given(
    graph=pyg_graphs(),
    widths=st.sampled_from([(6, 3), (3, 6)]),  # lin_out first / last
    diag_lambda=st.sampled_from([0.0, 0.7]),
    seed=st.integers(0, 2**16),
)
def test_cluster_gcn_conv_matches_pyg(graph, widths, diag_lambda, seed):
    edge_index, n = graph
    compare(*same_start("ClusterGCNConv", *widths, diag_lambda=diag_lambda), (features(n, widths[0], seed), edge_index))


def test_cluster_gcn_conv_without_added_loops():
    """PyG's add_self_loops=False works where every vertex has one loop, in vertex order (its
    normalisation adds `diag_lambda / deg` to exactly N loop weights): gnnc's matches there, and
    weighs each own loop by 1 + diag_lambda in general."""
    n = 6
    edges = torch.tensor([[0, 1, 2, 3, 4, 5, 1, 0, 4], [0, 1, 2, 3, 4, 5, 0, 2, 5]])
    compare(*same_start("ClusterGCNConv", 4, 3, diag_lambda=0.3, add_self_loops=False), (features(n, 4, 1), edges))


@given(
    graph=pyg_graphs(),
    K=st.sampled_from([0, 1, 3]),
    widths=st.sampled_from([(6, 3), (3, 6)]),  # Horner's order / the plain sum
    options=st.sampled_from([{}, {"normalize": False}, {"bias": False}]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_tagconv_matches_pyg(graph, K, widths, options, weighted, seed):
    edge_index, n = graph
    w = edge_weights(edge_index, seed) if weighted else None
    compare(*same_start("TAGConv", *widths, K=K, **options), (features(n, widths[0], seed), edge_index, w))


@given(
    graph=pyg_graphs(),
    options=st.sampled_from(
        [{}, {"theta": 0.5, "layer": 3}, {"shared_weights": False}, {"add_self_loops": False}, {"normalize": False}]
    ),
    extra_rows=st.sampled_from([0, 2]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gcn2conv_matches_pyg(graph, options, extra_rows, weighted, seed):
    edge_index, n = graph
    if weighted and options.get("add_self_loops", True) and options.get("normalize", True):
        edge_index = one_loop_per_vertex(edge_index)
    w = edge_weights(edge_index, seed) if weighted else None
    x, x_0 = features(n, 5, seed), features(n + extra_rows, 5, seed + 1)  # PyG reads x_0's first n rows
    compare(*same_start("GCN2Conv", 5, 0.2, **options), (x, x_0, edge_index, w))


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_adjacencies(layout):
    g = torch.Generator().manual_seed(1)
    edge_index = torch.randint(0, 9, (2, 30), generator=g)
    values = torch.rand(30, generator=g) + 0.1
    adj = torch.sparse_coo_tensor(edge_index.flip(0), values, (9, 9)).coalesce()  # adj_t: rows are destinations
    adj = adj.to_sparse_csr() if layout == "csr" else adj
    x = features(9, 6, 2)
    compare(*same_start("SGConv", 6, 3, K=2), (x, adj), grads=True)
    compare(*same_start("TAGConv", 6, 3, K=2), (x, adj))
    compare(*same_start("GCN2Conv", 6, 0.1, shared_weights=False), (x, x, adj))
    compare(*same_start("SSGConv", 6, 3, 0.1, K=2), (x, adj))
    compare(*same_start("ClusterGCNConv", 6, 3, diag_lambda=0.2), (x, adj.coalesce() if layout == "coo" else adj))


@pytest.mark.parametrize("name", ["SGConv", "TAGConv", "SSGConv"])
@pytest.mark.parametrize("batch", [(2,), (2, 3)])
def test_static_graphs(name, batch):
    edge_index = torch.tensor([[0, 1, 2, 3, 3], [1, 2, 0, 0, 3]])
    x = features(4, 5, 3, grad=False).repeat(*batch, 1, 1) + torch.randn(*batch, 4, 5)
    x.requires_grad_()
    args = (0.2,) if name == "SSGConv" else ()
    compare(*same_start(name, 5, 3, *args, K=2), (x, edge_index, edge_weights(edge_index, 4)))


def test_caches_are_pygs():
    """SGConv keeps P^K x (reused even for other inputs), GCN2Conv the normalised weights."""
    g = torch.Generator().manual_seed(5)
    first, other = torch.randint(0, 8, (2, 20), generator=g), torch.randint(0, 8, (2, 12), generator=g)
    x, y = features(8, 6, 1, grad=False), features(8, 6, 2, grad=False)
    pyg, ours = same_start("SGConv", 6, 3, K=2, cached=True)
    for args in ((x, first), (y, other)):
        close(ours(*args), pyg(*args), "cached SGConv")
    copied = copy.deepcopy(ours)
    close(copied(y, other), pyg(y, other), "a copy keeps the cache")
    ours.reset_parameters()
    assert ours._cached is None
    pyg, ours = same_start("SSGConv", 6, 3, 0.3, K=2, cached=True)
    for args in ((x, first), (y, other)):
        close(ours(*args), pyg(*args), "cached SSGConv")
    pyg, ours = same_start("GCN2Conv", 6, 0.1, cached=True)
    for args in ((x, x, first), (y, y, other)):
        close(ours(*args), pyg(*args), "cached GCN2Conv")
    close(copy.deepcopy(ours)(y, y, other), pyg(y, y, other), "a copy keeps the cache")


def test_model_compiles_fullgraph():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sg, self.tag, self.gcn2 = gnn.SGConv(6, 4, K=2), gnn.TAGConv(4, 4, K=2), gnn.GCN2Conv(4, 0.1, 1.0, 2)

        def forward(self, x, edge_index):
            h = self.tag(self.sg(x, edge_index).relu(), edge_index).relu()
            return self.gcn2(h, h, edge_index)

    edge_index = torch.randint(0, 10, (2, 30), generator=torch.Generator().manual_seed(6))
    x = features(10, 6, 7)
    model = Net()
    expected = model(x, edge_index)
    got = torch.compile(model, fullgraph=True, backend="aot_eager")(x, edge_index)
    close(got, expected, "compiled")


def test_bad_arguments():
    with pytest.raises(ArgumentError, match="K must be a non-negative integer"):
        gnn.SGConv(4, 4, K=-1)
    with pytest.raises(ArgumentError, match="in_channels must be a positive integer or -1"):
        gnn.TAGConv((4, 4), 4)
    with pytest.raises(ArgumentError, match="theta and layer go together"):
        gnn.GCN2Conv(4, 0.1, theta=0.5)
    with pytest.raises(ArgumentError, match="aggr="):
        gnn.SGConv(4, 4, aggr="mean")
    conv = gnn.GCN2Conv(4, 0.1)
    edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ArgumentError, match="x_0 must have at least x's 3 rows"):
        conv(torch.randn(3, 4), torch.randn(2, 4), edge_index)
    with pytest.raises(ArgumentError, match="a sampled block is one hop"):
        gnn.SGConv(4, 4)(torch.randn(3, 4), gnn.Block(edge_index, 3, 2))
    with pytest.raises(ArgumentError, match="static graphs"):
        conv(torch.randn(2, 3, 4), torch.randn(2, 3, 4), edge_index)
