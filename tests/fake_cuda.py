"""A stand-in for cuda-python's driver module, for testing the CUDA runtime without a GPU.

Device memory is host memory (ctypes buffers), so a "device pointer" can be
read and written by the test. Launches do not run anything: each is recorded
with the function, the grid, the stream and its parameter values, read back
through the parameter array (as many as the PTX entry declares: a mismatch
with the runtime's argument list shows up as wrong values). Copies and
allocations are recorded too, so a test can see what crossed to the device.
"""

from __future__ import annotations

import ctypes
import re


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
