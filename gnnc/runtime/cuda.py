"""Running gnnc PTX on a GPU through the CUDA driver API (cuda-python's bindings).

`CudaModule("k.ptx")` loads the PTX written by `gnnc compile --target cuda`
(its first line is the metadata record), and `module.gat(graph, ...)` checks
the arguments as the CPU runtime does, copies host arrays to the device,
launches each phase of the kernel with its thread mapping's grid, in order,
and copies the results back. The bindings are the optional extra
`gnnc[cuda]`; without them, without a driver, or without a GPU, loading
raises one ToolchainError naming what is missing.

Device arrays are borrowed, not copied: an object with
`__cuda_array_interface__` (CuPy, Numba, PyTorch CUDA tensors) or a DLPack
producer on a CUDA device (`__dlpack__` / `__dlpack_device__`) is passed to
the kernel by its pointer, after the same dtype, shape and dimension checks
as a host array (`bind_call`), and must be C-contiguous (a device array is
never copied behind the caller's back). `out=` device arrays are written in
place. Where any input is a device array and a result has no `out=`, the
result is allocated on the device and returned there: a torch tensor on the
input's device when that input is a torch tensor, a CuPy array for CuPy,
else a `DeviceArray` (which has `__cuda_array_interface__`, so
`cupy.asarray` / `numba.cuda.as_cuda_array` take it, and `.copy_to_host()`).
Host results of an all-host call stay numpy arrays. Kernels launch on the
legacy default stream and the call waits for them; a producer's CUDA Array
Interface stream is synchronised first. Within `launching(stream=...)` a
thread's launches go on that stream instead (torch's current stream, for
`gnnc.torch`) and the call returns without waiting: the call's temporary
buffers are then allocated and freed in stream order (cuMemAllocAsync /
cuMemFreeAsync), and `launching(allocate=...)` lets the caller allocate the
device results (torch's caching allocator).

The graph's arrays and its plans (CSR, degrees, partitions: the read-only
arrays `plans.build` and the decision give) are uploaded once per graph and
device and kept there while the Graph lives, so a warm call copies no graph
data; a call's own inputs, host scalars and workspace are per call.

Like the CPU runtime this imports neither xDSL nor llvmlite.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import mmap
import os
import stat
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from gnnc.autotune.decision import Decision, decide, decide_and_hold, next_serial
from gnnc.errors import ArgumentError, ToolchainError
from gnnc.graph import plans
from gnnc.graph.graph import Graph
from gnnc.ir import abi
from gnnc.ir.schedule import directives_text
from gnnc.ir.signature import KernelSignature
from gnnc.runtime import compile_hook, records
from gnnc.runtime.signature import NO_GRAPH, _bind_args, _given_outputs, pack_results, prepare_call, take_graph
from gnnc.runtime.variants import Variants

_log = logging.getLogger(__name__)

_DTYPES = {"f32": np.float32, "f64": np.float64}


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
    try:
        metadata = json.loads(first[len(abi.PTX_METADATA_PREFIX) :])
    except ValueError as exc:
        raise ToolchainError(f"not a gnnc PTX file: its metadata is not valid JSON ({exc})") from None
    if not isinstance(metadata, dict):
        raise ToolchainError("not a gnnc PTX file: its metadata is not a JSON object")
    return metadata


class _DeviceBuffer:
    """Device memory for one call: a copy of `host`, or `nbytes` of workspace.

    With a `stream` the allocation, the copy and the free are ordered on it
    (cuMemAllocAsync, cuMemcpyHtoDAsync, cuMemFreeAsync), so the call need not
    wait for its kernels before freeing; a pageable host array is staged by
    the driver before cuMemcpyHtoDAsync returns, so it may go right after."""

    def __init__(self, cu: Any, host: np.ndarray | None, nbytes: int = 0, stream: int | None = None):
        if host is not None:
            host = np.ascontiguousarray(host)
            nbytes = host.nbytes
        self.cu, self.nbytes, self.stream = cu, max(1, nbytes), stream
        if stream is None:
            self.ptr = _check(cu, cu.cuMemAlloc(self.nbytes), "cuMemAlloc")
        else:
            self.ptr = _check(cu, cu.cuMemAllocAsync(self.nbytes, stream), "cuMemAllocAsync")
        if host is not None and host.nbytes:
            if stream is None:
                _check(cu, cu.cuMemcpyHtoD(self.ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")
            else:
                _check(cu, cu.cuMemcpyHtoDAsync(self.ptr, host.ctypes.data, host.nbytes, stream), "cuMemcpyHtoDAsync")

    def copy_to(self, host: np.ndarray) -> None:
        if host.nbytes:
            _check(self.cu, self.cu.cuMemcpyDtoH(host.ctypes.data, self.ptr, host.nbytes), "cuMemcpyDtoH")

    def free(self) -> None:
        if self.stream is None:
            self.cu.cuMemFree(self.ptr)
        else:
            self.cu.cuMemFreeAsync(self.ptr, self.stream)


class _GraphBuffers:
    """One graph's read-only arrays on one device, uploaded on first use, freed with the graph."""

    def __init__(self, cu: Any, context: Any):
        self.cu, self.context = cu, context
        #: by id(array): the array (kept, so that its id stays its own) and its device copy
        self.buffers: dict[int, tuple[np.ndarray, _DeviceBuffer]] = {}

    def get(self, array: np.ndarray) -> _DeviceBuffer:
        entry = self.buffers.get(id(array))
        if entry is None:
            entry = (array, _DeviceBuffer(self.cu, array))  # a synchronous copy: done before any launch reads it
            self.buffers[id(array)] = entry
        return entry[1]

    @staticmethod
    def release(cu: Any, context: Any, buffers: dict[int, tuple[np.ndarray, _DeviceBuffer]]) -> None:
        """Frees them once the device is idle (a kernel in flight may still read them)."""
        try:
            cu.cuCtxPushCurrent(context)
            try:
                cu.cuCtxSynchronize()
                for _, buffer in buffers.values():
                    cu.cuMemFree(buffer.ptr)
            finally:
                cu.cuCtxPopCurrent()
        except Exception:  # noqa: BLE001 - the driver may be gone at interpreter exit
            pass
        buffers.clear()


