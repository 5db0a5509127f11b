"""
Scaled dot-product attention, in every form torch may hand the importer.

`aten.scaled_dot_product_attention` is kept whole (not decomposed) and runs as an extern
`graph.torch_call`: torch picks its fused kernel for the device at run time. The kernels it may
have been decomposed to already (flash, memory-efficient, cuDNN, the CPU flash kernel, math,
the overrideable one) return extra results (log-sum-exp, RNG state, sizes); where only the
attention output is read and there is no dropout, each becomes that same extern call, and its
extra results are dropped. Otherwise the node stays a `graph.torch_call` of itself.
"""

from __future__ import annotations

from typing import Any

import torch.fx

from xfuse.frontend.builder import ImportBuilder, Value, used_outputs

SDPA = "aten.scaled_dot_product_attention.default"

SDPA_KERNELS: tuple[str, ...] = (
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_attention_math.default",
    "aten._scaled_dot_product_fused_attention_overrideable.default",
)


def _sdpa_kernel(lw: ImportBuilder, node: torch.fx.Node, a: dict[str, Any]) -> Value:
    """One SDPA kernel as the extern `scaled_dot_product_attention` call, extra results None."""
    mask = a.get("attn_mask", a.get("attn_bias"))
    if a.get("dropout_p", 0.0) != 0.0 or a.get("dropout_mask") is not None:
        return None
    if used_outputs(node) - {0}:
        return None
    kwargs = {"scale": a.get("scale"), "enable_gqa": bool(a.get("enable_gqa", False))}
    args = [a["query"], a["key"], a["value"], mask, 0.0, bool(a.get("is_causal", False))]
    (out,) = lw.torch_call(SDPA, args, kwargs, [node.meta["val"][0]], node)
    n_results = len(node.meta["val"])
    return [out, *([None] * (n_results - 1))]


ATTENTION_CONVERTERS = {name: _sdpa_kernel for name in SDPA_KERNELS}
