"""Mini-batch blocks into gnnc.nn's layers: DGL's sampler, PyG's NeighborLoader batch format,
(edge_index, size) pairs; a compiled variant reused across batches; the warm-up.

The oracle is PyG's layer of the same name on the square graph of a block's
`num_src` vertices, whose first `num_dst` rows are the block's destinations
(as PyG trains on a sampled subgraph: `model(batch.x, batch.edge_index)[:batch_size]`).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

torch_geometric = pytest.importorskip("torch_geometric")

import torch_geometric.nn as pyg_nn  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402
from gnnc.nn import precompile  # noqa: E402
from gnnc.nn.sampled import Block  # noqa: E402
from gnnc.torch import ops  # noqa: E402
from tests.nn_oracle import close  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
IN = 12


def _dgl():
    """dgl with its graphbolt stub (benchmarks/baselines.py), or a skip."""
    spec = importlib.util.spec_from_file_location("benchmarks_baselines", REPO / "benchmarks" / "baselines.py")
    assert spec is not None and spec.loader is not None
    baselines = sys.modules.get(spec.name)
    if baselines is None:
        baselines = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(baselines)
    dgl = baselines.optional("dgl")
    if dgl is None:
        pytest.skip(f"dgl: {baselines.library_versions()['dgl']}")
    return dgl


def random_graph(num_nodes: int, num_edges: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, num_nodes, (2, num_edges), generator=g)


def neighbor_loader_batch(edge_index: torch.Tensor, x: torch.Tensor, seeds: list[int], fanouts, seed: int) -> Data:
    """A batch exactly as PyG's NeighborLoader makes one (its sampler needs pyg-lib): the seeds
    first, then each hop's new vertices in order of discovery; edges `[neighbour, vertex]` hop by
    hop, grouped by the vertex they were sampled for; n_id, batch_size, num_sampled_nodes/edges."""
    rng = np.random.default_rng(seed)
    src, dst = edge_index.numpy()
    into: dict[int, list[int]] = {}
    for u, v in zip(src.tolist(), dst.tolist()):
        into.setdefault(v, []).append(u)
    n_id = list(seeds)
    local = {v: i for i, v in enumerate(n_id)}
    rows, cols, nodes, edges = [], [], [len(seeds)], []
    frontier = list(seeds)
    for fanout in fanouts:
        new, count = [], 0
        for v in frontier:
            neighbours = into.get(v, [])
            picked = rng.choice(len(neighbours), size=min(fanout, len(neighbours)), replace=False)
            for i in picked.tolist():
                u = neighbours[i]
                if u not in local:
                    local[u] = len(n_id)
                    n_id.append(u)
                    new.append(u)
                rows.append(local[u])
                cols.append(local[v])
                count += 1
        nodes.append(len(new))
        edges.append(count)
        frontier = new
    ids = torch.tensor(n_id)
    return Data(
        x=x[ids],
        edge_index=torch.tensor([rows, cols], dtype=torch.int64).reshape(2, -1),
        n_id=ids,
        batch_size=len(seeds),
        num_sampled_nodes=nodes,
        num_sampled_edges=edges,
    )


MODELS = {
    "sage": lambda lib: [lib.SAGEConv(IN, 8), lib.SAGEConv(8, 4)],
    "gat": lambda lib: [lib.GATConv(IN, 4, heads=2), lib.GATConv(8, 4, heads=1)],
    "gcn": lambda lib: [lib.GCNConv(IN, 8), lib.GCNConv(8, 4)],
    "gin": lambda lib: [lib.GINConv(torch.nn.Linear(IN, 8)), lib.GINConv(torch.nn.Linear(8, 4))],
}


def _pair(name: str) -> tuple[torch.nn.ModuleList, torch.nn.ModuleList]:
    torch.manual_seed(3)
    pyg = torch.nn.ModuleList(MODELS[name](pyg_nn))
    ours = torch.nn.ModuleList(MODELS[name](gnn))
    ours.load_state_dict(pyg.state_dict())
    return pyg, ours


def _on_blocks(convs, x, graphs) -> torch.Tensor:
    h = x
    for i, (conv, graph) in enumerate(zip(convs, graphs)):
        h = conv(h, graph)
        h = h.relu() if i < len(convs) - 1 else h
    return h


def _on_squares(convs, x, blocks: list[Block]) -> torch.Tensor:
    """PyG's layers on each block's square graph, its destinations' rows kept."""
    h = x
    for i, (conv, b) in enumerate(zip(convs, blocks)):
        h = conv(h, b.edge_index)[: b.num_dst]
        h = h.relu() if i < len(convs) - 1 else h
    return h