#: Per graph, per device ordinal: its arrays on that device.
_GRAPHS_ON_DEVICE: weakref.WeakKeyDictionary[Graph, dict[int, _GraphBuffers]] = weakref.WeakKeyDictionary()


def _graph_buffers(graph: Graph, module: CudaModule) -> _GraphBuffers:
    per_device = _GRAPHS_ON_DEVICE.get(graph)
    if per_device is None:
        per_device = {}
        _GRAPHS_ON_DEVICE[graph] = per_device
    held = per_device.get(module.device)
    if held is None:
        held = _GraphBuffers(module.cu, module.context)
        per_device[module.device] = held
        weakref.finalize(graph, _GraphBuffers.release, module.cu, module.context, held.buffers)
    return held


def graph_bytes_on_device(graph: Graph, device: int = 0) -> int:
    """How many bytes of `graph`'s arrays and plans are held on GPU `device` (0: none yet)."""
    held = _GRAPHS_ON_DEVICE.get(graph, {}).get(device)
    return 0 if held is None else sum(b.nbytes for _, b in held.buffers.values())


# -------------------------------------------------------------- launch settings


class _Settings(threading.local):
    stream: int | None = None
    allocate: Callable[[tuple[int, ...], np.dtype], Any] | None = None


_SETTINGS = _Settings()


@contextlib.contextmanager
def launching(
    stream: int | None = None, allocate: Callable[[tuple[int, ...], np.dtype], Any] | None = None
) -> Iterator[None]:
    """Within it, this thread's kernel calls launch on `stream` and do not wait for it.

    `stream` is a CUstream handle as an int (`torch.cuda.current_stream().cuda_stream`;
    0 is the legacy default stream); None keeps the default: launch on the legacy
    default stream and wait for the device. `allocate(shape, dtype)` returns
    the device array for a result without `out=` (anything with
    `__cuda_array_interface__`), in place of gnnc's own allocation; results
    copied to host arrays still wait for the stream first.
    """
    previous = _SETTINGS.stream, _SETTINGS.allocate
    _SETTINGS.stream, _SETTINGS.allocate = stream, allocate
    try:
        yield
    finally:
        _SETTINGS.stream, _SETTINGS.allocate = previous


