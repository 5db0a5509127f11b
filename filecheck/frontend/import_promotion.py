# RUN: python %s | filecheck %s
"""torch's type promotion becomes explicit casts; scalars become 0-d constants; unmapped ops
become graph.torch_call."""

import warnings

warnings.simplefilter("ignore")

import torch  # noqa: E402

from xfuse.frontend import import_module  # noqa: E402


def fn(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return i + h.float(), (h * 2.5) > 1, torch.sort(h, 0).values


print(import_module(fn, (torch.ones(4, dtype=torch.int64), torch.ones(4, dtype=torch.float16))).module)

# CHECK:      func.func @forward(%0: tensor<4xi64> {graph.input = "i"}, %1: tensor<4xf16> {graph.input = "h"})
# CHECK-NEXT:   %2 = graph.cast %1 : tensor<4xf16> to tensor<4xf32>
# CHECK-NEXT:   %3 = graph.cast %0 : tensor<4xi64> to tensor<4xf32>
# CHECK-NEXT:   %4 = graph.add %3, %2 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
# CHECK-NEXT:   %5 = graph.constant dense<2.500000e+00> : tensor<f16>
# CHECK-NEXT:   %6 = graph.mul %1, %5 : tensor<4xf16>, tensor<f16> -> tensor<4xf16>
# CHECK-NEXT:   %7 = graph.constant dense<1.000000e+00> : tensor<f16>
# CHECK-NEXT:   %8 = graph.gt %6, %7 : tensor<4xf16>, tensor<f16> -> tensor<4xi1>
# CHECK-NEXT:   %9, %10 = graph.torch_call "aten.sort.default"(%1) args = ["%t0", 0 : i64] kwargs = {} : (tensor<4xf16>) -> (tensor<4xf16>, tensor<4xi64>)
# CHECK-NEXT:   func.return %4, %8, %9
