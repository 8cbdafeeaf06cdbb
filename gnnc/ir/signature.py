"""A kernel's signature: its parameters and results as a compiled object's metadata records them.

A signature is what a compiled ``.so``'s metadata says about one kernel, in a
JSON-able form::

    {"name": "gat", "dtype": "f32",
     "params":  [{"name": "h", "domain": "V", "shape": ["H", "F"]},
                 {"name": "eps", "domain": null, "shape": []}],
     "results": [{"name": "out", "domain": "V", "shape": ["H", "F"]},
                 {"name": "alpha", "domain": "E", "shape": ["H"]}],
     "single_result": false}

``domain`` ``"V"`` / ``"E"`` / ``"R"`` means a leading axis of vertices /
edges / relation types that ``shape`` does not list; ``null`` is a parameter
(its ``shape`` is the full shape). Shape entries are ints or symbolic names bound at the call. A vertex
input also lists the ``sides`` its kernel reads it at (``"src"`` for
``x[u]``, ``"dst"`` for ``x[v]``), which decide its rows on a bipartite
graph (docs/language.md, "Bipartite graphs"): ``num_src`` when read at
sources (DGL's block convention when read at both: destinations are the
first ``num_dst`` sources), ``num_dst`` when read only at destinations,
either when never read. Vertex results have ``num_dst`` rows.
``values_read_at_src`` names the kernel's own vertex values read at ``u``:
they exist only per destination, so such a kernel needs a square graph.
``relations`` says the kernel reads edges' relation types (``W[rel(e)]``,
``deg_in(v, rel(e))``): it runs only on a graph that has them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnc.errors import ArgumentError

Dim = int | str

_DTYPES: dict[str, np.dtype] = {"f32": np.dtype(np.float32), "f64": np.dtype(np.float64)}


@dataclass(frozen=True)
class TensorSig:
    """One parameter or result: ``domain`` ``"V"``, ``"E"``, ``"R"`` (relations) or ``None`` (a parameter)."""

    name: str
    domain: str | None
    shape: tuple[Dim, ...]
    #: where the kernel reads a vertex input: a subset of ("src", "dst"), in that order
    sides: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, record: dict) -> TensorSig:
        return cls(record["name"], record.get("domain"), tuple(record.get("shape", ())), tuple(record.get("sides", ())))

    def to_dict(self) -> dict:
        record = {"name": self.name, "domain": self.domain, "shape": list(self.shape)}
        if self.sides:
            record["sides"] = list(self.sides)
        return record

    def row_elements(self, dims: dict[str, int]) -> int:
        """Elements of one vertex's or edge's row (of the whole tensor, for a
        parameter), named dimensions sized by ``dims``."""
        n = 1
        for d in self.shape:
            n *= d if isinstance(d, int) else dims[d]
        return n

    def describe(self) -> str:
        """The declared type without its dtype: ``[V, H, F]``, ``[D1, 64]``, ``scalar``."""
        dims = ([self.domain] if self.domain else []) + [str(d) for d in self.shape]
        return f"[{', '.join(dims)}]" if dims else "a scalar"


@dataclass(frozen=True)
class KernelSignature:
    name: str
    dtype: str
    params: tuple[TensorSig, ...]
    results: tuple[TensorSig, ...]
    single_result: bool
    #: the kernel's own vertex values it reads at `u` (a square graph only)
    values_read_at_src: tuple[str, ...] = ()
    #: the kernel reads the edges' relation types (a graph with `edge_type` only)
    relations: bool = False

    @property
    def numpy_dtype(self) -> np.dtype:
        return _DTYPES[self.dtype]

    @classmethod
    def from_dict(cls, record: dict) -> KernelSignature:
        """From the metadata record (extra keys, such as ``symbol`` or ``abi``, are ignored)."""
        dtype = record["dtype"]
        if dtype not in _DTYPES:
            raise ArgumentError(f"kernel {record.get('name')!r} has an unknown element type {dtype!r}")
        return cls(
            name=record["name"],
            dtype=dtype,
            params=tuple(TensorSig.from_dict(p) for p in record["params"]),
            results=tuple(TensorSig.from_dict(r) for r in record["results"]),
            single_result=bool(record["single_result"]),
            values_read_at_src=tuple(record.get("values_read_at_src", ())),
            relations=bool(record.get("relations", False)),
        )

    def to_dict(self) -> dict:
        record = {
            "name": self.name,
            "dtype": self.dtype,
            "params": [p.to_dict() for p in self.params],
            "results": [r.to_dict() for r in self.results],
            "single_result": self.single_result,
        }
        if self.values_read_at_src:
            record["values_read_at_src"] = list(self.values_read_at_src)
        if self.relations:
            record["relations"] = True
        return record

    def describe(self) -> str:
        return f"{self.name}({', '.join(p.name for p in self.params)})"
