"""The parser of the gnnc language: tokens -> ``ast.Program``.

Grammar (``NL`` is a line break or ``;``)::

    program    := { NL | kernel | schedule }
    kernel     := 'kernel' NAME '(' [param {',' param} [',']] ')' '->' results
                  '{' { NL | statement } '}'
    param      := NAME ':' type
    results    := type | '(' NAME ':' type {',' NAME ':' type} [','] ')'
    type       := ('f32' | 'f64') ['[' dim {',' dim} ']']
    dim        := NAME | positive integer     -- a leading V / E is the domain
    statement  := NAME '[' ('e' | 'v') ']' '=' expr (NL | before '}')
    expr       := term {('+' | '-') term}
    term       := unary {('*' | '/' | '@') unary}
    unary      := '-' unary | primary
    primary    := NUMBER | NAME '[' ('u' | 'v' | 'e' | 'rel' '(' 'e' ')') ']' | NAME
                | NAME '(' [expr {',' expr}] ')' | '(' expr ')'
    schedule   := 'schedule' NAME 'for' NAME '{' { NL | directive } '}'
    directive  := (NAME | NUMBER) {NAME | NUMBER}

Line breaks may also stand between the parts of a kernel or schedule header
(the GAT signature puts ``-> (...)`` on its own line). The parser checks
syntax only; names, graph types and shapes are ``check``'s.
"""

from __future__ import annotations

import math

from gnnc.errors import SourceError, SourceLocation
from gnnc.lang import ast
from gnnc.lang.lexer import Token, tokenize

#: The deepest expression (parentheses, calls, operator chains) accepted. Real
#: kernels stay far below it; it keeps the recursive parser and checker clear
#: of Python's recursion limit.
MAX_NESTING = 100

#: Functions taking expressions as arguments (besides aggregations).
CALL_FUNCTIONS = ast.UNARY_FUNCTIONS | {"leaky_relu", "dot", "outer", "transpose", "softmax"}
DEGREE_FUNCTIONS = {"deg_in": "in", "deg_out": "out"}
#: Functions of the edge index alone (`edge_id(e)`), by name: the node each parses to.
EDGE_FUNCTIONS: dict[str, type[ast.EdgeId] | type[ast.SelfLoop]] = {"edge_id": ast.EdgeId, "self_loop": ast.SelfLoop}


