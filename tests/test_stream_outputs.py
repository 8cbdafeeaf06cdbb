"""`stream outputs` and `reorder rcm`: rows built apart and streamed past the
caches, destinations in reverse Cuthill-McKee order, and the default that
joins them on graphs whose numbering scatters neighbours."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import reverse_cuthill_mckee
from xdsl.dialects import func, memref
from xdsl.parser import Parser

import gnnc
from gnnc.autotune import heuristic
from gnnc.driver import compiler, pipeline
from gnnc.graph import plans
from gnnc.ir import abi, llvm_ext
from gnnc.runtime import tune
from gnnc.runtime.signature import prepare_call
from tests.helpers import compiled_example as compiled
from tests.helpers import slow_except
from tests.strategies import graphs, random_inputs

EXAMPLES = Path(__file__).parent.parent / "examples"


def loop_ir(name: str, schedule: str):
    source = (EXAMPLES / f"{name}.gnn").read_text()
    text = compiler.compile_source(
        source, f"{name}.gnn", compiler.CompileOptions(schedule=schedule), stop_after="loop"
    ).stages["convert-graph-to-loop"]
    module = Parser(pipeline.make_context(), text).parse_module()
    module.verify()
    return next(op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks)


@pytest.mark.parametrize("name", ["gcn", "gat", "sage_max"])
def test_a_streamed_result_is_built_in_the_workers_row_and_copied_once(name):
    fn = loop_ir(name, "stream outputs")
    record = json.loads(fn.attributes[abi.ABI_ATTR].data)
    assert record["stream"] is True
    n_params = {"gcn": 2, "gat": 3, "sage_max": 1}[name]
    args = fn.body.block.args
    n_fixed = len(abi.GRAPH_ARGUMENTS)
    out = args[n_fixed + n_params]
    acc_rows = args[-1]
    (copy,) = [op for op in fn.walk() if isinstance(op, llvm_ext.StreamCopyOp)]
    assert copy.src is acc_rows and copy.dst is out
    # the output row is never read or written but by the copy
    assert not [op for op in fn.walk() if isinstance(op, memref.LoadOp | memref.StoreOp) and op.memref is out]
    # gat's alpha, an edge result, is written as before
    if name == "gat":
        alpha = args[n_fixed + n_params + 1]
        assert [op for op in fn.walk() if isinstance(op, memref.StoreOp) and op.memref is alpha]


@pytest.mark.parametrize("name", ["gcn", "gat"])
def test_a_streamed_row_of_a_compiled_in_size_is_built_on_the_workers_stack(name):
    sizes = {"gcn": "F 64", "gat": "H 2 F 64"}[name]
    fn = loop_ir(name, f"stream outputs\nspecialize {sizes}")
    acc_rows = fn.body.block.args[-1]
    (copy,) = [op for op in fn.walk() if isinstance(op, llvm_ext.StreamCopyOp)]
    assert isinstance(copy.src.owner, memref.AllocaOp)
    # its length is the row's size: 64 or 2 x 64, once specialize-sizes has made it a constant
    assert copy.src.owner.dynamic_sizes[0] is copy.count
    assert not [op for op in fn.walk() if isinstance(op, memref.LoadOp | memref.StoreOp) and op.memref is acc_rows]
    assert json.loads(fn.attributes[abi.ABI_ATTR].data)["acc_rows"] == []


def test_a_streamed_row_too_large_for_the_stack_is_built_in_acc_rows():
    fn = loop_ir("gcn", "stream outputs\nspecialize F 1024")
    (copy,) = [op for op in fn.walk() if isinstance(op, llvm_ext.StreamCopyOp)]
    assert copy.src is fn.body.block.args[-1]


@pytest.mark.parametrize("cpu", slow_except(["x86-64-v3", "x86-64-v4"], "x86-64-v4"))
def test_a_streamed_row_on_the_stack_goes_from_registers_to_the_streaming_stores(cpu):
    """In acc_rows, LLVM zeroed the row, reloaded the zeros, stored the sums after the
    walk, reloaded them to scale them and again to stream them. On the stack, with every
    access at a constant offset once the row loops are unrolled, SROA keeps it in registers."""
    import re

    source = (EXAMPLES / "gat.gnn").read_text()
    options = compiler.CompileOptions(schedule="stream outputs\nspecialize H 1 F 128\nprefetch 15", cpu=cpu)
    opt = compiler.compile_source(source, "gat.gnn", options, stop_after="asm").stages["llvm-opt"]
    # the OpenMP closure and libgomp's iteration bounds only
    assert all("i64" in alloca for alloca in re.findall(r"= alloca [^\n]*", opt)), opt
    blocks = [b for b in re.split(r"\n(?=[\w.]+:)", opt) if "!nontemporal" in b]
    assert blocks
    for block in blocks:
        assert re.search(r"store <\d+ x float>[^\n]*!nontemporal", block)
        assert " load " not in block, block


@pytest.mark.parametrize("schedule", ["vectorize 128", "vectorize 64", "tile features 64"])
def test_a_streamed_row_split_in_pieces_keeps_its_streaming_stores(schedule):
    """`vectorize 128` at F = 128 once made a slice loop of one trip: LLVM found the row's
    stores at one address in every trip, moved them after the loop and dropped their
    `!nontemporal` (gin ran 0.68x)."""
    import re

    source = (EXAMPLES / "gin.gnn").read_text()
    options = compiler.CompileOptions(schedule=f"{schedule}\nspecialize F 128\nstream outputs", cpu="x86-64-v4")
    stages = compiler.compile_source(source, "gin.gnn", options, stop_after="asm").stages
    assert re.search(r"store <16 x float>[^\n]*!nontemporal", stages["llvm-opt"]), stages["llvm-opt"]
    assert "vmovntps" in stages["emit-asm"]


def test_without_streaming_the_row_accumulates_in_the_output():
    fn = loop_ir("gcn", "")
    assert json.loads(fn.attributes[abi.ABI_ATTR].data)["stream"] is False
    assert not [op for op in fn.walk() if isinstance(op, llvm_ext.StreamCopyOp)]


def test_streamed_rows_are_nontemporal_vector_stores_and_each_worker_fences():
    source = (EXAMPLES / "gcn.gnn").read_text()
    for cpu in ("x86-64-v3", "x86-64-v4"):
        options = compiler.CompileOptions(schedule="stream outputs; specialize F 64", cpu=cpu)
        asm = compiler.compile_source(source, "gcn.gnn", options, stop_after="asm").stages["emit-asm"]
        assert "vmovntps" in asm and "sfence" in asm, cpu
    plain = compiler.compile_source(
        source, "gcn.gnn", compiler.CompileOptions(cpu="x86-64-v3"), stop_after="asm"
    ).stages["emit-asm"]
    assert "vmovntps" not in plain and "sfence" not in plain


def test_the_stream_copy_op_verifies_its_buffers():
    text = """
    func.func @f(%a: memref<?xf32>, %b: memref<?xf32>, %i: index, %n: index) {
      llvm_ext.stream_copy %a[%i] to %b[%i] count %n : memref<?xf32>, memref<?xf32>
      llvm_ext.store_fence
      func.return
    }
    """
    module = Parser(pipeline.make_context(), text).parse_module()
    module.verify()
    assert str(Parser(pipeline.make_context(), str(module)).parse_module()) == str(module)
    bad = text.replace("memref<?xf32>, memref<?xf32>", "memref<?xi64>, memref<?xi64>").replace(
        "%a: memref<?xf32>, %b: memref<?xf32>", "%a: memref<?xi64>, %b: memref<?xi64>"
    )
    with pytest.raises(Exception, match="f32 or f64"):
        Parser(pipeline.make_context(), bad).parse_module().verify()


@pytest.mark.parametrize("name", slow_except(["gcn", "gat", "sage_max", "gin"], "gat"))
@pytest.mark.parametrize(
    "schedule",
    slow_except(
        [
            "stream outputs",
            "reorder rcm\nstream outputs",
            "reorder rcm",
            "stream outputs\ntile features 4\nvectorize 2",
        ],
        "reorder rcm\nstream outputs",
    ),
)
@given(
    graph=graphs(), size=st.sampled_from([1, 3, 16, 17, 64]), shift=st.integers(0, 15), seed=st.integers(0, 2**32 - 1)
)
@settings(max_examples=4, deadline=None)
def test_results_are_those_of_the_kernel_as_compiled_wherever_out_starts(name, schedule, graph, size, shift, seed):
    """Streaming and the order change where rows are written, never a value: the
    same bits as the kernel as compiled, with `out=` starting anywhere (a row's
    head and tail before and after its whole cache lines)."""
    dims = {"gcn": {"F": size}, "gat": {"H": 2, "F": size}, "sage_max": {"F": size}, "gin": {"F": size}}[name]
    results, got = _results_wherever_out_starts(name, None, schedule, graph, dims, shift, seed)
    for key in results:
        assert np.array_equal(got[key], results[key], equal_nan=True), key


def _results_wherever_out_starts(name, plain_schedule, schedule, graph, dims, shift, seed):
    """(results of the kernel compiled with plain_schedule, those with schedule into
    `out=` buffers that start `shift` floats past a cache line), as dicts."""
    plain = getattr(compiled(name, plain_schedule), name)
    kernel = getattr(compiled(name, schedule), name)
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, seed)
    want = plain(graph, **inputs)
    results = want if isinstance(want, dict) else {"out": want}
    out = {}
    for key, value in results.items():
        raw = gnnc.empty(value.size + 16, np.float32)
        out[key] = raw[shift : shift + value.size].reshape(value.shape)
        out[key].fill(np.nan)
    got = kernel(graph, threads=2, out=out if isinstance(want, dict) else out["out"], **inputs)
    return results, got if isinstance(got, dict) else {"out": got}


@pytest.mark.parametrize("name", slow_except(["gcn", "gat", "sage_max", "gin"], "gcn"))
@pytest.mark.parametrize(
    "schedule",
    slow_except(
        ["stream outputs", "reorder rcm\nstream outputs", "stream outputs\ntile features 4\nvectorize 2"],
        "stream outputs\ntile features 4\nvectorize 2",
    ),
)
@given(
    graph=graphs(),
    size=st.sampled_from([1, 3, 16, 17, 64, 600]),
    shift=st.integers(0, 15),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=3, deadline=None)
def test_rows_of_a_compiled_in_size_stream_the_same_values_wherever_out_starts(
    name, schedule, graph, size, shift, seed
):
    """With the sizes compiled in, a streamed row is on the worker's stack (up to 2 KiB; 600
    floats are in acc_rows) and copied by straight-line code: streamed where out's row
    starts on a cache line, ordinary stores where it does not, the part of a line after
    the last whole one with ordinary stores."""
    dims = {"gcn": {"F": size}, "gat": {"H": 2, "F": size}, "sage_max": {"F": size}, "gin": {"F": size}}[name]
    specialize = "specialize " + " ".join(f"{d} {n}" for d, n in dims.items())
    results, got = _results_wherever_out_starts(name, specialize, f"{schedule}\n{specialize}", graph, dims, shift, seed)
    # the sums may round differently: in registers, LLVM reassociates them as the kernel allows
    terms = max(1, int(np.bincount(np.asarray(graph.dst), minlength=1).max(initial=0)))
    for key in results:
        np.testing.assert_allclose(got[key], results[key], rtol=1e-5, atol=1e-6 * terms, err_msg=key)


@pytest.mark.parametrize("other", ["partition src 2", "group neighbors 4"])
def test_streaming_refuses_schedules_that_build_a_row_in_pieces(other):
    source = (EXAMPLES / "gcn.gnn").read_text() + f"\nschedule gcn for cpu {{\n    {other}\n    stream outputs\n}}\n"
    with pytest.raises(gnnc.SourceError) as err:
        compiler.compile_source(source, "gcn.gnn", stop_after="graph")
    message = str(err.value)
    assert f"'stream outputs' cannot be combined with '{other.split()[0]} {other.split()[1]}'" in message
    assert "gcn.gnn:" in message and "^" in message


def test_reorder_takes_locality_or_rcm():
    source = (EXAMPLES / "gcn.gnn").read_text()
    compiler.compile_source(source + "\nschedule gcn for cpu { reorder rcm }\n", stop_after="graph")
    with pytest.raises(gnnc.SourceError, match="expected 'locality' or 'rcm' after 'reorder', found 'bfs'"):
        compiler.compile_source(source + "\nschedule gcn for cpu { reorder bfs }\n", stop_after="graph")
    with pytest.raises(gnnc.SourceError, match="expected 'outputs' after 'stream'"):
        compiler.compile_source(source + "\nschedule gcn for cpu { stream rows }\n", stop_after="graph")
    # two destination orders: one would be dropped without a word
    with pytest.raises(
        gnnc.SourceError,
        match="'sort degree' cannot be combined with 'reorder rcm' "
        r"\(line 8\): both choose the order destinations run in",
    ):
        compiler.compile_source(
            source + "\nschedule gcn for cpu {\n    sort degree\n    reorder rcm\n}\n", stop_after="graph"
        )


# ------------------------------------------------------------------ rcm order


def grid(rows: int, cols: int, scramble: int | None = None) -> gnnc.Graph:
    """A 4-neighbour grid, both directions, ids shuffled by seed `scramble`."""
    ids = np.arange(rows * cols).reshape(rows, cols)
    pairs = [(ids[:, :-1], ids[:, 1:]), (ids[:-1, :], ids[1:, :])]
    src = np.concatenate([a.ravel() for a, b in pairs] + [b.ravel() for a, b in pairs])
    dst = np.concatenate([b.ravel() for a, b in pairs] + [a.ravel() for a, b in pairs])
    if scramble is not None:
        perm = np.random.default_rng(scramble).permutation(rows * cols)
        src, dst = perm[src], perm[dst]
    order = np.lexsort((src, dst))
    return gnnc.Graph.from_coo(src[order], dst[order], num_vertices=rows * cols)


@given(graph=graphs())
@settings(max_examples=30, deadline=None)
def test_rcm_order_is_a_permutation_of_the_destinations(graph):
    order = plans.rcm_order(graph)
    assert order.dtype == np.int64 and not order.flags.writeable
    assert np.array_equal(np.sort(order), np.arange(graph.num_dst))
    assert plans.destination_order(graph, "rcm") is order  # cached per graph


def test_rcm_order_of_a_square_graph_is_scipys():
    g = grid(20, 30, scramble=1)
    a = sp.csr_matrix((np.ones(g.num_edges), g.in_src, g.in_indptr), shape=(g.num_vertices,) * 2)
    assert np.array_equal(plans.rcm_order(g), reverse_cuthill_mckee((a + a.T).tocsr(), symmetric_mode=True))


def test_rcm_order_of_a_bipartite_graph_keeps_neighbouring_destinations_together():
    # destination d reads sources d and d + 1 of a path, its ids shuffled
    n_dst = 500
    perm = np.random.default_rng(2).permutation(n_dst)
    dst = np.repeat(perm, 2)
    src = np.stack([np.arange(n_dst), np.arange(n_dst) + 1], axis=1).ravel()
    g = gnnc.Graph.from_coo(src, dst, shape=(n_dst + 1, n_dst))
    order = plans.rcm_order(g)
    assert np.array_equal(np.sort(order), np.arange(n_dst))
    path_position = np.argsort(perm)[order]  # where each destination sits on the path, in the order
    assert np.all(np.abs(np.diff(path_position)) == 1)


def test_rcm_order_brings_back_the_locality_a_numbering_hides():
    # a 200 x 200 grid: 3/4 of its gathers repeat one (1 - V / E); an RCM level
    # is a diagonal of at most 200 vertices, 800 in-edges
    window = 2048
    scrambled = grid(200, 200, scramble=3)
    in_order = grid(200, 200)
    lost = plans.gather_reuse_share(scrambled, "identity", window)
    found = plans.gather_reuse_share(scrambled, "rcm", window)
    assert lost < 0.1 and found > 0.7
    # a grid numbered row by row has it already
    assert plans.gather_reuse_share(in_order, "identity", window) > 0.7


def test_gather_reuse_share_counts_gathers_of_rows_seen_within_the_window():
    # destination 0 reads 5, 6; destination 1 reads 5, 7; destination 2 reads 6, 5
    g = gnnc.Graph.from_coo(np.array([5, 6, 5, 7, 6, 5]), np.array([0, 0, 1, 1, 2, 2]), num_vertices=8)
    # the walk 5 6 5 7 6 5: the second 5 comes 2 after the first, 6 and the last 5 3 after theirs
    assert plans.gather_reuse_share(g, "identity", 1) == 0.0
    assert plans.gather_reuse_share(g, "identity", 2) == pytest.approx(1 / 6)
    assert plans.gather_reuse_share(g, "identity", 3) == pytest.approx(3 / 6)
    empty = gnnc.Graph.from_coo(np.zeros(0, np.int64), np.zeros(0, np.int64), num_vertices=3)
    assert plans.gather_reuse_share(empty, "rcm", 10) == 0.0


# ------------------------------------------------------------------ the default


def default_of(name: str, graph: gnnc.Graph, dims: dict[str, int]) -> str:
    kernel = getattr(compiled(name, None), name)
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, 0)
    return tune.default_key(kernel, graph, prepare_call(kernel.signature, graph, (), inputs)[2])


@pytest.mark.slow
def test_the_default_reorders_and_streams_where_a_numbering_scatters_wide_rows():
    # 131K vertices, rows of 256 MiB at F = 512: among the last 32K gathers, a
    # gather finds its row 17% of the time in id order, 75% in RCM order
    scrambled, in_order = grid(256, 512, scramble=4), grid(256, 512)
    for name in ("gcn", "sage_max", "gin"):
        picked = default_of(name, scrambled, {"F": 512}).split("; ")
        assert heuristic.REORDER in picked and heuristic.STREAM_OUTPUTS in picked, name
        assert heuristic.EDGES_SORTED not in picked  # the in-edges are walked in the order's layout
    # rows that stay cached, a numbering with locality: no
    assert heuristic.REORDER not in default_of("gcn", scrambled, {"F": 32})
    assert heuristic.REORDER not in default_of("gcn", in_order, {"F": 512})
    # a kernel writing edge rows by id (gat's alpha, at random in RCM order): for rows of 2 KiB and up
    assert heuristic.REORDER in default_of("gat", scrambled, {"H": 1, "F": 512})
    assert heuristic.REORDER in default_of("gat", scrambled, {"H": 4, "F": 128})
    assert heuristic.REORDER not in default_of("gat", scrambled, {"H": 1, "F": 256})


@pytest.mark.slow
def test_the_default_streams_results_past_the_caches_whose_rows_fit_on_the_stack():
    scrambled, in_order = grid(256, 512, scramble=4), grid(256, 512)
    # 131K rows of 2 KiB (F = 512): 256 MiB of results, in id order
    picked = default_of("gcn", in_order, {"F": 512}).split("; ")
    assert heuristic.STREAM_OUTPUTS in picked and heuristic.REORDER not in picked
    assert heuristic.EDGES_SORTED in picked
    # 8 MiB of results (F = 16) stay in the caches between calls; 16 MiB (F = 32) do not
    assert heuristic.STREAM_OUTPUTS not in default_of("gcn", in_order, {"F": 16})
    assert heuristic.STREAM_OUTPUTS in default_of("gcn", in_order, {"F": 32})
    # rows of 4 KiB (F = 1024) would be built in acc_rows, which lost (0.92-0.99x)
    assert heuristic.STREAM_OUTPUTS not in default_of("gcn", in_order, {"F": 1024})
    # gat's rows of 1 KiB: streamed in id order, not in RCM order (alpha is written by edge id)
    picked = default_of("gat", scrambled, {"H": 1, "F": 256}).split("; ")
    assert heuristic.STREAM_OUTPUTS in picked and heuristic.REORDER not in picked
    # without the sizes compiled in (no dims), or with source partitions: no
    assert heuristic.STREAM_OUTPUTS not in (heuristic.default_directives(in_order, 2048, result_rows=(2048,)) or "")
    assert heuristic._streaming_pays(["specialize F 512"], 1 << 17, (2048,))
    assert not heuristic._streaming_pays(["partition src 4", "specialize F 512"], 1 << 17, (2048,))


def test_a_prediction_takes_the_defaults_order_and_streaming_unless_it_chose_its_own():
    scrambled, in_order = grid(256, 512, scramble=4), grid(256, 512)
    kernel = compiled("gcn", None).gcn
    dims = {"F": 512}
    predicted = "prefetch 16; specialize F 512; edges sorted"
    fitted = heuristic.fit_reorder(predicted, kernel, scrambled, dims).split("; ")
    assert fitted == ["prefetch 16", "specialize F 512", heuristic.REORDER, heuristic.STREAM_OUTPUTS]
    for own in ("partition src 4", "sort degree", "group neighbors 32"):
        assert heuristic.fit_reorder(f"{own}; specialize F 512", kernel, scrambled, dims) == f"{own}; specialize F 512"
    assert heuristic.fit_reorder(predicted, kernel, in_order, dims) == predicted
    assert heuristic.fit_reorder("", kernel, scrambled, dims) == ""


def test_the_tuner_times_rcm_order_with_and_without_streaming():
    traits = {"row": 64, "edge_result": False, "vertex_result": True}
    keys = tune.candidate_keys(traits, cores=2, default_key="prefetch 8")
    assert "reorder rcm" in keys and "reorder rcm; stream outputs" in keys
    sized = tune.candidate_keys({**traits, "sizes": "F 64"}, cores=2, default_key="")
    assert "specialize F 64; stream outputs" in sized
    assert tune.family_of("stream outputs") == tune.family_of("reorder rcm") == "order"
    edge_only = tune.candidate_keys({"row": 64, "edge_result": True, "vertex_result": False}, 2, "")
    assert "reorder rcm; stream outputs" not in edge_only
