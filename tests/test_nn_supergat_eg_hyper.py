"""gnnc.nn's SuperGATConv, EGConv and HypergraphConv against PyG's layers of the same name.

PyG's initialisation draw for draw; outputs and gradients (features, hyperedge
weights and features, every parameter) on hypothesis graphs and hypergraphs
(isolated vertices, self loops, duplicate edges and incidences, empty
hyperedges). SuperGATConv in eval mode and in training mode, its
self-supervised loss and `att_x` / `att_y` included, with PyG's negative
sampling, attention dropout and edge sampling drawn from one seed of torch
and of Python's `random`; EGConv with every aggregator and PyG's sparse
adjacency paths; HypergraphConv with and without attention in both modes.
Sparse adjacencies (torch.sparse, the SparseTensor stand-in of
`tests/sparse_tensor.py`), blocks, lazy channels, float64, torch.compile,
copies and the errors.
"""

from __future__ import annotations

import copy
import io
import random

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import Seeded, bipartite, close, compare, features, pyg_graphs, same_start, small_graph

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError, GnncError  # noqa: E402
from gnnc.nn.conv import supergat_conv  # noqa: E402
from tests.sparse_tensor import patch_pyg, sparse_tensor_adjacency  # noqa: E402

EG_AGGREGATORS = ["sum", "mean", "symnorm", "max", "min", "var", "std"]


# ------------------------------------------------------------------ SuperGATConv


class _Trained(torch.nn.Module):
    """A SuperGATConv in training mode, each call from one seed of torch and of Python's `random`
    (PyG samples its negative edges with `random.sample`), returning the output and the
    self-supervised loss as one tensor, so that `compare` checks both and their gradients."""

    def __init__(self, layer: torch.nn.Module, seed: int):
        super().__init__()
        self.layer, self.seed = layer, seed

    def forward(self, *args, **kwargs):
        torch.manual_seed(self.seed)
        random.seed(self.seed)
        out = self.layer(*args, **kwargs)
        return torch.cat([out.flatten(), self.layer.get_attention_loss().view(1)])


def _trained(seed: int, *args, **kwargs) -> tuple[_Trained, _Trained]:
    pyg, ours = same_start("SuperGATConv", *args, **kwargs)
    return _Trained(pyg.train(), seed), _Trained(ours.train(), seed)


def _same_self_supervision(pyg: _Trained, ours: _Trained) -> None:
    close(ours.layer.att_x, pyg.layer.att_x, "att_x")
    assert torch.equal(ours.layer.att_y, pyg.layer.att_y)


