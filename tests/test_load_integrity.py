"""What `gnnc.load` checks of a shared object before any of its code runs, and what it maps.

A `.so` ends with an integrity trailer (the SHA-256 of its bytes, `abi.with_integrity`),
so a damaged file (a bit flipped anywhere, an edit, a truncation) is a ToolchainError,
never SIGSEGV, SIGILL, SIGBUS or a silent wrong answer; a file that is whole but whose
kernel records are inconsistent with themselves or with its exports (`runtime/records.py`)
is refused too. What is mapped is a private copy of the checked bytes, so a file rebuilt
at the same path loads anew, and one changed in place harms no module loaded from it.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.driver import compiler
from gnnc.errors import ToolchainError
from gnnc.ir import abi
from gnnc.runtime import records
from tests.helpers import assert_matches

SOURCE = """
kernel checked_gcn(x: f32[V, F], w: f32[E]) -> f32[V, F] {
    out[v] = sum(w[e] * x[u]) + x[v]
}
"""
#: The same kernel, computing something else.
SOURCE_B = SOURCE.replace("+ x[v]", "- x[v]")

ROOT = Path(__file__).parent.parent


def build(tmp_path: Path, name: str = "k.so", source: str = SOURCE, metadata_edit=None) -> Path:
    """Compiles source to tmp_path/name as `gnnc compile -o` does."""
    result = compiler.compile_source(source)
    if metadata_edit is not None:
        metadata_edit(result)
    path = tmp_path / name
    compiler.write_shared_object(result, path)
    return path


def inputs(seed: int = 3):
    rng = np.random.default_rng(seed)
    n, e, f = 20, 70, 5
    graph = gnnc.Graph(rng.integers(0, n, size=(2, e)), num_vertices=n)
    return graph, rng.standard_normal((n, f)).astype(np.float32), rng.standard_normal(e).astype(np.float32)


def check_computes(module, source: str) -> None:
    graph, x, w = inputs()
    want = gnnc.compile(source, target="reference").checked_gcn(graph, x=x, w=w)
    assert_matches(module.checked_gcn(graph, x=x, w=w), want, graph, np.float32)


def edited(data: bytes, old: bytes, new: bytes, *, keep_digest: bool = False) -> bytes:
    """`data` with one occurrence of `old` (in the metadata) replaced by `new` of the same length;
    its integrity trailer recomputed, as a deliberate edit would, unless `keep_digest`."""
    assert len(old) == len(new) and data.count(old) == 1, (old, data.count(old))
    body = data[: -abi.INTEGRITY_TRAILER_BYTES].replace(old, new)
    return body + data[len(body) :] if keep_digest else abi.with_integrity(body)


# ---------------------------------------------------------------- damage


#: Flips tried per run: every one must be a clean error (the issue saw 300 flips give 33
#: SIGSEGV, 4 SIGILL, 1 SIGBUS, 2 ld.so asserts and 6 silently wrong results).
FLIPS = 300

FLIP_SCRIPT = """
import json, os, random, signal, sys
from pathlib import Path
import numpy as np
import gnnc

so, workdir, flips, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
data = so.read_bytes()
rng = random.Random(seed)
# a sample over the whole file, and the places a loader reads first
metadata = data.index(b'"results"')
spots = [(0, 0), (4, 0), (5, 0), (16, 1), (32, 3), (56, 2), (64, 5), (metadata + 40, 1),
         (len(data) - 1, 0), (len(data) - 40, 0)]
spots += [(rng.randrange(len(data)), rng.randrange(8)) for _ in range(flips - len(spots))]
outcomes = {}
for i, (offset, bit) in enumerate(spots):
    flipped = bytearray(data)
    flipped[offset] ^= 1 << bit
    path = workdir / f"flip{i}.so"
    path.write_bytes(bytes(flipped))
    pid = os.fork()
    if pid == 0:  # each flip in a process of its own: a crash is reported, not suffered
        signal.alarm(30)  # and a hang is a SIGALRM
        code = 3
        try:
            module = gnnc.load(path)
            g = gnnc.Graph(np.array([[0, 1, 2], [1, 2, 0]]), num_vertices=3)
            module.checked_gcn(g, x=np.ones((3, 2), np.float32), w=np.ones(3, np.float32))
            code = 2  # loaded and ran: the damage went unseen
        except gnnc.ToolchainError:
            code = 0
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        outcome = f"signal {os.WTERMSIG(status)}"
    else:
        outcome = {0: "ToolchainError", 2: "loaded", 3: "?", 4: "another exception"}[os.WEXITSTATUS(status)]
    outcomes.setdefault(outcome, []).append([offset, bit])
    path.unlink()
