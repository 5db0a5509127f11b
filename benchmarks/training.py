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
why the others do not, and each column's memory: what it holds between steps (parameters,
AdamW's state, compiled programs' CUDA-graph pools and caches: the allocator's bytes after its
warm-up steps less before its model was copied) and its peak (that plus the most a step
allocates above it), as if the column ran alone.
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
from typing import Any, NamedTuple

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


class Column(NamedTuple):
    """A column's step, its first step's seconds, and the CUDA bytes it holds between steps
    (0 off CUDA)."""

    step: Callable[[], None]
    first_s: float
    held: int


def allocated(device: torch.device) -> int:
    """The CUDA caching allocator's bytes in use on `device`, the GPU idle (0 off CUDA)."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    return torch.cuda.memory_allocated(device)


def step_peak(step: Callable[[], None], device: torch.device) -> int:
    """The most bytes one call of `step` allocates above what was in use before it (0 off
    CUDA)."""
    if device.type != "cuda":
        return 0
    before = allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def columns(
    base: torch.nn.Module,
    ids: torch.Tensor,
    wanted: list[str],
    dtype: torch.dtype | None,
    warmup: int = 2,
) -> dict[str, Column]:
    """Each column's model copied from `base`, compiled, and stepped once (timed) and `warmup`
    more times, one column after another, so that what each holds afterwards is its own."""
    import xfuse  # noqa: F401 - registers the backend
    from xfuse.testing.distributed import compiled

    made: dict[str, Column] = {}
    for column in wanted:
        before = allocated(ids.device)
        model = copy.deepcopy(base).train()
        if column != "eager":
            model = compiled(model, column)
        step = stepper(model, ids, dtype)
        start = time.perf_counter()
        step()
        sync()
        first = time.perf_counter() - start
        for _ in range(warmup):
            step()
        made[column] = Column(step, first, allocated(ids.device) - before)
    return made


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
        with counting_parts() as parts:
            made = columns(base, ids, args.columns.split(","), DTYPES[args.dtype])
            steps = {c: m.step for c, m in made.items()}
            times = interleaved(steps, args.runs, clock=wall_and_host_ms)
        wall = medians({c: [w for w, _ in ts] for c, ts in times.items()})
        row = "  ".join(f"{c} {wall[c]:.2f} (first {made[c].first_s:.1f}s)" for c in steps)
        ratio = wall.get("xfuse", 0) / wall["inductor"] if "inductor" in wall else float("nan")
        print(f"{name}: {row}  xfuse/inductor {ratio:.2f}", flush=True)
        if parts.graph_use():
            print(f"  xfuse: {parts.graph_use()}")
        if ids.device.type == "cuda":
            print_memory(made, ids.device)
        if args.profile:
            for column, step in steps.items():
                if args.device.startswith("cuda"):
                    print_profile(column, step)
                else:
                    print_cpu_profile(column, step)


def print_memory(made: dict[str, Column], device: torch.device) -> None:
    """Each column's MiB held between steps and its peak (held plus a step's most above it),
    and the peak against Inductor's."""
    mib = 2**20
    peaks = {c: m.held + step_peak(m.step, device) for c, m in made.items()}
    row = "  ".join(f"{c} {made[c].held / mib:.0f} / {peaks[c] / mib:.0f}" for c in made)
    ratio = peaks["xfuse"] / peaks["inductor"] if {"xfuse", "inductor"} <= peaks.keys() else None
    tail = f"  peak xfuse/inductor {ratio:.2f}" if ratio is not None else ""
    print(f"  memory MiB (held / peak): {row}{tail}", flush=True)


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
