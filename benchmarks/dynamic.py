"""
Dynamic shapes through `torch.compile` on the CPU or a CUDA GPU: a model called with a new size
on every call, static xfuse (`dynamic=False`: a program per size), dynamic xfuse (`dynamic=True`: one
symbolic program where xfuse takes the graph, else a program per size; every dim of the inputs
symbolic, an image's height and width too), automatic xfuse (`dynamic=None`, torch.compile's
default: the first size static, then one symbolic program in which only the dims that changed
are symbolic) and Inductor (`dynamic=True`, and `dynamic=None`), side by side:

    python -m benchmarks.dynamic [--models mlp,lm,gpt2,convnet,convnext_t,softmax,...]
                                 [--columns xfuse-static,...]
                                 [--mlp-sizes 2,5,...] [--lm-sizes 3,9,...]
                                 [--gpt2-sizes 64,...] [--runs 10]
                                 [--device cuda] [--dtype bf16] [--training]

For each model and column, in a new process with empty kernel caches (xfuse's and Inductor's:
cold compiles, and no column's compile workers or threads beside another's timing): each size of
the sweep in turn, the ms of its first call (compiling included, by the host clock), whose
values are checked against eager. Then, in one more process, every column side by side and, at
each size, called in turn (`--runs` rounds after two calls, every second round in the reverse
order): each column's steady-state median ms per call, so that no column's time is another
process's GPU clocks or machine load. That process's kernel caches hold what the first calls'
processes compiled (their folders merged), so it loads each column's kernels and programs (and
the choices xfuse measured compiling them) where it would compile them again: its steady times
are of the programs the first calls compiled, and its compiles (in the untimed calls) cost no
second cold compile. One table per model: a row per size, then the sum of the first calls (the
sweep's compile time) and the median steady-state ms. The MLP's sweep is over the batch size,
the language models' (GPT-2 from its config, random weights: `lm` a small one, 2x its length;
`gpt2` the families' 4 layers 768 wide, 8x its length) over the sequence length, the conv nets'
(`convnet` a small ConvNeXt on 64x64 images, `convnext_t` ConvNeXt-T on 224x224) over the batch.
`--dtype bf16` runs the models in bf16 (checked against eager at bf16's tolerances; the GPT-2
head's 50,257-token rows are then unaligned for cuBLAS: `pad-matmul`). On CUDA, the first call's
ms waits for the GPU, the steady ms are one call's each with CUDA events (the host's launches
included), and `inductor-ro-dynamic` is Inductor's reduce-overhead mode (CUDA graphs per shape,
as xfuse's dynamic programs capture them). `--training` times training steps instead of
forwards under `no_grad`: the model in `train()` mode (its dropout off, so that the check
against eager and f64 is deterministic), a call's loss the mean square of its output, its
gradients with respect to the parameters by `torch.autograd.grad` (AOTAutograd's forward and
backward: both are compiled per size or symbolically), checked against eager's and an f64
run's by the fuzzer's rule.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks import cpu
from benchmarks.timing import cuda_ms, host_ms, interleaved, medians

Tensor = torch.Tensor


class MLP(torch.nn.Module):
    """Linear, layer norm, GELU, linear: the shape of a transformer's MLP block."""

    def __init__(self, width: int = 256, hidden: int = 1024) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, hidden)
        self.norm = torch.nn.LayerNorm(hidden)
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(torch.nn.functional.gelu(self.norm(self.up(x))))


class LM(torch.nn.Module):
    """A GPT-2 from its config, never downloaded (by default a small one: 2 layers, 128 wide,
    a vocabulary of 1024): logits from ids."""

    def __init__(
        self, layers: int = 2, width: int = 128, heads: int = 4, vocab: int = 1024
    ) -> None:
        super().__init__()
        import transformers

        config = transformers.GPT2Config(
            n_layer=layers,
            n_embd=width,
            n_head=heads,
            vocab_size=vocab,
            n_positions=1024,
            use_cache=False,
        )
        self.model = transformers.GPT2LMHeadModel(config)

    def forward(self, ids: Tensor) -> Tensor:
        return self.model(input_ids=ids).logits