def _same_training_step(pyg, ours, x, expected_fn, got_fn) -> None:
    """Outputs, input gradient and every parameter's gradient agree."""
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected, got = expected_fn(pyg, xa), got_fn(ours, xb)
    close(got, expected, "output")
    weight = torch.randn(expected.shape, generator=torch.Generator().manual_seed(5))
    (expected * weight).sum().backward()
    (got * weight).sum().backward()
    close(xb.grad, xa.grad, "gradient of x")
    mine = dict(ours.named_parameters())
    for name, p in pyg.named_parameters():
        close(mine[name].grad, p.grad, f"gradient of {name}")


@pytest.mark.parametrize("model", sorted(MODELS))
def test_dgl_sampler_blocks_give_pygs_results(model):
    dgl = _dgl()
    edge_index = random_graph(60, 400, seed=1)
    graph = dgl.graph((edge_index[0], edge_index[1]), num_nodes=60)
    sampler = dgl.dataloading.NeighborSampler([5, 3])
    torch.manual_seed(0)
    input_nodes, output_nodes, dgl_blocks = sampler.sample_blocks(graph, torch.tensor([0, 7, 11, 30]))
    x = torch.randn(60, IN, generator=torch.Generator().manual_seed(2))[input_nodes]
    blocks = gnn.blocks(dgl_blocks)
    assert [b.size for b in blocks] == [(b.num_src_nodes(), b.num_dst_nodes()) for b in dgl_blocks]
    assert blocks[-1].num_dst == len(output_nodes)
    pyg, ours = _pair(model)
    # the DGL blocks straight into the layers, and the Blocks made of them: the same
    _same_training_step(pyg, ours, x, lambda m, x: _on_squares(m, x, blocks), lambda m, x: _on_blocks(m, x, dgl_blocks))
    assert gnn.blocks(dgl_blocks)[0] is blocks[0]  # made once per DGL block


