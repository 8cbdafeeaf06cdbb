"""PyG's layers as the oracle of gnnc.nn's: same state_dict, same outputs, same gradients.

`compare(pyg_layer, gnnc_layer, args, kwargs)` loads the PyG layer's
state_dict into the gnnc layer, runs both on copies of the inputs, backpropagates
the same random weighting of the outputs, and checks outputs, the
gradients of every floating input that requires one, and every parameter's
gradient, within float32 tolerance scaled by the values' magnitude.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import strategies as st

torch_geometric = pytest.importorskip("torch_geometric")

from tests.strategies import edge_lists  # noqa: E402


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.layout == torch.strided:
            return value.detach().clone().requires_grad_(value.requires_grad)
        return value
    if isinstance(value, tuple):
        return tuple(_clone(v) for v in value)
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


def _leaves(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if value.requires_grad else []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _leaves(v)]
    return []


def close(a: torch.Tensor, b: torch.Tensor, what: str, rtol: float = 2e-4) -> None:
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    a64, b64 = a.detach().double(), b.detach().double()
    nan = torch.isnan(a64)
    assert torch.equal(nan, torch.isnan(b64)), f"{what}: NaNs differ"
    scale = max(1.0, float(b64[~nan].abs().max())) if (~nan).any() else 1.0
    err = float((a64 - b64)[~nan].abs().max()) if (~nan).any() else 0.0
    assert err <= rtol * scale, f"{what}: max |gnnc - pyg| = {err:.3g} (scale {scale:.3g})"


def compare(
    pyg: torch.nn.Module,
    ours: torch.nn.Module,
    args: tuple,
    kwargs: dict | None = None,
    grads: bool = True,
    rtol: float = 2e-4,
) -> tuple[Any, Any]:
    """Outputs (and gradients) of `ours` equal `pyg`'s on the same inputs; returns both outputs."""
    kwargs = kwargs or {}
    ours.load_state_dict(pyg.state_dict())
    a_args, a_kwargs = _clone(args), _clone(kwargs)
    b_args, b_kwargs = _clone(args), _clone(kwargs)
    expected = pyg(*a_args, **a_kwargs)
    got = ours(*b_args, **b_kwargs)
    exp_t = expected[0] if isinstance(expected, tuple) else expected
    got_t = got[0] if isinstance(got, tuple) else got
    close(got_t, exp_t, "output", rtol)
    if not grads or not exp_t.requires_grad:
        return expected, got
    weight = torch.randn(exp_t.shape, dtype=exp_t.dtype, generator=torch.Generator().manual_seed(7))
    (exp_t * weight).sum().backward()
    (got_t * weight).sum().backward()
    for i, (ta, tb) in enumerate(zip(_leaves((a_args, a_kwargs)), _leaves((b_args, b_kwargs)))):
        close(
            tb.grad if tb.grad is not None else torch.zeros_like(tb),
            ta.grad if ta.grad is not None else torch.zeros_like(ta),
            f"input gradient {i}",
            rtol,
        )
    ours_params = dict(ours.named_parameters())
    for name, p in pyg.named_parameters():
        q = ours_params[name]
        gp = p.grad if p.grad is not None else torch.zeros_like(p)
        gq = q.grad if q.grad is not None else torch.zeros_like(q)
        close(gq, gp, f"gradient of {name}", rtol)
    return expected, got


@st.composite
def pyg_graphs(draw, max_vertices: int = 30, max_edges: int = 120, loops: bool = True, duplicates: bool = True):
    """(edge_index, num_vertices): hypothesis graphs of tests.strategies as PyG tensors.

    Empty graphs, isolated vertices, self loops, duplicate edges, a hub;
    `loops=False` / `duplicates=False` remove those (ties in max and min
    aggregations split gradients differently: gnnc gives them to the
    lowest edge id, torch's scatter divides them).
    """
    src, dst, v = draw(edge_lists(max_vertices=max_vertices, max_edges=max_edges))
    v = max(v, 1)
    if not loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    if not duplicates and src.size:
        _, first = np.unique(src * v + dst, return_index=True)
        first.sort()
        src, dst = src[first], dst[first]
    return torch.from_numpy(np.stack([src, dst]).astype(np.int64)), v


