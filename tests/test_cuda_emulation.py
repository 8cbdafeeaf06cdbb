"""The cuda thread mappings, run as a CPU emulation of their grids, against the reference.

`target="cuda-emulation"` runs the cuda pipeline (map-threads included) and
lowers each `loop.grid` to loops over blocks and threads, so the mapping's
index arithmetic (which destinations a thread runs, the guards, each thread's
scratch slice) is checked on any machine.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.parser import Parser

import gnnc
from gnnc import compiler
from gnnc.passes import pipeline
from tests.helpers import assert_matches
from tests.strategies import graphs, random_inputs

EXAMPLES = Path(__file__).parent.parent / "examples"
DIMS = {"gcn": {"F": 17}, "sage_max": {"F": 3}, "sage_mean": {"F": 64}, "gin": {"F": 1},
        "attention": {"H": 2, "D": 17}, "gat": {"H": 2, "F": 3}, "mlp_aggr": {"D1": 5, "D2": 130},
        "gcn_norm": {"F": 17}}

#: Vertex group sizes: 1, sizes that do and do not divide a graph's vertex count.
GROUPS = st.sampled_from([1, 2, 3, 7])
#: warp_vertex feature tiles: none, 1, and sizes that do and do not divide the feature sizes
TILES = st.sampled_from([None, 1, 2, 5])
#: kernels whose per-thread scratch warp_vertex cannot split yet (refused with the reason)
WARP_REFUSED = {"gin", "gat", "attention", "mlp_aggr"}


def mapping_text(strategy: str, group: int, tile: int | None = None) -> str:
    return f"map {strategy} group {group}" + (f" tile {tile}" if tile is not None else "")


@functools.cache
def emulated(name: str, group: int, strategy: str = "thread_vertex", tile: int | None = None):
    return gnnc.compile(EXAMPLES / f"{name}.gnn", target="cuda-emulation",
                        schedule=mapping_text(strategy, group, tile))


@functools.cache
def reference(name: str):
    return gnnc.compile(EXAMPLES / f"{name}.gnn", target="reference")


def check(name: str, group: int, graph: gnnc.Graph, seed: int, dims=None, strategy="thread_vertex", tile=None) -> None:
    kernel = getattr(emulated(name, group, strategy, tile), name)
    inputs = random_inputs(kernel.signature, graph, dims or DIMS[name], np.float32, seed)
    got = kernel(graph, **inputs)
    want = getattr(reference(name), name)(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


@pytest.mark.parametrize("name", sorted(DIMS))
@given(graph=graphs(), group=GROUPS, seed=st.integers(0, 2**32 - 1))
@settings(max_examples=6)
def test_thread_vertex_matches_reference(name, graph, group, seed):
    check(name, group, graph, seed)


@pytest.mark.parametrize("name", sorted(set(DIMS) - WARP_REFUSED))
@given(graph=graphs(), group=GROUPS, tile=TILES, seed=st.integers(0, 2**32 - 1))
@settings(max_examples=6)
def test_warp_vertex_matches_reference(name, graph, group, tile, seed):
    check(name, group, graph, seed, strategy="warp_vertex", tile=tile)


@pytest.mark.parametrize("name", sorted(WARP_REFUSED))
def test_warp_vertex_refuses_kernels_with_scratch(name):
    with pytest.raises(gnnc.CompileError, match="map warp_vertex is refused: .*per-thread scratch"):
        emulated(name, 1, "warp_vertex")


@pytest.mark.parametrize("name, strategy, tile", [("gcn", "warp_vertex", 2), ("sage_mean", "warp_vertex", None)])
def test_warp_vertex_feature_sizes(name, strategy, tile):
    # feature sizes below, at and above a warp's 32 lanes (times the tile)
    rng = np.random.default_rng(1)
    v = 50
    graph = gnnc.Graph.from_coo(rng.integers(0, v, 300), rng.integers(0, v, 300), num_vertices=v)
    for f in (1, 3, 17, 64, 130):
        check(name, 2, graph, seed=f, dims={"F": f}, strategy=strategy, tile=tile)


@pytest.mark.parametrize("name", ["gat", "attention", "sage_max"])
@pytest.mark.parametrize("group", [1, 3])
def test_several_blocks(name, group):
    # more vertices than one block of 256 threads runs: block index arithmetic and the last block's guard
    rng = np.random.default_rng(group)
    v = 256 * group + 77
    src, dst = rng.integers(0, v, 3 * v), rng.integers(0, v, 3 * v)
    check(name, group, gnnc.Graph.from_coo(src, dst, num_vertices=v), seed=group)


def test_grid_is_sized_by_the_mapping():
    src = (EXAMPLES / "gcn.gnn").read_text()
    opts = compiler.CompileOptions(target="cuda-emulation", schedule="map thread_vertex group 4")
    result = compiler.compile_source(src, options=opts, stop_after="scf")
    mapped = result.stages["map-threads"]
    assert "loop.grid" in mapped and 'mapping "thread_vertex"' in mapped
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


@pytest.mark.parametrize("directive, reason", [
    ("map thread_edge", "'map thread_edge' is not supported yet"),
    ("map warp_edge group 2", "'map warp_edge' is not supported yet"),
    ("map thread_vertex tile 2", "nothing to tile over threads"),
    ("map thread_vertex group 0", "positive integer"),
    ("map vertex_thread", "thread_vertex"),
])
def test_unimplemented_or_bad_mappings_are_refused(directive, reason):
    src = (EXAMPLES / "gcn.gnn").read_text()
    with pytest.raises(gnnc.GnncError, match=reason):
        compiler.compile_source(src, options=compiler.CompileOptions(target="cuda-emulation", schedule=directive))


def test_map_threads_refuses_what_the_frontend_would_not_catch():
    from gnnc.schedule import CudaSchedule

    with pytest.raises(gnnc.CompileError, match="unknown thread mapping"):
        CudaSchedule.parse("block_vertex")
    with pytest.raises(gnnc.CompileError, match="positive integer"):
        CudaSchedule.parse("thread_vertex group x")
    assert CudaSchedule.parse("thread_vertex group 4") == CudaSchedule("thread_vertex", 4, None)


def test_unknown_target_is_refused():
    with pytest.raises(gnnc.ArgumentError, match="unknown target"):
        gnnc.compile(EXAMPLES / "gcn.gnn", target="cuda-emu")


@pytest.mark.parametrize("name", ["gat", "mlp_aggr"])
def test_every_cuda_emulation_stage_parses_back(name):
    path = EXAMPLES / f"{name}.gnn"
    opts = compiler.CompileOptions(target="cuda-emulation", schedule="map thread_vertex group 2")
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

    from gnnc.dialects import loop

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
    assert module.gcn._variants["map warp_vertex tile 3"]._abi["grid"]["mapping"] == "warp_vertex"
