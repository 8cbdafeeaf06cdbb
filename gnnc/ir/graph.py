"""The `graph` dialect: message-passing kernels as graph-typed dataflow.

A kernel is a `func.func` whose arguments are `!graph.tensor`s (per-vertex,
per-edge or parameter arrays) and whose body computes `!graph.value`s: values
that live at the source vertex of an edge (S), at its destination (D), on the
edge (E), everywhere alike (P), or that aggregate a destination's in-edges (A),
as Seastar's graph types. The function returns the kernel's results in order;
their names and declared types are the `graph.results` attribute of the func.

Shapes are the value shape without the leading V / E axis. A dimension is an
integer or a symbolic name bound at call time; both print as bare words:
`!graph.value<E, f32, [H, F]>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from xdsl.dialects.builtin import (
    I64,
    AnyFloat,
    ArrayAttr,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import (
    Attribute,
    BlockArgument,
    Dialect,
    Operation,
    ParametrizedAttribute,
    SpacedOpaqueSyntaxAttribute,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    param_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

Dim = int | str
Shape = tuple[Dim, ...]

#: Attribute names on a kernel's func.func: its signature and schedule, as the frontend gave them.
PARAM_NAMES = "graph.param_names"
RESULT_NAMES = "graph.result_names"
RESULT_TYPES = "graph.result_types"
SINGLE_RESULT = "graph.single_result"
SCHEDULE = "graph.schedule"

GRAPH_TYPES = ("S", "D", "E", "P", "A")
#: A tensor's rows: per vertex, per edge, a parameter, per relation type (`W[rel(e)]`),
#: per distinct (source, relation) pair of the edges, per (destination, relation) pair.
DOMAINS = ("V", "E", "P", "R", "RS", "RD")

#: The tensor domain of the (vertex, relation) pairs of each side, and the gather site reading it.
PAIR_DOMAINS = {"src": "RS", "dst": "RD"}
PAIR_SITES = {"src": "src_rel", "dst": "dst_rel"}


def _dims_to_attr(shape: Sequence[Dim]) -> ArrayAttr[StringAttr]:
    return ArrayAttr([StringAttr(str(d)) for d in shape])


def _attr_to_dims(attr: ArrayAttr[StringAttr]) -> Shape:
    return tuple(int(d.data) if d.data.isdigit() else d.data for d in attr.data)


def _print_shaped(printer: Printer, kind: str, elem: Attribute, shape: ArrayAttr[StringAttr]) -> None:
    printer.print_string(f"<{kind}, ")
    printer.print_attribute(elem)
    printer.print_string(", [" + ", ".join(d.data for d in shape.data) + "]>")


def _parse_shaped(parser: AttrParser, kinds: Sequence[str]) -> tuple[StringAttr, Attribute, ArrayAttr]:
    parser.parse_punctuation("<")
    kind = parser.parse_identifier(" (graph kind)")
    if kind not in kinds:
        parser.raise_error(f"expected one of {', '.join(kinds)}, got {kind}")
    parser.parse_punctuation(",")
    elem = parser.parse_type()
    parser.parse_punctuation(",")

    def parse_dim() -> str:
        value = parser.parse_optional_integer(allow_boolean=False, allow_negative=False)
        if value is not None:
            return str(value)
        return parser.parse_identifier(" (dimension)")

    dims = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parse_dim)
    parser.parse_punctuation(">")
    return StringAttr(kind), elem, ArrayAttr([StringAttr(d) for d in dims])


@irdl_attr_definition
class TensorType(ParametrizedAttribute, TypeAttribute):
    """An array argument: `V` (per vertex), `E` (per edge), `P` (parameter) or `R` (per relation type)."""

    name = "graph.tensor"

    domain: StringAttr
    element_type: Attribute = param_def()
    dims: ArrayAttr[StringAttr] = param_def()

    def __init__(self, domain: str, element_type: Attribute, shape: Sequence[Dim]):
        super().__init__(StringAttr(domain), element_type, _dims_to_attr(shape))

    @property
    def shape(self) -> Shape:
        return _attr_to_dims(self.dims)

    def print_parameters(self, printer: Printer) -> None:
        _print_shaped(printer, self.domain.data, self.element_type, self.dims)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[Attribute, ...]:
        return _parse_shaped(parser, DOMAINS)

    def verify(self) -> None:
        if self.domain.data not in DOMAINS:
            raise VerifyException(f"graph.tensor domain must be one of {DOMAINS}")
        if not isinstance(self.element_type, Float32Type | Float64Type):
            raise VerifyException("graph.tensor element type must be f32 or f64")


@irdl_attr_definition
class ValueType(ParametrizedAttribute, TypeAttribute):
    """A graph-typed value: S, D, E, P or A (Seastar's graph types)."""

    name = "graph.value"

    gtype: StringAttr
    element_type: Attribute = param_def()
    dims: ArrayAttr[StringAttr] = param_def()

    def __init__(self, gtype: str, element_type: Attribute, shape: Sequence[Dim]):
        super().__init__(StringAttr(gtype), element_type, _dims_to_attr(shape))

    @property
    def shape(self) -> Shape:
        return _attr_to_dims(self.dims)

    @property
    def kind(self) -> str:
        return self.gtype.data

    def print_parameters(self, printer: Printer) -> None:
        _print_shaped(printer, self.gtype.data, self.element_type, self.dims)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[Attribute, ...]:
        return _parse_shaped(parser, GRAPH_TYPES)

    def verify(self) -> None:
        if self.gtype.data not in GRAPH_TYPES:
            raise VerifyException(f"graph.value type must be one of {GRAPH_TYPES}")
        if not isinstance(self.element_type, Float32Type | Float64Type):
            raise VerifyException("graph.value element type must be f32 or f64")


# ------------------------------------------------------------------ kinds


class BinaryKind(StrEnum):
    """The elementwise functions of two values (`graph.binary`)."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MAX = "max"
    MIN = "min"


@irdl_attr_definition
class BinaryKindAttr(EnumAttribute[BinaryKind], SpacedOpaqueSyntaxAttribute):
    """`graph.binary`'s kind: `graph.binary mul ...`, generic `#graph<binary_kind mul>`."""

    name = "graph.binary_kind"


class UnaryKind(StrEnum):
    """The elementwise functions of one value (`graph.unary`)."""

    NEG = "neg"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    ABS = "abs"
    RELU = "relu"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    LEAKY_RELU = "leaky_relu"
    STEP = "step"


@irdl_attr_definition
class UnaryKindAttr(EnumAttribute[UnaryKind], SpacedOpaqueSyntaxAttribute):
    """`graph.unary`'s kind: `graph.unary exp ...`, generic `#graph<unary_kind exp>`."""

    name = "graph.unary_kind"


class AggregateKind(StrEnum):
    """The reductions over a destination's in-edges (`graph.aggregate`)."""

    SUM = "sum"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"
    ARGMAX = "argmax"
    ARGMIN = "argmin"


@irdl_attr_definition
class AggregateKindAttr(EnumAttribute[AggregateKind], SpacedOpaqueSyntaxAttribute):
    """`graph.aggregate`'s kind: `graph.aggregate sum ...`, generic `#graph<aggregate_kind sum>`."""

    name = "graph.aggregate_kind"


# ------------------------------------------------------------ type arithmetic


def join_graph_types(a: str, b: str) -> str | None:
    """The graph type of an elementwise combination, or None if it is illegal.

    P is neutral; S, D and E together make E (a value per edge). An
    aggregate (A) with a destination value stays A; with a source or edge
    value it is read per edge, as the destination's finished aggregate (the
    language only writes that inside `softmax`, but IR passes such as
    deferred division produce it), and gives E.
    """
    if a == "P":
        return b
    if b == "P" or a == b:
        return a
    if "A" in (a, b):
        return "A" if {a, b} <= {"A", "D"} else "E"
    return "E"


def broadcast_shapes(a: Shape, b: Shape) -> Shape | None:
    """Leading-axes broadcasting: one shape must be a prefix of the other."""
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    return long if long[: len(short)] == short else None


def _value_type(value: SSAValue) -> ValueType:
    if not isinstance(value.type, ValueType):
        raise VerifyException(f"expected a !graph.value operand, got {value.type}")
    return value.type


def _check_elem(op: IRDLOperation, *values: SSAValue) -> None:
    result = op.results[0].type
    assert isinstance(result, ValueType)
    for v in values:
        if _value_type(v).element_type != result.element_type:
            raise VerifyException(f"'{op.name}': operands and result must share an element type")


# ------------------------------------------------------------------------ ops

GATHER_SITES = {
    "src": ("V", "S"),
    "dst": ("V", "D"),
    "edge": ("E", "E"),
    "param": ("P", "P"),
    "rel": ("R", "E"),
    "src_rel": ("RS", "E"),
    "dst_rel": ("RD", "E"),
}


@irdl_op_definition
class GatherOp(IRDLOperation):
    """Reads a tensor argument: `x[u]` (src), `x[v]` (dst), `w[e]` (edge), `W` (param),
    `W[rel(e)]` (rel: the row of the edge's relation type, an edge value); or a tensor of
    `graph.materialize_pairs` at the edge's (source, relation) pair (src_rel) or its
    (destination, relation) pair (dst_rel)."""

    name = "graph.gather"

    tensor = operand_def(TensorType)
    site = prop_def(StringAttr)
    result = result_def(ValueType)

    assembly_format = "$tensor $site attr-dict `:` type($tensor) `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, tensor: SSAValue, site: str):
        ttype = tensor.type
        assert isinstance(ttype, TensorType)
        _, gtype = GATHER_SITES[site]
        super().__init__(
            operands=[tensor],
            properties={"site": StringAttr(site)},
            result_types=[ValueType(gtype, ttype.element_type, ttype.shape)],
        )

    def verify_(self) -> None:
        site = self.site.data
        if site not in GATHER_SITES:
            raise VerifyException(f"graph.gather site must be one of {tuple(GATHER_SITES)}")
        ttype = self.tensor.type
        assert isinstance(ttype, TensorType)
        domain, gtype = GATHER_SITES[site]
        if ttype.domain.data != domain:
            raise VerifyException(f"graph.gather at {site} needs a {domain} tensor, got {ttype.domain.data}")
        rtype = self.result.type
        assert isinstance(rtype, ValueType)
        if (rtype.kind, rtype.element_type, rtype.shape) != (gtype, ttype.element_type, ttype.shape):
            raise VerifyException(f"graph.gather at {site} of {ttype} must give a {gtype} value of the same shape")


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A literal; it has the kernel's element type and graph type P."""

    name = "graph.constant"

    value = prop_def(FloatAttr)
    result = result_def(ValueType)

    assembly_format = "$value attr-dict `:` type($result)"
    traits = traits_def(Pure())

    def __init__(self, value: float, element_type: Attribute):
        super().__init__(
            properties={"value": FloatAttr(value, cast(AnyFloat, element_type))},
            result_types=[ValueType("P", element_type, ())],
        )

    def verify_(self) -> None:
        rtype = _value_type(self.result)
        if rtype.kind != "P" or rtype.shape != ():
            raise VerifyException("graph.constant gives a scalar P value")
        if self.value.type != rtype.element_type:
            raise VerifyException("graph.constant value must have the result's element type")


@irdl_op_definition
class DegreeOp(IRDLOperation):
    """`deg_in(v)`, `deg_out(u)`, ...: a vertex's degree as a float.

    With `relation` (`deg_in(v, rel(e))`, `deg_out(u, rel(e))`), the edges of
    the edge's relation type only (R-GCN's c_{v,r}): an edge value.
    """

    name = "graph.degree"

    direction = prop_def(StringAttr)
    site = prop_def(StringAttr)
    relation = opt_prop_def(UnitAttr)
    result = result_def(ValueType)

    assembly_format = "$direction $site attr-dict `:` type($result)"
    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())

    def __init__(self, direction: str, site: str, element_type: Attribute, relation: bool = False):
        props: dict[str, Attribute] = {"direction": StringAttr(direction), "site": StringAttr(site)}
        if relation:
            props["relation"] = UnitAttr()
        kind = "E" if relation else "S" if site == "src" else "D"
        super().__init__(properties=props, result_types=[ValueType(kind, element_type, ())])

    @property
    def per_relation(self) -> bool:
        return self.relation is not None

    def verify_(self) -> None:
        if self.direction.data not in ("in", "out"):
            raise VerifyException("graph.degree direction must be 'in' or 'out'")
        if self.site.data not in ("src", "dst"):
            raise VerifyException("graph.degree site must be 'src' or 'dst'")
        rtype = _value_type(self.result)
        if self.per_relation:
            if (self.direction.data, self.site.data) not in (("in", "dst"), ("out", "src")):
                raise VerifyException("graph.degree per relation counts 'in' edges at 'dst' or 'out' edges at 'src'")
            if rtype.kind != "E" or rtype.shape != ():
                raise VerifyException("graph.degree per relation gives a scalar E value")
            return
        expected = "S" if self.site.data == "src" else "D"
        if rtype.kind != expected or rtype.shape != ():
            raise VerifyException(f"graph.degree at {self.site.data} gives a scalar {expected} value")


