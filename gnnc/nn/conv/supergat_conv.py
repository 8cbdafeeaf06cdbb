"""`SuperGATConv`: PyG's self-supervised graph attention (Kim and Oh, SuperGAT), fused as GAT's.

With `h = lin(x)` ([V, H, C]) and, for the "MX" attention, `al = <h, att_l>`
and `ar = <h, att_r>` per vertex (torch), the edge score is

    MX: leaky_relu((al[u] + ar[v]) * sigmoid(dot(h[v], h[u])), SLOPE)
    SD: leaky_relu(dot(h[v], h[u]) / SQRT_C, SLOPE)

normalised by a softmax over each destination's in-edges and its self loop
and summed over `h[u]`. The logit `lg[e] = <h_v, h_u>` (divided by sqrt(C)
for "SD") is an `[E, H]` tensor made by an edge kernel of its own,

    kernel supergat_logits_mx(h: f32[V, H, F]) -> f32[E, H] { out[e] = dot(h[v], h[u]) }

and the attention kernel reads it. The self loops PyG appends (after
removing the graph's own) enter as in GATConv (`gnnc.nn.attention`): the
loop's score `sl[v]` is computed in torch from per-vertex values, the graph's
own loops are left out by `self_loop(e)`, and the softmax is written out:

    kernel supergat_conv_mx_loops(h: f32[V, H, F], al: f32[V, H], ar: f32[V, H], lg: f32[E, H],
                                  sl: f32[V, H]) -> f32[V, H, F] {
        s[e] = leaky_relu((al[u] + ar[v]) * sigmoid(lg[e]), 0.2)
        m[v] = detach(sl[v] + max((1 - self_loop(e)) * relu(s[e] - sl[v])))
        q[v] = exp(sl[v] - m[v])
        p[e] = (1 - self_loop(e)) * exp(s[e] - m[v])
        z[v] = q[v] + sum(p[e])
        r[v] = 1.0 / z[v]
        out[v] = q[v] * r[v] * h[v] + sum(p[e] * r[v] * h[u])
    }

The logit as the attention kernel's own edge value made that kernel's
backward 2.8x its forward (270 against 95 ms on rmat-16, 4 heads): the
compiler inlines an edge value at each of its reads, so its gradient kernels
made the dot over C again at each. PyG's self-supervised loss reads the same
logits of its positive edges, so they are made once for both; attention
dropout multiplies `p[e]` and `q[v]` by masks drawn as PyG draws them. The
negative edges' logits come from the same edge kernel on the sampled edges.
In eval mode nothing is sampled.

The negative edges are sampled as PyG samples them (`negative_sampling`,
`batched_negative_sampling`: Python's `random.sample` over the non-edges,
checked with numpy's `isin`), from PyG's edge list (the graph's non-loop edges,
then the loops; a SparseTensor's entries in row-major order), so that one
state of Python's `random` (and of torch's, for attention dropout and
`edge_sample_ratio`) gives both layers the same edges. Their sizes depend on
the data: under torch.compile a training call without `neg_edge_index`
breaks the graph (eval calls, and training calls that pass the negatives
with `edge_sample_ratio=1`, trace whole).

The loss (`get_attention_loss`) is PyG's binary cross-entropy over the mean
logit of each positive and negative edge. It is computed from the logits per
edge id and per loop, weighted by which of them are PyG's positive edges, so
no shape depends on the data; `att_x` and `att_y` give PyG's tensors, in its
order, when read.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import attention, inputs
from gnnc.nn.conv.gat_conv import folds, projected, scores
from gnnc.nn.init import glorot, zeros
from gnnc.nn.kernels import kernel, literal
from gnnc.nn.linear import Linear
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp
from gnnc.torch.kernels import Kernel

LAYER = "SuperGATConv"
ATTENTION_TYPES = ("MX", "SD")


def logit(attention_type: str, scale: str) -> str:
    """The edge logit `<h_v, h_u>` as PyG's `get_attention(..., return_logits=True)` has it."""
    return "dot(h[v], h[u])" + ("" if attention_type == "MX" else f" / {scale}")


