"""This process's memory from /proc, as the benchmarks measure a transient peak.

A peak is VmHWM after a reset (`reset_peak`: /proc/self/clear_refs = 5 sets
VmHWM to the current RSS) minus the RSS at the reset. `trim_heap` first
returns the heap's free pages to the system (glibc's malloc_trim), so that
the RSS at the reset is what is live: memory an earlier epoch freed but
malloc kept would otherwise serve the next epoch without raising VmHWM, and
the peak would depend on which sizes the allocator kept.
"""

from __future__ import annotations

import ctypes
import os

#: The environment variables that change how glibc's malloc serves large blocks.
_MALLOC_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX")


def allocator() -> str:
    """How this process allocates, for a benchmark's header: an LD_PRELOADed allocator, glibc's
    malloc settings, or its defaults. It moves training epochs by up to a third: with glibc's
    defaults a large block (any over 32 MiB) is a fresh mapping each time, page-faulted on
    first touch (docs/design/training.md, "The allocator")."""
    parts = [f"{name}={os.environ[name]}" for name in _MALLOC_SETTINGS if name in os.environ]
    if os.environ.get("LD_PRELOAD"):
        parts.insert(0, f"LD_PRELOAD={os.environ['LD_PRELOAD']}")
    return "allocator: " + (", ".join(parts) if parts else "glibc malloc defaults")


def status(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def trim_heap() -> None:
    """The heap's free pages back to the system (glibc's malloc_trim)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the peak then counts only growth past what was kept
        pass


def reset_peak() -> int:
    """VmHWM back to the current RSS; returns that RSS in bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status("VmRSS")


def mem_available(fallback: int) -> int:
    """MemAvailable of /proc/meminfo in bytes, or `fallback` where it has none."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return fallback
