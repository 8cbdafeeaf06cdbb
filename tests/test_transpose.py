"""transpose(m) (what the gradient of outer w.r.t. its second operand uses): compiled = reference = numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc.lang import parse_and_check
from tests.helpers import assert_matches
from tests.strategies import graphs

# F is the row axis (what `vectorize` slices and `tile features` tiles); transposes move it off the last axis
SOURCE = """
kernel tr(x: f32[V, F], y: f32[V, K], m: f32[V, F, K], w: f32[E]) -> f32[V, K, F] {
    out[v] = sum(transpose(outer(x[u] * w[e], y[v]) + m[u])) + transpose(m[v]) * 0.5
}
kernel back(a: f32[V, H, K, F], x: f32[V, H, K], y: f32[V, H, F], w: f32[E]) -> f32[V, H, F] {
    out[v] = sum(dot(transpose(a[u] * w[e]), outer(y[v], x[u])))
}
kernel edge(m: f32[V, F, K]) -> f32[E, K, F] {
    out[e] = transpose(m[u]) - transpose(tanh(m[v]))
}
"""

# a self loop (2->2), duplicates (0->1 twice), a vertex without in-edges (4 has none; 3 only sends), isolated 4
GRAPH = gnnc.Graph(np.array([[0, 1, 2, 2, 3, 0, 2, 3], [1, 2, 0, 2, 1, 1, 1, 0]]), num_vertices=5)


def _inputs(name, graph, dims, dtype, seed):
    rng = np.random.default_rng(seed)
    args = {}
    for p in parse_and_check(SOURCE).kernel(name).params:
        rows = {"V": [graph.num_vertices], "E": [graph.num_edges], None: []}[p.type.domain]
        args[p.name] = rng.uniform(-1, 1, rows + [dims[d] for d in p.type.shape]).astype(dtype)
    return args


def test_transpose_matches_numpy():
    args = _inputs("tr", GRAPH, {"F": 3, "K": 2}, np.float64, 0)
    x, y, m, w = args["x"], args["y"], args["m"], args["w"]
    by_hand = 0.5 * np.swapaxes(m, 1, 2)
    per_edge = np.einsum("ef,ek->ekf", x[GRAPH.src] * w[:, None], y[GRAPH.dst]) + np.swapaxes(m[GRAPH.src], 1, 2)
    np.add.at(by_hand, GRAPH.dst, per_edge)
    source = SOURCE.replace("f32", "f64")
    np.testing.assert_allclose(gnnc.compile(source, target="reference").tr(GRAPH, **args), by_hand, rtol=1e-12)
    np.testing.assert_allclose(gnnc.compile(source, kernels=["tr"]).tr(GRAPH, **args), by_hand, rtol=1e-12)
    args = _inputs("back", GRAPH, {"F": 3, "K": 2, "H": 2}, np.float64, 1)
    a, x, y, w = args["a"], args["x"], args["y"], args["w"]
    want = np.zeros((GRAPH.num_vertices, 2, 3))
    # sum over k of a[u, h, k, f] * w[e] * x[u, h, k] * y[v, h, f]: the sum over a's second-to-last axis
    np.add.at(want, GRAPH.dst, np.einsum("ehkf,e,ehk,ehf->ehf", a[GRAPH.src], w, x[GRAPH.src], y[GRAPH.dst]))
    np.testing.assert_allclose(gnnc.compile(source, target="reference").back(GRAPH, **args), want, rtol=1e-12)
    np.testing.assert_allclose(gnnc.compile(source, kernels=["back"]).back(GRAPH, **args), want, rtol=1e-12)


@settings(max_examples=min(12, settings().max_examples), deadline=None)
@given(
    graph=graphs(max_vertices=20, max_edges=80),
    name=st.sampled_from(["tr", "back", "edge"]),
    f=st.sampled_from([1, 3, 17]),
    k=st.sampled_from([1, 2]),
    h=st.sampled_from([1, 2]),
    schedule=st.sampled_from([None, "vectorize 4", "tile features 2", "partition src 2", "sort degree"]),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**31 - 1),
)
@pytest.mark.slow
def test_transpose_matches_the_reference_under_schedules(graph, name, f, k, h, schedule, dtype, seed):
    source = SOURCE if dtype == np.float32 else SOURCE.replace("f32", "f64")
    args = _inputs(name, graph, {"F": f, "K": k, "H": h}, dtype, seed)
    got = getattr(gnnc.compile(source, kernels=[name], schedule=schedule), name)(graph, **args)
    want = getattr(gnnc.compile(source, target="reference"), name)(graph, **args)
    assert_matches(got, want, graph, dtype)


@pytest.mark.parametrize("schedule,split", [("vectorize 4", "row slicing"), ("tile features 2", "feature tiling")])
def test_a_dot_over_the_transposed_row_axis_is_refused_by_row_splits(schedule, split):
    source = "kernel red(m: f32[V, F, F], x: f32[V, F]) -> f32[V, F] {\n    out[v] = sum(dot(transpose(m[u]), outer(x[v], x[u])))\n}\n"
    with pytest.raises(gnnc.CompileError, match=f"reduces over the feature axis 'F'.*which {split} would split"):
        gnnc.compile(source, schedule=schedule)
    rng = np.random.default_rng(2)
    m, x = rng.uniform(-1, 1, (5, 3, 3)), rng.uniform(-1, 1, (5, 3))
    source = source.replace("f32", "f64")
    got = gnnc.compile(source).red(GRAPH, m, x)
    np.testing.assert_allclose(got, gnnc.compile(source, target="reference").red(GRAPH, m, x), rtol=1e-12)


def test_transpose_needs_two_axes_and_one_argument():
    with pytest.raises(
        gnnc.SourceError,
        match=r"<string>:2:14: error: transpose swaps the last two axes: it needs "
        r"an operand of shape \[\.\.\., K, N\], got \[F\]",
    ):
        gnnc.compile("kernel t(x: f32[V, F]) -> f32[V, F] {\n    out[v] = transpose(x[v])\n}\n")
    with pytest.raises(gnnc.SourceError, match="transpose takes 1 argument, got 2"):
        gnnc.compile("kernel t(x: f32[V, F, F]) -> f32[V, F, F] {\n    out[v] = transpose(x[v], x[v])\n}\n")
    with pytest.raises(gnnc.SourceError, match=r"declared f32\[V, F, K\] .* has shape \[K, F\]"):
        gnnc.compile("kernel t(x: f32[V, F, K]) -> f32[V, F, K] {\n    out[v] = transpose(x[v])\n}\n")


@pytest.mark.slow
def test_graph_dialect_prints_parses_and_verifies_transpose():
    from xdsl.dialects.builtin import f32
    from xdsl.ir import Block
    from xdsl.parser import Parser
    from xdsl.utils.exceptions import VerifyException

    from gnnc.driver import compiler, pipeline
    from gnnc.ir import graph

    result = compiler.compile_source(SOURCE, stop_after="loop")
    for stage, text in result.stages.items():
        module = Parser(pipeline.make_context(), text).parse_module()
        module.verify()
        assert str(module) == text, stage
    assert (
        "graph.transpose %10 : !graph.value<E, f32, [F, K]> -> !graph.value<E, f32, [K, F]>" in result.stages["irgen"]
    )
    # a result that keeps the operand's axes is not a transpose; a vector has no two axes to swap
    block = Block(arg_types=[graph.ValueType("E", f32, ["F", "K"]), graph.ValueType("E", f32, ["F"])])
    bad = graph.TransposeOp.create(operands=[block.args[0]], result_types=[block.args[0].type])
    with pytest.raises(VerifyException, match="graph.transpose result must swap the last two axes"):
        bad.verify()
    with pytest.raises(VerifyException, match=r"graph.transpose needs \[\.\.\., K, N\], got \['F'\]"):
        graph.TransposeOp(block.args[1])


def test_source_only_outer_and_transpose_at_a_matrix_are_hoisted():
    """transform-before-gather computes `(outer(y[u], x[u]) + transpose(m[u])) @ W` once per vertex (it used to
    stop with an AssertionError on the outer) and gives what the reference does."""
    from gnnc.driver import compiler

    source = """
