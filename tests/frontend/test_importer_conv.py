"""`conv2d` imports as the extern `aten.convolution` call torch's decomposition makes of it, so
a program of mapped ops, convolutions and attention (ViT) needs no decomposition; an unbatched
one stays a torch call of itself. Both match eager."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import xfuse
from xfuse.frontend.importer import import_module, needs_decomposition, wrap_function
from xfuse.frontend.pytrees import export_support


def _calls(module: nn.Module, x: torch.Tensor) -> list[str]:
    imported = import_module(module, (x,))
    return [
        f"{op.target.data} {op.args}"  # type: ignore[attr-defined]
        for op in imported.module.walk()
        if op.name == "graph.torch_call"
    ]


@pytest.mark.parametrize(
    ("conv", "shape"),
    [
        (nn.Conv2d(3, 8, 3, stride=2, padding=1), (2, 3, 9, 9)),
        (nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False), (1, 4, 8, 8)),
        (nn.Conv2d(3, 8, (3, 1), dilation=2), (1, 3, 12, 12)),
    ],
    ids=["strided", "depthwise", "dilated"],
)
def test_a_batched_conv2d_is_the_decomposition_s_convolution(
    conv: nn.Module, shape: tuple[int, ...]
) -> None:
    x = torch.randn(shape)
    with export_support():
        exported = torch.export.export(conv, (x,))
    assert not needs_decomposition(exported)
    ours = _calls(conv, x)
    decomposed = exported.run_decompositions()
    theirs = [n for n in decomposed.graph.nodes if n.op == "call_function"]
    assert [str(n.target) for n in theirs] == ["aten.convolution.default"]
    assert len(ours) == 1 and ours[0].startswith("aten.convolution.default")
    (node,) = theirs
    assert f"[{node.args[3][0]} : i64, {node.args[3][1]} : i64]" in ours[0]  # the stride
    with torch.no_grad():
        torch.testing.assert_close(xfuse.compile(conv, (x,), quiet=True)(x), conv(x))


def test_an_unbatched_conv2d_stays_a_call_of_itself() -> None:
    conv = nn.Conv2d(3, 8, 3)
    x = torch.randn(3, 10, 10)
    assert [c.split()[0] for c in _calls(conv, x)] == ["aten.conv2d.default"]
    with torch.no_grad():
        torch.testing.assert_close(xfuse.compile(conv, (x,), quiet=True)(x), conv(x))


def test_wrapped_functions_import_the_same_way() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(x, w, padding=1).relu()

    x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    with export_support():
        exported = torch.export.export(wrap_function(f), (x, w))
    assert not needs_decomposition(exported)
    torch.testing.assert_close(xfuse.compile(f, (x, w), quiet=True)(x, w), f(x, w))
