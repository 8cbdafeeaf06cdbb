"""A kernel and its gradient as `torch.library` custom ops (namespace `gnnc`).

One kernel (its source text, name and compile options) gives up to three ops,
named after the kernel and a digest of the three, so that a name is stable
across processes and never shared by two different kernels:

    gnnc::gat_<digest>          (edge_index, num_src, num_dst, h, el, er, threads) -> (out, alpha)
    gnnc::gat_<digest>_forward  ... -> (out, alpha, st0__): also what the gradient reuses
    gnnc::gat_<digest>_backward (edge_index, num_src, num_dst, h, el, er,
                                 gout_out, gout_alpha, saved, wanted, threads) -> (dh, del, der)

The graph enters as tensors (a 2 x E `edge_index` and the sizes; for a kernel
that reads relation types, `edge_type` and `num_relations` after them), so each op
is a pure function of its inputs: torch.compile, export and jit.trace record
the call instead of a constant. The CPU implementation turns edge_index into a
`gnnc.Graph` once (`graphs.graph_of`) and calls the compiled kernel, float32
or float64 after the inputs. The fake implementation derives result shapes
from the signature (V = num_dst, E = edge_index's columns, named dimensions
from the inputs' shapes) and compiles nothing. Autograd is registered on the
forward ops; the backward is an op too, so compiled backward graphs hold it,
and differentiating it again raises a clear error. `_forward` exists for
kernels whose gradient reuses forward intermediates (a softmax's weights, a
max's winning edges): the caller picks it when an input needs a gradient.
`wanted` lists the inputs whose gradient is asked for; the others come back
as empty tensors and their gradient kernels do not run.

CUDA tensors take the same ops: a CUDA implementation (`torch/cuda.py`)
compiles the kernel and its gradient kernels for target='cuda' and launches
the PTX through gnnc's CUDA runtime on torch's current stream, borrowing the
tensors' memory; all tensors of a call must be on one device (a 0-d CPU
tensor may stand beside CUDA ones, as in torch).

Ops live as long as the process; they are registered once per kernel (a
second `gnnc.torch.kernel` of the same source, name and options reuses them).
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gnnc import api
from gnnc.autotune.threads import check_threads, max_threads
from gnnc.errors import ArgumentError, CompileError, GnncError
from gnnc.graph.coo import CooGraph
from gnnc.graph.graph import Graph
from gnnc.ir.signature import KernelSignature, TensorSig
from gnnc.torch import cuda, graphs
from gnnc.torch.threads import default_threads

NAMESPACE = "gnnc"
_LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")
#: The registered kernels, by op name.
_REGISTERED: dict[str, KernelOps] = {}
_REGISTER_LOCK = threading.Lock()

#: The element types a kernel has a variant for.
DTYPES = {torch.float32: "f32", torch.float64: "f64"}
_TORCH_DTYPES = {name: dtype for dtype, name in DTYPES.items()}

#: The op arguments that carry the graph, before the kernel's inputs.
_GRAPH_ARGS = ("edge_index", "num_src", "num_dst")


def op_name(source: str, name: str, options: dict[str, Any]) -> str:
    """`NAME_DIGEST`: the kernel's name and 16 hex digits of sha256(source, name, options)."""
    key = json.dumps([source, name, options], sort_keys=True, default=repr)
    return f"{name}_{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def kernel_ops(source: str, name: str, options: dict[str, Any], file: str = "<string>") -> KernelOps:
    """The ops of kernel `name` of `source` compiled with `options`, registered on first use."""
    base = op_name(source, name, options)
    with _REGISTER_LOCK:
        ops = _REGISTERED.get(base)
        if ops is None:
            ops = KernelOps(base, source, name, options, file)
            _REGISTERED[base] = ops
    return ops


def variant_source(source: str, declared: str, dtype: str) -> str:
    """The source with every element type replaced by `dtype` (a kernel uses one of them)."""
    return source if dtype == declared else re.sub(rf"\b{declared}\b", dtype, source)


