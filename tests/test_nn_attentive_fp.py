"""gnnc.nn's GATEConv and gnnc.nn.models' AttentiveFP against PyG's.

GATEConv on hypothesis graphs (isolated vertices, self loops, duplicate
edges) with edge features of both widths (made inside the kernel up to
`FUSED_EDGE_DIM`, in torch above it), its attention dropout drawn as PyG's;
AttentiveFP on batches of molecules: the same parameters and generator
state after construction, outputs and every gradient, in training with
dropout; the errors.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import Seeded, close, compare, features, pyg_graphs

pyg_afp = pytest.importorskip("torch_geometric.nn.models.attentive_fp")
import gnnc.nn.models as models  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402
from gnnc.nn.attentive_fp import FUSED_EDGE_DIM, GATEConv  # noqa: E402
from gnnc.nn.conv import GATConv  # noqa: E402


def _gate_convs(channels: int, edge_dim: int, dropout: float = 0.0) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    pyg = pyg_afp.GATEConv(channels, channels, edge_dim, dropout)
    torch.manual_seed(0)
    ours = GATEConv(channels, channels, edge_dim, dropout)
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    return pyg, ours


@given(
    graph=pyg_graphs(),
    edge_dim=st.sampled_from([1, 3, FUSED_EDGE_DIM + 4]),
    dropout=st.sampled_from([0.0, 0.4]),
    seed=st.integers(0, 2**16),
)
def test_gate_conv_matches_pyg(graph, edge_dim, dropout, seed):
    edge_index, n = graph
    pyg, ours = _gate_convs(5, edge_dim, dropout)
    edge_attr = features(edge_index.shape[1], edge_dim, seed + 1)
    compare(Seeded(pyg, seed), Seeded(ours, seed), (features(n, 5, seed), edge_index, edge_attr))


def test_gate_conv_in_eval_mode_draws_no_dropout():
    edge_index = torch.randint(0, 10, (2, 30), generator=torch.Generator().manual_seed(1))
    pyg, ours = _gate_convs(4, 2, 0.5)
    pyg.eval(), ours.eval()
    x, edge_attr = features(10, 4, 1), features(30, 2, 2)
    state = torch.random.get_rng_state()
    compare(pyg, ours, (x, edge_index, edge_attr))
    assert torch.equal(torch.random.get_rng_state(), state)


def test_gate_conv_errors():
    with pytest.raises(ArgumentError, match="in_channels .* must equal out_channels"):
        GATEConv(4, 5, 2)
    with pytest.raises(ArgumentError, match="dropout"):
        GATEConv(4, 4, 2, dropout=1.5)
    conv = GATEConv(4, 4, 2)
    edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ArgumentError, match="edge"):
        conv(torch.rand(3, 4), edge_index, torch.rand(3, 2))
    with pytest.raises(ArgumentError, match="bipartite"):
        conv((torch.rand(3, 4), torch.rand(3, 4)), edge_index, torch.rand(2, 2))


def _molecules(num: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(edge_index, batch, atoms): `num` random molecules of 1-9 atoms, bonds both ways, some
    atoms without bonds."""
    g = torch.Generator().manual_seed(seed)
    edges, batch, start = [], [], 0
    for m in range(num):
        atoms = int(torch.randint(1, 10, (1,), generator=g))
        bonds = torch.randint(0, atoms, (2, atoms), generator=g) + start
        edges += [bonds, bonds.flip(0)]
        batch += [m] * atoms
        start += atoms
    return torch.cat(edges, 1), torch.tensor(batch), start


@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("edge_dim", [3, FUSED_EDGE_DIM + 3])
def test_attentive_fp_matches_pyg(dropout, edge_dim):
    torch.manual_seed(0)
    pyg = pyg_afp.AttentiveFP(6, 8, 2, edge_dim, num_layers=3, num_timesteps=2, dropout=dropout)
    after_pyg = torch.random.get_rng_state()
    torch.manual_seed(0)
    ours = models.AttentiveFP(6, 8, 2, edge_dim, num_layers=3, num_timesteps=2, dropout=dropout)
    assert torch.equal(torch.random.get_rng_state(), after_pyg), "the swap drew from the generator"
    assert isinstance(ours.gate_conv, GATEConv) and isinstance(ours.mol_conv, GATConv)
    assert all(isinstance(c, GATConv) for c in ours.atom_convs)
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    edge_index, batch, atoms = _molecules(6, 3)
    x, edge_attr = features(atoms, 6, 4), features(edge_index.shape[1], edge_dim, 5)
    compare(Seeded(pyg, 9), Seeded(ours, 9), (x, edge_index, edge_attr, batch))


def test_attentive_fp_trains_like_pyg():
    """Three optimiser steps from the same start stay together (dropout on, new batches)."""
    torch.manual_seed(0)
    pyg = pyg_afp.AttentiveFP(5, 8, 1, 3, num_layers=2, num_timesteps=2, dropout=0.2)
    torch.manual_seed(0)
    ours = models.AttentiveFP(5, 8, 1, 3, num_layers=2, num_timesteps=2, dropout=0.2)
    opts = [torch.optim.Adam(m.parameters(), lr=0.01) for m in (pyg, ours)]
    for step in range(3):
        edge_index, batch, atoms = _molecules(4, 10 + step)
        x, edge_attr = features(atoms, 5, step, grad=False), features(edge_index.shape[1], 3, step + 1, grad=False)
        for model, opt in zip((pyg, ours), opts):
            torch.manual_seed(step)
            opt.zero_grad()
            model(x, edge_index, edge_attr, batch).square().mean().backward()
            opt.step()
    for (name, p), q in zip(pyg.named_parameters(), ours.parameters()):
        close(q, p, name, rtol=1e-4)
