"""The compiler driver: source text -> IR stages -> shared object.

It runs the frontend, the xDSL pipeline of `driver/pipeline.py` and the CPU
backend, shows or dumps the IR after each stage on request, and writes a
`.so` whose embedded metadata record lets the runtime load it without the
source. `compile_cached` keeps built objects in a private cache directory
(`gnnc/cachedir.py`) keyed by source, options, versions and CPU; an entry
whose record does not bind its bytes to that key is rebuilt, never loaded,
and a directory that cannot be used means compiling without the cache.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gnnc.cachedir import (
    BUILT,
    BUILT_ELSEWHERE,
    CACHE_NAME,
    CACHE_SETTING,
    CACHED,
    FILE_MODE,
    EntryStore,
    cache_dir,
    warn_unusable,
)
from gnnc.errors import CompileError, GnncError
from gnnc.ir import abi
from gnnc.version import __version__

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

    from gnnc.lang.ast import Kernel, Program

_log = logging.getLogger(__name__)

#: Targets `compile_source` builds for. `cuda-emulation` is the cuda
#: pipeline (thread mapping included) with each grid run as loops on the CPU:
#: a shared object that checks a mapping's index arithmetic without a GPU.
TARGETS = ("cpu", "cuda", "cuda-emulation")

#: What `--emit` can stop at.
EMIT_KINDS = ("graph", "loop", "scf", "llvm", "asm", "obj", "so", "nvvm", "ptx")


@dataclass
class CompileOptions:
    """Everything that changes what the compiler produces (and so the cache key)."""

    target: str = "cpu"
    cpu: str = "native"
    #: GPU architecture of the cuda target (see target/cuda/codegen.ARCHS).
    arch: str = "sm_80"
    opt_level: int = 3
    #: Compile only these kernels (None: all of them).
    kernels: list[str] | None = None
    #: CPU schedule directives that replace the source's `schedule K for cpu`
    #: blocks of every compiled kernel (the Python `schedule=` argument).
    schedule: str | None = None
    #: Optimisation passes to skip (ablation: see `pipeline.OPTIONAL_PASSES`).
    disable_passes: tuple[str, ...] = ()
    #: False: every graph operation its own loop nest, edge-sized
    #: intermediates materialised (`--no-fusion`; for ablation only).
    fusion: bool = True

    def cache_key_fields(self) -> dict:
        return asdict(self)


def cuda_archs() -> tuple[str, ...]:
    """The GPU architectures the cuda target emits PTX for, oldest first."""
    from gnnc.target.cuda.codegen import ARCHS

    return ARCHS


def variant_options(options: CompileOptions) -> dict:
    """The options a schedule variant of an object inherits: all but the schedule, target,
    instruction set and kernel list, which the object's metadata records apart. A variant
    compiled without them would be another kernel: an ablation's `disable_passes` would
    come back in every variant the runtime compiles."""
    return {"opt_level": options.opt_level, "disable_passes": list(options.disable_passes), "fusion": options.fusion}


@dataclass
class IrObserver:
    """Where IR goes after each stage: `--print-ir-after[-all]`, `--dump-ir DIR`."""

    print_after_all: bool = False
    print_after: tuple[str, ...] = ()
    dump_dir: Path | None = None
    stream: TextIO = field(default=sys.stderr)
    _count: int = 0

    def __call__(self, stage: str, text: str) -> None:
        from gnnc.driver.pipeline import stage_name

        # a stage is its pipeline entry, options and all; `--print-ir-after` may name just the pass
        if self.print_after_all or stage in self.print_after or stage_name(stage) in self.print_after:
            print(f"// -----// IR Dump After {stage} //----- //", file=self.stream)
            print(text, file=self.stream)
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            ext = {
                "translate-to-llvm": "ll",
                "translate-to-nvvm": "ll",
                "llvm-opt": "ll",
                "emit-asm": "s",
                "emit-ptx": "ptx",
            }.get(stage, "mlir")
            (self.dump_dir / f"{self._count:02d}-{stage_name(stage)}.{ext}").write_text(text + "\n")
        self._count += 1


class Stages(dict[str, str]):
    """The IR text after each stage, in order, keyed by its pipeline entry, options and all
    (`convert-graph-to-loop{target=cuda}`); the pass's name alone finds the entry too."""

    def _entry(self, key: str) -> str | None:
        from gnnc.driver.pipeline import stage_name

        return next((entry for entry in self if stage_name(entry) == key), None)

    def __missing__(self, key: str) -> str:
        entry = self._entry(key)
        if entry is None:
            raise KeyError(key)
        return self[entry]

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or (isinstance(key, str) and self._entry(key) is not None)

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return self[key] if key in self else default


