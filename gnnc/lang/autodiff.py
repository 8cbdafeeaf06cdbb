"""Gradient kernels: reverse-mode differentiation of a checked kernel into new kernels.

For a kernel with one result `out` and an input tensor `x`, the gradient of
`<gout, out>` with respect to `x` is written as ordinary gnnc kernels that
take the forward inputs plus `gout` (the incoming gradient, shaped as `out`):

- contributions that reach `x[u]` (a gather at the source) sum over the
  out-edges of `u`. That is an aggregation over in-edges on the *reverse*
  graph (Seastar), so that kernel is emitted with `u` and `v` swapped (and
  `deg_in` / `deg_out` swapped) and the runtime runs it on
  `Graph.reversed()`, which keeps the user's edge ids; the existing
  lowering, fusion and schedules then apply unchanged;
- contributions that reach `x[v]` sum over in-edges of `v` (plus the direct
  term when `x[v]` is used outside an aggregation) on the forward graph;
- contributions that reach `w[e]` give an edge kernel on the forward graph.

The gradient of `x` is the sum of the kernels' results. Generated kernels are
source text, so they go through the same checker, graph dialect, passes and
backend as a user's kernel, and the numpy reference can evaluate them.

A parameter without a V/E axis (`eps`) gets a vertex kernel of partial
gradients (each destination: its in-edges' terms and its own), which the
runtime sums.

Values that depend on a destination's whole in-edge set cannot be
recomputed inside another aggregation or on the reversed graph, so they
become *intermediates*: a stage kernel on the forward graph writes them to a
V or E tensor (`st0__`) that later kernels take as an input, and the runtime
runs the kernels in order (`runtime.gradient`). That gives, all as fused
kernels of the same pipeline:

- `softmax`: d s = alpha * (g - sum_in(alpha * g)); alpha is saved per edge
  (gat's [E, H]: the softmax's own size), and d s is a stage of the same
  size whose kernel walks each destination's in-edges twice (the sum, then
  d s): gat_conv's gradient is five kernels, these two stages, then one
  each for h, el and er, and only the d s stage evaluates g (a dot over the
  feature axis);
- `max` / `min` aggregations: a stage `argmax(...)` / `argmin(...)` keeps,
  per destination and element, the id of the in-edge that won (the lowest
  id on a tie, the first NaN); the gradient kernels pass the gradient to the
  edge with `step(0.5 - abs(edge_id(e) - id[v]))`. A [V, F] tensor of ids,
  no E x F mask. In float32 ids are exact below 2^24 edges (checked);
- aggregates read elsewhere (`sum(a) / sum(b)`), vertex values read by
  later statements (their forward values and their adjoints are stages),
  and several results (`gout_NAME__` per result);
- kernels that walk one graph in turn share a walk: one kernel of several
  results (`_Builder.share_walks`; GAT's gradient on a block is then a stage
  walk, the score adjoints' dots, one forward and one reversed walk);
- the non-smooth elementwise functions, through the `step` builtin (step(0)
  = 0, step(NaN) = NaN): relu'(0) = 0, leaky_relu'(0) = slope, abs'(0) = 0
  (as torch), `max(a, b)` / `min(a, b)` give a tie to `a`. A NaN operand
  of these gives a NaN gradient.

`a @ W`: d a = adj @ W^T, where W^T (`W_T__`) is an input the runtime
transposes; d W = the sum of `outer(a, adj)` over every edge (or vertex) that
computes it. Where `a` is a sum of terms each reading one end of the edge
(`x[u] + x[v]`, `relu(x[u])`, `w[e] * x[u]`), that sum is dense products
F^T G: kernels write G, the adjoints summed per vertex of the term's end
([V, N], [V, H, N] for `[H, K] @ W`), and the runtime multiplies by the
term's per-vertex value F (the input, or a stage). Any other `a` gets one
[K, N] partial per destination, summed by the runtime (V x K x N floats).
A kernel on the reversed graph reads an input it reads at both ends as two
(`x` at `v`, `x_dst__` at `u`: the runtime's view of its destination
rows), so that it runs on bipartite graphs. `step`, `argmax` and `argmin` are piecewise constant:
zero gradient. Stages that need no gout (softmax weights, argmax ids) are also results of
a generated `NAME__forward` variant of the kernel, so a training step can
compute them in the forward pass and hand them to the gradient.

`outer(a, b)`: d a = dot(adj, outer(ones, b)) and d b = dot(transpose(adj),
outer(ones, a)) (the sum over k, adj's second-to-last axis, is a `dot` of its
transpose); the gradient of `transpose` is the transposed adjoint. Every
operation of the language is differentiated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, cast

from gnnc.errors import CompileError, SourceError
from gnnc.lang import ast

#: The incoming gradient's parameter name in generated kernels (a prefix keeps it clear of user names).
GOUT = "gout__"
#: Intermediate tensors computed by stage kernels: st0__, st1__, ...
_STAGE = re.compile(r"\bst\d+__\b")
#: A dot product over the feature axis of two vertex rows, one read at each end of the edge.
_EDGE_DOT = re.compile(r"dot\((\w+)\[(u|v)\], (\w+)\[(u|v)\]\)")
#: A softmax gradient stage's per-destination weighted sum, local to that stage kernel.
_WEIGHTED = "weighted__"


#: A term of a weight gradient that factors: (side u or v, the factor's text, its shape,
#: the context "edge" or "vertex", the adjoint it multiplies), see `_Builder.product_kernels`.
Product = tuple[str, str, tuple, str, str]
#: Reads at the source, at the destination, and of the edge, in generated source text.
_AT = {side: re.compile(rf"\[{side}\]|\({side}[),]") for side in "uve"}


def gout_name(kernel: ast.Kernel, result: str) -> str:
    """The incoming gradient of one result: `gout__` for a single result, `gout_NAME__` for several."""
    return GOUT if len(kernel.results) == 1 else f"gout_{result}__"


@dataclass(frozen=True)
class GradKernel:
    """One generated kernel: its name, what it computes a part of, and which graph it runs on."""

    name: str
    #: A forward input's name (a gradient), or an intermediate's (`st3__`) that later kernels read.
    wrt: str
    reverse: bool
    #: The kernel gives one partial gradient per vertex; the runtime sums them (parameters).
    reduce: bool = False
    #: Intermediates it reads, in its signature after the forward inputs and the gout tensors;
    #: `NAME_dst__` is input NAME's destination rows (see `_Builder._destination_views`).
    inputs: tuple[str, ...] = ()
    #: A weight gradient as a dense product: the kernel gives G, a per-vertex sum of adjoints
    #: ([V, .., N]), and the gradient is F^T G, F this input or intermediate ([V, .., K]).
    factor: str = ""
    #: A relation tensor's gradient (`W[rel(e)]`): the kernel gives one row per edge, which the
    #: runtime sums per relation ("sum"), or multiplies per relation as F[ends]^T G over the
    #: relation's edges, F the `factor` read at the edges' source ("u") or destination ("v").
    relation: str = ""
    #: On which graphs it runs: every one (None), square ones only (True: a fused kernel that
    #: replaces the two below), bipartite ones only (False: an input's parts at u and at v).
    square: bool | None = None
    #: A relation product's (`relation` "u" or "v") kernel that sums its adjoints per (end,
    #: relation) pair on `plans.pair_graph` without writing them per edge, or "" (the runtime
    #: then runs this kernel and sums its rows itself). See `_Builder.pair_kernel`.
    pairs: str = ""
    #: An input's gradient at one end that is only terms `adj @ W_T__[rel(e)]` (the input read
    #: directly by `x[u] @ W[rel(e)]`): the same part as (pair-sum kernel, transform kernel,
    #: W, side) entries, summed. The pair-sum kernel sums `adj` per (end, relation) pair (W's
    #: gradient's own, where W has one), and the transform kernel multiplies each pair's row
    #: by its relation's W^T and sums them per vertex, on `plans.pair_vertex_graph`: P x N x K
    #: multiply-adds where this kernel does E x N x K. The runtime takes them where it sums
    #: pairs (`HostArrays.pair_sums`), else runs this kernel. See `_Builder.resolve_pair_inputs`.
    via_pairs: tuple[tuple[str, str, str, str], ...] = ()
    #: A kernel of several gradient kernels' walks (`_Builder.share_walks`): its results as
    #: (result name, what it computes a part of), `wrt` the first's; () for one result.
    parts: tuple[tuple[str, str], ...] = ()
    #: The kernels a shared walk merges, each as it runs alone (its source is in the program
    #: too): a gradient wanting some of its parts only runs those (`Gradient.restricted_to`).
    members: tuple[GradKernel, ...] = ()

    @property
    def writes(self) -> tuple[str, ...]:
        """What its result(s) are parts of."""
        return tuple(w for _, w in self.parts) if self.parts else (self.wrt,)


@dataclass
class GradProgram:
    kernel: str
    source: str
    #: In the order they must run: an intermediate is complete (all its kernels summed) before a reader.
    kernels: list[GradKernel]
    #: Inputs of the forward kernel with no gradient (they do not reach the result).
    constant: list[str]
    #: Parameters without a V/E axis, left out when no `wrt` was asked for.
    skipped: list[str]
    #: The incoming gradients' parameter names, one per result, in result order.
    gouts: list[str] = field(default_factory=list)
    #: Matrices W of `a @ W` whose transpose (`W_T__`) the kernels take; the runtime makes it.
    transposes: list[str] = field(default_factory=list)
    #: Relation tensors W of `a @ W[rel(e)]` whose per-relation transpose (`W_T__`: [R, N, K]) they take.
    relation_transposes: list[str] = field(default_factory=list)
    #: Intermediates that need no gout (a softmax's weights, an argmax): `forward` computes them too.
    saved: list[str] = field(default_factory=list)
    #: The forward kernel with those intermediates as extra results (`NAME__forward`), or "".
    forward: str = ""
    #: `source + forward` parsed and checked (None when there is no source): read it, not the text again.
    checked: Any = field(default=None, repr=False, compare=False)
    #: The kernels summing relation products' adjoints per pair (`GradKernel.pairs`), or "".
    #: Apart from `source`: they take only the inputs their adjoint reads, so a schedule
    #: written for the forward kernel's sizes (`specialize K 5`) may name sizes they lack.
    pair_source: str = ""
    #: Some intermediate is per edge (a softmax's weights, a score's adjoint) and the kernel
    #: never reads `edge_id(e)`: edge ids are the program's own business, so the runtime may
    #: run it on the graph's edges numbered in in-CSR order (`Gradient.in_csr_order`).
    in_csr_order: bool = False


def _fmt_type(t: ast.TensorType) -> str:
    return _fmt(t.dtype, t.domain, t.shape)


def _fmt(dtype: str, domain: str | None, shape: tuple) -> str:
    dims = ([domain] if domain else []) + [str(d) for d in shape]
    return dtype + (f"[{', '.join(dims)}]" if dims else "")


def swap_uv(src: str) -> str:
    """The same expression on the reverse graph: u <-> v, deg_in <-> deg_out (a degree per
    relation too: `deg_in(v, rel(e))` becomes `deg_out(u, rel(e))`, the same count)."""
    table = {
        "[u]": "[v]",
        "[v]": "[u]",
        "(u)": "(v)",
        "(v)": "(u)",
        "(u,": "(v,",
        "(v,": "(u,",
        "deg_in": "deg_out",
        "deg_out": "deg_in",
    }
    return re.sub(r"\[u\]|\[v\]|\(u\)|\(v\)|\(u,|\(v,|deg_in|deg_out", lambda m: table[m.group(0)], src)


def _unviewed(text: str, vertex_inputs: Iterable[str]) -> str:
    """A reversed kernel's text with its destination views (`_Builder._destination_views`)
    read as the inputs they view."""
    for n in vertex_inputs:
        text = text.replace(f"{dst_view_name(n)}[u]", f"{n}[u]")
    return text


def _narrower(shape: tuple, rows: Iterable[tuple]) -> bool:
    """Whether `shape` is a proper prefix of one of `rows` (vertex rows): an edge value of
    that shape is smaller than a row gathered per edge, never one per feature."""
    return any(len(row) > len(shape) and tuple(row[: len(shape)]) == shape for row in rows)


def _row(type_text: str) -> str:
    """The row of a tensor type's text, after its leading axis (`f32[V, H, F]`: " H, F]")."""
    return type_text.split(",", 1)[1] if "," in type_text else ""