class Rows(torch.nn.Module):
    """One of the CPU benchmark's four kernels (`benchmarks.cpu`: the pointwise chain, softmax,
    layer norm, RMSNorm) over rows of `width` columns, its per-column weights as parameters."""

    def __init__(self, kernel: str, width: int = 1024) -> None:
        super().__init__()
        self.kernel = kernel
        self.w = torch.nn.Parameter(torch.randn(width))
        self.b = torch.nn.Parameter(torch.randn(width))

    def forward(self, x: Tensor) -> Tensor:
        if self.kernel == "pointwise":
            return cpu.pointwise(x, self.w, self.b)
        if self.kernel == "softmax":
            return cpu.softmax(x)
        if self.kernel == "layernorm":
            return cpu.layernorm(x, self.w, self.b)
        return cpu.rmsnorm(x, self.w)


class ConvNet(torch.nn.Module):
    """transformers' ConvNeXt from a small config, never downloaded (4 stages of 1, 1, 2, 1
    blocks, 32 to 256 channels: 7x7 depthwise convolutions, layer norms, GELU MLPs, patchify
    and downsampling convolutions), pooled features from 64x64 images."""

    def __init__(self) -> None:
        super().__init__()
        import transformers

        config = transformers.ConvNextConfig(
            hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1], image_size=64
        )
        self.model = transformers.ConvNextModel(config)

    def forward(self, images: Tensor) -> Tensor:
        return self.model(pixel_values=images).pooler_output


class ConvNextT(torch.nn.Module):
    """transformers' ConvNeXt-T (its config's defaults: 4 stages of 3, 3, 9, 3 blocks, 96 to 768
    channels), random weights, on 224x224 images: its last hidden state, which eager returns
    channels-last (strides of no contiguous tensor, which a dynamic program must reproduce)."""

    def __init__(self) -> None:
        super().__init__()
        import transformers

        self.model = transformers.ConvNextModel(transformers.ConvNextConfig())

    def forward(self, images: Tensor) -> Tensor:
        return self.model(pixel_values=images).last_hidden_state


@dataclass(frozen=True)
class Workload:
    """A model and the inputs of one size of its sweep."""

    make: Callable[[], torch.nn.Module]
    inputs: Callable[[int], tuple[Tensor, ...]]
    dim: str


KERNELS = ("pointwise", "softmax", "layernorm", "rmsnorm")
"""The CPU benchmark's four kernels (`Rows`), each a workload over its rows of 1024 columns."""

WORKLOADS: dict[str, Workload] = {
    **{
        k: Workload(functools.partial(Rows, k), lambda n: (torch.randn(n, 1024),), "rows")
        for k in KERNELS
    },
    "convnet": Workload(ConvNet, lambda n: (torch.randn(n, 3, 64, 64),), "batch"),
    "convnext_t": Workload(ConvNextT, lambda n: (torch.randn(n, 3, 224, 224),), "batch"),
    "mlp": Workload(MLP, lambda n: (torch.randn(n, 256),), "batch"),
    "lm": Workload(LM, lambda n: (torch.randint(0, 1024, (2, n)),), "seq"),
    "gpt2": Workload(
        lambda: LM(layers=4, width=768, heads=12, vocab=50257),
        lambda n: (torch.randint(0, 50257, (8, n)),),
        "seq",
    ),
}
"""`gpt2` is the families benchmark's GPT-2 LM (4 layers, 768 wide), 8 sequences a call."""
DEFAULT_SIZES = {
    **{k: "64,200,512,1000,2048,4096" for k in KERNELS},
    "convnet": "2,5,9,17,33,64",
    "convnext_t": "2,5,8,17,32",
    "mlp": "2,5,9,17,33,64,100",
    "lm": "3,9,17,33,64,100",
    "gpt2": "64,128,200,333,512",
}

