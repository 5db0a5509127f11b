"""
transformers' models trained through `torch.compile(backend="xfuse")` (a sweep, not a benchmark):

    python -m benchmarks.training_sweep [--models gpt2,vit] [--steps 3] [--timeout 900]
                                        [--device cuda] [--jobs 4] [--dynamic]

Each model is built from a small config (random weights, never downloaded) and trained `--steps`
AdamW steps in its own process, in strict mode (a part or group that would run eagerly raises),
beside an eager copy with the same seeds: dropout, batch norm and all. A row says whether each
step's loss matched eager's (`assert_close` at f32's defaults) and how many parts xfuse compiled.
Where a loss differs, the row adds each path's largest distance from the same model trained in
f64 (eager, Inductor, xfuse), to tell a wrong gradient from a model whose steps amplify rounding.
`--jobs` runs that many models' processes at once (each prints its row as the sweep reaches it).
`--dynamic` compiles with `dynamic=True` and takes each step at another input shape (`SHAPES`:
batch and sequence length for text, batch for images): a row then adds how many parts compiled
once for every shape (symbolic) and how many per shape, and the first line of each reason a
part went per shape (`DynamicShapesWarning`).
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
SHAPES = {"text": ((2, 16), (3, 11), (2, 23), (4, 9)), "image": ((2,), (3,), (5,), (4,))}
"""The input shapes of `--dynamic`'s steps, in turn: (batch, tokens) for text, (batch,) for
images (64x64; the configs' position tables fix the size)."""
MOST_PARAMETERS = 5_000_000
LR = 1e-3


Loss = Callable[[torch.nn.Module, int], torch.Tensor]
"""A model's loss at a step (the step picks the inputs' shape under `--dynamic`)."""


def build(name: str, device: str = "cpu", dynamic: bool = False) -> tuple[torch.nn.Module, Loss]:
    """`name`'s model in train mode on `device`, and its loss on inputs there: fixed, or with
    `dynamic` of each step's shape in `SHAPES`, in turn."""
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
    shapes = SHAPES["image" if task == "image" else "text"]
    if task == "image":
        images = [
            (torch.randn(b, 3, 64, 64).to(device), torch.randint(0, 10, (b,)).to(device))
            for (b, *_) in shapes
        ]
        if not dynamic:
            images = [(images[0][0][:2], torch.tensor([1, 7], device=device))]
        return (
            model,
            lambda m, step: (
                m(
                    pixel_values=images[step % len(images)][0], labels=images[step % len(images)][1]
                ).loss
            ),
        )
    texts = [
        torch.randint(0, 128, shape).to(device) for shape in shapes[: len(shapes) if dynamic else 1]
    ]
    return (
        model,
        lambda m, step: m(input_ids=texts[step % len(texts)], labels=texts[step % len(texts)]).loss,
    )


def losses(model: torch.nn.Module, loss: Loss, steps: int) -> list[float]:
    """Each of `steps` AdamW steps' loss, torch's RNG seeded alike before each."""
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    out = []
    for i in range(steps):
        torch.manual_seed(100 + i)
        value = loss(model, i)
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


def run_one(name: str, steps: int, device: str = "cpu", dynamic: bool = False) -> str:
    """One model's row: eager's and xfuse's losses side by side (with `dynamic`, each step at
    another shape, and how the parts compiled)."""
    from xfuse import dynamo
    from xfuse.errors import DynamicShapesWarning, FallbackWarning
    from xfuse.training import PartCompiler

    model, loss = build(name, device, dynamic)
    initial = copy.deepcopy(model)
    parts: list[str] = []
    real = PartCompiler.compile_shape

    def counted(self: PartCompiler, *args: Any) -> Any:
        parts.append(self.part)
        return real(self, *args)

    PartCompiler.compile_shape = counted  # type: ignore[method-assign]
    compiled = torch.compile(
        model, backend="xfuse", dynamic=True if dynamic else None, options={"fallback": "error"}
    )
    start = dict(dynamo.COMPILES)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error", FallbackWarning)
        warnings.simplefilter("always", DynamicShapesWarning)
        got = losses(compiled, loss, steps)  # type: ignore[arg-type]
    want = losses(copy.deepcopy(initial), loss, steps)
    parts_done = f"{len(parts)} parts"
    if dynamic:
        made = {k: v - start.get(k, 0) for k, v in dynamo.COMPILES.items()}
        reasons = sorted(
            {
                str(w.message).splitlines()[0][:240]
                for w in caught
                if w.category is DynamicShapesWarning
            }
        )
        parts_done = f"{made.get('symbolic', 0)} symbolic, {len(parts)} per shape" + "".join(
            f"; per shape: {r}" for r in reasons
        )
    try:
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want))
        return f"{name}: matches eager at {steps} steps ({parts_done})"
    except AssertionError:
        pass
    torch._dynamo.reset()
    inductor = losses(torch.compile(copy.deepcopy(initial)), loss, steps)  # type: ignore[arg-type]
    exact = losses(in_f64(copy.deepcopy(initial)), loss, steps)

    def off(values: list[float]) -> str:
        return f"{max(abs(a - b) for a, b in zip(values, exact, strict=True)):.3g}"

    return (
        f"{name}: DIFFERS from eager ({parts_done}); largest loss distance from f64: "
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
    parser.add_argument("--dynamic", action="store_true", help="each step at another shape")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(run_one(args.one, args.steps, args.device, args.dynamic), flush=True)
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
        *(["--dynamic"] if args.dynamic else []),
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
