"""Every constructor argument of gnnc.nn's layers is honoured or refused with a clear error.

- Lazy initialisation (`in_channels=-1`, and -1 in a bipartite pair) where PyG
  has it: an initialised PyG layer's state_dict sizes the gnnc layer and gives
  PyG's outputs; a gnnc layer's first call sizes and initialises it as PyG's.
- PyG's `MessagePassing` keyword arguments (`aggr`, `aggr_kwargs`, `flow`,
  `node_dim`, `decomposed_layers`): PyG's defaults spelt out change nothing;
  what gnnc does not compile is an `ArgumentError` naming what it does.
- The arguments not covered by the oracle tests of each layer.
"""

from __future__ import annotations

import pytest
import torch

from tests.nn_oracle import bipartite, close, compare, features

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402
from gnnc.nn.linear import is_lazy  # noqa: E402

EDGE_INDEX = torch.cat([bipartite(7, 7, 30, seed=3), torch.tensor([[2], [2]])], dim=1)
BIPARTITE = bipartite(7, 6, 25, seed=4)


def _inputs(bipartite_x: bool, channels=(5, 4)) -> tuple:
    if bipartite_x:
        return (features(7, channels[0], 1), features(6, channels[1], 2)), BIPARTITE
    return features(7, channels[0], 1), EDGE_INDEX


# ------------------------------------------------------------------ lazy sizes

LAZY = [
    ("GCNConv", -1, {}),
    ("SAGEConv", -1, {}),
    ("SAGEConv", (-1, -1), {"aggr": "max"}),
    ("SAGEConv", (-1, 4), {}),
    ("GraphConv", -1, {}),
    ("GraphConv", (-1, -1), {}),
    ("GATConv", -1, {"heads": 2, "residual": True}),
    ("GATConv", (-1, -1), {"heads": 2}),
    ("GATv2Conv", -1, {"heads": 2, "residual": True}),
    ("GATv2Conv", (-1, -1), {"heads": 2}),
    ("TransformerConv", -1, {"heads": 2, "beta": True}),
    ("TransformerConv", (-1, -1), {"heads": 2}),
]


@pytest.mark.parametrize("name,in_channels,kwargs", LAZY, ids=[f"{c[0]}{c[1]}" for c in LAZY])
def test_a_lazy_layer_loads_an_initialised_pyg_layer(name, in_channels, kwargs):
    torch.manual_seed(0)
    pyg = getattr(pyg_nn, name)(in_channels, 3, **kwargs)
    ours = getattr(gnn, name)(in_channels, 3, **kwargs)
    inputs = _inputs(isinstance(in_channels, tuple))
    with torch.no_grad():
        pyg(*inputs)  # PyG sizes its layer by its first call
    assert any(is_lazy(p) for p in ours.parameters()), "a -1 makes an unsized parameter"
    compare(pyg, ours, inputs)
    assert not any(is_lazy(p) for p in ours.parameters())
    for key, value in pyg.state_dict().items():
        assert ours.state_dict()[key].shape == value.shape, key


@pytest.mark.parametrize("name", ["GCNConv", "SAGEConv", "GraphConv"])
def test_a_lazy_layer_sizes_and_initialises_itself_as_pyg(name):
    x, edge_index = _inputs(False)
    torch.manual_seed(0)
    pyg = getattr(pyg_nn, name)(-1, 3)
    torch.manual_seed(0)
    ours = getattr(gnn, name)(-1, 3)
    torch.manual_seed(1)
    expected = pyg(x, edge_index)
    torch.manual_seed(1)
    got = ours(x, edge_index)  # sized by x, then initialised from the same draws as PyG's
    for key, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    close(got, expected, "output")


