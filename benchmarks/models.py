"""
The model zoo: Hugging Face transformers models built from configs with random weights (never
downloaded), each through `xfuse.compile` and `torch.compile(backend="xfuse")`, against eager.

    python -m benchmarks.models [--size small|base] [--device cpu|cuda|all] [--models gpt2,...]
                                  [--runs 10] [--no-inductor] [--strict]

For each model, entry point, device and dtype (cpu: f32; cuda: f32 with TF32 off, and bf16) it
prints: match with eager (f32: assert_close at 1e-4 relative to the output's magnitude, bf16:
3e-2), graphs (dynamo's; graph breaks = graphs - 1), groups, kernels, extern ops by name,
torch_calls by aten op, fallbacks (graphs and groups run eagerly), groups run op by op, compile time, and the
kernels and compile times beside Inductor's (`kernels` row: xfuse's kernels per forward and
Inductor's kernel launches per forward, C++ kernels on the CPU and Triton kernels on CUDA,
counted from its output code, with its `generated_kernel_count` metric; xfuse's cold compile
into an empty disk kernel cache, its warm start from that cache with the in-memory caches
new (in the same process, and in a new one: `new process`, less its imports), and Inductor's compile with its caches disabled, first call included), and the
median time per forward of eager, Inductor and xfuse, run interleaved in one process (CUDA
events on the GPU). On CUDA, Inductor runs in its default mode and with `mode="reduce-overhead"` (its CUDA graphs),
and xfuse with its CUDA graphs (on by default). `tests/models/test_zoo.py` runs the small
configs in CI.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from torch.utils import _pytree as pytree

import xfuse
import xfuse.api
import xfuse.dynamo
from benchmarks.timing import device_ms, interleaved, medians
from xfuse.errors import FallbackWarning
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.compile_workers import POOL

Tensor = torch.Tensor
Built = tuple[torch.nn.Module, tuple[Tensor, ...]]
SIZES = ("small", "base")
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2}
"""assert_close's rtol, and atol as a fraction of the output's largest magnitude."""


# ---------------------------------------------------------------------------------------------
# The models (configs only; random weights)
# ---------------------------------------------------------------------------------------------


def _tokens(vocab: int, length: int) -> tuple[Tensor, ...]:
    return (torch.randint(0, vocab, (1, length)),)


def gpt2(size: str) -> Built:
    from transformers import GPT2Config, GPT2LMHeadModel

    small = size == "small"
    config = GPT2Config(
        n_layer=2 if small else 12,
        n_embd=64 if small else 768,
        n_head=4 if small else 12,
        vocab_size=256 if small else 50257,
        n_positions=64 if small else 1024,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config), _tokens(config.vocab_size, 16 if small else 128)


def llama(size: str) -> Built:
    from transformers import LlamaConfig, LlamaForCausalLM

    small = size == "small"
    config = LlamaConfig(
        num_hidden_layers=2 if small else 8,
        hidden_size=64 if small else 1024,
        intermediate_size=128 if small else 2816,
        num_attention_heads=4 if small else 16,
        num_key_value_heads=2 if small else 4,
        vocab_size=256 if small else 32000,
        max_position_embeddings=64 if small else 2048,
    )
    return LlamaForCausalLM(config), _tokens(config.vocab_size, 16 if small else 128)


def bert(size: str) -> Built:
    from transformers import BertConfig, BertModel

    small = size == "small"
    config = BertConfig(
        num_hidden_layers=2 if small else 12,
        hidden_size=64 if small else 768,
        intermediate_size=128 if small else 3072,
        num_attention_heads=4 if small else 12,
        vocab_size=256 if small else 30522,
        max_position_embeddings=64 if small else 512,
    )
    return BertModel(config), _tokens(config.vocab_size, 16 if small else 128)


def resnet(size: str) -> Built:
    from transformers import ResNetConfig, ResNetModel

    small = size == "small"
    config = ResNetConfig(  # ResNet-50: bottleneck blocks [3, 4, 6, 3]
        embedding_size=16 if small else 64,
        hidden_sizes=[32, 64, 128, 256] if small else [256, 512, 1024, 2048],
        depths=[1, 1, 1, 1] if small else [3, 4, 6, 3],
        layer_type="bottleneck",
    )
    side = 64 if small else 224
    return ResNetModel(config), (torch.randn(1, 3, side, side),)


def vit(size: str) -> Built:
    from transformers import ViTConfig, ViTModel

    small = size == "small"
    config = ViTConfig(
        num_hidden_layers=2 if small else 12,
        hidden_size=64 if small else 768,
        intermediate_size=128 if small else 3072,
        num_attention_heads=4 if small else 12,
        image_size=32 if small else 224,
        patch_size=8 if small else 16,
    )
    side = config.image_size
    return ViTModel(config), (torch.randn(1, 3, side, side),)


def mobilenet_v2(size: str) -> Built:
    from transformers import MobileNetV2Config, MobileNetV2Model

    small = size == "small"
    config = MobileNetV2Config(
        image_size=64 if small else 224, depth_multiplier=0.35 if small else 1.0
    )
    side = config.image_size
    return MobileNetV2Model(config), (torch.randn(1, 3, side, side),)


ZOO: dict[str, Callable[[str], Built]] = {
    "gpt2": gpt2,
    "llama": llama,
    "bert": bert,
    "resnet": resnet,
    "vit": vit,
    "mobilenet_v2": mobilenet_v2,
}


def build(name: str, size: str, device: str, dtype: torch.dtype) -> Built:
    """A zoo model in eval mode on `device` in `dtype` (token ids stay integers), seeded."""
    torch.manual_seed(0)
    model, inputs = ZOO[name](size)
    model = model.eval().to(device=device, dtype=dtype)
    moved = tuple(
        x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype) for x in inputs
    )
    return model, moved


# ---------------------------------------------------------------------------------------------
# Checking and counting
# ---------------------------------------------------------------------------------------------


def tensors_of(output: Any) -> list[Tensor]:
    """The tensors of a model output (ModelOutput dataclasses and caches are pytrees)."""
    return [t for t in pytree.tree_leaves(output) if isinstance(t, Tensor)]


def assert_matches(got: Any, want: Any, dtype: torch.dtype) -> None:
    """Every output tensor close to eager: rtol and atol relative to the output's magnitude."""
    rel = TOLERANCE[dtype]
    gots, wants = tensors_of(got), tensors_of(want)
    assert len(gots) == len(wants), f"{len(gots)} output tensors, eager has {len(wants)}"
    for g, w in zip(gots, wants, strict=True):
        scale = float(w.detach().abs().max()) if w.numel() else 0.0
        torch.testing.assert_close(g, w, rtol=rel, atol=rel * max(scale, 1e-30))


