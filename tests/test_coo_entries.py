"""A graph's first call by its kernel's COO entry equals the call on its `gnnc.Graph`.

A mini-batch block reaches the runtime as a `CooGraph` (`gnnc.torch.graphs.block_of`):
its kernels run by their COO entries (`gnnc_K__coo`, compiled into the shared object
from the C helpers), which build the in-CSR and plans in C. Those must give the
results the Python runtime's plans give, bit for bit (a block's result may not depend
on whether its edge_index was seen before), for every example kernel under every CPU
schedule the tests use; where the C plans would order a sum differently (source
partitions, a Hilbert edge order) the runtime converts the edges and runs the checked
way instead. Bad ids get the Graph's error. Through gnnc.torch, a new edge_index each
call runs the forward and the gradient kernels by their entries, with the gradients of
the same call on a Graph.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
import gnnc.torch as gt
from gnnc.errors import GraphError
from gnnc.graph.coo import CooGraph
from gnnc.runtime import module as runtime_module
from gnnc.torch import graphs
from tests.helpers import EXAMPLES, compiled_example, example_or_skip, reference_example
from tests.ir_snapshot import CPU_SCHEDULES
from tests.strategies import random_inputs

DIMS = {"F": 5, "H": 2, "D": 3, "D1": 4, "D2": 3, "K": 3, "N": 4}

#: Each kind of plan the C helpers build at least once, and the two they leave to the runtime.
FAST = [
    None,
    "sort degree\nprefetch 3",
    "group neighbors 3\ntile features 4\nsort degree",
    "reorder rcm\nstream outputs\nvectorize 16",
    "partition src 3",
    "order edges hilbert",
]
#: Kernels of the examples that read relation types: they have no COO entry.
RELATIONAL = {"rgat", "rgcn"}
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.gnn") if p.stem not in RELATIONAL)
CASES = [
    pytest.param(name, schedule, marks=() if schedule in FAST else pytest.mark.slow)
    for name in NAMES
    for schedule in CPU_SCHEDULES
]


def _edges(num_src: int, num_dst: int, num_edges: int, seed: int, hub: int = 0) -> np.ndarray:
    """Random edges with self loops, duplicates and isolated destinations, and `hub` more into 0."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_src, num_edges)
    dst = rng.integers(0, max(1, num_dst - 2), num_edges) if num_dst else np.zeros(0, np.int64)
    if num_edges > 4 and num_dst:
        src[:2], dst[:2] = 1 % num_src, 1 % num_dst  # a self loop (square graphs), twice
    if hub and num_dst:
        src = np.concatenate([src, rng.integers(0, num_src, hub)])
        dst = np.concatenate([dst, np.zeros(hub, np.int64)])
    return np.stack([src, dst]).astype(np.int64)


def _ran_natively(monkeypatch) -> list[tuple[str, bool]]:
    """(kernel, whether its COO entry ran) for every call on a CooGraph from now on."""
    calls: list[tuple[str, bool]] = []
    original = runtime_module.Kernel._run_on_edges

    def spy(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        calls.append((self.name, result is not None))
        return result

    monkeypatch.setattr(runtime_module.Kernel, "_run_on_edges", spy)
    return calls


def _equal(got, want) -> None:
    if isinstance(want, dict):
        assert set(got) == set(want)
        for name in want:
            _equal(got[name], want[name])
        return
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got, want, equal_nan=True), float(np.nanmax(np.abs(got - want)))


