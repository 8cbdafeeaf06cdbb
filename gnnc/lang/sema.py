"""The checker: names, element types, graph types and shapes of a parsed program.

``check`` fills every expression's ``gtype`` and ``shape`` and every kernel's
``dtype``, and validates schedules; it raises a ``SourceError`` (with the
program's source, so the caret renders) at the first error, in source order.

Graph types follow Seastar: ``x[u]`` is S, ``x[v]`` D, ``w[e]`` E, parameters
and numbers P; S with D (or anything with E) is E, anything with P keeps the
other type, an aggregation is A, and A with D or P stays A. A vertex
definition reads only v terms, parameters and aggregations outside its
aggregations; the operand of an aggregation, and an edge definition, are edge
expressions (no aggregation inside).
"""

from __future__ import annotations

from typing import Literal

from gnnc.errors import SourceError, SourceLocation
from gnnc.ir.directives import (
    CPU_DIRECTIVES,
    DIRECTIVES,
    MAP_STRATEGIES,
    DirectiveError,
    check_cpu_directive,
    check_map_directive,
    check_specialize_directive,
    directive_phrase,
)
from gnnc.ir.schedule import EXCLUSIVE_DIRECTIVES, IMPLEMENTED_CPU_DIRECTIVES, directive_keyword
from gnnc.lang import ast

#: Schedule directives the compiler implements, per target: keywords
#: (``"partition"``) or, for ``map``, also ``"map warp_vertex"`` style phrases.
#: A directive that parses but is not listed here is an error ("... is not
#: supported yet"), never silently ignored. ``map``'s options ``group`` and
#: ``tile`` need ``"map group"`` / ``"map tile"`` unless ``"map"`` is listed.
SUPPORTED_DIRECTIVES: dict[str, set[str]] = {
    "cpu": set(IMPLEMENTED_CPU_DIRECTIVES),
    # uGrapher's four mappings with grouping and tiling (map-threads)
    "cuda": {
        "map thread_vertex",
        "map warp_vertex",
        "map thread_edge",
        "map warp_edge",
        "map group",
        "map tile",
        "map lanes",
        "map hybrid",
    },
}

_F32_MAX = 3.4028234663852886e38

#: The most operations a value may be computed through, counting (as if
#: inlined) those of the values it reads: `a1[v] = a0[v] * 2` one deeper than
#: `a0`. The compiler's walks over a kernel (fusion analysis, lowering,
#: gradients) recurse once or twice per operation, so the checker refuses what
#: they could not walk within Python's recursion limit: `gnnc check` and
#: `gnnc.compile` agree. docs/reference/errors.md lists the limits.
MAX_DEPTH = 200
#: The most axes of a tensor, declared or computed, its V or E axis included.
MAX_RANK = 16

Mode = Literal["edge", "vertex", "aggregate"]


def _fmt_shape(shape: ast.Shape) -> str:
    if not shape:
        return "[] (a scalar)"
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _fmt_type(t: ast.TensorType) -> str:
    dims = ([t.domain] if t.domain else []) + [str(d) for d in t.shape]
    return t.dtype + (f"[{', '.join(dims)}]" if dims else "")


# ------------------------------------------------------------------- checker