print(json.dumps(outcomes))
"""


def test_flipped_bits_are_clean_errors(tmp_path):
    """A sample of single-bit flips over a whole `.so`, each loaded (and, were it to load, called)
    in a forked child: every one is a ToolchainError; a crash or a hang names the offset and bit."""
    so = build(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", FLIP_SCRIPT, str(so), str(tmp_path), str(FLIPS), "29"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    outcomes = json.loads(proc.stdout.splitlines()[-1])
    bad = {k: v for k, v in outcomes.items() if k != "ToolchainError"}
    assert not bad, f"flips (offset, bit) that were not a clean error: {bad}"
    assert len(outcomes["ToolchainError"]) == FLIPS


def test_a_one_byte_edit_of_a_result_shape(tmp_path):
    """The issue's edit (a result's shape in the metadata), which overwrote memory after `out=`:
    refused by the digest; made consistently (digest recomputed), by the records' check."""
    data = build(tmp_path).read_bytes()
    old = b'"name":"out","shape":["F"]'
    damaged = tmp_path / "damaged.so"
    damaged.write_bytes(edited(data, old, old.replace(b"F", b"G"), keep_digest=True))
    with pytest.raises(ToolchainError, match="damaged: its bytes do not match"):
        gnnc.load(damaged)
    crafted = tmp_path / "crafted.so"
    crafted.write_bytes(edited(data, old, old.replace(b"F", b"G")))
    with pytest.raises(ToolchainError, match="inconsistent .*G, which no input binds"):
        gnnc.load(crafted)


def test_a_truncated_trailer_or_none(tmp_path):
    data = build(tmp_path).read_bytes()
    for cut, name in ((abi.INTEGRITY_TRAILER_BYTES, "stripped.so"), (1, "cut.so")):
        path = tmp_path / name
        path.write_bytes(data[:-cut])
        with pytest.raises(ToolchainError, match="no gnnc integrity trailer.*recompile"):
            gnnc.load(path)


def test_non_regular_files_are_refused_without_blocking(tmp_path):
    """A FIFO given to gnnc.load would block a read forever; a directory is no object. In a child."""
    fifo = tmp_path / "k.so"
    os.mkfifo(fifo)
    code = f"import gnnc\nfor p in ({str(fifo)!r}, {str(tmp_path)!r}):\n"
    code += "    try:\n        gnnc.load(p)\n    except gnnc.ToolchainError as e:\n        print(e)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("not a regular file") == 2, proc.stdout


# ---------------------------------------------------------------- whole but inconsistent


def test_an_argument_count_the_code_does_not_take(tmp_path, monkeypatch):
    """A record listing groups of arguments the compiled function does not take (here a source
    sweep's two): refused at load, where a call would have passed arguments the code never reads
    and read ones it was never given."""
    from gnnc.target.cpu import codegen

    real = codegen.embed_metadata

    def claim_a_source_sweep(ir_module, metadata):
        kernels = [{**k, "abi": {**k["abi"], "source_sweep": True}} for k in metadata["kernels"]]
        real(ir_module, {**metadata, "kernels": kernels})

    monkeypatch.setattr(codegen, "embed_metadata", claim_a_source_sweep)
    so = build(tmp_path)
    with pytest.raises(ToolchainError, match=r"compiled with (\d+) arguments but its metadata lists (\d+)"):
        gnnc.load(so)


def test_a_kernel_the_object_does_not_export(tmp_path):
    data = build(tmp_path).read_bytes()
    renamed = edited(data, b'"name":"checked_gcn"', b'"name":"checked_gcm"')
    renamed = edited(renamed, b'"symbol":"gnnc_checked_gcn"', b'"symbol":"gnnc_checked_gcm"')
    path = tmp_path / "renamed.so"
    path.write_bytes(renamed)
    with pytest.raises(ToolchainError, match="does not export gnnc_checked_gcm"):
        gnnc.load(path)


def _metadata(tmp_path) -> dict:
    return gnnc.load(build(tmp_path)).metadata


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda k: k.update(name="no good"), "not an identifier"),
        (lambda k: k.update(symbol="gnnc_other"), "its symbol is not gnnc_checked_gcn"),
        (lambda k: k.pop("params"), "does not parse"),
        (lambda k: k.update(dtype="f16"), "does not parse"),
        (lambda k: k["results"][0].update(shape=["H"]), "H, which no input binds"),
        (lambda k: k["results"][0].update(shape=[-4]), "out of range"),
        (lambda k: k["results"][0].update(domain="X"), "unknown domain"),
        (lambda k: k["results"][0].update(name="x"), "distinct names"),
        (lambda k: k["abi"].update(scratch=[["Q"]]), "Q, which no input binds"),
        (lambda k: k["abi"].update(dims=["F", "Z"]), "Z, which no input binds"),
        (lambda k: k["abi"].update(sizes={"F": 0}), "out of range"),
        (lambda k: k["abi"].update(partitions=-1), "out of range"),
        (lambda k: k["abi"].update(temps=[{"domain": None, "shape": []}]), "no vertex, edge or pair rows"),
        (lambda k: k["abi"].update(temps=[{"shape": []}]), "does not parse"),
        (lambda k: k.update(abi=[]), "no ABI record"),
    ],
)
def test_inconsistent_records_are_refused(tmp_path, edit, problem):
    metadata = _metadata(tmp_path)
    records.check_records(metadata, "k.so")  # as compiled: consistent
    edit(metadata["kernels"][0])
    with pytest.raises(ToolchainError, match=f"inconsistent .*{problem}"):
        records.check_records(metadata, "k.so")


