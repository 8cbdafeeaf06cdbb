"""The frontend: lexer, parser and checker of the .gnn language."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnnc.errors import GnncError, SourceError
from gnnc.lang import ast, load_program, parse, parse_and_check
from gnnc.lang.lexer import tokenize
from gnnc.lang.sema import check

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.gnn"))


def walk(e: ast.Expr):
    yield e
    children: list[ast.Expr] = []
    if isinstance(e, ast.Unary):
        children = [e.operand]
    elif isinstance(e, ast.Binary):
        children = [e.lhs, e.rhs]
    elif isinstance(e, ast.Call):
        children = list(e.args)
    elif isinstance(e, ast.Aggregate):
        children = [e.operand]
    for c in children:
        yield from walk(c)


def body(program: ast.Program, kernel: str | None = None) -> dict[str, ast.Expr]:
    k = program.kernels[0] if kernel is None else program.kernel(kernel)
    return {d.name: d.value for d in k.body}


# ------------------------------------------------------------------ examples


def test_there_are_examples():
    assert len(EXAMPLE_FILES) >= 8


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_parses_and_checks(path: Path):
    program = load_program(str(path))
    assert program.file == str(path)
    assert [k.name for k in program.kernels] == [path.stem]
    for k in program.kernels:
        assert k.dtype == "f32"
        for d in k.body:
            for e in walk(d.value):
                assert e.gtype in ("S", "D", "E", "P", "A"), (d.name, e)
                assert e.shape is not None, (d.name, e)


def test_gat_types_and_shapes():
    program = load_program(EXAMPLES / "gat.gnn")
    k = program.kernel("gat")
    assert [p.name for p in k.params] == ["h", "el", "er"]
    assert k.params[0].type == ast.TensorType("f32", "V", ("H", "F"), k.params[0].type.loc)
    assert [(r.name, r.type.domain, r.type.shape) for r in k.results] == [
        ("out", "V", ("H", "F")),
        ("alpha", "E", ("H",)),
    ]
    assert not k.single_result
    b = body(program)
    s = b["s"]
    assert isinstance(s, ast.Call) and s.func == "leaky_relu"
    assert (s.gtype, s.shape) == ("E", ("H",))
    assert isinstance(s.args[1], ast.Number) and s.args[1].value == pytest.approx(0.2)
    add = s.args[0]
    assert isinstance(add, ast.Binary) and (add.lhs.gtype, add.rhs.gtype) == ("S", "D")
    assert (b["alpha"].gtype, b["alpha"].shape) == ("E", ("H",))
    out = b["out"]
    assert isinstance(out, ast.Aggregate) and out.kind == "sum"
    assert (out.gtype, out.shape) == ("A", ("H", "F"))
    # [H] * [H, F] broadcasts by leading axes
    assert (out.operand.gtype, out.operand.shape) == ("E", ("H", "F"))


def test_other_examples_types():
    b = body(load_program(EXAMPLES / "attention.gnn"))
    assert (b["out"].gtype, b["out"].shape) == ("E", ("H",))
    b = body(load_program(EXAMPLES / "gin.gnn"))
    out = b["out"]
    assert isinstance(out, ast.Binary) and out.op == "+"
    assert (out.lhs.gtype, out.lhs.shape) == ("D", ("F",))  # (1 + eps) * x[v]
    assert out.lhs.lhs.gtype == "P"
    assert (out.rhs.gtype, out.gtype, out.shape) == ("A", "A", ("F",))
    b = body(load_program(EXAMPLES / "mlp_aggr.gnn"))
    relu = b["out"].operand
    assert (relu.gtype, relu.shape) == ("E", ("D2",))
    matvec = relu.args[0]
    assert isinstance(matvec, ast.Binary) and matvec.op == "@"
    assert (matvec.rhs.gtype, matvec.rhs.shape) == ("P", ("D1", "D2"))
    b = body(load_program(EXAMPLES / "gcn_norm.gnn"))
    rsqrt = b["out"].operand.rhs
    degs = rsqrt.args[0]
    assert isinstance(degs.lhs, ast.Degree) and (degs.lhs.direction, degs.lhs.index) == ("out", "u")
    assert (degs.lhs.gtype, degs.rhs.gtype, degs.gtype, degs.shape) == ("S", "D", "E", ())
    b = body(load_program(EXAMPLES / "sage_max.gnn"))
    assert isinstance(b["out"], ast.Aggregate) and b["out"].kind == "max"


# ------------------------------------------------------------ valid programs


def test_graph_type_combinations():
    program = parse_and_check(
        """
