"""gnnc.nn's layers on CUDA tensors, without a GPU: every tensor a layer makes is on the input's
device, and gnnc's ops run their CUDA implementation (`tests/fake_cuda.py`'s stand-in tensors:
they say they are on cuda:0 and keep their data on the CPU; each op's CUDA forward is computed by
its CPU kernel, so the outputs are compared with the same layer on CPU tensors)."""

from __future__ import annotations

import pytest
import torch

from tests.fake_cuda import OnGpu, on_gpu, stand_in_cuda
from tests.helpers import torch_gpu_missing
from tests.nn_oracle import features

pytest.importorskip("torch_geometric")
import gnnc  # noqa: E402
import gnnc.nn as gnn  # noqa: E402
from gnnc.errors import ArgumentError  # noqa: E402
from gnnc.torch import ops  # noqa: E402

CUDA_FORWARD = ops.KernelOps.cuda_forward

N = 9
EDGE_INDEX = torch.tensor([[0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 4, 2], [1, 2, 0, 3, 3, 5, 6, 7, 8, 0, 1, 2]])


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))


LAYERS = {
    "GCNConv": lambda: gnn.GCNConv(4, 3),
    "GCNConv-unnormalized": lambda: gnn.GCNConv(4, 3, normalize=False),
    "SAGEConv-max": lambda: gnn.SAGEConv(4, 3, aggr="max"),
    "GraphConv": lambda: gnn.GraphConv(4, 3),
    "GINConv": lambda: gnn.GINConv(_mlp(), train_eps=True),
    "GINEConv": lambda: gnn.GINEConv(_mlp(), edge_dim=2),
    "APPNP-dropout": lambda: gnn.APPNP(2, 0.1, dropout=0.3),
    "GATConv-dropout": lambda: gnn.GATConv(4, 3, heads=2, dropout=0.4, edge_dim=2, fill_value="mean"),
    "GATv2Conv-dropout": lambda: gnn.GATv2Conv(4, 3, heads=2, dropout=0.4),
    "TransformerConv-dropout": lambda: gnn.TransformerConv(4, 3, heads=2, dropout=0.4, edge_dim=2),
    "AGNNConv": lambda: gnn.AGNNConv(),
    "SGConv": lambda: gnn.SGConv(4, 3, K=2),
    "SSGConv": lambda: gnn.SSGConv(4, 3, 0.2, K=2),
    "TAGConv": lambda: gnn.TAGConv(4, 3, K=2),
    "GCN2Conv": lambda: gnn.GCN2Conv(4, 0.1, 0.5, 1, shared_weights=False),
    "ClusterGCNConv": lambda: gnn.ClusterGCNConv(4, 3, diag_lambda=0.2),
    "ChebConv": lambda: gnn.ChebConv(4, 3, K=3),
    "ResGatedGraphConv-edges": lambda: gnn.ResGatedGraphConv(4, 3, edge_dim=2),
    "LEConv": lambda: gnn.LEConv(4, 3),
    "CGConv-edges": lambda: gnn.CGConv(4, dim=2),
    "GENConv-edges": lambda: gnn.GENConv(4, 3, learn_t=True, edge_dim=2, msg_norm=True),
    "GeneralConv-edges": lambda: gnn.GeneralConv(4, 3, 2, heads=2, directed_msg=False, attention=True),
    "GeneralConv-dot": lambda: gnn.GeneralConv(4, 3, heads=2, attention=True, attention_type="dot_product"),
    "LGConv": lambda: gnn.LGConv(),
    "SimpleConv-self_loop": lambda: gnn.SimpleConv("mean", combine_root="self_loop"),
    "FAConv-dropout": lambda: gnn.FAConv(4, dropout=0.3),
    "FeaStConv": lambda: gnn.FeaStConv(4, 3, heads=2),
    "FiLMConv": lambda: gnn.FiLMConv(4, 3),
    "EdgeConv": lambda: gnn.EdgeConv(torch.nn.Linear(8, 3)),
    "EdgeConv-mlp": lambda: gnn.EdgeConv(
        torch.nn.Sequential(torch.nn.Linear(8, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3)), aggr="mean"
    ),
    "PointNetConv": lambda: gnn.PointNetConv(
        torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    ),
    "PNAConv-edges": lambda: gnn.PNAConv(
        4,
        3,
        ["mean", "min", "max", "std"],
        ["identity", "amplification", "attenuation"],
        torch.tensor([0, 2, 3, 1]),
        edge_dim=2,
    ),
    "PNAConv-deep": lambda: gnn.PNAConv(
        4, 3, ["sum", "var"], ["linear"], torch.tensor([0, 2, 3, 1]), pre_layers=2, post_layers=2
    ),
    "NNConv-edges": lambda: gnn.NNConv(4, 3, torch.nn.Linear(2, 12), aggr="mean"),
    "GMMConv-edges": lambda: gnn.GMMConv(4, 3, dim=2, kernel_size=2),
    "GMMConv-separate-edges": lambda: gnn.GMMConv(4, 3, dim=2, kernel_size=2, separate_gaussians=True),
    "PDNConv-edges": lambda: gnn.PDNConv(4, 3, edge_dim=2, hidden_channels=5),
    "PDNConv-max-edges": lambda: gnn.PDNConv(4, 3, edge_dim=2, hidden_channels=5, aggr="max"),
    "ARMAConv-dropout": lambda: gnn.ARMAConv(4, 3, num_stacks=2, num_layers=2, dropout=0.3),
    "MixHopConv": lambda: gnn.MixHopConv(4, 3),
    "MixHopConv-no-loops": lambda: gnn.MixHopConv(4, 1, add_self_loops=False),
    "AntiSymmetricConv": lambda: gnn.AntiSymmetricConv(4, num_iters=2),
    "DirGNNConv": lambda: gnn.DirGNNConv(gnn.GCNConv(4, 3)),
    "SuperGATConv-dropout": lambda: gnn.SuperGATConv(4, 3, heads=2, dropout=0.4),
    "EGConv": lambda: gnn.EGConv(4, 4, ["symnorm", "max", "std"], num_heads=2, num_bases=2),
    "HypergraphConv": lambda: gnn.HypergraphConv(4, 3),
    "PointTransformerConv": lambda: gnn.PointTransformerConv(4, 3),
    "PPFConv": lambda: gnn.PPFConv(torch.nn.Linear(8, 3)),
    "SignedConv": lambda: gnn.SignedConv(2, 3, False),
    "DNAConv-dropout": lambda: gnn.DNAConv(4, heads=2, groups=2, dropout=0.3),
    # (GatedGraphConv is left out: torch's GRUCell calls a fused op that only a real CUDA build has,
    # which the stand-in tensors cannot run; MFConv too: its degree buckets' `nonzero`)
}


