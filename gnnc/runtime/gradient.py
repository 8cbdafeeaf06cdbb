"""Running generated gradient kernels: each on the forward or the reversed graph, summed per input.

This module imports no compiler: it gets a loaded module (compiled or the
reference) and the list of gradient kernels `frontend.grad` generated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gnnc.errors import ArgumentError
from gnnc.runtime.graph import Graph


class Gradient:
    """`grad(graph, *inputs, gout=..., **named)` -> {input name: gradient}.

    `gout` is the gradient of the loss with respect to the forward kernel's
    result. Inputs the result does not depend on get zeros.
    """

    def __init__(self, module: Any, kernel: str, kernels: list[tuple[str, str, bool, bool]],
                 params: list[str], constant: list[str], skipped: list[str]):
        self.module = module
        self.name = kernel
        self.kernels = kernels
        self.params = params
        self.constant = constant
        self.skipped = skipped

    def __call__(self, graph: Graph, *args: Any, gout: Any, threads: int | None = None, **kwargs: Any) -> dict:
        if not isinstance(graph, Graph):
            raise ArgumentError(f"the first argument must be a gnnc.Graph, got {type(graph).__name__}")
        if len(args) > len(self.params):
            raise ArgumentError(f"{self.name}: {len(self.params)} inputs expected, got {len(args)}")
        named = dict(zip(self.params, args))
        for key in kwargs:
            if key in named:
                raise ArgumentError(f"{self.name}: input '{key}' given twice")
        named.update(kwargs)
        named["gout__"] = gout
        grads: dict[str, np.ndarray] = {}
        for name, wrt, reverse, reduce in self.kernels:
            g = graph.reversed() if reverse else graph
            part = getattr(self.module, name)(g, threads=threads, **named) if threads is not None \
                else getattr(self.module, name)(g, **named)
            if reduce:  # one partial gradient per vertex of a parameter
                part = np.asarray(part.sum(axis=0, dtype=part.dtype))
            grads[wrt] = part if wrt not in grads else grads[wrt] + part
        for name in self.constant:
            grads[name] = np.zeros_like(np.asarray(named[name]))
        return grads
