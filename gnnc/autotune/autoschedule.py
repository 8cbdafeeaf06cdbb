"""`schedule="auto"`: the tuned schedule if `gnnc tune` found one, else the predictor's, else the default.

In that order: an entry of the tuning cache for this kernel, graph
signature, feature sizes and machine; the predictor's pick from the nearest
tuned cases (`predictor.py`); the default heuristic. `decision.decide` asks
once per graph and call shape, and keeps its decision on the graph, so only
the first call pays for the lookup.
"""

from __future__ import annotations

import logging
from collections.abc import Set
from dataclasses import dataclass
from typing import Any

import numpy as np

from gnnc.autotune import heuristic, predictor
from gnnc.autotune.cache import TuningCache, entry_key, kernel_key
from gnnc.autotune.threads import thread_count_problem

_CACHE = TuningCache()
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Choice:
    #: directive text ('' for the kernel as compiled)
    schedule: str
    #: a thread count the tuner preferred, or None for the call's
    threads: int | None
    #: "tuned", "predicted" or "default"
    origin: str


def choose(
    kernel: Any, graph: Any, dims: dict[str, int], cache: TuningCache | None = None, skip: Set[str] = frozenset()
) -> Choice:
    """What `schedule="auto"` runs for this call, skipping schedules the kernel refused and those in
    `skip` (the ones that failed for this call). A tuning-cache entry that is malformed (a thread count
    outside 1 .. max_threads()) or refused is skipped with a log line, for the predictor or the default."""
    cache = cache or _CACHE
    source = kernel._metadata.get("source")
    signature = graph.signature()
    if source is not None:
        entry = cache.lookup(entry_key(kernel_key(source, kernel.name, kernel.signature.dtype), signature, dims))
        if entry is not None:
            schedule = heuristic.fit_edge_ids(entry["schedule"], graph)
            threads = entry.get("threads")
            problem = None if threads is None else thread_count_problem(threads)
            if problem is not None:
                _log.warning("%s: tuning cache entry %r ignored: %s", kernel.name, entry["schedule"], problem)
            elif schedule in kernel._refused or schedule in skip:
                _log.debug("%s: tuning cache entry %r skipped: it does not apply to this call", kernel.name, schedule)
            else:
                return Choice(schedule, None if threads is None else int(threads), "tuned")
    itemsize = np.dtype(kernel.signature.numpy_dtype).itemsize
    model = predictor.load_model()
    if model is not None and source is not None:
        traits = predictor.kernel_traits(kernel._abi, kernel.signature.params, kernel.signature.results, dims, itemsize)
        for rank in model.rank(signature, traits):
            directives, threads = predictor.split_threads(rank.key)
            if threads is not None and thread_count_problem(threads) is not None:
                continue
            concrete = predictor.concrete_schedule(directives, traits["row"], traits["sizes"])
            if concrete is None or concrete in kernel._refused:
                continue
            lanes = heuristic.lane_walks_for(kernel._abi, dims, graph)
            sized = kernel._abi.lanes is not None and kernel._abi.lanes.sized
            fitted = heuristic.fit_edge_ids(concrete, graph)
            fitted = heuristic.fit_edge_lanes(heuristic.fit_reorder(fitted, kernel, graph, dims), graph, lanes, sized)
            if fitted in kernel._refused or fitted in skip:
                continue
            return Choice(fitted, threads, "predicted")
    default = heuristic.kernel_default(kernel, graph, dims)
    return Choice("; ".join(default.splitlines()) if default else "", None, "default")