#: Graph forms beside the edge_index: a bipartite block with fewer sources than
#: destinations (GAT's partial self loops) and a SparseTensor adjacency (a torch.sparse one
#: cannot be a stand-in: torch has no sparse wrapper tensors).
FORMS = {
    "GATConv-bipartite": "bipartite",
    "GATv2Conv-bipartite": "bipartite",
    "GCNConv-SparseTensor": "SparseTensor",
    "SAGEConv-SparseTensor": "SparseTensor",
    "APPNP-SparseTensor": "SparseTensor",
    "GCNConv-Graph": "Graph",
    "SAGEConv-Graph": "Graph",
    "EGConv-SparseTensor": "SparseTensor",
}
LAYERS.update(
    {
        "GATConv-bipartite": lambda: gnn.GATConv((4, 4), 3, heads=2, dropout=0.4),
        "GATv2Conv-bipartite": lambda: gnn.GATv2Conv(4, 3, heads=2),
        "GCNConv-SparseTensor": lambda: gnn.GCNConv(4, 3, improved=True),
        "SAGEConv-SparseTensor": lambda: gnn.SAGEConv(4, 3),
        "APPNP-SparseTensor": lambda: gnn.APPNP(2, 0.1, dropout=0.3),
        "GCNConv-Graph": lambda: gnn.GCNConv(4, 3),
        "SAGEConv-Graph": lambda: gnn.SAGEConv(4, 3),
        "EGConv-SparseTensor": lambda: gnn.EGConv(4, 4, ["symnorm", "sum"], num_heads=2),
    }
)


