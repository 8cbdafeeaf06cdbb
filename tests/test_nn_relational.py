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
def typed_graphs(draw, max_relations: int = 5, duplicates: bool = True):
    """(edge_index, edge_type, num_vertices, num_relations): random types, some relations unused."""
    edge_index, n = draw(pyg_graphs(duplicates=duplicates))
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


@given(
    graph=typed_graphs(duplicates=False),
    options=st.sampled_from([{}, {"num_bases": 2}, {"num_blocks": 2}, {"root_weight": False}]),
    featureless=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_rgcn_max_matches_pyg(graph, options, featureless, seed):
    """aggr="max": per relation the max of the in-edges' features, transformed, summed over relations
    (graphs without duplicate edges: ties split gradients differently, see docs/guide/nn.md)."""
    edge_index, edge_type, n, r = graph
    if featureless and "num_blocks" in options:
        return
    torch.manual_seed(seed)
    pyg, ours = _pair("RGCNConv", n if featureless else 4, 6, r, aggr="max", **options)
    x = None if featureless else features(n, 4, seed)
    compare(pyg, ours, (x, edge_index, edge_type))


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("options", [{}, {"num_blocks": 2}, {"num_bases": 2, "aggr": "sum"}, {"aggr": "max"}])
def test_bipartite_pairs(layer, options):
    if layer == "FastRGCNConv" and options.get("aggr") == "max":
        pytest.skip("PyG's FastRGCNConv has no max")
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
    with pytest.raises(ArgumentError, match="aggr='min' is not supported"):
        gnn.RGCNConv(4, 4, 2, aggr="min")
    with pytest.raises(ArgumentError, match="aggr='max' is not supported"):
        gnn.FastRGCNConv(4, 4, 2, aggr="max")
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


# ----------------------------------------------------------------- RGATConv

RGAT_OPTIONS = [
    {},
    {"heads": 2},
    {"attention_mechanism": "within-relation"},
    {"attention_mechanism": "within-relation", "heads": 2, "mod": "f-scaled"},
    {"attention_mode": "multiplicative-self-attention"},
    {"attention_mode": "multiplicative-self-attention", "dim": 2, "heads": 2},
    {"mod": "f-additive"},
    {"mod": "f-scaled"},
    {"mod": "additive", "heads": 2},
    {"mod": "scaled"},
    {"attention_mode": "multiplicative-self-attention", "dim": 2, "mod": "additive"},
    {"attention_mode": "multiplicative-self-attention", "dim": 2, "mod": "scaled", "heads": 2},
    {"num_bases": 2},
    {"num_blocks": 2, "heads": 2},
    {"concat": False, "heads": 3},
    {"concat": False, "heads": 2, "dim": 2, "attention_mode": "multiplicative-self-attention"},
    {"edge_dim": 3},
    {"edge_dim": 3, "heads": 2, "attention_mode": "multiplicative-self-attention"},
    {"bias": False, "negative_slope": 0.1},
]


def _rgat_args(options, n, edge_index, edge_type, seed):
    edge_attr = (features(edge_index.shape[1], 3, seed + 1),) if "edge_dim" in options else ()
    return (features(n, 4, seed), edge_index, edge_type, *edge_attr)


@given(graph=typed_graphs(), options=st.sampled_from(RGAT_OPTIONS), seed=st.integers(0, 2**16))
def test_rgat_matches_pyg(graph, options, seed):
    edge_index, edge_type, n, r = graph
    torch.manual_seed(seed)
    pyg, ours = _pair("RGATConv", 4, 3, r, **options)
    with torch.no_grad():  # PyG leaves l2 uninitialised (its "scaled" mod reads it)
        pyg.l2.copy_(torch.randn(pyg.l2.shape, generator=torch.Generator().manual_seed(seed)) * 0.3)
    args = _rgat_args(options, n, edge_index, edge_type, seed)
    if edge_index.shape[1] and int(torch.bincount(edge_index[1]).max()) > 200:
        # a hub's thousands of equal-looking scores: the softmax's gradient is a sum that cancels to
        # near 0, where float32 leaves noise of the terms' size in PyG and gnnc alike: compare in float64
        pyg, ours = pyg.double(), ours.double()
        args = tuple(a.double() if a.is_floating_point() else a for a in args)
    compare(pyg, ours, args)


@pytest.mark.parametrize("mechanism", ["across-relation", "within-relation"])
def test_rgat_attention_weights_and_dropout(mechanism):
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 0, 2, 2], [1, 2, 3, 4, 0, 2, 2, 1]])
    edge_type = torch.tensor([0, 1, 1, 0, 2, 2, 0, 0])
    x = features(5, 4, 0)
    torch.manual_seed(0)
    options = {"attention_mechanism": mechanism, "heads": 2}
    pyg, ours = _pair("RGATConv", 4, 3, 3, **options)
    expected, got = compare(pyg, ours, (x, edge_index, edge_type), {"return_attention_weights": True})
    assert torch.equal(got[1][0], edge_index)
    close(got[1][1], expected[1][1], "attention weights")
    # dropout in training: the mask drawn as PyG draws it
    pyg, ours = _pair("RGATConv", 4, 3, 3, dropout=0.5, **options)
    ours.load_state_dict(pyg.state_dict())
    torch.manual_seed(5)
    expected = pyg(x, edge_index, edge_type)
    torch.manual_seed(5)
    close(ours(x, edge_index, edge_type), expected, "dropout")
    close(ours.eval()(x, edge_index, edge_type), pyg.eval()(x, edge_index, edge_type), "eval")


