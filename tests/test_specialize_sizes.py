"""`specialize`: kernels compiled for given sizes of their dimensions, checked against the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc.autotune import heuristic, predictor
from gnnc.driver import compiler
from gnnc.ir.schedule import sizes_text
from gnnc.runtime import tune
from tests.helpers import assert_matches, slow_except
from tests.strategies import graphs, random_inputs
from tests.test_schedules import compiled, reference

EXAMPLES = Path(__file__).parent.parent / "examples"
DIMS = {
    "gcn": {"F": 17},
    "sage_max": {"F": 32},
    "sage_mean": {"F": 1},
    "gin": {"F": 5},
    "attention": {"H": 2, "D": 17},
    "gat": {"H": 4, "F": 8},
    "mlp_aggr": {"D1": 5, "D2": 7},
    "gcn_norm": {"F": 3},
}
#: Schedules specialize is joined with (those a kernel refuses are skipped).
WITH = [
    "",
    "prefetch 0",
    "vectorize 4",
    "tile features 4",
    "partition src 2",
    "group neighbors 3",
    "sort degree",
    "order edges hilbert",
]


@pytest.mark.parametrize("name", slow_except(sorted(DIMS), "gcn", "sage_max"))
@given(
    graph=graphs(),
    other=st.sampled_from(WITH),
    partial=st.booleans(),
    threads=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=8, deadline=None)
def test_specialized_examples_match_the_reference(name, graph, other, partial, threads, seed):
    dims = DIMS[name]
    sizes = dict(list(dims.items())[:1]) if partial else dims
    module = compiled(name, "\n".join(filter(None, [other, f"specialize {sizes_text(sizes)}"])))
    if isinstance(module, gnnc.CompileError):
        assert other and other.split()[0] in str(module), str(module)  # refused for the other directive
        return
    kernel = getattr(module, name)
    assert kernel._abi.sizes == sizes
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, seed)
    got = kernel(graph, threads=threads, **inputs)
    want = getattr(reference(name), name)(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


@pytest.mark.parametrize("name", ["gat", "gcn", "attention"])
def test_a_call_with_other_sizes_is_refused_before_the_native_code(name):
    dims = DIMS[name]
    kernel = getattr(compiled(name, f"specialize {sizes_text(dims)}"), name)
    graph = gnnc.Graph.from_coo([0, 1, 2], [1, 2, 0], num_vertices=3)
    for dim in dims:
        other = {**dims, dim: dims[dim] * 4}  # rows four times wider than compiled for
        with pytest.raises(gnnc.ArgumentError, match=f"compiled for {dim} = {dims[dim]}.*has {dim} = {other[dim]}"):
            kernel(graph, **random_inputs(kernel.signature, graph, other, np.float32, 0))


def test_the_pass_replaces_the_run_time_sizes():
    source = (EXAMPLES / "gat.gnn").read_text()
    stages = compiler.compile_source(
        source, "gat.gnn", compiler.CompileOptions(schedule="specialize F 32"), stop_after="scf"
    ).stages
    before, after = stages["convert-graph-to-loop"], stages["specialize-sizes"]
    loads = "memref.load %11["  # the dims argument (abi.GRAPH_ARGUMENTS)
    assert before.count(loads) == 2 and after.count(loads) == 1  # H is still read
    assert "arith.constant 32 : i64" in after
    assert "specialize" in before and "specialize" not in after.split("gnnc.ir.abi")[0]
    assert gnnc.compile(source, schedule="specialize F 32").gat._abi.sizes == {"F": 32}


def test_an_unspecialized_kernel_is_unchanged():
    source = (EXAMPLES / "gcn.gnn").read_text()
    stages = compiler.compile_source(source, "gcn.gnn", stop_after="scf").stages
    assert stages["specialize-sizes"] == stages["convert-graph-to-loop"]


@pytest.mark.parametrize(
    "directive,col,message,width",
    [
        (
            "specialize",
            22,
            "'specialize' needs a dimension and its size after it, e.g. 'specialize F 32' (its dimensions: F)",
            10,
        ),
        ("specialize G 4", 33, "'G' is not a dimension of kernel 'k' (its dimensions: F)", 1),
        ("specialize F", 33, "'F' needs a positive integer (its size) after it", 1),
        ("specialize F 0", 35, "expected a positive integer (the size of F) after 'F', found '0'", 1),
        ("specialize F 4 F 8", 37, "'F' is given twice in 'specialize'", 1),
    ],
)
def test_specialize_errors_point_at_the_word(directive, col, message, width):
    source = f"kernel k(x: f32[V, F]) -> f32[V, F] {{ out[v] = x[v] }}\nschedule k for cpu {{ {directive} }}\n"
    with pytest.raises(gnnc.SourceError) as info:
        gnnc.compile(source)
    first, line, caret = str(info.value).splitlines()
    assert first.startswith(f"<string>:2:{col}: error: ") and message in first, first
    assert caret == " " * (col - 1) + "^" + "~" * (width - 1)


@pytest.mark.parametrize("name", slow_except(sorted(DIMS), "gcn"))
def test_the_default_specializes_large_calls(name):
    """A call of 16K edges without a schedule runs the default's pick for its own sizes, and is right."""
    rng = np.random.default_rng(0)
    v, e = 2000, heuristic.SPECIALIZE_MIN_EDGES
    graph = gnnc.Graph.from_coo(rng.integers(0, v, e), rng.integers(0, v, e), num_vertices=v)
    kernel = getattr(gnnc.compile(EXAMPLES / f"{name}.gnn"), name)
    inputs = random_inputs(kernel.signature, graph, DIMS[name], np.float32, 0)
    got = kernel(graph, **inputs)
    (directives,) = kernel._variants
    # (a scalar row, F = 1, may also run its edges in lanes: vectorize edges)
    assert f"specialize {sizes_text(DIMS[name])}" in directives.splitlines()
    assert kernel._variants[directives]._abi.sizes == DIMS[name]
    assert_matches(got, getattr(reference(name), name)(graph, **inputs), graph, np.float32)