def _verify_scalar_edge_value(op: IRDLOperation) -> None:
    """An op of the edge alone (edge_id, self_loop) gives one scalar E value."""
    rtype = _value_type(op.results[0])
    if rtype.kind != "E" or rtype.shape != ():
        raise VerifyException(f"{op.name} gives a scalar E value")


@irdl_op_definition
class EdgeIdOp(IRDLOperation):
    """`edge_id(e)`: the edge's id as a float (E); argmax gradients compare it with a saved id."""

    name = "graph.edge_id"

    result = result_def(ValueType)

    assembly_format = "attr-dict `:` type($result)"
    traits = traits_def(Pure())

    def __init__(self, element_type: Attribute):
        super().__init__(result_types=[ValueType("E", element_type, ())])

    def verify_(self) -> None:
        _verify_scalar_edge_value(self)


@irdl_op_definition
class SelfLoopOp(IRDLOperation):
    """`self_loop(e)`: 1.0 where the edge's source id is its destination id, else 0.0 (E).
    GCN's remaining self loops: the graph's own loops leave its sums, exactly."""

    name = "graph.self_loop"

    result = result_def(ValueType)

    assembly_format = "attr-dict `:` type($result)"
    traits = traits_def(Pure())

    def __init__(self, element_type: Attribute):
        super().__init__(result_types=[ValueType("E", element_type, ())])

    def verify_(self) -> None:
        _verify_scalar_edge_value(self)


