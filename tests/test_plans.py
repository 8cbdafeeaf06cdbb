"""Per-graph plans (gnnc.graph.plans): blocks, vertex orders, Hilbert edge order, groups, partitions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gnnc.errors import ArgumentError
from gnnc.graph import plans
from gnnc.graph.graph import Graph

from .strategies import graphs


def _is_plan_array(arr: np.ndarray, length: int | None = None) -> None:
    assert arr.dtype == np.int64
    assert arr.flags.c_contiguous
    assert not arr.flags.writeable
    if length is not None:
        assert arr.shape == (length,)


def _in_degree(graph: Graph) -> np.ndarray:
    return np.diff(graph.in_indptr)


def _random_graph(v: int, e: int, seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    return Graph.from_coo(rng.integers(0, v, e), rng.integers(0, v, e), num_vertices=v)


# -------------------------------------------------------------- blocks


@given(graphs(), st.integers(1, 70))
def test_balanced_blocks_cover_and_balance(graph, n):
    v = graph.num_vertices
    bounds = plans.balanced_blocks(graph, n)
    _is_plan_array(bounds, n + 1)
    assert bounds[0] == 0 and bounds[-1] == v
    assert np.all(np.diff(bounds) >= 0)
    if v == 0:
        return
    prefix = np.concatenate([[0], np.cumsum(_in_degree(graph) + 1)])
    work = prefix[bounds[1:]] - prefix[bounds[:-1]]
    mean = prefix[-1] / n
    sizes = np.diff(bounds)
    assert np.all((work <= 2 * mean) | (sizes == 1)), (work, mean, sizes)


def test_balanced_blocks_give_a_hub_its_own_block():
    # vertex 5 holds most of the work; its neighbours are light
    dst = np.concatenate([np.full(1000, 5), np.arange(10)])
    src = np.zeros_like(dst)
    graph = Graph.from_coo(src, dst, num_vertices=10)
    for n in (3, 4, 8, 16):  # two blocks cannot isolate a vertex in the middle
        bounds = plans.balanced_blocks(graph, n)
        starts = bounds[:-1][np.diff(bounds) > 0]
        block_of_hub = np.searchsorted(bounds, 5, side="right") - 1
        assert bounds[block_of_hub] == 5 and bounds[block_of_hub + 1] == 6, (n, bounds)
        assert 5 in starts


@given(
    degrees=st.lists(st.integers(0, 50), min_size=0, max_size=300),
    n=st.integers(1, plans._FEW_BLOCKS),
)
def test_few_blocks_cut_alike_with_or_without_the_prefix_array(degrees, n):
    """balanced_blocks cuts few blocks of many destinations by bisection (`_split_work`) and of
    fewer on the prefix array (`_split_prefix`, `_PREFIX_MAX_ITEMS`): the same boundaries."""
    indptr = np.zeros(len(degrees) + 1, dtype=np.int64)
    np.cumsum(degrees, out=indptr[1:])
    prefix = indptr + np.arange(len(degrees) + 1)
    assert np.array_equal(plans._split_work(indptr, n), plans._split_prefix(prefix, n))


def test_balanced_blocks_small_cases():
    graph = Graph.from_coo([], [], num_vertices=0)
    assert plans.balanced_blocks(graph, 0).tolist() == [0]
    assert plans.block_count_for(graph, 8) == 0
    graph = Graph.from_coo([], [], num_vertices=8)
    assert plans.balanced_blocks(graph, 4).tolist() == [0, 2, 4, 6, 8]
    assert plans.balanced_blocks(graph, 1).tolist() == [0, 8]
    with pytest.raises(ArgumentError):
        plans.balanced_blocks(graph, 0)
    with pytest.raises(ArgumentError):
        plans.balanced_blocks(graph, -1)
    with pytest.raises(ArgumentError):
        plans.balanced_blocks(graph, 2.0)


def test_block_count_for():
    assert plans.block_count_for(Graph.from_coo([0], [0], num_vertices=3), 16) == 1
    big = _random_graph(100_000, 1_000_000)
    n = plans.block_count_for(big, 4)
    assert n == 4 * plans.BLOCKS_PER_THREAD
    assert plans.block_count_for(big, 1) == 1  # a single thread walks the blocks in order: one is the same
    assert plans.block_count_for(big, 2) == 2 * plans.BLOCKS_PER_THREAD
    assert plans.block_count_for(Graph.from_coo([], [], num_vertices=5), 4, min_work=1) == 5
    with pytest.raises(ArgumentError):
        plans.block_count_for(big, 0)


# ----------------------------------------------------------- vertex orders


@given(graphs(), st.sampled_from(["identity", "degree", "locality"]))
def test_ordered_in_csr_holds_each_destinations_edges_at_its_position(graph, kind):
    order = plans.destination_order(graph, kind)
    indptr, src, eid = plans.ordered_in_csr(graph, kind)
    _is_plan_array(indptr, graph.num_vertices + 1)
    _is_plan_array(src, graph.num_edges)
    _is_plan_array(eid, graph.num_edges)
    assert indptr[0] == 0 and indptr[-1] == graph.num_edges
    for i, v in enumerate(order):
        lo, hi = graph.in_indptr[v], graph.in_indptr[v + 1]
        assert np.array_equal(src[indptr[i] : indptr[i + 1]], graph.in_src[lo:hi])
        assert np.array_equal(eid[indptr[i] : indptr[i + 1]], graph.in_eid[lo:hi])
    assert plans.ordered_in_csr(graph, kind)[1] is src  # cached


@given(graphs(), st.sampled_from(["identity", "degree", "locality", "rcm"]), st.integers(0, 80))
def test_walk_sources_is_the_ordered_in_csrs_start_without_laying_it_out(graph, kind, count):
    got = plans.walk_sources(graph, kind, count)
    assert ("ordered_in_csr", kind) not in graph.plans
    assert np.array_equal(got, plans.ordered_in_csr(graph, kind)[1][:count])
    assert np.array_equal(plans.walk_sources(graph, kind, count), got)  # and from the laid-out plan


@pytest.mark.parametrize("kind", ["degree", "rcm"])
@pytest.mark.parametrize("count", [0, 1, 57, 500, 10_000])
def test_walk_sources_on_a_bipartite_graph(kind, count):
    rng = np.random.default_rng(count)
    graph = Graph.from_coo(rng.integers(0, 90, 600), rng.integers(0, 25, 600), shape=(90, 25))
    assert np.array_equal(plans.walk_sources(graph, kind, count), plans.ordered_in_csr(graph, kind)[1][:count])


def test_a_reuse_probe_keeps_no_edge_sized_plan():
    # a decision asks this on every large unpartitioned call; the order it probes may lose
    coo = _random_graph(3000, 40000, seed=3)
    graph = Graph.from_csc(coo.in_indptr, coo.in_src)  # edge ids not made until asked for
    plans.gather_reuse_share(graph, "rcm", 64)
    kept = [k for k, p in graph.plans.items() if sum(getattr(a, "size", 0) for a in _arrays(p)) >= graph.num_edges]
    assert kept == [] and graph._in_eid is None


def _arrays(plan):
    return plan if isinstance(plan, tuple) else (plan,)


def test_a_reversed_graph_shares_its_twins_rcm_order():
    graph = _random_graph(300, 2000, seed=5)
    order = plans.rcm_order(graph)
    assert plans.rcm_order(graph.reversed()) is order
    other = _random_graph(300, 2000, seed=6)
    assert np.array_equal(np.sort(plans.rcm_order(other.reversed())), np.arange(300))
    assert plans.rcm_order(other) is plans.rcm_order(other.reversed())


@given(graphs())
def test_degree_order(graph):
    order = plans.degree_order(graph)
    _is_plan_array(order, graph.num_vertices)
    assert np.array_equal(np.sort(order), np.arange(graph.num_vertices))
    deg = _in_degree(graph)[order]
    assert np.all(np.diff(deg) <= 0)
    # stable: equal degrees keep increasing ids
    same = np.diff(deg) == 0
    assert np.all(np.diff(order)[same] > 0)


@given(graphs(), st.integers(1, 6), st.integers(0, 3))
def test_locality_order_is_a_deterministic_permutation(graph, num_hashes, seed):
    order = plans.locality_order(graph, num_hashes=num_hashes, seed=seed)
    _is_plan_array(order, graph.num_vertices)
    assert np.array_equal(np.sort(order), np.arange(graph.num_vertices))
    again = plans.locality_order(Graph(graph), num_hashes=num_hashes, seed=seed)
    assert np.array_equal(order, again)
    # destinations without in-edges come last, by id
    isolated = np.flatnonzero(_in_degree(graph) == 0)
    assert np.array_equal(order[order.size - isolated.size :], isolated)


def test_locality_order_puts_equal_neighbour_sets_together():
    rng = np.random.default_rng(3)
    v = 200
    # 20 clusters of destinations; every destination in a cluster has the same
    # in-neighbour set (with duplicates and a varying edge order)
    clusters = rng.permutation(np.arange(100, 200)).reshape(20, 5)
    src, dst = [], []
    for members in clusters:
        neighbours = rng.choice(100, size=rng.integers(1, 12), replace=False)
        for d in members:
            s = np.concatenate([rng.permutation(neighbours), neighbours[: rng.integers(0, 3)]])
            src.append(s)
            dst.append(np.full(s.size, d))
    perm = rng.permutation(sum(s.size for s in src))
    src = np.concatenate(src)[perm]
    dst = np.concatenate(dst)[perm]
    graph = Graph.from_coo(src, dst, num_vertices=v)
    for seed in range(3):
        order = plans.locality_order(graph, seed=seed)
        position = np.empty(v, dtype=np.int64)
        position[order] = np.arange(v)
        for members in clusters:
            pos = np.sort(position[members])
            assert pos[-1] - pos[0] == members.size - 1, (seed, members, pos)
        # vertices 0..99 have no in-edges: last, by id
        assert np.array_equal(order[100:], np.arange(100))


def test_locality_order_arguments():
    graph = _random_graph(10, 30)
    for bad in ({"num_hashes": 0}, {"seed": -1}, {"seed": 1.5}, {"num_hashes": True}):
        with pytest.raises(ArgumentError):
            plans.locality_order(graph, **bad)
    assert not np.array_equal(
        plans.locality_order(_random_graph(1000, 3000), seed=0), plans.locality_order(_random_graph(1000, 3000), seed=1)
    )


# ------------------------------------------------------------ Hilbert order


def _rot(n, x, y, rx, ry):
    if ry == 0:
        if rx == 1:
            x = n - 1 - x
            y = n - 1 - y
        x, y = y, x
    return x, y


def xy2d(n, x, y):
    """Wikipedia's scalar Hilbert index of (x, y) on an n x n grid, n a power of 2."""
    d = 0
    s = n // 2
    while s > 0:
        rx = 1 if (x & s) > 0 else 0
        ry = 1 if (y & s) > 0 else 0
        d += s * s * ((3 * rx) ^ ry)
        x, y = _rot(n, x, y, rx, ry)
        s //= 2
    return d


