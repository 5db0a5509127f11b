"""`xfuse.pipeline`: the `-p` syntax from Python, verification after every pass."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, i32
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException, VerifyException

import xfuse
from xfuse.dialects import graph
from xfuse.pipeline import (
    InvalidIRError,
    PassFailedError,
    Pipeline,
    PipelineError,
    known_passes,
    parse_passes,
)

TEXT = """\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.exp %x : tensor<4xf32>
  %1 = graph.exp %x : tensor<4xf32>
  %2 = graph.add %0, %1 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}
"""


@dataclass(frozen=True)
class BreakExpPass(ModulePass):
    """Adds a dead `graph.exp` of an i32 tensor next to every exp: IR that does not verify."""

    name = "test-break-exp"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for exp in [o for o in op.walk() if isinstance(o, graph.ExpOp)]:
            cast = graph.CastOp(exp.input, i32)
            Rewriter.insert_op([cast, graph.ExpOp(cast)], InsertPoint.after(exp))


@dataclass(frozen=True)
class GiveUpPass(ModulePass):
    name = "test-give-up"
    reason: str = "nothing to do"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        raise PassFailedException(self.reason)


TEST_PASSES = {
    **known_passes(),
    BreakExpPass.name: lambda: BreakExpPass,
    GiveUpPass.name: lambda: GiveUpPass,
}


def test_text_to_text() -> None:
    module = xfuse.parse(TEXT)
    result = xfuse.pipeline("cse,canonicalize")(module)
    assert result is module
    assert str(module).count("graph.exp") == 1
    assert str(xfuse.parse(str(module))) == str(module)


def test_options_are_parsed_like_the_cli() -> None:
    p = xfuse.pipeline("cse,convert-memref-to-ptr{lower_func=true}")
    assert isinstance(p, Pipeline)
    assert [q.name for q in p.passes] == ["cse", "convert-memref-to-ptr"]
    assert p.passes[1].lower_func is True
    assert "convert-memref-to-ptr{lower_func=true}" in str(p)


def test_dashes_in_option_names() -> None:
    (p,) = parse_passes('test-give-up{reason="stop here"}', TEST_PASSES)
    assert isinstance(p, GiveUpPass) and p.reason == "stop here"


def test_every_xfuse_pass_is_known() -> None:
    from xfuse.passes import get_all_passes

    assert set(get_all_passes()) <= set(known_passes())


def test_empty_pipeline_only_verifies() -> None:
    module = xfuse.parse(TEXT)
    before = str(module)
    assert str(xfuse.pipeline("")(module)) == before


def test_unknown_pass_lists_known_passes() -> None:
    with pytest.raises(PipelineError) as info:
        xfuse.pipeline("cse,test-brake-exp", passes=TEST_PASSES)
    message = str(info.value)
    assert "unknown pass 'test-brake-exp' (did you mean 'test-break-exp'?)" in message
    assert "test-break-exp, test-give-up" in message
    assert "\n" not in message


def test_unknown_option() -> None:
    with pytest.raises(PipelineError, match="pass 'test-give-up' has no option 'depth'"):
        xfuse.pipeline("test-give-up{depth=3}", passes=TEST_PASSES)


def test_option_of_the_wrong_type() -> None:
    with pytest.raises(
        PipelineError,
        match="pass 'convert-memref-to-ptr': option 'lower-func' must be true or false, found 7$",
    ):
        xfuse.pipeline("convert-memref-to-ptr{lower_func=7}")


def test_malformed_spec() -> None:
    with pytest.raises(PipelineError, match="invalid pass pipeline 'cse{' at column 5"):
        xfuse.pipeline("cse{")


def test_names_the_pass_that_broke_the_ir() -> None:
    module = xfuse.parse(TEXT)
    with pytest.raises(InvalidIRError) as info:
        xfuse.pipeline("cse,test-break-exp,canonicalize", passes=TEST_PASSES)(module)
    error = info.value
    assert error.pass_name == "test-break-exp"
    assert error.op is not None and error.op.name == "graph.exp"
    assert str(error).startswith("error: pass 'test-break-exp' produced invalid IR: 'graph.exp' op")
    assert isinstance(error, VerifyException)


def test_verify_end_verifies_once_and_still_names_the_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from xdsl.dialects.builtin import ModuleOp

    calls: list[int] = []
    verify = ModuleOp.verify

    def counted(self: ModuleOp, verify_nested_ops: bool = True) -> None:
        calls.append(1)
        verify(self, verify_nested_ops)

    monkeypatch.setattr(ModuleOp, "verify", counted)
    good = xfuse.pipeline("cse,canonicalize,cse").verified_at_end()
    assert (good.verify_each, good.verify_end) == (False, True)
    module = xfuse.parse(TEXT)
    calls.clear()
    good(module)
    assert len(calls) == 1  # the result only
    bad = xfuse.pipeline("cse,test-break-exp", passes=TEST_PASSES).verified_at_end()
    with pytest.raises(InvalidIRError) as info:
        bad(xfuse.parse(TEXT))
    assert info.value.pass_name == "test-break-exp"


def test_verify_each_off_lets_invalid_ir_through() -> None:
    module = xfuse.parse(TEXT)
    xfuse.pipeline("test-break-exp", verify_each=False, passes=TEST_PASSES)(module)
    with pytest.raises(VerifyException):
        module.verify()


def test_invalid_input_is_blamed_on_the_input() -> None:
    text = (
        "func.func @f(%x: tensor<4xf32>) -> tensor<5xf32> {\n"
        "  %0 = graph.add %x, %x : tensor<4xf32>, tensor<4xf32> -> tensor<5xf32>\n"
        "  func.return %0 : tensor<5xf32>\n}\n"
    )
    module = xfuse.parse(text, verify=False)
    with pytest.raises(InvalidIRError) as info:
        xfuse.pipeline("cse")(module)
    assert info.value.pass_name is None
    assert str(info.value).startswith("error: 'graph.add' op expected result shape [4], found [5]")


def test_a_failing_pass_is_named() -> None:
    module = xfuse.parse(TEXT)
    with pytest.raises(PassFailedError, match="pass 'test-give-up' failed: nothing to do"):
        xfuse.pipeline("cse,test-give-up", passes=TEST_PASSES)(module)


def test_observer_sees_every_pass() -> None:
    seen: list[tuple[str | None, str | None]] = []

    def observe(before: ModulePass | None, module: ModuleOp, after: ModulePass | None) -> None:
        seen.append((before.name if before else None, after.name if after else None))

    p = Pipeline(parse_passes("cse,canonicalize"), observer=observe)
    p(xfuse.parse(TEXT))
    assert seen == [(None, "cse"), ("cse", "canonicalize"), ("canonicalize", None)]


def test_file_line_col_of_an_op_with_a_location() -> None:
    """`loc("file":line:col)` of an op (what errors about ops that passes created name)."""
    from xfuse.ir.context import parse
    from xfuse.pipeline import file_line_col

    module = parse(
        "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        '  %y = graph.exp %x : tensor<4xf32> loc("model.py":12:5)\n'
        "  func.return %y : tensor<4xf32>\n"
        "}\n"
    )
    assert [file_line_col(op) for op in module.walk()] == [None, None, "model.py:12:5", None]


# ---------------------------------------------------------------------------------------------
# The pipeline xfuse.compile runs
# ---------------------------------------------------------------------------------------------


def test_compile_pipeline_puts_the_device_passes_after_decompose() -> None:
    from xfuse.pipeline import DEFAULT_PIPELINE, PipelineOptions, compile_pipeline

    fusion = [p.name for p in xfuse.pipeline(DEFAULT_PIPELINE).passes]
    cpu = [p.name for p in compile_pipeline("cpu").passes]
    device = ["depthwise-stencil", "channels-last", "attention-mask", "attention-gqa"]
    assert cpu == [fusion[0], *device, *fusion[1:]]
    nchw = [p.name for p in compile_pipeline("cpu", PipelineOptions(channels_last=False)).passes]
    nchw_passes = ["depthwise-stencil", "convolution-matmul", "attention-mask", "attention-gqa"]
    assert nchw == [fusion[0], *nchw_passes, *fusion[1:]]
    cuda = [p.name for p in compile_pipeline("cuda:1", PipelineOptions(channels_last=False)).passes]
    cuda_passes = ["depthwise-stencil", "convolution-bias", "attention-mask", "pad-matmul"]
    assert cuda == [fusion[0], *cuda_passes, *fusion[1:]]
    no_decompose = compile_pipeline("cpu", PipelineOptions("fuse-greedy", without=device[1:]))
    assert [p.name for p in no_decompose.passes] == ["depthwise-stencil", "fuse-greedy"]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_simplify_runs_after_the_device_passes_in_the_static_and_the_symbolic_pipeline(
    device: str,
) -> None:
    """Both pipelines run `decompose`, then their device's passes, then `simplify`
    (`AFTER_DEVICE_PASSES`), and no device pass after it."""
    import torch

    from xfuse.pipeline import PipelineOptions, compile_device_passes, compile_pipeline
    from xfuse.runtime.symbolic import default_passes

    device_names = {p.name for p in compile_device_passes(device, PipelineOptions())}
    static = [p.name for p in compile_pipeline(device).passes]
    symbolic = [p.name for p in xfuse.pipeline(default_passes(torch.device(device))).passes]
    for names in (static, symbolic):
        at = names.index("simplify")
        assert names[0] == "decompose" and set(names[1:at]) <= device_names, names
        assert not device_names & set(names[at:]), names


def test_compile_pipeline_options_reach_the_passes() -> None:
    from xfuse.passes.transforms.channels_last import ChannelsLastPass
    from xfuse.passes.transforms.depthwise_stencil import DepthwiseStencilPass
    from xfuse.pipeline import PipelineOptions, compile_pipeline

    options = PipelineOptions("decompose", channels_last=True, library=("conv a",))
    passes = compile_pipeline("cpu", options).passes
    assert DepthwiseStencilPass(library=("conv a",)) in passes
    assert ChannelsLastPass(force=True, target="cpu") in passes
    assert "convolution-matmul" not in [p.name for p in passes]  # NHWC programs keep theirs


def test_the_description_spells_every_option_and_reads_back() -> None:
    from xfuse.pipeline import PipelineOptions, compile_pipeline

    built = compile_pipeline("cpu", PipelineOptions(library=("x",)))
    text = built.description()
    assert "fuse-scored{window=64" in text and "depthwise-stencil{max_taps=49" in text
    assert parse_passes(text) == built.passes
    assert parse_passes(str(built)) == built.passes
    assert compile_pipeline("cpu").description() != text


def test_the_bisector_replays_the_passes_compile_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU, for a program with a depthwise convolution and attention: the passes the
    bisector applies one by one are those `xfuse.compile` ran, with its measured choices."""
    import torch
    import torch.nn.functional as F

    from xfuse.errors import BisectError
    from xfuse.frontend import import_module
    from xfuse.runtime.cache import KernelCache
    from xfuse.testing import bisect
    from xfuse.testing.bisect import Bisector

    class DepthwiseAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.depthwise(x).flatten(2).transpose(1, 2).reshape(1, 16, 2, 4).transpose(1, 2)
            return F.scaled_dot_product_attention(h, h, h, is_causal=True)

    ran: list[str] = []
    real_apply = Pipeline._apply

    def recording(self: Pipeline, module: ModuleOp) -> ModuleOp:
        ran.append(self.description())
        return real_apply(self, module)

    model, x = DepthwiseAttention().eval().requires_grad_(False), torch.randn(1, 8, 4, 4)
    monkeypatch.setattr(Pipeline, "_apply", recording)
    compiled = xfuse.compile(model, (x,), cache=KernelCache(None), quiet=True)
    monkeypatch.undo()
    assert compiled.report.options is not None and compiled.report.choices  # measured
    assert ran[-1] == compiled.report.pipeline  # the last run is the program's own

    bisector = Bisector.replaying(compiled.report.options, "cpu")
    names = [p.name for p in bisector.compile_passes()]
    assert {"depthwise-stencil", "attention-mask", "attention-gqa"} <= set(names)
    applied: list[str] = []
    real_pass = bisect.apply_pass

    def applying(module_pass: ModulePass, module: ModuleOp) -> ModuleOp:
        applied.append(str(module_pass.pipeline_pass_spec(include_default=True)))
        return real_pass(module_pass, module)

    monkeypatch.setattr(bisect, "apply_pass", applying)
    imported = import_module(model, (x,))
    with pytest.raises(BisectError, match="does not fail"):
        bisector.bisect_module(imported.module, imported.arguments(x), [model(x)])
    assert ",".join(applied) == compiled.report.pipeline
