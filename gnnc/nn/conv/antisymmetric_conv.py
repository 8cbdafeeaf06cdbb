"""`AntiSymmetricConv`: PyG's anti-symmetric deep graph network step (Gravina et al.).

`x <- x + epsilon act((W - W^T - gamma I) x + phi(x, edge_index) + b)`,
`num_iters` times. The message passing is `phi`'s: gnnc's `GCNConv(in, in,
bias=False)` by default (its one fused kernel, `gcn_conv.py`), or any layer
given; what surrounds it is dense per-vertex algebra and stays in torch,
`x (W - W^T - gamma I)^T + phi(x)` as one `addmm` into a fresh tensor (phi's
result is left as it is: its backward may read it) and the Euler step as one
`add`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn.conv.gcn_conv import GCNConv
from gnnc.nn.init import reset, zeros
from gnnc.nn.linear import add_bias
from gnnc.nn.precompile import WarmUp

LAYER = "AntiSymmetricConv"


def _normal(name: str) -> str:
    """PyG's `normalize_string`."""
    return name.lower().replace("-", "").replace("_", "").replace(" ", "")


def _swish(x: torch.Tensor) -> torch.Tensor:
    """PyG's `swish`, the one activation its resolver knows beyond torch.nn's."""
    return x * x.sigmoid()


def activation(act: Any, act_kwargs: dict[str, Any] | None) -> Callable | None:
    """PyG's `activation_resolver`: torch.nn's activation of that (normalised) name, built with
    `act_kwargs`, or `swish`; a callable or None as given."""
    if isinstance(act, str):
        query = _normal(act)
        for cls in vars(torch.nn.modules.activation).values():
            if isinstance(cls, type) and issubclass(cls, nn.Module):
                name = _normal(cls.__name__)
                if query in (name, name.replace("act", "")):
                    return cls(**(act_kwargs or {}))
        if query == "swish":
            return _swish
        raise ArgumentError(f"{LAYER}: act={act!r} names no torch.nn activation")
    if act_kwargs:
        raise ArgumentError(f"{LAYER}: act_kwargs apply to an activation given by name, not to {act!r}")
    if act is not None and not callable(act):
        raise ArgumentError(f"{LAYER}: act must be an activation's name, a callable or None, got {act!r}")
    return act


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ArgumentError(f"{LAYER}: {what} must be a finite number, got {value!r}")
    return value


class AntiSymmetricConv(WarmUp, nn.Module):
    """PyG's `AntiSymmetricConv(in_channels, phi=None, num_iters=1, epsilon=0.1, gamma=0.1, act="tanh",
    act_kwargs=None, bias=True)`.

    `forward(x, edge_index, *args, **kwargs)`, the extra arguments passed on
    to `phi`. Parameters `W` `[in, in]`, `bias` `[in]`, the buffer `eye` and
    `phi`'s, PyG's (`W` kaiming-uniform, phi reset, bias zero, draw for draw).
    """

    def __init__(
        self,
        in_channels: int,
        phi: nn.Module | None = None,
        num_iters: int = 1,
        epsilon: float = 0.1,
        gamma: float = 0.1,
        act: str | Callable | None = "tanh",
        act_kwargs: dict[str, Any] | None = None,
        bias: bool = True,
    ):
        super().__init__()
        if isinstance(in_channels, bool) or not isinstance(in_channels, int) or in_channels < 1:
            raise ArgumentError(f"{LAYER}: in_channels must be a positive integer, got {in_channels!r}")
        if isinstance(num_iters, bool) or not isinstance(num_iters, int) or num_iters < 0:
            raise ArgumentError(f"{LAYER}: num_iters must be a non-negative integer, got {num_iters!r}")
        if phi is not None and not isinstance(phi, nn.Module):
            raise ArgumentError(f"{LAYER}: phi must be a message passing layer (a torch.nn.Module), got {phi!r}")
        self.in_channels, self.num_iters = in_channels, num_iters
        self.gamma, self.epsilon = _number(gamma, "gamma"), _number(epsilon, "epsilon")
        self.act = activation(act, act_kwargs)
        if phi is None:
            phi = GCNConv(in_channels, in_channels, bias=False)
        self.W = nn.Parameter(torch.empty(in_channels, in_channels))
        self.eye: torch.Tensor
        self.register_buffer("eye", torch.eye(in_channels))
        self.phi = phi
        self.bias = nn.Parameter(torch.empty(in_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyG's initialisation, draw for draw."""
        nn.init.kaiming_uniform_(self.W, a=math.sqrt(5))
        reset(self.phi)
        zeros(self.bias)

    def forward(self, x: torch.Tensor, edge_index: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() < 2:
            raise ArgumentError(f"{LAYER}: x must be a [num_nodes, {self.in_channels}] tensor, got {x!r}")
        if x.shape[-1] != self.in_channels:
            raise ArgumentError(f"{LAYER}: x has {x.shape[-1]} channels, the layer {self.in_channels}")
        antisymmetric = self.W - self.W.t() - self.gamma * self.eye
        for _ in range(self.num_iters):
            h = self.phi(x, edge_index, *args, **kwargs)
            if x.dim() == 2 and h.dtype == x.dtype and not torch.is_autocast_enabled(x.device.type):
                h = torch.addmm(h, x, antisymmetric.t())
            else:
                h = F.linear(x, antisymmetric) + h
            h = add_bias(h, self.bias)
            if self.act is not None:
                h = self.act(h)
            x = torch.add(x, h, alpha=self.epsilon)
        return x

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.in_channels}, phi={self.phi}, num_iters={self.num_iters}, "
            f"epsilon={self.epsilon}, gamma={self.gamma})"
        )


__all__ = ["AntiSymmetricConv", "activation"]
