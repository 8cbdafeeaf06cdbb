"""A call walks one way: one Decision per graph and call shape (autotune/decision.py), made once, kept on the graph."""

from __future__ import annotations

import gc
import logging
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.autotune import autoschedule, decision, heuristic
from gnnc.autotune.cache import TuningCache
from gnnc.graph import plans
from gnnc.ir import abi
from tests.helpers import assert_matches
from tests.strategies import random_inputs

EXAMPLES = Path(__file__).parent.parent / "examples"


def _random_graph(seed: int, v: int = 300, e: int = 3000) -> gnnc.Graph:
    rng = np.random.default_rng(seed)
    return gnnc.Graph.from_coo(rng.integers(0, v, e), rng.integers(0, v, e), num_vertices=v)


@pytest.fixture(autouse=True)
def private_tuning_dir(tmp_path, monkeypatch):
    """No tuning records: `schedule="auto"` predicts or takes the default, whatever ~/.cache holds."""
    monkeypatch.setenv("GNNC_TUNE_DIR", str(tmp_path / "tuning"))
    monkeypatch.setattr(autoschedule, "_CACHE", TuningCache())


@pytest.fixture(scope="module")
def gcn():
    return gnnc.compile(EXAMPLES / "gcn.gnn").gcn


@pytest.fixture(scope="module")
def reference():
    return gnnc.compile(EXAMPLES / "gcn.gnn", target="reference").gcn


def _counting(monkeypatch, module, name: str) -> list:
    calls: list = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


# --------------------------------------------------------------- made once


def test_a_second_identical_call_takes_no_new_decision(monkeypatch):
    gcn = gnnc.compile(EXAMPLES / "gcn.gnn").gcn  # its own kernel: its decisions are this test's
    defaults = _counting(monkeypatch, heuristic, "kernel_default")
    choices = _counting(monkeypatch, autoschedule, "choose")
    graph = _random_graph(0)
    inputs = random_inputs(gcn.signature, graph, {"F": 8}, np.float32, 0)
    gcn(graph, **inputs)
    assert len(defaults) == 1
    gcn(graph, **inputs)
    gcn(graph, **inputs, out=np.empty((300, 8), np.float32))
    assert len(defaults) == 1 and not choices
    # other sizes, other threads, another graph: a decision each
    gcn(graph, **random_inputs(gcn.signature, graph, {"F": 16}, np.float32, 0))
    assert len(defaults) == 2
    gcn(graph, **inputs, threads=3)
    assert len(defaults) == 3
    # another graph of the same class (heuristic.default_class) takes the same decision, looked up
    other = _random_graph(1)
    gcn(other, **random_inputs(gcn.signature, other, {"F": 8}, np.float32, 0))
    assert len(defaults) == 3
    # one of another class, a decision of its own
    large = gnnc.Graph.from_coo(*np.random.default_rng(2).integers(0, 300, (2, 1 << 15)), num_vertices=300)
    gcn(large, **random_inputs(gcn.signature, large, {"F": 8}, np.float32, 0))
    assert len(defaults) == 4
    # schedule="auto" asks the tuner once too
    for _ in range(3):
        gcn(graph, **inputs, schedule="auto", threads=1)
    assert len(choices) == 1
    n_defaults = len(defaults)
    for _ in range(2):
        gcn(graph, **inputs, schedule="prefetch 4")
    assert len(defaults) == n_defaults and len(choices) == 1


def test_decide_returns_the_decision_kept_on_the_graph(gcn):
    graph = _random_graph(2)
    dims = {"F": 8}
    made = decision.decide(gcn, graph, dims)
    assert decision.decide(gcn, graph, dict(dims)) is made
    assert sum(isinstance(v, decision.Decision) for v in graph.plans.values()) == 1
    assert decision.decide(gcn, graph, {"F": 9}) is not made
    assert decision.decide(gcn, graph, dims, threads=2) is not made
    assert decision.decide(gcn, gnnc.Graph(graph), dims) is not made  # the same edges, another graph
    # what it says: the default's schedule for these sizes, its variant, the plans that variant reads
    assert made.origin is decision.Origin.DEFAULT
    assert made.schedule == heuristic.kernel_default(gcn, graph, dims)
    assert made.kernel() is gcn._variants[made.schedule]
    assert made.plans == plans.PlanSpec(threads=made.threads, dtype="f32", deg_in=False, deg_out=False)
    assert made.arguments["num_threads"] == made.threads and list(made.arguments["dims"]) == [8]
    assert dict(made.workspace)["scratch"] >= made.threads
    assert plans.build(graph, made.plans) is plans.build(graph, made.plans)  # built once too


