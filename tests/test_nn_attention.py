"""gnnc.nn's attention layers (GATConv, GATv2Conv, TransformerConv, AGNNConv) against PyG's.

Outputs, input and parameter gradients on hypothesis graphs (isolated
vertices, self loops, duplicate edges), bipartite pairs, edge features with
every `fill_value`, attention dropout drawn from one seed, the attention
weights returned, torch.sparse adjacencies, and the errors for bad input.
The fast tier compiles a handful of kernel configurations; the sweep over
every constructor option is `slow`.
"""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import Seeded, bipartite, close, compare, features, pyg_graphs

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402
from gnnc.nn import attention  # noqa: E402

LAYERS = ["GATConv", "GATv2Conv", "TransformerConv"]


def pair(name: str, *args, **kwargs):
    """PyG's layer and gnnc's, built alike (the state_dict is loaded by compare)."""
    torch.manual_seed(0)
    pyg = getattr(pyg_nn, name)(*args, **kwargs)
    ours = getattr(gnn, name)(*args, **kwargs)
    assert list(ours.state_dict()) == list(pyg.state_dict())
    for key, value in pyg.state_dict().items():
        assert ours.state_dict()[key].shape == value.shape, key
    return pyg, ours


def same_weights(expected, got) -> None:
    """The (edge_index, alpha) pairs of return_attention_weights are PyG's."""
    (e_index, e_alpha), (g_index, g_alpha) = expected[1], got[1]
    assert torch.equal(g_index, e_index)
    close(g_alpha, e_alpha, "attention weights")


def edge_features(num_edges: int, dim: int, seed: int) -> torch.Tensor:
    return torch.rand(num_edges, dim, generator=torch.Generator().manual_seed(seed)) * 2 - 1


# ------------------------------------------------------------------ fast tier


@given(graph=pyg_graphs(), seed=st.integers(0, 2**16))
def test_gat_conv_matches_pyg(graph, seed):
    edge_index, n = graph
    pyg, ours = pair("GATConv", 5, 3, heads=2)
    compare(pyg, ours, (features(n, 5, seed), edge_index))


@pytest.mark.parametrize("in_channels", [5, 60])
def test_gat_conv_scores_folded_or_not(in_channels):
    """Both ways of making the scores: folded into one product with x (`projected`: in_channels
    <= FOLD_MAX_RATIO x out_channels), and from lin(x) (a wide input), on a graph and a block."""
    from gnnc.nn.conv import gat_conv

    pyg, ours = pair("GATConv", in_channels, 3, heads=2)
    assert gat_conv.folds(ours.lin, 3) == (in_channels <= gat_conv.FOLD_MAX_RATIO * 3)
    compare(pyg, ours, (features(9, in_channels, 1), bipartite(9, 9, 40, seed=2)))
    # a block: x[:4] a view of x's first rows, as samplers give them (one product serves both)
    block = bipartite(9, 4, 30, seed=4)
    pyg.zero_grad()
    ours.zero_grad()
    x_pyg, x_ours = features(9, in_channels, 3), features(9, in_channels, 3)
    expected, got = pyg((x_pyg, x_pyg[:4]), block), ours((x_ours, x_ours[:4]), block)
    close(got, expected, "block output")
    expected.sum().backward()
    got.sum().backward()
    close(x_ours.grad, x_pyg.grad, "block input gradient")
    for name, p in pyg.named_parameters():
        close(dict(ours.named_parameters())[name].grad, p.grad, f"block gradient of {name}")


@given(graph=pyg_graphs(), seed=st.integers(0, 2**16))
def test_gat_conv_edge_features_and_weights(graph, seed):
    edge_index, n = graph
    pyg, ours = pair("GATConv", 4, 3, heads=2, edge_dim=2, concat=False, negative_slope=0.1, residual=True)
    ea = edge_features(edge_index.shape[1], 2, seed).requires_grad_()
    expected, got = compare(
        pyg, ours, (features(n, 4, seed), edge_index), {"edge_attr": ea, "return_attention_weights": True}
    )
    same_weights(expected, got)


@given(graph=pyg_graphs(), seed=st.integers(0, 2**16))
def test_gatv2_conv_matches_pyg(graph, seed):
    edge_index, n = graph
    pyg, ours = pair("GATv2Conv", 5, 3, heads=2)
    compare(pyg, ours, (features(n, 5, seed), edge_index))


@given(graph=pyg_graphs(), seed=st.integers(0, 2**16))
def test_transformer_conv_matches_pyg(graph, seed):
    edge_index, n = graph
    pyg, ours = pair("TransformerConv", 5, 3, heads=2)
    compare(pyg, ours, (features(n, 5, seed), edge_index))