@irdl_op_definition
class BinaryOp(IRDLOperation):
    """Elementwise arithmetic with leading-axes broadcasting."""

    name = "graph.binary"

    kind = prop_def(BinaryKindAttr)
    lhs = operand_def(ValueType)
    rhs = operand_def(ValueType)
    result = result_def(ValueType)

    assembly_format = "$kind $lhs `,` $rhs attr-dict `:` `(` type($lhs) `,` type($rhs) `)` `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, kind: str | BinaryKind, lhs: SSAValue, rhs: SSAValue):
        a, b = _value_type(lhs), _value_type(rhs)
        gtype = join_graph_types(a.kind, b.kind)
        shape = broadcast_shapes(a.shape, b.shape)
        if gtype is None or shape is None:
            raise VerifyException(f"graph.binary {kind}: incompatible operands {a} and {b}")
        super().__init__(
            operands=[lhs, rhs],
            properties={"kind": BinaryKindAttr(BinaryKind(kind))},
            result_types=[ValueType(gtype, a.element_type, shape)],
        )

    def verify_(self) -> None:
        _check_elem(self, self.lhs, self.rhs)
        a, b, r = _value_type(self.lhs), _value_type(self.rhs), _value_type(self.result)
        gtype = join_graph_types(a.kind, b.kind)
        if gtype is None:
            raise VerifyException(f"graph.binary cannot combine graph types {a.kind} and {b.kind}")
        shape = broadcast_shapes(a.shape, b.shape)
        if shape is None:
            raise VerifyException(
                f"graph.binary shapes {list(a.shape)} and {list(b.shape)} do not broadcast "
                "(one must be a prefix of the other)"
            )
        if (r.kind, r.shape) != (gtype, shape):
            raise VerifyException(f"graph.binary result must be {gtype} {list(shape)}")