@given(
    graph=pyg_graphs(),
    attention_type=st.sampled_from(["MX", "SD"]),
    heads=st.sampled_from([1, 2]),
    concat=st.booleans(),
    loops=st.booleans(),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_supergat_eval_matches_pyg(graph, attention_type, heads, concat, loops, bias, seed):
    edge_index, n = graph
    pyg, ours = same_start(
        "SuperGATConv", 5, 3, heads, concat, attention_type=attention_type, add_self_loops=loops, bias=bias
    )
    compare(pyg.eval(), ours.eval(), (features(n, 5, seed), edge_index))
    assert torch.equal(ours.get_attention_loss(), pyg.get_attention_loss())


@given(
    graph=pyg_graphs(),
    attention_type=st.sampled_from(["MX", "SD"]),
    loops=st.booleans(),
    dropout=st.sampled_from([0.0, 0.3]),
    edge_sample_ratio=st.sampled_from([1.0, 0.6]),
    undirected=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_supergat_training_matches_pyg(graph, attention_type, loops, dropout, edge_sample_ratio, undirected, seed):
    """Output, loss, att_x / att_y and every gradient of the two together, with PyG's negative
    edges, attention dropout and edge sampling drawn from the same seeds."""
    edge_index, n = graph
    pyg, ours = _trained(
        seed,
        5,
        3,
        heads=2,
        attention_type=attention_type,
        add_self_loops=loops,
        dropout=dropout,
        edge_sample_ratio=edge_sample_ratio,
        neg_sample_ratio=0.8,
        is_undirected=undirected,
    )
    x = features(n, 5, seed)
    try:
        compare(pyg, ours, (x, edge_index))
    except IndexError as error:
        # PyG asked for no negative edge (0.8 * E < 1) samples a float tensor and indexes with it
        assert "tensors used as indices must be long" in str(error)
        ours(x, edge_index)  # gnnc samples none
        assert ours.layer._logits.negatives.shape[0] == 0
        return
    _same_self_supervision(pyg, ours)


def test_supergat_undirected_batches_and_given_negatives():
    g = torch.Generator().manual_seed(1)
    half = torch.randint(0, 9, (2, 20), generator=g)
    undirected = torch.cat([half, half.flip(0)], 1)  # PyG's is_undirected holds: no to_undirected
    x = features(9, 5, 2)
    for edge_index in (undirected, small_graph(9)):
        compare(*_trained(3, 5, 3, heads=2), (x, edge_index))
    # two graphs of a batch, each sampled apart (PyG's batched_negative_sampling)
    batch = torch.tensor([0] * 4 + [1] * 5)
    edges = torch.cat([torch.randint(0, 4, (2, 8), generator=g), torch.randint(4, 9, (2, 10), generator=g)], 1)
    for loops in (True, False):
        pyg, ours = _trained(4, 5, 3, attention_type="SD", add_self_loops=loops)
        compare(pyg, ours, (x, edges), {"batch": batch})
        _same_self_supervision(pyg, ours)
    # given negatives: nothing is sampled
    negatives = torch.randint(0, 9, (2, 7), generator=g)
    for dropout in (0.0, 0.5):
        pyg, ours = _trained(5, 5, 3, heads=2, dropout=dropout)
        compare(pyg, ours, (x, small_graph(9), negatives))
        _same_self_supervision(pyg, ours)


def test_supergat_samplers_are_pygs():
    from torch_geometric.utils import batched_negative_sampling, is_undirected, negative_sampling, to_undirected

    g = torch.Generator().manual_seed(6)
    for n, e in ((2, 1), (5, 12), (12, 30), (30, 200)):
        edge_index = torch.randint(0, n, (2, e), generator=g)
        assert supergat_conv.is_undirected(edge_index, n) == is_undirected(edge_index, num_nodes=n)
        both = torch.cat([edge_index, edge_index.flip(0)], 1)
        assert supergat_conv.is_undirected(both, n) and is_undirected(both, num_nodes=n)
        assert torch.equal(supergat_conv.to_undirected(edge_index, n), to_undirected(edge_index, num_nodes=n))
        for count in (1, e // 2, 3 * e):
            random.seed(count)
            expected = negative_sampling(edge_index, n, num_neg_samples=count)
            random.seed(count)
            assert torch.equal(supergat_conv.negative_sampling(edge_index, n, count), expected)
    batch = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 8, 7], [1, 2, 0, 4, 3, 6, 7, 5, 8]])
    random.seed(2)
    expected = batched_negative_sampling(edge_index, batch, num_neg_samples=4)
    random.seed(2)
    assert torch.equal(supergat_conv.batched_negative_sampling(edge_index, batch, 4), expected)


def test_supergat_sparse_adjacencies(monkeypatch):
    """torch.sparse adjacencies in eval mode (PyG's training fails on one: refused); a
    SparseTensor (loops replaced by fill_diag, the positive edges in row-major order) in both."""
    patch_pyg(monkeypatch)
    edge_index, n = small_graph(), 8
    x = features(n, 5, 7)
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(28), (n, n)).coalesce()
    for form in (adj, adj.to_sparse_csr()):
        pyg, ours = same_start("SuperGATConv", 5, 3, heads=2)
        compare(pyg.eval(), ours.eval(), (x, form))
        with pytest.raises(ArgumentError, match="torch.sparse adjacency in training mode"):
            ours.train()(x, form)
    for loops in (True, False):
        for dropout in (0.0, 0.4):
            pyg, ours = _trained(8, 5, 3, heads=2, add_self_loops=loops, dropout=dropout)
            compare(pyg, ours, (x, sparse_tensor_adjacency(edge_index, None, n)))
            _same_self_supervision(pyg, ours)


