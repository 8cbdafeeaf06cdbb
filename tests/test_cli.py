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
    # a file is named by its stage's pass (`expand-log{rows_only=true}` -> expand-log)
    assert [f.stem.split("-", 1)[1] for f in files] == [pipeline.stage_name(s) for s in stages]
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


@pytest.mark.slow
def test_header_says_which_kernels_read_no_edge_ids(tmp_path):
    so, header = tmp_path / "k.so", tmp_path / "k.h"
    proc = gnnc_cli("compile", EXAMPLES / "sage_mean.gnn", "-o", so, "--header", header)
    assert proc.returncode == 0, proc.stderr
    assert "reads no edge ids: in_eid (and part_eid) may be one-element arrays" in header.read_text()
    proc = gnnc_cli("compile", GAT, "-o", so, "--header", header)
    assert proc.returncode == 0, proc.stderr
    assert "reads no edge ids" not in header.read_text()  # its softmax keeps a weight per edge


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


def _readme_commands() -> list[list[str]]:
    """The IR-debugging commands of the README, as words (the quotes of a -p argument removed)."""
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("**IR debugging.**") :]
    block = block[block.index("```sh") + 5 : block.index("```", block.index("```sh") + 5)]
    return [[w.strip("'") for w in line.split()] for line in block.strip().splitlines()]


def test_the_readme_gnnc_opt_example_works(tmp_path):
    commands = _readme_commands()
    assert commands[0] == ["gnnc", "compile", "examples/gcn.gnn", "--emit", "graph", "-o", "gcn.mlir"]
    assert commands[1] == ["gnnc-opt", "gcn.mlir", "-p", "convert-graph-to-loop,convert-loop-to-scf"]
    assert commands[2][:3] == ["gnnc-opt", "gcn.mlir", "-p"]

    # exactly that sequence, through python -m (the console scripts run the installed copy),
    # the example read from the repository and gcn.mlir written to a temporary directory
    def run(words: list[str]) -> subprocess.CompletedProcess:
        args = [
            str(ROOT / w) if w.startswith("examples/") else str(tmp_path / w) if w == "gcn.mlir" else w for w in words
        ]
        return gnnc_cli(*args[1:]) if words[0] == "gnnc" else gnnc_opt(*args[1:])

    proc = run(commands[0])
    assert proc.returncode == 0, proc.stderr
    assert "graph.aggregate" in (tmp_path / "gcn.mlir").read_text()
    opt = run(commands[1])
    assert opt.returncode == 0, opt.stderr
    assert "scf.for" in opt.stdout and "loop.for_" not in opt.stdout and "graph." not in opt.stdout
    # the option example: the same, tiled by 4
    tiled = run(commands[2])
    assert tiled.returncode == 0, tiled.stderr
    assert "scf.for" in tiled.stdout and "loop.for_" not in tiled.stdout
    assert tiled.stdout != opt.stdout


def test_schedule_directives_are_pass_options_of_gnnc_opt(tmp_path):
    graph_file, loop_file = tmp_path / "gat.mlir", tmp_path / "gat-loop.mlir"
    assert gnnc_cli("compile", GAT, "--emit", "graph", "-o", graph_file).returncode == 0
    lowered = gnnc_opt(graph_file, "-p", "convert-graph-to-loop", "-o", loop_file)
    assert lowered.returncode == 0, lowered.stderr
    text = loop_file.read_text()
    assert "loop.for_tile" not in text and "tile =" not in text

    tiled = gnnc_opt(loop_file, "-p", "tile-features{size=4}")
    assert tiled.returncode == 0, tiled.stderr
    assert re.search(r'loop\.for_tile %\d+ by 4 dim "F"', tiled.stdout)

    # several directives in one pipeline, each checked in the output
    opt = gnnc_opt(
        loop_file,
        "-p",
        'specialize-sizes{sizes="F 32"},prefetch-neighbors{distance=0},order-destinations{order=degree},'
        "tile-features{size=8},vectorize-rows{width=4}",
    )
    assert opt.returncode == 0, opt.stderr
    out = opt.stdout
    assert "llvm_ext.prefetch" not in out  # prefetch 0
    assert "loop.dst_at" in out and "\\22order\\22: \\22degree\\22" in out  # the runtime supplies the degree order
    assert "\\22sizes\\22: {\\22F\\22: 32}" in out and "arith.constant 32 : i64" in out
    assert re.search(r"loop\.for_tile %\d+ by 8", out) and "arith.constant 4 : index" in out
    # every entry the options gave was consumed; the thread mapping is convert-loop-to-openmp's
    assert re.findall(r"schedule \{[^}]*\}", out) == ['schedule {parallel = "dst"}']

    # the lowering's directives: partitions, then partition-sources implements them
    parts = gnnc_opt(graph_file, "-p", "convert-graph-to-loop{partition=3},partition-sources")
    assert parts.returncode == 0, parts.stderr
    assert "loop.for_partition 3" in parts.stdout