def test_attention_dropout_draws_as_pyg():
    """Training mode with dropout: PyG's mask, from the same seed, for all three layers."""
    edge_index = bipartite(7, 7, 30, seed=3)
    x = features(7, 4, 5)
    for name, kwargs in [
        ("GATConv", {"heads": 2, "dropout": 0.4}),
        ("GATConv", {"heads": 2, "dropout": 0.4, "add_self_loops": False}),
        ("TransformerConv", {"heads": 2, "dropout": 0.4, "edge_dim": 3}),
    ]:
        pyg, ours = pair(name, 4, 3, **kwargs)
        call = {"return_attention_weights": True}
        if "edge_dim" in kwargs:
            call["edge_attr"] = edge_features(30, 3, 1)
        expected, got = compare(Seeded(pyg, 11).train(), Seeded(ours, 11).train(), (x, edge_index), call)
        same_weights(expected, got)
        assert (expected[1][1] == 0).any() or name == "TransformerConv", "the mask dropped nothing"
        # eval mode: no mask at all
        compare(pyg.eval(), ours.eval(), (x, edge_index), {k: v for k, v in call.items() if k == "edge_attr"})


def test_gat_conv_bipartite_and_size():
    x_src, x_dst = features(6, 4, 1), features(4, 5, 2)
    edge_index = bipartite(6, 4, 20, seed=1)
    pyg, ours = pair("GATConv", (4, 5), 3, heads=2)
    compare(pyg, ours, ((x_src, x_dst), edge_index))
    # no destination features: sizes from size=, no destination term in the score
    compare(pyg, ours, ((x_src, None), edge_index), {"size": (6, 4)})
    # more destinations than sources: only the first num_src get a self loop (PyG's min)
    wide = bipartite(4, 6, 20, seed=2)
    expected, got = compare(
        pyg, ours, ((features(4, 4, 3), features(6, 5, 4)), wide), {"return_attention_weights": True}
    )
    same_weights(expected, got)


def test_gatv2_and_transformer_bipartite():
    x_src, x_dst = features(6, 4, 1), features(4, 5, 2)
    edge_index = bipartite(6, 4, 20, seed=1)
    compare(*pair("GATv2Conv", (4, 5), 3, heads=2, add_self_loops=False), ((x_src, x_dst), edge_index))
    compare(*pair("TransformerConv", (4, 5), 3, heads=2), ((x_src, x_dst), edge_index))


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_attention_sparse_adjacency(layout):
    edge_index = torch.tensor([[0, 1, 2, 2, 3, 1, 4], [1, 2, 0, 1, 3, 3, 4]])
    adj_t = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(7), (5, 5)).coalesce()
    if layout == torch.sparse_csr:
        adj_t = adj_t.to_sparse_csr()
    x = features(5, 4, 1)
    compare(*pair("GATConv", 4, 3, heads=2), (x, adj_t))
    compare(*pair("TransformerConv", 4, 3, heads=2), (x, adj_t))


def test_attention_refuses_bad_input():
    with pytest.raises(ArgumentError, match="positive integer, -1"):
        gnn.GATConv(0, 4)
    with pytest.raises(ArgumentError, match="heads must be a positive integer"):
        gnn.GATv2Conv(4, 4, heads=0)
    with pytest.raises(ArgumentError, match="dropout must be a probability"):
        gnn.TransformerConv(4, 4, dropout=1.5)
    with pytest.raises(ArgumentError, match="fill_value"):
        gnn.GATConv(4, 4, fill_value="median")
    with pytest.raises(ArgumentError, match="negative_slope"):
        gnn.GATConv(4, 4, negative_slope=float("nan"))
    edge_index = torch.tensor([[0, 1], [1, 2]])
    conv = gnn.GATConv(4, 4, edge_dim=3)
    with pytest.raises(ArgumentError, match=r"edge_attr must have shape \[E, edge_dim\] = \[2, 3\]"):
        conv(torch.randn(3, 4), edge_index, torch.randn(2, 2))
    with pytest.raises(ArgumentError, match="static graphs"):
        conv(torch.randn(2, 3, 4), edge_index)
    with pytest.raises(ArgumentError, match=r"shape \[2, E\]"):
        conv(torch.randn(3, 4), torch.tensor([0, 1]))
    with pytest.raises(ArgumentError, match="x_src has 3 rows"):
        conv(torch.randn(3, 4), edge_index, size=(5, 5))
    with pytest.raises(ArgumentError, match="not \\(x_src, None\\)"):
        gnn.GATv2Conv(4, 4)((torch.randn(3, 4), None), edge_index)
    with pytest.raises(ArgumentError, match="needs edge_attr"):
        gnn.TransformerConv(4, 4, edge_dim=2)(torch.randn(3, 4), edge_index)
    with pytest.raises(ArgumentError, match="needs a layer built with edge_dim"):
        gnn.TransformerConv(4, 4)(torch.randn(3, 4), edge_index, torch.randn(2, 4))
    with pytest.raises(ArgumentError, match="float16"):
        gnn.GATConv(4, 4).half()(torch.randn(3, 4).half(), edge_index)


