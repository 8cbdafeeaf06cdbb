"""Runs a batch of fuzz cases in a child process and classifies what each did.

A case that could crash the interpreter (native code, scipy's compiled
conversions, a dlopen) never runs in the test process: the cases of one
hypothesis example are pickled, a child (`python -m tests.fuzz.runner`) runs
them one after another, and writes one JSON line per case to a log *before*
running it and another after. So when the child dies (a signal, an abort) or
stops answering (a hang), the last case it started is the culprit, and the
test fails printing that case's input.

Each case ends as one of:

- ``ok``: it ran (and, where a result can be checked, matched the reference);
- ``clean``: it raised an error of the GnncError family;
- ``raw``: it raised anything else (a failure: every error a user can
  provoke is a GnncError);
- ``wrong``: it ran and gave a result that disagrees with the reference,
  or broke an invariant (a failure);
- ``crash`` / ``hang``: the child died on it, or did not finish it within
  the batch's time (failures).

Counts are kept per target for the session (`COUNTS`) and printed at the end
(tests/fuzz/conftest.py); `GNNC_FUZZ_REPORT=path.json` also writes them.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent

#: The profile (tests/conftest.py): "ci" runs in .ci/run, "thorough" locally.
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
THOROUGH = PROFILE == "thorough"

OUTCOMES = ("ok", "clean", "raw", "wrong", "crash", "hang")
FAILURES = ("raw", "wrong", "crash", "hang")

#: Every target's counts in this session: target -> Counter of OUTCOMES.
COUNTS: dict[str, Counter] = {}


def batches(quick: int, thorough: int) -> int:
    """Hypothesis examples (batches, one child each) for the profile."""
    return thorough if THOROUGH else quick


def batch_size(quick: int, thorough: int) -> int:
    """Cases per batch for the profile."""
    return thorough if THOROUGH else quick


@dataclass
class Result:
    """What one case did in the child."""

    index: int
    outcome: str
    detail: str = ""


@dataclass
class BatchReport:
    target: str
    cases: list[Any]
    results: list[Result] = field(default_factory=list)

    def failures(self) -> list[Result]:
        return [r for r in self.results if r.outcome in FAILURES]

    def describe(self, result: Result) -> str:
        text = repr(self.cases[result.index])
        if len(text) > 3000:
            text = text[:3000] + f"... ({len(text)} characters)"
        return f"[{self.target} case {result.index}] {result.outcome}: {result.detail}\ninput: {text}"


def run_batch(target: str, cases: list[Any], timeout: float) -> BatchReport:
    """Runs `cases` of `target` in one child; the report has one result per case (see the module docstring)."""
    report = BatchReport(target, cases)
    with tempfile.TemporaryDirectory(prefix="gnnc-fuzz-") as tmp:
        cases_path, log_path = Path(tmp) / "cases.pkl", Path(tmp) / "log.jsonl"
        cases_path.write_bytes(pickle.dumps(cases))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        env.setdefault("GNNC_CACHE_DIR", str(Path(tempfile.gettempdir()) / "gnnc-fuzz-cache"))
        env["GNNC_TUNE_DIR"] = str(Path(tmp) / "tuning")  # no case reads or writes the user's tuning cache
        env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "2")
        command = [sys.executable, "-m", "tests.fuzz.runner", target, str(cases_path), str(log_path), tmp]
        try:
            child = subprocess.run(command, env=env, cwd=REPO, capture_output=True, timeout=timeout, text=True)
            ended, stderr = child.returncode, child.stderr
        except subprocess.TimeoutExpired as exc:
            ended, stderr = None, (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        started, finished = _read_log(log_path)
    for i in range(len(cases)):
        if i in finished:
            report.results.append(finished[i])
        elif i in started:
            if ended is None:
                report.results.append(Result(i, "hang", f"did not finish within the batch's {timeout:.0f} s"))
            else:
                report.results.append(Result(i, "crash", f"the child ended with status {ended}: {stderr[-2000:]}"))
        # cases after the one that crashed or hung did not run: they are not counted
    if ended not in (0, None) and all(r.outcome not in ("crash",) for r in report.results):
        # the child failed outside any case (its imports, its setup)
        report.results.append(Result(len(cases) - 1, "crash", f"the child ended with status {ended}: {stderr[-3000:]}"))
    if target != "selftest":
        counts = COUNTS.setdefault(target, Counter())
        for r in report.results:
            counts[r.outcome] += 1
    return report


def _read_log(path: Path) -> tuple[set[int], dict[int, Result]]:
    started: set[int] = set()
    finished: dict[int, Result] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return started, finished
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line the child was writing when it died
        if "start" in record:
            started.add(record["start"])
        else:
            finished[record["index"]] = Result(record["index"], record["outcome"], record.get("detail", ""))
    return started, finished


def check(report: BatchReport) -> None:
    """Fails the test with every failing case's input printed."""
    failures = report.failures()
    if failures:
        import pytest

        pytest.fail("\n\n".join(report.describe(r) for r in failures[:5]), pytrace=False)
