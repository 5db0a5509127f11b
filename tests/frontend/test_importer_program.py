"""The imported program as a whole: signature, parameters, torch_call fallback, unsupported
programs, the core-aten path and the examples."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from frontend_util import check_against_eager, op_names
from test_importer_ops import CASES
from torch import nn

import xfuse
from examples.mlp import make_mlp
from examples.transformer import make_transformer_block
from xfuse import interpret, parse
from xfuse.dialects import graph
from xfuse.frontend import UnsupportedProgram, import_module, import_program
from xfuse.frontend.importer import decomposition_table


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))
        self.register_buffer("shift", torch.ones(3), persistent=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(x) * self.scale + self.shift
        return h, h.sum(-1) + y


def test_signature_params_buffers_and_inputs() -> None:
    model = Small().eval()
    x, y = torch.randn(2, 4), torch.randn(2)
    imported = check_against_eager(model, (x, y))
    f = imported.function
    assert f.sym_name.data == "forward"
    attrs = [a.data for a in f.arg_attrs.data]  # pyright: ignore[reportOptionalMemberAccess]
    params = [a["graph.param"].data for a in attrs if "graph.param" in a]  # pyright: ignore[reportAttributeAccessIssue]
    inputs = [a["graph.input"].data for a in attrs if "graph.input" in a]  # pyright: ignore[reportAttributeAccessIssue]
    assert params == ["fc.weight", "fc.bias", "scale", "shift"]
    assert inputs == ["x", "y"] == imported.input_names
    assert imported.param_names == {0: "fc.weight", 1: "fc.bias", 2: "scale", 3: "shift"}
    assert set(imported.params) == {"fc.weight", "fc.bias", "scale", "shift"}
    assert len(imported.output_names) == 2
    args = imported.arguments(x, y)
    assert args[0] is not None and torch.equal(args[0], model.fc.weight.detach())
    assert args[-2] is x and args[-1] is y


class _ConvAndTwo(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        return self.conv(x) + 1, y * 2, z + 1


def test_tensors_in_channels_last_memory_are_marked() -> None:
    """`graph.channels_last` on each argument passed in channels-last memory (an input, a
    weight) and each result eager returns so; not on contiguous ones, nor on a 4-D tensor of
    one channel (both layouts at once). The module prints and parses back."""
    cl = torch.channels_last
    x = torch.randn(2, 3, 4, 4).contiguous(memory_format=cl)
    y, z = torch.randn(2, 3, 4, 4), torch.randn(2, 1, 4, 4).contiguous(memory_format=cl)
    imported = import_module(_ConvAndTwo().to(memory_format=cl), (x, y, z))
    f = imported.function
    marked = [
        "graph.channels_last" in a.data
        for a in f.arg_attrs.data  # pyright: ignore[reportOptionalMemberAccess]
    ]
    names = [
        next(iter(a.data.values())).data  # pyright: ignore[reportAttributeAccessIssue]
        for a in f.arg_attrs.data  # pyright: ignore[reportOptionalMemberAccess]
    ]
    assert dict(zip(names, marked, strict=True)) == {
        "conv.weight": True,
        "conv.bias": False,
        "x": True,
        "y": False,
        "z": False,
    }
    results = [
        "graph.channels_last" in a.data
        for a in f.res_attrs.data  # pyright: ignore[reportOptionalMemberAccess]
    ]
    assert results == [True, False, False]
    text = str(imported.module)
    assert str(parse(text)) == text


def test_module_prints_and_parses_back() -> None:
    imported = import_module(
        lambda a: torch.softmax(a.masked_fill(a < 0, -1e4), -1) + torch.tensor(1.5),
        (torch.randn(3, 4),),
    )
    text = str(imported.module)
    assert str(parse(text)) == text


def test_module_with_infinite_constant_parses_back() -> None:
    # xDSL 0.74 prints non-finite elements as hex bits and parses them back as integers:
    # the context reads them as bits (xfuse/ir/context.py, _read_hex_float_elements).
    imported = import_module(lambda a: a.masked_fill(a < 0, float("-inf")), (torch.randn(3, 4),))
    text = str(imported.module)
    assert str(parse(text)) == text


def test_specialised_scalar_input_and_kwargs() -> None:
    def fn(x: torch.Tensor, n: int, *, bias: torch.Tensor) -> torch.Tensor:
        return x * n + bias

    x, b = torch.randn(3), torch.randn(3)
    imported = import_module(fn, (x, 4), {"bias": b})
    (got,) = interpret(imported.module, imported.arguments(x, 4, bias=b))
    torch.testing.assert_close(got, x * 4 + b)


def test_function_with_nested_inputs() -> None:
    def fn(xs: list[torch.Tensor]) -> torch.Tensor:
        return xs[0] - xs[1]

    xs = [torch.randn(2), torch.randn(2)]
    imported = import_module(fn, (xs,))
    (got,) = interpret(imported.module, imported.arguments(xs))
    torch.testing.assert_close(got, xs[0] - xs[1])


# ---------------------------------------------------------------------------------------------
# torch_call fallback
# ---------------------------------------------------------------------------------------------

FALLBACK_CASES: list[tuple[str, Any, tuple[Any, ...], str]] = [
    (
        "conv2d",
        nn.Conv2d(3, 4, 3, padding=1).eval(),
        (torch.randn(1, 3, 6, 6),),
        "aten.convolution.default",
    ),
    (
        "kthvalue_two_outputs",  # max.dim decomposes now (amax, argmax): kthvalue has two too
        lambda a: a.kthvalue(2, 1).values + a.kthvalue(2, 1).indices,
        (torch.randn(3, 4),),
        "aten.kthvalue.default",
    ),
    ("sort", lambda a: torch.sort(a, 1).values * 2, (torch.randn(3, 4),), "aten.sort.default"),
    (  # an integer division by a tensor may divide by zero: eager raises, a kernel would trap
        "int_floor_div_by_tensor",
        lambda a, b: a // b,
        (torch.tensor([7, -7, 5]), torch.tensor([2, 3, -4])),
        "aten.floor_divide.default",
    ),
    (
        "digamma_after_in_place_relu",
        lambda a: F.relu(a.clone(), inplace=True).digamma(),
        (torch.randn(6),),
        "aten.digamma.default",
    ),
]


@pytest.mark.parametrize(
    ("fn", "inputs", "target"), [c[1:] for c in FALLBACK_CASES], ids=[c[0] for c in FALLBACK_CASES]
)
def test_unmapped_op_becomes_torch_call(fn: Any, inputs: tuple[Any, ...], target: str) -> None:
    imported = check_against_eager(fn, inputs)
    calls = [op for op in imported.module.walk() if isinstance(op, graph.TorchCallOp)]
    assert any(target in op.target.data for op in calls), [op.target.data for op in calls]


def test_layer_norm_statistics_in_use_become_torch_call() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.ops.aten.native_layer_norm(x, [4], None, None, 1e-5)

    imported = check_against_eager(fn, (torch.randn(3, 4),))
    assert "graph.torch_call" in op_names(imported)
    assert "graph.layer_norm" not in op_names(imported)


# ---------------------------------------------------------------------------------------------
# Unsupported programs
# ---------------------------------------------------------------------------------------------

UNSUPPORTED_CASES: list[tuple[str, Any, tuple[Any, ...], str]] = [
    ("complex_input", lambda a: a * 2, (torch.randn(3, dtype=torch.complex64),), "complex"),
    ("sparse_input", lambda a: a * 2, (torch.eye(3).to_sparse(),), "sparse"),
    ("int8_input", lambda a: a + 1, (torch.ones(3, dtype=torch.int8),), "int8"),
    ("complex_intermediate", lambda a: torch.fft.fft(a).abs(), (torch.randn(8),), "complex"),
    ("buffer_mutation", nn.BatchNorm1d(4).train(), (torch.randn(5, 4),), "mutates"),
]


@pytest.mark.parametrize(
    ("fn", "inputs", "message"),
    [c[1:] for c in UNSUPPORTED_CASES],
    ids=[c[0] for c in UNSUPPORTED_CASES],
)
def test_unsupported_program_has_one_line_reason(
    fn: Any, inputs: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(UnsupportedProgram) as info:
        import_module(fn, inputs)
    text = str(info.value)
    assert message in text
    assert "\n" not in text


# ---------------------------------------------------------------------------------------------
# Programs already in core aten (torch's full default decomposition)
# ---------------------------------------------------------------------------------------------

CORE_ATEN_IDS = {
    "softmax",
    "log_softmax",
    "layer_norm",
    "layer_norm_2d_no_affine",
    "gelu",
    "silu",
    "var",
    "linear",
    "addmm",
    "expand",
    "stack",
    "matmul_batched",
    "matmul_dot",
    "std",
    "dropout_eval",
    "clone_contiguous_detach",
    "where_scalar",
    "lifted_tensor_constant",
    "to_f16",
    "rms_norm",
}


@pytest.mark.parametrize(
    ("fn", "make_inputs"),
    [(c[1], c[2]) for c in CASES if c[0] in CORE_ATEN_IDS],
    ids=[c[0] for c in CASES if c[0] in CORE_ATEN_IDS],
)
def test_core_aten_program_imports_without_torch_call(fn: Any, make_inputs: Any) -> None:
    from xfuse.frontend.importer import wrap_function

    inputs = make_inputs()
    program = torch.export.export(wrap_function(fn), inputs, strict=False).run_decompositions()
    imported = import_program(program)
    want = fn(*inputs)
    got = interpret(imported.module, imported.arguments(*inputs))
    for g, w in zip(got, want if isinstance(want, tuple) else (want,), strict=True):
        torch.testing.assert_close(g, w)
    assert "graph.torch_call" not in op_names(imported)


def test_decomposition_table_keeps_graph_composites() -> None:
    table = decomposition_table()
    for op in (
        torch.ops.aten.linear.default,
        torch.ops.aten.softmax.int,
        torch.ops.aten.layer_norm.default,
    ):
        assert op not in table
    assert torch.ops.aten.stack.default in table


# ---------------------------------------------------------------------------------------------
# Examples
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [make_mlp, make_transformer_block], ids=["mlp", "transformer"])
def test_example_imports_without_torch_call(make: Any) -> None:
    model, inputs = make()
    imported = check_against_eager(model, inputs, atol=1e-4, rtol=1e-4)
    assert "graph.torch_call" not in op_names(imported)


def _library_op_with_an_int_result() -> Any:
    """`xfuse_probe::with_len(x) -> (x * 2, len(x))`: a library op whose tuple result holds an
    int beside its tensor, as CUDA's attention kernels report the longest sequence."""
    lib = torch.library.Library("xfuse_probe", "FRAGMENT")
    lib.define("with_len(Tensor x) -> (Tensor, SymInt)")
    lib.impl("with_len", lambda x: (x * 2, x.shape[0]), "CompositeExplicitAutograd")
    lib.impl("with_len", lambda x: (torch.empty_like(x), x.shape[0]), "Meta")
    # A kernel that returns a tensor where its trace says None (CUDA's cuDNN attention does).
    lib.define("with_unused(Tensor x) -> (Tensor, Tensor, Tensor)")
    lib.impl("with_unused", lambda x: (x * 2, x.new_empty(0), x + 1), "CompositeExplicitAutograd")
    lib.impl("with_unused", lambda x: (torch.empty_like(x), None, torch.empty_like(x)), "Meta")
    return lib


WITH_LEN = _library_op_with_an_int_result()


def test_an_unread_int_result_of_a_library_call_gets_no_value() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y, _ = torch.ops.xfuse_probe.with_len(x)
        return y + 1

    x = torch.randn(4, 3)
    program = xfuse.compile(f, (x,), fallback="error")
    torch.testing.assert_close(program(x), f(x))


def test_a_read_int_result_of_a_library_call_is_the_static_size_it_reports() -> None:
    """torch.export specialises the int to the size it is at these shapes."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y, n = torch.ops.xfuse_probe.with_len(x)
        return y * n

    x = torch.randn(4, 3)
    torch.testing.assert_close(xfuse.compile(f, (x,), fallback="error")(x), f(x))


def test_a_library_call_that_returns_more_tensors_than_its_trace_picks_by_position() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        a, _, b = torch.ops.xfuse_probe.with_unused(x)
        return a - b

    x = torch.randn(4, 3)
    program = xfuse.compile(f, (x,), fallback="error")
    torch.testing.assert_close(program(x), f(x))
    text = str(import_module(f, (x,)).module)
    assert "picks = [0 : i64, 2 : i64]" in text
    assert parse(text).is_structurally_equivalent(parse(text))  # it parses back
