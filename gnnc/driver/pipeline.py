"""The compilation pipelines, each one declarative list of passes.

An entry is a pass as `gnnc-opt -p` takes it: its name, and the options
the target sets (`convert-graph-to-loop{target=cuda}`). `gnnc passes`
prints them; `--print-ir-after NAME` and `--dump-ir` use these names; a
test can run any prefix. Stages after `convert-loop-to-scf` leave xDSL:
`translate-to-llvm` (LLVM IR), `llvm-opt` (LLVM's O3), `emit-asm`.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, llvm, math, memref, scf
from xdsl.passes import ModulePass
from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination
from xdsl.transforms.dead_code_elimination import DeadCodeElimination
from xdsl.utils.arg_spec import parse_pipeline

from gnnc.conversion.convert_graph_to_loop import ConvertGraphToLoopPass
from gnnc.conversion.convert_grid_to_nvvm import ConvertGridToNvvmPass
from gnnc.conversion.convert_loop_to_openmp import ConvertLoopToOpenmpPass
from gnnc.conversion.convert_loop_to_scf import ConvertLoopToScfPass
from gnnc.conversion.emulate_grid import EmulateGridPass
from gnnc.ir.graph import Graph
from gnnc.ir.loop import Loop
from gnnc.transforms.graph.annotate_fusion import AnnotateFusionPass
from gnnc.transforms.graph.deferred_division import DeferredDivisionPass
from gnnc.transforms.graph.graph_canonicalize import GraphCanonicalizePass
from gnnc.transforms.graph.relation_transform_first import RelationTransformFirstPass
from gnnc.transforms.graph.segment_matmul import SegmentMatMulPass
from gnnc.transforms.graph.transform_before_gather import TransformBeforeGatherPass
from gnnc.transforms.graph.unfuse import UnfusePass
from gnnc.transforms.loop.hilbert_edge_order import HilbertEdgeOrderPass
from gnnc.transforms.loop.map_threads import MapThreadsPass
from gnnc.transforms.loop.order_destinations import OrderDestinationsPass
from gnnc.transforms.loop.partition_sources import PartitionSourcesPass
from gnnc.transforms.loop.prefetch_neighbors import PrefetchNeighborsPass
from gnnc.transforms.loop.sorted_edge_ids import SortedEdgeIdsPass
from gnnc.transforms.loop.specialize_sizes import SpecializeSizesPass
from gnnc.transforms.loop.specialize_unit_dims import SpecializeUnitDimsPass
from gnnc.transforms.loop.tile_features import TileFeaturesPass
from gnnc.transforms.loop.vectorize_edges import VectorizeEdgesPass
from gnnc.transforms.loop.vectorize_rows import VectorizeRowsPass
from gnnc.transforms.math.expand_exp import ExpandExpPass
from gnnc.transforms.math.expand_log import ExpandLogPass
from gnnc.transforms.math.expand_tanh import ExpandTanhPass

#: Every xDSL pass gnnc runs, by command-line name.
PASSES: dict[str, type[ModulePass]] = {
    p.name: p
    for p in (
        GraphCanonicalizePass,
        RelationTransformFirstPass,
        SegmentMatMulPass,
        TransformBeforeGatherPass,
        DeferredDivisionPass,
        CommonSubexpressionElimination,
        DeadCodeElimination,
        UnfusePass,
        AnnotateFusionPass,
        ConvertGraphToLoopPass,
        SpecializeSizesPass,
        PrefetchNeighborsPass,
        SpecializeUnitDimsPass,
        HilbertEdgeOrderPass,
        OrderDestinationsPass,
        PartitionSourcesPass,
        TileFeaturesPass,
        VectorizeRowsPass,
        VectorizeEdgesPass,
        SortedEdgeIdsPass,
        ConvertLoopToOpenmpPass,
        ConvertLoopToScfPass,
        ExpandLogPass,
        ExpandTanhPass,
        ExpandExpPass,
        MapThreadsPass,
        EmulateGridPass,
        ConvertGridToNvvmPass,
    )
}

#: The CPU schedule passes, in the order they compose: the Hilbert edge list
#: and the destination order decide what a sweep position is; partitions
#: then split the in-edge walk, tiles the row, and vectorisation slices
#: what is left of the row (a tile, or the whole row).
CPU_SCHEDULE_PASSES: tuple[str, ...] = (
    "hilbert-edge-order",
    "order-destinations",
    "partition-sources",
    "tile-features",
    "vectorize-rows",
)

#: frontend -> graph passes -> loop passes -> lowering, for the CPU target.
CPU_PIPELINE: tuple[str, ...] = (
    "graph-canonicalize",
    "relation-transform-first",
    "segment-matmul",
    "transform-before-gather",
    "deferred-division",
    "cse",
    "dce",
    "annotate-fusion",
    "convert-graph-to-loop",
    "specialize-sizes",
    "prefetch-neighbors",
    "specialize-unit-dims",
    *CPU_SCHEDULE_PASSES,
    "sorted-edge-ids",
    "vectorize-edges",
    "convert-loop-to-openmp",
    "expand-log{rows_only=true}",
    "expand-tanh",
    "expand-exp",
    "convert-loop-to-scf",
)


def loop_stage(target: str = "cpu") -> str:
    """The stage `--emit loop` prints: the loop dialect after the last loop pass (schedules applied)."""
    if target == "cpu":
        return CPU_PIPELINE[CPU_PIPELINE.index("convert-loop-to-openmp") - 1]
    return CUDA_LOOP_PASSES[-1]


#: The cuda target's loop passes: thread mapping into grids.
CUDA_LOOP_PASSES: tuple[str, ...] = ("map-threads",)

#: PTX has no libm: the cuda target expands log and tanh inline, then exp
#: (tanh's expansion calls exp). The CPU expands tanh and exp, and the logs
#: in feature loops (vectorised inline; libm's is faster for one per edge).
CUDA_MATH_PASSES: tuple[str, ...] = ("expand-log", "expand-tanh", "expand-exp")

#: The graph passes every target runs, up to the lowering.
GRAPH_PASSES: tuple[str, ...] = CPU_PIPELINE[: CPU_PIPELINE.index("convert-graph-to-loop")]

#: The cuda grids have no sweeps over (vertex, relation) pairs: a relation's transform runs per edge.
CUDA_GRAPH_PASSES: tuple[str, ...] = tuple(
    "relation-transform-first{form=per_edge}" if p == "relation-transform-first" else p for p in GRAPH_PASSES
)

#: The lowering for the cuda grids: no source sweeps, no split head loops, no
#: streamed rows (convert-graph-to-loop's CPU-only forms).
CUDA_LOWERING = "convert-graph-to-loop{target=cuda}"

#: The cuda pipeline run on the CPU (`target="cuda-emulation"`): the grids of
#: map-threads become loops over blocks and threads, so the thread mapping's
#: index arithmetic is checked against the reference on any machine; the
#: math is expanded as for the GPU, so its results are the GPU's too.
CUDA_EMULATION_PIPELINE: tuple[str, ...] = (
    *CUDA_GRAPH_PASSES,
    CUDA_LOWERING,
    *CUDA_LOOP_PASSES,
    "emulate-grid",
    *CUDA_MATH_PASSES,
    "convert-loop-to-scf",
)

#: The cuda pipeline: grids become `ptx_kernel` functions, the math inline.
CUDA_PIPELINE: tuple[str, ...] = (
    *CUDA_GRAPH_PASSES,
    CUDA_LOWERING,
    *CUDA_LOOP_PASSES,
    "convert-grid-to-nvvm",
    *CUDA_MATH_PASSES,
    "convert-loop-to-scf",
)

#: Stages after the xDSL passes, run by the cuda backend.
CUDA_BACKEND_STAGES: tuple[str, ...] = ("translate-to-nvvm", "llvm-opt", "emit-ptx")

#: Stages that come after the xDSL passes, run by the CPU backend.
CPU_BACKEND_STAGES: tuple[str, ...] = ("translate-to-llvm", "llvm-opt", "emit-asm")

#: The stage before any pass: the graph dialect as the frontend built it.
FRONTEND_STAGE = "irgen"


def stage_name(entry: str) -> str:
    """The pass a pipeline entry runs, by name: `convert-graph-to-loop{target=cuda}` -> `convert-graph-to-loop`."""
    return entry.partition("{")[0]


def make_pass(entry: str) -> ModulePass:
    """The pass a pipeline entry (or a `gnnc-opt -p` element) names, with its options."""
    (spec,) = parse_pipeline(entry)
    return PASSES[spec.name].from_pass_spec(spec)


def make_context() -> Context:
    """A context with every dialect gnnc's dumps use, so they parse back."""
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf, llvm.LLVM, Graph, Loop):
        ctx.load_dialect(dialect)
    from gnnc.ir.llvm_ext import LlvmExt

    ctx.load_dialect(LlvmExt)
    return ctx


