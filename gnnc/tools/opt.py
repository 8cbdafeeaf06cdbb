"""gnnc-opt: xDSL's optimizer driver with gnnc's dialects and passes registered.

    gnnc-opt kernel.mlir -p convert-graph-to-loop,convert-loop-to-scf

Every IR dump gnnc writes can be read back and pushed through any pass here,
which is how the per-pass IR tests work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from xdsl.xdsl_opt_main import xDSLOptMain

T = TypeVar("T")


def _returning(value: T) -> Callable[[], T]:
    """A factory of `value`, bound now (a lambda in a loop would see the loop's last value)."""
    return lambda: value


class GnncOptMain(xDSLOptMain):
    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        from gnnc.ir.graph import Graph
        from gnnc.ir.llvm_ext import LlvmExt
        from gnnc.ir.loop import Loop

        for dialect in (Graph, Loop, LlvmExt):
            self.ctx.register_dialect(dialect.name, _returning(dialect))

    def register_all_passes(self) -> None:
        super().register_all_passes()
        from gnnc.driver.pipeline import PASSES

        for name, pass_type in PASSES.items():
            self.register_pass(name, _returning(pass_type))


def main(args: Sequence[str] | None = None) -> None:
    GnncOptMain(description="gnnc modular optimizer driver", args=args).run()


if __name__ == "__main__":
    main()
