"""The compile cache (GNNC_CACHE_DIR) and loading of broken or foreign shared objects.

A cache hit is an entry whose record binds its bytes to the full key of the
source and options (`gnnc/cachedir.py`); everything else found at an entry's
name (a damaged file, another source's entry, a planted pair, a link, a FIFO,
a directory) is rebuilt, never loaded. Most tests build an entry with
`compiler.compile_cached` (which does not load it), break it, and compile
again. The cache directory's own checks (mode, owner, umask) are in
tests/test_cache_dirs.py; what `gnnc.load` checks of a file in
tests/test_load_integrity.py.
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gnnc
from gnnc.cachedir import EntryStore
from gnnc.driver import compiler
from gnnc.errors import ToolchainError
from gnnc.graph import group_edges
from gnnc.ir import abi
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
    # the graph helper (built into the compile cache on first use) loaded from the suite's cache
    # now: a test run alone would otherwise find its entries among this test's
    group_edges.available()
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


def entry_is_valid(so: Path, source: str = SOURCE) -> bool:
    """Whether the cache would take `so` as source's entry."""
    key = compiler.full_cache_key(source, compiler.CompileOptions())
    with EntryStore(so.parent, compiler.CACHE_NAME, compiler.CACHE_SETTING) as store:
        return store.lookup(so.name, key, 1 << 30) is not None


def assert_rebuilt(so: Path, calls: list) -> None:
    calls.clear()
    module = gnnc.compile(SOURCE)
    assert len(calls) == 1, "the broken entry was compiled again"
    assert module.path == so, "in the same place"
    assert entry_is_valid(so) and stat.S_ISREG(so.lstat().st_mode)
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
    # no temporary files are left behind: the entry, its record and the directory's key
    key = first.path.stem
    assert sorted(p.name for p in directory.iterdir()) == [".key", f"{key}.sha256", f"{key}.so"]


def test_one_entry_wanted_at_once_is_built_once(cache, monkeypatch):
    """Two threads (as two ranks or test workers would) compile one new source at once: one
    builds it, the other waits on the entry's build lock and loads what the first stored."""
    import threading
    import time

    directory, calls = cache
    counting = compiler.compile_source

    def slow(*args, **kwargs):
        time.sleep(0.5)  # the other thread reaches the lock while this one builds
        return counting(*args, **kwargs)

    monkeypatch.setattr(compiler, "compile_source", slow)
    paths = []
    threads = [threading.Thread(target=lambda: paths.append(compiler.compile_cached(SOURCE))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(calls) == 1, "built twice"
    assert len(paths) == 2 and paths[0] == paths[1]
    assert not list(directory.glob("*.lock")), "the build lock is left behind"
    check_runs(gnnc.load(paths[0]))


def test_an_unusable_build_lock_builds_anyway(cache):
    """A directory (or a FIFO) at the lock's name: nobody waits on it, the entry is built."""
    directory, calls = cache
    name = f"{compiler.cache_key(SOURCE, compiler.CompileOptions())}.so.lock"
    directory.mkdir(mode=0o700)
    (directory / name).mkdir()
    path = compiler.compile_cached(SOURCE)
    assert len(calls) == 1 and path.exists()
    (directory / name).rmdir()
    os.mkfifo(directory / name, 0o600)
    path.unlink()
    assert compiler.compile_cached(SOURCE) == path and len(calls) == 2


def test_a_file_system_without_flock_builds_unlocked(cache, monkeypatch):
    """flock failing with ENOLCK (some NFS mounts): the entry is built and stored, unlocked."""
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    directory, calls = cache
    monkeypatch.setattr(fcntl, "flock", no_locks)
    path = compiler.compile_cached(SOURCE)
    assert len(calls) == 1 and path.exists()
    assert compiler.compile_cached(SOURCE) == path and len(calls) == 1


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
    assert not directory.exists() or [p.name for p in directory.iterdir()] in ([], [".key"])


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


# ---------------------------------------------------------------- entries that are not this cache's

OTHER_SOURCE = SOURCE.replace("cached_gcn", "other_gcn").replace("+ x[v]", "- x[v]")


def _constructor_so(tmp_path: Path, mark: Path) -> bytes:
    """A shared object whose constructor creates `mark`, with a valid gnnc integrity trailer:
    what someone who can write the cache directory would plant."""
    source = (
        "#include <stdio.h>\n"
        f'__attribute__((constructor)) static void planted(void) {{ FILE *f = fopen("{mark}", "w"); '
        "if (f) fclose(f); }\n"
        "void gnnc_cached_gcn(void) {}\n"
    )
    return abi.with_integrity(_build_c_so(tmp_path, "planted", source).read_bytes())


@needs_cc
def test_a_planted_entry_is_never_loaded(cache, tmp_path):
    """A planted KEY.so with a KEY.sha256 that matches its bytes (the old record), or with a
    record in the new format signed with any key but this directory's: rebuilt, its
    constructor never runs."""
    import hashlib
    import hmac

    _, calls = cache
    so = build_entry()
    mark = tmp_path / "constructor-ran"
    planted = _constructor_so(tmp_path, mark)
    key = compiler.full_cache_key(SOURCE, compiler.CompileOptions())
    digest = hashlib.sha256(planted).hexdigest()
    forged_mac = hmac.new(b"\0" * 32, f"gnnc-cache-entry-v1 {so.name} {key} {digest}".encode(), "sha256").hexdigest()
    for record in (digest + "\n", f"gnnc-cache-entry-v1 {key} {digest} {forged_mac}\n"):
        so.write_bytes(planted)
        so.with_suffix(".sha256").write_text(record)
        assert_rebuilt(so, calls)
        assert not mark.exists(), "the planted constructor ran"
    # the control: loaded, the planted object does run its constructor
    control = tmp_path / "control.so"
    control.write_bytes(planted)
    subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(control)!r})"], check=True)
    assert mark.exists()


