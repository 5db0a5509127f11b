"""`conv2d` imports as the extern `aten.convolution` call torch's decomposition makes of it, so
a program of mapped ops, convolutions and attention (ViT) needs no decomposition; an unbatched
one stays a torch call of itself. Both match eager."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import xfuse
from xfuse.frontend.aten import CONVERTED_WHEN
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


def test_an_unbatched_conv2d_with_string_padding_is_decomposed() -> None:
    conv = nn.Conv2d(3, 8, 3, padding="same")
    x = torch.randn(3, 10, 10)
    with export_support():
        assert needs_decomposition(torch.export.export(conv, (x,)))
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


def _imported_text(module: nn.Module, x: torch.Tensor) -> str:
    return str(import_module(module, (x,)).module)


class _Functional(nn.Module):
    """`F.conv2d` with string padding and int (not list) stride and dilation."""

    def __init__(self, padding: str, stride: int, dilation: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3, 3, 3))
        self.padding, self.stride, self.dilation = padding, stride, dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(
            x, self.weight, None, self.stride, self.padding, self.dilation
        )


@pytest.mark.parametrize(
    "conv",
    [
        nn.Conv2d(3, 8, 3, stride=2, padding="valid"),
        nn.Conv2d(3, 8, 1, padding="same"),
        nn.Conv2d(4, 4, 5, padding="same", groups=4, bias=False),
        nn.Conv2d(3, 8, (3, 5), padding="same", dilation=(2, 1)),
        nn.Conv2d(3, 8, 2, padding="same"),  # pads one side more: decomposed
        nn.Conv2d(3, 8, (3, 2), padding="same", dilation=(1, 2)),  # 2 * (2 - 1): even
        _Functional("same", 1, 2),
        _Functional("valid", 2, 1),
    ],
    ids=[
        "valid",
        "same-1x1",
        "same-depthwise",
        "same-dilated",
        "same-uneven",
        "same-2x2-d2",
        "functional-same",
        "functional-valid",
    ],
)
def test_a_conv2d_with_string_padding_imports_as_its_decomposition(
    conv: nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Imported as exported (no decomposition) where the padding is symmetric, the module is
    the same text as that of the decomposed program."""
    x = torch.randn(1, conv.weight.shape[1] * getattr(conv, "groups", 1), 11, 12)
    with export_support():
        exported = torch.export.export(conv, (x,))
    uneven = isinstance(conv, nn.Conv2d) and conv.kernel_size == (2, 2)
    assert needs_decomposition(exported) == uneven
    ours = _imported_text(conv, x)
    monkeypatch.setitem(CONVERTED_WHEN, "aten.conv2d.padding", lambda node: False)
    with export_support():
        assert needs_decomposition(torch.export.export(conv, (x,)))
    assert ours == _imported_text(conv, x)
    monkeypatch.undo()
    with torch.no_grad():
        torch.testing.assert_close(xfuse.compile(conv, (x,), quiet=True)(x), conv(x))
