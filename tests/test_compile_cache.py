"""The compile cache (GNNC_CACHE_DIR) and loading of broken or foreign shared objects.

A note on the order of operations here: glibc's dlopen returns the handle of an
already loaded library when given the same path again, and a library mapped in
this process must not be truncated in place (its pages past the new end would
fault). So every test that corrupts a cache entry builds it with
`compiler.compile_cached` (which does not load it) and loads it only afterwards.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.driver import compiler
from gnnc.errors import ToolchainError
from gnnc.runtime import native
from tests.helpers import assert_matches

EXAMPLES = Path(__file__).parent.parent / "examples"

needs_cc = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc").split()[0]) is None, reason="no C compiler")

#: A kernel of its own, so no other test's cache entry is involved.
SOURCE = """
kernel cached_gcn(x: f32[V, F], w: f32[E]) -> f32[V, F] {
    out[v] = sum(w[e] * x[u]) + x[v]
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache directory, and a counter of real compiles."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("GNNC_CACHE_DIR", str(directory))
    calls = []
    real = compiler.compile_source

    def counting(*args, **kwargs):
        calls.append(args[1] if len(args) > 1 else kwargs.get("file"))
        return real(*args, **kwargs)

    monkeypatch.setattr(compiler, "compile_source", counting)
    return directory, calls


def entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.so"))


def check_runs(module) -> None:
    rng = np.random.default_rng(3)
    n, e, f = 20, 70, 5
    graph = gnnc.Graph(rng.integers(0, n, size=(2, e)), num_vertices=n)
    x = rng.standard_normal((n, f)).astype(np.float32)
    w = rng.standard_normal(e).astype(np.float32)
    want = gnnc.compile(SOURCE, target="reference").cached_gcn(graph, x=x, w=w)
    assert_matches(module.cached_gcn(graph, x=x, w=w), want, graph, np.float32)


def build_entry() -> Path:
    """Builds SOURCE's entry without loading it; returns the .so path."""
    so = compiler.compile_cached(SOURCE, "<string>", compiler.CompileOptions())
    assert so.is_file() and so.with_suffix(".sha256").is_file()
    return so


def assert_rebuilt(so: Path, calls: list) -> None:
    calls.clear()
    module = gnnc.compile(SOURCE)
    assert len(calls) == 1, "the broken entry was compiled again"
    assert module.path == so, "in the same place"
    assert so.with_suffix(".sha256").read_text().strip() == compiler._sha256_file(so)
    check_runs(module)
    calls.clear()
    again = gnnc.compile(SOURCE)
    assert again.path == so and calls == [], "and the repaired entry is used from then on"


# ---------------------------------------------------------------- reuse


def test_cache_dir_follows_the_environment(cache):
    directory, _ = cache
    assert compiler.cache_dir() == directory


def test_second_compile_reuses_the_cached_object(cache):
    directory, calls = cache
    first = gnnc.compile(SOURCE)
    assert len(calls) == 1
    assert entries(directory) == [first.path]
    assert first.path.parent == directory
    stat = first.path.stat()
    second = gnnc.compile(SOURCE)
    assert len(calls) == 1, "not rebuilt"
    assert second.path == first.path
    after = second.path.stat()
    assert (after.st_mtime_ns, after.st_ino) == (stat.st_mtime_ns, stat.st_ino)
    assert entries(directory) == [first.path]
    check_runs(second)
    # no temporary files are left behind
    assert sorted(p.suffix for p in directory.iterdir()) == [".sha256", ".so"]


def test_different_source_or_options_different_entries(cache):
    directory, calls = cache
    base = gnnc.compile(SOURCE).path
    other_source = gnnc.compile(SOURCE.replace("+ x[v]", "- x[v]")).path
    other_opt = gnnc.compile(SOURCE, opt_level=1).path
    paths = {base, other_source, other_opt}
    if platform.machine().lower() in ("x86_64", "amd64"):
        v2 = gnnc.compile(SOURCE, cpu="x86-64-v2")
        assert v2.metadata["cpu"]["level"] == "x86-64-v2"
        check_runs(v2)
        paths.add(v2.path)
    assert len(paths) == len(calls) == len(entries(directory))
    # the keys themselves
    opts = compiler.CompileOptions()
    assert compiler.cache_key(SOURCE, opts) != compiler.cache_key(SOURCE, compiler.CompileOptions(cpu="x86-64-v2"))
    assert compiler.cache_key(SOURCE, opts) != compiler.cache_key(SOURCE + " ", opts)
    assert compiler.cache_key(SOURCE, opts) == compiler.cache_key(SOURCE, compiler.CompileOptions())


def test_native_objects_are_keyed_by_the_host_cpu(monkeypatch):
    """A cache shared with another machine (NFS home, a runner on another CPU) builds its own
    `native` object instead of handing over one this CPU may refuse."""
    from gnnc.target.cpu import codegen

    opts = compiler.CompileOptions()
    here = compiler.cache_key(SOURCE, opts)
    level = compiler.cache_key(SOURCE, compiler.CompileOptions(cpu="x86-64-v2"))
    other = codegen.CpuTarget("native", "znver4", "+avx512f", ("avx512f",))
    monkeypatch.setattr(codegen, "resolve_cpu", lambda level: other)
    assert compiler.cache_key(SOURCE, opts) != here
    assert compiler.cache_key(SOURCE, compiler.CompileOptions(cpu="x86-64-v2")) == level  # a level is a level


# ---------------------------------------------------------------- corrupt entries


def test_truncated_entry_is_rebuilt(cache):
    _, calls = cache
    so = build_entry()
    size = so.stat().st_size
    with open(so, "r+b") as f:
        f.truncate(size // 2)
    assert_rebuilt(so, calls)
    assert so.stat().st_size == size


def test_flipped_bytes_are_rebuilt(cache):
    _, calls = cache
    so = build_entry()
    data = bytearray(so.read_bytes())
    good = bytes(data)
    middle = len(data) // 2
    for i in range(middle, middle + 16):
        data[i] ^= 0xFF
    so.write_bytes(bytes(data))
    assert_rebuilt(so, calls)
    assert so.read_bytes() == good, "the build is deterministic"


def test_missing_digest_is_rebuilt(cache):
    _, calls = cache
    so = build_entry()
    so.with_suffix(".sha256").unlink()
    assert_rebuilt(so, calls)


def test_garbled_digest_is_rebuilt(cache):
    _, calls = cache
    so = build_entry()
    so.with_suffix(".sha256").write_text("not a digest\n")
    assert_rebuilt(so, calls)


def test_missing_object_is_rebuilt(cache):
    _, calls = cache
    so = build_entry()
    so.unlink()
    assert_rebuilt(so, calls)


def test_failed_compile_leaves_no_entry(cache):
    directory, calls = cache
    with pytest.raises(gnnc.SourceError):
        gnnc.compile(SOURCE.replace("w[e]", "y[e]"))
    assert not directory.exists() or list(directory.iterdir()) == []


# ---------------------------------------------------------------- loading foreign or broken objects


def _build_c_so(tmp_path: Path, name: str, source: str) -> Path:
    c = tmp_path / f"{name}.c"
    c.write_text(source)
    so = tmp_path / f"{name}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(c)], check=True, capture_output=True)
    return so


@needs_cc
def test_load_a_non_gnnc_shared_object(tmp_path):
    plain = _build_c_so(tmp_path, "plain", "int add(int a, int b) { return a + b; }\n")
    with pytest.raises(ToolchainError, match="not a gnnc shared object"):
        gnnc.load(plain)
    with pytest.raises(ToolchainError, match="no such shared object"):
        gnnc.load(tmp_path / "missing.so")
    text = tmp_path / "text.so"
    text.write_text("this is not ELF")
    with pytest.raises(ToolchainError):
        gnnc.load(text)


def _fresh_copy(so: Path, tmp_path: Path, name: str, data: bytes | None = None) -> Path:
    """A copy under a path this process never loaded (dlopen caches by path)."""
    out = tmp_path / name
    out.write_bytes(so.read_bytes() if data is None else data)
    return out


def test_load_a_truncated_object(cache, tmp_path):
    so = build_entry()
    data = so.read_bytes()
    half = _fresh_copy(so, tmp_path, "half.so", data[: len(data) // 2])
    with pytest.raises(ToolchainError, match="half.so"):
        gnnc.load(half)
    header_only = _fresh_copy(so, tmp_path, "head.so", data[:64])
    with pytest.raises(ToolchainError):
        gnnc.load(header_only)
    empty = _fresh_copy(so, tmp_path, "empty.so", b"")
    with pytest.raises(ToolchainError):
        gnnc.load(empty)
    # the intact copy still loads and runs
    check_runs(gnnc.load(_fresh_copy(so, tmp_path, "whole.so")))


def test_load_truncated_objects_never_crashes(cache, tmp_path):
    """Truncated at many lengths, in a child process: a SIGBUS would show as a signal exit."""
    so = build_entry()
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        import gnnc
        data = Path({str(so)!r}).read_bytes()
        kinds = set()
        for i, frac in enumerate((0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.97, 0.99, 0.999)):
            p = Path({str(tmp_path)!r}) / f"cut{{i}}.so"
            p.write_bytes(data[: int(len(data) * frac)])
            try:
                gnnc.load(p)
                kinds.add("loaded")
            except gnnc.ToolchainError:
                kinds.add("ToolchainError")
        print(sorted(kinds))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert proc.stdout.strip() == "['ToolchainError']", proc.stdout


def test_missing_cpu_feature_refused_before_any_call(cache, tmp_path, monkeypatch):
    """A .so whose metadata needs a CPU feature this machine lacks is refused at load."""
    if native.host_cpu_flags() is None:
        pytest.skip("no /proc/cpuinfo to check against")
    from gnnc.target.cpu import codegen

    real_embed = codegen.embed_metadata

    def embed_future(ir_module, metadata):
        cpu = {**metadata["cpu"], "level": "x86-64-v9", "features": [*metadata["cpu"]["features"], "avx9000"]}
        real_embed(ir_module, {**metadata, "cpu": cpu})

    monkeypatch.setattr(codegen, "embed_metadata", embed_future)
    result = compiler.compile_source(SOURCE)
    future = tmp_path / "future.so"
    compiler.write_shared_object(result, future)

    called = []
    from gnnc.runtime import module as runtime_module

    monkeypatch.setattr(runtime_module, "Kernel", lambda *a, **k: called.append(a))
    with pytest.raises(ToolchainError) as info:
        gnnc.load(future)
    message = str(info.value)
    assert "avx9000" in message and "x86-64-v9" in message and "recompile" in message
    assert called == [], "no kernel was even looked up"
    # the same object through the cache
    with pytest.raises(ToolchainError, match="avx9000"):
        gnnc.compile(SOURCE)
