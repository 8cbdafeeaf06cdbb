"""NVVM IR -> PTX through llvmlite's NVPTX target, and the PTX file with its metadata.

The PTX carries gnnc's metadata record (kernels, ABI, grid) as one comment
line at its top, `// gnnc-metadata: {...}`, so a runtime can launch it
without the source; ptxas and the driver ignore comments.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm

from gnnc.errors import CompileError, ToolchainError
from gnnc.ir import abi

#: GPU architectures gnnc emits PTX for (CUDA 13's ptxas no longer takes sm_70).
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")

#: The PTX ISA version each architecture needs at least (LLVM's `+ptxNN` feature).
_PTX_VERSION = {"sm_75": 63, "sm_80": 70, "sm_86": 71, "sm_89": 78, "sm_90": 78}

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"

METADATA_PREFIX = abi.PTX_METADATA_PREFIX

#: Math intrinsics the NVPTX backend cannot lower (no libm to call): LLVM stops
#: the process on `tanh` ("Cannot select ftanh") and fails on `log` and `exp`.
#: expand-log, expand-tanh and expand-exp replace them; one left over is gnnc's bug, and
#: is reported as one instead of ending the process.
_NO_PTX_LOWERING = re.compile(r"@llvm\.(tanh|log|exp)\.")


def check_arch(arch: str) -> str:
    if arch not in ARCHS:
        raise CompileError(f"unknown GPU architecture '{arch}': use one of {', '.join(ARCHS)}")
    return arch


def _target_machine(arch: str, opt_level: int) -> llvm.TargetMachine:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(NVPTX_TRIPLE)
    return target.create_target_machine(
        cpu=check_arch(arch), features=f"+ptx{_PTX_VERSION[arch]}", opt=min(max(opt_level, 0), 3)
    )


def optimize_and_emit_ptx(ir_module: object, arch: str, opt_level: int = 3) -> tuple[str, str]:
    """(optimised NVVM IR, PTX) for `arch`."""
    tm = _target_machine(arch, opt_level)
    try:
        module = llvm.parse_assembly(str(ir_module))
    except RuntimeError as exc:
        raise CompileError(f"internal error: the generated NVVM IR does not parse: {exc}") from exc
    module.triple = NVPTX_TRIPLE
    module.data_layout = str(tm.target_data)
    try:
        module.verify()
    except RuntimeError as exc:
        raise CompileError(f"internal error: the generated NVVM IR does not verify: {exc}") from exc
    pto = llvm.create_pipeline_tuning_options(speed_level=min(max(opt_level, 0), 3))
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
    missing = sorted(set(_NO_PTX_LOWERING.findall(str(module))))
    if missing:
        raise CompileError(
            f"internal error: {' and '.join(missing)} reached the NVPTX backend unexpanded "
            "(PTX has no libm; expand-log, expand-tanh and expand-exp should have replaced them)"
        )
    try:
        ptx = tm.emit_assembly(module)
    except RuntimeError as exc:
        raise CompileError(f"internal error: the NVPTX backend cannot emit this kernel: {exc}") from exc
    return str(module), ptx


def with_metadata(ptx: str, metadata: dict) -> str:
    return METADATA_PREFIX + json.dumps(metadata, sort_keys=True) + "\n" + ptx


def read_metadata(ptx: str) -> dict:
    first = ptx.split("\n", 1)[0]
    if not first.startswith(METADATA_PREFIX):
        raise CompileError("not a gnnc PTX file: its first line is not the gnnc metadata comment")
    return json.loads(first[len(METADATA_PREFIX) :])


def ptxas(ptx: str, arch: str) -> None:
    """Assembles PTX with ptxas for `arch`; a CompileError holds ptxas's message."""
    exe = shutil.which("ptxas")
    if exe is None:
        raise ToolchainError("ptxas not found on PATH (it comes with the CUDA toolkit)")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run(
            [exe, f"-arch={check_arch(arch)}", str(src), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True,
            text=True,
        )
    if proc.returncode != 0:
        raise CompileError(f"ptxas rejected the PTX for {arch}: {proc.stderr.strip()}")
