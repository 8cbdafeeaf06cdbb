"""`HeteroConv`: PyG's wrapper running a layer per edge type and aggregating per destination node type.

Each edge type's layer (a gnnc.nn layer, or any module taking PyG's forward
arguments) runs on its bipartite graph with the features of its source and
destination node types, `(x_dict[src], x_dict[dst])` (one tensor where they
are the same type); the results for one destination type are summed (or
`"mean"`, `"max"`, `"min"`, `"mul"`, `"cat"`, stacked with None: any torch
reduction of that name, as PyG's `group`). The layers' kernels do the
message passing; the aggregation over edge types is torch's.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import hetero

LAYER = "HeteroConv"


def _check_aggr(aggr: Any) -> None:
    if aggr is None or aggr == "cat":
        return
    if not isinstance(aggr, str) or not callable(getattr(torch, aggr, None)):
        raise ArgumentError(
            f"{LAYER}: aggr must be None, 'cat' or a torch reduction over a dimension ('sum', 'mean', 'max', "
            f"'min', 'mul', ...), got {aggr!r}"
        )


class HeteroConv(nn.Module):
    """PyG's `HeteroConv(convs, aggr="sum")`: `convs` a dict {(src, rel, dst): layer}.

    `forward(x_dict, edge_index_dict, *other_dicts, **name_dicts)` -> {node type: tensor}, as PyG's:
    a positional dictionary gives each layer its value of the edge type, else of the node type
    (where source and destination are one), else the pair (source's, destination's); keyword
    arguments must end in `_dict` (`edge_attr_dict=` gives `edge_attr=`). An edge type with no
    value in any dictionary is skipped. The layers are kept under `convs.<src___rel___dst>`, as
    PyG names them, so a PyG HeteroConv's state_dict loads.
    """

    def __init__(self, convs: dict[Any, nn.Module], aggr: str | None = "sum"):
        super().__init__()
        if not isinstance(convs, dict) or not convs:
            raise ArgumentError(f"{LAYER}: convs must be a non-empty dict {{(src, rel, dst): layer}}")
        for edge_type, module in convs.items():
            if not isinstance(edge_type, tuple) or len(edge_type) != 3:
                raise ArgumentError(f"{LAYER}: the keys of convs are (src, rel, dst) edge types, got {edge_type!r}")
            if not isinstance(module, nn.Module):
                raise ArgumentError(f"{LAYER}: convs[{edge_type!r}] must be a torch module")
            if edge_type[0] != edge_type[-1] and getattr(module, "add_self_loops", False):
                raise ArgumentError(
                    f"{LAYER}: 'add_self_loops' attribute set to 'True' on module '{module}' for use with edge "
                    f"type(s) '{[edge_type]}'. This will lead to incorrect message passing results."
                )
        _check_aggr(aggr)
        sources, destinations = {k[0] for k in convs}, {k[-1] for k in convs}
        if sources - destinations:
            warnings.warn(
                f"There exist node types ({sources - destinations}) whose representations do not get updated "
                "during message passing as they do not occur as destination type in any edge type. This may "
                "lead to unexpected behavior.",
                stacklevel=2,
            )
        self.convs = hetero.ModuleDict(convs)
        self.aggr = aggr

    def reset_parameters(self) -> None:
        for conv in self.convs.values():
            conv.reset_parameters()  # type: ignore[operator]

    def forward(self, *args_dict: Any, **kwargs_dict: Any) -> dict[str, torch.Tensor | None]:
        for arg in kwargs_dict:
            if not arg.endswith("_dict"):
                raise ArgumentError(f"Keyword arguments in '{LAYER}' need to end with '_dict' (got '{arg}')")
        out_dict: dict[str, list[torch.Tensor]] = {}
        for edge_type, conv in self.convs.items():
            src, _, dst = edge_type
            found = False
            args = []
            for value_dict in args_dict:
                value, edge_level = _value(value_dict, edge_type)
                found |= edge_level
                if value is not _NONE:
                    args.append(value)
            kwargs = {}
            for name, value_dict in kwargs_dict.items():
                value, edge_level = _value(value_dict, edge_type)
                found |= edge_level
                if value is not _NONE:
                    kwargs[name[: -len("_dict")]] = value
            if not found:
                continue
            out_dict.setdefault(dst, []).append(conv(*args, **kwargs))
        return {key: hetero.group(value, self.aggr) for key, value in out_dict.items()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_relations={len(self.convs)})"


_NONE = object()


def _value(value_dict: Any, edge_type: tuple) -> tuple[Any, bool]:
    """(an edge type's argument from one dictionary, whether it was the edge type's own), PyG's rule."""
    if not isinstance(value_dict, dict):
        raise ArgumentError(
            f"{LAYER}: forward takes dictionaries by node or edge type, got {type(value_dict).__name__}"
        )
    src, _, dst = edge_type
    if edge_type in value_dict:
        return value_dict[edge_type], True
    if src == dst and src in value_dict:
        return value_dict[src], False
    if src in value_dict or dst in value_dict:
        return (value_dict.get(src), value_dict.get(dst)), False
    return _NONE, False


__all__ = ["HeteroConv"]
