"""Graph convolution layers with PyG's constructor arguments, forward signatures and parameter names."""

from gnnc.nn.conv.gcn_conv import GCNConv

__all__ = ["GCNConv"]
