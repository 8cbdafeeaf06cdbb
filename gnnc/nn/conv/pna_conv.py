"""`PNAConv`: PyG's principal neighbourhood aggregation (Corso et al.); every aggregator in one gnnc kernel.

PyG's message is a tower's pre-NN over `[x_i, x_j, edge_encoder(edge_attr)]`;
its aggregators ("sum", "mean", "min", "max", "var", "std") are scaled by
degree scalers, concatenated beside x and fed to the tower's post-NN, then
`lin`. With one pre-layer the pre-NN is one Linear over a concatenation, a
sum of products by column blocks: a destination term `a`, a source term `b`
and an edge term `c`, made in torch for every tower at once, the towers side
by side in the feature axis (the aggregators work feature by feature). One
kernel then computes everything the aggregators read:

    kernel pna_sum_mean_max_min_sq_deg_edges(a: f32[V, G], b: f32[V, G], c: f32[E, G])
            -> (s_sum: f32[V, G], s_mean: f32[V, G], s_max: f32[V, G], s_min: f32[V, G],
                s_sq: f32[V, G], deg: f32[V]) {
        m[e] = a[v] + b[u] + c[e]
        s_sum[v] = sum(m[e])
        s_mean[v] = mean(m[e])
        s_max[v] = max(m[e])
        s_min[v] = min(m[e])
        s_sq[v] = mean(m[e] * m[e])
        deg[v] = deg_in(v)
    }

(only the results the aggregators and scalers read: `s_sq` for "var" and
"std", `deg` for scalers other than "identity"; no `c` without edge_dim).
The edge encoder is folded into `c`'s weight where that is fewer flops per
edge. var = s_sq - s_mean^2 and std (PyG's clamp at 1e-5, zero at or below
its root), the scalers, post-NNs and `lin` are torch's. With more pre-layers
the pre-NN is nonlinear per edge: an edge kernel (`out[e] = a[v] + b[u] + c[e]`)
gives its first Linear, torch the rest (per tower, as PyG), and the kernel
above over the edge tensor (`h: f32[E, G]` in place of `m[e]`) aggregates it.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from gnnc.errors import ArgumentError
from gnnc.nn import inputs
from gnnc.nn.conv.sg_conv import check_out_channels
from gnnc.nn.init import reset
from gnnc.nn.kernels import kernel
from gnnc.nn.linear import Linear
from gnnc.nn.message_passing import check_options
from gnnc.nn.precompile import WarmUp
from gnnc.torch.kernels import Kernel

LAYER = "PNAConv"

#: PyG's aggregators (by their names after its normalisation; "add" is "sum") and the kernel results each reads.
AGGREGATORS = {
    "sum": ("sum",),
    "mean": ("mean",),
    "min": ("min",),
    "max": ("max",),
    "var": ("mean", "sq"),
    "std": ("mean", "sq"),
}
#: The kernel's results in signature order.
STATISTICS = ("sum", "mean", "max", "min", "sq")
SCALERS = ("identity", "amplification", "attenuation", "linear", "inverse_linear")


def _normal(name: str) -> str:
    """PyG's `normalize_string`."""
    return name.lower().replace("-", "").replace("_", "").replace(" ", "")


def aggregator(name: Any) -> str:
    """PyG's aggregator `name` ("add", "Mean", "MaxAggregation", ...) as a key of AGGREGATORS."""
    if isinstance(name, str):
        query = _normal(name)
        if query == "add":
            return "sum"
        base = query.removesuffix("aggregation")
        if base in AGGREGATORS:
            return base
    raise ArgumentError(
        f"{LAYER}: aggregator {name!r} is not supported by gnnc.nn; use 'sum' ('add'), 'mean', 'min', 'max', "
        "'var' or 'std' (by name)"
    )