def test_each_request_says_where_its_schedule_came_from(gcn):
    graph = _random_graph(3)
    dims = {"F": 8}
    given = decision.decide(gcn, graph, dims, schedule="prefetch 4")
    assert given.origin is decision.Origin.GIVEN and given.schedule == "prefetch 4"
    assert given.kernel() is gcn._variants["prefetch 4"]
    # a dict is the same request as its text, and runs the same variant
    assert decision.decide(gcn, graph, dims, schedule={"prefetch": 4}).kernel() is given.kernel()
    auto = decision.decide(gcn, graph, dims, threads=1, schedule="auto")
    assert auto.origin in (decision.Origin.PREDICTED, decision.Origin.DEFAULT) and auto.threads == 1
    exact = decision.decide(gcn, graph, dims, threads=2, schedule=decision.Request.AS_COMPILED)
    assert exact.kernel() is gcn and exact.schedule is None and exact.threads == 2
    written = gnnc.compile(EXAMPLES / "gcn.gnn", schedule="prefetch 4").gcn
    kept = decision.decide(written, graph, dims)
    assert kept.origin is decision.Origin.AS_COMPILED and kept.kernel() is written and not written._variants


def test_a_call_the_variant_cannot_run_is_refused_every_time_and_nothing_is_kept(gcn):
    graph = _random_graph(4)
    inputs = random_inputs(gcn.signature, graph, {"F": 16}, np.float32, 0)
    before = dict(graph.plans)
    for _ in range(2):
        with pytest.raises(gnnc.ArgumentError, match="compiled for F = 8"):
            gcn(graph, **inputs, schedule="specialize F 8")
    assert not any(isinstance(v, decision.Decision) for k, v in graph.plans.items() if k not in before)


def test_decisions_do_not_leak_between_graphs_of_equal_shape(gcn, reference):
    # the same V and E; one graph's edge ids are sorted by destination, the other's are not:
    # the default runs `edges sorted` on the first, which the second must never get
    rng = np.random.default_rng(5)
    v, e = 2000, 1 << 15
    src, dst = rng.integers(0, v, e), np.sort(rng.integers(0, v, e))
    sorted_ids = gnnc.Graph.from_coo(src, dst, num_vertices=v)
    shuffled = gnnc.Graph.from_coo(src, rng.permutation(dst), num_vertices=v)
    assert sorted_ids.edges_sorted and not shuffled.edges_sorted
    dims = {"F": 8}
    for graph in (sorted_ids, shuffled, sorted_ids, shuffled):
        inputs = random_inputs(gcn.signature, graph, dims, np.float32, 6)
        assert_matches(gcn(graph, **inputs), reference(graph, **inputs), graph, np.float32)
    first, second = decision.decide(gcn, sorted_ids, dims), decision.decide(gcn, shuffled, dims)
    assert first is not second
    assert "edges sorted" in first.schedule.splitlines() and "edges sorted" not in second.schedule.splitlines()


def test_a_kernel_without_edge_rows_does_not_take_edges_sorted():
    """`edges sorted` replaces edge ids by walk positions; sage_mean reads no edge ids, so its
    default takes no `edges sorted` (it would compile a variant of the same code)."""
    sage = gnnc.compile(EXAMPLES / "sage_mean.gnn").sage_mean
    assert not sage._abi.edge_ids
    rng = np.random.default_rng(6)
    v, e = 2000, 1 << 15
    graph = gnnc.Graph.from_coo(rng.integers(0, v, e), np.sort(rng.integers(0, v, e)), num_vertices=v)
    dims = {"F": 8}
    chosen = decision.decide(sage, graph, dims)
    assert chosen.schedule is not None and "specialize F 8" in chosen.schedule.splitlines()
    assert "edges sorted" not in chosen.schedule.splitlines()
    assert graph.edges_sorted  # and the graph's ids are sorted: gcn, which reads w[e], takes it
    inputs = random_inputs(sage.signature, graph, dims, np.float32, 7)
    want = gnnc.compile(EXAMPLES / "sage_mean.gnn", target="reference").sage_mean(graph, **inputs)
    assert_matches(sage(graph, **inputs), want, graph, np.float32)


