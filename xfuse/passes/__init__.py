"""
xfuse's passes, one module each, in one folder per level of the pipeline:

    transforms/  graph -> graph              decompose, simplify, split-reductions, reduction-cse,
                                             fold-linear, channels-last, depthwise-stencil,
                                             attention-gqa, attention-mask, convolution-matmul,
                                             pad-matmul, convolution-bias
    fusion/      graph -> fusion.group       fuse-greedy, fuse-scored, group-cleanup, fusion-report
    lowering/    fusion.group -> loops       lower-to-loops; loops -> GPU: gpu-map-parallel
    llvm/        loops -> llvm dialect       lower-to-llvm (CPU), lower-to-nvvm (CUDA), expand-math,
                                             convert-{arith,cf,func,math,memref}-to-llvm

`get_all_passes()` is the explicit registry (name -> a function returning the pass class), as
`xdsl.transforms.get_all_passes` is: nothing is imported until a pass is asked for by name.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Every xfuse pass, by its `name`; the values import the pass module on first use."""

    def decompose() -> type[ModulePass]:
        from xfuse.passes.transforms.decompose import DecomposePass

        return DecomposePass

    def simplify() -> type[ModulePass]:
        from xfuse.passes.transforms.simplify import SimplifyPass

        return SimplifyPass

    def split_reductions() -> type[ModulePass]:
        from xfuse.passes.transforms.split_reductions import SplitReductionsPass

        return SplitReductionsPass

    def reduction_cse() -> type[ModulePass]:
        from xfuse.passes.transforms.reduction_cse import ReductionCSEPass

        return ReductionCSEPass

    def fold_linear() -> type[ModulePass]:
        from xfuse.passes.transforms.fold_linear import FoldLinearPass

        return FoldLinearPass

    def channels_last() -> type[ModulePass]:
        from xfuse.passes.transforms.channels_last import ChannelsLastPass

        return ChannelsLastPass

    def depthwise_stencil() -> type[ModulePass]:
        from xfuse.passes.transforms.depthwise_stencil import DepthwiseStencilPass

        return DepthwiseStencilPass

    def attention_gqa() -> type[ModulePass]:
        from xfuse.passes.transforms.attention_gqa import AttentionGQAPass

        return AttentionGQAPass

    def attention_mask() -> type[ModulePass]:
        from xfuse.passes.transforms.attention_mask import AttentionMaskPass

        return AttentionMaskPass

    def convolution_matmul() -> type[ModulePass]:
        from xfuse.passes.transforms.convolution_matmul import ConvolutionMatmulPass

        return ConvolutionMatmulPass

    def pad_matmul() -> type[ModulePass]:
        from xfuse.passes.transforms.pad_matmul import PadMatmulPass

        return PadMatmulPass

    def convolution_bias() -> type[ModulePass]:
        from xfuse.passes.transforms.convolution_bias import ConvolutionBiasPass

        return ConvolutionBiasPass

    def fuse_greedy() -> type[ModulePass]:
        from xfuse.passes.fusion.fuse_greedy import FuseGreedyPass

        return FuseGreedyPass

    def fuse_scored() -> type[ModulePass]:
        from xfuse.passes.fusion.fuse_scored import FuseScoredPass

        return FuseScoredPass

    def group_cleanup() -> type[ModulePass]:
        from xfuse.passes.fusion.group_cleanup import GroupCleanupPass

        return GroupCleanupPass

    def fusion_report() -> type[ModulePass]:
        from xfuse.passes.fusion.fusion_report import FusionReportPass

        return FusionReportPass

    def lower_to_loops() -> type[ModulePass]:
        from xfuse.passes.lowering.lower_to_loops import LowerToLoopsPass

        return LowerToLoopsPass

    def gpu_map_parallel() -> type[ModulePass]:
        from xfuse.passes.lowering.gpu_map_parallel import GPUMapParallelPass

        return GPUMapParallelPass

    def lower_to_llvm() -> type[ModulePass]:
        from xfuse.passes.llvm.lower_to_llvm import LowerToLLVMPass

        return LowerToLLVMPass

    def lower_to_nvvm() -> type[ModulePass]:
        from xfuse.passes.llvm.lower_to_nvvm import LowerToNVVMPass

        return LowerToNVVMPass

    def expand_math() -> type[ModulePass]:
        from xfuse.passes.llvm.expand_math import ExpandMathPass

        return ExpandMathPass

    def convert_arith_to_llvm() -> type[ModulePass]:
        from xfuse.passes.llvm.convert_arith_to_llvm import ConvertArithToLLVMPass

        return ConvertArithToLLVMPass

    def convert_cf_to_llvm() -> type[ModulePass]:
        from xfuse.passes.llvm.convert_cf_to_llvm import ConvertCfToLLVMPass

        return ConvertCfToLLVMPass

    def convert_func_to_llvm() -> type[ModulePass]:
        from xfuse.passes.llvm.convert_func_to_llvm import ConvertFuncToLLVMPass

        return ConvertFuncToLLVMPass

    def convert_math_to_llvm() -> type[ModulePass]:
        from xfuse.passes.llvm.convert_math_to_llvm import ConvertMathToLLVMPass

        return ConvertMathToLLVMPass

    def convert_memref_to_llvm() -> type[ModulePass]:
        from xfuse.passes.llvm.convert_memref_to_llvm import ConvertMemRefToLLVMPass

        return ConvertMemRefToLLVMPass

    return {
        "decompose": decompose,
        "simplify": simplify,
        "split-reductions": split_reductions,
        "reduction-cse": reduction_cse,
        "fold-linear": fold_linear,
        "channels-last": channels_last,
        "depthwise-stencil": depthwise_stencil,
        "pad-matmul": pad_matmul,
        "convolution-bias": convolution_bias,
        "attention-gqa": attention_gqa,
        "attention-mask": attention_mask,
        "convolution-matmul": convolution_matmul,
        "fuse-greedy": fuse_greedy,
        "fuse-scored": fuse_scored,
        "group-cleanup": group_cleanup,
        "fusion-report": fusion_report,
        "lower-to-loops": lower_to_loops,
        "gpu-map-parallel": gpu_map_parallel,
        "lower-to-llvm": lower_to_llvm,
        "lower-to-nvvm": lower_to_nvvm,
        "expand-math": expand_math,
        "convert-arith-to-llvm": convert_arith_to_llvm,
        "convert-cf-to-llvm": convert_cf_to_llvm,
        "convert-func-to-llvm": convert_func_to_llvm,
        "convert-math-to-llvm": convert_math_to_llvm,
        "convert-memref-to-llvm": convert_memref_to_llvm,
    }
