"""Running gnnc PTX on a GPU through the CUDA driver API (cuda-python's bindings).

`CudaModule("k.ptx")` loads the PTX written by `gnnc compile --target cuda`
(its first line is the metadata record), and `module.gat(graph, ...)` checks
the arguments as the CPU runtime does, copies host arrays to the device,
launches each phase of the kernel with its thread mapping's grid, in order,
and copies the results back. The bindings are the optional extra
`gnnc[cuda]`; without them, without a driver, or without a GPU, loading
raises one ToolchainError naming what is missing.

Like the CPU runtime this imports neither xDSL nor llvmlite.
"""

from __future__ import annotations

import ctypes
import json
import os
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from gnnc import abi
from gnnc.errors import ArgumentError, ToolchainError
from gnnc.runtime import heuristic
from gnnc.runtime.graph import Graph
from gnnc.runtime.signature import KernelSignature, pack_results, prepare_call

_DTYPES = {"f32": np.float32, "f64": np.float64}


def _size(shape: list, dims: dict[str, int]) -> int:
    return int(prod(d if isinstance(d, int) else (int(d) if str(d).isdigit() else dims[d]) for d in shape))


def driver() -> Any:
    """cuda-python's driver module, initialised; a ToolchainError says what is missing."""
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        raise ToolchainError(
            "running cuda kernels needs cuda-python's driver bindings, which are not installed: "
            "pip install 'gnnc[cuda]'"
        ) from None
    try:
        (err,) = cu.cuInit(0)
    except Exception as exc:  # the bindings load libcuda lazily and raise their own error type
        raise ToolchainError(f"no NVIDIA driver: the CUDA driver library (libcuda) cannot be loaded ({exc})") from None
    if err != cu.CUresult.CUDA_SUCCESS:
        raise ToolchainError(f"the CUDA driver failed to initialise ({err.name}): is there a GPU?")
    err, count = cu.cuDeviceGetCount()
    if err != cu.CUresult.CUDA_SUCCESS or count == 0:
        raise ToolchainError("no CUDA GPU found (the driver is installed but reports no device)")
    return cu


def _check(cu: Any, result: tuple, what: str) -> Any:
    err, *values = result
    if err != cu.CUresult.CUDA_SUCCESS:
        raise ToolchainError(f"CUDA driver error in {what}: {err.name}")
    return values[0] if len(values) == 1 else values


def read_metadata(text: str) -> dict:
    first = text.split("\n", 1)[0]
    if not first.startswith(abi.PTX_METADATA_PREFIX):
        raise ToolchainError("not a gnnc PTX file: its first line is not the gnnc metadata comment")
    return json.loads(first[len(abi.PTX_METADATA_PREFIX):])


