"""Sources that once escaped the error family (issue 29): bytes that are not UTF-8, statement chains
deeper than the compiler's walks, tensors of too many axes, gradients that inline without bound.

`gnnc check` and `gnnc.compile` agree: what the checker accepts compiles, and
what cannot compile is a SourceError of the checker with a location.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import gnnc
from gnnc.api import compile_grad
from gnnc.lang import parse_and_check
from gnnc.lang.autodiff import MAX_INLINED_NODES
from gnnc.lang.sema import MAX_DEPTH, MAX_RANK
from gnnc.tools.cli import main as cli_main

GCN_BYTES = b"kernel k(x: f32[V, F]) -> f32[V, F] {\n    out[v] = sum(x[u])\n}\n"


# ------------------------------------------------------------------ encodings


def test_non_utf8_source_is_a_source_error_at_the_byte(tmp_path, capsys):
    p = tmp_path / "bad.gnn"
    p.write_bytes(GCN_BYTES.replace(b"sum(x[u])", b"sum(x[u]) \xff\xfe"))
    with pytest.raises(gnnc.SourceError, match=r"bad\.gnn:2:24: error: the file is not UTF-8 text: byte 0xff"):
        gnnc.compile(p)
    assert cli_main(["check", str(p)]) == 1
    err = capsys.readouterr().err
    assert "bad.gnn:2:24: error: the file is not UTF-8 text" in err and "Traceback" not in err
    with pytest.raises(gnnc.SourceError, match="not UTF-8"):
        gnnc.lang.load_program(p)


def test_a_byte_order_mark_and_cr_line_ends_are_read(tmp_path):
    p = tmp_path / "bom.gnn"
    p.write_bytes(b"\xef\xbb\xbf" + GCN_BYTES.replace(b"\n", b"\r"))
    module = gnnc.compile(p)
    g = gnnc.Graph(np.array([[0, 1], [1, 0]]))
    assert np.array_equal(module.k(g, np.ones((2, 3), np.float32)), np.ones((2, 3), np.float32))


# ------------------------------------------------------------------ depth and rank


def _chain(statements: int) -> str:
    lines = ["kernel k(x: f32[V, F]) -> f32[V, F] {", "    s0[e] = x[u]"]
    lines += [f"    s{i}[e] = s{i - 1}[e] * 2" for i in range(1, statements)]
    lines += [f"    out[v] = sum(s{statements - 1}[e])", "}"]
    return "\n".join(lines) + "\n"


def test_a_200_statement_chain_is_refused_by_check_and_compile_alike():
    # it passed `gnnc check`, then hit RecursionError in gnnc.compile
    source = _chain(200)
    pattern = rf"'s\d+' is computed through \d+ nested operations.*at most {MAX_DEPTH}"
    with pytest.raises(gnnc.SourceError, match=pattern):
        parse_and_check(source)
    with pytest.raises(gnnc.SourceError, match=pattern):
        gnnc.compile(source)


@pytest.mark.slow
def test_the_deepest_accepted_chain_compiles_and_runs():
    source = _chain(MAX_DEPTH // 2 - 1)  # two operations a statement (the read and the product)
    parse_and_check(source)
    module = gnnc.compile(source)
    g = gnnc.Graph(np.array([[0, 1], [1, 0]]))
    x = np.full((2, 1), 2.0**-90, np.float32)
    want = gnnc.compile(source, target="reference").k(g, x)
    assert np.allclose(module.k(g, x), want)
    with pytest.raises(gnnc.CompileError, match="its gradient is not expressible as kernels yet"):
        compile_grad(source, "k")


def test_ranks_past_the_limit_are_source_errors():
    dims = ", ".join(f"D{i}" for i in range(MAX_RANK))
    with pytest.raises(gnnc.SourceError, match=rf"has {MAX_RANK + 1} axes; gnnc takes tensors of at most {MAX_RANK}"):
        parse_and_check(f"kernel k(x: f32[V, {dims}]) -> f32[V, {dims}] {{\n    out[v] = sum(x[u])\n}}\n")
    dims = ", ".join(f"D{i}" for i in range(MAX_RANK - 1))
    source = (
        f"kernel k(x: f32[V, {dims}]) -> f32[V] {{\n    out[v] = sum(dot(outer(x[u], x[u]), outer(x[u], x[u])))\n}}\n"
    )
    with pytest.raises(gnnc.SourceError, match=rf"this value has {MAX_RANK + 1} axes"):
        parse_and_check(source)


# ------------------------------------------------------------------ gradients


def test_gradients_refuse_exponential_inlining_quickly():
    # every value reads the previous one twice: inlined, the text doubled per statement (20 never finished)
    lines = ["kernel k(x: f32[V, F]) -> f32[V, F] {", "    s0[e] = x[u]"]
    lines += [f"    s{i}[e] = s{i - 1}[e] * s{i - 1}[e]" for i in range(1, 30)]
    source = "\n".join([*lines, "    out[v] = sum(s29[e])", "}"]) + "\n"
    start = time.perf_counter()
    with pytest.raises(gnnc.CompileError, match=rf"'s8' .* has \d+ operations \(at most {MAX_INLINED_NODES}\)"):
        compile_grad(source, "k")
    assert time.perf_counter() - start < 10
