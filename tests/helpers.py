"""Comparison of compiled results with the float64 reference, and the example kernels compiled once."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import gnnc

EXAMPLES = Path(__file__).parent.parent / "examples"


@functools.cache
def torch_gpu_missing() -> str | None:
    """Why CUDA tensors cannot run through gnnc here (no CUDA GPU for torch, or no driver), or None."""
    import torch

    from gnnc.runtime import cuda as cuda_runtime

    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU"
    try:
        cuda_runtime.driver()
    except gnnc.ToolchainError as exc:
        return str(exc)
    return None


def compiled_example(name: str, schedule: str):
    """examples/NAME.gnn compiled with `schedule`, or the CompileError it was refused with."""
    try:
        return gnnc.compile(EXAMPLES / f"{name}.gnn", schedule=schedule)
    except gnnc.CompileError as exc:
        return exc


def example_or_skip(name: str, schedule: str):
    """`compiled_example`, the test skipped where the schedule is refused (a `specialize` naming a
    dimension the kernel lacks is a SourceError; a schedule the kernel cannot take a CompileError)."""
    try:
        module = compiled_example(name, schedule)
    except gnnc.SourceError as exc:
        pytest.skip(f"refused: {exc}")
    if isinstance(module, gnnc.CompileError):
        pytest.skip(f"refused: {module}")
    return module


@functools.cache
def reference_example(name: str):
    """examples/NAME.gnn for the numpy reference."""
    return gnnc.compile(EXAMPLES / f"{name}.gnn", target="reference")


def tolerance(graph: gnnc.Graph, want: np.ndarray, dtype) -> float:
    """A bound for float rounding: eps times the magnitude a sum can reach.

    Sums over a destination's in-edges may be reordered by schedules, so the
    error grows with the largest in-degree.
    """
    eps = np.finfo(dtype).eps
    finite = want[np.isfinite(want)]
    scale = float(np.max(np.abs(finite))) if finite.size else 1.0
    max_deg = int(np.max(np.diff(graph.in_indptr))) if graph.num_vertices else 0
    return 64 * eps * (1.0 + scale) * (1.0 + max_deg)


def assert_matches(got, want, graph: gnnc.Graph, dtype) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want)
        for name in want:
            assert_matches(got[name], want[name], graph, dtype)
        return
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == np.dtype(dtype)
    want = np.asarray(want, dtype=np.float64)
    got64 = got.astype(np.float64)
    nan_want, nan_got = np.isnan(want), np.isnan(got64)
    assert np.array_equal(nan_want, nan_got), f"NaN positions differ: {np.argwhere(nan_want != nan_got)[:5]}"
    ok = ~nan_want
    atol = tolerance(graph, want, dtype)
    np.testing.assert_allclose(got64[ok], want[ok], rtol=1e-3 if dtype == np.float32 else 1e-9, atol=atol)


def assert_random_kernel_matches(module, source: str, graph: gnnc.Graph, f: int, threads: int, seed: int) -> None:
    """Kernel `k` of a compiled random kernel (tests.strategies.random_kernels) against the reference."""
    from tests.strategies import random_inputs

    kernel = module.k
    dtype = np.float32 if kernel.signature.dtype == "f32" else np.float64
    inputs = random_inputs(kernel.signature, graph, {"F": f}, dtype, seed)
    got = kernel(graph, threads=threads, **inputs)
    want = gnnc.compile(source, target="reference").k(graph, **inputs)
    assert_matches(got, want, graph, dtype)


def numeric_grad(evaluate, args: dict, name: str, gout, h: float = 1e-6) -> np.ndarray:
    """Central differences of <gout, evaluate(**args)> with respect to args[name] (float64 inputs)."""
    grad = np.zeros_like(args[name])
    flat = grad.reshape(-1)
    for i in range(flat.size):
        plus = {k: v.copy() for k, v in args.items()}
        minus = {k: v.copy() for k, v in args.items()}
        plus[name].reshape(-1)[i] += h
        minus[name].reshape(-1)[i] -= h
        flat[i] = np.sum((evaluate(**plus) - evaluate(**minus)) * gout) / (2 * h)
    return grad


def slow_except(values, *fast):
    """`values` for pytest.mark.parametrize with all but `fast` marked slow: the fast
    tier (`-m "not slow"`) runs a representative few, the full suite every one.
    A tuple is the values of several argnames (a single argname whose values are
    tuples takes pytest.param instead)."""
    return [
        v if v in fast else pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=pytest.mark.slow) for v in values
    ]
