"""Every schedule is checked against the reference; schedules are never ignored."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc.driver import compiler
from gnnc.errors import SourceError
from gnnc.runtime.native import host_cpu_flags
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
from tests.strategies import FEATURE_SIZES, graphs, random_inputs, random_kernels, with_relations

EXAMPLES = Path(__file__).parent.parent / "examples"
DIMS = {
    "gcn": {"F": 17},
    "sage_max": {"F": 3},
    "sage_mean": {"F": 64},
    "gin": {"F": 5},
    "attention": {"H": 2, "D": 17},
    "gat": {"H": 2, "F": 17},
    "mlp_aggr": {"D1": 5, "D2": 7},
    "gcn_norm": {"F": 1},
    "rgcn": {"K": 5, "N": 17},
    "rgat": {"K": 3, "N": 16},
}

SCHEDULES = st.sampled_from(
    [
        "parallel dst",
        "prefetch 0",
        "prefetch 1",
        "prefetch 16",
        "sort degree",
        "reorder locality",
        "sort degree\nprefetch 3",
        "tile features 4",
        "tile features 16\nprefetch 2",
        "partition src 3",
        "partition src 2\ntile features 8\nsort degree",
        "order edges hilbert",
        "order edges hilbert\nprefetch 2\ntile features 2",
        "vectorize 16",
        "vectorize 4\npartition src 2\nsort degree",
        "tile features 8\nvectorize 4",
        "group neighbors 1",
        "group neighbors 4",
        "group neighbors 16\nvectorize 16",
        "group neighbors 3\ntile features 4\nsort degree",
        "group neighbors 8\nprefetch 0\nreorder locality",
        "reorder rcm",
        "stream outputs",
        "reorder rcm\nstream outputs\nvectorize 16",
        "stream outputs\ntile features 4\nprefetch 2",
        "stream outputs\ntile features 8\nvectorize 4\nreorder rcm",
        "simd 512",
        "simd 128\nvectorize 16\nprefetch 2",
    ]
)

#: Schedules that split or partition a destination's in-edges, checked for
#: every kernel on graphs with hubs of 5,000 to 100,000 in-edges.
SPLITTING_SCHEDULES = [
    "group neighbors 1",
    "group neighbors 7",
    "group neighbors 256\nvectorize 16",
    "group neighbors 64\ntile features 4\nsort degree",
    "group neighbors 1000\nprefetch 0\nreorder locality",
    "partition src 3",
    "partition src 2\ntile features 8\nsort degree",
    "reorder rcm\nstream outputs",
]

#: Why a kernel may refuse a directive: the words its CompileError must contain.
REFUSABLE = ("partition src", "order edges hilbert", "tile features", "vectorize", "group neighbors")


@pytest.mark.parametrize("name", slow_except(sorted(DIMS), "gcn"))
@given(graph=graphs(), schedule=SCHEDULES, threads=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10)
def test_scheduled_example_matches_reference(name, graph, schedule, threads, seed):
    module = compiled(name, schedule)
    if isinstance(module, gnnc.CompileError):
        # a schedule may not apply to a kernel; it must say so, never be ignored
        directives = [d for d in REFUSABLE if d in schedule]
        assert any(d in str(module) for d in directives), str(module)
        return
    kernel = getattr(module, name)
    graph = with_relations(graph, seed) if kernel.signature.relations else graph
    inputs = random_inputs(kernel.signature, graph, DIMS[name], np.float32, seed)
    got = kernel(graph, threads=threads, **inputs)
    want = getattr(reference(name), name)(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


@pytest.mark.parametrize(
    "schedule", slow_except(SPLITTING_SCHEDULES, "group neighbors 7", "partition src 2\ntile features 8\nsort degree")
)
@pytest.mark.parametrize("name", slow_except(sorted(DIMS), "gat"))
@given(graph=graphs(huge_hubs=True), data=st.data(), threads=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=3)
def test_splitting_schedules_match_reference(name, schedule, graph, data, threads, seed):
    module = compiled(name, schedule)
    if isinstance(module, gnnc.CompileError):
        # the one refusal expected: a softmax cannot be grouped, its groups
        # would need the destination's max and sum before their weighted sums
        if name == "rgat" and "group neighbors" not in schedule:
            # its softmax walks both read the transformed rows (no walk gathers wider ones to
            # partition), and its scores are dots over them (no tiles): refused, saying which
            directives = [d for d in REFUSABLE if d in schedule]
            assert any(d in str(module) for d in directives), str(module)
            return
        assert name in ("gat", "rgat") and "group neighbors" in schedule, str(module)
        assert "softmax" in str(module)
        return
    kernel = getattr(module, name)
    graph = with_relations(graph, seed) if kernel.signature.relations else graph
    dims = {d: data.draw(st.sampled_from(FEATURE_SIZES), label=d) for d in DIMS[name]}
    if name in ("attention", "gat"):  # keep E x H x F small on 100,000-edge hubs
        dims["H"] = data.draw(st.sampled_from([1, 2]), label="H")
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, seed)
    got = kernel(graph, threads=threads, **inputs)
    want = getattr(reference(name), name)(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


@pytest.mark.parametrize(
    ("name", "schedule"),
    slow_except(
        [
            (name, schedule)
            for name in ("gcn", "gat", "sage_mean", "sage_max", "gin")
            for schedule in ("parallel dst", "group neighbors 3", "partition src 3", "reorder rcm\nstream outputs")
            if (name, schedule) != ("gat", "group neighbors 3")
        ],
        ("gcn", "group neighbors 3"),
        ("gat", "partition src 3"),
    ),
)
@given(graph=graphs(huge_hubs=True), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=5)
def test_results_are_bit_identical_for_any_thread_count(name, schedule, graph, seed):
    kernel = getattr(compiled(name, schedule), name)
    inputs = random_inputs(kernel.signature, graph, DIMS[name], np.float32, seed)
    results = [kernel(graph, threads=t, deterministic=True, **inputs) for t in (1, 2, 3, 7)]
    for other in results[1:]:
        if isinstance(other, dict):
            for key in other:
                assert np.array_equal(other[key], results[0][key], equal_nan=True)
        else:
            assert np.array_equal(other, results[0], equal_nan=True)


def test_prefetch_directive_reaches_the_code():
    source = (EXAMPLES / "gcn.gnn").read_text()
    on = compiler.compile_source(source + "\nschedule gcn for cpu { prefetch 12 }\n", stop_after="scf")
    off = compiler.compile_source(source + "\nschedule gcn for cpu { prefetch 0 }\n", stop_after="scf")
    assert "llvm_ext.prefetch" in on.stages["convert-loop-to-scf"]
    assert "arith.constant 12 : index" in on.stages["prefetch-neighbors"]
    assert "llvm_ext.prefetch" not in off.stages["convert-loop-to-scf"]


def test_edge_rows_are_prefetched_at_the_users_edge_ids():
    # gat writes alpha[e] (prefetched for writing), gcn reads w[e]: both at
    # in_eid[pos + D], where edge ids in source order scatter them
    for name, write in (("gat", "true"), ("gcn", "false")):
        stage = compiler.compile_source((EXAMPLES / f"{name}.gnn").read_text(), stop_after="loop").stages[
            "prefetch-neighbors"
        ]
        loop_header = re.search(r"loop.for_in_edges %\d+ in %\d+, %\d+, (%\d+)", stage)
        assert loop_header is not None
        assert f"memref.load {loop_header.group(1)}[" in stage
        assert f"write = {write}" in stage


def test_call_time_schedule_compiles_a_variant():
    graph = gnnc.Graph(np.array([[0, 1, 2, 2, 3], [1, 2, 0, 1, 1]]))
    module = gnnc.compile(EXAMPLES / "gcn.gnn")
    x = np.random.default_rng(0).random((4, 3), dtype=np.float32)
    w = np.ones(5, np.float32)
    want = module.gcn(graph, x=x, w=w)
    got = module.gcn(graph, x=x, w=w, schedule={"sort": "degree", "prefetch": 2})
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert module.gcn._variants  # compiled once, kept


@pytest.mark.parametrize(
    "options,phases",
    slow_except(
        [
            ({}, 2),  # x @ W once per vertex, then the walk
            ({"disable_passes": ["transform-before-gather"]}, 1),  # x[u] @ W on every edge
            ({"fusion": False, "opt_level": 1}, None),
        ],
        ({"disable_passes": ["transform-before-gather"]}, 1),
    ),
)
def test_a_variant_keeps_the_objects_compile_options(options, phases):
    """A schedule variant is compiled as its object was: the ablation's 'no transform-before-gather'
    once came back with the pass (the default heuristic's variant dropped the option)."""
    module = gnnc.compile(EXAMPLES / "mlp_aggr.gnn", **options)
    variant = module.mlp_aggr._variant("prefetch 4")
    for key in ("opt_level", "disable_passes", "fusion"):
        if key in options:
            assert variant._metadata["options"][key] == options[key]
    if phases is not None:
        assert len(module.mlp_aggr._abi.phases) == len(variant._abi.phases) == phases
    graph = gnnc.Graph(np.array([[0, 1, 2, 2, 3], [1, 2, 0, 1, 1]]))
    rng = np.random.default_rng(0)
    x, w = rng.random((4, 8), dtype=np.float32), rng.random((8, 8), dtype=np.float32)
    np.testing.assert_allclose(
        module.mlp_aggr(graph, x=x, W=w, schedule="prefetch 4"), module.mlp_aggr(graph, x=x, W=w), rtol=1e-5
    )


def _hub_graph(hub_in_edges: int = 5000, v: int = 300, seed: int = 0) -> gnnc.Graph:
    rng = np.random.default_rng(seed)
    src = np.concatenate([rng.integers(0, v, hub_in_edges), rng.integers(0, v, 2000)])
    dst = np.concatenate([np.full(hub_in_edges, 5), rng.integers(0, v - 2, 2000)])  # v-2, v-1 isolated
    return gnnc.Graph.from_coo(src, dst, num_vertices=v)


def test_partitioning_refuses_kernels_it_cannot_split():
    # two walks of equal width: no walk is the one whose gathers partitioning keeps in cache
    source = "kernel k(w: f32[E]) -> f32[V] {\n    out[v] = sum(softmax(w[e]) * w[e])\n}\n"
    with pytest.raises(gnnc.CompileError, match="partition src 2: needs one in-edge walk"):
        compiler.compile_source(source + "schedule k for cpu { partition src 2 }\n")
    # sliced rows would add a softmax's sum once per slice in every partition
    with pytest.raises(gnnc.CompileError, match="vectorize 4: with partition src"):
        gnnc.compile(EXAMPLES / "gat.gnn", schedule="partition src 2; vectorize 4")


def test_partitioned_softmax_matches_reference_and_is_partitioned():
    graph = _hub_graph()
    module = gnnc.compile(EXAMPLES / "gat.gnn", schedule="partition src 4")
    rng = np.random.default_rng(3)
    h = rng.uniform(-1, 1, (graph.num_vertices, 2, 33)).astype(np.float32)
    el, er = (rng.uniform(-3, 3, (graph.num_vertices, 2)).astype(np.float32) for _ in range(2))
    got = module.gat(graph, h=h, el=el, er=er, threads=2)
    assert_matches(got, reference("gat").gat(graph, h=h, el=el, er=er), graph, np.float32)
    assert module.gat._abi.partitions == 4
    # the softmax's sum is summed partition by partition: not the unpartitioned order
    plain = gnnc.compile(EXAMPLES / "gat.gnn", schedule="parallel dst").gat(graph, h=h, el=el, er=er)
    assert not np.array_equal(got["out"], plain["out"])


def test_group_neighbors_is_applied_and_deterministic():
    graph = _hub_graph(20_000)
    x = np.random.default_rng(1).uniform(-1, 1, (graph.num_vertices, 17)).astype(np.float32)
    grouped = compiled("gcn", "group neighbors 3").gcn
    w = np.random.default_rng(2).uniform(-1, 1, graph.num_edges).astype(np.float32)
    results = [grouped(graph, x=x, w=w, threads=t, deterministic=True) for t in (1, 2, 5)]
    for other in results[1:]:
        assert np.array_equal(other, results[0])
    # the hub's sum is a sum of partial sums of 3 edges: another rounding than edge order
    plain = compiled("gcn", "parallel dst").gcn(graph, x=x, w=w)
    assert not np.array_equal(results[0][5], plain[5])
    assert_matches(results[0], reference("gcn").gcn(graph, x=x, w=w), graph, np.float32)
    ir = compiler.compile_source(
        (EXAMPLES / "gcn.gnn").read_text() + "schedule gcn for cpu { group neighbors 3 }\n",
        stop_after="convert-graph-to-loop",
    )
    assert 'parallel = "groups"' in ir.stages["convert-graph-to-loop"]


AGGREGATIONS = "kernel k(x: f32[V, F]) -> f32[V, F] {{\n    out[v] = {}(x[u])\n}}\n"


@pytest.mark.parametrize("kind", slow_except(["sum", "mean", "max", "min"], "mean", "max"))
def test_grouped_aggregations_keep_nan_ties_and_empty_rows(kind):
    """NaN in one group propagates through the merge; equal values tie; no in-edges gives 0."""
    graph = _hub_graph(5000)
    module = gnnc.compile(AGGREGATIONS.format(kind), schedule="group neighbors 16")
    ref = gnnc.compile(AGGREGATIONS.format(kind), target="reference")
    rng = np.random.default_rng(4)
    # few distinct values: many ties among the hub's 5000 in-edges
    x = rng.integers(-3, 4, (graph.num_vertices, 3)).astype(np.float32)
    hub_sources = graph.in_src[graph.in_indptr[5] : graph.in_indptr[6]]
    x[hub_sources[2500], 0] = np.nan  # in a middle group of the hub only
    got = module.k(graph, x=x, threads=2)
    want = ref.k(graph, x=x)
    assert_matches(got, want, graph, np.float32)
    assert np.isnan(got[5, 0]) and not np.isnan(got[5, 1:]).any()
    assert np.all(got[-2:] == 0)  # isolated vertices


@given(
    source=random_kernels(),
    schedule=st.sampled_from(
        ["group neighbors 2", "group neighbors 5\nvectorize 4", "partition src 2", "partition src 3\ntile features 2"]
    ),
    graph=graphs(max_edges=120),
    f=st.sampled_from((1, 3, 17)),
    threads=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=25)
@pytest.mark.slow
def test_random_kernels_split_or_partitioned_match_reference(source, schedule, graph, f, threads, seed):
    """Random kernels (edge results, several phases, softmax, @, scalar terms) under the splitting schedules."""
    try:
        module = gnnc.compile(source, schedule=schedule)
    except gnnc.CompileError as exc:
        assert any(d in str(exc) for d in REFUSABLE), str(exc)
        if "group neighbors" in schedule and "group neighbors" in str(exc):
            assert "softmax" in str(exc) or "no aggregation" in str(exc)
        return
    assert_random_kernel_matches(module, source, graph, f, threads, seed)


@pytest.mark.parametrize("bits", [256, 512])
def test_simd_directive_sets_the_vector_width(bits):
    """`simd W` reaches every function of the kernel (LLVM inlines the worker into its
    OpenMP trampoline, whose attribute then rules), and the code uses W-bit vectors."""
    options = compiler.CompileOptions(schedule=f"specialize F 128\nsimd {bits}")
    path = EXAMPLES / "gcn.gnn"
    stages = compiler.compile_source(path.read_text(), str(path), options, stop_after="asm").stages
    defines = [line for line in stages["translate-to-llvm"].splitlines() if line.startswith("define")]
    assert len(defines) >= 3
    for line in defines:
        assert f'"prefer-vector-width"="{bits}"' in line, line
    wide = re.search(r"\bv(fmadd\w*|add|mul)ps\s[^\n]*%zmm", stages["emit-asm"])
    if bits == 256:
        assert wide is None  # AMD's cores prefer 512 bits: the directive overrides either way
    elif "avx512f" in (host_cpu_flags() or ()):
        assert wide is not None


def test_simd_takes_register_widths_only():
    source = (EXAMPLES / "gcn.gnn").read_text() + "\nschedule gcn for cpu { simd 384 }\n"
    with pytest.raises(SourceError, match="expected '128', '256' or '512' after 'simd', found '384'"):
        compiler.compile_source(source, stop_after="graph")


@pytest.mark.parametrize("order", ["sort degree", "reorder locality", "reorder rcm"])
@pytest.mark.parametrize(
    "source",
    [
        "kernel k(x: f32[V, F], w: f32[E]) -> f32[E, F] {\n    out[e] = w[e] * x[u]\n}\n",
        "kernel k(x: f32[V]) -> f32[E] {\n    out[e] = x[u]\n}\n",
    ],
)
def test_partitioned_edge_kernels_with_a_destination_order_match_reference(source, order):
    # an edge-result kernel's destination lookup was read only by the partitioned walk: it moved
    # into the first partition's guard ("internal error: IR after 'convert-loop-to-scf' does not verify")
    module = gnnc.compile(source, schedule=f"{order}; partition src 2")
    rng = np.random.default_rng(8)
    graph = gnnc.Graph.from_coo(rng.integers(0, 40, 300), rng.integers(0, 40, 300), num_vertices=40)
    inputs = random_inputs(module.k.signature, graph, {"F": 3}, np.float32, seed=9)
    want = gnnc.compile(source, target="reference").k(graph, **inputs)
    assert_matches(module.k(graph, **inputs), want, graph, np.float32)