def test_supergat_blocks_lazy_and_float64():
    edge_index = bipartite(7, 4, 18, 1)
    x = features(7, 5, 2, grad=False)
    pyg, ours = same_start("SuperGATConv", 5, 3, heads=2)
    expected = pyg.eval()(x, edge_index)[:4]  # a block is its sources' square graph, PyG's way
    torch.testing.assert_close(ours.eval()(x, gnn.Block(edge_index, 7, 4)), expected, rtol=2e-4, atol=2e-5)
    pyg, ours = same_start("SuperGATConv", -1, 3, heads=2, lazy=True)
    x = features(7, 5, 3)
    torch.manual_seed(1)
    pyg.eval()(x, edge_index)
    torch.manual_seed(1)
    ours.eval()(x, edge_index)
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    pyg, ours = (layer.double() for layer in _trained(9, 5, 3, heads=2, attention_type="SD", dropout=0.2))
    compare(pyg, ours, (x.detach().double().requires_grad_(), small_graph(7)), rtol=1e-9)


def test_options_set_after_construction():
    """add_self_loops (and dropout) changed on a built layer, as DirGNNConv does to its copies."""
    x, edge_index = features(8, 5, 9), small_graph()
    pyg, ours = _trained(10, 5, 3, heads=2)
    for layer in (pyg.layer, ours.layer):
        layer.add_self_loops, layer.dropout = False, 0.3
    compare(pyg, ours, (x, edge_index))
    pyg, ours = same_start("EGConv", 5, 4, ["mean", "max"], num_heads=2)
    pyg.add_self_loops = ours.add_self_loops = False
    compare(pyg, ours, (x, edge_index))


def test_supergat_errors():
    x, edge_index = torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])
    with pytest.raises(ArgumentError, match="attention_type must be 'MX' or 'SD'"):
        gnn.SuperGATConv(3, 2, attention_type="GAT")
    with pytest.raises(ArgumentError, match="neg_sample_ratio must be positive"):
        gnn.SuperGATConv(3, 2, neg_sample_ratio=0.0)
    with pytest.raises(ArgumentError, match=r"edge_sample_ratio must be in \(0, 1\]"):
        gnn.SuperGATConv(3, 2, edge_sample_ratio=1.5)
    with pytest.raises(ArgumentError, match="dropout must be a probability"):
        gnn.SuperGATConv(3, 2, dropout=2.0)
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'node_dim'"):
        gnn.SuperGATConv(3, 2, node_dim=0)
    with pytest.raises(ArgumentError, match="aggr='mean' is not supported"):
        gnn.SuperGATConv(3, 2, aggr="mean")
    layer = gnn.SuperGATConv(3, 2)
    with pytest.raises(ArgumentError, match="x must be one tensor"):
        layer((x, x), edge_index)
    with pytest.raises(ArgumentError, match="needs a forward call in training mode first"):
        layer.train().get_attention_loss()
    with pytest.raises(ArgumentError, match=r"neg_edge_index must be a \[2, K\] tensor"):
        layer(x, edge_index, torch.tensor([0, 1]))
    with pytest.raises(GnncError, match="out of range"):
        layer(x, edge_index, torch.tensor([[0], [9]]))
    assert torch.equal(layer.eval().get_attention_loss(), torch.tensor([0]))
    assert layer.att_x is not None or layer.att_x is None  # a property, as PyG's attribute
    assert repr(gnn.SuperGATConv(3, 2, heads=2, attention_type="SD")) == "SuperGATConv(3, 2, heads=2, type=SD)"


# ------------------------------------------------------------------ EGConv


