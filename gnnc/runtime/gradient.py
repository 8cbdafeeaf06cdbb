"""Running generated gradient kernels: stages first, each on the forward or the reversed graph.

This module imports no compiler: it gets a loaded module (compiled or the
reference) and the list of gradient kernels `frontend.grad` generated, in
the order they run. A kernel's result is a part of a forward input's
gradient or of an intermediate (`st0__`: a softmax's weights, an argmax's
edge ids, a vertex value's adjoint) that later kernels take as an input;
parts of one target are summed. A kernel of several results (kernels that
walk one graph in turn, sharing the walk: `_Builder.share_walks`) gives a
part of each of its `parts`' targets at once.

A weight's gradient (W of `a @ W`) comes as dense products: a kernel gives
G, its adjoints summed per vertex ([V, .., N], the size of an input's
gradient), and names its factor F ([V, .., K]: the input `a` reads, or an
intermediate); the part is F^T G, one matrix product, so no kernel writes
a [K, N] partial per destination. Other parameter parts (`reduce`) are
still one partial per destination, the size of the value they scale.

A relation tensor's gradient (W of `a @ W[rel(e)]`, or `att[rel(e)]` read
elementwise) comes per edge: a kernel gives one row per edge id, and the
part is, per relation r, the sum of r's rows (`relation` "sum") or the
product F_r^T G_r of the factor's rows at r's edges' sources ("u") or
destinations ("v") and r's rows of G: one dense product per relation,
over the edges `plans.relation_edges` groups. Where the gradient has a pair
kernel for it (`pairs`), G is never written per edge: that kernel sums it per
(end, relation) pair on `plans.pair_graph`, and the product takes one factor
row per pair. An input read by such a product (`x[u] @ W[rel(e)]`) may take
its gradient from the same pair sums (`via_pairs`): each pair's row times its
relation's W^T, summed per vertex on `plans.pair_vertex_graph`; the sums are
computed once per call for both.

On a bipartite graph (DGL's block convention: destinations are the first
sources) an input read at both sides has num_src rows, yet a gradient kernel
may read it only where the forward kernel read destinations (at `u` of the
reversed graph, num_dst rows): it gets the leading rows. A gradient part per
destination (num_dst rows) of such an input adds into its leading rows. On
a square graph an input's part at `v` (with no edge sum) and its part at `u`
come from one reversed kernel instead (GradKernel.square: the fused kernel
runs on square graphs, the two parts on bipartite ones).

What happens to arrays between kernels (summing parts, transposing a
weight, casting, zeros) goes through an `Arrays` object: `HostArrays`
(numpy) by default; `gnnc.torch` gives one for CUDA tensors, so the same
runner drives the PTX gradient kernels without leaving the device.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from gnnc.autotune.decision import resolve_threads
from gnnc.errors import ArgumentError
from gnnc.graph import plans
from gnnc.graph.coo import CooGraph
from gnnc.graph.graph import Graph
from gnnc.runtime import memory, products
from gnnc.runtime.signature import NO_GRAPH, take_graph, vertex_rows

#: The suffix of an input's destination rows, `NAME_dst__` (lang.autodiff's dst_view_name).
_DST = "_dst__"

#: Pair sums of at least this many bytes go into an array kept for the next call of that shape.
#: glibc serves an allocation above its mmap threshold (at most 32 MiB) with fresh pages and
#: unmaps them when freed: WordNet R-GCN-64's two pair sums (54 and 38 MiB) then cost 6,000
#: page faults and about 45 ms of system time an epoch, 10% of it (docs/design/heterogeneous.md).
KEEP_PAIR_SUMS_BYTES = 16 << 20
#: Kept pair-sum arrays per gradient, the least recently used dropped first.
KEEP_PAIR_SUMS = 4
#: A gradient renumbers a graph's edges (`Gradient.in_csr_order`) from this many edges up:
#: below, its per-edge intermediates sit in the L2 cache, where the scatter costs little.
#: The rule reads the edges alone, never the graph's kind, so that a forward on a
#: `CooGraph` (gnnc.torch's first call on a small block) and a backward on the same
#: edges as a `Graph` agree on the numbering of what one saves for the other.
RENUMBER_MIN_EDGES = 1 << 14
#: Edge ids are exact in float32 below this (argmax gradients compare them as floats).
_F32_EXACT = 2**24


class GradStep(NamedTuple):
    """One generated gradient kernel as the runtime runs it: `lang.autodiff.GradKernel`'s
    fields, which `api.compile_grad` copies here (the runtime imports no compiler). The
    fields' meanings are GradKernel's."""

    name: str
    #: A forward input (its gradient) or an intermediate (`st3__`) this kernel makes a part of.
    wrt: str
    #: It runs on the reversed graph.
    reverse: bool
    #: It gives a partial gradient per vertex, summed here down to the parameter's shape.
    reduce: bool
    #: Intermediates it reads.
    inputs: tuple[str, ...]
    #: A weight gradient as the dense product factor^T G; "" for none.
    factor: str
    #: A relation tensor's gradient: "sum", "u", "v"; "" for none.
    relation: str
    #: Square graphs only (True), bipartite only (False), every graph (None).
    square: bool | None
    #: The pair-sum kernel of a relation product; "".
    pairs: str
    #: (pair-sum kernel, transform kernel, weight, side) entries of an input's part.
    via_pairs: tuple[tuple[str, str, str, str], ...]
    #: A shared walk's results as (result name, what it is a part of); () for one result.
    parts: tuple[tuple[str, str], ...]
    #: The kernels a shared walk merges, each as it runs alone.
    members: tuple[GradStep, ...]


class HostArrays:
    """How a gradient runs its kernels and treats their arrays: numpy host arrays.

    Another array library subclasses it and overrides every method; `run`
    calls one kernel and returns its result(s) as arrays of that library."""

    #: Whether relation products sum their edge rows per pair with the gradient's `pairs`
    #: kernel (`pair_products`); else `relation_products` gathers them per relation.
    pair_sums = True
    #: Whether a gradient with per-edge intermediates runs on the graph's edges numbered in
    #: in-CSR order (`Gradient.in_csr_order`), its edge rows renumbered by `edge_rows`.
    renumbers_edges = True

    def run(self, kernel: Any, graph: Graph | CooGraph, named: dict[str, Any], threads: int | None) -> Any:
        signature = getattr(kernel, "signature", None)
        if signature is not None and len(named) == len(signature.params):
            try:  # positionally: a warm call of a compiled kernel runs prepared (runtime/prepared.py)
                args = [named[p.name] for p in signature.params]
            except KeyError:
                pass
            else:
                return kernel(graph, *args, threads=threads) if threads is not None else kernel(graph, *args)
        return kernel(graph, threads=threads, **named) if threads is not None else kernel(graph, **named)

    def run_into(self, kernel: Any, graph: Graph, named: dict[str, Any], threads: int | None, out: Any) -> Any:
        """`run`, the kernel's one result written into `out`."""
        return (
            kernel(graph, out=out, threads=threads, **named) if threads is not None else kernel(graph, out=out, **named)
        )

    def dtype(self, a: Any) -> np.dtype:
        """The element type of an array or a Python number, as a numpy dtype."""
        return np.asarray(a).dtype

    def shape(self, a: Any) -> tuple[int, ...]:
        return np.shape(a)

    def cast(self, a: Any, dtype: np.dtype) -> Any:
        return a.astype(dtype, copy=False)

    def transposed(self, a: Any) -> Any:
        """The first two axes swapped, contiguous."""
        return np.ascontiguousarray(np.swapaxes(np.asarray(a), 0, 1))

    def sum_leading(self, a: Any, axes: int) -> Any:
        """The sum over the first `axes` axes, in the array's type."""
        return np.asarray(a.sum(axis=tuple(range(axes)), dtype=a.dtype))

    def add_parts(self, total: Any, part: Any) -> Any:
        return _add_parts(total, part)

    def edge_rows(self, a: Any, perm: np.ndarray) -> Any:
        """`a`'s rows in the order `perm` (row i is `a[perm[i]]`)."""
        return np.asarray(a)[perm]

    def edge_rows_back(self, a: Any, perm: np.ndarray) -> Any:
        """`edge_rows` undone: row `perm[i]` is `a[i]`."""
        out = np.empty_like(a)
        out[perm] = a
        return out

    def padded(self, a: Any, rows: int) -> Any:
        """`a` with zero rows appended up to `rows`."""
        padded = np.zeros((rows,) + a.shape[1:], dtype=a.dtype)
        padded[: a.shape[0]] = a
        return padded

    def zeros_like(self, a: Any) -> Any:
        return np.zeros_like(np.asarray(a))

    def product(self, factor: Any, summed: Any, threads: int = 1) -> Any:
        """F^T G over the vertex (and leading) axes (see `_product`), on `threads` workers."""
        return _product(factor, summed, threads)

    def transposed_last(self, a: Any) -> Any:
        """The last two axes swapped, contiguous (a relation tensor's matrices, each transposed)."""
        return np.ascontiguousarray(np.swapaxes(np.asarray(a), -1, -2))

    def relation_sums(self, rows: Any, graph: Graph) -> Any:
        """[E, ..] rows by edge id summed per relation: [R, ..]."""
        order, offsets = plans.relation_edges(graph)
        rows = np.asarray(rows)
        relations = graph.num_relations or 0
        out = np.zeros((relations, *rows.shape[1:]), dtype=rows.dtype)
        for r in range(relations):
            if offsets[r + 1] > offsets[r]:
                out[r] = rows[order[offsets[r] : offsets[r + 1]]].sum(axis=0, dtype=rows.dtype)
        return out

    def relation_products(
        self, factor: Any, rows: Any, ends: np.ndarray, graph: Graph, blocks: int = 0, threads: int = 1
    ) -> Any:
        """Per relation r, F[ends[r's edges]]^T G[r's edges] over the edge (and leading) axes:
        [R, K, N] from F [V, .., K] and G [E, .., N]; with `blocks` leading axes kept, one
        product per leading index, [R, .., K, N] (see `_relation_products`); on `threads` workers."""
        return _relation_products(np.asarray(factor), np.asarray(rows), ends, graph, blocks, threads)

    def pair_products(self, factor: Any, sums: Any, graph: Graph, side: str, blocks: int = 0, threads: int = 1) -> Any:
        """Per relation r, F[r's pairs' vertices]^T S[r's pairs]: [R, K, N] (or [R, .., K, N] with
        `blocks`) from F [V, .., K] and the rows summed per (vertex, relation) pair of `side`,
        S [P, .., N] (see `_pair_products`); on `threads` workers."""
        return _pair_products(np.asarray(factor), np.asarray(sums), plans.relation_pairs(graph, side), blocks, threads)