def activation(act: Any, act_kwargs: dict[str, Any] | None) -> nn.Module:
    """PyG's `activation_resolver`: a module of torch.nn's activations by (normalised) name, or `act` as given."""
    if isinstance(act, str):
        query = _normal(act)
        for cls in vars(torch.nn.modules.activation).values():
            if isinstance(cls, type) and issubclass(cls, nn.Module):
                name = _normal(cls.__name__)
                if query in (name, name.replace("act", "")):
                    return cls(**(act_kwargs or {}))
        raise ArgumentError(f"{LAYER}: act={act!r} names no torch.nn activation")
    if isinstance(act, nn.Module):
        if act_kwargs:
            raise ArgumentError(f"{LAYER}: act_kwargs apply to an activation given by name, not to a module")
        return act
    raise ArgumentError(
        f"{LAYER}: act must be a torch.nn activation's name or a torch.nn.Module (the pre- and post-NNs are "
        f"torch.nn.Sequential), got {act!r}"
    )


def source(stats: tuple[str, ...], degrees: bool, form: str) -> tuple[str, str]:
    """(kernel text, name) of the aggregation kernel: `stats` (of STATISTICS, in order), the
    in-degrees or not, of the messages `a[v] + b[u]` ("vertices"), `a[v] + b[u] + c[e]`
    ("edges") or `h[e]` ("messages")."""
    name = (
        "pna_"
        + "_".join(stats)
        + ("_deg" if degrees else "")
        + {"vertices": "", "edges": "_edges"}.get(form, "_messages")
    )
    if form == "messages":
        params, message, body = "h: f32[E, G]", "h[e]", ""
    else:
        edge = form == "edges"
        params = "a: f32[V, G], b: f32[V, G]" + (", c: f32[E, G]" if edge else "")
        message, body = "m[e]", f"    m[e] = a[v] + b[u]{' + c[e]' if edge else ''}\n"
    results = [f"s_{s}: f32[V, G]" for s in stats] + (["deg: f32[V]"] if degrees else [])
    for s in stats:
        value = f"mean({message} * {message})" if s == "sq" else f"{s}({message})"
        body += f"    s_{s}[v] = {value}\n"
    if degrees:
        body += "    deg[v] = deg_in(v)\n"
    return f"kernel {name}({params}) -> ({', '.join(results)}) {{\n{body}}}\n", name


def message_source(edges: bool) -> tuple[str, str]:
    """(kernel text, name) of the first pre-layer per edge, for pre_layers > 1."""
    name = "pna_message" + ("_edges" if edges else "")
    params = "a: f32[V, G], b: f32[V, G]" + (", c: f32[E, G]" if edges else "")
    return (
        f"kernel {name}({params}) -> f32[E, G] {{\n    out[e] = a[v] + b[u]{' + c[e]' if edges else ''}\n}}\n",
        name,
    )


