"""gnnc-opt: xDSL's optimizer driver with gnnc's dialects and passes registered.

    gnnc-opt kernel.mlir -p convert-graph-to-loop,convert-loop-to-scf
    gnnc-opt loops.mlir -p 'tile-features{size=4},convert-loop-to-scf'

Every IR dump gnnc writes can be read back and pushed through any pass here,
with the options `gnnc passes` lists, which is how the per-pass IR tests
work. Errors a user can cause (a bad option, a kernel a pass refuses, IR
that does not parse or verify) print as `gnnc-opt: error: ...` and exit
with status 1, as `gnnc`'s do. A pass refusing its input is xDSL's
`PassFailedException`, so `--verify-diagnostics` prints its message and
goes on to the next chunk of a `--split-input-file` input.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError, PassFailedException
from xdsl.xdsl_opt_main import xDSLOptMain

from gnnc.errors import GnncError

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

    def apply_passes(self, prog: ModuleOp) -> None:
        try:
            super().apply_passes(prog)
        except GnncError as exc:
            raise PassFailedException(str(exc)) from exc


def _fail(exc: BaseException) -> NoReturn:
    print(f"gnnc-opt: error: {exc}", file=sys.stderr)
    sys.exit(1)


def main(args: Sequence[str] | None = None) -> None:
    try:
        opt = GnncOptMain(description="gnnc modular optimizer driver", args=args)
    except (GnncError, ArgSpecParseError, ValueError) as exc:  # the pipeline: a pass or option unknown, or a bad value
        _fail(exc)
    try:
        opt.run()
    except (GnncError, DiagnosticException, ParseError) as exc:
        _fail(exc)


if __name__ == "__main__":
    main()
