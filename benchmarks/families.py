"""
Third-party models of every family through `torch.compile(backend="xfuse")`, at the sizes people
run (throughput: images 32x3x224x224, text 8x512 tokens; latency: batch 1), against eager,
Inductor and Inductor's reduce-overhead, side by side in one process:

    python -m benchmarks.families [--device cuda] [--dtype bf16|f32] [--sizes throughput,latency]
                                  [--models convnext_t,...] [--columns eager,inductor,...]
                                  [--profile] [--host-profile] [--runs 20] [--channels-last]

Models come from torchvision and timm where installed (the GPU machine) and from transformers
(configs, random weights, never downloaded) everywhere. Each row: the median ms per forward
(whole calls, host time included, the GPU waited for), the host ms of a call (the GPU not
waited for), with `--profile` each column's GPU busy time, operation count and ten slowest
GPU kernels (torch.profiler), and with `--host-profile` a cProfile of xfuse's calls. A column whose first call warned
`FallbackWarning` (part of the model ran eagerly) is named under its row.
Columns: `eager`, `inductor`, `inductor-ro` (reduce-overhead), `xfuse` (torch.compile), `xfuse.compile`
(xfuse's own entry point), `no-stencil` (xfuse.compile without `depthwise-stencil`) and
`torch-gemm` (xfuse.compile with every matrix product torch's call: `PipelineOptions.gemm_ways`).
`--channels-last` lays image models and their inputs out channels-last
(`model.to(memory_format=torch.channels_last)`), as torch's performance guides advise.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.timing import bound, interleaved, median_columns, sync, wall_and_host_ms
from xfuse.errors import FallbackWarning

Tensor = torch.Tensor
Fn = Callable[..., Any]

IMAGE = {"throughput": 32, "latency": 1}
TEXT = {"throughput": (8, 512), "latency": (1, 128)}


def _tv(name: str) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        import torchvision.models as tvm

        return getattr(tvm, name)(weights=None)

    return make


def _timm(name: str) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        import timm

        return timm.create_model(name, pretrained=False)

    return make


def hf_vision(config: str, model: str, **kw: Any) -> Callable[[], torch.nn.Module]:
    """A transformers vision model built from its config class, with random weights."""

    def make() -> torch.nn.Module:
        import transformers

        cfg = getattr(transformers, config)(**kw)
        return getattr(transformers, model)(cfg)

    return make


def hf_text(config: str, model: str, **kw: Any) -> Callable[[], torch.nn.Module]:
    """A transformers language model from its config class; returns its first output tensor."""

    def make() -> torch.nn.Module:
        import transformers

        cfg = getattr(transformers, config)(**kw)
        return _Logits(getattr(transformers, model)(cfg))

    return make


class _Logits(torch.nn.Module):
    """A language model's first output tensor (logits or hidden states), from token ids."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor) -> Tensor:
        out = self.model(input_ids=ids)
        return out[0]


