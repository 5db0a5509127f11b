"""
transformers' models trained through `torch.compile(backend="xfuse")` (a sweep, not a benchmark):

    python -m benchmarks.training_sweep [--models gpt2,vit] [--steps 3] [--timeout 900]
                                        [--device cuda] [--jobs 4]

Each model is built from a small config (random weights, never downloaded) and trained `--steps`
AdamW steps in its own process, in strict mode (a part or group that would run eagerly raises),
beside an eager copy with the same seeds: dropout, batch norm and all. A row says whether each
step's loss matched eager's (`assert_close` at f32's defaults) and how many parts xfuse compiled.
Where a loss differs, the row adds each path's largest distance from the same model trained in
f64 (eager, Inductor, xfuse), to tell a wrong gradient from a model whose steps amplify rounding.
`--jobs` runs that many models' processes at once (each prints its row as the sweep reaches it).
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import sys
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

TEXT = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "vocab_size": 128,
}
GQA = {**TEXT, "num_key_value_heads": 2}
IMAGE = {"image_size": 64, "num_labels": 10}
STAGES = {"hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1], "num_labels": 10}

# name: (model type, task, config keywords)
MODELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gpt2": ("gpt2", "causal", {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 128}),
    "llama": ("llama", "causal", GQA),
    "mistral": ("mistral", "causal", GQA),
    "mixtral": ("mixtral", "causal", {**GQA, "num_local_experts": 4}),
    "qwen2": ("qwen2", "causal", GQA),
    "qwen2_moe": ("qwen2_moe", "causal", {**GQA, "num_experts": 4, "moe_intermediate_size": 32}),
    "qwen3": ("qwen3", "causal", {**GQA, "head_dim": 16}),
    "gemma": ("gemma", "causal", {**GQA, "head_dim": 16}),
    "gemma2": ("gemma2", "causal", {**GQA, "head_dim": 16, "sliding_window": 8}),
    "phi": ("phi", "causal", TEXT),
    "phi3": ("phi3", "causal", {**GQA, "pad_token_id": 0}),
    "olmo": ("olmo", "causal", GQA),
    "starcoder2": ("starcoder2", "causal", GQA),
    "opt": ("opt", "causal", {**TEXT, "ffn_dim": 128, "word_embed_proj_dim": 64}),
    "gpt_neox": ("gpt_neox", "causal", TEXT),
    "gpt_neo": (
        "gpt_neo",
        "causal",
        {
            "num_layers": 2,
            "hidden_size": 64,
            "num_heads": 4,
            "vocab_size": 128,
            "window_size": 8,
            "attention_types": [[["global", "local"], 1]],
            "max_position_embeddings": 64,
        },
    ),
    "gptj": (
        "gptj",
        "causal",
        {"n_layer": 2, "n_embd": 64, "n_head": 4, "rotary_dim": 8, "vocab_size": 128},
    ),
    "codegen": (
        "codegen",
        "causal",
        {"n_layer": 2, "n_embd": 64, "n_head": 4, "rotary_dim": 8, "vocab_size": 128},
    ),
    "bloom": ("bloom", "causal", {"n_layer": 2, "hidden_size": 64, "n_head": 4, "vocab_size": 128}),
    "falcon": ("falcon", "causal", TEXT),
    "xlnet": (
        "xlnet",
        "causal",
        {"d_model": 64, "n_layer": 2, "n_head": 4, "d_inner": 128, "vocab_size": 128},
    ),
    "bert": ("bert", "masked", TEXT),
    "roberta": ("roberta", "masked", TEXT),
    "electra": ("electra", "masked", {**TEXT, "embedding_size": 64}),
    "albert": ("albert", "masked", {**TEXT, "embedding_size": 32}),
    "deberta_v2": ("deberta-v2", "masked", TEXT),
    "convbert": ("convbert", "masked", {**TEXT, "embedding_size": 64}),
    "mpnet": ("mpnet", "masked", TEXT),
    "distilbert": (
        "distilbert",
        "masked",
        {"n_layers": 2, "dim": 64, "n_heads": 4, "hidden_dim": 128, "vocab_size": 128},
    ),
    "funnel": (
        "funnel",
        "masked",
        {
            "block_sizes": [1, 1],
            "num_decoder_layers": 1,
            "d_model": 64,
            "n_head": 4,
            "d_head": 16,
            "d_inner": 128,
            "vocab_size": 128,
        },
    ),
    "t5": (
        "t5",
        "seq2seq",
        {
            "num_layers": 2,
            "d_model": 64,
            "d_kv": 16,
            "d_ff": 128,
            "num_heads": 4,
            "vocab_size": 128,
            "decoder_start_token_id": 0,
            "pad_token_id": 0,
        },
    ),
    "bart": (
        "bart",
        "seq2seq",
        {
            "encoder_layers": 2,
            "decoder_layers": 2,
            "d_model": 64,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 128,
            "decoder_ffn_dim": 128,
            "vocab_size": 128,
        },
    ),
    "vit": ("vit", "image", {**TEXT, **IMAGE, "patch_size": 8}),
    "deit": ("deit", "image", {**TEXT, **IMAGE, "patch_size": 8}),
    "beit": ("beit", "image", {**TEXT, **IMAGE, "patch_size": 8}),
    "dinov2": ("dinov2", "image", {**TEXT, **IMAGE, "patch_size": 8}),
    "swin": (
        "swin",
        "image",
        {**IMAGE, "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 4], "window_size": 4},
    ),
    "swinv2": (
        "swinv2",
        "image",
        {**IMAGE, "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 4], "window_size": 4},
    ),
    "convnext": ("convnext", "image", STAGES),
    "convnextv2": ("convnextv2", "image", STAGES),
    "poolformer": ("poolformer", "image", STAGES),
    "focalnet": ("focalnet", "image", {**IMAGE, "embed_dim": 16, "depths": [1, 1, 1, 1]}),
    "resnet": ("resnet", "image", {**STAGES, "embedding_size": 16}),
    "regnet": ("regnet", "image", {**STAGES, "groups_width": 8, "embedding_size": 16}),
    "bit": (
        "bit",
        "image",
        {**STAGES, "hidden_sizes": [32, 64, 128, 256], "num_groups": 8, "embedding_size": 32},
    ),
    "efficientnet": (
        "efficientnet",
        "image",
        {**IMAGE, "width_coefficient": 0.25, "depth_coefficient": 0.25, "hidden_dim": 320},
    ),
    "mobilenet_v1": ("mobilenet_v1", "image", {**IMAGE, "depth_multiplier": 0.25}),
    "mobilenet_v2": ("mobilenet_v2", "image", {**IMAGE, "depth_multiplier": 0.35}),
    "cvt": (
        "cvt",
        "image",
        {"embed_dim": [16, 32, 64], "num_heads": [1, 2, 4], "depth": [1, 2, 3], "num_labels": 10},
    ),
    "segformer": (
        "segformer",
        "image",
        {
            "hidden_sizes": [16, 32, 64, 128],
            "depths": [1, 1, 1, 1],
            "decoder_hidden_size": 32,
            "num_labels": 10,
        },
    ),
}
CLASSES = {"deit": "DeiTForImageClassification"}
"""Models whose task's auto class maps to more than one head (it then asks the config which)."""
MOST_PARAMETERS = 5_000_000
LR = 1e-3


