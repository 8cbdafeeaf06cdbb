"""gnnc.nn's GENConv (DeeperGCN) against PyG's: every aggregation (softmax with a fixed or learned
temperature, its semi-gradient, the power mean with a fixed or learned power, the plain ones),
message norm, edge features, MLP norms and depths; PyG's initialisation draw for draw; outputs
and gradients (features, edge features, every parameter: t, p and the message scale too)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import bipartite, close, compare, features, pyg_graphs, same_start

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402

OPTIONS = [
    {},
    {"aggr": "softmax_sg", "t": 0.5},
    {"learn_t": True, "t": 2.0},
    {"aggr": "powermean", "p": 2.0},
    {"aggr": "power", "learn_p": True, "p": 1.5},
    {"aggr": "powermean"},
    {"aggr": "mean", "msg_norm": True, "learn_msg_scale": True},
    {"aggr": "max", "norm": "layer", "num_layers": 3, "bias": True},
    {"aggr": "add", "norm": None, "expansion": 1},
    {"edge_dim": 3},  # lin_edge inside the kernel (FUSED_EDGE_DIM)
    # (p = 1.5: at p = 1 exactly, a vertex whose messages are all below the clamp has a mean of
    # exactly 1e-4 in PyG (pow(x, 1.0) is exact) and 1e-4 less an ulp here (exp(log(x))), on either
    # side of the final clamp's edge: p's gradient then differs by that vertex's share)
    {"edge_dim": 3, "aggr": "powermean", "learn_p": True, "p": 1.5, "bias": False},
    {"edge_dim": 3, "aggr": "max", "msg_norm": True},
    {"edge_dim": 10},  # lin_edge in torch
]


@given(
    graph=pyg_graphs(duplicates=False),
    options=st.sampled_from(OPTIONS),
    widths=st.sampled_from([(4, 4), (5, 4)]),  # lin_src / none
    seed=st.integers(0, 2**16),
)
def test_gen_conv_matches_pyg(graph, options, widths, seed):
    edge_index, n = graph
    if n < 2 and options.get("norm", "batch") == "batch":
        return  # batch norm in training needs two rows
    args = (features(n, widths[0], seed), edge_index)
    if "edge_dim" in options:
        args += (features(edge_index.shape[1], options["edge_dim"], seed + 1),)
    compare(*same_start("GENConv", *widths, **options), args, rtol=5e-4)


def test_bipartite_blocks_and_compiled():
    edge_index = bipartite(7, 4, 18, 2)
    x_src, x_dst = features(7, 5, 1), features(4, 3, 2)
    compare(*same_start("GENConv", (5, 3), 4, edge_dim=2), ((x_src, x_dst), edge_index, features(18, 2, 3)))
    compare(*same_start("GENConv", (5, 3), 4, aggr="powermean", p=3.0), ((x_src, None), edge_index), {"size": (7, 4)})
    pyg, ours = same_start("GENConv", 5, 4, norm=None)
    x = features(7, 5, 4, grad=False)
    close(ours(x, gnn.Block(edge_index, 7, 4)), pyg((x, x[:4]), edge_index), "a block")
    expected = ours(x, edge_index.clamp(max=6))
    got = torch.compile(ours, fullgraph=True, backend="aot_eager")(x, edge_index.clamp(max=6))
    close(got, expected, "compiled")


def test_bad_arguments():
    with pytest.raises(ArgumentError, match="aggr='lstm' is not supported"):
        gnn.GENConv(4, 4, aggr="lstm")
    with pytest.raises(ArgumentError, match="t cannot be learned"):
        gnn.GENConv(4, 4, aggr="softmax_sg", learn_t=True)
    with pytest.raises(ArgumentError, match="norm must be"):
        gnn.GENConv(4, 4, norm="group")
    with pytest.raises(ArgumentError, match="give edge_dim"):
        gnn.GENConv(4, 4)(torch.randn(3, 4), torch.tensor([[0, 1], [1, 2]]), torch.randn(2, 3))
