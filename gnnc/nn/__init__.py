"""gnnc.nn: PyTorch Geometric's layers with their message passing compiled by gnnc.

    from gnnc.nn import GCNConv      # instead of: from torch_geometric.nn import GCNConv

Each layer takes PyG's constructor arguments and `forward` inputs and has
PyG's parameter names and shapes, so a PyG layer's `state_dict()` loads
into the gnnc layer of the same name. The message passing of a layer is
one fused gnnc kernel (its module docstring shows it); the dense
transforms are torch's.

Mini-batches: a layer takes a sampled block (`gnnc.nn.blocks` of a PyG
NeighborLoader batch, DGL blocks, `(edge_index, size)` pairs) as its graph;
`gnnc.nn.warm_up(model)` compiles the kernels before the first batch.

Heterogeneous graphs: the relational layers, `HeteroConv`, and `gnnc.nn.to_hetero`
(PyG's `to_hetero` for models built from these layers). PyG's ready-made
models of these layers: `gnnc.nn.models` (it needs torch-geometric).
"""

from gnnc.nn.conv import (
    APPNP,
    AGNNConv,
    AntiSymmetricConv,
    ARMAConv,
    CGConv,
    ChebConv,
    ClusterGCNConv,
    DirGNNConv,
    DNAConv,
    EdgeConv,
    EGConv,
    FAConv,
    FastRGCNConv,
    FeaStConv,
    FiLMConv,
    GATConv,
    GatedGraphConv,
    GATv2Conv,
    GCN2Conv,
    GCNConv,
    GENConv,
    GeneralConv,
    GINConv,
    GINEConv,
    GMMConv,
    GraphConv,
    HeteroConv,
    HGTConv,
    HypergraphConv,
    LEConv,
    LGConv,
    MFConv,
    MixHopConv,
    NNConv,
    PDNConv,
    PNAConv,
    PointNetConv,
    PointTransformerConv,
    PPFConv,
    ResGatedGraphConv,
    RGATConv,
    RGCNConv,
    SAGEConv,
    SGConv,
    SignedConv,
    SimpleConv,
    SSGConv,
    SuperGATConv,
    TAGConv,
    TransformerConv,
)
from gnnc.nn.precompile import warm_up
from gnnc.nn.sampled import Block, blocks
from gnnc.nn.to_hetero import to_hetero

__all__ = [
    "AGNNConv",
    "AntiSymmetricConv",
    "APPNP",
    "ARMAConv",
    "Block",
    "CGConv",
    "ChebConv",
    "ClusterGCNConv",
    "DirGNNConv",
    "DNAConv",
    "EdgeConv",
    "EGConv",
    "FAConv",
    "FastRGCNConv",
    "FeaStConv",
    "FiLMConv",
    "GATConv",
    "GatedGraphConv",
    "GATv2Conv",
    "GCN2Conv",
    "GCNConv",
    "GENConv",
    "GeneralConv",
    "GINConv",
    "GINEConv",
    "GMMConv",
    "GraphConv",
    "HeteroConv",
    "HGTConv",
    "HypergraphConv",
    "LEConv",
    "LGConv",
    "MFConv",
    "MixHopConv",
    "NNConv",
    "PDNConv",
    "PNAConv",
    "PointNetConv",
    "PointTransformerConv",
    "PPFConv",
    "ResGatedGraphConv",
    "RGATConv",
    "RGCNConv",
    "SAGEConv",
    "SGConv",
    "SignedConv",
    "SimpleConv",
    "SSGConv",
    "SuperGATConv",
    "TAGConv",
    "TransformerConv",
    "blocks",
    "to_hetero",
    "warm_up",
]
