"""Parameter initialisations of PyG's layers, so that gnnc.nn layers train from the same start."""

from __future__ import annotations

import math

import torch


def glorot(t: torch.Tensor | None) -> None:
    """PyG's `glorot`: uniform in +-sqrt(6 / (size(-2) + size(-1)))."""
    if t is not None:
        bound = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
        with torch.no_grad():
            t.uniform_(-bound, bound)


def zeros(t: torch.Tensor | None) -> None:
    if t is not None:
        with torch.no_grad():
            t.zero_()


def reset(module: torch.nn.Module | None) -> None:
    """`reset_parameters()` of a module and of its children (PyG's `reset`), where they have one."""
    if module is None:
        return
    for child in module.modules():
        if child is not module or hasattr(child, "reset_parameters"):
            fn = getattr(child, "reset_parameters", None)
            if callable(fn):
                fn()


__all__ = ["glorot", "reset", "zeros"]