class _Checker:
    def __init__(self, program: ast.Program):
        self.program = program
        self.source = program.source

    def error(self, message: str, loc: SourceLocation) -> SourceError:
        return SourceError(message, loc, self.source)

    def run(self) -> None:
        program = self.program
        if not program.kernels:
            loc = program.schedules[0].loc if program.schedules else SourceLocation(program.file, 1, 1)
            raise self.error("no kernel in this file (a kernel starts with 'kernel NAME(...)')", loc)
        kernel_names = {k.name for k in program.kernels}
        items: list[ast.Kernel | ast.Schedule] = [*program.kernels, *program.schedules]
        items.sort(key=lambda item: (item.loc.line, item.loc.col))
        seen_kernels: dict[str, ast.Kernel] = {}
        seen_schedules: dict[tuple[str, str], ast.Schedule] = {}
        for item in items:
            if isinstance(item, ast.Kernel):
                if item.name in seen_kernels:
                    first = seen_kernels[item.name].loc
                    raise self.error(f"kernel '{item.name}' is already defined at line {first.line}", item.loc)
                seen_kernels[item.name] = item
                _KernelChecker(self, item).run()
            else:
                if item.kernel not in kernel_names:
                    raise self.error(f"schedule for unknown kernel '{item.kernel}'", item.loc)
                key = (item.kernel, item.target)
                if key in seen_schedules:
                    first = seen_schedules[key].loc
                    raise self.error(
                        f"a second {item.target} schedule for '{item.kernel}' "
                        f"(the first is at line {first.line}); put all directives in one block",
                        item.loc,
                    )
                seen_schedules[key] = item
                # a schedule may come before its kernel
                self.schedule(item, next(k for k in program.kernels if k.name == item.kernel))

    # --------------------------------------------------------------- schedule

    def word_locs(self, d: ast.Directive) -> list[SourceLocation]:
        """The location of each word of a directive (they share one line)."""
        lines = self.source.splitlines()
        loc = d.loc
        if not 1 <= loc.line <= len(lines):
            return [loc] * len(d.words)
        line = lines[loc.line - 1]
        locs = []
        pos = loc.col - 1
        for w in d.words:
            found = line.find(w, pos)
            if found < 0:
                return [loc] * len(d.words)
            locs.append(SourceLocation(loc.file, loc.line, found + 1, len(w)))
            pos = found + len(w)
        return locs

    def schedule(self, s: ast.Schedule, kernel: ast.Kernel) -> None:
        given: dict[str, ast.Directive] = {}
        for d in s.directives:
            locs = self.word_locs(d)
            keyword = directive_keyword(d.words)
            if keyword not in DIRECTIVES[s.target]:
                other = "cuda" if s.target == "cpu" else "cpu"
                if keyword in DIRECTIVES[other]:
                    message = f"'{keyword}' is a {other} directive, not a {s.target} one"
                else:
                    known = ", ".join(sorted(DIRECTIVES[s.target]))
                    message = f"unknown {s.target} schedule directive '{keyword}' (known: {known})"
                raise self.error(message, locs[0])
            phrase = directive_phrase(d.words)
            if keyword in given:
                raise self.error(
                    f"'{directive_phrase(given[keyword].words)}' is already given in this schedule "
                    f"(line {given[keyword].loc.line})",
                    locs[0],
                )
            if keyword == "map":
                options = self.map_directive(d, locs)
            elif keyword == "specialize":
                self.specialize_directive(d, locs, kernel)
                options = []
            else:
                self.cpu_directive(d, locs)
                options = []
            given[keyword] = d
            supported = SUPPORTED_DIRECTIVES.get(s.target, set())
            if keyword not in supported and phrase not in supported:
                end = locs[min(len(locs), len(phrase.split())) - 1]
                span = end.col + end.length - locs[0].col
                raise self.error(
                    f"'{phrase}' is not supported yet",
                    SourceLocation(locs[0].file, locs[0].line, locs[0].col, span),
                )
            for option, loc in options:
                if keyword not in supported and f"map {option}" not in supported:
                    raise self.error(f"'map ... {option}' is not supported yet", loc)
        for keyword, (others, why) in EXCLUSIVE_DIRECTIVES.items():
            clash = next((given[k] for k in others if k in given), None) if keyword in given else None
            if clash is not None:
                raise self.error(
                    f"'{directive_phrase(given[keyword].words)}' cannot be combined with "
                    f"'{directive_phrase(clash.words)}' (line {clash.loc.line}): {why}",
                    self.word_locs(given[keyword])[0],
                )

    def cpu_directive(self, d: ast.Directive, locs: list[SourceLocation]) -> None:
        try:
            check_cpu_directive(d.words)
        except DirectiveError as exc:
            raise self.error(exc.message, locs[exc.word]) from None

    def specialize_directive(self, d: ast.Directive, locs: list[SourceLocation], kernel: ast.Kernel) -> None:
        """``specialize NAME N ...``: each name one of the kernel's dimensions, once, with a positive size."""
        dims = list(dict.fromkeys(d for p in kernel.params for d in p.type.shape if isinstance(d, str)))
        try:
            check_specialize_directive(d.words, dims, kernel.name)
        except DirectiveError as exc:
            raise self.error(exc.message, locs[exc.word]) from None

    def map_directive(self, d: ast.Directive, locs: list[SourceLocation]) -> list[tuple[str, SourceLocation]]:
        try:
            return [(option, locs[i]) for option, i in check_map_directive(d.words)]
        except DirectiveError as exc:
            raise self.error(exc.message, locs[exc.word]) from None


