"""The partitioned-training example (METIS parts, halo blocks, DDP): the ranks' averaged
gradients are the whole graph's full-batch gradients."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.nn_oracle import close

pytest.importorskip("pymetis")

REPO = Path(__file__).resolve().parent.parent


def _example():
    sys.path.insert(0, str(REPO / "examples"))
    spec = importlib.util.spec_from_file_location("partitioned_training", REPO / "examples" / "partitioned_training.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name)
    if module is None:
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("source", ["memory", "files"])
def test_parts_with_halos_give_the_full_batch_gradient(tmp_path, source):
    example = _example()
    if source == "files":
        example.save(tmp_path)
    data = example.load(tmp_path if source == "files" else None)
    if source == "files":
        assert isinstance(data["x"], np.memmap) and not data["x"].flags.writeable
    n = data["indptr"].shape[0] - 1
    world = 3
    parts = example.metis_parts(data["indptr"], data["indices"], world)
    assert sorted(set(parts.tolist())) == [0, 1, 2]
    torch.manual_seed(0)
    model = example.Sage(data["x"].shape[1], 16, 2)
    losses = []
    for rank in range(world):
        owned = np.flatnonzero(parts == rank)
        ids, blocks = example.halo_blocks(data["indptr"], data["indices"], owned, layers=2)
        assert np.array_equal(ids[: owned.shape[0]], owned) and ids.shape[0] < n  # a halo, not the graph
        losses.append(example.part_loss(model, data, ids, blocks, owned.shape[0], world))
    (sum(losses) / world).backward()  # DDP's average of the ranks' gradients
    parted = {name: p.grad.clone() for name, p in model.named_parameters()}

    model.zero_grad()
    graph = torch.from_numpy(np.stack([np.asarray(data["indices"]), np.repeat(np.arange(n), np.diff(data["indptr"]))]))
    train = torch.from_numpy(np.array(data["train"]))
    out = model(torch.from_numpy(np.array(data["x"])), [graph, graph])
    F.cross_entropy(out[train], torch.from_numpy(np.array(data["labels"]))[train]).backward()
    for name, p in model.named_parameters():
        close(parted[name], p.grad, f"{name}: parts against the whole graph", rtol=1e-5)
