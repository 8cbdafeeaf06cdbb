"""gnnc.nn's MFConv against PyG's: hypothesis graphs (hubs past max_degree, isolated vertices, self
loops, duplicate edges), square and bipartite, with and without the root term, blocks, a torch.sparse
adjacency's weights; PyG's initialisation draw for draw; outputs and every gradient."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import bipartite, close, compare, features, pyg_graphs, same_start

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402


@given(
    graph=pyg_graphs(),
    max_degree=st.sampled_from([0, 2, 10]),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_mf_conv_matches_pyg(graph, max_degree, bias, seed):
    edge_index, n = graph
    compare(*same_start("MFConv", 5, 4, max_degree=max_degree, bias=bias), (features(n, 5, seed), edge_index))


def test_bipartite_blocks_and_sparse():
    edge_index = bipartite(7, 4, 18, 3)
    x_src, x_dst = features(7, 5, 1), features(4, 3, 2)
    compare(*same_start("MFConv", (5, 3), 4, max_degree=3), ((x_src, x_dst), edge_index))
    compare(*same_start("MFConv", (5, 3), 4), ((x_src, None), edge_index), {"size": (7, 4)})
    pyg, ours = same_start("MFConv", 5, 4)
    x = features(7, 5, 3, grad=False)
    close(ours(x, gnn.Block(edge_index, 7, 4)), pyg((x, x[:4]), edge_index), "a block")
    # a torch.sparse adjacency: its values weigh the sum (PyG's spmm); the degree counts its entries
    g = torch.Generator().manual_seed(4)
    square = torch.randint(0, 8, (2, 24), generator=g)
    adj = torch.sparse_coo_tensor(square.flip(0), torch.rand(24, generator=g) + 0.5, (8, 8)).coalesce()
    coo = adj.coalesce()
    weighted = torch.zeros(8, 5).index_add(
        0, coo.indices()[0], coo.values()[:, None] * features(8, 5, 5)[coo.indices()[1]]
    )
    pyg, ours = same_start("MFConv", 5, 4, max_degree=3)
    got = ours(features(8, 5, 5), adj.to_sparse_csr())
    deg = torch.bincount(coo.indices()[0], minlength=8).clamp(max=3)
    want = torch.stack(
        [pyg.lins_l[d](weighted[v]) + pyg.lins_r[d](features(8, 5, 5)[v]) for v, d in enumerate(deg.tolist())]
    )
    close(got, want, "torch.sparse")


def test_bad_arguments():
    with pytest.raises(ArgumentError, match="max_degree must be"):
        gnn.MFConv(4, 4, max_degree=-1)
