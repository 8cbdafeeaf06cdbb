"""gnnc.nn's ChebConv and GatedGraphConv against PyG's layers of the same name.

PyG's initialisation draw for draw; outputs and gradients (features, edge
weights, every parameter) on hypothesis graphs (isolated vertices, self
loops, duplicate edges) for every normalisation, order and aggregation,
with and without edge weights, both orders of ChebConv's sum (Clenshaw's
where the Linear layers narrow the features), a given lambda_max (one, or
one per graph of a batch), sparse adjacencies and static graphs.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import compare, edge_weights, features, pyg_graphs, same_start

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Converting sparse tensor to CSR")


@given(
    graph=pyg_graphs(),
    K=st.sampled_from([1, 2, 3, 5]),
    normalization=st.sampled_from(["sym", "rw", None]),
    widths=st.sampled_from([(6, 3), (3, 6)]),  # Clenshaw's order / the plain recurrence
    weighted=st.booleans(),
    lambda_max=st.sampled_from([None, 3.0]),
    seed=st.integers(0, 2**16),
)
def test_cheb_conv_matches_pyg(graph, K, normalization, widths, weighted, lambda_max, seed):
    edge_index, n = graph
    w = edge_weights(edge_index, seed) if weighted else None
    compare(
        *same_start("ChebConv", *widths, K, normalization=normalization),
        (features(n, widths[0], seed), edge_index, w),
        {"lambda_max": lambda_max},
        rtol=5e-4,
    )


def test_cheb_conv_lambda_max_per_graph():
    g = torch.Generator().manual_seed(2)
    edge_index = torch.cat([torch.randint(0, 5, (2, 12), generator=g), torch.randint(5, 9, (2, 10), generator=g)], 1)
    batch = torch.tensor([0] * 5 + [1] * 4)
    kwargs = {"batch": batch, "lambda_max": torch.tensor([2.5, 4.0])}
    for widths in ((6, 3), (3, 6)):
        compare(
            *same_start("ChebConv", *widths, 3, normalization=None), (features(9, widths[0], 3), edge_index), kwargs
        )


@given(
    graph=pyg_graphs(),
    aggr=st.sampled_from(["add", "mean", "max"]),
    channels=st.sampled_from([(4, 6), (6, 6)]),  # padded / not
    layers=st.sampled_from([0, 1, 3]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gated_graph_conv_matches_pyg(graph, aggr, channels, layers, weighted, seed):
    edge_index, n = graph
    if aggr == "max":
        # ties in a max split gradients differently (gnnc: the lowest edge id; torch's scatter: all)
        edge_index = torch.unique(edge_index, dim=1) if edge_index.numel() else edge_index
    w = edge_weights(edge_index, seed) if weighted else None
    compare(
        *same_start("GatedGraphConv", channels[1], layers, aggr=aggr),
        (features(n, channels[0], seed), edge_index, w),
    )


def test_sparse_adjacencies_and_static_graphs():
    g = torch.Generator().manual_seed(4)
    edge_index = torch.randint(0, 8, (2, 24), generator=g)
    values = torch.rand(24, generator=g) + 0.2
    adj = torch.sparse_coo_tensor(edge_index.flip(0), values, (8, 8)).coalesce().to_sparse_csr()
    x = features(8, 5, 5)
    compare(*same_start("GatedGraphConv", 5, 2), (x, adj))
    # PyG's ChebConv takes no sparse adjacency (its Laplacian needs the edges): gnnc's does, and
    # matches PyG's on the same edges and weights
    pyg, ours = same_start("ChebConv", 5, 3, 3)
    coo = adj.to_sparse_coo().coalesce()
    torch.testing.assert_close(ours(x, adj), pyg(x, coo.indices().flip(0), coo.values()), rtol=2e-4, atol=2e-5)
    xs = features(8, 5, 6, grad=False).repeat(2, 3, 1, 1) + torch.randn(2, 3, 8, 5, generator=g)
    xs.requires_grad_()
    compare(*same_start("ChebConv", 5, 3, 3), (xs, edge_index, edge_weights(edge_index, 7)), {"lambda_max": 2.5})


def test_bad_arguments():
    with pytest.raises(ArgumentError, match="K must be a positive integer"):
        gnn.ChebConv(4, 4, 0)
    with pytest.raises(ArgumentError, match="normalization must be"):
        gnn.ChebConv(4, 4, 2, normalization="lap")
    edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ArgumentError, match="more than out_channels=3"):
        gnn.GatedGraphConv(3, 2)(torch.randn(3, 4), edge_index)
    with pytest.raises(ArgumentError, match="aggr="):
        gnn.GatedGraphConv(3, 2, aggr="lstm")
    with pytest.raises(ArgumentError, match="a static graph has its own"):
        gnn.ChebConv(4, 4, 2)(torch.randn(2, 3, 4), edge_index, batch=torch.zeros(3, dtype=torch.long))