@pytest.mark.parametrize(
    "passes, message",
    [
        (
            "tile-features{size=0}",
            "tile-features{size=0}: expected a positive integer (the feature tile size) after "
            "'tile features', found '0'",
        ),
        ("vectorize-edges{lanes=3}", "'vectorize edges' takes a power of two up to 64, found 3"),
        ("convert-graph-to-loop{target=gpu}", "unknown target; use one of cpu, cuda"),
        ("order-destinations{order=random}", "unknown destination order 'random'"),
        ("tile-features{width=4}", 'Provided arguments ["width"] not found'),
    ],
)
def test_gnnc_opt_refuses_a_bad_option_cleanly(tmp_path, passes, message):
    graph_file = tmp_path / "gcn.mlir"
    assert gnnc_cli("compile", GCN, "--emit", "graph", "-o", graph_file).returncode == 0
    proc = gnnc_opt(graph_file, "-p", passes)
    assert_clean_error(proc)
    assert proc.stderr.startswith("gnnc-opt: error: ") and message in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "text, message",
    [
        ("builtin.module {\n  graph.nonsense\n}\n", "Operation graph.nonsense is not registered"),
        (
            "func.func @k() {\n  loop.for_partition 0 {\n  ^bb0(%p: index):\n    loop.yield\n  }\n  func.return\n}\n",
            "'loop.for_partition' needs at least one partition, got 0",
        ),
    ],
)
def test_gnnc_opt_refuses_bad_ir_cleanly(tmp_path, text, message):
    """IR that does not parse, or does not verify, is the user's error: a message, not a traceback."""
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    proc = gnnc_opt(path)
    assert_clean_error(proc)
    assert proc.stderr.startswith("gnnc-opt: error: ") and message in proc.stderr, proc.stderr


def test_passes_lists_every_pass_with_its_summary_and_options():
    proc = gnnc_cli("passes")
    assert proc.returncode == 0, proc.stderr
    catalogue = proc.stdout[proc.stdout.index("passes (gnnc-opt") :]
    for name, cls in pipeline.PASSES.items():
        assert f"\n  {name}\n" in catalogue, name
        if cls.__doc__:
            assert cls.__doc__.strip().splitlines()[0] in catalogue, name
    for option in (
        "size: int | None = none",
        "target: str = cpu",
        "edge-order: str | None = none",
        "strategy: str | None = none",
        "lanes: int | None = none",
    ):
        assert option in catalogue, option
    assert "`tile features SIZE` for every kernel" in catalogue  # an option's own docstring
    cuda = gnnc_cli("passes", "--target", "cuda")
    assert "   9  convert-graph-to-loop{target=cuda}\n" in cuda.stdout
    assert "   2  relation-transform-first{form=per_edge}\n" in cuda.stdout


@pytest.mark.parametrize("command", [["passes"], ["check", str(GAT)]])
def test_a_closed_pipe_ends_the_command_quietly(command):
    """`gnnc passes | head`: the reader leaves early; gnnc stops with status 1 and no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write fails with EPIPE, however short the output
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gnnc.tools.cli", *command],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "", proc.stderr


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
