"""PyG's ready-made models (`torch_geometric.nn.models`) with gnnc.nn's layers inside.

    from gnnc.nn.models import GraphSAGE   # instead of: from torch_geometric.nn.models import GraphSAGE
    model = GraphSAGE(in_channels, 256, num_layers=3, out_channels=47, dropout=0.5, jk="cat")

`GCN`, `GraphSAGE`, `GIN`, `GAT` (v2 too), `PNA` and `EdgeCNN` are PyG's `BasicGNN` models,
subclassed: everything around the layers is PyG's own code (dropout, the
activation, normalisation, jumping knowledge, the final Linear, `trim_to_layer`
for hierarchical neighbour sampling, `inference` over a loader, the
constructor's arguments and the parameter names), and `init_conv` builds
gnnc.nn's layer where PyG's builds its own, so a PyG model's `state_dict`
loads. `AttentiveFP` (its attention layers gnnc.nn's `GATEConv` and
`GATConv`), `LightGCN` (its `LGConv` layers gnnc.nn's), `LabelPropagation`
(gnnc.nn's own, `gnnc/nn/label_propagation.py`) and `CorrectAndSmooth`
(PyG's, around two of those) are PyG's models of the same names. This module
subclasses PyG's classes, so it needs torch-geometric installed (gnnc.nn
itself does not).
"""

from __future__ import annotations

from typing import Any

try:
    from torch_geometric.nn import models as pyg_models
    from torch_geometric.nn.models import basic_gnn
    from torch_geometric.nn.models.mlp import MLP
    from torch_geometric.utils import is_sparse, to_edge_index
except ImportError as e:  # pragma: no cover - exercised with torch_geometric hidden
    raise ImportError(
        "gnnc.nn.models subclasses PyG's BasicGNN models: install torch-geometric (gnnc.nn's layers need no PyG)"
    ) from e

import torch
from torch import nn

from gnnc.nn.attentive_fp import GATEConv
from gnnc.nn.conv import EdgeConv, GATConv, GATv2Conv, GCNConv, GINConv, LGConv, PNAConv, SAGEConv
from gnnc.nn.kernels import kernel
from gnnc.nn.label_propagation import LabelPropagation


class GCN(basic_gnn.GCN):
    """PyG's `GCN` model (`torch_geometric.nn.models.GCN`) of gnnc.nn's `GCNConv` layers."""

    def init_conv(self, in_channels: int, out_channels: int, **kwargs: Any) -> GCNConv:
        return GCNConv(in_channels, out_channels, **kwargs)


class GraphSAGE(basic_gnn.GraphSAGE):
    """PyG's `GraphSAGE` model of gnnc.nn's `SAGEConv` layers."""

    def init_conv(self, in_channels: Any, out_channels: int, **kwargs: Any) -> SAGEConv:
        return SAGEConv(in_channels, out_channels, **kwargs)


class GIN(basic_gnn.GIN):
    """PyG's `GIN` model of gnnc.nn's `GINConv` layers, each around PyG's two-layer `MLP` as in PyG."""

    def init_conv(self, in_channels: int, out_channels: int, **kwargs: Any) -> GINConv:
        mlp = MLP(
            [in_channels, out_channels, out_channels],
            act=self.act,
            act_first=self.act_first,
            norm=self.norm,
            norm_kwargs=self.norm_kwargs,
        )
        return GINConv(mlp, **kwargs)


class GAT(basic_gnn.GAT):
    """PyG's `GAT` model of gnnc.nn's `GATConv` (`v2=True`: `GATv2Conv`) layers; its `dropout`
    is the layers' attention dropout too, as in PyG."""

    def init_conv(self, in_channels: Any, out_channels: int, **kwargs: Any) -> GATConv | GATv2Conv:
        v2 = kwargs.pop("v2", False)
        heads = kwargs.pop("heads", 1)
        concat = kwargs.pop("concat", True)
        # PyG's rule: the layer that maps to out_channels (with jk set) averages its heads
        if getattr(self, "_is_conv_to_out", False):
            concat = False
        if concat and out_channels % heads != 0:
            raise ValueError(
                f"Ensure that the number of output channels of 'GATConv' (got '{out_channels}') is "
                f"divisible by the number of heads (got '{heads}')"
            )
        if concat:
            out_channels = out_channels // heads
        conv = GATv2Conv if v2 else GATConv
        return conv(in_channels, out_channels, heads=heads, concat=concat, dropout=self.dropout.p, **kwargs)


class PNA(basic_gnn.PNA):
    """PyG's `PNA` model of gnnc.nn's `PNAConv` layers (aggregators, scalers, deg, ... as PyG's keywords)."""

    def init_conv(self, in_channels: int, out_channels: int, **kwargs: Any) -> PNAConv:
        return PNAConv(in_channels, out_channels, **kwargs)


