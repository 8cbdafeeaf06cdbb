"""gnnc.nn's SAGEConv, GraphConv, GINConv, GINEConv and APPNP against PyG's layers of the same name.

Outputs and gradients (inputs, edge weights, every parameter) on hypothesis
graphs with isolated vertices, self loops and duplicate edges, square and
bipartite. Max and min aggregations compare gradients on graphs without
duplicate edges: ties split their gradient differently (gnnc gives it to the
lowest edge id, torch's scatter divides it).
"""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import bipartite, compare, features, one_loop_per_vertex, pyg_graphs

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402
from gnnc.nn.conv import aggregate as aggregate_module  # noqa: E402

AGGRS = ["mean", "sum", "add", "max", "min"]


def _edge_weight(edge_index, seed):
    return torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(seed)).requires_grad_()


@st.composite
def _graph_for(draw, aggr):
    unique = aggr in ("max", "min")
    return draw(pyg_graphs(duplicates=not unique, loops=not unique))


@given(
    data=st.data(),
    aggr=st.sampled_from(AGGRS),
    # equal widths: the transform runs first only for an x that needs a gradient (transform_first)
    channels=st.sampled_from([(8, 4), (4, 8), (6, 6)]),
    options=st.sampled_from([{}, {"normalize": True}, {"root_weight": False}, {"project": True}, {"bias": False}]),
    x_grad=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_sage_conv_matches_pyg(data, aggr, channels, options, x_grad, seed):
    edge_index, n = data.draw(_graph_for(aggr))
    torch.manual_seed(seed)
    pyg, ours = pyg_nn.SAGEConv(*channels, aggr=aggr, **options), gnn.SAGEConv(*channels, aggr=aggr, **options)
    compare(pyg, ours, (features(n, channels[0], seed, grad=x_grad), edge_index))


@given(
    data=st.data(),
    aggr=st.sampled_from(AGGRS),
    channels=st.sampled_from([(8, 4), (4, 8), (6, 6)]),
    weighted=st.booleans(),
    x_grad=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_graph_conv_matches_pyg(data, aggr, channels, weighted, x_grad, seed):
    edge_index, n = data.draw(_graph_for(aggr))
    torch.manual_seed(seed)
    pyg, ours = pyg_nn.GraphConv(*channels, aggr=aggr), gnn.GraphConv(*channels, aggr=aggr)
    w = _edge_weight(edge_index, seed) if weighted else None
    compare(pyg, ours, (features(n, channels[0], seed, grad=x_grad), edge_index, w))


def _mlp(i, o):
    return torch.nn.Sequential(torch.nn.Linear(i, 6), torch.nn.ReLU(), torch.nn.Linear(6, o))


@given(graph=pyg_graphs(), train_eps=st.booleans(), eps=st.sampled_from([0.0, 0.3, -0.5]), seed=st.integers(0, 2**16))
def test_gin_conv_matches_pyg(graph, train_eps, eps, seed):
    edge_index, n = graph
    torch.manual_seed(seed)
    nn_ = _mlp(5, 3)
    pyg = pyg_nn.GINConv(nn_, eps=eps, train_eps=train_eps)
    ours = gnn.GINConv(_mlp(5, 3), eps=eps, train_eps=train_eps)
    compare(pyg, ours, (features(n, 5, seed), edge_index))


@given(
    graph=pyg_graphs(),
    train_eps=st.booleans(),
    edge_dim=st.sampled_from([None, 3, 12]),  # 3: lin inside the kernel (FUSED_EDGE_DIM); 12: in torch
    seed=st.integers(0, 2**16),
)
def test_gine_conv_matches_pyg(graph, train_eps, edge_dim, seed):
    edge_index, n = graph
    torch.manual_seed(seed)
    pyg = pyg_nn.GINEConv(_mlp(5, 3), eps=0.1, train_eps=train_eps, edge_dim=edge_dim)
    ours = gnn.GINEConv(_mlp(5, 3), eps=0.1, train_eps=train_eps, edge_dim=edge_dim)
    edge_attr = features(edge_index.shape[1], edge_dim or 5, seed + 1)
    compare(pyg, ours, (features(n, 5, seed), edge_index, edge_attr))


@given(
    graph=pyg_graphs(),
    K=st.sampled_from([0, 1, 3]),
    options=st.sampled_from([{}, {"add_self_loops": False}, {"normalize": False}, {"cached": True}]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_appnp_matches_pyg(graph, K, options, weighted, seed):
    edge_index, n = graph
    if weighted and options.get("add_self_loops", True):
        edge_index = one_loop_per_vertex(edge_index)  # see test_nn_gcn: PyG's loop gradient
    w = _edge_weight(edge_index, seed) if weighted else None
    compare(pyg_nn.APPNP(K, 0.1, **options), gnn.APPNP(K, 0.1, **options), (features(n, 6, seed), edge_index, w))


def test_appnp_edge_dropout_draws_as_pyg():
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 2]])  # no self loops: same edge order
    x = features(5, 4, 0)
    pyg, ours = pyg_nn.APPNP(3, 0.2, dropout=0.5), gnn.APPNP(3, 0.2, dropout=0.5)
    torch.manual_seed(11)
    expected = pyg(x, edge_index, torch.ones(6))
    torch.manual_seed(11)
    got = ours(x, edge_index, torch.ones(6))
    assert torch.allclose(got, expected, atol=1e-5)
    ours.eval()
    assert torch.allclose(ours(x, edge_index), pyg.eval()(x, edge_index), atol=1e-5)


@pytest.mark.parametrize("layer", ["sage", "graph", "gin", "gine"])
@pytest.mark.parametrize("x_dst", [True, False])
def test_bipartite_pairs_and_size(layer, x_dst):
    num_src, num_dst = 7, 4
    edge_index = bipartite(num_src, num_dst, 20, seed=3)
    torch.manual_seed(0)
    if layer == "sage":
        pyg, ours = pyg_nn.SAGEConv((5, 3), 4), gnn.SAGEConv((5, 3), 4)
        dst_width = 3
    elif layer == "graph":
        pyg, ours = pyg_nn.GraphConv((5, 3), 4), gnn.GraphConv((5, 3), 4)
        dst_width = 3
    elif layer == "gin":
        pyg, ours = pyg_nn.GINConv(_mlp(5, 2), train_eps=True), gnn.GINConv(_mlp(5, 2), train_eps=True)
        dst_width = 5
    else:
        pyg, ours = pyg_nn.GINEConv(_mlp(5, 2), edge_dim=2), gnn.GINEConv(_mlp(5, 2), edge_dim=2)
        dst_width = 5
    x = (features(num_src, 5, 1), features(num_dst, dst_width, 2) if x_dst else None)
    args = (x, edge_index) + ((features(20, 2, 4),) if layer == "gine" else ())
    compare(pyg, ours, args, {"size": (num_src, num_dst)})


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc])
def test_sparse_adjacencies(layout):
    edge_index = torch.tensor([[0, 1, 2, 2, 3, 1, 4], [1, 2, 0, 1, 3, 3, 0]])
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(7), (5, 5)).coalesce()
    adj_t = adj_t if layout == torch.sparse_coo else adj_t.to_sparse(layout=layout)
    x = features(5, 4, 0)
    torch.manual_seed(0)
    for pyg, ours in [
        (pyg_nn.SAGEConv(4, 3), gnn.SAGEConv(4, 3)),
        (pyg_nn.GraphConv(4, 3), gnn.GraphConv(4, 3)),
        (pyg_nn.GINConv(_mlp(4, 3)), gnn.GINConv(_mlp(4, 3))),
    ]:
        expected, got = compare(pyg, ours, (x, edge_index))
        assert torch.allclose(ours(x, adj_t), expected, atol=1e-5), type(ours).__name__


