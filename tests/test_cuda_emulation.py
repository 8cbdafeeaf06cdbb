"""The cuda thread mappings, run as a CPU emulation of their grids, against the reference.

`target="cuda-emulation"` runs the cuda pipeline (map-threads included) and
lowers each `loop.grid` to loops over blocks and threads, so the mapping's
index arithmetic (which destinations a thread runs, the guards, each thread's
scratch slice) is checked on any machine.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.parser import Parser

import gnnc
from gnnc.driver import compiler, pipeline
from tests.helpers import assert_matches, slow_except
from tests.strategies import graphs, random_inputs, random_kernels

EXAMPLES = Path(__file__).parent.parent / "examples"
DIMS = {
    "gcn": {"F": 17},
    "sage_max": {"F": 3},
    "sage_mean": {"F": 64},
    "gin": {"F": 1},
    "attention": {"H": 2, "D": 17},
    "gat": {"H": 2, "F": 3},
    "mlp_aggr": {"D1": 5, "D2": 130},
    "gcn_norm": {"F": 17},
}

#: Vertex group sizes: 1, sizes that do and do not divide a graph's vertex count.
GROUPS = st.sampled_from([1, 2, 3, 7])
#: warp_vertex feature tiles: none, 1, and sizes that do and do not divide the feature sizes
TILES = st.sampled_from([None, 1, 2, 5])
#: example kernels the warp mappings refuse: none (mlp_aggr's `@` has its loops
#: interchanged so that the lanes split the result axis)
WARP_REFUSED: dict[str, str] = {}
#: a chain of two `@` is refused: the second reads the first's row at indices
#: other lanes computed
CHAINED_PRODUCTS = """
kernel k(x: f32[V, F], W: f32[F, F], W2: f32[F, F]) -> f32[V, F] {
    out[v] = max(relu(relu(x[u] @ W) @ W2))
}
"""
#: kernels the edge mappings refuse: thread_edge none (softmax runs as three
#: edge launches, gin's sum beside x[v] in a per-destination row); warp_edge
#: what warp_vertex refuses
THREAD_EDGE_REFUSED: dict[str, str] = {}
WARP_EDGE_REFUSED = {**THREAD_EDGE_REFUSED, **WARP_REFUSED}


#: lanes per destination (edge group) of the warp mappings: the whole warp, and
#: Seastar's feature-adaptive groups of 2 and 8 lanes (16 and 4 groups a warp)
LANE_COUNTS = st.sampled_from([None, 2, 8])


def mapping_text(strategy: str, group: int, tile: int | None = None, lanes: int | None = None) -> str:
    return (
        f"map {strategy} group {group}"
        + (f" tile {tile}" if tile is not None else "")
        + (f" lanes {lanes}" if lanes is not None else "")
    )


@functools.cache
def emulated(name: str, group: int, strategy: str = "thread_vertex", tile: int | None = None, lanes: int | None = None):
    return gnnc.compile(
        EXAMPLES / f"{name}.gnn", target="cuda-emulation", schedule=mapping_text(strategy, group, tile, lanes)
    )


@functools.cache
def reference(name: str):
    return gnnc.compile(EXAMPLES / f"{name}.gnn", target="reference")


def check(
    name: str, group: int, graph: gnnc.Graph, seed: int, dims=None, strategy="thread_vertex", tile=None, lanes=None
) -> None:
    kernel = getattr(emulated(name, group, strategy, tile, lanes), name)
    inputs = random_inputs(kernel.signature, graph, dims or DIMS[name], np.float32, seed)
    got = kernel(graph, **inputs)
    want = getattr(reference(name), name)(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


@pytest.mark.parametrize("name", slow_except(sorted(DIMS), "gat", "gcn"))
@given(graph=graphs(), group=GROUPS, seed=st.integers(0, 2**32 - 1))
@settings(max_examples=6)
def test_thread_vertex_matches_reference(name, graph, group, seed):
    check(name, group, graph, seed)


@pytest.mark.parametrize("name", slow_except(sorted(set(DIMS) - set(WARP_REFUSED)), "gcn"))
@given(graph=graphs(), group=GROUPS, tile=TILES, lanes=LANE_COUNTS, seed=st.integers(0, 2**32 - 1))
@settings(max_examples=6)
def test_warp_vertex_matches_reference(name, graph, group, tile, lanes, seed):
    check(name, group, graph, seed, strategy="warp_vertex", tile=tile, lanes=lanes)


@pytest.mark.parametrize("strategy", ["warp_vertex", "warp_edge"])
def test_warp_mappings_refuse_what_lanes_cannot_split(tmp_path, strategy):
    path = tmp_path / "k.gnn"
    path.write_text(CHAINED_PRODUCTS)
    with pytest.raises(
        gnnc.CompileError,
        match=f"kernel 'k': map {strategy} is refused: .*feature indices other "
        f"than the ones a lane owns.*; use map {strategy.replace('warp', 'thread')}",
    ):
        gnnc.compile(path, target="cuda-emulation", schedule=f"map {strategy}")


def test_a_vector_matrix_product_is_interchanged_for_the_lanes():
    # mlp_aggr's x @ W: `for i { for j { t[j] += x[i] W[i, j] } }` becomes
    # `for j { for i { ... } }`, the lanes splitting j, each owning its t[j]
    src = (EXAMPLES / "mlp_aggr.gnn").read_text()
    opts = compiler.CompileOptions(target="cuda-emulation", schedule="map warp_vertex")
    mapped = compiler.compile_source(src, options=opts, stop_after="scf").stages["map-threads"]
    assert re.search(
        r"scf.for %\d+ = %\d+ to %\d+ step %\d+ \{\n.*\n.*\n.*\n.*\n *scf.if %\d+ \{\n *loop.for_feature "
        r'%\d+ dim "D1"',
        mapped,
    )
    for lanes in (None, 4):
        kernel = emulated("mlp_aggr", 2, "warp_vertex", 2, lanes).mlp_aggr
        graph = _hub_graph(200, 600)
        inputs = random_inputs(kernel.signature, graph, {"D1": 7, "D2": 70}, np.float32, 5)
        assert_matches(kernel(graph, **inputs), reference("mlp_aggr").mlp_aggr(graph, **inputs), graph, np.float32)


#: dot products of every length around the warp's 32 lanes, scalar and per-head
#: results, sums / max / mean of them at v: the warp_sum's lane split and
#: butterfly, lane 0's writes of values every lane computes
DOTS = """
kernel dots(w: f32[E], x: f32[V, D], q: f32[V, H, D]) -> (s: f32[V], m: f32[V], d: f32[V], a: f32[E, H]) {
    s[v] = sum(w[e])
    m[v] = max(w[e] * dot(x[u], x[v]))
    d[v] = mean(dot(x[u], x[v]))
    a[e] = dot(q[u], q[v])
}
"""


@functools.cache
def dots_kernel(mapping: str):
    import tempfile

    path = Path(tempfile.mkdtemp()) / "dots.gnn"
    path.write_text(DOTS)
    return (
        gnnc.compile(path, target="cuda-emulation", schedule=mapping).dots,
        gnnc.compile(path, target="reference").dots,
    )


@pytest.mark.parametrize(
    "mapping",
    slow_except(
        [
            "map warp_vertex",
            "map warp_vertex group 3 tile 2",
            "map warp_edge",
            "map warp_edge group 5",
            "map thread_edge group 2",
            "map warp_vertex lanes 4",
            "map warp_edge lanes 8 group 3",
        ],
        "map warp_vertex group 3 tile 2",
        "map warp_edge lanes 8 group 3",
    ),
)
@given(graph=graphs(), d=st.sampled_from([1, 3, 31, 32, 33, 70]), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=5)
def test_warp_dot_products_match_reference(mapping, graph, d, seed):
    kernel, reference_kernel = dots_kernel(mapping)
    inputs = random_inputs(kernel.signature, graph, {"D": d, "H": 2}, np.float32, seed)
    assert_matches(kernel(graph, **inputs), reference_kernel(graph, **inputs), graph, np.float32)


def test_warp_sum_is_lowered_to_lanes_and_a_butterfly():
    src = (EXAMPLES / "attention.gnn").read_text()
    opts = compiler.CompileOptions(target="cuda-emulation", schedule="map warp_vertex")
    stages = compiler.compile_source(src, options=opts, stop_after="scf").stages
    assert "loop.warp_sum" in stages["map-threads"] and "gnnc.dot_reduction" not in stages["map-threads"]
    emulated_ir = stages["emulate-grid"]
    assert "loop.warp_sum" not in emulated_ir and "memref.alloca() : memref<32xf32>" in emulated_ir
    assert emulated_ir.count("arith.xori") == 5  # offsets 16, 8, 4, 2, 1
    opts = compiler.CompileOptions(target="cuda-emulation", schedule="map warp_vertex lanes 8")
    emulated_ir = compiler.compile_source(src, options=opts, stop_after="scf").stages["emulate-grid"]
    assert "memref<8xf32>" in emulated_ir and emulated_ir.count("arith.xori") == 3  # offsets 4, 2, 1


@pytest.mark.parametrize("name", slow_except(sorted(set(DIMS) - set(THREAD_EDGE_REFUSED)), "gcn"))
@given(graph=graphs(), group=GROUPS, seed=st.integers(0, 2**32 - 1))
@settings(max_examples=6)
def test_thread_edge_matches_reference(name, graph, group, seed):
    check(name, group, graph, seed, strategy="thread_edge")


@pytest.mark.parametrize("name", slow_except(sorted(set(DIMS) - set(WARP_EDGE_REFUSED)), "gcn"))
@given(graph=graphs(), group=GROUPS, tile=TILES, lanes=LANE_COUNTS, seed=st.integers(0, 2**32 - 1))
@settings(max_examples=6)
def test_warp_edge_matches_reference(name, graph, group, tile, lanes, seed):
    check(name, group, graph, seed, strategy="warp_edge", tile=tile, lanes=lanes)


@pytest.mark.parametrize("strategy", ["thread_edge", "warp_edge"])
def test_edge_mappings_keep_max_semantics(strategy):
    # NaN propagates through the atomic max (fmaximum, not maxnum), and a
    # destination with no in-edges gets 0, not the -inf its row starts from
    graph = gnnc.Graph.from_coo(np.array([0, 1, 2, 2, 0]), np.array([1, 1, 1, 3, 3]), num_vertices=5)
    x = np.array([[1.0, -2.0], [np.nan, -2.0], [1.0, -3.0], [4.0, 0.0], [9.0, 9.0]], np.float32)
    got = emulated("sage_max", 2, strategy).sage_max(graph, x=x)
    want = np.array([[0, 0], [np.nan, -2.0], [0, 0], [1.0, -2.0], [0, 0]], np.float32)
    np.testing.assert_array_equal(got, want)


def _softmax_sum_kernel(dtype: str) -> str:
    return f"""