@irdl_op_definition
class UnaryOp(IRDLOperation):
    """Elementwise function; `leaky_relu` carries its `slope`."""

    name = "graph.unary"

    kind = prop_def(UnaryKindAttr)
    slope = opt_prop_def(FloatAttr)
    operand = operand_def(ValueType)
    result = result_def(ValueType)

    assembly_format = "$kind $operand attr-dict `:` type($operand) `->` type($result)"
    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())

    def __init__(self, kind: str | UnaryKind, operand: SSAValue, slope: float | None = None):
        t = _value_type(operand)
        props: dict[str, Attribute] = {"kind": UnaryKindAttr(UnaryKind(kind))}
        if slope is not None:
            props["slope"] = FloatAttr(slope, cast(AnyFloat, t.element_type))
        super().__init__(operands=[operand], properties=props, result_types=[t])

    @property
    def slope_value(self) -> float:
        assert self.slope is not None
        return self.slope.value.data

    def verify_(self) -> None:
        if self.operand.type != self.result.type:
            raise VerifyException("graph.unary keeps its operand's type")
        has_slope = self.slope is not None
        if (self.kind.data == UnaryKind.LEAKY_RELU) != has_slope:
            raise VerifyException("graph.unary: a 'slope' attribute belongs to leaky_relu, and only to it")