class _KernelChecker:
    def __init__(self, checker: _Checker, kernel: ast.Kernel):
        self.checker = checker
        self.kernel = kernel
        self.params: dict[str, ast.Param] = {}
        self.results: dict[str, ast.Result] = {}
        #: name -> its definition, once checked (a value may be read after it)
        self.defined: dict[str, ast.Definition] = {}
        #: every definition by name (the first), to say "used before defined"
        self.all_defs: dict[str, ast.Definition] = {}
        #: name -> the operations its value is computed through (MAX_DEPTH)
        self.depths: dict[str, int] = {}
        self.current: ast.Definition | None = None
        self.dtype: ast.DType = "f32"

    def error(self, message: str, loc: SourceLocation) -> SourceError:
        return self.checker.error(message, loc)

    def run(self) -> None:
        k = self.kernel
        for p in k.params:
            if p.name in ast.RESERVED_NAMES:
                raise self.error(
                    f"'{p.name}' is reserved and cannot name a parameter: it is a call option "
                    f"(reserved: {', '.join(sorted(ast.RESERVED_NAMES))})",
                    p.loc,
                )
            if p.name in ast.INDEX_NAMES:
                raise self.error(f"'{p.name}' is an index (u, v, e) and cannot name a parameter", p.loc)
            if p.name in self.params:
                raise self.error(
                    f"duplicate parameter '{p.name}' (first at line {self.params[p.name].loc.line}, "
                    f"column {self.params[p.name].loc.col})",
                    p.loc,
                )
            self.params[p.name] = p
            self.check_rank(p.type, p.loc)
        bound = {d for p in k.params for d in p.type.shape if isinstance(d, str)}
        for r in k.results:
            if r.name in ast.INDEX_NAMES:
                raise self.error(f"'{r.name}' is an index (u, v, e) and cannot name a result", r.loc)
            if r.name in self.results:
                raise self.error(f"duplicate result '{r.name}'", r.loc)
            if r.name in self.params:
                raise self.error(f"'{r.name}' is both a parameter and a result", r.loc)
            if r.type.domain not in ("V", "E"):
                raise self.error(
                    f"result '{r.name}' must be a vertex or edge tensor "
                    f"({r.type.dtype}[V, ...] or {r.type.dtype}[E, ...]), not {_fmt_type(r.type)}",
                    r.type.loc,
                )
            for d in r.type.shape:
                if isinstance(d, str) and d not in bound:
                    raise self.error(
                        f"dimension '{d}' of result '{r.name}' is not bound by any parameter "
                        "(its size would be unknown at a call)",
                        r.type.loc,
                    )
            self.results[r.name] = r
            self.check_rank(r.type, r.loc)
        self.check_dtype()
        for stmt in k.body:
            self.all_defs.setdefault(stmt.name, stmt)
        for stmt in k.body:
            self.definition(stmt)
        for r in k.results:
            if r.name not in self.defined:
                index = "v" if r.type.domain == "V" else "e"
                raise self.error(f"result '{r.name}' is never defined (expected '{r.name}[{index}] = ...')", r.loc)
        k.dtype = self.dtype

    def check_dtype(self) -> None:
        k = self.kernel
        typed = [(p.name, p.type) for p in k.params] + [(r.name, r.type) for r in k.results]
        if not typed:  # only a hand-built tree; the parser always gives a result
            raise self.error(f"kernel '{k.name}' declares no result", k.loc)
        first_name, first = typed[0]
        for name, t in typed[1:]:
            if t.dtype != first.dtype:
                raise self.error(
                    f"kernel '{k.name}' mixes element types: '{name}' is {t.dtype} but "
                    f"'{first_name}' is {first.dtype} (one kernel uses one of f32, f64)",
                    t.loc,
                )
        self.dtype = first.dtype

    # ------------------------------------------------------------- statements

    def definition(self, d: ast.Definition) -> None:
        if d.name in self.params:
            raise self.error(f"'{d.name}' is a parameter and cannot be defined", d.loc)
        if d.name in ast.INDEX_NAMES:
            raise self.error(f"'{d.name}' is an index (u, v, e) and cannot name a value", d.loc)
        if d.name in self.defined:
            first = self.defined[d.name].loc
            raise self.error(f"'{d.name}' is already defined (line {first.line})", d.loc)
        result = self.results.get(d.name)
        if result is not None:
            want = "v" if result.type.domain == "V" else "e"
            if d.index != want:
                kind = "a vertex" if want == "v" else "an edge"
                raise self.error(
                    f"result '{d.name}' is {kind} tensor ({_fmt_type(result.type)}): "
                    f"define it as '{d.name}[{want}] = ...'",
                    d.loc,
                )
        self.current = d
        self.expr(d.value, "edge" if d.index == "e" else "vertex")
        self.current = None
        self.check_depth_and_ranks(d)
        if result is not None and d.value.shape != result.type.shape:
            raise self.error(
                f"result '{d.name}' is declared {_fmt_type(result.type)} (value shape "
                f"{_fmt_shape(result.type.shape)}) but its definition has shape {_fmt_shape(d.value.shape or ())}",
                d.loc,
            )
        self.defined[d.name] = d

    def check_rank(self, t: ast.TensorType, loc: SourceLocation) -> None:
        rank = len(t.shape) + (t.domain is not None)
        if rank > MAX_RANK:
            raise self.error(f"{_fmt_type(t)} has {rank} axes; gnnc takes tensors of at most {MAX_RANK}", t.loc)

    def check_depth_and_ranks(self, d: ast.Definition) -> None:
        """The value's depth (MAX_DEPTH, through the values it reads) and every shape in it (MAX_RANK)."""
        depth = self.flow_depth(d.value)
        if depth > MAX_DEPTH:
            raise self.error(
                f"'{d.name}' is computed through {depth} nested operations, counting those of the values it "
                f"reads; gnnc compiles at most {MAX_DEPTH}: split the kernel in two, the second reading the "
                "first's result",
                d.loc,
            )
        self.depths[d.name] = depth
        stack = [d.value]
        while stack:
            e = stack.pop()
            rank = len(e.shape or ()) + (e.gtype != "P")
            if rank > MAX_RANK:
                raise self.error(
                    f"this value has {rank} axes ({_fmt_shape(e.shape or ())} per vertex or edge); gnnc takes "
                    f"tensors of at most {MAX_RANK}",
                    e.loc,
                )
            stack.extend(ast.children(e))

    def flow_depth(self, e: ast.Expr) -> int:
        """Operations on the longest path from a leaf to `e`, a read of a value counting as its own depth."""
        if isinstance(e, ast.Index) and e.name in self.depths:
            return self.depths[e.name] + 1
        return 1 + max((self.flow_depth(c) for c in ast.children(e)), default=0)

    # ------------------------------------------------------------ expressions

    def expr(self, e: ast.Expr, mode: Mode) -> None:
        if isinstance(e, ast.Number):
            self.number(e)
        elif isinstance(e, ast.Index):
            self.index(e, mode)
        elif isinstance(e, ast.Name):
            self.name(e)
        elif isinstance(e, ast.Degree):
            self.degree(e, mode)
        elif isinstance(e, ast.EdgeId | ast.SelfLoop):
            e.gtype, e.shape = "E", ()
            self.leaf_in_mode(e, mode, "edge_id(e)" if isinstance(e, ast.EdgeId) else "self_loop(e)")
        elif isinstance(e, ast.Unary):
            self.expr(e.operand, mode)
            e.gtype, e.shape = e.operand.gtype, e.operand.shape
        elif isinstance(e, ast.Binary):
            self.binary(e, mode)
        elif isinstance(e, ast.Call):
            self.call(e, mode)
        elif isinstance(e, ast.Aggregate):
            self.aggregate(e, mode)
        else:  # pragma: no cover - the parser builds only the nodes above
            raise self.error(f"unexpected expression {type(e).__name__}", e.loc)

    def degree(self, e: ast.Degree, mode: Mode) -> None:
        text = f"deg_{e.direction}({e.index}{', rel(e)' if e.relation else ''})"
        e.shape = ()
        if not e.relation:
            e.gtype = "S" if e.index == "u" else "D"
            self.leaf_in_mode(e, mode, text)
            return
        # c_{v,r} counts in-edges of the destination, c_{u,r} out-edges of the source: the
        # counts of the edge's own (vertex, relation) group, which the edge knows
        natural = {"in": "v", "out": "u"}[e.direction]
        if e.index != natural:
            raise self.error(
                f"{text}: a degree per relation counts the edges of the edge's own group: "
                f"deg_in(v, rel(e)) (in-edges of the destination) or deg_out(u, rel(e)) "
                f"(out-edges of the source)",
                e.loc,
            )
        e.gtype = "E"
        self.relation_in_mode(e, mode, text)

    def relation_in_mode(self, e: ast.Expr, mode: Mode, text: str) -> None:
        """rel(e) is a property of an edge: it is read in an edge expression only."""
        if mode == "vertex":
            raise self.error(
                f"{text} reads the relation type of an edge outside an edge context: use it in an "
                "edge definition (name[e] = ...) or inside an aggregation such as sum(...)",
                e.loc,
            )

    def number(self, e: ast.Number) -> None:
        if self.dtype == "f32" and abs(e.value) > _F32_MAX:
            raise self.error(f"number {e.text} is out of range for f32", e.loc)
        e.gtype, e.shape = "P", ()

    def leaf_in_mode(self, e: ast.Expr, mode: Mode, text: str) -> None:
        """A vertex definition reads no u or e term outside its aggregations."""
        if mode == "vertex" and e.gtype in ("S", "E"):
            what = "the source vertex u" if e.gtype == "S" else "an edge"
            raise self.error(
                f"{text} reads {what} outside an aggregation: a vertex value may use only "
                "v terms, parameters and aggregations such as sum(...) or max(...)",
                e.loc,
            )

    def before_definition(self, name: str, loc: SourceLocation) -> SourceError | None:
        later = self.all_defs.get(name)
        if later is None:
            return None
        if later is self.current:
            return self.error(f"'{name}' is used in its own definition", loc)
        return self.error(f"'{name}' is used before it is defined (line {later.loc.line})", loc)

    def index(self, e: ast.Index, mode: Mode) -> None:
        text = f"{e.name}[{e.index}]"
        if e.index == "rel":
            text = f"{e.name}[rel(e)]"
        p = self.params.get(e.name)
        if p is not None:
            domain = p.type.domain
            if domain is None:
                also = " (rel(e) indexes a relation tensor, declared with a leading R axis)" if e.index == "rel" else ""
                raise self.error(
                    f"'{e.name}' is a parameter ({_fmt_type(p.type)}), not a vertex or edge tensor: "
                    f"use it as '{e.name}' without an index{also}",
                    e.loc,
                )
            if (domain == "R") != (e.index == "rel"):
                if domain == "R":
                    raise self.error(
                        f"'{e.name}' is a relation tensor ({_fmt_type(p.type)}): read it at the edge's "
                        f"relation type, {e.name}[rel(e)], not {text}",
                        e.loc,
                    )
                raise self.error(
                    f"'{e.name}' is a {'vertex' if domain == 'V' else 'edge'} tensor: rel(e) indexes a "
                    f"relation tensor (declared with a leading R axis, f32[R, ...]), not {text}",
                    e.loc,
                )
            if domain == "R":
                e.gtype, e.shape = "E", p.type.shape
                self.relation_in_mode(e, mode, text)
                return
            if domain == "V" and e.index == "e":
                raise self.error(
                    f"'{e.name}' is a vertex tensor: read it at u or v ({e.name}[u], {e.name}[v]), not at e",
                    e.loc,
                )
            if domain == "E" and e.index != "e":
                raise self.error(f"'{e.name}' is an edge tensor: read it as {e.name}[e], not {text}", e.loc)
            shape = p.type.shape
        elif e.name in self.defined:
            d = self.defined[e.name]
            if e.index == "rel":
                raise self.error(
                    f"'{e.name}' is {'an edge' if d.index == 'e' else 'a vertex'} value: rel(e) indexes a "
                    f"relation tensor parameter (f32[R, ...]), not {text}",
                    e.loc,
                )
            if d.index == "e" and e.index != "e":
                raise self.error(f"'{e.name}' is an edge value: read it as {e.name}[e], not {text}", e.loc)
            if d.index == "v" and e.index == "e":
                raise self.error(
                    f"'{e.name}' is a vertex value: read it at u or v ({e.name}[u], {e.name}[v]), not at e",
                    e.loc,
                )
            shape = d.value.shape or ()
        else:
            err = self.before_definition(e.name, e.loc)
            if err is not None:
                raise err
            raise self.unknown(e.name, e.loc)
        e.gtype = {"u": "S", "v": "D", "e": "E"}[e.index]  # type: ignore[assignment]  # each value is one of the Literal's
        e.shape = shape
        self.leaf_in_mode(e, mode, text)

    def name(self, e: ast.Name) -> None:
        p = self.params.get(e.name)
        if p is not None:
            if p.type.domain == "V":
                raise self.error(f"'{e.name}' is a vertex tensor: index it as {e.name}[u] or {e.name}[v]", e.loc)
            if p.type.domain == "E":
                raise self.error(f"'{e.name}' is an edge tensor: index it as {e.name}[e]", e.loc)
            if p.type.domain == "R":
                raise self.error(
                    f"'{e.name}' is a relation tensor ({_fmt_type(p.type)}): index it with the edge's "
                    f"relation type, {e.name}[rel(e)]",
                    e.loc,
                )
            e.gtype, e.shape = "P", p.type.shape
            return
        if e.name in self.defined:
            d = self.defined[e.name]
            how = f"{e.name}[e]" if d.index == "e" else f"{e.name}[u] or {e.name}[v]"
            kind = "an edge" if d.index == "e" else "a vertex"
            raise self.error(f"'{e.name}' is {kind} value: read it as {how}", e.loc)
        if e.name in ast.INDEX_NAMES:
            raise self.error(f"'{e.name}' is an index, not a value (index a tensor with it: x[{e.name}])", e.loc)
        err = self.before_definition(e.name, e.loc)
        if err is not None:
            raise err
        raise self.unknown(e.name, e.loc)

    def unknown(self, name: str, loc: SourceLocation) -> SourceError:
        if name in self.results:
            return self.error(f"result '{name}' is read but never defined", loc)
        return self.error(f"unknown name '{name}'", loc)

    def combine(self, a: ast.Expr, b: ast.Expr, loc: SourceLocation) -> ast.GraphType:
        ga, gb = a.gtype, b.gtype
        assert ga is not None and gb is not None
        if ga == gb:
            return ga
        if ga == "P":
            return gb
        if gb == "P":
            return ga
        if "A" not in (ga, gb):
            return "E"
        if {ga, gb} == {"A", "D"}:
            return "A"
        # A with S or E: the leaf checks report this first; kept as a guard.
        raise self.error("an aggregation cannot be combined with a u or e term outside an aggregation", loc)

    def broadcast(self, a: ast.Shape, b: ast.Shape, loc: SourceLocation, what: str) -> ast.Shape:
        short, long = (a, b) if len(a) <= len(b) else (b, a)
        if long[: len(short)] != short:
            raise self.error(
                f"{what}: shapes {_fmt_shape(a)} and {_fmt_shape(b)} do not broadcast "
                "(broadcasting is by leading axes: one shape must be a prefix of the other)",
                loc,
            )
        return long

    def binary(self, e: ast.Binary, mode: Mode) -> None:
        self.expr(e.lhs, mode)
        self.expr(e.rhs, mode)
        lshape, rshape = e.lhs.shape or (), e.rhs.shape or ()
        if e.op == "@":
            w = e.rhs
            p = self.params.get(w.name) if isinstance(w, ast.Name) else None
            named = p is not None and p.type.domain is None and len(p.type.shape) == 2
            # an edge value [K, N] (a relation's matrix W[rel(e)], NNConv's theta[e]) is a matrix per edge;
            # one of [..., K, N] is a matrix per leading index of the left operand (a block per head)
            per_edge = w.gtype == "E" and len(rshape) >= 2
            named_edge = w.name if isinstance(w, ast.Index) else None
            defined = self.defined.get(named_edge) if named_edge is not None else None
            if per_edge and defined is not None and defined.value.gtype in ("S", "D", "P"):
                # `t[e] = x[u]` (or `= W * 2`) is not an edge's value but a vertex's (a parameter's) read
                # through an edge name: the compiler reads it there, where a matrix has no form but a
                # named 2-D parameter
                end = {"S": "source values", "D": "destination values", "P": "parameters"}[defined.value.gtype]
                hint = (
                    "name a 2-D parameter itself as the right operand"
                    if defined.value.gtype == "P"
                    else "make it an edge tensor input, or multiply elementwise and reduce with dot"
                )
                raise self.error(
                    f"the right operand of '@' is a matrix per edge ([K, N] of an edge tensor, theta[e], or of a "
                    f"relation's, W[rel(e)]), but '{named_edge}' is defined from {end} only ({hint})",
                    w.loc,
                )
            if per_edge and len(rshape) > 2 and tuple(rshape[:-2]) != tuple(lshape[:-1]):
                raise self.error(
                    f"'@': a right operand of shape {_fmt_shape(rshape)} is a matrix per leading index of the "
                    f"left operand, whose leading axes must then be {_fmt_shape(rshape[:-2])}; "
                    f"it is {_fmt_shape(lshape)}",
                    e.loc,
                )
            if not (named or per_edge):
                got = (
                    f"'{w.name}' has shape {_fmt_shape(rshape)}"
                    if isinstance(w, ast.Name)
                    else (f"got {'an expression' if w.gtype != 'E' else 'an edge value'} of shape {_fmt_shape(rshape)}")
                )
                raise self.error(
                    "the right operand of '@' must be a 2-D parameter matrix W: [K, N], or an edge value of "
                    f"shape [K, N] (W[rel(e)], theta[e]) ({got})",
                    w.loc,
                )
            rows, cols = rshape[-2:]
            what = p.name if named and p is not None else "the right operand"
            if not lshape:
                raise self.error(f"'@' needs a left operand of shape [..., {rows}]; it is {_fmt_shape(lshape)}", e.loc)
            if lshape[-1] != rows:
                raise self.error(
                    f"'@': the last axis of the left operand {_fmt_shape(lshape)} does not match "
                    f"the rows of {what} {_fmt_shape(rshape)}",
                    e.loc,
                )
            e.shape = lshape[:-1] + (cols,)
        else:
            e.shape = self.broadcast(lshape, rshape, e.loc, f"'{e.op}'")
        e.gtype = self.combine(e.lhs, e.rhs, e.loc)

    def call(self, e: ast.Call, mode: Mode) -> None:
        f = e.func
        if f == "softmax" and mode == "vertex":
            raise self.error(
                "softmax normalises an edge value over each destination's in-edges: use it in an "
                "edge definition (a[e] = softmax(s[e])) or inside an aggregation",
                e.loc,
            )
        if f == "leaky_relu":
            slope = e.args[1]
            if isinstance(slope, ast.Unary) and isinstance(slope.operand, ast.Number):
                # a negative literal slope: fold it into one Number
                slope = ast.Number(value=-slope.operand.value, text="-" + slope.operand.text, loc=slope.loc)
                e.args[1] = slope
            if not isinstance(slope, ast.Number):
                raise self.error("the slope of leaky_relu must be a number, such as 0.2", slope.loc)
        for arg in e.args:
            self.expr(arg, mode)
        a = e.args[0]
        ashape = a.shape or ()
        if f in ast.UNARY_FUNCTIONS or f == "leaky_relu":
            e.gtype, e.shape = a.gtype, ashape
        elif f == "softmax":
            e.gtype, e.shape = "E", ashape
        elif f in ("max", "min"):
            b = e.args[1]
            e.shape = self.broadcast(ashape, b.shape or (), e.loc, f)
            e.gtype = self.combine(a, b, e.loc)
        elif f == "outer":
            b = e.args[1]
            bshape = b.shape or ()
            if not ashape or not bshape or ashape[:-1] != bshape[:-1]:
                raise self.error(
                    f"outer needs operands [..., K] and [..., N] with the same leading axes, got "
                    f"{_fmt_shape(ashape)} and {_fmt_shape(bshape)}",
                    e.loc,
                )
            e.shape = ashape + bshape[-1:]
            e.gtype = self.combine(a, b, e.loc)
        elif f == "transpose":
            if len(ashape) < 2:
                raise self.error(
                    f"transpose swaps the last two axes: it needs an operand of shape [..., K, N], got "
                    f"{_fmt_shape(ashape)}",
                    e.loc,
                )
            e.shape = ashape[:-2] + (ashape[-1], ashape[-2])
            e.gtype = a.gtype
        elif f == "dot":
            b = e.args[1]
            bshape = b.shape or ()
            if ashape != bshape:
                raise self.error(
                    f"dot needs two operands of the same shape, got {_fmt_shape(ashape)} and {_fmt_shape(bshape)}",
                    e.loc,
                )
            if not ashape:
                raise self.error("dot needs operands with at least one axis (it reduces the last one)", e.loc)
            e.shape = ashape[:-1]
            e.gtype = self.combine(a, b, e.loc)
        else:  # pragma: no cover - the parser accepts no other function
            raise self.error(f"unknown function '{f}'", e.loc)

    def aggregate(self, e: ast.Aggregate, mode: Mode) -> None:
        if mode == "edge":
            raise self.error(
                f"an edge definition cannot contain an aggregation ({e.kind}(...) gives one value "
                "per destination vertex; define it as a vertex value, name[v] = ...)",
                e.loc,
            )
        if mode == "aggregate":
            raise self.error(f"aggregations cannot be nested ({e.kind}(...) inside another aggregation)", e.loc)
        self.expr(e.operand, "aggregate")
        e.gtype, e.shape = "A", e.operand.shape


def check(program: ast.Program) -> ast.Program:
    """Checks ``program`` in place and returns it; raises ``SourceError`` at the first error."""
    _Checker(program).run()
    return program


__all__ = ["CPU_DIRECTIVES", "DIRECTIVES", "MAP_STRATEGIES", "MAX_DEPTH", "MAX_RANK", "SUPPORTED_DIRECTIVES", "check"]
