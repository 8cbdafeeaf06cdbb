"""A schedule directive given as a pass option applies to every kernel as if its schedule said so.

Each case compiles an example twice: once with the directive in its
schedule, once without, and then runs the pipeline again from the plain
compile's dumps with the directive's pass given the option instead. The
IR after that pass is the schedule's, but for the ABI record's
`schedule_given`, which the lowering set from the kernel's own schedule.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.parser import Parser

from gnnc.driver import compiler, pipeline
from gnnc.errors import CompileError, SourceError

EXAMPLES = Path(__file__).parent.parent / "examples"


def _stages(name: str, schedule: str | None, target: str = "cpu") -> dict[str, str]:
    options = compiler.CompileOptions(target=target, schedule=schedule)
    return compiler.compile_source(
        (EXAMPLES / f"{name}.gnn").read_text(), f"{name}.gnn", options, stop_after="scf"
    ).stages


def _with_options(name: str, given: list[str], target: str = "cpu") -> tuple[str, str]:
    """(the last pass given an option, the IR after it) when the plain compile's pipeline
    runs again from before the first of `given`, with those entries in place of the plain ones."""
    entries = pipeline.pass_names(target=target)
    by_name = {pipeline.stage_name(g): g for g in given}
    positions = [i for i, e in enumerate(entries) if pipeline.stage_name(e) in by_name]
    first, last = positions[0], positions[-1]
    plain = _stages(name, None, target)
    ctx = pipeline.make_context()
    module = Parser(ctx, plain[[pipeline.FRONTEND_STAGE, *entries][first]]).parse_module()
    for entry in entries[first : last + 1]:
        pipeline.make_pass(by_name.get(pipeline.stage_name(entry), entry)).apply(ctx, module)
        module.verify()
    return entries[last], str(module)


def _as_given(text: str) -> str:
    return text.replace("\\22schedule_given\\22: false", "\\22schedule_given\\22: true")


@pytest.mark.parametrize(
    "name, directives, given",
    [
        ("gcn", "tile features 4", ["tile-features{size=4}"]),
        ("gat", "tile features 2", ["tile-features{size=2}"]),
        ("gcn", "vectorize 8", ["vectorize-rows{width=8}"]),
        # the source sweep of the hoisted x[u] @ W takes the width too
        ("mlp_aggr", "vectorize 16", ["vectorize-rows{width=16}"]),
        ("gat", "prefetch 3", ["prefetch-neighbors{distance=3}"]),
        ("gat", "vectorize edges 8", ["vectorize-edges{lanes=8}"]),
        ("gcn", "specialize F 32", ['specialize-sizes{sizes="F 32"}']),
        ("gat", "specialize H 1 F 16", ['specialize-sizes{sizes="H 1  F 16"}']),
        ("sage_max", "sort degree\nprefetch 0", ["prefetch-neighbors{distance=0}", "order-destinations{order=degree}"]),
        ("gcn", "reorder rcm\nprefetch 0", ["prefetch-neighbors{distance=0}", "order-destinations{order=rcm}"]),
        ("gcn", "edges sorted\nprefetch 0", ["prefetch-neighbors{distance=0}", "sorted-edge-ids{sorted=true}"]),
        ("gcn", "tile features 8\nvectorize 4", ["tile-features{size=8}", "vectorize-rows{width=4}"]),
        # the directives the lowering consumes
        ("gcn", "partition src 2", ["convert-graph-to-loop{partition=2}"]),
        ("gcn", "partition src 3", ["convert-graph-to-loop{partition=3}", "partition-sources"]),
        ("attention", "order edges hilbert", ["convert-graph-to-loop{edge-order=hilbert}", "hilbert-edge-order"]),
        ("gcn", "group neighbors 4", ["convert-graph-to-loop{group=4}"]),
        ("gin", "stream outputs", ["convert-graph-to-loop{stream=true}"]),
        ("gcn", "simd 512", ["convert-graph-to-loop{simd=512}"]),
    ],
)
def test_an_option_applies_its_directive_as_the_schedule_does(name, directives, given):
    last, text = _with_options(name, given)
    assert _as_given(text) == _stages(name, directives)[last]


@pytest.mark.parametrize(
    "name, mapping, given",
    [
        ("gcn", "map warp_vertex group 2", "map-threads{strategy=warp_vertex group=2}"),
        ("gat", "map warp_edge lanes 8", "map-threads{strategy=warp_edge lanes=8}"),
        ("gcn", "map thread_vertex hybrid 4", "map-threads{strategy=thread_vertex hybrid=4}"),
    ],
)
def test_map_threads_options_are_a_cuda_mapping(name, mapping, given):
    last, text = _with_options(name, [given], target="cuda-emulation")
    assert text == _stages(name, mapping, "cuda-emulation")[last]


def test_an_option_applies_to_every_kernel_of_the_module():
    source = (EXAMPLES / "gcn.gnn").read_text() + (EXAMPLES / "sage_max.gnn").read_text()
    graph_ir = compiler.compile_source(source, stop_after="graph").stages
    ctx = pipeline.make_context()
    module = Parser(ctx, list(graph_ir.values())[-1]).parse_module()
    for entry in ("convert-graph-to-loop", "tile-features{size=4}"):
        pipeline.make_pass(entry).apply(ctx, module)
    assert str(module).count("loop.for_tile") == 2


def _frontend_message(name: str, directive: str, target: str = "cpu") -> str:
    source = (EXAMPLES / f"{name}.gnn").read_text() + f"\nschedule {name} for {target} {{ {directive} }}\n"
    with pytest.raises(SourceError) as caught:
        compiler.compile_source(source, stop_after="graph")
    return caught.value.message


@pytest.mark.parametrize(
    "directive, given",
    [
        ("tile features 0", "tile-features{size=0}"),
        ("vectorize 0", "vectorize-rows{width=0}"),
        ("vectorize edges 3", "vectorize-edges{lanes=3}"),
        ("vectorize edges 128", "vectorize-edges{lanes=128}"),
        ("partition src 0", "convert-graph-to-loop{partition=0}"),
        ("group neighbors 0", "convert-graph-to-loop{group=0}"),
        ("order edges morton", "convert-graph-to-loop{edge-order=morton}"),
        ("simd 100", "convert-graph-to-loop{simd=100}"),
        ("parallel src", "convert-loop-to-openmp{parallel=src}"),
        ("specialize F 0", 'specialize-sizes{sizes="F 0"}'),
        ("specialize F 4 F 8", 'specialize-sizes{sizes="F 4 F 8"}'),
        ("tile features 1234567890", "tile-features{size=1234567890}"),
    ],
)
def test_a_bad_option_gets_the_frontends_message(directive, given):
    message = _frontend_message("gcn", directive)
    with pytest.raises(CompileError) as caught:
        pipeline.make_pass(given)
    assert str(caught.value) == f"{_spec_text(given)}: {message}"


def _spec_text(given: str) -> str:
    """The option as the pass prints it in a message (xDSL's spec: underscores, strings quoted)."""
    from xdsl.utils.arg_spec import parse_pipeline

    (spec,) = parse_pipeline(given)
    return str(spec.normalize_parameter_names())


@pytest.mark.parametrize(
    "directive, given",
    [
        ("map warp_vertex lanes 6", "map-threads{strategy=warp_vertex lanes=6}"),
        ("map block_vertex", "map-threads{strategy=block_vertex}"),
        ("map thread_edge group 0", "map-threads{strategy=thread_edge group=0}"),
    ],
)
def test_a_bad_mapping_option_gets_the_frontends_message(directive, given):
    message = _frontend_message("gcn", directive, "cuda")
    with pytest.raises(CompileError) as caught:
        pipeline.make_pass(given)
    assert str(caught.value).endswith(f": {message}")


def test_options_that_cannot_join_the_kernels_schedule_are_refused():
    plain = _stages("gcn", None)
    ctx = pipeline.make_context()
    # the frontend refuses `edges sorted` beside a destination order; the options are refused alike
    sorted_edges = compiler.compile_source(
        (EXAMPLES / "gcn.gnn").read_text(), options=compiler.CompileOptions(schedule="edges sorted"), stop_after="scf"
    ).stages
    module = Parser(ctx, sorted_edges["hilbert-edge-order"]).parse_module()
    with pytest.raises(CompileError, match="'sort degree' cannot be combined with 'edges sorted'"):
        pipeline.make_pass("order-destinations{order=degree}").apply(ctx, module)
    module = Parser(ctx, _stages("gcn", "reorder rcm")["partition-sources"]).parse_module()
    with pytest.raises(CompileError, match="'edges sorted' cannot be combined with the order kernel 'gnnc_gcn'"):
        pipeline.make_pass("sorted-edge-ids{sorted=true}").apply(ctx, module)
    module = Parser(ctx, plain["annotate-fusion"]).parse_module()
    source = (EXAMPLES / "gcn.gnn").read_text() + "\nschedule gcn for cpu { edges sorted }\n"
    graph_ir = compiler.compile_source(source, stop_after="graph").stages
    module = Parser(ctx, list(graph_ir.values())[-1]).parse_module()
    with pytest.raises(CompileError, match="'order edges hilbert' cannot be combined with 'edges sorted'"):
        pipeline.make_pass("convert-graph-to-loop{edge-order=hilbert}").apply(ctx, module)
    with pytest.raises(CompileError, match="'partition src' cannot be combined with 'group neighbors'"):
        module = Parser(ctx, plain["annotate-fusion"]).parse_module()
        pipeline.make_pass("convert-graph-to-loop{partition=2 group=4}").apply(ctx, module)


def test_map_threads_options_need_a_strategy():
    with pytest.raises(CompileError, match="give the mapping's strategy too"):
        pipeline.make_pass("map-threads{group=4}")


def test_every_directive_has_a_pass_option():
    """The options the passes take, one per directive (the lowering's and map-threads' several)."""
    for entry in (
        "convert-graph-to-loop{target=cuda}",
        "convert-graph-to-loop{partition=4 edge-order=hilbert group=8 stream=true simd=256}",
        "tile-features{size=64}",
        "vectorize-rows{width=16}",
        "vectorize-edges{lanes=16}",
        "prefetch-neighbors{distance=0}",
        "order-destinations{order=locality}",
        'specialize-sizes{sizes="H 4 F 32"}',
        "sorted-edge-ids{sorted=true}",
        "convert-loop-to-openmp{parallel=dst}",
        "map-threads{strategy=warp_edge group=2 tile=4 lanes=8 hybrid=16}",
    ):
        made = pipeline.make_pass(entry)
        assert made.name == pipeline.stage_name(entry)
        assert made != type(made)(), entry  # the option was taken