def test_attention_kernel_text():
    """The generated kernel is the fused one the docs show: one softmax, no edge-sized copies of h."""
    config = attention.Config(
        name="gat_conv",
        params=("h: f32[V, H, F]", "a_src: f32[V, H]", "a_dst: f32[V, H]"),
        score="leaky_relu(a_src[u] + a_dst[v], 0.2)",
        message="h[u]",
    )
    assert attention.source(config) == (
        "kernel gat_conv(h: f32[V, H, F], a_src: f32[V, H], a_dst: f32[V, H]) -> f32[V, H, F] {\n"
        "    s[e] = leaky_relu(a_src[u] + a_dst[v], 0.2)\n"
        "    out[v] = sum(softmax(s[e]) * h[u])\n"
        "}\n"
    )


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv"])
def test_loop_score_in_the_kernel_where_every_destination_is_a_source(name):
    """A square graph's or a block's loop score is computed by the kernel (`sl[v] = ...`, no
    `sl` input and no torch ops per call); fewer sources than destinations, or loop edge
    features, pass it in. The layers' outputs against PyG's are the tests above."""
    layer = getattr(gnn, name)(4, 3, heads=2)
    for kind in attention.LoopKind:
        for edge in (False, True):
            text = attention.source(layer._config(kind, False, False, edge))
            inside = kind in (attention.LoopKind.SQUARE, attention.LoopKind.MORE_SOURCES) and not edge
            assert ("sl[v] = " in text) == inside, (kind, edge, text)
            assert ("sl: f32[V, H]" in text) == (kind != attention.LoopKind.NONE and not inside), (kind, edge, text)


#: One configuration per layer with everything a copy must keep: dropout, self loops,
#: edge features, a slope or beta, a residual.
KEPT = {
    "GATConv": {"heads": 2, "dropout": 0.3, "edge_dim": 2, "negative_slope": 0.1, "residual": True},
    "GATv2Conv": {"heads": 2, "dropout": 0.3, "edge_dim": 2, "share_weights": True},
    "TransformerConv": {"heads": 2, "dropout": 0.3, "edge_dim": 2, "beta": True},
}


def _copies(layer):
    """pickle, deepcopy and torch.save / load of `layer`."""
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    return {
        "pickle": pickle.loads(pickle.dumps(layer)),
        "deepcopy": copy.deepcopy(layer),
        "torch.save": torch.load(buffer, weights_only=False),
    }


@pytest.mark.parametrize("name", LAYERS)
def test_attention_layers_pickle_copy_and_save_after_a_call(name):
    edge_index = bipartite(7, 7, 30, seed=3)
    x, ea = features(7, 4, 1, grad=False), edge_features(30, 2, 2)
    torch.manual_seed(0)
    layer = getattr(gnn, name)(4, 3, **KEPT[name])
    with torch.no_grad():  # forward kernels only (the gradients' are the float64 test's)
        torch.manual_seed(4)
        trained = layer(x, edge_index, ea)  # a call first: the compiled kernels are loaded
        expected = layer.eval()(x, edge_index, ea)
        for how, twin in _copies(layer.train()).items():
            assert twin.state_dict().keys() == layer.state_dict().keys(), how
            torch.manual_seed(4)
            assert torch.equal(twin(x, edge_index, ea), trained), how  # the same dropout masks
            assert torch.equal(twin.eval()(x, edge_index, ea), expected), how


@pytest.mark.parametrize(
    "name", ["TransformerConv", *(pytest.param(n, marks=pytest.mark.slow) for n in ("GATConv", "GATv2Conv"))]
)
def test_attention_layers_in_float64_match_pyg(name):
    edge_index = torch.cat([bipartite(7, 7, 30, seed=3), torch.tensor([[2], [2]])], dim=1)
    pyg, ours = pair(name, 4, 3, **KEPT[name])
    pyg, ours = Seeded(pyg.double(), 4).train(), Seeded(ours.double(), 4).train()
    x = features(7, 4, 1).detach().double().requires_grad_()
    ea = edge_features(31, 2, 2).double().requires_grad_()
    expected, got = compare(pyg, ours, (x, edge_index, ea), {"return_attention_weights": True}, rtol=1e-10)
    assert got[0].dtype == torch.float64
    same_weights(expected, got)


# ------------------------------------------------------- every option (slow)

GAT_OPTIONS = st.fixed_dictionaries(
    {
        "heads": st.sampled_from([1, 3]),
        "concat": st.booleans(),
        "negative_slope": st.sampled_from([0.2, 0.05]),
        "add_self_loops": st.booleans(),
        "bias": st.booleans(),
        "residual": st.booleans(),
        "edge_dim": st.sampled_from([None, 1, 3]),
        "fill_value": st.sampled_from(["mean", "add", "max", "min", "mul", 0.5]),
    }
)


