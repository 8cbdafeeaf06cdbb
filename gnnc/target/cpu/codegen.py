"""LLVM IR -> optimised object code -> shared object, for one CPU target.

    target = resolve_cpu("x86-64-v3")
    embed_metadata(ir_module, metadata)
    opt_ir, obj, asm = optimize_and_emit(ir_module, target)
    link_shared_object(obj, Path("kernels.so"))

A `CpuTarget` names the CPU LLVM tunes and selects instructions for, and the
/proc/cpuinfo flags a machine must have to run the result; the runtime checks
those flags (`gnnc.runtime.native.check_cpu_features`) before it calls any
code, so a `.so` built for AVX-512 fails with a message instead of SIGILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import llvmlite.binding as llvm
import llvmlite.ir as ir

from gnnc.errors import CompileError, GnncError, ToolchainError
from gnnc.host import host_cpu_flags
from gnnc.ir import abi

#: The symbols every gnnc shared object exports; `gnnc.runtime.native` reads them.
METADATA_SYMBOL = "gnnc_metadata"
METADATA_SIZE_SYMBOL = "gnnc_metadata_size"

# The x86-64 micro-architecture levels of the psABI, as /proc/cpuinfo flags
# (which spell some features differently from LLVM: sse3 = pni, lzcnt = abm,
# sahf = lahf_lm). Each level includes the one before.
_X86_64_V2 = ("cx16", "lahf_lm", "pni", "popcnt", "sse4_1", "sse4_2", "ssse3")
_X86_64_V3 = (*_X86_64_V2, "abm", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave")
_X86_64_V4 = (*_X86_64_V3, "avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl")
LEVELS: dict[str, tuple[str, ...]] = {"x86-64-v2": _X86_64_V2, "x86-64-v3": _X86_64_V3, "x86-64-v4": _X86_64_V4}

#: LLVM x86 feature -> /proc/cpuinfo flag, for the instruction-set features code
#: generation may use (system features such as xsaves or rdpid are left out).
_LLVM_TO_CPUINFO = {
    "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "sse4a": "sse4a",
    "popcnt": "popcnt", "cx16": "cx16", "sahf": "lahf_lm", "lzcnt": "abm", "movbe": "movbe",
    "avx": "avx", "avx2": "avx2", "fma": "fma", "fma4": "fma4", "xop": "xop", "f16c": "f16c",
    "bmi": "bmi1", "bmi2": "bmi2", "adx": "adx", "aes": "aes", "pclmul": "pclmulqdq",
    "sha": "sha_ni", "gfni": "gfni", "vaes": "vaes", "vpclmulqdq": "vpclmulqdq",
    "prfchw": "3dnowprefetch", "avxvnni": "avx_vnni",
    "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512cd": "avx512cd", "avx512dq": "avx512dq",
    "avx512vl": "avx512vl", "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi",
    "avx512vbmi2": "avx512_vbmi2", "avx512vnni": "avx512_vnni", "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq", "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16",
}  # fmt: skip

VALID_LEVELS = ("native", *LEVELS)


@dataclass(frozen=True)
class CpuTarget:
    """What to compile for: an LLVM CPU name and features, and what a host must have."""

    level: str  # "native" or an x86-64-vN level
    name: str  # the LLVM CPU name, e.g. "znver4" or "x86-64-v3"
    llvm_features: str = ""  # "+avx2,-avx512f,..." ("" = what `name` implies)
    cpuinfo_flags: tuple[str, ...] = field(default_factory=tuple)  # checked by the runtime
    triple: str = field(default_factory=llvm.get_process_triple)

    def metadata(self) -> dict:
        """The `cpu` record of a shared object's metadata (see gnnc.runtime.native)."""
        return {"level": self.level, "name": self.name, "features": list(self.cpuinfo_flags), "triple": self.triple}

    @property
    def gathers_packed_rows(self) -> bool:
        """Whether LLVM's tuning for this CPU fills a vector of several rows' elements by a gather
        (`vgatherqps`) where others permute: AMD's Zen (`znver*`), where a tile of one row, which
        broadcasts, ran a narrow segment matmul 1.8x faster (transforms/graph/segment_matmul.py)."""
        return self.name.startswith("znver")

    def target_machine(self, opt_level: int = 3) -> llvm.TargetMachine:
        _initialize_llvm()
        try:
            target = llvm.Target.from_triple(self.triple)
        except RuntimeError as exc:
            raise ToolchainError(f"LLVM has no target for {self.triple}: {exc}") from exc
        return target.create_target_machine(
            cpu=self.name, features=self.llvm_features, opt=min(max(opt_level, 0), 3), reloc="pic", codemodel="default"
        )