def _inputs(name: str, device) -> tuple:
    """(x, graph, edge_attr) of a case, moved by `device` (OnGpu or nothing)."""
    x = device(features(N, 4, 1, grad=False))
    edge_attr = device(features(EDGE_INDEX.shape[1], 2, 2, grad=False))
    form = FORMS.get(name)
    if form == "bipartite":
        return (device(features(5, 4, 3, grad=False)), x), device(EDGE_INDEX[:, EDGE_INDEX[0] < 5]), edge_attr
    if form == "SparseTensor":
        from tests.sparse_tensor import SparseTensor

        row, col = device(EDGE_INDEX[1]), device(EDGE_INDEX[0])
        return (
            x,
            SparseTensor(
                row=row,
                col=col,
                value=device(torch.rand(EDGE_INDEX.shape[1], generator=torch.Generator().manual_seed(4))),
                sparse_sizes=(N, N),
            ),
            edge_attr,
        )
    if form == "Graph":  # on the host: its edge_index goes to the device once
        return x, gnnc.Graph.from_edge_index(EDGE_INDEX.numpy(), num_vertices=N), edge_attr
    return x, device(EDGE_INDEX), edge_attr


def _call(name: str, layer, x, edge_index, edge_attr):
    if name.startswith(("GINEConv", "TransformerConv")) or name.endswith("-edges") or name == "GATConv-dropout":
        return layer(x, edge_index, edge_attr)
    if name.startswith("PointNetConv"):
        return layer(x, x[:, :3], edge_index)
    if name == "GCN2Conv" or name.startswith("FAConv"):
        return layer(x, x, edge_index)
    if name.startswith("PointTransformerConv"):
        return layer(x, x[:, :3], edge_index)
    if name.startswith("PPFConv"):
        return layer(x, x[:, :3], x[:, 1:4], edge_index)
    if name.startswith("SignedConv"):
        return layer(x, edge_index, edge_index.flip(0))
    if name.startswith("DNAConv"):
        return layer(torch.stack([x, 2 * x], 1), edge_index)
    return layer(x, edge_index)


def _on_gpu(t: torch.Tensor) -> OnGpu:
    return OnGpu(t)


@pytest.mark.parametrize("name", list(LAYERS))
def test_layers_make_their_tensors_on_the_input_device(monkeypatch, name):
    launches: list = []
    mode = stand_in_cuda(monkeypatch, launches)
    torch.manual_seed(0)
    layer = LAYERS[name]().train()
    with torch.no_grad():
        torch.manual_seed(3)
        expected = _call(name, layer, *_inputs(name, lambda t: t))
        with mode:
            gpu_layer = on_gpu(layer)
            torch.manual_seed(3)  # the stand-ins draw from the CPU generator: the CPU run's masks
            out = _call(name, gpu_layer, *_inputs(name, _on_gpu))
    assert isinstance(out, OnGpu) and out.device.type == "cuda"
    torch.testing.assert_close(out.inner, expected, rtol=1e-5, atol=1e-6)
    # the ops ran their CUDA implementation, on inputs all on the device
    assert mode.gnnc_ops and launches
    assert all(device.type == "cuda" for _, devices, _ in launches for device in devices)
    assert {call_device.type for _, _, call_device in launches} == {"cuda"}
    # nothing was made on the host and copied over (but a host Graph's edges and its GCN loop
    # weights); the one copy back is the graph's (built on the host)
    if FORMS.get(name) == "Graph":
        assert [shape for _, shape in mode.uploads] in ([(2, EDGE_INDEX.shape[1])], [(2, N), (2, EDGE_INDEX.shape[1])])
    elif name.startswith("SuperGATConv"):
        # its negative edges are sampled on the host, as PyG's (Python's random), and go over once
        assert [shape[0] for _, shape in mode.uploads] == [2]
    else:
        assert mode.uploads == []
    # (DirGNNConv's and HypergraphConv's: one per direction, the reversed edges a tensor of their own;
    # SignedConv's: its positive and its negative edges)
    graphs_built = 2 if name.startswith(("DirGNNConv", "HypergraphConv", "SignedConv")) else 1
    if name.startswith("SuperGATConv"):
        # training samples negatives on the host from the edges and their loops (PyG's too: Python's
        # random), and builds their graph there
        assert len(mode.downloads) <= 4
    else:
        assert len(mode.downloads) <= graphs_built and all(shape[0] == 2 for _, shape in mode.downloads)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["GCNConv", "SAGEConv-max", "GINConv", "APPNP-dropout", "GATConv-dropout"])
def test_half_precision_gets_a_clear_error(name, dtype):
    layer = LAYERS[name]().to(dtype)
    x = torch.randn(N, 4, dtype=dtype)
    with pytest.raises(ArgumentError, match=r"is torch\.(b?float16).*float32 or float64.*half precision"):
        _call(name, layer, x, EDGE_INDEX, torch.randn(EDGE_INDEX.shape[1], 2, dtype=dtype))
    with pytest.raises(ArgumentError, match=r"float32 or float64.*half precision"):
        gnn.SAGEConv((4, 4), 3)((torch.randn(N, 4), torch.randn(N, 4, dtype=dtype)), EDGE_INDEX)