@irdl_op_definition
class DotOp(IRDLOperation):
    """`dot(a, b)`: equal shapes, reduces the last axis."""

    name = "graph.dot"

    lhs = operand_def(ValueType)
    rhs = operand_def(ValueType)
    result = result_def(ValueType)

    assembly_format = "$lhs `,` $rhs attr-dict `:` `(` type($lhs) `,` type($rhs) `)` `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        a, b = _value_type(lhs), _value_type(rhs)
        gtype = join_graph_types(a.kind, b.kind) or "E"
        super().__init__(operands=[lhs, rhs], result_types=[ValueType(gtype, a.element_type, a.shape[:-1])])

    def verify_(self) -> None:
        _check_elem(self, self.lhs, self.rhs)
        a, b, r = _value_type(self.lhs), _value_type(self.rhs), _value_type(self.result)
        if a.shape != b.shape or not a.shape:
            raise VerifyException(f"graph.dot needs equal non-empty shapes, got {list(a.shape)} and {list(b.shape)}")
        gtype = join_graph_types(a.kind, b.kind)
        if gtype is None or (r.kind, r.shape) != (gtype, a.shape[:-1]):
            raise VerifyException("graph.dot result must drop the last axis and join the graph types")


@irdl_op_definition
class OuterOp(IRDLOperation):
    """`outer(a, b)`: [..., K] and [..., N] give [..., K, N] (the gradient of `@` w.r.t. its matrix)."""

    name = "graph.outer"

    lhs = operand_def(ValueType)
    rhs = operand_def(ValueType)
    result = result_def(ValueType)

    assembly_format = "$lhs `,` $rhs attr-dict `:` `(` type($lhs) `,` type($rhs) `)` `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        a, b = _value_type(lhs), _value_type(rhs)
        gtype = join_graph_types(a.kind, b.kind) or "E"
        super().__init__(operands=[lhs, rhs], result_types=[ValueType(gtype, a.element_type, a.shape + b.shape[-1:])])

    def verify_(self) -> None:
        _check_elem(self, self.lhs, self.rhs)
        a, b, r = _value_type(self.lhs), _value_type(self.rhs), _value_type(self.result)
        if not a.shape or not b.shape or a.shape[:-1] != b.shape[:-1]:
            raise VerifyException(f"graph.outer needs [..., K] and [..., N], got {list(a.shape)} and {list(b.shape)}")
        gtype = join_graph_types(a.kind, b.kind)
        if gtype is None or (r.kind, r.shape) != (gtype, a.shape + b.shape[-1:]):
            raise VerifyException("graph.outer result must be [..., K, N] and join the graph types")


@irdl_op_definition
class TransposeOp(IRDLOperation):
    """`transpose(m)`: [..., K, N] gives [..., N, K] (lets `dot` reduce the second-to-last axis)."""

    name = "graph.transpose"

    operand = operand_def(ValueType)
    result = result_def(ValueType)

    assembly_format = "$operand attr-dict `:` type($operand) `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, operand: SSAValue):
        t = _value_type(operand)
        if len(t.shape) < 2:
            raise VerifyException(f"graph.transpose needs [..., K, N], got {list(t.shape)}")
        shape = t.shape[:-2] + (t.shape[-1], t.shape[-2])
        super().__init__(operands=[operand], result_types=[ValueType(t.kind, t.element_type, shape)])

    def verify_(self) -> None:
        _check_elem(self, self.operand)
        a, r = _value_type(self.operand), _value_type(self.result)
        if len(a.shape) < 2:
            raise VerifyException(f"graph.transpose needs [..., K, N], got {list(a.shape)}")
        if (r.kind, r.shape) != (a.kind, a.shape[:-2] + (a.shape[-1], a.shape[-2])):
            raise VerifyException("graph.transpose result must swap the last two axes and keep the graph type")