@pytest.mark.parametrize("k", range(1, 10))
def test_hilbert_index_matches_xy2d(k):
    n = 1 << k
    rng = np.random.default_rng(k)
    if n <= 64:
        x, y = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n)))
    else:
        x, y = rng.integers(0, n, 3000), rng.integers(0, n, 3000)
    got = plans._hilbert_index(x.astype(np.int64), y.astype(np.int64), k)
    want = np.array([xy2d(n, int(a), int(b)) for a, b in zip(x, y)])
    assert np.array_equal(got, want)
    if n <= 64:  # a bijection onto [0, n*n) whose consecutive cells are neighbours
        assert np.array_equal(np.sort(got), np.arange(n * n))
        walk = np.argsort(got)
        assert np.all(np.abs(np.diff(x[walk])) + np.abs(np.diff(y[walk])) == 1)


def test_hilbert_index_large_coordinates():
    rng = np.random.default_rng(0)
    for k in (13, 21, 31):
        n = 1 << k
        x, y = rng.integers(0, n, 200), rng.integers(0, n, 200)
        got = plans._hilbert_index(x, y, k)
        assert got.tolist() == [xy2d(n, int(a), int(b)) for a, b in zip(x, y)]


@given(graphs())
def test_hilbert_edge_order_is_a_permutation_of_the_edges(graph):
    src, dst, eid = plans.hilbert_edge_order(graph)
    e = graph.num_edges
    for arr in (src, dst, eid):
        _is_plan_array(arr, e)
    assert np.array_equal(np.sort(eid), np.arange(e))
    assert np.array_equal(src, graph.src[eid]) and np.array_equal(dst, graph.dst[eid])
    if e:
        n = 1 << max(1, (max(graph.num_vertices, 2) - 1).bit_length())
        d = np.array([xy2d(n, int(u), int(v)) for u, v in zip(src, dst)])
        assert np.all(np.diff(d) >= 0)
        assert np.all(np.diff(eid)[np.diff(d) == 0] > 0)  # stable


