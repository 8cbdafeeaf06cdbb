"""gnnc.nn's HGTConv and HeteroConv against PyG's: dictionaries of node and edge types in and out.

The same seed gives the same parameters (PyG's initialisation, draw for
draw), a PyG state_dict loads, and outputs and gradients (features, every
parameter) agree on random heterogeneous graphs: node types without
in-edges, edge types without edges, an edge type of the metadata missing
from the call, a node type of several edge types' destinations.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.nn_oracle import close, features

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402

#: HeteroConv warns (as PyG) when a source node type is no destination: intended here
pytestmark = pytest.mark.filterwarnings("ignore:There exist node types")

META = (["a", "b", "c"], [("a", "to", "b"), ("b", "to", "a"), ("a", "self", "a"), ("c", "to", "b")])
CHANNELS = {"a": 5, "b": 3, "c": 4}


@st.composite
def hetero_graphs(draw):
    """(x_dict, edge_index_dict): 1-8 nodes per type, 0-20 edges per edge type; ("c", "to", "b") left out
    of the call at times (a metadata edge type without a tensor)."""
    sizes = {t: draw(st.integers(1, 8)) for t in META[0]}
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    edges = {}
    for t in META[1]:
        if t == ("c", "to", "b") and draw(st.booleans()):
            continue
        count = draw(st.integers(0, 20))
        edges[t] = torch.stack(
            [torch.randint(0, sizes[t[0]], (count,), generator=g), torch.randint(0, sizes[t[2]], (count,), generator=g)]
        )
    x = {t: features(sizes[t], CHANNELS[t], seed + i) for i, t in enumerate(META[0])}
    return x, edges


def _compare_dicts(pyg, ours, x, edges, *extra, **named):
    ours.load_state_dict(pyg.state_dict())
    xa = {k: v.detach().clone().requires_grad_() for k, v in x.items()}
    xb = {k: v.detach().clone().requires_grad_() for k, v in x.items()}
    expected, got = pyg(xa, edges, *extra, **named), ours(xb, edges, *extra, **named)
    assert expected.keys() == got.keys()
    g = torch.Generator().manual_seed(3)
    weights = {k: torch.randn(v.shape, generator=g) for k, v in expected.items()}
    for k in expected:
        close(got[k], expected[k], f"output {k}")
    if not expected or not any(v.requires_grad for v in expected.values()):
        return
    sum((expected[k] * weights[k]).sum() for k in expected).backward()
    sum((got[k] * weights[k]).sum() for k in got).backward()
    for k in xa:
        a, b = xa[k].grad, xb[k].grad
        close(b if b is not None else torch.zeros_like(xb[k]), a if a is not None else torch.zeros_like(xa[k]), k)
    params = dict(ours.named_parameters())
    for name, p in pyg.named_parameters():
        q = params[name]
        gp = p.grad if p.grad is not None else torch.zeros_like(p)
        close(q.grad if q.grad is not None else torch.zeros_like(q), gp, f"gradient of {name}")


@given(graph=hetero_graphs(), heads=st.sampled_from([1, 2]))
def test_hgt_matches_pyg(graph, heads):
    x, edges = graph
    torch.manual_seed(0)
    pyg = pyg_nn.HGTConv(CHANNELS, 8, META, heads=heads)
    torch.manual_seed(0)
    ours = gnn.HGTConv(CHANNELS, 8, META, heads=heads)
    for (k1, v1), (k2, v2) in zip(pyg.state_dict().items(), ours.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2), f"{k1} / {k2}: initialised apart"
    _compare_dicts(pyg, ours, x, edges)


def test_hgt_lazy_and_one_width():
    """in_channels -1 sizes the projections by the first call; out == in gives the gated skip."""
    g = torch.Generator().manual_seed(1)
    x = {t: features(6, 8, i) for i, t in enumerate(META[0])}
    edges = {t: torch.randint(0, 6, (2, 12), generator=g) for t in META[1]}
    pyg, ours = pyg_nn.HGTConv(-1, 8, META, heads=2), gnn.HGTConv(-1, 8, META, heads=2)
    pyg(x, edges)
    ours(x, edges)
    _compare_dicts(pyg, ours, x, edges)


def _convs(module, aggr):
    return module.HeteroConv(
        {
            ("a", "to", "b"): module.SAGEConv((5, 3), 6),
            ("b", "to", "a"): module.GraphConv((3, 5), 6),
            ("a", "self", "a"): module.GCNConv(5, 6),
            ("c", "to", "b"): module.GATConv((4, 3), 6, add_self_loops=False, edge_dim=2),
        },
        aggr=aggr,
    )


@pytest.mark.parametrize("aggr", ["sum", "mean", "max", "min", "cat", None])
def test_hetero_conv_matches_pyg(aggr):
    g = torch.Generator().manual_seed(2)
    sizes = {"a": 7, "b": 5, "c": 4}
    x = {t: features(sizes[t], CHANNELS[t], i) for i, t in enumerate(META[0])}
    edges = {
        t: torch.stack(
            [torch.randint(0, sizes[t[0]], (15,), generator=g), torch.randint(0, sizes[t[2]], (15,), generator=g)]
        )
        for t in META[1]
    }
    edge_attr = {("c", "to", "b"): features(15, 2, 9)}
    torch.manual_seed(0)
    pyg = _convs(pyg_nn, aggr)
    torch.manual_seed(0)
    ours = _convs(gnn, aggr)
    assert list(pyg.state_dict()) == list(ours.state_dict())
    _compare_dicts(pyg, ours, x, edges, edge_attr_dict=edge_attr)


def test_hetero_conv_of_relational_layers():
    """gnnc's relational layers inside, per-edge-type arguments by keyword."""
    g = torch.Generator().manual_seed(4)
    x = {"a": features(6, 4, 0), "b": features(5, 4, 1)}
    edges = {
        ("a", "to", "b"): torch.stack(
            [torch.randint(0, 6, (20,), generator=g), torch.randint(0, 5, (20,), generator=g)]
        )
    }
    types = {("a", "to", "b"): torch.randint(0, 3, (20,), generator=g)}
    torch.manual_seed(0)
    pyg = pyg_nn.HeteroConv({("a", "to", "b"): pyg_nn.RGCNConv((4, 4), 3, 3)})
    torch.manual_seed(0)
    ours = gnn.HeteroConv({("a", "to", "b"): gnn.RGCNConv((4, 4), 3, 3)})
    _compare_dicts(pyg, ours, x, edges, types)


