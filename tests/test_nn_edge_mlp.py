"""gnnc.nn's EdgeConv and PointNetConv against PyG's: every structure of the user's network (a bare
Linear, a Sequential starting with one, PyG's MLP with and without batch norm and plain_last, one
that does not start with a Linear), every aggregation, self loops added or not, bipartite pairs,
blocks, sparse adjacencies; outputs and gradients (x, pos, every parameter) on hypothesis graphs
with isolated vertices, self loops and duplicate edges.

Duplicate edges give equal messages, so max and min tie: gnnc's gradient goes to the lowest edge
id, torch's scatter splits it, but the tied edges read the same rows through the same network,
so the gradients they add up to agree; the features are continuous random values, so no other
ties occur. Through batch norm the sums agree too, but not to float32 tolerance where hundreds of
duplicates cancel one row's large gradient against their small ones (they do in float64): with
batch norm, max and min run on graphs without duplicate edges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.nn import BatchNorm1d, Linear, ReLU, Sequential

from tests.nn_oracle import bipartite, close, compare, features, pyg_graphs

pyg_nn = pytest.importorskip("torch_geometric.nn")
import gnnc  # noqa: E402
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402
from gnnc.nn import inputs  # noqa: E402
from gnnc.nn.conv import point_net_conv  # noqa: E402
from gnnc.nn.conv.edge_conv import EdgeConv  # noqa: E402
from gnnc.nn.conv.point_net_conv import PointNetConv  # noqa: E402

AGGRS = ["max", "mean", "add", "sum", "min"]


def _structures(i: int, o: int) -> dict[str, Callable[[], torch.nn.Module]]:
    """Networks from i to o features, by name: the kernels each takes are in `KERNELS`."""
    return {
        "linear": lambda: Linear(i, o),
        "pyg_linear": lambda: pyg_nn.Linear(i, o, bias=False),
        "sequential": lambda: Sequential(Linear(i, 6), ReLU(), Linear(6, o)),
        "mlp": lambda: pyg_nn.MLP([i, 6, o], norm=None),
        "mlp_batch_norm": lambda: pyg_nn.MLP([i, 6, 5, o]),
        "mlp_not_plain_last": lambda: pyg_nn.MLP([i, 6, o], plain_last=False, act="tanh"),
        "mlp_one_layer": lambda: pyg_nn.MLP([i, o]),
        "not_linear_first": lambda: Sequential(BatchNorm1d(i), Linear(i, o), ReLU()),
    }


#: The gnnc kernels a structure's layer calls: one fused kernel, messages + aggregation, or only the
#: aggregation (PyG's concatenation and the whole network in torch).
KERNELS = {
    "linear": ["pair"],
    "pyg_linear": ["pair"],
    "mlp_one_layer": ["pair"],
    "sequential": ["messages", "aggregate"],
    "mlp": ["messages", "aggregate"],
    "mlp_batch_norm": ["messages", "aggregate"],
    "mlp_not_plain_last": ["messages", "aggregate"],
    "not_linear_first": ["aggregate"],
}
BATCH_NORM = {"mlp_batch_norm", "mlp_not_plain_last", "not_linear_first"}


def _distinct_rows(edge_index: torch.Tensor, n: int, loops: bool = False, with_x: bool = True) -> int:
    """How many distinct rows the messages' batch has: edges between the same vertices give equal
    rows, and so do self loops without x (`pos_i - pos_i`). Batch norm in training needs two: over
    equal rows its output is its bias plus rounding, and ReLU's kink then decides the gradient
    by the rounding of the split product against PyG's."""
    pairs = {(u, v) for u, v in edge_index.t().tolist() if not (loops and u == v)}
    if loops:
        pairs |= {(i, i) for i in range(n)}
    return len({(u, v) if (u != v or with_x) else None for u, v in pairs})


def _unique_edges(edge_index: torch.Tensor) -> torch.Tensor:
    """edge_index without its second and later copies of an edge."""
    seen: set[tuple[int, int]] = set()
    keep = []
    for edge in edge_index.t().tolist():
        keep.append(tuple(edge) not in seen)
        seen.add(tuple(edge))
    return edge_index[:, torch.tensor(keep, dtype=torch.bool)]