# ------------------------------------------------------------ device arrays

#: DLPack device types whose memory a kernel can address: CUDA and CUDA managed.
_DLPACK_CUDA_DEVICES = (2, 13)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


@dataclass
class DeviceView:
    """A borrowed array in device memory: where it is and what it holds.
    `owner` keeps the producer's object (or DLPack capsule) alive while in use."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    #: in bytes, None for C-contiguous
    strides: tuple[int, ...] | None
    readonly: bool
    owner: Any
    #: the producer's stream (CUDA Array Interface), None for the default one
    stream: int | None = None
    device: int | None = None

    @property
    def nbytes(self) -> int:
        return int(prod(self.shape)) * self.dtype.itemsize

    @property
    def c_contiguous(self) -> bool:
        if self.strides is None:
            return True
        expected = self.dtype.itemsize
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size > 1 and stride != expected:
                return False
            expected *= size
        return True


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "detach")


def _from_interface(obj: Any, interface: dict, what: str) -> DeviceView:
    if interface.get("mask") is not None:
        raise ArgumentError(f"{what} is a masked device array; gnnc kernels take plain arrays")
    try:
        dtype = np.dtype(interface["typestr"])
        ptr, readonly = interface["data"]
        shape = tuple(int(n) for n in interface["shape"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ArgumentError(f"{what} has a malformed __cuda_array_interface__ ({exc})") from None
    strides = interface.get("strides")
    stream = interface.get("stream")
    return DeviceView(
        int(ptr or 0),
        shape,
        dtype,
        tuple(int(s) for s in strides) if strides is not None else None,
        bool(readonly),
        obj,
        stream=int(stream) if stream is not None else None,
    )


def _from_dlpack(obj: Any, what: str) -> DeviceView:
    capsule = obj.__dlpack__()
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    try:
        address = get_pointer(capsule, b"dltensor")
    except ValueError:
        raise ArgumentError(f"{what}: its __dlpack__ did not return an unconsumed DLPack capsule") from None
    tensor = _DLManagedTensor.from_address(address).dl_tensor
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    kinds = {0: "i", 1: "u", 2: "f"}
    if code not in kinds or lanes != 1:
        raise ArgumentError(
            f"{what} has DLPack element type code {code}, {bits} bits x {lanes}; gnnc kernels take float32 or float64"
        )
    dtype = np.dtype(f"{kinds[code]}{bits // 8}")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = tuple(tensor.strides[i] * dtype.itemsize for i in range(tensor.ndim)) if bool(tensor.strides) else None
    # the capsule stays unconsumed in `owner`: its destructor releases the tensor
    return DeviceView(
        (tensor.data or 0) + tensor.byte_offset,
        shape,
        dtype,
        strides,
        False,
        (obj, capsule),
        device=tensor.device.device_id,
    )


def _interface(obj: Any) -> Any:
    if _is_torch(obj):
        if getattr(getattr(obj, "device", None), "type", "cpu") != "cuda":
            return None
        obj = obj.detach()  # torch refuses the interface of a tensor that requires grad
    try:
        return getattr(obj, "__cuda_array_interface__", None)
    except Exception:  # noqa: BLE001 - a producer refusing (a CPU tensor): host data
        return None


def _on_cuda_dlpack_device(obj: Any) -> bool:
    dlpack_device = getattr(obj, "__dlpack_device__", None)
    if dlpack_device is None or not hasattr(obj, "__dlpack__"):
        return False
    device_type, _ = dlpack_device()
    return int(device_type) in _DLPACK_CUDA_DEVICES


def is_device_array(obj: Any) -> bool:
    """Whether `obj` lives in CUDA device memory (nothing is taken from it)."""
    if isinstance(obj, np.ndarray):
        return False
    if _is_torch(obj):
        return getattr(getattr(obj, "device", None), "type", "cpu") == "cuda"
    return isinstance(_interface(obj), dict) or _on_cuda_dlpack_device(obj)


def device_view(obj: Any, what: str) -> DeviceView | None:
    """The device array `obj` is, or None for host data (numpy, lists, CPU tensors)."""
    if isinstance(obj, np.ndarray):
        return None
    interface = _interface(obj)
    if isinstance(interface, dict):
        return _from_interface(obj, interface, what)
    if _is_torch(obj):
        return None
    if _on_cuda_dlpack_device(obj):
        return _from_dlpack(obj, what)
    return None


def _stand_in(view: DeviceView) -> np.ndarray:
    """A host array of the view's shape and dtype for the argument checks: reserved
    address space (never touched, so it costs no memory) that overlaps no other array."""
    if view.nbytes == 0:
        return np.empty(view.shape, dtype=view.dtype)
    reserved = mmap.mmap(-1, view.nbytes, prot=mmap.PROT_READ)
    return np.frombuffer(reserved, dtype=view.dtype).reshape(view.shape)


#: Marks a result to be allocated on the device (a device call without its out=).
ON_DEVICE = "on-device"


@dataclass
class BoundCall:
    """A checked call: inputs and outputs are host arrays or DeviceViews (outputs
    also ON_DEVICE); `template` is the first device input, which device results follow."""

    inputs: list
    outputs: list
    dims: dict[str, int]
    template: Any = None


def _overlap(a: DeviceView, b: DeviceView) -> bool:
    return a.nbytes > 0 and b.nbytes > 0 and a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes


def bind_call(sig: KernelSignature, graph: Graph, args: tuple, kwargs: dict, out: Any = None) -> BoundCall:
    """Checks a call whose arrays may live on the device, as `prepare_call` checks host
    arrays (its checks run on stand-ins of the device arrays); needs no driver."""
    bound = _bind_args(sig, tuple(args), dict(kwargs))
    views: dict[str, DeviceView] = {}
    template = None
    for p in sig.params:
        what = f"input '{p.name}' of {sig.name}"
        view = device_view(bound[p.name], what)
        if view is None:
            continue
        if not view.c_contiguous:
            raise ArgumentError(
                f"{what} is a device array that is not C-contiguous (strides {view.strides}); "
                "gnnc does not copy device arrays: pass a contiguous one (.contiguous(), "
                "cupy.ascontiguousarray)"
            )
        template = bound[p.name] if template is None else template
        views[p.name] = view
        bound[p.name] = _stand_in(view)
    given = _given_outputs(sig, out)
    device_outs: dict[str, DeviceView] = {}
    for name, value in list(given.items()):
        what = f"out= for result '{name}' of {sig.name}"
        view = device_view(value, what)
        if view is None:
            continue
        if not view.c_contiguous:
            raise ArgumentError(f"{what} must be C-contiguous, got strides {view.strides}")
        if view.readonly:
            raise ArgumentError(f"{what} is read-only")
        device_outs[name] = view
        del given[name]
    host_inputs, outputs, dims = prepare_call(sig, graph, (), bound, out=given)
    inputs = [views.get(p.name, arr) for p, arr in zip(sig.params, host_inputs)]
    results: list = []
    for r, arr in zip(sig.results, outputs):
        view = device_outs.get(r.name)
        if view is None:
            results.append(ON_DEVICE if views and r.name not in given else arr)
            continue
        what = f"out= for result '{r.name}' of {sig.name}"
        if view.dtype != sig.numpy_dtype:
            raise ArgumentError(f"{what}: expected {sig.numpy_dtype}, got {view.dtype}")
        if view.shape != arr.shape:
            raise ArgumentError(f"{what}: expected shape {arr.shape}, got {view.shape}")
        results.append(view)
    device = [*views.values(), *device_outs.values()]
    for r in sig.results:
        view = device_outs.get(r.name)
        for other in device:
            if view is not None and other is not view and _overlap(view, other):
                raise ArgumentError(
                    f"out= for result '{r.name}' of {sig.name} overlaps another device array "
                    "of the call (the kernels assume no aliasing: pass a separate array)"
                )
    if template is None and device_outs:
        template = next(iter(device_outs.values())).owner
    return BoundCall(inputs, results, dims, template)


class DeviceArray:
    """A result gnnc allocated on the device (cuMemAlloc), freed with the object.

    It has `__cuda_array_interface__` (version 3), so CuPy, Numba or PyTorch
    can take it without a copy; `.copy_to_host()` gives a numpy array."""

    def __init__(self, cu: Any, shape: tuple[int, ...], dtype: DTypeLike):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self._cu = cu
        self._ptr = _check(cu, cu.cuMemAlloc(max(1, self.nbytes)), "cuMemAlloc")

    @property
    def nbytes(self) -> int:
        return int(prod(self.shape)) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (int(self._ptr), False),
            "strides": None,
            "version": 3,
        }

    def copy_to_host(self) -> np.ndarray:
        host = np.empty(self.shape, dtype=self.dtype)
        if self.nbytes:
            _check(self._cu, self._cu.cuMemcpyDtoH(host.ctypes.data, self._ptr, self.nbytes), "cuMemcpyDtoH")
        return host

    def __del__(self) -> None:
        ptr = getattr(self, "_ptr", None)
        if ptr is not None:
            try:
                self._cu.cuMemFree(ptr)
            except Exception:  # noqa: BLE001 - the driver may be gone at interpreter exit
                pass


def _allocate_like(cu: Any, template: Any, shape: tuple[int, ...], dtype: DTypeLike) -> Any:
    """A device result: of the template's library and device when it is torch or CuPy."""
    if _is_torch(template):
        import torch

        return torch.empty(shape, dtype=getattr(torch, np.dtype(dtype).name), device=template.device)
    if type(template).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy.empty(shape, dtype=dtype)
    return DeviceArray(cu, shape, dtype)