@dataclass
class Report:
    """What one entry point made of one model."""

    graphs: int = 0
    groups: int = 0
    kernels: int = 0
    externs: Counter[str] = field(default_factory=Counter[str])
    torch_calls: Counter[str] = field(default_factory=Counter[str])
    graph_fallbacks: list[str] = field(default_factory=list[str])
    group_fallbacks: list[str] = field(default_factory=list[str])
    op_by_op: list[str] = field(default_factory=list[str])
    """Groups compiled op by op (their lowering refused them; fusion should form none)."""
    compile_s: float = 0.0
    warm_s: float | None = None
    """`xfuse.compile` again from the disk kernel cache (None: not measured)."""
    warm_phases: dict[str, float] = field(default_factory=dict[str, float])
    """Where the warm start's time went (`CompiledProgram.compile_times`)."""
    fresh: dict[str, Any] | None = None
    """The warm start of a new process (`warm_start_in_new_process`)."""
    match: str = "-"

    def add(self, compiled: xfuse.api.CompiledProgram) -> None:
        self.graphs += 1
        self.groups += len(compiled.groups)
        self.kernels += len(compiled.kernels)
        self.group_fallbacks += compiled.fallbacks
        self.op_by_op += compiled.op_by_op
        for op in compiled.default.program.module.walk():
            if op.name == "graph.torch_call":
                target = op.properties["target"].data  # type: ignore[attr-defined]
                self.torch_calls[target] += 1
                self.externs[f"torch_call {target}"] += 1
            elif op.name in ("graph.matmul", "graph.linear", "graph.conv"):
                self.externs[op.name.removeprefix("graph.")] += 1