COLUMNS: dict[str, dict[str, Any]] = {
    "xfuse-static": {"backend": "xfuse", "dynamic": False},
    "xfuse-dynamic": {"backend": "xfuse", "dynamic": True},
    "xfuse-auto": {"backend": "xfuse", "dynamic": None},
    "inductor-dynamic": {"backend": "inductor", "dynamic": True},
    "inductor-auto": {"backend": "inductor", "dynamic": None},
    "inductor-ro-dynamic": {"backend": "inductor", "dynamic": True, "mode": "reduce-overhead"},
}


@dataclass
class Sweep:
    """One column's times over a sweep: per size, the first call's ms and the steady ms."""

    first: list[float]
    steady: list[float]


def training_step(
    fn: Callable[..., Tensor], params: list[torch.nn.Parameter], *args: Tensor
) -> tuple[Tensor, ...]:
    """A training step's results: the loss (the mean square of `fn(*args)`, in f32 at least)
    and its gradients with respect to `params`."""
    out = fn(*args)
    loss = out.to(torch.promote_types(out.dtype, torch.float32)).pow(2).mean()
    return (loss, *torch.autograd.grad(loss, params))


def _call(fn: Callable[..., Any], model: torch.nn.Module, training: bool) -> Callable[..., Any]:
    """A call of `fn` (a compiled `model`, or the model): its forward, or with `training` a
    training step (`training_step`)."""
    if not training:
        return fn
    return functools.partial(training_step, fn, list(model.parameters()))


def sweep(
    model: torch.nn.Module,
    workload: Workload,
    sizes: list[int],
    column: str,
    device: str = "cpu",
    training: bool = False,
) -> list[float]:
    """The first call's ms at each size of `model` compiled as `column` says, in a fresh
    dynamo, called at each size in turn (checked at f32's tolerance 1e-4, or by the default
    rule of a 16-bit model's dtype; a training step by that rule)."""
    torch._dynamo.reset()
    compiled = _call(torch.compile(model, **COLUMNS[column]), model, training)
    first: list[float] = []
    for n in sizes:
        inputs = _inputs(workload, n, model, device)
        call = functools.partial(compiled, *inputs)
        out: list[Any] = []
        first.append(host_ms(functools.partial(_keep, call, out, device)))
        check(out[0], model, tuple(inputs), training)
        del out
    torch._dynamo.reset()
    return first


def steady(
    model: torch.nn.Module,
    workload: Workload,
    sizes: list[int],
    columns: list[str],
    runs: int,
    device: str = "cpu",
    training: bool = False,
) -> dict[str, list[float]]:
    """Each column's median ms per call at each size, every column compiled in this process
    and called in turn, `runs` rounds after two calls each (every second round in the reverse
    order; on CUDA one call's time by CUDA events, the host's launches included)."""
    torch._dynamo.reset()
    compiled = {c: _call(torch.compile(model, **COLUMNS[c]), model, training) for c in columns}
    clock = cuda_ms if device == "cuda" else host_ms
    found: dict[str, list[float]] = {c: [] for c in columns}
    for n in sizes:
        args = _inputs(workload, n, model, device)
        calls = {c: functools.partial(f, *args) for c, f in compiled.items()}
        times = interleaved(calls, runs, warmup=2, clock=clock, alternate=True)
        for c, ms in medians(times).items():
            found[c].append(ms)
    torch._dynamo.reset()
    return found


def _inputs(workload: Workload, n: int, model: torch.nn.Module, device: str) -> list[Tensor]:
    """The workload's inputs at size `n`, floats in the model's dtype, on `device`."""
    dtype = next(model.parameters()).dtype
    return [t.to(device, dtype if t.is_floating_point() else t.dtype) for t in workload.inputs(n)]


