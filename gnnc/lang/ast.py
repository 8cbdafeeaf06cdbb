"""The abstract syntax tree of the gnnc language.

The parser builds these nodes; ``frontend.check`` then fills in each
expression's graph type and shape (``Expr.gtype`` / ``Expr.shape``) and each
kernel's ``dtype``. Everything downstream (the graph-dialect builder and the
numpy reference) reads only checked trees.

Graph types follow Seastar: ``S`` (value of the source vertex of an edge),
``D`` (of the destination vertex), ``E`` (of the edge), ``P`` (a parameter,
the same everywhere), ``A`` (an aggregation: a per-destination value computed
from the destination's in-edges).

A shape is a tuple of dimensions; a dimension is an ``int`` or a ``str``
naming a symbolic size bound when the kernel is called (``"F"``, ``"H"``).
The leading ``V`` / ``E`` / ``R`` axis of a tensor is *not* part of its value
shape: ``x: f32[V, H, F]`` has value shape ``("H", "F")``, and a relation
tensor ``W: f32[R, K, N]`` (one ``[K, N]`` matrix per relation type, read as
``W[rel(e)]``) has value shape ``("K", "N")``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gnnc.errors import SourceLocation

Dim = int | str
Shape = tuple[Dim, ...]
GraphType = Literal["S", "D", "E", "P", "A"]
DType = Literal["f32", "f64"]

#: Names a kernel parameter may not take: they are call options.
RESERVED_NAMES = frozenset({"out", "threads", "schedule", "graph"})
#: Index variables: source vertex, destination vertex, edge.
INDEX_NAMES = frozenset({"u", "v", "e"})


@dataclass
class TensorType:
    """A declared type: ``f32[V, F]``, ``f64[E, H]``, ``f32[D1, D2]``, ``f32``.

    ``domain`` is ``"V"`` for per-vertex tensors, ``"E"`` for per-edge tensors,
    ``"R"`` for per-relation tensors (read at an edge's relation type) and
    ``None`` for parameters (whose ``shape`` is then the full shape; a
    scalar has ``shape == ()``).
    """

    dtype: DType
    domain: Literal["V", "E", "R"] | None
    shape: Shape
    loc: SourceLocation


@dataclass
class Param:
    name: str
    type: TensorType
    loc: SourceLocation


@dataclass
class Result:
    """A declared result; ``name`` is ``"out"`` for the single-result form."""

    name: str
    type: TensorType
    loc: SourceLocation


# ---------------------------------------------------------------- expressions


@dataclass(kw_only=True)
class Expr:
    loc: SourceLocation
    #: Filled by the checker.
    gtype: GraphType | None = field(default=None, compare=False)
    shape: Shape | None = field(default=None, compare=False)


@dataclass(kw_only=True)
class Number(Expr):
    """An integer or float literal; it takes the kernel's element type."""

    value: float
    text: str


@dataclass(kw_only=True)
class Index(Expr):
    """``x[u]``, ``x[v]``, ``w[e]``, ``s[e]``, ``h1[u]``, ``W[rel(e)]``.

    ``name`` is a parameter (vertex, edge or relation tensor) or a value
    defined by an earlier statement. ``index`` is ``"u"``, ``"v"``, ``"e"``,
    or ``"rel"`` for ``rel(e)``, the edge's relation type (a relation tensor
    only).
    """

    name: str
    index: Literal["u", "v", "e", "rel"]


@dataclass(kw_only=True)
class Name(Expr):
    """A bare name: a parameter tensor or scalar (``W``, ``eps``)."""

    name: str


@dataclass(kw_only=True)
class Unary(Expr):
    """Prefix minus."""

    op: Literal["-"]
    operand: Expr


@dataclass(kw_only=True)
class Binary(Expr):
    """``+ - * /`` with leading-axes broadcasting, and ``@`` (vector-matrix)."""

    op: Literal["+", "-", "*", "/", "@"]
    lhs: Expr
    rhs: Expr


#: Elementwise functions of one argument.
UNARY_FUNCTIONS = frozenset({"exp", "log", "sqrt", "rsqrt", "abs", "relu", "sigmoid", "tanh", "step", "detach"})
#: Aggregations over the in-edges of the destination.
AGGREGATIONS = frozenset({"sum", "mean", "max", "min", "argmax", "argmin"})


@dataclass(kw_only=True)
class Call(Expr):
    """A call of a builtin.

    ``func`` is one of: an element of ``UNARY_FUNCTIONS``; ``leaky_relu``
    (args: value, slope as a ``Number``); ``max`` / ``min`` with two args
    (elementwise); ``dot`` (two args, reduces the last axis); ``outer`` (two
    args ``[..., K]`` and ``[..., N]``, gives ``[..., K, N]``); ``transpose``
    (one arg ``[..., K, N]``, gives ``[..., N, K]``); ``softmax``
    (one edge arg); ``deg_in`` / ``deg_out`` (one ``Index``-free arg, see
    ``Degree``). Aggregations are ``Aggregate`` nodes, not calls.
    """

    func: str
    args: list[Expr]


@dataclass(kw_only=True)
class Aggregate(Expr):
    """``sum|mean|max|min|argmax|argmin(edge expression)`` at the destination ``v``.

    ``argmax`` / ``argmin`` give, per element, the id of the in-edge that
    attains the max / min (the lowest such id; the first NaN), as a float.
    """

    kind: Literal["sum", "mean", "max", "min", "argmax", "argmin"]
    operand: Expr


@dataclass(kw_only=True)
class Degree(Expr):
    """``deg_in(v)``, ``deg_out(u)`` (also ``deg_in(u)``, ``deg_out(v)``).

    A float of the kernel's type counting every edge, self loops and
    duplicates included. With ``relation`` (``deg_in(v, rel(e))``,
    ``deg_out(u, rel(e))``), only the edges of the edge's relation type:
    R-GCN's c_{v,r}, an edge value.
    """

    direction: Literal["in", "out"]
    index: Literal["u", "v"]
    relation: bool = False


@dataclass(kw_only=True)
class EdgeId(Expr):
    """``edge_id(e)``: the edge's id (its position in what the user gave) as a float of the kernel's type."""


@dataclass(kw_only=True)
class SelfLoop(Expr):
    """``self_loop(e)``: 1 where the edge's source id is its destination id, else 0, as a float
    of the kernel's type (an edge value; exact for any id)."""


def children(e: Expr) -> list[Expr]:
    """The direct subexpressions of `e`, in source order."""
    if isinstance(e, Unary):
        return [e.operand]
    if isinstance(e, Binary):
        return [e.lhs, e.rhs]
    if isinstance(e, Call):
        return list(e.args)
    if isinstance(e, Aggregate):
        return [e.operand]
    return []


# ----------------------------------------------------------------- statements


@dataclass
class Definition:
    """``name[e] = expr`` (an edge value) or ``name[v] = expr`` (a vertex value)."""

    name: str
    index: Literal["e", "v"]
    value: Expr
    loc: SourceLocation


@dataclass
class Directive:
    """One schedule directive: its words, e.g. ``["partition", "src", "16"]``."""

    words: list[str]
    loc: SourceLocation


@dataclass
class Schedule:
    """``schedule KERNEL for TARGET { directives }``."""

    kernel: str
    target: Literal["cpu", "cuda"]
    directives: list[Directive]
    loc: SourceLocation


@dataclass
class Kernel:
    name: str
    params: list[Param]
    results: list[Result]
    #: True when the signature is ``-> type`` (one result named ``out``).
    single_result: bool
    body: list[Definition]
    loc: SourceLocation
    #: Filled by the checker: the one element type the kernel uses.
    dtype: DType | None = None
    schedules: list[Schedule] = field(default_factory=list)


@dataclass
class Program:
    """A parsed file: its kernels in order, schedules attached to them."""

    kernels: list[Kernel]
    schedules: list[Schedule]
    file: str
    source: str

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)
