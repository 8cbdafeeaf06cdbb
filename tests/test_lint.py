"""The repository passes ruff (lint and format) and mypy, as pyproject.toml configures them,
and its commit subjects stay short.

Run here, so that `.ci/run` (the README's test command) enforces them like any
test; `.pre-commit-config.yaml` runs the same checks before a commit.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _passes(*command: str) -> None:
    run = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, f"`{' '.join(command)}` failed:\n{run.stdout}{run.stderr}"


def test_ruff_check():
    _passes("ruff", "check", ".")


def test_ruff_format():
    _passes("ruff", "format", "--check", ".")


def test_mypy():
    _passes("mypy")


#: The commit that moved gnnc into layers: the subjects of the commits after it are kept short.
_SHORT_SUBJECTS_SINCE = "23e8357887df6fae87229c437d6536f6fed01d9e"


def test_commit_subjects_fit_72_columns():
    """`git log --oneline`, `git shortlog` and mail tools show a subject whole up to 72 columns;
    the detail belongs in the body. Checked for the commits after the layering move."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    log = subprocess.run(["git", "log", "--format=%H %s", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if log.returncode != 0:
        pytest.skip(f"git log failed: {log.stderr.strip()}")
    long = []
    for line in log.stdout.splitlines():
        sha, _, subject = line.partition(" ")
        if sha == _SHORT_SUBJECTS_SINCE:
            break
        if len(subject) > 72:
            long.append(f"{sha[:10]} ({len(subject)} columns) {subject}")
    assert not long, "commit subjects over 72 columns:\n" + "\n".join(long)
