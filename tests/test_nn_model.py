"""A model built from gnnc.nn layers: torch.compile (fullgraph), saving, copying, edited graphs, workers."""

from __future__ import annotations

import copy
import io

import pytest
import torch

pytest.importorskip("torch_geometric")
import gnnc.nn as gnn  # noqa: E402


class Net(torch.nn.Module):
    """GCN -> SAGE(max) -> GIN -> APPNP: every kernel family of gnnc.nn in one model."""

    def __init__(self):
        super().__init__()
        self.c1 = gnn.GCNConv(8, 16)
        self.c2 = gnn.SAGEConv(16, 6, aggr="max")
        self.c3 = gnn.GINConv(torch.nn.Linear(6, 3), train_eps=True)
        self.c4 = gnn.APPNP(2, 0.1)

    def forward(self, x, edge_index):
        h = self.c1(x, edge_index).relu()
        return self.c4(self.c3(self.c2(h, edge_index), edge_index), edge_index)


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(50, 8, generator=g), torch.randint(0, 50, (2, 300), generator=g)


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_fullgraph_compile_matches_eager_forward_and_backward():
    torch.manual_seed(0)
    model = Net()
    x, edge_index = _data()
    eager = model(x, edge_index)
    eager.square().sum().backward()
    expected = _grads(model)
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(x, edge_index)
    assert torch.allclose(out, eager, atol=1e-5)
    out.square().sum().backward()
    for name, grad in _grads(model).items():
        assert torch.allclose(grad, expected[name], atol=1e-4), name
    # a second graph of another size: same compiled model, no error
    x2, e2 = torch.randn(30, 8), torch.randint(0, 30, (2, 100))
    assert torch.allclose(compiled(x2, e2), model(x2, e2), atol=1e-5)


def test_save_load_and_deepcopy_after_a_forward():
    torch.manual_seed(0)
    model = Net()
    x, edge_index = _data()
    expected = model(x, edge_index)
    twin = copy.deepcopy(model)
    assert torch.equal(twin(x, edge_index), expected)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert torch.equal(loaded(x, edge_index), expected)
    # and the usual way: a state_dict into a fresh model
    fresh = Net()
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(fresh(x, edge_index), expected)


def test_an_in_place_edit_of_edge_index_is_seen():
    torch.manual_seed(0)
    conv = gnn.SAGEConv(4, 4, aggr="sum")
    x = torch.randn(6, 4)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    before = conv(x, edge_index)
    edge_index[0, 0] = 5  # the edge 0 -> 1 becomes 5 -> 1
    after = conv(x, edge_index)
    rebuilt = conv(x, edge_index.clone())
    assert torch.equal(after, rebuilt)
    assert not torch.equal(after, before)


def _worker_forward(_):
    torch.manual_seed(0)
    conv = gnn.GCNConv(4, 3)
    x = torch.randn(6, 4)
    with torch.no_grad():  # a result with a grad_fn cannot be sent back from a worker
        return conv(x, torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]))


def test_forked_dataloader_workers_run_layers():
    parent = _worker_forward(0)  # the parent ran kernels (libgomp) before forking
    loader = torch.utils.data.DataLoader(
        list(range(2)),
        batch_size=1,
        num_workers=2,
        collate_fn=lambda b: _worker_forward(b),
        multiprocessing_context="fork",
    )
    for out in loader:
        assert torch.allclose(out, parent)
