"""
Data-parallel training steps through `torch.compile` on several GPUs (or CPU processes): eager,
Inductor and xfuse side by side in each process, interleaved step by step, each column its own
copy of the model (same initial weights) wrapped by DDP or sharded by FSDP2
(`xfuse.testing.distributed`). Run with torchrun, one process per GPU:

    torchrun --nproc-per-node 2 -m benchmarks.distributed --strategy ddp|fsdp2
        [--model gpt2|llama|bert] [--layers 12] [--width 768] [--batch 8] [--tokens 1024]
        [--dtype bf16|f32] [--steps 50] [--columns eager,inductor,xfuse] [--device cuda|cpu]
        [--profile]

Rank 0 prints, per column: the median ms per step (forward, backward, AdamW step, the GPU
waited for), steps per second, the first step's seconds (compiles), the step's peak memory
above what the process held before it (activations, gradients, buffers; every column's weights
and optimizer state stay resident), and the largest difference of its losses from eager's over
the run (each rank trains on its own batches; dropout is seeded alike for every column).
`--profile` adds, per column, the GPU ms per step of each kernel class (GEMMs, attention,
communication, optimizer, copies, fused: `benchmarks.model_profile.KERNEL_CLASSES`) over three
more steps: the library classes run the same calls under every backend, so the `fused` and
`copy` time bounds what fusion can win. Classes on other streams (NCCL's) overlap the rest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

from benchmarks.model_profile import by_class, gpu_operations, kernel_class
from benchmarks.training import DTYPES, make_model
from xfuse.testing import distributed as d


def sync(rank: d.Rank) -> None:
    if rank.is_cuda:
        torch.cuda.synchronize()


def timed(step: Callable[[int], torch.Tensor], i: int, rank: d.Rank) -> tuple[float, float, float]:
    """(ms, peak bytes above the bytes held before, loss) of step `i`."""
    sync(rank)
    before = torch.cuda.memory_allocated() if rank.is_cuda else 0
    if rank.is_cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    loss = float(step(i))  # the loss read back: the step's GPU work is done
    ms = 1000 * (time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() - before if rank.is_cuda else 0
    return ms, peak, loss


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategy", default="ddp", choices=d.STRATEGIES)
    p.add_argument("--model", default="gpt2")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--columns", default="eager,inductor,xfuse")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--profile", action="store_true", help="GPU ms per kernel class (CUDA)")
    p.add_argument("--profile-names", type=int, default=0, help="with --profile: the N longest")
    args = p.parse_args(argv)

    import xfuse  # noqa: F401 - registers the backend

    # Every column compiles every block (FSDP2 compiles each block apart, and dynamo guards
    # each on its FSDP state): past dynamo's recompile limit a block would run eagerly unseen.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    rank = d.init_group(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args.device)
    columns = args.columns.split(",")
    dtype = DTYPES[args.dtype]

    def batch(i: int) -> torch.Tensor:
        return d.token_batch(i, rank, args.batch, args.tokens, args.vocab)

    steps: dict[str, Callable[[int], torch.Tensor]] = {}
    for column in columns:
        torch.manual_seed(0)
        size = {
            "layers": args.layers,
            "width": args.width,
            "heads": max(1, args.width // 64),
            "vocab": args.vocab,
            "tokens": args.tokens,
        }
        model = make_model(args.model, size)
        model = d.parallelize(
            model.to(rank.device), args.strategy, None if column == "eager" else column, rank
        )
        steps[column] = d.stepper(model, rank, batch, dtype, lr=1e-4)

    first: dict[str, float] = {}
    samples: dict[str, list[tuple[float, float, float]]] = {c: [] for c in columns}
    with d.counting_parts() as parts:
        for i in range(args.steps):
            for column, step in steps.items():
                sample = timed(step, i, rank)
                if i == 0:
                    first[column] = sample[0] / 1000
                samples[column].append(sample)
    profiles = (
        {c: class_profile(step, args.steps, rank) for c, step in steps.items()}
        if args.profile and rank.is_cuda
        else {}
    )
    if rank.rank != 0:
        torch.distributed.destroy_process_group()
        return
    print(
        f"{args.strategy} on {rank.world} x {args.device}, torch {torch.__version__}, "
        f"{args.model} {args.layers}x{args.width}, {args.batch}x{args.tokens} tokens per rank, "
        f"{args.dtype}, {args.steps} steps; xfuse compiled {parts.count('forward')} forward "
        f"and {parts.count('backward')} backward programs on rank 0"
    )
    if parts.graph_use():
        print(f"xfuse on rank 0: {parts.graph_use()}")
    eager_losses = [s[2] for s in samples["eager"]] if "eager" in samples else None
    for column in columns:
        timed_steps = samples[column][args.warmup :]
        ms = statistics.median(s[0] for s in timed_steps)
        peak = max(s[1] for s in timed_steps) / 2**30
        losses = [s[2] for s in samples[column]]
        drift = (
            max(abs(a - b) for a, b in zip(losses, eager_losses, strict=True))
            if eager_losses
            else float("nan")
        )
        print(
            f"{column:9s} {ms:8.2f} ms/step  {1000 / ms:7.2f} steps/s  first {first[column]:6.1f} s"
            f"  step peak {peak:6.2f} GiB  |loss - eager's| <= {drift:.4f}"
            f"  losses {losses[0]:.4f} -> {losses[-1]:.4f}",
            flush=True,
        )
    for column, (ops, by_name) in profiles.items():
        classes = by_class(by_name)
        shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(classes.items(), key=lambda kv: -kv[1]))
        print(f"{column:9s} GPU ms per step by class ({ops:.0f} ops): {shown}", flush=True)
        if args.profile_names:
            for name, ms in sorted(by_name.items(), key=lambda kv: -kv[1])[: args.profile_names]:
                print(f"    {ms:8.3f} ms  {kernel_class(name):13s} {name[:120]}")
    torch.distributed.destroy_process_group()


def class_profile(
    step: Callable[[int], torch.Tensor], first: int, rank: d.Rank, calls: int = 3
) -> tuple[float, dict[str, float]]:
    """(GPU operations per step, GPU ms per step of each kernel name) over `calls` steps from
    step `first` on; every rank runs them (the collectives pair up), each profiles its own."""
    from torch.profiler import ProfilerActivity, profile

    sync(rank)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(first, first + calls):
            float(step(i))
        sync(rank)
    ops, by_name = 0, dict[str, float]()
    for name, us in gpu_operations(prof):
        ops += 1
        by_name[name] = by_name.get(name, 0.0) + us / 1000 / calls
    return ops / calls, by_name


if __name__ == "__main__":
    main()
