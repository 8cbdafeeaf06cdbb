"""gnnc.nn's PNAConv against PyG's: every aggregator and scaler, towers with and without divided
input, edge features, deeper pre- and post-NNs, trained degree averages, activations by name and
as modules; PyG's initialisation draw for draw; outputs and gradients (features, edge features,
every parameter, the degree averages with train_norm) on hypothesis graphs; blocks, sparse
adjacencies, float64, torch.compile and the refusals.

Ties in max and min split the gradient evenly between the tied edges in PyG (torch's
scatter_reduce amax/amin) and give it whole to the lowest edge id in gnnc. Duplicate edges tie,
but from the same inputs, so every input's and parameter's gradient is the same either way (and
ReLU-zeroed messages of a deeper pre-NN carry no gradient back); they differ only where equal
messages come from different inputs, as `test_ties_split_gradients_in_pyg` shows.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import close, compare, features, pyg_graphs, same_start

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc  # noqa: E402
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402

AGGREGATORS = ["mean", "min", "max", "std", "var", "sum"]
SCALERS = ["identity", "amplification", "attenuation", "linear", "inverse_linear"]
DEG = torch.tensor([3, 5, 4, 2, 0, 1])


ACTS = [{}, {"act": "tanh"}, {"act": "leaky_relu", "act_kwargs": {"negative_slope": 0.2}}, {"act": torch.nn.ELU()}]


@given(
    graph=pyg_graphs(),
    towers=st.sampled_from([(1, False), (2, False), (2, True)]),
    edge_dim=st.sampled_from([None, 3]),
    layers=st.sampled_from([(1, 1), (1, 2), (2, 1), (2, 2)]),
    act=st.sampled_from(ACTS),
    train_norm=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_pna_matches_pyg(graph, towers, edge_dim, layers, act, train_norm, seed):
    """Every aggregator and scaler at once (one kernel per form: vertex terms, edge terms, messages)."""
    edge_index, n = graph
    options = {"towers": towers[0], "divide_input": towers[1], "edge_dim": edge_dim, "train_norm": train_norm}
    options |= {"pre_layers": layers[0], "post_layers": layers[1], **act}
    args = (features(n, 4, seed), edge_index)
    if edge_dim is not None:
        args += (features(edge_index.shape[1], 3, seed + 1),)
    compare(*same_start("PNAConv", 4, 4, AGGREGATORS, SCALERS, DEG, **options), args)


SUBSETS = [
    (["max"], ["identity"]),  # no degrees, one result
    (["std", "add"], ["attenuation"]),
    (["MinAggregation", "var", "mean", "var"], ["inverse_linear", "identity"]),  # PyG's names, repeats
]


@pytest.mark.parametrize(("aggregators", "scalers"), SUBSETS)
def test_aggregator_and_scaler_subsets(aggregators, scalers):
    """Fewer results, in the order given, on a graph with duplicate edges and a vertex without in-edges."""
    g = torch.Generator().manual_seed(3)
    edge_index = torch.cat([torch.randint(0, 9, (2, 30), generator=g), torch.tensor([[1, 1], [2, 2]])], dim=1)
    compare(
        *same_start("PNAConv", 4, 6, aggregators, scalers, DEG, towers=2, post_layers=2),
        (features(10, 4, 4), edge_index),
    )


def test_ties_split_gradients_in_pyg():
    """PyG divides a tied maximum's gradient between the tied edges, gnnc gives it to the lowest
    edge id: the outputs and the sums of the gradients agree, the tied sources' gradients do not."""
    edge_index = torch.tensor([[0, 2], [1, 1]])  # sources 0 and 2 have equal rows: equal messages
    x = features(3, 2, 1, grad=False)
    x[2] = x[0]
    pyg, ours = same_start("PNAConv", 2, 2, ["max"], ["identity"], DEG)
    x_pyg, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    close(ours(x_ours, edge_index), pyg(x_pyg, edge_index), "output")
    weight = torch.randn(3, 2, generator=torch.Generator().manual_seed(2))
    (pyg(x_pyg, edge_index) * weight).sum().backward()
    (ours(x_ours, edge_index) * weight).sum().backward()
    close(x_ours.grad[0] + x_ours.grad[2], x_pyg.grad[0] + x_pyg.grad[2], "the tied sources' gradients")
    close(ours.pre_nns[0][0].weight.grad, pyg.pre_nns[0][0].weight.grad, "weight gradient")
    assert not torch.allclose(x_ours.grad[0], x_pyg.grad[0])


