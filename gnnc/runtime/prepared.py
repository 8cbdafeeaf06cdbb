"""A call's native arguments, laid out once per call shape and graph; warm calls run them directly.

A kernel call's check (`signature.prepare_call`), its decision
(`autotune.decision.decide`), its plans (`graph.plans.build`) and the layout
of its native arguments depend only on the graph, on the inputs' dtypes,
shapes and layout, and on the threads and schedule asked for. `make` lays
the arguments out as a `Prepared` call: every fixed value (the graph's
arrays and counts, the decision's `num_threads` and `dims`) in place, and
where the call's inputs, results and workspace go. Every call runs through
one. When the inputs came as C-contiguous numpy arrays of the kernel's
dtype (by position or by name), the kernel keeps it on the graph (in
`graph.plans`, beside the decision, so it goes with the graph), and a later
call of the same shape (`runtime.module.call_key`) runs it without checking
or deciding again:
it allocates the results and the workspace, reads their and the inputs'
addresses (the graph's arrays' were read once, by the first call) and calls
the native code. Everything else (`out=`, Python numbers, other
arrays, a dict schedule) takes the checked way every time.

A graph new to the kernel (every mini-batch block) with a call of a shape
the kernel ran on another graph (the inputs' rows aside) reuses that
call's layout: the rows are checked against the new graph, the decision
made for it (a class decision's `Bound`, kept per layout and class of
graph), and where it runs the same kernel, plans and workspace buffers,
`Bound.on` puts the new graph's arrays and counts in the old layout's
places (`runtime.module.Kernel._run_as_before`).

On a 1,300-edge block this took a warm call's own cost from about 20 us to
about 5 us (docs/design/training.md, "Per-call overhead").
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gnnc import sharedlib
from gnnc.autotune.decision import Decision
from gnnc.runtime import memory, native

#: Small workspaces are kept for the next call of the shape (one set per call in flight):
#: allocating them costs more than a small call's work; larger ones are allocated per call.
KEEP_WORKSPACE_BYTES = 1 << 20

#: Where a pointer argument comes from: a fixed array, or the call's inputs, results, workspace.
_FIXED, _INPUT, _OUTPUT, _WORKSPACE = range(4)


@dataclass(eq=False)
class Prepared:
    """One call shape of one kernel on one graph, its native arguments laid out (see the module docstring)."""

    #: the kernel that runs (the called one or a variant), weakly: variants live on their kernel
    runner: weakref.ref[Any]
    dtype: np.dtype
    #: the results' shapes, in result order, and their names (None: one result, returned bare)
    results: tuple[tuple[int, ...], ...]
    names: tuple[str, ...] | None
    #: (name, elements) of each workspace buffer
    workspace: tuple[tuple[str, int], ...]
    #: the native arguments in ABI order, scalars in place (None where an address goes) ...
    values: list[Any]
    #: ... and each pointer argument: (position, source, index or the fixed array)
    pointers: tuple[tuple[int, int, Any], ...]
    #: the pointers a call fills: its inputs', results' and workspace's (the fixed arrays'
    #: addresses are read once, by the first call, into `values`)
    per_call: tuple[tuple[int, int, int], ...]
    threads: int
    #: what the runtime logs at DEBUG for each call (the decision's reason; a class decision's
    #: is formatted when logged: `decision.ClassReason`)
    reason: Any
    #: workspace sets of earlier calls, free for the next one (small workspaces only)
    spare: list[list[np.ndarray]]
    keep_workspace: bool
    #: what the fixed arrays belong to: the graph's plans and the decision
    keep: tuple[Any, ...]
    #: where each fixed value goes: (position, name, its index in `pointers` or None for a scalar)
    fixed: tuple[tuple[int, str, int | None], ...]
    #: whether the fixed arrays' addresses are still to be read into `values` (the first call's)
    unread: bool = True

    def layout(self) -> Prepared:
        """This call without its graph's arrays (the fixed values left empty): what a kernel
        keeps to lay out calls on other graphs (`bound`) without holding this
        graph's plans alive, which for a large graph are gigabytes."""
        values = list(self.values)
        pointers = list(self.pointers)
        for position, _, slot in self.fixed:
            values[position] = None
            if slot is not None:  # its address is read from the array by the call that fills it
                pointers[slot] = (position, _FIXED, None)
        return replace(
            self, results=(), values=values, pointers=tuple(pointers), reason="", keep=(None, self.keep[1]), unread=True
        )

    def bound(self, decided: Decision) -> Bound:
        """This call (a `layout`) with `decided`'s arguments in place (`decided` must run the
        same as this call's decision: `runs_as`): what its calls on graphs of one class share."""
        values = list(self.values)
        pointers = list(self.pointers)
        arguments = decided.arguments
        slots = []
        for position, name, slot in self.fixed:
            if name not in arguments:
                slots.append((position, name, slot))
            elif slot is None:
                values[position] = arguments[name]
            else:  # the decision keeps its arrays (`dims`) alive
                values[position] = sharedlib.address(arguments[name])
                pointers[slot] = (position, _FIXED, arguments[name])
        return Bound(self, decided, values, tuple(pointers), tuple(slots))

    def runs_as(self, decided: Decision) -> bool:
        """Whether `decided` (for another graph) runs what this call's decision runs: the same
        kernel, plan spec, graph-free arguments and workspace buffers (their sizes may differ)."""
        mine = self.keep[1]
        return (
            decided.kernel() is self.runner()
            and (decided.plans is mine.plans or decided.plans == mine.plans)
            and decided.arguments is mine.arguments
            and len(decided.workspace) == len(mine.workspace)
            and all(a[0] == b[0] for a, b in zip(decided.workspace, mine.workspace))
        )

    def accepts(self, args: tuple) -> bool:
        dtype = self.dtype
        return all(a.dtype == dtype for a in args)

    def __call__(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None = None) -> Any:
        """Runs the native code on inputs of the prepared shape, into `outputs` (fresh results
        without them); the result(s), or None when the kernel that would run is gone (the
        caller then takes the checked way)."""
        runner = self.runner()
        if runner is None:
            return None
        dtype = self.dtype
        if outputs is None:
            outputs = [memory.empty(shape, dtype) for shape in self.results]
        try:
            workspace = self.spare.pop()
        except IndexError:
            workspace = [memory.empty(n, dtype) for _, n in self.workspace]
        sources: tuple[Sequence[np.ndarray], ...] = ((), inputs, outputs, workspace)
        if self.unread:
            # the fixed arrays (the graph's, the decision's) are kept in `keep`: their addresses
            # hold for every call, read once (two threads may both read them: the same values)
            fixed = [(at, array) for at, source, array in self.pointers if source == _FIXED and array is not None]
            for (position, _), address in zip(fixed, sharedlib.addresses([array for _, array in fixed])):
                self.values[position] = address
            self.unread = False
        per_call = self.per_call
        values = list(self.values)
        for (position, _, _), address in zip(
            per_call, sharedlib.addresses([sources[source][index] for _, source, index in per_call])
        ):
            values[position] = address
        if self.threads > 1:
            native.note_pool_started()
        runner._native.call(values)
        if self.keep_workspace:
            self.spare.append(workspace)
        return outputs[0] if self.names is None else dict(zip(self.names, outputs))