HOST = HostArrays()


class Gradient:
    """`grad(graph, *inputs, gout=..., **named)` -> {input name: gradient}.

    `gout` is the gradient of the loss with respect to the forward kernel's
    result; for a kernel with several results, a dict {result name: gradient}
    (a result left out counts as zeros). Inputs the results do not depend on
    get zeros.
    """

    def __init__(
        self,
        module: Any,
        kernel: str,
        kernels: list[GradStep],
        params: list[str],
        constant: list[str],
        skipped: list[str],
        results: list[str] | None = None,
        gouts: list[str] | None = None,
        uses_edge_ids: bool = False,
        transposes: list[str] | None = None,
        saved: list[str] | None = None,
        relation_transposes: list[str] | None = None,
        pair_module: Any = None,
        in_csr_order: bool = False,
        edge_tensors: list[str] | None = None,
    ):
        self.module = module
        #: the kernels that sum relation products' edge rows per pair (`pairs` of `kernels`)
        self.pair_module = pair_module
        self.name = kernel
        #: the kernels, in the order they run
        self.kernels = kernels
        self.params = params
        self.constant = constant
        self.skipped = skipped
        self.results = results or ["out"]
        self.gouts = gouts or ["gout__"]
        self.uses_edge_ids = uses_edge_ids
        self.transposes = transposes or []
        #: relation tensors whose per-relation transposes the kernels take (`a @ W[rel(e)]` backwards)
        self.relation_transposes = relation_transposes or []
        #: intermediates `forward` also returns (they need no gout), so a training step computes them once
        self.saved = saved or []
        #: how kernels are called and their arrays treated (`with_arrays`)
        self.arrays = HOST
        #: large pair-sum arrays kept between calls, shared by this gradient's copies
        self._kept = _KeptArrays()
        #: the program keeps per-edge intermediates and never reads edge ids: it runs on the
        #: graph's edges numbered in in-CSR order (`plans.in_csr_numbering`), where the kernels
        #: write and read those rows by position (GATConv's backward on edges in PyG's order,
        #: by source, took 1.6x as long as on edges by destination: docs/design/training.md)
        self.in_csr_order = in_csr_order
        #: the forward inputs and results with one row per edge (renumbered with the edges)
        self.edge_tensors = edge_tensors or []
        #: `reads()`, once computed
        self._reads: frozenset[str] | None = None
        self._reads_known = False

    def with_arrays(self, arrays: HostArrays) -> Gradient:
        """A copy that calls its kernels and treats their arrays through `arrays`."""
        other = copy.copy(self)
        other.arrays = arrays
        return other

    def restricted_to(self, wanted: tuple[str, ...]) -> Gradient:
        """A copy that runs only the kernels computing a `wanted` input's gradient, or an
        intermediate one of those reads (the kernels run in order, so a reversed walk
        collects every input a later kernel needs). A shared walk runs where every part of
        it is needed; where only some are, the kernels of those parts run instead (they
        were compiled with it), so that no walk computes a gradient nobody asked for."""
        needed = set(wanted)
        # each shared walk as its members, in their order: where they run is where it runs
        apart = [m for k in self.kernels for m in (k.members or (k,))]
        for m in reversed(apart):
            if m.wrt in needed:
                needed.update(m.inputs)
                if m.factor.endswith("__"):  # an intermediate; an input factor is read, not differentiated
                    needed.add(m.factor)
        kept: list[GradStep] = []
        for k in self.kernels:
            group = k.members or (k,)
            members = [m for m in group if m.wrt in needed]
            kept += [k] if len(members) == len(group) else members
        pruned = copy.copy(self)
        pruned.kernels = kept
        pruned.constant = [c for c in self.constant if c in wanted]
        pruned._reads_known = False
        return pruned

    def reads(self) -> frozenset[str] | None:
        """The forward inputs whose values these kernels may read; None where that cannot be
        told (the reference module's kernels carry no signature). A vertex input none of them
        reads (its `sides` are empty in every signature: GCN's features, for the gradient of
        those features) needs only its shape here: a caller may pass a broadcast stand-in,
        so that a training step keeps no copy of it (`gnnc.torch.ops`)."""
        if self._reads_known:
            return self._reads
        modules = [self.module] + ([self.pair_module] if self.pair_module is not None else [])
        read = {*self.transposes, *self.relation_transposes}
        for step in self.kernels:
            kernels = [getattr(modules[0], step.name)]
            if step.pairs:
                kernels.append(getattr(modules[-1], step.pairs))
            for sums, transform, weight, _ in step.via_pairs:
                kernels += [getattr(modules[-1], sums), getattr(modules[-1], transform)]
                read.add(weight)
            for kernel in kernels:
                signature = getattr(kernel, "signature", None)
                if signature is None:
                    self._reads, self._reads_known = None, True
                    return None
                read.update(
                    p.name.removesuffix(_DST).removesuffix("_T__")
                    for p in signature.params
                    if p.domain != "V" or p.sides
                )
            if step.factor and not step.factor.endswith("__"):
                read.add(step.factor)
        self._reads, self._reads_known = frozenset(read & set(self.params)), True
        return self._reads

    def _gouts(self, gout: Any, named: dict) -> dict[str, Any]:
        if len(self.results) == 1:
            if isinstance(gout, dict):
                gout = gout.get(self.results[0])
            return {self.gouts[0]: gout}
        if not isinstance(gout, dict):
            raise ArgumentError(f"{self.name} has results {', '.join(self.results)}: pass gout as a dict of them")
        unknown = [k for k in gout if k not in self.results]
        if unknown:
            raise ArgumentError(f"{self.name}: gout names unknown results {', '.join(unknown)}")
        return {g: gout.get(r) for r, g in zip(self.results, self.gouts)}

    def forward(
        self, graph: Any = NO_GRAPH, /, *args: Any, threads: int | None = None, **kwargs: Any
    ) -> tuple[Any, dict]:
        """The forward kernel's results (as the kernel returns them) and the intermediates to pass as `saved=`."""
        graph = take_graph(graph, kwargs)
        named = self._named(args, kwargs)
        if not self.saved:
            raise ArgumentError(
                f"{self.name}: its gradient reuses nothing from the forward pass; run the kernel itself"
            )
        graph, perm = self._numbered(graph, named)
        out = self.arrays.run(getattr(self.module, f"{self.name}__forward"), graph, named, threads)
        saved = {n: out.pop(n) for n in self.saved}
        if perm is not None:  # the saved intermediates stay in the numbering the gradient runs on
            for r in self.results:
                if r in self.edge_tensors:
                    out[r] = self.arrays.edge_rows_back(out[r], perm)
        return (out[self.results[0]] if len(self.results) == 1 else out), saved

    def _numbered(self, graph: Any, named: dict, gouts: bool = False) -> tuple[Any, np.ndarray | None]:
        """The graph the kernels run on and, where that numbers the edges in in-CSR order
        (`in_csr_order`), the renumbering, the edge inputs in `named` renumbered with it (and,
        with `gouts`, the gouts of edge results, renumbered as those results are).

        A tensor of the wrong row count stays as it is, for the kernel to refuse."""
        if not (self.in_csr_order and self.arrays.renumbers_edges and isinstance(graph, (Graph, CooGraph))):
            return graph, None
        if graph.num_edges < RENUMBER_MIN_EDGES or graph.edges_sorted:
            return graph, None
        if isinstance(graph, CooGraph):
            graph = graph.graph()
        view, perm = plans.in_csr_numbering(graph)
        names = [p for p in self.params if p in self.edge_tensors]
        if gouts:
            names += [g for r, g in zip(self.results, self.gouts) if r in self.edge_tensors]
        for n in names:
            if named.get(n) is not None:
                shape = self.arrays.shape(named[n])
                if shape and shape[0] == graph.num_edges:
                    named[n] = self.arrays.edge_rows(named[n], perm)
        return view, perm

    def _named(self, args: tuple, kwargs: dict) -> dict:
        if len(args) > len(self.params):
            raise ArgumentError(f"{self.name}: {len(self.params)} inputs expected, got {len(args)}")
        named = dict(zip(self.params, args))
        for key in kwargs:
            if key in named:
                raise ArgumentError(f"{self.name}: input '{key}' given twice")
        named.update(kwargs)
        return named

    def __call__(
        self,
        graph: Any = NO_GRAPH,
        /,
        *args: Any,
        gout: Any,
        threads: int | None = None,
        saved: dict | None = None,
        **kwargs: Any,
    ) -> dict:
        graph = take_graph(graph, kwargs)
        if not isinstance(graph, (Graph, CooGraph)):
            raise ArgumentError(f"the first argument must be a gnnc.Graph, got {type(graph).__name__}")
        if isinstance(graph, CooGraph) and any(k.relation or k.pairs or k.via_pairs for k in self.kernels):
            graph = graph.graph()  # relation products and sums read the edges' ends and types
        named = self._named(args, kwargs)
        gouts = self._gouts(gout, named)
        missing = [r for r, g in zip(self.results, self.gouts) if gouts[g] is None]
        if missing:
            raise ArgumentError(
                f"{self.name}: no gout for result {', '.join(missing)} (pass zeros for a result the loss does not use)"
            )
        named.update(gouts)
        arrays = self.arrays
        graph, perm = self._numbered(graph, named, gouts=True)
        for w in self.transposes:  # `a @ W` backwards is `adj @ W^T`
            if w not in named:
                raise ArgumentError(f"{self.name}: input '{w}' is missing")
            named[f"{w}_T__"] = arrays.transposed(named[w])
        for w in self.relation_transposes:  # `a @ W[rel(e)]` backwards is `adj @ W^T[rel(e)]`
            if w not in named:
                raise ArgumentError(f"{self.name}: input '{w}' is missing")
            named[f"{w}_T__"] = arrays.transposed_last(named[w])
        # the kernels' type: the incoming gradients have it (a scalar input may be a Python float)
        dtype = arrays.dtype(gouts[self.gouts[0]])
        if self.uses_edge_ids and graph.num_edges > _F32_EXACT and dtype == np.float32:
            raise ArgumentError(
                f"{self.name}: the gradient of max/min compares edge ids as float32, exact only "
                f"below 2^24 edges; this graph has {graph.num_edges}: use float64"
            )
        values: dict[str, np.ndarray] = {}
        unknown = sorted(set(saved or {}) - set(self.saved))
        if unknown:
            raise ArgumentError(f"{self.name}: saved= has {', '.join(unknown)}, which forward() does not give")
        values.update(saved or {})
        square = not graph.bipartite
        workers = resolve_threads(threads)  # the weight products' (runtime/products.py)
        by_pairs = self.pair_module is not None and arrays.pair_sums
        summed: dict[str, Any] = {}  # pair sums by kernel: a weight's and an input's gradient share them
        taken: list[tuple[tuple, Any]] = []  # kept arrays this call wrote, given back at its end

        def pair_sums(pairs: str, side: str, weight: str, call: dict) -> Any:
            """The adjoints summed per (end, relation) pair by kernel `pairs` (`_Builder.pair_kernel`)."""
            if pairs not in summed:
                kernel, g = getattr(self.pair_module, pairs), plans.pair_graph(graph, side)
                fitted = _leading_rows(kernel, g, _read_by(kernel, call))
                # a pair's adjoint row is the product's: [.., N] of W [R, .., K, N]
                w = arrays.shape(named[weight])
                key = (pairs, (g.num_dst, *w[1:-2], w[-1]), dtype)
                out = self._kept.take(key)
                if out is None:  # the reference module's are float64: the kernels that read them take dtype
                    summed[pairs] = arrays.cast(arrays.run(kernel, g, fitted, threads), dtype)
                else:
                    summed[pairs] = arrays.run_into(kernel, g, fitted, threads, out)
                    taken.append((key, out))
            return summed[pairs]

        def add(target: str, part: Any) -> None:
            """A part of `target`'s gradient (or intermediate), summed with its earlier parts."""
            values[target] = part if target not in values else arrays.add_parts(values[target], part)

        for name, wrt, reverse, reduce, inputs, factor, relation, on_square, pairs, via, parts, _ in self.kernels:
            if saved and all(w in saved for w in ([w for _, w in parts] if parts else [wrt])):
                continue  # the forward pass computed it
            if on_square is not None and on_square != square:
                continue  # a fused kernel on a bipartite graph, or its two parts on a square one
            g = graph.reversed() if reverse else graph
            call = dict(named)
            # the reference module returns float64 whatever the kernel's type: intermediates take it back
            call.update({n: arrays.cast(values[n], dtype) for n in inputs if n in values})
            # an input read at both ends by a reversed kernel: its reads at forward destinations
            call.update({n: _destination_rows(named, n[: -len(_DST)], graph) for n in inputs if n not in values})
            if parts:  # one walk of several kernels (`_Builder.share_walks`): plain parts
                kernel = getattr(self.module, name)
                results = arrays.run(kernel, g, _leading_rows(kernel, g, call) if graph.bipartite else call, threads)
                for result, target in parts:
                    if not (saved and target in saved):
                        add(target, results[result])
                continue
            # an intermediate's name ends in `__`; an input's part of values is its gradient
            f = (values[factor] if factor.endswith("__") else named[factor]) if factor else None
            # a relation weight: a block per leading index (W: [R, .., K, N]) or one matrix ([R, K, N])
            blocks = len(arrays.shape(named[wrt])) - 3 if relation in ("u", "v") else 0
            if relation in ("u", "v") and pairs and by_pairs:
                # its adjoints summed per (end, relation) pair, never written per edge, then one
                # factor row a pair (`_Builder.pair_kernel`, `_pair_products`)
                side = "src" if relation == "u" else "dst"
                sums = pair_sums(pairs, side, wrt, call)
                part = arrays.pair_products(f, sums, graph, side, blocks, threads=workers)
            elif via and by_pairs:
                # an input's part through its weights' pair sums: per pair, the row times its
                # relation's W^T, summed per vertex (`_Builder.resolve_pair_inputs`)
                part = None
                for sums_kernel, transform, weight, site in via:
                    side = "src" if site == "u" else "dst"
                    rows = {"s": pair_sums(sums_kernel, side, weight, call), f"{weight}_T__": named[f"{weight}_T__"]}
                    t = arrays.run(
                        getattr(self.pair_module, transform), plans.pair_vertex_graph(graph, side), rows, threads
                    )
                    part = t if part is None else arrays.add_parts(part, t)
            else:
                kernel = getattr(self.module, name)
                if graph.bipartite:
                    call = _leading_rows(kernel, g, call)
                part = arrays.run(kernel, g, call, threads)
                if reduce:  # partial gradients of a parameter: per vertex (and head), summed down to its shape
                    part = arrays.sum_leading(part, len(arrays.shape(part)) - len(arrays.shape(named[wrt])))
                if relation == "sum":
                    part = arrays.relation_sums(part, graph)
                elif relation:
                    ends = graph.src if relation == "u" else graph.dst
                    part = arrays.relation_products(f, part, ends, graph, blocks, threads=workers)
                elif factor:
                    part = arrays.product(f, part, threads=workers)
            add(wrt, part)
        grads = {k: v for k, v in values.items() if k in self.params}
        if graph.bipartite:
            for wrt, grad in grads.items():
                given = arrays.shape(named[wrt]) if wrt in named else ()
                if given and arrays.shape(grad) and arrays.shape(grad)[0] < given[0]:
                    grads[wrt] = arrays.padded(grad, given[0])
        if perm is not None:
            for wrt in grads:
                if wrt in self.edge_tensors:
                    grads[wrt] = arrays.edge_rows_back(grads[wrt], perm)
        for name in self.constant:
            grads[name] = arrays.zeros_like(named[name])
        for key, array in taken:  # no kernel of this call reads them any more
            self._kept.keep(key, array)
        return grads


