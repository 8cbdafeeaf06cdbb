"""segment-matmul: a relation's transform over its pairs as one dense product, `rows` at a time.

After relation-transform-first, `x[u] @ W[rel(e)]` is a value per (source,
relation) pair, and the runtime numbers the pairs relation by relation:
relation r's pairs are the contiguous run offsets[r] .. offsets[r + 1] (the
edges grouped by relation, deduplicated per source). Their rows are then one
dense product X_r @ W[r], X_r the run's rows of x; the sweep computes it in
tiles of `rows` pairs of one relation (the runtime cuts each run into such
tiles), loading each row of W[r] once per tile instead of once per pair, with
the tile's accumulators in vector registers: a register-blocked GEMM per
relation (segment matmul), where the per-pair sweep did a vector-matrix
product per row. Rewrites a `graph.materialize_pairs` of `x[v] @ W[rel(e)]`
(x a vertex input, W a relation tensor) into `graph.segment_matmul`; other
pair values keep their per-pair sweep.

Only where the kernel's K and N are constants, written or compiled in
(`specialize`): with sizes known only at run time the tile's slices stay
loops, LLVM keeps the accumulators in memory, and the per-pair sweep was
faster (1.15x to 1.6x). The runtime's default compiles the sizes in for
calls of 16K edges or more. Measurements: docs/design/heterogeneous.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr
from xdsl.ir import BlockArgument
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.transforms.dead_code_elimination import DeadCodeElimination

from gnnc.errors import CompileError
from gnnc.ir import graph

#: Pairs a tile computes at once: with the sweep's 16-column slices (convert-graph-to-loop's
#: SEGMENT_WIDTH), 4 AVX-512 or 8 AVX2 accumulator registers; docs/design/heterogeneous.md.
DEFAULT_ROWS = 4
#: More would spill the accumulators on every vector unit gnnc targets.
MAX_ROWS = 16
#: Pairs a tile computes at once for a transform of 2 to 4 columns (RGAT's scores, one per
#: head) on CPUs whose LLVM tuning packs 4 rows x N columns into one vector by gathering
#: the rows' x elements (`vgatherqps`, AMD's Zen): a tile of one row broadcasts them.
#: WordNet, K = 128 (znver5): N = 4 37 ms -> 20, N = 2 44 -> 21 for the kernel around
#: it. Elsewhere LLVM permutes instead (no gathers) and taller tiles win as for wide
#: transforms (Xeon: N = 4 18.1 ms at 1 row, 12.8 at 4); the compiler's driver passes
#: `narrow-rows` for the target CPU (docs/design/heterogeneous.md).
NARROW_ROWS = 1


def default_rows(n: int | str, narrow_rows: int) -> int:
    """The tile height for a transform of `n` columns, `narrow_rows` for 2 to 4 of them."""
    return narrow_rows if isinstance(n, int) and 1 < n <= 4 else DEFAULT_ROWS


def _fixed_sizes(fn: func.FuncOp) -> dict[str, int]:
    """The dimensions the kernel's schedule compiles in (`specialize NAME N ...`), with their sizes."""
    attr = fn.attributes.get(graph.SCHEDULE)
    entry = attr.data.get("cpu.specialize") if isinstance(attr, DictionaryAttr) else None
    if not isinstance(entry, StringAttr):
        return {}
    words = entry.data.split()
    return {name: int(size) if size.isdigit() else 0 for name, size in zip(words[::2], words[1::2])}


class SegmentMatMul(RewritePattern):
    """materialize_pairs(matvec(gather(x, dst), gather(W, rel))) -> segment_matmul(x, W), where
    the matrix's K and N are constants."""

    def __init__(self, rows: int | None, sizes: dict[str, int], narrow_rows: int):
        super().__init__()
        self.rows = rows
        self.narrow_rows = narrow_rows
        #: the dimensions compiled in, with their sizes
        self.sizes = sizes

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.MaterializePairsOp, rewriter: PatternRewriter) -> None:
        product = op.operand.owner
        if not isinstance(product, graph.MatVecOp):
            return
        x, w = product.vector.owner, product.matrix.owner
        if not (
            isinstance(x, graph.GatherOp)
            and x.site.data == "dst"
            and isinstance(x.tensor, BlockArgument)
            and isinstance(w, graph.GatherOp)
            and w.site.data == "rel"
            and isinstance(w.tensor, BlockArgument)
        ):
            return
        xt, wt = x.tensor.type, w.tensor.type
        assert isinstance(xt, graph.TensorType) and isinstance(wt, graph.TensorType)
        if len(xt.shape) != 1 or len(wt.shape) != 2:
            return  # rows with head axes keep the per-pair sweep
        if any(isinstance(d, str) and d not in self.sizes for d in wt.shape):
            return  # sizes known at run time only: the per-pair sweep is faster
        n = wt.shape[1]
        if self.rows is None:
            rows = default_rows(self.sizes.get(n, 0) if isinstance(n, str) else n, self.narrow_rows)
        else:
            rows = self.rows
        rewriter.replace(op, graph.SegmentMatMulOp(x.tensor, w.tensor, op.side.data, rows))


@dataclass(frozen=True)
class SegmentMatMulPass(ModulePass):
    """Computes each relation's pair rows of `x @ W[r]` as one dense product, in tiles of `rows` pairs."""

    name = "segment-matmul"

    rows: int | None = None
    """the pairs of one relation a tile computes at once (each loaded row of W serves them all);
    none: `narrow_rows` for a transform of 2 to 4 columns, else 4 (DEFAULT_ROWS)"""

    narrow_rows: int | None = None
    """the tile height for a transform of 2 to 4 columns where `rows` is not given; none: 1
    (NARROW_ROWS). The driver sets it for the target CPU"""

    def __post_init__(self) -> None:
        for option in ("rows", "narrow_rows"):
            value = getattr(self, option)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ROWS
            ):
                name = option.replace("_", "-")
                raise CompileError(f"{self.spec()}: {name} must be an integer from 1 to {MAX_ROWS}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        narrow = NARROW_ROWS if self.narrow_rows is None else self.narrow_rows
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and graph.RESULT_NAMES in f.attributes]:
            PatternRewriteWalker(SegmentMatMul(self.rows, _fixed_sizes(fn), narrow)).rewrite_region(fn.body)
        DeadCodeElimination().apply(ctx, op)
