"""Graph-level fusion passes: transform-before-gather, deferred-division, unfuse, annotate-fusion.

Each pass runs between the frontend and the lowering; the compiled kernel must
still equal the numpy reference, and the loop IR must show the effect.
"""

from __future__ import annotations

import functools
import re
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
from gnnc.driver import compiler, pipeline
from gnnc.ir import abi
from gnnc.runtime.module import Module
from gnnc.transforms.graph.annotate_fusion import AnnotateFusionPass
from gnnc.transforms.graph.deferred_division import DeferredDivisionPass
from gnnc.transforms.graph.transform_before_gather import TransformBeforeGatherPass
from gnnc.transforms.graph.unfuse import UnfusePass
from tests.helpers import assert_matches, slow_except
from tests.strategies import FEATURE_SIZES, graphs, random_inputs, random_kernels
from tests.test_end_to_end import EXAMPLE_DIMS

EXAMPLES = Path(__file__).parent.parent / "examples"
OUR_PASSES = {p.name: p for p in (TransformBeforeGatherPass, DeferredDivisionPass, UnfusePass, AnnotateFusionPass)}
#: Passes that run just before the lowering (the others: after graph-canonicalize).
LATE = ("unfuse", "annotate-fusion")
_BUILD_DIR = Path(tempfile.mkdtemp(prefix="gnnc-fusion-tests-"))


def pass_list(extra: tuple[str, ...]) -> list[str]:
    # the baseline is the pipeline without these passes, whether or not it lists them
    names = [n for n in pipeline.CPU_PIPELINE if n not in OUR_PASSES]
    early = [n for n in extra if n not in LATE]
    late = [n for n in extra if n in LATE]
    names[names.index("graph-canonicalize") + 1 : names.index("graph-canonicalize") + 1] = early
    at = names.index("convert-graph-to-loop")
    names[at:at] = late
    return names


def compile_with(source: str, extra: tuple[str, ...]) -> compiler.CompileResult:
    """compile_source with `extra` graph passes in the pipeline (stages recorded)."""
    names = pass_list(extra)
    with (
        mock.patch.object(pipeline, "pass_names", lambda disabled=(), fusion=True, target="cpu": names),
        mock.patch.dict(pipeline.PASSES, OUR_PASSES),
    ):
        return compiler.compile_source(source, "<test>")


@functools.cache
def build(source: str, extra: tuple[str, ...] = ()) -> tuple[Module, dict[str, str]]:
    """The loaded module of source compiled with extra passes, and its IR stages."""
    result = compile_with(source, extra)
    path = _BUILD_DIR / f"k{len(list(_BUILD_DIR.iterdir()))}.so"
    compiler.write_shared_object(result, path)
    return Module(path), result.stages


@functools.cache
def reference(source: str):
    return gnnc.compile(source, target="reference")


def example(name: str) -> str:
    return (EXAMPLES / f"{name}.gnn").read_text()


def draw_dims(names, data) -> dict[str, int]:
    return {
        d: data.draw(st.sampled_from((1, 2, 4)) if d == "H" else st.sampled_from(FEATURE_SIZES), label=d) for d in names
    }


def check(source: str, extra: tuple[str, ...], name: str, graph, dims, seed, dtype=np.float32, poison=None):
    module, _ = build(source, extra)
    kernel = getattr(module, name)
    inputs = random_inputs(kernel.signature, graph, dims, dtype, seed)
    if poison is not None:
        poison(inputs)
    got = kernel(graph, **inputs)
    want = getattr(reference(source), name)(graph, **inputs)
    assert_matches(got, want, graph, dtype)


def loop_ir(source: str, extra: tuple[str, ...]) -> str:
    return build(source, extra)[1]["convert-graph-to-loop"]


def matrix_loads_in_edge_loops(loop_text: str, param_index: int) -> int:
    """Loads from parameter number `param_index` inside `loop.for_in_edges` bodies.

    A matvec reads its matrix in its innermost loop: a load of W inside an
    in-edge loop is a matvec computed per edge.
    """
    fn_line = next(line for line in loop_text.splitlines() if "func.func" in line)
    buffer = re.findall(r"(%\d+): ", fn_line)[len(abi.GRAPH_ARGUMENTS) + param_index]
    count = 0
    stack: list[bool] = []
    for line in loop_text.splitlines():
        s = line.strip()
        if s.startswith("}") and stack:
            stack.pop()
        if any(stack) and s.startswith("%") and f"memref.load {buffer}[" in s:
            count += 1
        if s.endswith("{"):
            stack.append("loop.for_in_edges" in s)
    return count


