"""What every gnnc.nn layer does alike, checked over all of them (`tests.nn_oracle.LAYERS`):
`gnnc.nn.warm_up` finds and compiles its kernels, it deep-copies, `torch.save`s and loads
with the same outputs, and compiles with `torch.compile(fullgraph=True)` (but for
`GRAPH_BREAKS`) to the eager outputs and gradients."""

from __future__ import annotations

import copy
import io

import pytest
import torch

from tests.nn_oracle import GRAPH_BREAKS, LAYERS, Preceded, close

pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.nn import precompile  # noqa: E402


def _inputs(extra: dict) -> tuple[torch.Tensor, torch.Tensor, dict]:
    g = torch.Generator().manual_seed(11)
    edge_index = torch.randint(0, 10, (2, 32), generator=g)
    x = torch.randn(10, 5, generator=g, requires_grad=True)
    named = {
        name: torch.randint(0, width, (32,), generator=g)
        if name == "edge_type"
        else torch.randn(32, width, generator=g)
        for name, width in extra.items()
    }
    return x, edge_index, named


@pytest.mark.parametrize("name, make, extra", LAYERS, ids=[case[0] for case in LAYERS])
def test_every_layer_copies_saves_and_compiles(name, make, extra):
    torch.manual_seed(0)
    model = Preceded(gnn, make).eval()
    x, edge_index, named = _inputs(extra)
    found = len(precompile.kernels_of(model))
    assert found >= 1, f"{name}: warm_up finds no kernel"
    # every configuration's forward kernel; the gradient kernels of the one called compile in the
    # backward below (warming up every attention configuration's gradients took GATv2Conv 42 s)
    assert gnn.warm_up(model, grad=False).kernels == found
    expected = model(x, edge_index, **named)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(model), torch.load(buffer, weights_only=False)):
        close(other(x, edge_index, **named), expected, f"{name}: a copy")
    torch._dynamo.reset()  # one Preceded.forward compiled per layer: past dynamo's recompile limit otherwise
    compiled = torch.compile(model, fullgraph=name not in GRAPH_BREAKS, backend="aot_eager")
    got = compiled(x, edge_index, **named)
    close(got, expected, f"{name}: compiled")
    params = [x, *(p for p in model.parameters() if p.requires_grad)]
    want = torch.autograd.grad(expected.square().sum(), params, allow_unused=True)
    have = torch.autograd.grad(got.square().sum(), params, allow_unused=True)
    for i, (a, b) in enumerate(zip(have, want)):
        if b is not None:
            close(a, b, f"{name}: compiled gradient {i}")