@pytest.mark.parametrize("name,schedule", CASES)
def test_a_coo_call_equals_the_graphs(name, schedule, monkeypatch):
    module = example_or_skip(name, schedule)
    calls = _ran_natively(monkeypatch)
    for kernel_name, kernel in module.kernels.items():
        sig, record = kernel.signature, kernel._abi
        assert (kernel._coo is not None) == (record.grid is None and not record.edges_sorted)
        dims = {d: (record.sizes or {}).get(d, DIMS[d]) for d in record.dims}
        bipartite_ok = not sig.values_read_at_src and not any(t.read_at_src for t in record.temps)
        # plain, grouped by destination (a sampler's order: the entry's CSR skips its scatter), a hub, empty
        shapes = [(40, 40, 150, 0, False), (40, 40, 150, 0, True), (40, 40, 90, 60, False), (0, 0, 0, 0, False)]
        if bipartite_ok:
            shapes += [(50, 20, 120, 30, True), (50, 20, 120, 30, False), (30, 30, 1, 0, False)]
        for i, (s, d, e, hub, grouped) in enumerate(shapes):
            inputs_of = {}
            for seed in (i, 100 + i):  # a graph of the block's class first: its layout and decision
                edges = _edges(s, d, e, seed, hub)
                if record.edges_sorted or grouped:  # a kernel with `edges sorted` runs on such ids only
                    edges = edges[:, np.argsort(edges[1], kind="stable")]
                graph = gnnc.Graph.from_edge_index(edges, shape=(s, d))
                inputs = random_inputs(sig, graph, dims, sig.numpy_dtype, seed)
                for p in sig.params:  # on a bipartite graph a vertex input read at u has a row per source
                    if p.domain == "V" and s != d:
                        rows = s if "src" in p.sides or not p.sides else d
                        inputs[p.name] = np.random.default_rng(seed).uniform(-1, 1, (rows, *inputs[p.name].shape[1:]))
                        inputs[p.name] = inputs[p.name].astype(sig.numpy_dtype)
                inputs_of[seed] = (edges, graph, inputs)
            _, warm, inputs = inputs_of[i]
            kernel(warm, *[inputs[p.name] for p in sig.params])
            edges, graph, inputs = inputs_of[100 + i]
            args = [inputs[p.name] for p in sig.params]
            del calls[:]
            coo = CooGraph.from_edge_index(edges, s, d)
            got = kernel(coo, *args)
            want = kernel(graph, *args)
            _equal(got, want)
            native = schedule is None or not any(k in schedule for k in ("partition", "hilbert"))
            expected = native and kernel._coo is not None
            assert calls == [(kernel_name, expected)], (s, d, e, schedule)
            assert coo.converted != expected


@pytest.mark.parametrize("name", ["gcn", "sage_max", "gat", "mlp_aggr"])
def test_a_coo_call_matches_the_reference(name):
    """Beside the Graph's call: the numpy reference, on a block with a hub and isolated vertices."""
    module = compiled_example(name, None)
    kernel = module.kernels[name]
    sig = kernel.signature
    dims = {d: DIMS[d] for d in kernel._abi.dims}
    warm = gnnc.Graph.from_edge_index(_edges(60, 60, 200, 5), num_vertices=60)
    kernel(warm, *[random_inputs(sig, warm, dims, sig.numpy_dtype, 2)[p.name] for p in sig.params])
    edges = _edges(60, 60, 100, 6, hub=200)
    graph = gnnc.Graph.from_edge_index(edges, num_vertices=60)
    inputs = random_inputs(sig, graph, dims, sig.numpy_dtype, 3)
    coo = CooGraph.from_edge_index(edges, 60, 60)
    got = kernel(coo, *[inputs[p.name] for p in sig.params])
    assert not coo.converted
    want = getattr(reference_example(name), name)(graph, **inputs)
    from tests.helpers import assert_matches

    assert_matches(got, want, graph, sig.numpy_dtype)


def test_bad_ids_on_a_first_use_get_the_graphs_error():
    """The entry refuses an id out of range; the runtime then converts, and the Graph says which."""
    kernel = compiled_example("sage_mean", None).kernels["sage_mean"]
    warm = gnnc.Graph.from_edge_index(_edges(30, 30, 80, 1), num_vertices=30)
    x = np.random.default_rng(0).uniform(-1, 1, (30, 5)).astype(np.float32)
    kernel(warm, x)
    for bad in ([[0, 30], [1, 2]], [[0, 1], [-1, 2]]):
        with pytest.raises(GraphError, match="out of range|is negative"):
            kernel(CooGraph.from_edge_index(np.array(bad), 30, 30), x)


@pytest.fixture
def fresh_tensor_graphs():
    yield
    graphs._ENTRIES.clear()


