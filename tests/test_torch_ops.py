"""gnnc.torch's custom ops: opcheck, torch.compile, export, jit.trace, pickling, caching, threads, fork."""

from __future__ import annotations

import copy
import io
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch._dynamo.testing")  # CompileCounterWithBackend: `import torch` does not load it

import gnnc  # noqa: E402
import gnnc.torch as gt  # noqa: E402
from gnnc.runtime import module as runtime_module  # noqa: E402
from gnnc.torch import graphs  # noqa: E402
from tests.helpers import slow_except  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
# self loop, duplicates, a vertex without in-edges (3), an isolated vertex (4)
EDGE_INDEX = torch.tensor([[0, 1, 2, 2, 3, 0, 2, 3], [1, 2, 0, 2, 1, 1, 1, 0]])
V = 5
E = EDGE_INDEX.shape[1]
#: relation types for the kernels that read them: the two 0 -> 1 edges share one, 2 has no edges
EDGE_TYPE = torch.tensor([1, 0, 0, 1, 0, 1, 3, 0])
R = 4


def _input(shape, grad=True, shift=0.2):
    return (torch.rand(shape, dtype=torch.float64) + shift).requires_grad_(grad)


#: Inputs of every example kernel (examples/*.gnn), in float64; continuous values, so no ties at a max.
CASES = {
    "attention": lambda: (_input((V, 2, 3)), _input((V, 2, 3))),
    "gat": lambda: (_input((V, 2, 3)), _input((V, 2), shift=-0.5), _input((V, 2), shift=-0.5)),
    "gat_conv": lambda: (_input((V, 2, 3)), _input((V, 2), shift=-0.5), _input((V, 2), shift=-0.5)),
    "gcn": lambda: (_input((V, 3)), _input((E,))),
    "gcn_norm": lambda: (_input((V, 3)),),
    "gin": lambda: (_input((V, 2)), _input(())),
    "mlp_aggr": lambda: (_input((V, 3), shift=-0.6), _input((3, 2), shift=-0.6)),
    "sage_max": lambda: (_input((V, 3)),),
    "sage_mean": lambda: (_input((V, 2)),),
    "rgcn": lambda: (_input((V, 3)), _input((R, 3, 2), shift=-0.5), _input((3, 2), shift=-0.5)),
    "rgat": lambda: (_input((V, 3)), _input((R, 3, 2), shift=-0.5), _input((R, 2)), _input((R, 2), shift=-0.7)),
}


def test_every_example_kernel_has_a_case():
    assert sorted(CASES) == sorted(p.stem for p in EXAMPLES.glob("*.gnn"))


@pytest.mark.parametrize("name", slow_except(sorted(CASES), "gat", "gin", "sage_max"))
def test_opcheck_example_kernels(name):
    """Schema, fake tensors, autograd registration and AOT dispatch of the forward, the
    forward that keeps intermediates, and the backward op of every example kernel."""
    op = gt.kernel(EXAMPLES / f"{name}.gnn", name)
    inputs = CASES[name]()
    relations = (EDGE_TYPE, R) if op.ops.relational else ()
    graph_args = (EDGE_INDEX, V, V, *relations)
    torch.library.opcheck(op.ops.forward, (*graph_args, *inputs, None))
    if op.ops.forward_saving is not None:
        torch.library.opcheck(op.ops.forward_saving, (*graph_args, *inputs, None))
    with torch.no_grad():
        outs = op.ops.forward_saving(*graph_args, *inputs, None) if op.ops.forward_saving else ()
    outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
    saved = [t.detach() for t in outs[len(op.results) :]]
    detached = [t.detach() for t in inputs]
    results = op(EDGE_INDEX, *detached, num_vertices=V, **({"edge_type": EDGE_TYPE} if relations else {}))
    results = (results,) if isinstance(results, torch.Tensor) else tuple(results)
    gouts = [torch.rand_like(r) for r in results]
    for wanted in ([True] * len(inputs), [i == 0 for i in range(len(inputs))]):
        for kept in ([], saved) if saved else ([],):
            torch.library.opcheck(op.ops.backward, (*graph_args, *detached, *gouts, kept, wanted, None))


