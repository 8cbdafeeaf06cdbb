"""The runtime's pool of large arrays (`gnnc.runtime.memory`): a block goes back to the pool
only when the last view of its array dies, no two live arrays share memory, the pool keeps
within its limit, and every kernel writes all of a result it is handed from the pool (a
reused block is poisoned with NaN here: a kernel that read a result before writing it, or
left part of it unwritten, would show)."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gnnc
import gnnc.nn
from gnnc.runtime import memory
from tests.helpers import EXAMPLES, example_or_skip
from tests.strategies import random_inputs

MIB = 1 << 20


@pytest.fixture
def fresh_pool():
    """An empty pool with the default limit, restored (and emptied) afterwards."""
    memory.clear_pool()
    old = memory.set_pool_limit(64 * MIB)
    yield
    memory.set_pool_limit(old)
    memory.clear_pool()


@pytest.fixture
def every_array_pooled(monkeypatch, fresh_pool):
    """Every array of a byte or more leased from the pool, reused blocks filled with NaN."""
    monkeypatch.setattr(memory, "POOL_MIN_BYTES", 1)
    old = memory.set_pool_poison(True)
    yield
    memory.set_pool_poison(old)


def test_a_block_returns_when_its_last_view_dies(fresh_pool):
    a = memory.empty((2048, 256), np.float32)
    assert memory.is_aligned(a) and a.flags.c_contiguous and a.flags.writeable
    address = a.ctypes.data
    view, tensor = a[10:20], torch.from_numpy(a)
    del a
    gc.collect()
    assert memory.pool_stats()["blocks"] == 0  # the view and the tensor still hold it
    del view
    assert memory.pool_stats()["blocks"] == 0
    del tensor
    stats = memory.pool_stats()
    assert stats["blocks"] == 1 and stats["held"] >= 2 * MIB
    b = memory.empty((2100, 256), np.float32)  # another size of the same class takes it
    assert b.ctypes.data == address and memory.pool_stats()["blocks"] == 0
    c = memory.empty((2100, 256), np.float32)  # the block is taken: a new one
    assert not np.shares_memory(b, c)


def test_a_block_freed_while_the_pool_is_busy_waits_for_it(fresh_pool):
    a = memory.empty(MIB, np.uint8)
    taken = memory.pool_stats()["taken"]
    with memory._pool.lock:  # as a garbage collection inside the pool's own code would free it
        del a  # must neither wait for the lock (a deadlock) nor touch the blocks under it
        assert memory.pool_stats()["blocks"] == 0
    b = memory.empty(MIB, np.uint8)  # the next call files it, and takes it
    assert memory.pool_stats()["taken"] == taken + 1
    del b
    assert memory.pool_stats()["blocks"] == 1


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 1 << 40))
def test_size_classes_hold_the_size_with_at_most_a_quarter_more(nbytes):
    c = memory.size_class(nbytes)
    assert nbytes <= c <= nbytes + max(nbytes // 4, 1) and memory.size_class(c) == c
    assert memory.size_class(nbytes + 1) >= c


def test_the_pool_keeps_within_its_limit(fresh_pool):
    memory.set_pool_limit(5 * MIB)
    arrays = [memory.empty(MIB // 4 * 5, np.uint8) for _ in range(6)]  # 1.25 MiB (+ 64) each
    del arrays
    stats = memory.pool_stats()
    assert stats["held"] <= 5 * MIB and stats["blocks"] == 3
    big = memory.empty(6 * MIB, np.uint8)  # larger than the limit: not from the pool
    assert memory.pool_stats()["made"] == stats["made"]
    del big
    assert memory.pool_stats()["held"] <= 5 * MIB
    memory.set_pool_limit(2 * MIB)  # lowering the limit drops the oldest blocks
    assert memory.pool_stats()["held"] <= 2 * MIB
    memory.set_pool_limit(0)
    assert memory.pool_stats()["blocks"] == 0
    a = memory.empty((1024, 1024), np.float32)
    del a
    assert memory.pool_stats()["blocks"] == 0
    with pytest.raises(ValueError, match="pool limit"):
        memory.set_pool_limit(-1)


@pytest.mark.parametrize("text", ["abc", "-3", "nan"])
def test_a_bad_pool_size_in_the_environment_is_refused(monkeypatch, text):
    monkeypatch.setenv("GNNC_POOL_MB", text)
    with pytest.raises(ValueError, match="GNNC_POOL_MB"):
        memory._limit_from_environment()
    monkeypatch.setenv("GNNC_POOL_MB", "0.5")
    assert memory._limit_from_environment() == MIB // 2


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(MIB, 3 * MIB), st.integers(0, 7)), max_size=40))
def test_no_two_live_arrays_share_memory(ops):
    live: list[np.ndarray] = []
    for make, nbytes, pick in ops:
        if make or not live:
            a = memory.empty(nbytes, np.uint8)
            assert a.nbytes == nbytes and memory.is_aligned(a)
            assert not any(np.shares_memory(a, b) for b in live)
            a.fill(len(live) % 251)
            live.append(a)
        else:
            live.pop(pick % len(live))
    for i, a in enumerate(live):
        assert not any(np.shares_memory(a, b) for b in live[i + 1 :])


def test_threads_lease_and_free_without_sharing(fresh_pool):
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        held = []
        for step in range(300):
            a = memory.empty(int(rng.integers(MIB, 2 * MIB)) // 8, np.float64)
            a.fill(seed * 1000 + step)
            held.append((a, seed * 1000 + step))
            if len(held) > 3:
                b, value = held.pop(int(rng.integers(0, len(held))))
                if not (b == value).all():
                    errors.append(f"thread {seed}: an array changed under it")
        for b, value in held:
            if not (b == value).all():
                errors.append(f"thread {seed}: an array changed under it")

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert memory.pool_stats()["taken"] > 0


DIMS = {"F": 5, "H": 2, "D": 3, "D1": 4, "D2": 3, "K": 3, "N": 4}
#: Kernels of the examples that read relation types (their graphs need types: covered below).
RELATIONAL = {"rgat", "rgcn"}
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.gnn") if p.stem not in RELATIONAL)
SCHEDULES = [None, "group neighbors 3\ntile features 4", "partition src 3", "reorder rcm\nstream outputs"]


def _edges(n: int, num_edges: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, n, num_edges), rng.integers(0, max(1, n - 3), num_edges)]).astype(np.int64)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", NAMES)
def test_every_example_writes_all_of_a_pooled_result(name, schedule, every_array_pooled):
    module = example_or_skip(name, schedule)
    for kernel in module.kernels.values():
        sig, record = kernel.signature, kernel._abi
        dims = {d: (record.sizes or {}).get(d, DIMS[d]) for d in record.dims}
        runs = []
        for seed in (1, 2, 1, 2):  # each call's results in blocks the one before last freed
            edges = _edges(60, 240, seed)
            if record.edges_sorted:
                edges = edges[:, np.argsort(edges[1], kind="stable")]
            graph = gnnc.Graph.from_edge_index(edges, shape=(60, 60))
            inputs = random_inputs(sig, graph, dims, sig.numpy_dtype, seed)
            out = kernel(graph, *[inputs[p.name] for p in sig.params])
            runs.append({k: np.array(v) for k, v in out.items()} if isinstance(out, dict) else np.array(out))
            del out
        assert memory.pool_stats()["taken"] > 0
        for first, again in ((runs[0], runs[2]), (runs[1], runs[3])):
            for got, want in zip(*(list(r.values()) if isinstance(r, dict) else [r] for r in (again, first))):
                assert not np.isnan(want).any() or np.isnan(got).any(), name
                np.testing.assert_array_equal(got, want, err_msg=f"{name}: a pooled result differs")


LAYERS = {
    "gat": lambda: gnnc.nn.GATConv(8, 4, heads=2),
    "sage_max": lambda: gnnc.nn.SAGEConv(8, 6, aggr="max"),
    "gcn": lambda: gnnc.nn.GCNConv(8, 6),
    "gin": lambda: gnnc.nn.GINConv(torch.nn.Linear(8, 6), train_eps=True),
    "transformer": lambda: gnnc.nn.TransformerConv(8, 3, heads=2),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_gradients_through_the_pool_equal_fresh_ones(layer, every_array_pooled):
    """Forward and backward on mini-batch blocks twice: the second pass's results and
    gradients, in blocks the first freed (poisoned), equal a pass with the pool off."""
    torch.manual_seed(0)
    conv = LAYERS[layer]()
    blocks = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        num_src, num_dst = 70 + seed, 20 + seed
        edge_index = torch.from_numpy(
            np.stack([rng.integers(0, num_src, 300), np.sort(rng.integers(0, num_dst, 300))]).astype(np.int64)
        )
        blocks.append((torch.randn(num_src, 8, generator=torch.Generator().manual_seed(seed)), edge_index, num_dst))

    def run() -> list[list[torch.Tensor]]:
        got = []
        for x, edge_index, num_dst in blocks:
            x = x.clone().requires_grad_()
            conv.zero_grad()
            if layer == "gcn":  # PyG's GCNConv takes square graphs only
                out = conv(x, edge_index)
            elif layer == "transformer":  # its sizes come from the pair
                out = conv((x, x[:num_dst]), edge_index)
            else:
                out = conv((x, x[:num_dst]), edge_index, size=(x.shape[0], num_dst))
            (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
            got.append([out.detach().clone(), x.grad.clone(), *(p.grad.clone() for p in conv.parameters())])
        return got

    pooled = [run(), run()]
    assert memory.pool_stats()["taken"] > 0
    memory.set_pool_limit(0)
    fresh = run()
    for again in pooled:
        for got_block, want_block in zip(again, fresh):
            for got, want in zip(got_block, want_block):
                assert not got.isnan().any()
                torch.testing.assert_close(got, want, rtol=0, atol=0)