def test_bad_arguments():
    with pytest.raises(ArgumentError, match="must be divisible by the number of heads"):
        gnn.HGTConv(4, 6, META, heads=4)
    with pytest.raises(ArgumentError, match="metadata must be"):
        gnn.HGTConv(4, 6, ["a"])
    with pytest.raises(ArgumentError, match="add_self_loops"):
        gnn.HeteroConv({("a", "to", "b"): gnn.GCNConv(4, 4)})
    with pytest.raises(ArgumentError, match="aggr must be"):
        gnn.HeteroConv({("a", "to", "a"): gnn.GCNConv(4, 4)}, aggr="median_of_means")
    conv = gnn.HeteroConv({("a", "to", "a"): gnn.GCNConv(4, 4)})
    with pytest.raises(ArgumentError, match="need to end with '_dict'"):
        conv({"a": torch.randn(2, 4)}, {("a", "to", "a"): torch.tensor([[0], [1]])}, edge_weight=None)
    hgt = gnn.HGTConv(4, 4, META)
    with pytest.raises(ArgumentError, match="which x_dict lacks"):
        hgt({"a": torch.randn(3, 4)}, {("a", "to", "b"): torch.tensor([[0], [1]])})


class _RelationalNet(torch.nn.Module):
    def __init__(self, module=gnn):
        super().__init__()
        self.rgcn = module.RGCNConv(4, 6, 3, num_blocks=2)
        self.rgat = module.RGATConv(6, 3, 3, heads=2, dropout=0.3)
        self.rgcn_max = module.RGCNConv(6, 6, 3, aggr="max")

    def forward(self, x, edge_index, edge_type, pairs=True):
        h = self.rgcn(x, edge_index, edge_type).relu()
        out = self.rgat(h, edge_index, edge_type)
        return out + self.rgcn_max(h, edge_index, edge_type) if pairs else out