@given(
    graph=pyg_graphs(),
    aggregators=st.lists(st.sampled_from(EG_AGGREGATORS), min_size=1, max_size=3, unique=True),
    heads=st.sampled_from([1, 2]),
    bases=st.sampled_from([1, 3]),
    loops=st.booleans(),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_eg_conv_matches_pyg(graph, aggregators, heads, bases, loops, bias, seed):
    edge_index, n = graph
    pyg, ours = same_start(
        "EGConv", 5, 4, aggregators, num_heads=heads, num_bases=bases, add_self_loops=loops, bias=bias
    )
    compare(pyg, ours, (features(n, 5, seed), edge_index))


@pytest.mark.parametrize("form", ["coo", "csr", "SparseTensor", "SparseTensor without values"])
@pytest.mark.parametrize("loops", [True, False])
@pytest.mark.parametrize(
    "aggregators", [["symnorm"], ["sum", "mean", "max"], ["min", "std"], ["symnorm", "sum", "var", "max"]]
)
def test_eg_conv_sparse_adjacencies(monkeypatch, form, loops, aggregators):
    """PyG's fused path: a torch.sparse adjacency's values weigh symnorm (its loops added
    beside the graph's own) or, without it, every aggregator; a SparseTensor's likewise (loops
    replaced); the other aggregators beside symnorm count each entry once; std's own formula."""
    patch_pyg(monkeypatch)
    edge_index, n = small_graph(), 8
    value = torch.rand(28, generator=torch.Generator().manual_seed(1)) + 0.5
    coo = torch.sparse_coo_tensor(edge_index.flip(0), value, (n, n)).coalesce()
    row, col = coo.indices()
    adj = {
        "coo": coo,
        "csr": coo.to_sparse_csr(),
        "SparseTensor": sparse_tensor_adjacency(torch.stack([col, row]), coo.values(), n),
        "SparseTensor without values": sparse_tensor_adjacency(torch.stack([col, row]), None, n),
    }[form]
    pyg, ours = same_start("EGConv", 5, 4, aggregators, num_heads=2, num_bases=2, add_self_loops=loops)
    x = features(n, 5, 2)
    if form in ("coo", "csr") and loops and "symnorm" not in aggregators:
        with pytest.raises(Exception):  # noqa: B017 - PyG's own error
            pyg(x, adj)
        with pytest.raises(ArgumentError, match="add_self_loops without 'symnorm' on a torch.sparse adjacency"):
            ours(x, adj)
        return
    compare(pyg, ours, (x, adj))


def test_eg_conv_cache_graph_blocks_lazy_float64():
    edge_index, other = small_graph(), torch.tensor([[0, 1], [1, 2]])
    x = features(8, 5, 3)
    for aggregators, loops in ((["symnorm", "max"], True), (["mean"], True), (["sum"], False)):
        pyg, ours = same_start("EGConv", 5, 4, aggregators, num_heads=2, cached=True, add_self_loops=loops)
        compare(pyg, ours, (x, edge_index))
        compare(pyg, ours, (x, other))  # PyG's cache: the first graph again (without loops or symnorm: none)
        # a copy drops the cache (as GCNConv's): its first call caches its graph
        fresh = copy.deepcopy(pyg)
        fresh._cached_edge_index = None
        close(copy.deepcopy(ours)(x, other), fresh(x, other), "a copy")
    import gnnc

    graph = gnnc.Graph.from_edge_index(edge_index.numpy(), num_vertices=8)
    pyg, ours = same_start("EGConv", 5, 4, ["symnorm", "min", "std"], num_heads=2)
    close(ours(x, graph), pyg(x, edge_index), "a gnnc.Graph")
    block_edges = bipartite(7, 4, 18, 1)
    xs = features(7, 5, 4, grad=False)
    close(ours(xs, gnn.Block(block_edges, 7, 4)), pyg(xs, block_edges)[:4], "a block")
    pyg, ours = same_start("EGConv", -1, 4, ["sum", "symnorm"], num_heads=2, lazy=True)
    torch.manual_seed(1)
    pyg(x, edge_index)
    torch.manual_seed(1)
    ours(x, edge_index)
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    pyg, ours = (layer.double() for layer in same_start("EGConv", 5, 4, EG_AGGREGATORS, num_heads=2))
    compare(pyg, ours, (x.detach().double().requires_grad_(), edge_index), rtol=1e-9)


def test_eg_conv_errors():
    x, edge_index = torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]])
    with pytest.raises(ArgumentError, match=r"out_channels \(got 6\) must be divisible by the number of heads"):
        gnn.EGConv(3, 6, num_heads=4)
    with pytest.raises(ArgumentError, match="unsupported aggregator 'lstm'"):
        gnn.EGConv(3, 8, ["sum", "lstm"])
    with pytest.raises(ArgumentError, match="num_bases must be a positive integer"):
        gnn.EGConv(3, 8, num_bases=0)
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'node_dim'"):
        gnn.EGConv(3, 8, node_dim=0)
    with pytest.raises(ArgumentError, match="x must be one tensor"):
        gnn.EGConv(3, 8)((x, x), edge_index)
    assert repr(gnn.EGConv(3, 8, ["sum", "max"])) == "EGConv(3, 8, aggregators=['sum', 'max'])"


# ------------------------------------------------------------------ HypergraphConv


