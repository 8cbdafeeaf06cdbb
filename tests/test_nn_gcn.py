"""gnnc.nn.GCNConv against PyG's GCNConv: outputs and gradients on hypothesis graphs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import compare, features, one_loop_per_vertex, pyg_graphs

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402

OPTIONS = [
    {},
    {"improved": True},
    {"add_self_loops": False},
    {"normalize": False},
    {"bias": False},
    {"cached": True},
]


@given(
    graph=pyg_graphs(),
    options=st.sampled_from(OPTIONS),
    channels=st.sampled_from([(8, 4), (4, 8), (5, 5)]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gcn_conv_matches_pyg(graph, options, channels, weighted, seed):
    edge_index, n = graph
    if weighted:
        # PyG's index_put gives every duplicate self loop of a vertex the loop's
        # gradient although only the last one's weight is used; gnnc gives it
        # to that one (the true gradient): compare on one loop per vertex
        edge_index = one_loop_per_vertex(edge_index)
    torch.manual_seed(seed)
    pyg = pyg_nn.GCNConv(*channels, **options)
    ours = gnn.GCNConv(*channels, **options)
    x = features(n, channels[0], seed)
    w = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(seed)).requires_grad_()
    compare(pyg, ours, (x, edge_index, w if weighted else None))


@pytest.mark.parametrize("options", [{}, {"add_self_loops": False}])
def test_gcn_conv_many_self_loops_on_one_vertex(options):
    """A vertex with 3,000 self-loop edges (a hub of them, as hypothesis found): the graph's own
    loops never enter the kernel's sum, so nothing cancels (summing them and subtracting their
    count was off by 6e-3 of the value at 1,000 loops, 0.6 at 10,000)."""
    hub = torch.zeros(2, 3000, dtype=torch.int64)
    edge_index = torch.cat([hub, torch.tensor([[1, 2, 0, 0], [0, 0, 2, 1]])], dim=1)
    torch.manual_seed(0)
    pyg, ours = pyg_nn.GCNConv(8, 4, **options), gnn.GCNConv(8, 4, **options)
    compare(pyg, ours, (features(3, 8, 1), edge_index))


@pytest.mark.parametrize("loop_weight", [0.0059, 1e-4, 3.0])
def test_gcn_conv_loop_weight_gradient_where_the_loop_is_the_only_in_edge(loop_weight):
    """Vertex 1's only in-edge is its own loop (weight w): out[1] = x[1] W whatever w, so w's
    gradient is exactly 0. Autodiff of `loop n^2` made it `n^2 - loop n^4`, two terms of 1 / w
    that cancel: 5.5e-4 off in float32 at w = 0.0059 (a hypothesis case, over the test's 2e-4 of
    the largest gradient). The kernel differentiates `1 - s n^2` instead (s = 0 here)."""
    edge_index = torch.tensor([[3, 4, 6, 7, 0, 1, 2, 6, 7, 2], [3, 2, 6, 2, 3, 1, 6, 4, 7, 5]])
    w = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(16))
    w[5] = loop_weight
    torch.manual_seed(0)
    pyg, ours = pyg_nn.GCNConv(8, 4), gnn.GCNConv(8, 4)
    compare(pyg, ours, (features(8, 8, 16), edge_index, w.requires_grad_()))
    ours.load_state_dict(pyg.state_dict())
    w = w.detach().requires_grad_()
    ours(features(8, 8, 16), edge_index, w).pow(2).sum().backward()
    assert w.grad[5] == 0


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_gcn_conv_sparse_adjacency(layout):
    edge_index = torch.tensor([[0, 1, 2, 2, 3, 1], [1, 2, 0, 1, 3, 3]])
    values = torch.tensor([1.0, 2.0, 0.5, 1.5, 1.0, 3.0])
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), values, (5, 5)).coalesce()
    if layout == torch.sparse_csr:
        adj_t = adj_t.to_sparse_csr()
    torch.manual_seed(0)
    compare(pyg_nn.GCNConv(6, 3), gnn.GCNConv(6, 3), (features(5, 6, 1), adj_t))


def test_gcn_conv_cached_reuses_the_first_normalisation():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    conv = gnn.GCNConv(4, 4, cached=True)
    x = features(3, 4, 0, grad=False)
    first = conv(x, edge_index)
    # PyG's cached=True keeps the first graph's normalisation: so does gnnc
    assert torch.allclose(conv(x, torch.tensor([[0], [1]])), first)
    conv.reset_parameters()
    assert conv._cached is None


def test_gcn_conv_refuses_what_pyg_refuses():
    with pytest.raises(ArgumentError, match="self-loops"):
        gnn.GCNConv(4, 4, add_self_loops=True, normalize=False)
    conv = gnn.GCNConv(4, 4)
    with pytest.raises(ArgumentError, match="bipartite"):
        conv((torch.randn(3, 4), torch.randn(2, 4)), torch.tensor([[0], [1]]))
    with pytest.raises(ArgumentError, match=r"shape \[2, E\]"):
        conv(torch.randn(3, 4), torch.tensor([0, 1]))
    with pytest.raises(ArgumentError, match="edge_weight must have shape"):
        conv(torch.randn(3, 4), torch.tensor([[0], [1]]), torch.ones(2))
