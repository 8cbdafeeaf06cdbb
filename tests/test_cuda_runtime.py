"""The cuda runtime: a clear error without cuda-python, a driver or a GPU; real runs where a GPU exists."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc import compiler
from gnnc.runtime import cuda as cuda_runtime
from tests.helpers import assert_matches
from tests.strategies import random_inputs


def _gpu_reason() -> str | None:
    try:
        cuda_runtime.driver()
    except gnnc.ToolchainError as exc:
        return str(exc)
    return None


GPU_MISSING = _gpu_reason()
EXAMPLES = Path(__file__).parent.parent / "examples"
DIMS = {"gcn": {"F": 17}, "sage_max": {"F": 3}, "sage_mean": {"F": 64}, "gin": {"F": 1},
        "attention": {"H": 2, "D": 17}, "gat": {"H": 2, "F": 3}, "mlp_aggr": {"D1": 5, "D2": 130},
        "gcn_norm": {"F": 17}}


@pytest.mark.skipif(GPU_MISSING is None, reason="a GPU is present")
def test_loading_without_a_gpu_names_what_is_missing(tmp_path):
    ptx = tmp_path / "gcn.ptx"
    result = compiler.compile_source((EXAMPLES / "gcn.gnn").read_text(), options=compiler.CompileOptions(target="cuda"))
    ptx.write_text(result.ptx)
    with pytest.raises(gnnc.ToolchainError) as info:
        cuda_runtime.CudaModule(ptx)
    assert any(word in str(info.value) for word in ("cuda-python", "driver", "GPU"))
    with pytest.raises(gnnc.ToolchainError):
        gnnc.compile(EXAMPLES / "gcn.gnn", target="cuda")


def test_missing_bindings_say_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "cuda", None)
    with pytest.raises(gnnc.ToolchainError, match=r"pip install 'gnnc\[cuda\]'"):
        cuda_runtime.driver()


def test_a_file_that_is_not_gnnc_ptx_is_refused(tmp_path):
    bad = tmp_path / "x.ptx"
    bad.write_text(".version 8.0\n")
    with pytest.raises(gnnc.ToolchainError, match="not a gnnc PTX file"):
        cuda_runtime.CudaModule(bad)


@pytest.mark.skipif(GPU_MISSING is not None, reason=f"no GPU: {GPU_MISSING}")
@pytest.mark.parametrize("mapping", ["map thread_vertex", "map thread_vertex group 3"])
@pytest.mark.parametrize("name", sorted(DIMS))
def test_real_kernels_on_the_gpu_match_the_reference(name, mapping):
    module = gnnc.compile(EXAMPLES / f"{name}.gnn", target="cuda", schedule=mapping)
    reference = gnnc.compile(EXAMPLES / f"{name}.gnn", target="reference")
    rng = np.random.default_rng(0)
    v = 1000
    graph = gnnc.Graph.from_coo(rng.integers(0, v, 5000), rng.integers(0, v, 5000), num_vertices=v)
    kernel = getattr(module, name)
    inputs = random_inputs(kernel.signature, graph, DIMS[name], np.float32, 1)
    assert_matches(kernel(graph, **inputs), getattr(reference, name)(graph, **inputs), graph, np.float32)
