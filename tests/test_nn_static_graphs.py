"""Static graphs (x of [*batch, num_nodes, channels] on one edge_index) against PyG's layers."""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import compare, one_loop_per_vertex, pyg_graphs

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError, GraphError  # noqa: E402


def _mlp(i: int, o: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(i, 6), torch.nn.ReLU(), torch.nn.Linear(6, o))


def _layers(name: str, seed: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(PyG's, gnnc's) layer `name`, 5 -> 3 channels, same weights."""
    torch.manual_seed(seed)
    if name in ("GINConv", "GINEConv"):
        kwargs = {"edge_dim": 2} if name == "GINEConv" else {}
        pyg = getattr(pyg_nn, name)(_mlp(5, 3), **kwargs)
        ours = getattr(gnn, name)(_mlp(5, 3), **kwargs)
    elif name == "APPNP":
        pyg, ours = pyg_nn.APPNP(3, 0.2), gnn.APPNP(3, 0.2)
    else:
        pyg, ours = getattr(pyg_nn, name)(5, 3), getattr(gnn, name)(5, 3)
    return pyg, ours


LAYERS = ["GCNConv", "SAGEConv", "GINConv", "GINEConv", "GraphConv", "APPNP"]
WEIGHTED = ("GCNConv", "GraphConv", "APPNP")


@given(
    graph=pyg_graphs(max_vertices=12, max_edges=40),
    name=st.sampled_from(LAYERS),
    batch=st.sampled_from([(1,), (3,), (2, 2)]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_static_graph_batch_matches_pyg(graph, name, batch, weighted, seed):
    """Forward and gradients (features, edge weights or features, parameters) as PyG's on the
    batched features, whose graphs share one edge_index: isolated vertices, self loops,
    duplicate edges, empty graphs."""
    edge_index, n = graph
    if weighted and name in ("GCNConv", "APPNP"):
        edge_index = one_loop_per_vertex(edge_index)  # as tests/test_nn_gcn.py: PyG's duplicate-loop gradient
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, n, 5, generator=generator).requires_grad_()
    args: tuple = (x, edge_index)
    if name == "GINEConv":
        args += (torch.randn(edge_index.shape[1], 2, generator=generator).requires_grad_(),)
    elif weighted and name in WEIGHTED:
        args += (torch.rand(edge_index.shape[1], generator=generator).requires_grad_(),)
    pyg, ours = _layers(name, seed)
    expected, got = compare(pyg, ours, args)
    assert got.shape == (*batch, n, 3 if name != "APPNP" else 5)


@pytest.mark.parametrize("name", ["SAGEConv", "GraphConv", "GINConv"])
def test_a_bipartite_static_graph_matches_pyg(name):
    """(x_src, x_dst) with the same batch dimensions, and x_dst None with size=."""
    edge_index = torch.tensor([[0, 1, 2, 4, 4, 0], [0, 1, 2, 2, 1, 1]])
    generator = torch.Generator().manual_seed(3)
    x_src = torch.randn(2, 5, 5, generator=generator).requires_grad_()
    x_dst = torch.randn(2, 3, 5, generator=generator).requires_grad_()
    pyg, ours = _layers(name, 0)
    compare(pyg, ours, ((x_src, x_dst), edge_index))
    out = ours((x_src, None), edge_index, size=(5, 3))
    assert out.shape == (2, 3, 3)


def test_a_static_graph_reuses_its_repeated_edge_index():
    """The repeated edge_index (and so the graph behind it) is made once per edge_index and batch
    shape, and made again after an in-place edit of the edge_index."""
    from gnnc.nn import derived

    conv, edge_index = gnn.SAGEConv(4, 2), torch.tensor([[0, 1, 2], [1, 2, 0]])
    made = []
    original = derived._repeated

    def counting(*args):
        made.append(args[1:])
        return original(*args)

    derived._repeated = counting
    try:
        x = torch.randn(3, 3, 4)
        first = conv(x, edge_index)
        conv(x, edge_index)
        conv(torch.randn(5, 3, 4), edge_index)
        assert made == [(3, 3, 3), (5, 3, 3)]
        edge_index[0, 0] = 2  # 2 -> 1 instead of 0 -> 1
        second = conv(x, edge_index)
        assert len(made) == 3 and not torch.allclose(first, second)
        expected = torch.stack([conv(x[b], edge_index) for b in range(3)])
        torch.testing.assert_close(second, expected)
    finally:
        derived._repeated = original


def test_static_graph_errors():
    """An id past a graph's rows (it would land in the next graph's vertices), per-edge values of
    another shape, mismatched batch dimensions, and an adjacency other than an edge_index."""
    conv = gnn.GraphConv(4, 2)
    x = torch.randn(2, 3, 4)
    with pytest.raises(GraphError, match=r"source id 3 is out of range: a static graph's sources are its 3 rows"):
        conv(x, torch.tensor([[3], [0]]))
    with pytest.raises(ArgumentError, match=r"edge_weight is per edge of the shared edge_index"):
        conv(x, torch.tensor([[0, 1], [1, 2]]), torch.ones(2, 2, 1))
    with pytest.raises(ArgumentError, match=r"x\[1\] must have x\[0\]'s batch dimensions \(2,\)"):
        conv((x, torch.randn(3, 3, 4)), torch.tensor([[0], [1]]))
    adj = torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1), (3, 3))
    with pytest.raises(ArgumentError, match="takes an edge_index tensor shared by the batch"):
        conv(x, adj)
    with pytest.raises(ArgumentError, match="static graphs .* are taken by GCNConv"):
        gnn.GATConv(4, 2)(x, torch.tensor([[0], [1]]))


def test_a_static_graph_model_compiles_without_graph_breaks():
    """Two layers on a static-graph batch under torch.compile(fullgraph=True): the repeated
    edge_index comes from a custom op (`gnnc::nn_static_edges`); forward and gradients as eager."""

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = gnn.GCNConv(4, 6), gnn.SAGEConv(6, 3)

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    torch.manual_seed(0)
    net, edge_index = Net(), torch.tensor([[0, 1, 2, 3, 3], [1, 2, 3, 0, 3]])
    x = torch.randn(2, 3, 4, 4)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = net(xa, edge_index)
    got = torch.compile(net, fullgraph=True)(xb, edge_index)
    torch.testing.assert_close(got, expected)
    expected.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(xb.grad, xa.grad)
    # the op's copy of the repeated edge_index finds the graph built for the cached one
    from gnnc.graph.graph import Graph

    built = []
    original = Graph.from_edge_index.__func__
    with patch.object(
        Graph, "from_edge_index", classmethod(lambda cls, *a, **k: built.append(1) or original(cls, *a, **k))
    ):
        compiled = torch.compile(net, fullgraph=True)
        for _ in range(3):
            compiled(xb, edge_index).sum().backward()
    assert built == []


@pytest.mark.parametrize("name", LAYERS)
def test_node_dim_0_is_not_read_as_a_static_graph(name):
    """PyG's node_dim=0 reads 3-D features as [num_nodes, *, channels], another layout: gnnc
    refuses it rather than read it as [*batch, num_nodes, channels]; 2-D features are the same
    either way."""
    kwargs = {"node_dim": 0}
    if name in ("GINConv", "GINEConv"):
        conv = getattr(gnn, name)(_mlp(5, 3), **({"edge_dim": 2} if name == "GINEConv" else {}), **kwargs)
    elif name == "APPNP":
        conv = gnn.APPNP(2, 0.1, **kwargs)
    else:
        conv = getattr(gnn, name)(5, 3, **kwargs)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    extra = (torch.randn(3, 2),) if name == "GINEConv" else ()
    assert conv(torch.randn(3, 5), edge_index, *extra).shape[0] == 3
    with pytest.raises(ArgumentError, match="node_dim=-2 .* only; this layer was built with node_dim=0"):
        conv(torch.randn(2, 3, 5), edge_index, *extra)


def test_each_graphs_own_edge_features_match_pyg():
    """GINEConv's edge_attr of [*batch, E, D], each graph's own (PyG's message broadcasts them)."""
    edge_index = torch.tensor([[0, 1, 2, 3, 3], [1, 2, 3, 0, 3]])
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 4, 5, generator=generator).requires_grad_()
    edge_attr = torch.randn(2, 3, 5, 2, generator=generator).requires_grad_()
    pyg, ours = _layers("GINEConv", 0)
    compare(pyg, ours, (x, edge_index, edge_attr))
    with pytest.raises(ArgumentError, match=r"or \[\*batch, E, D\] = \[2, 3, 5, D\]\), got \(3, 2, 5, 2\)"):
        ours(x, edge_index, edge_attr.transpose(0, 1))