class _Parser:
    def __init__(self, source: str, file: str):
        self.source = source
        self.file = file
        self.tokens = tokenize(source, file)
        self.pos = 0
        self.nesting = 0

    # ---------------------------------------------------------------- helpers

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        tok = self.tokens[self.pos]
        if tok.kind != "EOF":
            self.pos += 1
        return tok

    def error(self, message: str, loc: SourceLocation | None = None) -> SourceError:
        return SourceError(message, loc if loc is not None else self.tok.loc, self.source)

    def is_op(self, text: str) -> bool:
        return self.tok.kind == "OP" and self.tok.text == text

    def expect_op(self, text: str, context: str = "") -> Token:
        if not self.is_op(text):
            where = f" {context}" if context else ""
            raise self.error(f"expected '{text}'{where}, found {self.tok.describe()}")
        return self.advance()

    def expect_ident(self, what: str) -> Token:
        if self.tok.kind != "IDENT":
            raise self.error(f"expected {what}, found {self.tok.describe()}")
        return self.advance()

    def skip_newlines(self) -> None:
        while self.tok.kind == "NEWLINE":
            self.advance()

    # ---------------------------------------------------------------- program

    def program(self) -> ast.Program:
        kernels: list[ast.Kernel] = []
        schedules: list[ast.Schedule] = []
        while True:
            self.skip_newlines()
            tok = self.tok
            if tok.kind == "EOF":
                break
            if tok.kind == "IDENT" and tok.text == "kernel":
                kernels.append(self.kernel())
            elif tok.kind == "IDENT" and tok.text == "schedule":
                schedules.append(self.schedule())
            else:
                raise self.error(f"expected 'kernel' or 'schedule', found {tok.describe()}")
        # A schedule may come before or after its kernel; one naming no kernel
        # (or a duplicated kernel name) is reported by the checker.
        by_name: dict[str, ast.Kernel] = {}
        for k in kernels:
            by_name.setdefault(k.name, k)
        for s in schedules:
            if s.kernel in by_name:
                by_name[s.kernel].schedules.append(s)
        return ast.Program(kernels=kernels, schedules=schedules, file=self.file, source=self.source)

    # ----------------------------------------------------------------- kernel

    def kernel(self) -> ast.Kernel:
        self.advance()  # 'kernel'
        self.skip_newlines()
        name = self.expect_ident("a kernel name")
        self.skip_newlines()
        self.expect_op("(", "to open the parameter list")
        params: list[ast.Param] = []
        while not self.is_op(")"):
            pname = self.expect_ident("a parameter name")
            self.expect_op(":", f"after parameter '{pname.text}'")
            params.append(ast.Param(pname.text, self.type(), pname.loc))
            if not self.is_op(")"):
                self.expect_op(",", "between parameters")
        self.advance()  # ')'
        self.skip_newlines()
        self.expect_op("->", "before the result type")
        self.skip_newlines()
        results: list[ast.Result] = []
        if self.is_op("("):
            single = False
            self.advance()
            while True:
                rname = self.expect_ident("a result name")
                self.expect_op(":", f"after result '{rname.text}'")
                results.append(ast.Result(rname.text, self.type(), rname.loc))
                if self.is_op(")"):
                    break
                self.expect_op(",", "between results")
                if self.is_op(")"):
                    break
            self.advance()  # ')'
        else:
            single = True
            rtype = self.type()
            results.append(ast.Result("out", rtype, rtype.loc))
        self.skip_newlines()
        self.expect_op("{", "to open the kernel body")
        body: list[ast.Definition] = []
        while True:
            self.skip_newlines()
            if self.is_op("}"):
                self.advance()
                break
            if self.tok.kind == "EOF":
                raise self.error(f"expected '}}' to close kernel '{name.text}', found end of file")
            body.append(self.statement())
        return ast.Kernel(
            name=name.text,
            params=params,
            results=results,
            single_result=single,
            body=body,
            loc=name.loc,
        )

    def type(self) -> ast.TensorType:
        tok = self.tok
        if tok.kind != "IDENT" or tok.text not in ("f32", "f64"):
            if tok.kind == "IDENT":
                raise self.error(f"unknown element type '{tok.text}': expected f32 or f64")
            raise self.error(f"expected a type (f32 or f64), found {tok.describe()}")
        self.advance()
        dtype: ast.DType = "f32" if tok.text == "f32" else "f64"
        domain: str | None = None
        shape: list[ast.Dim] = []
        end = tok.loc
        if self.is_op("["):
            self.advance()
            first = True
            while True:
                d = self.tok
                if d.kind == "IDENT":
                    if d.text in ("V", "E", "R"):
                        if not first:
                            kind = {"V": "vertex", "E": "edge", "R": "relation"}[d.text]
                            raise self.error(
                                f"'{d.text}' may only be the first axis of a type (it makes a {kind} tensor)"
                            )
                        domain = d.text
                    else:
                        shape.append(d.text)
                elif d.kind == "NUMBER":
                    if not d.text.isdigit():
                        raise self.error(f"a dimension must be a name or a positive integer, found {d.describe()}")
                    digits = d.text.lstrip("0")
                    if not digits:
                        raise self.error(f"a dimension must be positive, found {d.text}")
                    if len(digits) > 18:
                        raise self.error(f"dimension {d.text} is too large")
                    shape.append(int(d.text))
                else:
                    raise self.error(f"expected a dimension (a name or a positive integer), found {d.describe()}")
                self.advance()
                first = False
                if self.is_op("]"):
                    end = self.advance().loc
                    break
                self.expect_op(",", "between dimensions")
        loc = tok.loc
        if end.line == loc.line and end is not tok.loc:
            loc = SourceLocation(loc.file, loc.line, loc.col, end.col + end.length - loc.col)
        return ast.TensorType(dtype=dtype, domain=domain, shape=tuple(shape), loc=loc)  # type: ignore[arg-type]  # the token's text was matched against the Literal's values

    def statement(self) -> ast.Definition:
        name = self.expect_ident("a definition such as 'out[v] = ...'")
        if not self.is_op("["):
            raise self.error(f"expected '[' after '{name.text}': a definition is 'name[e] = ...' or 'name[v] = ...'")
        self.advance()
        idx = self.tok
        if idx.kind != "IDENT" or idx.text not in ("e", "v"):
            if idx.kind == "IDENT" and idx.text == "u":
                raise self.error(
                    "a definition is 'name[e] = ...' (an edge value) or 'name[v] = ...' "
                    "(a vertex value); values are defined at the destination v, not at u"
                )
            raise self.error(f"expected the index e or v of a definition, found {idx.describe()}")
        self.advance()
        self.expect_op("]", "after the index")
        self.expect_op("=", f"after '{name.text}[{idx.text}]'")
        value, _ = self.expr()
        if self.tok.kind != "NEWLINE" and not self.is_op("}"):
            raise self.error(f"expected the end of the statement, found {self.tok.describe()}")
        return ast.Definition(name.text, idx.text, value, name.loc)  # type: ignore[arg-type]  # the token's text was matched against the Literal's values

    # ------------------------------------------------------------ expressions
    #
    # Each method returns (expression, depth of its tree); the depth bounds the
    # recursion of every later walk over the tree.

    def deeper(self, depth: int, tok: Token) -> int:
        if depth > MAX_NESTING:
            raise self.error(f"expression nested too deeply (more than {MAX_NESTING} levels)", tok.loc)
        return depth

    def expr(self) -> tuple[ast.Expr, int]:
        self.nesting += 1
        try:
            if self.nesting > MAX_NESTING:
                raise self.error(f"expression nested too deeply (more than {MAX_NESTING} levels)")
            lhs, depth = self.term()
            while self.tok.kind == "OP" and self.tok.text in ("+", "-"):
                op = self.advance()
                rhs, rdepth = self.term()
                depth = self.deeper(1 + max(depth, rdepth), op)
                lhs = ast.Binary(op=op.text, lhs=lhs, rhs=rhs, loc=op.loc)  # type: ignore[arg-type]  # the token's text was matched against the Literal's values
            return lhs, depth
        finally:
            self.nesting -= 1

    def term(self) -> tuple[ast.Expr, int]:
        lhs, depth = self.unary()
        while self.tok.kind == "OP" and self.tok.text in ("*", "/", "@"):
            op = self.advance()
            rhs, rdepth = self.unary()
            depth = self.deeper(1 + max(depth, rdepth), op)
            lhs = ast.Binary(op=op.text, lhs=lhs, rhs=rhs, loc=op.loc)  # type: ignore[arg-type]  # the token's text was matched against the Literal's values
        return lhs, depth

    def unary(self) -> tuple[ast.Expr, int]:
        minuses: list[Token] = []
        while self.is_op("-"):
            minuses.append(self.advance())
            self.deeper(len(minuses), minuses[-1])
        operand, depth = self.primary()
        for op in reversed(minuses):
            depth = self.deeper(depth + 1, op)
            operand = ast.Unary(op="-", operand=operand, loc=op.loc)
        return operand, depth

    def primary(self) -> tuple[ast.Expr, int]:
        tok = self.tok
        if tok.kind == "NUMBER":
            self.advance()
            value = float(tok.text)
            if not math.isfinite(value):
                raise self.error(f"number {tok.text} is out of range", tok.loc)
            return ast.Number(value=value, text=tok.text, loc=tok.loc), 1
        if self.is_op("("):
            self.advance()
            inner, depth = self.expr()
            self.expect_op(")", "to close '('")
            return inner, depth
        if tok.kind == "IDENT":
            self.advance()
            if self.is_op("["):
                return self.index(tok), 1
            if self.is_op("("):
                return self.call(tok)
            return ast.Name(name=tok.text, loc=tok.loc), 1
        raise self.error(f"expected an expression, found {tok.describe()}")

    def index(self, name: Token) -> ast.Index:
        self.advance()  # '['
        idx = self.tok
        if idx.kind == "IDENT" and idx.text == "rel" and self.peek().kind == "OP" and self.peek().text == "(":
            self.relation_of_edge()
            index = "rel"
        elif idx.kind != "IDENT" or idx.text not in ast.INDEX_NAMES:
            raise self.error(f"expected the index u, v, e or rel(e), found {idx.describe()}")
        else:
            self.advance()
            index = idx.text
        close = self.expect_op("]", "after the index")
        loc = name.loc
        if close.loc.line == loc.line:
            loc = SourceLocation(loc.file, loc.line, loc.col, close.loc.col + 1 - loc.col)
        return ast.Index(name=name.text, index=index, loc=loc)  # type: ignore[arg-type]  # the token's text was matched against the Literal's values

    def relation_of_edge(self) -> None:
        """`rel(e)`, the edge's relation type: only an index (`W[rel(e)]`) or a degree's second argument."""
        self.advance()  # 'rel'
        self.advance()  # '('
        idx = self.tok
        if idx.kind != "IDENT" or idx.text != "e":
            raise self.error(f"rel takes the edge index e, found {idx.describe()}")
        self.advance()
        self.expect_op(")", "after rel(e")

    def call(self, func: Token) -> tuple[ast.Expr, int]:
        self.advance()  # '('
        name = func.text
        if name in DEGREE_FUNCTIONS:
            idx = self.tok
            if idx.kind != "IDENT" or idx.text not in ("u", "v"):
                raise self.error(f"{name} takes the vertex index u or v, found {idx.describe()}")
            self.advance()
            relation = False
            if self.is_op(","):
                self.advance()
                rel = self.tok
                if not (
                    rel.kind == "IDENT" and rel.text == "rel" and self.peek().kind == "OP" and self.peek().text == "("
                ):
                    raise self.error(
                        f"the second argument of {name} is the edge's relation, rel(e), found {rel.describe()}"
                    )
                self.relation_of_edge()
                relation = True
            self.expect_op(")", f"after {name}({idx.text}" + (", rel(e)" if relation else ""))
            direction = DEGREE_FUNCTIONS[name]
            degree = ast.Degree(direction=direction, index=idx.text, relation=relation, loc=func.loc)  # type: ignore[arg-type]  # the token's text was matched against the Literal's values
            return degree, 1
        if name == "rel":
            raise self.error(
                "rel(e) is the edge's relation type: it indexes a relation tensor (W[rel(e)]) or "
                "counts a degree per relation (deg_in(v, rel(e))), and is not a value by itself",
                func.loc,
            )
        if name in EDGE_FUNCTIONS:  # edge_id(e), self_loop(e): values of the edge itself
            idx = self.tok
            if idx.kind != "IDENT" or idx.text != "e":
                raise self.error(f"{name} takes the edge index e, found {idx.describe()}")
            self.advance()
            self.expect_op(")", f"after {name}(e")
            return EDGE_FUNCTIONS[name](loc=func.loc), 1
        if name not in CALL_FUNCTIONS and name not in ast.AGGREGATIONS:
            raise self.error(f"unknown function '{name}'", func.loc)
        args: list[ast.Expr] = []
        depth = 0
        while not self.is_op(")"):
            arg, adepth = self.expr()
            args.append(arg)
            depth = max(depth, adepth)
            if not self.is_op(")"):
                self.expect_op(",", f"between the arguments of {name}")
        self.advance()  # ')'
        depth = self.deeper(depth + 1, func)
        if name in ast.AGGREGATIONS and (len(args) == 1 or name not in ("max", "min")):
            if len(args) != 1:
                raise self.error(
                    f"{name} takes one argument (the edge expression to aggregate), got {len(args)}", func.loc
                )
            return ast.Aggregate(kind=name, operand=args[0], loc=func.loc), depth  # type: ignore[arg-type]  # the token's text was matched against the Literal's values
        want = 1 if name in ast.UNARY_FUNCTIONS or name in ("softmax", "transpose") else 2
        if len(args) != want:
            if name in ("max", "min"):
                message = f"{name} takes one argument (an aggregation) or two (elementwise), got {len(args)}"
            else:
                s = "" if want == 1 else "s"
                message = f"{name} takes {want} argument{s}, got {len(args)}"
            raise self.error(message, func.loc)
        return ast.Call(func=name, args=args, loc=func.loc), depth

    # --------------------------------------------------------------- schedule

    def schedule(self) -> ast.Schedule:
        self.advance()  # 'schedule'
        self.skip_newlines()
        kernel = self.expect_ident("the name of the kernel to schedule")
        self.skip_newlines()
        if not (self.tok.kind == "IDENT" and self.tok.text == "for"):
            raise self.error(f"expected 'for' after 'schedule {kernel.text}', found {self.tok.describe()}")
        self.advance()
        self.skip_newlines()
        target = self.expect_ident("a target (cpu or cuda)")
        if target.text not in ("cpu", "cuda"):
            raise self.error(f"unknown target '{target.text}': expected cpu or cuda", target.loc)
        self.skip_newlines()
        self.expect_op("{", "to open the schedule")
        directives: list[ast.Directive] = []
        while True:
            self.skip_newlines()
            if self.is_op("}"):
                self.advance()
                break
            words: list[Token] = []
            while self.tok.kind in ("IDENT", "NUMBER"):
                words.append(self.advance())
            if not words:
                if self.tok.kind == "EOF":
                    raise self.error(f"expected '}}' to close the schedule of '{kernel.text}', found end of file")
                raise self.error(f"expected a schedule directive, found {self.tok.describe()}")
            if self.tok.kind != "NEWLINE" and not self.is_op("}"):
                raise self.error(
                    f"unexpected {self.tok.describe()} in a schedule directive "
                    "(directives are words and numbers, one per line)"
                )
            directives.append(ast.Directive([w.text for w in words], words[0].loc))
        return ast.Schedule(
            kernel=kernel.text,
            target=target.text,  # type: ignore[arg-type]  # the token's text is checked against the Literal's values
            directives=directives,
            loc=kernel.loc,
        )


def parse(source: str, file: str = "<string>") -> ast.Program:
    """Parses gnnc source; raises ``SourceError`` at the first syntax error."""
    return _Parser(source, file).program()


__all__ = ["MAX_NESTING", "parse"]