def test_relational_layers_under_torch_compile():
    """fullgraph where no shape depends on the data; the pairs' graph (aggr="max", within-relation
    attention) is a graph break, as PyG's masks per relation are."""
    torch.manual_seed(0)
    model = _RelationalNet().train()
    g = torch.Generator().manual_seed(1)
    x, edge_index, edge_type = features(9, 4, 0), torch.randint(0, 9, (2, 30), generator=g), torch.randint(0, 3, (30,))
    for fullgraph, pairs in ((True, False), (False, True)):
        compiled = torch.compile(model, fullgraph=fullgraph, backend="aot_eager")
        torch.manual_seed(5)
        eager = model(x, edge_index, edge_type, pairs)
        torch.manual_seed(5)
        got = compiled(x, edge_index, edge_type, pairs)
        close(got, eager, f"compiled (fullgraph={fullgraph})")
        grads = torch.autograd.grad(got.sum(), [x, *model.parameters()], allow_unused=True)
        torch.manual_seed(5)
        expected = torch.autograd.grad(
            model(x, edge_index, edge_type, pairs).sum(), [x, *model.parameters()], allow_unused=True
        )
        for a, b in zip(grads, expected):
            if b is not None:
                close(a, b, "gradient")
    hgt = gnn.HGTConv({"a": 4, "b": 3}, 4, (["a", "b"], [("a", "to", "b"), ("b", "to", "a")]), heads=2)
    x_dict = {"a": features(5, 4, 1), "b": features(4, 3, 2)}
    edges = {
        ("a", "to", "b"): torch.tensor([[0, 1, 4, 2], [0, 3, 3, 1]]),
        ("b", "to", "a"): torch.tensor([[3, 2], [0, 4]]),
    }
    got, expected = torch.compile(hgt, fullgraph=True, backend="aot_eager")(x_dict, edges), hgt(x_dict, edges)
    for key in expected:
        close(got[key], expected[key], f"HGTConv {key}")


def test_layers_copy_pickle_and_list_their_kernels():
    import copy
    import io
    import pickle

    from gnnc.nn.precompile import kernels_of

    layers = [
        gnn.RGCNConv(4, 3, 2, aggr="max"),
        gnn.RGATConv(4, 3, 2, dropout=0.2, edge_dim=2),
        gnn.HGTConv(4, 4, META, heads=2),
        gnn.HeteroConv({("a", "to", "b"): gnn.SAGEConv((4, 4), 3), ("b", "to", "a"): gnn.RGCNConv(4, 3, 2)}),
    ]
    for layer in layers:
        for other in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
            assert list(other.state_dict()) == list(layer.state_dict())
        torch.save(layer, io.BytesIO())
        assert kernels_of(layer)
    assert len(kernels_of(layers[1])) == 8  # edge features, dropout mask, weights returned: each with or without


# ----------------------------------------------------------------------------- to_hetero

#: every node type a destination (PyG's to_hetero needs each type updated by every layer)
META_UPDATED = (["a", "b"], [("a", "to", "b"), ("b", "to", "a"), ("a", "self", "a")])


class _HomogeneousNet(torch.nn.Module):
    """A PyG-tutorial model: two message passing layers around a node-level Linear."""

    def __init__(self, module, layer: str) -> None:
        super().__init__()
        if layer == "GATConv":
            make = lambda c: module.GATConv((-1, -1), c, heads=2, add_self_loops=False)  # noqa: E731
        else:
            make = lambda c: getattr(module, layer)((-1, -1), c)  # noqa: E731
        self.conv1 = make(6)
        self.lin = pyg_nn.Linear(-1, 4)
        self.conv2 = make(3)

    def forward(self, x, edge_index):
        h = self.conv1(x, edge_index).relu()
        return self.conv2(self.lin(h), edge_index)


@st.composite
def _updated_graphs(draw):
    """(x_dict, edge_index_dict) over META_UPDATED: 1-8 nodes per type, 0-20 edges per edge type."""
    sizes = {t: draw(st.integers(1, 8)) for t in META_UPDATED[0]}
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    edges = {}
    for t in META_UPDATED[1]:
        count = draw(st.integers(0, 20))
        edges[t] = torch.stack(
            [torch.randint(0, sizes[t[0]], (count,), generator=g), torch.randint(0, sizes[t[2]], (count,), generator=g)]
        )
    return {t: features(sizes[t], CHANNELS[t], seed + i) for i, t in enumerate(META_UPDATED[0])}, edges