def _same_start(
    pyg_cls: Any, ours_cls: Any, nets: Callable[[], dict], lazy: bool = False, **kwargs: Any
) -> tuple[Any, Any]:
    """(PyG's layer, gnnc's) from one seed, their networks made by `nets`: the same state_dict
    (its keys only, for a lazy network)."""
    torch.manual_seed(0)
    pyg = pyg_cls(**nets(), **kwargs)
    torch.manual_seed(0)
    ours = ours_cls(**nets(), **kwargs)
    assert list(pyg.state_dict()) == list(ours.state_dict())
    for key, value in [] if lazy else pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    return pyg, ours


class _Spy:
    """A kernel that records its calls."""

    def __init__(self, kernel: Any, name: str, calls: list[str]) -> None:
        self.kernel, self.name, self.calls = kernel, name, calls

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(self.name)
        return self.kernel(*args, **kwargs)


def _spied(layer: Any) -> list[str]:
    calls: list[str] = []
    layer._kernels = {name: _Spy(k, name, calls) for name, k in layer._kernels.items()}
    return calls


def _edge_conv(structure: str, width: int = 5, out: int = 4, **kwargs: Any) -> tuple[Any, Any]:
    make = _structures(2 * width, out)[structure]
    return _same_start(pyg_nn.EdgeConv, EdgeConv, lambda: {"nn": make()}, **kwargs)


def _point_net(local: str | None, width: int, dims: int = 3, global_nn: bool = False, **kwargs: Any) -> tuple[Any, Any]:
    make = None if local is None else _structures(width + dims, 4)[local]

    def nets() -> dict:
        made: dict[str, Any] = {"local_nn": None if make is None else make()}
        if global_nn:
            made["global_nn"] = Sequential(Linear(4 if make is not None else width + dims, 3), ReLU())
        return made

    return _same_start(pyg_nn.PointNetConv, PointNetConv, nets, **kwargs)


# ------------------------------------------------------------------ EdgeConv


@pytest.mark.parametrize("structure", list(KERNELS))
@given(graph=pyg_graphs(), aggr=st.sampled_from(AGGRS), seed=st.integers(0, 2**16))
def test_edge_conv_matches_pyg(structure, graph, aggr, seed):
    edge_index, n = graph
    if structure in BATCH_NORM:
        # batch norm over many copies of few rows divides by a small, rounding-sensitive deviation
        # (PyG's concatenated product and gnnc's split one round apart: 7e-4 relative on a weight's
        # gradient, a two-vertex graph of many duplicate edges); duplicates are the other structures' tests
        edge_index = _unique_edges(edge_index)
    if structure in BATCH_NORM and _distinct_rows(edge_index, n) < 2:
        return  # batch norm in training needs two distinct rows
    pyg, ours = _edge_conv(structure, aggr=aggr)
    calls = _spied(ours)
    compare(pyg, ours, (features(n, 5, seed), edge_index), rtol=5e-4)
    assert calls == KERNELS[structure]


@pytest.mark.parametrize("structure", ["linear", "sequential", "not_linear_first"])
def test_edge_conv_bipartite_blocks_and_sparse(structure):
    edge_index = bipartite(7, 4, 18, 1)
    x_src, x_dst = features(7, 5, 2), features(4, 5, 3)
    compare(*_edge_conv(structure), ((x_src, x_dst), edge_index))
    compare(*_edge_conv(structure, aggr="mean"), ((x_src, x_dst), edge_index))
    # a block: the destinations are the first sources; PyG's call is the pair (x, x[:num_dst])
    x = features(7, 5, 4, grad=False)
    pyg, ours = _edge_conv(structure)
    close(ours(x, gnn.Block(edge_index, 7, 4)), pyg((x, x[:4]), edge_index), "a block")
    # a torch.sparse adjacency (adj_t) and a gnnc.Graph: the same edges, values unread (as PyG)
    square = torch.randint(0, 8, (2, 25), generator=torch.Generator().manual_seed(5))
    adj = torch.sparse_coo_tensor(square.flip(0), torch.rand(25) + 0.5, (8, 8)).coalesce()
    x = features(8, 5, 6)
    compare(pyg, ours, (x, adj))
    close(ours(x, gnnc.Graph(square, num_vertices=8)), pyg(x, square), "a gnnc.Graph")


