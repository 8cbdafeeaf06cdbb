"""Each CPU schedule pass alone, on the loop IR it receives in the pipeline.

The input of a pass is the dump of the stage before it; the pass runs from
that text (through xDSL's parser with gnnc's dialects, as `gnnc-opt` does),
its output verifies, shows the schedule's structure, has consumed the
schedule entry, and is what the compiler's own stage after the pass printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser

import gnnc
from gnnc.driver import compiler, pipeline
from gnnc.ir import abi, loop
from gnnc.ir.loop_structure import constant_index
from gnnc.transforms.loop.prefetch_neighbors import DESTINATION_PREFETCH_ATTR
from tests.helpers import assert_matches, assert_random_kernel_matches, slow_except
from tests.strategies import graphs, random_kernels

EXAMPLES = Path(__file__).parent.parent / "examples"


def stages(name: str, schedule: str) -> dict[str, str]:
    source = (EXAMPLES / f"{name}.gnn").read_text()
    options = compiler.CompileOptions(schedule=schedule)
    return compiler.compile_source(source, f"{name}.gnn", options, stop_after="scf").stages


class _Reached(Exception):
    def __init__(self, text: str):
        self.text = text


def input_of(pass_name: str, source: str, schedule: str) -> str:
    """The dump the pipeline hands to pass_name, got without running pass_name or anything after it."""
    before = pipeline.CPU_PIPELINE[pipeline.CPU_PIPELINE.index(pass_name) - 1]

    def observe(stage: str, text: str) -> None:
        if stage == before:
            raise _Reached(text)

    try:
        compiler.compile_source(source, "k.gnn", compiler.CompileOptions(schedule=schedule), observe, stop_after="scf")
    except _Reached as reached:
        return reached.text
    raise AssertionError(f"the pipeline never reached {before}")


def run_alone(pass_name: str, name: str, schedule: str) -> tuple[ModuleOp, str]:
    """(the module after running pass_name alone on its pipeline input, the pipeline's own output text)."""
    module = apply_alone(pass_name, (EXAMPLES / f"{name}.gnn").read_text(), schedule)
    return module, stages(name, schedule)[pass_name]


def apply_alone(pass_name: str, source: str, schedule: str) -> ModuleOp:
    ctx = pipeline.make_context()
    module = Parser(ctx, input_of(pass_name, source, schedule)).parse_module()
    pipeline.PASSES[pass_name]().apply(ctx, module)
    module.verify()
    return module


def kernel(module: ModuleOp) -> func.FuncOp:
    return next(op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks)


def schedule_keys(module: ModuleOp) -> set[str]:
    return {k for op in module.walk() if isinstance(op, loop.ForDstOp) and op.schedule for k in op.schedule.data}


def test_schedule_passes_run_between_the_lowering_and_the_outlining():
    names = list(pipeline.CPU_PIPELINE)
    at = [names.index(p) for p in pipeline.CPU_SCHEDULE_PASSES]
    assert at == sorted(at)
    assert names.index("convert-graph-to-loop") < at[0] and at[-1] < names.index("convert-loop-to-openmp")
    for name in pipeline.CPU_SCHEDULE_PASSES:
        assert pipeline.PASSES[name].name == name
        # one module per pass, named as on the command line
        assert pipeline.PASSES[name].__module__ == "gnnc.transforms.loop." + name.replace("-", "_")


def test_tile_features_wraps_the_sweep_in_tiles():
    module, pipeline_text = run_alone("tile-features", "gcn", "tile features 4")
    assert str(module) == pipeline_text
    fn = kernel(module)
    tiles = [op for op in fn.body.block.ops if isinstance(op, loop.ForTileOp)]
    assert len(tiles) == 1 and tiles[0].size.value.data == 4 and tiles[0].dim.data == "F"
    start, width = tiles[0].body.block.args
    features = [op for op in tiles[0].walk() if isinstance(op, loop.ForFeatureOp) and op.dim.data == "F"]
    assert features and all(op.extent is width for op in features)
    # every index of a tiled loop is offset by the tile's start
    assert all(any(u.operation.name == "arith.addi" for u in op.body.block.args[0].uses) for op in features)
    assert start.uses
    assert "tile" not in schedule_keys(module)
    assert "loop.for_tile %" in pipeline_text and 'by 4 dim "F"' in pipeline_text


def _prefetch_loops(scope) -> list[scf.ForOp]:
    return [
        op
        for op in scope.walk()
        if isinstance(op, scf.ForOp)
        and op.body.block.first_op is not None
        and any(o.name == "llvm_ext.prefetch" for o in op.body.block.ops)
    ]


def test_tiles_and_slices_prefetch_their_own_columns_of_a_row():
    """A walk that reads a piece of a row prefetches that piece: a whole-row
    prefetch per piece moved every row from memory once per tile (tile
    features 64 at F = 512 ran 5x slower than no tiling)."""
    module, _ = run_alone("tile-features", "gat", "tile features 4")
    (tile,) = [op for op in kernel(module).body.block.ops if isinstance(op, loop.ForTileOp)]
    start, width = tile.body.block.args
    h_rows, el_rows = [], []
    for op in _prefetch_loops(tile):
        (el_rows if op.lb.owner.name == "arith.constant" else h_rows).append(op)
    # h[u] is [H, F]: per head, the columns [start, start + width) of that head
    assert h_rows and all(op.lb.owner.name == "arith.addi" and op.ub.owner.name == "arith.addi" for op in h_rows)
    for op in h_rows:
        lo = op.lb.owner
        assert lo.rhs is start and op.ub.owner.lhs is op.lb and op.ub.owner.rhs is width
        heads = op.parent_op()
        assert isinstance(heads, scf.ForOp) and lo.lhs.owner.lhs is heads.body.block.args[0]
    # el[u] is [H], without the tiled axis: every tile still fetches it whole
    assert el_rows and all(op.lb.owner.value.value.data == 0 for op in el_rows)

    sliced, _ = run_alone("vectorize-rows", "gcn", "vectorize 4")
    for piece in [
        op
        for op in kernel(sliced).walk()
        if isinstance(op, scf.ForOp | scf.IfOp)
        and op.parent_op() is not None
        and isinstance(op.parent_op(), loop.ForDstOp)
    ]:
        # x[u] by the slice's columns; w[e], one value per edge, whole
        rows = [op for op in _prefetch_loops(piece) if constant_index(op.ub) != 1]
        assert rows and all(op.lb.owner.name == "arith.addi" for op in rows)


def _destination_prefetches(module: ModuleOp) -> dict[int, bool]:
    """The kernel argument number of each buffer a permuted sweep prefetches
    for a later destination -> for writing?"""
    fn = kernel(module)
    found = {}
    for op in module.walk():
        if op.name == "llvm_ext.prefetch" and DESTINATION_PREFETCH_ATTR in op.parent_op().attributes:
            found[fn.body.block.args.index(op.operands[0])] = op.is_write
    return found


@pytest.mark.slow
def test_permuted_sweeps_prefetch_their_destinations_own_rows():
    """In a permuted sweep a destination's own rows (gat's er[v]) are read at
    random: the load of er[v] held a quarter of gat's samples under `reorder
    rcm` on mdual until they were prefetched a few destinations ahead."""
    users = len(abi.GRAPH_ARGUMENTS)
    er, out = users + 2, users + 3  # after h and el
    module, pipeline_text = run_alone("order-destinations", "gat", "reorder rcm; stream outputs")
    assert str(module) == pipeline_text
    # er[v] only: h and el are gathered by source, out is streamed from a worker's row
    assert _destination_prefetches(module) == {er: False}
    (for_dst,) = [op for op in module.walk() if isinstance(op, loop.ForDstOp)]
    lookups = [op for op in for_dst.body.block.ops if isinstance(op, loop.DstAtOp)]
    assert len(lookups) == 2 and DESTINATION_PREFETCH_ATTR in lookups[1].attributes
    ahead = lookups[1].position.owner  # min(position + 4, positions - 1)
    assert isinstance(ahead, arith.MinSIOp) and ahead.lhs.owner.lhs is for_dst.body.block.args[0]
    assert constant_index(ahead.lhs.owner.rhs) == 4
    assert ahead.rhs.owner.lhs is for_dst.num_vertices
    assert "prefetch_destinations" not in schedule_keys(module)

    # out[v] written in place: prefetched for writing
    module, _ = run_alone("order-destinations", "gat", "reorder rcm")
    assert _destination_prefetches(module) == {er: False, out: True}
    # gin's x[v] is gathered too, and in a locality order just was
    module, _ = run_alone("order-destinations", "gin", "reorder rcm")
    assert users not in _destination_prefetches(module)
    # no prefetching, or no permutation: nothing
    for schedule in ("prefetch 0; reorder rcm", "parallel dst"):
        module, _ = run_alone("order-destinations", "gat", schedule)
        assert not _destination_prefetches(module)
    # row slices leave it beside the lookup, once per destination
    sliced, _ = run_alone("vectorize-rows", "gat_conv", "reorder rcm; vectorize 8")
    (for_dst,) = [op for op in sliced.walk() if isinstance(op, loop.ForDstOp)]
    marked = [op for op in for_dst.walk() if DESTINATION_PREFETCH_ATTR in op.attributes]
    assert marked and all(op.parent_op() is for_dst for op in marked)
    # each row size it needs is computed before it (gat_conv computes them in the body, then slices it)
    body = list(for_dst.body.block.ops)
    for op in marked:
        for operand in op.operands:
            if isinstance(operand.owner, Operation) and operand.owner.parent_block() is for_dst.body.block:
                assert body.index(operand.owner) < body.index(op)


def test_partition_sources_wraps_the_sweep_in_partitions():
    module, pipeline_text = run_alone("partition-sources", "gcn", "partition src 3")
    assert str(module) == pipeline_text
    fn = kernel(module)
    parts = [op for op in fn.body.block.ops if isinstance(op, loop.ForPartitionOp)]
    assert len(parts) == 1 and parts[0].count.value.data == 3
    (walk,) = [op for op in parts[0].walk() if isinstance(op, loop.ForInEdgesOp)]
    part_indptr, part_src, part_eid = fn.body.block.args[-3:]
    assert (walk.indptr, walk.src, walk.eid) == (part_indptr, part_src, part_eid)
    # the walk starts at row p of part_indptr: p * (V + 1) + v
    assert walk.dst.owner.name == "arith.addi"
    assert "partition" not in schedule_keys(module)


def test_vectorize_rows_slices_the_destination_row():
    module, pipeline_text = run_alone("vectorize-rows", "gcn", "vectorize 4")
    assert str(module) == pipeline_text
    (for_dst,) = [op for op in module.walk() if isinstance(op, loop.ForDstOp)]
    body_ops = list(for_dst.body.block.ops)
    slices = [op for op in body_ops if isinstance(op, scf.ForOp)]
    tails = [op for op in body_ops if isinstance(op, scf.IfOp)]
    assert len(slices) == 1 and len(tails) == 1
    assert slices[0].step.owner.value.value.data == 4
    full = [op for op in slices[0].walk() if isinstance(op, loop.ForFeatureOp)]
    assert full and all(op.extent is slices[0].step for op in full)
    # the in-edge walk runs once per slice and once for the tail
    assert sum(isinstance(op, loop.ForInEdgesOp) for op in for_dst.walk()) == 2
    assert "vectorize" not in schedule_keys(module)


#: a source sweep whose row reduces along F (a dot): slicing F would split the dot
DOT_SWEEP = """
kernel k(h: f32[V, F], a: f32[F]) -> f32[V, F] {
    el[v] = dot(h[v], a)
    out[v] = sum(el[u] * h[u])
}
"""


def test_source_sweeps_are_sliced_where_slicing_is_legal():
    # mlp_aggr's hoisted x @ W runs in a source sweep, sliced 32 wide by
    # default (or by the schedule's width); a dot along the row is not sliced
    def sweep_schedule(source: str, schedule: str) -> str:
        text = input_of("prefetch-neighbors", source, schedule)
        return next(line for line in text.splitlines() if 'parallel = "sources"' in line)

    mlp_aggr = (EXAMPLES / "mlp_aggr.gnn").read_text()
    assert "vectorize = 32" in sweep_schedule(mlp_aggr, "")
    assert "vectorize = 8" in sweep_schedule(mlp_aggr, "vectorize 8")
    assert "vectorize" not in sweep_schedule(DOT_SWEEP, "")
    sliced = stages("mlp_aggr", "")["vectorize-rows"]
    sweep = sliced[sliced.index('parallel = "sources"') : sliced.index('parallel = "dst"')]
    assert "scf.for" in sweep and "scf.if" in sweep  # full slices, then the tail


@settings(deadline=None, max_examples=20)
@given(
    graph=graphs(),
    d1=st.sampled_from([1, 5, 32, 70]),
    d2=st.sampled_from([1, 7, 31, 32, 33, 64, 100]),
    schedule=st.sampled_from(["", "vectorize 8", "vectorize 16"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_sliced_source_sweeps_match_the_reference(graph, d1, d2, schedule, seed):
    from tests.strategies import random_inputs

    compiled = _compiled_mlp_aggr(schedule)
    inputs = random_inputs(compiled.signature, graph, {"D1": d1, "D2": d2}, np.float32, seed)
    want = _compiled_mlp_aggr("reference")(graph, **inputs)
    assert_matches(compiled(graph, **inputs), want, graph, np.float32)


_MLP_AGGR: dict[str, object] = {}


def _compiled_mlp_aggr(schedule: str):
    if schedule not in _MLP_AGGR:
        path = EXAMPLES / "mlp_aggr.gnn"
        module = (
            gnnc.compile(path, target="reference")
            if schedule == "reference"
            else gnnc.compile(path, schedule=schedule or None)
        )
        _MLP_AGGR[schedule] = module.mlp_aggr
    return _MLP_AGGR[schedule]


def test_order_destinations_maps_positions_through_dst_order():
    module, pipeline_text = run_alone("order-destinations", "gcn", "sort degree")
    assert str(module) == pipeline_text
    fn = kernel(module)
    (for_dst,) = [op for op in module.walk() if isinstance(op, loop.ForDstOp)]
    first = for_dst.body.block.first_op
    assert isinstance(first, loop.DstAtOp)
    assert first.order is fn.body.block.args[abi.GRAPH_ARGUMENTS.index("dst_order")]
    position = for_dst.body.block.args[0]
    # the in-edges are walked by position, in the ordered in-CSR the runtime passes; all else reads at v
    indptr = fn.body.block.args[abi.GRAPH_ARGUMENTS.index("in_indptr")]

    def indexes_indptr(op) -> bool:
        if isinstance(op, loop.ForInEdgesOp):
            return op.dst is position and op.indptr is indptr
        if isinstance(op, memref.LoadOp):
            return op.memref is indptr
        return op.dialect_name() == "arith" and all(indexes_indptr(u.operation) for u in op.results[0].uses)

    users = [u.operation for u in position.uses]
    assert first in users and any(isinstance(op, loop.ForInEdgesOp) for op in users)
    # (and the prefetch of a later destination's rows, tested below)
    assert all(op is first or indexes_indptr(op) or DESTINATION_PREFETCH_ATTR in op.attributes for op in users)
    assert json.loads(fn.attributes[abi.ABI_ATTR].data)["ordered_edges"] is True
    assert "order" not in schedule_keys(module)
    # the identity order needs no lookup
    plain, _ = run_alone("order-destinations", "gcn", "parallel dst")
    assert not any(isinstance(op, loop.DstAtOp) for op in plain.walk())


def test_a_partitioned_order_walks_the_in_csr_by_destination():
    # partition-sources walks plans of its own, indexed by destination: the in-CSR stays as it is
    module, _ = run_alone("order-destinations", "gcn", "sort degree\npartition src 2")
    fn = kernel(module)
    (for_dst,) = [op for op in module.walk() if isinstance(op, loop.ForDstOp)]
    assert [
        type(u.operation)
        for u in for_dst.body.block.args[0].uses
        if DESTINATION_PREFETCH_ATTR not in u.operation.attributes
    ] == [loop.DstAtOp]
    assert "ordered_edges" not in json.loads(fn.attributes[abi.ABI_ATTR].data)


def test_hilbert_edge_order_walks_one_edge_per_position():
    module, pipeline_text = run_alone("hilbert-edge-order", "attention", "order edges hilbert")
    assert str(module) == pipeline_text
    fn = kernel(module)
    (for_dst,) = [op for op in module.walk() if isinstance(op, loop.ForDstOp)]
    assert not any(isinstance(op, loop.ForInEdgesOp) for op in for_dst.walk())
    first = for_dst.body.block.first_op
    assert isinstance(first, loop.DstAtOp) and first.order is fn.body.block.args[-2]  # hilbert_dst
    assert for_dst.num_vertices is fn.body.block.args[1]  # E positions
    assert "edges" not in schedule_keys(module)


DOT_ALONG_F = "kernel k(x: f32[V, F]) -> f32[V, F] {\n    out[v] = sum(dot(x[u], x[v]) * x[u])\n}\n"
NO_FEATURES = "kernel k(w: f32[E]) -> f32[V] {\n    out[v] = sum(w[e])\n}\n"


@pytest.mark.parametrize(
    "pass_name, source, schedule, message",
    [
        (
            "hilbert-edge-order",
            EXAMPLES / "gcn.gnn",
            "order edges hilbert",
            "order edges hilbert: needs an edge-wise kernel",
        ),
        (
            "tile-features",
            DOT_ALONG_F,
            "tile features 2",
            "tile features 2: the kernel reduces over the feature axis 'F'",
        ),
        ("vectorize-rows", DOT_ALONG_F, "vectorize 4", "vectorize 4: the kernel reduces over the feature axis 'F'"),
        (
            "tile-features",
            NO_FEATURES,
            "tile features 4",
            "tile features 4: the kernel has no loop over a feature axis",
        ),
        ("vectorize-rows", EXAMPLES / "gat.gnn", "partition src 2\nvectorize 4", "vectorize 4: with partition src"),
        (
            "partition-sources",
            NO_FEATURES.replace("sum(w[e])", "2 * deg_in(v)"),
            "partition src 2",
            "partition src 2: the kernel walks no in-edges",
        ),
    ],
)
def test_a_schedule_pass_refuses_what_it_cannot_apply(pass_name, source, schedule, message):
    """The refusal comes from the pass that cannot apply the directive, run alone on its input."""
    if isinstance(source, Path):
        source = source.read_text()
    with pytest.raises(gnnc.CompileError, match=message):
        apply_alone(pass_name, source, schedule)


def test_a_dot_along_a_row_of_exactly_one_slice_is_no_obstacle():
    # with F specialised to the width the row is one slice: nothing is split, so
    # the default `vectorize 16; specialize F 16` applies to a kernel with a dot over F
    module = apply_alone("vectorize-rows", DOT_ALONG_F, "specialize F 4\nvectorize 4")
    assert "vectorize" not in schedule_keys(module)
    with pytest.raises(gnnc.CompileError, match="vectorize 4: the kernel reduces"):
        apply_alone("vectorize-rows", DOT_ALONG_F, "specialize F 8\nvectorize 4")
    graph = gnnc.Graph.from_coo(np.array([0, 1, 2, 2, 3]), np.array([1, 2, 0, 3, 3]), num_vertices=4)
    x = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    compiled = gnnc.compile(DOT_ALONG_F, schedule="specialize F 4\nvectorize 4").k
    want = gnnc.compile(DOT_ALONG_F, target="reference").k(graph, x=x)
    assert_matches(compiled(graph, x=x), want, graph, np.float32)


def test_hilbert_and_a_destination_order_are_refused_together():
    # the schedule checker refuses the pair; hilbert-edge-order alone refuses it too (its FileCheck test)
    with pytest.raises(gnnc.SourceError, match="'order edges hilbert' cannot be combined with 'sort degree'"):
        stages("attention", "order edges hilbert\nsort degree")


def test_the_outliner_refuses_a_schedule_no_pass_applied():
    text = stages("gcn", "tile features 4")
    ctx = pipeline.make_context()
    module = Parser(ctx, text["specialize-unit-dims"]).parse_module()
    # skipping tile-features leaves its entry on the sweep
    with pytest.raises(gnnc.CompileError, match="still carries schedule tile"):
        pipeline.PASSES["convert-loop-to-openmp"]().apply(ctx, module)


SCHEDULED = [
    ("gcn", "partition src 2\ntile features 8\nsort degree\nvectorize 4"),
    ("attention", "order edges hilbert\ntile features 2\nvectorize 2"),
    ("gat", "reorder locality\ntile features 4\nvectorize 8"),
    ("mlp_aggr", "partition src 3"),
    ("sage_max", "group neighbors 3\ntile features 4\nsort degree"),
]


@pytest.mark.parametrize("name, schedule", slow_except(SCHEDULED, SCHEDULED[0]))
def test_scheduled_stages_parse_back(name, schedule):
    text = stages(name, schedule)
    for stage in pipeline.CPU_PIPELINE:
        module = Parser(pipeline.make_context(), text[stage]).parse_module()
        module.verify()
        assert str(module) == text[stage], stage
    lowered = text["convert-loop-to-scf"]
    assert "loop." not in lowered


def test_a_tiled_sweep_ends_with_a_barrier():
    """Every tile's sweep writes gat's alpha again and scales it by the softmax sum: with
    the next tile's sweep started before the last ended, another thread's tile could
    scale it a second time (1 call in 7 at 2 threads, `tile features 4`)."""
    import re

    text = stages("gat", "tile features 4")["convert-loop-to-openmp"]
    assert "call @GOMP_loop_end_nowait" not in text and re.search(r"func\.call @GOMP_loop_end\(\)", text)
    assert "call @GOMP_loop_end_nowait" in stages("gat", "")["convert-loop-to-openmp"]

    rng = np.random.default_rng(3)
    v = 40
    graph = gnnc.Graph.from_coo(rng.integers(0, v, 600), rng.integers(0, v, 600), num_vertices=v)
    tiled = gnnc.compile(EXAMPLES / "gat.gnn", schedule="tile features 4").gat
    inputs = {
        "h": rng.uniform(-1, 1, (v, 2, 16)).astype(np.float32),
        "el": rng.uniform(-1, 1, (v, 2)).astype(np.float32),
        "er": rng.uniform(-1, 1, (v, 2)).astype(np.float32),
    }
    want = tiled(graph, threads=1, **inputs)
    for _ in range(20):
        got = tiled(graph, threads=2, **inputs)
        assert np.array_equal(got["alpha"], want["alpha"]) and np.array_equal(got["out"], want["out"])


def test_sweep_wrappers_lower_sequentially():
    """Without the outliner, convert-loop-to-scf runs tiles and partitions as plain loops."""
    text = stages("gcn", "partition src 2\ntile features 8\nsort degree")
    ctx = pipeline.make_context()
    module = Parser(ctx, text["vectorize-rows"]).parse_module()
    pipeline.PASSES["convert-loop-to-scf"]().apply(ctx, module)
    module.verify()
    assert not any(op.name.startswith("loop.") for op in module.walk())


def test_gnnc_opt_runs_a_schedule_pass(tmp_path):
    text = stages("gcn", "tile features 16")
    path = tmp_path / "gcn.mlir"
    path.write_text(text["partition-sources"])  # the input tile-features gets in the pipeline
    proc = subprocess.run(
        [sys.executable, "-m", "gnnc.tools.opt", str(path), "-p", "tile-features"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == text["tile-features"].strip()
    assert re.search(r"loop\.for_tile %\d+ by 16 dim \"F\"", proc.stdout)


def test_loop_dialect_verifiers():
    ctx = pipeline.make_context()
    bad = """
    func.func @k(%n: index, %b: memref<?xi64>) {
      loop.for_partition 0 {
      ^bb0(%p: index):
        loop.for_dst %n blocks %b[%n] threads %n : memref<?xi64> {
        ^bb1(%v: index, %w: index):
          loop.yield
        }
        loop.yield
      }
      func.return
    }
    """
    with pytest.raises(Exception, match="needs at least one partition"):
        Parser(ctx, bad).parse_module().verify()
    two = bad.replace("loop.for_partition 0", "loop.for_partition 2").replace(
        "        loop.yield\n      }\n      func.return",
        "        loop.for_dst %n blocks %b[%n] threads %n : memref<?xi64> {\n"
        "        ^bb2(%v2: index, %w2: index):\n          loop.yield\n        }\n"
        "        loop.yield\n      }\n      func.return",
    )
    with pytest.raises(Exception, match="one destination sweep, got 2"):
        Parser(ctx, two).parse_module().verify()
    side_effect = bad.replace(
        "loop.for_partition 0 {\n      ^bb0(%p: index):",
        "loop.for_partition 2 {\n      ^bb0(%p: index):\n"
        "        %z = arith.constant 0 : index\n        memref.store %p, %b[%z] : memref<?xi64>",
    )
    with pytest.raises(Exception):  # noqa: B017 - the parser or the verifier, whichever sees it first
        Parser(ctx, side_effect).parse_module().verify()
    dst_at = """
    func.func @k(%o: memref<?xf32>, %p: index) {
      %v = loop.dst_at %o[%p] : memref<?xf32>
      func.return
    }
    """
    with pytest.raises(Exception, match="1-D i64 buffer"):
        Parser(ctx, dst_at).parse_module().verify()


@pytest.mark.parametrize(
    "name, schedule, dims",
    [
        ("gcn", "tile features 8\nvectorize 4", {"F": 17}),
        ("gcn", "partition src 2\ntile features 8\nvectorize 4", {"F": 19}),
        ("attention", "order edges hilbert\ntile features 2\nvectorize 2", {"H": 5, "D": 3}),
    ],
)
def test_tiles_sliced_into_vectors_match_reference(name, schedule, dims):
    """tile-features then vectorize-rows: the slices of each tile (once an internal error)."""
    from tests.strategies import random_inputs

    rng = np.random.default_rng(7)
    v = 60
    src, dst = rng.integers(0, v, 400), rng.integers(0, v - 3, 400)
    graph = gnnc.Graph.from_coo(np.concatenate([src, [4]]), np.concatenate([dst, [4]]), num_vertices=v)
    module = gnnc.compile(EXAMPLES / f"{name}.gnn", schedule=schedule)
    k = getattr(module, name)
    inputs = random_inputs(k.signature, graph, dims, np.float32, 11)
    want = getattr(gnnc.compile(EXAMPLES / f"{name}.gnn", target="reference"), name)(graph, **inputs)
    for threads in (1, 3):
        assert_matches(k(graph, threads=threads, **inputs), want, graph, np.float32)


@pytest.mark.parametrize(
    "pass_name, schedule, shows",
    slow_except(
        [
            ("tile-features", "tile features 4", 'by 4 dim "F"'),
            ("partition-sources", "partition src 3", "loop.for_partition 3"),
            ("order-destinations", "sort degree", "loop.dst_at"),
            ("vectorize-rows", "vectorize 8", "scf.for"),
        ],
        ("partition-sources", "partition src 3", "loop.for_partition 3"),
    ),
)
def test_print_ir_after_a_schedule_pass(pass_name, schedule, shows):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gnnc.tools.cli",
            "compile",
            str(EXAMPLES / "gcn.gnn"),
            "--emit",
            "loop",
            "--schedule",
            schedule,
            "--print-ir-after",
            pass_name,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    header = f"// -----// IR Dump After {pass_name} //----- //"
    assert header in proc.stderr
    dump = proc.stderr.split(header, 1)[1].split("// -----//", 1)[0]
    assert shows in dump
    listed = subprocess.run(
        [sys.executable, "-m", "gnnc.tools.cli", "passes"], capture_output=True, text=True, timeout=120
    )
    assert re.search(rf"^\s+\d+\s+{pass_name}$", listed.stdout, re.M)


@given(
    source=random_kernels(),
    schedule=st.sampled_from(
        [
            "tile features 2\nvectorize 2",
            "partition src 2\ntile features 4\nvectorize 2",
            "tile features 3\nvectorize 2\nsort degree",
            "group neighbors 2\ntile features 2\nvectorize 2",
        ]
    ),
    graph=graphs(max_edges=120),
    f=st.sampled_from((1, 3, 17)),
    threads=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=15)
@pytest.mark.slow
def test_random_kernels_tiled_and_sliced_match_reference(source, schedule, graph, f, threads, seed):
    """The schedule passes compose: random kernels under tiles sliced into vectors either are refused or match."""
    try:
        module = gnnc.compile(source, schedule=schedule)
    except gnnc.CompileError as exc:
        assert any(d in str(exc) for d in ("partition src", "tile features", "vectorize", "group neighbors")), str(exc)
        return
    assert_random_kernel_matches(module, source, graph, f, threads, seed)


IN_PLACE = {
    # the aggregation, element-wise ops of the row's shape, per-destination operands
    "a_plus_p": ("out[v] = c[v] * x[v] + sum(x[u])", True),
    "scaled": ("out[v] = relu(c[v] * (sum(x[u]) + x[v]))", True),
    # read twice at the same row: the second read would see the overwritten row
    "squared": ("s[v] = sum(x[u]) + c[v]\n    out[v] = s[v] * s[v]", False),
    # read at another index (a dot over the row) before the row is written
    "dotted": ("s[v] = sum(x[u])\n    out[v] = dot(s[v], x[v]) * s[v]", False),
    # the result is also another result's operand, emitted after the row is overwritten
    "reused": ("out[v] = sum(x[u]) + c[v]\n    more[v] = out[v] * c[v]", False),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_a_partitioned_sum_accumulates_in_its_output_row_where_the_row_is_read_once(name):
    """With `partition src K` an accumulator outlives a visit: in the destination's output
    row when the result reads it once, at the index it writes, else in acc_rows ([V, F]:
    2 GiB for GCN's first layer at R-MAT 22)."""
    body, in_place = IN_PLACE[name]
    results = "(out: f32[V, F], more: f32[V, F])" if "more" in body else "f32[V, F]"
    source = f"kernel k(x: f32[V, F], c: f32[V]) -> {results} {{\n    {body}\n}}"
    module = gnnc.compile(source, schedule="partition src 3")
    assert (module.k._abi.acc_rows == []) is in_place
    reference = gnnc.compile(source, target="reference")
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, 50, 400), rng.integers(0, 50, 400)
    graph = gnnc.Graph.from_edge_index(np.stack([src, dst]), num_vertices=60)
    x = rng.standard_normal((60, 7)).astype(np.float32)
    c = rng.standard_normal(60).astype(np.float32)
    got = module.k(graph, x, c, threads=2)
    assert_matches(got, reference.k(graph, x, c), graph, np.float32)


def test_the_row_axis_of_a_tie_is_the_same_in_every_process(tmp_path):
    """Two innermost feature axes as frequent as each other: the record's row axis was picked by
    string hash order, so processes with other hash seeds compiled D or L (and `vectorize` read
    another width). The first in walk order now, whatever the seed."""
    path = tmp_path / "tie.gnn"
    path.write_text(
        "kernel k(a: f32[V, H, L], b: f32[V, H, D]) -> (p: f32[V, H, L], q: f32[V, H, D]) {\n"
        "    p[v] = sum(a[u])\n    q[v] = sum(b[u])\n}\n"
    )
    code = (
        "import sys; from gnnc.driver import compiler; "
        "print(compiler.compile_source(open(sys.argv[1]).read(), sys.argv[1], stop_after='loop').stages['expand-exp'])"
    )
    found = set()
    for seed in range(6):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        out = subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, timeout=120, check=True
        ).stdout
        found.update(re.findall(r"row_dim\\22: \\22(\w+)\\22", out))
    assert found == {"L"}