def test_bad_arguments_get_clear_errors():
    with pytest.raises(ArgumentError, match="aggr='lstm' is not supported"):
        gnn.SAGEConv(4, 4, aggr="lstm")
    conv = gnn.SAGEConv(4, 4)
    with pytest.raises(ArgumentError, match="x_src has 3 rows but the graph has 5 sources"):
        conv(torch.randn(3, 4), torch.tensor([[0], [1]]), size=(5, 2))
    with pytest.raises(ArgumentError, match="a pair"):
        conv([1, 2, 3], torch.tensor([[0], [1]]))
    with pytest.raises(ArgumentError, match="edge_dim"):
        gnn.GINEConv(_mlp(4, 2))(torch.randn(3, 4), torch.tensor([[0], [1]]), torch.randn(1, 3))
    with pytest.raises(ArgumentError, match="needs edge_attr"):
        gnn.GINEConv(_mlp(4, 2))(torch.randn(3, 4), torch.tensor([[0], [1]]))


@pytest.mark.parametrize(
    "make, static",
    [
        (lambda: gnn.GCNConv(4, 3), True),
        (lambda: gnn.APPNP(2, 0.1), True),
        (lambda: gnn.SAGEConv(4, 3), True),
        (lambda: gnn.GINConv(_mlp(4, 3)), True),
        (lambda: gnn.GraphConv(4, 3), True),
        (lambda: gnn.GATConv(4, 3), False),
        (lambda: gnn.GATv2Conv(4, 3), False),
        (lambda: gnn.TransformerConv(4, 3), False),
    ],
)
def test_features_other_than_one_row_per_vertex(make, static):
    """x of [batch, num_nodes, channels] on one edge_index (PyG's static graphs) runs where PyG
    takes it (tests/test_nn_static_graphs.py) and gets a clear error where PyG refuses it; gnnc
    once read the batch axis as the vertices and failed with an id out of range. 1-D features
    get a clear error everywhere."""
    conv, edge_index = make(), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    if static:
        assert conv(torch.randn(2, 4, 4), edge_index).shape[:2] == (2, 4)
    else:
        with pytest.raises(ArgumentError, match=r"must be \[num_nodes, .*\].*(2, 4, 4).*static graphs"):
            conv(torch.randn(2, 4, 4), edge_index)
        with pytest.raises(ArgumentError, match=r"x\[0\] must be \[num_nodes, channels\]"):
            conv((torch.randn(1, 4, 4), torch.randn(4, 4)), edge_index)
    with pytest.raises(ArgumentError, match=r"must be \[num_nodes, channels\], got shape \(4,\)"):
        conv(torch.randn(4), edge_index)


