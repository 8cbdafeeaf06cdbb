"""PyTorch integration (`pip install gnnc[torch]`): compiled kernels as autograd ops.

    conv = gnnc.torch.kernel("examples/gcn.gnn", "gcn")
    out = conv(graph, x, w)          # graph: gnnc.Graph or a 2 x E edge_index tensor
                                     # (a tuple of tensors for a kernel with several results)
    out = conv(edge_index, x, w, size=(num_src, num_dst))   # a bipartite block, as PyG's size=
    out.sum().backward()             # gradient kernels, generated and compiled on first use

Tensors cross into the kernels without copies (CPU tensors share memory with
the numpy views the runtime reads); non-contiguous ones (incoming gradients
often are) are made contiguous first. float64 inputs run an f64 variant of the
kernel, so `torch.autograd.gradcheck` works. An edge_index tensor is turned
into a `gnnc.Graph` once and cached while the tensor lives. When an input
needs a gradient, the forward pass runs the gradient's `NAME__forward`
variant, which also returns what the backward pass would otherwise
recompute (a softmax's weights, a max's winning edge ids).
"""

from __future__ import annotations

import re
import weakref
from typing import Any

import numpy as np
import torch

import gnnc
from gnnc.errors import ArgumentError, CompileError

# id(edge_index) -> (weak reference to it, its Graph). Tensors compare elementwise,
# so a WeakKeyDictionary cannot hold them; the weak reference guards against id reuse.
_GRAPHS: dict[int, tuple[weakref.ref, gnnc.Graph]] = {}


def as_graph(graph: Any, num_vertices: int | None = None, size: Any = None) -> gnnc.Graph:
    """A `gnnc.Graph` for a Graph or an edge_index tensor (converted once per tensor).

    `size=(num_src, num_dst)` makes a bipartite graph (PyG's `size`, DGL's
    blocks); `num_vertices=n` a square one of n vertices.
    """
    if isinstance(graph, gnnc.Graph):
        if size is not None and (graph.num_src, graph.num_dst) != tuple(int(n) for n in size):
            raise ArgumentError(
                f"the graph has (num_src, num_dst) = {(graph.num_src, graph.num_dst)}, not size={tuple(size)}"
            )
        return graph
    if isinstance(graph, torch.Tensor):
        entry = _GRAPHS.get(id(graph))
        cached = entry[1] if entry is not None and entry[0]() is graph else None
        if size is not None:
            size = tuple(int(n) for n in size)
        stale = cached is not None and (
            (num_vertices is not None and (cached.num_src, cached.num_dst) != (num_vertices, num_vertices))
            or (size is not None and (cached.num_src, cached.num_dst) != size)
            or (num_vertices is None and size is None and cached.bipartite)
        )
        if cached is None or stale:
            cached = gnnc.Graph.from_edge_index(graph.detach().cpu(), num_vertices, shape=size)
            key = id(graph)
            _GRAPHS[key] = (weakref.ref(graph, lambda _: _GRAPHS.pop(key, None)), cached)
        return cached
    raise ArgumentError(f"expected a gnnc.Graph or an edge_index tensor, got {type(graph).__name__}")


def _numpy(t: torch.Tensor) -> np.ndarray:
    if t.device.type != "cpu":
        raise ArgumentError(f"gnnc.torch runs on CPU tensors; got one on {t.device}")
    return t.detach().contiguous().numpy()


