"""gnnc.nn's LGConv, SimpleConv and FAConv against PyG's layers of the same name.

PyG's initialisation draw for draw; outputs and gradients (features, edge
weights, every parameter) on hypothesis graphs (isolated vertices, self
loops, duplicate edges), every aggregation and `combine_root`, bipartite
pairs and sampled blocks, torch.sparse adjacencies and SparseTensors (the
stand-in of `tests/sparse_tensor.py`) as PyG reads each, FAConv's dropout
drawn from one seed, its attention weights and its cache; the errors.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import gnnc
from gnnc.torch import graphs
from tests.nn_oracle import (
    Seeded,
    bipartite,
    close,
    compare,
    edge_weights,
    features,
    pyg_graphs,
    same_start,
    small_graph,
)

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402
from gnnc.nn import inputs  # noqa: E402
from gnnc.nn.conv.fa_conv import source  # noqa: E402
from gnnc.nn.conv.simple_conv import _looped  # noqa: E402
from tests.sparse_tensor import patch_pyg, sparse_tensor_adjacency, torch_sparse_adjacency  # noqa: E402

AGGRS = ["sum", "add", "mean", "max", "min"]
ROOTS = [None, "sum", "cat", "self_loop"]


def _same_weights(expected, got) -> None:
    (e_index, e_alpha), (g_index, g_alpha) = expected[1], got[1]
    assert torch.equal(g_index, e_index)
    close(g_alpha, e_alpha, "attention weights")


# ------------------------------------------------------------------ LGConv


@given(graph=pyg_graphs(), normalize=st.booleans(), weighted=st.booleans(), seed=st.integers(0, 2**16))
def test_lg_conv_matches_pyg(graph, normalize, weighted, seed):
    edge_index, n = graph
    w = edge_weights(edge_index, seed + 1) if weighted else None
    compare(*same_start("LGConv", normalize=normalize), (features(n, 5, seed), edge_index, w))


def test_lg_conv_negative_degrees_are_nan_as_in_pyg():
    """PyG's deg^-1/2 of a negative weighted degree is NaN (only 1/0 is masked), and so is gnnc's."""
    edge_index = torch.tensor([[0, 2, 3, 4, 5], [1, 3, 3, 5, 4]])
    w = torch.tensor([-0.5, 1.0, 1.0, 2.0, -2.0])  # in-degrees 0 (0: masked), -0.5 (1), 2 (3), -2 (4), 2 (5)
    expected, _ = compare(*same_start("LGConv"), (features(6, 3, 1), edge_index, w), grads=False)
    assert torch.isnan(expected[1]).all() and torch.isfinite(expected[[0, 2, 3]]).all()


def _adjacency(form: str, edge_index: torch.Tensor, n: int):
    """edge_index as a sparse adjacency of `form`, with positive values (none: a SparseTensor's)."""
    value = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(1)) + 0.5
    if form in ("coo", "csr"):
        return torch_sparse_adjacency(edge_index, value, n, torch.sparse_csr if form == "csr" else torch.sparse_coo)
    return sparse_tensor_adjacency(edge_index, value if form == "SparseTensor" else None, n)


@pytest.mark.parametrize("form", ["coo", "csr", "SparseTensor", "SparseTensor without values"])
@pytest.mark.parametrize("normalize", [True, False])
def test_lg_conv_sparse_adjacencies(monkeypatch, form, normalize):
    patch_pyg(monkeypatch)
    edge_index, n = small_graph(), 8
    adj = _adjacency(form, edge_index, n)
    compare(*same_start("LGConv", normalize=normalize), (features(n, 4, 2), adj))


def test_lg_conv_block_and_errors():
    edge_index = bipartite(7, 4, 18, 1)
    x = features(7, 5, 2, grad=False)
    pyg, ours = same_start("LGConv")
    torch.testing.assert_close(ours(x, gnn.Block(edge_index, 7, 4)), pyg(x, edge_index)[:4], rtol=2e-4, atol=2e-5)
    with pytest.raises(ArgumentError, match="LGConv: x must be one tensor"):
        ours((x, x[:4]), edge_index)
    with pytest.raises(ArgumentError, match="LGConv: aggr='mean' is not supported"):
        gnn.LGConv(aggr="mean")
    with pytest.raises(ArgumentError, match=r"edge_weight must have shape \[E\]"):
        ours(x, edge_index, torch.ones(3))
    adj = torch_sparse_adjacency(edge_index, torch.ones(18), 7, torch.sparse_coo)
    with pytest.raises(ArgumentError, match="edge_weight was given with a sparse adjacency"):
        ours(x, adj, torch.ones(18))