def one_loop_per_vertex(edge_index: torch.Tensor) -> torch.Tensor:
    """edge_index without a vertex's second and later self loops."""
    src, dst = edge_index
    seen, keep = set(), []
    for a, b in zip(src.tolist(), dst.tolist()):
        keep.append(a != b or a not in seen)
        if a == b:
            seen.add(a)
    return edge_index[:, torch.tensor(keep, dtype=torch.bool)]


def bipartite(num_src: int, num_dst: int, num_edges: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack(
        [torch.randint(0, num_src, (num_edges,), generator=g), torch.randint(0, num_dst, (num_edges,), generator=g)]
    )


def small_graph(n: int = 8) -> torch.Tensor:
    """An edge_index with two self loops, a duplicate edge and an isolated vertex (n - 1)."""
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.randint(0, n - 1, (2, 24), generator=g), torch.tensor([[2, 5, 1, 1], [2, 5, 4, 4]])], 1)


def features(rows: int, cols: int, seed: int, grad: bool = True) -> torch.Tensor:
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)).requires_grad_(grad)


def same_start(name: str, *args: Any, lazy: bool = False, **kwargs: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(PyG's layer `name`, gnnc.nn's) built from one seed: the same state_dict keys and, but for a
    lazy layer, the same values (PyG's initialisation, draw for draw)."""
    import torch_geometric.nn as pyg_nn

    import gnnc.nn as gnn

    torch.manual_seed(0)
    pyg = getattr(pyg_nn, name)(*args, **kwargs)
    torch.manual_seed(0)
    ours = getattr(gnn, name)(*args, **kwargs)
    assert list(pyg.state_dict()) == list(ours.state_dict())
    for key, value in [] if lazy else pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    return pyg, ours


class Seeded(torch.nn.Module):
    """A layer whose every call starts from one torch seed, so PyG's dropout and gnnc's draw alike."""

    def __init__(self, layer: torch.nn.Module, seed: int):
        super().__init__()
        self.layer, self.seed = layer, seed

    def forward(self, *args, **kwargs):
        torch.manual_seed(self.seed)
        return self.layer(*args, **kwargs)


def edge_weights(edge_index: torch.Tensor, seed: int) -> torch.Tensor:
    """Positive edge weights (in [0.1, 1.1)) that need a gradient."""
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(edge_index.shape[1], generator=g) + 0.1).requires_grad_()


# ------------------------------------------------------------------ every layer


def _mlp(i: int, o: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(i, 6), torch.nn.ReLU(), torch.nn.Linear(6, o))


class _Initial(torch.nn.Module):
    """GCN2Conv with the layer's input as its initial features."""

    def __init__(self, conv) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return self.conv(x, x, edge_index)


class _Points(torch.nn.Module):
    """PointNetConv with the features' first 3 columns as positions."""

    def __init__(self, conv) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return self.conv(x, x[:, :3], edge_index)


class _Hyperedges(torch.nn.Module):
    """HypergraphConv on the edge_index as (vertex, hyperedge) incidences, x as the hyperedges'
    features; num_edges given (a traced call needs it, as PyG's)."""

    def __init__(self, conv) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return self.conv(x, edge_index, hyperedge_attr=x, num_edges=x.shape[0])


class _PointsNormals(torch.nn.Module):
    """PPFConv with the features' columns 0-2 as positions and 2-4 as normals."""

    def __init__(self, conv) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return self.conv(x, x[:, :3], x[:, 2:5], edge_index)


class _Signed(torch.nn.Module):
    """SignedConv with the reversed edges as the negative graph."""

    def __init__(self, conv) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return self.conv(x, edge_index, edge_index.flip(0))


class _History(torch.nn.Module):
    """DNAConv on a history of two layers: the features and their tanh."""

    def __init__(self, conv) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return self.conv(torch.stack([x, x.tanh()], 1), edge_index)


#: (layer, constructor arguments, extra forward arguments): every layer gnnc.nn has
LAYERS = [
    ("GCNConv", lambda m: m.GCNConv(5, 4), {}),
    ("SAGEConv", lambda m: m.SAGEConv(5, 4), {}),
    ("SAGEConv-max", lambda m: m.SAGEConv(5, 4, aggr="max"), {}),
    ("GraphConv", lambda m: m.GraphConv(5, 4), {}),
    ("GINConv", lambda m: m.GINConv(_mlp(5, 4), train_eps=True), {}),
    ("GINEConv", lambda m: m.GINEConv(_mlp(5, 4), edge_dim=2), {"edge_attr": 2}),
    ("GATConv", lambda m: m.GATConv(5, 3, heads=2), {}),
    ("GATv2Conv", lambda m: m.GATv2Conv(5, 3, heads=2, edge_dim=2), {"edge_attr": 2}),
    ("TransformerConv", lambda m: m.TransformerConv(5, 3, heads=2), {}),
    ("AGNNConv", lambda m: torch.nn.Sequential(torch.nn.Linear(5, 4), m.AGNNConv()), {}),
    ("APPNP", lambda m: torch.nn.Sequential(torch.nn.Linear(5, 4), m.APPNP(3, 0.1)), {}),
    ("SGConv", lambda m: m.SGConv(5, 4, K=2), {}),
    ("SSGConv", lambda m: m.SSGConv(5, 4, 0.2, K=2), {}),
    ("ClusterGCNConv", lambda m: m.ClusterGCNConv(5, 4, diag_lambda=0.1), {}),
    ("TAGConv", lambda m: m.TAGConv(5, 4, K=2), {}),
    ("GCN2Conv", lambda m: _Initial(m.GCN2Conv(5, 0.1, shared_weights=False)), {}),
    ("LEConv", lambda m: m.LEConv(5, 4), {}),
    ("MFConv", lambda m: m.MFConv(5, 4, max_degree=3), {}),
    ("GENConv", lambda m: m.GENConv(5, 4, learn_t=True, edge_dim=2, msg_norm=True), {"edge_attr": 2}),
    ("CGConv", lambda m: m.CGConv(5, dim=2), {"edge_attr": 2}),
    ("ChebConv", lambda m: m.ChebConv(5, 4, 3), {}),
    ("GatedGraphConv", lambda m: m.GatedGraphConv(5, 2), {}),
    ("ResGatedGraphConv", lambda m: m.ResGatedGraphConv(5, 4, edge_dim=2), {"edge_attr": 2}),
    ("GeneralConv", lambda m: m.GeneralConv(5, 4, 2, heads=2, attention=True), {"edge_attr": 2}),
    ("LGConv", lambda m: torch.nn.Sequential(torch.nn.Linear(5, 4), m.LGConv()), {}),
    ("SimpleConv", lambda m: m.SimpleConv("mean", combine_root="sum"), {}),
    ("SimpleConv-self_loop", lambda m: m.SimpleConv("max", combine_root="self_loop"), {}),
    ("FAConv", lambda m: _Initial(m.FAConv(5)), {}),
    ("FiLMConv", lambda m: m.FiLMConv(5, 4, num_relations=3), {"edge_type": 3}),
    # (not max: under autocast PyG's bfloat16 messages on [E, 2F] and gnnc's split products round
    # apart, and a max then picks other edges for the gradient; tests/test_nn_edge_mlp.py has max)
    ("EdgeConv", lambda m: m.EdgeConv(_mlp(10, 4), aggr="add"), {}),
    ("EdgeConv-linear", lambda m: m.EdgeConv(torch.nn.Linear(10, 4), aggr="mean"), {}),
    ("PointNetConv", lambda m: _Points(m.PointNetConv(_mlp(8, 4), torch.nn.Linear(4, 4))), {}),
    ("FeaStConv", lambda m: m.FeaStConv(5, 4, heads=2), {}),
    (
        "PNAConv",
        lambda m: m.PNAConv(
            5,
            4,
            ["mean", "min", "max", "std"],
            ["identity", "amplification", "attenuation"],
            torch.tensor([0, 2, 3, 1]),
            edge_dim=2,
            towers=2,
        ),
        {"edge_attr": 2},
    ),
    (
        "PNAConv-deep",
        lambda m: m.PNAConv(
            5,
            4,
            ["sum", "var", "max"],
            ["linear", "inverse_linear"],
            torch.tensor([0, 2, 3, 1]),
            pre_layers=2,
            post_layers=2,
        ),
        {},
    ),
    ("NNConv", lambda m: m.NNConv(5, 4, _mlp(2, 20), aggr="mean"), {"edge_attr": 2}),
    ("GMMConv", lambda m: m.GMMConv(5, 4, dim=2, kernel_size=3), {"edge_attr": 2}),
    (
        "GMMConv-separate",
        lambda m: m.GMMConv(5, 4, dim=2, kernel_size=2, separate_gaussians=True, aggr="max"),
        {"edge_attr": 2},
    ),
    ("PDNConv", lambda m: m.PDNConv(5, 4, edge_dim=2, hidden_channels=6), {"edge_attr": 2}),
    ("ARMAConv", lambda m: m.ARMAConv(5, 4, num_stacks=2, num_layers=2), {}),
    ("MixHopConv", lambda m: m.MixHopConv(5, 2), {}),
    ("DirGNNConv", lambda m: m.DirGNNConv(m.GCNConv(5, 4)), {}),
    ("AntiSymmetricConv", lambda m: m.AntiSymmetricConv(5, num_iters=2), {}),
    ("SuperGATConv", lambda m: m.SuperGATConv(5, 3, heads=2), {}),
    ("SuperGATConv-SD", lambda m: m.SuperGATConv(5, 3, heads=2, attention_type="SD", add_self_loops=False), {}),
    # (no max/min: under autocast, bfloat16 bases tie and the gradients go to other edges, as EdgeConv's)
    ("EGConv", lambda m: m.EGConv(5, 4, ["symnorm", "mean", "std"], num_heads=2, num_bases=2), {}),
    ("HypergraphConv", lambda m: _Hyperedges(m.HypergraphConv(5, 4, use_attention=True, heads=2)), {}),
    ("PointTransformerConv", lambda m: _Points(m.PointTransformerConv(5, 4)), {}),
    (
        "PointTransformerConv-attn",
        lambda m: _Points(m.PointTransformerConv(5, 4, _mlp(3, 4), _mlp(4, 4), aggr="max")),
        {},
    ),
    ("PPFConv", lambda m: _PointsNormals(m.PPFConv(_mlp(9, 4), torch.nn.Linear(4, 4))), {}),
    ("SignedConv", lambda m: _Signed(m.SignedConv(5, 4, first_aggr=True)), {}),
    # (no dropout: the every-layer and autocast tests run PyG's and gnnc's one after the other, without
    # one seed; tests/test_nn_point_signed_dna.py draws DNAConv's dropout as PyG's)
    ("DNAConv", lambda m: _History(m.DNAConv(5, heads=1)), {}),
    ("RGCNConv", lambda m: m.RGCNConv(5, 4, 3), {"edge_type": 3}),
    ("RGATConv", lambda m: m.RGATConv(5, 4, 3), {"edge_type": 3}),
]


#: Layers whose forward has a shape that depends on the data (PyG's too): a graph break under
#: torch.compile, so they compile without fullgraph
GRAPH_BREAKS = {"MFConv"}


class Preceded(torch.nn.Module):
    """A Linear before the layer (under autocast the layer then gets bfloat16 features); APPNP,
    AGNNConv and GCN2Conv as `LAYERS` wraps them."""

    def __init__(self, module, make) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(5, 5)
        self.conv = make(module)

    def forward(self, x, edge_index, **extra):
        h = self.lin(x).relu()
        if isinstance(self.conv, torch.nn.Sequential):  # APPNP or AGNNConv after a Linear
            return self.conv[1](self.conv[0](h), edge_index)
        return self.conv(h, edge_index, **extra)


__all__ = [
    "LAYERS",
    "Preceded",
    "bipartite",
    "close",
    "compare",
    "edge_weights",
    "features",
    "one_loop_per_vertex",
    "pyg_graphs",
    "same_start",
    "small_graph",
]
