"""gnnc.nn.linear's products of one input: the values and gradients of plain `F.linear`s.

`products` and `projections` compute dx as one tensor (the later terms added
in place); these check that it is the sum autograd would make, for every
combination of biases and of which inputs need a gradient, double backward
included, and that `projections` falls back to the layers themselves where
it does not apply (a lazy layer, which its first call sizes).
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from gnnc.nn import linear
from gnnc.nn.linear import Linear, products, projections


@pytest.fixture(autouse=True, params=["torch's results", "numpy's results"])
def results_from(request, monkeypatch):
    """Every test twice: products' results from torch's allocator, and from numpy's
    (`linear._result`, which takes results of FRESH_RESULT_BYTES or more: all of them here)."""
    if request.param == "numpy's results":
        monkeypatch.setattr(linear, "FRESH_RESULT_BYTES", 0)
    return request.param


def _inputs(biases: tuple[bool, ...], dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, list]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(9, 5, generator=g, dtype=dtype)
    transforms = []
    for i, has_bias in enumerate(biases):
        w = torch.randn(3 + i, 5, generator=g, dtype=dtype)
        b = torch.randn(3 + i, generator=g, dtype=dtype) if has_bias else None
        transforms.append((w, b))
    return x, transforms


@pytest.mark.parametrize("biases", [(False,), (True, False), (False, True, True), (True, True, False, True)])
def test_products_match_plain_linears_forward_and_backward(biases):
    x, transforms = _inputs(biases)
    leaves = [x, *[t for w, b in transforms for t in (w, b) if t is not None]]
    for t in leaves:
        t.requires_grad_(True)
    got = products(x, *transforms)
    want = [F.linear(x, w, b) for w, b in transforms]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    seeds = [torch.randn_like(t) for t in want]
    loss_got = sum((a * s).sum() for a, s in zip(got, seeds))
    loss_want = sum((a * s).sum() for a, s in zip(want, seeds))
    for a, b in zip(torch.autograd.grad(loss_got, leaves), torch.autograd.grad(loss_want, leaves)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("needs", list(itertools.product((False, True), repeat=3)))
def test_products_give_gradients_only_where_asked(needs):
    x, transforms = _inputs((True, False))
    (w1, b1), (w2, _) = transforms
    for t, need in zip((x, w1, w2), needs):
        t.requires_grad_(need)
    b1.requires_grad_(True)
    outs = products(x, (w1, b1), (w2, None))
    (outs[0].sum() + 2 * outs[1].sum()).backward()
    for t, need in zip((x, w1, w2), needs):
        assert (t.grad is not None) == need
    torch.testing.assert_close(b1.grad, torch.full((3,), 9.0, dtype=x.dtype))  # 9 rows of ones
    if needs[0]:
        torch.testing.assert_close(
            x.grad, torch.ones(9, 3, dtype=x.dtype) @ w1 + 2 * torch.ones(9, 4, dtype=x.dtype) @ w2
        )


def test_products_gradcheck_and_double_backward():
    x, transforms = _inputs((True, False, True))
    flat = [x] + [t for w, b in transforms for t in (w, b) if t is not None]
    for t in flat:
        t.requires_grad_(True)

    def f(x, w1, b1, w2, w3, b3):
        return products(x, (w1, b1), (w2, None), (w3, b3))

    assert torch.autograd.gradcheck(f, tuple(flat))
    assert torch.autograd.gradgradcheck(f, tuple(flat))


def test_projections_are_the_layers_outputs_and_size_a_lazy_layer():
    torch.manual_seed(0)
    x = torch.randn(7, 6, requires_grad=True)
    lins = [Linear(6, 4), Linear(6, 3, bias=False), Linear(-1, 2)]
    assert lins[2].lazy
    got = projections(x, *lins)  # a lazy layer: each layer called, which sizes it
    assert not lins[2].lazy and lins[2].weight.shape == (2, 6)
    for out, lin in zip(got, lins):
        torch.testing.assert_close(out, lin(x))
    got = projections(x, *lins)  # sized now: one products
    grads = torch.autograd.grad(sum(o.sum() for o in got), [x, *(lin.weight for lin in lins)])
    want = torch.autograd.grad(sum(lin(x).sum() for lin in lins), [x, *(lin.weight for lin in lins)])
    for a, b in zip(grads, want):
        torch.testing.assert_close(a, b)


def test_products_under_autocast_are_plain_linears_under_autocast():
    """Under torch.autocast the products run in its type and so do their gradients, which come
    back in the inputs' float32, as torch's linear gives them (its saved x and W are cast);
    without the casts the backward's products of bfloat16 and float32 fail."""
    x, transforms = _inputs((True, False), torch.float32)
    leaves = [x, transforms[0][0], transforms[0][1], transforms[1][0]]
    results = []
    for make in (lambda: products(x, *transforms), lambda: [F.linear(x, w, b) for w, b in transforms]):
        for t in leaves:
            t.requires_grad_(True)
            t.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outs = make()
        sum(o.float().square().sum() for o in outs).backward()
        results.append(([o.dtype for o in outs], [o.detach() for o in outs], [t.grad for t in leaves]))
    (dtypes, outs, grads), (want_dtypes, want_outs, want_grads) = results
    assert dtypes == want_dtypes == [torch.bfloat16] * 2
    for a, b in zip(outs, want_outs):
        torch.testing.assert_close(a, b)
    for a, b in zip(grads, want_grads):  # dx's terms are added in bfloat16 in another order
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=2e-2, atol=1e-2)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_linear_layers_large_results_come_from_numpy(bias, dtype, results_from, monkeypatch):
    """A Linear's [N, out] result and its dx come from numpy's allocator where they are large
    (`linear._fresh`): the same values and gradients as torch's linear, with grad on or off;
    under a backward of create_graph=True the dx is torch's (an `out=` product records nothing)."""
    from gnnc.runtime import memory

    made = []
    empty = memory.empty
    monkeypatch.setattr(memory, "empty", lambda *a, **k: made.append(a[0]) or empty(*a, **k))
    torch.manual_seed(0)
    lin = Linear(5, 4, bias=bias).to(dtype)
    x = torch.randn(11, 5, dtype=dtype, requires_grad=True)
    out = lin(x)
    want = F.linear(x, lin.weight, lin.bias)
    torch.testing.assert_close(out, want)
    seed = torch.randn_like(want)
    leaves = [x, lin.weight] + ([lin.bias] if bias else [])
    got_grads = torch.autograd.grad((out * seed).sum(), leaves)
    for a, b in zip(got_grads, torch.autograd.grad((want * seed).sum(), leaves)):
        torch.testing.assert_close(a, b)
    with torch.no_grad():
        torch.testing.assert_close(lin(x), want)
    fresh = results_from == "numpy's results"
    assert made == ([(11, 4), (11, 5), (11, 4)] if fresh else [])
    dx = torch.autograd.grad((lin(x) * seed).sum(), x, create_graph=True)[0]
    (second,) = torch.autograd.grad(dx.square().sum(), lin.weight)
    want_dx = torch.autograd.grad((F.linear(x, lin.weight, lin.bias) * seed).sum(), x, create_graph=True)[0]
    (want_second,) = torch.autograd.grad(want_dx.square().sum(), lin.weight)
    torch.testing.assert_close(second, want_second)


