"""
How fast can the bf16 pointwise chain gelu(x*w+b)*sigmoid(x) run, with eager's values and
without, as a fraction of copy bandwidth?

Hand-written Triton kernels of the chain at 16384x16384 bf16, each row of x scaled by w and
shifted by b (as `benchmarks/gpu_kernels.py` times it), against eager, xfuse and a device copy:

- `eager's math`: libdevice erf and exp, an IEEE division, a rounding to bf16 after each of
  the five ops, as eager computes it (xfuse's own kernel, timed beside it, gives eager's
  values bit for bit; Triton's compilation of the same formulas does not quite);
- `approximate exp and division`: the same with the hardware's approximate exp2 and divide;
- `one rounding`: those in f32 throughout, rounded to bf16 once at the end;
- `tanh gelu, approximate`: also GELU's tanh form (another function) through approximate exp:
  the cheapest chain that is still a GELU.

Each row: milliseconds (median of CUDA-event timings, interleaved rounds), the fraction of
copy bandwidth (bytes: one read of x, w and b and one write of the output), and how many
elements differ from eager's result (and the largest difference). Needs a GPU and Triton:

    python -m benchmarks.chain_bound [--size 16384] [--rounds 20]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F

import xfuse
from benchmarks.gpu_kernels import copy_bandwidth
from benchmarks.timing import bound, cuda_ms, interleaved, medians


def _kernels() -> dict[str, Callable[..., torch.Tensor]]:
    import triton
    import triton.language as tl

    try:
        from triton.language.extra import libdevice
    except ImportError:  # older Triton
        from triton.language.extra.cuda import libdevice  # type: ignore[no-redef]

    @triton.jit
    def bf(v):  # type: ignore[no-untyped-def]
        return v.to(tl.bfloat16).to(tl.float32)

    @triton.jit
    def chain(x_ptr, w_ptr, b_ptr, out_ptr, n, cols, MODE: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        col = offsets % cols
        x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
        w = tl.load(w_ptr + col, mask=mask).to(tl.float32)
        b = tl.load(b_ptr + col, mask=mask).to(tl.float32)
        if MODE == 0:  # eager's math, rounded after each op
            u = bf(bf(x * w) + b)
            g = bf(0.5 * u * (1.0 + libdevice.erf(u * 0.7071067811865476)))
            s = bf(libdevice.div_rn(1.0, 1.0 + libdevice.exp(-x)))
            y = g * s
        elif MODE == 1:  # approximate exp and division
            u = bf(bf(x * w) + b)
            g = bf(0.5 * u * (1.0 + libdevice.erf(u * 0.7071067811865476)))
            s = bf(1.0 / (1.0 + tl.exp(-x)))
            y = g * s
        elif MODE == 2:  # approximate exp and division, one rounding at the end
            u = x * w + b
            g = 0.5 * u * (1.0 + libdevice.erf(u * 0.7071067811865476))
            y = g / (1.0 + tl.exp(-x))
        else:  # GELU's tanh form (another function), approximate exp and division
            u = x * w + b
            z = 1.5957691216057308 * (u + 0.044715 * u * u * u)  # 2 * sqrt(2 / pi) * (...)
            y = (u / (1.0 + tl.exp(-z))) / (1.0 + tl.exp(-x))
        tl.store(out_ptr + offsets, y.to(tl.bfloat16), mask=mask)

    def variant(mode: int) -> Callable[..., torch.Tensor]:
        def run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            n, block = x.numel(), 1024
            chain[(triton.cdiv(n, block),)](x, w, b, out, n, x.shape[-1], MODE=mode, BLOCK=block)
            return out

        return run

    names = (
        "eager's math",
        "approximate exp and division",
        "one rounding",
        "tanh gelu, approximate",
    )
    return {name: variant(i) for i, name in enumerate(names)}


def eager(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(x * w + b) * torch.sigmoid(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    n = args.size
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    nbytes = 2 * x.numel() * 2 + 2 * n * 2
    bandwidth = copy_bandwidth(10)
    compiled = xfuse.compile(eager, (x, w, b), "cuda", quiet=True, fallback="error")
    cases: dict[str, Callable[..., torch.Tensor]] = {"eager": eager, "xfuse": compiled}
    cases.update(_kernels())
    want = eager(x, w, b)
    ms_of = medians(interleaved(bound(cases, (x, w, b)), args.rounds, warmup=1, clock=cuda_ms))
    print(f"device: {torch.cuda.get_device_name()}; copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    print("| chain | ms | % copy BW | elements differing from eager | largest difference |")
    print("|---|---|---|---|---|")
    for name, fn in cases.items():
        ms = ms_of[name]
        got = fn(x, w, b)
        differ = (got != want).float().mean().item()
        largest = (got.float() - want.float()).abs().max().item()
        share = nbytes / (ms / 1e3) / bandwidth
        print(f"| {name} | {ms:.3f} | {share:.0%} | {differ:.2%} | {largest:.3g} |")


if __name__ == "__main__":
    main()
