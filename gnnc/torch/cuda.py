"""The CUDA implementation of gnnc's custom ops: the kernel's PTX, launched through gnnc's CUDA runtime.

`ops.py` registers it for the CUDA dispatch key beside the CPU one, so one op
(and one `gnnc.torch.kernel` object) runs either, after the tensors' device.
Per kernel, element type and GPU, `CudaVariants` compiles the forward
kernel and its gradient kernels for target='cuda' (PTX for the newest
architecture gnnc emits that the GPU runs; the compile cache keeps them) and
loads them on that GPU.

A call borrows the tensors: each goes to the runtime as its `data_ptr()`,
shape and dtype (`DevicePointer`), never copied; results are allocated with
torch (so on torch's caching allocator, on the right device) and returned as
tensors. Kernels launch on torch's current stream of the device
(`torch.cuda.current_stream().cuda_stream`) and the call returns without
waiting, as a torch op does. The graph's arrays (CSR, plans) are uploaded
once per Graph and GPU by the runtime; the Graph of a CUDA edge_index is
built on the host from one device-to-host copy, cached (`graphs.py`).
Gradient kernels run through `runtime.gradient.Gradient` with `TorchArrays`,
so the sums of gradient parts and the transposes stay on the device too.

This module takes whatever tensors it is given: checking that they are on
one CUDA device is the op's (`ops.py`), so tests without a GPU drive it with
CPU tensors standing in for device memory and a fake driver.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gnnc import api
from gnnc.errors import ArgumentError, ToolchainError
from gnnc.graph import plans
from gnnc.graph.coo import CooGraph
from gnnc.graph.graph import Graph
from gnnc.runtime import cuda as cuda_runtime
from gnnc.runtime.gradient import HostArrays

#: Compile options that mean something for the cuda target (`schedule=` and
#: `cpu=` are the CPU's: the PTX follows the source's `for cuda` schedule, or
#: the runtime's default mapping per call).
CUDA_OPTIONS = ("opt_level", "disable_passes", "fusion")

_NUMPY: dict[torch.dtype, np.dtype] = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64)}
_TORCH = {d: t for t, d in _NUMPY.items()}


def arch_for(capability: tuple[int, int]) -> str:
    """The newest architecture gnnc emits PTX for that a GPU of this compute capability runs
    (the driver JIT-compiles PTX for newer GPUs)."""
    from gnnc.driver.compiler import cuda_archs

    archs = cuda_archs()
    major, minor = capability
    fitting = [a for a in archs if int(a[3:]) <= major * 10 + minor]
    if not fitting:
        raise ToolchainError(f"the GPU has compute capability {major}.{minor}; gnnc emits PTX for {', '.join(archs)}")
    return fitting[-1]


def require_torch_cuda() -> None:
    """Raises a ToolchainError when this PyTorch cannot run CUDA tensors at all."""
    if torch.version.cuda is None:
        raise ToolchainError(
            f"PyTorch {torch.__version__} is built without CUDA: gnnc.torch runs CUDA tensors "
            "only with a CUDA build of PyTorch (and cuda-python: pip install 'gnnc[cuda]')"
        )


class DevicePointer:
    """A tensor as the CUDA runtime borrows it: its data_ptr(), shape and dtype
    (`__cuda_array_interface__`), the tensor kept alive. It must be contiguous."""

    def __init__(self, tensor: torch.Tensor):
        if not tensor.is_contiguous():
            raise ArgumentError("gnnc borrows contiguous tensors only")  # the op made them so
        self.tensor = tensor
        self.__cuda_array_interface__ = {
            "shape": tuple(tensor.shape),
            "typestr": _NUMPY[tensor.dtype].str,
            "data": (tensor.data_ptr(), False),
            "strides": None,
            "version": 3,
        }


class TorchArrays(HostArrays):
    """A gradient's kernels on the GPU: tensors in, tensors out, the arithmetic between them in torch."""

    #: relation products gather the edge kernel's rows per relation (`relation_products`): the
    #: pair kernels' path (`pair_products`) has no device implementation yet
    pair_sums = False
    #: edge intermediates stay in the user's numbering on the GPU: renumbering there (a device
    #: copy of the permutation, gathers) is not measured yet
    renumbers_edges = False

    def __init__(self, device: torch.device, stream: int | None):
        self.device, self.stream = device, stream

    def _allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> DevicePointer:
        return DevicePointer(torch.empty(shape, dtype=_TORCH[np.dtype(dtype)], device=self.device))

    def run(self, kernel: Any, graph: Graph | CooGraph, named: dict[str, Any], threads: int | None) -> Any:
        """Launches `kernel` on the stream, borrowing the tensors; its results as tensors (a CUDA
        call's graph is a Graph: `KernelOps._graph`)."""
        given = {k: _borrowed(v) for k, v in named.items()}
        with cuda_runtime.launching(self.stream, self._allocate):
            out = kernel(graph, **given)
        if isinstance(out, dict):
            return {k: _tensor(v) for k, v in out.items()}
        return _tensor(out)

    def dtype(self, a: Any) -> np.dtype:
        return _NUMPY[a.dtype] if isinstance(a, torch.Tensor) else np.asarray(a).dtype

    def shape(self, a: Any) -> tuple[int, ...]:
        return tuple(a.shape) if isinstance(a, torch.Tensor) else np.shape(a)

    def cast(self, a: Any, dtype: np.dtype) -> Any:
        return a.to(_TORCH[np.dtype(dtype)])

    def transposed(self, a: Any) -> Any:
        return a.transpose(0, 1).contiguous()

    def sum_leading(self, a: Any, axes: int) -> Any:
        return a.sum(dim=tuple(range(axes))) if axes else a

    def add_parts(self, total: Any, part: Any) -> Any:
        if total.shape == part.shape:
            return total + part
        big, small = (total, part) if total.shape[0] >= part.shape[0] else (part, total)
        summed = big.clone()
        summed[: small.shape[0]] += small
        return summed

    def padded(self, a: Any, rows: int) -> Any:
        padded = a.new_zeros((rows, *a.shape[1:]))
        padded[: a.shape[0]] = a
        return padded

    def zeros_like(self, a: Any) -> Any:
        return torch.zeros_like(a) if isinstance(a, torch.Tensor) else np.zeros_like(np.asarray(a))

    def product(self, factor: Any, summed: Any, threads: int = 1) -> Any:
        """F^T G over the vertex (and leading) axes, on the device (`threads` is the host's: unused)."""
        f = factor[: summed.shape[0]].to(summed.dtype)
        if tuple(f.shape[:-1]) != tuple(summed.shape[:-1]):
            raise ArgumentError(
                f"a weight gradient's factor has shape {tuple(f.shape)}, its adjoint sum {tuple(summed.shape)}"
            )
        return (f.reshape(-1, f.shape[-1]).T @ summed.reshape(-1, summed.shape[-1])).contiguous()

    def transposed_last(self, a: Any) -> Any:
        return a.transpose(-1, -2).contiguous()

    def _relation_runs(self, graph: Graph) -> tuple[torch.Tensor, list[int]]:
        order, offsets = plans.relation_edges(graph)
        return torch.as_tensor(np.asarray(order), device=self.device), [int(o) for o in offsets]

    def relation_sums(self, rows: Any, graph: Graph) -> Any:
        """[E, ..] rows summed per relation, on the device."""
        order, offsets = self._relation_runs(graph)
        relations = graph.num_relations or 0
        out = rows.new_zeros((relations, *rows.shape[1:]))
        for r in range(relations):
            if offsets[r + 1] > offsets[r]:
                out[r] = rows.index_select(0, order[offsets[r] : offsets[r + 1]]).sum(dim=0)
        return out

    def relation_products(
        self, factor: Any, rows: Any, ends: np.ndarray, graph: Graph, blocks: int = 0, threads: int = 1
    ) -> Any:
        """Per relation r, F[ends[r's edges]]^T G[r's edges] (per leading index with `blocks`), on the device
        (`threads` is the host's: unused)."""
        order, offsets = self._relation_runs(graph)
        ends_t = torch.as_tensor(np.asarray(ends), device=self.device)
        k, n = factor.shape[-1], rows.shape[-1]
        lead = tuple(factor.shape[1:-1]) if blocks else ()
        relations = graph.num_relations or 0
        out = rows.new_zeros((relations, max(1, int(np.prod(lead, dtype=np.int64))), k, n))
        for r in range(relations):
            if offsets[r + 1] > offsets[r]:
                edges = order[offsets[r] : offsets[r + 1]]
                f = factor.index_select(0, ends_t.index_select(0, edges)).to(rows.dtype).reshape(len(edges), -1, k)
                g = rows.index_select(0, edges).reshape(len(edges), -1, n)
                if blocks:
                    out[r] = torch.einsum("ebk,ebn->bkn", f, g)
                else:
                    out[r, 0] = f.reshape(-1, k).T @ g.reshape(-1, n)
        return out.reshape((relations, *lead, k, n))


