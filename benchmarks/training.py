"""
Training steps through `torch.compile`: eager, Inductor and xfuse side by side in one process,
interleaved (forward, backward and an AdamW step, `zero_grad(set_to_none=True)`):

    python -m benchmarks.training [--device cpu|cuda] [--models gpt2,bert,llama]
                                  [--size tiny|small|base] [--runs 20] [--dtype f32|bf16]
                                  [--profile]

Models are transformers' (configs, random weights, never downloaded); xfuse runs in strict
mode (`xfuse.testing.distributed.compiled`: a part or group that would run eagerly raises).
`tiny`: 2 layers, 64 wide, 2x32 tokens (the CPU); `small`: 4 layers, 512 wide, 8x256 tokens
(the GPU); `base`: 4 layers, 768 wide, 8x1024 tokens. `--dtype bf16` runs forward and loss
under autocast. Each row: the median ms per step (the GPU waited for), and the first step's
seconds (compiles included); on CUDA, how many of xfuse's programs replay a CUDA graph, and
why the others do not.
`--profile` (CUDA) adds, per column, the GPU operations per step, their busy ms, and the
heaviest kernels by GPU ms per step.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.timing import interleaved, medians, sync, wall_and_host_ms
from xfuse.testing.distributed import counting_parts

SIZES: dict[str, dict[str, int]] = {
    "tiny": {"layers": 2, "width": 64, "heads": 2, "batch": 2, "tokens": 32, "vocab": 1000},
    "small": {"layers": 4, "width": 512, "heads": 8, "batch": 8, "tokens": 256, "vocab": 8000},
    "base": {"layers": 4, "width": 768, "heads": 12, "batch": 8, "tokens": 1024, "vocab": 50304},
}
DTYPES = {"f32": None, "bf16": torch.bfloat16}


def make_model(name: str, size: dict[str, int]) -> torch.nn.Module:
    import transformers

    layers, width, heads, vocab = size["layers"], size["width"], size["heads"], size["vocab"]
    tokens = size.get("tokens", 0)  # positions: at least the sequence length
    if name == "gpt2":
        config: Any = transformers.GPT2Config(
            n_layer=layers,
            n_embd=width,
            n_head=heads,
            vocab_size=vocab,
            n_positions=max(1024, tokens),
        )
        return transformers.GPT2LMHeadModel(config)
    if name == "bert":
        config = transformers.BertConfig(
            num_hidden_layers=layers,
            hidden_size=width,
            num_attention_heads=heads,
            intermediate_size=4 * width,
            vocab_size=vocab,
            max_position_embeddings=max(512, tokens),
        )
        return transformers.BertForMaskedLM(config)
    if name == "llama":
        config = transformers.LlamaConfig(
            num_hidden_layers=layers,
            hidden_size=width,
            intermediate_size=3 * width,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            vocab_size=vocab,
        )
        return transformers.LlamaForCausalLM(config)
    raise SystemExit(f"unknown model {name!r} (gpt2, bert, llama)")


def stepper(
    model: torch.nn.Module, ids: torch.Tensor, dtype: torch.dtype | None = None
) -> Callable[[], None]:
    """One training step of `model` (AdamW) on `ids` as input and labels, forward and loss
    under autocast to `dtype` (None: off)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cast = (
        contextlib.nullcontext
        if dtype is None
        else functools.partial(torch.autocast, ids.device.type, dtype=dtype)
    )

    def step() -> None:
        with cast():
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def columns(
    base: torch.nn.Module, ids: torch.Tensor, wanted: list[str], dtype: torch.dtype | None
) -> dict[str, Any]:
    import xfuse  # noqa: F401 - registers the backend
    from xfuse.testing.distributed import compiled

    steps: dict[str, Any] = {}
    for column in wanted:
        model = copy.deepcopy(base).train()
        if column != "eager":
            model = compiled(model, column)
        steps[column] = stepper(model, ids, dtype)
    return steps


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--models", default="gpt2,bert,llama")
    p.add_argument("--size", default=None, choices=list(SIZES))
    p.add_argument("--columns", default="eager,inductor,xfuse")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--dtype", default="f32", choices=list(DTYPES))
    p.add_argument("--profile", action="store_true")
    args = p.parse_args(argv)
    size = SIZES[args.size or ("small" if args.device.startswith("cuda") else "tiny")]
    print(f"device {args.device}, torch {torch.__version__}, {args.dtype}, size {size}")
    for name in args.models.split(","):
        torch.manual_seed(0)
        base = make_model(name, size).to(args.device)
        ids = torch.randint(0, size["vocab"], (size["batch"], size["tokens"]), device=args.device)
        steps = columns(base, ids, args.columns.split(","), DTYPES[args.dtype])
        first: dict[str, float] = {}
        with counting_parts() as parts:
            for column, step in steps.items():
                start = time.perf_counter()
                step()
                sync()
                first[column] = time.perf_counter() - start
            times = interleaved(steps, args.runs, warmup=2, clock=wall_and_host_ms)
        wall = medians({c: [w for w, _ in ts] for c, ts in times.items()})
        row = "  ".join(f"{c} {wall[c]:.2f} (first {first[c]:.1f}s)" for c in steps)
        ratio = wall.get("xfuse", 0) / wall["inductor"] if "inductor" in wall else float("nan")
        print(f"{name}: {row}  xfuse/inductor {ratio:.2f}", flush=True)
        if parts.graph_use():
            print(f"  xfuse: {parts.graph_use()}")
        if args.profile:
            for column, step in steps.items():
                if args.device.startswith("cuda"):
                    print_profile(column, step)
                else:
                    print_cpu_profile(column, step)


def print_profile(column: str, step: Callable[[], None], calls: int = 3, top: int = 12) -> None:
    """GPU operations per step, their busy ms, and the heaviest kernels."""
    from benchmarks.model_profile import profile_calls

    found = profile_calls(step, calls)
    print(f"  {column}: {found.kernels:.0f} GPU ops/step, busy {found.gpu_ms:.2f} ms")
    heaviest = sorted(found.by_name.items(), key=lambda kv: -kv[1])[:top]
    for kernel, ms in heaviest:
        print(f"    {ms:7.3f} ms  {kernel[:110]}")


def print_cpu_profile(column: str, step: Callable[[], None], calls: int = 5, top: int = 14) -> None:
    """The CPU ops (torch's, and xfuse's kernel launches) of most own time per step."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            step()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events) / 1000 / calls
    print(f"  {column}: {total:.2f} ms of op time/step")
    for e in events[:top]:
        ms = e.self_cpu_time_total / 1000 / calls
        print(f"    {ms:7.3f} ms  {e.count // calls:4d}x  {e.key[:100]}")


if __name__ == "__main__":
    main()
