"""gnnc.nn's RGCNConv and FastRGCNConv against PyG's layers of the same name.

Outputs and gradients (inputs, every parameter) with PyG's state_dict
loaded, on hypothesis graphs with random relation types (one relation,
relations without edges, types skewed to a few), with isolated vertices,
self loops and duplicate edges; square and bipartite, featureless (x None
or a node index tensor), every decomposition and aggregation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import bipartite, close, compare, features, pyg_graphs

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError, GraphError  # noqa: E402

LAYERS = ["RGCNConv", "FastRGCNConv"]
OPTIONS = [
    {},
    {"aggr": "sum"},
    {"aggr": "add"},
    {"num_bases": 2},
    {"num_blocks": 2},
    {"num_blocks": 2, "aggr": "add"},
    {"root_weight": False},
    {"bias": False, "is_sorted": True},
]


@st.composite
def typed_graphs(draw, max_relations: int = 5):
    """(edge_index, edge_type, num_vertices, num_relations): random types, some relations unused."""
    edge_index, n = draw(pyg_graphs())
    r = draw(st.integers(1, max_relations))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    kind = draw(st.sampled_from(["uniform", "one_used", "unused_top"]))
    e = edge_index.shape[1]
    if kind == "uniform":
        types = rng.integers(0, r, e)
    elif kind == "one_used":
        types = np.full(e, rng.integers(0, r))
    else:
        types = rng.integers(0, max(1, r // 2), e)
    return edge_index, torch.from_numpy(types.astype(np.int64)), n, r


def _pair(layer: str, *args, **kwargs):
    return getattr(pyg_nn, layer)(*args, **kwargs), getattr(gnn, layer)(*args, **kwargs)


@given(
    graph=typed_graphs(),
    layer=st.sampled_from(LAYERS),
    options=st.sampled_from(OPTIONS),
    seed=st.integers(0, 2**16),
)
def test_rgcn_matches_pyg(graph, layer, options, seed):
    edge_index, edge_type, n, r = graph
    torch.manual_seed(seed)
    pyg, ours = _pair(layer, 4, 6, r, **options)
    compare(pyg, ours, (features(n, 4, seed), edge_index, edge_type))


@given(
    graph=typed_graphs(),
    layer=st.sampled_from(LAYERS),
    options=st.sampled_from([{}, {"aggr": "sum"}, {"num_bases": 3}, {"root_weight": False}]),
    indexed=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_featureless_rgcn_matches_pyg(graph, layer, options, indexed, seed):
    """x None (or a node index tensor): the weights are embeddings, in_channels the node count."""
    edge_index, edge_type, n, r = graph
    torch.manual_seed(seed)
    pyg, ours = _pair(layer, n, 5, r, **options)
    x = torch.randperm(n, generator=torch.Generator().manual_seed(seed)) if indexed else None
    compare(pyg, ours, (x, edge_index, edge_type))


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("options", [{}, {"num_blocks": 2}, {"num_bases": 2, "aggr": "sum"}])
def test_bipartite_pairs(layer, options):
    num_src, num_dst = 9, 5
    edge_index = bipartite(num_src, num_dst, 40, seed=2)
    edge_type = torch.randint(0, 3, (40,), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    pyg, ours = _pair(layer, (4, 6), 8, 3, **options)
    x = (features(num_src, 4, 1), features(num_dst, 6, 2))
    compare(pyg, ours, (x, edge_index, edge_type))


def test_one_relation_is_the_homogeneous_layer():
    """R = 1 with aggr="mean": mean(x[u]) @ W0 + x @ root + bias, GraphConv(aggr="mean")'s sum."""
    edge_index = torch.tensor([[0, 1, 2, 3, 3, 1, 4], [1, 2, 0, 1, 1, 1, 0]])
    x = features(5, 4, 0)
    torch.manual_seed(0)
    rgcn = gnn.RGCNConv(4, 3, 1)
    graph = gnn.GraphConv(4, 3, aggr="mean")
    with torch.no_grad():
        graph.lin_rel.weight.copy_(rgcn.weight[0].T)
        graph.lin_rel.bias.copy_(rgcn.bias.normal_())
        graph.lin_root.weight.copy_(rgcn.root.T)
    close(rgcn(x, edge_index, torch.zeros(7, dtype=torch.int64)), graph(x, edge_index), "R = 1")


def test_blocks_and_float64():
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 0, 1, 5, 5]])
    edge_type = torch.tensor([0, 1, 0, 1, 1, 0])
    x = features(6, 4, 3).double()
    torch.manual_seed(0)
    pyg, ours = pyg_nn.RGCNConv(4, 4, 2).double(), gnn.RGCNConv(4, 4, 2).double()
    expected, got = compare(pyg, ours, (x, edge_index, edge_type))
    assert got.dtype == torch.float64
    # a block: one x of num_src rows, its first num_dst rows the destinations'
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 0, 1, 3, 3]])
    expected = pyg((x, x[:4]), edge_index, edge_type)
    close(ours(x, gnn.Block(edge_index, 6, 4), edge_type), expected, "a block as the graph")


def test_sparse_tensor_values_are_the_types():
    torch_sparse = pytest.importorskip("torch_sparse")
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 2]])
    edge_type = torch.tensor([0, 1, 1, 0, 2, 2])
    adj_t = torch_sparse.SparseTensor(row=edge_index[1], col=edge_index[0], value=edge_type, sparse_sizes=(5, 5))
    torch.manual_seed(0)
    ours = gnn.RGCNConv(3, 4, 3)
    x = features(5, 3, 0)
    close(ours(x, adj_t), ours(x, edge_index, edge_type), "SparseTensor")


def test_bad_arguments_get_clear_errors():
    edge_index = torch.tensor([[0, 1], [1, 0]])
    conv = gnn.RGCNConv(4, 4, 2)
    x = torch.randn(2, 4)
    with pytest.raises(ArgumentError, match="aggr='max' is not supported"):
        gnn.RGCNConv(4, 4, 2, aggr="max")
    with pytest.raises(ArgumentError, match="both basis-decomposition and block-diagonal"):
        gnn.RGCNConv(4, 4, 2, num_bases=2, num_blocks=2)
    with pytest.raises(ArgumentError, match="multiples of num_blocks"):
        gnn.FastRGCNConv(4, 6, 2, num_blocks=4)
    with pytest.raises(ArgumentError, match="num_relations must be a positive integer"):
        gnn.RGCNConv(4, 4, 0)
    with pytest.raises(ArgumentError, match="needs edge_type"):
        conv(x, edge_index)
    with pytest.raises(ArgumentError, match=r"edge_type must have shape \[E\] = \[2\]"):
        conv(x, edge_index, torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ArgumentError, match="an integer tensor"):
        conv(x, edge_index, torch.zeros(2))
    with pytest.raises(GraphError, match="out of range"):
        conv(x, edge_index, torch.tensor([0, 2]))
    with pytest.raises(ArgumentError, match="torch.sparse adjacency is not supported"):
        conv(x, torch.sparse_coo_tensor(edge_index, torch.ones(2), (2, 2)), torch.tensor([0, 1]))
    with pytest.raises(ArgumentError, match="x has 3 channels"):
        conv(torch.randn(2, 3), edge_index, torch.tensor([0, 1]))
    with pytest.raises(ArgumentError, match="Block-diagonal decomposition not supported"):
        gnn.RGCNConv(2, 4, 2, num_blocks=2)(None, edge_index, torch.tensor([0, 1]))
    with pytest.raises(ArgumentError, match="flow="):
        gnn.RGCNConv(4, 4, 2, flow="target_to_source")
