"""tile-features: FeatGraph's feature tiling (`tile features T`).

The whole destination sweep runs once per tile of T features: it is
wrapped in `loop.for_tile %extent by T`, and each `loop.for_feature` over the
tiled axis covers only the current tile. A tile of every source row is then
what a sweep gathers, so (with source partitions) the rows stay in cache
between destinations. Everything else a destination computes is recomputed
per tile, which is idempotent. Reductions over the tiled axis (a `dot` or
`@` along it) cannot be split this way and are refused. The tiled axis is
the kernel's row axis (`loop_structure.row_dim`: F, else the innermost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, i64
from xdsl.ir import Block
from xdsl.passes import ModulePass

from gnnc.ir import loop
from gnnc.ir.directives import check_directive_option
from gnnc.ir.loop_structure import (
    SweepKind,
    axis_loops,
    check_row_split,
    give_schedule,
    narrow_row_pieces,
    row_dim,
    shift_axis,
    sweep_kind,
    sweeps,
    take_schedule,
)
from gnnc.transforms.loop.specialize_unit_dims import unversion

index = IndexType()


@dataclass(frozen=True)
class TileFeaturesPass(ModulePass):
    """Wraps each sweep scheduled `tile = T` in `loop.for_tile` and narrows its row loops to the tile.

    Given a size, every kernel's destination and neighbour-group sweeps are
    tiled by it, as if its schedule said `tile features SIZE`.
    """

    name = "tile-features"

    size: int | None = None
    """`tile features SIZE` for every kernel; none: each kernel's schedule decides."""

    def __post_init__(self) -> None:
        if self.size is not None:
            check_directive_option(str(self.spec()), ["tile", "features", str(self.size)])

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.size is not None:
            # as the lowering gives it: destinations and neighbour groups, not source rows;
            # specialize-unit-dims would have left such a sweep unversioned
            kinds = (SweepKind.DESTINATIONS, SweepKind.GROUPS)
            give_schedule(op, "tile", IntegerAttr(self.size, i64), kinds)
            for for_dst in [o for o in op.walk() if isinstance(o, loop.ForDstOp) and sweep_kind(o) in kinds]:
                unversion(for_dst)
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks]:
            for phase, for_dst in sweeps(fn):
                attr = take_schedule(for_dst, "tile")
                if attr is None:
                    continue
                size = cast(IntegerAttr, attr).value.data
                dim = row_dim(for_dst)
                body = for_dst.body.block
                extent = check_row_split(f"tile features {size}", body, dim, "feature tiling", "tiles")
                tile_body = Block(arg_types=[index, index])
                start, width = tile_body.args
                tile = loop.ForTileOp(extent, size, tile_body, dim)
                fn.body.block.insert_op_before(tile, phase)
                phase.detach()
                tile_body.add_ops([phase, loop.YieldOp()])
                shift_axis(axis_loops(body, dim), extent, start, width)
                narrow_row_pieces(body, extent, start, width)
