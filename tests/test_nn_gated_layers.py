"""gnnc.nn's ResGatedGraphConv, CGConv and LEConv against PyG's layers of the same name.

PyG's initialisation draw for draw; outputs and gradients (features,
edge weights and features, every parameter) on hypothesis graphs, square
and bipartite, every gate and option, edge features split off PyG's
concatenated Linear layers, sampled blocks and sparse adjacencies.
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

GATES = [None, torch.nn.Tanh(), torch.nn.ReLU(), torch.sigmoid, torch.tanh]


def _gate(act):
    return {} if act is None else {"act": act}


@given(
    graph=pyg_graphs(),
    act=st.sampled_from(GATES),
    options=st.sampled_from([{}, {"root_weight": False}, {"bias": False}, {"edge_dim": 3}]),
    seed=st.integers(0, 2**16),
)
def test_res_gated_matches_pyg(graph, act, options, seed):
    edge_index, n = graph
    args = (features(n, 5, seed), edge_index)
    if "edge_dim" in options:
        args += (features(edge_index.shape[1], 3, seed + 1),)
    compare(*same_start("ResGatedGraphConv", 5, 4, **_gate(act), **options), args)


@given(graph=pyg_graphs(), bias=st.booleans(), weighted=st.booleans(), seed=st.integers(0, 2**16))
def test_le_conv_matches_pyg(graph, bias, weighted, seed):
    edge_index, n = graph
    w = features(edge_index.shape[1], 1, seed + 1).view(-1) if weighted else None
    compare(*same_start("LEConv", 5, 4, bias=bias), (features(n, 5, seed), edge_index, w))


@pytest.mark.parametrize("edge_dim", [None, 2])
def test_bipartite_and_blocks(edge_dim):
    edge_index = bipartite(7, 4, 18, 1)
    x_src, x_dst = features(7, 5, 2), features(4, 3, 3)
    extra = () if edge_dim is None else (features(18, 2, 4),)
    compare(*same_start("ResGatedGraphConv", (5, 3), 4, edge_dim=edge_dim), ((x_src, x_dst), edge_index, *extra))
    if edge_dim is None:
        compare(*same_start("LEConv", (5, 3), 4), ((x_src, x_dst), edge_index))
    # a block: the destinations are the first sources; PyG's call is the pair (x, x[:num_dst])
    x = features(7, 5, 5, grad=False)
    for name in ("ResGatedGraphConv", "LEConv"):
        kwargs = {"edge_dim": edge_dim} if name == "ResGatedGraphConv" else {}
        if name == "LEConv" and edge_dim is not None:
            continue
        pyg, ours = same_start(name, 5, 4, **kwargs)
        expected = pyg((x, x[:4]), edge_index, *extra)
        got = ours(x, gnn.Block(edge_index, 7, 4), *extra)
        torch.testing.assert_close(got, expected, rtol=2e-4, atol=2e-5)


def test_sparse_adjacencies_as_pyg_reads_them():
    """LEConv takes a torch.sparse adjacency's values as edge weights; ResGatedGraphConv's
    messages read none (PyG's do not)."""
    g = torch.Generator().manual_seed(6)
    edge_index = torch.randint(0, 8, (2, 25), generator=g)
    values = torch.rand(25, generator=g) + 0.5
    adj = torch.sparse_coo_tensor(edge_index.flip(0), values, (8, 8)).coalesce()
    x = features(8, 5, 7)
    compare(*same_start("LEConv", 5, 4), (x, adj))
    compare(*same_start("ResGatedGraphConv", 5, 4), (x, adj))


def test_lazy_channels():
    edge_index = torch.randint(0, 6, (2, 14), generator=torch.Generator().manual_seed(8))
    for name in ("ResGatedGraphConv", "LEConv"):
        pyg, ours = same_start(name, -1, 4, lazy=True)
        x = features(6, 5, 9)
        pyg(x, edge_index), ours(x, edge_index)  # sized and initialised by the first call
        compare(pyg, ours, (x, edge_index))


def test_bad_arguments():
    with pytest.raises(ArgumentError, match="act must be sigmoid"):
        gnn.ResGatedGraphConv(4, 4, act=torch.nn.GELU())
    with pytest.raises(ArgumentError, match="act must be sigmoid"):
        gnn.ResGatedGraphConv(4, 4, act=torch.nn.ReLU(inplace=True))
    with pytest.raises(ArgumentError, match="lazy"):
        gnn.ResGatedGraphConv(-1, 4, edge_dim=2)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    x = torch.randn(3, 4)
    with pytest.raises(ArgumentError, match="edge_attr is read exactly when"):
        gnn.ResGatedGraphConv(4, 4)(x, edge_index, torch.randn(3, 2))
    with pytest.raises(ArgumentError, match="edge_attr is read exactly when"):
        gnn.ResGatedGraphConv(4, 4, edge_dim=2)(x, edge_index)
    with pytest.raises(ArgumentError, match=r"edge_attr must be \[3, 2\]"):
        gnn.ResGatedGraphConv(4, 4, edge_dim=2)(x, edge_index, torch.randn(3, 5))
    with pytest.raises(ArgumentError, match="x\\[1\\]"):
        gnn.LEConv(4, 4)((x, None), edge_index)


@given(
    graph=pyg_graphs(duplicates=False),
    aggr=st.sampled_from(["add", "mean", "max"]),
    # dim 3: the edge terms inside the kernel; 10 (past FUSED_EDGE_DIM): made in torch
    options=st.sampled_from([{}, {"dim": 3}, {"dim": 10}, {"dim": 3, "batch_norm": True}, {"bias": False}]),
    scale=st.sampled_from([1.0, 30.0]),  # 30: softplus far out on both sides (its stable form)
    seed=st.integers(0, 2**16),
)
def test_cg_conv_matches_pyg(graph, aggr, options, scale, seed):
    edge_index, n = graph
    if options.get("batch_norm") and n < 2:
        return  # batch norm in training needs two rows
    x = (features(n, 5, seed, grad=False) * scale).requires_grad_()
    args = (x, edge_index)
    if "dim" in options:
        args += (features(edge_index.shape[1], options["dim"], seed + 1),)
    compare(*same_start("CGConv", 5, aggr=aggr, **options), args, rtol=5e-4)


def test_cg_conv_bipartite_blocks_and_errors():
    edge_index = bipartite(7, 4, 18, 2)
    compare(
        *same_start("CGConv", (5, 3), dim=2), ((features(7, 5, 1), features(4, 3, 2)), edge_index, features(18, 2, 3))
    )
    x = features(7, 5, 4, grad=False)
    pyg, ours = same_start("CGConv", 5)
    torch.testing.assert_close(ours(x, gnn.Block(edge_index, 7, 4)), pyg((x, x[:4]), edge_index), rtol=2e-4, atol=2e-5)
    with pytest.raises(ArgumentError, match="edge_attr is read exactly when"):
        ours(x, edge_index[:, :3].clamp(max=3), torch.randn(3, 2))
    with pytest.raises(ArgumentError, match="channels must be given"):
        gnn.CGConv(-1)
    with pytest.raises(ArgumentError, match="built for"):
        ours(torch.randn(7, 6), edge_index.clamp(max=6))
