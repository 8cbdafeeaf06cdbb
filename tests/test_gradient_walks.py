"""Gradient kernels walking one graph in turn share one walk (`_Builder.share_walks`).

The oracle is the same gradient with one kernel per part (`walks=False`), which
test_autodiff checks against finite differences; both run compiled, in float64.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc.api import compile_grad
from gnnc.lang import parse_and_check
from gnnc.lang.autodiff import gradient_program
from gnnc.lang.signature import kernel_signature
from gnnc.nn import attention
from gnnc.nn.attention import LoopKind
from gnnc.runtime.signature import vertex_rows
from tests.strategies import edge_lists

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

TWO_HOP = """
kernel two_hop(x: f32[V, F], w: f32[E]) -> f32[V, F] {
    h[v]   = mean(x[u] * w[e])
    out[v] = sum(h[u] * x[v]) + h[v] * h[v]
}
"""


def _gat(kind: LoopKind, mask: bool = False, weights: bool = False) -> str:
    """gnnc.nn's GATConv kernel for one loop kind (see gnnc/nn/attention.py)."""
    return attention.source(
        attention.Config(
            name="gat_conv",
            params=("h: f32[V, H, F]", "a_src: f32[V, H]", "a_dst: f32[V, H]"),
            score="leaky_relu(a_src[u] + a_dst[v], 0.2)",
            message="h[u]",
            mask=mask,
            weights=weights,
            **attention.loop_fields(kind, "h[v]"),
        )
    )


#: (source, kernel): the examples with a gradient, GATConv's variants, a vertex value read at u
CASES = [
    *((EXAMPLES / f"{n}.gnn", n) for n in ("gcn_norm", "sage_max", "gin", "attention", "mlp_aggr")),
    (EXAMPLES / "gat.gnn", "gat"),
    # square graphs and blocks with more sources share a kernel (attention.loop_fields)
    *((_gat(kind), "gat_conv") for kind in (LoopKind.NONE, LoopKind.MORE_SOURCES, LoopKind.FEWER_SOURCES)),
    (_gat(LoopKind.MORE_SOURCES, mask=True, weights=True), "gat_conv"),
    (TWO_HOP, "two_hop"),
]


def _f64(case: tuple) -> str:
    source, _ = case
    return (source.read_text() if isinstance(source, Path) else source).replace("f32", "f64")


@functools.cache
def _grads(i: int) -> tuple:
    text, name = _f64(CASES[i]), CASES[i][1]
    kernel = parse_and_check(text).kernel(name)
    walks, kernels = compile_grad(text, name, walks=True), compile_grad(text, name, walks=False)
    return kernel_signature(kernel), walks, kernels


def test_a_block_gat_gradient_is_four_walks_not_nine():
    """After the softmax's stages and its exp (`st11`, which training takes from the forward
    pass): the score adjoints' dots (an edge stage, gathered once), one walk of the block
    for h's destination part and the softmax adjoint, one for the score adjoint (an edge
    stage, `st10`) and the gradients summing it at the destination (a_dst, the loop
    scores), and one of the reverse for h and a_src (which sums the same stage). The score
    adjoint's [H] rows do not share the walk of h's [H, F] rows (one vectorised row axis a
    walk)."""
    kernel = parse_and_check(_gat(LoopKind.MORE_SOURCES)).kernel("gat_conv")
    shared, apart = gradient_program(kernel), gradient_program(kernel, walks=False)
    on_blocks = [k for k in shared.kernels if k.square is not True]
    assert [k.reverse for k in on_blocks] == [False, False, False, False, True]
    assert set(on_blocks[0].writes) == set(shared.saved) == {"st0__", "st1__", "st2__", "st3__", "st11__"}
    assert on_blocks[1].writes == ("st9__",)
    assert set(on_blocks[2].writes) == {"h", "st5__", "st7__"}
    assert set(on_blocks[3].writes) == {"st10__", "a_dst", "sl"}
    assert set(on_blocks[4].writes) == {"h", "a_src"} and "st10__" in on_blocks[4].inputs
    assert len([k for k in apart.kernels if k.square is not True and k.wrt not in apart.saved]) == 9


def test_a_walk_reads_its_own_results_only_where_it_computes_them():
    """In every shared walk a result is read at its own index (`st9__[e]`, `st5__[v]`):
    a vertex value read at a source (two_hop's h[u]) is computed in a walk before."""
    for case in CASES:
        kernel = parse_and_check(_f64(case)).kernel(case[1])
        program = gradient_program(kernel)
        pieces = {p.split("(", 1)[0]: p for p in program.source.split("kernel ")[1:]}
        for k in program.kernels:
            body = pieces[k.name].split("{", 1)[1]
            for result, _ in k.parts:
                at = re.search(rf"^\s*{re.escape(result)}\[(\w)\]", body, re.M)
                assert at is not None, (k.name, result)
                assert set(re.findall(rf"\b{re.escape(result)}\[(\w+)\]", body)) == {at.group(1)}, (k.name, result)
    program = gradient_program(parse_and_check(TWO_HOP).kernel("two_hop"))
    stage = next(k for k in program.kernels if "st0__" in k.writes)
    assert all("st0__" not in k.writes for k in program.kernels if "st0__" in k.inputs)
    assert program.kernels.index(stage) < min(i for i, k in enumerate(program.kernels) if "st0__" in k.inputs)


