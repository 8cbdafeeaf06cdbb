"""The documentation site builds without a warning: every page, link, anchor and API reference entry resolves;
and the C example of the C-callers page builds, runs and prints what the page says."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
C_CALLERS = ROOT / "docs" / "guide" / "c-callers.md"


@pytest.mark.slow
def test_mkdocs_build_is_strict_clean(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
    pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra is not installed")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        # material prints a banner about MkDocs 2 on every build otherwise
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (site / "index.html").is_file()
    assert (site / "reference" / "gnnc" / "index.html").is_file()


def _fenced(page: str, language: str) -> list[str]:
    """The bodies of the page's code blocks fenced as ```language."""
    return re.findall(rf"^```{language}\n(.*?)^```$", page, re.M | re.S)


def _c_array(program: str, name: str) -> np.ndarray:
    """The values of `name[] = {...}` in a C program (float suffixes dropped)."""
    body = re.search(rf"\b{name}\[\] = \{{([^}}]*)\}}", program).group(1)
    return np.array([float(v.strip().rstrip("f")) for v in body.split(",")])


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_the_c_callers_example_builds_runs_and_matches_the_reference(tmp_path):
    import gnnc
    from tests.helpers import assert_matches

    page = C_CALLERS.read_text()
    (program,) = _fenced(page, "c")
    commands = _fenced(page, "sh")[-1].strip().splitlines()
    (shown,) = _fenced(page, "text")
    assert commands[0].startswith("gnnc compile examples/gcn.gnn ") and "--header gcn.h" in commands[0]
    assert commands[1].startswith("gcc ") and "-Wall" in commands[1] and "-Werror" in commands[1]
    assert commands[2] == "./main"

    # the page's commands as written, gnnc through python -m (the console script runs the installed copy)
    (tmp_path / "main.c").write_text(program)
    gnnc_cli = f"{sys.executable} -m gnnc.tools.cli"
    compile_kernel = commands[0].replace("gnnc ", f"{gnnc_cli} ", 1).replace("examples/", f"{ROOT / 'examples'}/")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for command in (compile_kernel, commands[1]):
        proc = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, (command, proc.stderr)
    run = subprocess.run([str(tmp_path / "main")], cwd=ROOT, capture_output=True, text=True)  # found by $ORIGIN
    assert run.returncode == 0, run.stderr
    assert run.stdout == shown

    src, dst, w, x = (_c_array(program, name) for name in ("src", "dst", "w", "x"))
    features = int(_c_array(program, "dims")[0])
    x = x.reshape(-1, features).astype(np.float32)
    graph = gnnc.Graph.from_coo(src.astype(np.int64), dst.astype(np.int64), num_vertices=len(x))
    want = gnnc.compile(ROOT / "examples" / "gcn.gnn", target="reference").gcn(graph, x=x, w=w.astype(np.float32))
    rows = [line.split(" = ")[1].split() for line in run.stdout.splitlines()]
    got = np.array([[float(v) for v in row] for row in rows], dtype=np.float32)
    assert_matches(got, want, graph, np.float32)


def test_every_layer_is_listed_on_the_front_page_and_in_the_reference():
    """gnnc.nn's layers (README's list, docs/reference/nn.md's members, the guide's table) are its exports."""
    pytest.importorskip("torch")
    import torch

    import gnnc.nn as gnn

    layers = sorted(
        name
        for name in gnn.__all__
        if isinstance(getattr(gnn, name), type) and issubclass(getattr(gnn, name), torch.nn.Module)
    )
    readme = (ROOT / "README.md").read_text()
    listing = readme[readme.index("**PyTorch Geometric's layers.**") :]
    listing = listing[listing.index("```", listing.index("```python") + 9) + 3 : listing.index("**IR debugging.**")]
    listed = set(re.findall(r"\b([A-Z][A-Za-z0-9]+)\b", listing))
    reference = set(re.findall(r"^\s+- (\w+)$", (ROOT / "docs" / "reference" / "nn.md").read_text(), re.M))
    rows = re.findall(r"^\|([^|]+)\|", (ROOT / "docs" / "guide" / "nn.md").read_text(), re.M)
    guide = {name for cell in rows for name in re.findall(r"`(\w+)`", cell)}
    for name in layers:
        assert name in listed, f"README's gnnc.nn list lacks {name}"
        assert name in reference, f"docs/reference/nn.md lacks {name}"
        assert name in guide, f"docs/guide/nn.md's table lacks {name}"