def test_opcheck_non_contiguous_inputs():
    """A transposed weight (as `lin.weight.t()`): the ops return contiguous tensors, and the fake ones say so."""
    op = gt.kernel(EXAMPLES / "mlp_aggr.gnn", "mlp_aggr")
    x, w = CASES["mlp_aggr"]()
    w_t = w.detach().t().contiguous().t().requires_grad_()
    assert not w_t.is_contiguous()
    torch.library.opcheck(op.ops.forward, (EDGE_INDEX, V, V, x, w_t, None))
    gout = torch.rand(V, 2, dtype=torch.float64)
    torch.library.opcheck(op.ops.backward, (EDGE_INDEX, V, V, x.detach(), w_t.detach(), gout, [], [True, True], None))


# --------------------------------------------------------------- a 2-layer model

GIN = gt.kernel(EXAMPLES / "gin.gnn", "gin")
GAT = gt.kernel(EXAMPLES / "gat_conv.gnn", "gat_conv")


class TwoLayers(torch.nn.Module):
    """GIN (a trainable [1]-shaped eps, as PyG's train_eps) then 2-head GAT, both gnnc kernels."""

    def __init__(self, features=4, hidden=8, heads=2, out=3):
        super().__init__()
        self.eps = torch.nn.Parameter(torch.tensor([0.1]))
        self.lin1 = torch.nn.Linear(features, hidden)
        self.lin2 = torch.nn.Linear(hidden, heads * out)
        self.att_src = torch.nn.Parameter(torch.rand(heads, out) - 0.5)
        self.att_dst = torch.nn.Parameter(torch.rand(heads, out) - 0.5)
        self.heads, self.out = heads, out
        self.gin, self.gat = GIN, GAT

    def forward(self, x, edge_index):
        h = torch.relu(self.lin1(self.gin(edge_index, x, self.eps)))
        h = self.lin2(h).view(-1, self.heads, self.out)
        el, er = (h * self.att_src).sum(-1), (h * self.att_dst).sum(-1)
        return self.gat(edge_index, h, el=el, er=er).mean(1)


def _model_and_input(seed=0):
    torch.manual_seed(seed)
    return TwoLayers(), torch.rand(V, 4)


