"""specialize-unit-dims: destination bodies versioned on a head axis of size 1."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gnnc
from gnnc.driver import compiler

from .helpers import assert_matches, slow_except
from .strategies import graphs, random_inputs

EXAMPLES = Path(__file__).parent.parent / "examples"

# per-head attention weights times a per-head feature row, with the heads'
# own sums: every loop over H encloses a loop over F or sits beside one
HEADS = """
kernel heads(h: f32[V, H, F], a: f32[V, H], w: f32[E, H]) -> (out: f32[V, H, F], score: f32[E, H]) {
    score[e] = softmax(a[u] * w[e])
    out[v]   = sum(score[e] * h[u]) + max(w[e] * h[u]) + a[v]
}
"""


def specialized_stage(source: str) -> str:
    return compiler.compile_source(source, stop_after="loop").stages["specialize-unit-dims"]


@pytest.mark.parametrize(
    "name,versioned",
    [
        ("gat", True),
        ("gcn", False),
        ("sage_max", False),
        ("gcn_norm", False),
        ("gin", False),
        ("attention", True),  # its heads enclose the dot's reduction
        # the matvec's input axis D1 encloses its output axis D2, but the matvec
        # runs in a source sweep (transform-before-gather), sliced by row instead
        ("mlp_aggr", False),
    ],
)
def test_only_kernels_with_a_head_axis_are_versioned(name, versioned):
    text = specialized_stage((EXAMPLES / f"{name}.gnn").read_text())
    assert ("arith.cmpi eq" in text and "scf.if" in text) == versioned


def test_the_unit_copy_recomputes_what_derives_from_the_axis():
    # strides and scratch offsets computed from H before the destination loop
    # (H * F, the prefetch loop's bound H) are recomputed with 1 in the copy,
    # so nothing in it reads H: LLVM then folds them all
    text = specialized_stage((EXAMPLES / "gat.gnn").read_text())
    flag, axis = re.search(r"(%\d+) = arith.cmpi eq, (%\d+), %\d+ : index", text).groups()
    unit = text[text.index(f"scf.if {flag} {{") : text.index("} else {")]
    assert re.search(axis + r"\b", unit) is None
    assert "arith.muli" in unit.split("loop.for_feature")[0]  # the recomputed offsets


def test_restructuring_schedules_keep_one_body():
    source = (EXAMPLES / "gat.gnn").read_text() + "schedule gat for cpu { tile features 8 }\n"
    assert "scf.if" not in specialized_stage(source)


def test_row_slicing_keeps_the_versioned_body():
    # vectorize-rows copies the versioned body into each slice: the unit copy survives slicing
    source = (EXAMPLES / "gat.gnn").read_text() + "schedule gat for cpu { vectorize 16 }\n"
    stages = compiler.compile_source(source, stop_after="loop").stages
    assert "arith.cmpi eq" in stages["specialize-unit-dims"] and "scf.if" in stages["specialize-unit-dims"]
    sliced = stages["vectorize-rows"]
    assert "vectorize" not in sliced.split("loop.for_dst")[1].split("{")[0]
    assert sliced.count("arith.cmpi eq") >= 2  # one versioning per copy of the body (full slices, the tail)


@pytest.mark.parametrize(
    "source,name",
    slow_except(
        [
            ((EXAMPLES / "gat.gnn").read_text(), "gat"),
            (HEADS, "heads"),
            ((EXAMPLES / "attention.gnn").read_text(), "attention"),
        ],
        ((EXAMPLES / "attention.gnn").read_text(), "attention"),
    ),
)
@given(graph=graphs(), heads=st.sampled_from((1, 3)), f=st.sampled_from((1, 17, 64)), seed=st.integers(0, 2**32 - 1))
@pytest.mark.parametrize("schedule", slow_except([None, "vectorize 16"], None))
def test_both_versions_match_the_reference(source, name, schedule, graph, heads, f, seed):
    specialized = getattr(gnnc.compile(source, schedule=schedule), name)
    general = getattr(gnnc.compile(source, schedule=schedule, disable_passes=["specialize-unit-dims"]), name)
    inputs = random_inputs(specialized.signature, graph, {"H": heads, "F": f, "D": f}, np.float32, seed)
    got = specialized(graph, **inputs)
    assert_matches(got, getattr(gnnc.compile(source, target="reference"), name)(graph, **inputs), graph, np.float32)
    # the same arithmetic in the same order: bit-identical to the general body
    other = general(graph, **inputs)
    for key in got if isinstance(got, dict) else [None]:
        np.testing.assert_array_equal(got[key] if key else got, other[key] if key else other)