class DegreeScalers(nn.Module):
    """Where PyG's `DegreeScalerAggregation` keeps the training set's average degrees
    (`avg_deg_lin`, `avg_deg_log`: buffers, parameters with train_norm), and its scalers."""

    def __init__(self, aggregators: list[str], scalers: list[str], deg: torch.Tensor, train_norm: bool) -> None:
        super().__init__()
        self.aggr, self.scaler = aggregators, scalers
        # PyG's arithmetic, float32 as its: the averages are the same floats
        hist = deg.to(torch.float)
        total = int(hist.sum())
        bins = torch.arange(hist.numel(), device=hist.device)
        self.init_avg_deg_lin = float((bins * hist).sum()) / total
        self.init_avg_deg_log = float(((bins + 1).log() * hist).sum()) / total
        if train_norm:
            self.avg_deg_lin = nn.Parameter(torch.empty(1))
            self.avg_deg_log = nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("avg_deg_lin", torch.empty(1))
            self.register_buffer("avg_deg_log", torch.empty(1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.avg_deg_lin.fill_(self.init_avg_deg_lin)
            self.avg_deg_log.fill_(self.init_avg_deg_log)

    def scale(self, out: torch.Tensor, deg: torch.Tensor | None) -> torch.Tensor:
        """PyG's scalers of `out` ([N, T, A * F]) by the in-degrees `deg` ([N]), concatenated."""
        outs = []
        if deg is not None:
            deg = deg.view(-1, 1, 1)
        for scaler in self.scaler:
            if scaler == "identity":
                outs.append(out)
                continue
            assert deg is not None
            if scaler == "amplification":
                outs.append(out * (torch.log(deg + 1) / self.avg_deg_log))
            elif scaler == "attenuation":
                outs.append(out * (self.avg_deg_log / torch.log(deg.clamp(min=1) + 1)))
            elif scaler == "linear":
                outs.append(out * (deg / self.avg_deg_lin))
            else:  # inverse_linear
                outs.append(out * (self.avg_deg_lin / deg.clamp(min=1)))
        return torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"{LAYER}: {what} must be a positive integer, got {value!r}")
    return value


def _sequentials(modules: nn.ModuleList) -> list[nn.Sequential]:
    """The towers' pre- or post-NNs as the list they are."""
    return cast(list[nn.Sequential], list(modules))


class PNAConv(WarmUp, nn.Module):
    """PyG's `PNAConv(in_channels, out_channels, aggregators, scalers, deg, edge_dim=None, towers=1,
    pre_layers=1, post_layers=1, divide_input=False, act="relu", act_kwargs=None, train_norm=False, **kwargs)`.

    `forward(x, edge_index, edge_attr=None)`; x is one tensor (or a sampled
    block's sources). Aggregators by name: "sum" ("add"), "mean", "min",
    "max", "var", "std"; scalers: "identity", "amplification",
    "attenuation", "linear", "inverse_linear". Modules PyG's: `aggr_module`
    (`avg_deg_lin`, `avg_deg_log`), `edge_encoder`, `pre_nns`, `post_nns`, `lin`.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        aggregators: list[str],
        scalers: list[str],
        deg: torch.Tensor,
        edge_dim: int | None = None,
        towers: int = 1,
        pre_layers: int = 1,
        post_layers: int = 1,
        divide_input: bool = False,
        act: Any = "relu",
        act_kwargs: dict[str, Any] | None = None,
        train_norm: bool = False,
        **kwargs: Any,
    ):
        super().__init__()
        # PyG passes its own aggr and node_dim=0 to MessagePassing: either again is a TypeError there
        check_options(LAYER, kwargs, aggr=None, node_dim=False)
        self.in_channels = _positive(in_channels, "in_channels (no lazy sizing, as in PyG)")
        self.out_channels = check_out_channels(LAYER, out_channels)
        self.towers = _positive(towers, "towers")
        pre_layers, post_layers = _positive(pre_layers, "pre_layers"), _positive(post_layers, "post_layers")
        if edge_dim is not None:
            edge_dim = _positive(edge_dim, "edge_dim (or None)")
        if not isinstance(aggregators, (list, tuple)) or not aggregators:
            raise ArgumentError(f"{LAYER}: aggregators must be a non-empty list of names, got {aggregators!r}")
        if not isinstance(scalers, (list, tuple)) or not scalers:
            raise ArgumentError(f"{LAYER}: scalers must be a non-empty list of names, got {scalers!r}")
        for scaler in scalers:
            if scaler not in SCALERS:
                raise ArgumentError(f"{LAYER}: scaler {scaler!r} is not one of {', '.join(map(repr, SCALERS))}")
        if not isinstance(deg, torch.Tensor) or deg.dim() != 1:
            raise ArgumentError(f"{LAYER}: deg must be a 1-D tensor, the training set's in-degree histogram")
        if int(deg.to(torch.float).sum()) <= 0:
            raise ArgumentError(f"{LAYER}: deg (the in-degree histogram) counts no vertex")
        if divide_input and in_channels % towers:
            raise ArgumentError(f"{LAYER}: divide_input needs in_channels ({in_channels}) divisible by towers")
        if out_channels % towers:
            raise ArgumentError(f"{LAYER}: out_channels ({out_channels}) must be divisible by towers ({towers})")
        self._aggregators = [aggregator(a) for a in aggregators]
        self.aggr_module = DegreeScalers(list(aggregators), list(scalers), deg, train_norm)
        self.edge_dim, self.divide_input = edge_dim, bool(divide_input)
        self.F_in = in_channels // towers if divide_input else in_channels
        self.F_out = out_channels // towers
        if edge_dim is not None:
            self.edge_encoder = Linear(edge_dim, self.F_in)
        # PyG's construction order, draw for draw: tower by tower, its pre-NN then its post-NN
        self.pre_nns = nn.ModuleList()
        self.post_nns = nn.ModuleList()
        for _ in range(towers):
            modules: list[nn.Module] = [Linear((3 if edge_dim else 2) * self.F_in, self.F_in)]
            for _ in range(pre_layers - 1):
                modules += [activation(act, act_kwargs), Linear(self.F_in, self.F_in)]
            self.pre_nns.append(nn.Sequential(*modules))
            modules = [Linear((len(aggregators) * len(scalers) + 1) * self.F_in, self.F_out)]
            for _ in range(post_layers - 1):
                modules += [activation(act, act_kwargs), Linear(self.F_out, self.F_out)]
            self.post_nns.append(nn.Sequential(*modules))
        self.lin = Linear(out_channels, out_channels)
        self._stats = tuple(s for s in STATISTICS if any(s in AGGREGATORS[a] for a in self._aggregators))
        self._degrees = any(s != "identity" for s in scalers)
        self._message: Kernel | None = None
        if pre_layers == 1:
            self._kernel = kernel(*source(self._stats, self._degrees, "edges" if edge_dim else "vertices"))
        else:
            self._message = kernel(*message_source(edge_dim is not None))
            self._kernel = kernel(*source(self._stats, self._degrees, "messages"))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.aggr_module.reset_parameters()
        if self.edge_dim is not None:
            self.edge_encoder.reset_parameters()
        for module in self.pre_nns:
            reset(module)
        for module in self.post_nns:
            reset(module)
        self.lin.reset_parameters()

    def _terms(
        self, x_src: torch.Tensor, x_dst: torch.Tensor, edge_attr: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(a [num_dst, G], b [num_src, G], c [E, G] or None): the towers' first pre-layer split by
        the column blocks of `[x_i, x_j, edge_encoder(edge_attr)]`, towers side by side."""
        t, f = self.towers, self.F_in
        firsts = [cast(Linear, seq[0]) for seq in _sequentials(self.pre_nns)]
        weight = torch.stack([lin.weight for lin in firsts])  # [T, F, kF]
        bias = torch.cat([cast(torch.Tensor, lin.bias) for lin in firsts])  # [G]
        w_dst, w_src, w_edge = weight[:, :, :f], weight[:, :, f : 2 * f], weight[:, :, 2 * f :]
        c = None
        if edge_attr is not None:
            w_edge = w_edge.reshape(t * f, f)
            enc = self.edge_encoder
            assert enc.bias is not None
            d = edge_attr.shape[-1]
            if d * t * f <= f * (d + t * f):
                # the encoder folded into c's weight: edge_dim x G flops per edge, its bias per vertex
                c = F.linear(edge_attr, w_edge @ enc.weight)
                bias = bias + w_edge @ enc.bias
            else:
                c = F.linear(enc(edge_attr), w_edge)
        if not self.divide_input:
            a = F.linear(x_dst, w_dst.reshape(t * f, f), bias)
            b = F.linear(x_src, w_src.reshape(t * f, f))
        else:
            a = torch.einsum("ntf,tgf->ntg", x_dst.reshape(-1, t, f), w_dst).reshape(-1, t * f) + bias
            b = torch.einsum("ntf,tgf->ntg", x_src.reshape(-1, t, f), w_src).reshape(-1, t * f)
        return a, b, c

    def forward(self, x: Any, edge_index: Any, edge_attr: torch.Tensor | None = None) -> torch.Tensor:
        adj = inputs.adjacency(edge_index)
        if not isinstance(x, torch.Tensor):
            raise ArgumentError(f"{LAYER}: x must be one tensor (PyG's PNAConv reads x_i and x_j from it)")
        x = inputs.on_block(inputs.check_features(x, LAYER), adj)
        x_src, x_dst = inputs.pair(x, LAYER)
        assert x_dst is not None
        if x_src.shape[-1] != self.in_channels:
            raise ArgumentError(
                f"{LAYER}: x has {x_src.shape[-1]} channels, the layer was built for {self.in_channels}"
            )
        sizes = inputs.sizes(adj, x_src, x_dst, None, bipartite=False)
        edge_attr = inputs.edge_attributes(adj, edge_attr)
        if (edge_attr is None) != (self.edge_dim is None):
            raise ArgumentError(
                f"{LAYER}: edge_attr is read exactly when the layer has an edge_dim (edge_dim={self.edge_dim}, "
                f"edge_attr {'given' if edge_attr is not None else 'not given'})"
            )
        if edge_attr is not None:
            edge_attr = inputs.edge_features(edge_attr, adj.num_edges, self.edge_dim, LAYER)
        a, b, c = self._terms(x_src, x_dst, edge_attr)
        terms = (a, b) if c is None else (a, b, c)
        if self._message is None:
            results = self._kernel(adj.index, *terms, size=sizes)
        else:
            results = self._kernel(adj.index, self._pre_rest(self._message(adj.index, *terms, size=sizes)), size=sizes)
        t, f = self.towers, self.F_in
        # a kernel of one result returns it, not a tuple
        values = tuple(results) if isinstance(results, tuple) else (results,)
        stat = {name: value.view(-1, t, f) for name, value in zip(self._stats, values)}
        if "sq" in stat:
            stat["var"] = stat["sq"] - stat["mean"] * stat["mean"]
        if "std" in self._aggregators:
            # PyG's StdAggregation: no gradient of sqrt at 0, zero at or below sqrt(1e-5)
            std = stat["var"].clamp(min=1e-5).sqrt()
            stat["std"] = std.masked_fill(std <= math.sqrt(1e-5), 0.0)
        outs = [stat[name] for name in self._aggregators]
        out = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]
        out = self.aggr_module.scale(out, values[-1].detach() if self._degrees else None)
        if self.divide_input:
            x_dst = x_dst.reshape(-1, t, f)
        else:
            x_dst = x_dst.reshape(-1, 1, f).expand(-1, t, f)
        out = torch.cat([x_dst, out], dim=-1)
        out = torch.cat([seq(out[:, i]) for i, seq in enumerate(self.post_nns)], dim=1)
        return self.lin(out)

    def _pre_rest(self, h: torch.Tensor) -> torch.Tensor:
        """The pre-NNs after their first Linear, per tower, on the first layer's `[E, G]` output."""
        t, f = self.towers, self.F_in
        h3 = h.view(-1, t, f)
        hs = []
        for i, seq in enumerate(_sequentials(self.pre_nns)):
            hi = h3[:, i]
            for module in list(seq)[1:]:
                hi = module(hi)
            hs.append(hi)
        return torch.stack(hs, dim=1).view(-1, t * f)

    @staticmethod
    def get_degree_histogram(loader: Any) -> torch.Tensor:
        """PyG's: the histogram of in-degrees of the vertices of `loader`'s graphs (`deg`)."""
        hist = torch.zeros(1, dtype=torch.long)
        for data in loader:
            deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
            counts = torch.bincount(deg, minlength=hist.numel())
            hist = hist.to(counts.device)
            if counts.numel() > hist.numel():
                counts[: hist.numel()] += hist
                hist = counts
            else:
                hist += counts
        return hist

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.in_channels}, {self.out_channels}, towers={self.towers}, "
            f"edge_dim={self.edge_dim})"
        )


__all__ = ["DegreeScalers", "PNAConv"]