kernel k(x: f32[V, F], w: f32[E], c: f32) -> (a: f32[E, F], b: f32[E, F], d: f32[V, F], s: f32[E, F]) {
    a[e] = x[u] * x[u] + c      # S with S stays S, P keeps S
    b[e] = x[u] * x[v]          # S with D is E
    s[e] = w[e] * x[v]          # E with D is E
    d[v] = x[v] * c + max(x[u]) / 2
}
""",
        "t.gnn",
    )
    b = body(program)
    assert b["a"].gtype == "S"
    assert b["b"].gtype == "E"
    assert b["s"].gtype == "E"
    d = b["d"]
    assert (d.gtype, d.lhs.gtype, d.rhs.gtype) == ("A", "D", "A")
    assert d.rhs.rhs.gtype == "P"


def test_vertex_values_read_later_at_u_and_v():
    program = parse_and_check(
        "kernel two(x: f32[V, F]) -> f32[V, F] {\n  h[v] = mean(x[u])\n  out[v] = sum(h[u] - h[v]) + h[v]\n}\n"
    )
    out = body(program)["out"]
    assert out.lhs.operand.lhs.gtype == "S"
    assert out.lhs.operand.rhs.gtype == "D"
    assert out.rhs.gtype == "D"


def test_syntax_conveniences():
    # several kernels, ';' separators, comments, line breaks in brackets,
    # braces on their own line, float literals, f64, negative slopes
    program = parse_and_check(
        """# header comment
kernel a(x: f64[V, 4],
         W: f64[4, 2]) -> f64[V, 2]
{
    t[e] = leaky_relu(x[u] * 1e-3 + .5 - 2.5E+2, -0.01); out[v] = sum(t[e] @ W)  # comment
}
kernel b(x: f32[V]) -> f32[V] { out[v] = -(-x[v]) * deg_in(v) }
""",
        "t.gnn",
    )
    a, b = program.kernels
    assert (a.dtype, b.dtype) == ("f64", "f32")
    ta = body(program, "a")["t"]
    assert ta.args[1].value == -0.01 and ta.args[1].text == "-0.01"
    assert body(program, "a")["out"].shape == (2,)
    assert b.results[0].type.shape == () and b.single_result


def test_number_forms():
    tokens = tokenize("1 2.5 1e-3 .5 3. 7E+2")
    assert [t.text for t in tokens if t.kind == "NUMBER"] == ["1", "2.5", "1e-3", ".5", "3.", "7E+2"]


def test_dot_and_matvec_shapes():
    program = parse_and_check(
        "kernel k(q: f32[V, H, D], W: f32[D, 8]) -> (s: f32[E, H], y: f32[V, H, 8]) {\n"
        "  s[e] = dot(q[u], q[v])\n"
        "  y[v] = q[v] @ W\n"
        "}\n"
    )
    b = body(program)
    assert (b["s"].shape, b["y"].shape) == (("H",), ("H", 8))


def test_schedules_are_attached(monkeypatch):
    import gnnc.lang.sema as check_module

    monkeypatch.setitem(check_module.SUPPORTED_DIRECTIVES, "cpu", {"partition", "tile", "parallel", "order"})
    monkeypatch.setitem(check_module.SUPPORTED_DIRECTIVES, "cuda", {"map"})
    program = parse_and_check(
        """
