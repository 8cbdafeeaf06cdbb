"""gnnc ops and gnnc.nn layers under torch.autocast (bfloat16 on the CPU).

Under autocast a gnnc op takes float16 / bfloat16 inputs and computes in
float32, as torch's own float32-policy ops (sums, softmax) do: the kernel
result equals the same call on the inputs cast up, exactly. A layer's
Linear layers run in autocast's precision, its message passing in float32;
outputs and gradients agree with PyG's layer under the same autocast to
bfloat16's precision (PyG also aggregates in bfloat16), and parameters get
float32 gradients. Outside autocast, half precision is a clear error.
"""

from __future__ import annotations

import pytest
import torch

from tests.nn_oracle import LAYERS, Preceded, close

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
import gnnc.torch  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402

#: bfloat16 keeps 8 bits: a Linear and a sum of a few terms in it are 1e-2 apart from float32
RTOL = 4e-2

MEAN = """
kernel mean_of(x: f32[V, F]) -> (out: f32[V, F]) {
    out[v] = mean(x[u] * w[e]) + x[v]
}
"""


def _graph(seed: int):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, 12, (2, 40), generator=g)
    x = torch.randn(12, 5, generator=g)
    return g, edge_index, x


def _extra(spec: dict, g: torch.Generator, num_edges: int) -> dict:
    out = {}
    for name, width in spec.items():
        if name == "edge_type":
            out[name] = torch.randint(0, width, (num_edges,), generator=g)
        else:
            out[name] = torch.randn(num_edges, width, generator=g)
    return out


@pytest.mark.parametrize("name, make, extra", LAYERS, ids=[case[0] for case in LAYERS])
def test_layers_under_autocast_match_pyg(name, make, extra):
    g, edge_index, x = _graph(1)
    named = _extra(extra, g, edge_index.shape[1])
    torch.manual_seed(0)
    pyg = Preceded(pyg_nn, make)
    ours = Preceded(gnn, make)
    ours.load_state_dict(pyg.state_dict())
    results = []
    for model in (pyg, ours):
        xx = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(xx, edge_index, **named)
        out.float().square().sum().backward()
        results.append((out.float(), xx.grad, {k: p.grad for k, p in model.named_parameters()}))
    (expected, x_grad, grads), (got, our_x_grad, our_grads) = results
    close(got, expected, f"{name} output", RTOL)
    close(our_x_grad, x_grad, f"{name} x gradient", RTOL)
    for key, grad in grads.items():
        ours_grad = our_grads[key]
        if grad is None:
            assert ours_grad is None or not ours_grad.any(), key
            continue
        assert ours_grad.dtype == torch.float32, key
        close(ours_grad, grad, f"{name} gradient of {key}", RTOL)


def test_kernel_under_autocast_is_the_float32_call():
    kernel = gnnc.torch.kernel(MEAN.replace("mean(x[u] * w[e])", "mean(x[u])"), "mean_of")
    _, edge_index, x = _graph(2)
    half = x.to(torch.bfloat16).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = kernel(edge_index, half)
    up = half.detach().float().requires_grad_()
    expected = kernel(edge_index, up)
    assert got.dtype == torch.float32
    assert torch.equal(got, expected)
    got.sum().backward()
    expected.sum().backward()
    assert half.grad.dtype == torch.bfloat16  # the cast's gradient comes back in the input's dtype
    assert torch.equal(half.grad, up.grad.to(torch.bfloat16))
    doubles = x.double()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert kernel(edge_index, doubles).dtype == torch.float64  # autocast leaves float64 alone


def test_half_precision_outside_autocast_is_refused():
    _, edge_index, x = _graph(3)
    kernel = gnnc.torch.kernel(MEAN.replace("mean(x[u] * w[e])", "mean(x[u])"), "mean_of")
    with pytest.raises(ArgumentError, match="under torch.autocast"):
        kernel(edge_index, x.to(torch.bfloat16))
    with pytest.raises(ArgumentError, match="under\\s+autocast the layers take it"):
        gnn.SAGEConv(5, 4)(x.to(torch.float16), edge_index)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        with pytest.raises(ArgumentError, match="half precision"):
            gnn.GCNConv(5, 4)(x.to(torch.bfloat16), edge_index)


def test_compiled_under_autocast():
    _, edge_index, x = _graph(4)
    torch.manual_seed(0)
    model = Preceded(gnn, lambda m: m.SAGEConv(5, 4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x, edge_index)
        got = torch.compile(model, fullgraph=True, backend="aot_eager")(x, edge_index)
    close(got.float(), expected.float(), "compiled under autocast", 1e-6)


def test_recomputed_aggregation_under_autocast(monkeypatch):
    """A first layer whose aggregation is made again in the backward (a large graph's: forced
    here) takes autocast's lower-precision gradient: the same weight gradient as when kept."""
    import gnnc.nn.conv.aggregate as aggregate

    _, edge_index, x = _graph(5)
    torch.manual_seed(0)
    conv = gnn.SAGEConv(5, 8)
    grads = []
    for share in (2.0, 0.0):  # kept, then recomputed
        monkeypatch.setattr(aggregate, "RECOMPUTE_MIN_SHARE_OF_MEMORY", share)
        conv.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = conv(x, edge_index)
        out.float().square().sum().backward()
        grads.append(conv.lin_l.weight.grad.clone())
    assert grads[1].dtype == torch.float32
    close(grads[1], grads[0], "recomputed weight gradient", 1e-2)
