"""gnnc.nn's FiLMConv and FeaStConv against PyG's layers of the same name.

PyG's initialisation draw for draw; outputs and gradients (features and
every parameter) on hypothesis graphs, one relation and several with random
edge types (the film layers in the kernel, and the (destination, relation)
pairs' kernel for max/min and custom film networks), every aggregation and
activation, heads and self loops; bipartite pairs, sampled blocks, sparse
adjacencies, lazy channels and the errors.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import bipartite, compare, features, pyg_graphs, same_start

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError, GnncError  # noqa: E402


def _types(num_edges, relations, seed):
    return torch.randint(0, relations, (num_edges,), generator=torch.Generator().manual_seed(seed))


def _film_nn():
    return torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.ReLU(), torch.nn.Linear(6, 8))


@given(
    graph=pyg_graphs(),
    aggr=st.sampled_from(["mean", "add", "max", "min"]),
    relations=st.sampled_from([1, 3]),
    custom=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_film_matches_pyg(graph, aggr, relations, custom, seed):
    edge_index, n = graph
    kwargs = {"nn": _film_nn()} if custom else {}
    args = (features(n, 5, seed), edge_index, _types(edge_index.shape[1], relations, seed + 1))
    compare(*same_start("FiLMConv", 5, 4, num_relations=relations, aggr=aggr, **kwargs), args)


ACTIVATIONS = [
    None,
    torch.nn.LeakyReLU(0.2),
    F.leaky_relu,
    torch.nn.Sigmoid(),
    torch.tanh,
    torch.nn.ELU(0.5),
    torch.nn.SiLU(),
    torch.nn.Identity(),
]


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda act: getattr(act, "__name__", None) or repr(act))
def test_film_activations(act):
    g = torch.Generator().manual_seed(4)
    edge_index = torch.randint(0, 10, (2, 40), generator=g)
    x = (features(10, 5, 5, grad=False) * 3).requires_grad_()  # both sides of 0 for every activation
    for relations in (1, 2):
        pyg, ours = same_start("FiLMConv", 5, 4, num_relations=relations, act=act)
        compare(pyg, ours, (x, edge_index, _types(40, relations, 6)))


@given(
    graph=pyg_graphs(),
    aggr=st.sampled_from(["mean", "add", "max", "min"]),
    heads=st.sampled_from([1, 3]),
    loops=st.booleans(),
    bias=st.booleans(),
    scale=st.sampled_from([1.0, 40.0]),  # 40: scores far apart, the heads' softmax saturated
    seed=st.integers(0, 2**16),
)
def test_feast_matches_pyg(graph, aggr, heads, loops, bias, scale, seed):
    edge_index, n = graph
    x = (features(n, 5, seed, grad=False) * scale).requires_grad_()
    pyg, ours = same_start("FeaStConv", 5, 4, heads=heads, add_self_loops=loops, bias=bias, aggr=aggr)
    if edge_index.shape[1] == 0 and not loops:  # PyG's message cannot view 0 rows as [0, heads, -1]
        expected = torch.zeros(n, 4) if ours.bias is None else ours.bias.detach().expand(n, 4)
        torch.testing.assert_close(ours(x, edge_index), expected)
        return
    # at scale 40, u's gradient sums terms of x's size (40x) into a result of order 1: the float32
    # rounding of the two softmax forms then shows at 5e-4 of the result (a hub of 100 in-edges)
    compare(pyg, ours, (x, edge_index), rtol=5e-4 if scale == 1.0 else 2e-3)


def test_bipartite_and_blocks():
    edge_index = bipartite(7, 4, 18, 1)
    types = _types(18, 3, 2)
    x_src = features(7, 5, 3)
    for relations, aggr in ((1, "mean"), (3, "mean"), (3, "max")):
        pyg, ours = same_start("FiLMConv", (5, 3), 4, num_relations=relations, aggr=aggr)
        compare(pyg, ours, ((x_src, features(4, 3, 4)), edge_index, types))
    for loops in (True, False):
        pyg, ours = same_start("FeaStConv", 5, 4, heads=2, add_self_loops=loops)
        compare(pyg, ours, ((x_src, features(4, 5, 5)), edge_index))
    # more destinations than sources: PyG's loops (i, i) would read sources that do not exist
    more = bipartite(3, 6, 15, 6)
    pair = (features(3, 5, 7), features(6, 5, 8))
    compare(*same_start("FeaStConv", 5, 4, heads=2, add_self_loops=False), (pair, more))
    with pytest.raises(ArgumentError, match="add_self_loops needs a source for every destination"):
        gnn.FeaStConv(5, 4)(pair, more)
    # a block: the destinations are the first sources; PyG's call is the pair (x, x[:num_dst])
    x = features(7, 5, 9, grad=False)
    block = gnn.Block(edge_index, 7, 4)
    pyg, ours = same_start("FeaStConv", 5, 4, heads=2)
    torch.testing.assert_close(ours(x, block), pyg((x, x[:4]), edge_index), rtol=2e-4, atol=2e-5)
    for relations in (1, 3):
        pyg, ours = same_start("FiLMConv", 5, 4, num_relations=relations)
        expected = pyg((x, x[:4]), edge_index, types)
        torch.testing.assert_close(ours(x, block, types), expected, rtol=2e-4, atol=2e-5)


def test_sparse_adjacency_and_float64():
    """A torch.sparse adjacency's values are not read (PyG's messages read none); its loops
    are replaced as an edge_index's."""
    g = torch.Generator().manual_seed(10)
    edge_index = torch.randint(0, 9, (2, 30), generator=g)
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.rand(30, generator=g) + 0.5, (9, 9)).coalesce()
    x = features(9, 5, 11)
    compare(*same_start("FeaStConv", 5, 4, heads=2), (x, adj))
    compare(*same_start("FiLMConv", 5, 4), (x, adj))
    x64 = x.detach().double().requires_grad_()
    for name, kwargs in (("FeaStConv", {"heads": 2}), ("FiLMConv", {"num_relations": 2})):
        pyg, ours = same_start(name, 5, 4, **kwargs)
        pyg.double(), ours.double()
        extra = (_types(30, 2, 12),) if name == "FiLMConv" else ()
        compare(pyg, ours, (x64, edge_index, *extra), rtol=1e-9)