def via_xfuse_compile(
    model: torch.nn.Module,
    inputs: tuple[Tensor, ...],
    device: str,
    fallback: str | None,
    fresh: tuple[str, str, torch.dtype] | None = None,
) -> tuple[Callable[..., Any], Report]:
    """`xfuse.compile` cold (an empty disk kernel cache, no compile workers running), then
    again from that cache with new in-memory caches; with `fresh` (the model's name, size and
    dtype) also in a new process (`warm_start_in_new_process`). The same process's warm start
    finds torch's own caches filled by the cold compile (its fake tensors' dispatch cache
    above all), a new process's does not: that one is what a user waits for."""
    report = Report()
    POOL.stop()  # cold: the compile workers start with the compilation, as in a new process
    with tempfile.TemporaryDirectory(prefix="xfuse-models-") as directory:
        start = time.perf_counter()
        xfuse.compile(
            model, inputs, device, quiet=True, fallback=fallback, cache=KernelCache(Path(directory))
        )
        report.compile_s = time.perf_counter() - start
        start = time.perf_counter()
        compiled = xfuse.compile(
            model, inputs, device, quiet=True, fallback=fallback, cache=KernelCache(Path(directory))
        )
        report.warm_s = time.perf_counter() - start
        report.warm_phases = compiled.compile_times
        if fresh is not None:
            report.fresh = warm_start_in_new_process(*fresh, device, fallback, Path(directory))
    report.add(compiled)
    return compiled, report


WARM_IMPORTS = {
    "cpu": ("torch.export._trace", "xfuse.api", "xfuse.backends.cpu"),
    "cuda": ("torch.export._trace", "xfuse.api", "xfuse.backends.cuda"),
}
"""What a new process imports before its warm start is timed (xfuse's entry points import the
rest of it when called): the benchmark's warm start is that of a process less its imports."""


def warm_start_in_new_process(
    name: str, size: str, dtype: torch.dtype, device: str, fallback: str | None, directory: Path
) -> dict[str, Any]:
    """`xfuse.compile` of the zoo model in a new Python process from the disk cache
    `directory`: its seconds, phases and cache statistics (`_warm_child`)."""
    command = [sys.executable, "-m", "benchmarks.models", "--warm-child"]
    command += [json.dumps([name, size, _dtype(dtype), device, fallback, str(directory)])]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the new process failed: {done.stderr.strip()[-300:]}")
    return cast(dict[str, Any], json.loads(lines[-1]))


def _warm_child(spec: str) -> None:
    name, size, dtype, device, fallback, directory = json.loads(spec)
    import importlib

    for module in WARM_IMPORTS[device]:
        importlib.import_module(module)
    model, inputs = build(name, size, device, DTYPES[dtype])
    cache = KernelCache(Path(directory))
    start = time.perf_counter()
    compiled = xfuse.compile(model, inputs, device, quiet=True, fallback=fallback, cache=cache)
    seconds = time.perf_counter() - start
    stats = cache.stats
    print(
        json.dumps(
            {
                "s": seconds,
                "phases": compiled.compile_times,
                "program_hits": stats.program_hits,
                "import_hits": stats.import_hits,
                "compiles": stats.compiles,
            }
        )
    )