# ---------------------------------------------------------- transform-before-gather

SAGE_MATVEC = """
kernel sage_lin(x: f32[V, K], W: f32[K, N]) -> f32[V, N] {
    out[v] = sum(x[u] @ W)
}
"""

DST_MATVEC = """
kernel dst_lin(x: f32[V, K], W: f32[K, N], y: f32[V, N]) -> f32[V, N] {
    out[v] = max(relu(y[u] * 2 - tanh(x[v] @ W)))
}
"""

TWO_PHASE_MATVEC = """
kernel two_phase(x: f32[V, F], W: f32[F, F]) -> f32[V, F] {
    h[v] = mean(x[u])
    out[v] = sum(tanh(h[u] @ W) + (h[v] - x[v]) @ W)
}
"""

NESTED_MATVEC = """
kernel nested(x: f32[V, K], W: f32[K, K], W2: f32[K, N]) -> f32[V, N] {
    out[v] = min(tanh((x[u] * rsqrt(deg_out(u) + 1)) @ W) @ W2 - (x[v] - x[u]) @ W2)
}
"""

# GAT with its attention projection in the kernel: dot(h[u], a) once per vertex
GAT_PROJECTED = """
kernel gat_projected(h: f32[V, H, F], a_src: f32[H, F], a_dst: f32[H, F]) -> f32[V, H, F] {
    s[e]   = leaky_relu(dot(h[u], a_src) + dot(h[v], a_dst), 0.2)
    out[v] = sum(softmax(s[e]) * h[u])
}
"""

TBG = ("transform-before-gather",)


