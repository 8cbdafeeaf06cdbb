"""gnnc.torch.untraced: torch.compiler.disable's behaviour, without importing torch._dynamo with gnnc."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from gnnc.torch.untraced import untraced


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_importing_gnnc_nn_leaves_dynamo_unloaded():
    """`import gnnc.nn` cost 1.1-1.3 s more than torch's own import while its decorators imported
    torch._dynamo: every torchrun rank and spawned DataLoader worker paid it."""
    out = _run(
        """
        import sys
        import gnnc.nn, gnnc.torch
        print("torch._dynamo" in sys.modules)
        """
    )
    assert out == "False"


def test_an_eager_call_runs_the_function_and_loads_nothing():
    out = _run(
        """
        import sys
        import torch
        from gnnc.torch.untraced import untraced

        @untraced("a test")
        def double(x):
            return x * 2

        print(double(torch.ones(2)).tolist(), "torch._dynamo" in sys.modules)
        """
    )
    assert out == "[2.0, 2.0] False"


@untraced("reads a Python list: not traceable on purpose")
def _eager_only(x: torch.Tensor, seen: list) -> torch.Tensor:
    seen.append(torch.compiler.is_compiling())
    return x + len(seen)


def test_a_compiled_caller_breaks_the_graph_and_runs_it_eagerly():
    torch._dynamo.reset()
    seen: list[bool] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        return _eager_only(x * 2, seen) - 1

    compiled = torch.compile(f, backend="eager")
    for calls in (1, 2, 3):
        assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 1.0 + calls))
    assert seen == [False, False, False]  # run as Python each call, never traced
    # the wrapper's own frame ran as it is: dynamo's frame hook compiled nothing for it
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    assert _debug_get_cache_entry_list(_eager_only.__code__) == []


def test_fullgraph_names_the_reason():
    torch._dynamo.reset()

    def f(x: torch.Tensor) -> torch.Tensor:
        return _eager_only(x, []) * 3

    with pytest.raises(torch._dynamo.exc.Unsupported, match="not traceable on purpose"):
        torch.compile(f, backend="eager", fullgraph=True)(torch.ones(2))


def test_export_breaks_where_compile_does():
    torch._dynamo.reset()

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _eager_only(x, [])

    with pytest.raises(Exception, match="not traceable on purpose"):
        torch.export.export(M(), (torch.ones(2),), strict=True)