def test_an_unsized_state_dict_keeps_a_layer_lazy():
    x, edge_index = _inputs(False)
    ours = gnn.GATConv(-1, 3, heads=2)
    ours.load_state_dict(pyg_nn.GATConv(-1, 3, heads=2).state_dict())  # PyG's placeholder weight
    assert is_lazy(ours.lin.weight)
    sized = gnn.GATConv(5, 3, heads=2)
    sized.load_state_dict(ours.state_dict())  # and gnnc's makes a sized layer lazy again, as PyG's
    assert is_lazy(sized.lin.weight)
    assert ours(x, edge_index).shape == (7, 6) and ours.lin.weight.shape == (6, 5)
    assert "Linear(5, 6" in repr(ours.lin)


def test_lazy_sizes_pyg_refuses_are_refused():
    with pytest.raises(ArgumentError, match="does not support lazy initialization with `project=True`"):
        gnn.SAGEConv(-1, 3, project=True)
    for layer in (gnn.GCNConv, gnn.SAGEConv, gnn.GraphConv, gnn.GATConv, gnn.TransformerConv):
        with pytest.raises(ArgumentError, match="-1"):
            layer(0, 3)
        with pytest.raises(ArgumentError, match="-1"):
            layer(-2, 3)
    with pytest.raises(ArgumentError, match="in_channels"):
        gnn.GCNConv((4, 4), 3)  # GCNConv is not bipartite, in PyG either


# ------------------------------------------------------ MessagePassing options

ATTENTION = ("GATConv", "GATv2Conv", "TransformerConv")
#: Each layer from its module (PyG's or gnnc's), with the keyword arguments given.
MAKE = {
    "GCNConv": lambda m, **kw: m.GCNConv(5, 3, **kw),
    "SAGEConv": lambda m, **kw: m.SAGEConv(5, 3, **kw),
    "GraphConv": lambda m, **kw: m.GraphConv(5, 3, **kw),
    "GINConv": lambda m, **kw: m.GINConv(torch.nn.Linear(5, 3), **kw),
    "GINEConv": lambda m, **kw: m.GINEConv(torch.nn.Linear(5, 3), edge_dim=2, **kw),
    "APPNP": lambda m, **kw: m.APPNP(2, 0.1, **kw),
    "GATConv": lambda m, **kw: m.GATConv(5, 3, heads=2, **kw),
    "GATv2Conv": lambda m, **kw: m.GATv2Conv(5, 3, heads=2, **kw),
    "TransformerConv": lambda m, **kw: m.TransformerConv(5, 3, heads=2, **kw),
}
#: The layers whose aggregation is fixed (SAGEConv and GraphConv take `aggr` as their own).
FIXED_AGGR = [n for n in MAKE if n not in ("SAGEConv", "GraphConv")]


def _args(name: str) -> tuple:
    x, edge_index = _inputs(False)
    return (x, edge_index, features(edge_index.shape[1], 2, 5)) if name == "GINEConv" else (x, edge_index)


@pytest.mark.parametrize("name", list(MAKE))
def test_pyg_message_passing_defaults_spelt_out_change_nothing(name):
    given = {"flow": "source_to_target", "aggr_kwargs": None}
    if name not in ATTENTION:  # PyG's attention layers fix node_dim=0 themselves
        given["node_dim"] = -2
    # PyG: two passes over half the columns each (its layers with pairs of x fail at it); gnnc: one kernel
    given["decomposed_layers"] = 2 if name in ("GCNConv", "APPNP") else 1
    if name in FIXED_AGGR:
        given["aggr"] = "add"
    torch.manual_seed(0)
    pyg = MAKE[name](pyg_nn, **given)
    compare(pyg, MAKE[name](gnn, **given), _args(name))


