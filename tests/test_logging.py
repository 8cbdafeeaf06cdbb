"""gnnc logs through logging.getLogger("gnnc"): compiles at INFO, each call's schedule decision at DEBUG."""

from __future__ import annotations

import logging
import re

import numpy as np

import gnnc
from gnnc.autotune import heuristic

SOURCE = "kernel agg(x: f32[V, F]) -> f32[V, F] {\n    out[v] = sum(x[u])\n}\n"
GRAPH = gnnc.Graph(np.array([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]]))
X = np.ones((5, 8), np.float32)


def _messages(caplog, logger: str) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == logger]


def test_gnnc_prints_nothing_unless_the_application_configures_logging():
    logger = logging.getLogger("gnnc")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    # no level and no handler of its own that prints: the application's configuration decides
    assert logger.level == logging.NOTSET and logger.propagate
    assert all(isinstance(h, logging.NullHandler) for h in logger.handlers)


def test_a_compile_logs_its_time_and_a_cached_one_its_hit(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("GNNC_CACHE_DIR", str(tmp_path))
    caplog.set_level(logging.DEBUG, logger="gnnc")
    gnnc.compile(SOURCE)
    [(level, message)] = _messages(caplog, "gnnc.driver.compiler")
    assert level == "INFO"
    assert re.fullmatch(r"<string> \(every kernel, cpu\): compiled in \d+\.\d\d s, .*\.so", message), message
    caplog.clear()
    gnnc.compile(SOURCE)
    [(level, message)] = _messages(caplog, "gnnc.driver.compiler")
    assert level == "DEBUG"
    assert message.startswith("<string> (every kernel, cpu): from the compile cache, ")


def test_each_call_logs_the_schedule_the_default_picked(monkeypatch, caplog):
    module = gnnc.compile(SOURCE)  # no schedule: the default heuristic picks one per call
    monkeypatch.setattr(heuristic, "kernel_default", lambda kernel, graph, dims: "tile features 4\nparallel dst")
    caplog.set_level(logging.DEBUG, logger="gnnc")
    module.agg(GRAPH, X)
    module.agg(GRAPH, X)
    # the variant is compiled once, and kept
    assert _messages(caplog, "gnnc.runtime.compile_hook") == [
        ("INFO", "compiling a variant of agg: schedule 'tile features 4; parallel dst' (cpu)")
    ]
    assert (
        _messages(caplog, "gnnc.runtime.module")
        == [("DEBUG", "agg: default schedule 'tile features 4; parallel dst' for V=5 E=5 {'F': 8}")] * 2
    )

    caplog.clear()
    monkeypatch.setattr(heuristic, "kernel_default", lambda kernel, graph, dims: None)
    # the decision is made once per class of graph and sizes (heuristic.default_class): a new
    # graph of the same class takes it, with its own shape in the message
    module.agg(gnnc.Graph(np.array([[0, 1, 2, 3], [1, 2, 4, 3]]), num_vertices=5), X)
    assert _messages(caplog, "gnnc.runtime.module") == [
        ("DEBUG", "agg: default schedule 'tile features 4; parallel dst' for V=5 E=4 {'F': 8}")
    ]
    caplog.clear()
    # one of another class (16K edges and more) gets the new default
    loops = np.zeros((2, heuristic.SPECIALIZE_MIN_EDGES), dtype=np.int64)
    module.agg(gnnc.Graph(loops, num_vertices=5), X)
    assert _messages(caplog, "gnnc.runtime.module") == [
        ("DEBUG", f"agg: runs as compiled, the default for V=5 E={heuristic.SPECIALIZE_MIN_EDGES} {{'F': 8}}")
    ]


def test_a_call_with_a_schedule_logs_that_it_runs_as_compiled(caplog):
    module = gnnc.compile(SOURCE, schedule="tile features 4")
    caplog.set_level(logging.DEBUG, logger="gnnc")
    module.agg(GRAPH, X)
    assert _messages(caplog, "gnnc.runtime.module") == [
        ("DEBUG", "agg: runs as compiled (its schedule was given, or it has no source to vary)")
    ]


def test_schedule_auto_logs_what_it_runs(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("GNNC_TUNE_DIR", str(tmp_path))  # no tuning records: a prediction or the default
    module = gnnc.compile(SOURCE)
    caplog.set_level(logging.DEBUG, logger="gnnc")
    module.agg(GRAPH, X, schedule="auto", threads=1)
    [(level, message)] = _messages(caplog, "gnnc.runtime.module")
    assert level == "DEBUG"
    assert re.fullmatch(
        r"agg: schedule='auto' runs .+ \((predicted|default), threads=1\) for V=5 E=5 \{'F': 8\}", message
    )


def test_an_emulated_grid_logs_its_default_mapping(monkeypatch, caplog):
    module = gnnc.compile(SOURCE, target="cuda-emulation")
    monkeypatch.setattr(heuristic, "default_cuda_mappings", lambda graph, row: ["thread_vertex"])
    caplog.set_level(logging.DEBUG, logger="gnnc")
    module.agg(GRAPH, X)
    assert _messages(caplog, "gnnc.runtime.module") == [
        ("DEBUG", "agg: default mapping 'map thread_vertex' (as compiled) for V=5 E=5 {'F': 8}")
    ]