@pytest.mark.slow
@given(
    graph=pyg_graphs(),
    name=st.sampled_from(["GATConv", "GATv2Conv"]),
    options=GAT_OPTIONS,
    weights=st.booleans(),
    share=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gat_family_every_option(graph, name, options, weights, share, seed):
    edge_index, n = graph
    if name == "GATv2Conv":
        options = {**options, "share_weights": share}
    pyg, ours = pair(name, 4, 3, **options)
    call: dict = {"return_attention_weights": True} if weights else {}
    if options["edge_dim"] is not None:
        call["edge_attr"] = edge_features(edge_index.shape[1], options["edge_dim"], seed).requires_grad_()
        if options["edge_dim"] == 1 and seed % 2:
            call["edge_attr"] = call["edge_attr"].detach().view(-1).requires_grad_()  # PyG takes [E]
    expected, got = compare(pyg, ours, (features(n, 4, seed), edge_index), call)
    if weights:
        same_weights(expected, got)


@pytest.mark.slow
@given(
    graph=pyg_graphs(),
    heads=st.sampled_from([1, 2]),
    concat=st.booleans(),
    beta=st.booleans(),
    root_weight=st.booleans(),
    bias=st.booleans(),
    edge_dim=st.sampled_from([None, 2]),
    weights=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_transformer_conv_every_option(graph, heads, concat, beta, root_weight, bias, edge_dim, weights, seed):
    edge_index, n = graph
    pyg, ours = pair(
        "TransformerConv",
        4,
        3,
        heads=heads,
        concat=concat,
        beta=beta,
        root_weight=root_weight,
        bias=bias,
        edge_dim=edge_dim,
    )
    call: dict = {"return_attention_weights": True} if weights else {}
    if edge_dim is not None:
        call["edge_attr"] = edge_features(edge_index.shape[1], edge_dim, seed).requires_grad_()
    expected, got = compare(pyg, ours, (features(n, 4, seed), edge_index), call)
    if weights:
        same_weights(expected, got)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv"])
@pytest.mark.parametrize("fill_value", ["mean", "max", "mul", 2.0, "tensor"])
def test_gat_family_dropout_with_loops_and_edge_features(name, fill_value):
    edge_index = torch.cat([bipartite(8, 8, 40, seed=4), torch.tensor([[2, 5], [2, 5]])], dim=1)
    fill = torch.tensor([0.5, -1.0]) if fill_value == "tensor" else fill_value
    pyg, ours = pair(name, 4, 3, heads=2, dropout=0.3, edge_dim=2, fill_value=fill)
    ea = edge_features(edge_index.shape[1], 2, 6).requires_grad_()
    call = {"edge_attr": ea, "return_attention_weights": True}
    expected, got = compare(Seeded(pyg, 5).train(), Seeded(ours, 5).train(), (features(8, 4, 2), edge_index), call)
    same_weights(expected, got)


@pytest.mark.slow
def test_gatv2_bipartite_with_loops_and_shared_weights():
    x_src, x_dst = features(6, 4, 1), features(4, 4, 2)
    compare(*pair("GATv2Conv", 4, 3, heads=2, share_weights=True), ((x_src, x_dst), bipartite(6, 4, 20, seed=1)))
    wide = bipartite(4, 6, 20, seed=2)
    compare(*pair("GATv2Conv", (4, 5), 3, heads=2), ((features(4, 4, 3), features(6, 5, 4)), wide))


# ----------------------------------------------------------------------------- AGNNConv


@given(
    graph=pyg_graphs(),
    options=st.sampled_from([{}, {"add_self_loops": False}, {"requires_grad": False}]),
    beta=st.sampled_from([1.0, -2.5, 7.0]),
    seed=st.integers(0, 2**16),
)
def test_agnn_conv_matches_pyg(graph, options, beta, seed):
    edge_index, n = graph
    pyg, ours = pyg_nn.AGNNConv(**options), gnn.AGNNConv(**options)
    with torch.no_grad():
        pyg.beta.fill_(beta)
    compare(pyg, ours, (features(n, 5, seed), edge_index))


def test_agnn_conv_sparse_and_compiled():
    g = torch.Generator().manual_seed(3)
    edge_index = torch.randint(0, 9, (2, 30), generator=g)
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(30), (9, 9)).coalesce()
    x = features(9, 5, 4)
    compare(pyg_nn.AGNNConv(), gnn.AGNNConv(), (x, adj.to_sparse_csr()))
    model = gnn.AGNNConv()
    expected = model(x, edge_index)
    close(torch.compile(model, fullgraph=True, backend="aot_eager")(x, edge_index), expected, "compiled")
