"""`DNAConv`: PyG's dynamic neighbourhood aggregation (Fey, "Just Jump"); its message passing is one gnnc kernel.

Each edge u -> v attends, head by head, from the destination's last layer
to the source's L layers: `q = lin_q(x_v[L-1])`, `k = lin_k(x_u)`, `val =
lin_v(x_u)` (grouped Linear layers), scores `s_l = q . k_l / sqrt(D)`, PyG's
restricted softmax over the layers (`exp(s_l - m) / (sum_l exp(s_l - m) +
exp(-m))`, `m = max(max_l s_l, 0)`), and the message `w_e sum_l a_l val_l`
with GCN-normalised edge weights `w`, summed at v. PyG projects the gathered
`[E, L, C]` rows per edge; here the projections run once per vertex in
torch, and the rest per edge is three kernels: the scores, the attention
weights, and the weighted sum of the values:

    kernel dna_scores(k: f32[V, H, L, D], q: f32[V, H, D], sq: f32, one: f32[H, L]) -> f32[E, H, L] {
        out[e] = dot(k[u], outer(one, q[v])) / sq
    }
    kernel dna_weights_s8(s: f32[E, H, L], one: f32[H, L], sel0: f32[H, L], ..., sel7: f32[H, L])
            -> f32[E, H, L] {
        m[e] = detach(max(... max(max(0, dot(s[e], sel0)), dot(s[e], sel1)) ..., dot(s[e], sel7)))
        p[e] = exp(s[e] - m[e])
        out[e] = p[e] / (dot(p[e], one) + exp(-m[e]))
    }
    kernel dna_aggregate_loops(a: f32[E, H, L], val: f32[V, H, D, L], w: f32[E], lm: f32[V, H, D],
                               oned: f32[H, D]) -> f32[V, H, D] {
        out[v] = lm[v] + sum(w[e] * dot(val[u], outer(oned, a[e])))
    }

One kernel doing all three ran 8x slower forward and 9x backward (rmat-16,
4 heads, 2 layers: 1.6 s and 4.1 s against 0.21 s and 0.45 s): the
compiler inlines an edge value at each of its reads, so the max chain and
the exponentials were made again for each of the D features `outer(oned,
a[e])` multiplies, and the score's dot over D at each link of the chain; as
kernels of their own, each `[E, H, L]` value is made once and read.

The language reduces an axis only by summing (`dot`), so the maximum over
the L layers is a chain of two-argument maxima of the columns, each picked
by a one-hot `sel_i` (column min(i, L - 1)); `m` only shifts the exponentials
(the weights do not depend on it), so it is detached, as its gradient is 0.
The chain has 8 links, for up to 8 layers; a longer history gets a weights
kernel of its own length (up to 24: the gradient kernels recompute `m` at each
read of `p`, and 32 links passed the compiler's inlining limit). `@` takes no
matrix per source vertex (the right operand must be a parameter or an edge
value), so the products are `dot`s against `outer`s of ones.

Self loops (PyG's default, `normalize=True`) are not added to the graph: the
loop's message reads only its vertex's rows, so torch computes it per vertex
as `lm[v]` (weighted by the GCN loop weight), the graph's own loops having
weight 0 (`gnnc.nn.self_loops`). Attention dropout in training draws PyG's
mask over `[E', H, 1, L]` in PyG's edge order (`_drop` aggregations take it
as `mask: f32[E, H, L]`, weighing `a[e]`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs, self_loops
from gnnc.nn.conv.appnp import dropout_order, gcn_weights
from gnnc.nn.kernels import kernel
from gnnc.nn.message_passing import CachedGraph, check_options
from gnnc.nn.precompile import WarmUp
from gnnc.torch.kernels import Kernel

LAYER = "DNAConv"

#: Links of the kernel's max chain that the constructor makes; longer histories get their own.
SLOTS = 8
#: The longest history a kernel takes (see the module).
MAX_LAYERS = 24


#: The attention scores of each edge (the module's `dna_scores`).
SCORES = (
    "kernel dna_scores(k: f32[V, H, L, D], q: f32[V, H, D], sq: f32, one: f32[H, L]) -> f32[E, H, L] {\n"
    "    out[e] = dot(k[u], outer(one, q[v])) / sq\n"
    "}\n",
    "dna_scores",
)


def weights_source(slots: int) -> tuple[str, str]:
    """(kernel text, name) of the restricted softmax over the layers, its max chain of `slots` links."""
    name = f"dna_weights_s{slots}"
    params = ["s: f32[E, H, L]", "one: f32[H, L]"] + [f"sel{i}: f32[H, L]" for i in range(slots)]
    chain = "0"
    for i in range(slots):
        chain = f"max({chain}, dot(s[e], sel{i}))"
    body = (
        f"    m[e] = detach({chain})\n    p[e] = exp(s[e] - m[e])\n    out[e] = p[e] / (dot(p[e], one) + exp(-m[e]))\n"
    )
    return f"kernel {name}({', '.join(params)}) -> f32[E, H, L] {{\n{body}}}\n", name


def aggregate_source(loops: bool, drop: bool) -> tuple[str, str]:
    """(kernel text, name) of the messages' sum; `loops`: with the per-vertex loop message
    `lm[v]`, `drop`: with an attention dropout mask per edge."""
    name = "dna_aggregate" + ("_loops" if loops else "") + ("_drop" if drop else "")
    params = ["a: f32[E, H, L]", "val: f32[V, H, D, L]", "w: f32[E]"]
    params += ["lm: f32[V, H, D]"] if loops else []
    params += ["mask: f32[E, H, L]"] if drop else []
    params += ["oned: f32[H, D]"]
    weights = "a[e] * mask[e]" if drop else "a[e]"
    loop = "lm[v] + " if loops else ""
    body = f"    out[v] = {loop}sum(w[e] * dot(val[u], outer(oned, {weights})))\n"
    return f"kernel {name}({', '.join(params)}) -> f32[V, H, D] {{\n{body}}}\n", name


def _row_major(t: torch.Tensor) -> torch.Tensor:
    """t copied in row-major order: `contiguous()`'s copy, made by `clone` (which the tests'
    stand-in CUDA tensors can make too)."""
    return t.clone(memory_format=torch.contiguous_format)


def _restricted_softmax(s: torch.Tensor) -> torch.Tensor:
    """PyG's `restricted_softmax` over the last axis (margin 0)."""
    m = torch.clamp(s.max(dim=-1, keepdim=True)[0], min=0.0)
    p = (s - m).exp()
    return p / (p.sum(dim=-1, keepdim=True) + (0.0 - m).exp())