# ----------------------------------------------------------- a first layer's recomputed aggregation


@given(
    data=st.data(),
    aggr=st.sampled_from(AGGRS),
    layer=st.sampled_from(["SAGEConv", "GraphConv"]),
    channels=st.sampled_from([(6, 6), (4, 8)]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_recomputed_aggregation_gives_pygs_gradients(data, aggr, layer, channels, weighted, seed):
    # the features need no gradient and the threshold is 0: every call recomputes
    edge_index, n = data.draw(_graph_for(aggr))
    torch.manual_seed(seed)
    pyg, ours = getattr(pyg_nn, layer)(*channels, aggr=aggr), getattr(gnn, layer)(*channels, aggr=aggr)
    args = (features(n, channels[0], seed, grad=False), edge_index)
    if layer == "GraphConv" and weighted:
        args += (torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(seed)),)
    with patch.object(aggregate_module, "RECOMPUTE_MIN_SHARE_OF_MEMORY", 0.0):
        assert aggregate_module.recompute_aggregation(
            args[0], (n, n), ours.lin_rel if layer == "GraphConv" else ours.lin_l
        )
        compare(pyg, ours, args)


def _saved_rows(conv, x, edge_index):
    """The data pointers of the [V, F] tensors a forward keeps for the backward."""
    kept = []

    def pack(t):
        if t.dim() == 2 and t.shape == x.shape:
            kept.append(t.data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        conv(x, edge_index).sum().backward()
    return kept


def test_a_recomputed_aggregation_is_not_kept_through_the_backward():
    edge_index = torch.randint(0, 50, (2, 400), generator=torch.Generator().manual_seed(0))
    x = features(50, 16, 0, grad=False)
    conv = gnn.SAGEConv(16, 16)
    assert any(p != x.data_ptr() for p in _saved_rows(conv, x, edge_index))  # kept: lin_l's input
    with patch.object(aggregate_module, "RECOMPUTE_MIN_SHARE_OF_MEMORY", 0.0):
        assert all(p == x.data_ptr() for p in _saved_rows(conv, x, edge_index))
        # an input that needs a gradient transforms first (transform_first), an edge weight
        # that needs one keeps the aggregation
        assert not aggregate_module.recompute_aggregation(x.clone().requires_grad_(), (50, 50), conv.lin_l)
        w = torch.rand(400, requires_grad=True)
        assert not aggregate_module.recompute_aggregation(x, (50, 50), conv.lin_l, w)
        with torch.no_grad():
            assert not aggregate_module.recompute_aggregation(x, (50, 50), conv.lin_l)


def test_recompute_aggregation_only_past_its_share_of_memory():
    x = features(1000, 64, 0, grad=False)
    lin = gnn.SAGEConv(64, 64).lin_l
    assert not aggregate_module.recompute_aggregation(x, (1000, 1000), lin)  # 256 KB
    memory = aggregate_module.PHYSICAL_MEMORY_BYTES
    rows = int(memory * aggregate_module.RECOMPUTE_MIN_SHARE_OF_MEMORY) // (64 * 4) + 1
    assert aggregate_module.recompute_aggregation(x, (1000, rows), lin)


def test_a_compiled_first_layer_keeps_its_aggregation_and_matches_eager():
    # dynamo cannot trace the recomputing autograd.Function (strict mode): compiled, it keeps
    edge_index = torch.randint(0, 40, (2, 300), generator=torch.Generator().manual_seed(1))
    x = features(40, 8, 1, grad=False)
    conv = gnn.SAGEConv(8, 8)
    with patch.object(aggregate_module, "RECOMPUTE_MIN_SHARE_OF_MEMORY", 0.0):
        eager = conv(x, edge_index)
        eager.sum().backward()
        expected = conv.lin_l.weight.grad.clone()
        conv.zero_grad()
        got = torch.compile(conv, fullgraph=True)(x, edge_index)
        got.sum().backward()
    torch.testing.assert_close(got, eager)
    torch.testing.assert_close(conv.lin_l.weight.grad, expected)


def test_functorchs_grad_of_a_first_layer_keeps_its_aggregation_and_matches_autograd():
    from torch.func import functional_call, grad

    edge_index = torch.randint(0, 40, (2, 300), generator=torch.Generator().manual_seed(2))
    x = features(40, 8, 2, grad=False)
    conv = gnn.SAGEConv(8, 8)
    params = dict(conv.named_parameters())
    with patch.object(aggregate_module, "RECOMPUTE_MIN_SHARE_OF_MEMORY", 0.0):
        got = grad(lambda p: functional_call(conv, p, (x, edge_index)).sum())(params)
        conv(x, edge_index).sum().backward()  # eager: recomputes
    for name, p in conv.named_parameters():
        torch.testing.assert_close(got[name], p.grad)


def test_torch_func_transforms_run_or_say_why_not():
    """torch.func.grad / jacrev through a gnnc op that needs an input gradient raise a clear error
    (torch's own, from register_autograd's Function without setup_context, named neither the op
    nor what to do); vmap runs, its gradients by autograd those of a loop over the batch."""
    from torch.func import grad, jacrev, vmap

    torch.manual_seed(0)
    edge_index = torch.randint(0, 30, (2, 90), generator=torch.Generator().manual_seed(5))
    x = torch.randn(2, 30, 8)
    conv = gnn.GCNConv(8, 4)
    for transform in (grad, jacrev):
        with pytest.raises(ArgumentError, match="torch.func's gradient transforms .* cannot differentiate a gnnc op"):
            transform(lambda xx: conv(xx, edge_index).sum())(x[0])
    weight = torch.arange(4.0)
    (vmap(lambda xx: conv(xx, edge_index))(x) * weight).sum().backward()
    got = conv.lin.weight.grad.clone()
    conv.zero_grad()
    (torch.stack([conv(x[0], edge_index), conv(x[1], edge_index)]) * weight).sum().backward()
    torch.testing.assert_close(got, conv.lin.weight.grad)


def test_a_recomputed_aggregation_is_logged(caplog):
    edge_index = torch.randint(0, 30, (2, 90), generator=torch.Generator().manual_seed(3))
    conv = gnn.GraphConv(8, 8)
    with patch.object(aggregate_module, "RECOMPUTE_MIN_SHARE_OF_MEMORY", 0.0), caplog.at_level("DEBUG", "gnnc.nn"):
        conv(features(30, 8, 3, grad=False), edge_index)
    assert "aggregate_sum: its [30, 8] aggregation is made again in the backward" in caplog.text


@pytest.mark.parametrize("layer", ["SAGEConv", "GraphConv"])
def test_recomputing_gives_the_same_bits_as_keeping(layer):
    edge_index = torch.randint(0, 500, (2, 5000), generator=torch.Generator().manual_seed(4))
    x = features(500, 32, 4, grad=False)
    conv = getattr(gnn, layer)(32, 32)

    def run():
        conv.zero_grad()
        out = conv(x, edge_index)
        (out * torch.arange(32.0)).sum().backward()
        return [out.detach().clone()] + [p.grad.clone() for p in conv.parameters()]

    kept = run()
    with patch.object(aggregate_module, "RECOMPUTE_MIN_SHARE_OF_MEMORY", 0.0):
        made_again = run()
    assert all(torch.equal(a, b) for a, b in zip(kept, made_again))


@pytest.mark.parametrize("form", ["coo", "csr", "graph"])
@pytest.mark.parametrize("layer", ["SAGEConv", "GraphConv"])
def test_a_recomputed_aggregation_takes_every_adjacency_form(layer, form):
    import gnnc

    edge_index = torch.randint(0, 60, (2, 400), generator=torch.Generator().manual_seed(5))
    coo = torch.sparse_coo_tensor(edge_index.flip(0), torch.rand(400), (60, 60)).coalesce()
    adj = {"coo": coo, "csr": coo.to_sparse_csr(), "graph": gnnc.Graph.from_edge_index(edge_index, num_vertices=60)}
    x = features(60, 16, 5, grad=False)
    conv = getattr(gnn, layer)(16, 16)

    def run():
        conv.zero_grad()
        out = conv(x, adj[form])
        out.pow(2).sum().backward()
        return [out.detach()] + [p.grad.clone() for p in conv.parameters()]

    kept = run()
    with patch.object(aggregate_module, "RECOMPUTE_MIN_SHARE_OF_MEMORY", 0.0):
        assert aggregate_module.recompute_aggregation(x, (60, 60), conv.lin_l if layer == "SAGEConv" else conv.lin_rel)
        made_again = run()
    for a, b in zip(kept, made_again):
        torch.testing.assert_close(a, b)