@dataclass
class CompileResult:
    metadata: dict
    stages: dict[str, str]
    object_code: bytes | None = None
    #: C compiled into the shared object beside object_code: the kernels' COO entries
    c_source: str | None = None
    #: the cuda target's PTX, metadata comment first
    ptx: str | None = None


def _no_observer(stage: str, text: str) -> None:
    pass


def compile_source(
    source: str,
    file: str = "<string>",
    options: CompileOptions | None = None,
    observe: Callable[[str, str], None] = _no_observer,
    stop_after: str | None = None,
    *,
    keep_stages: bool = True,
) -> CompileResult:
    """Compiles source text; `stop_after` is one of EMIT_KINDS (default: obj).

    The steps: check the source and pick its kernels, build their graph-dialect
    module, run the target's pipeline on it, then emit the target's code. The
    IR after each stage goes to the result's `stages` and to `observe`.

    `keep_stages=False` (the compile cache's builds) keeps no stage's text
    (printing the module after each pass, and the assembly, cost half of a
    kernel's compile) and verifies the IR once, after the pipeline: where it
    does not verify, the pipeline runs again verifying after each pass, so
    the error names the pass either way.
    """
    options = options or CompileOptions()
    with _collector_paused():
        return _compile(source, file, options, observe, stop_after, keep_stages)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off for one compile: xDSL makes and drops tens of thousands of
    IR objects a kernel, every 700 allocations started a collection, and compiling the examples
    and their gradients (in a process holding torch and PyG) took 9% longer with them. The
    garbage goes at the first collection after the compile; the peak RSS did not grow."""
    if not gc.isenabled():  # the caller's choice, or another thread's compile: leave it
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _compile(
    source: str,
    file: str,
    options: CompileOptions,
    observe: Callable[[str, str], None],
    stop_after: str | None,
    keep_stages: bool,
) -> CompileResult:
    program, kernels = _checked_kernels(source, file, options)
    record = _Recorder(observe, wanted=keep_stages or observe is not _no_observer)
    try:
        return _compile_checked(program, kernels, source, file, options, record, stop_after, verify_each=record.wanted)
    except _LateVerifyError as exc:
        # a pass broke the IR: compile again, verifying after each pass, for the error naming it
        _compile_checked(program, kernels, source, file, options, record, stop_after, verify_each=True)
        raise CompileError(f"internal error: the IR does not verify after the pipeline: {exc.__cause__}") from exc


class _Recorder:
    """Keeps each stage's IR text in `stages` and hands it to the observer, when `wanted`;
    the text is made (printed) only then."""

    def __init__(self, observe: Callable[[str, str], None], wanted: bool):
        self.observe, self.wanted, self.stages = observe, wanted, Stages()

    def __call__(self, stage: str, text: Callable[[], str]) -> None:
        if self.wanted:
            self.stages[stage] = text()
            self.observe(stage, self.stages[stage])


class _LateVerifyError(Exception):
    """The IR did not verify after the pipeline (passes run without verification between them)."""


def _compile_checked(
    program: Program,
    kernels: list[Kernel],
    source: str,
    file: str,
    options: CompileOptions,
    record: _Recorder,
    stop_after: str | None,
    verify_each: bool,
) -> CompileResult:
    from gnnc.driver.pipeline import FRONTEND_STAGE
    from gnnc.lang.irgen import build_module
    from gnnc.lang.signature import kernel_signature

    result = CompileResult(metadata={}, stages=record.stages)
    module = build_module(program, [k.name for k in kernels])
    record(FRONTEND_STAGE, lambda: str(module))
    signatures = {k.name: kernel_signature(k).to_dict() for k in kernels}
    ran = _run_passes(module, _pipeline(options), record, stop_after, verify_each, _target_options(options))
    if not ran or stop_after == "scf":
        return result
    emit = _emit_cuda if options.target == "cuda" else _emit_cpu
    return emit(result, module, signatures, source, file, options, record, stop_after)


def _checked_kernels(source: str, file: str, options: CompileOptions) -> tuple[Program, list[Kernel]]:
    """The checked program, its schedules replaced as the options say, and the kernels to compile."""
    from gnnc.lang import parse_and_check

    if options.target not in TARGETS:
        raise CompileError(f"unknown target '{options.target}': use one of {', '.join(TARGETS)}")
    # the language's name for the target whose schedule blocks apply
    schedule_target = "cpu" if options.target == "cpu" else "cuda"
    if options.target == "cuda":
        from gnnc.target.cuda.codegen import check_arch

        check_arch(options.arch)
    if schedule_target != "cpu":
        source = with_schedule(source, file, None, options.kernels, target="cpu")
    if options.schedule is not None:
        source = with_schedule(source, file, options.schedule, options.kernels, target=schedule_target)
    program = parse_and_check(source, file)
    if options.kernels is not None:
        missing = [k for k in options.kernels if k not in {kk.name for kk in program.kernels}]
        if missing:
            raise CompileError(f"no kernel named {', '.join(missing)} in {file}")
    kernels = [k for k in program.kernels if options.kernels is None or k.name in options.kernels]
    if not kernels:
        raise CompileError(f"{file} defines no kernel")
    return program, kernels


def _pipeline(options: CompileOptions) -> list[str]:
    """The target's pipeline entries, less the passes the options disable."""
    from gnnc.driver import pipeline

    return pipeline.pass_names(options.disable_passes, options.fusion, target=options.target)


