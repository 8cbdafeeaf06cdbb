"""What gnnc asks of the machine it runs on: the CPU's feature flags.

Shared by the compiler (`--cpu native`) and the runtime (a `.so` built for
features this CPU lacks is refused before it runs), so it sits below both.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def host_cpu_flags() -> frozenset[str] | None:
    """This machine's /proc/cpuinfo flags, or None where there is no /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):  # x86 / aarch64 spellings
                    return frozenset(value.split())
    except OSError:
        return None
    return frozenset()
