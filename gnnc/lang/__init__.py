"""The frontend: `.gnn` text -> a checked ``ast.Program``.

    program = load_program("examples/gat.gnn")       # or source text
    program = parse_and_check(source, "model.gnn")

Every error in the source is a ``gnnc.errors.SourceError`` rendered as
``file:line:col: error: message`` with the line and a caret.
"""

from __future__ import annotations

import os
from pathlib import Path

from gnnc.errors import GnncError, SourceError, SourceLocation
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
        return parse_and_check(read_source_file(path), str(path))
    return parse_and_check(str(path_or_source), "<string>")


def read_source_file(path: str | os.PathLike) -> str:
    """The text of a `.gnn` file: UTF-8 (a byte-order mark dropped).

    Raises ``GnncError`` if the file cannot be read, and ``SourceError`` at the
    first byte that is not UTF-8 (line and column as the lexer counts them).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GnncError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return decode_source(data, str(path))


def decode_source(data: bytes, file: str) -> str:
    """`data` as UTF-8 source text, or a ``SourceError`` pointing at its first byte that is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        # lines as the lexer and SourceError.render count them (str.splitlines)
        before = data[: exc.start].decode("utf-8-sig", errors="replace")
        lines = (before + "?").splitlines()
        loc = SourceLocation(file, len(lines), len(lines[-1]))
        byte = data[exc.start]
        message = f"the file is not UTF-8 text: byte 0x{byte:02x} ({exc.reason}); save it as UTF-8"
        raise SourceError(message, loc, data.decode("utf-8-sig", errors="replace")) from None


__all__ = ["ast", "decode_source", "load_program", "parse", "parse_and_check", "read_source_file"]