def _target_options(options: CompileOptions) -> dict[str, str]:
    """Pipeline entries run with options of the target machine, by the entry (the stage keeps
    its name): for code that runs on the CPU, `segment-matmul`'s tile height for narrow
    transforms on the target CPU (`CpuTarget.gathers_packed_rows`)."""
    if options.target == "cuda":
        return {}
    from gnnc.target.cpu import codegen
    from gnnc.transforms.graph import segment_matmul

    gathers = codegen.resolve_cpu(options.cpu).gathers_packed_rows
    rows = segment_matmul.NARROW_ROWS if gathers else segment_matmul.DEFAULT_ROWS
    return {"segment-matmul": f"segment-matmul{{narrow-rows={rows}}}"}


#: The pipeline entries `--emit graph` and `--emit loop` stop before.
_STOP_BEFORE = {"graph": ("convert-graph-to-loop",), "loop": ("convert-loop-to-scf", "emulate-grid")}


def _run_passes(
    module: ModuleOp,
    entries: list[str],
    record: _Recorder,
    stop_after: str | None,
    verify_each: bool = True,
    spelled: Mapping[str, str] | None = None,
) -> bool:
    """Runs the entries on module, recording the IR after each and verifying it after
    each (`verify_each`) or after the last (`_LateVerifyError`); False where
    `stop_after` ends the compile before an entry. An entry in `spelled` runs as
    spelled there (with options) and is recorded under its own name."""
    from gnnc.driver import pipeline

    ctx = pipeline.make_context()
    finished = True
    for entry in entries:
        if pipeline.stage_name(entry) in _STOP_BEFORE.get(stop_after or "", ()):
            finished = False
            break
        pipeline.make_pass((spelled or {}).get(entry, entry)).apply(ctx, module)
        if verify_each:
            _verify(module, f"after '{entry}'")
        record(entry, lambda: str(module))
    if not verify_each:
        try:
            module.verify()
        except Exception as exc:
            raise _LateVerifyError() from exc
    return finished


