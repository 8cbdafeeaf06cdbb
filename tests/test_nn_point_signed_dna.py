"""gnnc.nn's PointTransformerConv, PPFConv, SignedConv and DNAConv against PyG's layers of the same name.

PyG's initialisation draw for draw; outputs and gradients (features, positions, normals, edge
weights, every parameter) on hypothesis graphs with isolated vertices, self loops and duplicate
edges; every aggregation and every form of the user's networks (the default Linear `pos_nn`,
networks starting with a Linear, others; `attn_nn` of every channel or of one); self loops added
or not; bipartite pairs, sampled blocks, torch.sparse adjacencies and SparseTensors, lazy
channels, attention dropout, the errors; torch.compile, copies and saving.

Max and min tie on duplicate edges (equal messages): gnnc's gradient goes to the lowest edge id,
torch's scatter splits it, but the tied edges compute the same function of the same rows, so the
gradients they add up to agree. With several self loops on one vertex and edge weights, PyG's
`add_remaining_self_loops` gives every one of them the gradient of the one it keeps, gnnc only
that one (docs/guide/nn.md): DNAConv's weighted graphs keep one loop per vertex.
"""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.nn import Linear, ReLU, Sequential

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
import gnnc  # noqa: E402
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402
from gnnc.nn.conv import dna_conv  # noqa: E402
from tests.sparse_tensor import patch_pyg, pyg_sparse_tensor  # noqa: E402

AGGRS = ["add", "sum", "mean", "max", "min"]


def _seeded_pair(name: str, nets: Any, *args: Any, lazy: bool = False, **kwargs: Any) -> tuple[Any, Any]:
    """(PyG's layer, gnnc's) from one seed, with networks made by `nets()` (a dict of keyword
    arguments) from one seed before each: the same state_dict (its keys only, for a lazy layer)."""
    layers = []
    for module in (pyg_nn, gnn):
        torch.manual_seed(0)
        made = nets()
        torch.manual_seed(1)
        layers.append(getattr(module, name)(*args, **made, **kwargs))
    pyg, ours = layers
    assert list(pyg.state_dict()) == list(ours.state_dict())
    for key, value in [] if lazy else pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    return pyg, ours


def _kernel_calls(layer: Any) -> list[str]:
    """The names of the kernels `layer` calls, recorded from now on."""
    calls: list[str] = []

    class Spy:
        def __init__(self, kernel: Any) -> None:
            self.kernel = kernel

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            calls.append(self.kernel.name)
            return self.kernel(*args, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.kernel, name)

    layer._kernels = {key: Spy(k) for key, k in layer._kernels.items()}
    return calls


def _adjacencies(edge_index: torch.Tensor, n: int, seed: int = 1) -> dict[str, Any]:
    """edge_index as PyG's sparse forms: torch.sparse COO and CSR (positive values), a SparseTensor."""
    value = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(seed)) + 0.5
    coo = torch.sparse_coo_tensor(edge_index.flip(0), value, (n, n)).coalesce()
    sparse_tensor = pyg_sparse_tensor()(row=edge_index[1], col=edge_index[0], sparse_sizes=(n, n))
    return {"coo": coo, "csr": coo.to_sparse_csr(), "SparseTensor": sparse_tensor}


# ------------------------------------------------------------------ PointTransformerConv


def _pt_nets(pos_nn: str, attn_nn: str | None, out: int = 4) -> Any:
    def nets() -> dict:
        made: dict[str, Any] = {}
        if pos_nn == "sequential":
            made["pos_nn"] = Sequential(Linear(3, 6), ReLU(), Linear(6, out))
        elif pos_nn == "torch_linear":
            made["pos_nn"] = Linear(3, out)
        elif pos_nn == "not_linear_first":
            made["pos_nn"] = Sequential(ReLU(), Linear(3, out))
        if attn_nn == "channels":
            made["attn_nn"] = Sequential(Linear(out, 5), ReLU(), Linear(5, out))
        elif attn_nn == "one":
            made["attn_nn"] = Linear(out, 1)
        return made

    return nets