@pytest.mark.parametrize("model", ["sage", "gat", "gcn"])
@pytest.mark.parametrize("hops", ["given", "found"])
def test_a_neighbor_loader_batch_gives_pygs_results_on_the_seeds(model, hops):
    edge_index = random_graph(80, 600, seed=4)
    x = torch.randn(80, IN, generator=torch.Generator().manual_seed(6))
    batch = neighbor_loader_batch(edge_index, x, [3, 17, 40, 41, 77], (4, 3), seed=0)
    if hops == "found":  # a batch without the per-hop counts: the blocks are found from the seeds
        del batch.num_sampled_nodes, batch.num_sampled_edges
        blocks = gnn.blocks(batch, num_layers=2)
    else:
        blocks = gnn.blocks(batch)
        n, e = batch.num_sampled_nodes, batch.num_sampled_edges
        assert [b.size for b in blocks] == [(sum(n), n[0] + n[1]), (n[0] + n[1], n[0])]
        assert [b.num_edges for b in blocks] == [e[0] + e[1], e[0]]
    pyg, ours = _pair(model)

    def pyg_square(m, x):  # PyG's way: every layer on the whole sampled subgraph, the seeds' rows kept
        h = x
        for i, conv in enumerate(m):
            h = conv(h, batch.edge_index)
            h = h.relu() if i < len(m) - 1 else h
        return h[: batch.batch_size]

    # GCN's normalisation reads its sources' in-degrees, which a later layer's block (as PyG's
    # trim_to_layer) no longer holds: the blocks give the trimmed model's results
    oracle = _on_squares if model == "gcn" else None
    _same_training_step(
        pyg,
        ours,
        batch.x,
        (lambda m, x: oracle(m, x, blocks)) if oracle else pyg_square,
        lambda m, x: _on_blocks(m, x, blocks),
    )


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_pygs_trim_to_layer_runs_on_gnnc_layers_as_on_blocks(model):
    from torch_geometric.utils import trim_to_layer

    edge_index = random_graph(80, 600, seed=8)
    x = torch.randn(80, IN, generator=torch.Generator().manual_seed(9))
    batch = neighbor_loader_batch(edge_index, x, [1, 2, 3, 50], (4, 3), seed=1)
    pyg, ours = _pair(model)

    def trimmed(m, x):
        h, ei = x, batch.edge_index
        for i, conv in enumerate(m):
            h, ei, _ = trim_to_layer(i, batch.num_sampled_nodes, batch.num_sampled_edges, h, ei)
            h = conv(h, ei)
            h = h.relu() if i < len(m) - 1 else h
        return h[: batch.batch_size]

    _same_training_step(pyg, ours, batch.x, trimmed, trimmed)
    blocks = gnn.blocks(batch)
    _same_training_step(pyg, ours, batch.x, trimmed, lambda m, x: _on_blocks(m, x, blocks))


def test_edge_index_size_pairs_and_neighbor_sampler_adjs_are_blocks():
    edge_index = torch.stack([torch.randint(0, 20, (70,)), torch.randint(0, 6, (70,))])
    x = torch.randn(20, IN)
    conv = gnn.SAGEConv(IN, 5)
    expected = conv(x, Block(edge_index, 20, 6))
    assert expected.shape == (6, 5)
    close(conv(x, (edge_index, (20, 6))), expected, "an (edge_index, size) pair")
    close(conv(x, (edge_index, None, (20, 6))), expected, "an (edge_index, e_id, size) adj")
    close(conv((x, x[:6]), edge_index, size=(20, 6)), expected, "PyG's bipartite call")
    [b1, b2] = gnn.blocks([(edge_index, (20, 6)), (edge_index[:, :10], None, torch.Size([6, 2]))])
    assert (b1.size, b2.size, b2.num_edges) == ((20, 6), (6, 2), 10)


def test_blocks_are_refused_clearly_where_they_cannot_apply():
    edge_index = torch.stack([torch.randint(0, 20, (30,)), torch.randint(0, 6, (30,))])
    block = Block(edge_index, 20, 6)
    with pytest.raises(ArgumentError, match="block has 20 sources"):
        gnn.SAGEConv(IN, 4)(torch.randn(19, IN), block)
    with pytest.raises(ArgumentError, match="disagrees with the block"):
        gnn.SAGEConv(IN, 4)(torch.randn(20, IN), block, size=(20, 7))
    with pytest.raises(ArgumentError, match="APPNP propagates K times"):
        gnn.APPNP(K=2, alpha=0.1)(torch.randn(20, IN), block)
    with pytest.raises(ArgumentError, match="first num_dst sources"):
        Block(edge_index, 5, 6)
    with pytest.raises(ArgumentError, match="needs num_layers"):
        gnn.blocks(Data(edge_index=edge_index, batch_size=6, num_nodes=20))
    with pytest.raises(ArgumentError, match="sampled for 1 layers"):
        gnn.blocks([block], num_layers=2)
    with pytest.raises(ArgumentError, match="not a DGL block"):
        gnn.blocks([block, "edges"])
    out_of_range = Block(torch.tensor([[0, 1], [0, 6]]), 20, 6)
    with pytest.raises(Exception, match="out of range"):
        gnn.SAGEConv(IN, 4)(torch.randn(20, IN), out_of_range)


