"""gnnc.torch on CUDA tensors: the ops' CUDA implementation, checked without a GPU through a
fake driver (CPU tensors stand in for device memory: their data_ptr() is what a launch
must receive), and against the CPU op where a GPU is present."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gnnc  # noqa: E402
import gnnc.torch as gt  # noqa: E402
from gnnc.runtime import cuda as cuda_runtime  # noqa: E402
from gnnc.torch import cuda as torch_cuda  # noqa: E402
from gnnc.torch import ops  # noqa: E402
from tests.fake_cuda import FakeDriver  # noqa: E402
from tests.helpers import torch_gpu_missing  # noqa: E402

EXAMPLES = Path(__file__).parent.parent / "examples"
EDGE_INDEX = torch.tensor([[0, 1, 2, 2, 3, 0], [1, 2, 0, 1, 0, 3]])
V, E = 4, 6
STREAM = 0x5EED


def _kernel(name: str, mapping: str = "map thread_vertex") -> gt.Kernel:
    # a fixed mapping: the forward kernel runs as compiled, no default-mapping variant
    source = (EXAMPLES / f"{name}.gnn").read_text() + f"\nschedule {name} for cuda {{ {mapping} }}\n"
    return gt.kernel(source, name)


def _call(graph: gnnc.Graph, dtype: str = "f32") -> ops.CudaCall:
    # results are allocated on the CPU: the fake driver's device memory is host memory
    return ops.CudaCall(graph, dtype, torch.device("cpu"), 0, STREAM, "sm_80")


@pytest.fixture
def fake(monkeypatch):
    driver = FakeDriver()
    monkeypatch.setattr(cuda_runtime, "driver", lambda: driver)
    return driver


def _pointers(launch: dict) -> set[int]:
    return set(launch["values"])


# ------------------------------------------------------------------ registration and errors


def test_every_op_has_a_cuda_kernel_registered():
    gat = gt.kernel(EXAMPLES / "gat.gnn", "gat")
    names = [f"gnnc::{gat.ops.base}{suffix}" for suffix in ("", "_forward", "_backward")]
    for name in names:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA"), name
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU"), name
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(names[0], "XLA")


class OnCuda(torch.Tensor):
    """A tensor that says it is on a GPU, without one (nothing may run on it)."""

    @staticmethod
    def __new__(cls, shape, dtype=torch.float32):
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device="cuda")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise AssertionError(f"{func} ran on a tensor gnnc.torch should have refused")


@pytest.mark.skipif(torch.version.cuda is not None, reason="this PyTorch has CUDA")
def test_torch_without_cuda_gets_one_clear_error():
    gin = gt.kernel(EXAMPLES / "gin.gnn", "gin")
    edge_index = OnCuda((2, E), torch.int64)
    with pytest.raises(gnnc.ToolchainError, match="built without CUDA"):
        gin(edge_index, OnCuda((V, 3)), 0.5)
    # the op's CUDA implementation itself, as the dispatcher would call it
    with pytest.raises(gnnc.ToolchainError, match="built without CUDA"):
        gin.ops._cuda_forward_impl(edge_index, V, V, OnCuda((V, 3)), OnCuda(()), None)


def test_mixed_devices_are_refused():
    gin = gt.kernel(EXAMPLES / "gin.gnn", "gin")
    with pytest.raises(gnnc.ArgumentError, match=r"several devices \(cpu, cuda.*\).*one device"):
        gin(EDGE_INDEX, OnCuda((V, 3)), 0.5)
    with pytest.raises(gnnc.ArgumentError, match="several devices"):
        gin(OnCuda((2, E), torch.int64), torch.rand(V, 3), 0.5)
    # and at the op, whatever called it
    with pytest.raises(gnnc.ArgumentError, match="several devices"):
        ops.call_device("gin", [EDGE_INDEX, OnCuda((V, 3))])
    # a 0-d CPU tensor beside CUDA ones is a scalar, as torch allows
    assert ops.call_device("gin", [OnCuda((2, E), torch.int64), torch.tensor(0.5)]).type == "cuda"


def test_half_precision_is_refused_naming_what_runs():
    gin = gt.kernel(EXAMPLES / "gin.gnn", "gin")
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(gnnc.ArgumentError, match=r"float32 or float64 .*half precision.*CPU or CUDA"):
            gin(OnCuda((2, E), torch.int64), OnCuda((V, 3), dtype), 0.5)


def test_a_target_option_is_refused_the_device_picks_it():
    with pytest.raises(gnnc.ArgumentError, match="the tensors' device picks it"):
        gt.kernel(EXAMPLES / "gcn.gnn", "gcn", target="cuda")


def test_without_a_driver_the_cuda_path_names_what_is_missing():
    try:
        cuda_runtime.driver()
    except gnnc.ToolchainError:
        pass
    else:
        pytest.skip("a CUDA driver and GPU are present")
    gcn = _kernel("gcn")
    graph = gnnc.Graph.from_edge_index(EDGE_INDEX, shape=(V, V))
    with pytest.raises(gnnc.ToolchainError, match="cuda-python|driver|GPU"):
        gcn.ops.cuda_forward(_call(graph), [torch.rand(V, 3), torch.rand(E)])


def test_the_arch_is_the_newest_the_gpu_runs():
    assert torch_cuda.arch_for((9, 0)) == "sm_90"
    assert torch_cuda.arch_for((8, 9)) == "sm_89"
    assert torch_cuda.arch_for((8, 7)) == "sm_86"
    assert torch_cuda.arch_for((12, 0)) == "sm_90"  # PTX runs forward, JIT-compiled by the driver
    with pytest.raises(gnnc.ToolchainError, match="compute capability 7.0"):
        torch_cuda.arch_for((7, 0))


# ----------------------------------------------------------- launches, through the fake driver


def test_forward_borrows_the_tensors_and_launches_on_the_stream(fake):
    gcn = _kernel("gcn")
    graph = gnnc.Graph.from_edge_index(EDGE_INDEX, shape=(V, V))
    x, w = torch.rand(V, 5), torch.rand(E)
    (out,) = gcn.ops.cuda_forward(_call(graph), [x, w])
    assert out.shape == (V, 5) and out.dtype == torch.float32
    kernel = gcn.ops.cuda.forward_kernel(
        ops.variant_source(gcn.ops.source, "f32", "f32"), "f32", 0, "sm_80"
    )  # the cached kernel, as the call got it
    blocks = [n for n in cuda_runtime.abi.grid_blocks(kernel._grid, V, E) if n]
    assert [(launch["function"], launch["blocks"]) for launch in fake.launches] == list(
        zip([p for p, n in zip(kernel._phases, blocks) if n], blocks)
    )
    for launch in fake.launches:
        assert launch["stream"] == STREAM and launch["threads"] == kernel._grid.block_size
        # the tensors themselves, by pointer: no copy of x or w, the result written in place
        assert {x.data_ptr(), w.data_ptr(), out.data_ptr()} <= _pointers(launch)
        others = _pointers(launch) - {x.data_ptr(), w.data_ptr(), out.data_ptr()}
        assert all(p in launch["live"] for p in others if p > 1 << 20)  # every other buffer is a live allocation
    # the stream path does not wait for the device; the graph went over once, synchronously
    assert fake.synchronised == []
    assert {kind for kind, _, _ in fake.copies} == {"sync"}
    assert sum(n for _, n, _ in fake.copies) == cuda_runtime.graph_bytes_on_device(graph) > 0
    # a warm call copies nothing: the graph's arrays stay on the device
    fake.copies.clear()
    gcn.ops.cuda_forward(_call(graph), [x, w])
    assert fake.copies == []
    # launched in the module's context, the caller's current one given back
    assert {launch["context"] for launch in fake.launches} == {"ctx0"} and fake.context == ["ctx0"]


def test_a_second_gpu_gets_its_own_module_and_graph_copy(fake):
    gcn = _kernel("gcn")
    graph = gnnc.Graph.from_edge_index(EDGE_INDEX, shape=(V, V))
    x, w = torch.rand(V, 5), torch.rand(E)
    gcn.ops.cuda_forward(_call(graph), [x, w])
    fake.launches.clear()
    on_one = ops.CudaCall(graph, "f32", torch.device("cpu"), 1, STREAM, "sm_80")
    gcn.ops.cuda_forward(on_one, [x, w])
    assert {launch["context"] for launch in fake.launches} == {"ctx1"}
    assert cuda_runtime.graph_bytes_on_device(graph, 1) == cuda_runtime.graph_bytes_on_device(graph, 0) > 0


def test_a_host_scalar_is_copied_in_stream_order_and_freed_there(fake):
    gin = _kernel("gin")
    graph = gnnc.Graph.from_edge_index(EDGE_INDEX, shape=(V, V))
    x = torch.rand(V, 3)
    gin.ops.cuda_forward(_call(graph), [x, torch.tensor(0.5)])  # warm: the graph is on the device
    fake.copies.clear()
    fake.allocations.clear()
    before = set(fake.memory)
    (out,) = gin.ops.cuda_forward(_call(graph), [x, torch.tensor(0.5)])
    assert fake.copies == [("async", 4, STREAM)]  # the 0-d CPU tensor, nothing else
    assert (f"stream {STREAM}", 4) in fake.allocations  # and the workspace, stream-ordered too
    assert all(kind == f"stream {STREAM}" for kind, _ in fake.allocations)
    assert set(fake.memory) == before  # its buffer freed again (cuMemFreeAsync)
    assert out.shape == (V, 3)


def test_backward_runs_the_gradient_kernels_on_the_device(fake):
    gcn = _kernel("gcn")
    graph = gnnc.Graph.from_edge_index(EDGE_INDEX, shape=(V, V))
    x, w, gout = torch.rand(V, 5), torch.rand(E), torch.rand(V, 5)
    dx, dw = gcn.ops.cuda_backward(_call(graph), [x, w], [gout], [], [True, True])
    assert dx.shape == x.shape and dw.shape == w.shape and dx.dtype == dw.dtype == torch.float32
    grad = gcn.ops._cuda_gradient(_call(graph), ("x", "w"))
    names = [k[0] for k in grad.kernels]
    functions = [launch["function"] for launch in fake.launches]
    # each gradient kernel's phases, in the gradient's order, all on the stream
    assert [f for f in functions if f.startswith("gnnc_")] == functions
    assert [n for n in names if any(f.startswith(f"gnnc_{n}") for f in functions)] == names
    assert {launch["stream"] for launch in fake.launches} == {STREAM} and fake.synchronised == []
    assert any(gout.data_ptr() in _pointers(launch) for launch in fake.launches)
    assert any(dx.data_ptr() in _pointers(launch) for launch in fake.launches)
    # the reversed graph went to the device too, once
    assert cuda_runtime.graph_bytes_on_device(graph.reversed()) > 0
    # only x's gradient: w's kernel does not run, and w's slot is empty
    fake.launches.clear()
    dx, dw = gcn.ops.cuda_backward(_call(graph), [x, w], [gout], [], [True, False])
    assert dw.numel() == 0 and dx.shape == x.shape
    ran = {launch["function"] for launch in fake.launches}
    assert ran and not any("grad_w" in f for f in ran)


def test_the_saving_forward_returns_what_the_gradient_reuses(fake):
    gat = _kernel("gat", "map warp_vertex")
    graph = gnnc.Graph.from_edge_index(EDGE_INDEX, shape=(V, V))
    h, el, er = torch.rand(V, 2, 3), torch.rand(V, 2), torch.rand(V, 2)
    out, alpha, *saved = gat.ops.cuda_saving(_call(graph), [h, el, er])
    assert out.shape == (V, 2, 3) and alpha.shape == (E, 2)
    assert [t.shape for t in saved] == [(E, 2)] and len(gat.ops.saved) == 1
    assert {launch["function"].split("__")[0] for launch in fake.launches} == {"gnnc_gat"}
    grads = gat.ops.cuda_backward(_call(graph), [h, el, er], [out, alpha], saved, [True, True, True])
    assert [g.shape for g in grads] == [h.shape, el.shape, er.shape]


def test_a_parameter_gradient_is_summed_on_the_device(fake):
    # gin's eps: per-vertex parts summed down to a scalar by TorchArrays
    gin = _kernel("gin")
    graph = gnnc.Graph.from_edge_index(EDGE_INDEX, shape=(V, V))
    x, eps, gout = torch.rand(V, 3), torch.tensor(0.5), torch.rand(V, 3)
    dx, deps = gin.ops.cuda_backward(_call(graph), [x, eps], [gout], [], [True, True])
    assert dx.shape == (V, 3) and deps.shape == () and deps.dtype == torch.float32


def test_a_relation_weight_gradient_runs_its_edge_kernel_on_the_device(fake):
    """The CUDA runner sums a relation weight's adjoints per relation itself (TorchArrays has no
    pair products): the gradient takes no pair kernels, and dW runs on the device."""
    rgcn = _kernel("rgcn")
    types = torch.tensor([0, 1, 0, 1, 1, 0])
    graph = gnnc.Graph.from_edge_index(EDGE_INDEX, shape=(V, V), edge_type=types, num_relations=2)
    x, w, root, gout = torch.rand(V, 3), torch.rand(2, 3, 4), torch.rand(3, 4), torch.rand(V, 4)
    dx, dw, droot = rgcn.ops.cuda_backward(_call(graph), [x, w, root], [gout], [], [False, True, False])
    assert dw.shape == w.shape and dx.numel() == droot.numel() == 0
    assert rgcn.ops._cuda_gradient(_call(graph), ("W",)).pair_module is None
    assert any("grad_W_rel" in launch["function"] for launch in fake.launches)


def test_torch_arrays_match_the_host_arrays():
    from gnnc.runtime.gradient import HOST

    arrays = torch_cuda.TorchArrays(torch.device("cpu"), None)
    rng = np.random.default_rng(0)
    a, b = rng.random((4, 2, 3)), rng.random((2, 2, 3))
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    np.testing.assert_allclose(arrays.sum_leading(ta, 2).numpy(), HOST.sum_leading(a, 2))
    np.testing.assert_allclose(arrays.add_parts(ta, tb).numpy(), HOST.add_parts(a, b))
    np.testing.assert_allclose(arrays.add_parts(tb, ta).numpy(), HOST.add_parts(b, a))
    np.testing.assert_allclose(arrays.padded(tb, 5).numpy(), HOST.padded(b, 5))
    np.testing.assert_array_equal(arrays.transposed(ta).numpy(), HOST.transposed(a))
    assert arrays.transposed(ta).is_contiguous()
    assert arrays.dtype(ta) == HOST.dtype(a) and arrays.cast(ta, np.dtype(np.float32)).dtype == torch.float32


# ------------------------------------------------------------------------- on a real GPU


GPU_MISSING = torch_gpu_missing()


@pytest.mark.skipif(GPU_MISSING is not None, reason=f"no GPU: {GPU_MISSING}")
@pytest.mark.parametrize("name", ["gcn", "gin", "gat", "sage_max"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_tensors_match_the_cpu_op(name, dtype):
    from tests.test_torch_ops import CASES
    from tests.test_torch_ops import EDGE_INDEX as edge_index
    from tests.test_torch_ops import V as v

    kernel = gt.kernel(EXAMPLES / f"{name}.gnn", name)  # one object, both devices
    inputs = [t.detach().to(dtype) for t in CASES[name]()]

    def run(device):
        ts = [t.detach().to(device).requires_grad_(True) for t in inputs]
        out = kernel(edge_index.to(device), *ts, num_vertices=v)
        outs = list(out) if isinstance(out, tuple) else [out]
        sum(o.square().sum() for o in outs).backward()
        return [o.detach().cpu() for o in outs], [t.grad.cpu() for t in ts]

    cpu_out, cpu_grads = run("cpu")
    cuda_out, cuda_grads = run("cuda")
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    for a, b in zip(cpu_out + cpu_grads, cuda_out + cuda_grads):
        torch.testing.assert_close(b, a, rtol=tol, atol=tol)