def via_torch_compile(
    model: torch.nn.Module, inputs: tuple[Tensor, ...], fallback: str | None
) -> tuple[Callable[..., Any], Report]:
    """torch.compile with a backend that counts dynamo's graphs and what xfuse made of each."""
    report = Report()
    options = {} if fallback is None else {"fallback": fallback}

    def counting(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", FallbackWarning)
            run = xfuse.dynamo.dynamo_backend(gm, example_inputs, options)
        compiled = getattr(run, "compiled", None)
        if compiled is None:
            report.graphs += 1
            report.graph_fallbacks += [str(w.message) for w in caught]
        else:
            report.add(compiled)
        return run

    torch._dynamo.reset()
    fn = torch.compile(model, backend=counting)
    start = time.perf_counter()
    with torch.no_grad():
        fn(*inputs)
    report.compile_s = time.perf_counter() - start
    return fn, report


@dataclass
class InductorCompile:
    """Inductor's compile of one model: its kernel launches per forward (counted in its output
    code: the calls of the kernels it defines, C++ on the CPU, Triton on CUDA), its
    `generated_kernel_count` metric (on the CPU it counts each loop nest of a fused C++ kernel),
    and the seconds to compile with its caches disabled, first call included."""

    fn: Callable[..., Any]
    kernels: int
    metric: int
    compile_s: float


def kernel_launches(code: str) -> int:
    """Calls of the kernels an Inductor output module defines (`name = async_compile.*(...)`,
    called as `name(...)` on the CPU and `name.run(...)` for Triton)."""
    names = re.findall(r"^(\w+) = async_compile\.\w+\(", code, re.MULTILINE)
    return sum(
        len(re.findall(rf"^\s+{re.escape(n)}(?:\.run)?\(", code, re.MULTILINE)) for n in names
    )


def inductor_compile(model: torch.nn.Module, inputs: tuple[Tensor, ...]) -> InductorCompile:
    from torch._inductor import config, metrics
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    metrics.reset()
    start = time.perf_counter()
    with config.patch(force_disable_caches=True), torch.no_grad():
        fn = torch.compile(model)
        _, codes = run_and_get_code(fn, *inputs)
    seconds = time.perf_counter() - start
    kernels = sum(kernel_launches(code) for code in codes)
    return InductorCompile(fn, kernels, metrics.generated_kernel_count, seconds)


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def time_interleaved(fns: dict[str, Callable[[], Any]], runs: int, device: str) -> dict[str, float]:
    """Median ms per call of each function, the functions run in turn in each round."""
    return medians(interleaved(fns, runs, warmup=2, clock=device_ms(device)))


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------


def run_one(
    name: str, size: str, device: str, dtype: torch.dtype, args: argparse.Namespace
) -> list[str]:
    model, inputs = build(name, size, device, dtype)
    fallback = "error" if args.strict else None
    with torch.no_grad():
        want = model(*inputs)
    rows: list[str] = []
    fns: dict[str, Callable[[], Any]] = {"eager": lambda: model(*inputs)}
    direct: Report | None = None
    for entry, make in (
        (
            "xfuse.compile",
            lambda: via_xfuse_compile(model, inputs, device, fallback, (name, size, dtype)),
        ),
        ("torch.compile", lambda: via_torch_compile(model, inputs, fallback)),
    ):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FallbackWarning)
                fn, report = make()
                with torch.no_grad():
                    got = fn(*inputs)
            try:
                assert_matches(got, want, dtype)
                report.match = "yes"
            except AssertionError as e:
                report.match = "NO: " + str(e).strip().splitlines()[0]
        except Exception as e:  # a row says what failed; the table goes on
            rows.append(f"| {name} | {entry} | {device} {_dtype(dtype)} | FAILED: {e!s:.200} |")
            continue
        if entry == "xfuse.compile":
            fns["xfuse"] = lambda fn=fn: fn(*inputs)
            direct = report
        rows.append(_row(name, entry, device, dtype, report))
    if not args.no_inductor:
        ind = inductor_compile(model, inputs)
        inductor = ind.fn
        fns["inductor"] = lambda: inductor(*inputs)
        if direct is not None:
            rows.append(_kernels_row(name, device, dtype, direct, ind))
        if device.startswith("cuda"):  # Inductor with its CUDA graphs, beside xfuse's
            overhead = torch.compile(model, mode="reduce-overhead")
            with torch.no_grad():
                overhead(*inputs)
            fns["inductor-ro"] = lambda: overhead(*inputs)
    with torch.no_grad():
        ms = time_interleaved(fns, args.runs, device)
    ratios = [f"xfuse/{k} {ms['xfuse'] / ms[k]:.2f}" for k in ms if k != "xfuse" and "xfuse" in ms]
    rows.append(
        f"| {name} | time/forward | {device} {_dtype(dtype)} | "
        + ", ".join(f"{k} {v:.3f} ms" for k, v in ms.items())
        + (" (" + ", ".join(ratios) + ")" if ratios else "")
        + " |"
    )
    return rows


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def _dtype(dtype: torch.dtype) -> str:
    return {v: k for k, v in DTYPES.items()}[dtype]