def _borrowed(value: Any) -> Any:
    """A tensor for the runtime: a device one by its pointer; a CPU 0-d one (a scalar
    beside CUDA tensors, as torch allows) as a host array the runtime copies over."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.device.type == "cpu" and value.dim() == 0:
        return value.detach().numpy()
    return DevicePointer(value.detach().contiguous())


def _tensor(value: Any) -> torch.Tensor:
    if isinstance(value, DevicePointer):
        return value.tensor
    raise AssertionError(f"a device call returned {type(value).__name__}, not what it was asked to allocate")


class CudaVariants:
    """One kernel's PTX variants (forward and gradient), per element type and GPU, loaded on first use."""

    def __init__(self, source: str, name: str, options: dict[str, Any]):
        self.source, self.name = source, name
        self.options = {k: v for k, v in options.items() if k in CUDA_OPTIONS}
        self._lock = threading.Lock()
        self._forward: dict[tuple[str, int, str], Any] = {}
        self._gradients: dict[tuple[str, int, str, tuple[str, ...]], Any] = {}

    def forward_kernel(self, source: str, dtype: str, device: int, arch: str) -> Any:
        """The forward kernel (`runtime.cuda.CudaKernel`) for this dtype on GPU `device`."""
        key = (dtype, device, arch)
        with self._lock:
            kernel = self._forward.get(key)
            if kernel is None:
                module = api.compile(source, target="cuda", arch=arch, kernels=[self.name], **self.options)
                if device != module.device:
                    module = cuda_runtime.CudaModule(module.path, device=device)
                kernel = self._forward[key] = getattr(module, self.name)
        return kernel

    def gradient(
        self, source: str, dtype: str, device: int, arch: str, params: Sequence[str], wanted: tuple[str, ...]
    ) -> Any:
        """The gradient kernels (a `runtime.gradient.Gradient` over a PTX module) run for `wanted`."""
        everything = tuple(params)
        with self._lock:
            full = self._gradients.get((dtype, device, arch, everything))
            if full is None:
                full = api.compile_grad(source, self.name, target="cuda", arch=arch, **self.options)
                if device != full.module.device:
                    full = copy.copy(full)
                    full.module = cuda_runtime.CudaModule(full.module.path, device=device)
                self._gradients[(dtype, device, arch, everything)] = full
            grad = self._gradients.get((dtype, device, arch, wanted))
            if grad is None:
                grad = self._gradients[(dtype, device, arch, wanted)] = full.restricted_to(wanted)
        return grad


__all__ = [
    "CUDA_OPTIONS",
    "CudaVariants",
    "DevicePointer",
    "TorchArrays",
    "arch_for",
    "require_torch_cuda",
]