class _DeviceBuffer:
    def __init__(self, cu: Any, host: np.ndarray):
        self.cu, self.nbytes = cu, max(1, host.nbytes)
        self.ptr = _check(cu, cu.cuMemAlloc(self.nbytes), "cuMemAlloc")
        if host.nbytes:
            _check(cu, cu.cuMemcpyHtoD(self.ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def copy_to(self, host: np.ndarray) -> None:
        if host.nbytes:
            _check(self.cu, self.cu.cuMemcpyDtoH(host.ctypes.data, self.ptr, host.nbytes), "cuMemcpyDtoH")

    def free(self) -> None:
        self.cu.cuMemFree(self.ptr)


class CudaKernel:
    """One kernel of a PTX module: `kernel(graph, *inputs, out=None, **named_inputs)`."""

    def __init__(self, module: "CudaModule", record: dict):
        self.signature = KernelSignature.from_dict(record)
        self.name = self.signature.name
        self._abi = record["abi"]
        self._grid = self._abi["grid"]
        self._dtype = _DTYPES[self.signature.dtype]
        self._module = module
        cu = module.cu
        self._functions = [
            _check(cu, cu.cuModuleGetFunction(module.handle, name.encode()), f"cuModuleGetFunction({name})")
            for name in self._grid["phases"]
        ]
        self._variants: dict[str, CudaKernel] = {}
        self._refused: set[str] = set()

    def _default_variant(self, graph: Graph, dims: dict[str, int]) -> "CudaKernel | None":
        """Without a `for cuda` schedule, the mapping the graph suggests
        (heuristic.default_cuda_mappings), compiled once per mapping; the
        first one the compiler accepts for this kernel."""
        source = self._module.metadata.get("source")
        if self._grid.get("schedule_given", True) or source is None:
            return None
        for mapping in heuristic.default_cuda_mappings(graph, heuristic.row_elements(self.signature, dims)):
            if mapping == "thread_vertex" and self._grid["mapping"] == mapping and self._grid["group"] == 1:
                return None
            directive = f"map {mapping}"
            if directive in self._refused:
                continue
            if directive not in self._variants:
                from gnnc.api import compile as compile_kernels  # the compiler, only when a variant is needed
                from gnnc.errors import CompileError

                try:
                    module = compile_kernels(source, target="cuda", arch=self._module.metadata["arch"],
                                             kernels=[self.name], schedule=directive)
                except CompileError:
                    self._refused.add(directive)
                    continue
                self._variants[directive] = module.kernels[self.name]
            return self._variants[directive]
        return None

    def __call__(self, graph: Graph, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        if not isinstance(graph, Graph):
            raise ArgumentError(f"the first argument of a kernel must be a gnnc.Graph, got {type(graph).__name__}")
        inputs, outputs, dims = prepare_call(self.signature, graph, args, kwargs, out=out)
        chosen = self._default_variant(graph, dims)
        if chosen is not None:
            return chosen(graph, *args, out=out, **kwargs)
        cu = self._module.cu
        blocks = abi.grid_blocks(self._grid, graph.num_vertices, graph.num_edges)
        threads = max(1, max(blocks, default=0) * self._grid["block_size"])
        per_thread = abi.scratch_slice_elements(
            sum(_size(s, dims) for s in self._abi["scratch"]), np.dtype(self._dtype).itemsize
        )
        rows = {"V": graph.num_vertices, "E": graph.num_edges}
        temps = [np.empty(max(1, rows[t["domain"]] * _size(t["shape"], dims)), dtype=self._dtype)
                 for t in self._abi["temps"]]
        hybrid: list[np.ndarray] = []
        shared_bytes = [0] * len(blocks)
        if self._grid.get("hybrid"):
            from gnnc.runtime.module import hybrid_plan

            hot, slot, shared_bytes = hybrid_plan(graph, self._grid, dims, np.dtype(self._dtype).itemsize)
            hybrid = [hot, slot]
        identity = np.arange(graph.num_vertices, dtype=np.int64)
        host = [
            np.array([0, graph.num_vertices], dtype=np.int64),  # dst_blocks: grids do not use them
            identity, graph.in_indptr, graph.in_src, graph.in_eid,
            graph.deg_in(self._dtype), graph.deg_out(self._dtype),
            np.array([dims[d] for d in self._abi["dims"]], dtype=np.int64),
            np.empty(per_thread * threads, dtype=self._dtype),
            *inputs, *outputs, *temps, *hybrid,
        ]
        device = [_DeviceBuffer(cu, np.ascontiguousarray(h)) for h in host]
        try:
            values = [ctypes.c_int64(graph.num_vertices), ctypes.c_int64(graph.num_edges),
                      ctypes.c_int64(threads), ctypes.c_int64(1)]
            values += [ctypes.c_void_p(int(d.ptr)) for d in device]
            params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
            # phases, in order, on the default stream; a hybrid launch with the
            # dynamic shared memory its staged rows take
            for function, n, shared in zip(self._functions, blocks, shared_bytes, strict=True):
                if n:
                    _check(cu, cu.cuLaunchKernel(function, n, 1, 1, self._grid["block_size"], 1, 1, shared, 0,
                                                 ctypes.addressof(params), 0), "cuLaunchKernel")
            _check(cu, cu.cuCtxSynchronize(), "cuCtxSynchronize")
            first_output = 9 + len(inputs)
            for i, arr in enumerate(outputs):
                device[first_output + i].copy_to(arr)
        finally:
            for d in device:
                d.free()
        return pack_results(self.signature, outputs)


class CudaModule:
    """The kernels of a gnnc PTX file, loaded on GPU 0: `module.gat(graph, ...)`."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise ToolchainError(f"cannot read {self.path}: {exc.strerror}") from exc
        self.metadata = read_metadata(text)
        if self.metadata.get("abi_version") != abi.ABI_VERSION:
            raise ToolchainError(f"{self.path} uses gnnc ABI {self.metadata.get('abi_version')}, "
                                 f"this runtime speaks {abi.ABI_VERSION}: recompile it with this gnnc")
        self.cu = cu = driver()
        device = _check(cu, cu.cuDeviceGet(0), "cuDeviceGet")
        self.context = _check(cu, cu.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
        _check(cu, cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self.handle = _check(cu, cu.cuModuleLoadData(text.encode() + b"\0"), "cuModuleLoadData")
        self.kernels = {r["name"]: CudaKernel(self, r) for r in self.metadata["kernels"]}

    def __getattr__(self, name: str) -> CudaKernel:
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"no kernel named {name!r} in {self.__dict__.get('path')}; it has {sorted(kernels)}")