@dataclass(eq=False)
class Bound:
    """A layout (`Prepared.layout`) with one decision's arguments in place (`Prepared.bound`).

    A kernel keeps one per call shape and class of graph: a mini-batch block (a new graph each
    call) of a class decided before takes it, and `on` puts its graph's arrays and counts in
    the places left, with their addresses read there: the call runs without a first pass."""

    layout: Prepared
    decided: Decision
    #: the native arguments in ABI order, the decision's in place, None where the graph's go
    values: list[Any]
    #: the layout's pointers, the decision's arrays in place
    pointers: tuple[tuple[int, int, Any], ...]
    #: where the graph's arguments go: (position, name, its index in `pointers` or None for a scalar)
    graph_slots: tuple[tuple[int, str, int | None], ...]

    def on(
        self, graph_arguments: Mapping[str, Any], workspace: tuple[tuple[str, int], ...], results: tuple, reason: Any
    ) -> Prepared:
        """The call on the graph of `graph_arguments` (`plans.build`'s), with this workspace
        (the decision's for that graph) and results of `results`' shapes."""
        layout = self.layout
        values = list(self.values)
        pointers = list(self.pointers)
        arrays = []
        for position, name, slot in self.graph_slots:
            value = graph_arguments.get(name)
            if slot is None:
                values[position] = value
            else:
                pointers[slot] = (position, _FIXED, value)
                if value is not None:
                    arrays.append((position, value))
        for (position, _), address in zip(arrays, sharedlib.addresses([a for _, a in arrays])):
            values[position] = address
        same_workspace = workspace == layout.workspace
        return Prepared(
            runner=layout.runner,
            dtype=layout.dtype,
            results=results,
            names=layout.names,
            workspace=workspace,
            values=values,
            pointers=tuple(pointers),
            per_call=layout.per_call,
            threads=layout.threads,
            reason=reason,
            # workspace sets of the same sizes serve both (a small call's are graph-free)
            spare=layout.spare if same_workspace else [],
            keep_workspace=layout.keep_workspace if same_workspace else _keeps(workspace, layout.dtype),
            keep=(graph_arguments, self.decided),
            fixed=layout.fixed,
            unread=False,
        )


def make(runner: Any, decided: Decision, graph_arguments: Mapping[str, Any], outputs: Sequence[np.ndarray]) -> Prepared:
    """The call `runner` makes with `decided`, these graph arguments and outputs of these shapes."""
    function = runner._native
    # by the ABI's names: a parameter named like a fixed argument gets a trailing underscore there
    sources = {name: (_INPUT, i) for i, name in enumerate(function._params)}
    sources.update({name: (_OUTPUT, i) for i, name in enumerate(function._results)})
    sources.update({name: (_WORKSPACE, i) for i, (name, _) in enumerate(decided.workspace)})
    fixed = {**graph_arguments, **decided.arguments}
    values: list[Any] = []
    pointers: list[tuple[int, int, Any]] = []
    fixed_at: list[tuple[int, str, int | None]] = []
    for position, (name, pointer) in enumerate(function._layout):
        source, index = sources.get(name, (_FIXED, fixed.get(name)))
        if source == _FIXED:
            fixed_at.append((position, name, len(pointers) if pointer else None))
        if pointer:
            pointers.append((position, source, index))
            values.append(None)
        else:
            values.append(index)
    dtype = runner._dtype
    return Prepared(
        runner=weakref.ref(runner),
        dtype=dtype,
        results=tuple(o.shape for o in outputs),
        names=None if runner._single_result else runner._result_names,
        workspace=decided.workspace,
        values=values,
        pointers=tuple(pointers),
        per_call=tuple(p for p in pointers if p[1] != _FIXED),
        threads=int(decided.arguments.get("num_threads", 1)),
        reason=decided.reason,
        spare=[],
        keep_workspace=_keeps(decided.workspace, dtype),
        keep=(graph_arguments, decided),
        fixed=tuple(fixed_at),
    )


def _keeps(workspace: tuple[tuple[str, int], ...], dtype: np.dtype) -> bool:
    return sum(n for _, n in workspace) * dtype.itemsize <= KEEP_WORKSPACE_BYTES


__all__ = ["KEEP_WORKSPACE_BYTES", "Bound", "Prepared", "make"]
