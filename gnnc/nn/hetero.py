"""What gnnc.nn's heterogeneous layers share: PyG's dictionaries of modules and parameters, its
per-type linear layers, and a dictionary of edge types as one typed homogeneous graph.

PyG keys its heterogeneous layers' modules by node type (`"paper"`) and edge
type (`("author", "writes", "paper")`, kept as `"<author___writes___paper>"`,
dots as `#`); gnnc's `ModuleDict` and `ParameterDict` keep the same names,
so PyG's state_dicts load. `HeteroDictLinear` (a `Linear` per node type) and
`HeteroLinear` (a `[in, out]` matrix per type, `x @ weight[type]`) have
PyG's parameters and initialisation.

`homogeneous` numbers every node type's nodes one after the other (the
offsets of the features' concatenation) and every edge type by its position
in the layer's metadata: a dictionary of `[2, E_t]` edge_index tensors
becomes one edge_index with an edge type per edge, made once while the
tensors stay the same (so the gnnc Graph built from it is reused too).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.linear import Linear
from gnnc.torch import graphs

NodeType = str
EdgeType = tuple[str, str, str]


def internal_key(key: Any, reserved: frozenset[str] = frozenset(dir(nn.ModuleDict))) -> str:
    """PyG's name of a dictionary key: a tuple as `<a___b___c>`, dots as `#`, class attributes bracketed."""
    if isinstance(key, tuple):
        if len(key) < 2 or not all(isinstance(k, str) for k in key):
            raise ArgumentError(f"a type key must be a string or a tuple of strings, got {key!r}")
        key = f"<{'___'.join(key)}>"
    if not isinstance(key, str):
        raise ArgumentError(f"a type key must be a string or a tuple of strings, got {key!r}")
    if key in reserved:  # a class attribute's name
        key = f"<{key}>"
    return key.replace(".", "#")


def external_key(key: str, reserved: frozenset[str] = frozenset(dir(nn.ModuleDict))) -> Any:
    key = key.replace("#", ".")
    if key[0] == "<" and key[-1] == ">" and key[1:-1] in reserved:
        return key[1:-1]
    if key[0] == "<" and key[-1] == ">" and "___" in key:
        return tuple(key[1:-1].split("___"))
    return key


_PARAMETER_DICT = frozenset(dir(nn.ParameterDict))


class ModuleDict(nn.ModuleDict):
    """torch's ModuleDict keyed by node or edge types, with PyG's internal names."""

    def __init__(self, modules: Mapping[Any, nn.Module] | None = None):
        super().__init__({internal_key(k): m for k, m in (modules or {}).items()})

    def __getitem__(self, key: Any) -> nn.Module:
        return super().__getitem__(internal_key(key))

    def __setitem__(self, key: Any, module: nn.Module) -> None:
        super().__setitem__(internal_key(key), module)

    def __contains__(self, key: Any) -> bool:
        return super().__contains__(internal_key(key))

    def keys(self) -> list[Any]:  # type: ignore[override]
        return [external_key(k) for k in super().keys()]

    def items(self) -> list[tuple[Any, nn.Module]]:  # type: ignore[override]
        return [(external_key(k), v) for k, v in super().items()]

    def values(self) -> Iterable[nn.Module]:  # type: ignore[override]
        return list(super().values())


class ParameterDict(nn.ParameterDict):
    """torch's ParameterDict keyed by types, with PyG's internal names."""

    def __init__(self, parameters: Mapping[Any, nn.Parameter] | None = None):
        # an OrderedDict: torch sorts a plain dict's keys, PyG keeps their order
        super().__init__(OrderedDict((internal_key(k, _PARAMETER_DICT), p) for k, p in (parameters or {}).items()))

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(internal_key(key, _PARAMETER_DICT))

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(internal_key(key, _PARAMETER_DICT), value)

    def __contains__(self, key: Any) -> bool:
        return super().__contains__(internal_key(key, _PARAMETER_DICT))


class HeteroDictLinear(nn.Module):
    """PyG's `HeteroDictLinear(in_channels, out_channels, types=None)`: a `Linear` per node type
    (`lins.<type>`), applied to the types of a feature dictionary it has."""

    def __init__(self, in_channels: Any, out_channels: int, types: Any = None):
        super().__init__()
        if isinstance(in_channels, dict):
            channels = dict(in_channels)
        else:
            if types is None:
                raise ArgumentError("HeteroDictLinear: types are needed with one in_channels for them all")
            channels = dict.fromkeys(types, in_channels)
        self.in_channels, self.out_channels = channels, out_channels
        self.lins = ModuleDict({t: Linear(c, out_channels) for t, c in channels.items()})
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.lins.values():
            lin.reset_parameters()  # type: ignore[operator]

    def forward(self, x_dict: Mapping[Any, torch.Tensor]) -> dict[Any, torch.Tensor]:
        return {key: lin(x_dict[key]) for key, lin in self.lins.items() if key in x_dict}


