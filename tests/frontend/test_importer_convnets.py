"""The convnet ops torch.export gives undecomposed (eval `batch_norm`, `pad`, `max_pool2d`,
`adaptive_avg_pool2d`, a residual `add_`) import as exported, to the IR that the decomposed
program imports to, so ResNet and MobileNetV2 need no decomposition. The forms a converter
cannot take as eager computes them (a training batch norm, a circular pad, an in-place add on
memory something else sees) still have the program decomposed, as before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xfuse
from xfuse.frontend.builder import UnsupportedProgram
from xfuse.frontend.importer import (
    Importer,
    decomposition_table,
    import_module,
    needs_decomposition,
    wrap_function,
)
from xfuse.frontend.pytrees import export_support

_gen = torch.Generator().manual_seed(0)


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen).to(dtype)


def _export(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> Any:
    module = fn if isinstance(fn, nn.Module) else wrap_function(fn)
    with export_support():
        return torch.export.export(module, inputs, strict=False)


def _decomposed_ir(exported: Any) -> str:
    with export_support():
        return str(Importer(exported.run_decompositions(decomposition_table())).run().module)


class _Residual(nn.Module):
    """ResNet's bottleneck tail: `hidden = bn(conv(x)); hidden += shortcut(x)`."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn = _batch_norm(nn.BatchNorm2d(4))
        self.shortcut = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.bn(self.conv(x))
        hidden += self.shortcut(x)
        return hidden.relu()


def _batch_norm(bn: nn.Module) -> nn.Module:
    """A batch norm in eval mode with running statistics other than 0 and 1."""
    bn.running_mean.uniform_(-1, 1, generator=_gen)  # type: ignore[operator]
    bn.running_var.uniform_(0.5, 2, generator=_gen)  # type: ignore[operator]
    return bn.eval()