def _hetero_pair(layer: str, aggr: str, x, edges):
    """(PyG's to_hetero model, gnnc's), lazy parameters made by a first call, PyG's weights loaded."""
    torch.manual_seed(0)
    pyg = pyg_nn.to_hetero(_HomogeneousNet(pyg_nn, layer), META_UPDATED, aggr=aggr)
    torch.manual_seed(0)
    ours = gnn.to_hetero(_HomogeneousNet(gnn, layer), META_UPDATED, aggr=aggr)
    pyg(x, edges), ours(x, edges)
    assert list(pyg.state_dict()) == list(ours.state_dict())
    return pyg, ours


@given(graph=_updated_graphs(), layer=st.sampled_from(["SAGEConv", "GraphConv", "GATConv"]))
def test_to_hetero_matches_pyg(graph, layer):
    """gnnc's layers in PyG's to_hetero: a copy per edge type, the edge types summed per destination."""
    x, edges = graph
    _compare_dicts(*_hetero_pair(layer, "sum", x, edges), x, edges)


@pytest.mark.parametrize("aggr", ["mean", "max", "min", "mul"])
def test_to_hetero_aggregations(aggr):
    g = torch.Generator().manual_seed(5)
    sizes = {"a": 7, "b": 6}
    x = {t: features(sizes[t], CHANNELS[t], i) for i, t in enumerate(META_UPDATED[0])}
    edges = {
        t: torch.stack(
            [torch.randint(0, sizes[t[0]], (18,), generator=g), torch.randint(0, sizes[t[2]], (18,), generator=g)]
        )
        for t in META_UPDATED[1]
    }
    pyg, ours = _hetero_pair("SAGEConv", aggr, x, edges)
    _compare_dicts(pyg, ours, x, edges)


def test_to_hetero_structure_copies_and_compiles():
    """Each edge type's layer is a gnnc layer of its own; the model deep-copies, pickles and compiles."""
    import copy
    import io

    import torch_geometric.nn.fx as pyg_fx

    check = pyg_fx.is_message_passing_op
    x = {"a": features(6, 5, 0, grad=False), "b": features(4, 3, 1, grad=False)}
    edges = {
        ("a", "to", "b"): torch.tensor([[0, 1, 5, 2], [0, 3, 3, 1]]),
        ("b", "to", "a"): torch.tensor([[3, 2, 0], [0, 4, 5]]),
        ("a", "self", "a"): torch.tensor([[1, 2], [2, 1]]),
    }
    torch.manual_seed(0)
    model = gnn.to_hetero(_HomogeneousNet(gnn, "SAGEConv"), META_UPDATED)
    assert pyg_fx.is_message_passing_op is check  # PyG's function is back
    assert sorted(model.conv1.keys()) == ["a__self__a", "a__to__b", "b__to__a"]
    assert all(isinstance(m, gnn.SAGEConv) for m in model.conv1.values())
    assert sorted(model.lin.keys()) == ["a", "b"]  # node-level: a copy per node type
    expected = model(x, edges)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(model), torch.load(buffer, weights_only=False)):
        got = other(x, edges)
        for key in expected:
            close(got[key], expected[key], f"copy {key}")
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x, edges)
    for key in expected:
        close(compiled[key], expected[key], f"compiled {key}")


class _OneLayer(torch.nn.Module):
    def __init__(self, conv) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


def test_to_hetero_errors_and_restores_pyg():
    import sys
    from unittest.mock import patch

    import torch_geometric.nn.fx as pyg_fx

    check = pyg_fx.is_message_passing_op
    # a node type no edge type points to: PyG's own error, from inside the transform
    partial = (["a", "b", "c"], [("a", "to", "b"), ("b", "to", "a"), ("c", "to", "b")])
    with pytest.warns(UserWarning, match="There exist node types"), pytest.raises(ValueError, match="Cannot generate"):
        gnn.to_hetero(_HomogeneousNet(gnn, "SAGEConv"), partial)
    assert pyg_fx.is_message_passing_op is check
    # self loops on a bipartite edge type: PyG's check reads gnnc's layer as its own
    with pytest.raises(ValueError, match="add_self_loops"):
        gnn.to_hetero(_OneLayer(gnn.GATConv((-1, -1), 3)), META_UPDATED)
    with patch.dict(sys.modules, {"torch_geometric.nn.to_hetero_transformer": None}):
        with pytest.raises(ImportError, match="install torch-geometric"):
            gnn.to_hetero(_HomogeneousNet(gnn, "SAGEConv"), META_UPDATED)
