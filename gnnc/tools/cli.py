"""The `gnnc` command line: compile, check, tune, passes.

Errors a user can cause print as `gnnc: error: ...` (source errors with their
location and caret) and exit with status 1, without a traceback. A reader
that closes the output pipe early (`gnnc passes | head`) ends the command
quietly, with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from gnnc.errors import GnncError
from gnnc.version import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gnnc", description="A compiler for graph neural network kernels.")
    parser.add_argument("--version", action="version", version=f"gnnc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compile", help="compile a .gnn file to a shared object (or stop at an IR stage)")
    c.add_argument("file", help="the .gnn source file")
    c.add_argument("-o", "--output", help="output path ('-' for stdout; default: FILE.so, or stdout for text stages)")
    c.add_argument(
        "--emit",
        choices=("graph", "loop", "scf", "llvm", "asm", "obj", "so", "nvvm", "ptx"),
        default=None,
        help="what to write: an IR stage (loop: after the schedule passes), assembly, an object "
        "file or a shared object (default)",
    )
    c.add_argument(
        "--target",
        default="cpu",
        choices=("cpu", "cuda", "cuda-emulation"),
        help="the target (default: cpu); cuda writes PTX, cuda-emulation a CPU .so running the cuda "
        "thread mapping's grid as loops (for checking it without a GPU)",
    )
    c.add_argument(
        "--arch", default="sm_80", help="GPU architecture for --target cuda: sm_75, sm_80, sm_86, sm_89, sm_90"
    )
    c.add_argument("--cpu", default="native", help="instruction set: native (default), x86-64-v2, x86-64-v3, x86-64-v4")
    c.add_argument("-O", dest="opt_level", type=int, default=3, choices=(0, 1, 2, 3), help="LLVM optimisation level")
    c.add_argument("--kernel", action="append", dest="kernels", help="compile only this kernel (repeatable)")
    c.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every stage to stderr")
    c.add_argument(
        "--print-ir-after",
        action="append",
        default=[],
        metavar="PASS",
        help="print the IR after this pass or stage (repeatable; see `gnnc passes`)",
    )
    c.add_argument("--dump-ir", metavar="DIR", help="write the IR after every stage to DIR, one numbered file each")
    c.add_argument("--header", metavar="OUT.h", help="also write a C header for the kernels' ABI")
    c.add_argument(
        "--schedule", metavar="DIRECTIVES", help="replace every kernel's cpu schedule, e.g. 'prefetch 16; sort degree'"
    )
    c.add_argument(
        "--disable-pass",
        action="append",
        default=[],
        metavar="PASS",
        help="skip an optimisation pass (repeatable; for ablation)",
    )
    c.add_argument(
        "--no-fusion", action="store_true", help="run every graph operation as its own loop nest (ablation only)"
    )
    c.add_argument(
        "--grad",
        action="store_true",
        help="compile the gradient kernels of the file's kernels (those named __grad_*_src "
        "run on the reversed graph) instead of the kernels",
    )

    k = sub.add_parser("check", help="parse and check a .gnn file; report errors")
    k.add_argument("file")

    t = sub.add_parser(
        "tune", help="search for the fastest schedule of a kernel on a graph; cache it for schedule='auto'"
    )
    t.add_argument("file", nargs="?", help="the .gnn source file")
    t.add_argument(
        "--graph",
        metavar="FILE",
        help="the graph: .mtx, edge list (.txt/.edges/.el), .npz, METIS .graph, graph-tool .gt[.gz]",
    )
    t.add_argument(
        "--feat",
        action="append",
        default=[],
        metavar="NAME=SIZE",
        help="a feature size of the kernel, e.g. F=128 (repeatable: --feat H=4 --feat F=32)",
    )
    t.add_argument("--kernel", action="append", dest="kernels", help="tune only this kernel (repeatable)")
    t.add_argument("--target", default="cpu", choices=("cpu", "cuda"), help="the target to tune for (default: cpu)")
    t.add_argument("--budget", default="60s", help="time for the search, e.g. 60s, 2m (split between the kernels)")
    t.add_argument("--threads", type=int, default=None, help="most threads a call may use (default: all cores)")
    t.add_argument("--symmetric", action="store_true", help="make the graph symmetric (every u->v also v->u)")
    t.add_argument(
        "--retrain",
        action="store_true",
        help="refit the schedule predictor from the local tuning records (with FILE: after tuning)",
    )
    t.add_argument("--no-cache", action="store_true", help="do not write the tuning cache or records")

    ps = sub.add_parser(
        "passes", help="list a target's pipeline, in order, then every pass with its summary and options"
    )
    ps.add_argument("--target", default="cpu", choices=("cpu", "cuda", "cuda-emulation"))
    return parser


def _compile(args: argparse.Namespace) -> int:
    from gnnc.driver import compiler, pipeline
    from gnnc.target.cpu.header import write_header

    source, file = compiler.read_source(Path(args.file))
    if args.grad:
        from gnnc.lang.autodiff import gradient_source

        source = gradient_source(source, file, args.kernels)
        args.kernels = None
    stages = pipeline.all_stage_names(args.target)
    unknown = [p for p in args.print_ir_after if p not in stages and p not in map(pipeline.stage_name, stages)]
    if unknown:
        raise GnncError(
            f"unknown pass {', '.join(unknown)} for --print-ir-after; the stages are: "
            + ", ".join(pipeline.all_stage_names(args.target))
        )
    observer = compiler.IrObserver(
        print_after_all=args.print_ir_after_all,
        print_after=tuple(args.print_ir_after),
        dump_dir=Path(args.dump_ir) if args.dump_ir else None,
    )
    from gnnc.ir.schedule import directives_text

    options = compiler.CompileOptions(
        target=args.target,
        cpu=args.cpu,
        opt_level=args.opt_level,
        kernels=args.kernels,
        schedule=directives_text(args.schedule) if args.schedule else None,
        disable_passes=tuple(args.disable_pass),
        fusion=not args.no_fusion,
    )
    gpu_kinds, cpu_kinds = ("nvvm", "ptx"), ("llvm", "asm", "obj", "so")
    if args.emit is None:
        args.emit = "ptx" if args.target == "cuda" else "so"
    if args.target == "cuda" and args.emit in cpu_kinds:
        raise GnncError(f"--emit {args.emit} is a CPU output; for --target cuda use --emit nvvm or ptx")
    if args.target != "cuda" and args.emit in gpu_kinds:
        raise GnncError(f"--emit {args.emit} needs --target cuda")
    if args.target == "cuda" and args.header:
        raise GnncError("--header describes the C ABI of a CPU shared object; it does not apply to --target cuda")
    options.arch = args.arch
    stop = {"graph": "graph", "loop": "loop", "scf": "scf", "llvm": "llvm", "nvvm": "nvvm"}.get(args.emit)
    result = compiler.compile_source(source, file, options, observer, stop_after=stop)

    text_stage = {
        # compile_source stops before the lowering: its last stage is the final graph IR
        "graph": list(result.stages)[-1],
        "loop": pipeline.loop_stage(args.target),
        "scf": "convert-loop-to-scf",
        "llvm": "translate-to-llvm",
        "asm": "emit-asm",
        "nvvm": "translate-to-nvvm",
    }.get(args.emit)
    if text_stage is not None:
        text = result.stages[text_stage] + "\n"
        if args.output in (None, "-"):
            sys.stdout.write(text)
        else:
            Path(args.output).write_text(text)
    elif args.emit == "ptx":
        assert result.ptx is not None
        if args.output == "-":
            sys.stdout.write(result.ptx)
        else:
            Path(args.output or Path(args.file).with_suffix(".ptx").name).write_text(result.ptx)
    elif args.emit == "obj":
        out = Path(args.output or Path(args.file).with_suffix(".o").name)
        assert result.object_code is not None
        out.write_bytes(result.object_code)
    else:
        out = Path(args.output or Path(args.file).with_suffix(".so").name)
        compiler.write_shared_object(result, out)
    if args.header:
        if not result.metadata:
            raise GnncError("--header needs a compile that reaches the backend (not --emit graph/loop/scf)")
        write_header(result.metadata, Path(args.header))
    return 0


def _check(args: argparse.Namespace) -> int:
    from gnnc.driver import compiler
    from gnnc.lang import parse_and_check

    source, file = compiler.read_source(Path(args.file))
    program = parse_and_check(source, file)
    names = ", ".join(k.name for k in program.kernels)
    print(f"{file}: ok ({len(program.kernels)} kernel{'s' if len(program.kernels) != 1 else ''}: {names})")
    return 0


def _tune(args: argparse.Namespace) -> int:
    from gnnc.tools import tune as tune_command

    return tune_command.run(args)


def _passes(args: argparse.Namespace) -> int:
    from xdsl.passes import get_pass_option_infos

    from gnnc.driver import pipeline

    print(f"{args.target} pipeline:")
    for i, entry in enumerate(pipeline.all_stage_names(args.target)):
        print(f"  {i:2d}  {entry}")
    others = " | ".join(t for t in ("cpu", "cuda", "cuda-emulation") if t != args.target)
    print(f"(--print-ir-after takes a stage's pass name; the other pipelines: gnnc passes --target {others})")
    print()
    print("passes (gnnc-opt FILE -p 'NAME{OPTION=VALUE ...}'):")
    for name in sorted(pipeline.PASSES):
        cls = pipeline.PASSES[name]
        print(f"  {name}")
        print(f"      {_summary(cls)}")
        docs = _option_docs(cls)
        for option in get_pass_option_infos(cls):
            default = "" if option.default_value is None else f" = {option.default_value}"
            kind = option.expected_type.strip("'")
            print(f"      {option.name.replace('_', '-')}: {kind}{default}")
            if option.name in docs:
                print(f"          {docs[option.name]}")
    return 0


def _summary(cls: type) -> str:
    """The first line of a pass's docstring."""
    lines = (cls.__doc__ or "").strip().splitlines()
    return lines[0].strip() if lines else f"(xDSL's {cls.__name__}, {cls.__module__})"


def _option_docs(cls: type) -> dict[str, str]:
    """The docstring under each option field of a pass: xDSL's way of documenting an option."""
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for field, doc in zip(body, body[1:]):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(doc, ast.Expr)
            and isinstance(doc.value, ast.Constant)
            and isinstance(doc.value.value, str)
        ):
            docs[field.target.id] = " ".join(doc.value.value.split())
    return docs


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        status = {"compile": _compile, "check": _check, "passes": _passes, "tune": _tune}[args.command](args)
        sys.stdout.flush()  # a reader that left shows here, not in the interpreter's flush at exit
        return status
    except BrokenPipeError:
        # the reader closed the pipe (`gnnc passes | head`): stop quietly, with the status
        # Python's docs advise; stdout goes to devnull so that the flush at exit cannot fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except GnncError as exc:
        from gnnc.errors import SourceError

        print(str(exc) if isinstance(exc, SourceError) else f"gnnc: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