@pytest.mark.parametrize("name", ["GCNConv", "GATConv-dropout"])
def test_layers_launch_their_ptx_through_the_driver(monkeypatch, name):
    """The whole CUDA path, PTX and launches, through the fake driver (which runs nothing:
    the values are not checked, where the launches go and what they read is)."""
    from gnnc.runtime import cuda as cuda_runtime
    from tests.fake_cuda import FakeDriver

    driver = FakeDriver()
    monkeypatch.setattr(cuda_runtime, "driver", lambda: driver)
    mode = stand_in_cuda(monkeypatch, [])
    monkeypatch.setattr(ops.KernelOps, "cuda_forward", CUDA_FORWARD)  # the real one, not the CPU stand-in
    torch.manual_seed(0)
    layer = LAYERS[name]().train()
    with torch.no_grad(), mode:
        x, edge_index, edge_attr = _inputs(name, _on_gpu)
        out = _call(name, on_gpu(layer), x, edge_index, edge_attr)
    assert isinstance(out, OnGpu) and out.shape == (N, 6 if name.startswith("GAT") else 3)
    functions = {launch["function"] for launch in driver.launches}
    assert functions and all(f.startswith("gnnc_") for f in functions)
    assert {launch["stream"] for launch in driver.launches} == {7}  # torch's current stream
    # the graph went over once; nothing else the layer made was copied
    assert {kind for kind, _, _ in driver.copies} <= {"sync"} and mode.uploads == []


EDGE_TYPE = torch.tensor([0, 1, 2, 0, 1, 1, 0, 2, 2, 0, 1, 0])
RELATIONAL = {
    "RGCNConv": lambda: gnn.RGCNConv(4, 3, 3),
    "RGCNConv-max-blocks": lambda: gnn.RGCNConv(4, 4, 3, aggr="max", num_blocks=2),
    "RGCNConv-featureless": lambda: gnn.RGCNConv(N, 3, 3, num_bases=2),
    "FastRGCNConv-sum": lambda: gnn.FastRGCNConv(4, 3, 3, aggr="sum"),
    "RGATConv-dropout": lambda: gnn.RGATConv(4, 3, 3, heads=2, dropout=0.4),
    "RGATConv-within-f-scaled": lambda: gnn.RGATConv(4, 3, 3, attention_mechanism="within-relation", mod="f-scaled"),
    "RGATConv-multiplicative-scaled": lambda: gnn.RGATConv(
        4, 3, 3, attention_mode="multiplicative-self-attention", dim=2, mod="scaled"
    ),
    "FiLMConv-relations": lambda: gnn.FiLMConv(4, 3, 3),
    "FiLMConv-max": lambda: gnn.FiLMConv(4, 3, 3, aggr="max"),
}


@pytest.mark.parametrize("name", list(RELATIONAL))
def test_relational_layers_run_on_the_input_device(monkeypatch, name):
    launches: list = []
    mode = stand_in_cuda(monkeypatch, launches)
    torch.manual_seed(0)
    layer = RELATIONAL[name]().train()

    def run(layer, device):
        x = None if name.endswith("featureless") else device(features(N, 4, 1, grad=False))
        torch.manual_seed(3)
        return layer(x, device(EDGE_INDEX), device(EDGE_TYPE))

    with torch.no_grad():
        expected = run(layer, lambda t: t)
        with mode:
            out = run(on_gpu(layer), _on_gpu)
    assert isinstance(out, OnGpu) and out.device.type == "cuda"
    torch.testing.assert_close(out.inner, expected, rtol=1e-5, atol=1e-6)
    assert mode.gnnc_ops and launches
    assert all(device.type == "cuda" for _, devices, _ in launches for device in devices)
    assert mode.uploads == []