_initialized = False


def _initialize_llvm() -> None:
    global _initialized
    if not _initialized:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _initialized = True


def _is_x86_64_host() -> bool:
    return llvm.get_process_triple().split("-")[0] in ("x86_64", "amd64")


def resolve_cpu(level: str) -> CpuTarget:
    """The target for `--cpu LEVEL`: native (this machine) or x86-64-v2 / v3 / v4."""
    if level == "native":
        _initialize_llvm()
        name = llvm.get_host_cpu_name()
        try:
            features = llvm.get_host_cpu_features()
        except RuntimeError:  # LLVM cannot list them on some hosts: the CPU name implies them
            return CpuTarget("native", name, "", ())
        enabled = [f for f, on in features.items() if on]
        flags = {_LLVM_TO_CPUINFO[f] for f in enabled if f in _LLVM_TO_CPUINFO}
        host = host_cpu_flags()
        if host is not None:  # keep only what this machine can be checked for
            flags &= host
        return CpuTarget("native", name, features.flatten(), tuple(sorted(flags)))
    if level in LEVELS:
        if not _is_x86_64_host():
            raise CompileError(
                f"--cpu {level} targets x86-64, but this machine is {platform.machine()}; "
                "cross compilation is not supported: use --cpu native"
            )
        return CpuTarget(level, level, "", tuple(sorted(LEVELS[level])))
    raise CompileError(f"unknown CPU level {level!r}; valid levels: {', '.join(VALID_LEVELS)}")


# ---------------------------------------------------------------- metadata


def embed_metadata(ir_module: ir.Module, metadata: dict) -> None:
    """Exports `gnnc_metadata` (null-terminated JSON, i8 array) and `gnnc_metadata_size`
    (i64, the JSON's length without the terminator) from the module, and for each kernel
    the metadata lists, its argument count (`abi.arity_symbol`)."""
    if METADATA_SYMBOL in ir_module.globals:
        raise CompileError("the module already carries gnnc metadata")
    data = json.dumps(metadata, separators=(",", ":"), sort_keys=True).encode("utf-8")
    blob = data + b"\0"
    array_type = ir.ArrayType(ir.IntType(8), len(blob))
    array = ir.GlobalVariable(ir_module, array_type, name=METADATA_SYMBOL)
    array.initializer = ir.Constant(array_type, bytearray(blob))
    array.global_constant = True
    array.align = 1
    size = ir.GlobalVariable(ir_module, ir.IntType(64), name=METADATA_SIZE_SYMBOL)
    size.initializer = ir.Constant(ir.IntType(64), len(data))
    size.global_constant = True
    for kernel in metadata.get("kernels", []):
        if isinstance(kernel, dict) and "symbol" in kernel:
            _export_arity(ir_module, kernel["symbol"])


def _export_arity(ir_module: ir.Module, symbol: str) -> None:
    """Exports `abi.arity_symbol(symbol)`: the argument count of the function as compiled,
    taken from the function itself, not from the metadata the runtime checks it against."""
    try:
        function = ir_module.get_global(symbol)
    except KeyError:
        raise CompileError(f"internal error: the metadata names {symbol}, which the module does not define") from None
    if not isinstance(function, ir.Function):
        raise CompileError(f"internal error: the metadata names {symbol}, which is not a function")
    arity = ir.GlobalVariable(ir_module, ir.IntType(64), name=abi.arity_symbol(symbol))
    arity.initializer = ir.Constant(ir.IntType(64), len(function.args))
    arity.global_constant = True


# ---------------------------------------------------------------- optimise and emit


def optimize_and_emit(
    ir_module: ir.Module | str, target: CpuTarget, opt_level: int = 3, texts: bool = True
) -> tuple[str, bytes, str]:
    """Parses and verifies the IR, runs LLVM's O<opt_level> pipeline (loop and SLP
    vectorisation on) for `target`, and returns (optimised IR, object, assembly); the
    IR and assembly texts are empty without `texts` (making them costs a third of LLVM's time)."""
    tm = target.target_machine(opt_level)
    text = str(ir_module)
    try:
        module = llvm.parse_assembly(text)
    except RuntimeError as exc:
        raise CompileError(f"internal error: the generated LLVM IR does not parse: {exc}") from exc
    module.triple = target.triple
    module.data_layout = str(tm.target_data)
    try:
        module.verify()
    except RuntimeError as exc:
        raise CompileError(f"internal error: the generated LLVM IR does not verify: {exc}") from exc
    pto = llvm.create_pipeline_tuning_options(speed_level=min(max(opt_level, 0), 3))
    vectorize = opt_level >= 2
    pto.loop_vectorization = vectorize
    pto.slp_vectorization = vectorize
    pto.loop_interleaving = vectorize
    pto.loop_unrolling = opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
    try:
        module.verify()
    except RuntimeError as exc:  # an LLVM bug rather than ours, but say where it happened
        raise CompileError(f"internal error: LLVM IR does not verify after optimisation: {exc}") from exc
    if not texts:
        return "", bytes(tm.emit_object(module)), ""
    optimized = str(module)
    return optimized, bytes(tm.emit_object(module)), tm.emit_assembly(module)


