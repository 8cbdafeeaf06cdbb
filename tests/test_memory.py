"""gnnc.empty / zeros / aligned, and the runtime's own buffers starting on a cache line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc.runtime import memory

EXAMPLES = Path(__file__).parent.parent / "examples"

shapes = st.lists(st.integers(0, 9), min_size=0, max_size=3).map(tuple)
dtypes = st.sampled_from([np.float32, np.float64, np.int64, np.int8])
alignments = st.sampled_from([1, 8, 64, 4096])


@settings(max_examples=60, deadline=None)
@given(shapes, dtypes, alignments)
def test_empty_and_zeros_start_on_the_boundary(shape, dtype, alignment):
    # a numpy dtype at the cache line takes `empty`'s short way (the runtime's results)
    for make, kind in ((memory.empty, dtype), (memory.zeros, dtype), (memory.empty, np.dtype(dtype))):
        a = make(shape, kind, alignment)
        assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.c_contiguous
        assert a.ctypes.data % alignment == 0 or a.size == 0  # numpy points an empty slice at its base
        a[...] = 1  # the whole view is writable memory
    assert not memory.zeros(shape, dtype, alignment).any()


def test_integer_shape_and_default_dtype():
    a = gnnc.empty(5)
    assert a.shape == (5,) and a.dtype == np.float32 and memory.is_aligned(a)
    for count in (5, np.int64(5)):  # a count of either integer type, a numpy dtype (the short way)
        b = memory.empty(count, np.dtype(np.float64))
        assert b.shape == (5,) and b.dtype == np.float64 and memory.is_aligned(b)


@pytest.mark.parametrize("alignment", [0, -64, 48])
def test_alignment_must_be_a_power_of_two(alignment):
    with pytest.raises(ValueError, match="power of two"):
        memory.empty(3, np.float32, alignment)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 15), st.integers(1, 40), st.booleans())
def test_aligned_returns_the_same_values_on_the_boundary(offset, n, transpose):
    base = np.arange(offset + 4 * n, dtype=np.float32)[offset:].reshape(n, 4)
    src = base.T if transpose else base
    got = gnnc.aligned(src)
    np.testing.assert_array_equal(got, src)
    assert got.flags.c_contiguous and memory.is_aligned(got)
    if src.flags.c_contiguous and memory.is_aligned(src):
        assert got is src
    else:
        assert not np.shares_memory(got, src)


def test_kernel_outputs_are_aligned_and_results_do_not_depend_on_input_alignment():
    module = gnnc.compile(str(EXAMPLES / "gcn.gnn"))
    rng = np.random.default_rng(3)
    graph = gnnc.Graph(rng.integers(0, 50, size=(2, 400)), num_vertices=50)
    x = rng.standard_normal((50, 16)).astype(np.float32)
    w = rng.standard_normal(400).astype(np.float32)
    on_line = module.gcn(graph, gnnc.aligned(x), gnnc.aligned(w))
    assert memory.is_aligned(on_line)
    shifted = memory.empty(50 * 16 + 4)[4:].reshape(50, 16)  # 16 bytes past a line
    shifted[...] = x
    assert not memory.is_aligned(shifted)
    np.testing.assert_array_equal(module.gcn(graph, shifted, w), on_line)
