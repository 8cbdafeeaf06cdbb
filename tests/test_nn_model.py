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


class AttentionNet(torch.nn.Module):
    """The three attention layers, each with attention dropout (and GAT's self loops)."""

    def __init__(self, layers=gnn):
        super().__init__()
        self.c1 = layers.GATConv(8, 4, heads=2, dropout=0.5)
        self.c2 = layers.GATv2Conv(8, 4, heads=2, dropout=0.3, edge_dim=3, fill_value="max")
        self.c3 = layers.TransformerConv(8, 3, heads=2, dropout=0.2, edge_dim=3)

    def forward(self, x, edge_index, edge_attr):
        h = self.c1(x, edge_index).relu()
        h = self.c2(h, edge_index, edge_attr).relu()
        return self.c3(h, edge_index, edge_attr)


def _attention_data(seed=0):
    """A graph without self loops of its own: gnnc then draws PyG's dropout rows exactly."""
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, 40, (2, 200), generator=g)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    return torch.randn(40, 8, generator=g), edge_index, torch.rand(edge_index.shape[1], 3, generator=g)


def _run(model, inputs, seed, compiled=None):
    """Output and parameter gradients of one training step of `model` (run as `compiled`) from `seed`."""
    model.zero_grad()
    torch.manual_seed(seed)
    out = (model if compiled is None else compiled)(*inputs)
    out.square().sum().backward()
    return out.detach(), _grads(model)


def _same(a, b, what):
    (out_a, grads_a), (out_b, grads_b) = a, b
    assert torch.allclose(out_a, out_b, atol=1e-5), f"{what}: outputs differ"
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        assert torch.allclose(grads_a[name], grads_b[name], atol=1e-4), f"{what}: gradient of {name}"


def test_attention_layers_compile_fullgraph_with_no_eager_call_first():
    """Training mode (attention dropout, self loops, edge features), compiled before any call."""
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    model = AttentionNet()
    inputs = _attention_data()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")  # eager's random ops: eager's masks
    got = _run(model, inputs, seed=5, compiled=compiled)
    _same(got, _run(model, inputs, seed=5), "compiled against eager")
    # and against PyG's layers with the same state, drawing the same masks
    pyg = AttentionNet(pyg_nn)
    pyg.load_state_dict(model.state_dict())
    _same(got, _run(pyg, inputs, seed=5), "compiled against PyG")
    model.eval()
    pyg.eval()
    with torch.no_grad():
        assert torch.allclose(compiled(*inputs), pyg(*inputs), atol=1e-5)


@pytest.mark.slow
def test_attention_layers_compile_fullgraph_with_inductor():
    torch.manual_seed(0)
    model = AttentionNet()
    inputs = _attention_data(1)
    compiled = torch.compile(model, fullgraph=True)
    from torch._inductor import config

    with config.patch(fallback_random=True):  # inductor draws with torch's generator, as eager
        got = _run(model, inputs, seed=2, compiled=compiled)
    _same(got, _run(model, inputs, seed=2), "inductor against eager")
    model.eval()
    with torch.no_grad():
        assert torch.allclose(compiled(*inputs), model(*inputs), atol=1e-5)


def test_values_of_the_edges_alone_are_made_once_and_follow_edits():
    """GCN's self-loop weights and the attention layers' keep mask are made once per edge_index
    (gnnc.nn.derived), eager or compiled, and again after an in-place edit of it."""
    from gnnc.nn import derived

    torch.manual_seed(0)
    x = torch.randn(6, 4)
    edge_index = torch.tensor([[0, 1, 2, 3, 3], [1, 2, 3, 3, 0]])  # with a self loop
    conv = gnn.GCNConv(4, 3)
    loops = derived.gcn_loops(edge_index, 6, 1.0, torch.float32)
    assert derived.gcn_loops(edge_index, 6, 1.0, torch.float32) is loops  # kept
    assert torch.equal(loops[0], torch.tensor([1.0, 1, 1, 0, 1, 1]))  # 3's loop weight, less its own loop
    assert torch.equal(loops[1], torch.ones(6))  # every vertex's loop weight
    compiled = torch.compile(conv, fullgraph=True)
    assert torch.allclose(compiled(x, edge_index), conv(x, edge_index), atol=1e-6)
    edge_index[1, 3] = 4  # the self loop 3 -> 3 becomes 3 -> 4
    assert torch.equal(derived.gcn_loops(edge_index, 6, 1.0, torch.float32), torch.ones(2, 6))
    assert torch.equal(derived.keep(edge_index, torch.float32), torch.ones(5))
    expected = conv(x, edge_index.clone())
    assert torch.allclose(conv(x, edge_index), expected, atol=1e-6)
    assert torch.allclose(compiled(x, edge_index), expected, atol=1e-6)
    for op, args in (
        (torch.ops.gnnc.nn_gcn_loops.default, (edge_index, 6, 1.0, torch.float32, True)),
        (torch.ops.gnnc.nn_gcn_loops.default, (edge_index, 6, 1.0, torch.float32, False)),
        (torch.ops.gnnc.nn_keep.default, (edge_index, torch.float32)),
        (torch.ops.gnnc.nn_static_edges.default, (edge_index, 3, 6, 6)),
    ):
        torch.library.opcheck(op, args)