def check(
    got: Any, model: torch.nn.Module, args: tuple[Tensor, ...], training: bool = False
) -> None:
    """`got` is eager's result for `args`: in f32 on the CPU within 1e-4; in a 16-bit dtype,
    whose eager rounds every intermediate where xfuse's kernels round once, or on CUDA, where
    eager's cuDNN convolutions take TF32 by default, or for a training step (`got` its loss and
    gradients, whose sums over the batch reassociate), by the fuzzer's rule against the model
    run in f64 (an error at most twice eager's: `compare_outputs`)."""
    from xfuse.testing.fuzz.compare import compare_outputs

    expected = _call(model, model, training)(*args)
    if not training and expected.dtype == torch.float32 and expected.device.type == "cpu":
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        return
    wide = copy.deepcopy(model).double()
    reference = _call(wide, wide, training)(
        *(a.double() if a.is_floating_point() else a for a in args)
    )
    problem = compare_outputs(*(list(x) if training else [x] for x in (got, expected, reference)))
    if problem is not None:
        raise AssertionError(problem)


def _keep(call: Callable[[], Any], out: list[Any], device: str) -> None:
    out.append(call())
    if device == "cuda":
        torch.cuda.synchronize()


def table(
    name: str,
    workload: Workload,
    sizes: list[int],
    found: dict[str, Sweep | str],
    training: bool = False,
) -> str:
    """The rows of one model: per size each column's first-call ms and steady ms; under it, the
    error of each column that failed."""
    results = {c: r for c, r in found.items() if isinstance(r, Sweep)}
    columns = list(results)
    header = f"{workload.dim:>6} | " + " | ".join(f"{c + ' first / ms':>30}" for c in columns)
    what = "training step" if training else "call"
    lines = [f"## {name} (first-call ms / steady ms per {what})", header, "-" * len(header)]
    for i, n in enumerate(sizes):
        cells = [f"{results[c].first[i]:>16.1f} / {results[c].steady[i]:>11.3f}" for c in columns]
        lines.append(f"{n:>6} | " + " | ".join(f"{cell:>30}" for cell in cells))
    totals = [
        f"{sum(results[c].first):>16.1f} / {statistics.median(results[c].steady):>11.3f}"
        for c in columns
    ]
    lines.append("-" * len(header))
    lines.append(f"{'sum/med':>6} | " + " | ".join(f"{cell:>30}" for cell in totals))
    lines += [f"{c} failed: {r}" for c, r in found.items() if isinstance(r, str)]
    return "\n".join(lines)


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def _model(name: str, device: str, dtype: str, training: bool = False) -> torch.nn.Module:
    """The workload's model in `eval()` mode, or with `training` in `train()` mode with every
    dropout off."""
    import xfuse  # noqa: F401  (registers the backend)

    torch.manual_seed(0)
    model = WORKLOADS[name].make().train(training).to(device, DTYPES[dtype])
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model


def _grad_mode(training: bool) -> Any:
    return contextlib.nullcontext() if training else torch.no_grad()


def run_first_calls(
    name: str, column: str, sizes: list[int], device: str, dtype: str, training: bool = False
) -> list[float]:
    """One model's first calls for one column in this process."""
    torch._dynamo.config.recompile_limit = 64  # the static column compiles once per size
    model = _model(name, device, dtype, training)
    with _grad_mode(training):
        return sweep(model, WORKLOADS[name], sizes, column, device, training)


def run_steady(
    name: str,
    columns: list[str],
    sizes: list[int],
    runs: int,
    device: str,
    dtype: str,
    training: bool = False,
) -> dict[str, list[float]]:
    """One model's steady times for every column, side by side in this process."""
    torch._dynamo.config.recompile_limit = 64 * len(columns)
    model = _model(name, device, dtype, training)
    with _grad_mode(training):
        return steady(model, WORKLOADS[name], sizes, columns, runs, device, training)