def build(
    name: str, device: str = "cpu"
) -> tuple[torch.nn.Module, Callable[[torch.nn.Module], torch.Tensor]]:
    """`name`'s model in train mode on `device`, and its loss on fixed inputs there."""
    import transformers

    kind, task, keywords = MODELS[name]
    config = transformers.AutoConfig.for_model(kind, **keywords)
    auto = {
        "causal": transformers.AutoModelForCausalLM,
        "masked": transformers.AutoModelForMaskedLM,
        "seq2seq": transformers.AutoModelForSeq2SeqLM,
        "image": transformers.AutoModelForImageClassification,
    }[task]
    torch.manual_seed(0)
    chosen = CLASSES.get(name)
    model = (getattr(transformers, chosen)(config) if chosen else auto.from_config(config)).train()
    model = model.to(device)
    size = sum(p.numel() for p in model.parameters())
    if size > MOST_PARAMETERS:  # a keyword the config does not know left a default size
        raise SystemExit(f"{name}: {size} parameters; its config ignored a size keyword")
    if task == "image":
        pixels = torch.randn(2, 3, 64, 64).to(device)
        labels = torch.tensor([1, 7], device=device)
        return model, lambda m: m(pixel_values=pixels, labels=labels).loss
    ids = torch.randint(0, 128, (2, 16)).to(device)
    return model, lambda m: m(input_ids=ids, labels=ids).loss


