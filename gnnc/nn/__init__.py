"""gnnc.nn: PyTorch Geometric's layers with their message passing compiled by gnnc.

    from gnnc.nn import GCNConv      # instead of: from torch_geometric.nn import GCNConv

Each layer takes PyG's constructor arguments and `forward` inputs and has
PyG's parameter names and shapes, so a PyG layer's `state_dict()` loads
into the gnnc layer of the same name. The message passing of a layer is
one fused gnnc kernel (its module docstring shows it); the dense
transforms are torch's.
"""

from gnnc.nn.conv import (
    APPNP,
    GATConv,
    GATv2Conv,
    GCNConv,
    GINConv,
    GINEConv,
    GraphConv,
    SAGEConv,
    TransformerConv,
)

__all__ = [
    "APPNP",
    "GATConv",
    "GATv2Conv",
    "GCNConv",
    "GINConv",
    "GINEConv",
    "GraphConv",
    "SAGEConv",
    "TransformerConv",
]
