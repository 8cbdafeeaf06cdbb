"""The signature a checked kernel compiles to (`gnnc.ir.signature.KernelSignature`)."""

from __future__ import annotations

from typing import Any

from gnnc.ir.signature import KernelSignature, TensorSig
from gnnc.lang import ast


def kernel_signature(kernel: ast.Kernel) -> KernelSignature:
    """From a checked ``gnnc.lang.ast.Kernel``."""
    dtype = kernel.dtype
    if dtype is None:  # an unchecked tree: every declared type has the same dtype once checked
        typed = [p.type for p in kernel.params] + [r.type for r in kernel.results]
        dtype = typed[0].dtype if typed else "f32"
    reads = _vertex_reads(kernel)
    params = {p.name for p in kernel.params}
    side_of = {"u": "src", "v": "dst"}
    return KernelSignature(
        name=kernel.name,
        dtype=dtype,
        params=tuple(
            TensorSig(
                p.name,
                p.type.domain,
                tuple(p.type.shape),
                tuple(side_of[i] for i in "uv" if (p.name, i) in reads) if p.type.domain == "V" else (),
            )
            for p in kernel.params
        ),
        results=tuple(TensorSig(r.name, r.type.domain, tuple(r.type.shape)) for r in kernel.results),
        single_result=bool(kernel.single_result),
        values_read_at_src=tuple(sorted({n for n, i in reads if i == "u" and n not in params})),
        relations=_reads_relations(kernel),
    )


def _reads_relations(kernel: Any) -> bool:
    """Whether a kernel's body reads an edge's relation type (`W[rel(e)]`, `deg_in(v, rel(e))`)."""

    def walk(e: Any) -> bool:
        if (type(e).__name__ == "Index" and getattr(e, "index", None) == "rel") or getattr(e, "relation", False):
            return True
        children = [getattr(e, c) for c in ("operand", "lhs", "rhs") if hasattr(e, c)]
        return any(walk(c) for c in children + list(getattr(e, "args", ()) or ()))

    return any(walk(d.value) for d in kernel.body)


def _vertex_reads(kernel: Any) -> set[tuple[str, str]]:
    """Every (name, index) a kernel's body reads as `name[u]` / `name[v]` (duck-typed AST walk)."""
    found: set[tuple[str, str]] = set()

    def walk(e: Any) -> None:
        index = getattr(e, "index", None)
        if type(e).__name__ == "Index" and index in ("u", "v"):
            found.add((e.name, index))
        for child in ("operand", "lhs", "rhs"):
            if hasattr(e, child):
                walk(getattr(e, child))
        for arg in getattr(e, "args", ()) or ():
            walk(arg)

    for definition in kernel.body:
        walk(definition.value)
    return found