def all_stage_names(target: str = "cpu") -> list[str]:
    """Every stage of the target's compile, in order."""
    if target == "cuda":
        return [FRONTEND_STAGE, *CUDA_PIPELINE, *CUDA_BACKEND_STAGES]
    if target == "cuda-emulation":
        return [FRONTEND_STAGE, *CUDA_EMULATION_PIPELINE, *CPU_BACKEND_STAGES]
    return [FRONTEND_STAGE, *CPU_PIPELINE, *CPU_BACKEND_STAGES]


#: Passes that only optimise: `disable_passes=` / `--disable-pass` may skip them.
OPTIONAL_PASSES: frozenset[str] = frozenset(
    {
        "graph-canonicalize",
        "relation-transform-first",
        "segment-matmul",
        "transform-before-gather",
        "deferred-division",
        "cse",
        "dce",
        "annotate-fusion",
        "specialize-unit-dims",
    }
)
#: Optional on the CPU only, which has libm to fall back on; PTX has none.
CPU_OPTIONAL_PASSES: frozenset[str] = frozenset({"expand-log", "expand-tanh", "expand-exp"})
# prefetch-neighbors is switched by the schedule (`prefetch 0`), not here: it
# consumes the schedule's `prefetch` entry, which must not be left unapplied;
# so do the CPU schedule passes with theirs.

