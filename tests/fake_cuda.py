"""A stand-in for cuda-python's driver module, for testing the CUDA runtime without a GPU.

Device memory is host memory (ctypes buffers), so a "device pointer" can be
read and written by the test. Launches do not run anything: each is recorded
with the function, the grid, the stream and its parameter values, read back
through the parameter array (as many as the PTX entry declares: a mismatch
with the runtime's argument list shows up as wrong values). Copies and
allocations are recorded too, so a test can see what crossed to the device.

`OnGpu` and `StandInCuda` go one step further up: tensors that say they are on
cuda:0 (their data in CPU tensors), so that code written for CUDA tensors (a
gnnc.nn layer) runs whole, each op checked for CPU tensors made beside them,
and gnnc's ops dispatched to their CUDA implementation.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map


class FakeDriver:
    """What `gnnc.runtime.cuda.driver()` returns, minus the GPU."""

    class CUresult:
        class CUDA_SUCCESS:
            name = "CUDA_SUCCESS"

    def __init__(self, ptx: str = ""):
        self.ok = self.CUresult.CUDA_SUCCESS
        #: parameters per entry point, from every PTX module loaded
        self.params: dict[str, int] = {}
        self._declare(ptx)
        self.memory: dict[int, ctypes.Array] = {}
        self.launches: list[dict] = []
        #: (kind, bytes, stream) of every host-to-device copy
        self.copies: list[tuple[str, int, int | None]] = []
        #: (kind, bytes) of every allocation
        self.allocations: list[tuple[str, int]] = []
        self.synchronised: list[str] = []
        #: the context stack of the (one) calling thread
        self.context: list[str] = []

    def _declare(self, ptx: str) -> None:
        for m in re.finditer(r"\.entry (\w+)\(\n(.*?)\)", ptx, re.S):
            self.params[m.group(1)] = len(re.findall(r"\.param ", m.group(2)))

    def cuDeviceGet(self, i):
        return self.ok, i

    def cuDevicePrimaryCtxRetain(self, device):
        return self.ok, f"ctx{device}"

    def cuCtxSetCurrent(self, ctx):
        self.context = [ctx]
        return (self.ok,)

    def cuCtxPushCurrent(self, ctx):
        self.context.append(ctx)
        return (self.ok,)

    def cuCtxPopCurrent(self):
        return self.ok, self.context.pop()

    def cuModuleLoadData(self, data):
        self._declare(data.rstrip(b"\0").decode())
        return self.ok, "module"

    def cuModuleGetFunction(self, module, name):
        return self.ok, name.decode()

    def _alloc(self, n, kind):
        buf = ctypes.create_string_buffer(n)
        self.memory[ctypes.addressof(buf)] = buf
        self.allocations.append((kind, n))
        return self.ok, ctypes.addressof(buf)

    def cuMemAlloc(self, n):
        return self._alloc(n, "sync")

    def cuMemAllocAsync(self, n, stream):
        return self._alloc(n, f"stream {stream}")

    def cuMemcpyHtoD(self, dst, src, n):
        ctypes.memmove(dst, src, n)
        self.copies.append(("sync", n, None))
        return (self.ok,)

    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        ctypes.memmove(dst, src, n)
        self.copies.append(("async", n, stream))
        return (self.ok,)

    def cuMemcpyDtoH(self, dst, src, n):
        ctypes.memmove(dst, src, n)
        return (self.ok,)

    def cuMemFree(self, ptr):
        self.memory.pop(int(ptr), None)
        return (self.ok,)

    def cuMemFreeAsync(self, ptr, stream):
        self.memory.pop(int(ptr), None)
        return (self.ok,)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        n = self.params[function]
        slots = (ctypes.c_void_p * n).from_address(params)
        values = [ctypes.c_uint64.from_address(slots[i]).value for i in range(n)]
        self.launches.append(
            {
                "context": self.context[-1] if self.context else None,
                "function": function,
                "blocks": gx,
                "threads": bx,
                "shared": shared,
                "stream": stream,
                "values": values,
                "live": set(self.memory),
            }
        )
        return (self.ok,)

    def cuCtxSynchronize(self):
        self.synchronised.append("context")
        return (self.ok,)

    def cuStreamSynchronize(self, stream):
        self.synchronised.append(f"stream {stream}")
        return (self.ok,)


# ------------------------------------------------------------ CUDA tensors without a GPU


class OnGpu(torch.Tensor):
    """A tensor that says it is on cuda:0 and keeps its data in a CPU tensor (`inner`).

    Only `StandInCuda` may run ops on it. Python indexing and scalar reads
    are redirected to `inner` (torch's own go through a CUDA device guard,
    which a CPU-only build lacks); `data_ptr()` is `inner`'s, as a launch
    would read it.
    """

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> OnGpu:
        assert not isinstance(inner, OnGpu) and inner.device.type == "cpu"
        kwargs = {"dtype": inner.dtype, "device": CUDA, "layout": inner.layout}
        if inner.layout == torch.strided:
            kwargs["strides"] = inner.stride()
        t = torch.Tensor._make_wrapper_subclass(cls, inner.shape, **kwargs)
        t.inner = inner
        return t

    def __repr__(self) -> str:  # type: ignore[override]
        return f"OnGpu({self.inner!r})"

    def data_ptr(self) -> int:  # type: ignore[override]
        return self.inner.data_ptr()

    def __getitem__(self, index: Any) -> OnGpu:  # type: ignore[override]
        return OnGpu(self.inner[_inner(index)])

    def __setitem__(self, index: Any, value: Any) -> None:  # type: ignore[override]
        self.inner[_inner(index)] = _inner(value)

    def item(self) -> Any:  # type: ignore[override]
        return self.inner.item()

    def tolist(self) -> Any:  # type: ignore[override]
        return self.inner.tolist()

    def __int__(self) -> int:
        return int(self.inner)

    def __float__(self) -> float:
        return float(self.inner)

    def __bool__(self) -> bool:
        return bool(self.inner)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise AssertionError(f"{func} ran on a stand-in CUDA tensor outside StandInCuda")


CUDA = torch.device("cuda", 0)


def _inner(value: Any) -> Any:
    if isinstance(value, OnGpu):
        return value.inner
    if isinstance(value, (tuple, list)):
        return type(value)(_inner(v) for v in value)
    return value


def _is_cuda_device(value: Any) -> bool:
    return isinstance(value, (torch.device, str)) and torch.device(value).type == "cuda"


class StandInCuda(TorchDispatchMode):
    """Runs torch ops on `OnGpu` tensors with their CPU data, and checks where tensors live.

    - An op that mixes a stand-in with a CPU tensor of one or more elements'
      axes (not a 0-d scalar) fails: on a GPU it would fail too, or copy.
    - A factory with `device="cuda"` makes a stand-in; a copy of a CPU
      tensor to the device is recorded in `uploads`, one back in `downloads`.
    - gnnc's ops go to their CUDA implementation (the dispatcher's CUDA
      kernel, `KernelOps._cuda_*_impl`), as a CUDA tensor would send them;
      their names are recorded in `gnnc_ops`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.gnnc_ops: list[str] = []
        self.uploads: list[tuple[str, tuple[int, ...]]] = []
        self.downloads: list[tuple[str, tuple[int, ...]]] = []
        self.inside_gnnc = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "gnnc":
            self.gnnc_ops.append(func.name())
            self.inside_gnnc += 1
            try:
                with self:
                    return func.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA), *args, **kwargs)
            finally:
                self.inside_gnnc -= 1
        on_gpu = False
        cpu: list[torch.Tensor] = []

        def unwrap(a: Any) -> Any:
            nonlocal on_gpu
            if isinstance(a, OnGpu):
                on_gpu = True
                return a.inner
            if isinstance(a, torch.Tensor):
                cpu.append(a)
            return a

        raw = args
        args, kwargs = tree_map(unwrap, (args, kwargs))
        target = kwargs.get("device")
        aten = torch.ops.aten
        copy = func.overloadpacket in (aten._to_copy, aten.copy_, aten.to)
        if func is torch.ops.aten.copy_.default:  # dst.copy_(src) across devices
            dst, src = raw[0], raw[1]
            if isinstance(dst, OnGpu) != isinstance(src, OnGpu) and src.dim() > 0:
                (self.uploads if isinstance(dst, OnGpu) else self.downloads).append((str(func), tuple(src.shape)))
        elif target is not None:
            kwargs = {**kwargs, "device": torch.device("cpu")}
            if _is_cuda_device(target):
                if copy and cpu:
                    self.uploads.append((str(func), tuple(cpu[0].shape)))
                on_gpu = True
            else:
                if copy and on_gpu:
                    self.downloads.append((str(func), tuple(args[0].shape)))
                on_gpu = False
        elif on_gpu and any(t.dim() > 0 for t in cpu) and not copy:
            shapes = [tuple(t.shape) for t in cpu if t.dim() > 0]
            raise AssertionError(f"{func}: CPU tensors {shapes} beside CUDA tensors")
        out = func(*args, **kwargs)
        if on_gpu:
            out = tree_map(lambda t: OnGpu(t) if isinstance(t, torch.Tensor) and t.device.type == "cpu" else t, out)
        return out


