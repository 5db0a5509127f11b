"""Print a bundled model's graph IR: the text `xfuse-opt` and `xfuse.parse` read.

    python -m examples.to_mlir mlp > examples/mlp.mlir   # what `make examples/mlp.mlir` runs
    python -m examples.to_mlir transformer

The IR is the importer's (`xfuse.frontend.import_module(model, inputs).module`) for the model
and example inputs of `examples.<model>.make_*()`: parameters are function arguments (named by
`graph.param`), so the text holds the program, not its weights.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

import xfuse
from examples.convnet import make_convnet
from examples.mlp import make_mlp
from examples.transformer import make_transformer_block

Make = Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]
MODELS: dict[str, Make] = {
    "mlp": make_mlp,
    "transformer": make_transformer_block,
    "convnet": make_convnet,
}


def to_mlir(name: str) -> str:
    """The imported graph IR of the bundled model `name`, as text."""
    model, inputs = MODELS[name]()
    return str(xfuse.frontend.import_module(model, inputs).module)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="print a bundled model's graph IR")
    parser.add_argument("model", choices=sorted(MODELS))
    args = parser.parse_args(argv)
    print(to_mlir(args.model))


if __name__ == "__main__":
    main()
