# RUN: python %s | filecheck %s
"""The example MLP imports as linear, relu, linear with named parameters."""

import sys
import warnings
from pathlib import Path

warnings.simplefilter("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for examples

from examples.mlp import make_mlp  # noqa: E402
from xfuse.frontend import import_module  # noqa: E402

model, inputs = make_mlp(batch=2, d_in=4, d_hidden=8, d_out=3)
print(import_module(model, inputs).module)

# CHECK:      func.func @forward(%0: tensor<8x4xf32> {graph.param = "fc1.weight"}, %1: tensor<8xf32> {graph.param = "fc1.bias"}, %2: tensor<3x8xf32> {graph.param = "fc2.weight"}, %3: tensor<3xf32> {graph.param = "fc2.bias"}, %4: tensor<2x4xf32> {graph.input = "x"}) -> tensor<2x3xf32> {
# CHECK-NEXT:   %5 = graph.linear %4, %0 bias(%1 : tensor<8xf32>) : tensor<2x4xf32>, tensor<8x4xf32> -> tensor<2x8xf32>
# CHECK-NEXT:   %6 = graph.relu %5 : tensor<2x8xf32>
# CHECK-NEXT:   %7 = graph.linear %6, %2 bias(%3 : tensor<3xf32>) : tensor<2x8xf32>, tensor<3x8xf32> -> tensor<2x3xf32>
# CHECK-NEXT:   func.return %7 : tensor<2x3xf32>