def _counts(c: Counter[str]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in c.most_common()) or "-"


def _warm(r: Report) -> str:
    if r.warm_s is None:
        return ""
    phases = "".join(f", {k} {v:.2f}" for k, v in r.warm_phases.items())
    return f" (warm {r.warm_s:.2f} s{phases}{_fresh(r)})"


def _fresh(r: Report) -> str:
    """The new process's warm start: seconds, phases, whether it exported (no export key, or
    none found), and whether it skipped the passes and compiled nothing (else it was no warm
    start, and the row says so)."""
    if r.fresh is None:
        return ""
    phases = "".join(f", {k} {v:.2f}" for k, v in r.fresh["phases"].items())
    hit = r.fresh["program_hits"] == 1 and r.fresh["compiles"] == 0
    exported = "" if r.fresh.get("import_hits") else ", exported"
    missed = "" if hit else f" NOT FROM THE CACHE: {r.fresh}"
    return f"; new process {r.fresh['s']:.2f} s{phases}{exported}{missed}"


def _row(name: str, entry: str, device: str, dtype: torch.dtype, r: Report) -> str:
    fallbacks = len(r.graph_fallbacks) + len(r.group_fallbacks)
    detail = "; ".join(r.graph_fallbacks + r.group_fallbacks)[:300]
    return (
        f"| {name} | {entry} | {device} {_dtype(dtype)} | match {r.match} | graphs {r.graphs} | "
        f"groups {r.groups} | kernels {r.kernels} | fallbacks {fallbacks} "
        f"({len(r.graph_fallbacks)} graph, {len(r.group_fallbacks)} group){': ' + detail if detail else ''} | "
        f"op by op {len(r.op_by_op)} | "
        f"compile {r.compile_s:.2f} s{_warm(r)} | externs: {_counts(r.externs)} |"
    )


def _kernels_row(
    name: str, device: str, dtype: torch.dtype, r: Report, ind: InductorCompile
) -> str:
    warm = "-" if r.warm_s is None else f"{r.warm_s:.2f} s"
    if r.fresh is not None:
        warm += f" (new process {r.fresh['s']:.2f} s)"
    return (
        f"| {name} | kernels | {device} {_dtype(dtype)} | xfuse {r.kernels}, Inductor "
        f"{ind.kernels} (generated_kernel_count {ind.metric}) | compile: xfuse cold "
        f"{r.compile_s:.2f} s, warm {warm}; Inductor {ind.compile_s:.2f} s |"
    )


def configurations(device: str) -> list[tuple[str, torch.dtype]]:
    found = [("cpu", torch.float32)] if device in ("cpu", "all") else []
    if device in ("cuda", "all") and torch.cuda.is_available():
        found += [("cuda", torch.float32), ("cuda", torch.bfloat16)]
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--device", choices=("cpu", "cuda", "all"), default="all")
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--strict", action="store_true", help="fallback='error'")
    parser.add_argument("--warm-child", help=argparse.SUPPRESS)  # warm_start_in_new_process
    args = parser.parse_args(argv)
    if args.warm_child:
        _warm_child(args.warm_child)
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print("| model | entry point | device | results |")
    print("|---|---|---|---|")
    for name in args.models.split(","):
        for device, dtype in configurations(args.device):
            for row in run_one(name, args.size, device, dtype, args):
                print(row, flush=True)


if __name__ == "__main__":
    main()
