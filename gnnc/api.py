"""`gnnc.compile`: source text or a .gnn path in, a callable module out."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gnnc.errors import ArgumentError
from gnnc.runtime.module import Module
from gnnc.runtime.signature import NO_GRAPH, take_graph

if TYPE_CHECKING:
    from gnnc.runtime.gradient import Gradient


class ReferenceKernel:
    """A kernel evaluated by the numpy reference (float64), for checking."""

    def __init__(self, kernel: Any):
        from gnnc.lang.signature import kernel_signature

        self.kernel = kernel
        self.name = kernel.name
        self.signature = kernel_signature(kernel)

    def __call__(self, graph: Any = NO_GRAPH, /, *args: Any, **kwargs: Any) -> Any:
        from gnnc import reference

        graph = take_graph(graph, kwargs)
        for option in ("threads", "schedule", "out"):
            kwargs.pop(option, None)
        return reference.evaluate(self.kernel, graph, *args, **kwargs)


class ReferenceModule:
    """The kernels of a source file, run by the reference instead of compiled."""

    def __init__(self, program: Any):
        self.kernels = {k.name: ReferenceKernel(k) for k in program.kernels}

    def __getattr__(self, name: str) -> ReferenceKernel:
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"no kernel named {name!r}; there are {sorted(kernels)}")


def compile(
    source_or_path: str | os.PathLike,
    *,
    target: str = "cpu",
    cpu: str = "native",
    kernels: list[str] | None = None,
    opt_level: int = 3,
    schedule: str | Mapping[str, object] | None = None,
    disable_passes: tuple[str, ...] | list[str] = (),
    fusion: bool = True,
    arch: str = "sm_80",
) -> Any:
    """Compiles kernels (cached) and loads them; `target="reference"` runs numpy instead.

    `schedule` replaces the source's schedule of every kernel for the target:
    directive text (`"prefetch 16; sort degree"`, `"map thread_vertex group 2"`
    for cuda) or a dict (`{"prefetch": 16}`). `target="cuda"` builds PTX for
    `arch` and loads it on the GPU (`gnnc.runtime.cuda`); `"cuda-emulation"`
    runs the cuda thread mapping's grid as loops on the CPU.
    """
    from gnnc.driver import compiler
    from gnnc.ir.schedule import directives_text

    source, file = compiler.read_source(source_or_path)
    if target == "reference":
        from gnnc.lang import parse_and_check

        return ReferenceModule(parse_and_check(source, file))
    if target not in compiler.TARGETS:
        raise ArgumentError(f"unknown target {target!r}: use one of {', '.join(compiler.TARGETS)} or 'reference'")
    options = compiler.CompileOptions(
        target=target,
        cpu=cpu,
        kernels=kernels,
        opt_level=opt_level,
        schedule=directives_text(schedule) if schedule is not None else None,
        disable_passes=tuple(disable_passes),
        fusion=fusion,
    )
    if target == "cuda":
        options.arch = arch
        from gnnc.runtime.cuda import CudaModule

        return CudaModule(compiler.compile_cached_ptx(source, file, options))
    return Module(compiler.compile_cached(source, file, options))


def compile_grad(
    source_or_path: str | os.PathLike,
    kernel: str,
    *,
    wrt: list[str] | None = None,
    target: str = "cpu",
    walks: bool | None = None,
    **options: Any,
) -> Gradient:
    """Gradient kernels of one kernel, generated, compiled (cached) and loaded.

    Returns a `gnnc.runtime.gradient.Gradient`: call it as the forward kernel
    with `gout=` (the gradient of the loss w.r.t. the result; a dict by result
    name for a kernel with several) to get a dict of gradients per input.
    `grad.forward(graph, ...)` runs the forward kernel keeping what the
    gradient can reuse: `(results, saved)`, then `grad(..., saved=saved)`.
    `target="reference"` evaluates them with numpy. Kernels that walk one graph in turn
    share one walk (`walks`, by default on every target but "cuda", where it is not measured
    yet); `walks=False` keeps one kernel per gradient part.
    """
    from gnnc.driver import compiler
    from gnnc.errors import CompileError
    from gnnc.lang import parse_and_check
    from gnnc.lang.autodiff import gradient_program
    from gnnc.runtime.gradient import Gradient

    source, file = compiler.read_source(source_or_path)
    program = parse_and_check(source, file)
    try:
        forward = program.kernel(kernel)
    except KeyError:
        raise CompileError(f"no kernel named {kernel} in {file}") from None
    grad = gradient_program(forward, wrt, walks=target != "cuda" if walks is None else walks)
    if not grad.kernels:
        raise CompileError(f"{kernel}: no input has a gradient kernel")
    module = compile(grad.source + grad.forward, target=target, **options)
    pair_module = None
    # the CUDA runner sums relation products per edge (TorchArrays.pair_sums); `schedule=` is
    # written for the kernel's own sizes, not the pair kernels'
    if grad.pair_source and target != "cuda":
        pair_module = compile(grad.pair_source, target=target, **{k: v for k, v in options.items() if k != "schedule"})
    return Gradient(
        module,
        kernel,
        [_runtime_kernel(k) for k in grad.kernels],
        [p.name for p in forward.params],
        grad.constant,
        grad.skipped,
        [r.name for r in forward.results],
        grad.gouts,
        "edge_id(e)" in grad.source,
        grad.transposes,
        grad.saved,
        grad.relation_transposes,
        pair_module,
        grad.in_csr_order,
        [p.name for p in forward.params if p.type.domain == "E"]
        + [r.name for r in forward.results if r.type.domain == "E"],
    )


def _runtime_kernel(k: Any) -> Any:
    """A `GradKernel` as `runtime.gradient.Gradient` takes it: a `GradStep` (the runtime
    imports no compiler)."""
    from gnnc.runtime.gradient import GradStep

    # by name: the two field lists may differ in order, never silently in meaning
    same = {f: getattr(k, f) for f in GradStep._fields if f != "members"}
    return GradStep(**same, members=tuple(_runtime_kernel(m) for m in k.members))