@st.composite
def hypergraphs(draw):
    """(hyperedge_index, vertices, hyperedges): random incidences with duplicates, isolated
    vertices and empty hyperedges (beyond the largest id too)."""
    n = draw(st.integers(1, 12))
    m = draw(st.integers(0, 8))
    k = draw(st.integers(0, 40)) if m else 0
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    incidences = np.stack([rng.integers(0, n, k), rng.integers(0, m, k)]).astype(np.int64)
    return torch.from_numpy(incidences), n, m


@given(
    hypergraph=hypergraphs(),
    attention=st.sampled_from([None, "node", "edge"]),
    heads=st.sampled_from([1, 2]),
    concat=st.booleans(),
    weighted=st.booleans(),
    given_count=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_hypergraph_conv_matches_pyg(hypergraph, attention, heads, concat, weighted, given_count, seed):
    incidences, n, m = hypergraph
    if attention is None:
        heads, concat = 1, True
    pyg, ours = same_start(
        "HypergraphConv", 5, 3, attention is not None, attention or "node", heads=heads, concat=concat
    )
    g = torch.Generator().manual_seed(seed)
    weight = (torch.rand(m, generator=g) + 0.1).requires_grad_() if weighted else None
    attr = features(m, 5, seed + 1) if attention else None
    count = m if given_count else None
    compare(pyg, ours, (features(n, 5, seed), incidences, weight, attr, count))


def test_hypergraph_conv_dropout_and_zero_weights():
    g = torch.Generator().manual_seed(3)
    incidences = torch.stack([torch.randint(0, 9, (30,), generator=g), torch.randint(0, 5, (30,), generator=g)])
    x, attr = features(9, 5, 4), features(5, 5, 5)
    for mode in ("node", "edge"):
        pyg, ours = same_start("HypergraphConv", 5, 3, True, mode, heads=2, dropout=0.4)
        compare(Seeded(pyg, 6), Seeded(ours, 6), (x, incidences, None, attr))
    # hyperedge weights summing to 0 at a vertex: PyG's D^-1 is masked to 0 there; its gradient
    # of those weights is NaN (the masked 1 / 0's derivative times 0), gnnc's that of the 0
    incidences = torch.tensor([[0, 0, 1, 2], [0, 1, 1, 0]])
    weight = torch.tensor([1.0, -1.0], requires_grad=True)
    pyg, ours = same_start("HypergraphConv", 5, 3)
    compare(pyg, ours, (features(3, 5, 7), incidences, weight), grads=False)
    ours(features(3, 5, 7), incidences, weight).sum().backward()
    assert weight.grad is not None and torch.isfinite(weight.grad).all()


def test_hypergraph_conv_lazy_float64_and_errors():
    incidences = torch.tensor([[0, 1, 2, 3, 1], [0, 0, 1, 1, 2]])
    x, attr = features(5, 4, 1), features(3, 4, 2)
    pyg, ours = same_start("HypergraphConv", -1, 3, True, heads=2, lazy=True)
    torch.manual_seed(1)
    pyg(x, incidences, hyperedge_attr=attr)
    torch.manual_seed(1)
    ours(x, incidences, hyperedge_attr=attr)
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    pyg, ours = (layer.double() for layer in same_start("HypergraphConv", 4, 3, True, "edge", heads=2))
    compare(pyg, ours, (x.detach().double().requires_grad_(), incidences, None, attr.detach().double()), rtol=1e-9)
    layer = gnn.HypergraphConv(4, 3, use_attention=True)
    with pytest.raises(ArgumentError, match="use_attention needs hyperedge_attr"):
        layer(x, incidences)
    with pytest.raises(ArgumentError, match="hyperedge_attr has 2 rows for 3 hyperedges"):
        layer(x, incidences, hyperedge_attr=attr[:2])
    with pytest.raises(ArgumentError, match=r"hyperedge_weight must be a \[M\] tensor"):
        layer(x, incidences, torch.ones(3, 1), attr)
    with pytest.raises(ArgumentError, match=r"hyperedge_index must have shape \[2, K\]"):
        layer(x, incidences[0], hyperedge_attr=attr)
    with pytest.raises(ArgumentError, match="hyperedge_index must be a"):
        layer(x, incidences.to_sparse(), hyperedge_attr=attr)
    with pytest.raises(GnncError, match="out of range"):
        layer(x, incidences, hyperedge_attr=attr, num_edges=2)
    with pytest.raises(ArgumentError, match="heads=2 without use_attention"):
        gnn.HypergraphConv(4, 3, heads=2)
    with pytest.raises(ArgumentError, match="attention_mode must be 'node' or 'edge'"):
        gnn.HypergraphConv(4, 3, attention_mode="vertex")
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'flow'"):
        gnn.HypergraphConv(4, 3, flow="source_to_target")
    assert gnn.HypergraphConv(4, 3, heads=2, concat=False).bias.shape == (3,)  # PyG's sizes, heads unused
    assert repr(layer) == "HypergraphConv(4, 3)"


# ------------------------------------------------------------------ all three


def _cases():
    g = torch.Generator().manual_seed(12)
    edge_index = torch.randint(0, 10, (2, 32), generator=g)
    incidences = torch.stack([torch.randint(0, 10, (30,), generator=g), torch.randint(0, 6, (30,), generator=g)])
    attr = features(6, 5, 13, grad=False)
    weight = torch.rand(6, generator=g) + 0.5
    return [
        ("SuperGATConv", lambda m: m.SuperGATConv(5, 3, heads=2).eval(), (edge_index,), {}),
        ("SuperGATConv-SD", lambda m: m.SuperGATConv(5, 3, heads=2, attention_type="SD").eval(), (edge_index,), {}),
        ("EGConv", lambda m: m.EGConv(5, 4, ["symnorm", "max", "std"], num_heads=2), (edge_index,), {}),
        ("EGConv-partial", lambda m: m.EGConv(5, 4, ["mean", "min"], num_heads=2), (edge_index,), {}),
        ("HypergraphConv", lambda m: m.HypergraphConv(5, 3), (incidences, weight), {"num_edges": 6}),
        (
            "HypergraphConv-node",
            lambda m: m.HypergraphConv(5, 3, True, heads=2),
            (incidences, weight, attr),
            {"num_edges": 6},
        ),
        (
            "HypergraphConv-edge",
            lambda m: m.HypergraphConv(5, 3, True, "edge", heads=2, concat=False),
            (incidences, None, attr),
            {"num_edges": 6},
        ),
    ]


@pytest.mark.parametrize("case", _cases(), ids=lambda case: case[0])
def test_compile_copy_and_save(case):
    """torch.compile(fullgraph=True) traces the forward whole (HypergraphConv given num_edges,
    as PyG requires there) with the eager outputs and gradients; deep copies and torch.save."""
    name, make, extra, named = case
    torch.manual_seed(0)
    layer = make(gnn)
    x = features(10, 5, 14)
    expected = layer(x, *extra, **named)
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(layer), torch.load(buffer, weights_only=False)):
        close(other(x, *extra, **named), expected, f"{name}: a copy")
    torch._dynamo.reset()
    got = torch.compile(layer, fullgraph=True, backend="aot_eager")(x, *extra, **named)
    close(got, expected, f"{name}: compiled")
    params = [x, *layer.parameters()]
    want = torch.autograd.grad(expected.square().sum(), params, allow_unused=True)
    have = torch.autograd.grad(got.square().sum(), params, allow_unused=True)
    for i, (a, b) in enumerate(zip(have, want)):
        if b is not None:
            close(a, b, f"{name}: compiled gradient {i}")


def test_supergat_training_compiles_with_given_negatives():
    """In training mode with the negatives given (and edge_sample_ratio 1) nothing is sampled:
    the forward and the loss trace whole, as eager."""
    g = torch.Generator().manual_seed(15)
    edge_index, negatives = torch.randint(0, 10, (2, 32), generator=g), torch.randint(0, 10, (2, 9), generator=g)
    x = features(10, 5, 16)
    torch.manual_seed(0)
    layer = gnn.SuperGATConv(5, 3, heads=2).train()

    def step(x):
        out = layer(x, edge_index, negatives)
        return out.square().sum() + layer.get_attention_loss()

    expected = step(x)
    torch._dynamo.reset()
    got = torch.compile(step, fullgraph=True, backend="aot_eager")(x)
    close(got, expected, "compiled training step")
    want = torch.autograd.grad(expected, [x, *layer.parameters()])
    have = torch.autograd.grad(got, [x, *layer.parameters()])
    for i, (a, b) in enumerate(zip(have, want)):
        close(a, b, f"compiled gradient {i}")
