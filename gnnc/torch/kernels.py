"""`gnnc.torch.kernel(path, name)`: a kernel as a callable on tensors, over its custom ops.

The object binds a call's arguments (inputs by position or keyword, Python
numbers and one-element tensors for scalar parameters), checks dtypes and
devices, turns the graph into op arguments (`edge_index`, `num_src`,
`num_dst`) and calls the op (`ops.py`). It is target-neutral: CPU tensors
run the kernel's .so, CUDA tensors its PTX, through the same op. What it does before the op is plain
tensor code, so torch.compile traces through it without a break; only a
`gnnc.Graph` argument, turned into its edge_index, is left out of the graph.

V for a square graph is `num_vertices=`, else the rows of the first vertex
input (as PyG: x may have more rows than the largest id needs), else, in
eager mode only, the largest id + 1. The object is kept as its source, name
and options: it pickles, deep-copies and `torch.save`s with a module that
holds it, and a loaded copy registers the same ops and finds its compiled
kernels in the compile cache.
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from gnnc.autotune.threads import check_threads
from gnnc.errors import ArgumentError
from gnnc.graph.graph import Graph
from gnnc.runtime.signature import NO_GRAPH, take_graph
from gnnc.torch import cuda, graphs, ops
from gnnc.torch.ops import PLAIN, direct
from gnnc.torch.untraced import untraced

#: Whether jit.trace is recording (public, but missing from torch.jit's __all__).
_jit_tracing = torch.jit.is_tracing  # type: ignore[attr-defined]

#: gnnc.compile's options a kernel may carry. The target follows the tensors'
#: device (target="cpu" is accepted and means the same); `cpu` and `schedule`
#: apply to the CPU code only (the PTX follows the source's `for cuda` schedule).
OPTIONS = ("target", "cpu", "opt_level", "schedule", "disable_passes", "fusion")


def _is_scalar(p: Any) -> bool:
    return p.domain is None and not p.shape


def _size(value: Any, what: str) -> Any:
    """A vertex count: an int, or a SymInt while torch.compile traces with dynamic shapes."""
    if isinstance(value, torch.SymInt):
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ArgumentError(f"{what} must be a non-negative integer, got {value!r}")
    return value


class Kernel:
    """Kernel `name` of a .gnn file or source text as a PyTorch op with autograd.

    `kernel(graph, *inputs, num_vertices=None, size=None, threads=None, edge_type=None,
    num_relations=None, **named_inputs)`: `graph` is a 2 x E edge_index tensor or a
    `gnnc.Graph`; `size=(num_src, num_dst)` makes a bipartite block (PyG's `size=`);
    `threads` defaults to `torch.get_num_threads()`. A kernel reading relation types
    (`rel(e)`) takes them as `edge_type` (one integer per edge, as PyG's RGCNConv) with
    an edge_index, or from a typed `gnnc.Graph`; `num_relations` defaults to the rows of
    its first relation tensor input (else, in eager mode, the largest type + 1).
    Returns the result, or a named tuple of the results in signature order for a kernel
    with several.
    """

    def __init__(self, source_or_path: Any, name: str, **options: Any):
        from gnnc.driver import compiler

        source, file = compiler.read_source(source_or_path)
        self._init(source, name, options, file)

    def _init(self, source: str, name: str, options: dict[str, Any], file: str) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ArgumentError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: use {OPTIONS}")
        target = options.get("target", "cpu")
        if target != "cpu":
            raise ArgumentError(
                f"gnnc.torch kernels take no target={target!r}: the tensors' device picks it "
                "(CPU tensors run the CPU code, CUDA tensors the PTX)"
            )
        self.source, self.name, self.options, self.file = source, name, dict(options), file
        self.ops = ops.kernel_ops(source, name, self.options, file)
        #: The forward op, `torch.ops.gnnc.NAME_DIGEST.default`.
        self.op = self.ops.forward
        self.params = [p.name for p in self.ops.params]
        self.results = [r.name for r in self.ops.results]
        self._listing = f"{name} takes {len(self.params)} inputs ({', '.join(self.params)})"
        self._scalars = [_is_scalar(p) for p in self.ops.params]
        self._any_scalar = any(self._scalars)
        self._rows_from = next((i for i, p in enumerate(self.ops.params) if p.domain == "V"), None)
        self._result_type = (
            collections.namedtuple(f"{name}_results", self.results, rename=True) if len(self.results) > 1 else None
        )

    # ------------------------------------------------------------ persistence

    def __reduce__(self) -> tuple:
        # source, name and options only: nothing compiled (ctypes) is pickled
        return _restore, (self.source, self.name, self.options, self.file)

    def __copy__(self) -> Kernel:
        return self

    def __deepcopy__(self, memo: dict) -> Kernel:
        return self  # immutable: its state is its source, name and options

    def __repr__(self) -> str:
        return f"<gnnc.torch kernel {self.name}(graph, {', '.join(self.params)}): torch.ops.gnnc.{self.ops.base}>"

    # ------------------------------------------------------------------- calls

    def __call__(
        self,
        graph: Any = NO_GRAPH,
        /,
        *inputs: Any,
        num_vertices: int | None = None,
        size: Any = None,
        threads: int | None = None,
        edge_type: Any = None,
        num_relations: int | None = None,
        **named: Any,
    ) -> Any:
        """The result, or a named tuple of the results in signature order for a kernel with several."""
        graph = take_graph(graph, named)
        if threads is not None:
            threads = check_threads(threads)  # 1 .. max_threads(), before any native code
        tensors = self._tensors(self._bind(inputs, named), graph)
        edge_index, num_src, num_dst = self._graph(graph, num_vertices, size, tensors)
        relations = self._relations(graph, edge_type, num_relations, tensors, edge_index)
        graph_args = (edge_index, num_src, num_dst, *relations)
        n = len(self.results)
        ops = self.ops
        keeps = _keeps_for_backward(tensors)
        if keeps and torch._C._are_functorch_transforms_active() and not torch.compiler.is_compiling():
            # torch's register_autograd gives its Function no setup_context, which functorch needs:
            # its own error names neither the op nor a way out
            raise ArgumentError(
                f"{self.name}: torch.func's gradient transforms (grad, jacrev, jvp, ...) cannot "
                "differentiate a gnnc op; use torch.autograd (loss.backward(), torch.autograd.grad). "
                "vmap runs, and so does torch.func.grad where no input of a gnnc op needs a gradient "
                "(a first layer's features)"
            )
        # the variant that also returns what the gradient would recompute (softmax weights, argmax)
        saving = keeps and ops.forward_saving is not None
        if eager():
            if keeps:
                out = ops.eager(saving).apply(*graph_args, *tensors, threads)
            elif direct((*graph_args, *tensors)):  # nothing to differentiate: the CPU code itself
                out = ops.forward_impl(*graph_args, *tensors, threads)
            else:  # nothing to differentiate: the op below autograd
                with torch._C._AutoDispatchBelowAutograd():
                    out = ops.forward(*graph_args, *tensors, threads)
        elif saving:
            out = ops.forward_saving(*graph_args, *tensors, threads)
        else:
            out = ops.forward(*graph_args, *tensors, threads)
        if saving:
            out = out[:n]
            return out[0] if n == 1 else self._result_type(*out)  # type: ignore[misc]
        return out if n == 1 else self._result_type(*out)  # type: ignore[misc]

    def _relations(
        self, graph: Any, edge_type: Any, num_relations: Any, tensors: list[torch.Tensor], edge_index: torch.Tensor
    ) -> tuple:
        """(edge_type, num_relations) for a kernel that reads relation types, else ()."""
        if not self.ops.relational:
            if edge_type is not None or num_relations is not None:
                raise ArgumentError(f"{self.name} does not read relation types: it takes no edge_type or num_relations")
            return ()
        if isinstance(graph, Graph):
            if edge_type is not None or num_relations is not None:
                raise ArgumentError(f"{self.name}: a gnnc.Graph brings its own edge types; pass no edge_type")
            if graph.edge_type is None:
                raise ArgumentError(
                    f"{self.name} reads the edges' relation types (rel(e)), but the graph has none: build it "
                    "with gnnc.Graph(edge_index, edge_type=..., num_relations=...)"
                )
            return graphs.edge_type_of(graph, edge_index.device), graph.num_relations
        if not isinstance(edge_type, torch.Tensor):
            raise ArgumentError(
                f"{self.name} reads the edges' relation types (rel(e)): pass edge_type= (one integer per edge)"
            )
        _check_tensor_device(edge_type, f"edge_type of {self.name}")
        if num_relations is not None:
            return edge_type, _size(num_relations, "num_relations")
        rows = next((t.shape[0] for p, t in zip(self.ops.params, tensors) if p.domain == "R"), None)
        if rows is not None:
            return edge_type, rows
        if torch.compiler.is_compiling():
            raise ArgumentError(
                f"{self.name} has no relation tensor input to count the relations by: pass num_relations="
            )
        return edge_type, int(edge_type.max()) + 1 if edge_type.numel() else 0

    def _bind(self, inputs: tuple, named: dict[str, Any]) -> list[Any]:
        listing = self._listing
        if len(inputs) > len(self.params):
            raise ArgumentError(f"{listing}, got {len(inputs)}")
        bound = dict(zip(self.params, inputs))
        for key in named:
            if key not in self.params:
                raise ArgumentError(f"{listing}: unknown input '{key}'")
            if key in bound:
                raise ArgumentError(f"{self.name}: input '{key}' given both by position and by name")
        bound.update(named)
        missing = [p for p in self.params if p not in bound]
        if missing:
            raise ArgumentError(f"{listing}, got {len(bound)}: missing {', '.join(missing)}")
        return [bound[p] for p in self.params]

    def _tensors(self, values: list[Any], graph: Any) -> list[torch.Tensor]:
        """The inputs as tensors of one dtype; scalar parameters as 0-d tensors (a number
        on the inputs' device, so that a CUDA call holds no CPU tensor)."""
        if _plain_cpu_inputs(values, graph, self._any_scalar):
            return values
        values = _autocast(values)
        for p, v in zip(self.params, values):
            if isinstance(v, torch.Tensor):
                _check_tensor(v, f"input '{p}' of {self.name}")
        dtype = ops.dtype_name([v for v in values if isinstance(v, torch.Tensor)], self.ops.signature.dtype)
        torch_dtype = torch.float32 if dtype == "f32" else torch.float64
        device = self._device(values, graph)
        if device.type == "cuda":
            cuda.require_torch_cuda()
        tensors = []
        for p, v, scalar in zip(self.params, values, self._scalars):
            if scalar:
                v = _scalar(v, f"input '{p}' of {self.name}", torch_dtype, device)
            elif not isinstance(v, torch.Tensor):
                raise ArgumentError(f"input '{p}' of {self.name} must be a tensor, got {type(v).__name__}")
            tensors.append(v)
        return tensors

    def _device(self, values: list[Any], graph: Any) -> torch.device:
        """The one device of the call's tensors (edge_index and the inputs; a 0-d CPU tensor
        may stand beside CUDA ones), checked before anything is made on it."""
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        return ops.call_device(self.name, [graph, *tensors] if isinstance(graph, torch.Tensor) else tensors)

    def _graph(self, graph: Any, num_vertices: Any, size: Any, tensors: list[torch.Tensor]) -> tuple:
        """(edge_index, num_src, num_dst) for the op."""
        if isinstance(graph, Graph):
            device = next((t.device for t in tensors if t.dim()), tensors[0].device if tensors else torch.device("cpu"))
            return _graph_arguments(graph, num_vertices, size, device)
        if not isinstance(graph, torch.Tensor):
            raise ArgumentError(f"expected a gnnc.Graph or an edge_index tensor, got {type(graph).__name__}")
        if graph.layout != torch.strided:
            raise ArgumentError(
                f"{self.name}: a sparse adjacency ({graph.layout}) is not supported yet: pass edge_index"
            )
        if graph.device.type not in _DEVICES:
            raise ArgumentError(_device_message(f"edge_index of {self.name}", graph))
        if size is not None:
            if num_vertices is not None:
                raise ArgumentError("give num_vertices= (a square graph) or size=(num_src, num_dst), not both")
            if not isinstance(size, (tuple, list, torch.Size)) or len(size) != 2:
                raise ArgumentError(f"size must be a pair (num_src, num_dst), got {size!r}")
            return graph, _size(size[0], "size[0] (num_src)"), _size(size[1], "size[1] (num_dst)")
        if num_vertices is not None:
            n = _size(num_vertices, "num_vertices")
        elif self._rows_from is not None:
            n = tensors[self._rows_from].shape[0]
        elif torch.compiler.is_compiling():
            raise ArgumentError(
                f"{self.name} has no vertex input to count the vertices by: pass num_vertices= "
                "(or size=) to call it under torch.compile or export"
            )
        else:
            n = graphs.as_graph(graph).num_vertices
        return graph, n, n

    # ------------------------------------------------- compiled kernels (numpy)

    def forward_kernel(self, dtype: str) -> Any:
        """The compiled kernel for 'f32' or 'f64', called on numpy arrays."""
        return self.ops.forward_kernel(dtype)

    def gradient(self, dtype: str) -> Any:
        """The compiled gradient kernels for 'f32' or 'f64' (a `gnnc.runtime.gradient.Gradient`)."""
        return self.ops.gradient(dtype)


@untraced("a gnnc.Graph is converted to its edge_index outside the graph: pass edge_index to torch.compile")
def _graph_arguments(graph: Graph, num_vertices: Any, size: Any, device: torch.device) -> tuple:
    """A Graph's op arguments (its sizes, and a handle of it or its edge_index on the inputs' device).
    Not traced: a compiled function that gets a Graph breaks the graph here, as it cannot be an input.

    An eager CPU call gets a handle (`graphs.handle_of`): no edge_index is made. Anything that may
    record the call (a trace, a functorch transform) gets the edges themselves, as the handle's
    values are not the edges and a recording would keep the values alone."""
    graphs.as_graph(graph, num_vertices, size)  # checks that they agree
    if device.type == "cpu" and eager():
        return graphs.handle_of(graph), graph.num_src, graph.num_dst
    return graphs.edge_index_of(graph, device), graph.num_src, graph.num_dst


def eager() -> bool:
    """Whether a call runs eagerly, outside every tracer and transform that records ops
    (torch.compile, export, jit.trace, functorch's grad and vmap): it may then take
    `KernelOps.eager`'s autograd Function, or the op below autograd."""
    return not (torch.compiler.is_compiling() or _jit_tracing() or torch._C._are_functorch_transforms_active())


def _plain_cpu_inputs(values: list[Any], graph: Any, any_scalar: bool) -> bool:
    """Whether a call's inputs pass `Kernel._tensors` as they are, told at a glance: a
    kernel without scalar parameters, every input a plain CPU tensor of the first one's
    float type (autocast casts half precision only), the graph a CPU tensor or a Graph.
    Anything else takes the checks, which also name what is wrong."""
    if any_scalar or not values or not (isinstance(graph, Graph) or (type(graph) in PLAIN and graph.is_cpu)):
        return False
    dtype = values[0].dtype if type(values[0]) in PLAIN else None
    if dtype not in ops.DTYPES:
        return False
    return all(type(v) in PLAIN and v.dtype is dtype and v.is_cpu for v in values)


def _keeps_for_backward(tensors: list[torch.Tensor]) -> bool:
    """Whether the call runs the forward variant that also keeps what the gradient reuses:
    in eager mode and under torch.compile when an input needs a gradient. A trace
    (jit.trace, export) records the plain op, whatever the grad mode (jit.trace's
    check runs again under no_grad); its backward recomputes those values."""
    if _jit_tracing() or torch.compiler.is_exporting():
        return False
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


#: Devices a call's tensors may be on (meta: tracing with fake tensors).
_DEVICES = ("cpu", "cuda", "meta")


def _device_message(what: str, t: torch.Tensor) -> str:
    return f"{what} is on {t.device}: gnnc.torch runs CPU and CUDA tensors; move it with .cpu() or .cuda()"


def _check_tensor_device(t: torch.Tensor, what: str) -> None:
    if t.device.type not in _DEVICES:
        raise ArgumentError(_device_message(what, t))


#: What autocast casts up for a gnnc op (`_autocast`).
_HALF = (torch.float16, torch.bfloat16)


def autocast_input(t: torch.Tensor) -> torch.Tensor:
    """t as float32 where it is float16 / bfloat16 and torch.autocast is enabled for its device,
    else t: gnnc's kernels compute in float32 (or float64), so under autocast a gnnc op is one of
    its float32 ops, as torch's sums and softmax are (torch's fp32 policy: float64 stays float64).
    Autocast's own lower-precision ops (Linear, matmul) produce such inputs; the cast is
    differentiable, so their gradients come back in the input's dtype. Outside autocast, half
    precision is refused (`_check_tensor`)."""
    if t.dtype in _HALF and t.device.type in ("cpu", "cuda") and torch.is_autocast_enabled(t.device.type):
        return t.float()
    return t


def _autocast(values: list[Any]) -> list[Any]:
    """The inputs, each tensor as `autocast_input` takes it."""
    return [autocast_input(v) if isinstance(v, torch.Tensor) else v for v in values]


def _check_tensor(t: torch.Tensor, what: str) -> None:
    if t.device.type not in _DEVICES:
        raise ArgumentError(_device_message(what, t))
    if t.dtype not in ops.DTYPES:
        hint = (
            " (half precision is not supported yet, on CPU or CUDA; under torch.autocast gnnc ops take"
            " it and compute in float32)"
            if t.dtype in _HALF
            else ""
        )
        raise ArgumentError(f"{what} is {t.dtype}: gnnc kernels take float32 or float64 tensors{hint}")


def _scalar(value: Any, what: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A scalar parameter as a 0-d tensor: a Python number, or a 0-d or one-element 1-d tensor."""
    if isinstance(value, torch.Tensor):
        # a traced shape is a tensor: jit.trace would warn about the comparison (reshape still checks)
        if value.dim() > 1 or (value.dim() == 1 and not _jit_tracing() and value.shape[0] != 1):
            raise ArgumentError(f"{what} is a scalar: expected a 0-d or [1]-shaped tensor, got {tuple(value.shape)}")
        return value.reshape(())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentError(f"{what} is a scalar: expected a number or a tensor, got {type(value).__name__}")
    # a factory, not torch.tensor(): made on the device, no host copy first
    return torch.full((), value, dtype=dtype, device=device)


def _restore(source: str, name: str, options: dict[str, Any], file: str) -> Kernel:
    """A pickled Kernel, from its state: the ops are registered again, nothing is compiled yet."""
    kernel = Kernel.__new__(Kernel)
    kernel._init(source, name, options, file)
    return kernel


def kernel(source_or_path: Any, name: str, **options: Any) -> Kernel:
    """Kernel `name` of a .gnn file or source text as a PyTorch op (see `Kernel`)."""
    return Kernel(source_or_path, name, **options)


__all__ = ["Kernel", "autocast_input", "eager", "kernel"]