def source(attention_type: str, slope: str, loops: bool, mask: bool) -> tuple[str, str]:
    """(kernel text, name) of the attention kernel (see the module docstring)."""
    mx = attention_type == "MX"
    name = f"supergat_conv_{attention_type.lower()}" + "_loops" * loops + "_mask" * mask
    params = ["h: f32[V, H, F]"] + (["al: f32[V, H]", "ar: f32[V, H]"] if mx else []) + ["lg: f32[E, H]"]
    score = "(al[u] + ar[v]) * sigmoid(lg[e])" if mx else "lg[e]"
    body = [f"s[e] = leaky_relu({score}, {slope})"]
    if not loops:
        if mask:
            params.append("mask: f32[E, H]")
        body.append(f"out[v] = sum(softmax(s[e]){' * mask[e]' if mask else ''} * h[u])")
    else:
        params.append("sl: f32[V, H]")
        if mask:
            params += ["mask: f32[E, H]", "mloop: f32[V, H]"]
        edge_w, loop_w = ("p[e] * mask[e]", "q[v] * mloop[v]") if mask else ("p[e]", "q[v]")
        body += [
            "m[v] = detach(sl[v] + max((1 - self_loop(e)) * relu(s[e] - sl[v])))",
            "q[v] = exp(sl[v] - m[v])",
            "p[e] = (1 - self_loop(e)) * exp(s[e] - m[v])",
            "z[v] = q[v] + sum(p[e])",
            "r[v] = 1.0 / z[v]",
            f"out[v] = {loop_w} * r[v] * h[v] + sum({edge_w} * r[v] * h[u])",
        ]
    lines = [f"kernel {name}({', '.join(params)}) -> f32[V, H, F] {{", *(f"    {line}" for line in body), "}"]
    return "\n".join(lines) + "\n", name


def logits_source(attention_type: str, scale: str) -> tuple[str, str]:
    """(kernel text, name) of the logits of arbitrary edges (the negative ones)."""
    name = f"supergat_logits_{attention_type.lower()}"
    text = f"kernel {name}(h: f32[V, H, F]) -> f32[E, H] {{\n    out[e] = {logit(attention_type, scale)}\n}}\n"
    return text, name


# ------------------------------------------------------------------ PyG's samplers, draw for draw


def _sample(population: int, k: int) -> torch.Tensor:
    """PyG's `sample`: k distinct values of range(population) by Python's `random.sample`."""
    if population <= k:
        return torch.arange(population)
    # (PyG's torch.tensor of an empty sample is a float tensor; an int64 one is what it means)
    return torch.tensor(random.sample(range(population), k), dtype=torch.int64)


def negative_sampling(edge_index: torch.Tensor, num_nodes: int, num_neg_samples: int) -> torch.Tensor:
    """PyG's `negative_sampling(edge_index, num_nodes, num_neg_samples)` ("sparse", directed),
    the same draws of Python's `random` giving the same edges."""
    row, col = edge_index[0].cpu(), edge_index[1].cpu()
    keep = row != col
    row, col = row[keep], col[keep]
    col = torch.where(row < col, col - 1, col)
    idx = row * (num_nodes - 1) + col
    population = num_nodes * num_nodes - num_nodes
    if idx.numel() >= population:
        return edge_index.new_empty((2, 0))
    prob = 1.0 - idx.numel() / population
    sample_size = int(1.1 * num_neg_samples / prob)
    known = idx.numpy()
    neg_idx: torch.Tensor | None = None
    for _ in range(3):
        rnd = _sample(population, sample_size)
        mask = np.isin(rnd.numpy(), known)
        if neg_idx is not None:
            mask |= np.isin(rnd.numpy(), neg_idx.numpy())
        rnd = rnd[~torch.from_numpy(mask)]
        neg_idx = rnd if neg_idx is None else torch.cat([neg_idx, rnd])
        if neg_idx.numel() >= num_neg_samples:
            neg_idx = neg_idx[:num_neg_samples]
            break
    assert neg_idx is not None
    row = neg_idx.div(num_nodes - 1, rounding_mode="floor")
    col = neg_idx % (num_nodes - 1)
    col = torch.where(row <= col, col + 1, col)
    return torch.stack([row, col]).to(edge_index.device)


