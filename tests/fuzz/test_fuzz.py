"""The fuzz suite: thousands of hostile inputs, each in a child process; none may crash, hang,
raise a raw exception or give a wrong answer (tests/fuzz/harness.py says how a case is judged).

The `ci` hypothesis profile (the default, in .ci/run) runs a few batches per
target in about two minutes on two cores; `HYPOTHESIS_PROFILE=thorough`
runs many more (docs/design/reliability.md records a thorough run's counts).
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from tests.fuzz import strategies
from tests.fuzz.harness import batch_size, batches, check, run_batch


def test_the_harness_tells_every_outcome_apart():
    """A crash, a hang, a raw exception and a wrong answer are each caught and named; the cases
    after a crash do not run (the child is gone), and a clean error is no failure."""
    report = run_batch("selftest", ["ok", "clean", "raw", "wrong", "crash", "ok"], timeout=60)
    assert [r.outcome for r in report.results] == ["ok", "clean", "raw", "wrong", "crash"]
    assert "KeyError: 'a raw exception'" in report.results[2].detail
    assert "crash" in report.describe(report.results[4]) and "input: 'crash'" in report.describe(report.results[4])
    hung = run_batch("selftest", ["ok", "hang"], timeout=15)
    assert [r.outcome for r in hung.results] == ["ok", "hang"]


def _settings(quick: int, thorough: int) -> settings:
    # no shrinking: a failure already prints the case that failed, and each
    # shrinking step would start another child
    return settings(
        max_examples=batches(quick, thorough),
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def _batch(strategy: st.SearchStrategy, quick: int, thorough: int) -> st.SearchStrategy:
    n = batch_size(quick, thorough)
    return st.lists(strategy, min_size=n, max_size=n)


def _run(target: str, batch: list, timeout: float) -> None:
    # hypothesis starts from its simplest example, a batch of one case repeated: not a batch worth a child
    assume(len({repr(case) for case in batch}) > len(batch) // 2)
    check(run_batch(target, batch, timeout=timeout))


@_settings(quick=2, thorough=40)
@given(batch=_batch(strategies.source_cases(), quick=60, thorough=150))
def test_source_text(batch):
    _run("source", batch, timeout=300)


@_settings(quick=2, thorough=40)
@given(batch=_batch(strategies.call_cases(), quick=60, thorough=150))
def test_call_arguments(batch):
    _run("call", batch, timeout=400)


@_settings(quick=2, thorough=100)
@given(batch=_batch(strategies.file_cases(), quick=60, thorough=60))
def test_graph_files(batch):
    _run("file", batch, timeout=300)


@_settings(quick=2, thorough=40)
@given(batch=_batch(strategies.graph_cases(), quick=80, thorough=200))
def test_graph_constructors(batch):
    _run("graph", batch, timeout=300)


@_settings(quick=1, thorough=30)
@given(batch=_batch(strategies.schedule_cases(), quick=8, thorough=20))
def test_schedules_on_example_kernels(batch):
    _run("schedule", batch, timeout=600)


@_settings(quick=1, thorough=20)
@given(batch=_batch(strategies.tuning_cases(), quick=12, thorough=40))
def test_tuning_files(batch):
    _run("tuning", batch, timeout=400)