# ---------------------------------------------------------------- link


def _compiler() -> list[str]:
    cc = shlex.split(os.environ.get("CC", "")) or ["cc"]
    if shutil.which(cc[0]) is None:
        raise ToolchainError(
            f"no C compiler to link the shared object with: {cc[0]!r} not found (install gcc or clang, or set $CC)"
        )
    return cc


def _references_openmp(object_bytes: bytes) -> bool:
    # Undefined symbols are named in the object's string table, NUL-separated.
    return re.search(rb"\0(GOMP_|omp_)", object_bytes) is not None


def shared_object_bytes(
    object_bytes: bytes, *, extra_libs: tuple[str, ...] = ("gomp",), c_source: str | None = None
) -> bytes:
    """Links an object into a shared object with the system C compiler; returns its bytes,
    the integrity trailer (`abi.with_integrity`) appended. `c_source` (the kernels' COO
    entries, `header.coo_entries`) is compiled into it.

    A missing libgomp is tolerated when the object calls no GOMP_ / omp_ symbol.
    """
    cc = _compiler()
    with tempfile.TemporaryDirectory(prefix="gnnc-link-") as tmp:
        obj = Path(tmp) / "kernels.o"
        obj.write_bytes(object_bytes)
        out = Path(tmp) / "kernels.so"
        sources = []
        if c_source is not None:
            entries = Path(tmp) / "entries.c"
            entries.write_text(c_source)
            sources = ["-O2", "-std=c11", str(entries)]  # C11: the helpers' aligned allocations
        libs = list(extra_libs)
        while True:
            cmd = [*cc, "-shared", "-fPIC", "-o", str(out), str(obj), *sources]
            if sys.platform.startswith("linux"):
                cmd.append("-Wl,--as-needed")  # no NEEDED entry for an unused libgomp
            cmd += [f"-l{lib}" for lib in libs] + ["-lm"]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ToolchainError(f"linking failed: {shlex.join(cmd)}: {exc}") from exc
            if proc.returncode == 0:
                break
            missing_gomp = "gomp" in libs and re.search(r"(cannot find|not found).*gomp", proc.stderr)
            if missing_gomp and not _references_openmp(object_bytes):
                libs.remove("gomp")
                continue
            hint = " (libgomp is needed by parallel kernels: install gcc's libgomp)" if missing_gomp else ""
            raise ToolchainError(
                f"linking failed{hint}: {shlex.join(cmd)}\n{proc.stderr.strip() or proc.stdout.strip()}"
            )
        try:
            return abi.with_integrity(out.read_bytes())
        except OSError as exc:
            raise ToolchainError(f"linking failed: {shlex.join(cmd)} wrote no readable {out.name}: {exc}") from exc


def link_shared_object(
    object_bytes: bytes,
    out_path: str | os.PathLike,
    *,
    extra_libs: tuple[str, ...] = ("gomp",),
    c_source: str | None = None,
) -> None:
    """Links an object into a shared object at `out_path` (`shared_object_bytes`).

    The result appears whole or not at all (temp file + rename), with the mode
    the linker would give it (0777 less the umask).
    """
    data = shared_object_bytes(object_bytes, extra_libs=extra_libs, c_source=c_source)
    out_path = Path(out_path)
    # beside the result, so the rename is atomic
    partial = out_path.parent / f".{out_path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o777)
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(partial, out_path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise GnncError(f"cannot write {out_path}: {exc.strerror or exc}") from exc
        raise


__all__ = [
    "LEVELS",
    "METADATA_SIZE_SYMBOL",
    "METADATA_SYMBOL",
    "VALID_LEVELS",
    "CpuTarget",
    "embed_metadata",
    "link_shared_object",
    "optimize_and_emit",
    "resolve_cpu",
    "shared_object_bytes",
]
