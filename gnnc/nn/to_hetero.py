"""`to_hetero`: PyG's transformer of a homogeneous model into a heterogeneous one, for gnnc.nn layers.

    from gnnc.nn import SAGEConv, to_hetero   # instead of: from torch_geometric.nn import ...
    model = to_hetero(GNN(), data.metadata(), aggr="sum")
    out_dict = model(data.x_dict, data.edge_index_dict)

PyG's `to_hetero` traces the model with torch.fx and gives every message
passing layer a copy per edge type (a `ModuleDict` keyed as PyG keys it),
every other module a copy per node type, and sums (or "mean", "max", "min",
"mul") the edge types' results per destination type. It recognises message
passing layers by `isinstance(module, torch_geometric.nn.MessagePassing)`,
which gnnc.nn's layers are not (gnnc.nn does not need PyG): with PyG's own
`to_hetero` they would be copied per node type and called on one node
type's features with another's edge_index. This function runs PyG's
transformer with gnnc.nn's layers counted as message passing too, so the
result is the module PyG builds: same structure, same parameter names
(a PyG `to_hetero` model's `state_dict` loads), each edge type's layer its
own gnnc kernel calls. It needs torch_geometric installed.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from gnnc.nn.precompile import WarmUp

# PyG's transformer looks message passing layers up through a module-level function; it is
# replaced while one transform runs, and the lock keeps two threads' transforms apart
_patch_lock = threading.Lock()


def is_layer(module: Any) -> bool:
    """Whether `module` is one of gnnc.nn's message passing layers (every one mixes in `WarmUp`)."""
    return isinstance(module, WarmUp)


def to_hetero(
    module: torch.nn.Module,
    metadata: tuple,
    aggr: str = "sum",
    input_map: dict[str, str] | None = None,
    debug: bool = False,
) -> torch.fx.GraphModule:
    """PyG's `to_hetero(module, metadata, aggr, input_map, debug)` with gnnc.nn's layers as
    message passing layers (see the module docstring); the arguments are PyG's."""
    try:
        from torch_geometric.nn import fx
        from torch_geometric.nn.to_hetero_transformer import ToHeteroTransformer
    except ImportError as e:
        raise ImportError(
            "gnnc.nn.to_hetero runs PyG's to_hetero transformer: install torch-geometric "
            "(gnnc.nn.HeteroConv needs no PyG)"
        ) from e
    pyg_check = getattr(fx, "is_message_passing_op", None)
    if pyg_check is None:  # pragma: no cover - a PyG release that reorganised its transformer
        raise ImportError(
            "gnnc.nn.to_hetero needs torch_geometric.nn.fx.is_message_passing_op (PyG 2.x), which this "
            "torch-geometric lacks: use gnnc.nn.HeteroConv"
        )

    def is_message_passing_op(root: torch.nn.Module, op: str, target: str) -> bool:
        return pyg_check(root, op, target) or (op == "call_module" and is_layer(fx.get_submodule(root, target)))

    transformer = ToHeteroTransformer(module, metadata, aggr, input_map, debug)
    with _patch_lock:
        fx.is_message_passing_op = is_message_passing_op
        try:
            return transformer.transform()
        finally:
            fx.is_message_passing_op = pyg_check


__all__ = ["is_layer", "to_hetero"]