@settings(max_examples=20, deadline=None)
@given(
    num_src=st.integers(1, 40),
    num_dst=st.integers(1, 40),
    num_edges=st.integers(0, 120),
    hub=st.sampled_from([0, 0, 300]),
    seed=st.integers(0, 2**16),
    name=st.sampled_from(["sage_mean", "sage_max", "gcn", "gat"]),
)
def test_new_edge_index_tensors_run_natively_with_a_graphs_gradients(num_src, num_dst, num_edges, hub, seed, name):
    """Through gnnc.torch, each call with a new edge_index runs the forward kernel and its gradient
    kernels by their COO entries (after the first block of a class), with the forward results and
    gradients of the same call on a gnnc.Graph, bit for bit."""
    op = gt.kernel(EXAMPLES / f"{name}.gnn", name)
    square = name in ("gcn", "gat")  # they read vertex values at both ends
    if square:
        num_src = num_dst = max(num_src, num_dst)
    edges = torch.from_numpy(_edges(num_src, num_dst, num_edges, seed, hub))
    generator = torch.Generator().manual_seed(seed)
    inputs = {}
    for p in op.ops.params:
        rows = {"V": [num_src if ("src" in p.sides or square) else num_dst], "E": [edges.shape[1]], None: []}
        shape = [*rows[p.domain], *(DIMS[d] if isinstance(d, str) else d for d in p.shape)]
        inputs[p.name] = torch.rand(shape, generator=generator, dtype=torch.float64).requires_grad_()
    size = (num_src, num_dst)

    def loss(out):
        outs = out if isinstance(out, tuple) else (out,)  # gat returns its attention weights too
        weights = [
            torch.rand(o.shape, generator=torch.Generator().manual_seed(k), dtype=o.dtype) for k, o in enumerate(outs)
        ]
        return outs, sum((o * w).sum() for o, w in zip(outs, weights))

    # the first call of the size class decides; the second, with a new tensor, runs by the entries
    calls: list[bool] = []
    original = runtime_module.Kernel._run_on_edges

    def spy(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        calls.append(result is not None)
        return result

    runtime_module.Kernel._run_on_edges = spy  # not monkeypatch: hypothesis runs the body many times
    try:
        for _ in range(2):
            calls.clear()
            outs, total = loss(op(edges.clone(), **inputs, size=size))
            grads = torch.autograd.grad(total, list(inputs.values()), allow_unused=True)
    finally:
        runtime_module.Kernel._run_on_edges = original
    assert len(calls) >= 2 and all(calls), calls  # the forward kernel and at least one gradient kernel
    want, total = loss(op(gnnc.Graph.from_edge_index(edges, shape=size), **inputs))
    want_grads = torch.autograd.grad(total, list(inputs.values()), allow_unused=True)
    for got, expected in zip(outs, want):
        assert torch.equal(got, expected)
    for got, expected in zip(grads, want_grads):
        assert (got is None) == (expected is None)
        if got is not None:
            assert torch.equal(got, expected)


def test_the_native_path_is_taken_and_a_second_use_converts(monkeypatch):
    op = gt.kernel(EXAMPLES / "sage_mean.gnn", "sage_mean")
    x = torch.rand(50, 4, requires_grad=True)
    for seed in range(2):  # the class's decision, then a block of the class
        op(torch.from_numpy(_edges(50, 20, 60, seed)), x, size=(50, 20)).sum().backward()
    calls = _ran_natively(monkeypatch)
    block = torch.from_numpy(_edges(50, 20, 60, 7))
    op(block, x, size=(50, 20)).sum().backward()
    assert calls == [("sage_mean", True), ("sage_mean__grad_x_src", True)], calls
    first = graphs.block_of(block, (50, 20))
    assert isinstance(first, gnnc.Graph)  # its second use: converted, and kept
    assert graphs.block_of(block, (50, 20)) is first
    block[0, 0] = 49  # an edit in place: a new first use
    assert isinstance(graphs.block_of(block, (50, 20)), CooGraph)


def test_a_large_or_malformed_first_use_is_converted():
    """Past the bounds where the C helpers pay, and for anything block_of does not take, a Graph."""
    large = torch.zeros((2, graphs.BLOCK_MAX_EDGES + 1), dtype=torch.int64)
    assert isinstance(graphs.block_of(large, (10, 10)), gnnc.Graph)
    wide = torch.zeros((2, 5), dtype=torch.int64)
    assert isinstance(graphs.block_of(wide, (graphs.BLOCK_MAX_IDS + 1, 10)), gnnc.Graph)
    assert isinstance(graphs.block_of(wide.to(torch.int32), (10, 10)), gnnc.Graph)
    assert isinstance(graphs.block_of(wide.clone(), (10, 10)), CooGraph)
    with pytest.raises(gnnc.GnncError):
        graphs.block_of(wide.clone(), (-1, 10))
