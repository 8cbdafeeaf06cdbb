"""gnnc.nn's GeneralConv against PyG's layer of the same name.

PyG's initialisation draw for draw; outputs and gradients (features, edge
features, every parameter) on hypothesis graphs for every aggregation,
directed and undirected messages, heads, both attentions, edge features,
lin_self as a Linear or the identity, L2 normalisation; bipartite pairs and
blocks; PyG's errors as clear ones.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import bipartite, compare, features, pyg_graphs, same_start

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402

ATTENTION = [{}, {"attention": True}, {"attention": True, "attention_type": "dot_product"}]


@given(
    graph=pyg_graphs(),
    aggr=st.sampled_from(["add", "mean", "max", "min"]),
    attention=st.sampled_from(ATTENTION),
    directed=st.booleans(),
    heads=st.sampled_from([1, 2]),
    edge_dim=st.sampled_from([None, 3]),
    seed=st.integers(0, 2**16),
)
def test_general_conv_matches_pyg(graph, aggr, attention, directed, heads, edge_dim, seed):
    edge_index, n = graph
    args = (features(n, 5, seed), edge_index)
    if edge_dim is not None:
        args += (features(edge_index.shape[1], edge_dim, seed + 1),)
    options = dict(aggr=aggr, directed_msg=directed, heads=heads, in_edge_channels=edge_dim, **attention)
    # max / min: PyG's scatter splits a tie's gradient where gnnc's goes to the lowest edge id, and
    # duplicate edges tie exactly; the outputs agree regardless
    compare(*same_start("GeneralConv", 5, 4, **options), args, grads=aggr not in ("max", "min"))


@pytest.mark.parametrize(
    "options",
    [
        {"skip_linear": True},
        {"l2_normalize": True},
        {"bias": False, "attention": True},
        {"bias": False, "directed_msg": False, "attention": True, "attention_type": "dot_product"},
    ],
)
def test_options(options):
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 0, 2], [1, 2, 3, 4, 0, 0, 1]])
    for channels in (4, 5):  # lin_self the identity where in == out (without skip_linear)
        compare(*same_start("GeneralConv", 4, channels, **options), (features(5, 4, 1), edge_index))


def test_no_duplicates_max_gradients():
    """max / min gradients on a graph without duplicate edges (no ties), against PyG's."""
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 0, 2, 4], [1, 2, 3, 4, 0, 3, 0, 1]])
    for aggr in ("max", "min"):
        for attention in ATTENTION:
            compare(*same_start("GeneralConv", 4, 3, aggr=aggr, heads=2, **attention), (features(5, 4, 2), edge_index))


@pytest.mark.parametrize("attention", ATTENTION)
def test_bipartite_and_blocks(attention):
    edge_index = bipartite(7, 4, 18, 1)
    x_src, x_dst = features(7, 5, 2), features(4, 5, 3)
    e = features(18, 2, 4)
    options = dict(heads=2, in_edge_channels=2, **attention)
    compare(*same_start("GeneralConv", 5, 3, **options), ((x_src, x_dst), edge_index, e))
    narrow = ((x_src, features(4, 3, 5)), edge_index, e)
    if attention.get("attention_type") == "dot_product":  # lin_msg reads x_dst too: PyG fails in F.linear
        with pytest.raises(ArgumentError, match="dot_product attention reads lin_msg"):
            gnn.GeneralConv((5, 3), 3, **options)(*narrow)
    else:
        compare(*same_start("GeneralConv", (5, 3), 3, **options), narrow)
    # a block: the destinations are the first sources; PyG's call is the pair (x, x[:num_dst])
    x = features(7, 5, 5, grad=False)
    pyg, ours = same_start("GeneralConv", 5, 3, **options)
    got = ours(x, gnn.Block(edge_index, 7, 4), e)
    torch.testing.assert_close(got, pyg((x, x[:4]), edge_index, e), rtol=2e-4, atol=2e-5)


def test_size_argument():
    edge_index = torch.tensor([[0, 1, 2], [1, 0, 1]])
    x = (features(3, 4, 1), features(2, 4, 2))
    compare(*same_start("GeneralConv", 4, 3), (x, edge_index, None, (3, 2)))


def test_state_dict_loads_from_pyg():
    torch.manual_seed(3)
    pyg = pyg_nn.GeneralConv(5, 4, in_edge_channels=2, directed_msg=False, attention=True, heads=2)
    ours = gnn.GeneralConv(5, 4, in_edge_channels=2, directed_msg=False, attention=True, heads=2)
    ours.load_state_dict(pyg.state_dict())
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    x, e = features(4, 5, 1, grad=False), features(4, 2, 2, grad=False)
    torch.testing.assert_close(ours(x, edge_index, e), pyg(x, edge_index, e))


def test_errors():
    edge_index = torch.tensor([[0, 1], [1, 0]])
    x = features(2, 4, 1, grad=False)
    with pytest.raises(ArgumentError, match="attention type"):
        gnn.GeneralConv(4, 3, attention=True, attention_type="cosine")
    with pytest.raises(ArgumentError, match="aggr"):
        gnn.GeneralConv(4, 3, aggr="mul")
    with pytest.raises(ArgumentError, match="heads"):
        gnn.GeneralConv(4, 3, heads=0)
    with pytest.raises(ArgumentError, match="node_dim"):
        gnn.GeneralConv(4, 3, node_dim=0)
    with pytest.raises(ArgumentError, match="in_edge_channels"):
        gnn.GeneralConv(4, 3)(x, edge_index, features(2, 2, 2))
    with pytest.raises(ArgumentError, match="x\\[1\\]"):
        gnn.GeneralConv(4, 3)((x, None), edge_index)