def _verify(module: ModuleOp, where: str) -> None:
    try:
        module.verify()
    except Exception as exc:  # a pass produced invalid IR: our bug, reported clearly
        raise CompileError(f"internal error: IR {where} does not verify: {exc}") from exc


def _kernel_records(module: ModuleOp, signatures: dict) -> list[dict]:
    """Each kernel's signature and ABI record, taken off its function, for the metadata."""
    from xdsl.dialects import func

    from gnnc.ir import kernel_abi

    records = []
    for op in module.ops:
        if isinstance(op, func.FuncOp) and kernel_abi.has_record(op):
            record_abi = kernel_abi.take_record(op).to_dict()
            name = op.sym_name.data.removeprefix(abi.SYMBOL_PREFIX)
            records.append({**signatures[name], "symbol": op.sym_name.data, "abi": record_abi})
    return records


def _metadata(kind: str, source: str, file: str, options: CompileOptions, target: dict, kernels: list) -> dict:
    """The metadata record a compiled object carries; `target` says what it was built for."""
    return {
        "format": kind,
        # the source travels with the object, so a call with schedule= can
        # compile a variant without the .gnn file
        "source": source,
        "file": file,
        "schedule": options.schedule,
        # what else the variant must be compiled with (module.Kernel._variant)
        "options": variant_options(options),
        "gnnc_version": __version__,
        "abi_version": abi.ABI_VERSION,
        **target,
        "kernels": kernels,
    }


def _emit_cpu(
    result: CompileResult,
    module: ModuleOp,
    signatures: dict,
    source: str,
    file: str,
    options: CompileOptions,
    record: _Recorder,
    stop_after: str | None,
) -> CompileResult:
    """LLVM IR with the metadata record embedded, optimised to object code (CPU, cuda-emulation)."""
    from gnnc.target.cpu import c_helpers, codegen, header
    from gnnc.target.llvm.translate import translate_module

    target = codegen.resolve_cpu(options.cpu)
    kernels = _kernel_records(module, signatures)
    for k in kernels:
        if c_helpers.has_coo_entry(abi.AbiRecord.from_dict(k["abi"])):
            k["coo"] = abi.coo_symbol(k["symbol"])
    result.metadata = _metadata(
        "gnnc-shared-object", source, file, options, {"target": options.target, "cpu": target.metadata()}, kernels
    )
    ir_module = translate_module(module, module_name=Path(file).stem or "gnnc")
    codegen.embed_metadata(ir_module, result.metadata)
    record("translate-to-llvm", lambda: str(ir_module))
    if stop_after == "llvm":
        return result
    opt_ir, obj, asm = codegen.optimize_and_emit(ir_module, target, options.opt_level, texts=record.wanted)
    record("llvm-opt", lambda: opt_ir)
    record("emit-asm", lambda: asm)
    result.object_code = obj
    result.c_source = header.coo_entries(result.metadata)
    return result


def _emit_cuda(
    result: CompileResult,
    module: ModuleOp,
    signatures: dict,
    source: str,
    file: str,
    options: CompileOptions,
    record: _Recorder,
    stop_after: str | None,
) -> CompileResult:
    """NVVM IR and PTX for the cuda target; the PTX starts with the metadata record."""
    from gnnc.target.cuda import codegen
    from gnnc.target.llvm.translate import NVPTX_TRIPLE, translate_module

    kernels = _kernel_records(module, signatures)
    result.metadata = _metadata("gnnc-ptx", source, file, options, {"target": "cuda", "arch": options.arch}, kernels)
    ir_module = translate_module(module, module_name=Path(file).stem or "gnnc", triple=NVPTX_TRIPLE)
    record("translate-to-nvvm", lambda: str(ir_module))
    if stop_after in ("llvm", "nvvm"):
        return result
    optimized, ptx = codegen.optimize_and_emit_ptx(ir_module, options.arch, options.opt_level)
    record("llvm-opt", lambda: optimized)
    result.ptx = codegen.with_metadata(ptx, result.metadata)
    record("emit-ptx", lambda: result.ptx or "")
    return result