kernel hoisted(x: f64[V, K], y: f64[V, F], m: f64[V, K, F], W: f64[K, F]) -> f64[V, F, F] {
    out[v] = sum(tanh((outer(y[u], x[u]) + transpose(m[u])) @ W)) + transpose(outer(x[v], y[v])) @ W
}
"""
    graph_ir = compiler.compile_source(source, stop_after="graph").stages["transform-before-gather"]
    assert graph_ir.count("graph.materialize") == 1
    rng = np.random.default_rng(4)
    args = {
        "x": rng.normal(size=(5, 2)),
        "y": rng.normal(size=(5, 3)),
        "m": rng.normal(size=(5, 2, 3)),
        "W": rng.normal(size=(2, 3)),
    }
    got = gnnc.compile(source).hoisted(GRAPH, **args)
    np.testing.assert_allclose(
        got, gnnc.compile(source, target="reference").hoisted(GRAPH, **args), rtol=1e-12, atol=1e-12
    )


def test_no_operand_is_hoisted_at_the_wrong_index():
    """Loop nests hoist sub-values whose axes the outer loops know; a transpose's (and an outer's right) operand
    is read at permuted indices, so x of transpose(outer(x, y)) must not be loaded in the N loop (it was: x[n],
    past x's row when N > K)."""
    import re

    from gnnc.driver import compiler
    from gnnc.ir import abi

    source = (
        "kernel t(x: f32[V, K], y: f32[V, N]) -> f32[E, N, K] {\n    out[e] = transpose(outer(x[u], y[u])) * 2\n}\n"
    )
    text = compiler.compile_source(source, stop_after="loop").stages["convert-graph-to-loop"]
    fn_line = next(line for line in text.splitlines() if "func.func" in line)
    x_buffer = re.findall(r"(%\d+): ", fn_line)[len(abi.GRAPH_ARGUMENTS)]
    n_loop_before_k_loop = text[text.index('dim "N" {') : text.index('dim "K" {')]
    assert f"memref.load {x_buffer}[" not in n_loop_before_k_loop
    assert f"memref.load {x_buffer}[" in text
