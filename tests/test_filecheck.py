"""The per-pass IR tests of tests/filecheck, run by lit, one test per file; and one file per pass.

Each `.mlir` file there pushes a checked-in input IR through one pass with
`gnnc-opt` and checks the output with FileCheck (tests/filecheck/lit.cfg.py
says how). A failure shows lit's verbose report: the RUN line, and where
FileCheck stopped matching.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gnnc.driver import pipeline

SUITE = Path(__file__).resolve().parent / "filecheck"
FILES = sorted(SUITE.rglob("*.mlir"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(SUITE)) for p in FILES])
def test_filecheck(path: Path, tmp_path: Path) -> None:
    # a private exec root: lit writes its test times there, which parallel runs would share
    run = subprocess.run(
        [sys.executable, "-c", "from lit.main import main; main()", "-v", f"--param=exec_root={tmp_path}", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0 and "PASS: gnnc" in run.stdout, (
        f"lit failed on {path.relative_to(SUITE)}:\n{run.stdout}{run.stderr}"
    )


def test_every_pass_has_a_filecheck_test() -> None:
    """A pass in `gnnc-opt`'s registry needs tests/filecheck/<layer>/<pass-name>.mlir."""
    tested = {p.stem for p in FILES}
    missing = sorted(set(pipeline.PASSES) - tested)
    assert not missing, f"passes without a FileCheck test in {SUITE}: {', '.join(missing)}"


def test_every_filecheck_test_names_a_pass() -> None:
    """A file is named after the pass it tests, so a renamed pass does not leave its tests behind."""
    unknown = sorted(str(p.relative_to(SUITE)) for p in FILES if p.stem not in pipeline.PASSES)
    assert not unknown, f"FileCheck tests named after no pass: {', '.join(unknown)}"