IMAGES: dict[str, Callable[[], torch.nn.Module]] = {
    "resnet18_tv": _tv("resnet18"),
    "resnet50_tv": _tv("resnet50"),
    "convnext_t_tv": _tv("convnext_tiny"),
    "efficientnet_b0_timm": _timm("efficientnet_b0"),
    "mobilenetv3_timm": _timm("mobilenetv3_large_100"),
    "regnet_tv": _tv("regnet_y_800mf"),
    "swin_t_timm": _timm("swin_tiny_patch4_window7_224"),
    "vit_b_tv": _tv("vit_b_16"),
    "deit_s_timm": _timm("deit_small_patch16_224"),
    "convnextv2_t_timm": _timm("convnextv2_tiny"),
    "mobilevit_s_timm": _timm("mobilevit_s"),
    "poolformer_s12_timm": _timm("poolformer_s12"),
    "swinv2_cr_t_timm": _timm("swinv2_cr_tiny_224"),
    "resnext50_tv": _tv("resnext50_32x4d"),
    "densenet121_tv": _tv("densenet121"),
    "shufflenet_v2_tv": _tv("shufflenet_v2_x1_0"),
    "mnasnet_tv": _tv("mnasnet1_0"),
    "ghostnet_timm": _timm("ghostnet_100"),
    "pvt_v2_b0_timm": _timm("pvt_v2_b0"),
    "mixer_b16_timm": _timm("mixer_b16_224"),
    "edgenext_s_timm": _timm("edgenext_small"),
    "efficientvit_b0_timm": _timm("efficientvit_b0"),
    "regnety_016_timm": _timm("regnety_016"),
    "convnext_hf": hf_vision("ConvNextConfig", "ConvNextModel"),
    "efficientnet_hf": hf_vision(  # B0 (the config's defaults are B7's)
        "EfficientNetConfig",
        "EfficientNetModel",
        width_coefficient=1.0,
        depth_coefficient=1.0,
        hidden_dim=1280,
    ),
    "mobilenetv2_hf": hf_vision("MobileNetV2Config", "MobileNetV2Model"),
    "swin_hf": hf_vision("SwinConfig", "SwinModel"),
    "segformer_hf": hf_vision("SegformerConfig", "SegformerModel"),
    "resnet_hf": hf_vision("ResNetConfig", "ResNetModel"),  # ResNet-50
    "regnet_hf": hf_vision("RegNetConfig", "RegNetModel"),
    "vit_hf": hf_vision("ViTConfig", "ViTModel"),  # ViT-B/16
}
TEXTS: dict[str, Callable[[], torch.nn.Module]] = {
    "gpt2_hf": hf_text("GPT2Config", "GPT2LMHeadModel", n_layer=4),
    "llama_hf": hf_text(
        "LlamaConfig",
        "LlamaForCausalLM",
        num_hidden_layers=4,
        hidden_size=1024,
        intermediate_size=2816,
        num_attention_heads=16,
        num_key_value_heads=4,
        vocab_size=32000,
    ),
    "bert_hf": hf_text("BertConfig", "BertModel", num_hidden_layers=4),
    "qwen2_hf": hf_text(
        "Qwen2Config",
        "Qwen2ForCausalLM",
        num_hidden_layers=4,
        hidden_size=896,
        intermediate_size=4864,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=32000,
    ),
    "t5_encoder_hf": hf_text("T5Config", "T5EncoderModel", num_layers=4),
}


def inputs_for(name: str, size: str, device: str, dtype: torch.dtype) -> tuple[Tensor, ...]:
    if name in TEXTS:
        b, s = TEXT[size]
        return (torch.randint(0, 1000, (b, s), device=device),)
    return (torch.randn(IMAGE[size], 3, 224, 224, device=device, dtype=dtype),)


def gpu_kernels(fn: Fn, args: tuple[Tensor, ...]) -> dict[str, list[float]]:
    """The GPU operations of one call of `fn` (graph replays included): name -> ms of each."""
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.model_profile import gpu_operations

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    rows: dict[str, list[float]] = {}
    for name, us in gpu_operations(prof):
        rows.setdefault(name[:90], []).append(us / 1000)
    return rows


def top_kernels(rows: dict[str, list[float]], count: int = 10) -> list[tuple[str, float, int]]:
    """The `count` kernels of most GPU time: (name, ms, launches)."""
    ranked = sorted(rows.items(), key=lambda kv: -sum(kv[1]))[:count]
    return [(n, sum(t), len(t)) for n, t in ranked]


