"""
The LLVM half that the CPU and CUDA backends share: an xDSL module in the `llvm` dialect to an
llvmlite module, verified, optimized at O3 with the loop and SLP vectorizers, and emitted as
an object file or assembly for a target machine.

    tm = host_target_machine()
    ir = to_llvm_ir(llvm_dialect_module, tm)
    obj = emit_object(optimize(ir, tm), tm)
"""

from __future__ import annotations

import hashlib
from functools import cache

import llvmlite.binding as llvm
import llvmlite.ir as ir
from xdsl.backend.llvm.convert import convert_module
from xdsl.dialects.builtin import ModuleOp

MASKED_INTERLEAVED = "-enable-masked-interleaved-mem-accesses"
"""The loop vectorizer may load a strided group of a loop under a condition as whole vectors
and shuffle them apart (a masked interleaved group), where it would otherwise gather element
by element. A stride-2 window with padding is such a loop (ResNet's max pool, MobileNetV2's
stride-2 depthwise convolutions: `python -m benchmarks.kernel_times`, benchmarks/RESULTS.md);
no kernel is slower with it. Process wide, set once with the
native target; NVPTX, which groups no interleaved accesses, is left as it was."""


@cache
def _initialize_native() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.set_option("xfuse", MASKED_INTERLEAVED)


@cache
def host_target_machine(opt: int = 3) -> llvm.TargetMachine:
    """The shared target machine for this CPU (for compiling; never give it to an engine)."""
    return new_host_target_machine(opt)


FULL_WIDTH = "-prefer-256-bit"
"""Where the CPU has AVX-512, vectors of its full width. LLVM's tuning for Intel's AVX-512
cores (Skylake-SP to Sapphire Rapids, and what a VM reports of them) prefers 256-bit vectors,
so loops vectorized 8 wide in ymm registers, where Inductor's C++ (ATen's `Vectorized`)
runs 16 wide, and the bundled pointwise chain fell behind Inductor's on a Xeon VM that LLVM
names `rocketlake` (benchmarks/RESULTS.md, the CPU section). AMD's Zen 4 tuning has no such
preference."""


@cache
def host_cpu() -> tuple[str, str]:
    """This CPU's name and its features (AVX2, AVX-512, FMA, ...) as LLVM names them, vectors
    of full width where it has AVX-512 (`FULL_WIDTH`): asked once per process (LLVM's query is
    slow, and a warm start loads many kernels)."""
    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):
        features += "," + FULL_WIDTH
    return llvm.get_host_cpu_name(), features


def new_host_target_machine(opt: int = 3) -> llvm.TargetMachine:
    """A target machine for this CPU (`host_cpu`). An MCJIT engine takes ownership of the one
    it is created with, so each engine needs its own."""
    _initialize_native()
    target = llvm.Target.from_default_triple()
    name, features = host_cpu()
    return target.create_target_machine(
        cpu=name,
        features=features,
        opt=opt,
        reloc="static",
        codemodel="jitdefault",
    )


def host_target_name() -> str:
    """`cpu-<arch>-<cpu name>-<hash of the feature set>`: code for one is wrong for another."""
    name, features = host_cpu()
    digest = hashlib.sha256(features.encode()).hexdigest()[:12]
    arch = llvm.get_default_triple().split("-")[0]
    return f"cpu-{arch}-{name}-{digest}"


def to_llvm_module(module: ModuleOp, tm: llvm.TargetMachine) -> ir.Module:
    """An llvmlite module of a module of `llvm.func`/`llvm.mlir.global`, for the target's
    triple (a backend may add functions to it before printing it)."""
    converted = convert_module(
        module, fallback_target_triple=tm.triple, data_layout=str(tm.target_data)
    )
    for value in converted.global_values:
        # xDSL 0.74 prints `external` linkage on definitions, which LLVM only accepts on
        # declarations: a defined external global has the default (empty) linkage.
        if isinstance(value, ir.GlobalVariable) and value.initializer is not None:
            if value.linkage == "external":
                value.linkage = ""
    return converted


def to_llvm_ir(module: ModuleOp, tm: llvm.TargetMachine) -> str:
    """LLVM IR text of a module of `llvm.func`/`llvm.mlir.global`, for the target's triple."""
    return str(to_llvm_module(module, tm))


def parse_verified(ir: str) -> llvm.ModuleRef:
    module = llvm.parse_assembly(ir)
    module.verify()
    return module


def optimize(ir: str, tm: llvm.TargetMachine, speed_level: int = 3) -> llvm.ModuleRef:
    """Parse, verify and run the O`speed_level` pipeline with loop and SLP vectorization."""
    module = parse_verified(ir)
    tuning = llvm.PipelineTuningOptions(speed_level=speed_level)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_interleaving = True
    tuning.loop_unrolling = True
    pass_builder = llvm.create_pass_builder(tm, tuning)
    pass_builder.getModulePassManager().run(module, pass_builder)
    module.verify()
    return module


def emit_object(module: llvm.ModuleRef, tm: llvm.TargetMachine) -> bytes:
    return bytes(tm.emit_object(module))


def emit_assembly(module: llvm.ModuleRef, tm: llvm.TargetMachine) -> str:
    return tm.emit_assembly(module)