class _Borrowed:
    """A device array owned elsewhere (the caller, or the graph's device copies): its pointer, nothing to free."""

    def __init__(self, ptr: int):
        self.ptr = ptr

    def copy_to(self, host: np.ndarray) -> None:  # pragma: no cover - never asked: the result stays on the device
        raise AssertionError("a borrowed device array is not copied back")

    def free(self) -> None:
        pass


def _argument_buffer(cu: Any, value: Any, stream: int | None) -> _DeviceBuffer | _Borrowed:
    """An input or result on the device: borrowed where it lives there, else a copy."""
    if isinstance(value, np.ndarray):
        return _DeviceBuffer(cu, value, stream=stream)
    view = value if isinstance(value, DeviceView) else device_view(value, "a device result")
    assert view is not None
    return _Borrowed(view.ptr)


def _original(value: Any) -> Any:
    """What the caller sees of a device result: the object it passed (out=) or got."""
    if isinstance(value, DeviceView):
        owner = value.owner
        return owner[0] if isinstance(owner, tuple) else owner
    return value


def _result_shape(r: Any, graph: Graph, dims: dict[str, int]) -> tuple[int, ...]:
    lead = {"V": (graph.num_vertices,), "E": (graph.num_edges,), None: ()}[r.domain]
    return lead + tuple(d if isinstance(d, int) else dims[d] for d in r.shape)