def with_schedule(
    source: str, file: str, directives: str | None, kernels: list[str] | None = None, target: str = "cpu"
) -> str:
    """Source text whose `target` schedule, for each kernel, is `directives`
    instead (None: the kernels have no schedule for `target`)."""
    from gnnc.lang.parser import parse

    program = parse(source, file)
    names = [k.name for k in program.kernels if kernels is None or k.name in kernels]
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    cuts = []
    for sched in program.schedules:
        if sched.target == target and sched.kernel in names:
            # the schedule's location is its kernel name's: cut from the keyword before it
            begin = source.rindex("schedule", 0, starts[sched.loc.line - 1] + sched.loc.col - 1)
            end = source.index("}", begin) + 1  # directives hold no braces
            cuts.append((begin, end))
    for begin, end in sorted(cuts, reverse=True):
        source = source[:begin] + source[end:]
    if directives is None:
        return source
    body = "\n".join("    " + line for line in directives.splitlines() if line.strip())
    for name in names:
        source += f"\nschedule {name} for {target} {{\n{body}\n}}\n"
    return source


def write_shared_object(result: CompileResult, out_path: str | os.PathLike) -> None:
    from gnnc.target.cpu import codegen

    assert result.object_code is not None
    codegen.link_shared_object(result.object_code, Path(out_path), c_source=result.c_source)


# ---------------------------------------------------------------- the cache


#: An entry longer than this is not read (an object of a few kernels is tens of KiB).
_MAX_ENTRY_BYTES = 1 << 30


def cache_key(source: str, options: CompileOptions) -> str:
    """The name of source's entry in the cache: the start of `full_cache_key`."""
    return full_cache_key(source, options)[:32]