class _KeptArrays:
    """Arrays of at least KEEP_PAIR_SUMS_BYTES kept between calls by (name, shape, dtype), at most
    KEEP_PAIR_SUMS of them; a call in flight has taken its array out, so calls on other threads
    get fresh ones. `take` gives a kept array, a fresh one for a large key not kept yet, or None
    for a small key (the allocator serves those from memory it keeps)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrays: OrderedDict[tuple, np.ndarray] = OrderedDict()

    def take(self, key: tuple) -> np.ndarray | None:
        _, shape, dtype = key
        dtype = np.dtype(dtype)
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize < KEEP_PAIR_SUMS_BYTES:
            return None
        with self._lock:
            kept = self._arrays.pop(key, None)
        return memory.empty(shape, dtype) if kept is None else kept

    def keep(self, key: tuple, array: np.ndarray) -> None:
        """Gives back an array `take` gave for `key`."""
        with self._lock:
            self._arrays[key] = array
            while len(self._arrays) > KEEP_PAIR_SUMS:
                self._arrays.popitem(last=False)


def _product(factor: Any, summed: np.ndarray, threads: int = 1) -> np.ndarray:
    """F^T G over the vertex (and leading) axes: F [V, .., K], G [V, .., N] -> [K, N].

    On a bipartite graph a factor read at `v` of an input with num_src rows
    (the block convention) pairs its leading rows with G's num_dst."""
    f = np.asarray(factor)[: summed.shape[0]].astype(summed.dtype, copy=False)
    if f.shape[:-1] != summed.shape[:-1]:
        raise ArgumentError(f"a weight gradient's factor has shape {f.shape}, its adjoint sum {summed.shape}")
    return products.product(f.reshape(-1, f.shape[-1]), summed.reshape(-1, summed.shape[-1]), threads)


