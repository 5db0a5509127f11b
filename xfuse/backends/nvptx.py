"""
LLVM's NVPTX backend through llvmlite: a module in the `llvm` dialect to PTX text.

The kernels become PTX entry points (the `ptx_kernel` calling convention, and `maxntid`
launch bounds so that ptxas budgets registers for the block size); libdevice
(`nvvm/libdevice/libdevice.10.bc` of the CUDA installation, found through `CUDA_HOME`,
`CUDA_PATH` or the location of `nvcc`) is linked in for the `__nv_*` math functions; every
function and global but the kernels is made internal so that O3 inlines and drops what is not
used, then the NVPTX target emits PTX for the requested `sm_XX`.

    ptx = compile_to_ptx(llvm_dialect_module, {"kernel_0": 256}, arch="sm_90")
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import llvmlite.binding as llvm
import llvmlite.ir as ir
from xdsl.backend.llvm.convert import convert_module
from xdsl.dialects.builtin import ModuleOp

from xfuse.errors import CodegenError

TRIPLE = "nvptx64-nvidia-cuda"
LIBDEVICE_RELATIVE = Path("nvvm") / "libdevice" / "libdevice.10.bc"


def ptx_version_feature(arch: str) -> str:
    """PTX ISA 8.0 (CUDA 12.0) up to sm_90, 8.6 (CUDA 12.8) for newer GPUs."""
    digits = "".join(ch for ch in arch if ch.isdigit())
    return "+ptx86" if digits and int(digits) >= 100 else "+ptx80"


class LibdeviceNotFound(CodegenError):
    """No CUDA installation with libdevice was found."""


def cuda_roots() -> list[Path]:
    """Candidate CUDA installations: $CUDA_HOME, $CUDA_PATH, nvcc's, /usr/local/cuda."""
    roots: list[Path] = []
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if value := os.environ.get(variable):
            roots.append(Path(value))
    if nvcc := shutil.which("nvcc"):
        roots.append(Path(nvcc).resolve().parent.parent)
    roots.append(Path("/usr/local/cuda"))
    return roots


def find_libdevice() -> Path:
    for root in cuda_roots():
        candidate = root / LIBDEVICE_RELATIVE
        if candidate.is_file():
            return candidate
    searched = ", ".join(str(r / LIBDEVICE_RELATIVE) for r in cuda_roots())
    raise LibdeviceNotFound(f"libdevice not found (set CUDA_HOME); looked at {searched}")


NVCC_REFLECT = "-nvvm-reflect-add=__CUDA_PREC_SQRT=1"
"""libdevice's `__nvvm_reflect("__CUDA_PREC_SQRT")` answers 1, as under nvcc's default
`-prec-sqrt=true` with which eager's CUDA kernels are built: `__nv_sqrtf` (and `__nv_hypotf`)
are `sqrt.rn`, not `sqrt.approx`. LLVM reads no module flag for it, only this option (process
wide, set once with the NVPTX target). `__CUDA_FTZ` stays 0: subnormals are kept, as eager."""


@cache
def _initialize_nvptx() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.set_option("xfuse", NVCC_REFLECT)


@cache
def target_machine(arch: str) -> llvm.TargetMachine:
    _initialize_nvptx()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch, features=ptx_version_feature(arch), opt=3)


@cache
def _libdevice_bitcode() -> bytes:
    return find_libdevice().read_bytes()


def mark_kernels(
    module: ir.Module,
    max_threads: Mapping[str, int],
    min_blocks: Mapping[str, int] | None = None,
) -> None:
    """Kernels -> PTX entry points with `maxntid` launch bounds (and `minnctapersm`, blocks
    that must fit on one SM at a time, which caps the registers ptxas may use)."""
    annotations = module.add_named_metadata("nvvm.annotations")
    i32 = ir.IntType(32)
    for name, threads in max_threads.items():
        function = module.get_global(name)
        if not isinstance(function, ir.Function):
            raise CodegenError(f"kernel '{name}' is not a function of the module")
        function.calling_convention = "ptx_kernel"
        annotations.add(module.add_metadata([function, "maxntidx", ir.Constant(i32, threads)]))
        if blocks := (min_blocks or {}).get(name, 0):
            annotations.add(module.add_metadata([function, "minctasm", ir.Constant(i32, blocks)]))


def to_nvptx_ir(
    module: ModuleOp,
    max_threads: Mapping[str, int],
    arch: str,
    min_blocks: Mapping[str, int] | None = None,
) -> str:
    """LLVM IR text for NVPTX of a module of `llvm.func`/`llvm.mlir.global`."""
    tm = target_machine(arch)
    llvm_module = convert_module(
        module, fallback_target_triple=TRIPLE, data_layout=str(tm.target_data)
    )
    mark_kernels(llvm_module, max_threads, min_blocks)
    return str(llvm_module)


def link_and_optimize(ir_text: str, kernels: Mapping[str, int], arch: str) -> llvm.ModuleRef:
    """Parse, link libdevice, internalize all but the kernels, drop what they do not reach
    (`drop_unused`), run O3."""
    tm = target_machine(arch)
    module = llvm.parse_assembly(ir_text)
    module.verify()
    if any(f.is_declaration and f.name.startswith("__nv_") for f in module.functions):
        module.link_in(llvm.parse_bitcode(_libdevice_bitcode()))
    for function in module.functions:
        if not function.is_declaration and function.name not in kernels:
            function.linkage = llvm.Linkage.internal
    for variable in module.global_variables:
        if not variable.is_declaration:
            variable.linkage = llvm.Linkage.internal
    drop_unused(module, tm)
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    pass_builder = llvm.create_pass_builder(tm, tuning)
    pass_builder.getModulePassManager().run(module, pass_builder)
    module.verify()
    return module


def drop_unused(module: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
    """Delete the internal functions and globals that no kernel reaches (LLVM's GlobalDCE):
    the hundreds of libdevice's that a kernel does not call, which O3 would otherwise take
    through its early per-function passes before its own GlobalOpt deletes them."""
    pass_builder = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options())
    manager = llvm.create_new_module_pass_manager()
    manager.add_global_dead_code_eliminate_pass()
    manager.run(module, pass_builder)


def compile_to_ptx(
    module: ModuleOp,
    max_threads: Mapping[str, int],
    arch: str = "sm_90",
    min_blocks: Mapping[str, int] | None = None,
) -> str:
    """PTX of the kernels (name -> most threads per block; name -> blocks per SM to budget
    registers for) of an `llvm`-dialect module."""
    ir_text = to_nvptx_ir(module, max_threads, arch, min_blocks)
    try:
        optimized = link_and_optimize(ir_text, max_threads, arch)
        return target_machine(arch).emit_assembly(optimized)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CodegenError(f"NVPTX code generation failed: {first}") from e