def _forward_and_grads(model, x, edge_index, run=None):
    """The output and the parameters' gradients of `run` (the model, or it compiled)."""
    model.zero_grad()
    out = (run if run is not None else model)(x, edge_index)
    (out * torch.arange(out.numel()).view_as(out)).sum().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _assert_same(got, want):
    out, grads = got
    torch.testing.assert_close(out, want[0], rtol=1e-5, atol=1e-6)
    assert grads.keys() == want[1].keys()
    for name in grads:
        torch.testing.assert_close(grads[name], want[1][name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("backend", slow_except(["aot_eager", "inductor"], "aot_eager"))
def test_compile_fullgraph_two_layers_matches_eager(backend):
    model, x = _model_and_input()
    eager = _forward_and_grads(model, x, EDGE_INDEX)
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    compiled = torch.compile(model, fullgraph=True, backend=counter)
    _assert_same(_forward_and_grads(model, x, EDGE_INDEX, compiled), eager)
    assert counter.frame_count == 1  # one graph, no break
    assert any("gnnc" in str(n.target) for g in counter.graphs for n in g.graph.nodes)
    # a second graph of the same sizes reuses the compiled code and converts its own edge_index
    other = EDGE_INDEX.flip(0).contiguous()
    _assert_same(_forward_and_grads(model, x, other, compiled), _forward_and_grads(model, x, other))
    assert counter.frame_count == 1


def test_export_captures_the_ops():
    model, x = _model_and_input()
    exported = torch.export.export(model, (x, EDGE_INDEX))
    targets = [str(n.target) for n in exported.graph.nodes]
    assert any(t.startswith(f"gnnc.{GIN.ops.base}") for t in targets), targets
    assert any(t.startswith(f"gnnc.{GAT.ops.base}") for t in targets), targets
    x2, edge_index2 = torch.rand(V, 4), torch.randint(0, V, (2, E))
    torch.testing.assert_close(exported.module()(x2, edge_index2), model(x2, edge_index2))


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_jit_trace_records_the_op_not_a_constant():
    model, x = _model_and_input()
    traced = torch.jit.trace(model, (x, EDGE_INDEX))
    kinds = [n.kind() for n in traced.graph.nodes()]
    assert f"gnnc::{GIN.ops.base}" in kinds and f"gnnc::{GAT.ops.base}" in kinds
    x2, edge_index2 = torch.rand(V, 4), torch.randint(0, V, (2, E))
    want = model(x2, edge_index2)
    assert not torch.allclose(want, model(x, EDGE_INDEX))
    torch.testing.assert_close(traced(x2, edge_index2), want)


def test_double_backward_is_a_clear_error():
    x = _input((V, 3))
    out = gt.kernel(EXAMPLES / "gcn_norm.gnn", "gcn_norm")(EDGE_INDEX, x, num_vertices=V)
    (gx,) = torch.autograd.grad((out * out).sum(), x, create_graph=True)
    with pytest.raises(gnnc.CompileError, match="double backward"):
        gx.sum().backward()


# --------------------------------------------------------------------- calling


def test_inputs_by_keyword_or_position_and_scalars():
    x = torch.rand(V, 2)
    want = GIN(EDGE_INDEX, x, torch.tensor(0.5), num_vertices=V)
    for eps in (0.5, torch.tensor(0.5), torch.tensor([0.5])):
        torch.testing.assert_close(GIN(EDGE_INDEX, x, eps, num_vertices=V), want)
        torch.testing.assert_close(GIN(EDGE_INDEX, x, eps=eps, num_vertices=V), want)
        torch.testing.assert_close(GIN(EDGE_INDEX, eps=eps, x=x, num_vertices=V), want)
    # V from x's rows: vertex 4 has no edge, so the largest id + 1 would be 4
    torch.testing.assert_close(GIN(EDGE_INDEX, x, 0.5), want)
    with pytest.raises(gnnc.ArgumentError, match="both by position and by name"):
        GIN(EDGE_INDEX, x, x=x)
    with pytest.raises(gnnc.ArgumentError, match="unknown input 'y'"):
        GIN(EDGE_INDEX, x, 0.5, y=x)
    with pytest.raises(gnnc.ArgumentError, match="missing eps"):
        GIN(EDGE_INDEX, x=x)
    with pytest.raises(gnnc.ArgumentError, match="is a scalar"):
        GIN(EDGE_INDEX, x, torch.tensor([0.5, 0.5]))
    with pytest.raises(gnnc.ArgumentError, match="is a scalar"):
        GIN(EDGE_INDEX, x, True)
    # a [1]-shaped eps gets a [1]-shaped gradient
    eps = torch.tensor([0.5], requires_grad=True)
    GIN(EDGE_INDEX, x, eps).sum().backward()
    assert eps.grad.shape == (1,)


def test_several_results_are_a_named_tuple():
    op = gt.kernel(EXAMPLES / "gat.gnn", "gat")
    h, el, er = (t.detach().float() for t in CASES["gat"]())
    result = op(EDGE_INDEX, h, el, er, num_vertices=V)
    out, alpha = result
    assert result.out is out and result.alpha is alpha and result._fields == ("out", "alpha")
    assert out.shape == (V, 2, 3) and alpha.shape == (E, 2)


def test_dtype_device_and_graph_errors():
    x = torch.rand(V, 2)
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(gnnc.ArgumentError, match="float32 or float64 tensors.*half precision"):
            GIN(EDGE_INDEX, x.to(dtype), 0.5)
    with pytest.raises(gnnc.ArgumentError, match="float32 or float64 tensors"):
        GIN(EDGE_INDEX, x.long(), 0.5)

    class OnCuda(torch.Tensor):  # a tensor that says it is on a GPU, without one
        @staticmethod
        def __new__(cls, shape):
            return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=torch.float32, device="cuda")

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise AssertionError(f"{func} ran on a tensor gnnc.torch should have refused")

    with pytest.raises(gnnc.ArgumentError, match=r"several devices \(cpu, cuda.*\)"):
        GIN(EDGE_INDEX, OnCuda((V, 2)), 0.5)
    with pytest.raises(gnnc.ArgumentError, match="sparse adjacency"):
        GIN(torch.sparse_coo_tensor(EDGE_INDEX, torch.ones(E), (V, V), check_invariants=True), x, 0.5)
    transposed = EDGE_INDEX.t().contiguous()
    with pytest.raises(gnnc.GnncError, match=r"must have shape \(2, E\)"):
        GIN.op(transposed, V, V, x, torch.tensor(0.5), None)
    with pytest.raises(gnnc.ArgumentError, match=r"must have shape \(2, E\)"):  # the fake implementation
        GIN.op(transposed.to("meta"), V, V, x.to("meta"), torch.tensor(0.5, device="meta"), None)
    with pytest.raises(gnnc.ArgumentError, match="threads must be"):
        GIN(EDGE_INDEX, x, 0.5, threads=0)
    with pytest.raises(gnnc.ArgumentError, match="unknown option"):
        gt.kernel(EXAMPLES / "gin.gnn", "gin", speed=11)
    with pytest.raises(gnnc.ArgumentError, match="the tensors' device picks it"):
        gt.kernel(EXAMPLES / "gin.gnn", "gin", target="cuda")


def test_a_graph_travels_as_its_edge_index():
    graph = gnnc.Graph(EDGE_INDEX.numpy(), num_vertices=V)
    x = torch.rand(V, 2)
    torch.testing.assert_close(GIN(graph, x, 0.5), GIN(EDGE_INDEX, x, 0.5))
    edge_index = graphs.edge_index_of(graph)
    assert graphs.edge_index_of(graph) is edge_index
    assert torch.equal(edge_index, EDGE_INDEX)
    assert graphs.graph_of(edge_index, (V, V)) is graph  # the op uses the Graph itself
    with pytest.raises(gnnc.ArgumentError, match="not size"):
        GIN(graph, x, 0.5, size=(V, 3))
    # a Graph cannot be a compiled graph's input: a graph break, or under fullgraph an error saying so
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(lambda x: GIN(graph, x, 0.5), backend="eager")(x), GIN(graph, x, 0.5))
    with pytest.raises(torch._dynamo.exc.Unsupported, match="pass edge_index to torch.compile"):
        torch.compile(lambda x: GIN(graph, x, 0.5), backend="eager", fullgraph=True)(x)


