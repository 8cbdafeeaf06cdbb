"""`untraced`: `torch.compiler.disable` without importing torch._dynamo when gnnc is imported.

`torch.compiler.disable` imports torch._dynamo when it is applied: decorating
gnnc's functions with it at module level made `import gnnc.nn` five times
slower (torch._dynamo and what it imports; CHANGELOG has the numbers), in
every process that imports gnnc and never compiles: torchrun's ranks,
DataLoader workers started by spawn or forkserver, plain scripts.

`untraced(reason)` marks a function as `torch.compiler.disable` does, with
the attributes dynamo reads when a traced frame calls it (it does not trace
into it: it breaks the graph there, or under `fullgraph=True` raises with
`reason`). The wrapper calls the function as it is while torch._dynamo is
not loaded (nothing can be tracing, and no compiled frame is running), and
through torch's own disabled wrapper, made on the first such call, once it
is: that wrapper turns dynamo's frame hook off for the frames below it, as
a compiled frame's call after a graph break needs. The wrapper's own frame
is marked to run as it is (what `torch._dynamo.eval_frame.skip_code` does,
through torch._C, which `import torch` has loaded), so the hook does not
convert it either. Where that marking is not available (another torch),
`untraced` is `torch.compiler.disable` itself.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import CodeType
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])

_DYNAMO = "torch._dynamo"


def _run_as_is(code: CodeType) -> bool:
    """Marks `code` so that dynamo's frame hook runs its frames as they are (the frames they
    call are not marked); False where torch._C does not offer it."""
    try:
        from torch._C._dynamo import eval_frame
    except ImportError:
        return False
    try:
        action = eval_frame._FrameAction
        eval_frame.set_code_exec_strategy(code, eval_frame._FrameExecStrategy(action.SKIP, action.DEFAULT))
    except (AttributeError, TypeError, RuntimeError):
        return False
    return True


def untraced(reason: str) -> Callable[[F], F]:
    """A decorator: `fn` is not traced by torch.compile (a graph break, with `reason`)."""

    def wrap(fn: F) -> F:
        disabled: list[Callable[..., Any]] = []

        def call(*args: Any, **kwargs: Any) -> Any:
            if _DYNAMO not in sys.modules:
                return fn(*args, **kwargs)
            if not disabled:
                disabled.append(torch.compiler.disable(fn, reason=reason))
            return disabled[0](*args, **kwargs)

        if not _run_as_is(call.__code__):
            return torch.compiler.disable(fn, reason=reason)
        functools.update_wrapper(call, fn)
        # what torch.compiler.disable's wrapper carries, read by dynamo where a traced frame calls it
        call._torchdynamo_disable = True  # type: ignore[attr-defined]
        call._torchdynamo_disable_msg = reason  # type: ignore[attr-defined]
        call._torchdynamo_disable_recursive = True  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap


__all__ = ["untraced"]
