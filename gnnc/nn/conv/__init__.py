"""Graph convolution layers with PyG's constructor arguments, forward signatures and parameter names."""

from gnnc.nn.conv.agnn_conv import AGNNConv
from gnnc.nn.conv.antisymmetric_conv import AntiSymmetricConv
from gnnc.nn.conv.appnp import APPNP
from gnnc.nn.conv.arma_conv import ARMAConv
from gnnc.nn.conv.cg_conv import CGConv
from gnnc.nn.conv.cheb_conv import ChebConv
from gnnc.nn.conv.cluster_gcn_conv import ClusterGCNConv
from gnnc.nn.conv.dir_gnn_conv import DirGNNConv
from gnnc.nn.conv.dna_conv import DNAConv
from gnnc.nn.conv.edge_conv import EdgeConv
from gnnc.nn.conv.eg_conv import EGConv
from gnnc.nn.conv.fa_conv import FAConv
from gnnc.nn.conv.feast_conv import FeaStConv
from gnnc.nn.conv.film_conv import FiLMConv
from gnnc.nn.conv.gat_conv import GATConv
from gnnc.nn.conv.gated_graph_conv import GatedGraphConv
from gnnc.nn.conv.gatv2_conv import GATv2Conv
from gnnc.nn.conv.gcn2_conv import GCN2Conv
from gnnc.nn.conv.gcn_conv import GCNConv
from gnnc.nn.conv.gen_conv import GENConv
from gnnc.nn.conv.general_conv import GeneralConv
from gnnc.nn.conv.gin_conv import GINConv, GINEConv
from gnnc.nn.conv.gmm_conv import GMMConv
from gnnc.nn.conv.graph_conv import GraphConv
from gnnc.nn.conv.hetero_conv import HeteroConv
from gnnc.nn.conv.hgt_conv import HGTConv
from gnnc.nn.conv.hypergraph_conv import HypergraphConv
from gnnc.nn.conv.le_conv import LEConv
from gnnc.nn.conv.lg_conv import LGConv
from gnnc.nn.conv.mf_conv import MFConv
from gnnc.nn.conv.mixhop_conv import MixHopConv
from gnnc.nn.conv.nn_conv import NNConv
from gnnc.nn.conv.pdn_conv import PDNConv
from gnnc.nn.conv.pna_conv import PNAConv
from gnnc.nn.conv.point_net_conv import PointNetConv
from gnnc.nn.conv.point_transformer_conv import PointTransformerConv
from gnnc.nn.conv.ppf_conv import PPFConv
from gnnc.nn.conv.res_gated_graph_conv import ResGatedGraphConv
from gnnc.nn.conv.rgat_conv import RGATConv
from gnnc.nn.conv.rgcn_conv import FastRGCNConv, RGCNConv
from gnnc.nn.conv.sage_conv import SAGEConv
from gnnc.nn.conv.sg_conv import SGConv
from gnnc.nn.conv.signed_conv import SignedConv
from gnnc.nn.conv.simple_conv import SimpleConv
from gnnc.nn.conv.ssg_conv import SSGConv
from gnnc.nn.conv.supergat_conv import SuperGATConv
from gnnc.nn.conv.tag_conv import TAGConv
from gnnc.nn.conv.transformer_conv import TransformerConv

__all__ = [
    "AGNNConv",
    "AntiSymmetricConv",
    "APPNP",
    "ARMAConv",
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
]