schedule gcn for cpu {
    partition src 16        # before its kernel
    tile features 64; parallel dst
}
kernel gcn(x: f32[V, F], w: f32[E]) -> f32[V, F] {
    out[v] = sum(w[e] * x[u])
}
kernel attention(q: f32[V, H, D], k: f32[V, H, D]) -> f32[E, H] { out[e] = dot(q[v], k[u]) }
schedule attention for cpu { order edges hilbert }
schedule gcn for cuda { map warp_vertex group 4 tile 2 }
""",
        "t.gnn",
    )
    gcn = program.kernel("gcn")
    assert [(s.target, [d.words for d in s.directives]) for s in gcn.schedules] == [
        ("cpu", [["partition", "src", "16"], ["tile", "features", "64"], ["parallel", "dst"]]),
        ("cuda", [["map", "warp_vertex", "group", "4", "tile", "2"]]),
    ]
    assert [d.words for s in program.kernel("attention").schedules for d in s.directives] == [
        ["order", "edges", "hilbert"]
    ]
    assert len(program.schedules) == 3


def test_supported_map_phrase(monkeypatch):
    import gnnc.lang.sema as check_module

    monkeypatch.setitem(check_module.SUPPORTED_DIRECTIVES, "cuda", {"map thread_vertex"})
    src = "kernel k(x: f32[V]) -> f32[V] { out[v] = x[v] }\nschedule k for cuda { map thread_vertex }\n"
    parse_and_check(src)
    err = error_of(src.replace("thread_vertex", "warp_edge"))  # supported, but not in this monkeypatched set
    assert "'map warp_edge' is not supported yet" in err
    err = error_of(src.replace("thread_vertex }", "thread_vertex group 2 }"))
    assert "'map ... group' is not supported yet" in err


def test_load_program_source_and_path(tmp_path):
    src = (EXAMPLES / "gcn.gnn").read_text()
    assert load_program(src).file == "<string>"
    p = tmp_path / "mine.gnn"
    p.write_text(src)
    assert load_program(str(p)).file == str(p)
    assert load_program(p).kernels[0].name == "gcn"
    # a one-line name ending in .gnn is a path, even a missing one
    with pytest.raises(GnncError, match="cannot read"):
        load_program(str(tmp_path / "missing.gnn"))
    # ... but source text ending in ".gnn" stays source text
    with pytest.raises(SourceError, match="expected"):
        load_program("kernel k(x: f32[V]) -> f32[V] { out[v] = x[v] } a.gnn")
    bad = tmp_path / "bad.gnn"
    bad.write_bytes(b"\xff\xfe kernel")
    with pytest.raises(GnncError, match="not UTF-8"):
        load_program(bad)


def test_language_doc_examples_check():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "language.md").read_text()
    examples = doc.split("## Examples", 1)[1].split("```")[1]
    program = parse_and_check(examples, "language.md")
    assert "two_hop" in [k.name for k in program.kernels]


def test_crlf_and_form_feed_lines():
    src = "kernel k(x: f32[V]) -> f32[V] {\r\n  out[v] = x[v]\r\n}\r\n"
    parse_and_check(src)
    # splitlines() breaks at a form feed: the caret must follow the same lines
    assert_error("kernel k(x: f32[V]) -> f32[V] {\x0c  out[v] = y[v]\n}\n", 2, 12, "unknown name 'y'", 4)


def test_check_is_separate_from_parse():
    program = parse("kernel k(x: f32[V]) -> f32[V] { out[v] = x[u] }", "t.gnn")
    assert program.kernels[0].body[0].value.gtype is None
    with pytest.raises(SourceError):
        check(program)


# -------------------------------------------------------------------- errors


def error_of(source: str) -> str:
    with pytest.raises(SourceError) as info:
        parse_and_check(source, "t.gnn")
    assert not isinstance(info.value.__cause__, (IndexError, KeyError, RecursionError))
    return str(info.value)


def assert_error(source: str, line: int, col: int, message: str, length: int = 1) -> None:
    """The rendered error: `t.gnn:line:col: error: ...message...`, the line and a caret."""
    text = error_of(source)
    lines = text.splitlines()
    assert lines[0].startswith(f"t.gnn:{line}:{col}: error: "), text
    assert message in lines[0], text
    assert lines[1] == source.splitlines()[line - 1], text
    assert lines[2] == " " * (col - 1) + "^" + "~" * (length - 1), text


SIG = "kernel k(x: f32[V, F], w: f32[E], eps: f32, W: f32[F, G]) -> f32[V, F] {\n"


def test_error_unexpected_character():
    assert_error(SIG + "  out[v] = x[v] $ 2\n}\n", 2, 17, "unexpected character '$'")


def test_error_malformed_number():
    assert_error(SIG + "  out[v] = 2x * x[v]\n}\n", 2, 12, "malformed number '2x'", 2)
    assert_error(SIG + "  out[v] = 1e * x[v]\n}\n", 2, 12, "malformed number '1e'", 2)


def test_error_expected_token():
    assert_error("kernel k(x: f32[V]) f32[V] { out[v] = x[v] }", 1, 21, "expected '->'", 3)
    assert_error(SIG + "  out[v] = x[v] +\n}\n", 2, 18, "expected an expression, found end of line")
    assert_error(SIG + "  out[v] = x[v] x[v]\n}\n", 2, 17, "expected the end of the statement", 1)
    assert_error("x = 1\n", 1, 1, "expected 'kernel' or 'schedule'")


def test_error_end_of_file():
    assert_error(SIG + "  out[v] = x[v]\n", 2, 16, "expected '}' to close kernel 'k', found end of file")


def test_error_deep_nesting():
    src = SIG + "  out[v] = " + "(" * 10000 + "x[v]\n}\n"
    text = error_of(src)
    assert text.startswith("t.gnn:2:") and "nested too deeply" in text
    text = error_of(SIG + "  out[v] = " + "x[v] + " * 5000 + "x[v]\n}\n")
    assert "nested too deeply" in text
    text = error_of(SIG + "  out[v] = " + "-" * 5000 + "x[v]\n}\n")
    assert "nested too deeply" in text
    text = error_of(SIG + "  out[v] = " + "exp(" * 3000 + "x[v]" + ")" * 3000 + "\n}\n")
    assert "nested too deeply" in text


def test_error_unknown_function_and_arity():
    assert_error(SIG + "  out[v] = foo(x[v])\n}\n", 2, 12, "unknown function 'foo'", 3)
    assert_error(SIG + "  out[v] = exp(x[v], x[v])\n}\n", 2, 12, "exp takes 1 argument, got 2", 3)
    assert_error(SIG + "  out[v] = max(x[v], x[v], x[v])\n}\n", 2, 12, "max takes one argument", 3)
    assert_error(SIG + "  out[v] = sum(x[u], x[u])\n}\n", 2, 12, "sum takes one argument", 3)
    assert_error(SIG + "  out[v] = x[v] * deg_in(e)\n}\n", 2, 26, "deg_in takes the vertex index u or v")


def test_error_bad_index():
    assert_error(SIG + "  out[v] = x[i]\n}\n", 2, 14, "expected the index u, v, e or rel(e), found 'i'")
    assert_error(SIG + "  out[u] = x[v]\n}\n", 2, 7, "values are defined at the destination v")


def test_error_types_in_signature():
    assert_error("kernel k(x: f16[V]) -> f32[V] { out[v] = x[v] }", 1, 13, "unknown element type 'f16'", 3)
    assert_error("kernel k(x: f32[V, 0]) -> f32[V] { out[v] = x[v] }", 1, 20, "must be positive")
    assert_error("kernel k(x: f32[F, V]) -> f32[V] { out[v] = 1 }", 1, 20, "'V' may only be the first axis")


def test_error_unknown_name():
    assert_error(SIG + "  out[v] = y[v]\n}\n", 2, 12, "unknown name 'y'", 4)
    assert_error(SIG + "  out[v] = x[v] * scale\n}\n", 2, 19, "unknown name 'scale'", 5)


def test_error_duplicates():
    assert_error("kernel k(x: f32[V], x: f32[V]) -> f32[V] { out[v] = x[v] }", 1, 21, "duplicate parameter 'x'")
    assert_error(
        "kernel k(x: f32[V]) -> f32[V] {\n  out[v] = x[v]\n  out[v] = x[v]\n}", 3, 3, "'out' is already defined", 3
    )
    assert_error("kernel k(x: f32[V]) -> (a: f32[V], a: f32[V]) { a[v] = x[v] }", 1, 36, "duplicate result 'a'")
    assert_error(
        "kernel k(x: f32[V]) -> f32[V] { out[v] = x[v] }\nkernel k(x: f32[V]) -> f32[V] { out[v] = x[v] }",
        2,
        8,
        "kernel 'k' is already defined at line 1",
    )
    assert_error("kernel k(x: f32[V]) -> f32[V] { x[v] = 1; out[v] = x[v] }", 1, 33, "'x' is a parameter")


def test_error_reserved_parameter_names():
    for name in sorted(ast.RESERVED_NAMES):
        src = f"kernel k({name}: f32[V]) -> (r: f32[V]) {{ r[v] = {name}[v] }}"
        assert_error(src, 1, 10, "call option", len(name))
        assert f"'{name}' is reserved" in error_of(src)


def test_error_mixed_element_types():
    assert_error(
        "kernel k(x: f32[V, F], w: f64[E]) -> f32[V, F] { out[v] = sum(w[e] * x[u]) }",
        1,
        27,
        "mixes element types: 'w' is f64 but 'x' is f32",
        6,
    )
    assert_error("kernel k(x: f64[V]) -> f32[V] { out[v] = x[v] }", 1, 24, "'out' is f32 but 'x' is f64", 6)


def test_error_index_kinds():
    assert_error(SIG + "  out[v] = sum(x[e])\n}\n", 2, 16, "'x' is a vertex tensor: read it at u or v", 4)
    assert_error(SIG + "  out[v] = sum(w[u] * x[u])\n}\n", 2, 16, "'w' is an edge tensor: read it as w[e]", 4)
    assert_error(SIG + "  out[v] = x\n}\n", 2, 12, "'x' is a vertex tensor: index it as x[u] or x[v]")
    assert_error(SIG + "  out[v] = x[v] * eps[v]\n}\n", 2, 19, "'eps' is a parameter", 6)
    assert_error(
        SIG + "  s[e] = w[e]\n  out[v] = sum(s[u] * x[u])\n}\n", 3, 16, "'s' is an edge value: read it as s[e]", 4
    )
    assert_error(SIG + "  out[v] = x[v] * u\n}\n", 2, 19, "'u' is an index, not a value")
    assert_error(SIG + "  s[v] = out[v]\n}\n", 2, 10, "result 'out' is read but never defined", 6)


def test_error_use_before_definition():
    assert_error(SIG + "  out[v] = h[v]\n  h[v] = x[v]\n}\n", 2, 12, "'h' is used before it is defined (line 3)", 4)
    assert_error(SIG + "  s[e] = s[e] + 1\n  out[v] = x[v]\n}\n", 2, 10, "'s' is used in its own definition", 4)


def test_error_results():
    assert_error(
        "kernel k(x: f32[V]) -> (a: f32[V], b: f32[E]) {\n  a[v] = x[v]\n}", 1, 36, "result 'b' is never defined"
    )
    assert_error("kernel k(x: f32[V]) -> f32[E] {\n  out[v] = x[v]\n}", 2, 3, "result 'out' is an edge tensor", 3)
    assert_error(
        "kernel k(x: f32[V, F]) -> f32[V] {\n  out[v] = x[v]\n}",
        2,
        3,
        "result 'out' is declared f32[V] (value shape [] (a scalar)) but its definition has shape [F]",
        3,
    )
    assert_error("kernel k(x: f32[V, F]) -> f32[F] { out[v] = 1 }", 1, 27, "must be a vertex or edge tensor", 6)
    assert_error(
        "kernel k(x: f32[V, F]) -> f32[V, G] { out[v] = 1 }", 1, 27, "dimension 'G' of result 'out' is not bound", 9
    )


def test_error_vertex_definition_reads_u_or_e():
    assert_error(SIG + "  out[v] = x[u]\n}\n", 2, 12, "x[u] reads the source vertex u outside an aggregation", 4)
    assert_error(SIG + "  out[v] = x[v] * w[e]\n}\n", 2, 19, "w[e] reads an edge outside an aggregation", 4)
    assert_error(SIG + "  out[v] = x[v] * deg_out(u)\n}\n", 2, 19, "deg_out(u) reads the source vertex u", 7)


def test_error_aggregations_in_edge_context():
    src = SIG + "  s[e] = sum(x[u])\n  out[v] = x[v]\n}\n"
    assert_error(src, 2, 10, "an edge definition cannot contain an aggregation", 3)
    assert_error(SIG + "  out[v] = sum(x[u] * max(w[e]))\n}\n", 2, 23, "aggregations cannot be nested", 3)


def test_error_softmax_outside_edge_context():
    assert_error(SIG + "  out[v] = softmax(x[v])\n}\n", 2, 12, "softmax normalises an edge value", 7)


def test_error_shapes():
    src = "kernel k(x: f32[V, H, F], a: f32[E, F]) -> f32[V, H, F] {\n  out[v] = sum(a[e] * x[u])\n}\n"
    assert_error(src, 2, 21, "shapes [F] and [H, F] do not broadcast")
    # numpy would broadcast these trailing axes; gnnc does not
    src = "kernel k(x: f32[V, H, F], a: f32[E, F]) -> f32[V, H, F] {\n  out[v] = sum(x[u] + a[e])\n}\n"
    assert_error(src, 2, 21, "shapes [H, F] and [F] do not broadcast")
    src = "kernel k(x: f32[V, 3], y: f32[V, N]) -> f32[V, 3] {\n  out[v] = max(x[v], y[v])\n}\n"
    assert_error(src, 2, 12, "shapes [3] and [N] do not broadcast", 3)


def test_error_dot():
    src = "kernel k(q: f32[V, H, D], k: f32[V, D]) -> f32[E, H] {\n  out[e] = dot(q[v], k[u])\n}\n"
    assert_error(src, 2, 12, "dot needs two operands of the same shape, got [H, D] and [D]", 3)
    src = "kernel k(q: f32[V]) -> f32[E] {\n  out[e] = dot(q[v], q[u])\n}\n"
    assert_error(src, 2, 12, "dot needs operands with at least one axis", 3)


def test_error_matvec():
    src = SIG + "  out[v] = x[v] @ W\n}\n"
    assert_error(src, 2, 3, "declared f32[V, F] (value shape [F]) but its definition has shape [G]", 3)
    assert_error(SIG + "  out[v] = x[v] @ x[v]\n}\n", 2, 19, "right operand of '@' must be a 2-D parameter", 4)
    assert_error(SIG + "  out[v] = x[v] @ eps\n}\n", 2, 19, "right operand of '@' must be a 2-D parameter", 3)
    src = "kernel k(x: f32[V, G], W: f32[F, G]) -> f32[V, G] {\n  out[v] = x[v] @ W\n}\n"
    assert_error(src, 2, 17, "the last axis of the left operand [G] does not match the rows of W [F, G]")


def test_error_matvec_of_a_vertex_or_parameter_value_named_per_edge():
    """`t[e] = x[u]` or `t[e] = W * 2` as '@''s matrix: refused at its name, not a crash in the
    compiler (which reads such a value at its vertex, or as a parameter, where a matrix has no form)."""
    sig = "kernel k(x: f32[V, K, M], a: f32[E, K], W: f32[K, M]) -> f32[V, M] {\n"
    for definition, what in (("x[u]", "source values"), ("x[v]", "destination values"), ("W * 2", "parameters")):
        src = sig + f"  t[e] = {definition}\n  out[v] = sum(a[e] @ t[e])\n}}\n"
        assert_error(src, 3, 23, f"'t' is defined from {what} only", 4)
    # an edge value that is a matrix per edge is one
    ok = "kernel k(x: f32[V, K], a: f32[E, K, N], w: f32[E]) -> f32[V, N] {\n  t[e] = a[e] * w[e]\n"
    load_program(ok + "  out[v] = sum(x[u] @ t[e])\n}\n")


def test_error_leaky_relu_slope():
    assert_error(SIG + "  out[v] = leaky_relu(x[v], eps)\n}\n", 2, 29, "slope of leaky_relu must be a number", 3)


def test_error_schedules():
    k = "kernel k(x: f32[V]) -> f32[V] { out[v] = x[v] }\n"
    assert_error(k + "schedule j for cpu { parallel dst }\n", 2, 10, "schedule for unknown kernel 'j'")
    assert_error(k + "schedule k for tpu { parallel dst }\n", 2, 16, "unknown target 'tpu'", 3)
    assert_error(k + "schedule k for cpu { frobnicate 3 }\n", 2, 22, "unknown cpu schedule directive 'frobnicate'", 10)
    assert_error(k + "schedule k for cpu { map warp_edge }\n", 2, 22, "'map' is a cuda directive, not a cpu one", 3)
    assert_error(
        k + "schedule k for cpu {\n  group neighbors\n}\n",
        3,
        9,
        "'group neighbors' needs a positive integer (the neighbour group size)",
        9,
    )
    assert_error(k + "schedule k for cpu { partition src 0 }\n", 2, 36, "expected a positive integer")
    assert_error(k + "schedule k for cpu { partition dst 4 }\n", 2, 32, "expected 'src' after 'partition'", 3)
    assert_error(k + "schedule k for cpu { tile features }\n", 2, 27, "'tile features' needs a positive integer", 8)
    assert_error(k + "schedule k for cpu { parallel dst now }\n", 2, 35, "unexpected 'now' after 'parallel dst'", 3)
    assert_error(k + "schedule k for cpu { tile features 2.5 }\n", 2, 36, "expected a positive integer", 3)
    assert_error(k + "schedule k for cuda { map warp_diagonal }\n", 2, 27, "unknown thread mapping 'warp_diagonal'", 13)
    assert_error(k + "schedule k for cuda { map warp_edge group }\n", 2, 37, "'group' needs a positive integer", 5)
    assert_error(k + "schedule k for cpu { tile features -4 }\n", 2, 36, "unexpected '-' in a schedule directive")
    assert_error(k + "schedule k for cpu { }\nschedule k for cpu { }\n", 3, 10, "a second cpu schedule for 'k'")


def test_error_duplicate_directive(monkeypatch):
    import gnnc.lang.sema as check_module

    monkeypatch.setitem(check_module.SUPPORTED_DIRECTIVES, "cpu", {"parallel"})
    k = "kernel k(x: f32[V]) -> f32[V] { out[v] = x[v] }\n"
    assert_error(k + "schedule k for cpu { parallel dst; parallel dst }\n", 2, 36, "'parallel dst' is already given", 8)


def test_error_no_kernel():
    assert_error("# nothing here\n", 1, 1, "no kernel in this file")


def test_error_render_format():
    text = error_of("kernel k(x: f32[V]) -> f32[V] {\n\tout[v] = y[v]\n}\n")
    assert text.splitlines() == [
        "t.gnn:2:11: error: unknown name 'y'",
        " out[v] = y[v]",
        "          ^~~~",
    ]


# ------------------------------------------------------------------- fuzzing


def only_source_errors(source: str) -> None:
    try:
        parse_and_check(source, "fuzz.gnn")
    except SourceError as err:
        text = str(err)
        assert text.startswith("fuzz.gnn:") and ": error: " in text.splitlines()[0]
        assert err.loc.line >= 1 and err.loc.col >= 1
    except GnncError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_fuzz_arbitrary_text(source: str):
    only_source_errors(source)


EXAMPLE_SOURCES = [p.read_text() for p in EXAMPLE_FILES] + [
    "kernel gcn(x: f32[V, F], w: f32[E]) -> f32[V, F] { out[v] = sum(w[e] * x[u]) }\n"
    "schedule gcn for cpu {\n  partition src 16\n  tile features 64\n  parallel dst\n}\n"
    "schedule gcn for cuda { map warp_vertex group 4 tile 2 }\n",
]
FRAGMENTS = [
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    ";",
    "\n",
    "->",
    "+",
    "-",
    "*",
    "/",
    "@",
    "=",
    "#",
    "u",
    "v",
    "e",
    "x",
    "out",
    "V",
    "E",
    "F",
    "f32",
    "f64",
    "sum",
    "max",
    "min",
    "mean",
    "dot",
    "softmax",
    "leaky_relu",
    "deg_in",
    "deg_out",
    "kernel",
    "schedule",
    "for",
    "cpu",
    "cuda",
    "0",
    "1",
    "2.5",
    "1e-3",
    "1e999",
    "map",
    "partition",
    "src",
    "\t",
    "\r",
    "\x0c",
    "\u2028",
    "é",
    "(" * 300,
    "x[u] + " * 200,
]


@st.composite
def mutated_sources(draw):
    source = draw(st.sampled_from(EXAMPLE_SOURCES))
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(source)))
        action = draw(st.sampled_from(["delete", "insert", "insert_text", "duplicate"]))
        if action == "delete":
            source = source[:pos] + source[pos + draw(st.integers(1, 8)) :]
        elif action == "insert":
            source = source[:pos] + draw(st.sampled_from(FRAGMENTS)) + source[pos:]
        elif action == "insert_text":
            source = source[:pos] + draw(st.text(max_size=4)) + source[pos:]
        else:
            end = draw(st.integers(pos, len(source)))
            source = source[:end] + source[pos:end] + source[end:]
    return source


@st.composite
def token_mutated_sources(draw):
    source = draw(st.sampled_from(EXAMPLE_SOURCES))
    tokens = [t.text for t in tokenize(source) if t.kind != "EOF"]
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(tokens)))
        if draw(st.booleans()) and tokens:
            del tokens[min(pos, len(tokens) - 1)]
        else:
            tokens.insert(pos, draw(st.sampled_from(FRAGMENTS + tokens)))
    return " ".join(tokens)


@settings(max_examples=400, deadline=None)
@given(mutated_sources())
def test_fuzz_mutated_examples(source: str):
    only_source_errors(source)


@settings(max_examples=400, deadline=None)
@given(token_mutated_sources())
def test_fuzz_token_mutations(source: str):
    only_source_errors(source)


# Random well-formed syntax over a fixed signature: exercises the checker's
# rules (most mutated sources stop in the parser).
_LEAVES = [
    "x[u]",
    "x[v]",
    "x[e]",
    "h[u]",
    "h[v]",
    "w[e]",
    "w[u]",
    "a[e]",
    "s[v]",
    "s[u]",
    "eps",
    "W",
    "M",
    "x",
    "u",
    "2",
    "0.5",
    "deg_in(v)",
    "deg_out(u)",
    "nope[v]",
    "out[v]",
    "t[e]",
]
_UNARY = sorted(ast.UNARY_FUNCTIONS) + ["softmax", "sum", "mean", "max", "min", "-"]
_BINARY = ["+", "-", "*", "/", "@", "max", "min", "dot", "leaky_relu"]

_exprs = st.recursive(
    st.sampled_from(_LEAVES),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(_UNARY), inner).map(lambda t: f"-({t[1]})" if t[0] == "-" else f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(_BINARY), inner, inner).map(
            lambda t: f"({t[1]} {t[0]} {t[2]})" if len(t[0]) == 1 else f"{t[0]}({t[1]}, {t[2]})"
        ),
    ),
    max_leaves=8,
)


@st.composite
def random_kernels(draw):
    lines = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(["t", "s", "out", "alpha", "x", "t"]))
        index = draw(st.sampled_from(["e", "v"]))
        lines.append(f"  {name}[{index}] = {draw(_exprs)}")
    result = draw(st.sampled_from(["f32[V, F]", "f32[E, H]", "f32[V]", "(out: f32[V, H, F], alpha: f32[E, H])"]))
    return (
        "kernel k(x: f32[V, F], h: f32[V, H, F], w: f32[E], a: f32[E, H], s: f32[V, H], eps: f32,\n"
        f"         W: f32[F, F], M: f32[H, 4]) -> {result} {{\n" + "\n".join(lines) + "\n}\n"
    )


@settings(max_examples=300, deadline=None)
@given(random_kernels())
def test_fuzz_random_kernels(source: str):
    only_source_errors(source)
    try:
        program = parse_and_check(source, "fuzz.gnn")
    except SourceError:
        return
    for d in program.kernels[0].body:
        for e in walk(d.value):
            assert e.gtype is not None and e.shape is not None
