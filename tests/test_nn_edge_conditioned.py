"""gnnc.nn's NNConv, GMMConv and PDNConv against PyG's layers of the same name.

PyG's initialisation draw for draw; outputs and gradients (features, edge
features and every parameter, the user's `nn` and PDNConv's MLP included) on
hypothesis graphs, every aggregation and option; bipartite pairs, `size=`,
sampled blocks, torch.sparse and SparseTensor adjacencies, float64, lazy
channels, torch.compile, copies and the errors.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import bipartite, close, compare, features, one_loop_per_vertex, pyg_graphs
from tests.sparse_tensor import patch_pyg, sparse_tensor_adjacency, torch_sparse_adjacency

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc  # noqa: E402
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402

AGGRS = ["add", "mean", "max", "min"]


def _mlp(i: int, o: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(i, 6), torch.nn.ReLU(), torch.nn.Linear(6, o))


def start(name: str, *args: Any, make: Callable[[], Any] | None = None, lazy: bool = False, **kwargs: Any):
    """(PyG's layer, gnnc.nn's) from one seed, each with its own `nn` from `make` (a shared one would
    share its gradients too): the same state_dict keys and values."""
    extra = (lambda: {}) if make is None else (lambda: {"nn": make()})
    torch.manual_seed(0)
    pyg = getattr(pyg_nn, name)(*args, **extra(), **kwargs)
    torch.manual_seed(0)
    ours = getattr(gnn, name)(*args, **extra(), **kwargs)
    if lazy:  # PyG's lazy GMMConv has no state_dict before its first call
        return pyg, ours
    assert list(pyg.state_dict()) == list(ours.state_dict())
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    return pyg, ours


def _edge_attr(num_edges: int, dim: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(num_edges, dim, generator=g) * scale).requires_grad_()


def _row_major(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    """edge_index without duplicates, in the row-major order of adj_t (a coalesced adjacency's)."""
    key = torch.unique(edge_index[1] * n + edge_index[0])
    return torch.stack([key % n, key // n])


# ------------------------------------------------------------------ NNConv


@given(
    graph=pyg_graphs(),
    aggr=st.sampled_from(AGGRS),
    root_weight=st.booleans(),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_nn_conv_matches_pyg(graph, aggr, root_weight, bias, seed):
    edge_index, n = graph
    pyg, ours = start("NNConv", 5, 4, make=lambda: _mlp(3, 20), aggr=aggr, root_weight=root_weight, bias=bias)
    args = (features(n, 5, seed), edge_index, _edge_attr(edge_index.shape[1], 3, seed + 1))
    compare(pyg, ours, args)


def test_nn_conv_bipartite_size_and_blocks():
    edge_index = bipartite(7, 4, 18, 1)
    ea = _edge_attr(18, 2, 2)
    for aggr in AGGRS:
        pyg, ours = start("NNConv", (5, 3), 4, make=lambda: torch.nn.Linear(2, 20), aggr=aggr)
        compare(pyg, ours, ((features(7, 5, 3), features(4, 3, 4)), edge_index, ea))
        # no destination features: no root term, as many destinations as size= says
        compare(pyg, ours, ((features(7, 5, 5), None), edge_index, ea), {"size": (7, 4)})
    x = features(7, 5, 6, grad=False)
    pyg, ours = start("NNConv", 5, 4, make=lambda: torch.nn.Linear(2, 20))
    expected = pyg((x, x[:4]), edge_index, ea)
    close(ours(x, gnn.Block(edge_index, 7, 4), ea), expected, "block")
    # an nn that is a plain function (PyG takes any callable), no parameters of its own
    weight = torch.randn(2, 20, generator=torch.Generator().manual_seed(7))

    def fixed(e):
        return e @ weight

    pyg, ours = start("NNConv", 5, 4, make=lambda: fixed, aggr="mean")
    compare(pyg, ours, ((features(7, 5, 8), features(4, 5, 9)), edge_index, ea))


# ------------------------------------------------------------------ GMMConv


@given(
    graph=pyg_graphs(),
    aggr=st.sampled_from(AGGRS),
    separate=st.booleans(),
    root_weight=st.booleans(),
    bias=st.booleans(),
    kernel_size=st.sampled_from([1, 3]),
    seed=st.integers(0, 2**16),
)
def test_gmm_conv_matches_pyg(graph, aggr, separate, root_weight, bias, kernel_size, seed):
    edge_index, n = graph
    pyg, ours = start(
        "GMMConv", 5, 4, 2, kernel_size, separate_gaussians=separate, aggr=aggr, root_weight=root_weight, bias=bias
    )
    if not root_weight:
        pyg.root = None  # PyG's forward reads `self.root`, which it sets only with root_weight
    # pseudo-coordinates near mu's scale, so the Gaussians are neither all 0 nor all 1
    args = (features(n, 5, seed), edge_index, _edge_attr(edge_index.shape[1], 2, seed + 1, 0.5))
    compare(pyg, ours, args)


def test_gmm_conv_bipartite_size_and_blocks():
    edge_index = bipartite(7, 4, 18, 1)
    ea = _edge_attr(18, 3, 2, 0.5)
    for separate in (False, True):
        for aggr in AGGRS:
            pyg, ours = start("GMMConv", (5, 3), 4, 3, 2, separate_gaussians=separate, aggr=aggr)
            compare(pyg, ours, ((features(7, 5, 3), features(4, 3, 4)), edge_index, ea))
            compare(pyg, ours, ((features(7, 5, 5), None), edge_index, ea), {"size": (7, 4)})
    x = features(7, 5, 6, grad=False)
    pyg, ours = start("GMMConv", 5, 4, 3, 2)
    close(ours(x, gnn.Block(edge_index, 7, 4), ea), pyg((x, x[:4]), edge_index, ea), "block")


# ------------------------------------------------------------------ PDNConv


@given(
    graph=pyg_graphs(),
    aggr=st.sampled_from(AGGRS),
    normalize=st.booleans(),
    loops=st.booleans(),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_pdn_conv_matches_pyg(graph, aggr, normalize, loops, bias, seed):
    # PyG's backward gives every one of a vertex's self loops the weight gradient of the last, which
    # alone it kept (docs/guide/nn.md): one loop per vertex
    edge_index, n = graph
    edge_index = one_loop_per_vertex(edge_index)
    pyg, ours = start("PDNConv", 5, 4, 3, 6, add_self_loops=loops, normalize=normalize, bias=bias, aggr=aggr)
    args = (features(n, 5, seed), edge_index, _edge_attr(edge_index.shape[1], 3, seed + 1))
    compare(pyg, ours, args)


@pytest.mark.parametrize("aggr", AGGRS)
@pytest.mark.parametrize("loops", [True, False])
def test_pdn_conv_without_edge_features(aggr, loops):
    """Every edge weighs 1: PyG's gcn_norm's; without normalisation PyG's message fails on the
    missing weights, and gnnc aggregates the rows unweighted (as PyG does a SparseTensor without
    values)."""
    g = torch.Generator().manual_seed(3)
    edge_index = torch.cat([torch.randint(0, 8, (2, 30), generator=g), torch.tensor([[2, 2, 5], [2, 2, 5]])], 1)
    x = features(9, 5, 4)
    compare(*start("PDNConv", 5, 4, 3, 6, add_self_loops=loops, aggr=aggr), (x, edge_index))
    pyg, ours = start("PDNConv", 5, 4, 3, 6, normalize=False, aggr=aggr)
    h = pyg.lin(x)
    reduce = {"add": "sum", "mean": "mean", "max": "amax", "min": "amin"}[aggr]
    index = edge_index[1].view(-1, 1).expand(-1, 4)
    expected = torch.zeros(9, 4).scatter_reduce(0, index, h[edge_index[0]], reduce, include_self=False)
    close(ours(x, edge_index), expected + pyg.bias, "unweighted")


def test_pdn_conv_block_andsmall_graph():
    """A block runs on its sources' square graph (PyG's layer is not bipartite), its destinations'
    rows kept; a gnnc.Graph is taken as its edge_index."""
    edge_index = bipartite(7, 4, 18, 1)
    x, ea = features(7, 5, 2, grad=False), _edge_attr(18, 3, 3).detach()
    for aggr in ("add", "max"):
        pyg, ours = start("PDNConv", 5, 4, 3, 6, aggr=aggr)
        expected = pyg(x, edge_index, ea)
        close(ours(x, gnn.Block(edge_index, 7, 4), ea), expected[:4], "block")
        close(ours(x, gnnc.Graph.from_edge_index(edge_index.numpy(), 7), ea), expected, "Graph")


# ------------------------------------------------------------------ sparse adjacencies


@pytest.mark.parametrize("form", ["coo", "csr", "SparseTensor"])
def test_sparse_adjacencies(monkeypatch, form):
    """NNConv and GMMConv read edge_attr in the adjacency's entry order, a SparseTensor's values
    when none is given (PyG's propagate); PDNConv reads a SparseTensor's values through its MLP and
    a torch.sparse adjacency's as the weights (PyG's gcn_norm and spmm)."""
    patch_pyg(monkeypatch)
    n = 9
    edge_index = _row_major(torch.randint(0, n, (2, 40), generator=torch.Generator().manual_seed(5)), n)
    num_edges = edge_index.shape[1]
    x, ea = features(n, 5, 6), _edge_attr(num_edges, 3, 7, 0.5)
    if form == "SparseTensor":
        adj, extra = sparse_tensor_adjacency(edge_index, ea.detach(), n), ()
    else:
        layout = torch.sparse_csr if form == "csr" else torch.sparse_coo
        adj, extra = torch_sparse_adjacency(edge_index, torch.rand(num_edges) + 0.5, n, layout), (ea,)
    for aggr in AGGRS:
        compare(*start("NNConv", 5, 4, make=lambda: _mlp(3, 20), aggr=aggr), (x, adj, *extra))
        compare(*start("GMMConv", 5, 4, 3, 2, aggr=aggr), (x, adj, *extra))
        compare(*start("GMMConv", 5, 4, 3, 2, separate_gaussians=True, aggr=aggr), (x, adj, *extra))
        for normalize in (True, False):
            for loops in (True, False) if normalize else (True,):
                pyg, ours = start("PDNConv", 5, 4, 3, 6, normalize=normalize, add_self_loops=loops, aggr=aggr)
                compare(pyg, ours, (x, adj))
    if form != "SparseTensor":
        with pytest.raises(ArgumentError, match="edge_attr was given with a sparse adjacency"):
            gnn.PDNConv(5, 4, 3, 6)(x, adj, ea)


def test_pdn_conv_sparse_tensor_without_values(monkeypatch):
    patch_pyg(monkeypatch)
    n = 9
    edge_index = _row_major(torch.randint(0, n, (2, 40), generator=torch.Generator().manual_seed(8)), n)
    adj = sparse_tensor_adjacency(edge_index, None, n)
    for aggr in AGGRS:
        for normalize, loops in ((True, True), (True, False), (False, True)):
            pyg, ours = start("PDNConv", 5, 4, 3, 6, normalize=normalize, add_self_loops=loops, aggr=aggr)
            compare(pyg, ours, (features(n, 5, 9), adj))


# ------------------------------------------------------------------ precision, laziness, compile, copies


def test_float64():
    g = torch.Generator().manual_seed(10)
    edge_index = torch.randint(0, 9, (2, 30), generator=g)
    x = features(9, 5, 11, grad=False).double().requires_grad_()
    ea = _edge_attr(30, 3, 12, 0.5).detach().double().requires_grad_()
    layers = [
        ("NNConv", (5, 4), {"make": lambda: _mlp(3, 20), "aggr": "mean"}),
        ("GMMConv", (5, 4, 3, 2), {"separate_gaussians": True, "aggr": "max"}),
        ("PDNConv", (5, 4, 3, 6), {"aggr": "min"}),
    ]
    for name, args, kwargs in layers:
        pyg, ours = start(name, *args, **kwargs)
        pyg.double(), ours.double()
        graph = one_loop_per_vertex(edge_index) if name == "PDNConv" else edge_index
        compare(pyg, ours, (x, graph, ea[: graph.shape[1]]), rtol=1e-9)


@pytest.mark.parametrize("separate", [False, True])
def test_gmm_conv_lazy(separate):
    edge_index = torch.randint(0, 6, (2, 14), generator=torch.Generator().manual_seed(13))
    ea = _edge_attr(14, 2, 14, 0.5)
    pyg, ours = start("GMMConv", -1, 4, 2, 3, separate_gaussians=separate, lazy=True)
    x = features(6, 5, 15)
    torch.manual_seed(1)
    pyg(x, edge_index, ea)
    torch.manual_seed(1)
    ours(x, edge_index, ea)  # sized and initialised by the first call, in PyG's order
    assert list(pyg.state_dict()) == list(ours.state_dict())
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    compare(pyg, ours, (x, edge_index, ea))
    # an initialised PyG layer's state_dict sizes a lazy gnnc layer
    fresh = gnn.GMMConv(-1, 4, 2, 3, separate_gaussians=separate)
    pyg.zero_grad()
    compare(pyg, fresh, (x, edge_index, ea))


def test_nn_conv_lazy():
    """-1 for the destinations sizes `lin` by the first call, as PyG's; -1 for the sources, where
    PyG's view of theta fails, reads them off x."""
    edge_index = torch.randint(0, 6, (2, 14), generator=torch.Generator().manual_seed(16))
    ea, x = _edge_attr(14, 2, 17), features(6, 5, 18)
    pyg, ours = start("NNConv", (5, -1), 4, make=lambda: torch.nn.Linear(2, 20), lazy=True)
    torch.manual_seed(1)
    pyg(x, edge_index, ea)
    torch.manual_seed(1)
    ours(x, edge_index, ea)
    compare(pyg, ours, (x, edge_index, ea))
    ours = gnn.NNConv(-1, 4, torch.nn.Linear(2, 20))
    pyg = pyg_nn.NNConv(5, 4, torch.nn.Linear(2, 20))
    ours(x, edge_index, ea)
    compare(pyg, ours, (x, edge_index, ea))


def _layers() -> list[tuple[str, torch.nn.Module]]:
    torch.manual_seed(0)
    return [
        ("NNConv", gnn.NNConv(5, 4, _mlp(3, 20), aggr="max")),
        ("GMMConv", gnn.GMMConv(5, 4, 3, 2)),
        ("GMMConv-separate", gnn.GMMConv(5, 4, 3, 2, separate_gaussians=True, aggr="add")),
        ("PDNConv", gnn.PDNConv(5, 4, 3, 6, aggr="mean")),
    ]


def test_compiled_equals_eager():
    g = torch.Generator().manual_seed(19)
    edge_index = torch.randint(0, 8, (2, 26), generator=g)
    x, ea = features(8, 5, 20), _edge_attr(26, 3, 21, 0.5)
    for name, layer in _layers():
        expected = layer(x, edge_index, ea)
        expected.sum().backward()
        grads = [p.grad.clone() for p in layer.parameters()]
        layer.zero_grad()
        got = torch.compile(layer, fullgraph=True, backend="aot_eager")(x, edge_index, ea)
        close(got, expected, f"{name} compiled")
        got.sum().backward()
        for p, grad in zip(layer.parameters(), grads):
            close(p.grad, grad, f"{name} compiled gradient")


def test_copies():
    edge_index = torch.randint(0, 8, (2, 26), generator=torch.Generator().manual_seed(22))
    x, ea = features(8, 5, 23, grad=False), _edge_attr(26, 3, 24, 0.5).detach()
    for name, layer in _layers():
        buffer = io.BytesIO()
        torch.save(layer, buffer)
        buffer.seek(0)
        expected = layer(x, edge_index, ea)
        for other in (copy.deepcopy(layer), torch.load(buffer, weights_only=False)):
            torch.testing.assert_close(other(x, edge_index, ea), expected, msg=name)


# ------------------------------------------------------------------ errors


def test_bad_arguments():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    x, ea = torch.randn(3, 4), torch.randn(3, 2)
    with pytest.raises(ArgumentError, match="NNConv: aggr='std' is not supported"):
        gnn.NNConv(4, 4, torch.nn.Linear(2, 16), aggr="std")
    with pytest.raises(ArgumentError, match="NNConv: nn must be a module or function"):
        gnn.NNConv(4, 4, None)
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'heads'"):
        gnn.NNConv(4, 4, torch.nn.Linear(2, 16), heads=2)
    with pytest.raises(ArgumentError, match="flow='target_to_source' is not supported"):
        gnn.NNConv(4, 4, torch.nn.Linear(2, 16), flow="target_to_source")
    with pytest.raises(ArgumentError, match="NNConv: forward needs edge_attr"):
        gnn.NNConv(4, 4, torch.nn.Linear(2, 16))(x, edge_index)
    with pytest.raises(ArgumentError, match=r"nn\(edge_attr\) must be \[E, in_channels \* out_channels\]"):
        gnn.NNConv(4, 4, torch.nn.Linear(2, 12))(x, edge_index, ea)
    with pytest.raises(ArgumentError, match="x_src has 4 channels, the layer was built for 5"):
        gnn.NNConv(5, 4, torch.nn.Linear(2, 20))(x, edge_index, ea)
    with pytest.raises(ArgumentError, match="x_dst has 2 rows but the graph has 3 destinations"):
        gnn.NNConv(4, 4, torch.nn.Linear(2, 16))((x, x[:2]), edge_index, ea, size=(3, 3))
    with pytest.raises(ArgumentError, match="GMMConv: aggr='lstm' is not supported"):
        gnn.GMMConv(4, 4, 2, 3, aggr="lstm")
    with pytest.raises(ArgumentError, match="GMMConv: kernel_size must be a positive integer"):
        gnn.GMMConv(4, 4, 2, 0)
    with pytest.raises(ArgumentError, match="GMMConv: dim must be a positive integer"):
        gnn.GMMConv(4, 4, None, 2)
    with pytest.raises(ArgumentError, match="GMMConv: forward needs edge_attr"):
        gnn.GMMConv(4, 4, 2, 3)(x, edge_index)
    with pytest.raises(ArgumentError, match=r"GMMConv: edge_attr must be \[3, 3\]"):
        gnn.GMMConv(4, 4, 3, 3)(x, edge_index, ea)
    with pytest.raises(ArgumentError, match="GMMConv: x_src has 4 channels, the layer was built for 5"):
        gnn.GMMConv(5, 4, 2, 3)(x, edge_index, ea)
    with pytest.raises(ArgumentError, match="PDNConv does not support bipartite message passing"):
        gnn.PDNConv(4, 4, 2, 3)((x, x), edge_index, ea)
    with pytest.raises(ArgumentError, match="PDNConv: in_channels must be a positive integer"):
        gnn.PDNConv(-1, 4, 2, 3)
    with pytest.raises(ArgumentError, match="PDNConv: aggr='mul' is not supported"):
        gnn.PDNConv(4, 4, 2, 3, aggr="mul")
    with pytest.raises(ArgumentError, match=r"PDNConv: edge_attr must be \[3, 3\]"):
        gnn.PDNConv(4, 4, 3, 3)(x, edge_index, ea)
    with pytest.raises(ArgumentError, match="PDNConv: x is torch.int64"):
        gnn.PDNConv(4, 4, 2, 3)(x.long(), edge_index, ea)
    assert repr(gnn.GMMConv(4, 3, 2, 5)) == "GMMConv(4, 3, dim=2)"
    assert repr(gnn.PDNConv(4, 3, 2, 5)) == "PDNConv(4, 3)"
    assert repr(gnn.NNConv(4, 3, torch.nn.Linear(2, 12))).startswith("NNConv(4, 3, aggr=add, nn=Linear")
