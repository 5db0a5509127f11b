"""
Data-parallel training through `torch.compile`, on torch's own distributed engine: a model
wrapped in `DistributedDataParallel` (dynamo splits its graph at the gradient buckets, and the
backend compiles every piece, forward and backward) or sharded with FSDP2 (`fully_shard` per
block, each block compiled, as torchtitan does). Communication is torch's: NCCL on the GPU,
gloo on the CPU. The benchmark (`benchmarks/distributed.py`) and the tests
(`tests/testing/test_distributed.py`) both train through these functions.

    model = parallelize(model, "ddp", backend="xfuse")   # in each process of the group
    losses = train(model, batches, steps=20)
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

Tensor = torch.Tensor

STRATEGIES = ("ddp", "fsdp2")
"""How a model is spread over the processes: replicated (DDP) or sharded per block (FSDP2)."""

NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
"""NVLink multicast stays off: on a shared host a program using it can take the GPUs down."""

BACKEND_OPTIONS: dict[str, dict[str, Any] | None] = {
    "xfuse": {"fallback": "error"},
    "inductor": None,
}
"""`torch.compile` options per backend: xfuse in strict mode (no eager graph, no eager group)."""


@dataclass(frozen=True)
class Rank:
    """This process's place in the group: its rank, the group's size, its device."""

    rank: int
    world: int
    device: torch.device

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def init_group(rank: int, world: int, device: str) -> Rank:
    """Join the default process group: NCCL on CUDA (one GPU per process, by local rank), gloo on
    the CPU. The address comes from the environment (torchrun sets it)."""
    import torch.distributed as dist

    for name, value in NO_MULTICAST.items():
        os.environ.setdefault(name, value)
    if device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        where = torch.device("cuda", local)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=where)
    else:
        where = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    return Rank(rank, world, where)


def blocks(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The model's repeated blocks: its largest `ModuleList` (GPT-2's `h`, Llama's `layers`,
    BERT's `layer`)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    if not lists:
        raise ValueError(f"{type(model).__name__} has no ModuleList of blocks to shard")
    return max(lists, key=len)


def compiled(module: torch.nn.Module, backend: str | None) -> Any:
    """`module` through `torch.compile` with `backend` (None: eager)."""
    if backend is None:
        return module
    return torch.compile(module, backend=backend, options=BACKEND_OPTIONS.get(backend))


def parallelize(
    model: torch.nn.Module,
    strategy: str,
    backend: str | None,
    rank: Rank,
    bucket_cap_mb: float | None = None,
) -> torch.nn.Module:
    """`model` (on `rank.device`) spread over the group by `strategy` and compiled with
    `backend` (None: eager). DDP: the wrapper is compiled whole, so dynamo's DDP optimizer
    splits the graph where gradient buckets end. FSDP2: each block is sharded and compiled on
    its own, then the root is sharded; FSDP2's hooks run outside the compiled blocks."""
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [rank.device.index] if rank.is_cuda else None
        if bucket_cap_mb is None:
            ddp = DistributedDataParallel(model, device_ids=ids)
        else:
            ddp = DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=bucket_cap_mb)
        return compiled(ddp, backend)
    if strategy == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(rank.device.type, (rank.world,))
        for block in blocks(model):
            fully_shard(block, mesh=mesh)
            if backend is not None:
                block.compile(backend=backend, options=BACKEND_OPTIONS.get(backend))
        fully_shard(model, mesh=mesh)
        return model
    raise ValueError(f"unknown strategy {strategy!r} (one of {', '.join(STRATEGIES)})")


def token_batch(step: int, rank: Rank, batch: int, tokens: int, vocab: int) -> Tensor:
    """The token ids rank `rank` trains on at `step`: a different batch on every rank, the same
    for every backend."""
    g = torch.Generator().manual_seed(1000 * step + rank.rank)
    return torch.randint(0, vocab, (batch, tokens), generator=g).to(rank.device)


def autocast(rank: Rank, dtype: torch.dtype | None) -> Any:
    """Autocast to `dtype` on the rank's device (None: off)."""
    if dtype is None:
        return nullcontext()
    return torch.autocast(rank.device.type, dtype=dtype)


def stepper(
    model: torch.nn.Module,
    rank: Rank,
    batch: Callable[[int], Tensor],
    dtype: torch.dtype | None = None,
    lr: float = 1e-3,
) -> Callable[[int], Tensor]:
    """One AdamW step of a language model on `batch(step)` as input and labels, under autocast
    to `dtype`, the RNG seeded by step and rank (dropout draws alike for every backend that
    keeps torch's RNG); returns the loss, detached."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def step(i: int) -> Tensor:
        ids = batch(i)
        torch.manual_seed(7919 * i + rank.rank)
        with autocast(rank, dtype):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def train(step: Callable[[int], Tensor], steps: int) -> list[float]:
    """The losses of `steps` steps."""
    return [float(step(i)) for i in range(steps)]


class Parts(list[str]):
    """The parts xfuse compiled (`forward`, `backward`, `inference`), in order, and their
    programs (`programs`, in the same order)."""

    def __init__(self) -> None:
        super().__init__()
        self.programs: list[Any] = []

    def graph_use(self) -> str:
        """How each part's programs ran on CUDA: how many replayed a CUDA graph at their last
        calls, and why the others ran step by step (each `GraphRunner.reason` in full, or none
        yet: a runner still warming up or waiting on its price); empty where none has graphs
        (the CPU)."""
        counts: dict[str, list[int]] = {}
        reasons: Counter[str] = Counter()
        for part, program in zip(self, self.programs, strict=True):
            # A symbolic program (`dynamic=True`) has no specialisations: its shapes' runners
            # are its `ShapeGraphs`', not counted here.
            for executable in getattr(program, "specialisations", {}).values():
                runner = executable.graphs
                if runner is None:
                    continue
                seen = counts.setdefault(part, [0, 0])
                seen[1] += 1
                if runner.reason is None and runner.replays:
                    seen[0] += 1
                elif runner.reason is not None:
                    reasons[runner.reason] += 1
                else:
                    reasons["not replayed yet (warming up, or priced and waiting)"] += 1
        if not counts:
            return ""
        text = ", ".join(f"{part} {n} of {total}" for part, (n, total) in counts.items())
        why = "; ".join(f"{n} x {reason}" for reason, n in reasons.most_common())
        return f"programs replaying a CUDA graph: {text}" + (
            f"; step by step: {why}" if why else ""
        )


@contextmanager
def counting_parts() -> Iterator[Parts]:
    """The parts (`forward`, `backward`, `inference`) xfuse compiles in the block, in order,
    with their programs."""
    from xfuse.aot import PartCompiler
    from xfuse.runtime.executor import CompiledProgram

    seen = Parts()
    real = PartCompiler.compile

    def counted(
        self: PartCompiler, gm: torch.fx.GraphModule, inputs: Sequence[Any]
    ) -> CompiledProgram:
        program = real(self, gm, inputs)
        seen.append(self.part)
        seen.programs.append(program)
        return program

    PartCompiler.compile = counted  # type: ignore[method-assign,assignment]
    try:
        yield seen
    finally:
        PartCompiler.compile = real  # type: ignore[method-assign]
