"""convert-graph-to-loop: graph-dialect kernels become loop-dialect loop nests.

Each kernel becomes one `func.func` with the gnnc C ABI (see `abi.py`) whose
body is a sequence of *phases*, one `loop.for_dst` each; inside a phase each
destination runs levels of walks over its in-edges. The lowering itself
lives in `gnnc/conversion/graph_to_loop/`; this module holds the pass and
what it takes from the target: source sweeps (`SOURCE_SWEEP_TARGETS`), the
head loops split from the row loops (`HEAD_SPLIT_TARGETS`) and streamed
vertex results (`STREAM_TARGETS`) are the CPU's.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from gnnc.conversion.graph_to_loop import KernelLowering
from gnnc.ir import graph

#: builtin.module attribute naming the compile target (set by the compiler).
TARGET_ATTR = "gnnc.target"

#: Targets whose lowering emits source sweeps (see graph_to_loop/phases.py). A
#: module without TARGET_ATTR (gnnc-opt on a hand-written file) is lowered for the CPU.
SOURCE_SWEEP_TARGETS = ("cpu",)

#: Targets whose edge walks split costly per-head work from the row loops.
#: The cuda mappings spread feature loops over lanes; the split would add a
#: scratch round trip per edge there, unmeasured on a GPU.
HEAD_SPLIT_TARGETS = ("cpu",)

#: Targets whose vertex results may be written with streaming stores (`stream outputs`).
STREAM_TARGETS = ("cpu",)


class ConvertGraphToLoopPass(ModulePass):
    """Lowers every graph-dialect kernel to a loop-dialect function with the gnnc ABI."""

    name = "convert-graph-to-loop"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in list(op.ops):
            if isinstance(fn, func.FuncOp) and graph.RESULT_NAMES in fn.attributes:
                target = op.attributes.get(TARGET_ATTR)
                sweeps = not isinstance(target, StringAttr) or target.data in SOURCE_SWEEP_TARGETS
                split = not isinstance(target, StringAttr) or target.data in HEAD_SPLIT_TARGETS
                streams = not isinstance(target, StringAttr) or target.data in STREAM_TARGETS
                new = KernelLowering(fn, source_sweeps=sweeps, split_heads=split, streams=streams).build()
                op.body.block.insert_op_before(new, fn)
                fn.detach()
                fn.erase()