def test_a_graph_keeps_no_kernel_alive():
    module = gnnc.compile(EXAMPLES / "gcn.gnn")
    graph = _random_graph(7)
    inputs = random_inputs(module.gcn.signature, graph, {"F": 8}, np.float32, 0)
    module.gcn(graph, **inputs)
    made = [v for v in graph.plans.values() if isinstance(v, decision.Decision)]
    assert made and all(d.kernel() is not None for d in made)
    kernel = weakref.ref(module.gcn)
    del module
    gc.collect()
    assert kernel() is None and all(d.kernel() is None for d in made)


def test_serials_are_never_reused():
    # a decision's key names its kernel by serial: a new kernel never finds another one's
    module = gnnc.compile(EXAMPLES / "gcn.gnn")
    serial = module.gcn._serial
    del module
    gc.collect()
    assert gnnc.compile(EXAMPLES / "gcn.gnn").gcn._serial > serial


# ---------------------------------------------------------------- the walk

#: Functions whose callees are part of the argument check: the signature's and the
#: graph's accessors, the output allocation, the device-array test.
CHECK = {"prepare_call", "_refuse_device_arrays"}
#: Python 3.11 runs a comprehension in a frame of its own; 3.12 inlines it (PEP 709).
COMPREHENSIONS = {"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"}


def walk(call, fold_check: bool = True) -> list[str]:
    """The gnnc module of each Python frame `call()` enters, consecutive repeats collapsed;
    with `fold_check`, the frames the argument check enters count as the check."""
    modules: list[str] = []
    inside = 0

    def profile(frame, event, arg):
        nonlocal inside
        if event == "return" and inside:
            inside -= 1
        if event != "call":
            return
        if inside:
            inside += 1
            return
        code = frame.f_code
        if fold_check and code.co_name in CHECK:
            inside = 1
        name = frame.f_globals.get("__name__", "")
        if name.startswith("gnnc") and code.co_name not in COMPREHENSIONS and (not modules or modules[-1] != name):
            modules.append(name)

    # garbage of earlier tests (a variant's library, whose finalizer is in runtime/native.py)
    # is collected now, not inside the walk
    gc.collect()
    gc.disable()
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(previous)
        gc.enable()
    return modules


#: A warm call that cannot run prepared (a dict schedule, out=, ...): check the arguments,
#: read the decision, fetch the plans, lay out the arguments, allocate the workspace, call
#: the native code; no module is entered twice.
ONE_WAY = [
    "gnnc.runtime.module",  # Kernel.__call__
    "gnnc.runtime.signature",  # prepare_call: the argument check
    "gnnc.autotune.decision",  # decide: read from the graph
    "gnnc.graph.plans",  # build: read from the graph
    "gnnc.runtime.prepared",  # make: the native arguments laid out, then run
    "gnnc.runtime.memory",  # the workspace
    "gnnc.sharedlib",  # the arrays' addresses
    "gnnc.runtime.native",  # Function: the native call
]

#: A warm call whose inputs (by position or name) are arrays the check would pass as they
#: are: the prepared call kept on the graph (runtime/prepared.py) allocates, places and calls.
PREPARED = [
    "gnnc.runtime.module",  # Kernel.__call__: the key of the call's shape
    "gnnc.runtime.prepared",  # the call kept on the graph
    "gnnc.runtime.memory",  # results and workspace
    "gnnc.sharedlib",  # the arrays' addresses
    "gnnc.runtime.native",  # the native call
]
#: ... and with threads=None, what the threads mean now (OMP_NUM_THREADS, the affinity mask).
PREPARED_DEFAULT_THREADS = [PREPARED[0], "gnnc.autotune.decision", *PREPARED[1:]]


@pytest.mark.parametrize("schedule", [None, "auto", "prefetch 4", {"prefetch": 4}])
def test_a_warm_call_walks_one_way(gcn, schedule):
    graph = _random_graph(8)
    inputs = random_inputs(gcn.signature, graph, {"F": 8}, np.float32, 0)
    gcn(graph, **inputs, schedule=schedule)  # the decision is made, the variant compiled, the plans built
    expected = PREPARED_DEFAULT_THREADS
    if isinstance(schedule, dict):
        # a dict is not hashable: the decision's key holds its directive text; no call is kept for it
        expected = list(ONE_WAY)
        expected.insert(expected.index("gnnc.autotune.decision") + 1, "gnnc.ir.schedule")
    assert walk(lambda: gcn(graph, **inputs, schedule=schedule)) == expected
    out = np.empty((graph.num_vertices, 8), np.float32)  # out=: the checked way
    expected = list(ONE_WAY)
    if isinstance(schedule, dict):
        expected.insert(expected.index("gnnc.autotune.decision") + 1, "gnnc.ir.schedule")
    assert walk(lambda: gcn(graph, **inputs, schedule=schedule, out=out)) == expected


