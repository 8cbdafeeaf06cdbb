"""The one error family of gnnc.

Every error a user can provoke is a ``GnncError``. The CLI prints them without
a traceback; the API raises them.
"""

from __future__ import annotations

from dataclasses import dataclass


class GnncError(Exception):
    """Base class of every error gnnc reports to a user."""


@dataclass(frozen=True)
class SourceLocation:
    """A position in a source file; ``line`` and ``col`` count from 1."""

    file: str
    line: int
    col: int
    length: int = 1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class SourceError(GnncError):
    """An error in `.gnn` source: carries a location and renders a caret."""

    def __init__(self, message: str, loc: SourceLocation, source: str | None = None):
        self.message = message
        self.loc = loc
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        text = f"{self.loc}: error: {self.message}"
        if self.source is not None:
            lines = self.source.splitlines()
            if 1 <= self.loc.line <= len(lines):
                line = lines[self.loc.line - 1].expandtabs(1)
                caret = " " * (self.loc.col - 1) + "^" + "~" * max(0, self.loc.length - 1)
                text += f"\n{line}\n{caret}"
        return text


class GraphError(GnncError):
    """A graph given to the runtime breaks an invariant (ids, offsets, shapes)."""


class ArgumentError(GnncError):
    """A kernel call got a bad argument (dtype, shape, aliasing, unknown name)."""


class ToolchainError(GnncError):
    """A tool or library gnnc needs is missing or failed (linker, ptxas, CPU features)."""


class CompileError(GnncError):
    """The compiler could not compile a kernel that passed the frontend's checks."""


class CacheError(GnncError):
    """A cache directory gnnc will not use: writable by other users, or owned by another.

    Whoever can write the compile cache can run code in every process that
    compiles (docs/guide/security.md); the message names the directory and
    the fix (`chmod 700 DIR`, or another `$GNNC_CACHE_DIR` / `$GNNC_TUNE_DIR`).
    """
