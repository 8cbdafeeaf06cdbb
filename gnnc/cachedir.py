"""The private directories gnnc's caches live in, and how files go in and come out of them.

Loading a cached shared object runs its code, so a cache directory is as
trusted as the code in it (docs/guide/security.md). Every cache (compiled
objects, PTX, tuning) goes through here:

- `private_directory` creates a directory 0700 (its missing parents too)
  whatever the umask, and refuses (CacheError) one that is writable by group
  or others or owned by another user. The caller works through the
  descriptor it returns, so the directory checked is the directory used.
- `read_entry` reads a regular file that this user owns and nobody else may
  write, without following a link and without opening anything else: a
  FIFO, device or directory named like an entry is a miss, never a hang.
- `write_entry` writes a file 0600 under a temporary name and renames it
  over the entry, whatever was there (a planted link is replaced, not
  followed; a directory is removed).
- `EntryStore` keeps digest-checked entries (`NAME.so` or `NAME.ptx` and
  its record `NAME.sha256`; see `EntryStore`).

A directory that exists but cannot be used (read-only, a file in its place)
is an OSError for the caller, which goes on without the cache after one
warning (`warn_unusable`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import logging
import os
import secrets
import shutil
import stat
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

from gnnc.errors import CacheError

_log = logging.getLogger(__name__)

#: The mode of every directory gnnc creates for a cache, and of every file it writes there.
DIR_MODE = 0o700
FILE_MODE = 0o600

#: Never follow a link at the entry's name; never wait for a FIFO's writer.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


#: The compile cache (kernels' shared objects, PTX, the graph layer's helper), as messages name
#: it, and the variable that moves it.
CACHE_NAME = "compile cache"
CACHE_SETTING = "$GNNC_CACHE_DIR"


def cache_dir() -> Path:
    """The compile cache's directory: $GNNC_CACHE_DIR, else $XDG_CACHE_HOME/gnnc/kernels."""
    base = os.environ.get("GNNC_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gnnc" / "kernels"


def private_directory(path: Path, what: str, setting: str) -> int:
    """An open descriptor of the directory `path`, created 0700 with its missing parents.

    Raises CacheError if it is owned by another user or writable by group or
    others (`what` names the cache, `setting` the variable that moves it);
    OSError if it cannot be created or opened. The caller closes the descriptor.
    """
    _make_directories(path)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        check_private(os.fstat(fd), path, what, setting)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _make_directories(path: Path) -> None:
    for p in reversed([path, *path.parents]):
        if os.path.isdir(p):
            continue
        try:
            os.mkdir(p, DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another process, or a file: opening it says which
        os.chmod(p, DIR_MODE)  # a umask such as 0o277 would leave it unwritable


def check_private(st: os.stat_result, path: Path, what: str, setting: str) -> None:
    """Raises CacheError unless `st` (a directory's) is this user's and writable by nobody else."""
    me = os.geteuid()
    if st.st_uid != me:
        raise CacheError(
            f"the {what} directory {path} is owned by another user (uid {st.st_uid}; you are {me}), "
            f"who could run code in your processes through it: set {setting} to a directory of your own"
        )
    if st.st_mode & 0o022:
        who = {0o020: "its group", 0o002: "every user", 0o022: "its group and every user"}[st.st_mode & 0o022]
        raise CacheError(
            f"the {what} directory {path} is writable by {who} (mode {stat.S_IMODE(st.st_mode):o}), who could run "
            f"code in your processes through it: run 'chmod 700 {path}' (and empty it if you do not trust "
            f"what is in it), or set {setting} to a private directory"
        )


def existing_private_directory(path: Path, what: str, setting: str) -> int | None:
    """`private_directory` for a reader: None where `path` does not exist (nothing to read)."""
    if not os.path.lexists(path):
        return None
    return private_directory(path, what, setting)


def _trusted_file(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def read_entry(dir_fd: int, name: str, limit: int) -> bytes | None:
    """The bytes of the file `name` in the directory, or None: missing, not a regular file
    (a link, FIFO, device or directory is never opened to find out), not this user's,
    writable by others, longer than `limit`, or unreadable."""
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not _trusted_file(before) or before.st_size > limit:
            return None
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        with open(fd, "rb") as f:
            now = os.fstat(f.fileno())
            if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) or not _trusted_file(now):
                return None  # replaced between the two looks
            data = f.read(limit + 1)
    except OSError:
        return None
    return data if len(data) <= limit else None


def _write_temporary(dir_fd: int, name: str, data: bytes) -> str:
    """A new file 0600 holding `data`, under a temporary name beside `name`; returns the name."""
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, _CREATE_FLAGS, FILE_MODE, dir_fd=dir_fd)
    try:
        with open(fd, "wb") as f:
            os.fchmod(f.fileno(), FILE_MODE)  # whatever the umask
            f.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return tmp


def write_entry(dir_fd: int, name: str, data: bytes) -> None:
    """Writes `name` whole or not at all (a reader sees the old file or the new one), mode 0600.
    Whatever had the name goes: a link is replaced, not followed; a directory is removed."""
    tmp = _write_temporary(dir_fd, name, data)
    try:
        _replace(dir_fd, tmp, name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def _replace(dir_fd: int, tmp: str, name: str) -> None:
    try:
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except IsADirectoryError:
        shutil.rmtree(name, dir_fd=dir_fd)  # in gnnc's own cache, in an entry's place
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


_warned: set[tuple[str, str]] = set()


def warn_unusable(path: Path, what: str, exc: OSError) -> None:
    """Says once per directory and process that a cache cannot be used and gnnc goes on without it."""
    if (str(path), what) in _warned:
        return
    _warned.add((str(path), what))
    reason = exc.strerror or str(exc)
    warnings.warn(
        f"the {what} directory {path} cannot be used ({reason}): going on without the {what}",
        RuntimeWarning,
        stacklevel=3,
    )


#: Its record's suffix: `NAME.sha256` beside `NAME.so` or `NAME.ptx`.
RECORD_SUFFIX = ".sha256"
#: An entry's build lock (`EntryStore.building`): `NAME.so.lock`.
LOCK_SUFFIX = ".lock"
#: A FIFO planted at a lock's name must not block the open; never follow a link.
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: The directory's own random key (32 bytes, 0600) the records are signed with.
KEY_FILE = ".key"
_KEY_BYTES = 32
_RECORD_TAG = "gnnc-cache-entry-v1"


#: Where `EntryStore.lookup_or_build`'s bytes came from.
CACHED, BUILT_ELSEWHERE, BUILT, NOT_STORED = "cached", "built by another process", "built", "built, not stored"


class EntryStore:
    """Digest-checked entries in a private directory, as a context manager (it holds the directory open).

    An entry `NAME.so` (or `.ptx`) has a record `NAME.sha256`: one line of
    the full digest of the entry's cache key (the source, options, versions
    and CPU `NAME` abbreviates), the SHA-256 of its bytes, and an HMAC of
    both under the directory's key (`.key`, made on the first store). A hit
    needs all three to match, so an entry of another source or options
    renamed in, a truncated or edited file, or a pair written by anything
    that cannot read this directory (copied from another cache, planted) is
    rebuilt, never loaded.
    """

    def __init__(self, path: Path, what: str, setting: str):
        self.path = path
        self.what = what
        self._fd = private_directory(path, what, setting)
        self._key: bytes | None = None

    def __enter__(self) -> EntryStore:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        os.close(self._fd)

    def lookup(self, name: str, key_digest: str, limit: int) -> bytes | None:
        """The entry's bytes if its record binds them to `key_digest`, else None (rebuild it)."""
        data = read_entry(self._fd, name, limit)
        record = read_entry(self._fd, _record_name(name), 1024)
        if data is None or record is None:
            return None
        key = self._secret(create=False)
        if key is not None and hmac.compare_digest(record, _record(key, name, key_digest, data)):
            return data
        fields = record.decode("ascii", "replace").split()
        if len(fields) == 4 and fields[0] == _RECORD_TAG and fields[1] == key_digest and key is not None:
            if fields[2] == hashlib.sha256(data).hexdigest():
                _log.warning("%s: not written with this cache's key (copied or planted): rebuilt", self.path / name)
            else:
                _log.info("%s: its bytes changed since it was written: rebuilt", self.path / name)
        elif len(fields) == 4 and fields[0] == _RECORD_TAG and fields[1] != key_digest:
            _log.warning("%s: its record is of another source or options (copied in?): rebuilt", self.path / name)
        else:
            _log.info("%s: no valid record: rebuilt", self.path / name)
        return None

    def store(self, name: str, key_digest: str, data: bytes) -> Path:
        """Writes the entry, then its record (a reader that sees the record sees the whole entry;
        a crash between them leaves a mismatch, which is rebuilt). Raises OSError if it cannot."""
        key = self._secret(create=True)
        assert key is not None
        write_entry(self._fd, name, data)
        write_entry(self._fd, _record_name(name), _record(key, name, key_digest, data))
        return self.path / name

    def lookup_or_build(self, name: str, key_digest: str, limit: int, build: Callable[[], bytes]) -> tuple[bytes, str]:
        """The entry's bytes, and where they came from: `CACHED`; `BUILT_ELSEWHERE` (another
        process stored it while this one waited for `building`'s lock); `BUILT` (`build()`'s,
        stored); `NOT_STORED` (`build()`'s, which the directory would not take: one warning)."""
        data = self.lookup(name, key_digest, limit)
        if data is not None:
            return data, CACHED
        with self.building(name):
            data = self.lookup(name, key_digest, limit)
            if data is not None:
                return data, BUILT_ELSEWHERE
            data = build()
            try:
                self.store(name, key_digest, data)
            except OSError as exc:
                warn_unusable(self.path, self.what, exc)
                return data, NOT_STORED
            return data, BUILT

    @contextlib.contextmanager
    def building(self, name: str) -> Iterator[None]:
        """Holds `name`'s build lock (`NAME.lock`, flock) while the caller builds the entry, so
        that processes (or threads) wanting one entry at once build it once: the others wait
        here, then find it with `lookup`. Torchrun's ranks and pytest-xdist's workers start
        with the same kernels; each compiled every one of them. The lock file is removed before
        the lock is released: a process that opens the name later makes a new one and finds the
        entry stored. Where no lock can be made (a read-only directory, a file system without
        flock), nobody waits."""
        lock_name = name + LOCK_SUFFIX
        try:
            fd = os.open(lock_name, _LOCK_FLAGS, FILE_MODE, dir_fd=self._fd)
        except OSError:
            yield
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _log.info("%s: being built by another process; waiting for it", self.path / name)
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without flock (ENOLCK on some NFS): built unlocked
            os.close(fd)
            yield
            return
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(lock_name, dir_fd=self._fd)
            os.close(fd)

    def _secret(self, create: bool) -> bytes | None:
        """The directory's key; made (atomically: the first of racing processes wins) when `create`."""
        if self._key is None:
            key = read_entry(self._fd, KEY_FILE, _KEY_BYTES)
            if key is not None and len(key) == _KEY_BYTES:
                self._key = key
            elif create:
                self._key = self._install_key(secrets.token_bytes(_KEY_BYTES))
        return self._key

    def _install_key(self, key: bytes) -> bytes:
        tmp = _write_temporary(self._fd, KEY_FILE, key)
        try:
            os.link(tmp, KEY_FILE, src_dir_fd=self._fd, dst_dir_fd=self._fd, follow_symlinks=False)
        except FileExistsError:
            theirs = read_entry(self._fd, KEY_FILE, _KEY_BYTES)
            if theirs is not None and len(theirs) == _KEY_BYTES:
                return theirs  # another process made it first
            # not a key (a FIFO, a link, another user's file): ours replaces it, and every entry
            # signed with what was there is rebuilt
            _replace(self._fd, tmp, KEY_FILE)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self._fd)
        return key


def _record_name(name: str) -> str:
    return name.rsplit(".", 1)[0] + RECORD_SUFFIX


def _record(key: bytes, name: str, key_digest: str, data: bytes) -> bytes:
    digest = hashlib.sha256(data).hexdigest()
    mac = hmac.new(key, f"{_RECORD_TAG} {name} {key_digest} {digest}".encode(), hashlib.sha256).hexdigest()
    return f"{_RECORD_TAG} {key_digest} {digest} {mac}\n".encode()


__all__ = [
    "BUILT",
    "BUILT_ELSEWHERE",
    "CACHED",
    "CACHE_NAME",
    "CACHE_SETTING",
    "DIR_MODE",
    "FILE_MODE",
    "NOT_STORED",
    "EntryStore",
    "cache_dir",
    "check_private",
    "existing_private_directory",
    "private_directory",
    "read_entry",
    "warn_unusable",
    "write_entry",
]
