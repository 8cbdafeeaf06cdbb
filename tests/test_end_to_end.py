"""Every example kernel and random kernels: compiled output == numpy reference."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from tests.helpers import assert_matches, slow_except
from tests.strategies import FEATURE_SIZES, graphs, random_inputs, random_kernels

EXAMPLES = Path(__file__).parent.parent / "examples"

#: Example kernel -> its symbolic dims, each drawn from FEATURE_SIZES or small heads.
EXAMPLE_DIMS = {
    "gcn": ("F",),
    "gcn_norm": ("F",),
    "gin": ("F",),
    "sage_max": ("F",),
    "sage_mean": ("F",),
    "attention": ("H", "D"),
    "mlp_aggr": ("D1", "D2"),
    "gat": ("H", "F"),
}


@functools.cache
def compiled(source_or_path: str):
    return gnnc.compile(source_or_path)


@functools.cache
def referenced(source_or_path: str):
    return gnnc.compile(source_or_path, target="reference")


def _dims(names, data) -> dict[str, int]:
    dims = {}
    for d in names:
        dims[d] = data.draw(st.sampled_from((1, 2, 4)) if d == "H" else st.sampled_from(FEATURE_SIZES), label=d)
    return dims


@pytest.mark.parametrize("name", slow_except(sorted(EXAMPLE_DIMS), "gat", "gcn"))
@given(graph=graphs(), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_example_matches_reference(name, graph, data, seed):
    path = str(EXAMPLES / f"{name}.gnn")
    module = compiled(path)
    kernel = getattr(module, name)
    dims = _dims(EXAMPLE_DIMS[name], data)
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, seed)
    got = kernel(graph, **inputs)
    want = getattr(referenced(path), name)(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


@given(
    source=random_kernels(), graph=graphs(max_edges=120), f=st.sampled_from((1, 3, 17)), seed=st.integers(0, 2**32 - 1)
)
@settings(max_examples=25)
@pytest.mark.slow
def test_random_kernel_matches_reference(source, graph, f, seed):
    module = compiled(source)
    kernel = module.k
    dtype = np.float32 if kernel.signature.dtype == "f32" else np.float64
    inputs = random_inputs(kernel.signature, graph, {"F": f}, dtype, seed)
    got = kernel(graph, **inputs)
    want = referenced(source).k(graph, **inputs)
    assert_matches(got, want, graph, dtype)


@given(
    source=random_kernels(),
    graph=graphs(max_edges=120),
    f=st.sampled_from((1, 3, 17)),
    threads=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=12)
def test_random_kernel_partitioned_matches_reference(source, graph, f, threads, seed):
    """`partition src 2` keeps accumulators across partitions, in the output row where the
    result reads its sum once at the index it writes (`analysis.in_place_aggregate`), in
    acc_rows otherwise: random kernels cover both."""
    try:
        module = gnnc.compile(source, schedule="partition src 2")
    except gnnc.CompileError as exc:
        assert "partition src" in str(exc), str(exc)  # refused, saying why: never ignored
        return
    kernel = module.k
    dtype = np.float32 if kernel.signature.dtype == "f32" else np.float64
    inputs = random_inputs(kernel.signature, graph, {"F": f}, dtype, seed)
    got = kernel(graph, threads=threads, **inputs)
    want = referenced(source).k(graph, **inputs)
    assert_matches(got, want, graph, dtype)