def batched_negative_sampling(edge_index: torch.Tensor, batch: torch.Tensor, num_neg_samples: int) -> torch.Tensor:
    """PyG's `batched_negative_sampling(edge_index, batch, num_neg_samples)`: each graph of
    `batch` sampled apart, its edges taken as PyG takes them (consecutive columns, as many as
    the graph's sources have edges)."""
    split = torch.bincount(batch[edge_index[0]]).tolist() if edge_index.numel() else []
    parts = torch.split(edge_index, split, dim=1)
    num_src = torch.bincount(batch) if batch.numel() else batch.new_zeros(0)
    ptr = torch.cat([num_src.new_zeros(1), torch.cumsum(num_src, 0)])[:-1]
    num_nodes = num_src.tolist()
    negatives = [
        negative_sampling(part - ptr[i], num_nodes[i], num_neg_samples) + ptr[i] for i, part in enumerate(parts)
    ]
    return torch.cat(negatives, dim=1) if negatives else edge_index.new_empty((2, 0))


def is_undirected(edge_index: torch.Tensor, num_nodes: int) -> bool:
    """PyG's `is_undirected`: the edges, duplicates counted, are those turned around."""
    row, col = edge_index[0], edge_index[1]
    return torch.equal(torch.sort(row * num_nodes + col).values, torch.sort(col * num_nodes + row).values)