@irdl_op_definition
class MatVecOp(IRDLOperation):
    """`a @ W`: `a` of shape [..., K] times a matrix [K, N] gives [..., N].

    The matrix is a parameter (P) or an edge value (E: a relation's matrix
    `W[rel(e)]`, a per-edge `theta[e]`), and the result is of the operands'
    joined graph type. An edge value [..., K, N] whose leading axes are the
    vector's is a matrix per leading index (block-diagonal weights, a block
    per head): `a[.., k] * W[.., k, n]` summed over k.
    """

    name = "graph.matvec"

    vector = operand_def(ValueType)
    matrix = operand_def(ValueType)
    result = result_def(ValueType)

    assembly_format = "$vector `,` $matrix attr-dict `:` `(` type($vector) `,` type($matrix) `)` `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, vector: SSAValue, matrix: SSAValue):
        a, w = _value_type(vector), _value_type(matrix)
        kind = join_graph_types(a.kind, w.kind) or "E"
        super().__init__(
            operands=[vector, matrix],
            result_types=[ValueType(kind, a.element_type, a.shape[:-1] + w.shape[-1:])],
        )

    @property
    def per_edge_matrix(self) -> bool:
        """Whether the matrix is an edge value (`W[rel(e)]`, `theta[e]`) rather than a parameter."""
        return _value_type(self.matrix).kind != "P"

    def verify_(self) -> None:
        _check_elem(self, self.vector, self.matrix)
        a, w, r = _value_type(self.vector), _value_type(self.matrix), _value_type(self.result)
        if w.kind not in ("P", "E") or len(w.shape) < 2 or (w.kind == "P" and len(w.shape) != 2):
            raise VerifyException("graph.matvec needs a matrix: a 2-D parameter, or an edge value [..., K, N]")
        if a.kind == "A" and w.kind == "E":
            raise VerifyException("graph.matvec cannot take an aggregate times a per-edge matrix")
        if not a.shape or a.shape[-1] != w.shape[-2]:
            raise VerifyException(f"graph.matvec: last axis of {list(a.shape)} must equal K of {list(w.shape)}")
        if len(w.shape) > 2 and w.shape[:-2] != a.shape[:-1]:
            raise VerifyException("graph.matvec: a matrix per leading index needs the vector's leading axes")
        kind = join_graph_types(a.kind, w.kind)
        if (r.kind, r.shape) != (kind, a.shape[:-1] + w.shape[-1:]):
            raise VerifyException("graph.matvec result must be [..., N] of the operands' joined graph type")


@irdl_op_definition
class AggregateOp(IRDLOperation):
    """Reduces an edge value over each destination's in-edges (graph type A).

    Empty in-edge sets give 0 for sum, mean, max and min; max/min propagate NaN.
    argmax/argmin give the id (a float) of the lowest-id in-edge attaining the
    max/min per element, or of the first NaN; -1 without in-edges.

    A `stabilizer` max only shifts exponentials, `exp(s - m)` (deferred
    division writes one for a softmax): any m at least the largest number
    serves, and a NaN in s reaches the result through exp(NaN - m) anyway, so
    the lowering may ignore NaN (maxnum: one instruction less per element on
    the CPU; on the GPU an integer atomic on the bits instead of a
    compare-and-swap loop).
    """

    name = "graph.aggregate"

    kind = prop_def(AggregateKindAttr)
    stabilizer = opt_prop_def(UnitAttr)
    operand = operand_def(ValueType)
    result = result_def(ValueType)

    assembly_format = "$kind $operand attr-dict `:` type($operand) `->` type($result)"
    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())

    def __init__(self, kind: str | AggregateKind, operand: SSAValue, stabilizer: bool = False):
        t = _value_type(operand)
        props: dict[str, Attribute] = {"kind": AggregateKindAttr(AggregateKind(kind))}
        if stabilizer:
            props["stabilizer"] = UnitAttr()
        super().__init__(
            operands=[operand],
            properties=props,
            result_types=[ValueType("A", t.element_type, t.shape)],
        )

    def verify_(self) -> None:
        if self.stabilizer is not None and self.kind.data != AggregateKind.MAX:
            raise VerifyException("graph.aggregate: only a max can be a 'stabilizer'")
        _check_elem(self, self.operand)
        t, r = _value_type(self.operand), _value_type(self.result)
        if t.kind == "A":
            raise VerifyException("graph.aggregate cannot aggregate an aggregate")
        if (r.kind, r.shape) != ("A", t.shape):
            raise VerifyException("graph.aggregate gives an A value of its operand's shape")


