"""The compiled variants a module keeps: a bounded LRU, by kernel and directives.

A variant is a kernel compiled again with other directives: a call's
`schedule=`, `schedule="auto"`'s pick, a cuda mapping, or the default
heuristic's pick for a graph and sizes, which compiles the feature sizes in
(`specialize F 64`), so that every new feature size makes one. A module
keeps the `MAX_VARIANTS` it used last, across its kernels; an evicted
variant is dropped, and its shared object closed (`runtime/native.py`) as
soon as no running call holds it (a CUDA variant's module stays loaded in
the driver: it is not unloaded). Decisions cached on graphs refer to their
variant weakly (`autotune/decision.py`): a call whose variant was evicted
decides again and compiles the variant again, which the compile cache makes
a load of a few milliseconds.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

#: How many compiled variants a module keeps loaded, across its kernels.
MAX_VARIANTS = 16


class Variants:
    """One module's variants, by (kernel name, directive text), the most recently used last."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, str], Any] = OrderedDict()

    def get(self, kernel: str, directives: str) -> Any | None:
        variant = self._entries.get((kernel, directives))
        if variant is not None:
            self._entries.move_to_end((kernel, directives))
        return variant

    def put(self, kernel: str, directives: str, variant: Any) -> None:
        """Keeps `variant`, dropping the least recently used beyond `MAX_VARIANTS`."""
        self._entries[(kernel, directives)] = variant
        self._entries.move_to_end((kernel, directives))
        while len(self._entries) > max(1, MAX_VARIANTS):
            self._entries.popitem(last=False)

    def of(self, kernel: str) -> dict[str, Any]:
        """The variants of one kernel, by directive text, least recently used first."""
        return {directives: v for (name, directives), v in self._entries.items() if name == kernel}

    def __len__(self) -> int:
        return len(self._entries)


__all__ = ["MAX_VARIANTS", "Variants"]
