"""`Linear`: PyG's linear layer (torch's, plus lazy sizing and PyG's initialisers).

PyG's layers build their dense transforms from `torch_geometric.nn.Linear`,
which differs from `torch.nn.Linear` in two ways gnnc.nn copies, so that a
layer takes the same arguments and trains from the same start:

- `in_channels=-1` makes the weight an `UninitializedParameter`, sized by
  the first call's input (or by a state_dict that has it) and initialised
  then. Until then the layer has no weight to compile or save but its
  placeholder.
- `weight_initializer` is `"glorot"`, `"uniform"`, `"kaiming_uniform"` or
  None (torch's default, kaiming uniform with a = sqrt(5)); `bias_initializer`
  is `"zeros"` or None (torch's default, uniform in +-1/sqrt(in_channels)).

The parameter names are torch's and PyG's (`weight`, `bias`), so state
dicts load both ways.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parameter import UninitializedParameter

from gnnc.errors import ArgumentError
from gnnc.runtime import memory

#: The initialisers PyG's Linear names.
WEIGHT_INITIALIZERS = ("glorot", "uniform", "kaiming_uniform", None)
BIAS_INITIALIZERS = ("zeros", None)


def is_lazy(t: Any) -> bool:
    """Whether `t` is a parameter still waiting for its first input to size it."""
    return isinstance(t, UninitializedParameter)


def _uniform(t: torch.Tensor, bound: float) -> None:
    with torch.no_grad():
        t.uniform_(-bound, bound)


class Linear(nn.Module):
    """`x @ weight.T + bias`, with PyG's lazy `in_channels=-1` and initialisers (see the module)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        bias: bool = True,
        weight_initializer: str | None = None,
        bias_initializer: str | None = None,
    ):
        super().__init__()
        for what, value in (("in_channels", in_channels), ("out_channels", out_channels)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ArgumentError(f"Linear: {what} must be an integer, got {value!r}")
        if out_channels < 0 or (in_channels < 0 and in_channels != -1):
            raise ArgumentError(
                f"Linear: channels must be non-negative (in_channels=-1: sized by the first input), "
                f"got ({in_channels}, {out_channels})"
            )
        if weight_initializer not in WEIGHT_INITIALIZERS:
            raise ArgumentError(f"Linear: weight_initializer must be one of {WEIGHT_INITIALIZERS}")
        if bias_initializer not in BIAS_INITIALIZERS:
            raise ArgumentError(f"Linear: bias_initializer must be one of {BIAS_INITIALIZERS}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.weight_initializer, self.bias_initializer = weight_initializer, bias_initializer
        self.weight: Any = (
            nn.Parameter(torch.empty(out_channels, in_channels)) if in_channels > 0 else UninitializedParameter()
        )
        self.bias: nn.Parameter | None = nn.Parameter(torch.empty(out_channels)) if bias else None
        self._hook: Any = None
        if is_lazy(self.weight):
            self._hook = self.register_forward_pre_hook(Linear._size_by_input)
        self.reset_parameters()

    @property
    def lazy(self) -> bool:
        return is_lazy(self.weight)

    def reset_parameters(self) -> None:
        """PyG's initialisation; nothing while the weight is not sized yet."""
        fan = self.in_channels
        if fan <= 0 or self.lazy:
            return
        if self.weight_initializer == "glorot":
            _uniform(self.weight, math.sqrt(6.0 / (self.weight.size(-2) + self.weight.size(-1))))
        elif self.weight_initializer == "uniform":
            _uniform(self.weight, 1.0 / math.sqrt(fan))
        else:  # "kaiming_uniform" and None: torch's default, a = sqrt(5)
            _uniform(self.weight, math.sqrt(6.0 / ((1 + 5.0) * fan)))
        if self.bias is not None:
            if self.bias_initializer == "zeros":
                with torch.no_grad():
                    self.bias.zero_()
            else:
                _uniform(self.bias, 1.0 / math.sqrt(fan))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            torch.is_grad_enabled()
            and x.dim() == 2
            and x.dtype == self.weight.dtype
            and _fresh(x.shape[0], self.out_channels, x)
        ):  # the product and its dx into numpy's memory (`_Products`)
            return products(x, (self.weight, self.bias))[0]
        return _linear(x, self.weight, self.bias)

    def _size(self, in_channels: int) -> None:
        # the placeholder's device and dtype: those the layer was moved to
        self.in_channels = in_channels
        self.weight.materialize((self.out_channels, in_channels))
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    @staticmethod
    @torch.no_grad()
    def _size_by_input(module: Linear, args: tuple) -> None:
        """The first call sizes a lazy weight by its input and initialises it (as PyG)."""
        if module.lazy:
            module._size(int(args[0].size(-1)))
            module.reset_parameters()

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        # a lazy weight is saved as the placeholder it is (as PyG)
        destination[prefix + "weight"] = self.weight if (self.lazy or keep_vars) else self.weight.detach()
        if self.bias is not None:
            destination[prefix + "bias"] = self.bias if keep_vars else self.bias.detach()

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        """A sized weight sizes a lazy layer; a placeholder makes the layer lazy again (as PyG)."""
        weight = state_dict.get(prefix + "weight")
        if weight is not None and is_lazy(weight):
            if not self.lazy:
                self.in_channels = -1
                self.weight = UninitializedParameter()
                self._hook = self.register_forward_pre_hook(Linear._size_by_input)
        elif weight is not None and self.lazy:
            self._size(int(weight.size(-1)))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, bias={self.bias is not None}"


def linears(modules: torch.nn.ModuleList) -> list[Linear]:
    """A ModuleList of `Linear` layers as the list it is (a layer per step, degree, ...)."""
    return cast(list[Linear], list(modules))


def add_bias(out: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`out + bias`, added into `out` where the types allow: for a layer's own fresh result,
    which no backward reads (a [num_dst, out] tensor less)."""
    if bias is None:
        return out
    return out.add_(bias) if out.dtype == bias.dtype else out + bias


def add_product(out: torch.Tensor, lin: Linear, x: torch.Tensor) -> torch.Tensor:
    """`out + lin(x)` for a `lin` without bias (a root weight), the product added into `out`
    as it is made (`addmm_`) where it can be: no second [num_dst, out] beside `out`, which no
    backward reads."""
    if lin.lazy or x.dim() != 2 or out.dtype != x.dtype:
        return out + lin(x)
    return out.addmm_(x, lin.weight.t())


def projections(x: torch.Tensor, *lins: Linear) -> tuple[torch.Tensor, ...]:
    """`lin(x)` for each of `lins`, one input through several transforms (a layer's query, key
    and value; GATv2's two sides), with one dx in the backward (`products`). Where `products`
    does not apply (a lazy layer not sized yet, x not [N, in] on the CPU), each `lin(x)`."""
    if len(lins) < 2 or x.dim() != 2 or x.device.type != "cpu" or any(lin.lazy for lin in lins):
        return tuple(lin(x) for lin in lins)
    return products(x, *((lin.weight, lin.bias) for lin in lins))


#: A product's CPU result of at least this many bytes comes from `_result` (numpy's allocator):
#: glibc serves smaller blocks from its heap (its mmap threshold grows up to 32 MiB), reused.
FRESH_RESULT_BYTES = 32 << 20
_NUMPY_TYPES = {torch.float32: np.float32, torch.float64: np.float64}
_jit_tracing = torch.jit.is_tracing  # type: ignore[attr-defined]


def _fresh(rows: int, cols: int, like: torch.Tensor) -> bool:
    """Whether a [rows, cols] product's result of `like`'s type is made by `dense_product`,
    in numpy's memory: a full-batch layer's [N, out] is tens of MB, and torch's allocator
    takes a fresh mapping for it whose 4 KiB pages fault in one by one on first touch (glibc's
    defaults), where numpy's asks for huge pages: an [258569, 64] product 20.4 -> 8.0 ms
    (docs/design/training.md, "Products' results from numpy"). Not for a small result,
    another device or type, under autocast (whose products run in its type), nor where torch's
    own ops must be recorded (jit, export, functorch); torch.compile calls the op."""
    return (
        like.dtype in _NUMPY_TYPES
        and like.device.type == "cpu"
        and rows * cols * like.element_size() >= FRESH_RESULT_BYTES
        and not torch.is_autocast_enabled("cpu")
        and not (_jit_tracing() or torch.compiler.is_exporting() or torch._C._are_functorch_transforms_active())
    )


@torch.library.custom_op("gnnc::dense_product", mutates_args=())
def dense_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`x @ weight.T + bias` (bias may be None) for CPU float tensors, its result in numpy's
    memory (`_fresh`). An op without autograd: `_Products` calls it in its forward and
    backward, where nothing is recorded; torch.compile sees one call."""
    out = torch.from_numpy(memory.empty((x.shape[0], weight.shape[0]), _NUMPY_TYPES[x.dtype]))
    if bias is None:
        return torch.mm(x, weight.t(), out=out)
    return torch.addmm(bias, x, weight.t(), out=out)


@dense_product.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0]))