def test_edge_conv_reads_the_network_at_each_call():
    """Weights are nn's own (not copied at construction): loading a state_dict and optimiser steps
    change the layer's output, and its gradients are nn's parameters'."""
    pyg, ours = _edge_conv("sequential")
    edge_index = torch.randint(0, 6, (2, 20), generator=torch.Generator().manual_seed(1))
    x = features(6, 5, 2, grad=False)
    for step in range(2):
        for net in (pyg, ours):
            net.zero_grad()
            net(x, edge_index).square().sum().backward()
            with torch.no_grad():
                for p in net.parameters():
                    p -= 0.1 * p.grad
        close(ours(x, edge_index), pyg(x, edge_index), f"after step {step}")
    fresh = _edge_conv("sequential")[0]
    ours.load_state_dict(fresh.state_dict())
    close(ours(x, edge_index), fresh(x, edge_index), "after load_state_dict")


def test_lazy_and_hooked_networks_run_whole():
    """A lazy Linear is sized by the first call (the network whole), then split; a network with a
    forward hook is never split (the hook runs, as in PyG)."""
    edge_index = torch.randint(0, 6, (2, 20), generator=torch.Generator().manual_seed(3))
    x = features(6, 5, 4)
    pyg, ours = _same_start(pyg_nn.EdgeConv, EdgeConv, lambda: {"nn": pyg_nn.Linear(-1, 4)}, lazy=True)
    calls = _spied(ours)
    torch.manual_seed(1)
    expected = pyg(x, edge_index)
    torch.manual_seed(1)
    close(ours(x, edge_index), expected, "lazy, first call")
    assert calls == ["aggregate"]
    compare(pyg, ours, (x, edge_index))
    assert calls == ["aggregate", "pair"]
    pyg, ours = _edge_conv("linear")
    for net in (pyg, ours):
        net.nn.register_forward_hook(lambda module, args, out: out * 2)
    calls = _spied(ours)
    compare(pyg, ours, (x, edge_index))
    assert calls == ["aggregate"]


def test_edge_conv_errors():
    x, edge_index = torch.randn(3, 4), torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(ArgumentError, match="aggr='mul' is not supported"):
        EdgeConv(Linear(8, 4), aggr="mul")
    with pytest.raises(ArgumentError, match="flow"):
        EdgeConv(Linear(8, 4), flow="target_to_source")
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'k'"):
        EdgeConv(Linear(8, 4), k=3)
    with pytest.raises(ArgumentError, match="nn must be a module"):
        EdgeConv(3)
    with pytest.raises(ArgumentError, match="first Linear takes 6 features"):
        EdgeConv(Linear(6, 4))(x, edge_index)
    with pytest.raises(ArgumentError, match="x\\[1\\]"):
        EdgeConv(Linear(8, 4))((x, None), edge_index)
    with pytest.raises(ArgumentError, match="as many features"):
        EdgeConv(Linear(8, 4))((x, torch.randn(3, 5)), edge_index)
    with pytest.raises(ArgumentError, match="nn's output"):
        EdgeConv(Sequential(Linear(8, 4), torch.nn.Flatten(0)))(x, edge_index)


# ------------------------------------------------------------------ PointNetConv