@st.composite
def _graphs(draw):
    """Square graphs (`edge_lists`' shapes) and blocks: more sources than destinations (the
    first sources are the destinations) or fewer, which kernels reading an input at both
    ends refuse."""
    src, dst, v = draw(edge_lists(max_vertices=20, max_edges=80))
    shape = draw(st.sampled_from(["square", "more", "fewer"]))
    if shape == "square" or v == 0:
        return gnnc.Graph.from_coo(src, dst, num_vertices=v)
    extra = draw(st.integers(1, 6))
    if shape == "more":
        return gnnc.Graph.from_coo(src + extra, dst, shape=(v + extra, v))
    return gnnc.Graph.from_coo(src, dst + extra, shape=(v, v + extra))


@settings(max_examples=min(30, settings().max_examples * 3), deadline=None)
@given(graph=_graphs(), case=st.integers(0, len(CASES) - 1), seed=st.integers(0, 2**31 - 1))
def test_shared_walks_give_the_gradients_of_one_kernel_per_part(graph, case, seed):
    signature, walks, kernels = _grads(case)
    if graph.bipartite and signature.values_read_at_src:  # a vertex value read at u: square graphs only
        graph = gnnc.Graph.from_coo(graph.src, graph.dst, num_vertices=max(graph.num_src, graph.num_dst))
    elif graph.num_src < graph.num_dst and any(p.sides == ("src", "dst") for p in signature.params):
        graph = gnnc.Graph.from_coo(graph.dst, graph.src, shape=(graph.num_dst, graph.num_src))
    rng = np.random.default_rng(seed)
    dims = {"F": 3, "H": 2, "K": 3, "N": 2, "D": 3}
    args = {}
    for p in signature.params:
        rows = {"V": [vertex_rows(p, graph)[-1]], "E": [graph.num_edges], None: []}[p.domain]
        args[p.name] = rng.uniform(-1, 1, rows + [dims.get(d, 2) if isinstance(d, str) else d for d in p.shape])
    out = kernels.forward(graph, **args)[0] if kernels.saved else None
    if out is None:
        from gnnc.reference import evaluate

        out = evaluate(parse_and_check(_f64(CASES[case])).kernel(CASES[case][1]), graph, **args)
    gout = (
        {k: rng.normal(size=v.shape) for k, v in out.items()} if isinstance(out, dict) else rng.normal(size=out.shape)
    )
    want, got = kernels(graph, gout=gout, **args), walks(graph, gout=gout, **args)
    assert set(got) == set(want)
    for name in want:
        scale = 1 + np.abs(want[name]).max(initial=0)
        np.testing.assert_allclose(got[name], want[name], rtol=1e-9, atol=1e-9 * scale, err_msg=name)
    if walks.saved:  # the training path: the softmax's stages from the forward pass
        _, saved = walks.forward(graph, **args)
        again = walks(graph, gout=gout, saved=saved, **args)
        for name in want:
            np.testing.assert_allclose(
                again[name], want[name], rtol=1e-9, atol=1e-9 * (1 + np.abs(want[name]).max(initial=0))
            )


def _targets(grad, square: bool) -> list[str]:
    """What a gradient's kernels compute parts of on square graphs or on blocks, once per part."""
    return sorted(w for k in grad.kernels if k[7] in (None, square) for w in ([t for _, t in k[10]] or [k[1]]))


def test_a_gradient_for_some_inputs_runs_no_walk_part_nobody_asked_for():
    """A shared walk computes parts of several inputs: a gradient restricted to some runs a walk
    only where all its parts are needed, else the kernels of the parts it needs (compiled with
    it), so it computes what the same restriction without shared walks computes, no more."""
    index = next(i for i, c in enumerate(CASES) if c[0] == _gat(LoopKind.MORE_SOURCES))
    signature, walks, kernels = _grads(index)
    rng = np.random.default_rng(3)
    graph = gnnc.Graph.from_coo(rng.integers(0, 30, 200), rng.integers(0, 12, 200), shape=(30, 12))
    args = {
        p.name: rng.uniform(-1, 1, [vertex_rows(p, graph)[-1], *(2 if d == "H" else 3 for d in p.shape)])
        for p in signature.params
    }
    gout = rng.normal(size=(12, 2, 3))
    full = walks(graph, gout=gout, **args)
    everything = tuple(p.name for p in signature.params)
    assert any(k[10] for k in walks.restricted_to(everything).kernels)
    for wanted in (("a_dst",), ("h",), ("a_src", "sl"), ("h", "a_src")):
        restricted = walks.restricted_to(wanted)
        for square in (True, False):
            assert _targets(restricted, square) == _targets(kernels.restricted_to(wanted), square), wanted
        part = restricted(graph, gout=gout, **args)
        assert set(part) == set(wanted)
        for name in wanted:
            np.testing.assert_allclose(part[name], full[name], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("walks", [True, False])
def test_the_cuda_target_keeps_one_kernel_per_part(walks, monkeypatch):
    """Shared walks are measured on the CPU only: a CUDA gradient keeps its kernels apart
    unless asked (`walks=`)."""
    from gnnc import api

    seen = []
    real = api.compile

    def compile_(source, **options):
        seen.append(source)
        return real(source, target="reference")

    monkeypatch.setattr(api, "compile", compile_)
    api.compile_grad(_gat(LoopKind.SQUARE), "gat_conv", target="cuda")
    api.compile_grad(_gat(LoopKind.SQUARE), "gat_conv", target="cuda", walks=walks)
    assert "__walk" not in seen[0]
    assert ("__walk" in seen[1]) == walks
