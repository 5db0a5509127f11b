"""`pad-matmul`: 16-bit products whose rows are not whole 16-byte vectors run padded and are
sliced back; the program computes what it did, and what eager computes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xfuse
from tests.backends.test_cuda import gpu
from xfuse import interpret
from xfuse.dialects import graph
from xfuse.frontend import import_module
from xfuse.passes.transforms.pad_matmul import PadMatmulPass, candidates

PADDED = (
    "decompose,pad-matmul{min-columns=8},split-reductions,fuse-scored,group-cleanup,fold-linear"
)
PLAIN = "decompose,split-reductions,fuse-scored,group-cleanup,fold-linear"


class Head(torch.nn.Module):
    """A language model's head: a ReLU, the product with an unaligned 301-row weight, a scale."""

    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 301, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.relu(x)) * 2


def ops(module: object, op_type: type) -> int:
    return sum(isinstance(op, op_type) for op in module.walk())  # type: ignore[attr-defined]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bias", [False, True])
def test_padded_program_interprets_as_before(dtype: torch.dtype, bias: bool) -> None:
    model = Head(bias).to(dtype).eval()
    # Small integers: every dot product is exact whatever order a library kernel sums it in
    # (torch's 16-bit CPU products may block a padded product's columns differently).
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-1, 2, p.shape))
    x = torch.randint(-1, 2, (3, 5, 64)).to(dtype)
    imported = import_module(model, (x,))
    args = imported.arguments(x)
    xfuse.pipeline("decompose")(imported.module)
    before = interpret(imported.module, args)
    xfuse.pipeline("pad-matmul{min-columns=8}")(imported.module)
    assert ops(imported.module, graph.PadOp) == 1  # (`decompose` made the bias an add)
    assert ops(imported.module, graph.SliceOp) == 1
    # Each kept column is the same dot product of the same values.
    torch.testing.assert_close(interpret(imported.module, args), before, rtol=0, atol=0)


@pytest.mark.parametrize("bias", [False, True])
def test_compiled_padded_head_matches_eager(bias: bool) -> None:
    model = Head(bias).to(torch.bfloat16).eval()
    x = torch.randn(3, 5, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        padded = xfuse.compile(model, (x,), pipeline=PADDED, quiet=True)
        plain = xfuse.compile(model, (x,), pipeline=PLAIN, quiet=True)
        got, want, unpadded = padded(x), model(x), plain(x)
        # xfuse adds a bias after the product, rounded once more in bf16 (`decompose`), where
        # eager's addmm adds it in the product's epilogue: eager spelled the same way.
        product = F.linear(torch.relu(x), model.proj.weight)
        spelled = (product if model.proj.bias is None else product + model.proj.bias) * 2
    assert got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got, unpadded, rtol=0, atol=0)
    torch.testing.assert_close(got, spelled)


class _Copies(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts torch's `copy_` calls under it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.count += func is torch.ops.aten.copy_.default
        return func(*args, **(kwargs or {}))


def test_a_returned_padded_product_is_written_row_major_by_a_kernel() -> None:
    """Logits the program returns: the slice back from the padded product is a kernel's
    (its rows row-major, as eager's), not a view whose rows lie a padded row apart, which
    the runtime would copy into eager's strides with torch's `copy_`."""
    model = torch.nn.Linear(64, 301, bias=False).to(torch.bfloat16).eval()
    x = torch.randn(3, 5, 64, dtype=torch.bfloat16)
    copies = _Copies()
    with torch.no_grad():
        compiled = xfuse.compile(model, (x,), pipeline=PADDED, quiet=True)
        with copies:
            got = compiled(x)
        want = model(x)
    assert [g.ops for g in compiled.groups] == [["graph.slice"]]
    assert copies.count == 0
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want)


def test_matmul_of_a_plain_rhs_is_padded_in_its_columns() -> None:
    def product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ w)

    x = torch.randn(2, 6, 32, dtype=torch.float16)
    w = torch.randn(32, 45, dtype=torch.float16)
    with torch.no_grad():
        compiled = xfuse.compile(product, (x, w), pipeline=PADDED, quiet=True)
        torch.testing.assert_close(compiled(x, w), product(x, w))
    assert any(
        op.startswith("graph.pad") for op in xfuse.explain(product, (x, w), pipeline=PADDED).ops
    )


def test_f32_and_aligned_products_are_left_alone() -> None:
    for dtype, rows in ((torch.float32, 301), (torch.bfloat16, 304)):
        model = torch.nn.Linear(64, rows).to(dtype).eval()
        imported = import_module(model, (torch.randn(4, 64, dtype=dtype),))
        xfuse.pipeline("decompose,pad-matmul{min-columns=8}")(imported.module)
        assert ops(imported.module, graph.PadOp) == 0


def test_a_product_is_named_as_the_pass_sees_it() -> None:
    """After `decompose` a linear's bias is an add of its own: the product the pass pads is
    the bias-free one, returned only where nothing reads it but the return."""
    for model, want in (
        (Head(bias=True), "15x64x301 linear bf16"),
        (torch.nn.Linear(64, 301, bias=False), "15x64x301 linear bf16 returned"),
    ):
        x = torch.randn(3, 5, 64, dtype=torch.bfloat16)
        imported = import_module(model.to(torch.bfloat16).eval(), (x,))
        xfuse.pipeline("decompose")(imported.module)
        assert [p.signature for p in candidates(imported.module)] == [want]
    w = torch.randn(32, 301, dtype=torch.float16)
    imported = import_module(lambda x, w: x @ w, (torch.randn(2, 6, 32, dtype=torch.float16), w))
    assert [p.signature for p in candidates(imported.module)] == ["12x32x301 matmul f16 returned"]


def test_products_named_unpadded_are_left_alone() -> None:
    model = Head(bias=False).to(torch.bfloat16).eval()
    imported = import_module(model, (torch.randn(3, 5, 64, dtype=torch.bfloat16),))
    xfuse.pipeline("decompose")(imported.module)
    (product,) = candidates(imported.module)
    other = imported.module.clone()
    PadMatmulPass(unpadded=(product.signature,)).apply(xfuse.make_context(), imported.module)
    PadMatmulPass(unpadded=("1x64x301 linear bf16",)).apply(xfuse.make_context(), other)
    assert ops(imported.module, graph.PadOp) == 0
    assert ops(other, graph.PadOp) == 1


@gpu
def test_gpu_compile_pads_an_unaligned_bf16_head_where_measured_faster() -> None:
    """The head is timed padded and not (`xfuse.choices`), the verdict explained, and the
    program is as the verdict says: padded or not, eager's values and strides."""
    model = Head(bias=True).to("cuda", torch.bfloat16).eval()
    for rows in (1, 4096):
        x = torch.randn(rows, 64, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            compiled = xfuse.compile(model, (x,), device="cuda", quiet=True)
            got = [compiled(x) for _ in range(3)]  # step by step, captured, replayed
            product = F.linear(torch.relu(x), model.proj.weight)
            spelled = (product + model.proj.bias) * 2
        (verdict,) = [c for c in compiled.report.choices if "linear bf16" in str(c)]
        assert str(verdict).startswith(f"matrix product {rows}x64x301 linear bf16: ")
        padded = any(op.startswith("graph.pad") for op in xfuse.explain(model, (x,), "cuda").ops)
        assert padded == (verdict.kept == "padded")
        for y in got:
            assert y.stride() == spelled.stride()
            torch.testing.assert_close(y, spelled)
