"""The frontend: `.gnn` text -> a checked ``ast.Program``.

    program = load_program("examples/gat.gnn")       # or source text
    program = parse_and_check(source, "model.gnn")

Every error in the source is a ``gnnc.errors.SourceError`` rendered as
``file:line:col: error: message`` with the line and a caret.
"""

from __future__ import annotations

import os
from pathlib import Path

from gnnc.errors import GnncError
from gnnc.lang import ast
from gnnc.lang.parser import parse

# `check` is deliberately not re-exported: the name would shadow the module
# `gnnc.lang.sema` (home of SUPPORTED_DIRECTIVES) as a package attribute.


def parse_and_check(source: str, file: str = "<string>") -> ast.Program:
    """Parses and checks ``source``; raises ``SourceError`` at the first error."""
    from gnnc.lang.sema import check

    return check(parse(source, file))


def load_program(path_or_source: str | os.PathLike) -> ast.Program:
    """A checked program from a path to an existing ``.gnn`` file, or from source text.

    A one-line string ending in ``.gnn`` without ``{`` cannot be source (every
    kernel has a body), so it is taken as a path even when no such file exists:
    a mistyped file name gets "cannot read", not a syntax error.
    """
    if isinstance(path_or_source, os.PathLike) or (
        isinstance(path_or_source, str)
        and path_or_source.endswith(".gnn")
        and "\n" not in path_or_source
        and (Path(path_or_source).is_file() or "{" not in path_or_source)
    ):
        path = Path(path_or_source)
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise GnncError(f"cannot read {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise GnncError(f"cannot read {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        return parse_and_check(source, str(path))
    return parse_and_check(str(path_or_source), "<string>")


__all__ = ["ast", "load_program", "parse", "parse_and_check"]
