"""PyG's `MessagePassing` keyword arguments, which every PyG layer passes on (`**kwargs`).

A PyG layer accepts `aggr`, `aggr_kwargs`, `flow`, `node_dim` and
`decomposed_layers` besides its own arguments. gnnc.nn's layers take them
too, and honour or refuse each with a clear error:

- `aggr`: a layer with a fixed aggregation (GCN's, GIN's, the attention
  layers' sum) accepts only that one ("add" and "sum" are one); its kernel
  computes nothing else.
- `aggr_kwargs`: only empty (the aggregations gnnc compiles take none).
- `flow`: "source_to_target" (PyG's default); "target_to_source" is refused
  (pass `edge_index.flip(0)`, the same graph read the other way).
- `node_dim`: the rows of 2-D features, -2 or 0 (the attention layers fix it);
  3-D features are static graphs with node_dim=-2 only (`static_graphs`).
- `decomposed_layers`: any positive count. PyG splits the feature columns
  into that many message passes to bound the memory of the E x F messages
  it materialises; gnnc's kernels never materialise them, and the result
  is the same.
"""

from __future__ import annotations

from typing import Any

from gnnc.errors import ArgumentError
from gnnc.nn.kernels import AGGREGATIONS

#: The keyword arguments of PyG's `MessagePassing.__init__`.
OPTIONS = ("aggr", "aggr_kwargs", "flow", "node_dim", "decomposed_layers")
FLOWS = ("source_to_target", "target_to_source")


def check_options(layer: str, options: dict[str, Any], aggr: str | None = "add", node_dim: bool = True) -> int:
    """`options` (a layer's **kwargs) checked as above; `aggr` is the layer's fixed aggregation
    (None: the layer takes `aggr` as its own argument), `node_dim` whether it may be given.
    Returns the node_dim given (-2 by default), which `static_graphs.call` reads."""
    allowed = [o for o in OPTIONS if (o != "aggr" or aggr is not None) and (o != "node_dim" or node_dim)]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ArgumentError(
            f"{layer} got an unexpected keyword argument {unknown[0]!r} (it takes {', '.join(allowed)})"
        )
    if "aggr" in options:
        given = options["aggr"]
        if not isinstance(given, str) or AGGREGATIONS.get(given) != AGGREGATIONS[aggr or "add"]:
            raise ArgumentError(
                f"{layer}: aggr={given!r} is not supported by gnnc.nn: this layer's kernel aggregates "
                f"with {aggr!r} (PyG's default) only"
            )
    if options.get("aggr_kwargs"):
        raise ArgumentError(f"{layer}: aggr_kwargs are not supported by gnnc.nn (its aggregations take none)")
    flow = options.get("flow", "source_to_target")
    if flow not in FLOWS:
        raise ArgumentError(f"{layer}: flow must be one of {FLOWS}, got {flow!r}")
    if flow != "source_to_target":
        raise ArgumentError(
            f"{layer}: flow={flow!r} is not supported by gnnc.nn: pass edge_index.flip(0) "
            "(the same graph read the other way) with the default flow"
        )
    if options.get("node_dim", -2) not in (-2, 0):
        raise ArgumentError(
            f"{layer}: node_dim={options['node_dim']!r} is not supported: gnnc.nn's features are "
            "[num_nodes, channels] (node_dim -2 or 0)"
        )
    layers = options.get("decomposed_layers", 1)
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ArgumentError(f"{layer}: decomposed_layers must be a positive integer, got {layers!r}")
    return int(options.get("node_dim", -2))


class CachedGraph:
    """A layer with PyG's `cached=True`: `_cached` holds what it derived from the first call's
    graph (normalisation weights, loops). A copy (pickle, deepcopy, torch.save) leaves it out and
    makes it again from its own next call: the tensors belong to that graph, not to the layer."""

    _cached: Any

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cached"] = None
        return state


__all__ = ["CachedGraph", "FLOWS", "OPTIONS", "check_options"]
