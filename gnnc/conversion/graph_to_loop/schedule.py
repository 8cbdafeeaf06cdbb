"""A graph kernel's schedule, as convert-graph-to-loop reads it and the loop passes consume it."""

from __future__ import annotations

from typing import cast

from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute

from gnnc.ir import graph
from gnnc.ir.schedule import CpuSchedule, sizes_text


def schedule_entries(fn: func.FuncOp) -> dict[str, str]:
    """The kernel's schedule directives (irgen's `graph.SCHEDULE` attribute), by key."""
    attr = fn.attributes.get(graph.SCHEDULE)
    return {k: cast(StringAttr, v).data for k, v in attr.data.items()} if isinstance(attr, DictionaryAttr) else {}


def cpu_schedule(fn: func.FuncOp) -> CpuSchedule:
    return CpuSchedule.from_attr(schedule_entries(fn))


def loop_schedule(fn: func.FuncOp) -> DictionaryAttr:
    """The CPU schedule, defaults filled in, as the loop passes consume it."""
    sched = cpu_schedule(fn)
    result: dict[str, Attribute] = {"parallel": StringAttr("dst"), "order": StringAttr(sched.order)}
    if "cpu.prefetch" in schedule_entries(fn):
        # without it prefetch-neighbors takes its default distance; a pipeline without that
        # pass (gnnc-opt ... -p convert-graph-to-loop,convert-loop-to-scf) then runs unprefetched
        result["prefetch"] = IntegerAttr(sched.prefetch, i64)
    if sched.tile_features is not None:
        result["tile"] = IntegerAttr(sched.tile_features, i64)
    if sched.partitions is not None:
        result["partition"] = IntegerAttr(sched.partitions, i64)
    if sched.edge_order is not None:
        result["edges"] = StringAttr(sched.edge_order)
    if sched.vector_width is not None:
        result["vectorize"] = IntegerAttr(sched.vector_width, i64)
    if sched.sizes is not None:
        result["specialize"] = StringAttr(sizes_text(dict(sched.sizes)))
    if sched.edges_sorted:
        result["edge_ids"] = StringAttr("sorted")
    if sched.edge_lanes is not None:
        result["vectorize_edges"] = IntegerAttr(sched.edge_lanes, i64)
    return DictionaryAttr(result)
