"""Compiling a model's gnnc kernels ahead of the first batch: `gnnc.nn.warm_up(model)`.

A gnnc.nn layer makes its kernels in its constructor but compiles them on
the first call that needs them (1-30 s each on a cold compile cache, then a
load from the cache). `warm_up` compiles them before training starts: every
kernel of every gnnc.nn layer in the model, for one element type and
device, with its gradient kernels unless `grad=False` (an attention layer
holds a kernel per configuration, self loops, dropout, returned weights:
all are compiled). The compiled code is
the same for every graph; what a call on a particular graph runs may be a
variant the default schedule picks for graphs of that size (large calls are
specialised, prefetched, ...): give `example=` (forward inputs, a typical
batch) to run the model once on it, forward and backward: then exactly
what training on such batches calls is compiled, those variants included
(and, with `kernels=False`, nothing else). The example run leaves no trace:
parameters' gradients and the RNG state are restored.

Each compile is logged at INFO by the compiler (`gnnc.driver.compiler`:
what, and how long it took); the warm-up logs one INFO line with its total.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import torch

from gnnc.errors import ArgumentError
from gnnc.torch import cuda
from gnnc.torch.kernels import Kernel
from gnnc.torch.ops import DTYPES, variant_source

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmedUp:
    """What a warm-up made ready: the kernels (with their gradient kernels when `grad`), and the time."""

    kernels: int
    dtype: torch.dtype
    device: torch.device
    grad: bool
    seconds: float


def kernels_of(model: torch.nn.Module) -> list[Kernel]:
    """The gnnc kernels the gnnc.nn layers of `model` may call, each once."""
    found: dict[int, Kernel] = {}

    def visit(value: Any) -> None:
        if isinstance(value, Kernel):
            found.setdefault(id(value), value)
        elif isinstance(value, (tuple, list)):
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)

    for module in model.modules():
        for value in vars(module).values():
            visit(value)
    return list(found.values())


def _ready(kernel: Kernel, dtype: str, device: torch.device, grad: bool) -> None:
    ops = kernel.ops
    if device.type == "cpu":
        ops.forward_kernel(dtype)
        if grad and ops.grad_error is None:
            ops.gradient(dtype)
        return
    cuda.require_torch_cuda()
    ordinal = device.index if device.index is not None else torch.cuda.current_device()
    arch = cuda.arch_for(torch.cuda.get_device_capability(ordinal))
    source = variant_source(ops.source, ops.signature.dtype, dtype)
    ops.cuda.forward_kernel(source, dtype, ordinal, arch)
    if grad and ops.grad_error is None:
        names = [p.name for p in ops.params]
        ops.cuda.gradient(source, dtype, ordinal, arch, names, tuple(names))


def _run_example(model: torch.nn.Module, example: Any, grad: bool) -> None:
    """One forward (and backward) on `example`, leaving gradients and the RNG state as they were."""
    args = example if isinstance(example, tuple) else (example,)
    params = [p for p in model.parameters() if p.requires_grad]
    kept = [None if p.grad is None else p.grad.clone() for p in params]
    rng = torch.get_rng_state()
    try:
        with torch.set_grad_enabled(grad):
            out = model(*args)
            outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)]
            if grad:
                total = sum((o.float().sum() for o in outs if o.requires_grad), torch.zeros(()))
                if total.requires_grad:
                    total.backward()
    finally:
        torch.set_rng_state(rng)
        for p, g in zip(params, kept):
            p.grad = g


def warm_up(
    model: torch.nn.Module,
    example: Any = None,
    *,
    dtype: torch.dtype = torch.float32,
    device: Any = None,
    grad: bool = True,
    kernels: bool = True,
) -> WarmedUp:
    """Compiles (or loads from the compile cache) every gnnc kernel of `model` for `dtype` on
    `device` (default: the device of the model's first parameter, else the CPU), with the
    gradient kernels when `grad`; then, with `example` (a tuple of forward arguments), runs
    the model once on it so that the variants graphs of its size call are ready too.
    `kernels=False` skips the first part: only what the example calls is compiled."""
    if dtype not in DTYPES:
        raise ArgumentError(f"warm_up: gnnc's kernels run float32 or float64, got {dtype}")
    if device is None:
        first = next(iter(model.parameters()), None)
        device = first.device if first is not None else torch.device("cpu")
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ArgumentError(f"warm_up: gnnc runs on the CPU and CUDA devices, got {device}")
    start = time.perf_counter()
    if not kernels and example is None:
        raise ArgumentError("warm_up: kernels=False compiles only what an example calls: give example=")
    found = kernels_of(model)
    if kernels:
        for kernel in found:
            _ready(kernel, DTYPES[dtype], device, grad)
    if example is not None:
        _run_example(model, example, grad)
    done = WarmedUp(len(found) if kernels else 0, dtype, device, grad, time.perf_counter() - start)
    _log.info(
        "warm-up of %s: %d kernels%s (%s, %s) ready in %.2f s%s",
        type(model).__name__,
        done.kernels,
        " and their gradients" if grad else "",
        str(dtype).removeprefix("torch."),
        device,
        done.seconds,
        ", with the example's variants" if example is not None else "",
    )
    return done


class WarmUp:
    """`layer.warm_up(...)`: `gnnc.nn.warm_up` of one layer (a mixin of every gnnc.nn layer)."""

    def warm_up(
        self,
        example: Any = None,
        *,
        dtype: torch.dtype = torch.float32,
        device: Any = None,
        grad: bool = True,
        kernels: bool = True,
    ) -> WarmedUp:
        assert isinstance(self, torch.nn.Module)
        return warm_up(self, example, dtype=dtype, device=device, grad=grad, kernels=kernels)


__all__ = ["WarmUp", "WarmedUp", "kernels_of", "warm_up"]