@irdl_op_definition
class EdgeSoftmaxOp(IRDLOperation):
    """Softmax of an edge value over each destination's in-edges (max subtracted)."""

    name = "graph.edge_softmax"

    operand = operand_def(ValueType)
    result = result_def(ValueType)

    assembly_format = "$operand attr-dict `:` type($operand) `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, operand: SSAValue):
        t = _value_type(operand)
        super().__init__(operands=[operand], result_types=[ValueType("E", t.element_type, t.shape)])

    def verify_(self) -> None:
        _check_elem(self, self.operand)
        t, r = _value_type(self.operand), _value_type(self.result)
        if t.kind == "A":
            raise VerifyException("graph.edge_softmax needs an edge-context operand, not an aggregate")
        if (r.kind, r.shape) != ("E", t.shape):
            raise VerifyException("graph.edge_softmax gives an E value of its operand's shape")


@irdl_op_definition
class MaterializeOp(IRDLOperation):
    """Writes a value to a tensor so that a later phase can read it.

    A per-destination value (A, D, P) becomes a V tensor: reading it at a
    neighbour (`h[u]`) needs every destination finished first. A per-edge
    value (E, S) becomes an E tensor: the unfused pipelines of `--no-fusion`
    materialise each edge operation this way. Either marks a phase boundary.
    """

    name = "graph.materialize"

    operand = operand_def(ValueType)
    result = result_def(TensorType)

    assembly_format = "$operand attr-dict `:` type($operand) `->` type($result)"

    def __init__(self, operand: SSAValue):
        t = _value_type(operand)
        domain = "V" if t.kind in ("A", "D", "P") else "E"
        super().__init__(operands=[operand], result_types=[TensorType(domain, t.element_type, t.shape)])

    def verify_(self) -> None:
        t = _value_type(self.operand)
        r = self.result.type
        assert isinstance(r, TensorType)
        domain = "V" if t.kind in ("A", "D", "P") else "E"
        if (r.domain.data, r.element_type, r.shape) != (domain, t.element_type, t.shape):
            raise VerifyException(f"graph.materialize of a {t.kind} value gives a {domain} tensor of the value's shape")


#: The gathers a value computed per (vertex, relation) pair may read, by side: its vertex
#: (twinned to `dst`, the pair's vertex, in the pair sweep), parameters and relation rows.
PAIR_VALUE_SITES = ("dst", "param", "rel")


def pair_value_error(value: SSAValue) -> str | None:
    """Why `value` cannot be computed once per (vertex, relation) pair, or None if it can:
    it may read inputs only at the pair's vertex (`dst` gathers), parameters and relation
    rows, and degrees at that vertex (no edge, aggregation or value of another phase)."""
    seen: set[SSAValue] = set()
    todo = [value]
    while todo:
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        op = x.owner
        if isinstance(op, GatherOp):
            if op.site.data not in PAIR_VALUE_SITES or not isinstance(op.tensor, BlockArgument):
                return f"it reads {op.site.data} rows of {op.tensor.type}"
            continue
        if isinstance(op, DegreeOp):
            if op.per_relation or op.site.data != "dst":
                return "it reads a degree other than the pair vertex's"
            continue
        if isinstance(
            op,
            AggregateOp | EdgeSoftmaxOp | EdgeIdOp | SelfLoopOp | MaterializeOp | MaterializePairsOp | SegmentMatMulOp,
        ):
            return f"it reads {op.name}"
        if not isinstance(op, Operation):
            return "it reads a block argument"
        todo.extend(op.operands)
    return None