def _sum_operands(text: str) -> list[str]:
    """The operands of the in-edge sums `sum(...)` in a statement's text."""
    found = []
    for m in re.finditer(r"(?<!\w)sum\(", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        found.append(text[m.end() : i - 1])
    return found


def _reduce_to(adj: str, have: tuple, want: tuple) -> str:
    """Sums the trailing axes broadcasting added (leading-axes rule), one `dot` per axis."""
    for _ in range(len(have) - len(want)):
        # `adj * 0 + 1` is a ones tensor of adj's shape; dot with it sums the last axis
        adj = f"dot({adj}, (({adj}) * 0.0 + 1.0))"
    return adj


def dst_view_name(tensor: str) -> str:
    """The name under which a reversed kernel reads a vertex input's destination rows."""
    return f"{tensor}_dst__"


def transpose_name(matrix: str) -> str:
    return f"{matrix}_T__"


def _walk(e: ast.Expr) -> Iterator[ast.Expr]:
    yield e
    for c in ast.children(e):
        yield from _walk(c)


def _source(e: ast.Expr, special: Callable[[ast.Expr], str | None] = lambda _: None) -> str:
    """Source text of an expression, fully parenthesised.

    `special` may print a node its own way (inlined, read from a stage);
    it returns None for a node printed as written.
    """
    done = special(e)
    if done is not None:
        return done

    def text(sub: ast.Expr) -> str:
        return _source(sub, special)

    if isinstance(e, ast.Number):
        return f"{float(e.value)!r}"
    if isinstance(e, ast.Index):
        return f"{e.name}[{'rel(e)' if e.index == 'rel' else e.index}]"
    if isinstance(e, ast.Name):
        return e.name
    if isinstance(e, ast.Unary):
        return f"(-{text(e.operand)})"
    if isinstance(e, ast.Binary):
        return f"({text(e.lhs)} {e.op} {text(e.rhs)})"
    if isinstance(e, ast.Call):
        args = [text(a) for a in e.args]
        if e.func == "leaky_relu":
            args[1] = f"{float(cast(ast.Number, e.args[1]).value)!r}"  # sema: the slope is a number
        return f"{e.func}({', '.join(args)})"
    if isinstance(e, ast.Aggregate):
        return f"{e.kind}({text(e.operand)})"
    if isinstance(e, ast.Degree):
        return f"deg_{e.direction}({e.index}{', rel(e)' if e.relation else ''})"
    if isinstance(e, ast.EdgeId):
        return "edge_id(e)"
    if isinstance(e, ast.SelfLoop):
        return "self_loop(e)"
    raise AssertionError(type(e).__name__)


class _Builder:
    """The gradient program of one kernel: stage kernels (shared by every input) and gradient kernels.

    Generated kernels read the forward inputs and recompute edge values, but
    a value that depends on a destination's whole in-edge set (an
    aggregation, a softmax, a vertex value) cannot be recomputed inside
    another aggregation, nor on the reversed graph. Such a value becomes an
    intermediate: a *stage* kernel on the forward graph writes it to a V or
    E tensor (`st0__`), and later kernels read it like an input. The
    edge-sized ones are softmax weights, of the softmax's own shape (gat's
    [E, H]), and edge values several kernels would each compute: a per-edge
    dot of two rows (`share_edge_dots`), an adjoint summed at both ends
    (`share_edge_adjoints`), an exp of the forward's (`share_edge_exps`).
    Other edge values are recomputed, and none is saved per feature.
    """

    def __init__(self, kernel: ast.Kernel):
        self.kernel = kernel
        self.dtype = kernel.dtype or "f32"
        self.edge_defs = {d.name: d.value for d in kernel.body if d.index == "e"}
        self.vertex_defs = {d.name: d for d in kernel.body if d.index == "v"}
        self.signature = ", ".join(f"{p.name}: {_fmt_type(p.type)}" for p in kernel.params)
        for r in kernel.results:
            self.signature += f", {gout_name(kernel, r.name)}: {_fmt_type(r.type)}"
        #: the forward inputs and the gouts, by name: their types (a pair kernel takes those it reads)
        self.input_types = {p.name: _fmt_type(p.type) for p in kernel.params}
        self.input_types.update({gout_name(kernel, r.name): _fmt_type(r.type) for r in kernel.results})
        params = {p.name: p for p in kernel.params}
        self.params = set(params)
        #: vertex inputs and their types, for their destination views (`_destination_views`)
        self.vertex_inputs = {p.name: _fmt_type(p.type) for p in kernel.params if p.type.domain == "V"}
        self.transposes = sorted(
            {
                e.rhs.name
                for d in kernel.body
                for e in _walk(d.value)
                if isinstance(e, ast.Binary) and e.op == "@" and isinstance(e.rhs, ast.Name)
            }
        )
        for w in self.transposes:
            k, n = params[w].type.shape
            self.signature += f", {transpose_name(w)}: {_fmt(self.dtype, None, (n, k))}"
        self.relation_transposes = sorted(
            {
                e.rhs.name
                for d in kernel.body
                for e in _walk(d.value)
                if isinstance(e, ast.Binary) and e.op == "@" and isinstance(e.rhs, ast.Index) and e.rhs.index == "rel"
            }
        )
        for w in self.relation_transposes:
            *lead, k, n = params[w].type.shape
            self.signature += f", {transpose_name(w)}: {_fmt(self.dtype, 'R', (*lead, n, k))}"
        self.pieces: list[str] = []
        self.kernels: list[GradKernel] = []
        #: the pair-sum kernels of relation products (`GradKernel.pairs`), by name
        self.pair_pieces: dict[str, str] = {}
        #: a pair-sum kernel's name by (side, row type, adjoint): one kernel for W's gradient and x's
        self.pair_sum_names: dict[tuple[str, str, str], str] = {}
        #: input kernels whose part may come through pair sums: (kernel name, side, [(W, adjoint)])
        self.pending_pair_inputs: list[tuple[str, str, list[tuple[str, str]]]] = []
        self.param_types = params
        self.stage_types: dict[str, str] = {}
        self.stages: dict[tuple, str] = {}
        #: stages that read only forward inputs (and such stages): their statements
        self.forward_stages: dict[str, str] = {}
        #: stage -> the vertex value of the kernel it holds (the forward variant reads that instead)
        self.vertex_stages: dict[str, str] = {}

    # ---------------------------------------------------------------- emitting

    def emit(
        self,
        name: str,
        wrt: str,
        reverse: bool,
        rtype: str,
        stmt: str,
        reduce: bool = False,
        factor: str = "",
        relation: str = "",
        square: bool | None = None,
        pairs: str = "",
    ) -> None:
        stmt, signature, inputs = self._signature(stmt, reverse)
        self.pieces.append(f"kernel {name}({signature}) -> {rtype} {{\n    {stmt}\n}}\n")
        self.kernels.append(GradKernel(name, wrt, reverse, reduce, inputs, factor, relation, square, pairs))

    def _signature(self, stmt: str, reverse: bool) -> tuple[str, str, tuple[str, ...]]:
        """A generated kernel's statement (destination views named, `_destination_views`,
        where it runs on the reversed graph), signature, and the intermediates and views it
        reads (`GradKernel.inputs`)."""
        inputs = tuple(sorted(set(_STAGE.findall(stmt)), key=lambda n: int(n[2:-2])))
        signature = self.signature + "".join(f", {n}: {self.stage_types[n]}" for n in inputs)
        if reverse:
            stmt, views = self._destination_views(stmt)
            signature += "".join(f", {dst_view_name(n)}: {self.vertex_inputs[n]}" for n in views)
            inputs += tuple(dst_view_name(n) for n in views)
        return stmt, signature, inputs

    def pair_kernel(self, name: str, rtype: str, adjoint: str, side: str) -> str:
        """The kernel summing a relation product's edge adjoints per (end, relation) pair
        without writing them: `out[v] = sum(adjoint)` on `plans.pair_graph`, whose sources are
        the edges' other ends, destinations the pairs and edge ids the graph's. There the
        forward's other end is `u` (for pairs of sources the adjoint is read on the swapped
        ends, as on the reversed graph: `deg_in(v, rel(e))` is `deg_out(u, rel(e))`, the same
        count) and the edge `e`; "" where the adjoint reads the pair's own end (it cannot be
        read there) or is not a kernel the language takes: the runtime then sums the edge
        kernel's rows itself."""
        from gnnc.lang import parse_and_check

        expr = swap_uv(adjoint) if side == "u" else adjoint
        if re.search(r"\[v\]|\(v[,)]", expr):
            return ""
        types = {**self.input_types, **self.stage_types}
        read = [n for n in types if re.search(rf"\b{re.escape(n)}\b", expr)]
        vtype = rtype.replace("[E", "[V", 1)
        signature = ", ".join(f"{n}: {types[n]}" for n in read)
        piece = f"kernel {name}({signature}) -> {vtype} {{\n    out[v] = sum({expr})\n}}\n"
        try:
            parse_and_check(piece, f"<pair sums of {name}>")
        except SourceError:
            return ""
        return piece

    def resolve_pair_inputs(self) -> None:
        """Gives the pending input kernels (`gradient_kernels`) their `via_pairs`: per W, the
        pair-sum kernel of the summed adjoints (W's gradient's own where it has that kernel,
        else one of their own) and a transform kernel `out[v] = sum(s[e] @ W_T__[rel(e)])`,
        whose edges are the pairs (`plans.pair_vertex_graph`). None where a piece cannot be
        made (the adjoint reads the pair's own end): the kernel then runs as it is."""
        from gnnc.lang import parse_and_check

        for kernel_name, site, found in self.pending_pair_inputs:
            by_weight: dict[str, list[str]] = {}
            for w, adj in found:
                by_weight.setdefault(w, []).append(adj)
            entries = []
            for w, adjoints in by_weight.items():
                *lead, k, n = self.param_types[w].type.shape
                if lead:
                    break  # blocks (W: [R, B, K, N]): not taken through pairs
                rtype = _fmt(self.dtype, "E", (n,))
                adjoint = " + ".join(adjoints)
                key = (site, rtype, adjoint)
                sums = self.pair_sum_names.get(key, "")
                if not sums:
                    sums = f"{self.kernel.name}__pairs_{w}_{'src' if site == 'u' else 'dst'}"
                    piece = self.pair_kernel(sums, rtype, adjoint, site)
                    if not piece:
                        break
                    self.pair_pieces[sums] = piece
                    self.pair_sum_names[key] = sums
                transform = f"{kernel_name}_pairs_{w}"
                wt = transpose_name(w)
                piece = (
                    f"kernel {transform}(s: {rtype}, {wt}: {_fmt(self.dtype, 'R', (n, k))}) -> "
                    f"{_fmt(self.dtype, 'V', (k,))} {{\n    out[v] = sum(s[e] @ {wt}[rel(e)])\n}}\n"
                )
                try:
                    parse_and_check(piece, f"<pair transform of {kernel_name}>")
                except SourceError:
                    break
                self.pair_pieces[transform] = piece
                entries.append((sums, transform, w, site))
            else:
                self.kernels = [
                    replace(g, via_pairs=tuple(entries)) if g.name == kernel_name else g for g in self.kernels
                ]

    def _destination_views(self, stmt: str) -> tuple[str, tuple[str, ...]]:
        """A reversed kernel's reads at `u` of the inputs it reads at both ends, renamed `NAME_dst__`.

        On the reversed graph `u` is a forward destination and `v` a forward
        source. An input read at both is, on a bipartite graph, one row per
        forward source with the destinations first (DGL's block convention),
        which the reversed graph (more destinations than sources) cannot
        follow; as two inputs, each read at one end, it can: the runtime
        passes the input's leading num_dst rows (a view) as `NAME_dst__`.
        """
        views = []
        for name in self.vertex_inputs:
            at_u, at_v = re.compile(rf"\b{name}\[u\]"), re.compile(rf"\b{name}\[v\]")
            if at_u.search(stmt) and at_v.search(stmt):
                stmt = at_u.sub(f"{dst_view_name(name)}[u]", stmt)
                views.append(name)
        return stmt, tuple(views)

    def stage(self, body: str, index: str, shape: tuple, prelude: tuple[str, str, tuple] | None = None) -> str:
        """An intermediate `out[index] = body` on the forward graph; returns how to read it.

        `prelude` (name, body, shape) is a vertex value computed first in the
        same kernel, which `body` reads at `v`.
        """
        key = (index, body, prelude)
        if key not in self.stages:
            name = f"st{len(self.stages)}__"
            self.stages[key] = name
            self.stage_types[name] = _fmt(self.dtype, "V" if index == "v" else "E", shape)
            stmt = f"out[{index}] = {body}"
            if prelude is not None:
                stmt = f"{prelude[0]}[v] = {prelude[1]}\n    {stmt}"
            self.emit(f"{self.kernel.name}__{name[:-2]}", name, False, self.stage_types[name], stmt)
            reads = set(re.findall(r"\b\w+__\b", body))
            if reads <= set(self.forward_stages):
                self.forward_stages[name] = f"{name}[{index}] = {body}"
        return self.stages[key]

    def share_edge_dots(self) -> None:
        """A per-edge dot product of two inputs' rows (`dot(gout__[v], h[u])`: an attention
        score's adjoint) that several kernels compute becomes one edge intermediate they read.

        Each of them otherwise gathers a whole row per edge for it: GAT's gradient computed
        it in three kernels, two on the forward graph and one on the reversed, each walk
        reading a 512-byte row per edge to make [E, H] numbers. Staged, one walk gathers
        the rows and the others read an [E, H] array by edge id (the reversed graph keeps
        the edge ids). Only where at least two readers run on every graph (a fused kernel
        for square graphs and its two parts for bipartite ones never run together): with
        one reader the stage would be a walk more.
        """
        shapes = {p.name: tuple(p.type.shape) for p in self.kernel.params if p.type.domain == "V"}
        shapes.update(
            {gout_name(self.kernel, r.name): tuple(r.type.shape) for r in self.kernel.results if r.type.domain == "V"}
        )
        # readers by kernel name: each stage inserted moves the kernels after it
        readers: dict[tuple[str, tuple], dict[str, None]] = {}
        for piece, k in zip(self.pieces, self.kernels):
            if k.pairs or k.via_pairs:
                continue
            for m in _EDGE_DOT.finditer(piece.split("{", 1)[1]):
                a, at_a, b, at_b = m.groups()
                if at_a == at_b or a not in shapes or b not in shapes or shapes[a] != shapes[b] or not shapes[a]:
                    continue
                text = swap_uv(m.group(0)) if k.reverse else m.group(0)  # as the forward graph reads it
                readers.setdefault((text, shapes[a][:-1]), {})[k.name] = None
        for (text, shape), names in readers.items():
            at = {k.name: i for i, k in enumerate(self.kernels)}
            found = sorted(at[n] for n in names)
            if not self._two_on_every_graph(found):
                continue
            name = self._stage_before(text, shape, found[0])
            self._read_stage(found, name, text, f"{name}[e]")

    def share_edge_exps(self) -> None:
        """An edge-level `exp` of the forward kernel that several gradient kernels recompute
        becomes an edge intermediate that the training forward writes beside its results.

        GATConv's softmax is written out (`p[e] = exp(s[e] - m[v])`): its gradient
        recomputes the exp, its score's gather and leaky_relu, in the softmax adjoint's
        sum, in the score adjoint and, on the reversed graph, in h's gradient. The
        training forward computes the exp anyway (the compiler computes it once for both
        uses) and writes it per edge, one number per head: the gradients read it by edge
        id. Only rows smaller than a vertex input's (never per feature), and only where
        at least two readers run on every graph (the forward stages, which the training
        forward gives, not counted). Where the result does not check, the kernels stay.
        """

        rows = [tuple(p.type.shape) for p in self.kernel.params if p.type.domain == "V"]
        candidates: dict[str, tuple] = {}
        for d in self.kernel.body:
            for node in _walk(d.value):
                if not (isinstance(node, ast.Call) and node.func == "exp"):
                    continue
                shape = tuple(node.shape or ())
                if not _narrower(shape, rows):
                    continue
                count = len(self.kernels)
                text = self.text(node)
                if len(self.kernels) == count and re.search(r"\[u\]|\[e\]|\(e\)", text):
                    candidates.setdefault(text, shape)
        snapshot = self._snapshot()
        for text, shape in candidates.items():
            if not set(re.findall(r"\b\w+__\b", text)) <= set(self.forward_stages):
                continue  # only an intermediate the training forward gives is worth its writes
            found = []
            for i, (piece, k) in enumerate(zip(self.pieces, self.kernels)):
                if k.pairs or k.via_pairs or k.wrt in self.forward_stages:
                    continue
                if (swap_uv(text) if k.reverse else text) in _unviewed(piece.split("{", 1)[1], self.vertex_inputs):
                    found.append(i)
            if not self._two_on_every_graph(found):
                continue
            name = self._stage_before(text, shape, found[0])
            self._read_stage(found, name, text, f"{name}[e]")
        self._keep_if_checked(snapshot)

    def _two_on_every_graph(self, found: list[int]) -> bool:
        """Whether at least two of kernels `found` run on square graphs and two on bipartite
        ones (a fused kernel for square graphs and its two parts never run together)."""
        kinds = [self.kernels[i].square for i in found]
        return sum(s is not False for s in kinds) >= 2 and sum(s is not True for s in kinds) >= 2

    def _snapshot(self) -> tuple:
        return (
            list(self.pieces),
            list(self.kernels),
            dict(self.stages),
            dict(self.stage_types),
            dict(self.forward_stages),
        )

    def _keep_if_checked(self, snapshot: tuple) -> None:
        """Keeps the kernels as they are if they check, else goes back to `snapshot`."""
        from gnnc.lang import parse_and_check

        if snapshot[0] == self.pieces:
            return
        try:
            parse_and_check("\n".join(self.pieces), f"<gradient of {self.kernel.name}>")
        except SourceError:
            self.pieces, self.kernels, self.stages, self.stage_types, self.forward_stages = snapshot

    def _stage_before(self, text: str, shape: tuple, first: int) -> str:
        """An edge intermediate `out[e] = text` whose kernel runs before kernel `first` (its first
        reader: what it reads is complete there); "" where it is an intermediate already."""
        count = len(self.kernels)
        name = self.stage(text, "e", shape)
        if len(self.kernels) == count:
            return ""
        self.pieces.insert(first, self.pieces.pop())
        self.kernels.insert(first, self.kernels.pop())
        return name

    def _read_stage(self, found: list[int], name: str, text: str, read: str) -> None:
        """Kernels `found` (their places before stage `name`'s kernel went in front of them)
        read `read` where they computed `text` (as the forward graph reads it; u and v
        swapped on the reversed graph). Their signatures and inputs are made again from
        what they read now: the staged value's own reads may be gone. Nothing where
        `name` is "" (`_stage_before`)."""
        for i in (j + 1 for j in found) if name else ():
            k = self.kernels[i]
            head, body = self.pieces[i].split("{", 1)
            old, new = (swap_uv(text), swap_uv(read)) if k.reverse else (text, read)
            body, signature, inputs = self._signature(_unviewed(body, self.vertex_inputs).replace(old, new), k.reverse)
            rtype = head.rsplit(") -> ", 1)[1]
            self.pieces[i] = f"kernel {k.name}({signature}) -> {rtype}{{{body}"
            self.kernels[i] = replace(k, inputs=inputs)

    def share_edge_adjoints(self) -> None:
        """An edge value that a kernel on the forward graph sums over in-edges and one on the
        reversed graph sums over out-edges (the adjoint of an edge score `a_src[u] + a_dst[v]`,
        which flows to both ends) becomes one edge intermediate: the sums read it by edge id.

        Each reader otherwise recomputes it per edge: GAT's score adjoint is a softmax's
        exp, its leaky_relu's slope and the score's dot, gathered and computed by a_dst's
        gradient on the forward graph and again by a_src's on the reversed. Staged, it is
        written in a_dst's own walk (`share_walks`) and read by edge id on the reversed
        graph (docs/design/training.md, "Edge values computed once"). Only rows smaller
        than a vertex input's row (one number per head where h has [H, F]: never a
        per-feature E x F array), and only where at least two readers run on every graph,
        as `share_edge_dots`. Where the result does not check, the kernels stay as they were.
        """

        rows = [tuple(p.type.shape) for p in self.kernel.params if p.type.domain == "V"]
        rows += [tuple(r.type.shape) for r in self.kernel.results if r.type.domain == "V"]
        readers: dict[tuple[str, tuple], dict[str, None]] = {}
        for piece, k in zip(self.pieces, self.kernels):
            if k.pairs or k.via_pairs or k.reduce or k.factor or k.relation:
                continue
            head, body = piece.split("{", 1)
            rtype = head.rsplit(") -> ", 1)[1].strip()
            if not rtype.startswith(f"{self.dtype}[V"):
                continue
            dims = rtype.split("[", 1)[1].rstrip("]").split(",")[1:]
            shape = tuple(int(d) if d.strip().isdigit() else d.strip() for d in dims)
            if not _narrower(shape, rows):
                continue
            last = body.strip().removesuffix("}").strip().split("\n")[-1].strip()
            for operand in _sum_operands(last):
                text = swap_uv(_unviewed(operand, self.vertex_inputs)) if k.reverse else operand
                readers.setdefault((text, shape), {})[k.name] = None
        snapshot = self._snapshot()
        for (text, shape), names in readers.items():
            at = {k.name: i for i, k in enumerate(self.kernels)}
            found = sorted(at[n] for n in names)
            if len({self.kernels[i].reverse for i in found}) < 2 or not self._two_on_every_graph(found):
                continue
            name = self._stage_before(text, shape, found[0])
            self._read_stage(found, name, f"sum({text})", f"sum({name}[e])")
        self._keep_if_checked(snapshot)

    def drop_unread_stages(self) -> None:
        """Drops the intermediates no gradient reads, with their kernels: differentiating one
        input may make a stage that its final expression no longer reads (GCN's neighbour
        sum, a V x F array the training forward would otherwise also write)."""
        read: set[str] = set()
        keep = []
        for i in reversed(range(len(self.kernels))):
            k = self.kernels[i]
            if not k.wrt.endswith("__") or k.wrt in read:
                keep.append(i)
                read.update(k.inputs)
                if k.factor:
                    read.add(k.factor)
        keep.reverse()
        self.pieces = [self.pieces[i] for i in keep]
        self.kernels = [self.kernels[i] for i in keep]
        self.forward_stages = {n: stmt for n, stmt in self.forward_stages.items() if n in read}

    def edge_stages(self) -> bool:
        """Whether a kernel writes a per-edge intermediate ([E, ..])."""
        written = {w for k in self.kernels for w in k.writes if w in self.stage_types}
        return any(self.stage_types[w].startswith(f"{self.dtype}[E") for w in written)

    def share_walks(self) -> None:
        """Kernels that walk the same graph one after another become one kernel of several
        results: one walk over the destinations instead of one each.

        GAT's gradient on a block ran five forward walks after the softmax's stages (the
        score adjoint's dots, their weighted sum, its vertex value, a_dst's and the loop
        score's gradients) and two of the reversed graph, each reading the CSR and the
        [V, H] values again, and each call costs the runtime's checks. A kernel joins an
        earlier group of its kind (the graph, forward or reversed; a stage the training
        forward computes or not) where one of them can run at
        the other's place: no kernel between writes what the moved one reads or reads what
        it writes. It may read a member's result if one kernel writes it, read at its own
        index (`st5__[v]`: computed earlier in the same walk; `st11__[e]`). An edge value is
        recomputed in each in-edge loop of a kernel that reads it, so an edge result joins
        vertex results only where it gathers no row wider than its own (a score adjoint
        over [H] values, not a dot over h's [H, F] rows, whose gathers a stage exists to do
        once), and only where every row of the walk is the same: a walk has one vectorised
        row axis, and a vertex result's [H, F] rows make it F, where an edge kernel of [H]
        values alone vectorises over H (GAT's dots and h's part in one walk: 4.1 ms
        against 2.5 apart on a 120K-edge block). Weight
        products, relation and pair kernels and per-vertex partials stay alone (the runtime
        treats their results). Square and bipartite graphs run different kernels (a fused
        input gradient or its two parts), so each is grouped on its own; a group both form
        runs on both, the others on one (their members written twice). Where the merged
        source does not check, the kernels stay as they were.
        """
        from gnnc.lang import parse_and_check

        kernels, pieces = self.kernels, self.pieces
        bodies = [piece.split("{", 1)[1].strip().removesuffix("}").strip().split("\n") for piece in pieces]
        bodies = [[line.strip() for line in body] for body in bodies]
        locals_ = [{line.split("[", 1)[0] for line in body[:-1]} for body in bodies]
        writers: dict[str, int] = {}
        for k in kernels:
            for w in k.writes:
                writers[w] = writers.get(w, 0) + 1

        def alone(k: GradKernel) -> bool:
            return bool(k.reduce or k.factor or k.relation or k.pairs or k.via_pairs)

        def reads(k: GradKernel) -> set[str]:
            return {*k.inputs, *([k.factor] if k.factor else [])}

        rtypes = [piece.split("{", 1)[0].rsplit(") -> ", 1)[1].strip() for piece in pieces]

        def kind(i: int) -> tuple[bool, bool]:
            k = kernels[i]
            return (k.reverse, k.wrt in self.forward_stages)

        def per_edge(i: int) -> bool:
            return rtypes[i].startswith(f"{self.dtype}[E")

        def row(i: int) -> str:
            return _row(rtypes[i])

        types = {**self.input_types, **self.stage_types}
        types.update({dst_view_name(n): t for n, t in self.vertex_inputs.items()})

        def gathers_wider(i: int) -> bool:
            """Whether kernel i reads a row wider than its own (a dot over h's [H, F] for [H])."""
            names = set(re.findall(r"\b(\w+)\[", "\n".join(bodies[i]))) & set(types)
            return any(_row(types[n]) != row(i) for n in names)

        def rows_fit(j: int, group: list[int]) -> bool:
            """Results per edge and per vertex share a walk only where every row is the same and
            the edge values gather nothing wider: a walk's members read an edge result in each
            in-edge loop that needs it, recomputing it there."""
            if all(per_edge(i) == per_edge(j) for i in group):
                return True
            members = [*group, j]
            return all(row(i) == row(j) and not (per_edge(i) and gathers_wider(i)) for i in members)

        def writes(ids: list[int]) -> set[str]:
            return {w for i in ids for w in kernels[i].writes}

        def joins(j: int, group: list[int], between: list[int]) -> str:
            """How kernel j joins `group` across the kernels `between` them: "up" (it runs at
            the group's place), "down" (the group runs at its place), or "" (it cannot)."""
            k = kernels[j]
            if any(alone(kernels[i]) or kind(i) != kind(j) for i in group) or not rows_fit(j, group):
                return ""
            made = writes(group)
            if k.wrt in made or locals_[j] & {n for i in group for n in locals_[i]}:
                return ""
            text = "\n".join(bodies[j])
            for name in reads(k) & made:  # a value of one writer, read at v (at e: per edge)
                at = "e" if self.stage_types[name].startswith(f"{self.dtype}[E") else "v"
                if writers[name] != 1:
                    return ""
                if any(index != at for index in re.findall(rf"\b{re.escape(name)}\[(\w+)\]", text)):
                    return ""
            if not any(writes([i]) & reads(k) or k.wrt in reads(kernels[i]) for i in between):
                return "up"
            read = {n for i in group for n in reads(kernels[i])}
            if not any(writes([i]) & read or made & reads(kernels[i]) for i in between):
                return "down"
            return ""

        def grouped(order: list[int]) -> list[tuple[int, ...]]:
            groups: list[list[int]] = []
            for j in order:
                for g in range(len(groups) - 1, -1, -1) if not alone(kernels[j]) else ():
                    how = joins(j, groups[g], [i for later in groups[g + 1 :] for i in later])
                    if how == "up":
                        groups[g].append(j)
                        break
                    if how == "down":
                        groups.append(groups.pop(g) + [j])
                        break
                else:
                    groups.append([j])
            return [tuple(g) for g in groups]

        on_square = grouped([i for i, k in enumerate(kernels) if k.square is not False])
        on_bipartite = grouped([i for i, k in enumerate(kernels) if k.square is not True])
        both = set(on_square) & set(on_bipartite)
        order: list[tuple[tuple[int, ...], bool | None]] = []
        a = b = 0
        while a < len(on_square) or b < len(on_bipartite):
            if a < len(on_square) and on_square[a] not in both:
                order.append((on_square[a], True))
                a += 1
            elif b < len(on_bipartite) and on_bipartite[b] not in both:
                order.append((on_bipartite[b], False))
                b += 1
            elif a < len(on_square) and b < len(on_bipartite) and on_square[a] == on_bipartite[b]:
                order.append((on_square[a], None))
                a, b = a + 1, b + 1
            else:
                return  # the shared groups run in different orders: leave the kernels be
        new_pieces, new_kernels = [], []
        alone_pieces: dict[str, str] = {}  # the members' own kernels, for gradients wanting some parts
        for group, square in order:
            first = kernels[group[0]]
            if len(group) == 1:
                new_pieces.append(pieces[group[0]])
                new_kernels.append(replace(first, square=first.square if square is None else square))
                continue
            made = writes(list(group))
            # every name a member's signature or body has: a result must be none of them
            taken = set(re.findall(r"(\w+):", self.signature)) | set(self.stage_types) | set(self.vertex_inputs)
            taken |= {dst_view_name(n) for n in self.vertex_inputs} | {n for i in group for n in locals_[i]}
            results: list[str] = []
            parts: list[tuple[str, str]] = []
            stmts: list[str] = []
            inputs: list[str] = []
            for i in group:
                k = kernels[i]
                result = k.wrt if _STAGE.fullmatch(k.wrt) else f"{k.wrt}_grad__"
                if (result in taken and result not in made) or any(r == result for r, _ in parts):
                    return
                results.append(f"{result}: {rtypes[i]}")
                parts.append((result, k.wrt))
                stmts += bodies[i][:-1] + [f"{result}{bodies[i][-1][3:]}"]
                inputs += [n for n in k.inputs if n not in made and n not in inputs]
            stages = sorted((n for n in inputs if _STAGE.fullmatch(n)), key=lambda n: int(n[2:-2]))
            views = [n for n in inputs if not _STAGE.fullmatch(n)]
            name = f"{self.kernel.name}__walk{len(new_kernels)}"
            signature = self.signature + "".join(f", {n}: {self.stage_types[n]}" for n in stages)
            signature += "".join(f", {n}: {self.vertex_inputs[n.removesuffix('_dst__')]}" for n in views)
            body = "\n    ".join(stmts)
            new_pieces.append(f"kernel {name}({signature}) -> ({', '.join(results)}) {{\n    {body}\n}}\n")
            members = tuple(replace(kernels[i], square=kernels[i].square if square is None else square) for i in group)
            alone_pieces.update({kernels[i].name: pieces[i] for i in group})
            new_kernels.append(
                GradKernel(
                    name,
                    first.wrt,
                    first.reverse,
                    inputs=(*stages, *views),
                    square=square,
                    parts=tuple(parts),
                    members=members,
                )
            )
        named = {p.split("(", 1)[0] for p in new_pieces}
        new_pieces += [p for n, p in alone_pieces.items() if f"kernel {n}" not in named]
        try:
            parse_and_check("\n".join(new_pieces), f"<gradient walks of {self.kernel.name}>")
        except SourceError:
            return
        self.pieces, self.kernels = new_pieces, new_kernels

    def forward_source(self) -> str:
        """The forward kernel computing, beside its results, the intermediates that need no gout.

        Training runs it instead of the kernel and hands the intermediates to
        the gradient (`Gradient(..., saved=...)`), which then skips their
        stage kernels: a softmax's weights or a max's winning edges come out
        of the forward walks instead of walks of their own.
        """
        if not self.forward_stages:
            return ""
        k = self.kernel
        params = ", ".join(f"{p.name}: {_fmt_type(p.type)}" for p in k.params)
        results = [f"{r.name}: {_fmt_type(r.type)}" for r in k.results]
        results += [f"{n}: {self.stage_types[n]}" for n in self.forward_stages]
        body = [f"{d.name}[{d.index}] = {_source(d.value)}" for d in k.body]
        # stages of the kernel's own vertex values are those values: read them, so that the
        # stages' expressions match the kernel's and CSE computes each once (a softmax included)
        own = self.vertex_stages
        for name, stmt in self.forward_stages.items():
            if name in own:
                body.append(f"{name}[v] = {own[name]}[v]")
            else:
                target, expr = stmt.split(" = ", 1)
                body.append(f"{target} = {_STAGE.sub(lambda m: own.get(m.group(0), m.group(0)), expr)}")
        return f"kernel {k.name}__forward({params}) -> ({', '.join(results)}) {{\n    " + "\n    ".join(body) + "\n}\n"

    def gradient_kernels(
        self,
        target: str,
        base: str,
        rtype: str,
        param_type: ast.TensorType | None,
        contributions: list[tuple[str, str, str]],
        products: list[Product] | None = None,
        relation_products: list[Product] | None = None,
        pair_inputs: list[tuple[str, str, str, str]] | None = None,
    ) -> None:
        """Kernels whose results sum to the gradient `target`: (site, ctx, adjoint) contributions.

        Contributions at `u` sum over the out-edges of u: an in-edge
        aggregation on the reversed graph, u and v swapped. Those at `v` sum
        over in-edges (plus direct terms), those at `e` are edge kernels, on
        the forward graph. A parameter's (site `p`) sum over every vertex
        and edge is one partial per destination, summed by the runtime; a
        site `p:H,..` has leading axes (`[H, K] @ W`'s `outer`s, [H, K, N])
        that the runtime sums too, the language having no sum over a leading
        axis. `products` are the terms of `a @ W`'s gradient that factor
        into dense products (see `product_kernels`), `relation_products` those of
        `a @ W[rel(e)]` (`relation_product_kernels`). Contributions at a relation
        tensor's rows (site `r`, `W[rel(e)]` read elementwise) are an edge kernel
        whose rows the runtime sums per relation. `pair_inputs` (site, W, adj, term) are
        the contributions `adj @ W_T__[rel(e)]` of `target[site] @ W[rel(e)]`: a site's
        kernel made only of them may take its part through pair sums (`resolve_pair_inputs`).
        """
        if products:
            assert param_type is not None
            self.product_kernels(target, base, param_type, products)
        if relation_products:
            assert param_type is not None
            self.relation_product_kernels(target, base, param_type, relation_products)
        by_relation = [t for s, _, t in contributions if s == "r"]
        if by_relation:
            assert param_type is not None
            # one row per edge of the relation's value, summed per relation by the runtime
            etype = _fmt(param_type.dtype, "E", param_type.shape)
            self.emit(f"{base}_rel", target, False, etype, f"out[e] = {' + '.join(by_relation)}", relation="sum")
        by_site = {site: [(c, t) for s, c, t in contributions if s == site] for site in "uve"}
        param_sites = sorted({s for s, _, _ in contributions if s.startswith("p")})
        for i, site in enumerate(param_sites):
            edge = [t for s, c, t in contributions if s == site and c == "edge"]
            direct = [t for s, c, t in contributions if s == site and c == "vertex"]
            terms = direct + ([f"sum({' + '.join(edge)})"] if edge else [])
            assert param_type is not None
            lead = tuple(site[2:].split(",")) if site != "p" else ()
            ptype = _fmt(param_type.dtype, "V", lead + param_type.shape)
            name = f"{base}_param" + (str(i) if len(param_sites) > 1 else "")
            self.emit(name, target, False, ptype, f"out[v] = {' + '.join(terms)}", reduce=True)
        # an input read at u and, with no edge sum, at v (GCN's, GIN's x, GAT's h): on a square
        # graph one reversed kernel computes both parts, the v part as its direct term, instead
        # of two kernels and their sum (a V x F array written, read and added the less)
        fused = bool(by_site["u"]) and bool(by_site["v"]) and all(c == "vertex" for c, _ in by_site["v"])
        parts = False if fused else None  # the two parts then run on bipartite graphs only
        if by_site["u"]:
            body = " + ".join(t for _, t in by_site["u"])
            self.emit(f"{base}_src", target, True, rtype, f"out[v] = sum({swap_uv(body)})", square=parts)
        if by_site["v"]:
            edge = [t for c, t in by_site["v"] if c == "edge"]
            direct = [t for c, t in by_site["v"] if c == "vertex"]
            terms = direct + ([f"sum({' + '.join(edge)})"] if edge else [])
            self.emit(f"{base}_dst", target, False, rtype, f"out[v] = {' + '.join(terms)}", square=parts)
        for site, suffix in (("u", "src"), ("v", "dst")):
            found = [(w, adj) for s, w, adj, _ in pair_inputs or [] if s == site]
            terms = [t for s, _, _, t in pair_inputs or [] if s == site]
            if (
                found
                and not fused
                and all(c == "edge" for c, _ in by_site[site])
                and sorted(terms) == sorted(t for _, t in by_site[site])
            ):
                self.pending_pair_inputs.append((f"{base}_{suffix}", site, found))
        if fused:
            at_v = " + ".join(t for _, t in by_site["v"])
            body = " + ".join(t for _, t in by_site["u"])
            self.emit(base, target, True, rtype, f"out[v] = {at_v} + sum({swap_uv(body)})", square=True)
        if by_site["e"]:
            body = " + ".join(t for _, t in by_site["e"])
            self.emit(f"{base}_edge", target, False, rtype, f"out[e] = {body}")

    def product_kernels(self, target: str, base: str, param_type: ast.TensorType, products: list[Product]) -> None:
        """dW as dense products F^T G, one per (side, factor): no partial per destination.

        The sum over every edge of outer(f(u), g_e) is F^T G with F[u] = f(u)
        and G[u] the sum of g_e over u's out-edges: an aggregation on the
        reversed graph, as an input's gradient at `u`. A factor read at `v`
        pairs with G[v], the sum over v's in-edges (and v's direct terms).
        F is the input itself when the factor is a plain read (`x[u]`), else
        a stage kernel evaluates it per vertex: either is [V, .., K], G is
        [V, .., N], and the runtime multiplies them (`factor` of the kernel).
        """
        groups: dict[tuple[str, str, tuple], list[tuple[str, str]]] = {}
        for side, ftext, shape, ctx, adj in products:
            groups.setdefault((side, ftext, shape), []).append((ctx, adj))
        count = {"u": 0, "v": 0}
        for (side, ftext, shape), terms in groups.items():
            factor = self.factor(side, ftext, shape)
            rtype = _fmt(self.dtype, "V", tuple(shape[:-1]) + (param_type.shape[-1],))
            suffix = "src" if side == "u" else "dst"
            name = f"{base}_{suffix}" + (str(count[side]) if count[side] else "")
            count[side] += 1
            if side == "u":
                body = " + ".join(adj for _, adj in terms)
                self.emit(name, target, True, rtype, f"out[v] = sum({swap_uv(body)})", factor=factor)
            else:
                edge = [adj for ctx, adj in terms if ctx == "edge"]
                direct = [adj for ctx, adj in terms if ctx == "vertex"]
                stmt = " + ".join(direct + ([f"sum({' + '.join(edge)})"] if edge else []))
                self.emit(name, target, False, rtype, f"out[v] = {stmt}", factor=factor)

    def relation_product_kernels(
        self, target: str, base: str, param_type: ast.TensorType, products: list[Product]
    ) -> None:
        """dW of `a @ W[rel(e)]` as one dense product per relation: no partial per destination.

        The sum over relation r's edges of outer(f(end), g_e) is F_r^T G_r, F_r the
        factor's rows at those edges' ends (f is read at one end, `u` or `v`) and G_r
        their adjoints. A kernel on `plans.pair_graph` (`NAME_pairs`) sums G per
        (end, relation) pair, and the runtime multiplies relation by relation, one
        factor row per pair: the memory is a pair tensor of the result's width.
        Where G cannot be summed so (`pair_kernel`), an edge kernel writes it ([E,
        .., N]) and the runtime gathers and sums its rows per relation. Never K x N
        per destination or edge.
        """
        groups: dict[tuple[str, str, tuple], list[str]] = {}
        for side, ftext, shape, _, adj in products:
            groups.setdefault((side, ftext, shape), []).append(adj)
        for i, ((side, ftext, shape), adjoints) in enumerate(groups.items()):
            factor = self.factor(side, ftext, shape)
            rtype = _fmt(self.dtype, "E", tuple(shape[:-1]) + (param_type.shape[-1],))
            name = f"{base}_rel{i if i else ''}"
            adjoint = " + ".join(adjoints)
            pairs = f"{name}_pairs"
            piece = self.pair_kernel(pairs, rtype, adjoint, side)
            if piece:
                self.pair_pieces[pairs] = piece
                self.pair_sum_names.setdefault((side, rtype, adjoint), pairs)
            stmt = f"out[e] = {adjoint}"
            self.emit(name, target, False, rtype, stmt, factor=factor, relation=side, pairs=pairs if piece else "")

    def factor(self, side: str, ftext: str, shape: tuple) -> str:
        """The [V, ..] tensor F of a dense product: an input or intermediate read as is, or a stage.

        A factor read at `u` is evaluated at every source (a kernel on the
        reversed graph, whose destinations are the sources), one read at `v`
        at every destination.
        """
        plain = re.fullmatch(r"(\w+)\[[uv]\]", ftext)
        if plain and (plain.group(1) in self.params or _STAGE.fullmatch(plain.group(1))):
            return plain.group(1)
        key = ("factor", side, ftext)
        if key not in self.stages:
            name = f"st{len(self.stages)}__"
            self.stages[key] = name
            self.stage_types[name] = _fmt(self.dtype, "V", shape)
            body = swap_uv(ftext) if side == "u" else ftext
            self.emit(f"{self.kernel.name}__{name[:-2]}", name, side == "u", self.stage_types[name], f"out[v] = {body}")
        return self.stages[key]

    def vertex_gradient(self, d: ast.Definition, contributions: list[tuple[str, str, str]]) -> str:
        """The adjoint of vertex value `d`, an intermediate summed from its readers' contributions."""
        key = ("grad", d.name, tuple(contributions))
        if key not in self.stages:
            name = f"st{len(self.stages)}__"
            self.stages[key] = name
            self.stage_types[name] = _fmt(self.dtype, "V", d.value.shape or ())
            self.gradient_kernels(name, f"{self.kernel.name}__{name[:-2]}", self.stage_types[name], None, contributions)
        return f"{self.stages[key]}[v]"

    # ------------------------------------------------------- forward values

    def text(self, e: ast.Expr, vertex_level: bool = False) -> str:
        """Source text of a forward expression, fully parenthesised, for a generated kernel.

        Edge values defined by earlier statements (`s[e]`) are inlined and
        recomputed. Softmaxes, vertex values, and (except at the top level
        of a vertex statement, `vertex_level`) aggregations are read from
        stage intermediates.
        """

        def special(n: ast.Expr) -> str | None:
            if isinstance(n, ast.Index) and n.name in self.edge_defs:
                return f"({self.text(self.edge_defs[n.name])})"
            if isinstance(n, ast.Index) and n.name in self.vertex_defs:
                d = self.vertex_defs[n.name]
                name = self.stage(self.text(d.value, vertex_level=True), "v", d.value.shape or ())
                self.vertex_stages.setdefault(name, d.name)
                return f"{name}[{n.index}]"
            if isinstance(n, ast.Call) and n.func == "softmax":
                name = self.stage(f"softmax({self.text(n.args[0])})", "e", n.shape or ())
                return f"{name}[e]"
            if isinstance(n, ast.Aggregate):
                agg = f"{n.kind}({self.text(n.operand)})"
                return agg if vertex_level else f"{self.stage(agg, 'v', n.shape or ())}[v]"
            return None

        return _source(e, special)


class _Differentiator:
    """Reverse mode for one input: adjoints as source text, collected per site where the input is read."""

    def __init__(self, builder: _Builder, wrt: str):
        self.builder = builder
        self.kernel = builder.kernel
        self.wrt = wrt
        self.edge_defs = builder.edge_defs
        self.vertex_defs = builder.vertex_defs
        # (site, ctx, adjoint text): site u / v / e / p (p:H,.. with leading axes); ctx "edge" or "vertex"
        self.contributions: list[tuple[str, str, str]] = []
        # terms of `a @ wrt`'s gradient that are dense products (see _Builder.product_kernels)
        self.products: list[Product] = []
        # the same for `a @ wrt[rel(e)]`, one product per relation (_Builder.relation_product_kernels)
        self.relation_products: list[Product] = []
        # (site, W, adj, contribution) of `wrt[site] @ W[rel(e)]` in an edge sum, read directly:
        # contributions the gradient may take through pair sums (_Builder.resolve_pair_inputs)
        self.pair_inputs: list[tuple[str, str, str, str]] = []
        # the same for vertex values read by later statements (and vertex results)
        self.vertex_adjoints: dict[str, list[tuple[str, str, str]]] = {}
        # softmax node -> the adjoints of its uses, summed before one backward step (one stage)
        self.softmax_adjoints: dict[int, list[str]] = {}
        self._depends: dict[str, bool] = {}
        # in statement order, so each `depends` walks one expression (earlier values are memoised)
        for d in self.kernel.body:
            self._depends[d.name] = self.depends(d.value)

    def text(self, e: ast.Expr) -> str:
        return self.builder.text(e)

    def depends(self, e: ast.Expr) -> bool:
        if isinstance(e, ast.Index):
            if e.name == self.wrt:
                return True
            if e.name in self.edge_defs or e.name in self.vertex_defs:
                if e.name not in self._depends:
                    value = self.edge_defs[e.name] if e.name in self.edge_defs else self.vertex_defs[e.name].value
                    self._depends[e.name] = self.depends(value)
                return self._depends[e.name]
            return False
        if isinstance(e, ast.Name):
            return e.name == self.wrt
        return any(self.depends(c) for c in ast.children(e))

    def fail(self, e: ast.Expr, what: str) -> CompileError:
        return CompileError(
            f"{self.kernel.name}: cannot differentiate with respect to '{self.wrt}': {what} "
            f"is not differentiated yet (line {e.loc.line})"
        )

    def run(self) -> None:
        """Seeds every result with its gout, then walks the statements last to first.

        A vertex value's adjoint, and a softmax's, is complete once every
        later statement is done (edge values are inlined where they are
        read, so their softmaxes collect adjoints from all readers first).
        """
        for r in self.kernel.results:
            d = next(d for d in self.kernel.body if d.name == r.name)
            seed = f"{gout_name(self.kernel, r.name)}[{d.index}]"
            if d.index == "e":
                self.back(d.value, seed, "edge")
            else:
                self.vertex_adjoints.setdefault(d.name, []).append(("v", "vertex", seed))
        for d in reversed(self.kernel.body):
            found = self.vertex_adjoints.get(d.name)
            if d.index == "v" and found and self.depends(d.value):
                if len(found) == 1 and found[0][:2] == ("v", "vertex"):
                    adj = found[0][2]  # one direct use at its own vertex (a result's seed): no stage needed
                else:
                    adj = self.builder.vertex_gradient(d, found)
                self.back(d.value, adj, "vertex")
            # outermost first: an inner softmax's adjoint comes from the outer one's step
            for node in _walk(d.value):
                if isinstance(node, ast.Call) and node.func == "softmax" and id(node) in self.softmax_adjoints:
                    self.softmax_back(node, self.softmax_adjoints.pop(id(node)))
        assert not self.softmax_adjoints, "a softmax outside the kernel's statements"

    def softmax_back(self, e: ast.Call, adjoints: list[str]) -> None:
        """d s[e] = alpha[e] * (g[e] - sum over the destination's in-edges of alpha * g).

        d s is an intermediate of the softmax's own shape ([E, H] for gat),
        computed by one stage kernel whose destination loop walks the
        in-edges twice (the weighted sum, then d s; the second walk reads
        rows the first left in cache). Every kernel downstream reads d s
        instead of recomputing g, which is the costly part (gat's g is a
        dot product over the feature axis per edge and head): gat_conv's
        el and er gradients became walks over [E, H] values.
        """
        (s,) = e.args
        adj = " + ".join(f"({a})" for a in adjoints)
        alpha = self.text(e)
        shape = e.shape or ()
        weighted = f"sum({alpha} * ({adj}))"
        d_score = self.builder.stage(
            f"{alpha} * (({adj}) - {_WEIGHTED}[v])", "e", shape, prelude=(_WEIGHTED, weighted, shape)
        )
        self.back(s, f"{d_score}[e]", "edge")

    def back(self, e: ast.Expr, adj: str, ctx: str) -> None:
        if not self.depends(e):
            return
        if isinstance(e, ast.Index):
            if e.name == self.wrt:
                self.contributions.append(("r" if e.index == "rel" else e.index, ctx, adj))
            elif e.name in self.vertex_defs:
                self.vertex_adjoints.setdefault(e.name, []).append((e.index, ctx, adj))
            else:
                self.back(self.edge_defs[e.name], adj, "edge")
            return
        if isinstance(e, ast.Name):
            self.contributions.append(("p", ctx, adj))
            return
        shape = e.shape or ()
        if isinstance(e, ast.Unary):
            self.back(e.operand, f"(-({adj}))", ctx)
            return
        if isinstance(e, ast.Binary):
            self.binary(e, adj, ctx, shape)
            return
        if isinstance(e, ast.Call):
            self.call(e, adj, ctx, shape)
            return
        if isinstance(e, ast.Aggregate):
            if e.kind == "sum":
                self.back(e.operand, adj, "edge")
            elif e.kind == "mean":
                # mean is 0 at a vertex without in-edges, and no edge there reads the adjoint
                self.back(e.operand, f"(({adj}) / deg_in(v))", "edge")
            elif e.kind in ("argmax", "argmin"):
                return  # edge ids: piecewise constant, zero gradient (as step's)
            else:
                # all of it to the lowest-id in-edge attaining the max (min) of each element, or
                # to the first NaN: its id, a per-destination intermediate, picks the edge
                best = self.builder.stage(f"arg{e.kind}({self.text(e.operand)})", "v", shape)
                chosen = f"step(0.5 - abs(edge_id(e) - {best}[v]))"
                self.back(e.operand, f"(({adj}) * {chosen})", "edge")
            return
        raise self.fail(e, type(e).__name__)

    def binary(self, e: ast.Binary, adj: str, ctx: str, shape: tuple) -> None:
        a, b = e.lhs, e.rhs
        ta, tb = self.text(a), self.text(b)
        if e.op == "@" and isinstance(b, ast.Index) and b.index == "rel":
            # a relation's matrix: d a = adj @ W^T[rel(e)] (the runtime transposes each relation's),
            # d W[r] = the sum of outer(a, adj) over r's edges, one dense product per relation
            term = f"(({adj}) @ {transpose_name(b.name)}[rel(e)])"
            if isinstance(a, ast.Index) and a.name == self.wrt and a.index in ("u", "v") and ctx == "edge":
                self.pair_inputs.append((a.index, b.name, adj, term))
            self.back(a, term, ctx)
            if self.depends(b):
                products = self.factored(a, adj, ctx)
                if products is None:
                    raise self.fail(
                        e,
                        f"the gradient of the relation tensor '{b.name}' when the left operand of '@' "
                        "reads both ends of the edge, or neither, in one term",
                    )
                self.relation_products.extend(products)
            return
        if e.op == "@" and not isinstance(b, ast.Name):
            # a matrix per edge (theta[e], an edge expression): its own transpose, and outer(a, adj)
            # to its matrix, an edge value of the matrix's shape
            self.back(a, f"(({adj}) @ transpose({tb}))", ctx)
            self.back(b, f"outer({ta}, {adj})", ctx)
            return
        if e.op == "@":
            # d a = adj @ W^T (a kernel input the runtime transposes); d W = sum of outer(a, adj)
            assert isinstance(b, ast.Name)
            self.back(a, f"(({adj}) @ {transpose_name(b.name)})", ctx)
            if self.depends(b):
                products = self.factored(a, adj, ctx)
                if products is not None:
                    self.products.extend(products)
                    return
                lead = (a.shape or ())[:-1]
                site = "p:" + ",".join(str(d) for d in lead) if lead else "p"
                self.contributions.append((site, ctx, f"outer({ta}, {adj})"))
            return
        if e.op == "+":
            parts = (adj, adj)
        elif e.op == "-":
            parts = (adj, f"(-({adj}))")
        elif e.op == "*":
            parts = (f"(({adj}) * {tb})", f"(({adj}) * {ta})")
        else:
            parts = (f"(({adj}) / {tb})", f"(-({adj}) * {ta} / ({tb} * {tb}))")
        for operand, other, part in zip((a, b), (tb, ta), parts):
            want, other_shape = operand.shape or (), (b if operand is a else a).shape or ()
            if e.op == "*" and len(shape) - len(want) == 1 and other_shape == shape:
                # a [..] scaled by b [.., K]: its gradient is one dot product, no ones tensor
                self.back(operand, f"dot({adj}, {other})", ctx)
            else:
                self.back(operand, _reduce_to(part, shape, want), ctx)

    def factored(self, a: ast.Expr, adj: str, ctx: str) -> list[Product] | None:
        """`a @ W`'s gradient sum(outer(a, adj)) as dense products, or None if `a` does not split.

        `a` splits when it is a sum (and difference) of terms of a's shape
        that each read only the source, or only the destination (`x[u] +
        x[v]`, `relu(x[u])`, `h[v]`), each maybe scaled by a value without
        the contracted axis (`w[e] * x[u]`, `x[u] / deg_in(v)`): outer is
        linear in its first operand, so each term pairs with the adjoint
        (times its scale) summed per vertex of its side. A term reading the
        edge, both ends, or neither (a parameter alone) keeps the whole of
        `a` on the per-destination path.
        """
        want = a.shape or ()
        products: list[Product] = []
        for negate, scales, term in self._terms(a, want[:-1], False, ()):
            if (term.shape or ()) != want:
                return None
            text = self.text(term)
            sides = [side for side in "uve" if _AT[side].search(text)]
            if sides not in (["u"], ["v"]):
                return None
            g = f"(-({adj}))" if negate else adj
            for op, scale in scales:
                g = f"(({g}) {op} {self.text(scale)})"
            products.append((sides[0], text, tuple(want), ctx, g))
        return products

    def _terms(
        self, e: ast.Expr, lead: tuple, negate: bool, scales: tuple[tuple[str, ast.Expr], ...]
    ) -> Iterator[tuple[bool, tuple[tuple[str, ast.Expr], ...], ast.Expr]]:
        """The terms of a sum, each with its sign and the factors that scale it along `lead`
        only (their shapes a prefix of it); edge values are inlined as `text` inlines them."""

        def scale(x: ast.Expr) -> bool:
            shape = tuple(x.shape or ())
            return len(shape) <= len(lead) and shape == lead[: len(shape)]

        if isinstance(e, ast.Index) and e.name in self.edge_defs:
            yield from self._terms(self.edge_defs[e.name], lead, negate, scales)
        elif isinstance(e, ast.Binary) and e.op in ("+", "-"):
            yield from self._terms(e.lhs, lead, negate, scales)
            yield from self._terms(e.rhs, lead, negate != (e.op == "-"), scales)
        elif isinstance(e, ast.Binary) and e.op in ("*", "/") and scale(e.rhs) and not scale(e.lhs):
            yield from self._terms(e.lhs, lead, negate, scales + ((e.op, e.rhs),))
        elif isinstance(e, ast.Binary) and e.op == "*" and scale(e.lhs) and not scale(e.rhs):
            yield from self._terms(e.rhs, lead, negate, scales + (("*", e.lhs),))
        elif isinstance(e, ast.Unary):
            yield from self._terms(e.operand, lead, not negate, scales)
        else:
            yield negate, scales, e

    def call(self, e: ast.Call, adj: str, ctx: str, shape: tuple) -> None:
        if e.func == "dot":
            a, b = e.args
            # adj has the shape of a and b without their last axis: a prefix, so it broadcasts
            self.back(a, f"(({adj}) * {self.text(b)})", ctx)
            self.back(b, f"(({adj}) * {self.text(a)})", ctx)
            return
        if e.func == "outer":
            a, b = e.args
            ta, tb = self.text(a), self.text(b)
            # d a[.., k] = sum over n of adj[.., k, n] * b[.., n]: b spread over k by an outer with ones
            self.back(a, f"dot({adj}, outer(({ta}) * 0.0 + 1.0, {tb}))", ctx)
            # d b[.., n] = sum over k of adj[.., k, n] * a[.., k]: transposed, k is the last axis
            self.back(b, f"dot(transpose({adj}), outer(({tb}) * 0.0 + 1.0, {ta}))", ctx)
            return
        if e.func == "transpose":
            self.back(e.args[0], f"transpose({adj})", ctx)
            return
        if e.func in ("max", "min"):
            a, b = e.args
            ta, tb = self.text(a), self.text(b)
            # ties go to a: b gets the gradient only where it is strictly larger (smaller)
            to_b = f"step({tb} - {ta})" if e.func == "max" else f"step({ta} - {tb})"
            for operand, part in ((a, f"(({adj}) * (1.0 - {to_b}))"), (b, f"(({adj}) * {to_b})")):
                self.back(operand, _reduce_to(part, shape, operand.shape or ()), ctx)
            return
        if e.func == "softmax":
            self.softmax_adjoints.setdefault(id(e), []).append(adj)  # `run` steps back once all are in
            return
        if e.func == "step":
            return  # zero almost everywhere
        if e.func == "detach":
            return  # a constant to the gradient, as torch's detach
        (a,) = e.args[:1]
        t = self.text(a)
        derivative = {
            "exp": lambda: f"exp({t})",
            "log": lambda: f"(1.0 / {t})",
            "sqrt": lambda: f"(0.5 / sqrt({t}))",
            "rsqrt": lambda: f"(-0.5 * rsqrt({t}) / {t})",
            "sigmoid": lambda: f"(sigmoid({t}) * (1.0 - sigmoid({t})))",
            "tanh": lambda: f"(1.0 - tanh({t}) * tanh({t}))",
            # the conventions (as torch): relu'(0) = 0, leaky_relu'(0) = slope, abs'(0) = 0
            "relu": lambda: f"step({t})",
            "abs": lambda: f"(step({t}) - step(-({t})))",
            "leaky_relu": lambda: self._leaky(e, t),
        }.get(e.func)
        if derivative is None:
            raise self.fail(e, f"'{e.func}'")
        slope = derivative()
        part = f"(({adj}) * {slope})"
        if ctx == "edge" and "[rel(e)]" in t and "@" in t and "[u]" in t and "[v]" in t:
            # an edge value whose argument is a relation's product at both ends (RGAT's score):
            # its adjoint is computed once, as an intermediate, where every kernel downstream
            # would recompute both products, and the relation weights' adjoints then read no end,
            # so they take pair kernels. Not for other products: the intermediate is an edge
            # tensor of the value's width (mlp_aggr's [E, N]), which they do without
            part = self.staged_product(adj, slope, shape)
        self.back(a, part, ctx)

    def staged_product(self, adj: str, factor: str, shape: tuple) -> str:
        """`adj * factor` as an edge intermediate, read as `stN__[e]`. Where `adj` is itself
        one (a softmax's adjoint, RGAT's), the product is computed in that intermediate's
        kernel (same prelude), which no other kernel then reads and `drop_unread_stages`
        drops: one walk over the edges, not two."""
        read = re.fullmatch(r"(st\d+__)\[e\]", adj)
        inner = next((key for key, name in self.builder.stages.items() if read and name == read.group(1)), None)
        if inner is not None and inner[0] == "e":
            _, body, prelude = inner
            return f"{self.builder.stage(f'({body}) * {factor}', 'e', shape, prelude)}[e]"
        return f"{self.builder.stage(f'(({adj}) * {factor})', 'e', shape)}[e]"

    @staticmethod
    def _leaky(e: ast.Call, t: str) -> str:
        slope = float(cast(ast.Number, e.args[1]).value)  # sema: the slope is a number
        return f"({slope!r} + {1.0 - slope!r} * step({t}))"


#: The most expression nodes the gradient may inline into one statement. Edge
#: values are recomputed (inlined) where they are read, so a chain whose every
#: value reads the previous one twice (`s2[e] = s1[e] * s1[e]`) doubles at each
#: step: 14 steps took minutes and 20 would not finish. Real kernels inline a few
#: dozen (gat: 11).
MAX_INLINED_NODES = 1000


def _check_inlining(kernel: ast.Kernel) -> None:
    """Refuses, before any text is built, a kernel whose gradient would inline edge values deeper
    than the parser accepts (parser.MAX_NESTING) or into more than MAX_INLINED_NODES nodes."""
    from gnnc.lang.parser import MAX_NESTING

    depth: dict[str, int] = {}
    size: dict[str, int] = {}

    def measure(e: ast.Expr) -> tuple[int, int]:
        # one expression's nesting (the parser's bound); edge values read come from the dicts
        if isinstance(e, ast.Index) and e.name in depth:
            return depth[e.name] + 1, size[e.name] + 1
        parts = [measure(c) for c in ast.children(e)]
        return 1 + max((d for d, _ in parts), default=0), 1 + sum(n for _, n in parts)

    for d in kernel.body:
        nesting, nodes = measure(d.value)
        if nesting > MAX_NESTING or nodes > MAX_INLINED_NODES:
            what = (
                f"nests {nesting} operations deep (at most {MAX_NESTING})"
                if nesting > MAX_NESTING
                else f"has {nodes} operations (at most {MAX_INLINED_NODES})"
            )
            raise CompileError(
                f"{kernel.name}: its gradient is not expressible as kernels yet: '{d.name}' (line {d.loc.line}), "
                f"with the edge values it reads recomputed in place as gradient kernels do, {what}"
            )
        if d.index == "e":
            depth[d.name], size[d.name] = nesting, nodes


def gradient_program(kernel: ast.Kernel, wrt: list[str] | None = None, walks: bool = True) -> GradProgram:
    """Gradient kernels (as checked source text) of one forward kernel; with `walks`, kernels
    walking the same graph in turn share one walk (`_Builder.share_walks`)."""
    clash = [p.name for p in kernel.params if p.name.endswith("__")] + [
        d.name for d in kernel.body if d.name.endswith("__")
    ]
    if clash:
        raise CompileError(
            f"{kernel.name}: names ending in '__' are kept for generated gradient kernels "
            f"(gout__, st0__, W_T__); rename {', '.join(clash)}"
        )
    _check_inlining(kernel)
    builder = _Builder(kernel)
    params = [p for p in kernel.params if wrt is None or p.name in wrt]
    constant: list[str] = []
    skipped: list[str] = []
    for p in params:
        d = _Differentiator(builder, p.name)
        d.run()
        if not d.contributions and not d.products and not d.relation_products:
            constant.append(p.name)
            continue
        builder.gradient_kernels(
            p.name,
            f"{kernel.name}__grad_{p.name}",
            _fmt_type(p.type),
            p.type,
            d.contributions,
            d.products,
            d.relation_products,
            d.pair_inputs,
        )
    builder.resolve_pair_inputs()
    builder.share_edge_dots()
    builder.share_edge_adjoints()
    builder.share_edge_exps()
    builder.drop_unread_stages()
    if walks:
        builder.share_walks()
    source = "\n".join(builder.pieces)
    forward = builder.forward_source()
    checked = None
    if source:
        from gnnc.lang import parse_and_check

        try:
            checked = parse_and_check(source + forward, f"<gradient of {kernel.name}>")
        except SourceError as exc:
            raise CompileError(f"{kernel.name}: its gradient is not expressible as kernels yet: {exc}") from exc
    gouts = [gout_name(kernel, r.name) for r in kernel.results]
    return GradProgram(
        kernel.name,
        source,
        builder.kernels,
        constant,
        skipped,
        gouts,
        builder.transposes,
        builder.relation_transposes,
        list(builder.forward_stages),
        forward,
        checked,
        "\n".join(builder.pair_pieces[n] for n in _pair_piece_names(builder.kernels)),
        builder.edge_stages() and not any(isinstance(n, ast.EdgeId) for d in kernel.body for n in _walk(d.value)),
    )


def _pair_piece_names(kernels: list[GradKernel]) -> list[str]:
    """The pair module's kernels the gradient's kernels name, once each, in order."""
    names = [k.pairs for k in kernels if k.pairs]
    names += [n for k in kernels for sums, transform, _, _ in k.via_pairs for n in (sums, transform)]
    return list(dict.fromkeys(names))


def gradient_source(source: str, file: str, kernels: list[str] | None = None) -> str:
    """The gradient kernels of every kernel of a file (or of some), as one source text."""
    from gnnc.lang import parse_and_check

    program = parse_and_check(source, file)
    names = [k.name for k in program.kernels]
    missing = [k for k in kernels or [] if k not in names]
    if missing:
        raise CompileError(f"no kernel named {', '.join(missing)} in {file}")
    parts = []
    for k in program.kernels:
        if kernels is None or k.name in kernels:
            grad = gradient_program(k)
            reverse = ", ".join(g.name for g in grad.kernels if g.reverse) or "none"
            stages = ", ".join(dict.fromkeys(w for g in grad.kernels for w in g.writes if w.endswith("__"))) or "none"
            parts.append(
                f"# gradients of {k.name}, run in this order; on the reversed graph: {reverse}; "
                f"intermediates read by later kernels: {stages}\n{grad.source}"
            )
            if grad.forward:
                parts.append(
                    f"# {k.name} for training: also returns {', '.join(grad.saved)}, which the gradient "
                    f"then does not recompute\n{grad.forward}"
                )
    return "\n".join(parts)