class GroupedLinear(nn.Module):
    """PyG's `torch_geometric.nn.conv.dna_conv.Linear`: a block-diagonal product of `groups` blocks,
    `weight` `[groups, in / groups, out / groups]`, `bias` `[out]`, PyG's initialisation."""

    def __init__(self, in_channels: int, out_channels: int, groups: int = 1, bias: bool = True):
        super().__init__()
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.weight = nn.Parameter(torch.empty(groups, in_channels // groups, out_channels // groups))
        self.bias: nn.Parameter | None = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            fan = self.weight.size(1)
            bound = math.sqrt(6 / ((1 + 5.0) * fan))  # PyG's kaiming_uniform, a = sqrt(5)
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-1.0 / math.sqrt(fan), 1.0 / math.sqrt(fan))

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        if self.groups > 1:
            size = src.size()[:-1]
            src = _row_major(src.reshape(-1, self.groups, self.in_channels // self.groups).transpose(0, 1))
            out = _row_major(torch.matmul(src, self.weight).transpose(1, 0)).view(size + (self.out_channels,))
        else:
            out = torch.matmul(src, self.weight.squeeze(0))
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, groups={self.groups}"


class MultiHead(nn.Module):
    """PyG's `MultiHead`'s parameters (`lin_q`, `lin_k`, `lin_v`) and options; DNAConv computes
    the attention itself (per vertex and in its kernel)."""

    def __init__(self, channels: int, heads: int, groups: int, dropout: float, bias: bool):
        super().__init__()
        self.in_channels = self.out_channels = channels
        self.heads, self.groups, self.dropout, self.bias = heads, groups, dropout, bias
        self.lin_q = GroupedLinear(channels, channels, groups, bias)
        self.lin_k = GroupedLinear(channels, channels, groups, bias)
        self.lin_v = GroupedLinear(channels, channels, groups, bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_q.reset_parameters()
        self.lin_k.reset_parameters()
        self.lin_v.reset_parameters()


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"{LAYER}: {what} must be a positive integer, got {value!r}")
    return value


class DNAConv(CachedGraph, WarmUp, nn.Module):
    """PyG's `DNAConv(channels, heads=1, groups=1, dropout=0.0, cached=False, normalize=True,
    add_self_loops=True, bias=True, **kwargs)`.

    `forward(x, edge_index, edge_weight=None)` with x `[num_nodes, num_layers,
    channels]`; the result is `[num_nodes, channels]`. Parameters
    `multi_head.lin_q`, `lin_k`, `lin_v` (`weight` `[groups, channels / groups,
    channels / groups]`, `bias`), PyG's. A sparse adjacency's values are the
    edge weights. With `normalize=False` and no weights, every edge weighs 1
    (PyG's layer fails there).
    """

    def __init__(
        self,
        channels: int,
        heads: int = 1,
        groups: int = 1,
        dropout: float = 0.0,
        cached: bool = False,
        normalize: bool = True,
        add_self_loops: bool = True,
        bias: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        check_options(LAYER, kwargs, node_dim=False)
        channels, heads = _positive(channels, "channels"), _positive(heads, "heads")
        groups = _positive(groups, "groups")
        if channels % heads or channels % groups or max(groups, heads) % min(groups, heads):
            raise ArgumentError(
                f"{LAYER}: channels ({channels}) must be a multiple of heads ({heads}) and of groups ({groups}), "
                "and the larger of heads and groups a multiple of the other"
            )
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout <= 1.0:
            raise ArgumentError(f"{LAYER}: dropout must be a probability in [0, 1], got {dropout!r}")
        self.bias, self.cached, self.normalize, self.add_self_loops = bias, cached, normalize, add_self_loops
        self._cached: tuple | None = None
        self.multi_head = MultiHead(channels, heads, groups, float(dropout), bias)
        # every kernel a call with these options needs, made now (torch.compile cannot trace making
        # one); a longer history's weights, or options edited later, get theirs on first use
        self._kernels: dict[tuple, Kernel] = {("scores",): kernel(*SCORES)}
        self._kernel("weights", SLOTS)
        for drop in (False, True) if dropout > 0 else (False,):
            self._kernel("aggregate", self._loops, drop)
        self.reset_parameters()

    @property
    def _loops(self) -> bool:
        return bool(self.normalize and self.add_self_loops)

    def reset_parameters(self) -> None:
        self.multi_head.reset_parameters()
        self._cached = None

    def forward(self, x: torch.Tensor, edge_index: Any, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ArgumentError(f"{LAYER}: x must be [num_nodes, num_layers, channels], got {got}")
        x = inputs.autocast_features(x)
        if x.dtype not in inputs.FEATURE_DTYPES:
            raise ArgumentError(f"{LAYER}: x is {x.dtype}: gnnc.nn's layers take float32 or float64 features")
        mh = self.multi_head
        if x.shape[-1] != mh.in_channels:
            raise ArgumentError(f"{LAYER}: x has {x.shape[-1]} channels, the layer {mh.in_channels}")
        layers = x.shape[1]
        if layers < 1 or layers > MAX_LAYERS:
            raise ArgumentError(
                f"{LAYER}: x has {layers} layers; its kernel takes 1 to {MAX_LAYERS} (the restricted softmax's "
                "maximum over the layers is a chain of two-argument maxima, whose gradient kernels would pass "
                "the compiler's inlining limit beyond)"
            )
        adj, keep_rows = inputs.square(inputs.adjacency(edge_index), x, LAYER)
        num_nodes = x.shape[0]
        inputs.sizes(adj, x, x, None, bipartite=False)
        edges, w, loop = self._weights(adj, edge_weight, num_nodes, x.dtype)
        heads, dim = mh.heads, mh.out_channels // mh.heads
        q = inputs.autocast_features(mh.lin_q(x[:, -1:])).view(num_nodes, heads, dim)
        k = _row_major(inputs.autocast_features(mh.lin_k(x)).view(num_nodes, layers, heads, dim).transpose(1, 2))
        val = inputs.autocast_features(mh.lin_v(x)).view(num_nodes, layers, heads, dim)
        val = _row_major(val.permute(0, 2, 3, 1))
        drop = mh.dropout > 0 and self.training
        mask = mask_loop = None
        if drop:
            mask, mask_loop = self._masks(adj, edges, num_nodes, (heads, layers), x)
        args: list[Any] = [val, w]
        if self._loops:
            assert loop is not None
            # the loop's message: v attends to its own layers
            scores = _restricted_softmax(torch.einsum("nhd,nhld->nhl", q, k) / math.sqrt(dim))
            if mask_loop is not None:
                scores = scores * mask_loop
            args.append(loop.view(-1, 1, 1) * torch.einsum("nhl,nhdl->nhd", scores, val))
        if mask is not None:
            args.append(mask)
        slots = SLOTS if layers <= SLOTS else layers
        ones = x.new_ones(heads, layers)
        picks = torch.eye(layers, dtype=x.dtype, device=x.device)[[min(i, layers - 1) for i in range(slots)]]
        sel = _row_major(picks.unsqueeze(1).expand(slots, heads, layers)).unbind(0)
        s = self._kernel("scores")(edges, k, q, math.sqrt(dim), ones, num_vertices=num_nodes)
        a = self._kernel("weights", slots)(edges, s, ones, *sel, num_vertices=num_nodes)
        aggregate = self._kernel("aggregate", self._loops, drop)
        out = aggregate(edges, a, *args, x.new_ones(heads, dim), num_vertices=num_nodes)
        out = out.reshape(num_nodes, mh.out_channels)
        return out if keep_rows is None else out[:keep_rows]

    def _kernel(self, *key: Any) -> Kernel:
        """The kernel of `key`: ("scores",), ("weights", slots) or ("aggregate", loops, drop)."""
        made = self._kernels.get(key)
        if made is None:
            text = weights_source(*key[1:]) if key[0] == "weights" else aggregate_source(*key[1:])
            made = self._kernels[key] = kernel(*text)
        return made

    def _weights(
        self, adj: inputs.Adjacency, edge_weight: Any, num_nodes: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(edge_index, edge weights, loop weights or None): PyG's `gcn_norm` (once with `cached`)."""
        if self.cached and self._cached is not None:
            return self._cached
        edges = adj.edge_index
        loop: torch.Tensor | None = None
        if self.normalize:
            w, loop = gcn_weights(adj, edge_weight, num_nodes, self.add_self_loops, dtype)
            loop = loop if self.add_self_loops else None
        else:
            weight = inputs.edge_values(adj, edge_weight)
            w = torch.ones(edges.shape[1], dtype=dtype, device=edges.device) if weight is None else weight.to(dtype)
        if self.cached:
            self._cached = (edges, w.detach(), None if loop is None else loop.detach())
        return edges, w, loop

    def _masks(
        self, adj: inputs.Adjacency, edges: torch.Tensor, num_nodes: int, shape: tuple[int, int], like: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(mask[e], mask_loop[v]) of PyG's attention dropout over `[E', H, 1, L]` in its edge order.

        PyG draws E' = (kept edges + loops) rows; gnnc draws E + loops rows (a
        shape that does not depend on the data) and takes each edge's row at its
        rank in PyG's order: the first E' rows are PyG's (torch's CPU generator
        draws a tensor's elements in order), so the masks are PyG's for the same
        seed (`attention.dropout_masks`).
        """
        loops = self._loops
        keep = torch.ones(edges.shape[1], dtype=torch.bool, device=edges.device)
        if loops and (not adj.sparse or adj.sparse_tensor):
            keep = edges[0] != edges[1]  # add_remaining_self_loops and fill_diag drop the graph's own
        count = num_nodes if loops else 0
        order = dropout_order(adj, loops)
        edge_rank, loop_rank = self_loops.pyg_ranks(edges, keep, count, num_nodes, num_nodes, order)
        drawn = F.dropout(like.new_ones(edges.shape[1] + count, *shape), p=self.multi_head.dropout)
        return drawn[edge_rank], drawn[loop_rank] if loops else None

    def __repr__(self) -> str:
        mh = self.multi_head
        return f"{type(self).__name__}({mh.in_channels}, heads={mh.heads}, groups={mh.groups})"


__all__ = ["SCORES", "DNAConv", "GroupedLinear", "MultiHead", "aggregate_source", "weights_source"]