#: Runs after the frontend when fusion is off (`--no-fusion`, ablation only).
#: They go right before the lowering, after the optimisations, so that
#: `--no-fusion` changes fusion only.
UNFUSED_PASSES: tuple[str, ...] = ("unfuse",)


def pass_names(disabled: tuple[str, ...] | list[str] = (), fusion: bool = True, target: str = "cpu") -> list[str]:
    """The target's pipeline with optional passes left out, checked by name."""
    from gnnc.errors import CompileError

    for name in disabled:
        if name not in PASSES:
            raise CompileError(f"unknown pass '{name}'; the passes are: {', '.join(CPU_PIPELINE)}")
        if name not in OPTIONAL_PASSES and not (target == "cpu" and name in CPU_OPTIONAL_PASSES):
            raise CompileError(f"pass '{name}' is needed to generate code for {target} and cannot be disabled")
    base = {"cuda-emulation": CUDA_EMULATION_PIPELINE, "cuda": CUDA_PIPELINE}.get(target, CPU_PIPELINE)
    names = [n for n in base if stage_name(n) not in disabled]
    if not fusion:
        if not UNFUSED_PASSES:
            raise CompileError("unfused compilation (--no-fusion) is not available yet")
        passes = [stage_name(n) for n in names]
        at = passes.index("convert-graph-to-loop")
        if "annotate-fusion" in passes:
            at = passes.index("annotate-fusion")
        names[at:at] = UNFUSED_PASSES
    return names