def test_a_warm_positional_call_runs_prepared(gcn):
    graph = _random_graph(11)
    inputs = random_inputs(gcn.signature, graph, {"F": 8}, np.float32, 0)
    args = [inputs[p.name] for p in gcn.signature.params]
    want = gcn(graph, *args, threads=2)
    assert walk(lambda: gcn(graph, *args, threads=2)) == PREPARED
    np.testing.assert_array_equal(gcn(graph, *args, threads=2), want)
    # threads=None: the workers OMP_NUM_THREADS and the affinity mask give now
    gcn(graph, *args)
    assert walk(lambda: gcn(graph, *args)) == PREPARED_DEFAULT_THREADS


def test_a_warm_call_of_an_emulated_grid_walks_one_way():
    kernel = gnnc.compile(EXAMPLES / "gcn.gnn", target="cuda-emulation").gcn
    graph = _random_graph(9)
    inputs = random_inputs(kernel.signature, graph, {"F": 8}, np.float32, 0)
    kernel(graph, **inputs)
    assert walk(lambda: kernel(graph, **inputs)) == PREPARED_DEFAULT_THREADS
    out = np.empty((graph.num_vertices, 8), np.float32)
    assert walk(lambda: kernel(graph, **inputs, out=out)) == ONE_WAY


def test_a_warm_call_enters_neither_the_heuristic_nor_the_tuner(gcn):
    graph = _random_graph(10)
    inputs = random_inputs(gcn.signature, graph, {"F": 8}, np.float32, 0)
    for schedule in (None, "auto"):
        gcn(graph, **inputs, schedule=schedule)
        entered = set(walk(lambda schedule=schedule: gcn(graph, **inputs, schedule=schedule), fold_check=False))
        assert not entered & {"gnnc.autotune.heuristic", "gnnc.autotune.autoschedule", "gnnc.autotune.predictor"}
        # what the check itself reads (the signature, the graph's sizes) aside, every module once
        assert entered <= {
            *ONE_WAY,
            "gnnc.ir.signature",
            "gnnc.graph.graph",
            "gnnc.graph.tensors",
        }


# ------------------------------------------------------------------- cuda


def _fake_cuda_module(tmp_path, monkeypatch):
    """gcn's CudaModule on the fake driver of test_cuda_runtime.py, which each module
    (the variants' too) loads its PTX into: no GPU needed, launches recorded."""
    import gnnc.api  # noqa: F401  (installs the compiler a variant is built with)
    from gnnc.driver import compiler
    from gnnc.runtime import cuda as cuda_runtime
    from tests.test_cuda_runtime import FakeDriver

    class Loading(FakeDriver):
        def cuModuleLoadData(self, data):
            self.params.update(FakeDriver(data.decode().rstrip("\0")).params)
            return super().cuModuleLoadData(data)

    fake = Loading("")
    monkeypatch.setattr(cuda_runtime, "driver", lambda: fake)
    result = compiler.compile_source((EXAMPLES / "gcn.gnn").read_text(), options=compiler.CompileOptions(target="cuda"))
    path = tmp_path / "gcn.ptx"
    path.write_text(result.ptx)
    return cuda_runtime.CudaModule(path).gcn, fake


