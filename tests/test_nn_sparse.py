"""gnnc.nn's layers on sparse adjacencies (torch.sparse and PyG's SparseTensor) against PyG's.

PyG treats the forms differently in places, and gnnc follows each:
- its `spmm` layers (SAGEConv, GINConv) weigh the sum by a torch.sparse
  adjacency's values but drop a SparseTensor's (`set_value(None)`);
- `gcn_norm` appends a loop to a torch.sparse adjacency's own but replaces a
  SparseTensor's (`fill_diag`), weights and all;
- `propagate` passes a SparseTensor's values as `edge_attr` when none is given;
- the attention layers and APPNP draw dropout over a rebuilt sparse
  adjacency's entries in row-major order, loops merged in;
- a SparseTensor's attention weights come back as a SparseTensor.

torch_sparse is not installable here: `tests/sparse_tensor.py` stands in for
its SparseTensor, and PyG's own SparseTensor code paths run on the stand-in.
"""

from __future__ import annotations

import pytest
import torch

from tests.nn_oracle import close, compare, features

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402
from tests.sparse_tensor import patch_pyg, pyg_sparse_tensor  # noqa: E402
from tests.test_nn_attention import Seeded, pair  # noqa: E402

N = 8


@pytest.fixture(autouse=True)
def _torch_sparse(monkeypatch):
    patch_pyg(monkeypatch)


def _graph() -> tuple[torch.Tensor, torch.Tensor]:
    """An edge_index with two self loops and a duplicate edge, and positive weights."""
    g = torch.Generator().manual_seed(0)
    edge_index = torch.cat(
        [torch.randint(0, N, (2, 30), generator=g), torch.tensor([[2, 5, 1, 1], [2, 5, 4, 4]])], dim=1
    )
    return edge_index, torch.rand(edge_index.shape[1], generator=g) + 0.5


def sparse_tensor(edge_index: torch.Tensor, value: torch.Tensor | None = None, sizes=(N, N)):
    """PyG's adj_t ([num_dst, num_src]) of an edge_index, as a SparseTensor."""
    return pyg_sparse_tensor()(row=edge_index[1], col=edge_index[0], value=value, sparse_sizes=(sizes[1], sizes[0]))