@irdl_op_definition
class MaterializePairsOp(IRDLOperation):
    """Computes a value once per distinct (vertex, relation) pair of the edges: rows
    `RS` (the edges' (source, relation) pairs, `side` src) or `RD` (destination pairs).

    Hector's compact materialisation: `x[u] @ W[rel(e)]` depends on the edge only
    through its source and relation, so it is computed once per such pair (in a
    sweep over the pairs, before the phases) and gathered per edge
    (`graph.gather %t "src_rel"`). The operand is the value at the pair: it reads
    inputs at `dst` (the pair's vertex, whichever side that vertex is on),
    parameters and relation rows only (`pair_value_error`).
    """

    name = "graph.materialize_pairs"

    side = prop_def(StringAttr)
    operand = operand_def(ValueType)
    result = result_def(TensorType)

    assembly_format = "$operand $side attr-dict `:` type($operand) `->` type($result)"

    def __init__(self, operand: SSAValue, side: str):
        t = _value_type(operand)
        super().__init__(
            operands=[operand],
            properties={"side": StringAttr(side)},
            result_types=[TensorType(PAIR_DOMAINS[side], t.element_type, t.shape)],
        )

    def verify_(self) -> None:
        side = self.side.data
        if side not in PAIR_DOMAINS:
            raise VerifyException(f"graph.materialize_pairs side must be one of {tuple(PAIR_DOMAINS)}, got {side}")
        t = _value_type(self.operand)
        r = self.result.type
        assert isinstance(r, TensorType)
        if (r.domain.data, r.element_type, r.shape) != (PAIR_DOMAINS[side], t.element_type, t.shape):
            raise VerifyException(
                f"graph.materialize_pairs at {side} gives a {PAIR_DOMAINS[side]} tensor of the value's shape"
            )
        why = pair_value_error(self.operand)
        if why is not None:
            raise VerifyException(
                f"graph.materialize_pairs: its operand is no value of a (vertex, relation) pair: {why}"
            )


@irdl_op_definition
class SegmentMatMulOp(IRDLOperation):
    """`x @ W[r]` for every (vertex, relation) pair of a side, relation by relation: the
    pairs of one relation are a contiguous run of rows (the runtime numbers them so),
    and their transform is one dense product of the run's rows of `x` by that
    relation's matrix, computed `rows` rows at a time (each loaded row of `W` serves
    `rows` pairs). What `graph.materialize_pairs` of `x[v] @ W[rel(e)]` computes,
    as `segment-matmul` rewrites it.
    """

    name = "graph.segment_matmul"

    x = operand_def(TensorType)
    w = operand_def(TensorType)
    side = prop_def(StringAttr)
    rows = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)

    assembly_format = "$x `,` $w $side `rows` $rows attr-dict `:` `(` type($x) `,` type($w) `)` `->` type($result)"

    def __init__(self, x: SSAValue, w: SSAValue, side: str, rows: int):
        xt, wt = x.type, w.type
        assert isinstance(xt, TensorType) and isinstance(wt, TensorType)
        super().__init__(
            operands=[x, w],
            properties={"side": StringAttr(side), "rows": IntegerAttr(rows, i64)},
            result_types=[TensorType(PAIR_DOMAINS[side], xt.element_type, wt.shape[1:])],
        )

    def verify_(self) -> None:
        side = self.side.data
        if side not in PAIR_DOMAINS:
            raise VerifyException(f"graph.segment_matmul side must be one of {tuple(PAIR_DOMAINS)}, got {side}")
        if self.rows.value.data < 1:
            raise VerifyException("graph.segment_matmul computes at least one row at a time")
        xt, wt, r = self.x.type, self.w.type, self.result.type
        assert isinstance(xt, TensorType) and isinstance(wt, TensorType) and isinstance(r, TensorType)
        if xt.domain.data != "V" or len(xt.shape) != 1:
            raise VerifyException("graph.segment_matmul takes rows of a vertex tensor [V, K]")
        if wt.domain.data != "R" or len(wt.shape) != 2 or wt.shape[0] != xt.shape[0]:
            raise VerifyException("graph.segment_matmul takes a relation tensor [R, K, N] of the rows' K")
        if (r.domain.data, r.element_type, r.shape) != (PAIR_DOMAINS[side], xt.element_type, wt.shape[1:]):
            raise VerifyException(f"graph.segment_matmul at {side} gives a {PAIR_DOMAINS[side]} tensor [N]")


Graph = Dialect(
    "graph",
    [
        GatherOp,
        ConstantOp,
        DegreeOp,
        EdgeIdOp,
        SelfLoopOp,
        BinaryOp,
        UnaryOp,
        DotOp,
        OuterOp,
        TransposeOp,
        MatVecOp,
        AggregateOp,
        EdgeSoftmaxOp,
        MaterializeOp,
        MaterializePairsOp,
        SegmentMatMulOp,
    ],
    [TensorType, ValueType, BinaryKindAttr, UnaryKindAttr, AggregateKindAttr],
)
