"""Every schedule is checked against the reference; schedules are never ignored."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc import compiler
from tests.helpers import assert_matches
from tests.strategies import graphs, random_inputs

EXAMPLES = Path(__file__).parent.parent / "examples"
DIMS = {"gcn": {"F": 17}, "sage_max": {"F": 3}, "sage_mean": {"F": 64}, "gin": {"F": 5},
        "attention": {"H": 2, "D": 17}, "gat": {"H": 2, "F": 17}, "mlp_aggr": {"D1": 5, "D2": 7},
        "gcn_norm": {"F": 1}}

SCHEDULES = st.sampled_from([
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
])


@functools.cache
def compiled(name: str, schedule: str):
    try:
        return gnnc.compile(EXAMPLES / f"{name}.gnn", schedule=schedule)
    except gnnc.CompileError as exc:
        return exc


@functools.cache
def reference(name: str):
    return gnnc.compile(EXAMPLES / f"{name}.gnn", target="reference")


@pytest.mark.parametrize("name", sorted(DIMS))
@given(graph=graphs(), schedule=SCHEDULES, threads=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=10)
def test_scheduled_example_matches_reference(name, graph, schedule, threads, seed):
    module = compiled(name, schedule)
    if isinstance(module, gnnc.CompileError):
        # a schedule may not apply to a kernel; it must say so, never be ignored
        directives = [d for d in ("partition src", "order edges hilbert", "tile features", "vectorize") if d in schedule]
        assert any(d in str(module) for d in directives), str(module)
        return
    kernel = getattr(module, name)
    inputs = random_inputs(kernel.signature, graph, DIMS[name], np.float32, seed)
    got = kernel(graph, threads=threads, **inputs)
    want = getattr(reference(name), name)(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


@pytest.mark.parametrize("name", ["gcn", "gat", "sage_mean"])
@given(graph=graphs(), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=5)
def test_results_are_bit_identical_for_any_thread_count(name, graph, seed):
    kernel = getattr(compiled(name, "parallel dst"), name)
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




def test_call_time_schedule_compiles_a_variant():
    graph = gnnc.Graph(np.array([[0, 1, 2, 2, 3], [1, 2, 0, 1, 1]]))
    module = gnnc.compile(EXAMPLES / "gcn.gnn")
    x = np.random.default_rng(0).random((4, 3), dtype=np.float32)
    w = np.ones(5, np.float32)
    want = module.gcn(graph, x=x, w=w)
    got = module.gcn(graph, x=x, w=w, schedule={"sort": "degree", "prefetch": 2})
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert module.gcn._variants  # compiled once, kept


def test_partitioning_refuses_kernels_it_cannot_split():
    with pytest.raises(gnnc.CompileError, match="partition src 2"):
        gnnc.compile(EXAMPLES / "gat.gnn", schedule="partition src 2")