def losses(
    model: torch.nn.Module, loss: Callable[[torch.nn.Module], torch.Tensor], steps: int
) -> list[float]:
    """Each of `steps` AdamW steps' loss, torch's RNG seeded alike before each."""
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    out = []
    for i in range(steps):
        torch.manual_seed(100 + i)
        value = loss(model)
        value.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(value.item())
    return out


def in_f64(module: torch.nn.Module) -> torch.nn.Module:
    """`module` in f64, its float inputs cast on the way in."""

    def cast(_: torch.nn.Module, args: Any, kwargs: Any) -> Any:
        return torch.utils._pytree.tree_map_only(
            torch.Tensor, lambda t: t.double() if t.is_floating_point() else t, (args, kwargs)
        )

    module = module.double()
    module.register_forward_pre_hook(cast, with_kwargs=True)
    return module


def run_one(name: str, steps: int, device: str = "cpu") -> str:
    """One model's row: eager's and xfuse's losses side by side."""
    from xfuse.errors import FallbackWarning
    from xfuse.training import PartCompiler

    model, loss = build(name, device)
    initial = copy.deepcopy(model)
    parts: list[str] = []
    real = PartCompiler.compile

    def counted(self: PartCompiler, gm: torch.fx.GraphModule, inputs: Any) -> Any:
        parts.append(self.part)
        return real(self, gm, inputs)

    PartCompiler.compile = counted  # type: ignore[method-assign,assignment]
    compiled = torch.compile(model, backend="xfuse", options={"fallback": "error"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = losses(compiled, loss, steps)  # type: ignore[arg-type]
    want = losses(copy.deepcopy(initial), loss, steps)
    try:
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want))
        return f"{name}: matches eager at {steps} steps ({len(parts)} parts)"
    except AssertionError:
        pass
    torch._dynamo.reset()
    inductor = losses(torch.compile(copy.deepcopy(initial)), loss, steps)  # type: ignore[arg-type]
    exact = losses(in_f64(copy.deepcopy(initial)), loss, steps)

    def off(values: list[float]) -> str:
        return f"{max(abs(a - b) for a, b in zip(values, exact, strict=True)):.3g}"

    return (
        f"{name}: DIFFERS from eager ({len(parts)} parts); largest loss distance from f64: "
        f"eager {off(want)}, Inductor {off(inductor)}, xfuse {off(got)}; "
        f"losses f64 {exact}, eager {want}, xfuse {got}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per model")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--jobs", type=int, default=1, help="models run at once")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(run_one(args.one, args.steps, args.device), flush=True)
        return
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for row in pool.map(lambda name: row_of(name, args), args.models.split(",")):
            print(row, flush=True)


def row_of(name: str, args: argparse.Namespace) -> str:
    """`name`'s row from its own process (`--one`), or why there is none."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.training_sweep",
        "--one",
        name,
        "--steps",
        str(args.steps),
        "--device",
        args.device,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return f"{name}: no result in {args.timeout} s"
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return lines[-1]
    error = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return f"{name}: FAILED: {error}"


if __name__ == "__main__":
    main()
