"""`LabelPropagation`: PyG's label propagation operator, each propagation step one gnnc kernel.

PyG's step is `out = clamp(alpha * A out + (1 - alpha) y0, 0, 1)` with `A`
the adjacency `gcn_norm` makes without self loops (`D^-1/2 A D^-1/2`, the
in-degree at both ends, 0 where it is 0), or the edge weights as given when
an edge_index comes with `edge_weight` (PyG does not normalise those). The
normalisation, the weighted sum, the residual and the clamp are one kernel:

    kernel label_propagation_clamped(x: f32[V, F], r: f32[V, F], a: f32) -> f32[V, F] {
        n[v] = step(deg_in(v)) * rsqrt(deg_in(v) + 1 - step(deg_in(v)))
        out[v] = min(max(a * sum(n[u] * n[v] * x[u]) + r[v], 0), 1)
    }

with `r = (1 - alpha) y0` made once, in torch, as PyG makes it. A
`post_step` replaces the clamp, as in PyG: the kernel then ends at the sum
plus `r`, and the callable runs in torch after it. The forms PyG normalises
and the ones it does not:

- an edge_index without `edge_weight`: normalised by the in-degrees;
- an edge_index with `edge_weight`: the weights as they are;
- a torch.sparse adjacency: normalised by the weighted in-degrees (its
  values are the weights; `d^-1/2` NaN where a degree is negative, as PyG's);
- a SparseTensor: normalised without values, its values as they are with them.

Everything runs without gradients (PyG's forward is `torch.no_grad`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.kernels import kernel
from gnnc.torch.kernels import Kernel

MODEL = "LabelPropagation"

#: (the kernel's parameters, the per-destination factor, the edge term) by normalisation
_FORMS = {
    "degree": (
        "",
        "    n[v] = step(deg_in(v)) * rsqrt(deg_in(v) + 1 - step(deg_in(v)))\n",
        "n[u] * n[v] * x[u]",
    ),
    "weighted_degree": (
        ", w: f32[E]",
        "    d[v] = sum(w[e])\n    n[v] = (step(d[v]) + step(-d[v])) * rsqrt(d[v] + 1 - step(d[v]) - step(-d[v]))\n",
        "w[e] * n[u] * n[v] * x[u]",
    ),
    "weights": (", w: f32[E]", "", "w[e] * x[u]"),
}


def _source(form: str, clamped: bool) -> tuple[str, str]:
    params, prelude, term = _FORMS[form]
    name = f"label_propagation_{form}" + ("_clamped" if clamped else "")
    step = f"a * sum({term}) + r[v]"
    if clamped:
        step = f"min(max({step}, 0), 1)"
    source = (
        f"kernel {name}(x: f32[V, F], r: f32[V, F], a: f32{params}) -> f32[V, F] {{\n{prelude}    out[v] = {step}\n}}\n"
    )
    return source, name


def step_kernel(form: str, clamped: bool) -> Kernel:
    """The kernel of one propagation step for a normalisation `form` (`_FORMS`), clamped or not."""
    return kernel(*_source(form, clamped))


class LabelPropagation(nn.Module):
    """PyG's `LabelPropagation(num_layers, alpha)`.

    `forward(y, edge_index, mask=None, edge_weight=None, post_step=None)`:
    `y` is `[N, C]` label scores, or `[N]` class ids (made one-hot, as
    PyG's); `mask` (a boolean mask or indices) keeps only those rows of `y`
    as the start. `edge_index` may be an edge_index, a torch.sparse
    adjacency, a SparseTensor, a `gnnc.Graph` or a sampled block (`y` its
    sources' rows; the result its destinations'). No parameters.
    """

    def __init__(self, num_layers: int, alpha: float):
        super().__init__()
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
            raise ArgumentError(f"{MODEL}: num_layers must be an integer >= 0, got {num_layers!r}")
        self.num_layers = num_layers
        self.alpha = alpha

    @torch.no_grad()
    def forward(
        self,
        y: torch.Tensor,
        edge_index: Any,
        mask: torch.Tensor | None = None,
        edge_weight: torch.Tensor | None = None,
        post_step: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        if not isinstance(y, torch.Tensor):
            raise ArgumentError(f"{MODEL}: y must be a tensor, got {type(y).__name__}")
        if y.dtype == torch.long and y.numel() == y.shape[0]:
            y = _one_hot(y.view(-1))
        y = inputs.check_features(y, MODEL, "y")
        out = y
        if mask is not None:
            out = torch.zeros_like(y)
            out[mask] = y[mask]
        adj, keep = inputs.square(inputs.adjacency(edge_index), y, MODEL)
        n = y.shape[0]
        inputs.sizes(adj, y, y, None, bipartite=False)
        weight = inputs.edge_values(adj, edge_weight)
        if adj.layout == inputs.Layout.TORCH_SPARSE:
            form = "weighted_degree"  # PyG's gcn_norm of a torch.sparse adjacency weighs by its values
        elif weight is None:
            form = "degree"
        else:
            form = "weights"  # an edge_weight, or a SparseTensor's values: PyG does not normalise them
        step = step_kernel(form, clamped=post_step is None)
        extra = () if form == "degree" else (weight.to(y.dtype),)  # type: ignore[union-attr]
        res = (1 - self.alpha) * out
        for _ in range(self.num_layers):
            out = step(adj.index, out, res, float(self.alpha), *extra, num_vertices=n)
            if post_step is not None:
                out = post_step(out)
        return out if keep is None else out[:keep]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_layers={self.num_layers}, alpha={self.alpha})"


def _one_hot(index: torch.Tensor) -> torch.Tensor:
    """PyG's `one_hot` of class ids: float32 rows, as many columns as the largest id + 1."""
    if index.numel() and int(index.min()) < 0:
        raise ArgumentError(f"{MODEL}: class ids in y must be >= 0, got {int(index.min())}")
    classes = int(index.max()) + 1 if index.numel() else 0
    out = torch.zeros(index.shape[0], classes, dtype=torch.float32, device=index.device)
    return out.scatter_(1, index.unsqueeze(1), 1.0)


__all__ = ["LabelPropagation", "step_kernel"]
