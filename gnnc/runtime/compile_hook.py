"""Compiling a kernel variant on demand, through the compiler the API installs.

The runtime never imports the compiler. A call that needs another schedule of
a kernel (`schedule=`, the default heuristic's pick, `schedule="auto"`, a cuda
mapping) asks the function installed here; importing gnnc installs
`gnnc.compile`, which loads the compiler on its first use. Without it the
call gets a clear error instead of a variant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gnnc.errors import ToolchainError

_log = logging.getLogger(__name__)

_compiler: Callable[..., Any] | None = None


def install_compiler(compile_fn: Callable[..., Any] | None) -> None:
    """Sets the function `compile_variant` calls: `compile_fn(source, **options)` returns a loaded module."""
    global _compiler
    _compiler = compile_fn


def compile_variant(source: str, **options: Any) -> Any:
    """The module `gnnc.compile(source, **options)` would return."""
    if _compiler is None:
        raise ToolchainError(
            "this call needs a kernel compiled with another schedule, and no compiler is installed: "
            "install gnnc.compile with compile_hook.install_compiler, or call the kernel with the schedule it was compiled with"
        )
    _log.info(
        "compiling a variant of %s: schedule '%s' (%s)",
        ", ".join(options.get("kernels") or ["every kernel"]),
        "; ".join(str(options.get("schedule")).splitlines()),
        options.get("target", "cpu"),
    )
    return _compiler(source, **options)