def host_profile(fn: Fn, args: tuple[Tensor, ...], calls: int = 50, count: int = 14) -> str:
    """A cProfile of `calls` calls of `fn` (the GPU waited for after each), by own time."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    for _ in range(calls):
        profiler.enable()
        fn(*args)
        profiler.disable()
        sync()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(count)
    return out.getvalue()


def columns(
    model: torch.nn.Module, args: tuple[Tensor, ...], device: str, wanted: list[str]
) -> dict[str, Fn]:
    import xfuse
    from xfuse.pipeline import PipelineOptions
    from xfuse.runtime.driver import compile_program

    fns: dict[str, Fn] = {}
    for c in wanted:
        if c == "eager":
            fns[c] = model
        elif c == "inductor":
            fns[c] = torch.compile(model, backend="inductor")
        elif c == "inductor-ro":
            fns[c] = torch.compile(model, backend="inductor", mode="reduce-overhead")
        elif c == "xfuse":
            fns[c] = torch.compile(model, backend="xfuse")
        elif c == "xfuse.compile":
            fns[c] = xfuse.compile(model, args, device, quiet=True)
        elif c == "no-stencil":
            # compile's pipeline without its `depthwise-stencil` pass
            options = PipelineOptions(without=("depthwise-stencil",))
            fns[c] = compile_program(model, args, torch.device(device), options, quiet=True)
        elif c == "torch-gemm":
            options = PipelineOptions(gemm_ways=False)
            fns[c] = compile_program(model, args, torch.device(device), options, quiet=True)
    return fns


def dump(program: Any, path: str) -> None:
    """Every kernel of `program` (its group's ops and loop IR) and its measured choices."""
    from xfuse.runtime.compiler import kernel_name

    compiled = program.default.program
    with open(path, "w") as out:
        for choice in program.report.choices:
            out.write(f"measured: {choice}\n")
        for k in compiled.kernels:
            ops = compiled.groups[k.group].ops if k.group is not None else [k.source]
            out.write(f"==== {kernel_name(ops, k.symbol)} {k.name} ops {ops}\n{k.loop_ir}\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    p.add_argument("--sizes", default="throughput,latency")
    p.add_argument("--models", default=",".join([*IMAGES, *TEXTS]))
    p.add_argument("--columns", default="eager,inductor,inductor-ro,xfuse,xfuse.compile")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--host-profile", action="store_true", help="a cProfile of xfuse's calls")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--dump", help="a folder: xfuse.compile's kernels' loop IR and choices")
    p.add_argument(
        "--channels-last",
        action="store_true",
        help="image models and inputs in channels-last memory, as performance guides advise",
    )
    a = p.parse_args(argv)
    dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[a.dtype]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    wanted = a.columns.split(",")
    print(
        f"device {a.device} ({torch.cuda.get_device_name() if a.device == 'cuda' else 'cpu'}), "
        f"torch {torch.__version__}, {a.dtype}, columns {wanted}"
        + (", images channels-last" if a.channels_last else ""),
        flush=True,
    )
    for name in a.models.split(","):
        make = IMAGES.get(name) or TEXTS[name]
        try:
            model = make().eval().to(a.device)
        except Exception as e:  # noqa: BLE001 - a model this machine lacks
            print(f"{name}: not built: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        if name in IMAGES:
            model = model.to(dtype)
            if a.channels_last:
                model = model.to(memory_format=torch.channels_last)
        elif dtype != torch.float32:
            model = model.to(dtype)
        for size in a.sizes.split(","):
            args = inputs_for(name, size, a.device, dtype)
            if a.channels_last and name in IMAGES:
                args = tuple(x.contiguous(memory_format=torch.channels_last) for x in args)
            torch._dynamo.reset()
            with torch.no_grad():
                start = time.perf_counter()
                try:
                    fns = columns(model, args, a.device, wanted)
                    compile_s = {}
                    fallbacks: dict[str, int] = {}
                    for n, fn in fns.items():
                        t0 = time.perf_counter()
                        with warnings.catch_warnings(record=True) as caught:
                            warnings.simplefilter("always", FallbackWarning)
                            fn(*args)
                        sync()
                        compile_s[n] = time.perf_counter() - t0
                        fallbacks[n] = sum(isinstance(w.message, FallbackWarning) for w in caught)
                    calls = bound(fns, args)
                    result = median_columns(interleaved(calls, a.runs, clock=wall_and_host_ms))
                except Exception as e:  # noqa: BLE001 - report and go on to the next model
                    print(
                        f"{name} {size}: failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                        flush=True,
                    )
                    continue
                cells = "  ".join(
                    f"{n} {w:.2f} (host {h:.2f}, first {compile_s[n]:.1f}s)"
                    for n, (w, h) in result.items()
                )
                print(f"{name} {size}: {cells}", flush=True)
                for n, count in fallbacks.items():
                    if count:
                        print(f"  {n}: {count} FallbackWarning(s): ran parts eagerly", flush=True)
                if a.dump and "xfuse.compile" in fns:
                    dump(fns["xfuse.compile"], f"{a.dump}/{name}_{size}.txt")
                if a.profile and a.device == "cuda":
                    profiled = ("xfuse", "xfuse.compile", "inductor-ro", "inductor", "eager")
                    for col in [c for c in profiled if c in fns]:
                        rows = gpu_kernels(fns[col], args)
                        busy = sum(sum(t) for t in rows.values())
                        launches = sum(len(t) for t in rows.values())
                        print(f"  {col}: GPU busy {busy:.3f} ms in {launches} operations; top:")
                        for kname, ms, n in top_kernels(rows):
                            print(f"    {ms:8.3f} ms {n:4d}x  {kname}")
                if a.host_profile and "xfuse" in fns:
                    print(host_profile(fns["xfuse"], args), flush=True)
            print(f"  ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