@pytest.mark.parametrize(
    ("name", "kwargs"), [("FeaStConv", {"heads": 2}), ("FiLMConv", {}), ("FiLMConv", {"num_relations": 3})]
)
def test_lazy_channels(name, kwargs):
    edge_index = torch.randint(0, 6, (2, 14), generator=torch.Generator().manual_seed(13))
    extra = (_types(14, 3, 14),) if name == "FiLMConv" else ()
    pyg, ours = same_start(name, -1, 4, lazy=True, **kwargs)
    x = features(6, 5, 15)
    torch.manual_seed(1)
    pyg(x, edge_index, *extra)
    torch.manual_seed(1)
    ours(x, edge_index, *extra)  # sized and initialised by the first call, in PyG's order
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    compare(pyg, ours, (x, edge_index, *extra))


def test_bad_arguments():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    x = torch.randn(3, 4)
    with pytest.raises(ArgumentError, match="act must be None, relu"):
        gnn.FiLMConv(4, 4, act=torch.nn.GELU())
    with pytest.raises(ArgumentError, match="aggr='std' is not supported"):
        gnn.FiLMConv(4, 4, aggr="std")
    with pytest.raises(ArgumentError, match="num_relations must be a positive integer"):
        gnn.FiLMConv(4, 4, num_relations=0)
    with pytest.raises(ArgumentError, match="forward needs edge_type"):
        gnn.FiLMConv(4, 4, num_relations=2)(x, edge_index)
    with pytest.raises(GnncError, match="out of range"):
        gnn.FiLMConv(4, 4, num_relations=2)(x, edge_index, torch.tensor([0, 1, 2]))
    with pytest.raises(ArgumentError, match=r"nn must map x_dst to \[num_dst, 2 \* out_channels\]"):
        gnn.FiLMConv(4, 4, nn=torch.nn.Linear(4, 4))(x, edge_index)
    with pytest.raises(ArgumentError, match="x\\[1\\]"):
        gnn.FiLMConv(4, 4)((x, None), edge_index)
    with pytest.raises(ArgumentError, match="aggr='mul' is not supported"):
        gnn.FeaStConv(4, 4, aggr="mul")
    with pytest.raises(ArgumentError, match="heads must be a positive integer"):
        gnn.FeaStConv(4, 4, heads=0)
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'cached'"):
        gnn.FeaStConv(4, 4, cached=True)
    with pytest.raises(ArgumentError, match="x\\[1\\]"):
        gnn.FeaStConv(4, 4)((x, None), edge_index)
    assert repr(gnn.FeaStConv(4, 3, heads=2)) == "FeaStConv(4, 3, heads=2)"
    assert repr(gnn.FiLMConv(4, 3, num_relations=2)) == "FiLMConv(4, 3, num_relations=2)"