def _conv_add(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = F.conv2d(x, w, padding=1)
    return y.add_(x, alpha=0.5)


def _aten_convolution(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A convolution as AOTAutograd's forward holds it (`conv2d` decomposed)."""
    return torch.ops.aten.convolution.default(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)


def _convolution_backward(
    g: torch.Tensor, x: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """A convolution's gradients as AOTAutograd's backward holds them."""
    backward = torch.ops.aten.convolution_backward.default
    return backward(g, x, w, [4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])


# (id, function or module, inputs)
AS_EXPORTED: list[tuple[str, Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = [
    (
        "batch_norm",
        nn.Sequential(nn.Conv2d(3, 4, 3), _batch_norm(nn.BatchNorm2d(4))).eval(),
        lambda: (rand(2, 3, 8, 8),),
    ),
    (
        "batch_norm_1d_no_affine",
        _batch_norm(nn.BatchNorm1d(5, affine=False)),
        lambda: (rand(4, 5, 3),),
    ),
    ("pad_constant", lambda x: F.pad(x, (0, 1, 0, 1)) * 2, lambda: (rand(1, 3, 5, 5),)),
    ("pad_zero", lambda x: F.pad(x, (0, 0, 0, 0)) * 2, lambda: (rand(1, 3, 5, 5),)),
    ("pad_value", lambda x: F.pad(x, (1, 2, 0, 1), value=-1.5), lambda: (rand(2, 3, 4),)),
    ("pad_reflect", lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"), lambda: (rand(2, 3, 5, 6),)),
    ("pad_replicate", lambda x: F.pad(x, (2, 1), mode="replicate"), lambda: (rand(2, 3, 5),)),
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), lambda: (rand(2, 3, 9, 9),)),
    (
        "max_pool2d_ceil_unbatched",
        lambda x: F.max_pool2d(x, (3, 2), ceil_mode=True),
        lambda: (rand(3, 8, 7),),
    ),
    ("adaptive_avg_pool2d_1x1", lambda x: F.adaptive_avg_pool2d(x, 1), lambda: (rand(2, 3, 7, 7),)),
    (
        "adaptive_avg_pool2d_uneven",
        lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
        lambda: (rand(1, 2, 7, 7),),
    ),
    ("residual_add_", _Residual().eval(), lambda: (rand(1, 4, 6, 6),)),
    ("conv2d_add_alpha", _conv_add, lambda: (rand(1, 4, 6, 6), rand(4, 4, 3, 3))),
    ("aten_convolution", _aten_convolution, lambda: (rand(2, 3, 6, 6), rand(4, 3, 3, 3), rand(4))),
    (
        "convolution_backward",
        _convolution_backward,
        lambda: (rand(2, 4, 6, 6), rand(2, 3, 6, 6), rand(4, 3, 3, 3)),
    ),
    ("mul_add_", lambda x, y: (x * 2).add_(y).relu(), lambda: (rand(3, 4), rand(4))),
]


@pytest.mark.parametrize(
    ("fn", "make"), [c[1:] for c in AS_EXPORTED], ids=[c[0] for c in AS_EXPORTED]
)
def test_imported_as_exported_to_the_decomposition_s_ir(
    fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]]
) -> None:
    inputs = make()
    exported = _export(fn, inputs)
    assert not needs_decomposition(exported)
    assert str(Importer(exported).run().module) == _decomposed_ir(exported)
    with torch.no_grad():
        want = fn(*inputs)
        got = xfuse.compile(fn, inputs, quiet=True, fallback="error")(*inputs)
    torch.testing.assert_close(got, want)


def _on_input(x: torch.Tensor) -> torch.Tensor:
    return x.add_(1)  # the caller's tensor


def _viewed(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = x * 2
    row = a[0]  # a view: it sees the add
    b = a.add_(y)
    return a * 3 + b + row  # (export reads a, after the add, as the add_ node)


def _onto_dropout(x: torch.Tensor) -> torch.Tensor:
    t = x * 2
    d = F.dropout(t, 0.5, training=False)  # eager: t itself, so add_ writes into t
    return d.add_(1) * t


def _promoted(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * 2).add_(y)  # f16 += f32: eager adds in f32 and rounds once


def _train_batch_norm(x: torch.Tensor) -> torch.Tensor:
    return F.batch_norm(x, None, None, training=True)  # batch statistics, nothing to update


# (id, function or module, inputs, what its compile does: "eager" (matches eager), "refused"
# (the program mutates an input or a buffer), or "aliased" (refused: torch.export's
# decomposition would copy the dropout's result, where eager's add_ writes into t)
DECOMPOSED: list[tuple[str, Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]], str]] = [
    ("batch_norm_training", nn.BatchNorm2d(3).train(), lambda: (rand(2, 3, 4, 4),), "refused"),
    ("batch_norm_batch_statistics", _train_batch_norm, lambda: (rand(4, 3, 5),), "eager"),
    ("add_on_input", _on_input, lambda: (rand(3, 4),), "refused"),
    ("add_viewed", _viewed, lambda: (rand(3, 4), rand(3, 4)), "eager"),
    ("add_onto_dropout", _onto_dropout, lambda: (rand(3, 4),), "aliased"),
    ("add_promoted", _promoted, lambda: (rand(3, 4, dtype=torch.float16), rand(3, 4)), "eager"),
]


@pytest.mark.parametrize(
    ("fn", "make", "compiled"), [c[1:] for c in DECOMPOSED], ids=[c[0] for c in DECOMPOSED]
)
def test_forms_left_to_the_decomposition(
    fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], compiled: str
) -> None:
    """The program is decomposed, as before; the converters refuse these nodes if given them
    (a torch call of a training batch norm or an in-place add would write into memory)."""
    exported = _export(fn, make())
    assert needs_decomposition(exported)
    with pytest.raises(UnsupportedProgram):
        Importer(exported).run()
    _compiles_as_before(fn, make, compiled)


def test_a_circular_pad_is_decomposed() -> None:
    fn = lambda x: F.pad(x, (1, 2, 2, 1), mode="circular")  # noqa: E731
    x = rand(1, 2, 5, 6)
    assert needs_decomposition(_export(fn, (x,)))
    _compiles_as_before(fn, lambda: (x,), "eager")


def _compiles_as_before(
    fn: Callable[..., Any], make: Callable[[], tuple[torch.Tensor, ...]], compiled: str
) -> None:
    if compiled == "refused":
        with pytest.raises(UnsupportedProgram, match="mutates"):
            import_module(fn, make())
    elif compiled == "aliased":
        with pytest.raises(UnsupportedProgram, match="eager may return as its input"):
            import_module(fn, make())
    elif compiled == "eager":
        inputs = make()
        want = fn(*[x.clone() for x in inputs])
        got = xfuse.compile(fn, inputs, quiet=True, fallback="error")(*inputs)
        torch.testing.assert_close(got, want)
