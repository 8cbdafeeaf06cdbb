"""Builds the `graph` dialect from a checked AST (the frontend's last step).

One `func.func` per kernel. A vertex value that some later statement reads at
a neighbour (`h1[u]`) is written to a V tensor by `graph.materialize`, and all
of its later reads go through that tensor: reading it at `u` needs every
destination finished, which is a phase boundary for the loop lowering.
"""

from __future__ import annotations

from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    Float32Type,
    Float64Type,
    ModuleOp,
    StringAttr,
    UnitAttr,
    f32,
    f64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from gnnc.ir import graph
from gnnc.ir.schedule import directive_keyword
from gnnc.lang import ast

ELEMENT_TYPES: dict[str, Float32Type | Float64Type] = {"f32": f32, "f64": f64}

_BINARY_KINDS = {"+": "add", "-": "sub", "*": "mul", "/": "div"}


def tensor_type(t: ast.TensorType) -> graph.TensorType:
    return graph.TensorType(t.domain or "P", ELEMENT_TYPES[t.dtype], t.shape)


class _KernelBuilder:
    def __init__(self, kernel: ast.Kernel):
        assert kernel.dtype is not None, "irgen needs a checked kernel"
        self.kernel = kernel
        self.elem = ELEMENT_TYPES[kernel.dtype]
        self.block = Block(arg_types=[tensor_type(p.type) for p in kernel.params])
        self.params = {p.name: arg for p, arg in zip(kernel.params, self.block.args)}
        self.param_types = {p.name: p.type for p in kernel.params}
        # name -> SSA value of a defined edge or vertex value
        self.defined: dict[str, SSAValue] = {}
        # vertex values read at u: name -> materialized V tensor
        self.materialized: dict[str, SSAValue] = {}
        self.read_at_u = _vertex_values_read_at_u(kernel)

    def add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def build(self) -> func.FuncOp:
        for d in self.kernel.body:
            value = self.expr(d.value)
            self.defined[d.name] = value
            if d.index == "v" and d.name in self.read_at_u:
                self.materialized[d.name] = self.add(graph.MaterializeOp(value))
        results = [self.defined[r.name] for r in self.kernel.results]
        self.block.add_op(func.ReturnOp(*results))
        fn = func.FuncOp(
            self.kernel.name,
            ([a.type for a in self.block.args], [r.type for r in results]),
            Region(self.block),
        )
        fn.attributes[graph.PARAM_NAMES] = ArrayAttr([StringAttr(p.name) for p in self.kernel.params])
        fn.attributes[graph.RESULT_NAMES] = ArrayAttr([StringAttr(r.name) for r in self.kernel.results])
        fn.attributes[graph.RESULT_TYPES] = ArrayAttr([tensor_type(r.type) for r in self.kernel.results])
        if self.kernel.single_result:
            fn.attributes[graph.SINGLE_RESULT] = UnitAttr()
        directives: dict[str, Attribute] = {}
        for sched in self.kernel.schedules:
            for directive in sched.directives:
                key = f"{sched.target}.{directive_keyword(directive.words)}"
                directives[key] = StringAttr(" ".join(directive.words[1:]))
        if directives:
            fn.attributes[graph.SCHEDULE] = DictionaryAttr(directives)
        return fn

    # ------------------------------------------------------------ expressions

    def expr(self, e: ast.Expr) -> SSAValue:
        method = getattr(self, "expr_" + type(e).__name__)
        return method(e)

    def expr_Number(self, e: ast.Number) -> SSAValue:
        return self.add(graph.ConstantOp(float(e.value), self.elem))

    def expr_Index(self, e: ast.Index) -> SSAValue:
        if e.name in self.params:
            site = {"u": "src", "v": "dst", "e": "edge", "rel": "rel"}[e.index]
            return self.add(graph.GatherOp(self.params[e.name], site))
        if e.name in self.materialized:
            site = "src" if e.index == "u" else "dst"
            return self.add(graph.GatherOp(self.materialized[e.name], site))
        return self.defined[e.name]

    def expr_Name(self, e: ast.Name) -> SSAValue:
        return self.add(graph.GatherOp(self.params[e.name], "param"))

    def expr_Unary(self, e: ast.Unary) -> SSAValue:
        return self.add(graph.UnaryOp("neg", self.expr(e.operand)))

    def expr_Binary(self, e: ast.Binary) -> SSAValue:
        lhs, rhs = self.expr(e.lhs), self.expr(e.rhs)
        if e.op == "@":
            return self.add(graph.MatVecOp(lhs, rhs))
        return self.add(graph.BinaryOp(_BINARY_KINDS[e.op], lhs, rhs))

    def expr_Call(self, e: ast.Call) -> SSAValue:
        if e.func == "detach":  # the value itself: only the gradient (autodiff, on the AST) differs
            return self.expr(e.args[0])
        if e.func in ast.UNARY_FUNCTIONS:
            return self.add(graph.UnaryOp(e.func, self.expr(e.args[0])))
        if e.func == "leaky_relu":
            slope = e.args[1]
            assert isinstance(slope, ast.Number)
            return self.add(graph.UnaryOp("leaky_relu", self.expr(e.args[0]), float(slope.value)))
        if e.func in ("max", "min"):
            return self.add(graph.BinaryOp(e.func, self.expr(e.args[0]), self.expr(e.args[1])))
        if e.func == "dot":
            return self.add(graph.DotOp(self.expr(e.args[0]), self.expr(e.args[1])))
        if e.func == "outer":
            return self.add(graph.OuterOp(self.expr(e.args[0]), self.expr(e.args[1])))
        if e.func == "transpose":
            return self.add(graph.TransposeOp(self.expr(e.args[0])))
        if e.func == "softmax":
            return self.add(graph.EdgeSoftmaxOp(self.expr(e.args[0])))
        raise AssertionError(f"unchecked call {e.func}")

    def expr_Aggregate(self, e: ast.Aggregate) -> SSAValue:
        return self.add(graph.AggregateOp(e.kind, self.expr(e.operand)))

    def expr_EdgeId(self, e: ast.EdgeId) -> SSAValue:
        return self.add(graph.EdgeIdOp(self.elem))

    def expr_SelfLoop(self, e: ast.SelfLoop) -> SSAValue:
        return self.add(graph.SelfLoopOp(self.elem))

    def expr_Degree(self, e: ast.Degree) -> SSAValue:
        site = "src" if e.index == "u" else "dst"
        return self.add(graph.DegreeOp(e.direction, site, self.elem, relation=e.relation))


def _vertex_values_read_at_u(kernel: ast.Kernel) -> set[str]:
    vertex_defs = {d.name for d in kernel.body if d.index == "v"}
    found: set[str] = set()

    def walk(e: ast.Expr) -> None:
        if isinstance(e, ast.Index) and e.index == "u" and e.name in vertex_defs:
            found.add(e.name)
        for child in ast.children(e):
            walk(child)

    for d in kernel.body:
        walk(d.value)
    return found


def build_module(program: ast.Program, kernels: list[str] | None = None) -> ModuleOp:
    """The graph-dialect module of a checked program (optionally some kernels only)."""
    ops = [_KernelBuilder(k).build() for k in program.kernels if kernels is None or k.name in kernels]
    module = ModuleOp(ops)
    module.verify()
    return module


__all__ = ["build_module", "tensor_type", "builtin"]
