"""The gnnc kernels behind gnnc.nn's layers: source text per layer configuration.

A layer's message passing is one kernel, generated from its configuration
(aggregation, slope, which optional inputs exist) as gnnc source text and
made a `gnnc.torch.Kernel` once per process. A layer makes the kernels it
may call in its constructor (parsing and op registration, ~10 ms each;
nothing is compiled before the first call), so that torch.compile traces
its forward without a graph break. A Kernel pickles as its source text: a
layer pickles, deep-copies and `torch.save`s with its kernels, and the
compiled code comes from the compile cache.
"""

from __future__ import annotations

import textwrap

from gnnc.torch.kernels import Kernel
from gnnc.torch.untraced import untraced

#: Aggregations the language has, with PyG's names for them.
AGGREGATIONS = {"sum": "sum", "add": "sum", "mean": "mean", "max": "max", "min": "min"}


#: The kernels made so far, by (source, name).
_MADE: dict[tuple[str, str], Kernel] = {}


def kernel(source: str, name: str) -> Kernel:
    """Kernel `name` of `source` as a torch op, made once per process.

    A plain dict, not functools.cache: torch.compile traces a lookup that
    hits as a constant, where it would trace into a cache wrapper's body.
    """
    made = _MADE.get((source, name))
    return made if made is not None else _make(source, name)


@untraced("a gnnc.nn kernel is made (parsed, its ops registered) outside the graph")
def _make(source: str, name: str) -> Kernel:
    made = _MADE[(source, name)] = Kernel(textwrap.dedent(source).strip() + "\n", name)
    return made


def literal(value: float) -> str:
    """A float as a literal of the language (`repr` keeps every digit)."""
    text = repr(float(value))
    if "inf" in text or "nan" in text:
        raise ValueError(f"{value} cannot be a kernel literal")
    return text


__all__ = ["AGGREGATIONS", "kernel", "literal"]
