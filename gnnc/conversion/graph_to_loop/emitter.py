"""The op emitter of convert-graph-to-loop: a current block, a prologue, memoised values."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from xdsl.dialects import arith
from xdsl.dialects.builtin import AnyFloat, FloatAttr, IndexType, IntegerAttr
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

index = IndexType()


class Emitter:
    """Appends ops to a current block; keeps a prologue for loop-invariant values."""

    def __init__(self, prologue: Block):
        self.prologue = prologue
        self.block = prologue
        self._consts: dict[tuple[str, object], SSAValue] = {}
        # Values already computed, one scope per open block: an entry made in
        # an outer block dominates every inner one.
        self.memo: list[dict[object, SSAValue]] = [{}]

    def lookup(self, key: object) -> SSAValue | None:
        for scope in reversed(self.memo):
            if key in scope:
                return scope[key]
        return None

    def op(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def pre(self, op: Operation) -> SSAValue:
        self.prologue.add_op(op)
        return op.results[0]

    def index_const(self, value: int) -> SSAValue:
        key = ("index", value)
        if key not in self._consts:
            self._consts[key] = self.pre(arith.ConstantOp(IntegerAttr(value, index)))
        return self._consts[key]

    def float_const(self, value: float, elem: AnyFloat) -> SSAValue:
        key = (str(elem), repr(value))
        if key not in self._consts:
            self._consts[key] = self.pre(arith.ConstantOp(FloatAttr(value, elem)))
        return self._consts[key]

    def nested(self, block: Block) -> Nested:
        return Nested(self, block)

    @contextmanager
    def at_scope_of(self, value: SSAValue) -> Iterator[None]:
        """Appends to the block that defines `value` (a loop's argument) instead, for a value
        every op inside that loop may share: the block is still being built, and the loop
        op being built inside it is appended after it."""
        owner = value.block if isinstance(value, BlockArgument) else value.owner.parent_block()
        assert owner is not None
        outer, self.block = self.block, owner
        try:
            yield
        finally:
            self.block = outer


class Nested:
    """Makes a block the emitter's current one, with a memo scope of its own."""

    def __init__(self, emitter: Emitter, block: Block):
        self.emitter, self.inner = emitter, block

    def __enter__(self) -> Block:
        self.outer = self.emitter.block
        self.emitter.block = self.inner
        self.emitter.memo.append({})
        return self.inner

    def __exit__(self, *exc: object) -> None:
        self.emitter.block = self.outer
        self.emitter.memo.pop()