def test_two_kernels_of_one_name_and_records_of_no_shape(tmp_path):
    metadata = _metadata(tmp_path)
    twice = {**metadata, "kernels": metadata["kernels"] * 2}
    with pytest.raises(ToolchainError, match="another kernel has its name"):
        records.check_records(twice, "k.so")
    for kernels in ("not a list", ["not a record"], [{"name": 3}]):
        with pytest.raises(ToolchainError):
            records.check_records({**metadata, "kernels": kernels}, "k.so")


# ---------------------------------------------------------------- what is mapped


def test_a_path_rebuilt_in_place_loads_the_new_kernel(tmp_path):
    """The issue's case: rebuild k.so at the same path, load it again in the same process. dlopen
    alone returned the old library's handle for the old path; each load is a copy of its own."""
    path = build(tmp_path, source=SOURCE)
    first = gnnc.load(path)
    check_computes(first, SOURCE)
    build(tmp_path, source=SOURCE_B)  # replaced by rename: another inode
    second = gnnc.load(path)
    check_computes(second, SOURCE_B)
    check_computes(first, SOURCE)  # the first module keeps its own code
    # rewritten in place (same inode, truncated first): what is mapped is not the file
    data = build(tmp_path, "a.so", source=SOURCE).read_bytes()
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(data)
    check_computes(second, SOURCE_B)
    check_computes(gnnc.load(path), SOURCE)


def test_a_c_caller_dlopens_the_object_as_it_is(tmp_path):
    """The trailer is past everything the dynamic linker reads: plain dlopen from C still works."""
    path = build(tmp_path)
    library = ctypes.CDLL(str(path))
    assert ctypes.c_int64.in_dll(library, abi.arity_symbol("gnnc_checked_gcn")).value > 0
    assert library.gnnc_checked_gcn is not None
    size = ctypes.c_int64.in_dll(library, "gnnc_metadata_size").value
    assert json.loads((ctypes.c_char * size).in_dll(library, "gnnc_metadata").raw)["abi_version"] == abi.ABI_VERSION


def _mapped(name: str) -> int:
    return sum(f"memfd:gnnc:{name}" in line for line in Path("/proc/self/maps").read_text().splitlines())


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="no /proc")
def test_a_module_nothing_refers_to_is_unloaded(tmp_path):
    """dlclose once the last reference goes, even after a call on several threads (libgomp's
    workers outlive it: libgomp itself stays loaded)."""
    path = build(tmp_path, "unload_me.so")
    graph, x, w = inputs()
    module = gnnc.load(path)
    kernel = module.checked_gcn
    kernel(graph, x=x, w=w, threads=2)
    assert _mapped("unload_me.so") > 0
    del module
    gc.collect()
    assert _mapped("unload_me.so") > 0, "a kernel still refers to it"
    del kernel
    gc.collect()
    assert _mapped("unload_me.so") == 0
    again = gnnc.load(path)
    check_computes(again, SOURCE)
    again.checked_gcn(graph, x=x, w=w, threads=2)


def test_the_loader_runs_no_compiler():
    code = textwrap.dedent(
        """
        import sys, gnnc.runtime.native, gnnc.runtime.records
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('xdsl', 'llvmlite')))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_loads_and_unloads_never_mix_up_kernels(tmp_path):
    """Each load's name is new among the libraries loaded (their descriptors are closed once
    mapped, so numbers come back): loads of two sources, interleaved with unloads, each run
    their own kernel."""
    paths = {source: build(tmp_path, f"{i}.so", source) for i, source in enumerate((SOURCE, SOURCE_B))}
    alive: list[tuple[str, gnnc.Module]] = []
    for step in range(8):
        source = (SOURCE, SOURCE_B)[step % 2]
        alive.append((source, gnnc.load(paths[source])))
        if step % 3 == 2:
            del alive[0]
            gc.collect()
        for want, module in alive:
            check_computes(module, want)
