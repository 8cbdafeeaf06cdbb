"""A stand-in for torch_sparse's `SparseTensor`, for testing gnnc.nn's SparseTensor path without torch_sparse.

torch_sparse does not install here (it needs a compiler toolchain matched to
the torch build). This module has the part of its API that PyG 2.8's layers
and gnnc.nn use, with torch_sparse's semantics:

- storage sorted row-major (stable among duplicate entries, which are kept);
  `coo()` / `csr()` in that order; values `[nnz]` or `[nnz, D]`, or none;
- `set_value(value, layout)`, `fill_value`, `sparse_sizes`, `nnz`, `t()`,
  `to_torch_sparse_csr_tensor`, `requires_grad`, `is_cuda`;
- the functions PyG calls through `torch_geometric.typing.torch_sparse`:
  `matmul` (spmm with sum / mean / min / max over `value * x`), `sum`,
  `mul` (row- or column-wise), `set_diag` (drop the diagonal, then insert
  one entry (i, i) per i < min(rows, cols), merged in row-major order, value
  1 or the given values), `fill_diag`, `masked_select_nnz`.

Where torch_sparse is not installed, `SparseTensor` subclasses PyG's
placeholder class, so PyG's `isinstance(edge_index, SparseTensor)` paths run
on it, and `patch_pyg` installs the functions into PyG's placeholder
namespace. Where it is installed, tests use the real one (`pyg_sparse_tensor`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch_geometric.typing as pyg_typing


class SparseStorage:
    """torch_sparse's storage: row, col (row-major), value, sizes."""

    def __init__(self, row: torch.Tensor, col: torch.Tensor, value: torch.Tensor | None, sparse_sizes: tuple[int, int]):
        self._row, self._col, self._value = row, col, value
        self._sparse_sizes = (int(sparse_sizes[0]), int(sparse_sizes[1]))

    def row(self) -> torch.Tensor:
        return self._row

    def col(self) -> torch.Tensor:
        return self._col

    def value(self) -> torch.Tensor | None:
        return self._value

    def has_value(self) -> bool:
        return self._value is not None

    def sparse_sizes(self) -> tuple[int, int]:
        return self._sparse_sizes

    def rowptr(self) -> torch.Tensor:
        counts = torch.bincount(self._row, minlength=self._sparse_sizes[0])
        return torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])

    def rowcount(self) -> torch.Tensor:
        return torch.bincount(self._row, minlength=self._sparse_sizes[0])