@torch.library.custom_op("gnnc::dense_input_grad", mutates_args=())
def dense_input_grad(grads: list[torch.Tensor], weights: list[torch.Tensor]) -> torch.Tensor:
    """`sum(g @ W for g, W in zip(grads, weights))`: the input's gradient of products
    `x @ W.T`, in numpy's memory (`_fresh`), the first product written and the others added
    into it. One op, so that torch.compile does not make the additions out of place (a fresh
    [N, in] copy each)."""
    dx = torch.from_numpy(memory.empty((grads[0].shape[0], weights[0].shape[1]), _NUMPY_TYPES[grads[0].dtype]))
    return _sum_products(grads, weights, torch.mm(grads[0], weights[0], out=dx))


@dense_input_grad.register_fake
def _(grads: list[torch.Tensor], weights: list[torch.Tensor]) -> torch.Tensor:
    return grads[0].new_empty((grads[0].shape[0], weights[0].shape[1]))


def _input_grad(grads: tuple[torch.Tensor, ...], weights: list[torch.Tensor]) -> torch.Tensor:
    """`dense_input_grad`'s sum, by that op where `_fresh` says so and nothing is recorded (a
    backward of `create_graph=True` runs with grad on), else by torch."""
    rows, cols = grads[0].shape[0], weights[0].shape[1]
    if (
        not torch.is_grad_enabled()
        and all(t.dtype == grads[0].dtype for t in (*grads, *weights))
        and _fresh(rows, cols, grads[0])
    ):
        return dense_input_grad(list(grads), weights)
    return _sum_products(grads, weights, grads[0].mm(weights[0]))


