"""The `gnnc` and `gnnc-opt` command lines, run as a user runs them (subprocesses)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.driver import pipeline
from tests.helpers import assert_matches, slow_except

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"
GAT = EXAMPLES / "gat.gnn"
GCN = EXAMPLES / "gcn.gnn"

needs_cc = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc").split()[0]) is None, reason="no C compiler")


def _is_x86_64() -> bool:
    import platform

    return platform.machine().lower() in ("x86_64", "amd64")


def gnnc_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gnnc.tools.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def gnnc_opt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gnnc.tools.opt", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def assert_clean_error(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip(), "an error says what went wrong"


def gat_inputs(graph: gnnc.Graph, heads: int = 2, feats: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = graph.num_vertices
    return {
        "h": rng.standard_normal((n, heads, feats)).astype(np.float32),
        "el": rng.standard_normal((n, heads)).astype(np.float32),
        "er": rng.standard_normal((n, heads)).astype(np.float32),
    }


def small_graph(n: int = 30, e: int = 120, seed: int = 1) -> gnnc.Graph:
    rng = np.random.default_rng(seed)
    return gnnc.Graph(rng.integers(0, n, size=(2, e)), num_vertices=n)


def dump_names(stderr: str) -> list[str]:
    return re.findall(r"// -----// IR Dump After (\S+) //----- //", stderr)


# ---------------------------------------------------------------- compile


@pytest.fixture(scope="module")
def gat_all(tmp_path_factory):
    """`gnnc compile gat.gnn -o gat.so --print-ir-after-all`, run once."""
    tmp = tmp_path_factory.mktemp("gat_all")
    so = tmp / "gat.so"
    proc = gnnc_cli("compile", GAT, "-o", so, "--print-ir-after-all")
    return proc, so


@pytest.mark.slow
def test_print_ir_after_all_and_the_so_runs(gat_all):
    proc, so = gat_all
    assert proc.returncode == 0, proc.stderr
    names = dump_names(proc.stderr)
    for stage in ("irgen", "convert-graph-to-loop", "translate-to-llvm"):
        assert stage in names, names
    assert names.index("irgen") < names.index("convert-graph-to-loop") < names.index("translate-to-llvm")

    assert names == pipeline.all_stage_names(), "every stage, in pipeline order"
    # the dumps show the graph, loop and LLVM stages
    sections = dict(zip(names, re.split(r"// -----// IR Dump After \S+ //----- //\n", proc.stderr)[1:]))
    assert "graph.gather" in sections["irgen"]
    assert "loop.for_dst" in sections["convert-graph-to-loop"]
    assert "define void @" in sections["translate-to-llvm"]
    assert so.is_file()

    module = gnnc.load(so)
    graph = small_graph()
    inputs = gat_inputs(graph)
    got = module.gat(graph, **inputs)
    want = gnnc.compile(str(GAT), target="reference").gat(graph, **inputs)
    assert_matches(got, want, graph, np.float32)


@pytest.mark.parametrize(
    "emit, marker",
    slow_except(
        [
            ("graph", "graph.gather"),
            ("loop", "loop.for_dst"),
            ("scf", "scf.for"),
            ("llvm", "define void @"),
            ("asm", "gnnc_gat"),
        ],
        ("graph", "graph.gather"),
    ),
)
def test_emit_text_to_stdout_and_file(tmp_path, emit, marker):
    proc = gnnc_cli("compile", GAT, "--emit", emit, "-o", "-")
    assert proc.returncode == 0, proc.stderr
    assert marker in proc.stdout
    out = tmp_path / f"gat.{emit}"
    proc2 = gnnc_cli("compile", GAT, "--emit", emit, "-o", out)
    assert proc2.returncode == 0, proc2.stderr
    assert proc2.stdout == ""
    assert marker in out.read_text()
    if emit in ("graph", "loop", "scf"):  # the xDSL stages are deterministic text
        assert out.read_text() == proc.stdout


@pytest.mark.slow
def test_emit_obj_is_an_elf_object(tmp_path):
    out = tmp_path / "gat.o"
    proc = gnnc_cli("compile", GAT, "--emit", "obj", "-o", out)
    assert proc.returncode == 0, proc.stderr
    data = out.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert int.from_bytes(data[16:18], "little") == 1, "ET_REL: a relocatable object, not a shared object"


@pytest.mark.slow
def test_dump_ir_writes_one_numbered_file_per_stage(tmp_path):
    from llvmlite import binding as llvm
    from xdsl.parser import Parser

    ir_dir = tmp_path / "ir"
    proc = gnnc_cli("compile", GAT, "-o", tmp_path / "gat.so", "--dump-ir", ir_dir)
    assert proc.returncode == 0, proc.stderr
    assert dump_names(proc.stderr) == [], "--dump-ir alone prints nothing"
    files = sorted(ir_dir.iterdir())
    stages = pipeline.all_stage_names()
    assert [f.name.split("-", 1)[0] for f in files] == [f"{i:02d}" for i in range(len(stages))]
    assert [f.stem.split("-", 1)[1] for f in files] == stages
    for f in files:
        text = f.read_text()
        assert text.strip(), f.name
        if f.suffix == ".mlir":
            module = Parser(pipeline.make_context(), text).parse_module()
            module.verify()
        elif f.suffix == ".ll":
            llvm.parse_assembly(text).verify()
        else:
            assert f.suffix == ".s"
    assert {f.suffix for f in files} == {".mlir", ".ll", ".s"}


def test_print_ir_after_one_stage(tmp_path):
    proc = gnnc_cli("compile", GAT, "-o", tmp_path / "gat.so", "--print-ir-after", "convert-graph-to-loop")
    assert proc.returncode == 0, proc.stderr
    assert dump_names(proc.stderr) == ["convert-graph-to-loop"]
    assert "loop.for_dst" in proc.stderr


def test_print_ir_after_unknown_pass(tmp_path):
    out = tmp_path / "gat.so"
    proc = gnnc_cli("compile", GAT, "-o", out, "--print-ir-after", "no-such-pass")
    assert_clean_error(proc)
    assert "no-such-pass" in proc.stderr and "convert-graph-to-loop" in proc.stderr
    assert not out.exists()


@pytest.mark.slow
@needs_cc
def test_header_compiles_in_c(tmp_path):
    so, header = tmp_path / "gat.so", tmp_path / "gat.h"
    proc = gnnc_cli("compile", GAT, "-o", so, "--header", header)
    assert proc.returncode == 0, proc.stderr
    text = header.read_text()
    assert "gnnc_gat" in text
    c = tmp_path / "use.c"
    c.write_text(
        '#include "gat.h"\n#include "gat.h"\n'  # twice: the include guard works
        "void (*volatile keep)(void) = (void (*)(void))gnnc_gat;\n"
        "int main(void) { return keep == 0; }\n"
    )
    cc = subprocess.run(
        [os.environ.get("CC", "cc"), "-std=c99", "-Wall", "-Werror", "-c", str(c), "-o", str(tmp_path / "use.o")],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert cc.returncode == 0, cc.stderr


@pytest.mark.slow
def test_header_says_what_a_specialised_kernel_was_compiled_for(tmp_path):
    so, header = tmp_path / "gat.so", tmp_path / "gat.h"
    proc = gnnc_cli("compile", GAT, "-o", so, "--header", header, "--schedule", "specialize H 4 F 32")
    assert proc.returncode == 0, proc.stderr
    assert "compiled for F = 32, H = 4 (specialize): dims must hold exactly these" in header.read_text()


def test_header_needs_the_backend(tmp_path):
    proc = gnnc_cli("compile", GAT, "--emit", "graph", "-o", tmp_path / "g.mlir", "--header", tmp_path / "g.h")
    assert_clean_error(proc)
    assert not (tmp_path / "g.h").exists()


@pytest.mark.slow
@pytest.mark.skipif(not _is_x86_64(), reason="x86-64 levels need an x86-64 host")
def test_cpu_level_is_recorded(tmp_path):
    so = tmp_path / "gat_v2.so"
    proc = gnnc_cli("compile", GAT, "--cpu", "x86-64-v2", "-o", so)
    assert proc.returncode == 0, proc.stderr
    module = gnnc.load(so)
    assert module.metadata["cpu"]["level"] == "x86-64-v2"
    graph = small_graph()
    inputs = gat_inputs(graph, heads=1, feats=3)
    want = gnnc.compile(str(GAT), target="reference").gat(graph, **inputs)
    assert_matches(module.gat(graph, **inputs), want, graph, np.float32)


@pytest.mark.slow
def test_cpu_bogus_is_a_clean_error(tmp_path):
    out = tmp_path / "x.so"
    proc = gnnc_cli("compile", GAT, "--cpu", "bogus", "-o", out)
    assert_clean_error(proc)
    assert "bogus" in proc.stderr and "x86-64-v2" in proc.stderr
    assert not out.exists()


def test_compile_missing_file(tmp_path):
    proc = gnnc_cli("compile", tmp_path / "missing.gnn", "-o", tmp_path / "x.so")
    assert_clean_error(proc)
    assert "missing.gnn" in proc.stderr


# ---------------------------------------------------------------- check and passes


def test_check_every_example():
    examples = sorted(EXAMPLES.glob("*.gnn"))
    assert examples
    for path in examples:
        proc = gnnc_cli("check", path)
        assert proc.returncode == 0, (path, proc.stderr)
        assert "ok" in proc.stdout and path.stem in proc.stdout


@pytest.mark.parametrize(
    "source, line, col",
    [
        ("kernel k(x: f32[V, F], w: f64[E]) -> f32[V, F] {\n    out[v] = sum(w[e] * x[u])\n}\n", 1, 27),
        ("kernel k(x: f32[V, F]) -> f32[V, F] {\n    out[v] = sum(y[u])\n}\n", 2, 18),
    ],
    ids=["mixed-dtypes", "unknown-name"],
)
def test_check_type_error(tmp_path, source, line, col):
    path = tmp_path / "bad.gnn"
    path.write_text(source)
    proc = gnnc_cli("check", path)
    assert_clean_error(proc)
    assert proc.stdout == ""
    assert re.search(rf"bad\.gnn:{line}:{col}: error: ", proc.stderr), proc.stderr
    lines = proc.stderr.splitlines()
    caret = [i for i, text in enumerate(lines) if re.fullmatch(r" *\^~*", text)]
    assert caret, proc.stderr
    i = caret[0]
    assert lines[i].index("^") == col - 1
    assert lines[i - 1] == source.splitlines()[line - 1], "the caret sits under the source line"


def test_check_missing_file(tmp_path):
    proc = gnnc_cli("check", tmp_path / "nope.gnn")
    assert_clean_error(proc)
    assert proc.stderr.startswith("gnnc: error:") and "nope.gnn" in proc.stderr


def test_passes_lists_the_stages():

    proc = gnnc_cli("passes")
    assert proc.returncode == 0, proc.stderr
    listed = re.findall(r"^\s+(\d+)\s+(\S+)$", proc.stdout, re.M)
    assert [name for _, name in listed] == pipeline.all_stage_names()
    assert [int(i) for i, _ in listed] == list(range(len(listed)))
    for stage in ("irgen", "convert-graph-to-loop", "convert-loop-to-scf", "translate-to-llvm"):
        assert stage in proc.stdout


# ---------------------------------------------------------------- gnnc-opt


@pytest.mark.slow
def test_gnnc_opt_reads_a_dumped_graph_stage(tmp_path):
    graph_file = tmp_path / "gcn.mlir"
    proc = gnnc_cli("compile", GCN, "--emit", "graph", "-o", graph_file)
    assert proc.returncode == 0, proc.stderr
    opt = gnnc_opt(graph_file, "-p", "convert-graph-to-loop")
    assert opt.returncode == 0, opt.stderr
    assert "loop.for_dst" in opt.stdout and "graph.gather" not in opt.stdout
    # the compiler's own loop stage: the loop dialect after every loop pass
    cpu = pipeline.CPU_PIPELINE
    loop_passes = cpu[cpu.index("convert-graph-to-loop") : cpu.index("convert-loop-to-openmp")]
    opt = gnnc_opt(graph_file, "-p", ",".join(loop_passes))
    assert opt.returncode == 0, opt.stderr
    loop = gnnc_cli("compile", GCN, "--emit", "loop")
    assert opt.stdout.strip() == loop.stdout.strip()
    assert "llvm_ext.prefetch" in loop.stdout  # prefetch-neighbors ran
    # and onwards, to scf
    scf = gnnc_opt(
        graph_file, "-p", "convert-graph-to-loop,prefetch-neighbors,convert-loop-to-openmp,convert-loop-to-scf"
    )
    assert scf.returncode == 0, scf.stderr
    assert "scf.for" in scf.stdout and "loop.for_dst" not in scf.stdout


@pytest.mark.slow
def test_gnnc_opt_console_script(tmp_path):
    exe = shutil.which("gnnc-opt")
    if exe is None:
        pytest.skip("gnnc-opt is not installed as a console script")
    graph_file = tmp_path / "gcn.mlir"
    assert gnnc_cli("compile", GCN, "--emit", "graph", "-o", graph_file).returncode == 0
    proc = subprocess.run([exe, str(graph_file), "-p", "convert-graph-to-loop"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "loop.for_dst" in proc.stdout