# ------------------------------------------------------------------ SimpleConv


@given(
    graph=pyg_graphs(),
    aggr=st.sampled_from(AGGRS),
    root=st.sampled_from(ROOTS),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_simple_conv_matches_pyg(graph, aggr, root, weighted, seed):
    edge_index, n = graph
    w = edge_weights(edge_index, seed + 1) if weighted else None
    compare(*same_start("SimpleConv", aggr, root), (features(n, 4, seed), edge_index, w))


@pytest.mark.parametrize("root", ROOTS[:3])
def test_simple_conv_bipartite_and_blocks(root):
    edge_index = bipartite(7, 4, 18, 2)
    w = edge_weights(edge_index, 3)
    x_src, x_dst = features(7, 4, 1), features(4, 4 if root == "sum" else 3, 2)
    for aggr in ("sum", "max"):
        compare(*same_start("SimpleConv", aggr, root), ((x_src, x_dst), edge_index, w))
        # no destination features: nothing to combine, as many destinations as size= says
        compare(*same_start("SimpleConv", aggr, root), ((x_src, None), edge_index), {"size": (7, 4)})
    # a block: the destinations are the first sources; PyG's call is the pair (x, x[:num_dst])
    x = features(7, 4, 5, grad=False)
    pyg, ours = same_start("SimpleConv", "mean", root)
    torch.testing.assert_close(ours(x, gnn.Block(edge_index, 7, 4)), pyg((x, x[:4]), edge_index), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("aggr", ["sum", "mean", "max"])
@pytest.mark.parametrize("root", [None, "sum", "self_loop"])
@pytest.mark.parametrize("form", ["coo", "csr", "SparseTensor", "SparseTensor without values"])
def test_simple_conv_sparse_adjacencies(monkeypatch, aggr, root, form):
    """PyG's spmm weighs by either form's values; its self loops merge with a torch.sparse
    adjacency's diagonal (coalesced) and replace a SparseTensor's (set_diag)."""
    patch_pyg(monkeypatch)
    edge_index, n = small_graph(), 8
    adj = _adjacency(form, edge_index, n)
    x = features(n, 4, 2)
    compare(*same_start("SimpleConv", aggr, root), (x, adj))


def test_simple_conv_self_loops_are_made_once_persmall_graph():
    edge_index = small_graph()
    adj = inputs.adjacency(edge_index)
    first, _, count = _looped(adj, 8)
    assert _looped(adj, 8)[0] is first and count == 8
    assert torch.equal(first[:, -8:], torch.arange(8).repeat(2, 1))


def test_simple_conv_refuses_what_pyg_refuses_or_gnnc_cannot_compile():
    with pytest.raises(ArgumentError, match="invalid value for 'combine_root'"):
        gnn.SimpleConv(combine_root="max")
    for aggr in ("mul", ["sum", "max"], pyg_nn.aggr.SumAggregation(), "std"):
        with pytest.raises(ArgumentError, match="SimpleConv: aggr=.* is not supported by gnnc.nn"):
            gnn.SimpleConv(aggr)
    with pytest.raises(ArgumentError, match="aggr_kwargs"):
        gnn.SimpleConv(aggr_kwargs={"semi_grad": True})
    edge_index = bipartite(6, 4, 12, 4)
    x_src, x_dst = features(6, 3, 1), features(4, 3, 2)
    conv = gnn.SimpleConv(combine_root="self_loop")
    for x, size in (((x_src, x_dst), None), (features(6, 3, 3), (6, 5))):
        with pytest.raises(ArgumentError, match="combine_root='self_loop'` for bipartite"):
            conv(x, edge_index, size=size)
    with pytest.raises(ArgumentError, match="combine_root='self_loop'` for bipartite"):
        conv(features(6, 3, 3), gnn.Block(edge_index, 6, 4))
    with pytest.raises(ArgumentError, match="must have as many"):
        gnn.SimpleConv(combine_root="sum")((x_src, features(4, 2, 4)), edge_index)


# ------------------------------------------------------------------ FAConv


FA_OPTIONS = [
    {},
    {"add_self_loops": False},
    {"eps": 0.0},
    {"eps": -0.5, "normalize": False},
]


@given(
    graph=pyg_graphs(),
    options=st.sampled_from(FA_OPTIONS),
    weights=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fa_conv_matches_pyg(graph, options, weights, seed):
    edge_index, n = graph
    args = (features(n, 5, seed), features(n, 5, seed + 1), edge_index)
    if options.get("normalize") is False:
        args += (edge_weights(edge_index, seed + 2),)
    call = {"return_attention_weights": True} if weights else {}
    expected, got = compare(*same_start("FAConv", 5, **options), args, call)
    if weights:
        _same_weights(expected, got)


@pytest.mark.parametrize("add_self_loops", [True, False])
def test_fa_conv_dropout_draws_as_pyg(add_self_loops):
    edge_index, n = small_graph(), 8
    x, x_0 = features(n, 4, 1), features(n, 4, 2)
    pyg, ours = same_start("FAConv", 4, dropout=0.4, add_self_loops=add_self_loops)
    call = {"return_attention_weights": True}
    expected, got = compare(Seeded(pyg, 11).train(), Seeded(ours, 11).train(), (x, x_0, edge_index), call)
    _same_weights(expected, got)
    evaluated, _ = compare(pyg.eval(), ours.eval(), (x, x_0, edge_index))
    assert not torch.allclose(expected[0], evaluated), "the mask dropped nothing"
    # return_attention_weights=False is a bool: PyG returns the weights for it too
    assert isinstance(ours(x, x_0, edge_index, return_attention_weights=False), tuple)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_fa_conv_torch_sparse_loops_merge_as_pyg(layout):
    """A torch.sparse adjacency's values are gcn_norm's weights; the loop added to its own diagonal
    entry is one entry of PyG's (coalesced): one coefficient, one dropout draw."""
    edge_index, n = small_graph(), 8
    value = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(1)) + 0.5
    adj = torch_sparse_adjacency(edge_index, value, n, layout)
    x, x_0 = features(n, 4, 1), features(n, 4, 2)
    for dropout in (0.0, 0.4):
        pyg, ours = same_start("FAConv", 4, dropout=dropout)
        call = {"return_attention_weights": True}
        expected, got = compare(Seeded(pyg, 5).train(), Seeded(ours, 5).train(), (x, x_0, adj), call)
        (e_adj, e_alpha), (g_adj, g_alpha) = expected[1], got[1]
        assert g_adj.layout == e_adj.layout == layout
        e_coo, g_coo = e_adj.to_sparse_coo().coalesce(), g_adj.to_sparse_coo().coalesce()
        assert torch.equal(g_coo.indices(), e_coo.indices())
        close(g_coo.values(), e_coo.values(), "attention weights")
        close(g_alpha, e_alpha, "attention weights")


def test_fa_convsparse_tensor_adjacency(monkeypatch):
    """A SparseTensor without values (normalize=True), with them (normalize=False); its weights
    come back as a SparseTensor, its loops replaced (fill_diag)."""
    patch_pyg(monkeypatch)
    edge_index, n = small_graph(), 8
    value = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(1)) + 0.5
    x, x_0 = features(n, 4, 1), features(n, 4, 2)
    for options, adj in (
        ({"dropout": 0.4}, sparse_tensor_adjacency(edge_index, None, n)),
        ({"normalize": False}, sparse_tensor_adjacency(edge_index, value, n)),
    ):
        pyg, ours = same_start("FAConv", 4, **options)
        call = {"return_attention_weights": True}
        expected, got = compare(Seeded(pyg, 5).train(), Seeded(ours, 5).train(), (x, x_0, adj), call)
        e_adj, g_adj = expected[1], got[1]
        assert type(g_adj) is type(adj) and g_adj.sparse_sizes() == e_adj.sparse_sizes()
        (e_row, e_col, e_alpha), (g_row, g_col, g_alpha) = e_adj.coo(), g_adj.coo()
        assert torch.equal(g_row, e_row) and torch.equal(g_col, e_col)
        close(g_alpha, e_alpha, "attention weights")


def test_fa_conv_cached_keeps_the_firstsmall_graph():
    edge_index, n = small_graph(), 8
    x, x_0 = features(n, 4, 1), features(n, 4, 2)
    pyg, ours = same_start("FAConv", 4, cached=True)
    compare(pyg, ours, (x, x_0, edge_index))
    other = bipartite(8, 8, 10, 7)
    expected, got = compare(pyg, ours, (x, x_0, other), {"return_attention_weights": True})
    _same_weights(expected, got)
    assert got[1][0].shape[1] == int((edge_index[0] != edge_index[1]).sum()) + n  # the first graph's, loops added
    ours.reset_parameters()
    assert ours(x, x_0, other, return_attention_weights=True)[1][0].shape[1] == 10 + n


def test_fa_conv_lazy_channels_and_float64():
    edge_index = small_graph()
    pyg, ours = same_start("FAConv", -1, lazy=True)
    x, x_0 = features(8, 5, 1), features(8, 5, 2)
    pyg(x, x_0, edge_index), ours(x, x_0, edge_index)  # sized and initialised by the first call
    compare(pyg, ours, (x, x_0, edge_index))
    pyg, ours = same_start("FAConv", 5)
    compare(pyg.double(), ours.double(), (x.double(), x_0.double(), edge_index), rtol=1e-9)


def test_fa_conv_kernel_text():
    """One kernel: the coefficient, the normalised weight and the row, never an [E, F] copy."""
    assert source(True, False, False) == (
        "kernel fa_conv(x: f32[V, F], al: f32[V], ar: f32[V], w: f32[E], loop: f32[V]) -> f32[V, F] {\n"
        "    out[v] = tanh(al[v] + ar[v]) * loop[v] * x[v] + sum(tanh(al[u] + ar[v]) * w[e] * x[u])\n"
        "}\n"
    )
    assert "alpha[e] = tanh(al[u] + ar[v])" in source(False, True, True)
    assert "sum(alpha[e] * mask[e] * w[e] * x[u])" in source(False, True, True)


def test_fa_conv_refuses_bad_input():
    edge_index = small_graph()
    x, x_0 = torch.randn(8, 4), torch.randn(8, 4)
    with pytest.raises(ArgumentError, match="dropout must be a probability"):
        gnn.FAConv(4, dropout=1.5)
    with pytest.raises(ArgumentError, match="positive integer or -1"):
        gnn.FAConv(0)
    with pytest.raises(ArgumentError, match="eps must be a number"):
        gnn.FAConv(4, eps="0.1")
    with pytest.raises(ArgumentError, match="edge_weight is not taken with normalize=True"):
        gnn.FAConv(4)(x, x_0, edge_index, torch.ones(edge_index.shape[1]))
    with pytest.raises(ArgumentError, match="normalize=False needs edge_weight"):
        gnn.FAConv(4, normalize=False)(x, x_0, edge_index)
    with pytest.raises(ArgumentError, match="x must be one tensor"):
        gnn.FAConv(4)((x, x), x_0, edge_index)
    with pytest.raises(ArgumentError, match="sampled block"):
        gnn.FAConv(4)(x, x_0, gnn.Block(edge_index.clamp(max=3), 8, 4))
    with pytest.raises(ArgumentError, match="x_0 of shape"):
        gnn.FAConv(4)(x, torch.randn(5, 4), edge_index)
    with pytest.raises(ArgumentError, match="x_0 must be a tensor"):
        gnn.FAConv(4)(x, None, edge_index)
    gnn.FAConv(4, eps=0.0)(x, None, edge_index)  # as PyG: x_0 is not read without eps
    with pytest.raises(ArgumentError, match="SparseTensor without values"):
        gnn.FAConv(4)(x, x_0, sparse_tensor_adjacency(edge_index, torch.ones(edge_index.shape[1]), 8))


# ------------------------------------------------------------------ a gnnc.Graph


@pytest.mark.parametrize(
    "make,lean",
    [
        (lambda: gnn.LGConv(), True),
        (lambda: gnn.LGConv(normalize=False), True),
        (lambda: gnn.SimpleConv("mean", "sum"), True),
        (lambda: gnn.SimpleConv("max", "self_loop"), False),
        (lambda: gnn.FAConv(4, dropout=0.3), False),
    ],
)
def test_a_graph_gives_what_its_edge_index_gives(make, lean):
    """A gnnc.Graph where PyG takes an edge_index: the same result; the layers that read no edge
    themselves hand it to their kernel without making its edge_index."""
    edge_index, n = small_graph(), 8
    graph = gnnc.Graph.from_edge_index(edge_index.numpy(), num_vertices=n)
    layer = make()
    extra = (features(n, 4, 3),) if isinstance(layer, gnn.FAConv) else ()
    x = features(n, 4, 1, grad=False)
    torch.manual_seed(2)
    want = layer(x, *extra, edge_index)
    torch.manual_seed(2)
    close(layer(x, *extra, graph), want, "output")
    assert (graph not in graphs._EDGE_INDEX) == lean