class CudaKernel:
    """One kernel of a PTX module: `kernel(graph, *inputs, out=None, **named_inputs)`."""

    def __init__(self, module: CudaModule, record: dict):
        self.signature = KernelSignature.from_dict(record)
        self.name = self.signature.name
        self._abi = abi.AbiRecord.from_dict(record["abi"])
        if self._abi.grid is None or not self._abi.grid.phases:
            raise ToolchainError(f"kernel {self.name!r} of the PTX file has no grid record: not a cuda kernel")
        self._grid = self._abi.grid
        self._phases: list[str] = self._grid.phases or []  # not empty: checked above
        self._dtype = _DTYPES[self.signature.dtype]
        # the launch parameters, in order (abi.kernel_arguments), once
        self._arguments = abi.kernel_arguments(
            self._abi, [p.name for p in self.signature.params], [r.name for r in self.signature.results]
        )
        self._names = {g: [a.name for a in self._arguments if a.group is g] for g in abi.Group}
        self._module = module
        self._metadata = module.metadata
        cu = module.cu
        self._functions = [
            _check(cu, cu.cuModuleGetFunction(module.handle, name.encode()), f"cuModuleGetFunction({name})")
            for name in self._phases
        ]
        #: its module's compiled variants (`_variant`), shared by the module's kernels
        self._variant_cache: Variants = module._variant_cache
        #: mappings the compiler refused for this kernel: not asked for again
        self._refused: set[str] = set()
        #: this kernel's part of the key of its decisions (autotune/decision.py)
        self._serial = next_serial()

    def _variant(self, schedule: str) -> CudaKernel:
        """This kernel compiled with another `for cuda` schedule (needs the compiler; cached)."""
        key = directives_text(schedule)
        variant = self._variant_cache.get(self.name, key)
        if variant is None:
            module = compile_hook.compile_variant(
                self._metadata["source"], target="cuda", arch=self._metadata["arch"], kernels=[self.name], schedule=key
            )
            variant = module.kernels[self.name]
            self._variant_cache.put(self.name, key, variant)
        return variant

    @property
    def _variants(self) -> dict[str, CudaKernel]:
        """This kernel's variants its module keeps now, by directive text."""
        return self._variant_cache.of(self.name)

    def _default_variant(self, graph: Graph, dims: dict[str, int]) -> CudaKernel | None:
        """Without a `for cuda` schedule, the mapping the graph suggests
        (heuristic.default_cuda_mappings), compiled once per mapping; the
        first one the compiler accepts for this kernel (autotune/decision.py).
        None for this kernel as compiled; logs the decision as a call does."""
        decided = decide(self, graph, dims)
        _log.debug("%s", decided.reason)
        return None if decided.kernel() is self else decided.kernel()

    def __call__(self, graph: Any = NO_GRAPH, /, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        """Checks the call, takes the decision for this graph and these sizes (the mapping
        that runs), builds or fetches its plans, and launches it."""
        graph = take_graph(graph, kwargs)
        if not isinstance(graph, Graph):
            raise ArgumentError(f"the first argument of a kernel must be a gnnc.Graph, got {type(graph).__name__}")
        call = bind_call(self.signature, graph, args, kwargs, out=out)
        decided, kernel = decide_and_hold(self, graph, call.dims)
        _log.debug("%s", decided.reason)
        return kernel._launch(graph, call, decided, plans.build(graph, decided.plans))

    def _launch(self, graph: Graph, call: BoundCall, decided: Decision, arguments: Mapping[str, Any]) -> Any:
        """Launches each phase's grid in order on this thread's stream (`launching`): the graph's
        arrays from their device copies, host inputs copied, device ones borrowed; copies host
        results back (waiting for the stream), else waits for the device only on the default stream."""
        cu = self._module.cu
        # this module's context for the call (the thread may hold another GPU's, or none: torch's
        # autograd threads), the caller's back afterwards (torch reads its current device from it)
        _check(cu, cu.cuCtxPushCurrent(self._module.context), "cuCtxPushCurrent")
        try:
            return self._launch_in_context(graph, call, decided, arguments)
        finally:
            cu.cuCtxPopCurrent()

    def _launch_in_context(self, graph: Graph, call: BoundCall, decided: Decision, arguments: Mapping[str, Any]) -> Any:
        cu = self._module.cu
        stream, allocate = _SETTINGS.stream, _SETTINGS.allocate
        itemsize = np.dtype(self._dtype).itemsize
        hybrid = decided.plans.hybrid
        shared_bytes = hybrid.shared_bytes(arguments["hybrid_hot"]) if hybrid else [0] * len(decided.launches)
        # host values copied to the device (scalars passed as they are), and workspace sizes in elements, by name
        host = {**arguments, **decided.arguments}
        workspace = dict(decided.workspace)  # never read before written
        results = []
        for r, o in zip(self.signature.results, call.outputs):
            if o is ON_DEVICE:
                shape = _result_shape(r, graph, call.dims)
                o = (
                    allocate(shape, np.dtype(self._dtype))
                    if allocate
                    else _allocate_like(cu, call.template, shape, self._dtype)
                )
            results.append(o)
        for view in [*call.inputs, *call.outputs]:
            if isinstance(view, DeviceView) and view.stream not in (None, 1, 2, stream):  # not one launches follow
                _check(cu, cu.cuStreamSynchronize(view.stream), "cuStreamSynchronize")
        given = dict(zip(self._names[abi.Group.PARAMS], call.inputs, strict=True))
        given.update(zip(self._names[abi.Group.RESULTS], results, strict=True))
        on_device = _graph_buffers(graph, self._module)
        buffers: dict[str, _DeviceBuffer | _Borrowed] = {}
        try:
            values: list[ctypes.c_int64 | ctypes.c_void_p] = []
            for a in self._arguments:
                if not a.pointer:
                    values.append(ctypes.c_int64(host[a.name]))
                    continue
                if a.name in given:
                    buffers[a.name] = _argument_buffer(cu, given[a.name], stream)
                elif a.name in host:
                    array = host[a.name]
                    if isinstance(array, np.ndarray) and not array.flags.writeable:
                        # the graph's and its plans' arrays: read-only for the graph's life, uploaded once
                        buffers[a.name] = _Borrowed(on_device.get(array).ptr)
                    else:
                        buffers[a.name] = _DeviceBuffer(cu, array, stream=stream)
                else:
                    buffers[a.name] = _DeviceBuffer(cu, None, workspace[a.name] * itemsize, stream=stream)
                values.append(ctypes.c_void_p(int(buffers[a.name].ptr)))
            params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
            # phases, in order, on the stream; a hybrid launch with the
            # dynamic shared memory its staged rows take
            for function, n, shared in zip(self._functions, decided.launches, shared_bytes, strict=True):
                if n:
                    _check(
                        cu,
                        cu.cuLaunchKernel(
                            function,
                            n,
                            1,
                            1,
                            self._grid.block_size,
                            1,
                            1,
                            shared,
                            stream or 0,
                            ctypes.addressof(params),
                            0,
                        ),
                        "cuLaunchKernel",
                    )
            copied = [
                (name, r) for name, r in zip(self._names[abi.Group.RESULTS], results) if isinstance(r, np.ndarray)
            ]
            if stream is None:
                _check(cu, cu.cuCtxSynchronize(), "cuCtxSynchronize")
            elif copied:
                _check(cu, cu.cuStreamSynchronize(stream), "cuStreamSynchronize")
            for name, result in copied:
                buffers[name].copy_to(result)
        finally:
            for b in buffers.values():
                b.free()
        returned = [r if isinstance(r, np.ndarray) else _original(r) for r in results]
        return pack_results(self.signature, returned)


class CudaModule:
    """The kernels of a gnnc PTX file, loaded on GPU `device` (0 unless given): `module.gat(graph, ...)`."""

    def __init__(self, path: str | os.PathLike, device: int = 0):
        self.path = Path(path)
        try:
            if not stat.S_ISREG(os.stat(self.path).st_mode):  # a FIFO would block the read
                raise ToolchainError(f"cannot read {self.path}: not a regular file")
            text = self.path.read_text()
        except OSError as exc:
            raise ToolchainError(f"cannot read {self.path}: {exc.strerror}") from exc
        except UnicodeDecodeError:
            raise ToolchainError(f"{self.path} is not a gnnc PTX file: it is not text") from None
        self.metadata = read_metadata(text)
        if self.metadata.get("abi_version") != abi.ABI_VERSION:
            raise ToolchainError(
                f"{self.path} uses gnnc ABI {self.metadata.get('abi_version')}, "
                f"this runtime speaks {abi.ABI_VERSION}: recompile it with this gnnc"
            )
        records.check_records(self.metadata, self.path)
        self.cu = cu = driver()
        #: the device ordinal; its primary context (the one PyTorch and the runtime API use)
        self.device = device
        handle = _check(cu, cu.cuDeviceGet(device), f"cuDeviceGet({device})")
        self.context = _check(cu, cu.cuDevicePrimaryCtxRetain(handle), "cuDevicePrimaryCtxRetain")
        _check(cu, cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self.handle = _check(cu, cu.cuModuleLoadData(text.encode() + b"\0"), "cuModuleLoadData")
        #: the compiled variants of this module's kernels (runtime/variants.py)
        self._variant_cache = Variants()
        self.kernels = {r["name"]: CudaKernel(self, r) for r in self.metadata["kernels"]}

    def __getattr__(self, name: str) -> CudaKernel:
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"no kernel named {name!r} in {self.__dict__.get('path')}; it has {sorted(kernels)}")
