"""Parameter initialisations of PyG's layers, so that gnnc.nn layers train from the same start."""

from __future__ import annotations

import math
from typing import Any

import torch


def glorot(t: torch.Tensor | None) -> None:
    """PyG's `glorot`: uniform in +-sqrt(6 / (size(-2) + size(-1)))."""
    if t is not None:
        bound = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
        with torch.no_grad():
            t.uniform_(-bound, bound)


def uniform(size: int, t: torch.Tensor | None) -> None:
    """PyG's `uniform(size, t)`: uniform in +-1 / sqrt(size)."""
    if t is not None:
        bound = 1.0 / math.sqrt(size)
        with torch.no_grad():
            t.uniform_(-bound, bound)


def zeros(t: torch.Tensor | None) -> None:
    if t is not None:
        with torch.no_grad():
            t.zero_()


def reset(value: Any) -> None:
    """PyG's `reset`: `value.reset_parameters()` where it has one, else its children's, recursively
    (a parent that resets itself is trusted with its children, so the draws are PyG's)."""
    fn = getattr(value, "reset_parameters", None)
    if callable(fn):
        fn()
        return
    children = getattr(value, "children", None)
    for child in children() if callable(children) else ():
        reset(child)


__all__ = ["glorot", "reset", "uniform", "zeros"]
