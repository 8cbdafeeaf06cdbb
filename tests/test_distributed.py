"""gnnc.nn under torch.distributed: two ranks launched by torchrun (gloo, loopback only), one
DDP step whose averaged gradients equal one process's on the union of the ranks' batches;
and gnnc's default threads per rank (`gnnc.torch.threads`)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gnnc.torch import ops, threads
from tests.nn_oracle import close

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "distributed_training.py"


def _example():
    spec = importlib.util.spec_from_file_location("distributed_training", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name)
    if module is None:
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def test_threads_default_to_the_ranks_share_of_the_cores(monkeypatch):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(8)
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
        assert ops._threads(None) == 8  # no launcher: torch's count
        monkeypatch.setattr(threads, "_CORES", [8])
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        assert threads.rank_share() == 4 and ops._threads(None) == 4
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")  # more ranks than cores: one thread each
        assert ops._threads(None) == 1
        torch.set_num_threads(1)  # torchrun's OMP_NUM_THREADS=1: below the share, kept
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        assert ops._threads(None) == 1
        assert ops._threads(3) == 3  # threads= always wins
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_two_ranks_average_to_one_process_on_the_union_of_their_batches(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "GLOO_SOCKET_IFNAME": "lo",  # loopback only
        "OMP_NUM_THREADS": str(os.cpu_count() or 2),  # torch's count per rank: the whole machine
    }
    # Loopback by address: without --local-addr, torchrun hands the ranks MASTER_ADDR =
    # socket.getfqdn(), which on some machines names an interface the ranks cannot reach,
    # and they wait on it for gloo's 30-minute timeout.
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2"]
    command += ["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--local-addr", "127.0.0.1"]
    command += [str(EXAMPLE), "--check-gradients", str(tmp_path)]
    launcher = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        printed, _ = launcher.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)  # the launcher and both ranks
        printed, _ = launcher.communicate()
        pytest.fail(f"2 ranks still running after 240 s; they printed:\n{printed[-6000:]}")
    done = subprocess.CompletedProcess(command, launcher.returncode, printed, "")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    # each rank's kernels ran on its share of the cores, not on torch's whole-machine count
    assert [r["threads"] for r in ranks] == [max(1, threads.cores() // 2)] * 2
    assert [r["world"] for r in ranks] == [2, 2]
    assert not set(ranks[0]["seeds"].tolist()) & set(ranks[1]["seeds"].tolist())

    example = _example()
    edge_index, x, labels, n = example.load_polblogs()
    sampler = example.NeighborSampler(edge_index, n, [10, 5])
    model = example.make_model(x.shape[1], 32, int(labels.max()) + 1, seed=0)
    losses = [example.step_loss(model, sampler, x, labels, r["seeds"], seed=i) for i, r in enumerate(ranks)]
    (sum(losses) / 2).backward()  # one process, both batches: the mean of the two losses
    for name, p in model.named_parameters():
        close(ranks[0]["grads"][name], ranks[1]["grads"][name], f"{name}: rank 0 against rank 1", rtol=0)
        close(ranks[0]["grads"][name], p.grad, f"{name}: DDP against one process", rtol=1e-5)
