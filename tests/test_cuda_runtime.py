"""The cuda runtime: a clear error without cuda-python, a driver or a GPU; real runs where a GPU exists."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.driver import compiler
from gnnc.runtime import cuda as cuda_runtime
from tests.fake_cuda import FakeDriver
from tests.helpers import assert_matches
from tests.strategies import random_inputs


def _gpu_reason() -> str | None:
    try:
        cuda_runtime.driver()
    except gnnc.ToolchainError as exc:
        return str(exc)
    return None


GPU_MISSING = _gpu_reason()
EXAMPLES = Path(__file__).parent.parent / "examples"
DIMS = {
    "gcn": {"F": 17},
    "sage_max": {"F": 3},
    "sage_mean": {"F": 64},
    "gin": {"F": 1},
    "attention": {"H": 2, "D": 17},
    "gat": {"H": 2, "F": 3},
    "mlp_aggr": {"D1": 5, "D2": 130},
    "gcn_norm": {"F": 17},
}


@pytest.mark.skipif(GPU_MISSING is None, reason="a GPU is present")
def test_loading_without_a_gpu_names_what_is_missing(tmp_path):
    ptx = tmp_path / "gcn.ptx"
    result = compiler.compile_source((EXAMPLES / "gcn.gnn").read_text(), options=compiler.CompileOptions(target="cuda"))
    ptx.write_text(result.ptx)
    with pytest.raises(gnnc.ToolchainError) as info:
        cuda_runtime.CudaModule(ptx)
    assert any(word in str(info.value) for word in ("cuda-python", "driver", "GPU"))
    with pytest.raises(gnnc.ToolchainError):
        gnnc.compile(EXAMPLES / "gcn.gnn", target="cuda")


def test_missing_bindings_say_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "cuda", None)
    with pytest.raises(gnnc.ToolchainError, match=r"pip install 'gnnc\[cuda\]'"):
        cuda_runtime.driver()


def test_a_file_that_is_not_gnnc_ptx_is_refused(tmp_path):
    bad = tmp_path / "x.ptx"
    bad.write_text(".version 8.0\n")
    with pytest.raises(gnnc.ToolchainError, match="not a gnnc PTX file"):
        cuda_runtime.CudaModule(bad)


@pytest.mark.skipif(GPU_MISSING is not None, reason=f"no GPU: {GPU_MISSING}")
@pytest.mark.parametrize("mapping", ["map thread_vertex", "map thread_vertex group 3"])
@pytest.mark.parametrize("name", sorted(DIMS))
def test_real_kernels_on_the_gpu_match_the_reference(name, mapping):
    module = gnnc.compile(EXAMPLES / f"{name}.gnn", target="cuda", schedule=mapping)
    _assert_matches_the_reference(module, name, vertices=1000, edges=5000, seed=0)


def _assert_matches_the_reference(module, name: str, vertices: int, edges: int, seed: int) -> None:
    """`module`'s kernel `name` on a random graph equals the reference's."""
    reference = gnnc.compile(EXAMPLES / f"{name}.gnn", target="reference")
    rng = np.random.default_rng(seed)
    graph = gnnc.Graph.from_coo(
        rng.integers(0, vertices, edges), rng.integers(0, vertices, edges), num_vertices=vertices
    )
    kernel = getattr(module, name)
    inputs = random_inputs(kernel.signature, graph, DIMS[name], np.float32, 1)
    assert_matches(kernel(graph, **inputs), getattr(reference, name)(graph, **inputs), graph, np.float32)


@pytest.mark.skipif(GPU_MISSING is not None, reason=f"no GPU: {GPU_MISSING}")
@pytest.mark.parametrize(
    "mapping",
    ["map thread_vertex", "map warp_vertex", "map thread_edge", "map warp_edge", "map warp_vertex hybrid 4"],
)
@pytest.mark.parametrize("name", ["gcn", "gat", "mlp_aggr", "sage_max"])
def test_strided_grids_on_the_gpu_match_the_reference(monkeypatch, name, mapping):
    """Launches of 2 blocks walk grids of many more (grid-stride loops), scratch slices by launched thread."""
    monkeypatch.setattr(cuda_runtime.abi, "CUDA_MAX_BLOCKS", 2)
    try:
        module = gnnc.compile(EXAMPLES / f"{name}.gnn", target="cuda", schedule=mapping)
    except gnnc.CompileError as exc:
        pytest.skip(f"{name} does not take {mapping}: {exc}")
    _assert_matches_the_reference(module, name, vertices=3000, edges=20000, seed=1)


# ---------------------------------------------- device arrays (no GPU needed to check them)


class FakeDeviceArray:
    """An object in device memory as CuPy or Numba describe one (never dereferenced here)."""

    def __init__(self, shape, typestr="<f4", ptr=0x7F0000000000, strides=None, readonly=False, stream=None):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (ptr, readonly),
            "strides": strides,
            "version": 3,
            "stream": stream,
        }


def _signature(name: str):
    result = compiler.compile_source(
        (EXAMPLES / f"{name}.gnn").read_text(), options=compiler.CompileOptions(target="cuda"), stop_after="nvvm"
    )
    return cuda_runtime.KernelSignature.from_dict(result.metadata["kernels"][0])


GRAPH = gnnc.Graph.from_coo(np.array([0, 1, 2, 2]), np.array([1, 2, 0, 1]), num_vertices=3)


def test_device_inputs_are_borrowed_after_the_host_checks():
    sig = _signature("gcn")
    x = FakeDeviceArray((3, 17))
    call = cuda_runtime.bind_call(sig, GRAPH, (x,), {"w": np.ones(4, np.float32)})
    view = call.inputs[0]
    assert isinstance(view, cuda_runtime.DeviceView) and view.ptr == 0x7F0000000000 and view.shape == (3, 17)
    assert isinstance(call.inputs[1], np.ndarray) and call.dims == {"F": 17}
    # no out=: the result is allocated on the device, like the first device input
    assert call.outputs == [cuda_runtime.ON_DEVICE] and call.template is x
    # an all-host call keeps host results
    host = cuda_runtime.bind_call(sig, GRAPH, (np.ones((3, 5), np.float32), np.ones(4, np.float32)), {})
    assert isinstance(host.outputs[0], np.ndarray) and host.outputs[0].shape == (3, 5) and host.template is None


@pytest.mark.parametrize(
    "x, message",
    [
        (FakeDeviceArray((3, 17), "<f8"), "input 'x' of gcn: expected float32, got float64"),
        (FakeDeviceArray((4, 17)), r"leading axis \(V\) has 4 entries but the graph has 3 vertices"),
        (FakeDeviceArray((3, 17, 2)), r"expected 2 axes \[V, F\]"),
        (FakeDeviceArray((3, 17), strides=(4, 12)), "not C-contiguous.*does not copy device arrays"),
    ],
)
def test_bad_device_inputs_are_refused_like_host_ones(x, message):
    with pytest.raises(gnnc.ArgumentError, match=message):
        cuda_runtime.bind_call(_signature("gcn"), GRAPH, (x, np.ones(4, np.float32)), {})


def test_device_outputs_are_checked_and_written_in_place():
    sig = _signature("gcn")
    x, w = FakeDeviceArray((3, 8)), FakeDeviceArray((4,), ptr=0x7F0000100000)
    out = FakeDeviceArray((3, 8), ptr=0x7F0000200000)
    call = cuda_runtime.bind_call(sig, GRAPH, (x, w), {}, out=out)
    assert call.outputs[0].ptr == 0x7F0000200000 and call.outputs[0].owner is out
    for bad, message in [
        (FakeDeviceArray((3, 9), ptr=0x7F0000200000), r"expected shape \(3, 8\), got \(3, 9\)"),
        (FakeDeviceArray((3, 8), "<f8", ptr=0x7F0000200000), "expected float32, got float64"),
        (FakeDeviceArray((3, 8), ptr=0x7F0000200000, readonly=True), "read-only"),
        (FakeDeviceArray((3, 8), ptr=0x7F0000000010), "overlaps another device array"),
    ]:
        with pytest.raises(gnnc.ArgumentError, match=message):
            cuda_runtime.bind_call(sig, GRAPH, (x, w), {}, out=bad)
    # a host out= beside device inputs is checked as on the CPU, and copied back
    host_out = np.empty((3, 8), np.float32)
    assert cuda_runtime.bind_call(sig, GRAPH, (x, w), {}, out=host_out).outputs[0] is host_out


def test_stand_ins_for_device_arrays_take_no_memory():
    # a 1 GB device array is checked through reserved, untouched address space
    v = 1 << 12
    graph = gnnc.Graph.from_coo(np.arange(v), np.arange(v), num_vertices=v)
    x = FakeDeviceArray((v, 1 << 16))
    call = cuda_runtime.bind_call(_signature("gcn"), graph, (x, np.ones(v, np.float32)), {})
    assert call.dims == {"F": 1 << 16}


def test_dlpack_capsules_are_read():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    view = cuda_runtime._from_dlpack(t, "x")
    assert view.ptr == t.data_ptr() and view.shape == (3, 4) and view.dtype == np.float32 and view.c_contiguous
    assert not cuda_runtime._from_dlpack(t.T, "x").c_contiguous
    assert cuda_runtime.device_view(t, "x") is None  # a CPU tensor is host data

    class CudaDLPack:  # a DLPack producer on a CUDA device (its capsule borrowed from a CPU tensor here)
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):
            return t.__dlpack__()

    call = cuda_runtime.bind_call(_signature("gcn"), GRAPH, (CudaDLPack(), np.ones(4, np.float32)), {})
    assert call.inputs[0].ptr == t.data_ptr() and call.dims == {"F": 4}
    half = torch.zeros((3, 4), dtype=torch.float16)

    class HalfDLPack(CudaDLPack):
        def __dlpack__(self, stream=None):
            return half.__dlpack__()

    with pytest.raises(gnnc.ArgumentError, match="expected float32, got float16"):
        cuda_runtime.bind_call(_signature("gcn"), GRAPH, (HalfDLPack(), np.ones(4, np.float32)), {})


def test_a_cpu_kernel_given_a_device_array_says_so():
    module = gnnc.compile(EXAMPLES / "gcn.gnn", target="cuda-emulation")
    with pytest.raises(gnnc.ArgumentError, match="runs on the CPU but got a CUDA device array"):
        module.gcn(GRAPH, x=FakeDeviceArray((3, 4)), w=np.ones(4, np.float32))


@pytest.mark.parametrize(
    "name, mapping, dims",
    [
        ("gin", "map thread_edge hybrid 4", {"F": 6}),
        ("gat", "map warp_edge hybrid 2", {"H": 2, "F": 3}),
        ("gcn", "map thread_vertex", {"F": 5}),
    ],
)
def test_the_gpu_runtime_passes_what_each_ptx_entry_declares(tmp_path, monkeypatch, name, mapping, dims):
    # no GPU: a fake driver checks the launches' arguments against the PTX
    result = compiler.compile_source(
        (EXAMPLES / f"{name}.gnn").read_text(), options=compiler.CompileOptions(target="cuda", schedule=mapping)
    )
    path = tmp_path / f"{name}.ptx"
    path.write_text(result.ptx)
    fake = FakeDriver(result.ptx)
    monkeypatch.setattr(cuda_runtime, "driver", lambda: fake)
    kernel = getattr(cuda_runtime.CudaModule(path), name)
    rng = np.random.default_rng(0)
    graph = gnnc.Graph.from_coo(rng.integers(0, 5, 60), rng.integers(0, 40, 60), num_vertices=40)
    inputs = random_inputs(kernel.signature, graph, dims, np.float32, 0)
    first = next(iter(inputs))
    device_input = FakeDeviceArray(inputs[first].shape, ptr=0x7F0000000000)  # borrowed, never read by the fake
    inputs[first] = device_input
    got = kernel(graph, **inputs)
    grid = kernel._abi.grid
    assert [launch["function"] for launch in fake.launches] == [
        p for p, n in zip(grid.phases, cuda_runtime.abi.grid_blocks(grid, 40, 60)) if n
    ]
    for launch in fake.launches:
        values = launch["values"]
        assert values[:4] == [40, 60, values[2], 1] and launch["threads"] == 256
        buffers = values[4:]
        # every buffer argument is one the call allocated, or the borrowed device input
        assert all(b in launch["live"] or b == 0x7F0000000000 for b in buffers), buffers
        assert buffers.count(0x7F0000000000) == 1
        assert launch["live"] <= set(buffers)  # and nothing allocated goes unpassed: the counts agree
    if grid.hybrid:
        from gnnc.graph import plans

        _, _, shared = plans.hybrid_plan(graph, grid, dims, 4)
        assert [launch["shared"] for launch in fake.launches] == [
            s for s, n in zip(shared, cuda_runtime.abi.grid_blocks(grid, 40, 60)) if n
        ] and max(shared) > 0
    # a device input: the results were allocated on the device, and stay there
    results = got.values() if isinstance(got, dict) else [got]
    assert all(isinstance(r, cuda_runtime.DeviceArray) for r in results)
    assert all(r.copy_to_host().shape == r.shape for r in results)


@pytest.mark.parametrize("mapping", ["map thread_vertex", "map warp_edge"])
def test_a_launch_starts_at_most_cuda_max_blocks_and_scratch_follows_it(tmp_path, monkeypatch, mapping):
    """Grids stride (convert-grid-to-nvvm): a launch starts at most CUDA_MAX_BLOCKS blocks whatever
    the graph, and the per-thread scratch is one slice per launched thread, not per grid thread
    (a warp_edge grid of a 4M-edge graph asked for 139 GiB of scratch before)."""
    monkeypatch.setattr(cuda_runtime.abi, "CUDA_MAX_BLOCKS", 3)
    result = compiler.compile_source(
        (EXAMPLES / "mlp_aggr.gnn").read_text(), options=compiler.CompileOptions(target="cuda", schedule=mapping)
    )
    path = tmp_path / "mlp_aggr.ptx"
    path.write_text(result.ptx)
    fake = FakeDriver(result.ptx)
    monkeypatch.setattr(cuda_runtime, "driver", lambda: fake)
    kernel = cuda_runtime.CudaModule(path).mlp_aggr
    rng = np.random.default_rng(0)
    v, e = 2000, 9000
    graph = gnnc.Graph.from_coo(rng.integers(0, v, e), rng.integers(0, v, e), num_vertices=v)
    dims = {"D1": 5, "D2": 7}
    kernel(graph, **random_inputs(kernel.signature, graph, dims, np.float32, 0))
    grid_blocks = cuda_runtime.abi.grid_blocks(kernel._abi.grid, v, e)
    assert max(grid_blocks) > 3
    assert [launch["blocks"] for launch in fake.launches] == [min(n, 3) for n in grid_blocks if n]
    scratch = [n for kind, n in fake.allocations if kind.startswith("stream") or kind == "sync"]
    per_thread = cuda_runtime.abi.scratch_slice_elements(
        sum(cuda_runtime.abi.elements(s, dims) for s in kernel._abi.scratch), 4
    )
    assert per_thread * 3 * 256 * 4 in scratch
    assert max(scratch) < per_thread * max(grid_blocks) * 256 * 4


def test_the_gpu_runtime_logs_the_default_mapping_of_a_call(tmp_path, monkeypatch, caplog):
    # no GPU: the fake driver loads the PTX; the decision is taken before any launch
    import logging

    import gnnc.api  # noqa: F401  (installs the compiler a variant is built with)
    from gnnc.autotune import heuristic

    result = compiler.compile_source((EXAMPLES / "gcn.gnn").read_text(), options=compiler.CompileOptions(target="cuda"))
    path = tmp_path / "gcn.ptx"
    path.write_text(result.ptx)
    monkeypatch.setattr(cuda_runtime, "driver", lambda: FakeDriver(result.ptx))
    kernel = cuda_runtime.CudaModule(path).gcn
    caplog.set_level(logging.DEBUG, logger="gnnc")
    monkeypatch.setattr(heuristic, "default_cuda_mappings", lambda graph, row: ["thread_vertex"])
    assert kernel._default_variant(GRAPH, {"F": 4}) is None
    monkeypatch.setattr(heuristic, "default_cuda_mappings", lambda graph, row: ["warp_vertex"])
    # the decision is made once per graph and sizes: the new default decides for a new graph
    variant = kernel._default_variant(gnnc.Graph(GRAPH), {"F": 4})
    assert isinstance(variant, cuda_runtime.CudaKernel) and variant._grid.mapping == "warp_vertex"
    shape = f"V={GRAPH.num_vertices} E={GRAPH.num_edges} {{'F': 4}}"
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.name != "gnnc.driver.compiler"] == [
        ("gnnc.runtime.cuda", "DEBUG", f"gcn: default mapping 'map thread_vertex' (as compiled) for {shape}"),
        ("gnnc.runtime.compile_hook", "INFO", "compiling a variant of gcn: schedule 'map warp_vertex' (cuda)"),
        ("gnnc.runtime.cuda", "DEBUG", f"gcn: default mapping 'map warp_vertex' for {shape}"),
    ]
