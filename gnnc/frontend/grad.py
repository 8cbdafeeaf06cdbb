"""Gradient kernels: reverse-mode differentiation of a checked kernel into new kernels.

For a kernel with one result `out` and an input tensor `x`, the gradient of
`<gout, out>` with respect to `x` is written as ordinary gnnc kernels that
take the forward inputs plus `gout` (the incoming gradient, shaped as `out`):

- contributions that reach `x[u]` (a gather at the source) sum over the
  out-edges of `u`. That is an aggregation over in-edges on the *reverse*
  graph (Seastar), so that kernel is emitted with `u` and `v` swapped (and
  `deg_in` / `deg_out` swapped) and the runtime runs it on
  `Graph.reversed()`, which keeps the user's edge ids; the existing
  lowering, fusion and schedules then apply unchanged;
- contributions that reach `x[v]` sum over in-edges of `v` (plus the direct
  term when `x[v]` is used outside an aggregation) on the forward graph;
- contributions that reach `w[e]` give an edge kernel on the forward graph.

The gradient of `x` is the sum of the kernels' results. Generated kernels are
source text, so they go through the same checker, graph dialect, passes and
backend as a user's kernel, and the numpy reference can evaluate them.

A parameter without a V/E axis (`eps`) gets a vertex kernel of partial
gradients (each destination: its in-edges' terms and its own), which the
runtime sums.

Not differentiated yet (a `CompileError` says so): `@`, `softmax`, `max`/`min`
aggregations and the non-smooth elementwise functions (they need argmax
bookkeeping or a step function the language lacks), vertex values read by a
later statement, and kernels with several results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gnnc.errors import CompileError, SourceError
from gnnc.frontend import ast

#: The incoming gradient's parameter name in generated kernels (a prefix keeps it clear of user names).
GOUT = "gout__"


@dataclass(frozen=True)
class GradKernel:
    """One generated kernel: its name, the input it differentiates, and which graph it runs on."""

    name: str
    wrt: str
    reverse: bool
    #: The kernel gives one partial gradient per vertex; the runtime sums them (parameters).
    reduce: bool = False


@dataclass
class GradProgram:
    kernel: str
    source: str
    kernels: list[GradKernel]
    #: Inputs of the forward kernel with no gradient (they do not reach the result).
    constant: list[str]
    #: Parameters without a V/E axis, left out when no `wrt` was asked for.
    skipped: list[str]


def _fmt_type(t: ast.TensorType) -> str:
    dims = ([t.domain] if t.domain else []) + [str(d) for d in t.shape]
    return t.dtype + (f"[{', '.join(dims)}]" if dims else "")


def text(e: ast.Expr, edge_defs: dict[str, ast.Expr] | None = None) -> str:
    """Source text of a checked expression, fully parenthesised.

    Edge values defined by earlier statements (`s[e]`) are inlined: a
    gradient kernel recomputes them rather than reading a saved tensor.
    """
    return _text(e, edge_defs or {})


def _text(e: ast.Expr, defs: dict[str, ast.Expr]) -> str:
    def text(e: ast.Expr) -> str:
        return _text(e, defs)

    if isinstance(e, ast.Number):
        return f"{float(e.value)!r}"
    if isinstance(e, ast.Index):
        if e.name in defs:
            return f"({text(defs[e.name])})"
        return f"{e.name}[{e.index}]"
    if isinstance(e, ast.Name):
        return e.name
    if isinstance(e, ast.Unary):
        return f"(-{text(e.operand)})"
    if isinstance(e, ast.Binary):
        return f"({text(e.lhs)} {e.op} {text(e.rhs)})"
    if isinstance(e, ast.Call):
        args = [text(a) for a in e.args]
        if e.func == "leaky_relu":
            args[1] = f"{float(e.args[1].value)!r}"  # type: ignore[attr-defined]
        return f"{e.func}({', '.join(args)})"
    if isinstance(e, ast.Aggregate):
        return f"{e.kind}({text(e.operand)})"
    if isinstance(e, ast.Degree):
        return f"deg_{e.direction}({e.index})"
    raise AssertionError(type(e).__name__)


def swap_uv(src: str) -> str:
    """The same expression on the reverse graph: u <-> v, deg_in <-> deg_out."""
    table = {"[u]": "[v]", "[v]": "[u]", "(u)": "(v)", "(v)": "(u)", "deg_in": "deg_out", "deg_out": "deg_in"}
    return re.sub(r"\[u\]|\[v\]|\(u\)|\(v\)|deg_in|deg_out", lambda m: table[m.group(0)], src)


def _reduce_to(adj: str, have: tuple, want: tuple) -> str:
    """Sums the trailing axes broadcasting added (leading-axes rule), one `dot` per axis."""
    for _ in range(len(have) - len(want)):
        # `adj * 0 + 1` is a ones tensor of adj's shape; dot with it sums the last axis
        adj = f"dot({adj}, (({adj}) * 0.0 + 1.0))"
    return adj


class _Differentiator:
    def __init__(self, kernel: ast.Kernel, wrt: str):
        self.kernel = kernel
        self.wrt = wrt
        self.edge_defs = {d.name: d.value for d in kernel.body if d.index == "e"}
        self.vertex_defs = {d.name for d in kernel.body if d.index == "v"}
        # (site, ctx, adjoint text): site u / v / e; ctx "edge" or "vertex"
        self.contributions: list[tuple[str, str, str]] = []

    def text(self, e: ast.Expr) -> str:
        return text(e, self.edge_defs)

    def depends(self, e: ast.Expr) -> bool:
        if isinstance(e, ast.Index):
            if e.name == self.wrt:
                return True
            if e.name in self.edge_defs:
                return self.depends(self.edge_defs[e.name])
            return False
        if isinstance(e, ast.Name):
            return e.name == self.wrt
        return any(self.depends(c) for c in _children(e))

    def fail(self, e: ast.Expr, what: str) -> CompileError:
        return CompileError(
            f"{self.kernel.name}: cannot differentiate with respect to '{self.wrt}': {what} "
            f"is not differentiated yet (line {e.loc.line})"
        )

    def back(self, e: ast.Expr, adj: str, ctx: str) -> None:
        if not self.depends(e):
            return
        if isinstance(e, ast.Index):
            if e.name == self.wrt:
                self.contributions.append((e.index, ctx, adj))
            elif e.name in self.vertex_defs:
                raise self.fail(e, f"a vertex value read by a later statement ('{e.name}')")
            else:
                self.back(self.edge_defs[e.name], adj, "edge")
            return
        if isinstance(e, ast.Name):
            self.contributions.append(("p", ctx, adj))
            return
        shape = e.shape or ()
        if isinstance(e, ast.Unary):
            self.back(e.operand, f"(-({adj}))", ctx)
            return
        if isinstance(e, ast.Binary):
            a, b = e.lhs, e.rhs
            ta, tb = self.text(a), self.text(b)
            if e.op == "@":
                raise self.fail(e, "'@'")
            if e.op == "+":
                parts = (adj, adj)
            elif e.op == "-":
                parts = (adj, f"(-({adj}))")
            elif e.op == "*":
                parts = (f"(({adj}) * {tb})", f"(({adj}) * {ta})")
            else:
                parts = (f"(({adj}) / {tb})", f"(-({adj}) * {ta} / ({tb} * {tb}))")
            for operand, other, part in zip((a, b), (tb, ta), parts):
                want, other_shape = operand.shape or (), (b if operand is a else a).shape or ()
                if e.op == "*" and len(shape) - len(want) == 1 and other_shape == shape:
                    # a [..] scaled by b [.., K]: its gradient is one dot product, no ones tensor
                    self.back(operand, f"dot({adj}, {other})", ctx)
                else:
                    self.back(operand, _reduce_to(part, shape, want), ctx)
            return
        if isinstance(e, ast.Call):
            if e.func == "dot":
                a, b = e.args
                # adj has the shape of a and b without their last axis: a prefix, so it broadcasts
                self.back(a, f"(({adj}) * {self.text(b)})", ctx)
                self.back(b, f"(({adj}) * {self.text(a)})", ctx)
                return
            (a,) = e.args if len(e.args) == 1 else (None,)
            derivative = {
                "exp": lambda t: f"exp({t})",
                "log": lambda t: f"(1.0 / {t})",
                "sqrt": lambda t: f"(0.5 / sqrt({t}))",
                "rsqrt": lambda t: f"(-0.5 * rsqrt({t}) / {t})",
                "sigmoid": lambda t: f"(sigmoid({t}) * (1.0 - sigmoid({t})))",
                "tanh": lambda t: f"(1.0 - tanh({t}) * tanh({t}))",
            }.get(e.func)
            if derivative is None or a is None:
                raise self.fail(e, f"'{e.func}'")
            self.back(a, f"(({adj}) * {derivative(self.text(a))})", ctx)
            return
        if isinstance(e, ast.Aggregate):
            if e.kind == "sum":
                self.back(e.operand, adj, "edge")
            elif e.kind == "mean":
                # mean is 0 at a vertex without in-edges, and no edge there reads the adjoint
                self.back(e.operand, f"(({adj}) / deg_in(v))", "edge")
            else:
                raise self.fail(e, f"'{e.kind}' aggregation")
            return
        raise self.fail(e, type(e).__name__)


def _children(e: ast.Expr) -> list[ast.Expr]:
    if isinstance(e, ast.Unary):
        return [e.operand]
    if isinstance(e, ast.Binary):
        return [e.lhs, e.rhs]
    if isinstance(e, ast.Call):
        return list(e.args)
    if isinstance(e, ast.Aggregate):
        return [e.operand]
    return []


def gradient_program(kernel: ast.Kernel, wrt: list[str] | None = None) -> GradProgram:
    """Gradient kernels (as checked source text) of one forward kernel."""
    if len(kernel.results) != 1:
        raise CompileError(f"{kernel.name}: gradients of kernels with several results are not supported yet")
    result = kernel.results[0]
    root = next(d for d in kernel.body if d.name == result.name)
    seed = f"{GOUT}[{root.index}]"
    ctx = "edge" if root.index == "e" else "vertex"
    params = [p for p in kernel.params if wrt is None or p.name in wrt]
    signature = ", ".join(f"{p.name}: {_fmt_type(p.type)}" for p in kernel.params)
    signature += f", {GOUT}: {_fmt_type(result.type)}"
    pieces: list[str] = []
    kernels: list[GradKernel] = []
    constant: list[str] = []
    skipped: list[str] = []
    for p in params:
        d = _Differentiator(kernel, p.name)
        d.back(root.value, seed, ctx)
        if not d.contributions:
            constant.append(p.name)
            continue
        rtype = _fmt_type(p.type)
        by_site = {site: [(c, t) for s, c, t in d.contributions if s == site] for site in "uvep"}
        if by_site["p"]:
            # a parameter's gradient sums over every vertex and edge: each destination sums its
            # in-edges (every edge once) plus its own terms, and the runtime sums the vertices
            edge = [t for c, t in by_site["p"] if c == "edge"]
            direct = [t for c, t in by_site["p"] if c == "vertex"]
            terms = direct + ([f"sum({' + '.join(edge)})"] if edge else [])
            name = f"{kernel.name}__grad_{p.name}_param"
            ptype = ast.TensorType(p.type.dtype, "V", p.type.shape, p.type.loc)
            pieces.append(f"kernel {name}({signature}) -> {_fmt_type(ptype)} {{\n    out[v] = {' + '.join(terms)}\n}}\n")
            kernels.append(GradKernel(name, p.name, False, reduce=True))
        if by_site["u"]:
            body = " + ".join(t for _, t in by_site["u"])
            name = f"{kernel.name}__grad_{p.name}_src"
            pieces.append(f"kernel {name}({signature}) -> {rtype} {{\n    out[v] = sum({swap_uv(body)})\n}}\n")
            kernels.append(GradKernel(name, p.name, True))
        if by_site["v"]:
            edge = [t for c, t in by_site["v"] if c == "edge"]
            direct = [t for c, t in by_site["v"] if c == "vertex"]
            terms = direct + ([f"sum({' + '.join(edge)})"] if edge else [])
            name = f"{kernel.name}__grad_{p.name}_dst"
            pieces.append(f"kernel {name}({signature}) -> {rtype} {{\n    out[v] = {' + '.join(terms)}\n}}\n")
            kernels.append(GradKernel(name, p.name, False))
        if by_site["e"]:
            name = f"{kernel.name}__grad_{p.name}_edge"
            body = " + ".join(t for _, t in by_site["e"])
            pieces.append(f"kernel {name}({signature}) -> {rtype} {{\n    out[e] = {body}\n}}\n")
            kernels.append(GradKernel(name, p.name, False))
    source = "\n".join(pieces)
    if source:
        from gnnc.frontend import parse_and_check

        try:
            parse_and_check(source, f"<gradient of {kernel.name}>")
        except SourceError as exc:
            # e.g. an adjoint that reads a forward aggregate inside another aggregation
            raise CompileError(f"{kernel.name}: its gradient is not expressible as kernels yet: {exc}") from exc
    return GradProgram(kernel.name, source, kernels, constant, skipped)


def gradient_source(source: str, file: str, kernels: list[str] | None = None) -> str:
    """The gradient kernels of every kernel of a file (or of some), as one source text."""
    from gnnc.frontend import parse_and_check

    program = parse_and_check(source, file)
    names = [k.name for k in program.kernels]
    missing = [k for k in kernels or [] if k not in names]
    if missing:
        raise CompileError(f"no kernel named {', '.join(missing)} in {file}")
    parts = []
    for k in program.kernels:
        if kernels is None or k.name in kernels:
            grad = gradient_program(k)
            reverse = ", ".join(g.name for g in grad.kernels if g.reverse) or "none"
            parts.append(f"# gradients of {k.name}; on the reversed graph: {reverse}\n{grad.source}")
    return "\n".join(parts)