@pytest.mark.parametrize(
    "source,name,dims",
    slow_except(
        [
            (example("mlp_aggr"), "mlp_aggr", ("D1", "D2")),
            (SAGE_MATVEC, "sage_lin", ("K", "N")),
            (DST_MATVEC, "dst_lin", ("K", "N")),
            (TWO_PHASE_MATVEC, "two_phase", ("F",)),
            (NESTED_MATVEC, "nested", ("K", "N")),
            (GAT_PROJECTED, "gat_projected", ("H", "F")),
        ],
        (SAGE_MATVEC, "sage_lin", ("K", "N")),
    ),
)
@given(graph=graphs(), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_transform_before_gather_matches_reference(source, name, dims, graph, data, seed):
    check(source, TBG, name, graph, draw_dims(dims, data), seed)


@pytest.mark.parametrize(
    "source",
    slow_except(
        [example("mlp_aggr"), SAGE_MATVEC, DST_MATVEC, TWO_PHASE_MATVEC, NESTED_MATVEC], DST_MATVEC, TWO_PHASE_MATVEC
    ),
)
def test_transform_before_gather_moves_matvec_out_of_edge_loops(source):
    # W is each kernel's second parameter (and W2 the third)
    params = (1, 2) if source is NESTED_MATVEC else (1,)
    assert sum(matrix_loads_in_edge_loops(loop_ir(source, ()), p) for p in params) > 0
    for p in params:
        assert matrix_loads_in_edge_loops(loop_ir(source, TBG), p) == 0


def test_transform_before_gather_mlp_aggr_shares_one_matvec():
    graph_ir = build(example("mlp_aggr"), TBG)[1]["dce"]
    assert graph_ir.count("graph.matvec") == 1
    assert graph_ir.count("graph.materialize") == 1


@pytest.mark.slow
def test_transform_before_gather_hoists_dot_products():
    """Both attention projections become per-vertex tensors; no dot is left in an edge loop."""
    before, after = build(GAT_PROJECTED, ())[1]["dce"], build(GAT_PROJECTED, TBG)[1]["dce"]
    assert "graph.materialize" not in before
    assert after.count("graph.materialize") == 2
    dots = [line for line in after.splitlines() if "graph.dot" in line]
    assert len(dots) == 2 and all("-> !graph.value<D," in line for line in dots)
    # a dot over a unit axis costs no more per edge than reading its hoisted result
    unit = GAT_PROJECTED.replace("f32[V, H, F]", "f32[V, H, 1]").replace("f32[H, F]", "f32[H, 1]")
    assert "graph.materialize" not in build(unit, TBG)[1]["dce"]


def test_transform_before_gather_leaves_k1_alone():
    source = "kernel k(x: f32[V, 1], W: f32[1, N]) -> f32[V, N] {\n    out[v] = sum(x[u] @ W)\n}\n"
    assert "graph.materialize" not in build(source, TBG)[1]["dce"]


@given(
    source=random_kernels(), graph=graphs(max_edges=120), f=st.sampled_from((1, 3, 17)), seed=st.integers(0, 2**32 - 1)
)
@settings(max_examples=15)
@pytest.mark.slow
def test_random_kernels_with_all_fusion_passes(source, graph, f, seed):
    module, _ = build(source, ("transform-before-gather", "deferred-division", "annotate-fusion"))
    kernel = module.k
    dtype = np.float32 if kernel.signature.dtype == "f32" else np.float64
    inputs = random_inputs(kernel.signature, graph, {"F": f}, dtype, seed)
    assert_matches(kernel(graph, **inputs), reference(source).k(graph, **inputs), graph, dtype)


# ---------------------------------------------------------------- deferred-division

DD = ("deferred-division",)

GAT_OUT_ONLY = """
kernel gat1(h: f32[V, H, F], el: f32[V, H], er: f32[V, H]) -> f32[V, H, F] {
    s[e]   = leaky_relu(el[u] + er[v], 0.2)
    out[v] = sum(softmax(s[e]) * h[u])
}
"""

# alpha is a result and has a second use besides the weighted sum
GAT_ALPHA_REUSED = """
kernel gat2(h: f32[V, H, F], el: f32[V, H], er: f32[V, H]) -> (out: f32[V, H, F], alpha: f32[E, H]) {
    s[e]     = leaky_relu(el[u] + er[v], 0.2)
    alpha[e] = softmax(s[e])
    out[v]   = sum(alpha[e] * h[u]) + max(alpha[e])
}
"""

DD_CASES = [(example("gat"), "gat"), (GAT_OUT_ONLY, "gat1"), (GAT_ALPHA_REUSED, "gat2")]


@pytest.mark.parametrize("source,name", slow_except(DD_CASES, DD_CASES[0]))
@given(graph=graphs(), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_deferred_division_matches_reference(source, name, graph, data, seed):
    check(source, DD, name, graph, draw_dims(("H", "F"), data), seed)


def _poisoner(data):
    kind = data.draw(st.sampled_from(["nan_el", "inf_er", "ninf_el", "nan_h", "big"]), label="poison")

    def poison(inputs):
        rng = np.random.default_rng(0)
        for key in ("el", "er", "h"):
            a = inputs[key]
            if a.size == 0:
                continue
            mask = rng.random(a.shape) < 0.1
            if kind == "nan_el" and key == "el":
                a[mask] = np.nan
            elif kind == "inf_er" and key == "er":
                a[mask] = np.inf
            elif kind == "ninf_el" and key == "el":
                a[mask] = -np.inf
            elif kind == "nan_h" and key == "h":
                a[mask] = np.nan
            elif kind == "big" and key in ("el", "er"):
                a *= 80.0  # exp(s - m) underflows for most edges

    return poison


@pytest.mark.parametrize("source,name", DD_CASES)
@given(graph=graphs(), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_deferred_division_special_values(source, name, graph, data, seed):
    check(source, DD, name, graph, draw_dims(("H", "F"), data), seed, poison=_poisoner(data))


@pytest.mark.parametrize("source,name", DD_CASES)
def test_deferred_division_isolated_destinations_give_zero(source, name):
    # vertex 3 has no in-edges; vertex 0 only a self loop
    graph = gnnc.Graph.from_coo(np.array([0, 1, 2, 0, 1]), np.array([0, 2, 1, 1, 0]), num_vertices=4)
    module, _ = build(source, DD)
    kernel = getattr(module, name)
    inputs = random_inputs(kernel.signature, graph, {"H": 2, "F": 3}, np.float32, 7)
    got = kernel(graph, **inputs)
    out = got["out"] if isinstance(got, dict) else got
    assert np.all(out[3] == 0.0)
    want = getattr(reference(source), name)(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


def test_deferred_division_removes_edge_softmax_and_a_loop():
    graph_ir = build(GAT_OUT_ONLY, DD)[1]["dce"]
    assert "graph.edge_softmax" not in graph_ir
    # max, then (sum of exp and weighted sum) together: two in-edge loops, not three
    assert loop_ir(GAT_OUT_ONLY, ()).count("loop.for_in_edges") == 3
    assert loop_ir(GAT_OUT_ONLY, DD).count("loop.for_in_edges") == 2


def test_deferred_division_max_is_a_nan_ignoring_stabilizer():
    # the user's max(alpha) propagates NaN; the softmax's own max need not
    # (test_deferred_division_special_values checks NaN still reaches out)
    graph_ir = build(GAT_ALPHA_REUSED, DD)[1]["dce"]
    assert graph_ir.count("{stabilizer}") == 1
    assert graph_ir.count("graph.aggregate max ") == 2
    lowered = loop_ir(GAT_ALPHA_REUSED, DD)
    assert lowered.count("arith.maxnumf") == 1 and lowered.count("arith.maximumf") >= 1


def test_deferred_division_with_alpha_evaluates_exp_once_per_edge():
    before, after = loop_ir(example("gat"), ()), loop_ir(example("gat"), DD)
    assert before.count("math.exp") == 2  # sum of exponentials, then the weights
    assert after.count("math.exp") == 1  # stored as alpha beside the sums
    # the last walk only scales the stored weights: no gathers, no exp
    lines = after[after.rindex("loop.for_in_edges") :].splitlines()
    indent = len(after[: after.rindex("loop.for_in_edges")].splitlines()[-1])
    end = next(i for i, line in enumerate(lines) if i and line == " " * indent + "}")
    last_walk = "\n".join(lines[: end + 1])
    assert "math.exp" not in last_walk and last_walk.count("memref.load") == 2  # alpha, 1/z


def _walk_with_exp(loop_text: str) -> str:
    """The in-edge walk that computes gat's exponentials, as text."""
    at = loop_text.index("math.exp")
    start = loop_text.rindex("loop.for_in_edges", 0, at)
    indent = len(loop_text[:start].splitlines()[-1])
    lines = loop_text[start:].splitlines()
    end = next(i for i, line in enumerate(lines) if i and line == " " * indent + "}")
    return "\n".join(lines[: end + 1])


@pytest.mark.parametrize("target, split", [("cpu", True), ("cuda-emulation", False)])
def test_gat_exponentials_run_in_a_head_loop_of_their_own(target, split):
    """On the CPU the weighted walk computes every head's exp in a head loop with no loop
    inside (LLVM vectorises it across heads), then the rows; cuda keeps one shared nest."""
    options = compiler.CompileOptions(target=target)
    stages = compiler.compile_source(example("gat"), options=options, stop_after="scf").stages
    walk = _walk_with_exp(stages["convert-graph-to-loop"])
    heads = [m.start() for m in re.finditer(r'dim "H"', walk)]
    row = walk.index('dim "F"')
    if split:
        assert len(heads) == 2 and walk.index("math.exp") < heads[1] < row
        assert "scratch_base" in walk  # the weights pass to the rows through scratch
    else:
        assert len(heads) == 1 and walk.index("math.exp") < row


def test_sum_ratio_is_one_loop():
    source = "kernel r(a: f32[E], h: f32[V, F]) -> f32[V, F] {\n    out[v] = sum(a[e] * h[u]) / sum(a[e])\n}\n"
    assert loop_ir(source, ()).count("loop.for_in_edges") == 1


# ---------------------------------------------------------------------- unfuse

UNFUSE = ("unfuse",)


@pytest.mark.parametrize("name", slow_except(sorted(EXAMPLE_DIMS), "gcn"))
@given(graph=graphs(), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_unfuse_matches_reference(name, graph, data, seed):
    check(example(name), UNFUSE, name, graph, draw_dims(EXAMPLE_DIMS[name], data), seed)


@pytest.mark.parametrize("name", sorted(EXAMPLE_DIMS))
def test_unfuse_splits_loop_nests(name):
    fused = loop_ir(example(name), ()).count("loop.for_dst")
    unfused = loop_ir(example(name), UNFUSE).count("loop.for_dst")
    assert fused == 1
    if name in ("attention", "sage_max", "sage_mean"):
        assert unfused == 1  # one graph operation: nothing to split
    else:
        assert unfused > 1


@given(
    source=random_kernels(), graph=graphs(max_edges=120), f=st.sampled_from((1, 3, 17)), seed=st.integers(0, 2**32 - 1)
)
@settings(max_examples=10)
@pytest.mark.slow
def test_unfuse_random_kernels(source, graph, f, seed):
    module, _ = build(source, UNFUSE)
    kernel = module.k
    dtype = np.float32 if kernel.signature.dtype == "f32" else np.float64
    inputs = random_inputs(kernel.signature, graph, {"F": f}, dtype, seed)
    assert_matches(kernel(graph, **inputs), reference(source).k(graph, **inputs), graph, dtype)


TRANSPOSES = """
kernel tr(x: f32[V, F], y: f32[V, K], m: f32[V, F, K], W: f32[F, K]) -> f32[V, K, K] {
    out[v] = sum(transpose(outer(x[u], tanh(y[v])) + m[u]) @ W) + dot(transpose(m[v]), transpose(m[v]))
}
"""


@pytest.mark.slow
@pytest.mark.parametrize("extra", [UNFUSE, ("transform-before-gather", "unfuse")])
def test_unfuse_outer_and_transpose(extra):
    """Kernels with transposes and outers, unfused (alone and after transform-before-gather), match the reference."""
    graph = gnnc.Graph.from_coo(np.array([0, 1, 2, 0, 1, 3, 3]), np.array([0, 2, 1, 1, 0, 2, 2]), num_vertices=5)
    for f, k in ((3, 2), (1, 1), (2, 5)):
        check(TRANSPOSES, extra, "tr", graph, {"F": f, "K": k}, 3)


@pytest.mark.parametrize("name", slow_except(["gat", "mlp_aggr"], "mlp_aggr"))
def test_unfuse_after_the_other_passes(name):
    graph = gnnc.Graph.from_coo(np.array([0, 1, 2, 0, 1, 3]), np.array([0, 2, 1, 1, 0, 2]), num_vertices=5)
    source = example(name)
    module, _ = build(source, ("transform-before-gather", "deferred-division", "unfuse"))
    kernel = getattr(module, name)
    inputs = random_inputs(kernel.signature, graph, {"H": 2, "F": 3, "D1": 4, "D2": 5}, np.float32, 3)
    assert_matches(kernel(graph, **inputs), getattr(reference(source), name)(graph, **inputs), graph, np.float32)


# ------------------------------------------------------------------ annotate-fusion

ANNOTATE = ("annotate-fusion",)


def groups(graph_ir: str) -> set[int]:
    return {int(g) for g in re.findall(r"fusion_group = (\d+)", graph_ir)}


def test_annotate_fusion_gat_is_one_group():
    text = build(example("gat"), ANNOTATE)[1]["annotate-fusion"]
    assert groups(text) == {0}
    levels = {int(x) for x in re.findall(r"fusion_level = (\d+)", text)}
    assert levels == {0, 1, 2, 3}  # max, sum of exponentials, weighted sum + alpha
    # the dump parses back
    from xdsl.parser import Parser

    Parser(pipeline.make_context(), text).parse_module().verify()


@pytest.mark.parametrize("name", slow_except(sorted(EXAMPLE_DIMS), "gcn"))
def test_annotate_fusion_groups_count_loop_nests(name):
    for extra in (ANNOTATE, ("unfuse",) + ANNOTATE, ("transform-before-gather",) + ANNOTATE):
        stages = build(example(name), extra)[1]
        assert len(groups(stages["annotate-fusion"])) == stages["convert-graph-to-loop"].count("loop.for_dst")
