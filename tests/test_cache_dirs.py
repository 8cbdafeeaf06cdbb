"""The caches' directories (gnnc/cachedir.py): made 0700 whatever the umask, files 0600, and
refused with a CacheError naming the fix where other users could write them or another user
owns them: the compile cache, the PTX cache and the tuning cache alike.

Whoever can write a cache directory can run code in every later process that compiles
(docs/guide/security.md). Another owner is real where the tests run as root (chown), and
simulated otherwise (a different effective uid).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import gnnc
from gnnc.autotune.cache import TuningCache
from gnnc.driver import compiler
from gnnc.errors import CacheError
from gnnc.ir import abi

SOURCE = """
kernel dir_gcn(x: f32[V, F], w: f32[E]) -> f32[V, F] {
    out[v] = sum(w[e] * x[u])
}
"""

ENTRY = {"schedule": "prefetch 4", "threads": 1}
RECORD = {"kernel": "k", "times": {"prefetch 4": 1.0}}


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """The compile cache's directory (below parents that do not exist yet) and the tuning cache's."""
    kernels = tmp_path / "home" / ".cache" / "gnnc" / "kernels"
    tuning = tmp_path / "tuning"
    monkeypatch.setenv("GNNC_CACHE_DIR", str(kernels))
    monkeypatch.setenv("GNNC_TUNE_DIR", str(tuning))
    return kernels, tuning


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def fill(kernels: Path, tuning: Path) -> None:
    """An entry in each cache."""
    gnnc.compile(SOURCE)
    compiler.compile_cached_ptx(SOURCE, "<string>", compiler.CompileOptions(target="cuda"))
    cache = TuningCache()
    cache.store("some key", ENTRY)
    cache.append_record(RECORD)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_private_whatever_the_umask(dirs, tmp_path, umask):
    kernels, tuning = dirs
    old = os.umask(umask)
    try:
        fill(kernels, tuning)
    finally:
        os.umask(old)
    for directory in (kernels, kernels.parent, kernels.parent.parent, tuning):
        assert mode(directory) == 0o700, directory
    suffixes = sorted(p.suffix or p.name for p in kernels.iterdir())
    assert suffixes == [".key", ".ptx", ".sha256", ".sha256", ".so"]
    for path in [*kernels.iterdir(), *tuning.iterdir()]:
        assert mode(path) == 0o600, path
    assert sorted(p.name for p in tuning.iterdir()) == [".lock", "cache.json", "records.jsonl"]
    assert TuningCache().lookup("some key")["schedule"] == "prefetch 4"


@pytest.mark.parametrize("bad", [0o777, 0o770, 0o757, 0o1777])
def test_a_directory_others_may_write_is_refused(dirs, bad):
    kernels, tuning = dirs
    fill(kernels, tuning)
    kernels.chmod(bad)
    tuning.chmod(bad)
    for compile_it in (
        lambda: gnnc.compile(SOURCE),
        lambda: gnnc.compile(SOURCE.replace("dir_gcn", "new_gcn")),
        lambda: compiler.compile_cached_ptx(SOURCE, "<string>", compiler.CompileOptions(target="cuda")),
    ):
        with pytest.raises(CacheError, match="writable by") as info:
            compile_it()
        assert f"chmod 700 {kernels}" in str(info.value) and "$GNNC_CACHE_DIR" in str(info.value)
    for use in (lambda c: c.lookup("some key"), lambda c: c.store("other key", ENTRY), lambda c: c.records()):
        with pytest.raises(CacheError, match=f"chmod 700 {tuning}.*GNNC_TUNE_DIR"):
            use(TuningCache())
    # readable by others is not writable by them
    kernels.chmod(0o755)
    tuning.chmod(0o755)
    gnnc.compile(SOURCE)
    assert TuningCache().lookup("some key") is not None


@pytest.mark.skipif(not Path("/usr/bin/cc").exists() and not Path("/bin/cc").exists(), reason="no C compiler")
def test_a_planted_entry_in_a_shared_directory_never_runs(dirs, tmp_path):
    """The issue's case: a cache directory anyone may write, an entry planted in it with a record
    that matches: refused before anything in it is read."""
    kernels, _ = dirs
    kernels.mkdir(parents=True)
    kernels.chmod(0o777)
    mark = tmp_path / "constructor-ran"
    c = tmp_path / "planted.c"
    c.write_text(f'#include <stdio.h>\n__attribute__((constructor)) static void f(void) {{ fopen("{mark}", "w"); }}\n')
    so = tmp_path / "planted.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(c)], check=True, capture_output=True)
    name = compiler.cache_key(SOURCE, compiler.CompileOptions())
    (kernels / f"{name}.so").write_bytes(abi.with_integrity(so.read_bytes()))
    with pytest.raises(CacheError):
        gnnc.compile(SOURCE)
    assert not mark.exists()


def _owned_by_someone_else(monkeypatch, *paths: Path) -> None:
    if os.geteuid() == 0:
        for path in paths:
            os.chown(path, 65534, 65534)
    else:
        other = os.geteuid() + 1
        monkeypatch.setattr(os, "geteuid", lambda: other)


def test_a_directory_of_another_user_is_refused(dirs, monkeypatch):
    kernels, tuning = dirs
    fill(kernels, tuning)
    _owned_by_someone_else(monkeypatch, kernels, tuning)
    with pytest.raises(CacheError, match="owned by another user.*set \\$GNNC_CACHE_DIR to a directory of your own"):
        gnnc.compile(SOURCE)
    with pytest.raises(CacheError, match="owned by another user"):
        compiler.compile_cached_ptx(SOURCE, "<string>", compiler.CompileOptions(target="cuda"))
    with pytest.raises(CacheError, match="owned by another user.*GNNC_TUNE_DIR"):
        TuningCache().lookup("some key")
    with pytest.raises(CacheError, match="owned by another user"):
        TuningCache().store("other key", ENTRY)


def test_entries_others_could_have_written_are_rebuilt(dirs, monkeypatch):
    """In a private directory, an entry file writable by others (left from a laxer past), or
    owned by another user, is not trusted: rebuilt, and the rebuilt one is 0600 and ours."""
    kernels, _ = dirs
    so = gnnc.compile(SOURCE).path
    calls = []
    real = compiler.compile_source
    monkeypatch.setattr(compiler, "compile_source", lambda *a, **k: calls.append(1) or real(*a, **k))
    so.chmod(0o666)
    assert gnnc.compile(SOURCE).path == so and len(calls) == 1
    assert mode(so) == 0o600
    if os.geteuid() == 0:
        os.chown(so.with_suffix(".sha256"), 65534, 65534)
        assert gnnc.compile(SOURCE).path == so and len(calls) == 2
        assert so.with_suffix(".sha256").stat().st_uid == 0


def test_the_cache_error_is_a_gnnc_error_the_cli_prints(dirs, tmp_path):
    """`gnnc tune` on a shared tuning directory: the message, no traceback."""
    _, tuning = dirs
    tuning.mkdir()
    tuning.chmod(0o777)
    code = "import gnnc, sys; from gnnc.autotune.cache import TuningCache\ntry:\n    TuningCache().lookup('k')\n"
    code += "except gnnc.GnncError as e:\n    print(type(e).__name__, e)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("CacheError the tuning cache directory")
