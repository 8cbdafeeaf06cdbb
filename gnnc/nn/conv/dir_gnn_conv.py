"""`DirGNNConv`: PyG's directed wrapper (Rossi et al.): a conv on the edges and one on their reverse.

`alpha * conv_out(x, flip(edge_index)) + (1 - alpha) * conv_in(x, edge_index)
+ lin(x)`: two copies of the wrapped layer, each its own gnnc kernel(s), so
the wrapper compiles nothing of its own. The reversed edge_index is made
once per edge_index (`gnnc.nn.derived.flipped_edges`), and a `gnnc.Graph` is read
reversed (`Graph.reversed()`, its edge ids kept).

As PyG's, the copies get `add_self_loops = False` and `root_weight = False`
where the layer has them; gnnc's layers read both at call time, as PyG's.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.graph.graph import Graph
from gnnc.nn.derived import flipped_edges
from gnnc.nn.precompile import WarmUp

LAYER = "DirGNNConv"


def _channels(conv: nn.Module, what: str) -> int:
    value = getattr(conv, what, None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(
            f"{LAYER}: root_weight=True makes lin = Linear(conv.in_channels, conv.out_channels), but the conv's "
            f"{what} is {value!r}: give a conv with positive integer channels, or root_weight=False"
        )
    return value


class DirGNNConv(WarmUp, nn.Module):
    """PyG's `DirGNNConv(conv, alpha=0.5, root_weight=True)`.

    `forward(x, edge_index)`; `edge_index` a `[2, E]` tensor (PyG flips it)
    or a `gnnc.Graph`. Submodules `conv_in`, `conv_out` (copies of `conv`)
    and `lin` (torch's Linear, with `root_weight`), PyG's.
    """

    def __init__(self, conv: nn.Module, alpha: float = 0.5, root_weight: bool = True):
        super().__init__()
        if not isinstance(conv, nn.Module):
            raise ArgumentError(f"{LAYER}: conv must be a message passing layer (a torch.nn.Module), got {conv!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise ArgumentError(f"{LAYER}: alpha must be a number (the weight of the reversed edges), got {alpha!r}")
        if isinstance(getattr(conv, "root_weight", None), torch.Tensor):
            raise ArgumentError(
                f"{LAYER}: {type(conv).__name__}'s root_weight is a parameter, not an option DirGNNConv can turn "
                "off (PyG's fails on it too)"
            )
        self.alpha, self.root_weight = alpha, root_weight
        self.conv_in = copy.deepcopy(conv)
        self.conv_out = copy.deepcopy(conv)
        for copied in (self.conv_in, self.conv_out):
            for option in ("add_self_loops", "root_weight"):
                if hasattr(conv, option):  # as PyG's: each direction without them, lin adds the root
                    setattr(copied, option, False)
            remake = getattr(copied, "make_kernels", None)
            if callable(remake):  # a layer whose kernels follow add_self_loops: the ones warm_up compiles
                remake()
        self.lin = nn.Linear(_channels(conv, "in_channels"), _channels(conv, "out_channels")) if root_weight else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.conv_in.reset_parameters()  # type: ignore[operator]
        self.conv_out.reset_parameters()  # type: ignore[operator]
        if self.lin is not None:
            self.lin.reset_parameters()

    def forward(self, x: torch.Tensor, edge_index: Any) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise ArgumentError(f"{LAYER}: x must be one tensor (both directions read the same vertices)")
        if isinstance(edge_index, Graph):
            reverse: Any = edge_index.reversed()
        elif isinstance(edge_index, torch.Tensor) and edge_index.layout == torch.strided:
            if edge_index.dim() != 2 or edge_index.shape[0] != 2:
                raise ArgumentError(f"{LAYER}: edge_index must have shape [2, E], got {tuple(edge_index.shape)}")
            reverse = flipped_edges(edge_index)
        else:
            raise ArgumentError(
                f"{LAYER} reverses the edges: edge_index must be a [2, E] tensor or a gnnc.Graph (as PyG's, "
                f"which flips it), got {type(edge_index).__name__}"
                + (f" ({edge_index.layout})" if isinstance(edge_index, torch.Tensor) else "")
            )
        x_in = self.conv_in(x, edge_index)
        x_out = self.conv_out(x, reverse)
        out = self.alpha * x_out + (1 - self.alpha) * x_in
        if self.root_weight:
            if self.lin is None:
                raise ArgumentError(f"{LAYER}: root_weight was set after construction, which made no lin")
            if x.shape[-1] != self.lin.in_features or out.shape[-1] != self.lin.out_features:
                raise ArgumentError(
                    f"{LAYER}: lin maps {self.lin.in_features} to {self.lin.out_features} channels (the conv's "
                    f"in_channels, out_channels), but x has {x.shape[-1]} and the conv gives {out.shape[-1]}"
                )
            out = out + self.lin(x)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.conv_in}, alpha={self.alpha})"


__all__ = ["DirGNNConv"]
