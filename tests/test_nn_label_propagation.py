"""gnnc.nn.models' LightGCN, LabelPropagation and CorrectAndSmooth against PyG's models of the same name.

LabelPropagation on hypothesis graphs (isolated vertices, self loops,
duplicate edges) in every form PyG treats apart (an edge_index with and
without edge weights, torch.sparse COO and CSR adjacencies, SparseTensors
with and without values), masks by boolean and by index, class ids and
scores, a post_step; LightGCN's embedding, its gradient, and PyG's heads
around it; CorrectAndSmooth with and without autoscale; the errors.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import close, edge_weights, pyg_graphs

pyg_models = pytest.importorskip("torch_geometric.nn.models")
import gnnc.nn.models as models  # noqa: E402
from gnnc.errors import ArgumentError, GraphError  # noqa: E402
from gnnc.nn.conv import LGConv  # noqa: E402
from tests.sparse_tensor import patch_pyg, pyg_sparse_tensor  # noqa: E402

FORMS = ["edge_index", "weighted", "coo", "csr", "SparseTensor", "SparseTensor-values"]


def _labels(n: int, classes: int, seed: int) -> torch.Tensor:
    return torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(seed))


def _mask(n: int, seed: int, as_index: bool) -> torch.Tensor:
    mask = torch.rand(n, generator=torch.Generator().manual_seed(seed)) < 0.5
    return mask.nonzero().view(-1) if as_index else mask


def _graph_in(form: str, edge_index: torch.Tensor, n: int, seed: int) -> tuple[object, torch.Tensor | None]:
    """(the graph argument, edge_weight) in `form`; weights are positive."""
    w = edge_weights(edge_index, seed).detach()
    if form == "edge_index":
        return edge_index, None
    if form == "weighted":
        return edge_index, w
    if form in ("coo", "csr"):
        adj = torch.sparse_coo_tensor(edge_index.flip(0), w, (n, n)).coalesce()
        return (adj.to_sparse_csr() if form == "csr" else adj), None
    value = w if form == "SparseTensor-values" else None
    return pyg_sparse_tensor()(row=edge_index[1], col=edge_index[0], value=value, sparse_sizes=(n, n)), None


@given(
    graph=pyg_graphs(),
    form=st.sampled_from(FORMS),
    layers=st.integers(0, 4),
    alpha=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    masked=st.sampled_from([None, "bool", "index"]),
    scores=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_label_propagation_matches_pyg(graph, form, layers, alpha, masked, scores, seed):
    edge_index, n = graph
    with pytest.MonkeyPatch.context() as monkeypatch:
        patch_pyg(monkeypatch)
        adj, w = _graph_in(form, edge_index, n, seed)
        y = _labels(n, 3, seed)
        if scores:
            y = torch.rand(n, 3, generator=torch.Generator().manual_seed(seed))
        mask = None if masked is None else _mask(n, seed + 1, masked == "index")
        expected = pyg_models.LabelPropagation(layers, alpha)(y, adj, mask, edge_weight=w)
        got = models.LabelPropagation(layers, alpha)(y, adj, mask, edge_weight=w)
    close(got, expected, "labels")
    assert not got.requires_grad


@given(graph=pyg_graphs(), seed=st.integers(0, 2**16))
def test_label_propagation_post_step(graph, seed):
    """A post_step replaces the clamp (the kernel then does not clamp), in place or not."""
    edge_index, n = graph
    y = torch.randn(n, 4, generator=torch.Generator().manual_seed(seed))
    for post in (lambda x: x.clamp_(-0.25, 0.5), lambda x: x * 2 - 0.1):
        expected = pyg_models.LabelPropagation(3, 0.8)(y, edge_index, post_step=post)
        got = models.LabelPropagation(3, 0.8)(y, edge_index, post_step=post)
        close(got, expected, "labels")


def test_label_propagation_negative_weighted_degrees_are_nan_as_in_pyg():
    edge_index = torch.tensor([[0, 2, 3], [1, 1, 3]])
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.tensor([-1.0, 0.5, 1.0]), (4, 4)).coalesce()
    y = torch.rand(4, 2, generator=torch.Generator().manual_seed(0))
    expected = pyg_models.LabelPropagation(1, 0.9)(y, adj, post_step=lambda x: x)
    got = models.LabelPropagation(1, 0.9)(y, adj, post_step=lambda x: x)
    assert torch.isnan(expected[1]).all()
    close(got, expected, "labels")


def test_label_propagation_on_a_block_and_a_graph():
    """A sampled block (y its sources' rows, the result its destinations') and a gnnc.Graph."""
    import gnnc

    g = torch.Generator().manual_seed(3)
    edge_index = torch.stack([torch.randint(0, 12, (40,), generator=g), torch.randint(0, 5, (40,), generator=g)])
    y = torch.rand(12, 3, generator=g)
    square = pyg_models.LabelPropagation(2, 0.7)(y, edge_index)
    close(models.LabelPropagation(2, 0.7)(y, (edge_index, (12, 5))), square[:5], "block")
    close(models.LabelPropagation(2, 0.7)(y, gnnc.Graph(edge_index, num_vertices=12)), square, "graph")


def test_label_propagation_errors():
    lp = models.LabelPropagation(2, 0.5)
    edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ArgumentError, match="y must be"):
        lp(torch.rand(3, 2, 2), edge_index)
    with pytest.raises(ArgumentError, match="class ids in y must be >= 0"):
        lp(torch.tensor([0, -1, 1]), edge_index)
    with pytest.raises(ArgumentError, match="edge_weight must have shape"):
        lp(torch.rand(3, 2), edge_index, edge_weight=torch.rand(3))
    with pytest.raises(ArgumentError, match="num_layers"):
        models.LabelPropagation(-1, 0.5)
    with pytest.raises(GraphError, match="out of range"):
        lp(torch.rand(2, 2), edge_index)


# ------------------------------------------------------------------ LightGCN


def _light_gcns(n: int, dim: int, layers: int, **kwargs) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    pyg = pyg_models.LightGCN(n, dim, layers, **kwargs)
    torch.manual_seed(0)
    ours = models.LightGCN(n, dim, layers, **kwargs)
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    return pyg, ours


@given(
    graph=pyg_graphs(),
    layers=st.integers(1, 3),
    weighted=st.booleans(),
    normalize=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_light_gcn_matches_pyg(graph, layers, weighted, normalize, seed):
    edge_index, n = graph
    alpha = torch.rand(layers + 1, generator=torch.Generator().manual_seed(seed))
    pyg, ours = _light_gcns(n, 6, layers, alpha=alpha, normalize=normalize)
    w = edge_weights(edge_index, seed) if weighted else None
    labels = torch.randint(0, n, (2, 10), generator=torch.Generator().manual_seed(seed))
    w2 = None if w is None else w.detach().clone().requires_grad_()
    expected, got = pyg(edge_index, labels, w), ours(edge_index, labels, w2)
    close(got, expected, "rankings")
    expected.square().sum().backward()
    got.square().sum().backward()
    close(ours.embedding.weight.grad, pyg.embedding.weight.grad, "embedding gradient")
    if w is not None:
        close(w2.grad, w.grad, "edge weight gradient")


def test_light_gcn_heads_and_losses():
    """PyG's heads run around gnnc's layers: recommend, predict_link and the two losses."""
    g = torch.Generator().manual_seed(1)
    edge_index = torch.randint(0, 30, (2, 120), generator=g)
    pyg, ours = _light_gcns(30, 8, 2)
    src, dst = torch.arange(5), torch.arange(10, 30)
    expected = pyg.recommend(edge_index, src_index=src, dst_index=dst, k=3)
    assert torch.equal(ours.recommend(edge_index, src_index=src, dst_index=dst, k=3), expected)
    labels = torch.randint(0, 30, (2, 16), generator=g)
    close(ours.predict_link(edge_index, labels, prob=True), pyg.predict_link(edge_index, labels, prob=True), "links")
    pos, neg = ours(edge_index, labels), ours(edge_index, labels.flip(0))
    pyg_pos, pyg_neg = pyg(edge_index, labels), pyg(edge_index, labels.flip(0))
    close(ours.recommendation_loss(pos, neg), pyg.recommendation_loss(pyg_pos, pyg_neg), "bpr")
    y = (torch.rand(16, generator=g) < 0.5).float()
    close(ours.link_pred_loss(pos, y), pyg.link_pred_loss(pyg_pos, y), "bce")
    assert all(isinstance(c, LGConv) for c in ours.convs)


def test_light_gcn_on_a_sparse_adjacency_ranks_its_entries():
    """Without edge_label_index, a sparse adjacency's entries are the pairs ranked (PyG's
    `to_edge_index`, in its storage order)."""
    g = torch.Generator().manual_seed(4)
    edge_index = torch.randint(0, 25, (2, 90), generator=g)
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.rand(90, generator=g) + 0.1, (25, 25)).coalesce()
    pyg, ours = _light_gcns(25, 5, 2)
    close(ours(adj), pyg(adj), "rankings")
    with pytest.raises(GraphError, match="out of range"):
        ours(edge_index, torch.tensor([[0, 25], [1, 2]]))


def test_light_gcn_copies_and_compiles():
    edge_index = torch.randint(0, 20, (2, 60), generator=torch.Generator().manual_seed(2))
    _, ours = _light_gcns(20, 4, 2)
    expected = ours(edge_index)
    buffer = io.BytesIO()
    torch.save(ours, buffer)
    buffer.seek(0)
    close(torch.load(buffer, weights_only=False)(edge_index), expected, "loaded")
    close(copy.deepcopy(ours)(edge_index), expected, "copied")
    close(torch.compile(ours, fullgraph=True)(edge_index), expected, "compiled")


# ---------------------------------------------------------- CorrectAndSmooth


@given(graph=pyg_graphs(), autoscale=st.booleans(), as_index=st.booleans(), seed=st.integers(0, 2**16))
def test_correct_and_smooth_matches_pyg(graph, autoscale, as_index, seed):
    edge_index, n = graph
    y_soft = torch.softmax(torch.randn(n, 3, generator=torch.Generator().manual_seed(seed)), 1)
    mask = _mask(n, seed, as_index)
    y_true = _labels(n, 3, seed + 1)[mask]
    pyg = pyg_models.CorrectAndSmooth(3, 0.8, 2, 0.6, autoscale=autoscale, scale=0.7)
    ours = models.CorrectAndSmooth(3, 0.8, 2, 0.6, autoscale=autoscale, scale=0.7)
    assert isinstance(ours.prop1, models.LabelPropagation)
    expected = pyg.correct(y_soft, y_true, mask, edge_index)
    got = ours.correct(y_soft, y_true, mask, edge_index)
    close(got, expected, "corrected")
    close(ours.smooth(got, y_true, mask, edge_index), pyg.smooth(expected, y_true, mask, edge_index), "smoothed")