def test_the_tuner_and_the_predictor_know_specialize():
    module = gnnc.compile(EXAMPLES / "gat.gnn")
    traits = tune.traits_of(module.gat, {"H": 4, "F": 8})
    assert traits["sizes"] == "H 4 F 8"
    keys = tune.candidate_keys(traits, 2, "")
    assert "specialize H 4 F 8" in keys
    assert tune.family_of("specialize H 4 F 8") == "specialize"
    assert predictor.canonical_schedule("vectorize 32\nspecialize H 4 F 8", 32) == "vectorize row; specialize"
    assert predictor.concrete_schedule("vectorize row; specialize", 32, "H 4 F 8") == "vectorize 32; specialize H 4 F 8"
    assert predictor.concrete_schedule("specialize", 32, "") is None


@pytest.mark.parametrize(
    "schedule,kept",
    [
        ("specialize F 128", False),  # eight vectors: unrolled into registers
        ("specialize F 256", True),  # sixteen: a loop, four vectors an iteration
    ],
)
def test_wide_specialised_rows_stay_loops(schedule, kept):
    source = (EXAMPLES / "gcn.gnn").read_text()
    stages = compiler.compile_source(
        source, "gcn.gnn", compiler.CompileOptions(schedule=schedule), stop_after="llvm"
    ).stages
    assert ("gnnc.no_unroll" in stages["convert-loop-to-scf"]) == kept
    assert ('!"llvm.loop.unroll.disable"' in stages["translate-to-llvm"]) == kept
    assert ('!"llvm.loop.interleave.count", i32 4' in stages["translate-to-llvm"]) == kept


def test_a_head_loop_around_a_wide_row_stays_a_loop():
    """gat at H = 4, F = 64: the head loop is kept (four heads of 64 would be 16 vector accumulators)."""
    source = (EXAMPLES / "gat.gnn").read_text()
    scf_text = compiler.compile_source(
        source, "gat.gnn", compiler.CompileOptions(schedule="specialize H 4 F 64"), stop_after="scf"
    ).stages["convert-loop-to-scf"]
    assert "gnnc.no_unroll, gnnc.no_vectorize" in scf_text or "gnnc.no_vectorize, gnnc.no_unroll" in scf_text


@pytest.mark.parametrize(
    "schedule,rolled_rows",
    slow_except(
        [
            ("specialize H 4 F 128", 1),  # each head's row of 128 stays a loop
            ("specialize H 8 F 64", 1),
            ("specialize H 8 F 32", 0),  # a row of 32: unrolled inside the kept head loop
            ("specialize H 4 F 32", 0),  # 128 in all: heads and rows unrolled
            ("specialize H 1 F 128", 0),  # no head loop
        ],
        ("specialize H 4 F 128", 1),
        ("specialize H 8 F 32", 0),
    ),
)
def test_rows_inside_a_kept_head_loop_stay_loops_past_32(schedule, rolled_rows):
    """Unrolled into one block per head, a row of 128 ran gat 1.13x slower on mdual (H = 4,
    `reorder rcm`, `stream outputs`) than the same row as a loop of four vectors an iteration."""
    source = (EXAMPLES / "gat.gnn").read_text()
    stages = compiler.compile_source(
        source, "gat.gnn", compiler.CompileOptions(schedule=schedule), stop_after="llvm"
    ).stages
    rows = [
        line
        for line in stages["convert-loop-to-scf"].splitlines()
        if "gnnc.no_unroll" in line and "gnnc.interleave_count = 4" in line and "gnnc.no_vectorize" not in line
    ]
    # the row loop of the walk that accumulates out[v] (and that of the row's final scaling)
    assert bool(rows) == bool(rolled_rows)
    if rolled_rows:
        assert '!"llvm.loop.interleave.count", i32 4' in stages["translate-to-llvm"]