kernel wsum(h: {dtype}[V, F], s: {dtype}[E]) -> {dtype}[V, F] {{
    out[v] = sum(softmax(s[e]) * h[u])
}}
"""


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["thread_edge", "warp_edge"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@settings(max_examples=25, deadline=None)
@given(graph=graphs(), data=st.data())
def test_the_stabilizing_max_is_exact_through_integer_atomics(strategy, dtype, graph, data):
    # deferred division's max is an atomic fmax, done on the value's bits as
    # a signed max or an unsigned min: scores of both signs, zeros of both
    # signs, subnormals, infinities and NaN give what the reference gives
    np_dtype = np.float32 if dtype == "f32" else np.float64
    tiny = np.finfo(np_dtype).smallest_subnormal
    specials = [0.0, -0.0, 1.5, -1.5, -7.0, 30.0, -30.0, tiny, -tiny, np.inf, -np.inf, np.nan]
    scores = np.array(
        data.draw(st.lists(st.sampled_from(specials), min_size=graph.num_edges, max_size=graph.num_edges), label="s"),
        np_dtype,
    )
    source = _softmax_sum_kernel(dtype)
    module = _compiled(source, mapping_text(strategy, 2))
    assert (
        'atomic_rmw "fmax"'
        in compiler.compile_source(
            source,
            options=compiler.CompileOptions(target="cuda-emulation", schedule=mapping_text(strategy, 2)),
            stop_after="scf",
        ).stages["map-threads"]
    )
    h = np.random.default_rng(0).standard_normal((graph.num_vertices, 3)).astype(np_dtype)
    got = module.wsum(graph, h=h, s=scores)
    want = gnnc.compile(source, target="reference").wsum(graph, h=h, s=scores)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "f32" else 1e-12, atol=1e-6, equal_nan=True)


@functools.cache
def _compiled(source: str, schedule: str):
    return gnnc.compile(source, target="cuda-emulation", schedule=schedule)


def test_edge_grid_sizes_follow_the_edges():
    # one grid per launch: initialise the rows, the edges, then the means; the
    # runtime sizes the edge grid by E / group, the others by V
    module = emulated("sage_mean", 3, "thread_edge")
    from gnnc.ir import abi

    grid = module.sage_mean._abi.grid
    assert grid.grids == [abi.Launch("V", 1), abi.Launch("E", 3), abi.Launch("V", 1)]

    assert abi.grid_blocks(grid, 300, 3 * 256 * 2 + 1) == [2, 3, 2]
    src = (EXAMPLES / "sage_mean.gnn").read_text()
    opts = compiler.CompileOptions(target="cuda-emulation", schedule="map thread_edge group 3")
    mapped = compiler.compile_source(src, options=opts, stop_after="scf").stages["map-threads"]
    assert 'llvm_ext.atomic_rmw "fadd"' in mapped and "math.ctlz" in mapped
    assert mapped.count("loop.grid") == 3


@pytest.mark.parametrize("strategy", slow_except(["thread_edge", "warp_edge"], "warp_edge"))
@pytest.mark.parametrize("group", slow_except([1, 5], 5))
def test_edge_grid_over_several_blocks_and_a_hub(strategy, group):
    # more edges than one block of threads (warps) covers, one destination with
    # most of them: the binary search, the last block's guard and the atomics
    rng = np.random.default_rng(group)
    v, n = 300, 256 * group * 3 + 77
    dst = np.where(rng.random(n) < 0.6, 7, rng.integers(0, v, n))
    graph = gnnc.Graph.from_coo(rng.integers(0, v, n), dst, num_vertices=v)
    for name in ("gcn", "sage_max", "sage_mean"):
        check(name, group, graph, seed=group, strategy=strategy)


@pytest.mark.parametrize(
    "name, strategy, tile",
    [("gcn", "warp_vertex", 2), ("sage_mean", "warp_vertex", None), ("sage_max", "warp_edge", 3)],
)
def test_warp_vertex_feature_sizes(name, strategy, tile):
    # feature sizes below, at and above a warp's 32 lanes (times the tile)
    rng = np.random.default_rng(1)
    v = 50
    graph = gnnc.Graph.from_coo(rng.integers(0, v, 300), rng.integers(0, v, 300), num_vertices=v)
    for f in (1, 3, 17, 64, 130):
        check(name, 2, graph, seed=f, dims={"F": f}, strategy=strategy, tile=tile)


@pytest.mark.parametrize("name", ["gat", "attention", "sage_max"])
@pytest.mark.parametrize("group", [1, 3])
@pytest.mark.parametrize("strategy", ["thread_vertex", "warp_vertex"])
def test_several_blocks(name, group, strategy):
    # more vertices than one block of 256 threads runs: block index arithmetic and the last block's guard
    rng = np.random.default_rng(group)
    v = 256 * group + 77
    src, dst = rng.integers(0, v, 3 * v), rng.integers(0, v, 3 * v)
    check(name, group, gnnc.Graph.from_coo(src, dst, num_vertices=v), seed=group, strategy=strategy)


def test_grid_is_sized_by_the_mapping():
    src = (EXAMPLES / "gcn.gnn").read_text()
    opts = compiler.CompileOptions(target="cuda-emulation", schedule="map thread_vertex group 4")
    result = compiler.compile_source(src, options=opts, stop_after="scf")
    mapped = result.stages["map-threads"]
    assert "loop.grid" in mapped and "mapping thread_vertex" in mapped
    assert "loop.for_dst" not in mapped
    assert "arith.constant 4 : index" in mapped
    assert "loop.grid" not in result.stages["emulate-grid"]


def test_cpu_schedules_do_not_reach_the_cuda_target():
    # a cpu schedule beside a cuda one: the cuda compile runs the cuda mapping only
    src = (EXAMPLES / "gcn.gnn").read_text() + (
        "\nschedule gcn for cpu { partition src 4 }\nschedule gcn for cuda { map thread_vertex group 2 }\n"
    )
    result = compiler.compile_source(src, options=compiler.CompileOptions(target="cuda-emulation"), stop_after="scf")
    assert "\\22partitions\\22: null" in result.stages["map-threads"]
    assert "arith.constant 2 : index" in result.stages["map-threads"]


@pytest.mark.parametrize(
    "directive, reason",
    [
        ("map thread_edge tile 2", "nothing to tile over threads"),
        ("map thread_vertex lanes 4", "map thread_vertex lanes 4 is refused: .*use map warp_vertex lanes 4"),
        ("map warp_vertex lanes 3", "'lanes' must be a power of two up to 32"),
        ("map warp_vertex lanes 64", "'lanes' must be a power of two up to 32"),
        ("map thread_vertex tile 2", "nothing to tile over threads"),
        ("map thread_vertex group 0", "positive integer"),
        ("map vertex_thread", "thread_vertex"),
    ],
)
def test_unimplemented_or_bad_mappings_are_refused(directive, reason):
    src = (EXAMPLES / "gcn.gnn").read_text()
    with pytest.raises(gnnc.GnncError, match=reason):
        compiler.compile_source(src, options=compiler.CompileOptions(target="cuda-emulation", schedule=directive))


def test_map_threads_refuses_what_the_frontend_would_not_catch():
    from gnnc.ir.schedule import CudaSchedule

    with pytest.raises(gnnc.CompileError, match="unknown thread mapping"):
        CudaSchedule.parse("block_vertex")
    with pytest.raises(gnnc.CompileError, match="positive integer"):
        CudaSchedule.parse("thread_vertex group x")
    assert CudaSchedule.parse("thread_vertex group 4") == CudaSchedule("thread_vertex", 4, None)
    assert CudaSchedule.parse("warp_vertex lanes 8").lanes == 8
    with pytest.raises(gnnc.CompileError, match="power of two"):
        CudaSchedule.parse("warp_vertex lanes 6")


def test_unknown_target_is_refused():
    with pytest.raises(gnnc.ArgumentError, match="unknown target"):
        gnnc.compile(EXAMPLES / "gcn.gnn", target="cuda-emu")


@pytest.mark.parametrize(
    "name, mapping",
    slow_except(
        [
            ("gat", "map thread_vertex group 2"),
            ("mlp_aggr", "map thread_vertex"),
            ("mlp_aggr", "map thread_edge group 2"),
            ("sage_max", "map warp_edge tile 2"),
            ("attention", "map warp_vertex"),
            ("attention", "map warp_edge group 2"),
            ("gat", "map warp_vertex hybrid 4"),
            ("gin", "map thread_edge hybrid 2"),
            ("mlp_aggr", "map warp_vertex"),
        ],
        ("sage_max", "map warp_edge tile 2"),
    ),
)
def test_every_cuda_emulation_stage_parses_back(name, mapping):
    path = EXAMPLES / f"{name}.gnn"
    opts = compiler.CompileOptions(target="cuda-emulation", schedule=mapping)
    result = compiler.compile_source(path.read_text(), str(path), options=opts, stop_after="scf")
    stages = [pipeline.FRONTEND_STAGE, *pipeline.CUDA_EMULATION_PIPELINE]
    assert list(result.stages) == stages
    for stage in stages:
        module = Parser(pipeline.make_context(), result.stages[stage]).parse_module()
        module.verify()
        assert str(module) == result.stages[stage], stage


def test_grid_verifier_rejects_a_block_size_off_the_warp():
    from xdsl.dialects import arith
    from xdsl.dialects.builtin import IndexType, IntegerAttr
    from xdsl.ir import Block
    from xdsl.utils.exceptions import VerifyException

    from gnnc.ir import loop

    n = arith.ConstantOp(IntegerAttr(1, IndexType()))
    body = Block(arg_types=[IndexType(), IndexType()])
    body.add_op(loop.YieldOp())
    with pytest.raises(VerifyException, match="multiple of 32"):
        loop.GridOp(n.result, 100, "thread_vertex", body).verify()


def test_call_time_mapping_compiles_an_emulated_variant():
    graph = gnnc.Graph(np.array([[0, 1, 2, 2, 3], [1, 2, 0, 1, 1]]))
    module = emulated("gcn", 1)
    x = np.random.default_rng(0).random((4, 40), dtype=np.float32)
    w = np.ones(5, np.float32)
    want = module.gcn(graph, x=x, w=w)
    got = module.gcn(graph, x=x, w=w, schedule="map warp_vertex tile 3")
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert module.gcn._variants["map warp_vertex tile 3"]._abi.grid.mapping == "warp_vertex"


def test_atomic_rmw_verifier():
    from xdsl.dialects import arith, test
    from xdsl.dialects.builtin import DYNAMIC_INDEX, FloatAttr, IndexType, IntegerAttr, MemRefType, f32, f64
    from xdsl.utils.exceptions import VerifyException

    from gnnc.ir.llvm_ext import AtomicRmwOp

    buf = test.TestOp(result_types=[MemRefType(f32, [DYNAMIC_INDEX])]).results[0]
    i = arith.ConstantOp(IntegerAttr(0, IndexType())).result
    x32, x64 = arith.ConstantOp(FloatAttr(1.0, f32)).result, arith.ConstantOp(FloatAttr(1.0, f64)).result
    AtomicRmwOp("fmaximum", x32, buf, i).verify()
    AtomicRmwOp("fmax", x32, buf, i).verify()
    with pytest.raises(VerifyException, match="unknown kind 'fmaxnum'"):
        AtomicRmwOp("fmaxnum", x32, buf, i).verify()
    with pytest.raises(VerifyException, match="does not match"):
        AtomicRmwOp("fadd", x64, buf, i).verify()


def _hub_graph(v: int = 600, hub_edges: int = 2000, seed: int = 0) -> gnnc.Graph:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, v, hub_edges + v)
    dst = np.concatenate([np.full(hub_edges, 3), rng.integers(0, v, v)])
    return gnnc.Graph.from_coo(src, dst, num_vertices=v)


def test_default_cuda_mapping_rule():
    from gnnc.autotune.heuristic import default_cuda_mappings

    rng = np.random.default_rng(0)
    sparse = gnnc.Graph.from_coo(rng.integers(0, 500, 1000), rng.integers(0, 500, 1000), num_vertices=500)
    dense = gnnc.Graph.from_coo(rng.integers(0, 100, 3000), rng.integers(0, 100, 3000), num_vertices=100)
    assert default_cuda_mappings(gnnc.Graph.from_coo(np.zeros(0), np.zeros(0), num_vertices=0), 64) == ["thread_vertex"]
    assert default_cuda_mappings(sparse, 4) == ["thread_vertex"]
    assert default_cuda_mappings(sparse, 64) == ["warp_vertex", "thread_vertex"]
    assert default_cuda_mappings(dense, 8)[0] == "warp_vertex lanes 8"  # mean in-degree 30: 4 destinations a warp
    assert default_cuda_mappings(dense, 9)[0] == "warp_vertex lanes 16"
    assert default_cuda_mappings(dense, 17)[0] == "warp_vertex"
    assert default_cuda_mappings(dense, 4)[0] == "thread_vertex"
    assert default_cuda_mappings(_hub_graph(), 64) == ["warp_edge", "thread_edge", "warp_vertex", "thread_vertex"]
    assert default_cuda_mappings(_hub_graph(), 4) == ["thread_edge", "thread_vertex"]


@pytest.mark.parametrize(
    "name, dims, expected",
    slow_except(
        [
            ("gcn", {"F": 64}, "warp_edge"),
            ("gat", {"H": 2, "F": 32}, "warp_edge"),  # softmax as three edge launches
            ("mlp_aggr", {"D1": 5, "D2": 40}, "warp_edge"),  # its `@` interchanged for the lanes
            ("sage_max", {"F": 3}, "thread_edge"),
            ("sage_mean", {"F": 12}, "warp_vertex lanes 16"),
        ],
        ("gcn", {"F": 64}, "warp_edge"),
        ("sage_mean", {"F": 12}, "warp_vertex lanes 16"),
    ),
)
def test_kernels_without_a_cuda_schedule_run_the_default_mapping(name, dims, expected):
    module = gnnc.compile(EXAMPLES / f"{name}.gnn", target="cuda-emulation")
    kernel = getattr(module, name)
    assert kernel._abi.grid.schedule_given is False
    if expected.startswith("warp_vertex lanes"):  # no hub, many edges per destination, rows of 12
        rng = np.random.default_rng(0)
        graph = gnnc.Graph.from_coo(rng.integers(0, 100, 3000), rng.integers(0, 100, 3000), num_vertices=100)
    else:
        graph = _hub_graph()
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, 0)
    assert_matches(kernel(graph, **inputs), getattr(reference(name), name)(graph, **inputs), graph, np.float32)
    chosen = kernel._default_variant(graph, {**dims})
    mapping, _, lanes = expected.partition(" lanes ")
    assert chosen is not None and chosen._abi.grid.mapping == mapping
    assert chosen._abi.grid.lanes == (int(lanes) if lanes else 32 if mapping.startswith("warp") else 1)
    # a small, sparse graph with narrow rows runs as compiled (thread_vertex)
    small = gnnc.Graph.from_coo(np.array([0, 1]), np.array([1, 2]), num_vertices=3)
    assert kernel._default_variant(small, dict.fromkeys(dims, 2)) is None


#: every mapping with its options, on random kernels: a mapping either refuses
#: the kernel naming itself and the reason, or matches the reference
RANDOM_MAPPINGS = st.sampled_from(
    [
        "map thread_vertex group 2",
        "map warp_vertex tile 2",
        "map warp_vertex lanes 4",
        "map thread_edge group 3",
        "map warp_edge",
        "map warp_edge lanes 8 group 2",
        "map thread_vertex hybrid 3",
        "map warp_edge hybrid 2 tile 2",
    ]
)


@given(
    source=random_kernels(),
    mapping=RANDOM_MAPPINGS,
    graph=graphs(max_edges=120),
    f=st.sampled_from((1, 3, 17, 40)),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=16)
@pytest.mark.slow
def test_random_kernels_under_every_mapping(tmp_path_factory, source, mapping, graph, f, seed):
    path = tmp_path_factory.mktemp("k") / "k.gnn"
    path.write_text(source)
    try:
        kernel = gnnc.compile(path, target="cuda-emulation", schedule=mapping).k
    except gnnc.CompileError as exc:
        assert re.search(f"map {mapping.split()[1]}( hybrid \\d+)? is refused: ", str(exc)), str(exc)
        return
    dtype = np.float32 if kernel.signature.dtype == "f32" else np.float64
    inputs = random_inputs(kernel.signature, graph, {"F": f}, dtype, seed)
    assert_matches(kernel(graph, **inputs), gnnc.compile(path, target="reference").k(graph, **inputs), graph, dtype)


TRANSPOSE_SOURCE = """
kernel tr(x: f32[V, F], y: f32[V, K], m: f32[V, F, K], w: f32[E]) -> f32[V, K, F] {
    out[v] = sum(transpose(outer(x[u] * w[e], y[v]) + m[u])) + transpose(m[v]) * 0.5
}
kernel back(a: f32[V, H, K, F], x: f32[V, H, K], y: f32[V, H, F], w: f32[E]) -> f32[V, H, F] {
    out[v] = sum(dot(transpose(a[u] * w[e]), outer(y[v], x[u])))
}
kernel edge(m: f32[V, F, K]) -> f32[E, K, F] {
    out[e] = transpose(m[u]) - transpose(tanh(m[v]))
}
kernel red(m: f32[V, F, F], x: f32[V, F]) -> f32[V, F] {
    out[v] = sum(dot(transpose(m[u]), outer(x[v], x[u])))
}
"""


@given(
    name=st.sampled_from(["tr", "back", "edge", "red"]),
    mapping=RANDOM_MAPPINGS,
    graph=graphs(max_edges=120),
    f=st.sampled_from((1, 3, 17)),
    k=st.sampled_from((1, 2)),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=16)
@pytest.mark.slow
def test_transpose_under_every_mapping(name, mapping, graph, f, k, seed):
    """transpose reads its operand at swapped indices: lanes and tiles that split F still read the right rows."""
    try:
        kernel = getattr(
            gnnc.compile(TRANSPOSE_SOURCE, kernels=[name], target="cuda-emulation", schedule=mapping), name
        )
    except gnnc.CompileError as exc:
        assert re.search(f"map {mapping.split()[1]}( hybrid \\d+)? is refused: ", str(exc)), str(exc)
        return
    inputs = random_inputs(kernel.signature, graph, {"F": f, "K": k, "H": 2}, np.float32, seed)
    want = getattr(gnnc.compile(TRANSPOSE_SOURCE, target="reference"), name)(graph, **inputs)
    assert_matches(kernel(graph, **inputs), want, graph, np.float32)


# ------------------------------------------------ hybrid partitioning (FeatGraph)

#: mappings with `hybrid K`: the hot sources' rows staged in shared memory per block
HYBRID_MAPPINGS = st.sampled_from(
    [
        "map thread_vertex hybrid {k}",
        "map thread_vertex group 3 hybrid {k}",
        "map warp_vertex tile 2 hybrid {k}",
        "map warp_vertex lanes 8 hybrid {k}",
        "map thread_edge group 2 hybrid {k}",
        "map warp_edge lanes 4 hybrid {k}",
    ]
)
HYBRID_NAMES = ["attention", "gat", "gcn", "gcn_norm", "gin", "mlp_aggr", "sage_max", "sage_mean"]


@functools.cache
def emulated_with(name: str, mapping: str):
    return gnnc.compile(EXAMPLES / f"{name}.gnn", target="cuda-emulation", schedule=mapping)


@pytest.mark.slow
@pytest.mark.parametrize("name", HYBRID_NAMES)
@given(
    graph=graphs(),
    mapping=HYBRID_MAPPINGS,
    k=st.sampled_from([1, 2, 5, 64]),
    f=st.sampled_from([1, 3, 17, 40]),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=6)
def test_hybrid_matches_reference(name, graph, mapping, k, f, seed):
    mapping = mapping.format(k=k)
    try:
        kernel = getattr(emulated_with(name, mapping), name)
    except gnnc.CompileError as exc:  # what the mapping refuses without hybrid, it refuses with it
        assert f"map {mapping.split()[1]} is refused: " in str(exc) and "hybrid" not in str(exc).split(":")[1]
        return
    dims = dict.fromkeys(("F", "D", "D1", "D2"), f) | {"H": 2}
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, seed)
    assert_matches(kernel(graph, **inputs), getattr(reference(name), name)(graph, **inputs), graph, np.float32)


def _hybrid_hub_graph(v: int = 900, seed: int = 0) -> gnnc.Graph:
    # a few sources of high out-degree, over several blocks of destinations / edges
    rng = np.random.default_rng(seed)
    n = 4000
    src = np.where(rng.random(n) < 0.5, rng.integers(0, 6, n), rng.integers(0, v, n))
    return gnnc.Graph.from_coo(src, rng.integers(0, v, n), num_vertices=v)


@pytest.mark.parametrize(
    "mapping",
    slow_except(
        [
            "map thread_vertex hybrid 8",
            "map warp_vertex group 2 hybrid 8",
            "map thread_edge hybrid 8",
            "map warp_edge group 3 hybrid 8",
        ],
        "map thread_edge hybrid 8",
    ),
)
@pytest.mark.parametrize("f", slow_except([1, 33, 5000], 5000))
def test_hybrid_over_several_blocks_and_a_capped_k(mapping, f):
    # F = 5000 f32: 20 000 bytes a row, two rows fit in 48 KB, so K' = 2 < 8
    from gnnc.graph.plans import hybrid_plan
    from gnnc.ir import abi

    graph = _hybrid_hub_graph()
    kernel = emulated_with("gcn", mapping).gcn
    inputs = random_inputs(kernel.signature, graph, {"F": f}, np.float32, f)
    assert_matches(kernel(graph, **inputs), reference("gcn").gcn(graph, **inputs), graph, np.float32)
    hot, slot, shared = hybrid_plan(graph, kernel._abi.grid, {"F": f}, 4)
    assert hot[0] == (2 if f == 5000 else 8) and max(shared) <= abi.SHARED_MEMORY_BYTES
    hubs = set(range(6))  # half of the edges leave one of them
    assert (set(hot[1:7]) == hubs if hot[0] >= 6 else set(hot[1:]) <= hubs) and np.count_nonzero(slot >= 0) == hot[0]


def test_hybrid_plan_ranks_sources_by_out_degree():
    from gnnc.graph import plans

    # out-degrees: 3 -> 3 edges, 1 -> 2, 0 -> 2 (ties by id: 0 before 1), 2 -> 0
    graph = gnnc.Graph.from_coo(np.array([3, 1, 3, 0, 1, 3, 0]), np.array([0, 0, 1, 2, 2, 2, 3]), num_vertices=4)
    hot, slot = plans.hybrid_sources(graph, 2, 8, 48 << 10)
    assert hot.tolist() == [2, 3, 0] and slot.tolist() == [1, -1, -1, 0]
    hot, slot = plans.hybrid_sources(graph, 10, 8, 48 << 10)  # only the 3 sources with out-edges
    assert hot.tolist() == [3, 3, 0, 1] and slot.tolist() == [1, 2, -1, 0]
    hot, _ = plans.hybrid_sources(graph, 10, 20 << 10, 48 << 10)  # two rows of 20 KB fit
    assert hot[0] == 2
    empty = gnnc.Graph.from_coo(np.zeros(0), np.zeros(0), num_vertices=0)
    assert plans.hybrid_sources(empty, 4, 8, 48 << 10)[0].tolist() == [0]
    with pytest.raises(gnnc.ArgumentError, match="more than the 48 KB"):
        plans.hybrid_sources(graph, 2, 49 << 10, 48 << 10)


def test_hybrid_row_wider_than_shared_memory_is_a_clear_error():
    graph = _hybrid_hub_graph()
    kernel = emulated_with("gcn", "map thread_vertex hybrid 4").gcn
    inputs = random_inputs(kernel.signature, graph, {"F": 13000}, np.float32, 0)
    with pytest.raises(
        gnnc.ArgumentError,
        match=r"map thread_vertex hybrid 4: one source's rows take 52000 bytes, "
        r"more than the 48 KB",
    ):
        kernel(graph, **inputs)


def test_hybrid_stages_then_waits_then_computes():
    src = (EXAMPLES / "gat.gnn").read_text()
    opts = compiler.CompileOptions(target="cuda-emulation", schedule="map warp_vertex hybrid 16")
    stages = compiler.compile_source(src, options=opts, stop_after="scf").stages
    mapped = stages["map-threads"]
    assert mapped.count("llvm_ext.barrier") == 1 and "llvm_ext.shared_memory" in mapped
    grid = json.loads(re.search(r'gnnc.ir.abi = "(.*?)"\}', mapped).group(1).replace("\\22", '"'))["grid"]
    assert grid["hybrid"] == 16 and grid["grids"] == [{"group": 1, "over": "V", "shared": [["H"], ["F", "H"]]}]
    emulated_ir = stages["emulate-grid"]
    # MCUDA: the block's thread loop split at the barrier, the shared memory one stack buffer
    assert "llvm_ext" not in emulated_ir.replace("llvm_ext.atomic_rmw", "")
    assert "memref.alloca" in emulated_ir


def test_hybrid_needs_the_barrier(tmp_path, monkeypatch):
    # without the barrier the emulation runs a thread's edges before the other
    # threads have staged their share of the rows, and the result is wrong:
    # the emulation checks the barrier, not only the index arithmetic
    from xdsl.dialects import arith
    from xdsl.dialects.builtin import IndexType, IntegerAttr

    from gnnc.transforms.loop import hybrid_staging

    v = 40
    graph = gnnc.Graph.from_coo(np.zeros(v, dtype=np.int64), np.arange(v), num_vertices=v)  # source 0 is hot
    x = np.random.default_rng(7).random((v, 64), dtype=np.float32) + 1
    w = np.ones(v, np.float32)
    want = reference("gcn").gcn(graph, x=x, w=w)
    np.testing.assert_allclose(emulated_with("gcn", "map thread_vertex hybrid 1").gcn(graph, x=x, w=w), want, rtol=1e-6)
    path = tmp_path / "gcn.gnn"
    path.write_text((EXAMPLES / "gcn.gnn").read_text() + f"\n# {tmp_path.name}\n")  # not the cached compile
    monkeypatch.setattr(hybrid_staging, "BarrierOp", lambda: arith.ConstantOp(IntegerAttr(0, IndexType())))
    kernel = gnnc.compile(path, target="cuda-emulation", schedule="map thread_vertex hybrid 1").gcn
    assert not np.allclose(kernel(graph, x=x, w=w), want)


def test_hybrid_refuses_a_kernel_without_source_rows(tmp_path):
    path = tmp_path / "s.gnn"
    path.write_text("kernel s(w: f32[E]) -> f32[V] { out[v] = sum(w[e]) }\n")
    with pytest.raises(gnnc.CompileError, match="map thread_vertex hybrid 4 is refused: its edges read no source rows"):
        gnnc.compile(path, target="cuda-emulation", schedule="map thread_vertex hybrid 4")


@pytest.mark.parametrize(
    "directive, reason",
    [
        ("map thread_vertex hybrid 0", "positive integer"),
        ("map thread_vertex hybrid", "needs a positive integer"),
        ("map warp_vertex hybrid 2 hybrid 3", "given twice"),
    ],
)
def test_bad_hybrid_directives(directive, reason):
    with pytest.raises(gnnc.GnncError, match=reason):
        emulated_with("gcn", directive)


#: aggregations combined at the destination: kept per destination (dst_scratch)
#: under the edge mappings, updated with atomics, finished in a vertex launch
ACCUMULATORS = """
kernel acc(x: f32[V, F], a: f32[E], eps: f32) -> (g: f32[V, F], q: f32[V, F], m: f32[V, F]) {
    g[v] = (1 + eps) * x[v] + sum(x[u])
    q[v] = sum(a[e] * x[u]) / sum(a[e])
    m[v] = max(x[u]) - min(a[e] * x[u]) + mean(x[u])
}
"""


@functools.cache
def accumulators_kernel(mapping: str):
    import tempfile

    path = Path(tempfile.mkdtemp()) / "acc.gnn"
    path.write_text(ACCUMULATORS)
    return (
        gnnc.compile(path, target="cuda-emulation", schedule=mapping).acc,
        gnnc.compile(path, target="reference").acc,
    )


@pytest.mark.parametrize(
    "mapping",
    slow_except(
        [
            "map thread_edge",
            "map thread_edge group 3",
            "map warp_edge tile 2",
            "map warp_edge lanes 4 group 2",
            "map thread_edge hybrid 4",
        ],
        "map warp_edge lanes 4 group 2",
    ),
)
@given(graph=graphs(), f=st.sampled_from([1, 3, 40]), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=6)
def test_edge_mappings_keep_destination_accumulators(mapping, graph, f, seed):
    kernel, reference_kernel = accumulators_kernel(mapping)
    assert kernel._abi.grid.dst_scratch is True
    inputs = random_inputs(kernel.signature, graph, {"F": f}, np.float32, seed)
    inputs["a"] = np.abs(inputs["a"]) + 0.5  # a quotient with a denominator away from 0
    assert_matches(kernel(graph, **inputs), reference_kernel(graph, **inputs), graph, np.float32)


def test_gin_under_thread_edge_updates_destination_rows_atomically():
    src = (EXAMPLES / "gin.gnn").read_text()
    opts = compiler.CompileOptions(target="cuda-emulation", schedule="map thread_edge")
    mapped = compiler.compile_source(src, options=opts, stop_after="scf").stages["map-threads"]
    assert mapped.count("loop.grid") == 3 and 'llvm_ext.atomic_rmw "fadd"' in mapped
    # the accumulator is no longer per thread: the edge grid never stores to the scratch slice
    edge_grid = mapped.split("loop.grid")[2]
    assert "%12[" not in edge_grid.split("loop.grid")[0].replace("memref.load %12[", "")


def test_softmax_runs_as_edge_launches_between_vertex_launches():
    # gat under thread_edge: max (atomic fmax: the NaN-ignoring stabilizer of
    # deferred division), then exp / sum / weighted sum (atomic fadd), then the
    # normalisation of alpha, each an edge launch, the destination's work
    # between them in vertex launches
    src = (EXAMPLES / "gat.gnn").read_text()
    opts = compiler.CompileOptions(target="cuda-emulation", schedule="map thread_edge group 2")
    mapped = compiler.compile_source(src, options=opts, stop_after="scf").stages["map-threads"]
    assert 'llvm_ext.atomic_rmw "fmax"' in mapped and 'llvm_ext.atomic_rmw "fadd"' in mapped
    assert 'llvm_ext.atomic_rmw "fmaximum"' not in mapped
    kernel = emulated("gat", 2, "thread_edge").gat
    assert [launch.over for launch in kernel._abi.grid.grids] == ["V", "E", "V", "E", "V", "E", "V"]
    graph = _hub_graph()
    inputs = random_inputs(kernel.signature, graph, {"H": 2, "F": 5}, np.float32, 3)
    assert_matches(kernel(graph, **inputs), reference("gat").gat(graph, **inputs), graph, np.float32)


#: a vertex's x[v] @ W kept in the thread's scratch within one vertex launch,
#: beside an accumulator that must outlive the edge launch (found by the random
#: kernels: moving the temporary to the shared per-destination row raced the lanes)
TEMPORARY_BESIDE_ACCUMULATOR = """
kernel k(x: f32[V, F], W: f32[F, F]) -> f32[V, F] {
    h[v] = sum(x[u])
    out[v] = sum(tanh(h[u]) * tanh(x[u] @ W)) + h[v]
}
"""


@pytest.mark.parametrize(
    "mapping", slow_except(["map thread_edge", "map warp_edge", "map warp_edge lanes 2 tile 2"], "map warp_edge")
)
def test_edge_mappings_keep_one_launch_temporaries_per_thread(tmp_path, mapping):
    path = tmp_path / "k.gnn"
    path.write_text(TEMPORARY_BESIDE_ACCUMULATOR)
    kernel = gnnc.compile(path, target="cuda-emulation", schedule=mapping).k
    for graph in (gnnc.Graph.from_coo(np.zeros(300, int), np.zeros(300, int), num_vertices=1), _hub_graph()):
        for f in (3, 40):
            inputs = random_inputs(kernel.signature, graph, {"F": f}, np.float32, 0)
            assert_matches(
                kernel(graph, **inputs), gnnc.compile(path, target="reference").k(graph, **inputs), graph, np.float32
            )


# ------------------------------------------------ log and tanh, expanded inline as on the GPU

#: both functions at sources and destinations, as the cuda target computes them (expand-log, expand-tanh)
LOG_TANH = """
kernel k(x: {t}[V, F]) -> (lg: {t}[E, F], th: {t}[E, F]) {{
    lg[e] = log(x[u])
    th[e] = tanh(x[v])
}}
"""
LOG_TANH_AGGREGATE = """
kernel k(x: {t}[V, F], w: {t}[E]) -> {t}[V, F] {{
    out[v] = sum(tanh(x[u] * w[e] * 4) * log(1 + x[v] * x[v])) + log(abs(x[v])) + max(tanh(x[u] - x[v]))
}}
"""


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "mapping",
    slow_except(["map thread_vertex group 3", "map warp_edge lanes 4", "map thread_edge"], "map warp_edge lanes 4"),
)
def test_log_and_tanh_match_the_reference_specials_included(dtype, mapping):
    t = "f32" if dtype == np.float32 else "f64"
    source = LOG_TANH.format(t=t)
    result = compiler.compile_source(
        source, "k.gnn", compiler.CompileOptions(target="cuda-emulation", schedule=mapping), stop_after="scf"
    )
    assert "math.log" not in result.stages["expand-log"] and "math.tanh" not in result.stages["expand-tanh"]
    kernel = gnnc.compile(source, target="cuda-emulation", schedule=mapping).k
    finfo = np.finfo(dtype)
    specials = [
        0.0,
        -0.0,
        -1.0,
        np.inf,
        -np.inf,
        np.nan,
        finfo.smallest_subnormal,
        finfo.tiny,
        finfo.max,
        1e-3,
        -1e-3,
        0.625,
        -0.625,
        0.62,
        9.5,
        -25.0,
        1.0,
        2.0,
    ]
    rng = np.random.default_rng(0)
    values = np.concatenate([specials, rng.uniform(-30, 30, 200), np.exp(rng.uniform(-80, 80, 200))]).astype(dtype)
    x = values.reshape(-1, 2)
    n = len(x)
    # a ring, self loops and a duplicate: every vertex is a source and a destination
    src = np.concatenate([np.arange(n), np.arange(n), [0]])
    dst = np.concatenate([(np.arange(n) + 1) % n, np.arange(n), [1]])
    graph = gnnc.Graph.from_coo(src, dst, num_vertices=n)
    got = kernel(graph, x=x)
    assert_matches(got, gnnc.compile(source, target="reference").k(graph, x=x), graph, dtype)
    # and within 1.5 ulp of the exact values, the specials exactly (signed zeros included)
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = {"lg": np.log(x[src].astype(np.longdouble)), "th": np.tanh(x[dst].astype(np.longdouble))}
    for name, want in exact.items():
        regular = np.isfinite(want) & (want != 0)
        rounded = want.astype(dtype)
        assert np.array_equal(got[name][~regular], rounded[~regular], equal_nan=True)
        assert np.array_equal(np.signbit(got[name][~regular]), np.signbit(rounded[~regular]))
        spacing = np.spacing(np.abs(rounded[regular])).astype(np.longdouble)
        assert (np.abs(got[name][regular] - want[regular]) / spacing).max() <= 1.5


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(
    mapping=RANDOM_MAPPINGS, graph=graphs(max_edges=120), f=st.sampled_from((1, 3, 17)), seed=st.integers(0, 2**32 - 1)
)
@settings(max_examples=8)
@pytest.mark.slow
def test_log_and_tanh_in_aggregations_under_every_mapping(dtype, mapping, graph, f, seed):
    source = LOG_TANH_AGGREGATE.format(t="f32" if dtype == np.float32 else "f64")
    try:
        kernel = _compiled_source(source, "cuda-emulation", mapping).k
    except gnnc.CompileError as exc:
        assert re.search(f"map {mapping.split()[1]}( hybrid \\d+)? is refused: ", str(exc)), str(exc)
        return
    inputs = random_inputs(kernel.signature, graph, {"F": f}, dtype, seed)
    assert_matches(kernel(graph, **inputs), _compiled_source(source, "reference").k(graph, **inputs), graph, dtype)


@functools.cache
def _compiled_source(source: str, target: str, mapping: str | None = None):
    return gnnc.compile(source, target=target, schedule=mapping)
