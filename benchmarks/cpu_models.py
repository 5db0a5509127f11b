"""
Whole models on the CPU: torch eager, torch.compile (Inductor) and xfuse side by side.

    python -m benchmarks.cpu_models [--runs 50] [--models mlp,gpt2] [--no-inductor] [--profile]

Models: the bundled examples (MLP, transformer block, convnet) and small Hugging Face models
built from configs with random weights (GPT-2 and BERT: 2 layers, width 128, 4 heads, 32
tokens, batch 1), all f32 under `torch.no_grad()`. For each: ms per forward, the medians of
`--runs` interleaved rounds (each round calls every compiler once in turn, so that load that
comes and goes on a shared machine affects every column alike), and xfuse's time over eager's
and Inductor's. `--profile` prints xfuse's per-step times instead (`XFUSE_PROFILE=1`).
"""

from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch

import xfuse
from benchmarks.timing import interleaved_ms, median_and_spread
from examples.convnet import make_convnet
from examples.mlp import make_mlp
from examples.transformer import make_transformer_block

Fn = Callable[..., Any]
Model = tuple[torch.nn.Module, tuple[torch.Tensor, ...]]


class _FirstOutput(torch.nn.Module):
    """A Hugging Face model returning its last hidden state only (a tensor, not a ModelOutput)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids, use_cache=False).last_hidden_state


def make_gpt2() -> Model:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2,
        n_embd=128,
        n_head=4,
        vocab_size=1000,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = _FirstOutput(GPT2Model(config)).eval()
    return model, (torch.randint(0, 1000, (1, 32)),)


def make_bert() -> Model:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        num_hidden_layers=2,
        hidden_size=128,
        num_attention_heads=4,
        intermediate_size=512,
        vocab_size=1000,
        max_position_embeddings=64,
    )
    model = _FirstOutput(BertModel(config, add_pooling_layer=False)).eval()
    return model, (torch.randint(0, 1000, (1, 32)),)


MODELS: dict[str, Callable[[], Model]] = {
    "mlp": make_mlp,
    "transformer": make_transformer_block,
    "convnet": make_convnet,
    "gpt2": make_gpt2,
    "bert": make_bert,
}


def max_error(a: Any, b: Any) -> float:
    return float((a - b).abs().max())


def bench(name: str, runs: int, inductor: bool) -> str:
    model, inputs = MODELS[name]()
    with torch.no_grad():
        expected = model(*inputs)
        compiled = xfuse.compile(model, inputs, quiet=True)
        error = max_error(compiled(*inputs), expected)
        fns: dict[str, Fn] = {"eager": model, "xfuse": compiled}
        if inductor:
            torch._dynamo.reset()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fns["inductor"] = torch.compile(model)
                fns["inductor"](*inputs)
        times = interleaved_ms(fns, inputs, runs, warmup=3)
        medians = {name: median_and_spread(ts) for name, ts in times.items()}
    eager, ours = medians["eager"][0], medians["xfuse"][0]
    cells = [f"{name:12s}"]
    for column in ("eager", "inductor", "xfuse"):
        if column in medians:
            median, iqr = medians[column]
            cells.append(f"{median:8.3f} ±{iqr:6.3f}")
        else:
            cells.append(f"{'-':>16s}")
    cells.append(f"{ours / eager:6.2f}")
    cells.append(f"{ours / medians['inductor'][0]:6.2f}" if inductor else f"{'-':>6s}")
    cells.append(f"{error:8.1e}")
    return " ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--profile", action="store_true", help="per-step xfuse times")
    args = parser.parse_args()
    names = args.models.split(",")
    warnings.simplefilter("ignore")  # fallback and Hugging Face warnings: not what is measured
    if args.profile:
        from xfuse.runtime import executor

        os.environ["XFUSE_PROFILE"] = "1"
        executor.PROFILE = executor._start_profile()  # pyright: ignore[reportPrivateUsage]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, ms per forward")
    print(
        f"{'model':12s} {'eager':>16s} {'inductor':>16s} {'xfuse':>16s} "
        f"{'/eager':>6s} {'/ind.':>6s} {'max err':>8s}"
    )
    for name in names:
        print(bench(name, args.runs, not args.no_inductor), flush=True)


if __name__ == "__main__":
    main()
