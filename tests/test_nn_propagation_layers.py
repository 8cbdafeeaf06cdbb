"""gnnc.nn's ARMAConv, MixHopConv, DirGNNConv and AntiSymmetricConv against PyG's layers of the same name.

The same seed gives PyG's parameters; outputs and gradients (features, edge
weights, every parameter) agree on hypothesis graphs (isolated vertices,
self loops, duplicate edges) for every option, weighted or not, both orders
of the dense work (Linear first where it narrows), sparse adjacencies
(torch.sparse COO / CSR, SparseTensor with and without values), lazy
channels, ARMAConv's dropout drawn from one seed, DirGNNConv around gnnc's
layers (their self loops and root weights turned off as PyG's), and the
errors; each layer compiles with torch.compile(fullgraph=True), deep-copies
and saves.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import gnnc
from tests.nn_oracle import (
    Seeded,
    bipartite,
    close,
    compare,
    edge_weights,
    features,
    one_loop_per_vertex,
    pyg_graphs,
    same_start,
)

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402
from gnnc.nn.derived import flipped_edges  # noqa: E402
from tests.sparse_tensor import patch_pyg, pyg_sparse_tensor  # noqa: E402

#: PyG's advice when given a COO adjacency (intended here)
pytestmark = pytest.mark.filterwarnings("ignore:Converting sparse tensor to CSR")

FORMS = ["coo", "csr", "SparseTensor", "SparseTensor without values"]


def _graph(n: int = 8) -> torch.Tensor:
    """An edge_index with a self loop, a duplicate edge and an isolated vertex (n - 1)."""
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.randint(0, n - 1, (2, 24), generator=g), torch.tensor([[2, 1, 1], [2, 4, 4]])], 1)


def _adjacency(form: str, edge_index: torch.Tensor, n: int):
    """edge_index as a sparse adjacency of `form` (adj_t), with positive values (none: a SparseTensor's)."""
    value = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(1)) + 0.5
    if form in ("coo", "csr"):
        adj = torch.sparse_coo_tensor(edge_index.flip(0), value, (n, n)).coalesce()
        return adj.to_sparse_csr() if form == "csr" else adj
    return pyg_sparse_tensor()(
        row=edge_index[1], col=edge_index[0], value=value if form == "SparseTensor" else None, sparse_sizes=(n, n)
    )


# ------------------------------------------------------------------ ARMAConv