def test_ops_are_shared_and_named_by_source_name_and_options():
    again = gt.kernel((EXAMPLES / "gin.gnn").read_text(), "gin")
    assert again.ops is GIN.ops and again.op is GIN.op
    other = gt.kernel(EXAMPLES / "gin.gnn", "gin", opt_level=2)
    assert other.ops.base != GIN.ops.base and other.ops.base.startswith("gin_")


# ------------------------------------------------------------- PyG as the oracle


def _symmetric_edge_index():
    # gnnc's gcn_norm scales by deg_out(u) deg_in(v), PyG's by the in-degrees of both: equal when symmetric
    edges = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (4, 4)]
    both = edges + [(v, u) for u, v in edges if u != v]
    return torch.tensor(both).t().contiguous()


def test_gcn_norm_and_gin_against_pyg():
    pyg = pytest.importorskip("torch_geometric.nn")
    edge_index = _symmetric_edge_index()
    torch.manual_seed(0)
    x = torch.rand(V, 4, requires_grad=True)
    conv = pyg.GCNConv(4, 3, add_self_loops=False, bias=False)
    lin = torch.nn.Linear(4, 3, bias=False)
    lin.weight.data.copy_(conv.lin.weight.data)
    gcn = gt.kernel(EXAMPLES / "gcn_norm.gnn", "gcn_norm")
    gout = torch.rand(V, 3)
    want = conv(x, edge_index)
    (want_x,) = torch.autograd.grad(want, x, gout)
    got = gcn(edge_index, lin(x))
    (got_x,) = torch.autograd.grad(got, x, gout)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_x, want_x)

    gin = pyg.GINConv(torch.nn.Identity(), eps=0.3, train_eps=True)
    eps = torch.tensor([0.3], requires_grad=True)
    gout = torch.rand(V, 4)
    want = gin(x, edge_index)
    want_grads = torch.autograd.grad(want, (x, gin.eps), gout)
    got = GIN(edge_index, x, eps)
    got_grads = torch.autograd.grad(got, (x, eps), gout)
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)


