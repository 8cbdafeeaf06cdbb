"""Every IR stage of every example is printed, parses back with xDSL, and verifies."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.parser import Parser

from gnnc.driver import compiler, pipeline
from tests.helpers import slow_except

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.gnn"))


@pytest.mark.parametrize(
    "path",
    slow_except(EXAMPLES, *(p for p in EXAMPLES if p.stem in ("mlp_aggr", "sage_max"))),
    ids=lambda p: p.stem,
)
def test_every_stage_parses_back(path: Path):
    result = compiler.compile_source(path.read_text(), str(path), stop_after="scf")
    stages = [pipeline.FRONTEND_STAGE, *pipeline.CPU_PIPELINE]
    assert list(result.stages) == stages
    for stage in stages:
        ctx = pipeline.make_context()
        module = Parser(ctx, result.stages[stage]).parse_module()
        module.verify()
        # printing the parsed module gives the same text: nothing is lost
        assert str(module) == result.stages[stage], stage


def test_loop_stage_is_one_nest_per_phase_for_gat():
    path = Path(__file__).parent.parent / "examples" / "gat.gnn"
    result = compiler.compile_source(path.read_text(), str(path), stop_after="loop")
    loop_ir = result.stages["convert-graph-to-loop"]
    assert loop_ir.count("loop.for_dst") == 1
    # softmax max, softmax sum, and the loop that writes alpha and accumulates out
    assert loop_ir.count("loop.for_in_edges") == 3


def test_two_phase_kernel_splits_at_neighbour_reads():
    source = """
    kernel two(x: f32[V, F]) -> f32[V, F] {
        h[v] = sum(x[u])
        out[v] = max(h[u])
    }
    """
    result = compiler.compile_source(source, stop_after="loop")
    assert result.stages["convert-graph-to-loop"].count("loop.for_dst") == 2


@pytest.mark.parametrize("path", slow_except(EXAMPLES, *(p for p in EXAMPLES if p.stem == "gcn")), ids=lambda p: p.stem)
def test_every_stage_of_the_gradient_kernels_parses_back(path: Path):
    """The generated kernels use step, edge_id, argmax, outer and matvecs by W^T: their dumps parse back too."""
    from gnnc.lang.autodiff import gradient_source

    source = gradient_source(path.read_text(), str(path))
    result = compiler.compile_source(source, f"<gradients of {path.stem}>", stop_after="loop")
    for stage, text in result.stages.items():
        module = Parser(pipeline.make_context(), text).parse_module()
        module.verify()
        assert str(module) == text, stage


def _graph_dump(source: str) -> str:
    return compiler.compile_source(source, stop_after="graph").stages[pipeline.FRONTEND_STAGE]


KINDS_SOURCE = """
kernel k(x: f32[V, F], s: f32[E]) -> f32[V, F] {
    out[v] = max(relu(x[u] * s[e]))
}
"""


def test_op_kinds_are_enum_attributes_in_both_syntaxes():
    from io import StringIO

    from xdsl.printer import Printer

    from gnnc.ir import graph

    text = _graph_dump(KINDS_SOURCE)
    assert "graph.binary mul" in text and "graph.unary relu" in text and "graph.aggregate max" in text
    module = Parser(pipeline.make_context(), text).parse_module()
    ops = {type(op): op for op in module.walk()}
    assert ops[graph.BinaryOp].kind == graph.BinaryKindAttr(graph.BinaryKind.MUL)
    assert ops[graph.UnaryOp].kind.data is graph.UnaryKind.RELU
    assert ops[graph.AggregateOp].kind.data is graph.AggregateKind.MAX
    generic = StringIO()
    Printer(stream=generic, print_generic_format=True).print_op(module)
    assert "kind = #graph<binary_kind mul>" in generic.getvalue()
    again = Parser(pipeline.make_context(), generic.getvalue()).parse_module()
    again.verify()
    assert str(again) == text
    # dumps written before the kinds were enums (quoted strings) still parse
    quoted = text.replace("graph.binary mul", 'graph.binary "mul"').replace(
        "graph.aggregate max", 'graph.aggregate "max"'
    )
    assert str(Parser(pipeline.make_context(), quoted).parse_module()) == text


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("graph.binary mul", "graph.binary pow", "Expected `add`, `sub`, `mul`, `div`, `max`, or `min`"),
        ("graph.unary relu", "graph.unary swish", "Expected `neg`, `exp`, `log`"),
        ("graph.aggregate max", "graph.aggregate median", "`argmax`, or `argmin`"),
    ],
)
def test_an_unknown_op_kind_is_refused_where_it_is_written(old, new, expected):
    from xdsl.utils.exceptions import ParseError

    text = _graph_dump(KINDS_SOURCE).replace(old, new)
    with pytest.raises(ParseError, match=expected):
        Parser(pipeline.make_context(), text).parse_module()


def test_loop_kinds_are_enum_attributes():
    from gnnc.ir import loop
    from gnnc.ir.schedule import CudaStrategy

    opts = compiler.CompileOptions(target="cuda-emulation", schedule="map warp_edge")
    mapped = compiler.compile_source((EXAMPLES[0].parent / "gcn.gnn").read_text(), options=opts, stop_after="scf")
    text = mapped.stages["map-threads"]
    assert "mapping warp_edge" in text
    module = Parser(pipeline.make_context(), text).parse_module()
    grids = [op for op in module.walk() if isinstance(op, loop.GridOp)]
    assert {g.mapping.data for g in grids} == {CudaStrategy.WARP_EDGE, CudaStrategy.WARP_VERTEX}
    from xdsl.utils.exceptions import ParseError

    with pytest.raises(ParseError, match="`thread_vertex`, `thread_edge`, `warp_vertex`, or `warp_edge`"):
        Parser(pipeline.make_context(), text.replace("mapping warp_edge", "mapping block_edge")).parse_module()

    lanes = compiler.compile_source(
        (EXAMPLES[0].parent / "gat.gnn").read_text(),
        options=compiler.CompileOptions(schedule="vectorize edges 8"),
        stop_after="loop",
    ).stages[pipeline.loop_stage()]
    assert "reduce [#loop<lane_reduction maxnumf>]" in lanes
    module = Parser(pipeline.make_context(), lanes).parse_module()
    reductions = {k.data for op in module.walk() if isinstance(op, loop.LanesOp) for k in op.reduce.data}
    assert reductions == {loop.LaneReduction.MAXNUMF, loop.LaneReduction.ADDF}
    with pytest.raises(ParseError, match="`addf`, `mulf`, `maxnumf`"):
        Parser(pipeline.make_context(), lanes.replace("lane_reduction maxnumf", "lane_reduction sumf")).parse_module()


def test_an_op_kind_given_as_a_string_fails_the_verifier():
    from xdsl.dialects.builtin import StringAttr
    from xdsl.utils.exceptions import VerifyException

    from gnnc.ir import graph

    module = Parser(pipeline.make_context(), _graph_dump(KINDS_SOURCE)).parse_module()
    op = next(op for op in module.walk() if isinstance(op, graph.BinaryOp))
    op.properties["kind"] = StringAttr("mul")
    with pytest.raises(VerifyException, match="graph.binary_kind"):
        op.verify()