def test_rgat_pairs_and_size():
    num_src, num_dst = 7, 4
    edge_index = bipartite(num_src, num_dst, 25, seed=4)
    edge_type = torch.randint(0, 2, (25,), generator=torch.Generator().manual_seed(2))
    torch.manual_seed(0)
    pyg, ours = _pair("RGATConv", 4, 3, 2)
    compare(pyg, ours, ((features(num_src, 4, 1), features(num_dst, 4, 2)), edge_index, edge_type))
    # one x with size=: the destinations are its leading rows (PyG refuses the sizes; a block's convention)
    x = features(num_src, 4, 3)
    close(ours(x, edge_index, edge_type, size=(num_src, num_dst)), pyg((x, x[:num_dst]), edge_index, edge_type), "size")


def test_rgat_bad_arguments():
    with pytest.raises(ArgumentError, match="attention mechanism must either be"):
        gnn.RGATConv(4, 4, 2, attention_mechanism="both")
    with pytest.raises(ArgumentError, match="cannot be applied when value of d is greater than 1"):
        gnn.RGATConv(4, 4, 2, dim=2)
    with pytest.raises(ArgumentError, match="mod must be None with dropout"):
        gnn.RGATConv(4, 4, 2, mod="additive", dropout=0.1)
    with pytest.raises(ArgumentError, match="mod must be one of"):
        gnn.RGATConv(4, 4, 2, mod="other")
    with pytest.raises(ArgumentError, match="aggr="):
        gnn.RGATConv(4, 4, 2, aggr="mean")
    conv = gnn.RGATConv(4, 4, 2)
    edge_index, edge_type = torch.tensor([[0, 1], [1, 0]]), torch.tensor([0, 1])
    with pytest.raises(ArgumentError, match="edge_attr needs edge_dim"):
        conv(torch.randn(2, 4), edge_index, edge_type, torch.randn(2, 3))
    with pytest.raises(ArgumentError, match="float features"):
        conv(torch.arange(2), edge_index, edge_type)


@pytest.mark.parametrize(
    "layer, options",
    [("RGCNConv", {}), ("RGCNConv", {"aggr": "add"}), ("RGATConv", {"heads": 4}), ("RGATConv", {"heads": 2})],
)
def test_layers_on_a_graph_the_default_schedule_specializes(layer, options):
    """20K edges: the default schedule compiles the sizes in (segment matmuls over each
    relation's pairs, tiles of several pairs, narrow score transforms), which the small
    hypothesis graphs never reach; PyG is still the oracle, forward and backward."""
    rng = np.random.default_rng(3)
    n, e, r = 500, 20_000, 3  # 1,500 (vertex, relation) pairs at most: the compact form pays
    edge_index = torch.from_numpy(rng.integers(0, n, (2, e)))
    edge_type = torch.from_numpy(rng.integers(0, r, e))
    torch.manual_seed(0)
    channels = (16, 45) if layer == "RGCNConv" else (16, 8)
    pyg, ours = _pair(layer, *channels, r, **options)
    compare(pyg, ours, (features(n, 16, 1), edge_index, edge_type))