# --------------------------------------------------------------- persistence


class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
        self.conv = gt.kernel(EXAMPLES / "sage_max.gnn", "sage_max")

    def forward(self, x, edge_index):
        return self.conv(edge_index, self.lin(x))


def test_module_pickles_deep_copies_and_saves_after_a_forward():
    torch.manual_seed(0)
    model, x = Holder(), torch.rand(V, 4)
    want = model(x, EDGE_INDEX)
    want.sum().backward()  # the kernels, their gradient and the graph are loaded and cached
    assert "ctypes" not in str(model.conv.__reduce__())
    copies = [pickle.loads(pickle.dumps(model)), copy.deepcopy(model)]
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    copies.append(torch.load(buffer, weights_only=False))
    for other in copies:
        assert other.conv.ops is model.conv.ops
        torch.testing.assert_close(other(x, EDGE_INDEX), want.detach())


def test_a_pickled_kernel_restores_from_source_in_a_fresh_process(tmp_path):
    path = tmp_path / "kernel.pt"
    torch.save(gt.kernel(EXAMPLES / "gcn_norm.gnn", "gcn_norm"), path)
    code = textwrap.dedent(
        f"""
        import torch
        op = torch.load({str(path)!r}, weights_only=False)
        out = op(torch.tensor([[0, 1], [1, 2]]), torch.ones(3, 2))
        print(op.ops.base, out.sum().item())
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    base, total = run.stdout.split()
    assert base == gt.kernel(EXAMPLES / "gcn_norm.gnn", "gcn_norm").ops.base and float(total) == 4.0


# ------------------------------------------------------------------ graph cache


def test_graph_cache_notices_in_place_edits_and_reused_ids():
    op = gt.kernel(EXAMPLES / "sage_mean.gnn", "sage_mean")
    x = torch.rand(V, 2)
    edge_index = EDGE_INDEX.clone()
    before = op(edge_index, x)
    graph = gt.as_graph(edge_index, num_vertices=V)
    assert gt.as_graph(edge_index, num_vertices=V) is graph  # converted once
    edge_index[1, 0] = 4  # in place: the edge 0 -> 1 becomes 0 -> 4
    after = op(edge_index, x)
    assert gt.as_graph(edge_index, num_vertices=V) is not graph
    torch.testing.assert_close(after, op(edge_index.clone(), x))
    assert not torch.allclose(after, before)
    torch.testing.assert_close(after[4], x[0])
    # a dead tensor's entry goes with it; a new tensor at the same id is converted afresh
    key = id(edge_index)
    del edge_index
    assert key not in graphs._ENTRIES
    for _ in range(1000):
        fresh = torch.randint(0, V, (2, E))
        if id(fresh) == key:
            break
    torch.testing.assert_close(op(fresh, x), op(fresh.clone(), x))


# ---------------------------------------------------------------------- threads


def test_threads_follow_torch_unless_given(monkeypatch):
    seen = []
    call = runtime_module.Kernel.__call__

    def spy(kernel, graph, *args, threads=None, **kwargs):
        seen.append(threads)  # the threads the call asks the runtime for
        return call(kernel, graph, *args, threads=threads, **kwargs)

    monkeypatch.setattr(runtime_module.Kernel, "__call__", spy)
    x = torch.rand(V, 2)
    before = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            seen.clear()
            GIN(EDGE_INDEX, x, 0.5)
            assert seen == [n]
        seen.clear()
        GIN(EDGE_INDEX, x, 0.5, threads=2)
        assert seen == [2]
    finally:
        torch.set_num_threads(before)


FORKED_WORKERS = """
import torch
import gnnc.torch as gt

op = gt.kernel("examples/gcn_norm.gnn", "gcn_norm")
edge_index = torch.randint(0, 200, (2, 4000))
x = torch.rand(200, 16)
want = op(edge_index, x, threads=2)  # the parent starts libgomp's thread pool


class Blocks(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        # threads=2 asks for the pool a forked child does not have (it runs on one thread)
        return op(edge_index, x * (i + 1), threads=2)


loader = torch.utils.data.DataLoader(Blocks(), batch_size=None, num_workers=2, multiprocessing_context="fork")
for i, got in enumerate(loader):
    torch.testing.assert_close(got, want * (i + 1))
print("ok")
"""


def test_kernels_run_in_forked_dataloader_workers():
    # in a subprocess (its own process group, workers included), so that a hang
    # fails the test at the timeout instead of blocking the run
    proc = subprocess.Popen(
        [sys.executable, "-c", FORKED_WORKERS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("a DataLoader worker forked after a parallel kernel hung")
    assert proc.returncode == 0 and out.strip() == "ok", err


def test_forward_keeps_intermediates_only_when_a_gradient_is_needed(monkeypatch):
    op = gt.kernel(EXAMPLES / "sage_max.gnn", "sage_max")
    calls = []
    # eager CPU calls run the implementations without the dispatcher (ops.direct); the
    # autograd Function's forward through `_forward_on` / `_saving_on`, as the impls do
    for name in ("_forward_on", "_saving_on"):
        original = getattr(op.ops, name)
        monkeypatch.setattr(op.ops, name, lambda *a, _o=original, _n=name: calls.append(_n) or _o(*a))
    x = torch.rand(V, 3)
    op(EDGE_INDEX, x)
    op(EDGE_INDEX, x.requires_grad_()).sum().backward()
    with torch.no_grad():
        op(EDGE_INDEX, x)
    assert calls == ["_forward_on", "_saving_on", "_forward_on"]
    # each destination with in-edges (0, 1 and 2) passes its gradient to one winning source per feature
    torch.testing.assert_close(x.grad.sum(0), torch.full((3,), 3.0))


def test_eager_calls_skip_the_dispatcher_only_where_nothing_would_see_it():
    """An eager CPU call runs the op's implementation directly (ops.direct); under a profiler or
    a dispatch mode it goes through the dispatcher, so both see the `gnnc::` ops, forward and backward."""
    from torch.profiler import ProfilerActivity, profile
    from torch.utils._python_dispatch import TorchDispatchMode

    op = gt.kernel(EXAMPLES / "sage_mean.gnn", "sage_mean")
    x = _input((V, 2))
    expected = op(EDGE_INDEX, x).detach()

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with Seen() as seen:
        out = op(EDGE_INDEX, x)
        out.sum().backward()
    gnnc_ops = [o for o in seen.ops if o.startswith("gnnc.")]
    assert len(gnnc_ops) == 2 and gnnc_ops[1].endswith("_backward.default"), seen.ops
    torch.testing.assert_close(out.detach(), expected)

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        op(EDGE_INDEX, x).sum().backward()
    names = [e.name for e in prof.events()]
    assert any(n.startswith("gnnc::") and not n.endswith("_backward") for n in names), names
    assert any(n.startswith("gnnc::") and n.endswith("_backward") for n in names), names


def test_eager_backward_matches_the_dispatchers_for_each_wanted_set():
    """An eager call's backward runs the gradient kernels on its forward's Graph, in its element
    type, for the wanted inputs only (`KernelOps._autograd_backward`); the dispatcher's backward op
    (under a dispatch mode) gives the same gradients, float32 and float64."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Through(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    op = gt.kernel("kernel wsum(x: f32[V, F], w: f32[E]) -> f32[V, F] { out[v] = sum(w[e] * x[u]) }", "wsum")
    for dtype in (torch.float32, torch.float64):
        for wants in ((True, False), (False, True), (True, True)):
            got = []
            for mode in (None, Through):
                x = torch.rand(V, 3, dtype=dtype, generator=torch.Generator().manual_seed(1))
                w = torch.rand(E, dtype=dtype, generator=torch.Generator().manual_seed(2))
                x.requires_grad_(wants[0])
                w.requires_grad_(wants[1])
                gout = torch.rand(V, 3, dtype=dtype, generator=torch.Generator().manual_seed(3))
                if mode is None:
                    op(EDGE_INDEX, x, w).backward(gout)
                else:
                    with mode():
                        op(EDGE_INDEX, x, w).backward(gout)
                got.append((x.grad, w.grad))
            for (eager, dispatched), wanted in zip(zip(*got), wants):
                assert (eager is None) == (not wanted) and (dispatched is None) == (not wanted)
                if wanted:
                    assert eager.dtype == dtype
                    torch.testing.assert_close(eager, dispatched)


def test_inputs_of_two_float_types_are_refused():
    op = gt.kernel("kernel wsum(x: f32[V, F], w: f32[E]) -> f32[V, F] { out[v] = sum(w[e] * x[u]) }", "wsum")
    with pytest.raises(gnnc.ArgumentError, match="all be float32 or all float64"):
        op(EDGE_INDEX, torch.rand(V, 3), torch.rand(E, dtype=torch.float64))


def test_an_input_the_gradient_does_not_read_is_not_kept_for_it(monkeypatch):
    """`out[v] = sum(w[e] * x[u])`: x's gradient reads w and the incoming gradient, not x; a
    training step keeps a one-element stand-in of x's shape (GCNConv's projected features, a
    [V, F] tensor at every layer), w's gradient keeps x itself. Both match the dense sum.
    A small input is kept as it is (a stand-in would cost its gradient call the fast way)."""
    from gnnc.torch import ops

    op = gt.kernel("kernel wsum(x: f32[V, F], w: f32[E]) -> f32[V, F] { out[v] = sum(w[e] * x[u]) }", "wsum")
    x = torch.rand(V, 3, requires_grad=True)
    assert op(EDGE_INDEX, x, torch.rand(E)).grad_fn.saved_tensors[1] is x
    monkeypatch.setattr(ops, "ABSENT_MIN_BYTES", 1)
    src, dst = EDGE_INDEX
    for w_grad in (False, True):
        x, w = torch.rand(V, 3, requires_grad=True), torch.rand(E, requires_grad=w_grad)
        out = op(EDGE_INDEX, x, w)
        kept_x = out.grad_fn.saved_tensors[1]
        assert kept_x.shape == x.shape and (kept_x.stride() == (0, 0)) != w_grad
        gout = torch.rand(V, 3)
        out.backward(gout)
        x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_(w_grad)
        torch.zeros(V, 3).index_add(0, dst, w2[:, None] * x2[src]).backward(gout)
        torch.testing.assert_close(x.grad, x2.grad)
        if w_grad:
            torch.testing.assert_close(w.grad, w2.grad)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_compiled_step_keeps_no_input_the_gradient_does_not_read(monkeypatch, backend):
    """The same under `torch.compile(fullgraph=True)`: the traced backward gets the stand-in too,
    so the partitioner saves no x for it (a compiled GraphSAGE-mean kept both layers' projected
    features: 79 MiB more than eager on mdual); with w's gradient wanted, x is kept."""
    from gnnc.torch import ops

    monkeypatch.setattr(ops, "ABSENT_MIN_BYTES", 1)
    # the AOT cache keys on the traced graph, not on the op's autograd: a cached joint graph would hide it
    monkeypatch.setattr(torch._functorch.config, "enable_autograd_cache", False)
    monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", False)
    op = gt.kernel("kernel wsum(x: f32[V, F], w: f32[E]) -> f32[V, F] { out[v] = sum(w[e] * x[u]) }", "wsum")
    src, dst = EDGE_INDEX
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    for w_grad in (False, True):
        torch._dynamo.reset()
        step = torch.compile(lambda ei, x, w: op(ei, x, w), fullgraph=True, backend=backend)
        x, w = torch.rand(V, 3, requires_grad=True), torch.rand(E, requires_grad=w_grad)
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = step(EDGE_INDEX, x, w)
        assert any(t.data_ptr() == x.data_ptr() for t in saved) == w_grad, [t.shape for t in saved]
        gout = torch.rand(V, 3)
        out.backward(gout)
        x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_(w_grad)
        torch.zeros(V, 3).index_add(0, dst, w2[:, None] * x2[src]).backward(gout)
        torch.testing.assert_close(x.grad, x2.grad)
        if w_grad:
            torch.testing.assert_close(w.grad, w2.grad)


def test_a_warm_backward_runs_prepared_whatever_the_incoming_gradient(monkeypatch):
    """`out.sum().backward()` brings an expanded (stride 0) gradient: it is made contiguous before
    the gradient kernel, so a warm call's check passes its arrays as they are and the next call
    runs prepared (a stand-in of an input, `_absent`, is the one broadcast view passed on)."""
    from gnnc.runtime import prepared

    op = gt.kernel(EXAMPLES / "sage_mean.gnn", "sage_mean")
    x = _input((V, 2))
    op(EDGE_INDEX, x).sum().backward()
    made = []
    original = prepared.make
    monkeypatch.setattr(prepared, "make", lambda *a, **k: made.append(1) or original(*a, **k))
    for _ in range(3):
        op(EDGE_INDEX, x).sum().backward()
    assert made == []


def test_literal_sizes_compile_load_and_differentiate():
    """Integer sizes in a vertex, edge or parameter type (`f32[V, 4]`, `f32[4, 3]`): the kernel
    loads (its metadata records the literal row axis, which binds itself) and its gradient runs."""
    from gnnc.torch.kernels import Kernel

    kernel = Kernel(
        "kernel literal_sizes(x: f32[V, 4], f: f32[E, 4], r: f32[4, 3]) -> f32[V, 3] {\n"
        "    out[v] = sum((x[u] * f[e]) @ r)\n}\n",
        "literal_sizes",
    )
    g = torch.Generator().manual_seed(0)
    edge_index = torch.tensor([[0, 1, 2, 2, 3], [1, 2, 0, 1, 1]])
    x = torch.randn(4, 4, generator=g, requires_grad=True)
    f = torch.randn(5, 4, generator=g, requires_grad=True)
    r = torch.randn(4, 3, generator=g, requires_grad=True)
    out = kernel(edge_index, x, f, r, num_vertices=4)
    expected = torch.zeros(4, 3).index_add(0, edge_index[1], (x[edge_index[0]] * f) @ r)
    torch.testing.assert_close(out, expected)
    got = torch.autograd.grad(out.square().sum(), [x, f, r])
    want = torch.autograd.grad(expected.square().sum(), [x, f, r])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_an_eager_backward_runs_on_its_forwards_graph(monkeypatch):
    """An eager call's backward takes the graph its forward ran on: the edge_index is looked
    up once (`graphs.block_of`) and not again, and the gradients are the op's (as through the
    dispatcher)."""
    op = gt.kernel(EXAMPLES / "sage_max.gnn", "sage_max")
    x = torch.rand(V, 3, requires_grad=True)
    edge_index = EDGE_INDEX.clone()  # a tensor no other test converted
    looked_up = []
    original = graphs.block_of
    monkeypatch.setattr(graphs, "block_of", lambda *a: looked_up.append(1) or original(*a))
    op(edge_index, x).sum().backward()
    assert len(looked_up) == 1
    eager = x.grad.clone()
    x.grad = None
    op.op(edge_index, V, V, x, None).sum().backward()  # the registered op and autograd
    torch.testing.assert_close(eager, x.grad)
