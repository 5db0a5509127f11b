"""
How each CUDA kernel of a model maps onto the grid (`gpu-map-parallel`'s strategy), found on
the CPU: no GPU needed. A kernel mapped `serial` whose body keeps loops (one thread walks a
row or a window) is fine with many threads, and slow with few: EdgeNeXt's layer norm over a
concat of four channel chunks took 0.28 ms so, 1568 threads walking 304 channels four times,
until a select inside a select mapped as rows. Those are the rows marked `!!`.

    python -m benchmarks.cuda_mapping [--models segformer:32,opt:8x512,...]

A model is `name:batch` for an image model (224x224) or `name:BxS` for a text model (token
ids), from transformers' configs (random weights, never downloaded); text models keep two
layers, which repeat.
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import IntegerAttr

from benchmarks.families import hf_text, hf_vision
from xfuse.frontend.export import import_for_xfuse
from xfuse.ir.constants import int_constant
from xfuse.ir.names import ITEMS_ATTR, KERNEL_ATTR
from xfuse.passes.lowering.gpu_map_parallel import GPUMapping, map_kernel
from xfuse.pipeline import compile_pipeline
from xfuse.runtime.compiler import is_fresh_view, lower_to_loops

Make = Callable[[], torch.nn.Module]

VISION: dict[str, Make] = {
    "segformer": hf_vision("SegformerConfig", "SegformerModel"),
    "levit": hf_vision("LevitConfig", "LevitModel"),
    "poolformer": hf_vision("PoolFormerConfig", "PoolFormerModel"),
    "convnextv2": hf_vision("ConvNextV2Config", "ConvNextV2Model"),
    "cvt": hf_vision("CvtConfig", "CvtModel"),
    "focalnet": hf_vision("FocalNetConfig", "FocalNetModel"),
    "beit": hf_vision("BeitConfig", "BeitModel", num_hidden_layers=2),
    "mobilevit": hf_vision("MobileViTConfig", "MobileViTModel"),
    "regnet": hf_vision("RegNetConfig", "RegNetModel"),
    "swinv2": hf_vision("Swinv2Config", "Swinv2Model"),
    "efficientnet": hf_vision(
        "EfficientNetConfig",
        "EfficientNetModel",
        width_coefficient=1.0,
        depth_coefficient=1.0,
        hidden_dim=1280,
    ),
}
TEXT: dict[str, Make] = {
    "deberta_v2": hf_text("DebertaV2Config", "DebertaV2Model", num_hidden_layers=2),
    "bloom": hf_text("BloomConfig", "BloomModel", n_layer=2),
    "falcon": hf_text("FalconConfig", "FalconModel", num_hidden_layers=2),
    "opt": hf_text("OPTConfig", "OPTModel", num_hidden_layers=2),
    "bart": hf_text("BartConfig", "BartModel", encoder_layers=2, decoder_layers=2),
    "funnel": hf_text("FunnelConfig", "FunnelModel", block_sizes=[1, 1, 1]),
    "xlnet": hf_text("XLNetConfig", "XLNetModel", n_layer=2),
}
DEFAULT = "segformer:32,poolformer:1,convnextv2:32,focalnet:32,opt:8x512,falcon:8x512"


def inputs_for(name: str, size: str) -> tuple[torch.Tensor, ...]:
    if name in VISION:
        return (torch.randn(int(size), 3, 224, 224),)
    batch, tokens = (int(n) for n in size.split("x"))
    return (torch.randint(0, 1000, (batch, tokens)),)


def mapped(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> list[tuple[str, Any]]:
    """(strategy, (threads, inner loop lengths)) of each CUDA kernel of the model."""
    with torch.no_grad():
        module = import_for_xfuse(model, inputs).program.module
    compile_pipeline("cuda")(module)
    lower_to_loops(module, "cuda", leave=is_fresh_view)  # lone views stay torch views
    rows = []
    for kernel in [op for op in module.ops if isinstance(op, func.FuncOp)]:
        if KERNEL_ATTR not in kernel.attributes:
            continue
        loops = [int_constant(op.ub) for op in kernel.walk() if isinstance(op, scf.ForOp)]
        strategy = map_kernel(kernel, module)
        items = kernel.attributes.get(ITEMS_ATTR)
        threads = items.value.data if isinstance(items, IntegerAttr) else None
        rows.append((strategy, (kernel.sym_name.data, threads, loops)))
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--models", default=DEFAULT)
    a = p.parse_args(argv)
    few = GPUMapping().min_threads
    for spec in a.models.split(","):
        name, size = spec.split(":")
        start = time.perf_counter()
        rows = mapped((VISION.get(name) or TEXT[name])().eval(), inputs_for(name, size))
        counts = Counter(strategy for strategy, _ in rows)
        print(f"{name} {size}: {dict(counts)} ({time.perf_counter() - start:.0f} s)", flush=True)
        for strategy, (kernel, threads, loops) in rows:
            if strategy == "serial" and loops:
                mark = "!!" if threads is not None and threads < few else "  "
                work = math.prod(n for n in loops if n is not None)
                print(f"  {mark} {kernel}: {threads} threads, loops {loops} ({work} steps)")


if __name__ == "__main__":
    main()
