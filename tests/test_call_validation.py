"""Thread counts and tuning files that once reached native code or raised raw exceptions (issue 29).

`threads` is checked (1 .. max_threads()) before anything native runs, wherever
it comes from: a call, gnnc.torch, OMP_NUM_THREADS (clamped), a tuning-cache
entry (skipped). Malformed tuning files are ignored with a warning; stale or
invalid entries are skipped for the predictor or the default.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.autotune import autoschedule, decision, predictor
from gnnc.autotune.cache import TuningCache
from gnnc.autotune.threads import max_threads
from gnnc.errors import ArgumentError
from gnnc.runtime import tune

from .helpers import assert_matches
from .strategies import random_inputs

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.fixture(autouse=True)
def private_tuning_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNC_TUNE_DIR", str(tmp_path / "tuning"))
    autoschedule._CACHE = TuningCache()
    predictor._load.cache_clear()
    yield tmp_path / "tuning"
    predictor._load.cache_clear()


@pytest.fixture(scope="module")
def gcn():
    return gnnc.compile(EXAMPLES / "gcn.gnn").gcn


@pytest.fixture(scope="module")
def reference():
    return gnnc.compile(EXAMPLES / "gcn.gnn", target="reference").gcn


@pytest.fixture
def graph():
    """A fresh graph per test: decisions are cached on the graph."""
    rng = np.random.default_rng(11)
    return gnnc.Graph.from_coo(rng.integers(0, 120, 900), rng.integers(0, 120, 900), num_vertices=120)


def _inputs(gcn, graph, f=4):
    return random_inputs(gcn.signature, graph, {"F": f}, np.float32, seed=2)


# ------------------------------------------------------------------ threads


def test_the_thread_limit_is_four_per_core_and_at_least_64():
    assert max_threads() == max(64, 4 * (os.cpu_count() or 1))


@pytest.mark.parametrize("threads", [100_000, 0, -3, 2.0, "4", True])
def test_out_of_range_threads_are_refused_before_native_code(gcn, graph, threads):
    # threads=100_000 once went straight to GOMP_parallel: SIGSEGV
    with pytest.raises(ArgumentError, match="threads"):
        gcn(graph, **_inputs(gcn, graph), threads=threads)


def test_the_largest_thread_count_runs(gcn, graph, reference):
    inputs = _inputs(gcn, graph)
    got = gcn(graph, **inputs, threads=max_threads())
    assert_matches(got, reference(graph, **inputs), graph, np.float32)
    assert_matches(gcn(graph, **inputs, threads=np.int64(2)), reference(graph, **inputs), graph, np.float32)


def test_omp_num_threads_above_the_limit_is_clamped_with_a_warning(monkeypatch, caplog):
    decision._clamped_env_threads.cache_clear()
    monkeypatch.setenv("OMP_NUM_THREADS", "100000")
    with caplog.at_level(logging.WARNING, logger="gnnc.autotune.decision"):
        assert decision.resolve_threads(None) == max_threads()
    assert "OMP_NUM_THREADS=100000 is more than gnnc runs" in caplog.text
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert decision.resolve_threads(None) == 3


def test_torch_threads_are_checked():
    torch = pytest.importorskip("torch")
    import gnnc.torch

    conv = gnnc.torch.kernel(EXAMPLES / "gcn.gnn", "gcn")
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    x, w = torch.ones(3, 4), torch.ones(3)
    with pytest.raises(ArgumentError, match="at most"):
        conv(edge_index, x, w, threads=100_000)
    torch_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(max_threads() + 5)  # PyTorch's own count is clamped, not refused
        assert torch.allclose(conv(edge_index, x, w), conv(edge_index, x, w, threads=1))
    finally:
        torch.set_num_threads(torch_threads)


# ------------------------------------------------------------------ tuning entries


@pytest.mark.parametrize(
    "entry, logged",
    [
        ({"schedule": "specialize F 999", "threads": None}, "cannot run this call"),
        ({"schedule": "prefetch 8", "threads": 0}, "threads must be a positive integer"),
        ({"schedule": "prefetch 8", "threads": 100_000}, "more than this machine allows"),
        ({"schedule": "prefetch 8", "threads": "two"}, "threads must be a positive integer"),
        ({"schedule": "prefetch 8", "threads": 2.5}, "threads must be a positive integer"),
        ({"schedule": "not a schedule;  ; at all", "threads": None}, None),
    ],
)
def test_stale_or_invalid_tuning_entries_fall_back(gcn, graph, reference, entry, logged, caplog):
    inputs = _inputs(gcn, graph)
    key = tune.case_key(gcn, graph, {"F": 4})
    TuningCache().store(key, entry)
    with caplog.at_level(logging.DEBUG, logger="gnnc.autotune"):
        got = gcn(graph, **inputs, schedule="auto")
    assert_matches(got, reference(graph, **inputs), graph, np.float32)
    if logged is not None:
        assert logged in caplog.text


def test_a_valid_tuned_thread_count_is_used(gcn, graph, caplog):
    key = tune.case_key(gcn, graph, {"F": 4})
    TuningCache().store(key, {"schedule": "prefetch 8", "threads": 1})
    with caplog.at_level(logging.DEBUG, logger="gnnc.runtime.module"):
        gcn(graph, **_inputs(gcn, graph), schedule="auto")
    assert "(tuned, threads=1)" in caplog.text


@pytest.mark.parametrize(
    "text",
    [
        '{"version": 1, "entries": []}',
        '{"version": 1, "entries": "x"}',
        "[1, 2]",
        "{not json",
        b"\xff\xfe\x00binary",
    ],
)
def test_malformed_cache_json_is_ignored_with_a_warning(gcn, graph, reference, private_tuning_dir, text, caplog):
    private_tuning_dir.mkdir(parents=True, exist_ok=True)
    path = private_tuning_dir / "cache.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    inputs = _inputs(gcn, graph)
    with caplog.at_level(logging.WARNING, logger="gnnc.autotune.cache"):
        got = gcn(graph, **inputs, schedule="auto")
    assert_matches(got, reference(graph, **inputs), graph, np.float32)
    assert "tuning cache" in caplog.text and "ignored" in caplog.text
    assert TuningCache().lookup("anything") is None


@pytest.mark.parametrize(
    "cases",
    [
        "not a list",
        [1, 2],
        [{"features": [1.0], "ratios": {}}],
        [{"features": [0.0] * len(predictor.FEATURE_NAMES), "ratios": {"prefetch 8": "fast"}}],
        [{"features": [0.0] * len(predictor.FEATURE_NAMES), "ratios": {"prefetch 8; threads x": 0.1}}],
        [{"features": [float("nan")] * len(predictor.FEATURE_NAMES), "ratios": {}}],
    ],
)
def test_malformed_model_json_is_ignored_with_a_warning(gcn, graph, reference, private_tuning_dir, cases, caplog):
    private_tuning_dir.mkdir(parents=True, exist_ok=True)
    model = {"version": predictor.MODEL_VERSION, "features": list(predictor.FEATURE_NAMES), "cases": cases}
    (private_tuning_dir / predictor.LOCAL_MODEL).write_text(json.dumps(model))
    with caplog.at_level(logging.WARNING, logger="gnnc.autotune.predictor"):
        loaded = predictor.load_model()
    assert "schedule model" in caplog.text and "ignored" in caplog.text
    assert loaded is not None and loaded.cases is not cases  # the shipped model serves instead
    inputs = _inputs(gcn, graph)
    assert_matches(gcn(graph, **inputs, schedule="auto"), reference(graph, **inputs), graph, np.float32)


def test_binary_model_json_is_ignored(private_tuning_dir, caplog):
    private_tuning_dir.mkdir(parents=True, exist_ok=True)
    (private_tuning_dir / predictor.LOCAL_MODEL).write_bytes(b"\x89PNG\r\n\x1a\n\xff")
    with caplog.at_level(logging.WARNING, logger="gnnc.autotune.predictor"):
        assert predictor.load_model() is not None
    assert "ignored" in caplog.text


def test_malformed_tuning_records_are_skipped_by_retraining(private_tuning_dir):
    cache = TuningCache()
    good = {
        "kernel": "k",
        "graph": {"num_vertices": 10, "num_edges": 20, "deg_mean": 2.0, "deg_std": 1.0, "deg_max": 4},
        "dims": {"F": 4},
        "traits": {"row": 4, "source_bytes": 16, "edge_walks": 1, "phases": 1, "vertex_result": 1, "edge_result": 0},
        "baseline": "",
        "times": {"": 1.0, "prefetch 8": 0.5},
    }
    for record in (
        good,
        {"times": {"": 1.0}, "baseline": ""},
        {**good, "traits": "x"},
        {**good, "times": {"": 1.0, "prefetch 8; threads x": 0.5}},
        {**good, "graph": {**good["graph"], "num_vertices": "many"}},
    ):
        cache.append_record(record)
    with open(cache.records_path, "ab") as f:
        f.write(b"\xff\xfe not json\n")
    model = predictor.Model.fit(cache.records())
    assert len(model.cases) == 1


# ------------------------------------------------------------------ the graph argument


def test_the_graph_is_positional_or_graph_but_not_both(gcn, graph, reference):
    # `kernel(g, x, w, graph=h)` ended in Python's TypeError "got multiple values for argument 'graph'"
    inputs = _inputs(gcn, graph)
    for call in (gcn, reference):
        with pytest.raises(ArgumentError, match="the graph is given twice"):
            call(graph, **inputs, graph=graph)
        with pytest.raises(ArgumentError, match="needs the graph as its first argument"):
            call(**inputs)
    assert_matches(gcn(graph=graph, **inputs), reference(graph, **inputs), graph, np.float32)
    assert np.array_equal(reference(graph=graph, **inputs), reference(graph, **inputs))


def test_torch_kernels_take_the_graph_alike():
    torch = pytest.importorskip("torch")
    import gnnc.torch

    conv = gnnc.torch.kernel(EXAMPLES / "gcn.gnn", "gcn")
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    x, w = torch.ones(3, 4), torch.ones(3)
    with pytest.raises(ArgumentError, match="given twice"):
        conv(edge_index, x, w, graph=edge_index)
    assert torch.equal(conv(graph=edge_index, x=x, w=w), conv(edge_index, x, w))