class _Spy:
    """Counts what asks the compiler for code: kernels, gradient kernels, schedule variants."""

    def __init__(self, monkeypatch):
        from gnnc import api
        from gnnc.runtime import compile_hook

        self.calls: list[tuple] = []
        for owner, name in ((api, "compile"), (api, "compile_grad"), (compile_hook, "compile_variant")):
            original = getattr(owner, name)

            def spy(*args, _original=original, _name=name, **kwargs):
                key = (_name, hash(args[0]), args[1:], tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
                self.calls.append(key)
                return _original(*args, **kwargs)

            monkeypatch.setattr(owner, name, spy)


def test_one_compiled_variant_serves_20_batches_of_different_sizes(monkeypatch):
    model = torch.nn.ModuleList([gnn.SAGEConv(IN, 8, aggr="max"), gnn.SAGEConv(8, 3, aggr="max")])
    spy = _Spy(monkeypatch)
    rng = np.random.default_rng(0)
    sizes = set()
    for step in range(20):
        seeds = int(rng.integers(4, 40))
        n1 = seeds + int(rng.integers(10, 60))
        n2 = n1 + int(rng.integers(10, 80))
        e1, e0 = int(rng.integers(seeds, 5 * seeds)), int(rng.integers(n1, 5 * n1))
        blocks = [
            Block(torch.stack([torch.randint(0, n2, (e0,)), torch.randint(0, n1, (e0,))]), n2, n1),
            Block(torch.stack([torch.randint(0, n1, (e1,)), torch.randint(0, seeds, (e1,))]), n1, seeds),
        ]
        sizes.add((n2, n1, seeds, e0, e1))
        x = torch.randn(n2, IN, requires_grad=True)
        _on_blocks(model, x, blocks).sum().backward()
        if step == 0:
            first = len(spy.calls)
    assert len(sizes) == 20
    # whatever the first batch needed (nothing, if this process compiled it before), and nothing after
    assert len(spy.calls) == first, spy.calls[first:]
    # and each thing the first batch compiled, it compiled once (a kernel and its gradient kernels,
    # each with the variant the default schedule picks for these feature sizes)
    assert len(set(spy.calls)) == len(spy.calls)


def test_warm_up_compiles_every_kernel_and_logs(monkeypatch, caplog):
    # every kernel a layer holds (an attention layer holds one per configuration: give it an example)
    model = torch.nn.ModuleList([gnn.SAGEConv(IN, 8), gnn.GraphConv(8, 3, aggr="max")])
    asked: list[tuple[str, str]] = []
    forward, gradient = ops.KernelOps.forward_kernel, ops.KernelOps.gradient
    monkeypatch.setattr(
        ops.KernelOps, "forward_kernel", lambda self, d: asked.append(("fwd", self.name)) or forward(self, d)
    )
    monkeypatch.setattr(
        ops.KernelOps, "gradient", lambda self, d, w=None: asked.append(("grad", self.name)) or gradient(self, d, w)
    )
    caplog.set_level(logging.INFO, logger="gnnc")
    done = gnn.warm_up(model)
    kernels = precompile.kernels_of(model)
    assert done.kernels == len(kernels) == 4 and done.grad and done.dtype == torch.float32
    assert {("fwd", k.name) for k in kernels} | {("grad", k.name) for k in kernels} == set(asked)
    [line] = [r.getMessage() for r in caplog.records if r.name == "gnnc.nn.precompile"]
    assert line.startswith(
        f"warm-up of ModuleList: {len(kernels)} kernels and their gradients (float32, cpu) ready in "
    )
    # a layer warms up its own kernels
    assert model[1].warm_up(grad=False).kernels == len(precompile.kernels_of(model[1]))


def test_warm_up_on_an_example_leaves_gradients_and_randomness_alone():
    conv = gnn.GATConv(IN, 4, heads=2, dropout=0.5)
    block = Block(torch.stack([torch.randint(0, 30, (90,)), torch.randint(0, 9, (90,))]), 30, 9)
    conv.lin.weight.grad = torch.ones_like(conv.lin.weight)
    x = torch.randn(30, IN)
    torch.manual_seed(11)
    state = torch.get_rng_state()
    assert conv.warm_up((x, block), kernels=False).kernels == 0
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(conv.lin.weight.grad, torch.ones_like(conv.lin.weight))
    assert conv.att_src.grad is None


def test_warm_up_refuses_what_gnnc_cannot_run():
    with pytest.raises(ArgumentError, match="float32 or float64"):
        gnn.warm_up(gnn.SAGEConv(4, 4), dtype=torch.float16)
    with pytest.raises(ArgumentError, match="CPU and CUDA"):
        gnn.warm_up(gnn.SAGEConv(4, 4), device="meta")


def test_a_run_of_new_blocks_across_graph_classes_gives_pygs_results():
    """Layers called on a random run of new blocks, as mini-batch training calls them: a block of
    a class decided before takes that decision's bound call (`Kernel._run_as_before`) without
    deciding or checking again, so the run crosses what a class holds (edge counts either side
    of SPECIALIZE_MIN_EDGES, edges grouped by destination or not, a hub, empty blocks, one
    and two threads) in an order that revisits each, against PyG's layer in float64 as oracle,
    forward and the features' gradient (float32 sums over a hub's in-edges drift with its
    degree, PyG's as gnnc's: the tolerance grows with it)."""
    from gnnc.autotune import heuristic

    big = heuristic.SPECIALIZE_MIN_EDGES
    rng = np.random.default_rng(7)
    torch.manual_seed(7)
    layers = {
        "sage_mean": (gnn.SAGEConv(IN, 6, aggr="mean"), pyg_nn.SAGEConv(IN, 6, aggr="mean")),
        "sage_max": (gnn.SAGEConv(IN, 6, aggr="max"), pyg_nn.SAGEConv(IN, 6, aggr="max")),
        "gat": (
            gnn.GATConv(IN, 6, heads=3, add_self_loops=False),
            pyg_nn.GATConv(IN, 6, heads=3, add_self_loops=False),
        ),
        "graph": (gnn.GraphConv(IN, 6), pyg_nn.GraphConv(IN, 6)),
    }
    for ours, theirs in layers.values():
        theirs.load_state_dict(ours.state_dict())
        theirs.double()
    threads = torch.get_num_threads()
    try:
        for step in range(48):
            name = list(layers)[step % len(layers)]
            ours, theirs = layers[name]
            e = int(rng.choice([0, 7, 900, big - 1, big, big + 5]))
            num_src = int(rng.choice([1, 60, 900]))
            num_dst = min(num_src, int(rng.choice([1, 25, 900])))
            src, dst = torch.randint(0, num_src, (e,)), torch.randint(0, num_dst, (e,))
            if rng.random() < 0.5:  # listed destination by destination, as samplers give them
                order = torch.argsort(dst, stable=True)
                src, dst = src[order], dst[order]
            if e and rng.random() < 0.25:  # a hub
                dst[: e // 2] = 0
            torch.set_num_threads(int(rng.choice([1, 2])))
            x = torch.randn(num_src, IN, requires_grad=True)
            x64 = x.detach().double().requires_grad_()
            edge_index = torch.stack([src, dst])
            got = ours((x, x[:num_dst]), edge_index, size=(num_src, num_dst))
            want = theirs((x64, x64[:num_dst]), edge_index, size=(num_src, num_dst))
            gout = torch.randn(want.shape, dtype=torch.float64)
            (got_x,) = torch.autograd.grad(got, x, gout.float())
            (want_x,) = torch.autograd.grad(want, x64, gout)
            what = f"step {step}: {name} on {e} edges {num_src}->{num_dst}"
            rtol = 2e-4 + 2e-8 * (int(torch.bincount(dst).max()) if e else 0)
            close(got, want, what, rtol)
            close(got_x, want_x, what, rtol)
    finally:
        torch.set_num_threads(threads)