def test_a_cuda_kernel_takes_the_same_decision_once(tmp_path, monkeypatch, caplog):
    from gnnc.runtime import cuda as cuda_runtime

    kernel, fake = _fake_cuda_module(tmp_path, monkeypatch)
    mappings = _counting(monkeypatch, heuristic, "default_cuda_mappings")
    graph = _random_graph(11, v=40, e=60)
    inputs = random_inputs(kernel.signature, graph, {"F": 4}, np.float32, 0)
    caplog.set_level(logging.DEBUG, logger="gnnc.runtime.cuda")
    for _ in range(2):
        assert kernel(graph, **inputs).shape == (40, 4)  # the fake driver runs nothing: only the shape is known
    assert len(mappings) == 1  # narrow rows, few edges: thread_vertex, what was compiled
    made = decision.decide(kernel, graph, {"F": 4})
    assert made.kernel() is kernel and made.origin is decision.Origin.DEFAULT and made.schedule is None
    # a GPU grid reads no destination blocks: one block of every destination
    assert made.plans.blocks is plans.Blocks.WHOLE
    assert made.launches == tuple(abi.grid_blocks(kernel._grid, 40, 60))
    assert [launch["values"][:4] for launch in fake.launches] == [[40, 60, made.threads, 1]] * 2
    messages = [r.getMessage() for r in caplog.records if r.name == "gnnc.runtime.cuda"]
    assert messages == ["gcn: default mapping 'map thread_vertex' (as compiled) for V=40 E=60 {'F': 4}"] * 2
    assert cuda_runtime.CudaKernel._default_variant(kernel, graph, {"F": 4}) is None


def test_a_cuda_kernel_runs_the_mapping_variant_it_decided_on(tmp_path, monkeypatch):
    kernel, fake = _fake_cuda_module(tmp_path, monkeypatch)
    monkeypatch.setattr(heuristic, "default_cuda_mappings", lambda graph, row: ["warp_vertex", "thread_vertex"])
    graph = _random_graph(12, v=40, e=60)
    inputs = random_inputs(kernel.signature, graph, {"F": 4}, np.float32, 0)
    made = decision.decide(kernel, graph, {"F": 4})
    variant = made.kernel()
    assert made.schedule == "map warp_vertex" and variant is kernel._variants["map warp_vertex"]
    assert variant._grid.mapping == "warp_vertex"
    kernel(graph, **inputs)
    # the variant's launches
    assert [launch["function"] for launch in fake.launches] == [
        p for p, n in zip(variant._grid.phases, made.launches) if n
    ]


def test_graphs_of_one_class_share_a_decision_with_their_own_workspace():
    """A new graph of a known `heuristic.default_class` (a mini-batch block) takes the class's
    decision: the same variant and plans, its own workspace where the kernel's buffers are
    sized by the graph (mlp_aggr's per-vertex temporary), its own shape in the reason."""
    mlp = gnnc.compile(EXAMPLES / "mlp_aggr.gnn").mlp_aggr
    reference = gnnc.compile(EXAMPLES / "mlp_aggr.gnn", target="reference").mlp_aggr
    rng = np.random.default_rng(3)
    dims = {d: 8 for p in mlp.signature.params for d in p.shape if isinstance(d, str)}
    first = None
    for v, e in ((200, 2000), (700, 5000), (50, 100)):
        graph = gnnc.Graph.from_coo(rng.integers(0, v, e), rng.integers(0, v, e), num_vertices=v)
        decided = decision.decide(mlp, graph, dims)
        assert f"V={v} E={e}" in decided.reason
        temps = dict(decided.workspace)
        del temps["scratch"]
        assert temps and all(size >= v * 8 for size in temps.values())  # before the kernel writes them
        if first is None:
            first, cls = decided, heuristic.default_class(mlp, graph, dims)
        else:
            assert heuristic.default_class(mlp, graph, dims) == cls
            assert decided.kernel() is first.kernel() and decided.schedule == first.schedule
            assert decided.plans == first.plans and decided.arguments is first.arguments
        inputs = random_inputs(mlp.signature, graph, dims, np.float32, v)
        assert_matches(mlp(graph, **inputs), reference(graph, **inputs), graph, np.float32)


def test_a_class_decision_marks_its_variant_used(monkeypatch):
    """A decision taken from its class is looked up in the module's variant cache as a made
    one is: the variant in use is the most recently used, not the first one evicted."""
    from gnnc.ir.schedule import directives_text
    from gnnc.runtime import variants

    monkeypatch.setattr(variants, "MAX_VARIANTS", 2)
    gcn = gnnc.compile(EXAMPLES / "gcn.gnn").gcn
    rng = np.random.default_rng(4)

    def graph(grouped: bool) -> gnnc.Graph:
        src, dst = rng.integers(0, 300, (2, 1 << 15))
        return gnnc.Graph.from_coo(src, np.sort(dst) if grouped else dst, num_vertices=300)

    dims = {"F": 8}
    first = decision.decide(gcn, graph(True), dims)  # reads w[e] of sorted ids: `edges sorted`
    second = decision.decide(gcn, graph(False), dims)
    assert first.schedule and second.schedule and first.schedule != second.schedule
    again = decision.decide(gcn, graph(True), dims)  # the first's class: taken, and marked used
    assert again.kernel() is first.kernel()
    gcn._variant("prefetch 4")  # a third variant: the least recently used one goes
    assert set(gcn._variants) == {directives_text(first.schedule), "prefetch 4"}


