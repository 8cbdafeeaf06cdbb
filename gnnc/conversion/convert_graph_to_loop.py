"""convert-graph-to-loop: graph-dialect kernels become loop-dialect loop nests.

Each kernel becomes one `func.func` with the gnnc C ABI (see `abi.py`) whose
body is a sequence of *phases*, one `loop.for_dst` each; inside a phase each
destination runs levels of walks over its in-edges. The lowering itself
lives in `gnnc/conversion/graph_to_loop/`; this module holds the pass and
what it takes from the target (its `target` option): source sweeps
(`SOURCE_SWEEP_TARGETS`), the head loops split from the row loops
(`HEAD_SPLIT_TARGETS`), streamed vertex results (`STREAM_TARGETS`) and
costly edge values in scratch (`SCRATCH_VALUE_TARGETS`) are the CPU's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr
from xdsl.passes import ModulePass

from gnnc.conversion.graph_to_loop import KernelLowering
from gnnc.errors import CompileError
from gnnc.ir import graph
from gnnc.ir.directives import check_directive_option, with_directives


class LoweringTarget(StrEnum):
    """What the kernels are lowered for (the pass's `target` option): the CPU, or the cuda
    grids (the cuda target and its CPU emulation)."""

    CPU = "cpu"
    CUDA = "cuda"


#: Targets whose lowering emits source sweeps (see graph_to_loop/phases.py).
SOURCE_SWEEP_TARGETS = (LoweringTarget.CPU,)

#: Targets whose edge walks split costly per-head work from the row loops.
#: The cuda mappings spread feature loops over lanes; the split would add a
#: scratch round trip per edge there, unmeasured on a GPU.
HEAD_SPLIT_TARGETS = (LoweringTarget.CPU,)

#: Targets whose vertex results may be written with streaming stores (`stream outputs`).
STREAM_TARGETS = (LoweringTarget.CPU,)

#: Targets whose edge walks keep costly values read at permuted indices, or by several nests,
#: in per-thread scratch (graph_to_loop/values.py). The cuda warp mappings split the feature
#: loops over lanes, and a value one lane computed is not its neighbours': map-threads would
#: refuse every warp mapping of such a kernel.
SCRATCH_VALUE_TARGETS = (LoweringTarget.CPU,)


@dataclass(frozen=True)
class ConvertGraphToLoopPass(ModulePass):
    """Lowers every graph-dialect kernel to a loop-dialect function with the gnnc ABI.

    The directives that decide a kernel's arguments and accumulators are
    consumed here; given as options, they apply to every kernel as if its
    schedule said so (`convert-graph-to-loop{partition=4}` is `partition src 4`).
    The loop passes after it implement what it prepared.
    """

    name = "convert-graph-to-loop"

    target: str = LoweringTarget.CPU
    """cpu, or cuda for the cuda grids (driver/pipeline.py sets it for the cuda targets)."""
    partition: int | None = None
    """`partition src K`: the kernels take the in-CSR of K source partitions (partition-sources)."""
    edge_order: str | None = None
    """`order edges hilbert`: the kernels take their edges in Hilbert order (hilbert-edge-order)."""
    group: int | None = None
    """`group neighbors G`: in-edge lists longer than G are reduced in groups of G, in parallel."""
    stream: bool = False
    """`stream outputs`: vertex results are built per worker and written with streaming stores."""
    simd: int | None = None
    """`simd W`: the generated code prefers vectors of W bits (128, 256 or 512)."""

    def __post_init__(self) -> None:
        if self.target not in tuple(LoweringTarget):
            raise CompileError(f"{self.spec()}: unknown target; use one of {', '.join(LoweringTarget)}")
        for words in self._directives():
            check_directive_option(str(self.spec()), words)

    def _directives(self) -> list[list[str]]:
        """The options as the directives they stand for."""
        found = []
        if self.partition is not None:
            found.append(["partition", "src", str(self.partition)])
        if self.edge_order is not None:
            found.append(["order", "edges", self.edge_order])
        if self.group is not None:
            found.append(["group", "neighbors", str(self.group)])
        if self.stream:
            found.append(["stream", "outputs"])
        if self.simd is not None:
            found.append(["simd", str(self.simd)])
        return found

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = LoweringTarget(self.target)
        directives = self._directives()
        for fn in list(op.ops):
            if isinstance(fn, func.FuncOp) and graph.RESULT_NAMES in fn.attributes:
                if directives:
                    attr = fn.attributes.get(graph.SCHEDULE)
                    entries = {k: v.data for k, v in attr.data.items()} if isinstance(attr, DictionaryAttr) else {}  # type: ignore[attr-defined]
                    given = with_directives(fn.sym_name.data, entries, directives, str(self.spec()))
                    fn.attributes[graph.SCHEDULE] = DictionaryAttr({k: StringAttr(v) for k, v in given.items()})
                sweeps = target in SOURCE_SWEEP_TARGETS
                split = target in HEAD_SPLIT_TARGETS
                streams = target in STREAM_TARGETS
                scratch = target in SCRATCH_VALUE_TARGETS
                new = KernelLowering(
                    fn, source_sweeps=sweeps, split_heads=split, streams=streams, scratch_values=scratch
                ).build()
                op.body.block.insert_op_before(new, fn)
                fn.detach()
                fn.erase()