class Kernel:
    """A compiled kernel and its gradient kernels, callable on tensors with autograd."""

    def __init__(self, source_or_path: Any, name: str, **options: Any):
        from gnnc.driver import compiler
        from gnnc.lang import parse_and_check

        source, self.file = compiler.read_source(source_or_path)
        program = parse_and_check(source, self.file)
        try:
            kernel = program.kernel(name)
        except KeyError:
            raise CompileError(f"no kernel named {name} in {self.file}") from None
        self.name = name
        self.results = [r.name for r in kernel.results]
        self.params = [p.name for p in kernel.params]
        self.options = options
        assert kernel.dtype is not None, "parse_and_check sets the kernel's dtype"
        self._sources: dict[str, str] = {kernel.dtype: source}
        other = "f64" if kernel.dtype == "f32" else "f32"
        self._sources[other] = re.sub(rf"\b{kernel.dtype}\b", other, source)
        self._forward: dict[str, Any] = {}
        self._backward: dict[str, Any] = {}

    def forward_kernel(self, dtype: str) -> Any:
        if dtype not in self._forward:
            self._forward[dtype] = getattr(
                gnnc.compile(self._sources[dtype], kernels=[self.name], **self.options), self.name
            )
        return self._forward[dtype]

    def gradient(self, dtype: str) -> Any:
        if dtype not in self._backward:
            from gnnc.api import compile_grad

            self._backward[dtype] = compile_grad(self._sources[dtype], self.name, **self.options)
        return self._backward[dtype]

    def __call__(self, graph: Any, *inputs: torch.Tensor, num_vertices: int | None = None, size: Any = None) -> Any:
        """The result, or a tuple of the results in signature order for a kernel with several."""
        if len(inputs) != len(self.params):
            raise ArgumentError(
                f"{self.name} takes {len(self.params)} inputs ({', '.join(self.params)}), got {len(inputs)}"
            )
        return _KernelFunction.apply(self, as_graph(graph, num_vertices, size), *inputs)


def _dtype_name(inputs: tuple[torch.Tensor, ...]) -> str:
    dtypes = {t.dtype for t in inputs}
    if dtypes == {torch.float32}:
        return "f32"
    if dtypes == {torch.float64}:
        return "f64"
    raise ArgumentError(f"inputs must all be float32 or all float64, got {sorted(map(str, dtypes))}")


class _KernelFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, op: Kernel, graph: gnnc.Graph, *inputs: torch.Tensor) -> Any:
        dtype = _dtype_name(inputs)
        arrays = [_numpy(t) for t in inputs]
        ctx.saved_stages = None
        grad = op.gradient(dtype) if any(ctx.needs_input_grad[2:]) else None
        if grad is not None and grad.saved:
            # the forward variant that also keeps what the gradient would recompute (softmax weights, argmax)
            out, ctx.saved_stages = grad.forward(graph, *arrays)
        else:
            out = op.forward_kernel(dtype)(graph, *arrays)
        ctx.op, ctx.graph, ctx.dtype = op, graph, dtype
        ctx.save_for_backward(*inputs)
        if len(op.results) == 1:
            return torch.from_numpy(out)
        return tuple(torch.from_numpy(out[r]) for r in op.results)

    @staticmethod
    def backward(ctx: Any, *gouts: torch.Tensor) -> tuple:
        inputs = ctx.saved_tensors
        wanted = [i for i, need in enumerate(ctx.needs_input_grad[2:]) if need]
        if not wanted:  # e.g. a first layer's kernel on the raw features
            return (None,) * (2 + len(inputs))
        grad = ctx.op.gradient(ctx.dtype)
        for i in wanted:
            if ctx.op.params[i] in grad.skipped:
                raise CompileError(
                    f"{ctx.op.name}: the gradient of '{ctx.op.params[i]}' (a parameter without a V "
                    "or E axis) is not generated yet; pass it without requires_grad"
                )
        arrays = [_numpy(t) for t in inputs]
        if len(gouts) == 1:
            gout: Any = _numpy(gouts[0])
        else:  # autograd gives zeros for a result the loss does not use
            gout = {r: _numpy(g) for r, g in zip(ctx.op.results, gouts)}
        grads = grad(ctx.graph, *arrays, gout=gout, saved=ctx.saved_stages)
        result: list[torch.Tensor | None] = [None, None]
        for i, name in enumerate(ctx.op.params):
            result.append(torch.from_numpy(grads[name]) if i in wanted and name in grads else None)
        return tuple(result)


def kernel(source_or_path: Any, name: str, **options: Any) -> Kernel:
    """An autograd op for kernel `name` of a .gnn file or source text."""
    return Kernel(source_or_path, name, **options)


__all__ = ["Kernel", "as_graph", "kernel"]