def torch_sparse_csr(edge_index: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    return torch.sparse_coo_tensor(edge_index.flip(0), value, (N, N)).coalesce().to_sparse_csr()


def _mlp(i, o):
    return torch.nn.Sequential(torch.nn.Linear(i, 6), torch.nn.ReLU(), torch.nn.Linear(6, o))


def layers(name: str, *args, **kwargs):
    """PyG's layer and gnnc's; GIN layers get an MLP each (`mlp=(in, out)`)."""
    torch.manual_seed(0)
    mlp = kwargs.pop("mlp", None)
    make = (lambda: (_mlp(*mlp), *args)) if mlp else (lambda: args)
    return getattr(pyg_nn, name)(*make(), **kwargs), getattr(gnn, name)(*make(), **kwargs)


CASES = [
    ("GCNConv", (4, 3), {}),
    ("GCNConv", (4, 3), {"improved": True}),
    ("GCNConv", (4, 3), {"normalize": False}),
    ("SAGEConv", (4, 3), {}),
    ("SAGEConv", (4, 3), {"aggr": "max"}),
    ("GraphConv", (4, 3), {"aggr": "mean"}),
    ("GINConv", (), {"mlp": (4, 3)}),
    ("APPNP", (2, 0.1), {}),
    ("GATConv", (4, 3), {"heads": 2}),
    ("GATv2Conv", (4, 3), {"heads": 2}),
    ("TransformerConv", (4, 3), {"heads": 2}),
]


@pytest.mark.parametrize("name,args,kwargs", CASES, ids=[f"{c[0]}-{'-'.join(map(str, c[2].values()))}" for c in CASES])
@pytest.mark.parametrize("form", ["SparseTensor", "SparseTensor without values", "torch.sparse"])
def test_layers_on_sparse_adjacencies_match_pyg(name, args, kwargs, form):
    edge_index, weight = _graph()
    if form == "torch.sparse":
        adj = torch_sparse_csr(edge_index, weight)
    else:
        adj = sparse_tensor(edge_index, weight if form == "SparseTensor" else None)
    compare(*layers(name, *args, **kwargs), (features(N, 4, 1), adj))


def test_sparse_tensor_values_are_edge_features_as_pyg():
    """PyG's propagate passes a SparseTensor's values as edge_attr when none is given."""
    edge_index, _ = _graph()
    attr = features(edge_index.shape[1], 5, 3, grad=False)
    adj = sparse_tensor(edge_index, attr)
    compare(*layers("GINEConv", mlp=(5, 3)), (features(N, 5, 1), adj))
    compare(*layers("GINEConv", mlp=(4, 3), edge_dim=5), (features(N, 4, 1), adj))
    compare(*layers("TransformerConv", 4, 3, heads=2, edge_dim=5), (features(N, 4, 1), adj))
    compare(*layers("GATConv", 4, 3, heads=2, edge_dim=5, add_self_loops=False), (features(N, 4, 1), adj))


@pytest.mark.parametrize("name", ["GATConv", "GATv2Conv", "TransformerConv"])
def test_attention_weights_of_a_sparse_tensor_come_back_as_one(name):
    edge_index, weight = _graph()
    adj = sparse_tensor(edge_index, weight)
    pyg, ours = pair(name, 4, 3, heads=2)
    expected, got = compare(pyg, ours, (features(N, 4, 1), adj), {"return_attention_weights": True})
    e_adj, g_adj = expected[1], got[1]
    assert type(g_adj) is type(adj) and g_adj.sparse_sizes() == e_adj.sparse_sizes()
    (e_row, e_col, e_alpha), (g_row, g_col, g_alpha) = e_adj.coo(), g_adj.coo()
    assert torch.equal(g_row, e_row) and torch.equal(g_col, e_col)
    close(g_alpha, e_alpha, "attention weights")


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_gat_weights_of_a_torch_sparse_adjacency_come_back_in_its_layout(layout):
    edge_index, weight = _graph()
    adj = torch_sparse_csr(edge_index, weight)
    adj = adj if layout == torch.sparse_csr else adj.to_sparse_coo().coalesce()
    pyg, ours = pair("GATConv", 4, 3, heads=2)
    expected, got = compare(pyg, ours, (features(N, 4, 1), adj), {"return_attention_weights": True})
    (e_adj, e_alpha), (g_adj, g_alpha) = expected[1], got[1]
    assert g_adj.layout == e_adj.layout == layout
    close(g_alpha, e_alpha, "attention weights")
    close(g_adj.to_dense(), e_adj.to_dense(), "weights as the adjacency's values")


@pytest.mark.parametrize("name", ["GATConv", "APPNP"])
@pytest.mark.parametrize("form", ["SparseTensor", "torch.sparse", "edge_index"])
@pytest.mark.parametrize("own_loops", [True, False])
def test_dropout_on_each_form_draws_as_pyg(name, form, own_loops):
    """Dropout drawn over PyG's entries in PyG's order (a rebuilt sparse adjacency: row-major).

    gnnc draws E + loops rows (a fixed shape), PyG the entries left after the
    graph's own loops go: the first rows are PyG's, so one draw's masks are
    PyG's, and later draws are too when the graph has no loops of its own.
    """
    edge_index, weight = _graph()
    steps = 1
    if not own_loops:
        keep = edge_index[0] != edge_index[1]
        edge_index, weight = edge_index[:, keep], weight[keep]
        pairs = (edge_index[1] * N + edge_index[0]).tolist()
        first = [pairs.index(p) for p in sorted(set(pairs))]  # no duplicate entries either
        edge_index, weight = edge_index[:, first], weight[first]
        steps = 3
    adj = {
        "SparseTensor": lambda: sparse_tensor(edge_index, weight),
        "torch.sparse": lambda: torch_sparse_csr(edge_index, weight),
        "edge_index": lambda: edge_index,
    }[form]()
    if name == "GATConv":
        pyg, ours = pair("GATConv", 4, 3, heads=2, dropout=0.5)
    else:
        pyg, ours = pyg_nn.APPNP(steps, 0.1, dropout=0.5), gnn.APPNP(steps, 0.1, dropout=0.5)
    compare(Seeded(pyg, 3).train(), Seeded(ours, 3).train(), (features(N, 4, 1), adj))


def test_edge_weight_beside_a_sparse_adjacency_is_refused():
    """PyG ignores edge_weight with a sparse adjacency (its values are the weights): gnnc says so."""
    edge_index, weight = _graph()
    for adj in (sparse_tensor(edge_index, weight), torch_sparse_csr(edge_index, weight)):
        for layer in (gnn.GCNConv(4, 3), gnn.GraphConv(4, 3), gnn.APPNP(1, 0.1)):
            with pytest.raises(ArgumentError, match="edge_weight was given with a sparse adjacency"):
                layer(features(N, 4, 1), adj, weight)


def test_a_sparse_tensor_edge_list_is_made_once():
    edge_index, weight = _graph()
    adj = sparse_tensor(edge_index, weight)
    from gnnc.nn import inputs

    first, second = inputs.adjacency(adj), inputs.adjacency(adj)
    assert first.edge_index is second.edge_index  # cached: one gnnc graph per SparseTensor
    assert torch.equal(first.edge_index, torch.stack([adj.coo()[1], adj.coo()[0]]))
    assert first.size == (N, N) and first.sparse_tensor