def test_hilbert_edge_order_is_local():
    graph = _random_graph(5000, 200_000, seed=1)
    src, dst, _ = plans.hilbert_edge_order(graph)
    step = np.mean(np.abs(np.diff(src)) + np.abs(np.diff(dst)))
    random_step = np.mean(np.abs(np.diff(graph.src)) + np.abs(np.diff(graph.dst)))
    assert step * 50 < random_step, (step, random_step)


# ------------------------------------------------------- neighbour groups


@given(graphs(), st.sampled_from([1, 2, 3, 8, 32, 1000]))
def test_neighbor_groups(graph, g):
    group_dst, group_start = plans.neighbor_groups(graph, g)
    offsets = plans.group_offsets_by_dst(graph, g)
    n = group_dst.size
    _is_plan_array(group_dst)
    _is_plan_array(group_start, n + 1)
    _is_plan_array(offsets, graph.num_vertices + 1)
    e, indptr = graph.num_edges, graph.in_indptr
    assert group_start[0] == 0 and group_start[-1] == e
    sizes = np.diff(group_start)
    # every position in exactly one group: consecutive, non-empty, at most g long
    assert np.all(sizes >= 1) and np.all(sizes <= g)
    assert np.all(np.diff(group_dst) >= 0)
    # no group straddles destinations
    assert np.all(indptr[group_dst] <= group_start[:-1])
    assert np.all(group_start[1:] <= indptr[group_dst + 1])
    deg = _in_degree(graph)
    assert np.array_equal(np.diff(offsets), -(-deg // g))
    assert offsets[-1] == n
    for v in np.unique(group_dst):
        assert np.all(group_dst[offsets[v] : offsets[v + 1]] == v)
        assert group_start[offsets[v]] == indptr[v] and group_start[offsets[v + 1]] == indptr[v + 1]


def test_neighbor_groups_argument():
    with pytest.raises(ArgumentError):
        plans.neighbor_groups(_random_graph(4, 4), 0)
    with pytest.raises(ArgumentError):
        plans.split_neighbor_groups(_random_graph(4, 4), 0)
    with pytest.raises(ArgumentError):
        plans.group_blocks(_random_graph(4, 4), 2, 0)


@given(graphs(huge_hubs=True), st.sampled_from([1, 2, 3, 8, 32, 1000]), st.integers(1, 9))
def test_split_neighbor_groups(graph, g, threads):
    group_dst, bounds, offsets = plans.split_neighbor_groups(graph, g)
    n = group_dst.size
    _is_plan_array(group_dst)
    _is_plan_array(bounds, 2 * n)
    _is_plan_array(offsets, graph.num_vertices + 1)
    deg, indptr = _in_degree(graph), graph.in_indptr
    split = deg > g
    # only destinations of more than g in-edges are split, into ceil(deg / g) groups
    assert np.array_equal(np.diff(offsets), np.where(split, -(-deg // g), 0))
    assert offsets[-1] == n
    lo, hi = bounds[0::2], bounds[1::2]
    assert np.all(hi - lo >= 1) and np.all(hi - lo <= g)
    for v in np.flatnonzero(split):
        mine = slice(offsets[v], offsets[v + 1])
        assert np.all(group_dst[mine] == v)
        # the groups of v cover its in-edges in order, each position once
        assert lo[mine][0] == indptr[v] and hi[mine][-1] == indptr[v + 1]
        assert np.array_equal(lo[mine][1:], hi[mine][:-1])
    blocks = plans.group_blocks(graph, g, threads)
    _is_plan_array(blocks)
    assert blocks[0] == 0 and blocks[-1] == n and np.all(np.diff(blocks) >= 0)
    assert (blocks.size == 1) == (n == 0)  # no block at all when nothing is split
    assert blocks.size - 1 <= max(1, plans.BLOCKS_PER_THREAD * threads)


@given(graphs(huge_hubs=True), st.sampled_from([1, 4, 64]), st.integers(1, 40))
def test_grouped_blocks_weigh_split_destinations_by_groups(graph, g, n):
    bounds = plans.grouped_blocks(graph, g, n)
    v = graph.num_vertices
    _is_plan_array(bounds, n + 1 if v else 1)
    if v == 0:
        return
    assert bounds[0] == 0 and bounds[-1] == v and np.all(np.diff(bounds) >= 0)
    deg = _in_degree(graph)
    work = np.where(deg > g, -(-deg // g), deg) + 1
    total = work.sum()
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b - a >= 2:
            assert work[a:b].sum() < 2 * total / n + work[a:b].max()


def test_grouped_blocks_let_a_hub_share_a_block():
    src = np.concatenate([np.arange(10000) % 50, np.arange(200) % 50])
    dst = np.concatenate([np.zeros(10000, np.int64), np.arange(200) % 50])
    graph = Graph.from_coo(src, dst, num_vertices=50)
    by_edges = plans.balanced_blocks(graph, 4)
    by_groups = plans.grouped_blocks(graph, 1000, 4)
    assert by_edges[1] == 1  # the hub alone
    assert by_groups[1] > 1  # the hub merges 10 partial rows: light work


# ------------------------------------------------------ source partitions


@given(graphs(), st.integers(1, 9))
def test_source_partitions(graph, k):
    bounds, part_indptr, part_src, part_eid = plans.source_partitions(graph, k)
    v, e = graph.num_vertices, graph.num_edges
    _is_plan_array(bounds, k + 1)
    _is_plan_array(part_indptr, k * (v + 1))
    _is_plan_array(part_src, e)
    _is_plan_array(part_eid, e)
    assert bounds[0] == 0 and bounds[-1] == v and np.all(np.diff(bounds) >= 0)
    assert np.array_equal(np.sort(part_eid), np.arange(e))  # every edge exactly once
    assert np.array_equal(part_src, graph.src[part_eid])
    seg = part_indptr.reshape(k, v + 1)
    assert np.all(np.diff(part_indptr) >= 0)
    assert part_indptr[0] == 0 and part_indptr[-1] == e
    assert np.all(seg[1:, 0] == seg[:-1, -1])
    for p in range(k):
        lo, hi = bounds[p], bounds[p + 1]
        for d in range(v):
            a, b = seg[p, d], seg[p, d + 1]
            eids = part_eid[a:b]
            assert np.all(graph.dst[eids] == d)
            assert np.all((part_src[a:b] >= lo) & (part_src[a:b] < hi))
            want = np.flatnonzero((graph.dst == d) & (graph.src >= lo) & (graph.src < hi))
            assert np.array_equal(eids, want)


def test_source_partitions_balance_edges():
    graph = _random_graph(10_000, 200_000, seed=5)
    k = 8
    bounds, part_indptr, _, _ = plans.source_partitions(graph, k)
    v = graph.num_vertices
    per_part = np.diff(part_indptr.reshape(k, v + 1)[:, [0, -1]], axis=1).ravel()
    assert per_part.sum() == graph.num_edges
    assert per_part.max() < 1.1 * graph.num_edges / k


def test_default_partition_count():
    graph = _random_graph(1_000_000, 10)
    assert plans.default_partition_count(graph, 256, llc_bytes=32 << 20) == 16
    assert plans.default_partition_count(graph, 4, llc_bytes=1 << 30) == 1
    assert plans.default_partition_count(Graph.from_coo([], [], num_vertices=0), 64) == 1
    assert plans.default_partition_count(_random_graph(3, 3), 1 << 30, llc_bytes=1 << 20) == 3
    assert plans.default_partition_count(graph, 256) >= 1
    assert plans.last_level_cache_bytes() > 0
    with pytest.raises(ArgumentError):
        plans.default_partition_count(graph, 0)


# ------------------------------------------------------------------ caching


def test_plans_are_cached_per_graph_and_parameters():
    graph = _random_graph(500, 3000)
    calls = [
        lambda: plans.balanced_blocks(graph, 7),
        lambda: plans.degree_order(graph),
        lambda: plans.locality_order(graph, num_hashes=3, seed=2),
        lambda: plans.hilbert_edge_order(graph),
        lambda: plans.neighbor_groups(graph, 4),
        lambda: plans.group_offsets_by_dst(graph, 4),
        lambda: plans.source_partitions(graph, 3),
        lambda: plans.split_neighbor_groups(graph, 4),
        lambda: plans.group_blocks(graph, 4, 2),
        lambda: plans.grouped_blocks(graph, 4, 7),
    ]
    for call in calls:
        first, second = call(), call()
        if isinstance(first, tuple):
            assert all(a is b for a, b in zip(first, second))
        else:
            assert first is second
    assert plans.balanced_blocks(graph, 8) is not plans.balanced_blocks(graph, 7)
    assert plans.locality_order(graph, seed=1) is not plans.locality_order(graph, seed=2)
    assert plans.neighbor_groups(graph, 5)[0] is not plans.neighbor_groups(graph, 4)[0]
    # another graph has its own cache
    assert plans.degree_order(Graph(graph)) is not plans.degree_order(graph)


def test_build_assembles_the_arguments_a_spec_names():
    graph = _random_graph(60, 500, seed=3)
    base = ["num_vertices", "num_edges", "num_blocks", "dst_blocks", "dst_order", "in_indptr", "in_src", "in_eid"]
    plain = plans.build(graph, plans.PlanSpec(threads=3, dtype="f32"))
    assert plans.build(graph, plans.PlanSpec(threads=3, dtype="f32")) is plain  # once per graph and spec
    n = plans.block_count_for(graph, 3)
    assert list(plain) == [*base, "deg_in", "deg_out"]
    assert (plain["num_vertices"], plain["num_edges"], plain["num_blocks"]) == (60, 500, n)
    # one block (this small graph's) is [0, V], made in place; more are the cached split
    assert np.array_equal(plain["dst_blocks"], plans.balanced_blocks(graph, n)) and n == 1
    assert not plain["dst_blocks"].flags.writeable
    large = _random_graph(3000, 40_000, seed=4)
    split = plans.build(large, plans.PlanSpec(threads=3, dtype="f32"))["dst_blocks"]
    assert split is plans.balanced_blocks(large, plans.block_count_for(large, 3)) and split.shape[0] > 2
    assert plain["dst_order"] is plans.destination_order(graph, "identity")
    assert plain["in_src"] is graph.in_src and plain["deg_in"] is graph.kernel_degrees("f32")[0]
    with pytest.raises(TypeError):
        plain["in_src"] = graph.in_src  # the mapping is read-only
    every = plans.PlanSpec(
        threads=2, dtype="f64", order="degree", ordered_edges=True, source_blocks=True, partitions=2, groups=4
    )
    got = plans.build(graph, every)
    order = plans.degree_order(graph)
    assert got["dst_order"] is order and got["deg_out"] is graph.kernel_degrees("f64")[1]
    assert np.array_equal(got["dst_blocks"], plans.balanced_blocks(graph, plans.block_count_for(graph, 2), order=order))
    assert got["in_indptr"] is plans.ordered_in_csr(graph, "degree")[0]
    assert got["src_blocks"] is plans.source_blocks(graph, 2)
    assert list(got["src_meta"]) == [60, got["src_blocks"].shape[0] - 1]
    assert got["part_src"] is plans.source_partitions(graph, 2)[2]
    group_dst, _, offsets = plans.split_neighbor_groups(graph, 4)
    assert got["group_blocks"] is plans.group_blocks(graph, 4, 2) and got["group_offsets"] is offsets
    assert list(got["group_meta"]) == [got["group_blocks"].shape[0] - 1, group_dst.shape[0]]
    grouped = plans.build(graph, plans.PlanSpec(threads=2, dtype="f32", blocks=plans.Blocks.GROUPED, groups=4))
    assert grouped["dst_blocks"] is plans.grouped_blocks(graph, 4, plans.block_count_for(graph, 2))
    hilbert = plans.build(graph, plans.PlanSpec(threads=2, dtype="f32", blocks=plans.Blocks.EDGES, hilbert=True))
    assert hilbert["dst_blocks"] is plans.edge_blocks(graph, plans.block_count_for(graph, 2))
    assert hilbert["hilbert_eid"] is plans.hilbert_edge_order(graph)[2]
    whole = plans.build(graph, plans.PlanSpec(threads=512, dtype="f32", blocks=plans.Blocks.WHOLE))
    assert list(whole["dst_blocks"]) == [0, 60] and whole["num_blocks"] == 1
    for built in (plain, got, grouped, hilbert, whole):
        for value in built.values():
            if isinstance(value, np.ndarray):
                assert value.flags.c_contiguous and not value.flags.writeable


def test_build_gives_an_empty_graph_pointers_a_kernel_may_read():
    graph = Graph.from_coo(np.zeros(0, np.int64), np.zeros(0, np.int64), num_vertices=0)
    built = plans.build(graph, plans.PlanSpec(threads=2, dtype="f32", groups=2))
    assert built["num_blocks"] == 0
    assert all(built[name].shape[0] >= 1 for name in ("deg_in", "deg_out", "group_dst", "group_bounds"))


def test_a_hybrid_row_wider_than_shared_memory_names_the_mapping():
    graph = _random_graph(10, 40)
    hybrid = plans.Hybrid("warp_vertex", 4, (1 << 20,), 4)
    with pytest.raises(ArgumentError, match="map warp_vertex hybrid 4: one source's rows take"):
        plans.build(graph, plans.PlanSpec(threads=1, dtype="f32", hybrid=hybrid))
    fits = plans.Hybrid("warp_vertex", 4, (8, 16), 4)
    built = plans.build(graph, plans.PlanSpec(threads=1, dtype="f32", hybrid=fits))
    hot = built["hybrid_hot"]
    assert fits.shared_bytes(hot) == [int(hot[0]) * 8 * 4, int(hot[0]) * 16 * 4] and hot[0] > 0


def test_runtime_plans_do_not_import_the_compiler():
    import subprocess
    import sys

    code = (
        "import sys, gnnc.graph.plans\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('xdsl', 'llvmlite', 'numba')"
        " or m.startswith(('gnnc.lang', 'gnnc.transforms', 'gnnc.target'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


#: The PlanSpec fields `build` lays out in its base mapping; every other one is an extra.
_BASE_FIELDS = {"threads", "dtype", "order", "blocks", "ordered_edges", "edge_ids", "in_src", "deg_in", "deg_out"}


def test_every_spec_field_past_the_base_mapping_counts_as_an_extra():
    """`build` stops after the base mapping when `spec.extras` is False: a field it lays out
    more for (a new one included) must make `extras` True, or its kernels read no array."""
    import dataclasses

    base = plans.PlanSpec(threads=2, dtype="f32")
    assert not base.extras
    others = {
        "source_blocks": True,
        "partitions": 2,
        "hilbert": True,
        "groups": 4,
        "hybrid": plans.Hybrid("warp_vertex", 8, (4,), 4),
        "relations": True,
        "relation_degrees": True,
        "pairs": ("src",),
        "pair_rows": 8,
    }
    fields = {f.name for f in dataclasses.fields(plans.PlanSpec) if f.init}
    assert fields == _BASE_FIELDS | set(others), "a new PlanSpec field: base or extra?"
    for name, value in others.items():
        spec = dataclasses.replace(base, **{name: value})
        # tiles are cut per relation pair: `pair_rows` comes with `pairs`
        assert spec.extras or name == "pair_rows", name
    assert dataclasses.replace(base, pairs=("src",), pair_rows=8).extras


def test_one_thread_gets_one_shared_block_and_the_same_mapping():
    graph = Graph.from_coo([0, 1, 2, 2], [1, 2, 0, 1], num_vertices=3)
    other = Graph.from_coo([0, 2], [1, 1], num_vertices=3)
    one = plans.build(graph, plans.PlanSpec(threads=1, dtype="f32"))
    assert one["dst_blocks"].tolist() == [0, 3] and one["num_blocks"] == 1
    assert one["dst_blocks"] is plans.build(other, plans.PlanSpec(threads=1, dtype="f32"))["dst_blocks"]
    assert not one["dst_blocks"].flags.writeable
    assert one["dst_blocks"].tolist() == plans.balanced_blocks(graph, plans.block_count_for(graph, 1)).tolist()