def full_cache_key(source: str, options: CompileOptions) -> str:
    """SHA-256 of everything that changes what the compiler produces from source: the options,
    this CPU (for `native`), gnnc's, llvmlite's and xDSL's versions, and the compiler's own code.
    An entry's record holds it whole (`cachedir.EntryStore`), so an entry is never taken for another."""
    import llvmlite
    import xdsl

    fields = {
        "source": source,
        "options": options.cache_key_fields(),
        # `native` is this machine's CPU: a cache shared with another machine (a home
        # directory on NFS, a runner moved to another CPU) must not hand its objects over
        "host": _host_cpu() if options.target != "cuda" and options.cpu == "native" else None,
        "gnnc": __version__,
        "abi": abi.ABI_VERSION,
        "llvmlite": llvmlite.__version__,
        "xdsl": str(getattr(xdsl, "__version__", "?")),
        "compiler": _compiler_fingerprint(),
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _host_cpu() -> list[str]:
    from gnnc.target.cpu import codegen

    target = codegen.resolve_cpu("native")
    return [target.name, target.llvm_features]


@functools.cache
def _compiler_fingerprint() -> str:
    """A digest of gnnc's own compiler sources: editing them invalidates the cache. Once per
    process (the compiler running is the one imported, whatever the files say later): it
    reads every source, 3 to 20 ms, which each compile's cache lookup paid."""
    root = Path(__file__).parent.parent
    digest = hashlib.sha256()
    for sub in ("lang", "ir", "transforms", "conversion", "target", "driver"):
        for path in sorted((root / sub).rglob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _describe(file: str, options: CompileOptions) -> str:
    """What a compile builds, for the log: file, kernels, schedule, target."""
    kernels = ", ".join(options.kernels) if options.kernels else "every kernel"
    schedule = f", schedule '{'; '.join(options.schedule.splitlines())}'" if options.schedule is not None else ""
    return f"{file} ({kernels}{schedule}, {options.target})"


@contextlib.contextmanager
def _cache() -> Iterator[EntryStore | None]:
    """The compile cache's entries, held open; None (after one warning) where the directory
    cannot be used: compiles go on without it. A directory others may write is a CacheError."""
    directory = cache_dir()
    try:
        store = EntryStore(directory, CACHE_NAME, CACHE_SETTING)
    except OSError as exc:
        warn_unusable(directory, CACHE_NAME, exc)
        yield None
        return
    with store:
        yield store


_uncached_dir: Path | None = None


def _uncached(name: str, data: bytes) -> Path:
    """The path of a private copy of a built entry the cache could not take (read-only, full),
    that lives as long as this process."""
    global _uncached_dir
    if _uncached_dir is None:
        _uncached_dir = Path(tempfile.mkdtemp(prefix="gnnc-uncached-"))  # 0700
        atexit.register(_remove_uncached, _uncached_dir, os.getpid())
    path = _uncached_dir / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        with open(fd, "wb") as f:
            os.fchmod(f.fileno(), FILE_MODE)
            f.write(data)
    except OSError as exc:
        raise GnncError(f"cannot write the compiled object to {_uncached_dir}: {exc.strerror or exc}") from exc
    return path


def _remove_uncached(directory: Path, pid: int) -> None:
    if os.getpid() == pid:  # not a forked child's: the parent's modules were loaded from it
        shutil.rmtree(directory, ignore_errors=True)


def compile_cached(source: str, file: str = "<string>", options: CompileOptions | None = None) -> Path:
    """The path of a shared object for source, built or taken from the cache.

    A hit is an entry whose record binds its bytes to this source's full key
    (`cachedir.EntryStore`); anything else at its name is rebuilt. Processes
    that ask for one entry at once build it once (`EntryStore.building`).
    """
    from gnnc.target.cpu import codegen

    def build() -> bytes:
        result = compile_source(source, file, options, keep_stages=False)
        assert result.object_code is not None
        return codegen.shared_object_bytes(result.object_code, c_source=result.c_source)

    options = options or CompileOptions()
    return _cached(source, file, options, ".so", build)


def compile_cached_ptx(source: str, file: str = "<string>", options: CompileOptions | None = None) -> Path:
    """The path of a PTX file for source (target cuda), built or taken from the cache as `compile_cached`'s."""

    def build() -> bytes:
        result = compile_source(source, file, options, keep_stages=False)
        assert result.ptx is not None
        return result.ptx.encode()

    options = options or CompileOptions(target="cuda")
    return _cached(source, file, options, ".ptx", build)


def _cached(source: str, file: str, options: CompileOptions, suffix: str, build: Callable[[], bytes]) -> Path:
    """The cache entry of source and options, `build()` and stored on a miss."""
    key = full_cache_key(source, options)
    name = f"{key[:32]}{suffix}"
    start = time.perf_counter()

    def timed() -> bytes:
        nonlocal start
        start = time.perf_counter()
        return build()

    with _cache() as store:
        if store is None:
            path = _uncached(name, timed())
        else:
            data, origin = store.lookup_or_build(name, key, _MAX_ENTRY_BYTES, timed)
            if origin == CACHED:
                _log.debug("%s: from the compile cache, %s", _describe(file, options), store.path / name)
                return store.path / name
            if origin == BUILT_ELSEWHERE:
                _log.info("%s: built by another process, %s", _describe(file, options), store.path / name)
                return store.path / name
            path = store.path / name if origin == BUILT else _uncached(name, data)
    _log.info("%s: compiled in %.2f s, %s", _describe(file, options), time.perf_counter() - start, path)
    return path


def read_source(source_or_path: str | os.PathLike) -> tuple[str, str]:
    """(text, file name) for source text or a path to a .gnn file."""
    if isinstance(source_or_path, os.PathLike) or (
        isinstance(source_or_path, str) and "\n" not in source_or_path and source_or_path.endswith(".gnn")
    ):
        from gnnc.lang import read_source_file

        path = Path(source_or_path)
        return read_source_file(path), str(path)  # SourceError at a byte that is not UTF-8
    return str(source_or_path), "<string>"