class SparseTensor(pyg_typing.SparseTensor):  # type: ignore[misc,valid-type]
    """torch_sparse.SparseTensor's API as PyG uses it (see the module docstring)."""

    def __init__(
        self,
        row: torch.Tensor | None = None,
        rowptr: torch.Tensor | None = None,
        col: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        sparse_sizes: tuple[int | None, int | None] | None = None,
        is_sorted: bool = False,
        trust_data: bool = False,
    ):
        assert col is not None
        if row is None:
            assert rowptr is not None
            row = torch.repeat_interleave(torch.arange(rowptr.numel() - 1, device=col.device), rowptr.diff())
        rows, cols = (sparse_sizes or (None, None))[0], (sparse_sizes or (None, None))[1]
        rows = int(row.max()) + 1 if rows is None else rows
        cols = int(col.max()) + 1 if cols is None else cols
        if not is_sorted:
            order = torch.argsort(row * cols + col, stable=True)
            row, col = row[order], col[order]
            value = None if value is None else value[order]
        self._storage = SparseStorage(row, col, value, (rows, cols))

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_storage(cls, storage: SparseStorage) -> SparseTensor:
        out = cls.__new__(cls)
        out._storage = storage
        return out

    @classmethod
    def from_edge_index(
        cls,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor | None = None,
        sparse_sizes: tuple[int | None, int | None] | None = None,
        is_sorted: bool = False,
        trust_data: bool = False,
    ) -> SparseTensor:
        return cls(
            row=edge_index[0], col=edge_index[1], value=edge_attr, sparse_sizes=sparse_sizes, is_sorted=is_sorted
        )

    @property
    def storage(self) -> SparseStorage:
        return self._storage

    # ------------------------------------------------------------------ reading

    def coo(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        s = self._storage
        return s.row(), s.col(), s.value()

    def csr(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        s = self._storage
        return s.rowptr(), s.col(), s.value()

    def sparse_sizes(self) -> tuple[int, int]:
        return self._storage.sparse_sizes()

    def sparse_size(self, dim: int) -> int:
        return self._storage.sparse_sizes()[dim]

    def sizes(self) -> list[int]:
        value = self._storage.value()
        return list(self.sparse_sizes()) + (list(value.shape[1:]) if value is not None else [])

    def size(self, dim: int | None = None) -> Any:
        sizes = self.sizes()
        return tuple(sizes) if dim is None else sizes[dim]

    def dim(self) -> int:
        return len(self.sizes())

    def nnz(self) -> int:
        return self._storage.col().numel()

    def has_value(self) -> bool:
        return self._storage.has_value()

    def is_cuda(self) -> bool:
        return self._storage.col().is_cuda

    def device(self) -> torch.device:
        return self._storage.col().device

    def requires_grad(self) -> bool:
        value = self._storage.value()
        return value is not None and value.requires_grad

    def is_quadratic(self) -> bool:
        rows, cols = self.sparse_sizes()
        return rows == cols

    # ------------------------------------------------------------------ new tensors

    def set_value(self, value: torch.Tensor | None, layout: str | None = None) -> SparseTensor:
        assert layout in (None, "coo", "csr"), "the stand-in keeps values in row-major (coo / csr) order"
        s = self._storage
        if value is not None:
            assert value.shape[0] == self.nnz()
        return self.from_storage(SparseStorage(s.row(), s.col(), value, s.sparse_sizes()))

    def fill_value(self, fill_value: float, dtype: torch.dtype | None = None) -> SparseTensor:
        value = torch.full((self.nnz(),), fill_value, dtype=dtype, device=self.device())
        return self.set_value(value, layout="coo")

    def t(self) -> SparseTensor:
        row, col, value = self.coo()
        rows, cols = self.sparse_sizes()
        return type(self)(row=col, col=row, value=value, sparse_sizes=(cols, rows))

    def to_torch_sparse_csr_tensor(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        rowptr, col, value = self.csr()
        if value is None:
            value = torch.ones(self.nnz(), dtype=dtype, device=col.device)
        return torch.sparse_csr_tensor(rowptr, col, value, tuple(self.sizes()))

    def to_torch_sparse_coo_tensor(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        row, col, value = self.coo()
        if value is None:
            value = torch.ones(self.nnz(), dtype=dtype, device=col.device)
        return torch.sparse_coo_tensor(torch.stack([row, col]), value, tuple(self.sizes()))

    def __repr__(self) -> str:
        return f"SparseTensor(sparse_sizes={self.sparse_sizes()}, nnz={self.nnz()}, has_value={self.has_value()})"


# --------------------------------------------------------------------- functions


def matmul(src: SparseTensor, other: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """`src @ other` reduced per row: sum, mean, min or max of `value * other[col]` (0 for an empty row)."""
    reduce = "sum" if reduce == "add" else reduce
    row, col, value = src.coo()
    rows = src.sparse_size(0)
    msg = other.index_select(0, col)
    if value is not None:
        msg = msg * value.view(-1, *([1] * (msg.dim() - 1)))
    index = row.view(-1, *([1] * (msg.dim() - 1))).expand_as(msg)
    out = other.new_zeros((rows, *other.shape[1:]))
    if reduce == "sum":
        return out.scatter_add(0, index, msg)
    if reduce == "mean":
        count = torch.bincount(row, minlength=rows).clamp(min=1).to(other.dtype)
        return out.scatter_add(0, index, msg) / count.view(-1, *([1] * (msg.dim() - 1)))
    return out.scatter_reduce(0, index, msg, {"max": "amax", "min": "amin"}[reduce], include_self=False)


def sum(src: SparseTensor, dim: int | None = None) -> torch.Tensor:  # noqa: A001 - torch_sparse's name
    row, col, value = src.coo()
    if value is None:
        value = torch.ones(src.nnz(), device=col.device)
    index, size = (row, src.sparse_size(0)) if dim in (1, -1) else (col, src.sparse_size(1))
    assert dim in (0, 1, -1)
    return value.new_zeros((size, *value.shape[1:])).index_add(0, index, value)


def mul(src: SparseTensor, other: torch.Tensor) -> SparseTensor:
    """Each entry times `other[row]` ([rows, 1]) or `other[col]` ([1, cols])."""
    row, col, value = src.coo()
    if other.size(0) == src.sparse_size(0) and other.size(1) == 1:
        factor = other.squeeze(1)[row]
    elif other.size(0) == 1 and other.size(1) == src.sparse_size(1):
        factor = other.squeeze(0)[col]
    else:
        raise ValueError("mul: `other` must be [rows, 1] or [1, cols]")
    if value is not None:
        factor = value * factor.view(-1, *([1] * (value.dim() - 1)))
    return src.set_value(factor, layout="coo")


def remove_diag(src: SparseTensor, k: int = 0) -> SparseTensor:
    row, col, value = src.coo()
    keep = row != (col - k)
    return src.from_storage(
        SparseStorage(row[keep], col[keep], None if value is None else value[keep], src.sparse_sizes())
    )


def set_diag(src: SparseTensor, values: torch.Tensor | None = None, k: int = 0) -> SparseTensor:
    """The diagonal replaced: (i, i) for i < min(rows, cols), merged in row-major order."""
    assert k == 0
    src = remove_diag(src)
    row, col, value = src.coo()
    rows, cols = src.sparse_sizes()
    diag = torch.arange(min(rows, cols), device=col.device)
    new_value = None
    if value is not None:
        fill = values if values is not None else torch.ones(diag.numel(), dtype=value.dtype, device=value.device)
        if fill.dim() < value.dim():
            fill = fill.view(-1, *([1] * (value.dim() - 1))).expand(-1, *value.shape[1:])
        new_value = torch.cat([value, fill.to(value.dtype)])
    all_row, all_col = torch.cat([row, diag]), torch.cat([col, diag])
    order = torch.argsort(all_row * cols + all_col, stable=True)
    return src.from_storage(
        SparseStorage(
            all_row[order], all_col[order], None if new_value is None else new_value[order], src.sparse_sizes()
        )
    )


def fill_diag(src: SparseTensor, fill_value: float, k: int = 0) -> SparseTensor:
    rows, cols = src.sparse_sizes()
    value = src.storage.value()
    if value is None:
        return set_diag(src, None, k)
    return set_diag(src, value.new_full((min(rows, cols), *value.shape[1:]), fill_value), k)


def masked_select_nnz(src: SparseTensor, mask: torch.Tensor, layout: str | None = None) -> SparseTensor:
    row, col, value = src.coo()
    return src.from_storage(
        SparseStorage(row[mask], col[mask], None if value is None else value[mask], src.sparse_sizes())
    )


FUNCTIONS = {
    "matmul": matmul,
    "sum": sum,
    "mul": mul,
    "set_diag": set_diag,
    "fill_diag": fill_diag,
    "masked_select_nnz": masked_select_nnz,
}


def patch_pyg(monkeypatch: Any) -> None:
    """PyG's placeholder `torch_sparse` namespace given the stand-in's functions (for one test)."""
    if pyg_typing.WITH_TORCH_SPARSE:  # the real torch_sparse: nothing to stand in for
        return
    for name, fn in FUNCTIONS.items():
        monkeypatch.setattr(pyg_typing.torch_sparse, name, staticmethod(fn))


def pyg_sparse_tensor() -> type:
    """The SparseTensor class tests build: torch_sparse's where installed, else the stand-in."""
    if pyg_typing.WITH_TORCH_SPARSE:
        return pyg_typing.SparseTensor
    return SparseTensor


def torch_sparse_adjacency(edge_index: torch.Tensor, value: torch.Tensor, n: int, layout: Any) -> torch.Tensor:
    """PyG's transposed adjacency `adj_t` of an edge_index as a torch.sparse COO (coalesced) or CSR tensor."""
    adj = torch.sparse_coo_tensor(edge_index.flip(0), value, (n, n)).coalesce()
    return adj.to_sparse_csr() if layout == torch.sparse_csr else adj


def sparse_tensor_adjacency(edge_index: torch.Tensor, value: torch.Tensor | None, n: int) -> Any:
    """PyG's transposed adjacency `adj_t` of an edge_index as a SparseTensor (the stand-in without torch_sparse)."""
    return pyg_sparse_tensor()(row=edge_index[1], col=edge_index[0], value=value, sparse_sizes=(n, n))


__all__ = [
    "SparseStorage",
    "SparseTensor",
    "patch_pyg",
    "pyg_sparse_tensor",
    "sparse_tensor_adjacency",
    "torch_sparse_adjacency",
]