def test_the_dense_products_pass_opcheck():
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.float64):
        x, w, b = (torch.randn(*s, generator=g, dtype=dtype) for s in ((6, 5), (3, 5), (3,)))
        for bias in (b, None):
            torch.library.opcheck(torch.ops.gnnc.dense_product.default, (x, w, bias))
            torch.testing.assert_close(torch.ops.gnnc.dense_product(x, w, bias), F.linear(x, w, bias))
        grads = [torch.randn(6, 3, generator=g, dtype=dtype), torch.randn(6, 2, generator=g, dtype=dtype)]
        weights = [w, torch.randn(2, 5, generator=g, dtype=dtype)]
        torch.library.opcheck(torch.ops.gnnc.dense_input_grad.default, (grads, weights))
        want = grads[0] @ weights[0] + grads[1] @ weights[1]
        torch.testing.assert_close(torch.ops.gnnc.dense_input_grad(grads, weights), want)


def test_a_compiled_linear_calls_the_dense_product(results_from, monkeypatch):
    """Under torch.compile the product and its dx are `gnnc::dense_product` calls (the op runs,
    so its results are numpy's): the compiled model keeps what the eager one gains."""
    from gnnc.runtime import memory

    made = []
    empty = memory.empty
    monkeypatch.setattr(memory, "empty", lambda *a, **k: made.append(a[0]) or empty(*a, **k))
    torch.manual_seed(0)
    torch._dynamo.reset()
    lin = Linear(5, 4)
    x = torch.randn(13, 5, requires_grad=True)
    out = torch.compile(lin, backend="aot_eager", fullgraph=True)(x)
    want = F.linear(x, lin.weight, lin.bias)
    torch.testing.assert_close(out, want)
    leaves = [x, lin.weight, lin.bias]
    for a, b in zip(torch.autograd.grad(out.sum(), leaves), torch.autograd.grad(want.sum(), leaves)):
        torch.testing.assert_close(a, b)
    assert ((13, 4) in made and (13, 5) in made) == (results_from == "numpy's results")