def test_hgt_runs_on_the_input_device(monkeypatch):
    launches: list = []
    mode = stand_in_cuda(monkeypatch, launches)
    meta = (["a", "b"], [("a", "to", "b"), ("b", "to", "a"), ("a", "self", "a")])
    torch.manual_seed(0)
    layer = gnn.HGTConv({"a": 4, "b": 3}, 4, meta, heads=2)

    def run(layer, device):
        x = {"a": device(features(5, 4, 1, grad=False)), "b": device(features(4, 3, 2, grad=False))}
        edges = {
            ("a", "to", "b"): device(torch.tensor([[0, 1, 4, 2], [0, 3, 3, 1]])),
            ("b", "to", "a"): device(torch.tensor([[3, 2], [0, 4]])),
            ("a", "self", "a"): device(torch.tensor([[0, 1, 2], [1, 2, 2]])),
        }
        return layer(x, edges)

    with torch.no_grad():
        expected = run(layer, lambda t: t)
        with mode:
            out = run(on_gpu(layer), _on_gpu)
    for key in expected:
        assert isinstance(out[key], OnGpu) and out[key].device.type == "cuda"
        torch.testing.assert_close(out[key].inner, expected[key], rtol=1e-5, atol=1e-6)
    assert mode.gnnc_ops and launches and mode.uploads == []


# ------------------------------------------------------------------------- on a real GPU


REAL_GPU_MISSING = torch_gpu_missing()


def _random_graph(n: int, e: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    edge_index[1, : e // 10] = 0  # a hub: many in-edges on one destination
    return edge_index, torch.randint(0, 3, (e,), generator=g)


@pytest.mark.skipif(REAL_GPU_MISSING is not None, reason=f"no GPU: {REAL_GPU_MISSING}")
@pytest.mark.parametrize(
    "name", [n for n in LAYERS if n not in FORMS] + [n for n in RELATIONAL if "featureless" not in n]
)
def test_layers_on_a_real_gpu_match_the_cpu(name):
    """Forward and backward of each layer on CUDA tensors equal the same layer's on the CPU
    (eval mode: dropout draws from a different generator on each device)."""
    n, e = 300, 3000
    edge_index, edge_type = _random_graph(n, e, 5)
    torch.manual_seed(0)
    make = LAYERS.get(name) or RELATIONAL[name]
    layer = make().eval()

    def run(layer, device):
        torch.manual_seed(3)
        x = features(n, 4, 1, grad=False).to(device).requires_grad_(True)
        ei = edge_index.to(device)
        if name in RELATIONAL:
            out = layer(x, ei, edge_type.to(device))
        else:
            attr = features(e, 2, 2, grad=False).to(device)
            out = _call(name, layer, x, ei, attr)
        out.square().sum().backward()
        grads = [p.grad.detach().cpu() for p in layer.parameters() if p.grad is not None]
        grads.append(x.grad.detach().cpu())
        return out.detach().cpu(), grads

    cpu_out, cpu_grads = run(layer, "cpu")
    layer.zero_grad()
    gpu_layer = layer.to("cuda")
    gpu_out, gpu_grads = run(gpu_layer, "cuda")
    torch.testing.assert_close(gpu_out, cpu_out, rtol=1e-4, atol=1e-4)
    assert len(gpu_grads) == len(cpu_grads)
    for a, b in zip(gpu_grads, cpu_grads):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("mapping", ["map thread_edge", "map warp_edge"])
def test_gat_training_forward_takes_the_edge_mappings(mapping):
    """The softmax's shift is detached, so the saving forward returns no argmax and a hub graph's
    default cuda mapping (an edge one) runs GAT's training forward; on the CPU emulation of the
    mapping it equals the reference."""
    import numpy as np

    import gnnc
    from gnnc.lang.autodiff import gradient_source
    from gnnc.nn import attention
    from tests.helpers import assert_matches
    from tests.strategies import random_inputs

    config = attention.Config(
        name="gat_conv",
        params=("h: f32[V, H, F]", "a_src: f32[V, H]", "a_dst: f32[V, H]"),
        score="leaky_relu(a_src[u] + a_dst[v], 0.2)",
        message="h[u]",
        **attention.loop_fields(attention.LoopKind.SQUARE, "h[v]"),
    )
    source = gradient_source(attention.source(config), "<gat>", ["gat_conv"])
    assert "argmax" not in source
    module = gnnc.compile(source, target="cuda-emulation", kernels=["gat_conv__forward"], schedule=mapping)
    reference = gnnc.compile(source, target="reference", kernels=["gat_conv__forward"])
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 60, 400), np.r_[rng.integers(0, 60, 300), np.zeros(100, np.int64)]
    graph = gnnc.Graph.from_coo(src, dst, num_vertices=60)
    kernel = module.gat_conv__forward
    inputs = random_inputs(kernel.signature, graph, {"H": 2, "F": 3}, np.float32, 0)
    got, want = kernel(graph, **inputs), reference.gat_conv__forward(graph, **inputs)
    for name in want:
        assert_matches(got[name], want[name], graph, np.float32)