class EdgeCNN(basic_gnn.EdgeCNN):
    """PyG's `EdgeCNN` model (DGCNN) of gnnc.nn's `EdgeConv` layers, each around PyG's two-layer `MLP`
    over `[x_i, x_j - x_i]`, as in PyG (its first Linear split into per-vertex products)."""

    def init_conv(self, in_channels: int, out_channels: int, **kwargs: Any) -> EdgeConv:
        mlp = MLP(
            [2 * in_channels, out_channels, out_channels],
            act=self.act,
            act_first=self.act_first,
            norm=self.norm,
            norm_kwargs=self.norm_kwargs,
        )
        return EdgeConv(mlp, **kwargs)


#: A LightGCN ranking per pair `u -> v` of `edge_label_index`, without gathering two `[E, F]` rows
LINK_SCORES = """
kernel link_scores(x: f32[V, F]) -> f32[E] {
    out[e] = dot(x[u], x[v])
}
"""


class LightGCN(pyg_models.LightGCN):
    """PyG's `LightGCN` (recommendation: `recommend`, `predict_link`, the BPR and link losses are
    PyG's code) of gnnc.nn's `LGConv` layers; `**kwargs` go to the layers, as in PyG.

    `forward`'s rankings, `(out[src] * out[dst]).sum(-1)` in PyG, are one gnnc kernel over the
    pairs `edge_label_index` (`link_scores`): PyG's gathers two `[E, F]` tensors and scatters
    both gradients back, most of a full-graph training step."""

    def __init__(self, num_nodes: int, embedding_dim: int, num_layers: int, alpha: Any = None, **kwargs: Any):
        super().__init__(num_nodes, embedding_dim, num_layers, alpha, **kwargs)
        # PyG's LGConv draws nothing: the embedding's initialisation is PyG's, draw for draw
        self.convs = nn.ModuleList([LGConv(**kwargs) for _ in range(num_layers)])
        self._scores = kernel(LINK_SCORES, "link_scores")

    def forward(self, edge_index: Any, edge_label_index: Any = None, edge_weight: Any = None) -> Any:
        if edge_label_index is None:
            edge_label_index = to_edge_index(edge_index)[0] if is_sparse(edge_index) else edge_index
        out = self.get_embedding(edge_index, edge_weight)
        return self._scores(edge_label_index, out, num_vertices=out.shape[0])


def _in_place_of(theirs: torch.nn.Module, make: Any) -> torch.nn.Module:
    """gnnc's module `make()` holding `theirs`' parameters, made without a draw from torch's
    generator: a model built by PyG's constructor (its initialisation, draw for draw) whose
    layers are then swapped leaves the generator where PyG's model leaves it."""
    with torch.random.fork_rng(devices=[]):
        ours = make()
    ours.load_state_dict(theirs.state_dict())
    return ours


class AttentiveFP(pyg_models.AttentiveFP):
    """PyG's `AttentiveFP` (molecular property prediction; its GRUs, pooling and readout are PyG's
    code) of gnnc.nn's layers: the first layer gnnc's `GATEConv`, the atom and molecule layers
    gnnc's `GATConv` (no self loops, slope 0.01, PyG's arguments), each one kernel."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        edge_dim: int,
        num_layers: int,
        num_timesteps: int,
        dropout: float = 0.0,
    ):
        super().__init__(in_channels, hidden_channels, out_channels, edge_dim, num_layers, num_timesteps, dropout)
        h = hidden_channels

        def gat() -> GATConv:
            return GATConv(h, h, dropout=dropout, add_self_loops=False, negative_slope=0.01)

        theirs: Any = self  # PyG's attributes, untyped to mypy
        self.gate_conv = _in_place_of(theirs.gate_conv, lambda: GATEConv(h, h, edge_dim, dropout))
        self.atom_convs = nn.ModuleList([_in_place_of(conv, gat) for conv in theirs.atom_convs])
        self.mol_conv = _in_place_of(theirs.mol_conv, gat)


class CorrectAndSmooth(pyg_models.CorrectAndSmooth):
    """PyG's `CorrectAndSmooth` (C&S post-processing; `correct` and `smooth` are PyG's code) of
    gnnc.nn's `LabelPropagation`."""

    def __init__(
        self,
        num_correction_layers: int,
        correction_alpha: float,
        num_smoothing_layers: int,
        smoothing_alpha: float,
        autoscale: bool = True,
        scale: float = 1.0,
    ):
        super().__init__(
            num_correction_layers, correction_alpha, num_smoothing_layers, smoothing_alpha, autoscale, scale
        )
        self.prop1 = LabelPropagation(num_correction_layers, correction_alpha)
        self.prop2 = LabelPropagation(num_smoothing_layers, smoothing_alpha)


__all__ = [
    "AttentiveFP",
    "CorrectAndSmooth",
    "EdgeCNN",
    "GAT",
    "GCN",
    "GIN",
    "GraphSAGE",
    "LabelPropagation",
    "LightGCN",
    "PNA",
]