@given(
    graph=pyg_graphs(),
    stacks=st.sampled_from([1, 3]),
    layers=st.sampled_from([1, 2, 3]),
    in_channels=st.sampled_from([3, 8]),  # propagated before / after the first transform
    options=st.sampled_from([{}, {"shared_weights": True}, {"bias": False}, {"act": None}, {"act": torch.tanh}]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_arma_conv_matches_pyg(graph, stacks, layers, in_channels, options, weighted, seed):
    edge_index, n = graph
    w = edge_weights(edge_index, seed + 1) if weighted else None
    pyg, ours = same_start("ARMAConv", in_channels, 4, num_stacks=stacks, num_layers=layers, **options)
    compare(pyg, ours, (features(n, in_channels, seed), edge_index, w))


@pytest.mark.parametrize("shared", [False, True])
def test_arma_conv_dropout_draws_as_pyg(shared):
    edge_index = _graph()
    x = features(8, 5, 1)
    pyg, ours = same_start("ARMAConv", 5, 4, num_stacks=2, num_layers=3, shared_weights=shared, dropout=0.4)
    expected, _ = compare(Seeded(pyg, 3).train(), Seeded(ours, 3).train(), (x, edge_index))
    evaluated, _ = compare(pyg.eval(), ours.eval(), (x, edge_index))
    assert not torch.allclose(expected, evaluated), "the dropout dropped nothing"


def test_arma_conv_activation_sees_pyg_axes():
    """An activation that is not elementwise reads PyG's [K, V, F] axes (here: over the stacks)."""
    edge_index = _graph()
    for dim in (0, -1):
        pyg, ours = same_start("ARMAConv", 5, 4, num_stacks=3, num_layers=2, act=torch.nn.Softmax(dim=dim))
        compare(pyg, ours, (features(8, 5, 2), edge_index, edge_weights(edge_index, 3)))


def _as_edge_index(adj) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A sparse adjacency's (edge_index, values): the call on an edge_index that equals it."""
    if isinstance(adj, torch.Tensor):
        coo = adj.to_sparse_coo().coalesce()
        return coo.indices().flip(0), coo.values()
    row, col, value = adj.coo()
    return torch.stack([col, row]), value


@pytest.mark.parametrize("form", FORMS)
def test_arma_conv_sparse_adjacencies(monkeypatch, form):
    """Values are the weights of gcn_norm. PyG's ARMAConv fails on a sparse adjacency (its spmm gets
    the [K, V, F] stacks): the oracle is its call on the same edges and weights as an edge_index."""
    patch_pyg(monkeypatch)
    adj = _adjacency(form, _graph(), 8)
    edge_index, w = _as_edge_index(adj)
    for in_channels in (3, 8):
        pyg, ours = same_start("ARMAConv", in_channels, 4, num_stacks=2, num_layers=2)
        x = features(8, in_channels, 2)
        ours.load_state_dict(pyg.state_dict())
        expected, got = pyg(x, edge_index, w), ours(x, adj)
        close(got, expected, "output")
        weight = torch.randn(expected.shape, generator=torch.Generator().manual_seed(7))
        want = torch.autograd.grad((expected * weight).sum(), [x, *pyg.parameters()])
        have = torch.autograd.grad((got * weight).sum(), [x, *ours.parameters()])
        for i, (a, b) in enumerate(zip(have, want)):
            close(a, b, f"gradient {i}")


def test_arma_conv_negative_degrees_are_nan_as_in_pyg():
    """PyG's deg^-1/2 of a negative weighted degree is NaN (only 1/0 is masked), and so is gnnc's."""
    edge_index = torch.tensor([[0, 2, 3, 4, 5], [1, 3, 3, 5, 4]])
    w = torch.tensor([-0.5, 1.0, 1.0, 2.0, -2.0])
    for in_channels in (3, 8):
        pyg, ours = same_start("ARMAConv", in_channels, 4)
        expected, _ = compare(pyg, ours, (features(6, in_channels, 1), edge_index, w), grads=False)
        assert torch.isnan(expected[[1, 5]]).all() and torch.isfinite(expected[[0, 2, 3]]).all()


def test_arma_conv_lazy_channels_graph_and_float64():
    edge_index = _graph()
    x = features(8, 5, 1)
    torch.manual_seed(0)
    pyg = pyg_nn.ARMAConv(-1, 4, num_stacks=2, num_layers=2)
    torch.manual_seed(0)
    ours = gnn.ARMAConv(-1, 4, num_stacks=2, num_layers=2)
    torch.manual_seed(1)
    pyg(x, edge_index)
    torch.manual_seed(1)
    ours(x, edge_index)  # sized and initialised by the first call, as PyG's
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    compare(pyg, ours, (x, edge_index))
    # a sized state sizes a lazy layer (PyG's cannot load one)
    lazy = gnn.ARMAConv(-1, 4, num_stacks=2, num_layers=2)
    lazy.load_state_dict(ours.state_dict())
    close(lazy(x, edge_index), ours(x, edge_index), "loaded")
    graph = gnnc.Graph.from_edge_index(edge_index.numpy(), num_vertices=8)
    close(ours(x, graph), ours(x, edge_index), "gnnc.Graph")
    pyg, ours = same_start("ARMAConv", 5, 4, num_stacks=2, num_layers=2)
    compare(pyg.double(), ours.double(), (x.double(), edge_index), rtol=1e-9)


def test_arma_conv_refuses_bad_input():
    edge_index = _graph()
    x = features(8, 5, 1, grad=False)
    conv = gnn.ARMAConv(5, 4)
    with pytest.raises(ArgumentError, match="ARMAConv: x must be one tensor"):
        conv((x, x), edge_index)
    with pytest.raises(ArgumentError, match="ARMAConv propagates over one square graph"):
        conv(x, gnn.Block(bipartite(8, 4, 10, 1), 8, 4))
    with pytest.raises(ArgumentError, match="ARMAConv: x has 3 channels, the layer 5"):
        conv(x[:, :3], edge_index)
    with pytest.raises(ArgumentError, match=r"edge_weight must have shape \[E\]"):
        conv(x, edge_index, torch.ones(3))
    for bad, match in (
        ({"num_stacks": 0}, "num_stacks must be a positive integer"),
        ({"num_layers": 1.5}, "num_layers must be a positive integer"),
        ({"dropout": 1.5}, "dropout must be a probability"),
        ({"act": "relu"}, "act must be a callable"),
        ({"aggr": "mean"}, "ARMAConv: aggr='mean' is not supported"),
        ({"flow": "target_to_source"}, "flow='target_to_source' is not supported"),
    ):
        with pytest.raises(ArgumentError, match=match):
            gnn.ARMAConv(5, 4, **bad)
    with pytest.raises(ArgumentError, match="in_channels must be a positive integer or -1"):
        gnn.ARMAConv(0, 4)


# ------------------------------------------------------------------ MixHopConv

POWERS = [None, [1], [0], [2, 0, 3], [1, 1, 2], [3]]


@given(
    graph=pyg_graphs(),
    powers=st.sampled_from(POWERS),
    widths=st.sampled_from([(12, 2), (3, 5)]),  # Linear layers first / last
    options=st.sampled_from([{}, {"add_self_loops": False}, {"bias": False}]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_mixhop_conv_matches_pyg(graph, powers, widths, options, weighted, seed):
    edge_index, n = graph
    if weighted and options.get("add_self_loops", True):
        edge_index = one_loop_per_vertex(edge_index)  # see test_nn_gcn: PyG's loop gradient
    w = edge_weights(edge_index, seed + 1) if weighted else None
    pyg, ours = same_start("MixHopConv", *widths, powers=powers, **options)
    compare(pyg, ours, (features(n, widths[0], seed), edge_index, w))


def test_mixhop_conv_runs_the_linear_layers_first_where_that_propagates_less():
    x = features(8, 12, 1)
    assert gnn.MixHopConv(12, 2)._transform_first(x)  # 3 x 2 columns propagated, not 2 x 12
    assert not gnn.MixHopConv(12, 9)._transform_first(x)  # 27 against 24: the other way round
    assert not gnn.MixHopConv(12, 2, powers=[0])._transform_first(x)  # nothing to propagate
    assert not gnn.MixHopConv(-1, 2)._transform_first(x)  # not sized yet


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("add_self_loops", [True, False])
def test_mixhop_conv_sparse_adjacencies(monkeypatch, form, add_self_loops):
    """A torch.sparse adjacency gets a loop added beside its own, a SparseTensor has its own replaced."""
    patch_pyg(monkeypatch)
    edge_index = _graph()
    for widths in ((12, 2), (3, 5)):
        pyg, ours = same_start("MixHopConv", *widths, add_self_loops=add_self_loops)
        compare(pyg, ours, (features(8, widths[0], 2), _adjacency(form, edge_index, 8)))


def test_mixhop_conv_lazy_channels_and_graph():
    edge_index = _graph()
    x = features(8, 5, 1)
    # PyG's lazy MixHopConv calls `lin.forward` of the powers above 0, which skips the hook that
    # would size them: it fails. gnnc's sizes each by its first input.
    ours = gnn.MixHopConv(-1, 3, powers=[0, 2])
    ours(x, edge_index)
    pyg = pyg_nn.MixHopConv(5, 3, powers=[0, 2])
    pyg.load_state_dict(ours.state_dict())
    compare(pyg, ours, (x, edge_index))
    graph = gnnc.Graph.from_edge_index(edge_index.numpy(), num_vertices=8)
    for loops in (True, False):
        conv = gnn.MixHopConv(5, 3, add_self_loops=loops)
        close(conv(x, graph), conv(x, edge_index), "gnnc.Graph")


def test_mixhop_conv_refuses_bad_input():
    edge_index = _graph()
    x = features(8, 5, 1, grad=False)
    for powers in ([], [-1], [1.0], "12"):
        with pytest.raises(ArgumentError, match="powers must be a non-empty list of non-negative integers"):
            gnn.MixHopConv(5, 3, powers=powers)
    conv = gnn.MixHopConv(5, 3)
    with pytest.raises(ArgumentError, match="MixHopConv: x must be one tensor"):
        conv((x, x), edge_index)
    with pytest.raises(ArgumentError, match="MixHopConv: aggr='max' is not supported"):
        gnn.MixHopConv(5, 3, aggr="max")
    with pytest.raises(ArgumentError, match="edge_weight was given with a sparse adjacency"):
        conv(x, _adjacency("coo", edge_index, 8), torch.ones(edge_index.shape[1]))


# ------------------------------------------------------------------ DirGNNConv


def _dir_start(make, **options):
    """(PyG's DirGNNConv of PyG's layer, gnnc's of gnnc's), each layer built from one seed: the
    same parameters (the copies' reset and lin drawn as PyG's)."""
    torch.manual_seed(0)
    pyg = pyg_nn.DirGNNConv(make(pyg_nn), **options)
    torch.manual_seed(0)
    ours = gnn.DirGNNConv(make(gnn), **options)
    assert list(pyg.state_dict()) == list(ours.state_dict())
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    return pyg, ours


#: Layers DirGNNConv wraps, with (where PyG's lin cannot follow them) root_weight off
CONVS = {
    "GCNConv": (lambda m: m.GCNConv(5, 4), {}),
    "SAGEConv": (lambda m: m.SAGEConv(5, 4), {}),
    "GATConv": (lambda m: m.GATConv(5, 4, heads=2, concat=False, dropout=0.3), {}),
    "GATv2Conv": (lambda m: m.GATv2Conv(5, 4, edge_dim=None), {}),
    "TransformerConv": (lambda m: m.TransformerConv(5, 4, beta=True), {}),
    "FeaStConv": (lambda m: m.FeaStConv(5, 4, heads=2), {}),
    "AGNNConv": (lambda m: m.AGNNConv(), {"root_weight": False}),
    "SGConv": (lambda m: m.SGConv(5, 4, K=2), {}),
    "MixHopConv": (lambda m: m.MixHopConv(5, 2, powers=[0, 1]), {"root_weight": False}),
    "GINConv": (lambda m: m.GINConv(torch.nn.Linear(5, 5)), {"root_weight": False}),
    "ResGatedGraphConv": (lambda m: m.ResGatedGraphConv(5, 4), {}),
}


@given(graph=pyg_graphs(), alpha=st.sampled_from([0.5, 0.2]), root_weight=st.booleans(), seed=st.integers(0, 2**16))
def test_dir_gnn_conv_matches_pyg(graph, alpha, root_weight, seed):
    edge_index, n = graph
    pyg, ours = _dir_start(lambda m: m.GCNConv(5, 4), alpha=alpha, root_weight=root_weight)
    compare(pyg, ours, (features(n, 5, seed), edge_index))


@pytest.mark.parametrize("name", list(CONVS))
def test_dir_gnn_conv_wraps_gnnc_layers(name):
    """Each copy without self loops and root weight, as PyG's; dropout drawn as PyG's."""
    make, options = CONVS[name]
    edge_index = _graph()
    pyg, ours = _dir_start(make, **options)
    compare(Seeded(pyg, 2).train(), Seeded(ours, 2).train(), (features(8, 5, 1), edge_index))
    if hasattr(ours.conv_in, "add_self_loops"):
        assert not ours.conv_in.add_self_loops and not ours.conv_out.add_self_loops


def test_dir_gnn_conv_copies_warm_up_the_kernels_they_call():
    """The copies' kernels follow the options DirGNNConv turned off, so warm_up compiles what the
    calls run (GAT's variants without self loops), not the constructor's."""
    from gnnc.nn.attention import LoopKind
    from gnnc.nn.precompile import kernels_of

    for conv in (gnn.GATConv(5, 4, dropout=0.3), gnn.GATv2Conv(5, 4), gnn.AGNNConv(), gnn.FeaStConv(5, 4)):
        wrapped = gnn.DirGNNConv(conv, root_weight=False)
        for copy_ in (wrapped.conv_in, wrapped.conv_out):
            if isinstance(copy_, (gnn.GATConv, gnn.GATv2Conv)):
                assert {key[0] for key in copy_._kernels} == {LoopKind.NONE}
            else:
                assert set(copy_._kernels) == {False}
        made = {k.name for k in kernels_of(wrapped)}
        x = features(8, 5, 1, grad=False)
        wrapped(x, _graph())
        assert {k.name for k in kernels_of(wrapped)} == made  # the calls made no other kernel


def test_dir_gnn_conv_reverses_each_edge_index_once():
    edge_index = _graph()
    flipped = flipped_edges(edge_index)
    assert flipped is flipped_edges(edge_index) and torch.equal(flipped, edge_index.flip(0))
    copied = torch.ops.gnnc.nn_flipped_edges(edge_index)  # what a compiled call gets: a copy
    assert copied is not flipped and torch.equal(copied, flipped)
    # a gnnc.Graph is read reversed
    x = features(8, 5, 1, grad=False)
    conv = gnn.DirGNNConv(gnn.GCNConv(5, 4))
    graph = gnnc.Graph.from_edge_index(edge_index.numpy(), num_vertices=8)
    close(conv(x, graph), conv(x, edge_index), "gnnc.Graph")


def test_dir_gnn_conv_refuses_what_it_cannot_wrap():
    edge_index = _graph()
    x = features(8, 5, 1, grad=False)
    conv = gnn.DirGNNConv(gnn.GCNConv(5, 4))
    with pytest.raises(ArgumentError, match="DirGNNConv reverses the edges"):
        conv(x, _adjacency("coo", edge_index, 8))
    with pytest.raises(ArgumentError, match=r"edge_index must have shape \[2, E\]"):
        conv(x, edge_index[:1])
    with pytest.raises(ArgumentError, match="x must be one tensor"):
        conv((x, x), edge_index)
    with pytest.raises(ArgumentError, match="root_weight is a parameter"):
        gnn.DirGNNConv(gnn.ARMAConv(5, 4))
    with pytest.raises(ArgumentError, match="conv's in_channels is -1"):
        gnn.DirGNNConv(gnn.GCNConv(-1, 4))
    with pytest.raises(ArgumentError, match="conv must be a message passing layer"):
        gnn.DirGNNConv(lambda x, e: x)
    with pytest.raises(ArgumentError, match="lin maps 5 to 2 channels"):
        gnn.DirGNNConv(gnn.MixHopConv(5, 2))(x, edge_index)  # 3 powers: 6 channels


# ------------------------------------------------------------------ AntiSymmetricConv

ANTI_OPTIONS = [
    {},
    {"num_iters": 3, "epsilon": 0.3, "gamma": 0.5, "act": "relu"},
    {"num_iters": 2, "act": "leaky_relu", "act_kwargs": {"negative_slope": 0.3}, "bias": False},
    {"act": None},
    {"act": torch.nn.functional.elu},
    {"num_iters": 0},
]


@given(graph=pyg_graphs(), options=st.sampled_from(ANTI_OPTIONS), weighted=st.booleans(), seed=st.integers(0, 2**16))
def test_antisymmetric_conv_matches_pyg(graph, options, weighted, seed):
    edge_index, n = graph
    if weighted:
        edge_index = one_loop_per_vertex(edge_index)  # see test_nn_gcn: PyG's loop gradient
    args = (features(n, 5, seed), edge_index) + ((edge_weights(edge_index, seed + 1),) if weighted else ())
    compare(*same_start("AntiSymmetricConv", 5, **options), args)


def test_antisymmetric_conv_with_other_phi():
    """phi any layer, the call's further arguments passed on to it."""
    edge_index = _graph()
    x = features(8, 5, 1)
    for make, extra in (
        (lambda m: m.SAGEConv(5, 5, aggr="max"), {}),
        (lambda m: m.GATConv(5, 5, edge_dim=2), {"edge_attr": features(edge_index.shape[1], 2, 3)}),
        (lambda m: m.GCNConv(5, 5, normalize=False), {"edge_weight": edge_weights(edge_index, 4)}),
    ):
        torch.manual_seed(0)
        pyg = pyg_nn.AntiSymmetricConv(5, phi=make(pyg_nn), num_iters=2, act="swish")
        torch.manual_seed(0)
        ours = gnn.AntiSymmetricConv(5, phi=make(gnn), num_iters=2, act="swish")
        for key, value in pyg.state_dict().items():
            assert torch.equal(ours.state_dict()[key], value), key
        compare(pyg, ours, (x, edge_index), extra)


def test_antisymmetric_conv_refuses_bad_input():
    edge_index = _graph()
    x = features(8, 5, 1, grad=False)
    with pytest.raises(ArgumentError, match="act='nope' names no torch.nn activation"):
        gnn.AntiSymmetricConv(5, act="nope")
    with pytest.raises(ArgumentError, match="act_kwargs apply to an activation given by name"):
        gnn.AntiSymmetricConv(5, act=torch.tanh, act_kwargs={"inplace": True})
    with pytest.raises(ArgumentError, match="in_channels must be a positive integer"):
        gnn.AntiSymmetricConv(-1)
    with pytest.raises(ArgumentError, match="num_iters must be a non-negative integer"):
        gnn.AntiSymmetricConv(5, num_iters=-1)
    with pytest.raises(ArgumentError, match="epsilon must be a finite number"):
        gnn.AntiSymmetricConv(5, epsilon=float("nan"))
    with pytest.raises(ArgumentError, match="AntiSymmetricConv: x has 3 channels, the layer 5"):
        gnn.AntiSymmetricConv(5)(x[:, :3], edge_index)


# ------------------------------------------------------------------ all four

EVERY = {
    "ARMAConv": (lambda: gnn.ARMAConv(5, 4, num_stacks=2, num_layers=2, dropout=0.3), True),
    "MixHopConv": (lambda: gnn.MixHopConv(5, 2, powers=[0, 1, 3]), True),
    "MixHopConv-no-loops": (lambda: gnn.MixHopConv(5, 4, add_self_loops=False), True),
    "DirGNNConv": (lambda: gnn.DirGNNConv(gnn.GATConv(5, 4, dropout=0.3)), False),
    "AntiSymmetricConv": (lambda: gnn.AntiSymmetricConv(5, num_iters=2), True),
}


@pytest.mark.parametrize("name", list(EVERY))
def test_copies_saves_and_compiles(name):
    make, weighted = EVERY[name]
    g = torch.Generator().manual_seed(11)
    edge_index = torch.randint(0, 10, (2, 32), generator=g)
    x = torch.randn(10, 5, generator=g, requires_grad=True)
    args = (x, edge_index) + ((torch.rand(32, generator=g) + 0.1,) if weighted else ())
    torch.manual_seed(0)
    model = make().train()
    assert gnn.warm_up(model).kernels >= 1

    def run(layer):  # from one seed: the same dropout
        torch.manual_seed(5)
        return layer(*args)

    expected = run(model)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(model), torch.load(buffer, weights_only=False)):
        close(run(other), expected, f"{name}: a copy")
    torch._dynamo.reset()
    got = run(torch.compile(model, fullgraph=True, backend="aot_eager"))
    close(got, expected, f"{name}: compiled")
    params = [x, *(p for p in model.parameters() if p.requires_grad)]
    want = torch.autograd.grad(expected.square().sum(), params, allow_unused=True)
    have = torch.autograd.grad(got.square().sum(), params, allow_unused=True)
    for i, (a, b) in enumerate(zip(have, want)):
        if b is not None:
            close(a, b, f"{name}: compiled gradient {i}")