CACHE_ENVIRONMENT = {"xfuse": "XFUSE_CACHE_DIR", "inductor": "TORCHINDUCTOR_CACHE_DIR"}
"""The kernel caches of the columns' compilers (by their folder under a child's cache folder),
each by the environment variable that names its folder."""


def _child(argv: list[str], cache: str) -> Any:
    """The JSON that `python -m benchmarks.dynamic ARGV` prints last, run in a new process with
    the kernel caches (xfuse's and Inductor's, `CACHE_ENVIRONMENT`) in `cache`: where that is
    empty, every column compiles cold, as on a first run, and no worker processes or threads
    of an earlier column share the CPU with its timing."""
    caches = {v: os.path.join(cache, folder) for folder, v in CACHE_ENVIRONMENT.items()}
    command = [sys.executable, "-m", "benchmarks.dynamic", *argv]
    env = {**os.environ, **caches}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        errors = [line for line in lines if "Error" in line] or lines[-1:]
        raise RuntimeError(f"{' '.join(argv[:4])}: {errors[-1][:300] if errors else 'no stderr'}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_model(
    name: str,
    columns: list[str],
    sizes: list[int],
    runs: int,
    device: str,
    dtype: str,
    training: bool = False,
) -> dict[str, Sweep | str]:
    """One model's table: each column's first calls in a process of its own with empty kernel
    caches, then the steady times of all columns in one process whose caches hold what those
    processes compiled (their folders merged: entries are named by their keys), so that it
    loads the columns' kernels and programs instead of compiling them again. A column whose
    first calls failed is its error's last line, and is left out of the steady times."""
    common = [f"--{name}-sizes", ",".join(map(str, sizes)), "--device", device, "--dtype", dtype]
    common += ["--training"] if training else []
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as root:
        first: dict[str, list[float]] = {}
        for c in columns:
            try:
                first[c] = _child(["--one", name, "--columns", c, *common], os.path.join(root, c))
            except RuntimeError as e:
                failed[c] = str(e)
                continue
            _merge(os.path.join(root, c), os.path.join(root, "steady"))
        ran = [c for c in columns if c in first]
        argv = ["--steady", name, "--columns", ",".join(ran), "--runs", str(runs), *common]
        found = _child(argv, os.path.join(root, "steady")) if ran else {}
    return {c: failed[c] if c in failed else Sweep(first[c], found[c]) for c in columns}


def _merge(source: str, target: str) -> None:
    """The kernel caches' files under `source` copied under `target` (modes kept: the caches
    read only owner-only folders and files), beside those already there."""
    if os.path.isdir(source):
        shutil.copytree(source, target, dirs_exist_ok=True, symlinks=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mlp,lm")
    parser.add_argument("--columns", default=",".join(COLUMNS))
    for name, default in DEFAULT_SIZES.items():
        parser.add_argument(f"--{name}-sizes", default=default)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="f32", choices=tuple(DTYPES))
    parser.add_argument("--training", action="store_true", help="time training steps")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # first calls, in the child process
    parser.add_argument("--steady", help=argparse.SUPPRESS)  # steady times, in the child
    args = parser.parse_args(argv)
    columns = args.columns.split(",")
    if args.one is not None:
        sizes = [int(s) for s in getattr(args, f"{args.one}_sizes").split(",")]
        found_first = run_first_calls(
            args.one, columns[0], sizes, args.device, args.dtype, args.training
        )
        print(json.dumps(found_first))
        return
    if args.steady is not None:
        sizes = [int(s) for s in getattr(args, f"{args.steady}_sizes").split(",")]
        found = run_steady(
            args.steady, columns, sizes, args.runs, args.device, args.dtype, args.training
        )
        print(json.dumps(found))
        return
    for name in args.models.split(","):
        sizes = [int(s) for s in getattr(args, f"{name}_sizes").split(",")]
        results = run_model(name, columns, sizes, args.runs, args.device, args.dtype, args.training)
        print(table(name, WORKLOADS[name], sizes, results, args.training), flush=True)
        print()


if __name__ == "__main__":
    main()
