"""A user's per-edge network split at its first Linear: EdgeConv's and PointNetConv's messages.

Both layers apply a module `nn` to a concatenation per edge, which PyG
makes as an `[E, 2F]` (or `[E, F + D]`) tensor. When `nn` begins with a
Linear, its product over the concatenation splits by column blocks into a
per-source and a per-destination term, each a product over the vertices
(V x F x H work instead of E x 2F x H):

    kernel edge_mlp_max(c: f32[V, H], a: f32[V, H]) -> f32[V, H] {
        out[v] = max(c[u] + a[v])
    }

when `nn` is just that Linear (no `[E, H]` tensor is made); otherwise the
messages `h[e] = c[u] + a[v]` are one edge kernel (`edge_mlp_messages`),
the rest of `nn` runs on them in torch, and `edge_mlp_aggregate_max`
(`out[v] = max(m[e])`) aggregates its output; likewise for mean, sum and
min. `split` recognises a bare `torch.nn.Linear` or PyG's Linear, a
`torch.nn.Sequential` starting with one, and PyG's `MLP` (its first Linear,
then the rest of its forward, reproduced); anything else (a subclass with
its own forward, a lazy Linear not yet sized, a module with hooks) is
called as a whole on the concatenation. The Linear's weight is read at each
call, so training, optimisers and `load_state_dict` see the module as is.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.nn import linear
from gnnc.nn.kernels import kernel
from gnnc.torch.kernels import Kernel


def _pyg_class(module: str, name: str) -> Any:
    """A PyG class where torch_geometric is loaded (a user's PyG module implies it), else None."""
    loaded = sys.modules.get(module)
    return getattr(loaded, name, None) if loaded is not None else None


def _hooked(module: nn.Module) -> bool:
    """Whether calling `module` runs more than its forward (hooks a split would skip)."""
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks)


def _plain_linear(module: Any) -> bool:
    """Whether `module` computes exactly `F.linear(x, module.weight, module.bias)`, sized."""
    forwards = [nn.Linear.forward, linear.Linear.forward]
    pyg = _pyg_class("torch_geometric.nn.dense.linear", "Linear")
    if pyg is not None:
        forwards.append(pyg.forward)
    return (
        isinstance(module, nn.Module)
        and type(module).forward in forwards
        and not _hooked(module)
        and not linear.is_lazy(module.weight)
    )


@dataclass(frozen=True)
class Split:
    """`nn` as its first Linear and what follows it."""

    #: The Linear whose weight and bias the split reads (at each call).
    lin: Any
    #: The rest of `nn` applied to the Linear's output; None where there is nothing more.
    rest: Callable[[torch.Tensor], torch.Tensor] | None

    @property
    def weight(self) -> torch.Tensor:
        return cast(torch.Tensor, self.lin.weight)

    @property
    def bias(self) -> torch.Tensor | None:
        return cast("torch.Tensor | None", self.lin.bias)


def _mlp_rest(mlp: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """PyG's `MLP.forward` after `lins[0]` (torch_geometric/nn/models/mlp.py); None where that is
    nothing (one layer, plain_last, no dropout on it)."""
    if not mlp.norms and (mlp.dropout[-1] == 0.0 or not mlp.training):
        return None

    def rest(h: torch.Tensor) -> torch.Tensor:
        for i, (lin, norm) in enumerate(zip(mlp.lins, mlp.norms)):
            if i > 0:
                h = lin(h)
            if mlp.act is not None and mlp.act_first:
                h = mlp.act(h)
            h = norm(h, None, None) if mlp.supports_norm_batch else norm(h)
            if mlp.act is not None and not mlp.act_first:
                h = mlp.act(h)
            h = F.dropout(h, p=mlp.dropout[i], training=mlp.training)
        if mlp.plain_last:
            if mlp.norms:  # else lins[-1] is lins[0], already applied
                h = mlp.lins[-1](h)
            h = F.dropout(h, p=mlp.dropout[-1], training=mlp.training)
        return h

    return rest


def split(module: Any) -> Split | None:
    """`module` split at its first Linear, or None where its forward cannot be reproduced so."""
    if _plain_linear(module):
        return Split(module, None)
    if not isinstance(module, nn.Module) or _hooked(module):
        return None
    seq: Any = module
    if type(module).forward is nn.Sequential.forward and len(seq) > 0 and _plain_linear(seq[0]):
        tail = list(seq)[1:]
        if not tail:
            return Split(seq[0], None)

        def rest(h: torch.Tensor) -> torch.Tensor:
            for m in tail:
                h = m(h)
            return h

        return Split(seq[0], rest)
    mlp = _pyg_class("torch_geometric.nn.models.mlp", "MLP")
    if mlp is not None and type(module).forward is mlp.forward and _plain_linear(seq.lins[0]):
        return Split(seq.lins[0], _mlp_rest(seq))
    return None


def kernels(aggr: str) -> dict[str, Kernel]:
    """The kernels for aggregation `aggr` (a language name): `pair` (`aggr(c[u] + a[v])`),
    `messages` (`c[u] + a[v]` per edge) and `aggregate` (`aggr(m[e])`)."""
    pair = f"edge_mlp_{aggr}"
    edges = f"edge_mlp_aggregate_{aggr}"
    return {
        "pair": kernel(
            f"kernel {pair}(c: f32[V, H], a: f32[V, H]) -> f32[V, H] {{\n    out[v] = {aggr}(c[u] + a[v])\n}}\n", pair
        ),
        "messages": kernel(
            "kernel edge_mlp_messages(c: f32[V, H], a: f32[V, H]) -> f32[E, H] {\n    out[e] = c[u] + a[v]\n}\n",
            "edge_mlp_messages",
        ),
        "aggregate": kernel(
            f"kernel {edges}(m: f32[E, H]) -> f32[V, H] {{\n    out[v] = {aggr}(m[e])\n}}\n",
            edges,
        ),
    }


def propagate(
    made: dict[str, Kernel],
    edges: Any,
    sizes: tuple,
    c: torch.Tensor,
    a: torch.Tensor,
    rest: Callable[[torch.Tensor], torch.Tensor] | None,
    check: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """The aggregation over in-edges of `rest(c[u] + a[v])` (`c[u] + a[v]` without rest);
    `check` takes rest's output as the aggregation kernel takes it."""
    if rest is None:
        return made["pair"](edges, c, a, size=sizes)
    messages = made["messages"](edges, c, a, size=sizes)
    return made["aggregate"](edges, check(rest(messages)), size=sizes)


__all__ = ["Split", "kernels", "propagate", "split"]
