"""Data-parallel training through `torch.compile(backend="xfuse")` on torch's own engine
(`xfuse.testing.distributed`): two processes on gloo (the CPU) train a transformers GPT-2 with
DDP (dynamo splits the graph at the gradient buckets) and with FSDP2 (each block sharded and
compiled), in strict mode, and track eager's losses and parameters step by step; dropout draws
eager's masks. On two GPUs the same runs go over NCCL."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp

from tests.backends.test_cuda import gpu

pytest.importorskip("transformers")

STEPS = 4
LR = 1e-3
SIZE = {"batch": 2, "tokens": 32, "vocab": 128}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gpt2() -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=SIZE["vocab"], n_positions=64
    )
    return transformers.GPT2LMHeadModel(config)


def worker(rank: int, world: int, port: int, strategy: str, device: str, out: str) -> None:
    """One process: eager and xfuse each train a copy of the same model; losses, compiled
    parts and final parameters go to `out`/rank.pt."""
    import os

    import xfuse  # noqa: F401 - registers the backend
    from xfuse.testing import distributed as d

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    where = d.init_group(rank, world, device)
    result: dict[str, Any] = {}
    try:
        for backend in (None, "xfuse"):
            model = gpt2().to(where.device)
            # 1 MiB buckets (DDP's first bucket's size): the 2-layer model fills three or more.
            wrapped = d.parallelize(model, strategy, backend, where, bucket_cap_mb=1)
            batch = lambda i: d.token_batch(i, where, SIZE["batch"], SIZE["tokens"], SIZE["vocab"])  # noqa: E731
            with d.counting_parts() as parts:
                losses = d.train(d.stepper(wrapped, where, batch, lr=LR), STEPS)
            state = {k: full(v) for k, v in model.state_dict().items()}
            result[str(backend)] = {
                "losses": losses,
                "parts": list(parts),
                "state": {k: v.detach().cpu() for k, v in state.items()},
            }
    finally:
        torch.distributed.destroy_process_group()
    torch.save(result, Path(out) / f"{rank}.pt")


def full(t: torch.Tensor) -> torch.Tensor:
    """A parameter whole: FSDP2's shards gathered from every rank."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def run(strategy: str, device: str, tmp_path: Path) -> list[dict[str, Any]]:
    mp.spawn(worker, args=(2, free_port(), strategy, device, str(tmp_path)), nprocs=2)
    return [torch.load(tmp_path / f"{r}.pt", weights_only=False) for r in range(2)]


def check_tracks_eager(results: list[dict[str, Any]], forward_parts: int) -> None:
    for rank, result in enumerate(results):
        eager, xfuse = result["None"], result["xfuse"]
        assert eager["parts"] == []
        forwards = xfuse["parts"].count("forward")
        assert forwards >= forward_parts, f"rank {rank}: parts {xfuse['parts']}"
        assert xfuse["parts"].count("backward") == forwards
        torch.testing.assert_close(
            torch.tensor(xfuse["losses"]), torch.tensor(eager["losses"]), rtol=1e-4, atol=1e-5
        )
        for name, want in eager["state"].items():
            check_parameter(xfuse["state"][name], want, f"rank {rank} {name}")
    # The ranks trained on different batches: their losses differ, their parameters agree.
    assert results[0]["xfuse"]["losses"] != results[1]["xfuse"]["losses"]
    for name, p in results[0]["xfuse"]["state"].items():
        torch.testing.assert_close(results[1]["xfuse"]["state"][name], p)


AGREE_SHARE = 0.999
"""The share of a parameter's elements that agree with eager's to a tenth of one step."""


def check_parameter(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    """AdamW moves an element by lr * m / (sqrt(v) + eps): by about the learning rate in a
    step whatever its gradient's size, so an element whose gradient is of rounding size (sums
    reassociated: eager's kernels and xfuse's order them differently, and differently again
    with the CPU's vector width) can end up to 2 * LR * STEPS from eager's. All but one element
    in a thousand agree to a tenth of one step, and none lies beyond that bound."""
    off = (got - want).abs()
    agree = float((off <= LR / 10).float().mean())
    assert agree >= AGREE_SHARE, f"{name}: {agree:.4%} of the elements within {LR / 10:g}"
    worst = float(off.max())
    assert worst <= 2 * LR * STEPS, f"{name}: an element {worst:g} from eager's"


def test_ddp_on_gloo_splits_the_graph_and_tracks_eager(tmp_path: Path) -> None:
    """Dynamo's DDP optimizer hands xfuse one graph per gradient bucket (2 or more), each
    trained through AOTAutograd with its backward; the all-reduces stay DDP's."""
    check_tracks_eager(run("ddp", "cpu", tmp_path), forward_parts=2)


def test_fsdp2_per_block_compile_on_gloo_tracks_eager(tmp_path: Path) -> None:
    """FSDP2 shards each GPT-2 block and the root; each block is compiled on its own (one
    forward and one backward program per block, both blocks sharing them or not)."""
    check_tracks_eager(run("fsdp2", "cpu", tmp_path), forward_parts=1)


@gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_gpus_over_nccl_track_eager(strategy: str, tmp_path: Path) -> None:
    check_tracks_eager(run(strategy, "cuda", tmp_path), forward_parts=1)


def test_graph_use_counts_the_programs_that_replay_and_says_why_the_others_do_not() -> None:
    """`Parts.graph_use`: per part, the programs whose runner replays a CUDA graph, and the
    reasons of those that run step by step; nothing where no program has graphs (the CPU)."""
    from types import SimpleNamespace

    from xfuse.testing import distributed as d

    def program(*runners: Any) -> Any:
        return SimpleNamespace(
            specialisations={i: SimpleNamespace(graphs=r) for i, r in enumerate(runners)}
        )

    replaying = SimpleNamespace(reason=None, replays=5)
    why = (
        "copying its inputs (786.0 MiB) into the graph at every replay would cost more than "
        "running its 29 steps from the host"
    )
    stepped = SimpleNamespace(reason=why, replays=0)
    waiting = SimpleNamespace(reason=None, replays=0)
    parts = d.Parts()
    for part, p in [
        ("forward", program(replaying)),
        ("backward", program(replaying)),
        ("backward", program(stepped)),
        ("backward", program(waiting)),
    ]:
        parts.append(part)
        parts.programs.append(p)
    assert parts.graph_use() == (
        "programs replaying a CUDA graph: forward 1 of 1, backward 1 of 3; step by step: "
        f"1 x {why}; "
        "1 x not replayed yet (warming up, or priced and waiting)"
    )
    on_cpu = d.Parts()
    on_cpu.append("forward")
    on_cpu.programs.append(program(None))
    assert on_cpu.graph_use() == ""