def test_blocks_sparse_graph_and_float64():
    g = torch.Generator().manual_seed(5)
    edge_index = torch.stack([torch.randint(0, 8, (20,), generator=g), torch.randint(0, 5, (20,), generator=g)])
    x, ea = features(8, 4, 6), features(20, 2, 7)
    for divide in (False, True):
        pyg, ours = same_start("PNAConv", 4, 4, AGGREGATORS, SCALERS, DEG, edge_dim=2, towers=2, divide_input=divide)
        # a block's destinations are its first sources: PyG's square graph, its first rows
        close(ours(x, gnn.Block(edge_index, 8, 5), ea), pyg(x, edge_index, ea)[:5], "a block")
        close(ours(x, gnnc.Graph(edge_index, shape=(8, 8)), ea), pyg(x, edge_index, ea), "a gnnc.Graph")
    # wide edge features, narrow towers: the edge encoder is applied, not folded into the towers' weights
    layers = same_start("PNAConv", 4, 4, AGGREGATORS, SCALERS, DEG, edge_dim=8, towers=2, divide_input=True)
    compare(*layers, (x, edge_index, features(20, 8, 8)))
    # a torch.sparse adjacency (coalesced: duplicates merged), whose values are no edge features
    pyg, ours = same_start("PNAConv", 4, 4, ["mean", "std"], SCALERS, DEG)
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.rand(20, generator=g), (8, 8)).coalesce()
    compare(pyg, ours, (x, adj))
    compare(pyg, ours, (x, adj.to_sparse_csr()))
    pyg, ours = (
        layer.double()
        for layer in same_start("PNAConv", 4, 4, AGGREGATORS, SCALERS, DEG, towers=2, pre_layers=2, act="tanh")
    )
    compare(pyg, ours, (x.double(), edge_index), rtol=1e-10)
    expected = ours(x.double(), edge_index)
    got = torch.compile(ours, fullgraph=True, backend="aot_eager")(x.double(), edge_index)
    close(got, expected, "compiled")


def test_sparse_tensor_values_are_edge_features(monkeypatch):
    """PyG's propagate passes a SparseTensor's values as edge_attr (and none without values)."""
    from tests.sparse_tensor import patch_pyg, pyg_sparse_tensor

    patch_pyg(monkeypatch)
    g = torch.Generator().manual_seed(8)
    edge_index = torch.randint(0, 8, (2, 24), generator=g)
    attr = features(24, 3, 9, grad=False)
    x = features(8, 4, 10)
    for value, edge_dim in ((None, None), (attr, 3)):
        adj = pyg_sparse_tensor()(row=edge_index[1], col=edge_index[0], value=value, sparse_sizes=(8, 8))
        compare(*same_start("PNAConv", 4, 4, AGGREGATORS, SCALERS, DEG, edge_dim=edge_dim), (x, adj))


def test_act_resolution_and_repr():
    pyg, ours = same_start("PNAConv", 4, 4, ["sum"], ["linear"], DEG, post_layers=3, act="PReLU")
    assert repr(ours) == repr(pyg)
    assert isinstance(ours.post_nns[0][1], torch.nn.PReLU)
    # act is resolved only where a layer needs it, as PyG
    gnn.PNAConv(4, 4, ["sum"], ["identity"], DEG, act="no_such_activation")
    torch.manual_seed(1)
    pyg.reset_parameters()
    torch.manual_seed(1)
    ours.reset_parameters()
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key


def test_degree_histogram():
    from torch_geometric.data import Data

    graphs = [
        Data(edge_index=torch.tensor([[0, 1, 2], [1, 1, 0]]), num_nodes=4),
        Data(edge_index=torch.tensor([[0, 1, 2, 3, 3], [2, 2, 2, 2, 0]]), num_nodes=5),
    ]
    assert torch.equal(gnn.PNAConv.get_degree_histogram(graphs), pyg_nn.PNAConv.get_degree_histogram(graphs))


def test_refusals():
    x, edge_index = torch.randn(3, 4), torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ArgumentError, match="aggregator 'median' is not supported"):
        gnn.PNAConv(4, 4, ["mean", "median"], ["identity"], DEG)
    with pytest.raises(ArgumentError, match="scaler 'log' is not one of"):
        gnn.PNAConv(4, 4, ["mean"], ["log"], DEG)
    with pytest.raises(ArgumentError, match="divisible by towers"):
        gnn.PNAConv(4, 4, ["mean"], ["identity"], DEG, towers=3, divide_input=True)
    with pytest.raises(ArgumentError, match="out_channels .* must be divisible"):
        gnn.PNAConv(4, 3, ["mean"], ["identity"], DEG, towers=2)
    with pytest.raises(ArgumentError, match="names no torch.nn activation"):
        gnn.PNAConv(4, 4, ["mean"], ["identity"], DEG, pre_layers=2, act="no_such_activation")
    with pytest.raises(ArgumentError, match="counts no vertex"):
        gnn.PNAConv(4, 4, ["mean"], ["identity"], torch.zeros(3))
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'node_dim'"):
        gnn.PNAConv(4, 4, ["mean"], ["identity"], DEG, node_dim=0)
    layer = gnn.PNAConv(4, 4, ["mean"], ["identity"], DEG)
    with pytest.raises(ArgumentError, match="edge_attr is read exactly when"):
        layer(x, edge_index, torch.randn(2, 3))
    with pytest.raises(ArgumentError, match="x has 5 channels"):
        layer(torch.randn(3, 5), edge_index)
    with pytest.raises(ArgumentError, match="x must be one tensor"):
        layer((x, x), edge_index)
    with pytest.raises(ArgumentError, match="edge_attr is read exactly when"):
        gnn.PNAConv(4, 4, ["mean"], ["identity"], DEG, edge_dim=2)(x, edge_index)
