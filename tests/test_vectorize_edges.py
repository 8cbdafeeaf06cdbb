"""`vectorize edges W`: the per-edge scalar work of in-edge walks in W-wide lanes (pass vectorize-edges,
op loop.lanes, the CPU backend's lanes translation)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.utils.exceptions import VerifyException

import gnnc
from gnnc.driver import compiler
from gnnc.driver.pipeline import make_context
from tests.helpers import (
    assert_matches,
    assert_random_kernel_matches,
    slow_except,
)
from tests.helpers import (
    compiled_example as compiled,
)
from tests.helpers import (
    reference_example as reference,
)
from tests.strategies import FEATURE_SIZES, graphs, random_inputs, random_kernels

EXAMPLES = Path(__file__).parent.parent / "examples"
#: the example kernels with per-edge scalars: softmax scores, exponentials, degree weights
KERNELS = {"gat": ("H", "F"), "gat_conv": ("H", "F"), "gcn_norm": ("F",)}
WIDTHS = (2, 4, 8, 16, 64)
#: schedules the lanes join
WITH = [
    "",
    "prefetch 0",
    "prefetch 3",
    "specialize",
    "sort degree",
    "vectorize 4",
    "tile features 4",
    "partition src 2",
    "order edges hilbert",
    "reorder locality\nprefetch 24",
]


def _dims(name: str, draw) -> dict[str, int]:
    dims = {}
    for d in KERNELS[name]:
        # one head gets the lanes (specialize-unit-dims' copy); two run the general copy
        dims[d] = (
            draw(st.sampled_from([1, 1, 2]), label=d) if d == "H" else draw(st.sampled_from(FEATURE_SIZES), label=d)
        )
    return dims


def _kernel_dims(name: str) -> list[str]:
    return list(KERNELS[name])


@pytest.mark.parametrize("name", slow_except(sorted(KERNELS), "gcn_norm"))
@given(
    graph=graphs(huge_hubs=True),
    width=st.sampled_from(WIDTHS),
    extra=st.sampled_from(WITH),
    data=st.data(),
    threads=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=12, deadline=None)
def test_kernels_with_edges_in_lanes_match_the_reference(name, graph, width, extra, data, threads, seed):
    dims = _dims(name, data.draw)
    if extra == "specialize":
        extra = "specialize " + " ".join(f"{k} {n}" for k, n in dims.items())
    module = compiled(name, f"vectorize edges {width}\n{extra}")
    if isinstance(module, gnnc.CompileError):
        # the other directive refused the kernel, with its own reason (a softmax is not tiled)
        assert any(d in str(module) for d in ("tile features", "order edges hilbert", "vectorize")), str(module)
        return
    kernel = getattr(module, name)
    assert kernel._abi.lanes.walks >= 1
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, seed)
    got = kernel(graph, threads=threads, **inputs)
    assert_matches(got, getattr(reference(name), name)(graph, **inputs), graph, np.float32)


@given(
    source=random_kernels(),
    width=st.sampled_from((4, 16)),
    graph=graphs(max_edges=120),
    f=st.sampled_from((1, 3, 17)),
    threads=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=40, deadline=None)
@pytest.mark.slow
def test_random_kernels_with_edges_in_lanes_match_the_reference(source, width, graph, f, threads, seed):
    """Random kernels (edge and vertex results, softmax, scalar weights from degrees, exp, tanh,
    sqrt, f32 and f64) run their per-edge scalars in lanes, or are refused saying why."""
    try:
        module = gnnc.compile(source, schedule=f"vectorize edges {width}")
    except gnnc.CompileError as exc:
        assert "vectorize edges" in str(exc) and "no in-edge walk" in str(exc), str(exc)
        return
    assert_random_kernel_matches(module, source, graph, f, threads, seed)


@given(graph=graphs(huge_hubs=True), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=5, deadline=None)
def test_lanes_give_bit_identical_results_for_any_thread_count(graph, seed):
    kernel = compiled("gat", "vectorize edges 16").gat
    inputs = random_inputs(kernel.signature, graph, {"H": 1, "F": 17}, np.float32, seed)
    results = [kernel(graph, threads=t, deterministic=True, **inputs) for t in (1, 2, 3)]
    for other in results[1:]:
        for key in other:
            assert np.array_equal(other[key], results[0][key], equal_nan=True)


def test_nan_and_infinite_scores_and_empty_destinations_in_lanes():
    """A NaN score poisons its destination's softmax, an infinite one too (exp(inf - inf)),
    as in the reference; destinations without in-edges stay 0."""
    src = np.array([0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 5, 5, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5])
    dst = np.array([0] * 5 + [1] * 10 + [2] * 3 + [3] * 12)  # 3 and 12 in-edges, the lanes' tail
    graph = gnnc.Graph.from_coo(src, dst, num_vertices=7)
    rng = np.random.default_rng(4)
    h = rng.standard_normal((7, 1, 3)).astype(np.float32)
    el = rng.standard_normal((7, 1)).astype(np.float32)
    er = rng.standard_normal((7, 1)).astype(np.float32)
    el[4, 0] = np.nan  # every destination but 2 has an edge from 4
    er[3, 0] = np.inf
    kernel = compiled("gat", "vectorize edges 8").gat
    got = kernel(graph, h=h, el=el, er=er)
    want = reference("gat").gat(graph, h=h, el=el, er=er)
    assert_matches(got, want, graph, np.float32)
    assert np.isnan(got["out"][0]).all() and not np.isnan(got["out"][2]).any()
    assert (got["out"][5:] == 0).all()


def test_the_dumps_show_lanes_reductions_and_rows_and_parse_back():
    source = (EXAMPLES / "gat.gnn").read_text() + "\nschedule gat for cpu { vectorize edges 16 }\n"
    stages = compiler.compile_source(source, stop_after="llvm").stages
    before, after = stages["sorted-edge-ids"], stages["vectorize-edges"]
    assert "vectorize_edges = 16" in before and "vectorize_edges" not in after
    # the H = 1 copy: the softmax maximum, the sum of exponentials with the rows, the normalisation
    assert re.search(r"loop\.lanes %\d+ width 16 reduce \[#loop<lane_reduction maxnumf>\] : f32", after)
    assert re.search(r"loop\.lanes %\d+ width 16 reduce \[#loop<lane_reduction addf>\] : f32", after)
    assert re.search(r"loop\.lanes %\d+ width 16 reduce \[\] \{", after)
    assert after.count("loop.lanes") == 3  # the copy for other head counts keeps its scalar walks
    assert "gnnc.no_vectorize" in after and "memref.alloca" in after
    llvm_ir = stages["translate-to-llvm"]
    for intrinsic in (
        "llvm.masked.gather.v16f32",
        "llvm.masked.load.v16i64",
        "llvm.vector.reduce.fadd.v16f32",
        "llvm.maxnum.v2f32",
    ):
        assert intrinsic in llvm_ir, intrinsic
    module = make_context()
    from xdsl.parser import Parser

    Parser(module, after).parse_module().verify()


def test_edge_rows_in_order_are_vector_accesses_not_gathers():
    source = (EXAMPLES / "gat.gnn").read_text() + "\nschedule gat for cpu { vectorize edges 8; edges sorted }\n"
    llvm_ir = compiler.compile_source(source, stop_after="llvm").stages["translate-to-llvm"]
    assert "llvm.masked.store.v8f32" in llvm_ir  # alpha, at the chunk's positions
    assert "llvm.masked.scatter" not in llvm_ir
    unsorted = (EXAMPLES / "gat.gnn").read_text() + "\nschedule gat for cpu { vectorize edges 8 }\n"
    assert (
        "llvm.masked.scatter.v8f32" in compiler.compile_source(unsorted, stop_after="llvm").stages["translate-to-llvm"]
    )


def test_a_kernel_without_per_edge_scalars_is_refused_with_the_reason():
    source = (EXAMPLES / "gcn.gnn").read_text() + "\nschedule gcn for cpu { vectorize edges 16 }\n"
    with pytest.raises(gnnc.CompileError, match=r"vectorize edges 16: no in-edge walk .*no float operation"):
        gnnc.compile(source)


@pytest.mark.parametrize(
    "directive, message",
    [
        ("vectorize edges 12", "a power of two up to 64, found 12"),
        ("vectorize edges 128", "a power of two up to 64, found 128"),
        ("vectorize edges", "needs a positive integer"),
        ("vectorize edges 8 4", "unexpected '4'"),
        ("vectorize edges 8; vectorize edges 4", "already given"),
    ],
)
def test_bad_directives_are_source_errors_with_a_caret(directive, message):
    source = (EXAMPLES / "gat.gnn").read_text() + f"\nschedule gat for cpu {{ {directive} }}\n"
    with pytest.raises(gnnc.SourceError, match=message) as info:
        gnnc.compile(source)
    assert "^" in str(info.value)


def test_rows_and_edges_vectorise_together():
    """`vectorize 16` (rows) and `vectorize edges 8` are two directives."""
    kernel = compiled("gcn_norm", "vectorize 16\nvectorize edges 8").gcn_norm
    graph = gnnc.Graph(np.array([[0, 1, 2, 2, 3], [1, 2, 0, 1, 1]]))
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    assert_matches(kernel(graph, x=x), reference("gcn_norm").gcn_norm(graph, x=x), graph, np.float32)


def _lanes_module(body: str) -> str:
    return f"""
    func.func @f(%n: index, %b: memref<?xf32>) {{
      %r = loop.lanes %n width 8 reduce [#loop<lane_reduction addf>] : f32 {{
      ^bb0(%lane: index):
        {body}
      }}
      func.return
    }}
    """


def test_lanes_verifier_refuses_a_store_every_lane_makes_to_one_place():
    from xdsl.parser import Parser

    text = _lanes_module(
        "%c = arith.constant 0 : index\n%x = memref.load %b[%lane] : memref<?xf32>\n"
        "memref.store %x, %b[%c] : memref<?xf32>\nloop.yield %x : f32"
    )
    with pytest.raises(VerifyException, match="one address"):
        Parser(make_context(), text).parse_module().verify()


@pytest.mark.parametrize(
    "body, message",
    [
        ("%x = memref.load %b[%lane] : memref<?xf32>\nloop.yield %x, %x : f32, f32", "yields 2 values"),
        ("%x = memref.load %b[%lane] : memref<?xf32>\nloop.yield", "yields 0 values"),
    ],
)
def test_lanes_verifier_checks_the_yielded_values(body, message):
    from xdsl.parser import Parser

    with pytest.raises(VerifyException, match=message):
        Parser(make_context(), _lanes_module(body)).parse_module().verify()


def test_lanes_verifier_checks_the_width_and_kinds():
    from xdsl.parser import Parser
    from xdsl.utils.exceptions import ParseError

    text = _lanes_module("%x = memref.load %b[%lane] : memref<?xf32>\nloop.yield %x : f32")
    with pytest.raises(VerifyException, match="power of two"):
        Parser(make_context(), text.replace("width 8", "width 6")).parse_module().verify()
    # a reduction is a loop.lane_reduction enum: an unknown one is refused where it is written
    with pytest.raises(ParseError, match="Expected `addf`, `mulf`, `maxnumf`, `minnumf`, `maximumf`, or `minimumf`"):
        Parser(make_context(), text.replace("lane_reduction addf", "lane_reduction subf")).parse_module().verify()


@pytest.mark.slow
def test_gradient_kernels_on_a_dense_graph_match_the_reference():
    """Calls of 16K edges and more on a graph where lanes pay: the default heuristic gives the
    forward and generated gradient kernels their lanes where they qualify; the gradients match."""
    from gnnc.api import compile_grad

    rng = np.random.default_rng(11)
    v, e = 1200, 1 << 14
    src, dst = rng.integers(0, v, e), rng.integers(0, v, e)
    order = np.argsort(dst, kind="stable")
    graph = gnnc.Graph.from_coo(src[order], dst[order], num_vertices=v)
    for name in ("gat_conv", "gat"):
        grad = compile_grad(EXAMPLES / f"{name}.gnn", name)
        forward = getattr(compiled(name, ""), name)
        inputs = random_inputs(forward.signature, graph, {"H": 1, "F": 4}, np.float32, 11)
        results = forward(graph, **inputs)
        gout = (
            {k: rng.standard_normal(r.shape).astype(np.float32) for k, r in results.items()}
            if isinstance(results, dict)
            else rng.standard_normal(results.shape).astype(np.float32)
        )
        got = grad(graph, gout=gout, **inputs)
        want = compile_grad(EXAMPLES / f"{name}.gnn", name, target="reference")(graph, gout=gout, **inputs)
        for key in want:
            assert_matches(got[key], want[key], graph, np.float32)
        assert any("vectorize edges" in k for k in forward._variants)


EDGE_SOFTMAX = """
kernel scores(el: f32[V, H], er: f32[V, H], w: f32[E]) -> f32[E, H] {
    out[e] = softmax(tanh(el[u] * er[v]) + w[e])
}
"""


@given(
    graph=graphs(huge_hubs=True),
    width=st.sampled_from((4, 16)),
    sorted_ids=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=12, deadline=None)
@pytest.mark.slow
def test_an_edge_softmax_with_one_head_compiled_in_runs_in_lanes(graph, width, sorted_ids, seed):
    """A kernel of edge values alone qualifies once its head count is compiled in (`lanes.sized`)."""
    base = gnnc.compile(EDGE_SOFTMAX).scores
    assert base._abi.lanes.sized and base._abi.lanes.unit_dims == ["H"]
    if sorted_ids:
        order = np.argsort(np.asarray(graph.dst), kind="stable")
        graph = gnnc.Graph.from_coo(
            np.asarray(graph.src)[order], np.asarray(graph.dst)[order], num_vertices=graph.num_vertices
        )
    schedule = f"specialize H 1; vectorize edges {width}" + ("; edges sorted" if sorted_ids else "")
    kernel = gnnc.compile(EDGE_SOFTMAX, schedule=schedule).scores
    assert kernel._abi.lanes.walks >= 1
    inputs = random_inputs(kernel.signature, graph, {"H": 1}, np.float32, seed)
    got = kernel(graph, **inputs)
    assert_matches(got, gnnc.compile(EDGE_SOFTMAX, target="reference").scores(graph, **inputs), graph, np.float32)
