"""gnnc.torch: autograd ops from compiled kernels; gradcheck in float64."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import gnnc  # noqa: E402
import gnnc.torch as gt  # noqa: E402
from tests.helpers import slow_except  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# self loop, duplicates, a vertex without in-edges (3), an isolated vertex (4)
EDGE_INDEX = torch.tensor([[0, 1, 2, 2, 3, 0, 2, 3], [1, 2, 0, 2, 1, 1, 1, 0]])
V = 5


def _input(shape, grad=True):
    return (torch.rand(shape, dtype=torch.float64) + 0.2).requires_grad_(grad)


CASES = {
    "gcn": lambda: (_input((V, 3)), _input((8,))),
    "gcn_norm": lambda: (_input((V, 3)),),
    "sage_mean": lambda: (_input((V, 2)),),
    "gin": lambda: (_input((V, 2)), _input(())),
    "attention": lambda: (_input((V, 2, 3)), _input((V, 2, 3))),
    # scores of both signs (leaky_relu's two slopes); continuous values, so no ties at a max
    "gat_conv": lambda: (
        _input((V, 2, 3)),
        (_input((V, 2), False) - 0.7).requires_grad_(),
        (_input((V, 2), False) - 0.7).requires_grad_(),
    ),
    "sage_max": lambda: (_input((V, 3)),),
    "mlp_aggr": lambda: (
        (_input((V, 3), False) - 0.6).requires_grad_(),
        (_input((3, 2), False) - 0.6).requires_grad_(),
    ),
}


@pytest.mark.parametrize("name", slow_except(sorted(CASES), "gcn", "sage_mean"))
def test_gradcheck_example_kernels(name):
    op = gt.kernel(EXAMPLES / f"{name}.gnn", name)
    inputs = CASES[name]()
    assert torch.autograd.gradcheck(lambda *xs: op(EDGE_INDEX, *xs, num_vertices=V), inputs)


@pytest.mark.slow
def test_gradcheck_two_results_and_non_smooth_ops():
    op = gt.kernel(EXAMPLES / "gat.gnn", "gat")
    h, el, er = _input((V, 2, 3)), _input((V, 2)), _input((V, 2))
    assert torch.autograd.gradcheck(lambda *xs: op(EDGE_INDEX, *xs, num_vertices=V), (h, el, er))
    # a loss that uses only one of the results: autograd passes zeros for the other
    out, alpha = op(EDGE_INDEX, h, el, er, num_vertices=V)
    alpha.sum().backward()
    assert h.grad is not None and torch.count_nonzero(h.grad) == 0
    source = """
kernel k(x: f32[V, F], y: f32[V, F]) -> f32[V, F] {
    out[v] = sum(relu(x[u] - y[v]) + abs(x[u] * y[v]) + leaky_relu(x[u], 0.1) * max(x[u], y[v])) + min(x[v], y[v])
}
"""
    k = gt.kernel(source, "k")
    x, y = (
        (torch.rand(V, 2, dtype=torch.float64) - 0.5).requires_grad_(),
        (torch.rand(V, 2, dtype=torch.float64) - 0.5).requires_grad_(),
    )
    assert torch.autograd.gradcheck(lambda *xs: k(EDGE_INDEX, *xs, num_vertices=V), (x, y))


def test_float32_module_training_step_and_noncontiguous_gradients():
    op = gt.kernel(EXAMPLES / "gcn_norm.gnn", "gcn_norm")
    graph = gnnc.Graph(EDGE_INDEX.numpy(), num_vertices=V)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x):
            return op(graph, self.lin(x))

    torch.manual_seed(0)
    layer = Layer()
    x = torch.rand(V, 4)
    # .t() of a [3, V] view makes the incoming gradient non-contiguous
    loss = (layer(x).t() * torch.arange(3.0)[:, None]).sum()
    loss.backward()
    with torch.no_grad():
        dense = torch.zeros(V, V)
        deg_in = torch.bincount(EDGE_INDEX[1], minlength=V).double()
        deg_out = torch.bincount(EDGE_INDEX[0], minlength=V).double()
        for u, v in EDGE_INDEX.t().tolist():
            dense[v, u] += float((deg_out[u] * deg_in[v]) ** -0.5)
    lin = torch.nn.Linear(4, 3)
    lin.load_state_dict(layer.lin.state_dict())
    (((dense @ lin(x)).t() * torch.arange(3.0)[:, None]).sum()).backward()
    torch.testing.assert_close(layer.lin.weight.grad, lin.weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.lin.bias.grad, lin.bias.grad, rtol=1e-5, atol=1e-5)


def test_output_shares_memory_with_the_kernel_result():
    op = gt.kernel(EXAMPLES / "sage_mean.gnn", "sage_mean")
    out = op(EDGE_INDEX, torch.rand(V, 2), num_vertices=V)
    assert out.is_contiguous() and out.dtype == torch.float32
    assert gt.as_graph(EDGE_INDEX) is gt.as_graph(EDGE_INDEX)


@pytest.mark.slow
def test_gradcheck_outer_and_transpose():
    """outer w.r.t. both operands (y and x reach the second ones) and transpose, against finite differences."""
    source = """
kernel k(x: f32[V, K], y: f32[V, N], m: f32[V, N, K]) -> f32[V, K, N] {
    out[v] = sum(outer(x[u], tanh(y[v] * y[u])) * transpose(m[u])) + outer(sigmoid(x[v]), y[v] * dot(x[v], x[v]))
}
"""
    k = gt.kernel(source, "k")
    x, y, m = _input((V, 2)), _input((V, 3)), (_input((V, 3, 2), False) - 0.7).requires_grad_()
    assert torch.autograd.gradcheck(lambda *xs: k(EDGE_INDEX, *xs, num_vertices=V), (x, y, m))


def test_errors_are_gnnc_errors():
    op = gt.kernel(EXAMPLES / "gin.gnn", "gin")
    x, eps = _input((V, 2)), _input(())
    with pytest.raises(gnnc.ArgumentError, match="float32 or all float64"):
        op(EDGE_INDEX, x.float(), eps, num_vertices=V)
    with pytest.raises(gnnc.ArgumentError, match="takes 2 inputs"):
        op(EDGE_INDEX, x, num_vertices=V)
