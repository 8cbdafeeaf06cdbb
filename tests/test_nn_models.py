"""gnnc.nn.models (PyG's BasicGNN models of gnnc.nn's layers) against torch_geometric.nn.models.

The same seed gives the same parameters, and outputs and gradients agree
on random graphs for every model and the options around the layers
(jumping knowledge, normalisation, a final Linear, GAT's heads and v2,
edge weights and edge features), with PyG's hierarchical-sampling
trimming too.
"""

from __future__ import annotations

import copy
import importlib
import io
import sys
from unittest.mock import patch

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import close, compare, features, one_loop_per_vertex, pyg_graphs

pyg_models = pytest.importorskip("torch_geometric.nn.models")
import gnnc.nn as gnn  # noqa: E402
import gnnc.nn.models as models  # noqa: E402

DEG = torch.tensor([0, 2, 3, 1])
PNA_ARGS = {"aggregators": ["sum", "min"], "scalers": ["attenuation", "linear"], "deg": DEG}

#: (model, options): each model with the options that change what surrounds its layers
CASES = [
    ("GCN", {}),
    ("GCN", {"jk": "cat", "out_channels": 3}),
    ("GraphSAGE", {}),
    ("GraphSAGE", {"aggr": "max", "norm": "layer_norm", "out_channels": 3}),
    ("GIN", {}),
    ("GIN", {"norm": "batch_norm", "jk": "max", "out_channels": 3}),
    ("GAT", {"heads": 2}),
    ("GAT", {"v2": True, "heads": 2, "jk": "last", "out_channels": 3}),
    ("PNA", {"aggregators": ["mean", "max", "std"], "scalers": ["identity", "amplification"], "deg": DEG}),
    ("PNA", {**PNA_ARGS, "towers": 2, "norm": "batch_norm", "jk": "cat", "out_channels": 3}),
    ("EdgeCNN", {"aggr": "add"}),
    ("EdgeCNN", {"aggr": "mean", "norm": "layer_norm", "jk": "max", "out_channels": 3}),
]


def _pair(name: str, options: dict, in_channels: int = 5) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    pyg = getattr(pyg_models, name)(in_channels, 8, num_layers=3, **options)
    torch.manual_seed(0)
    ours = getattr(models, name)(in_channels, 8, num_layers=3, **options)
    return pyg, ours


@pytest.mark.parametrize("name, options", CASES)
def test_same_structure_and_initialisation(name, options):
    pyg, ours = _pair(name, options)
    expected, got = pyg.state_dict(), ours.state_dict()
    assert list(expected) == list(got)
    for key in expected:
        assert torch.equal(expected[key], got[key]), key
    assert all(type(conv).__module__.startswith("gnnc.nn.") for conv in ours.convs)


@given(graph=pyg_graphs(), case=st.sampled_from(CASES), seed=st.integers(0, 2**16))
def test_models_match_pyg(graph, case, seed):
    name, options = case
    edge_index, n = graph
    if name in ("GCN", "GAT"):
        edge_index = one_loop_per_vertex(edge_index)  # see test_nn_gcn: PyG's loop gradient
    pyg, ours = _pair(name, options)
    # training mode (batch norm's batch statistics, which one vertex cannot have); dropout 0, so no
    # draw differs
    pyg.train(n > 1), ours.train(n > 1)
    compare(pyg, ours, (features(n, 5, seed), edge_index))


def test_edge_weights_and_edge_features():
    g = torch.Generator().manual_seed(3)
    edge_index = torch.randint(0, 12, (2, 40), generator=g)
    edge_index = one_loop_per_vertex(edge_index)
    weight = torch.rand(edge_index.shape[1], generator=g).requires_grad_()
    compare(*_pair("GCN", {}), (features(12, 5, 1), edge_index), {"edge_weight": weight})
    edge_attr = features(edge_index.shape[1], 2, 2)
    compare(*_pair("GAT", {"heads": 2, "edge_dim": 2}), (features(12, 5, 1), edge_index), {"edge_attr": edge_attr})
    compare(*_pair("PNA", {**PNA_ARGS, "edge_dim": 2}), (features(12, 5, 1), edge_index), {"edge_attr": edge_attr})


def test_dropout_in_eval_mode_and_copies():
    """dropout (GAT's: its attention's too) is PyG's in training; eval matches; copies run."""
    edge_index = torch.randint(0, 10, (2, 30), generator=torch.Generator().manual_seed(4))
    x = features(10, 5, 3, grad=False)
    pyg, ours = _pair("GAT", {"heads": 2, "dropout": 0.5})
    assert ours.convs[0].dropout == 0.5  # the attention dropout, as PyG's model sets it
    compare(pyg.eval(), ours.eval(), (x, edge_index), grads=False)
    expected = ours(x, edge_index)
    buffer = io.BytesIO()
    torch.save(ours, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(ours), torch.load(buffer, weights_only=False)):
        close(other(x, edge_index), expected, "copy")


def test_hierarchical_trimming():
    """PyG's trim_to_layer: nodes and edges ordered by hop, each layer cut to what it still needs."""
    g = torch.Generator().manual_seed(5)
    nodes, edges = [3, 5, 7], [8, 12]  # per hop: seeds first, then hop 1, hop 2; edges likewise
    ends = [3, 8, 15]
    hop1 = torch.stack([torch.randint(3, 8, (8,), generator=g), torch.randint(0, 3, (8,), generator=g)])
    hop2 = torch.stack([torch.randint(8, 15, (12,), generator=g), torch.randint(0, 8, (12,), generator=g)])
    edge_index = torch.cat([hop1, hop2], 1)
    x = features(ends[-1], 5, 6)
    pyg, ours = pyg_models.GraphSAGE(5, 8, num_layers=2), models.GraphSAGE(5, 8, num_layers=2)
    expected, got = compare(
        pyg,
        ours,
        (x, edge_index),
        {"num_sampled_nodes_per_hop": nodes, "num_sampled_edges_per_hop": edges},
    )
    assert got.shape[0] == ends[1]  # the last layer ran on the first hop's nodes only


def test_compiles_fullgraph():
    edge_index = torch.randint(0, 10, (2, 30), generator=torch.Generator().manual_seed(7))
    x = features(10, 5, 8, grad=False)
    _, ours = _pair("GraphSAGE", {"jk": "cat", "out_channels": 3})
    ours.eval()
    compiled = torch.compile(ours, fullgraph=True, backend="aot_eager")
    close(compiled(x, edge_index), ours(x, edge_index), "compiled")


def test_layers_of_the_models_are_gnnc_layers_and_pyg_is_needed():
    assert isinstance(models.GAT(5, 8, 2, v2=True).convs[0], gnn.GATv2Conv)
    with pytest.raises(ValueError, match="divisible by the number of heads"):
        models.GAT(5, 7, 2, heads=2)
    with patch.dict(sys.modules):
        sys.modules.pop("gnnc.nn.models")
        sys.modules["torch_geometric.nn.models"] = None  # type: ignore[assignment]
        with pytest.raises(ImportError, match="install torch-geometric"):
            importlib.import_module("gnnc.nn.models")