def dtype_name(tensors: Sequence[torch.Tensor], declared: str) -> str:
    """'f32' or 'f64' after the tensors' dtype (all the same), or the declared one without tensors."""
    if not tensors:
        return declared
    first = tensors[0].dtype
    if first in DTYPES and all(t.dtype == first for t in tensors):
        return DTYPES[first]
    dtypes = {t.dtype for t in tensors}
    if not dtypes:
        return declared
    if len(dtypes) == 1 and next(iter(dtypes)) in DTYPES:
        return DTYPES[next(iter(dtypes))]
    raise ArgumentError(f"inputs must all be float32 or all float64, got {sorted(map(str, dtypes))}")


def _array(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as a numpy array (no copy unless it is not contiguous)."""
    if not t.is_cpu:
        raise ArgumentError(f"gnnc's CPU kernels got a tensor on {t.device}")
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy(force=True)  # detached; a CPU float tensor is not copied


def _kept_array(t: torch.Tensor) -> np.ndarray:
    """A kept input as the backward passes it on: `_array`, but a stand-in (`_absent`) as a
    broadcast view (a kernel that does not read it takes it without a copy)."""
    if t.dim() and t.is_cpu and not any(t.stride()):
        return t.numpy(force=True)
    return _array(t)


#: An input the backward does not read is kept from this size on: a smaller one costs little
#: memory, and a stand-in (not contiguous) makes its gradient call take the checked way.
ABSENT_MIN_BYTES = 1 << 20


def _absent(t: torch.Tensor) -> torch.Tensor:
    """A stand-in of `t`'s shape and type holding one element, for an input whose values the
    backward does not read (it needs the shape of its gradient)."""
    return t.new_zeros(()).expand(t.shape)


def _contiguous(a: np.ndarray) -> np.ndarray:
    # not np.ascontiguousarray: it turns a 0-d array (a scalar's gradient) into a 1-d one
    return a if a.flags.c_contiguous else a.copy(order="C")


def _threads(threads: int | None) -> int:
    """`threads=` when given (checked: 1 .. max_threads()), else PyTorch's intra-op thread count
    (`torch.set_num_threads`) capped at this rank's share of the cores under a distributed
    launcher (`threads.py`), at most max_threads()."""
    if threads is not None:
        return check_threads(threads)
    return min(default_threads(), max_threads())


def _schema_names(params: Sequence[TensorSig]) -> list[str]:
    """The inputs' names in the schemas: the kernel's, unless one is taken or a keyword."""
    taken = {*_GRAPH_ARGS, "threads", "saved", "wanted"}
    names = []
    for p in params:
        name = p.name
        while name in taken or keyword.iskeyword(name) or name.startswith("gout_"):
            name += "_"
        taken.add(name)
        names.append(name)
    return names


def _returns(n: int) -> str:
    return "Tensor" if n == 1 else f"({', '.join(['Tensor'] * n)})"


def _check_edge_index(edge_index: torch.Tensor) -> None:
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ArgumentError(
            f"edge_index must have shape (2, E) (row 0 sources, row 1 destinations), got {tuple(edge_index.shape)}"
        )
    if edge_index.dtype.is_floating_point or edge_index.dtype.is_complex or edge_index.dtype == torch.bool:
        raise ArgumentError(f"edge_index holds vertex ids: an integer tensor, got {edge_index.dtype}")


_CPU = torch.device("cpu")


def call_device(name: str, tensors: Sequence[torch.Tensor]) -> torch.device:
    """The one device a call's tensors (edge_index, inputs) are on, the CPU without any; a
    0-d CPU tensor (a scalar) may stand beside tensors on another device, as in torch."""
    if all(t.is_cpu for t in tensors):  # every eager CPU call: no device objects made
        return _CPU
    devices = {t.device for t in tensors if not (t.device.type == "cpu" and t.dim() == 0)}
    if not devices:
        return _CPU
    if len(devices) > 1:
        listed = ", ".join(sorted(str(d) for d in devices))
        raise ArgumentError(
            f"{name}: the tensors of a call (edge_index and the inputs) are on several devices ({listed}); "
            "gnnc runs a call on one device: move them with .to(device)"
        )
    return next(iter(devices))


#: The tensor types an eager call may take past the dispatcher (no subclass dispatches on them).
PLAIN = (torch.Tensor, torch.nn.Parameter)


def direct(args: Sequence[Any]) -> bool:
    """Whether an eager call may run the op's CPU implementation without the dispatcher, as
    the dispatcher itself would run it: its tensors are plain CPU tensors, no dispatch mode
    is active (a FakeTensorMode, a user's TorchDispatchMode) and no profiler records ops
    (it shows each call as its `gnnc::` op). Saves a small call a tenth of its cost."""
    if torch._C._len_torch_dispatch_stack() or torch._C._autograd._profiler_enabled():
        return False
    for a in args:
        if isinstance(a, torch.Tensor) and (type(a) not in PLAIN or not a.is_cpu):
            return False
    return True


@dataclass(frozen=True)
class CudaCall:
    """Where a CUDA call runs: its graph, element type, the device its results are
    allocated on, the GPU ordinal its PTX is loaded on, the stream, the architecture."""

    graph: Graph
    dtype: str
    device: torch.device
    ordinal: int
    stream: int | None
    arch: str


class KernelOps:
    """The custom ops of one kernel, their fake and CPU implementations, and its compiled variants."""

    def __init__(self, base: str, source: str, name: str, options: dict[str, Any], file: str):
        from gnnc.lang import parse_and_check
        from gnnc.lang.autodiff import gradient_program
        from gnnc.lang.signature import kernel_signature

        program = parse_and_check(source, file)
        try:
            kernel = program.kernel(name)
        except KeyError:
            raise CompileError(f"no kernel named {name} in {file}") from None
        self.base, self.source, self.name, self.options, self.file = base, source, name, options, file
        self.signature: KernelSignature = kernel_signature(kernel)
        self.params = self.signature.params
        #: the kernel reads relation types: its ops take edge_type and num_relations after the sizes
        self.relational = self.signature.relations or any(p.domain == "R" for p in self.params)
        self._lead = len(_GRAPH_ARGS) + (2 if self.relational else 0)
        self.results = self.signature.results
        #: Why the kernel has no gradient kernels, if it has none (raised by backward).
        self.grad_error: GnncError | None = None
        #: The intermediates `_forward` also returns, as its extra results.
        self.saved: tuple[TensorSig, ...] = ()
        try:
            grad = gradient_program(kernel)
            if not grad.kernels:
                raise CompileError(f"{name}: no input has a gradient kernel")
            if grad.saved:
                extra = kernel_signature(grad.checked.kernel(f"{name}__forward")).results
                self.saved = tuple(r for r in extra if r.name in grad.saved)
        except GnncError as exc:
            self.grad_error = exc
        self._lock = threading.Lock()
        self._forward_kernels: dict[str, Any] = {}
        self._gradient_kernels: dict[tuple[str, tuple[str, ...]], Any] = {}
        #: the names of the wanted inputs by mask (`_wanted_names`)
        self._names_of: dict[tuple[bool, ...], tuple[str, ...]] = {}
        #: the forward ops as autograd Functions for eager calls, plain and saving (`eager`)
        self._eager: list[Any] = [None, None]
        self.cuda = cuda.CudaVariants(source, name, options)
        self._register()

    # ------------------------------------------------------------ registration

    def _register(self) -> None:
        names = _schema_names(self.params)
        graph = "Tensor edge_index, SymInt num_src, SymInt num_dst"
        if self.relational:
            graph += ", Tensor edge_type, SymInt num_relations"
        inputs = "".join(f", Tensor {n}" for n in names)
        # no defaults: the dispatcher drops trailing arguments equal to their default
        self._define(self.base, f"({graph}{inputs}, int? threads) -> {_returns(len(self.results))}")
        self.forward = self._overload(self.base)
        self._implement(self.base, self.forward_impl, self._cuda_forward_impl, self._forward_fake)
        self.forward_saving: Any = None
        self.backward: Any = None
        if self.grad_error is None:
            if self.saved:
                n = len(self.results) + len(self.saved)
                self._define(f"{self.base}_forward", f"({graph}{inputs}, int? threads) -> {_returns(n)}")
                self.forward_saving = self._overload(f"{self.base}_forward")
                self._implement(f"{self.base}_forward", self.saving_impl, self._cuda_saving_impl, self._saving_fake)
            gouts = "".join(f", Tensor gout_{r.name}" for r in self.results)
            self._define(
                f"{self.base}_backward",
                f"({graph}{inputs}{gouts}, Tensor[] saved, bool[] wanted, int? threads) -> {_returns(len(self.params))}",
            )
            self.backward = self._overload(f"{self.base}_backward")
            self._implement(f"{self.base}_backward", self.backward_impl, self._cuda_backward_impl, self._backward_fake)
            torch.library.register_autograd(
                f"{NAMESPACE}::{self.base}_backward",
                self._no_double_backward,
                setup_context=lambda ctx, inputs, output: None,
                lib=_LIBRARY,
            )
        if self.params:
            for op, saving in ((self.base, False), (f"{self.base}_forward", True)):
                if saving and self.forward_saving is None:
                    continue
                torch.library.register_autograd(
                    f"{NAMESPACE}::{op}",
                    self._autograd_backward,
                    setup_context=self._setup_context_saving if saving else self._setup_context,
                    lib=_LIBRARY,
                )

    def _define(self, op: str, schema: str) -> None:
        _LIBRARY.define(f"{op}{schema}")

    def _overload(self, op: str) -> Any:
        return getattr(getattr(torch.ops, NAMESPACE), op).default

    def _implement(self, op: str, impl: Any, cuda_impl: Any, fake: Any) -> None:
        _LIBRARY.impl(op, impl, "CPU")
        _LIBRARY.impl(op, cuda_impl, "CUDA")
        torch.library.register_fake(f"{NAMESPACE}::{op}", fake, lib=_LIBRARY)

    # ------------------------------------------------------------------ shapes

    def _split(self, args: tuple) -> tuple[torch.Tensor, Any, Any, tuple[torch.Tensor, ...], tuple]:
        edge_index, num_src, num_dst = args[:3]
        n, lead = len(self.params), self._lead
        return edge_index, num_src, num_dst, tuple(args[lead : lead + n]), args[lead + n :]

    def _cpu_graph(self, args: tuple) -> Graph | CooGraph:
        """What a CPU call runs on: `_graph`, or a tensor's edges on its first use (`graphs.block_of`)."""
        if self.relational:
            return self._graph(args)
        edge_index, num_src, num_dst = args[:3]
        return graphs.block_of(edge_index, (int(num_src), int(num_dst)))

    def _graph(self, args: tuple) -> Graph:
        """The checked Graph of a call's graph arguments (converted once per tensor)."""
        edge_index, num_src, num_dst = args[:3]
        graph = graphs.graph_of(edge_index, (int(num_src), int(num_dst)))
        if self.relational:
            edge_type, num_relations = args[3:5]
            if edge_type.dim() != 1 or edge_type.shape[0] != edge_index.shape[1]:
                raise ArgumentError(
                    f"{self.name}: edge_type must have one relation type per edge ({edge_index.shape[1]}), "
                    f"got shape {tuple(edge_type.shape)}"
                )
            graph = graphs.typed_graph(graph, edge_type, int(num_relations))
        return graph

    def _fake_results(
        self, sigs: Sequence[TensorSig], edge_index: torch.Tensor, num_dst: Any, params: Sequence[torch.Tensor]
    ) -> list[torch.Tensor]:
        """Empty tensors shaped as the kernel's results for these inputs (rows: V = num_dst, E = edges)."""
        _check_edge_index(edge_index)
        dtype = _TORCH_DTYPES[dtype_name(params, self.signature.dtype)]
        dims: dict[str, Any] = {}
        for p, t in zip(self.params, params):
            lead = 1 if p.domain else 0
            if t.dim() != lead + len(p.shape):
                raise ArgumentError(
                    f"input '{p.name}' of {self.name}: expected {lead + len(p.shape)} axes {p.describe()}, "
                    f"got shape {tuple(t.shape)}"
                )
            for d, size in zip(p.shape, t.shape[lead:]):
                if isinstance(d, str):
                    dims.setdefault(d, size)
        rows = {"V": [num_dst], "E": [edge_index.shape[1]], None: []}
        return [
            edge_index.new_empty(
                [*rows[r.domain], *(dims[d] if isinstance(d, str) else d for d in r.shape)], dtype=dtype
            )
            for r in sigs
        ]

    @staticmethod
    def _packed(tensors: list[torch.Tensor]) -> Any:
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    def _forward_fake(self, *args: Any) -> Any:
        edge_index, _, num_dst, params, _ = self._split(args)
        return self._packed(self._fake_results(self.results, edge_index, num_dst, params))

    def _saving_fake(self, *args: Any) -> Any:
        edge_index, _, num_dst, params, _ = self._split(args)
        return self._packed(self._fake_results(self.results + self.saved, edge_index, num_dst, params))

    def _backward_fake(self, *args: Any) -> Any:
        edge_index, _, _, params, rest = self._split(args)
        _check_edge_index(edge_index)
        wanted = rest[len(self.results) + 1]
        # contiguous, as the CPU implementation returns them (inductor checks strides), whatever the input's
        return self._packed([t.new_empty(t.shape) if w else t.new_empty(0) for t, w in zip(params, wanted)])

    # --------------------------------------------------------- compiled kernels

    def forward_kernel(self, dtype: str) -> Any:
        """The kernel compiled for 'f32' or 'f64' (from the compile cache after the first time)."""
        kernel = self._forward_kernels.get(dtype)
        if kernel is None:
            with self._lock:
                if dtype not in self._forward_kernels:
                    source = variant_source(self.source, self.signature.dtype, dtype)
                    module = api.compile(source, kernels=[self.name], **self.options)
                    self._forward_kernels[dtype] = getattr(module, self.name)
                kernel = self._forward_kernels[dtype]
        return kernel

    def gradient(self, dtype: str, wanted: tuple[str, ...] | None = None) -> Any:
        """The gradient kernels (a `runtime.gradient.Gradient`), run only for the `wanted` inputs.

        All of them are compiled at once; a pruned copy leaves out the kernels
        that compute neither a wanted gradient nor an intermediate one needs.
        """
        if self.grad_error is not None:
            raise self.grad_error
        everything = tuple(p.name for p in self.params)
        wanted = everything if wanted is None else wanted
        grad = self._gradient_kernels.get((dtype, wanted))
        if grad is not None:
            return grad
        with self._lock:
            full = self._gradient_kernels.get((dtype, everything))
            if full is None:
                source = variant_source(self.source, self.signature.dtype, dtype)
                full = api.compile_grad(source, self.name, **self.options)
                self._gradient_kernels[(dtype, everything)] = full
            if wanted != everything:
                self._gradient_kernels[(dtype, wanted)] = full.restricted_to(wanted)
        return self._gradient_kernels[(dtype, wanted)]

    # --------------------------------------------------------- implementations

    def _call_arrays(self, args: tuple, kept: bool = False) -> tuple[Any, str, list[np.ndarray], int, tuple]:
        edge_index, num_src, num_dst, params, rest = self._split(args)
        call_device(self.name, [edge_index, *params])
        graph = self._cpu_graph(args)
        dtype = dtype_name(params, self.signature.dtype)
        convert = _kept_array if kept else _array
        return graph, dtype, [convert(t) for t in params], _threads(rest[-1] if rest else None), rest

    def _result_tensors(self, out: Any, sigs: Sequence[TensorSig]) -> list[torch.Tensor]:
        named = out if isinstance(out, dict) else {self.results[0].name: out}
        return [torch.from_numpy(named[r.name]) for r in sigs]

    def forward_impl(self, *args: Any) -> Any:
        """The forward op's CPU implementation: the dispatcher's, and eager calls' (`direct`)."""
        return self._forward_on(args)[0]

    def _forward_on(self, args: tuple) -> tuple[Any, Graph, str]:
        """`forward_impl`'s result, the Graph it ran on and the element type (an eager call's
        backward takes both)."""
        graph, dtype, arrays, threads, _ = self._call_arrays(args)
        out = self.forward_kernel(dtype)(graph, *arrays, threads=threads)
        return self._packed(self._result_tensors(out, self.results)), graph, dtype

    def saving_impl(self, *args: Any) -> Any:
        """The saving forward op's CPU implementation (results, then what the gradient reuses)."""
        return self._saving_on(args)[0]

    def _saving_on(self, args: tuple) -> tuple[Any, Graph, str]:
        graph, dtype, arrays, threads, _ = self._call_arrays(args)
        out, saved = self.gradient(dtype).forward(graph, *arrays, threads=threads)
        tensors = self._result_tensors(out, self.results)
        return self._packed(tensors + [torch.from_numpy(saved[s.name]) for s in self.saved]), graph, dtype

    def backward_impl(self, *args: Any) -> Any:
        """The backward op's CPU implementation: the wanted inputs' gradients, empty tensors else."""
        graph, dtype, arrays, threads, rest = self._call_arrays(args, kept=True)
        n = len(self.results)
        gouts, saved, wanted = rest[:n], rest[n], rest[n + 1]
        params = self._split(args)[3]
        return self._packed(self._gradients(graph, dtype, threads, params, arrays, gouts, saved, wanted))

    def _wanted_names(self, wanted: Sequence[bool]) -> tuple[str, ...]:
        """The names of the `wanted` inputs (made once per mask: every backward asks)."""
        key = tuple(bool(w) for w in wanted)
        names = self._names_of.get(key)
        if names is None:
            names = self._names_of[key] = tuple(p.name for p, w in zip(self.params, key) if w)
        return names

    def _gradients(
        self,
        graph: Graph,
        dtype: str,
        threads: int,
        params: Sequence[torch.Tensor],
        arrays: Sequence[np.ndarray],
        gouts: Sequence[torch.Tensor],
        saved: Sequence[torch.Tensor],
        wanted: Sequence[bool],
    ) -> list[torch.Tensor]:
        """The wanted inputs' gradients by the CPU gradient kernels on `graph` (`arrays`: the
        inputs as the kernels take them), empty tensors for the others."""
        names = self._wanted_names(wanted)
        if not names:
            return [t.new_empty(0) for t in params]
        gout: Any
        if len(self.results) == 1:
            gout = _array(gouts[0])
        else:
            gout = {r.name: _array(g) for r, g in zip(self.results, gouts)}
        kept = {s.name: _array(t) for s, t in zip(self.saved, saved)} if saved else None
        grads = self.gradient(dtype, names)(graph, *arrays, gout=gout, saved=kept, threads=threads)
        return [
            torch.from_numpy(_contiguous(grads[p.name])) if w else t.new_empty(0)
            for p, t, w in zip(self.params, params, wanted)
        ]

    # ---------------------------------------------------- CUDA implementations

    def _cuda_call(self, args: tuple) -> tuple[CudaCall, tuple[torch.Tensor, ...], tuple]:
        """Where a call dispatched to CUDA runs (checks the devices; builds or fetches the graph)."""
        cuda.require_torch_cuda()
        edge_index, num_src, num_dst, params, rest = self._split(args)
        device = call_device(self.name, [edge_index, *params])
        if device.type != "cuda":  # pragma: no cover - the dispatcher sends CUDA calls only
            raise ArgumentError(f"{self.name}: the CUDA implementation got tensors on {device}")
        graph = self._graph(args)  # a device-to-host copy, once
        call = CudaCall(
            graph,
            dtype_name(params, self.signature.dtype),
            device,
            device.index if device.index is not None else torch.cuda.current_device(),
            torch.cuda.current_stream(device).cuda_stream,
            cuda.arch_for(torch.cuda.get_device_capability(device)),
        )
        return call, params, rest

    def _cuda_forward_impl(self, *args: Any) -> Any:
        call, params, _ = self._cuda_call(args)
        return self._packed(self.cuda_forward(call, params))

    def _cuda_saving_impl(self, *args: Any) -> Any:
        call, params, _ = self._cuda_call(args)
        return self._packed(self.cuda_saving(call, params))

    def _cuda_backward_impl(self, *args: Any) -> Any:
        call, params, rest = self._cuda_call(args)
        n = len(self.results)
        return self._packed(self.cuda_backward(call, params, rest[:n], rest[n], rest[n + 1]))

    def _named_results(self, out: Any, sigs: Sequence[TensorSig]) -> list[torch.Tensor]:
        named = out if isinstance(out, dict) else {self.results[0].name: out}
        return [named[r.name] for r in sigs]

    def cuda_forward(self, call: CudaCall, params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The results of the forward kernel's PTX on `call`'s GPU and stream, the inputs borrowed."""
        source = variant_source(self.source, self.signature.dtype, call.dtype)
        kernel = self.cuda.forward_kernel(source, call.dtype, call.ordinal, call.arch)
        arrays = cuda.TorchArrays(call.device, call.stream)
        out = arrays.run(kernel, call.graph, {p.name: t for p, t in zip(self.params, params)}, None)
        return self._named_results(out, self.results)

    def _cuda_gradient(self, call: CudaCall, wanted: tuple[str, ...]) -> Any:
        if self.grad_error is not None:
            raise self.grad_error
        source = variant_source(self.source, self.signature.dtype, call.dtype)
        names = [p.name for p in self.params]
        grad = self.cuda.gradient(source, call.dtype, call.ordinal, call.arch, names, wanted)
        return grad.with_arrays(cuda.TorchArrays(call.device, call.stream))

    def cuda_saving(self, call: CudaCall, params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The forward results, then what the gradient reuses, computed by the PTX."""
        grad = self._cuda_gradient(call, tuple(p.name for p in self.params))
        out, saved = grad.forward(call.graph, *params)
        return self._named_results(out, self.results) + [saved[s.name] for s in self.saved]

    def cuda_backward(
        self,
        call: CudaCall,
        params: Sequence[torch.Tensor],
        gouts: Sequence[torch.Tensor],
        saved: Sequence[torch.Tensor],
        wanted: Sequence[bool],
    ) -> list[torch.Tensor]:
        """The gradients of the `wanted` inputs by the PTX gradient kernels (empty tensors for the others)."""
        names = tuple(p.name for p, w in zip(self.params, wanted) if w)
        if not names:
            return [t.new_empty(0) for t in params]
        gout: Any = {r.name: g.contiguous() for r, g in zip(self.results, gouts)}
        if len(self.results) == 1:
            gout = gout[self.results[0].name]
        kept = {s.name: t for s, t in zip(self.saved, saved)} if saved else None
        grads = self._cuda_gradient(call, names)(call.graph, *params, gout=gout, saved=kept)
        return [grads[p.name].contiguous() if w else t.new_empty(0) for p, t, w in zip(self.params, params, wanted)]

    # ---------------------------------------------------------------- autograd

    def _setup(self, ctx: Any, inputs: tuple, output: Any, saving: bool) -> None:
        edge_index, num_src, num_dst, params, rest = self._split(inputs)
        outputs = (output,) if isinstance(output, torch.Tensor) else tuple(output)
        saved = outputs[len(self.results) :] if saving else ()
        if saved:
            ctx.mark_non_differentiable(*saved)
        # the graph's tensors first: edge_index, and edge_type for a kernel reading relations
        graph_tensors = (edge_index, inputs[3]) if self.relational else (edge_index,)
        ctx.save_for_backward(*graph_tensors, *self._kept(ctx, inputs, params), *saved)
        sizes = (num_src, num_dst, inputs[4]) if self.relational else (num_src, num_dst)
        ctx.gnnc_call = (sizes, rest[0] if rest else None)
        ctx.gnnc_results = [(o.shape, o.dtype, o.device) for o in outputs[: len(self.results)]]

    def _kept(self, ctx: Any, inputs: tuple, params: tuple) -> tuple:
        """The inputs the backward gets: those its kernels read and small ones as they are,
        for the others `_absent` stand-ins, so that a training step keeps no input only the
        forward read (GCNConv's projected features: a [V, F] tensor). CPU calls, eager or
        traced (under torch.compile the partitioner then saves no such input either); CUDA
        calls keep their inputs (the CUDA runtime takes contiguous tensors: a stand-in would be
        made a full one on the device)."""
        large = [t.numel() * t.element_size() >= ABSENT_MIN_BYTES for t in params]
        if not any(large) or self.backward is None or any(t.device.type != "cpu" for t in params):
            return params
        n, lead = len(self.params), self._lead
        wanted = tuple(p.name for p, w in zip(self.params, ctx.needs_input_grad[lead : lead + n]) if w)
        reads = self.gradient(dtype_name(params, self.signature.dtype), wanted).reads() if wanted else None
        if reads is None:
            return params
        return tuple(_absent(t) if big and p.name not in reads else t for p, t, big in zip(self.params, params, large))

    def _setup_context(self, ctx: Any, inputs: tuple, output: Any) -> None:
        self._setup(ctx, inputs, output, saving=False)

    def _setup_context_saving(self, ctx: Any, inputs: tuple, output: Any) -> None:
        self._setup(ctx, inputs, output, saving=True)

    def _autograd_backward(self, ctx: Any, *grads: Any) -> tuple:
        n, lead = len(self.params), self._lead
        wanted = [bool(w) for w in ctx.needs_input_grad[lead : lead + n]]
        nothing = (None,) * (lead + 1 + n)
        if not any(wanted):
            return nothing
        if self.backward is None:
            raise self.grad_error or CompileError(f"{self.name}: no gradient kernels")
        tensors = ctx.saved_tensors
        k = 2 if self.relational else 1
        graph_tensors, params, saved = tensors[:k], tensors[k : k + n], tensors[k + n :]
        sizes, threads = ctx.gnnc_call
        # edge_index, num_src, num_dst (, edge_type, num_relations): the forward op's graph arguments
        graph_args = (graph_tensors[0], *sizes[:2], *((graph_tensors[1], sizes[2]) if self.relational else ()))
        # a result the loss does not use may come as None: its gradient is zero
        gouts = [
            g if g is not None else torch.zeros(shape, dtype=dtype, device=device)
            for g, (shape, dtype, device) in zip(grads, ctx.gnnc_results)
        ]
        arguments = (*graph_args, *params, *gouts, list(saved), wanted, threads)
        ran = getattr(ctx, "gnnc_ran", None)  # (Graph, dtype) where an eager forward ran the CPU code
        if torch.is_grad_enabled():  # create_graph=True: the backward op's autograd raises the clear error
            out = self.backward(*arguments)
        elif ran and direct((*params, *gouts)):
            # the gradient kernels on that forward's Graph, in its type, the saved tensors as they are:
            # not the op's implementation, which would look at devices, types and the graph again
            graph, dtype = ran
            arrays = [_kept_array(t) for t in params]
            out = self._packed(self._gradients(graph, dtype, _threads(threads), params, arrays, gouts, saved, wanted))
        elif direct((*graph_args, *params, *gouts)):
            out = self.backward_impl(*arguments)
        else:
            with torch._C._AutoDispatchBelowAutograd():  # as torch's own wrapper would, without its Python
                out = self.backward(*arguments)
        out = (out,) if n == 1 else out
        return (*(None,) * lead, *(g if w else None for g, w in zip(out, wanted)), None)

    def eager(self, saving: bool) -> Any:
        """The forward op (`saving`: the one that also returns what the gradient reuses) as an
        `autograd.Function`, for eager calls that need a gradient: the same op below autograd,
        the same context and backward as the op's registered autograd, without the Python
        layers torch wraps a registered autograd in (half a small call's cost). Traced and
        compiled calls record the op itself."""
        made = self._eager[saving]
        if made is None:
            ops = self

            class Eager(torch.autograd.Function):
                @staticmethod
                def forward(ctx: Any, *inputs: Any) -> Any:
                    ctx.set_materialize_grads(False)  # a result the loss does not use comes as None
                    ran = None
                    if direct(inputs):
                        output, *ran = (ops._saving_on if saving else ops._forward_on)(inputs)
                    else:
                        with torch._C._AutoDispatchBelowAutograd():
                            output = (ops.forward_saving if saving else ops.forward)(*inputs)
                    ops._setup(ctx, inputs, output, saving)
                    ctx.gnnc_ran = ran  # its backward runs on the same graph, in the same type
                    return output

                @staticmethod
                def backward(ctx: Any, *grads: Any) -> Any:
                    return ops._autograd_backward(ctx, *grads)

            Eager.__name__ = Eager.__qualname__ = f"{self.base}{'_forward' if saving else ''}"
            made = self._eager[saving] = Eager
        return made

    def _no_double_backward(self, ctx: Any, *grads: Any) -> tuple:
        raise CompileError(
            f"{self.name}: double backward (differentiating gnnc's gradient kernels, as "
            "create_graph=True and a second backward do) is not supported: gnnc generates "
            "first-order gradient kernels only"
        )


__all__ = [
    "DTYPES",
    "NAMESPACE",
    "PLAIN",
    "CudaCall",
    "KernelOps",
    "call_device",
    "direct",
    "dtype_name",
    "kernel_ops",
    "op_name",
    "variant_source",
]
