"""Every gnnc.nn layer against PyG's layer of the same name: one forward and backward, same weights.

    python benchmarks/layers.py                                  # rmat-16, 64 -> 64 channels, every layer
    python benchmarks/layers.py --graph mdual --layers ChebConv,TAGConv --channels 128

Each layer (as built below: the configuration a user starts from) runs on
the same graph and features in both frameworks, PyG's state_dict loaded
into gnnc's; features need a gradient, edge weights and edge features
where the layer reads them; interleaved, medians of wall time. Peak: each
framework's transient RSS high-water mark over its first call, alone (the
graph's conversion and gnnc's compile included). benchmarks/nn.py has the
full training epochs of the models issue 26 names; this is the layer
coverage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import graphs  # noqa: E402
from overhead import machine, peak_mib, wall_medians  # noqa: E402


def _mlp(c: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(c, c), torch.nn.ReLU(), torch.nn.Linear(c, c))


def _mlp_in(i: int, c: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(i, c), torch.nn.ReLU(), torch.nn.Linear(c, c))


class _Points(torch.nn.Module):
    """PointNetConv with the features' first 3 columns as positions."""

    def __init__(self, conv: torch.nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv(x, x[:, :3], edge_index)


class _PointsNormals(torch.nn.Module):
    """PPFConv with the features' columns 0-2 as positions and 2-4 as normals."""

    def __init__(self, conv: torch.nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv(x, x[:, :3], x[:, 2:5], edge_index)


class _Signed(torch.nn.Module):
    """SignedConv with the reversed edges as the negative graph."""

    def __init__(self, conv: torch.nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv(x, edge_index, edge_index.flip(0))


class _History(torch.nn.Module):
    """DNAConv on a history of two layers: the features and their tanh."""

    def __init__(self, conv: torch.nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.stack([x, x.tanh()], 1), edge_index)


#: (layer, constructor, forward's extra inputs: "w" edge weights, "a" edge features, "t" edge types,
#: "x0" initial features)
LAYERS: list[tuple[str, Any, str]] = [
    ("GCNConv", lambda m, c: m.GCNConv(c, c), "w"),
    ("SAGEConv", lambda m, c: m.SAGEConv(c, c), ""),
    ("GraphConv", lambda m, c: m.GraphConv(c, c), "w"),
    ("GINConv", lambda m, c: m.GINConv(_mlp(c)), ""),
    ("GINEConv", lambda m, c: m.GINEConv(_mlp(c), edge_dim=8), "a"),
    ("GATConv", lambda m, c: m.GATConv(c, c // 4, heads=4), ""),
    ("GATv2Conv", lambda m, c: m.GATv2Conv(c, c // 4, heads=4), ""),
    ("TransformerConv", lambda m, c: m.TransformerConv(c, c // 4, heads=4), ""),
    ("AGNNConv", lambda m, c: m.AGNNConv(), ""),
    ("APPNP", lambda m, c: m.APPNP(10, 0.1), "w"),
    ("SGConv", lambda m, c: m.SGConv(c, c, K=2), "w"),
    ("SSGConv", lambda m, c: m.SSGConv(c, c, 0.1, K=2), "w"),
    ("TAGConv", lambda m, c: m.TAGConv(c, c, K=3), "w"),
    ("ClusterGCNConv", lambda m, c: m.ClusterGCNConv(c, c), ""),
    ("GCN2Conv", lambda m, c: m.GCN2Conv(c, 0.1, 0.5, 1), "x0"),
    ("ChebConv", lambda m, c: m.ChebConv(c, c, K=3), "w"),
    ("GatedGraphConv", lambda m, c: m.GatedGraphConv(c, 2), "w"),
    ("ResGatedGraphConv", lambda m, c: m.ResGatedGraphConv(c, c), ""),
    ("LEConv", lambda m, c: m.LEConv(c, c), "w"),
    ("MFConv", lambda m, c: m.MFConv(c, c), ""),
    ("CGConv", lambda m, c: m.CGConv(c, dim=8), "a"),
    ("GENConv", lambda m, c: m.GENConv(c, c, edge_dim=8), "a"),
    ("GeneralConv", lambda m, c: m.GeneralConv(c, c), ""),
    ("GeneralConv-att", lambda m, c: m.GeneralConv(c, c, attention=True), ""),
    ("LGConv", lambda m, c: m.LGConv(), "w"),
    ("SimpleConv", lambda m, c: m.SimpleConv("mean", combine_root="sum"), "w"),
    ("FAConv", lambda m, c: m.FAConv(c), "x0"),
    ("FiLMConv", lambda m, c: m.FiLMConv(c, c, 4), "t"),
    ("FeaStConv", lambda m, c: m.FeaStConv(c, c, heads=4), ""),
    ("EdgeConv", lambda m, c: m.EdgeConv(torch.nn.Linear(2 * c, c)), ""),
    ("EdgeConv-mlp", lambda m, c: m.EdgeConv(_mlp_in(2 * c, c)), ""),
    ("PointNetConv", lambda m, c: _Points(m.PointNetConv(torch.nn.Linear(c + 3, c))), ""),
    # NNConv at c -> c would hold E x c x c floats of theta (16 GB on rmat-16): c -> 4
    ("NNConv", lambda m, c: m.NNConv(c, 4, torch.nn.Linear(8, 4 * c), aggr="mean"), "a"),
    ("GMMConv", lambda m, c: m.GMMConv(c, c, dim=8, kernel_size=4), "a"),
    ("PDNConv", lambda m, c: m.PDNConv(c, c, edge_dim=8, hidden_channels=16), "a"),
    ("ARMAConv", lambda m, c: m.ARMAConv(c, c, num_stacks=2, num_layers=2), "w"),
    ("MixHopConv", lambda m, c: m.MixHopConv(c, c // 3), "w"),
    ("DirGNNConv", lambda m, c: m.DirGNNConv(m.GCNConv(c, c)), ""),
    ("AntiSymmetricConv", lambda m, c: m.AntiSymmetricConv(c), ""),
    ("SuperGATConv", lambda m, c: m.SuperGATConv(c, c // 4, heads=4), ""),
    ("EGConv", lambda m, c: m.EGConv(c, c, ["symnorm", "max", "std"]), ""),
    ("HypergraphConv", lambda m, c: m.HypergraphConv(c, c), ""),
    ("PointTransformerConv", lambda m, c: _Points(m.PointTransformerConv(c, c)), ""),
    ("PPFConv", lambda m, c: _PointsNormals(m.PPFConv(torch.nn.Linear(c + 4, c))), ""),
    ("SignedConv", lambda m, c: _Signed(m.SignedConv(c, c // 2, True)), ""),
    ("DNAConv", lambda m, c: _History(m.DNAConv(c, heads=4)), ""),
    (
        "PNAConv",
        lambda m, c: m.PNAConv(
            c,
            c,
            ["mean", "min", "max", "std"],
            ["identity", "amplification", "attenuation"],
            torch.tensor([0, 1, 2, 4, 8, 4, 2, 1]),
            edge_dim=8,
            towers=4,
        ),
        "a",
    ),
    ("RGCNConv", lambda m, c: m.RGCNConv(c, c, 4), "t"),
]


def _rank(model: Any, given: dict) -> None:
    model(given["edge_index"]).sum().backward()


def _propagate(model: Any, given: dict) -> None:
    model(given["y"], given["edge_index"], given["mask"])


def _correct_and_smooth(model: Any, given: dict) -> None:
    y_true, mask, edge_index = given["y"][given["mask"]], given["mask"], given["edge_index"]
    model.smooth(model.correct(given["y_soft"], y_true, mask, edge_index), y_true, mask, edge_index)


def _molecules(model: Any, given: dict) -> None:
    model(given["x"], given["edge_index"], given["edge_attr"], given["batch"]).sum().backward()


#: PyG's models of gnnc.nn.models that are not BasicGNN stacks (benchmarks/nn.py has those):
#: (model, constructor (module, vertices, channels), one call: LightGCN's rankings of every edge,
#: forward + backward; label propagation (no gradient, as PyG's) of 16 classes from half the vertices)
MODELS: list[tuple[str, Any, Any]] = [
    ("LightGCN", lambda m, n, c: m.LightGCN(n, c, 3), _rank),
    ("LabelPropagation", lambda m, n, c: m.LabelPropagation(3, 0.9), _propagate),
    ("CorrectAndSmooth", lambda m, n, c: m.CorrectAndSmooth(3, 0.8, 3, 0.6), _correct_and_smooth),
    # the graph's vertices as 1,024 "molecules" of consecutive ids, 10 edge features
    ("AttentiveFP", lambda m, n, c: m.AttentiveFP(c, c, 1, 10, num_layers=2, num_timesteps=2), _molecules),
]


def _model_inputs(n: int, edge_index: torch.Tensor, x: torch.Tensor) -> dict:
    g = torch.Generator().manual_seed(1)
    return {
        "edge_index": edge_index,
        "y": torch.randint(0, 16, (n,), generator=g),
        "mask": torch.rand(n, generator=g) < 0.5,
        "y_soft": torch.softmax(torch.randn(n, 16, generator=g), 1),
        "x": x,
        "edge_attr": torch.randn(edge_index.shape[1], 10, generator=g),
        "batch": torch.arange(n) * 1024 // n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graph", default="rmat-16")
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--layers", default=",".join(name for name, _, _ in LAYERS))
    parser.add_argument("--models", default=",".join(name for name, _, _ in MODELS))
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import torch_geometric.nn as pyg

    import gnnc.nn as gnn

    if args.graph.startswith("rmat-"):
        src, dst, n = graphs.rmat_edges(int(args.graph.split("-")[1]), 16, seed=0)
    else:
        src, dst, n = graphs.edges(args.graph)
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    order = np.lexsort((src, dst))
    edge_index = torch.from_numpy(np.ascontiguousarray(np.stack([src[order], dst[order]])))
    e, c = edge_index.shape[1], args.channels
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, generator=g, requires_grad=True)
    inputs = {
        "w": torch.rand(e, generator=g) + 0.1,
        "a": torch.randn(e, 8, generator=g),
        "t": torch.randint(0, 4, (e,), generator=g),
        "x0": torch.randn(n, c, generator=g),
    }
    print(f"# {machine()}")
    print(
        f"# {args.graph}: {n} vertices, {e} edges; {c} -> {c} channels; forward + backward, ms (median of {args.reps})"
    )
    print(f"{'layer':<18} {'pyg ms':>9} {'gnnc ms':>9} {'pyg/gnnc':>9} {'pyg MiB':>8} {'gnnc MiB':>9}")
    wanted = args.layers.split(",")
    cases = []
    for name, make, extra_kind in LAYERS:
        if name not in wanted:
            continue
        torch.manual_seed(0)
        theirs = make(pyg, c)
        ours = make(gnn, c)
        ours.load_state_dict(theirs.state_dict())
        extra = tuple(inputs[k] for k in extra_kind.split(",") if k)

        def step(layer: torch.nn.Module, extra: tuple = extra, extra_kind: str = extra_kind) -> None:
            if extra and extra_kind == "x0":
                out = layer(x, extra[0], edge_index)
            else:
                out = layer(x, edge_index, *extra)
            out.sum().backward()

        # (each case's own step, bound now: the calls come after the loop)
        cases.append((name, {"pyg": lambda m=theirs, f=step: f(m), "gnnc": lambda m=ours, f=step: f(m)}))
    import torch_geometric.nn.models as pyg_models

    import gnnc.nn.models as gnn_models

    model_inputs = _model_inputs(n, edge_index, x)
    for name, make, run in MODELS:
        if name not in args.models.split(","):
            continue
        torch.manual_seed(0)
        theirs = make(pyg_models, n, c)
        torch.manual_seed(0)
        ours = make(gnn_models, n, c)
        cases.append(
            (
                name,
                {"pyg": lambda m=theirs, r=run: r(m, model_inputs), "gnnc": lambda m=ours, r=run: r(m, model_inputs)},
            )
        )
    for name, runs in cases:
        try:
            peaks = {k: peak_mib(r) for k, r in runs.items()}
        except Exception as exc:  # noqa: BLE001 - a layer that fails is reported, not fatal
            print(f"{name:<18} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}", flush=True)
            continue
        ms = wall_medians(runs, args.reps)
        print(
            f"{name:<18} {ms['pyg']:9.1f} {ms['gnnc']:9.1f} {ms['pyg'] / ms['gnnc']:9.2f} "
            f"{peaks['pyg']:8.0f} {peaks['gnnc']:9.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