def on_gpu(module: torch.nn.Module) -> torch.nn.Module:
    """`module` with its parameters and buffers as stand-in CUDA tensors (no autograd: a
    CPU-only torch cannot record a graph on CUDA tensors; run it under no_grad)."""
    for m in module.modules():
        for store in (m._parameters, m._buffers):
            for name, t in list(store.items()):
                if t is not None and not isinstance(t, OnGpu):
                    store[name] = OnGpu(t.detach())
    return module


def stand_in_cuda(monkeypatch: Any, launches: list) -> StandInCuda:
    """A StandInCuda mode, with the CUDA runtime's device queries answered and each op's
    CUDA forward computed by its CPU kernel (recorded in `launches`: name, input devices)."""
    from gnnc.torch import cuda as torch_cuda
    from gnnc.torch import ops

    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: type("Stream", (), {"cuda_stream": 7})())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch_cuda, "require_torch_cuda", lambda: None)

    def forward_on_cpu(self: Any, call: Any, params: Any) -> list:
        launches.append((self.name, [p.device for p in params], call.device))
        arrays = [_inner(p).detach().contiguous().numpy() for p in params]
        out = self.forward_kernel(call.dtype)(call.graph, *arrays)
        named = out if isinstance(out, dict) else {self.results[0].name: out}
        return [OnGpu(torch.from_numpy(named[r.name])) for r in self.results]

    monkeypatch.setattr(ops.KernelOps, "cuda_forward", forward_on_cpu)
    return StandInCuda()
