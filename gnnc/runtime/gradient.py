"""Running generated gradient kernels: each on the forward or the reversed graph, summed per input.

This module imports no compiler: it gets a loaded module (compiled or the
reference) and the list of gradient kernels `frontend.grad` generated.

On a bipartite graph (DGL's block convention: destinations are the first
sources) an input read at both sides has num_src rows, yet a gradient kernel
may read it only where the forward kernel read destinations (at `u` of the
reversed graph, num_dst rows): it gets the leading rows. A gradient part per
destination (num_dst rows) of such an input adds into its leading rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gnnc.errors import ArgumentError
from gnnc.runtime.graph import Graph
from gnnc.runtime.signature import vertex_rows


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
            kernel = getattr(self.module, name)
            inputs = _leading_rows(kernel, g, named) if graph.bipartite else named
            part = kernel(g, threads=threads, **inputs) if threads is not None else kernel(g, **inputs)
            if reduce:  # one partial gradient per vertex of a parameter
                part = np.asarray(part.sum(axis=0, dtype=part.dtype))
            if wrt in grads and grads[wrt].shape != part.shape:
                # parts of a block-convention input: one per source, one per destination
                big, small = (grads[wrt], part) if grads[wrt].shape[0] >= part.shape[0] else (part, grads[wrt])
                total = big.copy()
                total[: small.shape[0]] += small
                grads[wrt] = total
            else:
                grads[wrt] = part if wrt not in grads else grads[wrt] + part
        if graph.bipartite:
            for wrt, g in grads.items():
                given = np.asarray(named[wrt]) if wrt in named else None
                if given is not None and given.ndim and g.ndim and g.shape[0] < given.shape[0]:
                    padded = np.zeros((given.shape[0],) + g.shape[1:], dtype=g.dtype)
                    padded[: g.shape[0]] = g
                    grads[wrt] = padded
        for name in self.constant:
            grads[name] = np.zeros_like(np.asarray(named[name]))
        return grads


def _leading_rows(kernel: Any, graph: Graph, named: dict) -> dict:
    """The inputs with vertex tensors cut to the rows `kernel` reads on `graph` (see the module doc)."""
    signature = getattr(kernel, "signature", None)
    if signature is None:
        return named
    fitted = dict(named)
    for p in signature.params:
        value = named.get(p.name)
        if p.domain != "V" or value is None or not hasattr(value, "shape") or not value.shape:
            continue
        rows = vertex_rows(p, graph)
        if value.shape[0] not in rows and value.shape[0] > max(rows):
            fitted[p.name] = value[: max(rows)]
    return fitted
