"""The kernel ABI on xDSL functions: the record a kernel carries, its arguments by name.

A lowered kernel (`func.func` named `gnnc_K`) carries its `abi.AbiRecord`
in the `abi.ABI_ATTR` attribute until the driver moves it into the
metadata; passes read and edit it with `get_record` / `set_record` only.
`signature` and `argument_attrs` give the types and LLVM attributes of
`abi.kernel_arguments`; `argument` finds an argument by its ABI name.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    IndexType,
    MemRefType,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, BlockArgument

from gnnc.ir import abi


def has_record(fn: func.FuncOp) -> bool:
    """Whether fn is a lowered kernel still carrying its ABI record."""
    return abi.ABI_ATTR in fn.attributes


def get_record(fn: func.FuncOp) -> abi.AbiRecord:
    attr = fn.attributes[abi.ABI_ATTR]
    assert isinstance(attr, StringAttr), f"@{fn.sym_name.data}: {abi.ABI_ATTR} is not a string"
    return abi.AbiRecord.from_json(attr.data)


def set_record(fn: func.FuncOp, record: abi.AbiRecord) -> None:
    fn.attributes[abi.ABI_ATTR] = StringAttr(record.to_json())


def take_record(fn: func.FuncOp) -> abi.AbiRecord:
    """The record, removed from fn (the driver's: it goes to the metadata)."""
    record = get_record(fn)
    del fn.attributes[abi.ABI_ATTR]
    return record


def argument_type(argument: abi.Argument, elem: Attribute) -> Attribute:
    """A scalar is an `index`; a pointer a 1-d memref of i64 or of the kernel's float type."""
    if not argument.pointer:
        return IndexType()
    return MemRefType(i64 if argument.element is abi.Element.I64 else elem, [DYNAMIC_INDEX])


def signature(arguments: Sequence[abi.Argument], elem: Attribute) -> list[Attribute]:
    return [argument_type(a, elem) for a in arguments]


def argument_attr(argument: abi.Argument) -> DictionaryAttr:
    """The LLVM parameter attributes of an argument: `llvm.noalias`, `llvm.readonly`."""
    flags: dict[str, Attribute] = {}
    if argument.pointer and argument.noalias:
        flags["llvm.noalias"] = UnitAttr()
    if argument.pointer and argument.readonly:
        flags["llvm.readonly"] = UnitAttr()
    return DictionaryAttr(flags)


def argument_attrs(arguments: Sequence[abi.Argument]) -> list[DictionaryAttr]:
    return [argument_attr(a) for a in arguments]


def append_argument(fn: func.FuncOp, name: str) -> BlockArgument:
    """Appends the ABI's argument `name` to fn (a group map-threads adds after the others)."""
    described = abi.fixed_argument(name)
    scratch = argument(fn, "scratch").type
    assert isinstance(scratch, MemRefType)
    block = fn.body.block
    arg = block.insert_arg(argument_type(described, scratch.element_type), len(block.args))
    fn.function_type = FunctionType.from_lists([a.type for a in block.args], fn.function_type.outputs.data)
    if fn.arg_attrs is not None:
        fn.arg_attrs = ArrayAttr([*fn.arg_attrs.data, argument_attr(described)])
    return arg


def argument(fn: func.FuncOp, name: str) -> BlockArgument:
    """A graph argument, or one of the optional groups after the temps, by its ABI name.

    Parameters, results and temps are found through the lowering's own
    bindings; the optional groups are counted from the end, so fn's
    arguments must be those its record names (true between the lowering and
    map-threads, which appends the cuda groups).
    """
    args = fn.body.block.args
    if name in abi.GRAPH_ARGUMENTS:
        return args[abi.GRAPH_ARGUMENTS.index(name)]
    trailing = [a.name for a in abi.trailing_arguments(get_record(fn))]
    if name not in trailing:
        raise KeyError(f"@{fn.sym_name.data} takes no argument {name!r} (its optional ones: {trailing})")
    return args[len(args) - len(trailing) + trailing.index(name)]