@pytest.mark.parametrize("name", list(MAKE))
def test_message_passing_options_gnnc_cannot_compile_are_refused(name):
    make = MAKE[name]
    with pytest.raises(ArgumentError, match=r"flow='target_to_source' is not supported.*edge_index\.flip\(0\)"):
        make(gnn, flow="target_to_source")
    with pytest.raises(ArgumentError, match="flow must be one of"):
        make(gnn, flow="sideways")
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'colour'"):
        make(gnn, colour="blue")
    with pytest.raises(ArgumentError, match="aggr_kwargs are not supported"):
        make(gnn, aggr_kwargs={"learn": True})
    with pytest.raises(ArgumentError, match="decomposed_layers must be a positive integer"):
        make(gnn, decomposed_layers=0)
    if name in ATTENTION:
        with pytest.raises(ArgumentError, match="unexpected keyword argument 'node_dim'"):
            make(gnn, node_dim=0)  # PyG: a TypeError, node_dim given twice
    else:
        with pytest.raises(ArgumentError, match=r"node_dim=1 is not supported"):
            make(gnn, node_dim=1)
    if name in FIXED_AGGR:
        for aggr in ("mean", "max", ["sum", "max"], pyg_nn.aggr.MeanAggregation()):
            with pytest.raises(ArgumentError, match=r"aggr=.* is not supported by gnnc.nn.*'add'"):
                make(gnn, aggr=aggr)


@pytest.mark.parametrize("name", ["SAGEConv", "GraphConv"])
def test_aggregations_gnnc_cannot_compile_are_refused_naming_those_it_can(name):
    for aggr in ("lstm", "std", "softmax", ["mean", "max"], pyg_nn.aggr.MeanAggregation(), None):
        with pytest.raises(ArgumentError, match=r"is not supported by gnnc.nn; use one of 'sum', 'add', 'mean', 'max'"):
            MAKE[name](gnn, aggr=aggr)


# ------------------------------------------------- arguments beyond the oracle tests


@pytest.mark.parametrize("bias", [True, False])
def test_graph_conv_bias(bias):
    torch.manual_seed(0)
    pyg, ours = pyg_nn.GraphConv(5, 3, bias=bias), gnn.GraphConv(5, 3, bias=bias)
    assert (ours.lin_rel.bias is None) == (not bias)
    compare(pyg, ours, _inputs(False))


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1])
def test_appnp_alpha(alpha):
    compare(pyg_nn.APPNP(2, alpha), gnn.APPNP(2, alpha), _inputs(False))


def test_gin_nn_may_be_any_callable_and_resets_as_pyg():
    """PyG's `reset`: a module's own reset_parameters, else its children's, recursively."""

    class Resets(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(5, 3)
            self.calls = 0

        def reset_parameters(self):
            self.calls += 1

        def forward(self, x):
            return self.lin(x)

    nn_ = Resets()
    gnn.GINConv(nn_)
    assert nn_.calls == 1  # its own reset only: its Linear keeps its draws, as in PyG
    x, edge_index = _inputs(False)
    torch.manual_seed(0)
    compare(pyg_nn.GINConv(torch.tanh), gnn.GINConv(torch.tanh), (x, edge_index))


def test_bad_constructor_values_get_clear_errors():
    with pytest.raises(ArgumentError, match="alpha must be a number"):
        gnn.APPNP(2, "0.1")
    with pytest.raises(ArgumentError, match="dropout must be a probability"):
        gnn.APPNP(2, 0.1, dropout=2.0)
    with pytest.raises(ArgumentError, match="eps must be a number"):
        gnn.GINConv(torch.nn.Identity(), eps="0")
    with pytest.raises(ArgumentError, match="nn must be a module"):
        gnn.GINEConv(3)
    with pytest.raises(ArgumentError, match="negative_slope must be a finite number"):
        gnn.GATv2Conv(4, 4, negative_slope=True)


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv"])
def test_edge_attr_without_edge_dim_is_refused_not_dropped(name):
    """PyG's GAT layers ignore edge_attr without edge_dim; gnnc says so instead."""
    x, edge_index = _inputs(False)
    with pytest.raises(ArgumentError, match="edge_attr needs a layer built with edge_dim"):
        getattr(gnn, name)(5, 3)(x, edge_index, torch.randn(edge_index.shape[1], 2))