def to_undirected(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """PyG's `to_undirected`: both directions of every edge, coalesced (sorted, no duplicates)."""
    row, col = edge_index[0], edge_index[1]
    keys = torch.unique(torch.cat([row * num_nodes + col, col * num_nodes + row]))
    return torch.stack([keys.div(num_nodes, rounding_mode="floor"), keys % num_nodes])


def dropout_edge_mask(num_edges: Any, p: float, device: torch.device) -> torch.Tensor | None:
    """The edges PyG's `dropout_edge(edge_index, p)` keeps, as its draw (None: all, no draw)."""
    if p == 0.0:
        return None
    return torch.rand(num_edges, device=device) >= p


# ------------------------------------------------------------------ the layer


@dataclass(frozen=True)
class _Logits:
    """A training call's logits and which of them are PyG's positive edges (the loss's inputs)."""

    #: Logits of the graph's edges ([E, H], by edge id), of the loops ([N, H]) and of the negatives ([K, H]).
    edges: torch.Tensor
    loops: torch.Tensor | None
    negatives: torch.Tensor
    #: 1.0 where an edge or a loop is a positive edge of PyG's (kept, and drawn by edge_sample_ratio).
    edge_weight: torch.Tensor
    loop_weight: torch.Tensor | None
    #: Each edge's and loop's rank in PyG's edge list (its `att_x` order); None: the edges in order.
    ranks: tuple[torch.Tensor, torch.Tensor] | None


class SuperGATConv(WarmUp, nn.Module):
    """PyG's `SuperGATConv(in_channels, out_channels, heads=1, concat=True, negative_slope=0.2,
    dropout=0.0, add_self_loops=True, bias=True, attention_type="MX", neg_sample_ratio=0.5,
    edge_sample_ratio=1.0, is_undirected=False, **kwargs)`.

    `forward(x, edge_index, neg_edge_index=None, batch=None)`; `x` is one
    tensor (or a sampled block's sources), `edge_index` may be a torch.sparse
    adjacency (eval mode, as PyG) or a SparseTensor. Parameters as PyG's:
    `lin.weight`, `att_l` and `att_r` (`[1, heads, out_channels]`, "MX" only),
    `bias`. After a training call, `get_attention_loss()` is PyG's
    self-supervised loss and `att_x`, `att_y` its inputs.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        bias: bool = True,
        attention_type: str = "MX",
        neg_sample_ratio: float = 0.5,
        edge_sample_ratio: float = 1.0,
        is_undirected: bool = False,
        **kwargs: Any,
    ):
        super().__init__()
        # PyG passes node_dim=0 to MessagePassing itself: another is a TypeError there
        check_options(LAYER, kwargs, node_dim=False)
        if isinstance(in_channels, bool) or not isinstance(in_channels, int) or (in_channels < 1 and in_channels != -1):
            raise ArgumentError(f"{LAYER}: in_channels must be a positive integer or -1 (lazy), got {in_channels!r}")
        attention.check_heads(heads, out_channels)
        if attention_type not in ATTENTION_TYPES:
            raise ArgumentError(f"{LAYER}: attention_type must be 'MX' or 'SD', got {attention_type!r}")
        for what, value, top in (
            ("neg_sample_ratio", neg_sample_ratio, None),
            ("edge_sample_ratio", edge_sample_ratio, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or (top and value > top):
                bound = "in (0, 1]" if top else "positive"
                raise ArgumentError(f"{LAYER}: {what} must be {bound}, got {value!r}")
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.negative_slope = concat, negative_slope
        self.dropout = attention.check_dropout(dropout, LAYER)
        self.add_self_loops, self.attention_type = add_self_loops, attention_type
        self.neg_sample_ratio, self.edge_sample_ratio = neg_sample_ratio, edge_sample_ratio
        self.is_undirected = is_undirected
        self._slope = attention.slope(negative_slope)
        self.lin = Linear(in_channels, heads * out_channels, bias=False, weight_initializer="glorot")
        self.att_l: nn.Parameter | None = None
        self.att_r: nn.Parameter | None = None
        if attention_type == "MX":
            self.att_l = nn.Parameter(torch.empty(1, heads, out_channels))
            self.att_r = nn.Parameter(torch.empty(1, heads, out_channels))
        total = heads * out_channels if concat else out_channels
        self.bias = nn.Parameter(torch.empty(total)) if bias else None
        self._logits: _Logits | None = None
        self._scale = literal(math.sqrt(out_channels))
        # every kernel a call may need, made now: torch.compile cannot trace making one
        # (eval: no mask; training: the mask with dropout)
        loops = bool(add_self_loops)
        variants = [(loops, False)] + ([(loops, True)] if self.dropout else [])
        self._kernels: dict[tuple[bool, bool], Kernel] = {v: self._kernel(*v) for v in variants}
        #: the logits of any edges: the graph's (the attention reads them) and the negatives
        self._logits_kernel: Kernel = kernel(*logits_source(attention_type, self._scale))
        self.reset_parameters()

    def _kernel(self, loops: bool, mask: bool) -> Kernel:
        return kernel(*source(self.attention_type, self._slope, loops, mask))

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()
        glorot(self.att_l)
        glorot(self.att_r)
        zeros(self.bias)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_logits"] = None  # a call's tensors, not the layer's state
        return state

    # -------------------------------------------------------------- PyG's samplers

    def positive_sampling(self, edge_index: torch.Tensor) -> torch.Tensor:
        """PyG's: the edges kept by `dropout_edge(edge_index, p=1 - edge_sample_ratio)`."""
        if not self.training:
            return edge_index
        keep = dropout_edge_mask(edge_index.shape[1], 1.0 - self.edge_sample_ratio, edge_index.device)
        return edge_index if keep is None else edge_index[:, keep]

    def negative_sampling(
        self, edge_index: torch.Tensor, num_nodes: int, batch: torch.Tensor | None = None
    ) -> torch.Tensor:
        """PyG's: `neg_sample_ratio * edge_sample_ratio * E` negative edges of the graph made
        undirected (unless `is_undirected`), per graph of `batch` where given."""
        num_neg_samples = int(self.neg_sample_ratio * self.edge_sample_ratio * edge_index.shape[1])
        if not self.is_undirected and not is_undirected(edge_index, num_nodes):
            edge_index = to_undirected(edge_index, num_nodes)
        if batch is None:
            return negative_sampling(edge_index, num_nodes, num_neg_samples)
        return batched_negative_sampling(edge_index, batch, num_neg_samples)

    # -------------------------------------------------------------- forward

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(h [N, H, C], the per-vertex scores `[al, ar]` of "MX", none for "SD")."""
        H, C = self.heads, self.out_channels
        if self.att_l is None or self.att_r is None:
            return self.lin(x).view(-1, H, C), []
        if x.device.type == "cpu" and folds(self.lin, C):
            h, al, ar = projected(self.lin, x, self.att_l, self.att_r)
            return h, [al, ar]
        h = self.lin(x).view(-1, H, C)
        return h, [scores(self.lin, x, self.att_l, h), scores(self.lin, x, self.att_r, h)]

    def _loop_logits(self, h: torch.Tensor) -> torch.Tensor:
        """Each vertex's logit with itself, `<h_v, h_v>` (divided by sqrt(C) for "SD")."""
        own = (h * h).sum(-1)
        return own if self.attention_type == "MX" else own / math.sqrt(self.out_channels)

    def forward(
        self,
        x: torch.Tensor,
        edge_index: Any,
        neg_edge_index: torch.Tensor | None = None,
        batch: torch.Tensor | None = None,
    ) -> torch.Tensor:
        H, C = self.heads, self.out_channels
        if not isinstance(x, torch.Tensor):
            raise ArgumentError(f"{LAYER}: x must be one tensor (PyG's SuperGATConv is not bipartite)")
        x = inputs.check_features(x, LAYER)
        adj, rows = inputs.square(inputs.adjacency(edge_index), x, LAYER)
        num_nodes = x.shape[0]
        inputs.sizes(adj, x, x, None, bipartite=False)
        training = self.training
        if adj.layout == inputs.Layout.TORCH_SPARSE and training:
            raise ArgumentError(
                f"{LAYER}: a torch.sparse adjacency in training mode is not supported (PyG's self-supervised "
                "sampling fails on one): pass an edge_index or a SparseTensor"
            )
        h, vertex_scores = self._project(x)
        edges = adj.edge_index
        num_edges = edges.shape[1]
        lp = attention.loops(edges, num_nodes, num_nodes, h.dtype) if self.add_self_loops else None
        own = self._loop_logits(h) if lp is not None else None
        lg = self._logits_kernel(edges, h, num_vertices=num_nodes)
        args: list[torch.Tensor] = [h, *vertex_scores, lg]
        if own is not None:
            if self.att_l is None:
                args.append(F.leaky_relu(own, self.negative_slope))
            else:
                al, ar = vertex_scores
                args.append(F.leaky_relu((al + ar) * own.sigmoid(), self.negative_slope))
        drop = training and self.dropout > 0.0
        ranks = None
        if lp is not None and training:
            ranks = attention.pyg_ranks(edges, lp, adj.sparse, num_nodes)
        if drop:
            args += self._dropout_masks(lp, ranks, num_edges, h)
        key = (lp is not None, drop)
        made = self._kernels.get(key)
        if made is None:  # add_self_loops or dropout set after construction (DirGNNConv's copies)
            made = self._kernels[key] = self._kernel(*key)
        out = made(edges, *args, num_vertices=num_nodes)
        if training:
            self._logits = self._training_logits(lg, own, h, lp, ranks, edges, neg_edge_index, batch)
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.bias is not None:
            out = out + self.bias
        return out if rows is None else out[:rows]

    def _pyg_rows(self, lp: attention.Loops | None, num_edges: Any) -> Any:
        """How many edges PyG's list has (and its per-edge draws take): the graph's non-loop edges
        and the loops. Under torch.compile, E + loops (a shape that does not depend on the data:
        the generator then ends elsewhere than PyG's on a graph with its own self loops)."""
        if lp is None:
            return num_edges
        if torch.compiler.is_compiling():
            return num_edges + lp.count
        return int(lp.keep.sum()) + lp.count

    def _dropout_masks(
        self, lp: attention.Loops | None, ranks: Any, num_edges: Any, like: torch.Tensor
    ) -> list[torch.Tensor]:
        """`F.dropout` of ones over PyG's [E', H] edges, each edge's and loop's row at its rank."""
        rows = self._pyg_rows(lp, num_edges)
        drawn = F.dropout(like.new_ones(rows, self.heads), p=self.dropout, training=True)
        if lp is None:
            return [drawn]
        edge_rank, loop_rank = ranks
        mask = drawn[edge_rank.clamp(max=rows - 1)] * lp.keep.view(-1, 1)
        return [mask, drawn[loop_rank]]

    def _pyg_edges(self, edges: torch.Tensor, lp: attention.Loops | None, ranks: Any) -> torch.Tensor:
        """PyG's edge list: the graph's non-loop edges and a loop per vertex, in PyG's order."""
        if lp is None:
            return edges
        edge_rank, loop_rank = ranks
        keep = lp.keep.bool()
        ids = torch.arange(lp.count, dtype=edges.dtype, device=edges.device)
        listed = torch.cat([edges[:, keep], torch.stack([ids, ids])], dim=1)
        order = torch.argsort(torch.cat([edge_rank[keep], loop_rank]))
        return listed[:, order]

    def _training_logits(
        self,
        lg: torch.Tensor,
        own: torch.Tensor | None,
        h: torch.Tensor,
        lp: attention.Loops | None,
        ranks: Any,
        edges: torch.Tensor,
        neg_edge_index: torch.Tensor | None,
        batch: torch.Tensor | None,
    ) -> _Logits:
        num_nodes = h.shape[0]
        rows = self._pyg_rows(lp, edges.shape[1])
        drawn = dropout_edge_mask(rows, 1.0 - self.edge_sample_ratio, edges.device)
        keep = lp.keep if lp is not None else lg.new_ones(edges.shape[1])
        edge_weight, loop_weight = keep, lp.keep.new_ones(num_nodes) if lp is not None else None
        if drawn is not None:
            pick = drawn.to(lg.dtype)
            if ranks is None:
                edge_weight = pick
            else:
                edge_rank, loop_rank = ranks
                edge_weight = keep * pick[edge_rank.clamp(max=rows - 1)]
                loop_weight = pick[loop_rank]
        if neg_edge_index is None:
            neg_edge_index = self.negative_sampling(self._pyg_edges(edges, lp, ranks), num_nodes, batch)
        else:
            neg_edge_index = _checked_negatives(neg_edge_index, num_nodes)
        negatives = self._logits_kernel(neg_edge_index, h, num_vertices=num_nodes)
        return _Logits(lg, own, negatives, edge_weight.to(lg.dtype), loop_weight, ranks)

    # -------------------------------------------------------------- the self-supervised loss

    def get_attention_loss(self) -> torch.Tensor:
        """PyG's self-supervised loss: binary cross-entropy of each positive edge's mean logit
        (label 1) and each negative edge's (label 0), averaged; 0 in eval mode."""
        if not self.training:
            return torch.tensor([0], device=self.lin.weight.device)
        t = self._logits
        if t is None:
            raise ArgumentError(f"{LAYER}: get_attention_loss() needs a forward call in training mode first")
        pos = F.binary_cross_entropy_with_logits(t.edges.mean(-1), torch.ones_like(t.edge_weight), reduction="none")
        total = (pos * t.edge_weight).sum()
        count = t.edge_weight.sum()
        if t.loops is not None and t.loop_weight is not None:
            lw = t.loop_weight.to(t.loops.dtype)
            loop = F.binary_cross_entropy_with_logits(t.loops.mean(-1), torch.ones_like(lw), reduction="none")
            total = total + (loop * lw).sum()
            count = count + lw.sum()
        neg = t.negatives.mean(-1)
        total = total + F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="sum")
        count = count + neg.shape[0]
        # no edge at all: PyG's mean of nothing, NaN, with no gradient (0 / 0's would be NaN)
        return torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, float("nan")))

    @property
    def att_x(self) -> torch.Tensor | None:
        """PyG's `att_x`: the positive edges' logits in PyG's order, then the negatives' ([P + K, H])."""
        t = self._logits
        if t is None:
            return None
        chosen = t.edge_weight.bool()
        if t.loops is None or t.loop_weight is None or t.ranks is None:
            return torch.cat([t.edges[chosen], t.negatives])
        edge_rank, loop_rank = t.ranks
        loop_chosen = t.loop_weight.bool()
        positives = torch.cat([t.edges[chosen], t.loops[loop_chosen]])
        order = torch.argsort(torch.cat([edge_rank[chosen], loop_rank[loop_chosen]]))
        return torch.cat([positives[order], t.negatives])

    @property
    def att_y(self) -> torch.Tensor | None:
        """PyG's `att_y`: 1 for each positive edge of `att_x`, 0 for each negative one."""
        t, x = self._logits, self.att_x
        if t is None or x is None:
            return None
        y = x.new_zeros(x.shape[0])
        y[: x.shape[0] - t.negatives.shape[0]] = 1.0
        return y

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads}, "
            f"type={self.attention_type})"
        )


def _checked_negatives(neg_edge_index: Any, num_nodes: int) -> torch.Tensor:
    """A given `neg_edge_index` as the [2, K] int64 edges of the graph's vertices, or a clear error."""
    if not isinstance(neg_edge_index, torch.Tensor) or neg_edge_index.dim() != 2 or neg_edge_index.shape[0] != 2:
        shape = tuple(neg_edge_index.shape) if isinstance(neg_edge_index, torch.Tensor) else type(neg_edge_index)
        raise ArgumentError(f"{LAYER}: neg_edge_index must be a [2, K] tensor of vertex ids, got {shape}")
    if neg_edge_index.dtype not in (torch.int64, torch.int32):
        raise ArgumentError(
            f"{LAYER}: neg_edge_index must hold int64 (or int32) vertex ids, got {neg_edge_index.dtype}"
        )
    return neg_edge_index.to(torch.int64)


__all__ = [
    "SuperGATConv",
    "batched_negative_sampling",
    "is_undirected",
    "logits_source",
    "negative_sampling",
    "source",
    "to_undirected",
]