#: The kernels a PointTransformerConv calls, by pos_nn and attn_nn ("{aggr}" the aggregation)
PT_KERNELS = {
    ("default", None): ["point_transformer_{aggr}"],
    ("torch_linear", None): ["point_transformer_{aggr}"],
    ("sequential", None): ["edge_mlp_messages", "point_transformer_{aggr}_edges"],
    ("not_linear_first", None): ["point_transformer_{aggr}_edges"],
    ("default", "channels"): ["point_transformer_scores", "point_transformer_{aggr}_attn"],
    ("default", "one"): ["point_transformer_scores", "point_transformer_{aggr}_attn1"],
    ("sequential", "channels"): [
        "edge_mlp_messages",
        "point_transformer_scores_edges",
        "point_transformer_{aggr}_edges_attn",
    ],
    ("not_linear_first", "one"): ["point_transformer_scores_edges", "point_transformer_{aggr}_edges_attn1"],
}


@given(
    graph=pyg_graphs(),
    aggr=st.sampled_from(AGGRS),
    nets=st.sampled_from(list(PT_KERNELS)),
    loops=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_point_transformer_matches_pyg(graph, aggr, nets, loops, seed):
    edge_index, n = graph
    pyg, ours = _seeded_pair("PointTransformerConv", _pt_nets(*nets), 5, 4, aggr=aggr, add_self_loops=loops)
    calls = _kernel_calls(ours)
    compare(pyg, ours, (features(n, 5, seed), features(n, 3, seed + 1), edge_index), rtol=5e-4)
    name = {"add": "sum"}.get(aggr, aggr)
    assert calls == [k.format(aggr=name) for k in PT_KERNELS[nets]]


@pytest.mark.parametrize("nets", [("default", None), ("sequential", "one")])
@pytest.mark.parametrize("sides", [(7, 4), (4, 7)])
def test_point_transformer_bipartite_blocks_and_sparse(nets, sides):
    num_src, num_dst = sides
    edge_index = bipartite(num_src, num_dst, 18, 1)
    edge_index[:, :2] = torch.tensor([[0, 1], [0, 1]])  # self loops by id, which PyG drops
    x = (features(num_src, 5, 2), features(num_dst, 3, 3))
    pos = (features(num_src, 3, 4), features(num_dst, 3, 5))
    for loops in (True, False):
        pyg, ours = _seeded_pair("PointTransformerConv", _pt_nets(*nets), (5, 3), 4, add_self_loops=loops)
        compare(pyg, ours, (x, pos, edge_index))
    if num_dst <= num_src:
        # a block: the destinations are the first sources; PyG's call is the pair
        xs, ps = features(num_src, 5, 6, grad=False), features(num_src, 3, 7, grad=False)
        pyg, ours = _seeded_pair("PointTransformerConv", _pt_nets(*nets), 5, 4)
        got = ours(xs, ps, gnn.Block(edge_index, num_src, num_dst))
        close(got, pyg((xs, xs[:num_dst]), (ps, ps[:num_dst]), edge_index), "a block")


def test_point_transformer_sparse_graph_and_lazy(monkeypatch):
    patch_pyg(monkeypatch)
    edge_index = torch.randint(0, 8, (2, 25), generator=torch.Generator().manual_seed(5))
    edge_index[:, :2] = 3
    x, pos = features(8, 5, 6), features(8, 3, 7)
    for loops in (True, False):
        for adj in _adjacencies(edge_index, 8).values():
            pyg, ours = _seeded_pair(
                "PointTransformerConv", _pt_nets("default", "channels"), 5, 4, add_self_loops=loops
            )
            compare(pyg, ours, (x, pos, adj))
        graph = gnnc.Graph(edge_index, num_vertices=8)
        close(ours(x, pos, graph), pyg(x, pos, edge_index), "a gnnc.Graph")
    pyg, ours = _seeded_pair("PointTransformerConv", _pt_nets("default", None), -1, 4, lazy=True)
    torch.manual_seed(2)
    expected = pyg(x, pos, edge_index)
    torch.manual_seed(2)
    close(ours(x, pos, edge_index), expected, "lazy, first call")
    compare(pyg, ours, (x, pos, edge_index))


def test_point_transformer_errors():
    x, pos, edge_index = torch.randn(3, 5), torch.randn(3, 3), torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(ArgumentError, match="aggr='std' is not supported"):
        gnn.PointTransformerConv(5, 4, aggr="std")
    with pytest.raises(ArgumentError, match="attn_nn must be a module"):
        gnn.PointTransformerConv(5, 4, attn_nn=3)
    with pytest.raises(ArgumentError, match="out_channels must be a positive integer"):
        gnn.PointTransformerConv(5, 0)
    with pytest.raises(ArgumentError, match="first Linear takes 3 features, pos has 2"):
        gnn.PointTransformerConv(5, 4)(x, pos[:, :2], edge_index)
    with pytest.raises(ArgumentError, match="pos_nn maps to 6 channels"):
        gnn.PointTransformerConv(5, 4, pos_nn=Linear(3, 6))(x, pos, edge_index)
    with pytest.raises(ArgumentError, match="pos_nn maps to 6 channels"):
        gnn.PointTransformerConv(5, 4, pos_nn=Sequential(ReLU(), Linear(3, 6)))(x, pos, edge_index)
    with pytest.raises(ArgumentError, match="attn_nn maps to 3 channels"):
        gnn.PointTransformerConv(5, 4, attn_nn=Linear(4, 3))(x, pos, edge_index)
    with pytest.raises(ArgumentError, match="x\\[1\\]"):
        gnn.PointTransformerConv(5, 4)((x, None), pos, edge_index)
    with pytest.raises(ArgumentError, match="pos\\[1\\] has 3 rows but the graph has 2"):
        gnn.PointTransformerConv(5, 4)((x, x[:2]), (pos, pos), edge_index)
    assert repr(gnn.PointTransformerConv(5, 4)) == "PointTransformerConv(5, 4)"


# ------------------------------------------------------------------ PPFConv


def _ppf_nets(local: str | None, width: int, global_nn: bool) -> Any:
    def nets() -> dict:
        local_nn = {
            None: lambda: None,
            "linear": lambda: Linear(width, 4),
            "sequential": lambda: Sequential(Linear(width, 6), ReLU(), Linear(6, 4)),
            "not_linear_first": lambda: Sequential(ReLU(), Linear(width, 4)),
        }[local]()
        made: dict[str, Any] = {"local_nn": local_nn}
        if global_nn:
            made["global_nn"] = Sequential(Linear(width if local is None else 4, 3), ReLU())
        return made

    return nets


#: The kernels a PPFConv calls after `ppf_parts`, by local_nn and whether it has x
PPF_KERNELS = {
    (None, True): ["ppf_{aggr}"],
    (None, False): ["edge_mlp_aggregate_{aggr}"],
    ("linear", True): ["ppf_{aggr}"],
    ("linear", False): ["ppf_{aggr}_points"],
    ("sequential", True): ["ppf_messages", "edge_mlp_aggregate_{aggr}"],
    ("sequential", False): ["ppf_messages_points", "edge_mlp_aggregate_{aggr}"],
    ("not_linear_first", True): ["edge_mlp_aggregate_{aggr}"],
    ("not_linear_first", False): ["edge_mlp_aggregate_{aggr}"],
}


@given(
    graph=pyg_graphs(),
    aggr=st.sampled_from(AGGRS),
    nets=st.sampled_from(list(PPF_KERNELS)),
    loops=st.booleans(),
    global_nn=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_ppf_conv_matches_pyg(graph, aggr, nets, loops, global_nn, seed):
    """Outputs and gradients, pos and normals included (self loops too: their crosses are exact
    zeros, whose norms and atan2 have gradient 0 in both)."""
    edge_index, n = graph
    local, with_x = nets
    width = 4 + (5 if with_x else 0)
    pyg, ours = _seeded_pair("PPFConv", _ppf_nets(local, width, global_nn), add_self_loops=loops, aggr=aggr)
    calls = _kernel_calls(ours)
    x = features(n, 5, seed) if with_x else None
    compare(pyg, ours, (x, features(n, 3, seed + 1), features(n, 3, seed + 2), edge_index), rtol=5e-4)
    name = {"add": "sum"}.get(aggr, aggr)
    assert calls == ["ppf_parts", *(k.format(aggr=name) for k in PPF_KERNELS[nets])]


def test_ppf_features_are_pygs():
    """The kernel's parts and torch's atan2 give PyG's `point_pair_features`. On a self loop `n . d`
    sums products that are all -0 where every coordinate of the normal is negative: both sums
    start from +0 and give +0, so the angle is atan2(0, +0) = 0, not atan2(0, -0) = pi."""
    from torch_geometric.nn.conv.ppf_conv import point_pair_features

    g = torch.Generator().manual_seed(3)
    pos, normal = torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g)
    normal[0] = -normal[0].abs()
    edge_index = torch.cat([torch.randint(0, 6, (2, 20), generator=g), torch.arange(6).expand(2, 6)], 1)
    layer = gnn.PPFConv()
    got = layer._features(edge_index, (6, 6), [pos, pos, normal, normal])
    src, dst = edge_index
    expected = point_pair_features(pos[dst], pos[src], normal[dst], normal[src])
    assert got[-6, 1] == 0 and expected[-6, 1] == 0
    close(got, expected, "point pair features", rtol=1e-6)


@pytest.mark.parametrize("local", [None, "linear", "sequential"])
def test_ppf_conv_bipartite_blocks_and_sparse(monkeypatch, local):
    patch_pyg(monkeypatch)
    edge_index = bipartite(7, 4, 18, 1)
    edge_index[:, :2] = torch.tensor([[0, 1], [0, 1]])
    pos = (features(7, 3, 2), features(4, 3, 3))
    normal = (features(7, 3, 4), features(4, 3, 5))
    x = features(7, 5, 6)
    for loops in (True, False):
        pyg, ours = _seeded_pair("PPFConv", _ppf_nets(local, 9, False), add_self_loops=loops)
        compare(pyg, ours, (x, pos, normal, edge_index))
        compare(pyg, ours, ((x, features(4, 2, 7)), pos, normal, edge_index))
    xs, ps, ns = (features(7, w, s, grad=False) for w, s in ((5, 8), (3, 9), (3, 10)))
    close(
        ours(xs, ps, ns, gnn.Block(edge_index, 7, 4)),
        pyg(xs, (ps, ps[:4]), (ns, ns[:4]), edge_index),
        "a block",
    )
    square = torch.randint(0, 8, (2, 25), generator=torch.Generator().manual_seed(5))
    square[:, :2] = 3
    x, pos, normal = features(8, 5, 11), features(8, 3, 12), features(8, 3, 13)
    for adj in _adjacencies(square, 8).values():
        compare(pyg, ours, (x, pos, normal, adj))
    close(ours(x, pos, normal, gnnc.Graph(square, num_vertices=8)), pyg(x, pos, normal, square), "a gnnc.Graph")


def test_ppf_conv_errors():
    pos, edge_index = torch.randn(3, 3), torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(ArgumentError, match="aggr='std' is not supported"):
        gnn.PPFConv(aggr="std")
    with pytest.raises(ArgumentError, match="local_nn must be a module"):
        gnn.PPFConv(local_nn=3)
    with pytest.raises(ArgumentError, match="first Linear takes 6 features"):
        gnn.PPFConv(Linear(6, 4))(torch.randn(3, 5), pos, pos, edge_index)
    with pytest.raises(ArgumentError, match="3 coordinates"):
        gnn.PPFConv()(None, pos[:, :2], pos[:, :2], edge_index)
    with pytest.raises(ArgumentError, match="normal\\[1\\]"):
        gnn.PPFConv()(None, pos, (pos, None), edge_index)
    with pytest.raises(ArgumentError, match="x has 4 rows"):
        gnn.PPFConv()(torch.randn(4, 2), pos, pos, edge_index)
    with pytest.raises(ArgumentError, match="only 2 sources"):
        gnn.PPFConv()(None, (pos[:2], pos), (pos[:2], pos), bipartite(2, 3, 4, 1))
    assert repr(gnn.PPFConv()) == "PPFConv(local_nn=None, global_nn=None)"


# ------------------------------------------------------------------ SignedConv


@given(
    graphs=st.tuples(pyg_graphs(max_vertices=20), pyg_graphs(max_vertices=20)),
    aggr=st.sampled_from(AGGRS),
    first_aggr=st.booleans(),
    out=st.sampled_from([2, 7]),  # narrower than the features (products first for sum and mean), wider
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_signed_conv_matches_pyg(graphs, aggr, first_aggr, out, bias, seed):
    (pos_edges, n), (neg_edges, m) = graphs
    n = max(n, m)
    width = 5 if first_aggr else 10
    pyg, ours = same_start("SignedConv", 5, out, first_aggr, bias=bias, aggr=aggr)
    # in float64: a drawn hub sums up to 1,000 rows, where two float32 summation orders (gnnc's
    # transform first, PyG's after) differed by 2.3e-4 of the output (the float32 path: below)
    x = features(n, width, seed, grad=False).double().requires_grad_()
    compare(pyg.double(), ours.double(), (x, pos_edges, neg_edges))


@pytest.mark.parametrize("first_aggr", [True, False])
def test_signed_conv_bipartite_blocks_sparse_and_lazy(monkeypatch, first_aggr):
    patch_pyg(monkeypatch)
    width = 5 if first_aggr else 10
    pos_edges, neg_edges = bipartite(7, 4, 18, 1), bipartite(7, 4, 12, 2)
    for aggr in ("mean", "max"):
        pyg, ours = same_start("SignedConv", 5, 3, first_aggr, aggr=aggr)
        compare(pyg, ours, ((features(7, width, 3), features(4, width, 4)), pos_edges, neg_edges))
        x = features(7, width, 5, grad=False)
        close(ours(x, gnn.Block(pos_edges, 7, 4), neg_edges), pyg((x, x[:4]), pos_edges, neg_edges), "a block")
        # a torch.sparse adjacency's values weigh the aggregation, a SparseTensor's do not (PyG's spmm)
        square = torch.randint(0, 8, (2, 25), generator=torch.Generator().manual_seed(5))
        x = features(8, width, 6)
        for adj in _adjacencies(square, 8).values():
            compare(pyg, ours, (x, adj, _adjacencies(square.flip(0), 8, seed=2)["coo"]))
    if first_aggr:
        pyg, ours = same_start("SignedConv", -1, 3, True, lazy=True)
        x = features(8, 5, 7)
        for layer in (pyg, ours):  # the first call sizes and initialises the Linear layers, from one seed
            torch.manual_seed(2)
            layer(x, square, square.flip(0))
        compare(pyg, ours, (x, square, square.flip(0)))


def test_signed_conv_errors():
    x, edge_index = torch.randn(3, 5), torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(ArgumentError, match="aggr='std' is not supported"):
        gnn.SignedConv(5, 4, True, aggr="std")
    with pytest.raises(ArgumentError, match="in_channels=-1 needs first_aggr=True"):
        gnn.SignedConv(-1, 4, False)
    with pytest.raises(ArgumentError, match="2 \\* in_channels = 10 columns"):
        gnn.SignedConv(5, 4, False)(x, edge_index, edge_index)
    with pytest.raises(ArgumentError, match="in_channels = 5 columns"):
        gnn.SignedConv(5, 4, True)(x[:, :4], edge_index, edge_index)
    with pytest.raises(ArgumentError, match="x\\[1\\]"):
        gnn.SignedConv(5, 4, True)((x, None), edge_index, edge_index)
    with pytest.raises(ArgumentError, match="neg_edge_index must have shape"):
        gnn.SignedConv(5, 4, True)(x, edge_index, edge_index[0])
    assert repr(gnn.SignedConv(5, 4, True)) == "SignedConv(5, 4, first_aggr=True)"


# ------------------------------------------------------------------ DNAConv


def _history(n: int, layers: int, channels: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, layers, channels, generator=g).requires_grad_()


@given(
    graph=pyg_graphs(),
    shape=st.sampled_from([(1, 1), (2, 1), (2, 4), (4, 2)]),  # (heads, groups)
    layers=st.sampled_from([1, 3]),
    norm=st.sampled_from([(True, True), (True, False), (False, False)]),  # (normalize, add_self_loops)
    weighted=st.booleans(),
    cached=st.booleans(),
    # 6: scores of tens, the restricted softmax saturated, m > 0. There the exact gradient of a
    # saturated weight is ~0, which the generated quotient rule leaves as float32 rounding of the
    # terms it cancels (eps |val| |x|, growing with the square of the scale; torch's autograd
    # happens to cancel exactly): at 30 that is 8e-4 against weight gradients of 1
    scale=st.sampled_from([1.0, 6.0]),
    seed=st.integers(0, 2**16),
)
def test_dna_conv_matches_pyg(graph, shape, layers, norm, weighted, cached, scale, seed):
    edge_index, n = graph
    normalize, loops = norm
    if weighted:
        edge_index = one_loop_per_vertex(edge_index)
    heads, groups = shape
    options = {"normalize": normalize, "add_self_loops": loops, "cached": cached}
    pyg, ours = same_start("DNAConv", 8, heads=heads, groups=groups, **options)
    x = (_history(n, layers, 8, seed).detach() * scale).requires_grad_()
    # PyG's message needs weights without normalize
    w = edge_weights(edge_index, seed + 1) if weighted or not normalize else None
    compare(pyg, ours, (x, edge_index, w), rtol=5e-4)
    if cached and normalize:  # the first call's graph and weights, whatever the next call gives (as PyG)
        other = torch.randint(0, n, (2, 5), generator=torch.Generator().manual_seed(seed))
        close(ours(x, other, None), pyg(x, other, None), "cached")


def test_dna_conv_dropout_draws_pygs_masks():
    edge_index = torch.randint(0, 9, (2, 30), generator=torch.Generator().manual_seed(1))
    edge_index[:, :3] = 4  # own self loops, which PyG drops for its own
    for normalize, loops in ((True, True), (False, False)):
        pyg, ours = same_start("DNAConv", 8, heads=2, dropout=0.4, normalize=normalize, add_self_loops=loops)
        w = None if normalize else edge_weights(edge_index, 2)
        compare(Seeded(pyg, 5), Seeded(ours, 5), (_history(9, 3, 8, 3), edge_index, w))


def test_dna_conv_sparse_graph_and_block(monkeypatch):
    patch_pyg(monkeypatch)
    edge_index = torch.randint(0, 8, (2, 25), generator=torch.Generator().manual_seed(5))
    edge_index[:, :2] = 3
    x = _history(8, 2, 8, 4)
    for adj in _adjacencies(edge_index, 8).values():
        for dropout in (0.0, 0.3):
            pyg, ours = same_start("DNAConv", 8, heads=2, dropout=dropout)
            compare(Seeded(pyg, 6), Seeded(ours, 6), (x, adj))
    pyg, ours = same_start("DNAConv", 8, heads=2)
    pyg.eval(), ours.eval()
    close(ours(x, gnnc.Graph(edge_index, num_vertices=8)), pyg(x, edge_index), "a gnnc.Graph")
    block = bipartite(8, 5, 20, 2)
    close(ours(x, gnn.Block(block, 8, 5)), pyg(x, block)[:5], "a block (its square graph, as GCNConv)")


def test_dna_conv_long_history():
    """More layers than the constructor's kernel takes: a kernel of its own length, made on first use."""
    edge_index = torch.randint(0, 6, (2, 15), generator=torch.Generator().manual_seed(2))
    pyg, ours = same_start("DNAConv", 4, heads=2)
    with torch.no_grad():
        x = _history(6, dna_conv.SLOTS + 1, 4, 5) * 3
        close(ours(x, edge_index), pyg(x, edge_index), "a long history")
    assert ("weights", dna_conv.SLOTS + 1) in ours._kernels


def test_dna_conv_errors():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(ArgumentError, match="multiple of heads"):
        gnn.DNAConv(6, heads=4)
    with pytest.raises(ArgumentError, match="the larger of heads and groups"):
        gnn.DNAConv(12, heads=4, groups=6)
    with pytest.raises(ArgumentError, match="dropout must be a probability"):
        gnn.DNAConv(4, dropout=2.0)
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'node_dim'"):
        gnn.DNAConv(4, node_dim=0)
    with pytest.raises(ArgumentError, match="aggr='mean' is not supported"):
        gnn.DNAConv(4, aggr="mean")
    layer = gnn.DNAConv(4)
    with pytest.raises(ArgumentError, match="num_layers, channels"):
        layer(torch.randn(3, 4), edge_index)
    with pytest.raises(ArgumentError, match="x has 5 channels"):
        layer(torch.randn(3, 2, 5), edge_index)
    with pytest.raises(ArgumentError, match="1 to 24"):
        layer(torch.randn(3, 25, 4), edge_index)
    with pytest.raises(ArgumentError, match="float32 or float64"):
        layer(torch.randn(3, 2, 4).half(), edge_index)
    assert repr(layer) == "DNAConv(4, heads=1, groups=1)"


# ------------------------------------------------------------------ every layer


def _cases() -> dict[str, tuple[Any, Any]]:
    g = torch.Generator().manual_seed(11)
    n = 10
    edge_index, neg = torch.randint(0, n, (2, 32), generator=g), torch.randint(0, n, (2, 20), generator=g)
    x, pos, normal = (torch.randn(n, w, generator=g, requires_grad=True) for w in (5, 3, 3))
    history = torch.randn(n, 3, 4, generator=g, requires_grad=True)
    attn = Sequential(Linear(4, 5), ReLU(), Linear(5, 4))
    return {
        "PointTransformerConv": (gnn.PointTransformerConv(5, 4), lambda m: m(x, pos, edge_index)),
        "PointTransformerConv-attn": (
            gnn.PointTransformerConv(5, 4, Sequential(Linear(3, 4), ReLU()), attn),
            lambda m: m(x, pos, edge_index),
        ),
        "PPFConv": (gnn.PPFConv(Linear(9, 4), Linear(4, 3)), lambda m: m(x, pos, normal, edge_index)),
        "SignedConv": (gnn.SignedConv(5, 4, True), lambda m: m(x, edge_index, neg)),
        "SignedConv-second": (gnn.SignedConv(5, 2, False), lambda m: m(torch.cat([x, x], 1), edge_index, neg)),
        "DNAConv": (gnn.DNAConv(4, heads=2, dropout=0.2), lambda m: m(history, edge_index)),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_compiles_copies_and_saves(name):
    """torch.compile(fullgraph=True) gives eager's outputs and gradients; deepcopy and torch.save
    round trips give the same outputs."""
    layer, call = _cases()[name]
    layer.eval()
    expected = call(layer)
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(layer), torch.load(buffer, weights_only=False)):
        close(call(other), expected, f"{name}: a copy")
    torch._dynamo.reset()
    got = call(torch.compile(layer, fullgraph=True, backend="aot_eager"))
    close(got, expected, f"{name}: compiled")
    params = [p for p in layer.parameters() if p.requires_grad]
    for a, b in zip(
        torch.autograd.grad(got.square().sum(), params), torch.autograd.grad(expected.square().sum(), params)
    ):
        close(a, b, f"{name}: compiled gradient")