def _sum_products(grads: Any, weights: Any, first: torch.Tensor) -> torch.Tensor:
    """`first` (`grads[0] @ weights[0]`) with the other products `g @ W` added into it."""
    for g, w in zip(grads[1:], weights[1:]):
        first.addmm_(g, w)
    return first


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, recorded: bool = True) -> torch.Tensor:
    """`F.linear(x, weight, bias)`, by `dense_product` where `_fresh` says so and nothing is
    recorded for autograd: never in a Function's forward (`recorded=False`: dynamo traces it
    with the caller's grad mode on), not in a backward of `create_graph=True` (grad on)."""
    if (
        x.dim() == 2
        and weight.dtype == x.dtype
        and (bias is None or bias.dtype == x.dtype)
        and not (recorded and torch.is_grad_enabled())
        and _fresh(x.shape[0], weight.shape[0], x)
    ):
        return dense_product(x, weight, bias)
    return F.linear(x, weight, bias)


def products(x: torch.Tensor, *transforms: tuple[torch.Tensor, torch.Tensor | None]) -> tuple[torch.Tensor, ...]:
    """`x @ W.T + b` for each (W, b) (b may be None) of one [N, in] input, as one autograd
    Function (`_Products`) whose backward makes dx as one tensor: the first product `g @ W`,
    and each other's added into it by `addmm_`. Autograd would make every term a fresh
    [N, in] tensor of its own and add it: its pages faulted in and a pass to add it, about
    twice the time (measurements: docs/design/training.md, "GATConv's scores")."""
    flat: list[torch.Tensor | None] = []
    for weight, bias in transforms:
        flat += [weight, bias]
    return _Products.apply(x, *flat)


class _Products(torch.autograd.Function):
    """`products`: inputs (x, W1, b1, W2, b2, ...), a b None where a transform has none."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, *flat: Any) -> tuple[torch.Tensor, ...]:
        # forward(ctx, ...) rather than setup_context: torch.compile (2.13) under no_grad passed
        # the context as x to a forward taking *args
        ctx.biases = tuple(b is not None for b in flat[1::2])
        ctx.save_for_backward(x, *flat[0::2])
        made = []
        for i in range(0, len(flat), 2):
            made.append(_linear(x, flat[i], flat[i + 1], recorded=False))
        return tuple(made)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, *weights = ctx.saved_tensors
        # under torch.autocast the products ran in its type, and so do their gradients (as
        # torch's linear, which saves x and W cast): the engine casts each back to its input's
        dtype = grads[0].dtype
        x, weights = x.to(dtype), [w.to(dtype) for w in weights]
        grads = tuple(g.to(dtype).reshape(-1, w.shape[0]) for g, w in zip(grads, weights))
        dx = None
        if ctx.needs_input_grad[0]:
            dx = _input_grad(grads, weights)
        result: list[torch.Tensor | None] = [dx]
        for i, (g, has_bias) in enumerate(zip(grads, ctx.biases)):
            result.append(g.t().mm(x) if ctx.needs_input_grad[1 + 2 * i] else None)
            result.append(g.sum(0) if has_bias and ctx.needs_input_grad[2 + 2 * i] else None)
        return tuple(result)


__all__ = [
    "BIAS_INITIALIZERS",
    "WEIGHT_INITIALIZERS",
    "Linear",
    "add_bias",
    "add_product",
    "is_lazy",
    "linears",
    "products",
    "projections",
]