@pytest.mark.parametrize("structure", [None, *KERNELS])
@given(
    graph=pyg_graphs(),
    loops=st.booleans(),
    with_x=st.booleans(),
    aggr=st.sampled_from(AGGRS),
    global_nn=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_point_net_conv_matches_pyg(structure, graph, loops, with_x, aggr, global_nn, seed):
    edge_index, n = graph
    if structure in BATCH_NORM:  # as in test_edge_conv_matches_pyg
        edge_index = _unique_edges(edge_index)
        if not with_x:
            # messages pos_j - pos_i alone come in opposite pairs and zeros (loops): batch norm
            # then puts entries exactly at ReLU's kink, where rounding picks the gradient
            return
    if structure in BATCH_NORM and _distinct_rows(edge_index, n, loops, with_x) < 2:
        return  # batch norm in training needs two distinct rows
    width = 5 if with_x else 0
    pyg, ours = _point_net(structure, width, add_self_loops=loops, aggr=aggr, global_nn=global_nn)
    calls = _spied(ours)
    x = features(n, 5, seed) if with_x else None
    compare(pyg, ours, (x, features(n, 3, seed + 1), edge_index), rtol=5e-4)
    assert calls == (["pair"] if structure is None else KERNELS[structure])


@pytest.mark.parametrize("structure", [None, "linear", "sequential", "not_linear_first"])
@pytest.mark.parametrize("sides", [(7, 4), (4, 7)])
def test_point_net_conv_bipartite_and_blocks(structure, sides):
    num_src, num_dst = sides
    edge_index = bipartite(num_src, num_dst, 18, 1)
    edge_index[:, :3] = torch.tensor([[0, 1, 1], [0, 1, 1]])  # self loops by id, which PyG drops
    pos = (features(num_src, 3, 2), features(num_dst, 3, 3))
    x_src = features(num_src, 5, 4)
    for loops in (True, False):
        compare(*_point_net(structure, 5, add_self_loops=loops), (x_src, pos, edge_index))
        compare(*_point_net(structure, 5, add_self_loops=loops), ((x_src, features(num_dst, 2, 5)), pos, edge_index))
        compare(*_point_net(structure, 0, add_self_loops=loops), (None, pos, edge_index))
    if num_dst > num_src:
        return
    # a block: the destinations are the first sources; PyG's call is the pair (pos, pos[:num_dst])
    points = features(num_src, 3, 6, grad=False)
    pyg, ours = _point_net(structure, 5)
    close(
        ours(x_src, points, gnn.Block(edge_index, num_src, num_dst)),
        pyg(x_src, (points, points[:num_dst]), edge_index),
        "a block",
    )


def test_point_net_conv_sparse_adjacency_and_graph():
    """A torch.sparse adjacency (its loops dropped, one added per vertex, as PyG), and a gnnc.Graph;
    the looped edge_index is made once per graph argument."""
    edge_index = torch.randint(0, 8, (2, 25), generator=torch.Generator().manual_seed(5))
    edge_index[:, :2] = 3
    adj = torch.sparse_coo_tensor(edge_index.flip(0), torch.rand(25) + 0.5, (8, 8)).coalesce()
    x, pos = features(8, 5, 6), features(8, 3, 7)
    for structure in (None, "linear", "sequential"):
        pyg, ours = _point_net(structure, 5)
        compare(pyg, ours, (x, pos, adj))
        close(ours(x, pos, gnnc.Graph(edge_index, num_vertices=8)), pyg(x, pos, edge_index), "a gnnc.Graph")
    adjacency = inputs.adjacency(edge_index)
    assert point_net_conv.looped_edges(adjacency, 8) is point_net_conv.looped_edges(adjacency, 8)


def test_point_net_conv_errors():
    pos, edge_index = torch.randn(3, 3), torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(ArgumentError, match="aggr='std' is not supported"):
        PointNetConv(aggr="std")
    with pytest.raises(ArgumentError, match="local_nn must be a module"):
        PointNetConv(local_nn=3)
    with pytest.raises(ArgumentError, match="first Linear takes 6 features"):
        PointNetConv(Linear(6, 4))(torch.randn(3, 5), pos, edge_index)
    with pytest.raises(ArgumentError, match="pos\\[1\\]"):
        PointNetConv()(None, (pos, None), edge_index)
    with pytest.raises(ArgumentError, match="as many coordinates"):
        PointNetConv()(None, (pos, torch.randn(3, 2)), edge_index)
    with pytest.raises(ArgumentError, match="x has 4 rows"):
        PointNetConv()(torch.randn(4, 2), pos, edge_index)
    with pytest.raises(ArgumentError, match="x\\[1\\] has 2 rows"):
        PointNetConv()((torch.randn(3, 2), torch.randn(2, 2)), pos, edge_index)
    assert repr(PointNetConv()) == "PointNetConv(local_nn=None, global_nn=None)"