def test_another_sources_entry_is_never_loaded(cache):
    """Another source's entry, consistent in itself (its bytes, its record, this directory's key),
    renamed to this source's key: its record names the other key, so it is rebuilt."""
    _, calls = cache
    so = build_entry()
    other = compiler.compile_cached(OTHER_SOURCE, "<string>", compiler.CompileOptions())
    assert entry_is_valid(other, OTHER_SOURCE)
    shutil.copyfile(other, so)
    shutil.copyfile(other.with_suffix(".sha256"), so.with_suffix(".sha256"))
    assert not entry_is_valid(so)
    assert_rebuilt(so, calls)


def test_binary_or_directory_shaped_records_are_rebuilt(cache):
    _, calls = cache
    so = build_entry()
    record = so.with_suffix(".sha256")
    record.write_bytes(bytes(range(256)) * 4)
    assert_rebuilt(so, calls)
    record.unlink()
    record.mkdir()
    (record / "inside").write_text("x")
    assert_rebuilt(so, calls)
    assert record.is_file()


def test_a_directory_in_place_of_the_entry_is_rebuilt(cache):
    _, calls = cache
    so = build_entry()
    so.unlink()
    so.mkdir()
    (so / "nested").mkdir()
    assert_rebuilt(so, calls)


def test_links_at_entry_names_are_replaced_not_followed(cache, tmp_path):
    """A link planted at an entry's name (to a valid entry elsewhere, or to a file of the user's):
    never read through, never written through."""
    directory, calls = cache
    so = build_entry()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in (so.name, so.with_suffix(".sha256").name):
        shutil.copyfile(directory / name, elsewhere / name)
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    for target in (elsewhere / so.name, precious):
        so.unlink()
        so.symlink_to(target)
        assert_rebuilt(so, calls)
        assert not so.is_symlink()
    record = so.with_suffix(".sha256")
    record.unlink()
    record.symlink_to(precious)
    assert_rebuilt(so, calls)
    assert precious.read_text() == "keep me" and not record.is_symlink()
    # the directory's key too: a link in its place is replaced, and the entries signed with it rebuilt
    key = directory / ".key"
    key.unlink()
    key.symlink_to(precious)
    assert_rebuilt(so, calls)
    assert precious.read_text() == "keep me" and not key.is_symlink() and key.stat().st_size == 32


