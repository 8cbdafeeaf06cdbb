"""gnnc: a compiler for graph neural network message-passing kernels.

    import gnnc
    graph = gnnc.Graph(edge_index)
    module = gnnc.compile("examples/gat.gnn")
    result = module.gat(graph, h=h, el=el, er=er)   # {'out': ..., 'alpha': ...}

Importing gnnc loads only the runtime; the compiler (xDSL, llvmlite) is
imported on the first `gnnc.compile`.
"""

import logging
import os
from typing import Any

from gnnc.errors import (
    ArgumentError,
    CacheError,
    CompileError,
    GnncError,
    GraphError,
    SourceError,
    ToolchainError,
)
from gnnc.graph.graph import Graph
from gnnc.runtime import compile_hook
from gnnc.runtime.memory import aligned, empty, zeros
from gnnc.runtime.module import Module, load
from gnnc.version import __version__  # noqa: F401

# Logs go to logging.getLogger("gnnc") and its children: compiles at INFO, each
# call's schedule decision at DEBUG. A library prints nothing unless the
# application configures logging (e.g. logging.basicConfig(level=logging.INFO)).
logging.getLogger("gnnc").addHandler(logging.NullHandler())


def compile(source_or_path: str | os.PathLike, **options: Any) -> Any:  # noqa: A001 - the natural name for users
    """Compiles a .gnn file or source text and loads it; see `gnnc.api.compile`."""
    from gnnc.api import compile as _compile

    return _compile(source_or_path, **options)


# A loaded kernel that needs a variant (schedule=, the default's pick, a cuda
# mapping) compiles it through here; the compiler itself loads on first use.
compile_hook.install_compiler(compile)


__all__ = [
    "ArgumentError",
    "CacheError",
    "CompileError",
    "GnncError",
    "Graph",
    "GraphError",
    "Module",
    "SourceError",
    "ToolchainError",
    "aligned",
    "compile",
    "empty",
    "load",
    "zeros",
]
