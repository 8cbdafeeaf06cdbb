"""The lexer of the gnnc language: source text -> tokens with locations.

Comments run from ``#`` to the end of the line. A line break is a token
(``NEWLINE``) because it separates statements; ``;`` is the same token.
Inside ``( )`` and ``[ ]`` line breaks are skipped, so a signature or an
expression may span lines there.

Lines are the lines of ``str.splitlines`` (which also breaks at ``\\r``,
form feeds and a few Unicode separators), the same lines
``SourceError.render`` shows, so a caret always lands under its token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from gnnc.errors import SourceError, SourceLocation

TokenKind = Literal["IDENT", "NUMBER", "OP", "NEWLINE", "EOF"]

#: Punctuation and operators; two-character ones first.
OPERATORS = ("->", "(", ")", "[", "]", "{", "}", ",", ":", "+", "-", "*", "/", "@", "=")

# What a number must not run into: `2x`, `1e`, `1.2.3`.
_NUMBER_TAIL = re.compile(r"[A-Za-z0-9_.]+")


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    #: The token's text; ``"\\n"`` or ``";"`` for NEWLINE, ``""`` for EOF.
    text: str
    loc: SourceLocation

    def describe(self) -> str:
        """How an error message names this token."""
        if self.kind == "EOF":
            return "end of file"
        if self.kind == "NEWLINE":
            return "end of line" if self.text != ";" else "';'"
        if self.kind == "NUMBER":
            return f"number {self.text}"
        return f"'{self.text}'"


#: One token (or a run of spaces, or a comment) at a position: a single match per token.
_TOKEN = re.compile(
    r"(?P<space>[ \t\r\n\x0b\x0c]+)|(?P<comment>#)|(?P<semi>;)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<op>" + "|".join(re.escape(op) for op in OPERATORS) + ")"
)
_OPENING = frozenset("([")
_CLOSING = frozenset(")]")


def tokenize(source: str, file: str = "<string>") -> list[Token]:
    """The tokens of ``source``, ending with one ``EOF`` token.

    Raises ``SourceError`` on a character that starts no token or a
    malformed number.
    """
    tokens: list[Token] = []
    append = tokens.append
    depth = 0  # open ( and [ : line breaks inside them are not separators
    lines = source.splitlines()
    last_line, last_col = 1, 1  # where EOF is reported: after the last token
    match = _TOKEN.match
    for lineno, line in enumerate(lines, start=1):
        col = 0
        n = len(line)
        while col < n:
            m = match(line, col)
            if m is None:
                ch = line[col]
                shown = ch if ch.isprintable() else repr(ch)[1:-1]
                raise SourceError(f"unexpected character '{shown}'", SourceLocation(file, lineno, col + 1), source)
            kind = m.lastgroup
            end = m.end()
            if kind == "space":
                col = end
                continue
            if kind == "comment":
                break
            text = m.group()
            if kind == "ident":
                append(Token("IDENT", text, SourceLocation(file, lineno, col + 1, len(text))))
            elif kind == "op":
                if text in _OPENING:
                    depth += 1
                elif text in _CLOSING:
                    depth = max(0, depth - 1)
                elif text in ("{", "}"):
                    # a brace always closes any bracket left open before it, so
                    # one missing ')' does not swallow the rest of the file
                    depth = 0
                append(Token("OP", text, SourceLocation(file, lineno, col + 1, len(text))))
            elif kind == "number":
                tail = _NUMBER_TAIL.match(line, end)
                if tail is not None:
                    bad = line[col : tail.end()]
                    raise SourceError(
                        f"malformed number '{bad}'", SourceLocation(file, lineno, col + 1, len(bad)), source
                    )
                append(Token("NUMBER", text, SourceLocation(file, lineno, col + 1, len(text))))
            else:  # ";"
                append(Token("NEWLINE", ";", SourceLocation(file, lineno, col + 1)))
            col = end
            last_line, last_col = lineno, col + 1
        if depth == 0 and tokens and tokens[-1].kind != "NEWLINE":
            append(Token("NEWLINE", "\n", SourceLocation(file, lineno, len(line) + 1)))
    tokens.append(Token("EOF", "", SourceLocation(file, last_line, last_col)))
    return tokens


__all__ = ["OPERATORS", "Token", "TokenKind", "tokenize"]