class HeteroLinear(nn.Module):
    """PyG's `HeteroLinear(in_channels, out_channels, num_types, bias=False)` as HGTConv builds it:
    `weight` `[num_types, in, out]`, initialised as PyG's (kaiming uniform, fan = in_channels).

    HGTConv reads its matrices inside the kernel (`W[rel(e)]`), so the layer is only their holder."""

    def __init__(self, in_channels: int, out_channels: int, num_types: int):
        super().__init__()
        self.in_channels, self.out_channels, self.num_types = in_channels, out_channels, num_types
        self.weight = nn.Parameter(torch.empty(num_types, in_channels, out_channels))
        self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = (6.0 / ((1 + 5.0) * self.in_channels)) ** 0.5  # kaiming uniform, a = sqrt(5)
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, num_types={self.num_types}, bias=False"


@dataclass(frozen=True)
class Homogeneous:
    """A dictionary of edge types as one graph over the concatenated nodes."""

    #: `[2, E]` int64 over the nodes numbered type after type (`offsets`).
    edge_index: torch.Tensor
    #: `[E]` int64: each edge's type, its position in the layer's edge types.
    edge_type: torch.Tensor
    num_nodes: int


def edge_tensor(value: Any, edge_type: Any, layer: str) -> torch.Tensor:
    """An edge type's `[2, E]` edge_index (sparse adjacencies are refused: their values would be lost)."""
    adj = inputs.adjacency(value, f"edge_index_dict[{edge_type!r}]")
    if adj.sparse or adj.block:
        raise ArgumentError(f"{layer}: edge_index_dict[{edge_type!r}] must be a [2, E] edge_index tensor")
    return adj.edge_index


def homogeneous(
    edge_index_dict: Mapping[EdgeType, Any],
    offsets: Mapping[NodeType, int],
    num_nodes: int,
    relation_of: Mapping[EdgeType, int],
    layer: str,
    device: Any = None,
) -> Homogeneous:
    """The edge types of `edge_index_dict` that `relation_of` numbers, as one typed graph (see the module)."""
    parts = []
    for edge_type, value in edge_index_dict.items():
        if edge_type not in relation_of:
            continue
        src, _, dst = edge_type
        if src not in offsets or dst not in offsets:
            missing = src if src not in offsets else dst
            raise ArgumentError(f"{layer}: edge type {edge_type!r} connects node type {missing!r}, which x_dict lacks")
        parts.append((edge_type, edge_tensor(value, edge_type, layer)))
    if not parts:
        empty = torch.zeros(2, 0, dtype=torch.int64, device=device)
        return Homogeneous(empty, torch.zeros(0, dtype=torch.int64, device=device), num_nodes)
    key = ("nn.homogeneous", tuple((t, offsets[t[0]], offsets[t[2]], relation_of[t]) for t, _ in parts), num_nodes)
    states = tuple((weakref.ref(e), graphs.state_of(e)) for _, e in parts)

    def make() -> tuple[tuple, Homogeneous]:
        index = torch.cat(
            [
                torch.stack([e[0].to(torch.int64) + offsets[t[0]], e[1].to(torch.int64) + offsets[t[2]]])
                for t, e in parts
            ],
            dim=1,
        )
        types = torch.cat([e.new_full((e.shape[1],), relation_of[t], dtype=torch.int64) for t, e in parts])
        return states, Homogeneous(index, types, num_nodes)

    if torch.compiler.is_compiling():
        # traced, the concatenation is part of the compiled graph; its result is a new tensor per
        # call, so the op builds its gnnc Graph per call (not cached as in eager mode)
        return make()[1]
    first = parts[0][1]
    kept, made = graphs.derived(first, key, make)
    fresh = [(r(), s) for r, s in kept] == [(e, graphs.state_of(e)) for _, e in parts]
    if not fresh:
        kept, made = graphs.replace_derived(first, key, make())
    return made


def group(xs: list[torch.Tensor], aggr: str | None) -> torch.Tensor | None:
    """PyG's HeteroConv aggregation of the results of the edge types into one node type."""
    if not xs:
        return None
    if aggr is None:
        return torch.stack(xs, dim=1)
    if len(xs) == 1:
        return xs[0]
    if aggr == "cat":
        return torch.cat(xs, dim=-1)
    out = getattr(torch, aggr)(torch.stack(xs, dim=0), dim=0)
    return out[0] if isinstance(out, tuple) else out


__all__ = [
    "EdgeType",
    "HeteroDictLinear",
    "HeteroLinear",
    "Homogeneous",
    "ModuleDict",
    "NodeType",
    "ParameterDict",
    "edge_tensor",
    "external_key",
    "group",
    "homogeneous",
    "internal_key",
]