def _relation_products(
    factor: np.ndarray, rows: np.ndarray, ends: np.ndarray, graph: Graph, blocks: int = 0, threads: int = 1
) -> np.ndarray:
    """Per relation r: F[ends[r's edges]]^T G[r's edges], F [V, .., K] and G [E, .., N] -> [R, K, N],
    summed over the leading axes; with `blocks` (the leading axes, a matrix per leading index of
    a block-diagonal weight) one product per leading index, [R, .., K, N].

    The factor's rows at an edge's end: its source (`graph.src`) or destination
    (`graph.dst`); on a bipartite graph a factor read at `v` of a block-convention
    input has its destinations first, so destination ids index it too. Each
    relation's edges are cut into items of at most CHUNK_ROWS, gathered and
    multiplied on the call's threads (runtime/products.py). Within a relation the edges
    go by their end (`plans.relation_edges_by_end`), and an item first sums the rows of
    each run of edges with one end (a (vertex, relation) pair): one factor row gathered
    and multiplied per pair, not per edge (WordNet: 0.61 pairs an edge)."""
    if factor.shape[1:-1] != rows.shape[1:-1]:
        raise ArgumentError(f"a relation weight's factor has shape {factor.shape}, its edge adjoints {rows.shape}")
    if ends is graph.src or ends is graph.dst:
        order, offsets = plans.relation_edges_by_end(graph, "src" if ends is graph.src else "dst")
    else:
        order, offsets = plans.relation_edges(graph)

    def item(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        edges = order[a:b]
        at = ends[edges]
        starts = np.flatnonzero(np.concatenate(([True], at[1:] != at[:-1])))
        g = rows[edges]
        if len(starts) < len(edges):  # sum each pair's rows
            g = np.add.reduceat(g, starts, axis=0)
        return factor[at[starts]], g

    return _products_by_relation(factor.shape, rows, offsets, graph.num_relations or 0, item, blocks, threads)


def _pair_products(
    factor: np.ndarray, sums: np.ndarray, pairs: plans.RelationPairs, blocks: int = 0, threads: int = 1
) -> np.ndarray:
    """Per relation r, F[r's pairs' vertices]^T S[r's pairs], F [V, .., K] and S [P, .., N] (the
    edge adjoints summed per (vertex, relation) pair, pairs numbered relation by relation:
    `plans.relation_pairs`) -> [R, K, N], or [R, .., K, N] with `blocks` (see
    `_relation_products`). Each relation's pairs are one run of S's rows, cut into items of at
    most CHUNK_ROWS that gather their factor rows and multiply on the call's threads."""
    if factor.shape[1:-1] != sums.shape[1:-1]:
        raise ArgumentError(f"a relation weight's factor has shape {factor.shape}, its pair adjoints {sums.shape}")
    vertex = pairs.vertex
    return _products_by_relation(
        factor.shape,
        sums,
        pairs.offsets,
        pairs.offsets.shape[0] - 1,
        lambda a, b: (factor[vertex[a:b]], sums[a:b]),
        blocks,
        threads,
    )


def _products_by_relation(
    factor_shape: tuple[int, ...],
    rows: np.ndarray,
    offsets: np.ndarray,
    relations: int,
    item: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
    blocks: int,
    threads: int,
) -> np.ndarray:
    """Sum over relation r's items of F_i^T G_i, where `item(a, b)` gives the factor and adjoint
    rows (m of each) of positions [a, b) of r's run [offsets[r], offsets[r + 1]); the runs are cut
    into items of at most CHUNK_ROWS, run on `threads` workers and added in item order, so the
    result does not depend on the thread count."""
    k, n = factor_shape[-1], rows.shape[-1]
    lead = factor_shape[1:-1] if blocks else ()
    size = int(np.prod(lead, dtype=np.int64)) if blocks else 1
    items = [(r, a, b) for r in range(relations) for a, b in products.chunks(int(offsets[r]), int(offsets[r + 1]))]

    def work(i: int) -> np.ndarray:
        _, a, b = items[i]
        f, g = item(a, b)
        m = f.shape[0]
        f = f.astype(rows.dtype, copy=False).reshape(m, -1, k)
        g = g.reshape(m, -1, n)
        if blocks:  # [B, K, E] @ [B, E, N]: a product per block
            return np.matmul(f.transpose(1, 2, 0), g.transpose(1, 0, 2))
        return f.reshape(-1, k).T @ g.reshape(-1, n)

    out = np.zeros((relations, size, k, n), dtype=rows.dtype)
    for (r, _, _), part in zip(items, products.run_items(work, [b - a for _, a, b in items], threads)):
        out[r] += part
    return out.reshape((relations, *lead, k, n))


def _destination_rows(named: dict, name: str, graph: Graph | CooGraph) -> Any:
    """Input `name`'s rows of the forward graph's destinations: the leading num_dst (a view)."""
    if name not in named:
        raise ArgumentError(f"input '{name}' is missing")
    value = named[name]
    return value[: graph.num_dst] if graph.bipartite else value


def _add_parts(total: np.ndarray, part: np.ndarray) -> np.ndarray:
    """The sum of two gradient parts, into `total` (a kernel's fresh result, owned by the
    gradient); on a bipartite graph a block-convention input has one part per source and one
    per destination, and the shorter adds into the leading rows."""
    if total.shape == part.shape:
        return np.add(total, part, out=total) if total.dtype == part.dtype and total.flags.writeable else total + part
    big, small = (total, part) if total.shape[0] >= part.shape[0] else (part, total)
    summed = big if big.flags.writeable else big.copy()
    summed[: small.shape[0]] += small
    return summed


def _read_by(kernel: Any, named: dict) -> dict:
    """The inputs among `named` that `kernel` takes (a pair kernel takes those its adjoint reads)."""
    signature = getattr(kernel, "signature", None)
    if signature is None:
        return named
    return {p.name: named[p.name] for p in signature.params if p.name in named}


def _leading_rows(kernel: Any, graph: Graph | CooGraph, named: dict) -> dict:
    """The inputs with vertex tensors cut to the rows `kernel` reads on `graph` (see the module doc)."""
    signature = getattr(kernel, "signature", None)
    if signature is None:
        return named
    fitted = dict(named)
    for p in signature.params:
        value = named.get(p.name)
        if p.domain != "V" or value is None or not hasattr(value, "shape") or not value.shape:
            continue
        rows = vertex_rows(p, graph)
        if value.shape[0] not in rows and value.shape[0] > max(rows):
            fitted[p.name] = value[: max(rows)]
    return fitted
