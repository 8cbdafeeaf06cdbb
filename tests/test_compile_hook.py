"""Variants compile through the hook `import gnnc` installs, whatever loaded the module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.errors import ToolchainError
from gnnc.runtime import compile_hook

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_a_loaded_module_compiles_variants_without_gnnc_api(tmp_path):
    # gnnc.load alone (no gnnc.compile, gnnc.api never imported) must still reach the compiler
    so = tmp_path / "gcn.so"
    subprocess.run(
        [sys.executable, "-m", "gnnc.tools.cli", "compile", str(EXAMPLES / "gcn.gnn"), "-o", str(so)],
        check=True,
        capture_output=True,
    )
    code = (
        "import sys, numpy as np, gnnc\n"
        f"mod = gnnc.load({str(so)!r})\n"
        "assert 'gnnc.api' not in sys.modules\n"
        "g = gnnc.Graph(np.array([[0, 1, 2], [1, 2, 0]]))\n"
        "x = np.ones((3, 4), np.float32); w = np.ones(3, np.float32)\n"
        "out = mod.gcn(g, x=x, w=w, schedule='prefetch 4')\n"
        "assert np.allclose(out, 1.0), out\n"
        "assert 'gnnc.api' in sys.modules  # the variant went through gnnc.compile\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_a_compiler_a_variant_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(compile_hook, "_compiler", None)
    mod = gnnc.compile(EXAMPLES / "gcn.gnn")
    g = gnnc.Graph(np.array([[0, 1], [1, 0]]))
    x, w = np.ones((2, 3), np.float32), np.ones(2, np.float32)
    with pytest.raises(ToolchainError, match="no compiler is installed"):
        mod.gcn(g, x=x, w=w, schedule="prefetch 3")
