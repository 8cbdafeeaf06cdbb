"""The tuning cache: the best schedule `gnnc tune` found, per kernel, graph, sizes and machine.

An entry is keyed by

- the kernel: a hash of the source it was compiled from, its name and dtype
  (a kernel edited since it was tuned misses);
- the graph's *signature*: vertex and edge counts and in-degree mean, spread
  and maximum, rounded to three significant digits (`Graph.signature`), not
  the edges themselves: a user who rebuilds the same graph, or shuffles its
  edge ids, still hits;
- the feature sizes of the call (`F=128,H=4`);
- the target and the machine: CPU model and the cores this process may use
  (a schedule tuned on 2 cores says nothing about 64).

`schedule="auto"` at call time reads it (`lookup`); `gnnc tune` writes it
(`store`) and appends each tuning run's measurements to `records.jsonl`, the
training data of the predictor (`gnnc tune --retrain`).

Files live in `$GNNC_TUNE_DIR`, else `~/.cache/gnnc/tuning`, a private
directory (`gnnc/cachedir.py`: made 0700, files 0600; one that others may
write or that another user owns is a CacheError, since its entries pick the
code that runs). Several processes may tune at once: every
read-modify-write of `cache.json` holds an exclusive `flock` on a lock
file and replaces the file atomically (write a temporary file in the same
folder, then `os.replace`), so a reader sees the old file or the new one,
never half of one; records are appended under the same lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import platform
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gnnc.cachedir import FILE_MODE, existing_private_directory, private_directory, warn_unusable
from gnnc.errors import GnncError

#: The tuning cache, as messages name it, and the variable that moves it.
NAME = "tuning cache"
SETTING = "$GNNC_TUNE_DIR"
CACHE_FILE = "cache.json"
RECORDS_FILE = "records.jsonl"
LOCK_FILE = ".lock"
#: Bump when the meaning of an entry changes; older files are ignored, not misread.
FORMAT_VERSION = 1

_log = logging.getLogger(__name__)


def tuning_dir() -> Path:
    """`$GNNC_TUNE_DIR`, else `~/.cache/gnnc/tuning`."""
    env = os.environ.get("GNNC_TUNE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "gnnc" / "tuning"


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo`), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def machine_key(target: str = "cpu") -> str:
    """What a tuned schedule is valid for: target, CPU model, cores."""
    return f"{target}|{cpu_model()}|{usable_cores()} cores"


def kernel_key(source: str, name: str, dtype: str) -> str:
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return f"{name}:{dtype}:{digest}"


def _three_digits(x: float) -> str:
    return f"{x:.3g}"


def graph_key(signature: dict) -> str:
    """The graph part of a key: sizes exact, degree statistics to three digits."""
    return (
        f"V={signature['num_vertices']},"
        + (f"S={signature['num_src']}," if "num_src" in signature else "")
        + f"E={signature['num_edges']},"
        f"mean={_three_digits(signature['deg_mean'])},std={_three_digits(signature['deg_std'])},"
        f"max={signature['deg_max']}"
    )


def dims_key(dims: dict[str, int]) -> str:
    return ",".join(f"{k}={dims[k]}" for k in sorted(dims))


def entry_key(kernel: str, graph_signature: dict, dims: dict[str, int], target: str = "cpu") -> str:
    return " | ".join((kernel, graph_key(graph_signature), dims_key(dims), machine_key(target)))


class TuningCache:
    """`cache.json` and `records.jsonl` in one folder (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = Path(directory) if directory is not None else tuning_dir()
        self._memo: tuple[float, dict] | None = None

    @property
    def cache_path(self) -> Path:
        return self.directory / CACHE_FILE

    @property
    def records_path(self) -> Path:
        return self.directory / RECORDS_FILE

    def make_directory(self) -> None:
        """Creates the directory (0700) if it is missing; CacheError if others may write it,
        GnncError if it cannot be made."""
        try:
            os.close(private_directory(self.directory, NAME, SETTING))
        except OSError as exc:
            raise GnncError(
                f"cannot write the {NAME} in {self.directory}: {exc.strerror or exc}; set {SETTING} to a "
                "writable directory"
            ) from None

    def _check_directory(self) -> bool:
        """Whether there is a directory to read: CacheError if others may write it; one warning,
        and False, where it cannot be read (a file in its place)."""
        try:
            fd = existing_private_directory(self.directory, NAME, SETTING)
        except OSError as exc:
            warn_unusable(self.directory, NAME, exc)
            return False
        if fd is None:
            return False
        os.close(fd)
        return True

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.make_directory()
        with open(self.directory / LOCK_FILE, "a", opener=_private) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict:
        """The entries; an unreadable, malformed or foreign file counts as empty (tuning is an
        optimisation), with a warning for a malformed one (once per version of the file)."""
        try:
            stamp = self.cache_path.stat().st_mtime_ns
        except OSError:
            return {}
        if self._memo is not None and self._memo[0] == stamp:
            return self._memo[1]
        entries, problem = _parse_cache(self.cache_path)
        if problem is not None:
            _log.warning("tuning cache %s ignored: %s", self.cache_path, problem)
        self._memo = (stamp, entries)
        return entries

    def lookup(self, key: str) -> dict | None:
        """The entry for `key` if it has a schedule (text); what else it says, the caller checks."""
        if not self._check_directory():
            return None
        entry = self._read().get(key)
        return entry if isinstance(entry, dict) and isinstance(entry.get("schedule"), str) else None

    def store(self, key: str, entry: dict) -> None:
        with self._locked():
            entries = dict(self._read())
            entries[key] = {**entry, "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            _write_atomically(self.cache_path, json.dumps({"version": FORMAT_VERSION, "entries": entries}, indent=1))
            self._memo = None

    def append_record(self, record: dict) -> None:
        with self._locked():
            with open(self.records_path, "a", opener=_private) as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")

    def records(self) -> list[dict]:
        if not self._check_directory():
            return []
        return read_records(self.records_path)


def _parse_cache(path: Path) -> tuple[dict, str | None]:
    """(the entries of `cache.json`, or {}; what is wrong with it, or None). A file of another
    FORMAT_VERSION is no problem: it is ignored, not misread."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return {}, f"cannot read it ({exc.strerror or exc})"
    except ValueError as exc:  # UnicodeDecodeError too
        return {}, f"not JSON text ({exc})"
    if not isinstance(data, dict):
        return {}, f"a JSON {type(data).__name__}, not an object"
    if data.get("version") != FORMAT_VERSION:
        return {}, None
    entries = data.get("entries", {})
    if not isinstance(entries, dict):
        return {}, f"its 'entries' is a JSON {type(entries).__name__}, not an object"
    return entries, None


def read_records(path: str | os.PathLike) -> list[dict]:
    """Tuning records from a JSON-lines file; lines that do not parse are skipped."""
    out: list[dict] = []
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("times"), dict):
            out.append(record)
    return out


def _private(path: str, flags: int) -> int:
    """An `open` opener: a file created 0600, whatever the umask."""
    fd = os.open(path, flags | os.O_CLOEXEC, FILE_MODE)
    with contextlib.suppress(OSError):
        os.fchmod(fd, FILE_MODE)  # a file of ours made before: private from now on
    return fd


def _write_atomically(path: Path, text: str) -> None:
    # the rename replaces a link planted at `path`, never follows it
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), FILE_MODE)  # mkstemp's 0600 less the umask
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def describe(entry: dict[str, Any]) -> str:
    threads = entry.get("threads")
    sched = entry.get("schedule") or "(as compiled)"
    return f"{sched}" + (f" with {threads} threads" if threads else "")