def test_a_new_graph_of_a_decided_class_runs_without_decide(gcn, reference, monkeypatch):
    """A call on a new graph of a class the kernel decided for before (a mini-batch block) takes
    that class's decision through `class_default`, rechecked and described for this graph, the
    same as `decide` makes; no `decide` runs. A graph of another class, or a call with a
    schedule, still decides."""
    from gnnc.runtime import module as runtime_module

    first, second = _random_graph(21), _random_graph(22)
    dims, threads = {"F": 8}, 2
    inputs = [random_inputs(gcn.signature, g, dims, np.float32, 0) for g in (first, second)]
    args = [[i[p.name] for p in gcn.signature.params] for i in inputs]
    gcn(first, *args[0], threads=threads)
    quick = decision.class_default(gcn, second, dims, threads)
    assert quick is not None
    made = decision.decide(gcn, second, dims, threads)
    assert quick.kernel() is made.kernel() and quick.plans == made.plans and quick.schedule == made.schedule
    assert quick.workspace == made.workspace and quick.reason == made.reason
    assert f"V={second.num_vertices} E={second.num_edges}" in quick.reason

    def refused(*a, **k):
        raise AssertionError("decide ran for a graph of a decided class")

    monkeypatch.setattr(runtime_module, "decide_and_hold", refused)
    third = _random_graph(23)
    got = gcn(third, *[inputs[1][p.name] for p in gcn.signature.params], threads=threads)
    assert_matches(got, reference(third, **inputs[1]), third, np.float32)
    # unknown to the class memo: another size of graph class, or a schedule asked for, decide
    assert decision.class_default(gcn, gnnc.Graph.from_coo([], [], num_vertices=0), dims, threads) is None
    with pytest.raises(AssertionError, match="decide ran"):
        gcn(_random_graph(24), *args[1], threads=threads, schedule="prefetch 4")


class _ReadsRecorded:
    """A graph that records which of its attributes a check reads."""

    def __init__(self, graph: gnnc.Graph):
        self._graph, self.read = graph, set()

    def __getattr__(self, name: str):
        self.read.add(name)
        return getattr(self._graph, name)


def test_the_run_check_reads_only_what_the_graph_class_holds():
    """A new graph of a decided class skips `check_runs` (`decision.class_hit`): that is sound
    only while the check reads nothing of a graph but what `graph_class` puts in the key (and
    the sizes its messages name). A check that reads more must go into `graph_class` too."""
    square, bipartite = _random_graph(31), gnnc.Graph.from_coo([0, 5], [1, 2], shape=(6, 3))
    kernels = [
        gnnc.compile("kernel a(x: f32[V, F]) -> f32[V, F] { out[v] = sum(x[u]) }").a,
        gnnc.compile("kernel b(x: f32[V, F]) -> f32[V, F] { out[v] = sum(x[u]) }", schedule="edges sorted").b,
        gnnc.compile("kernel c(x: f32[V, 4]) -> f32[V, 4] { out[v] = sum(x[u]) }").c,
        gnnc.compile((Path(__file__).parents[1] / "examples" / "rgcn.gnn").read_text()).rgcn,
    ]
    key_reads = {"bipartite", "has_relations", "edges_sorted"}
    message_reads = {"num_src", "num_dst"}
    for kernel in kernels:
        for graph in (square, bipartite):
            for dims in ({"F": 8}, {"F": 4}, {"K": 4, "N": 4}, {}):
                recorded = _ReadsRecorded(graph)
                try:
                    decision.check_runs(kernel.name, kernel._abi, recorded, dims)
                except gnnc.ArgumentError:
                    assert recorded.read <= key_reads | message_reads
                else:
                    assert recorded.read <= key_reads, (kernel.name, recorded.read)
    assert decision.graph_class(kernels[0], square, {"F": 8})[1:] == (False, False, square.edges_sorted)
