"""Host time of one xfuse call on CUDA (small inputs, so the GPU is never the limit), split by
a cProfile of the call path: python -m benchmarks.cuda_host_overhead"""

from __future__ import annotations

import cProfile
import pstats
import time

import torch
import torch.nn.functional as F

import xfuse.api


def main() -> None:
    x, w, b = (
        torch.randn(64, 256, device="cuda:0"),
        torch.randn(256, device="cuda:0"),
        torch.randn(256, device="cuda:0"),
    )
    compiled = xfuse.api.compile(
        lambda x, w, b: F.layer_norm(x, (256,), w, b), (x, w, b), device="cuda:0"
    )
    fast = torch.compile(lambda x, w, b: F.layer_norm(x, (256,), w, b))
    for label, fn in (("xfuse", lambda: compiled(x, w, b)), ("inductor", lambda: fast(x, w, b))):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(2000):
            fn()
        torch.cuda.synchronize()
        print(f"{label}: {(time.perf_counter() - start) / 2000 * 1e6:.1f} us per call")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(2000):
        compiled(x, w, b)
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