def test_fifos_and_devices_at_entry_names_never_hang(cache, tmp_path):
    """FIFOs (and a device node) named like the entry, its record or the directory's key: a compile
    opens none of them (a FIFO would block forever) and rebuilds. In a child with a timeout."""
    directory, _ = cache
    so = build_entry()
    script = textwrap.dedent(
        f"""
        import os, stat
        from pathlib import Path
        import gnnc
        directory = Path({str(directory)!r})
        so = directory / {so.name!r}
        for name in (so.name, so.with_suffix(".sha256").name, ".key"):
            for kind in ("fifo", "device"):
                path = directory / name
                path.unlink()
                if kind == "fifo":
                    os.mkfifo(path, 0o600)
                elif os.geteuid() == 0:
                    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
                else:
                    continue
                module = gnnc.compile({SOURCE!r})
                assert module.path == so and stat.S_ISREG(path.lstat().st_mode), (name, kind)
                print(name, kind, "rebuilt", flush=True)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "GNNC_CACHE_DIR": str(directory)},
        cwd=Path(__file__).parent.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("rebuilt") >= 3, proc.stdout


# ---------------------------------------------------------------- a cache that cannot be used


def _compiles_uncached(calls: list, expected_warnings: int = 1) -> gnnc.Module:
    with pytest.warns(RuntimeWarning, match="cannot be used") as warned:
        first = gnnc.compile(SOURCE)
        second = gnnc.compile(SOURCE)
    assert len([w for w in warned if "cannot be used" in str(w.message)]) == expected_warnings, "one warning"
    assert len(calls) == 2, "every compile from scratch"
    check_runs(first)
    check_runs(second)
    return first


@pytest.fixture
def fresh_warnings(monkeypatch):
    """The cache's warn-once memory, empty for this test."""
    from gnnc import cachedir

    monkeypatch.setattr(cachedir, "_warned", set())


def test_a_file_in_place_of_the_cache_directory(tmp_path, monkeypatch, cache, fresh_warnings):
    _, calls = cache
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file")
    for directory in (blocker, blocker / "below"):
        calls.clear()
        monkeypatch.setenv("GNNC_CACHE_DIR", str(directory))
        module = _compiles_uncached(calls)
        assert not module.path.is_relative_to(blocker)
        assert blocker.read_text() == "a file"


def test_a_read_only_cache_directory(cache, monkeypatch, fresh_warnings):
    """Entries made before still load; new ones compile without the cache, after one warning.
    (Root writes through a mode of 0500, so for root the refusal is simulated.)"""
    from gnnc import cachedir

    directory, calls = cache
    so = build_entry()
    if os.geteuid() == 0:

        def refuse(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(cachedir, "_write_temporary", refuse)
    else:
        directory.chmod(0o500)
    try:
        calls.clear()
        assert gnnc.compile(SOURCE).path == so and calls == [], "a hit needs no write"
        with pytest.warns(RuntimeWarning, match="cannot be used") as warned:
            other = gnnc.compile(OTHER_SOURCE)
            again = gnnc.compile(OTHER_SOURCE.replace("- x[v]", "* x[v]"))
        assert len([w for w in warned if "cannot be used" in str(w.message)]) == 1, "one warning"
        assert len(calls) == 2 and not other.path.is_relative_to(directory)
        assert "other_gcn" in other.kernels and "other_gcn" in again.kernels
    finally:
        directory.chmod(0o700)


# ---------------------------------------------------------------- the PTX cache


def test_ptx_entries_are_checked_like_objects(cache):
    """The PTX cache took any existing file; now a damaged, planted or foreign .ptx is rebuilt."""
    directory, calls = cache
    options = compiler.CompileOptions(target="cuda")
    ptx = compiler.compile_cached_ptx(SOURCE, "<string>", options)
    good = ptx.read_text()
    assert good.startswith(abi.PTX_METADATA_PREFIX) and len(calls) == 1
    calls.clear()
    assert compiler.compile_cached_ptx(SOURCE, "<string>", options) == ptx and calls == []
    other = compiler.compile_cached_ptx(OTHER_SOURCE, "<string>", options)
    breakages = [
        lambda: ptx.write_text(good.replace("cached_gcn", "cached_gcm", 1)),  # an edit
        lambda: ptx.with_suffix(".sha256").unlink(),  # a planted file without a record
        lambda: (
            shutil.copyfile(other, ptx),
            shutil.copyfile(other.with_suffix(".sha256"), ptx.with_suffix(".sha256")),
        ),
        lambda: (ptx.unlink(), os.mkfifo(ptx)),
    ]
    for breakage in breakages:
        breakage()
        calls.clear()
        assert compiler.compile_cached_ptx(SOURCE, "<string>", options) == ptx
        assert len(calls) == 1 and ptx.read_text() == good


def test_cached_builds_keep_no_stage_text_and_verify_once(cache, monkeypatch):
    """The cache's builds print no IR and verify after the pipeline only (and the frontend's
    module); the same object."""
    from xdsl.dialects.builtin import ModuleOp

    verified = []
    verify = ModuleOp.verify

    def counting(self):
        verified.append(1)
        return verify(self)

    monkeypatch.setattr(ModuleOp, "verify", counting)
    options = compiler.CompileOptions()
    lean = compiler.compile_source(SOURCE, "k.gnn", options, keep_stages=False)
    assert not lean.stages and len(verified) == 2
    full = compiler.compile_source(SOURCE, "k.gnn", options)
    assert len(full.stages) > 10 and len(verified) > 10
    assert lean.object_code == full.object_code


def test_a_pass_breaking_the_ir_is_named_on_a_cached_build(cache, monkeypatch):
    """Verified once at the end, a broken IR is compiled again pass by pass to name the pass."""
    from xdsl.dialects import arith, builtin

    from gnnc.driver import pipeline

    make_pass = pipeline.make_pass

    class Breaking:
        def __init__(self, inner):
            self.inner = inner

        def apply(self, ctx, module):
            self.inner.apply(ctx, module)
            # an i32 constant typed f32: the verifier refuses it
            value = builtin.IntegerAttr(1, builtin.i32)
            module.body.block.add_op(arith.ConstantOp.create(properties={"value": value}, result_types=[builtin.f32]))

    def patched(entry):
        made = make_pass(entry)
        return Breaking(made) if pipeline.stage_name(entry) == "convert-loop-to-scf" else made

    monkeypatch.setattr(pipeline, "make_pass", patched)
    with pytest.raises(gnnc.CompileError, match="internal error: IR after 'convert-loop-to-scf' does not verify"):
        compiler.compile_cached(SOURCE + "\n# broken\n", "k.gnn")
