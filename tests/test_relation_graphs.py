"""Graphs with relation types: construction, checks, read-only arrays, derived graphs, relation plans."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import gnnc
from gnnc.graph import plans
from tests.strategies import relation_graphs

EDGES = np.array([[0, 1, 0, 2, 0], [1, 2, 1, 0, 2]])
TYPES = np.array([1, 0, 1, 1, 0])


def test_every_constructor_takes_edge_types():
    for graph in (
        gnnc.Graph(EDGES, edge_type=TYPES, num_relations=3),
        gnnc.Graph((EDGES[0], EDGES[1]), edge_type=TYPES, num_relations=3),
        gnnc.Graph.from_edge_index(EDGES, edge_type=TYPES, num_relations=3),
        gnnc.Graph.from_coo(EDGES[0], EDGES[1], edge_type=TYPES, num_relations=3),
    ):
        assert graph.has_relations and graph.num_relations == 3
        np.testing.assert_array_equal(graph.edge_type, TYPES)
        assert graph.edge_type.dtype == np.int64 and not graph.edge_type.flags.writeable
        assert "3 relations" in repr(graph)
    # a CSR by source: an edge's id (and type) is its position in indices
    csr = gnnc.Graph.from_csr([0, 2, 3, 3], [1, 2, 0], edge_type=[2, 0, 1])
    assert csr.num_relations == 3
    np.testing.assert_array_equal(csr.edge_type, [2, 0, 1])
    np.testing.assert_array_equal(csr.src, [0, 0, 1])


def test_edge_types_are_copied_and_read_only():
    types = TYPES.copy()
    graph = gnnc.Graph(EDGES, edge_type=types)
    types[0] = 2
    assert graph.edge_type[0] == 1
    with pytest.raises(ValueError):
        graph.edge_type[0] = 0


def test_num_relations_defaults_to_the_largest_type_and_may_exceed_it():
    assert gnnc.Graph(EDGES, edge_type=TYPES).num_relations == 2
    assert gnnc.Graph(EDGES, edge_type=TYPES, num_relations=7).num_relations == 7
    empty = gnnc.Graph(np.zeros((2, 0), np.int64), num_vertices=3, edge_type=np.zeros(0, np.int64))
    assert empty.num_relations == 0 and empty.has_relations
    assert gnnc.Graph(np.zeros((2, 0), np.int64), num_vertices=3, edge_type=[], num_relations=4).num_relations == 4


def test_a_graph_without_types_has_none():
    graph = gnnc.Graph(EDGES)
    assert not graph.has_relations and graph.edge_type is None and graph.num_relations is None
    assert "relations" not in repr(graph)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"edge_type": [0, 1]}, "edge_type has 2 entries but the graph has 5 edges"),
        ({"edge_type": [0, 1, 2, 3, 4], "num_relations": 3}, "edge_type[3] = 3 is out of range: num_relations is 3"),
        ({"edge_type": [0, -1, 0, 0, 0]}, "edge_type[1] = -1 is negative; relation types must be >= 0"),
        ({"edge_type": [0.0, 1.0, 0.0, 0.0, 0.0]}, "relation types must be integers"),
        ({"edge_type": [True] * 5}, "relation types must be integers"),
        ({"edge_type": np.zeros((5, 1), np.int64)}, "edge_type must be a 1-D array"),
        ({"num_relations": 2}, "num_relations was given without edge_type"),
        ({"edge_type": TYPES, "num_relations": -1}, "num_relations must be a non-negative integer"),
        ({"edge_type": TYPES, "num_relations": 0}, "num_relations must be at least 1 for a graph with edges"),
        ({"edge_type": TYPES, "num_relations": 2.5}, "num_relations must be a non-negative integer"),
    ],
)
def test_bad_edge_types(kwargs, message):
    with pytest.raises(gnnc.GraphError) as info:
        gnnc.Graph(EDGES, **kwargs)
    assert message in str(info.value)


def test_scipy_matrices_take_no_edge_types():
    import scipy.sparse as sp

    with pytest.raises(gnnc.GraphError, match="edge_type cannot be given with a scipy matrix"):
        gnnc.Graph(sp.eye(3, format="csr"), edge_type=[0, 0, 0])


def test_derived_graphs_keep_the_types_of_their_edges():
    graph = gnnc.Graph(EDGES, edge_type=TYPES, num_relations=3)
    rev = graph.reversed()
    np.testing.assert_array_equal(rev.edge_type, TYPES)  # the same edge ids
    assert rev.num_relations == 3
    copy = gnnc.Graph(graph)
    np.testing.assert_array_equal(copy.edge_type, TYPES)
    assert copy.num_relations == 3
    retyped = gnnc.Graph(graph, edge_type=np.zeros(5, np.int64), num_relations=1)
    assert retyped.num_relations == 1
    ordered, perm = graph.sorted_by_destination()
    np.testing.assert_array_equal(ordered.edge_type, TYPES[perm])
    assert ordered.num_relations == 3
    relabelled = graph.reordered("rcm")
    np.testing.assert_array_equal(relabelled.graph.edge_type, TYPES[relabelled.edge_order])
    assert relabelled.graph.num_relations == 3


def test_relation_pairs_by_hand():
    graph = gnnc.Graph(EDGES, edge_type=TYPES, num_relations=3)
    src = plans.relation_pairs(graph, "src")
    # (source, relation) pairs sorted by relation, then source: (0, 0) (1, 0) | (0, 1) (2, 1) | none of 2
    np.testing.assert_array_equal(src.vertex, [0, 1, 0, 2])
    np.testing.assert_array_equal(src.rel, [0, 0, 1, 1])
    np.testing.assert_array_equal(src.count, [1, 1, 2, 1])
    np.testing.assert_array_equal(src.offsets, [0, 2, 4, 4])
    np.testing.assert_array_equal(src.edge_pair, [2, 1, 2, 3, 0])
    deg_in, deg_out = plans.relation_degrees(graph, "f32")
    assert deg_in.dtype == np.float32 and not deg_in.flags.writeable
    np.testing.assert_array_equal(deg_in, [2, 2, 2, 1, 2])
    np.testing.assert_array_equal(deg_out, [2, 1, 2, 1, 1])
    assert plans.relation_pairs(graph, "src") is src  # cached on the graph


def test_relation_plans_need_relation_types():
    with pytest.raises(gnnc.ArgumentError, match="needs a graph with relation types"):
        plans.relation_pairs(gnnc.Graph(EDGES), "src")


@given(relation_graphs())
def test_relation_pairs_invariants(graph):
    for side, vertices in (("src", graph.src), ("dst", graph.dst)):
        pairs = plans.relation_pairs(graph, side)
        assert pairs.offsets.shape == (graph.num_relations + 1,)
        assert pairs.count.sum() == graph.num_edges
        # every edge's pair is its (vertex, relation), and pairs are distinct and sorted by (relation, vertex)
        np.testing.assert_array_equal(pairs.vertex[pairs.edge_pair], vertices)
        np.testing.assert_array_equal(pairs.rel[pairs.edge_pair], graph.edge_type)
        keys = pairs.rel * (max(graph.num_src, graph.num_dst) + 1) + pairs.vertex
        assert np.all(np.diff(keys) > 0)
        for r in range(graph.num_relations):
            assert np.all(pairs.rel[pairs.offsets[r] : pairs.offsets[r + 1]] == r)
        np.testing.assert_array_equal(np.bincount(pairs.edge_pair, minlength=pairs.num_pairs), pairs.count)


# ------------------------------------------------------- heterogeneous graphs from PyG and DGL


def _hetero_edges(seed: int) -> tuple[dict[str, int], dict[tuple[str, str, str], np.ndarray]]:
    """Node counts and edges per type: an edge type without edges, a node type without any."""
    rng = np.random.default_rng(seed)
    counts = {"author": 4, "paper": 6, "venue": 2, "lonely": 3}
    edges = {
        ("author", "writes", "paper"): rng.integers(0, [[4], [6]], (2, 9)),
        ("paper", "cites", "paper"): rng.integers(0, 6, (2, 7)),
        ("paper", "in", "venue"): rng.integers(0, [[6], [2]], (2, 6)),
        ("venue", "empty", "author"): np.zeros((2, 0), np.int64),
    }
    return counts, edges


def _check_hetero(graph, counts, edges):
    types = graph.types
    assert types.node_types == tuple(counts) and types.edge_types == tuple(edges)
    assert graph.num_vertices == sum(counts.values()) and graph.num_relations == len(edges)
    np.testing.assert_array_equal(types.offsets, np.cumsum([0, *counts.values()]))
    assert not types.node_type.flags.writeable and not types.offsets.flags.writeable
    for t, n in counts.items():
        assert types.nodes(t).stop - types.nodes(t).start == n
        assert (types.node_type[types.nodes(t)] == types.node_types.index(t)).all()
    start = 0
    for r, ((s, _, d), e) in enumerate(edges.items()):
        stop = start + e.shape[1]
        np.testing.assert_array_equal(graph.src[start:stop], e[0] + types.offsets[types.node_types.index(s)])
        np.testing.assert_array_equal(graph.dst[start:stop], e[1] + types.offsets[types.node_types.index(d)])
        assert (graph.edge_type[start:stop] == r).all()
        assert types.relation((s, _, d)) == r
        start = stop
    assert types.relation("cites") == 1
    assert graph.reversed().types is types and graph.sorted_by_destination()[0].types is types


def test_from_pyg_hetero_data():
    torch = pytest.importorskip("torch")
    data_module = pytest.importorskip("torch_geometric.data")
    counts, edges = _hetero_edges(0)
    data = data_module.HeteroData()
    for t, n in counts.items():
        data[t].x = torch.randn(n, 3 + len(t))  # widths differ: only the structure is taken
    for t, e in edges.items():
        data[t].edge_index = torch.from_numpy(e)
    graph = gnnc.Graph.from_hetero(data)
    _check_hetero(graph, counts, edges)
    homogeneous = data.to_homogeneous(node_attrs=[], edge_attrs=[])
    np.testing.assert_array_equal(graph.edge_index(), homogeneous.edge_index.numpy())
    np.testing.assert_array_equal(graph.types.node_type, homogeneous.node_type.numpy())


def test_from_dgl_heterograph():
    from tests.test_nn_blocks import _dgl

    dgl = _dgl()
    torch = pytest.importorskip("torch")
    counts, edges = _hetero_edges(1)
    hg = dgl.heterograph(
        {t: (torch.from_numpy(e[0]), torch.from_numpy(e[1])) for t, e in edges.items()}, num_nodes_dict=counts
    )
    counts = {t: counts[t] for t in hg.ntypes}  # DGL sorts the types by name
    edges = {t: edges[t] for t in hg.canonical_etypes}
    graph = gnnc.Graph.from_hetero(hg)
    _check_hetero(graph, counts, edges)
    homogeneous = dgl.to_homogeneous(hg)
    src, dst = homogeneous.edges(order="eid")
    np.testing.assert_array_equal(graph.src, src.numpy())
    np.testing.assert_array_equal(graph.dst, dst.numpy())
    np.testing.assert_array_equal(graph.edge_type, homogeneous.edata[dgl.ETYPE].numpy())
    np.testing.assert_array_equal(graph.types.node_type, homogeneous.ndata[dgl.NTYPE].numpy())


def test_from_hetero_refuses_other_objects():
    with pytest.raises(gnnc.GraphError, match="takes a PyG HeteroData or a DGL heterograph"):
        gnnc.Graph.from_hetero(EDGES)
    graph = gnnc.Graph(EDGES)
    assert graph.types is None
