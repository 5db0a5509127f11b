"""Bad input everywhere: each gets one clear message (no traceback from the CLI) and never a
wrong result. Complements tests/cli/test_opt.py and tests/test_api.py (which cover syntax
errors, unknown ops, passes and options, a missing file, and bad call arguments)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import xfuse
from xfuse.cli.opt import main as opt_main
from xfuse.errors import (
    EagerRuntimeError,
    EagerTypeError,
    ExportError,
    FallbackWarning,
    InvalidArgumentError,
    KernelCacheWarning,
    UnsupportedInputError,
    XfuseError,
)
from xfuse.passes.fusion.fuse_greedy import FuseGreedyPass
from xfuse.passes.fusion.fuse_scored import FuseScoredPass
from xfuse.pipeline import Pipeline, PipelineError

Tensor = torch.Tensor

# ---------------------------------------------------------------------------------------------
# xfuse-opt
# ---------------------------------------------------------------------------------------------

GOOD = """\
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.exp %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""

BAD_IR: dict[str, tuple[str, str]] = {
    "undefined value": (
        GOOD.replace("graph.exp %x", "graph.exp %y"),
        "values used but not defined: [%y]",
    ),
    "value defined twice": (
        GOOD.replace("  func.return", "  %0 = graph.exp %x : tensor<4xf32>\n  func.return"),
        "SSA value %0 is already defined",
    ),
    "mixed element types": (
        "func.func @f(%x: tensor<4xf32>, %y: tensor<4xi32>) -> tensor<4xf32> {\n"
        "  %0 = graph.add %x, %y : tensor<4xf32>, tensor<4xi32> -> tensor<4xf32>\n"
        "  func.return %0 : tensor<4xf32>\n}\n",
        "expected operands of the same element type, found f32 and i32",
    ),
    "shapes that do not broadcast": (
        "func.func @f(%x: tensor<4xf32>, %y: tensor<3xf32>) -> tensor<4xf32> {\n"
        "  %0 = graph.add %x, %y : tensor<4xf32>, tensor<3xf32> -> tensor<4xf32>\n"
        "  func.return %0 : tensor<4xf32>\n}\n",
        "operand shapes [4] and [3] do not broadcast",
    ),
    "missing terminator": (
        GOOD.replace("  func.return %0 : tensor<4xf32>\n", ""),
        "is not a terminator",
    ),
}


def run_opt(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        status = opt_main(list(argv))
    except SystemExit as e:  # argparse's own errors
        status = int(e.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_clear_line(status: int, err: str, expected: str) -> None:
    assert status != 0
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    assert expected in err, err


@pytest.mark.parametrize("case", list(BAD_IR))
def test_opt_on_bad_ir(case: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text, expected = BAD_IR[case]
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    status, out, err = run_opt(capsys, str(path))
    assert out == ""
    assert_one_clear_line(status, err, expected)
    assert err.startswith(f"{path}:"), "the message should point at the file"


def test_opt_on_a_binary_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "binary.mlir"
    path.write_bytes(b"\xff\xfe\x00garbage")
    status, _, err = run_opt(capsys, str(path))
    assert_one_clear_line(status, err, "not UTF-8 text")


def test_opt_on_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = run_opt(capsys, str(tmp_path))
    assert_one_clear_line(status, err, "Is a directory")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (",,", "Expected pass name here"),
        ("fuse-greedy{arg-limit=3", "Malformed pass arguments"),
        ("fuse-greedy{arg-limit=abc}", "option 'arg-limit' must be an integer, found 'abc'"),
        ("fuse-greedy{fusable=1}", "option 'fusable' is a Python callable and has no textual"),
        ("fuse-scored{max-fusions=x}", "option 'max-fusions' must be an integer, found 'x'"),
        ("fuse-scored{window=-1}", "pass 'fuse-scored': option 'window' must be a positive"),
        ("fuse-scored{window=0}", "option 'window' must be a positive integer, found 0"),
        ("fuse-scored{max-rounds=-1}", "option 'max-rounds' must be a non-negative integer"),
        ("fuse-scored{arg-limit=0}", "option 'arg-limit' must be a positive integer"),
        ("fuse-scored{max-group-size=-5}", "option 'max-group-size' must be a positive"),
        (
            "fuse-scored{max-fusions=-2}",
            "option 'max-fusions' must be a non-negative integer, or -1",
        ),
        ("fuse-greedy{arg-limit=-1}", "pass 'fuse-greedy': option 'arg-limit' must be a positive"),
        ("split-reductions{min-length=0}", "option 'min-length' must be a positive integer"),
        ("split-reductions{min-length=true}", "option 'min-length' must be an integer, found true"),
        (
            "split-reductions{normalization-rows=-2}",
            "option 'normalization-rows' must be a non-negative integer, or -1 for the target's",
        ),
        ("split-reductions{target=tpu}", "option 'target' must be one of cpu, cuda, found 'tpu'"),
        ("gpu-map-parallel{block-size=2048}", "option 'block-size' must be an integer from 1 to"),
        ("gpu-map-parallel{row-threads=96}", "option 'row-threads' must be 0 (automatic) or a"),
        ("gpu-map-parallel{unroll=0}", "option 'unroll' must be a positive integer"),
        ("lower-to-llvm", "the input has 1 op it cannot lower (graph.exp): not loop IR yet"),
        ("decompose,fuse-scored,lower-to-llvm", "1 op it cannot lower (graph.exp)"),
    ],
)
def test_opt_on_bad_pipelines(
    spec: str, expected: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "good.mlir"
    path.write_text(GOOD)
    status, _, err = run_opt(capsys, str(path), "-p", spec)
    assert_one_clear_line(status, err, expected)


@pytest.mark.parametrize(
    "spec",
    [
        "fuse-scored{max-fusions=-1 max-rounds=0}",
        "fuse-greedy{max-fusions=-1}",
        "gpu-map-parallel{row-threads=0},gpu-map-parallel{row-threads=256 block-size=1024}",
        "lower-to-loops,lower-to-llvm",
    ],
)
def test_opt_accepts_option_values_at_their_limits(
    spec: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "good.mlir"
    path.write_text(GOOD)
    status, _, err = run_opt(capsys, str(path), "-p", spec)
    assert status == 0, err


def test_a_non_callable_fusability_predicate_is_refused_in_one_line() -> None:
    with pytest.raises(PipelineError) as caught:
        Pipeline((FuseGreedyPass(fusable=1),))  # type: ignore[arg-type]
    message = str(caught.value)
    assert message == (
        "pass 'fuse-greedy': option 'fusable' must be a callable (an op -> bool predicate) "
        "or None, found int 1"
    )
    Pipeline((FuseGreedyPass(fusable=lambda op: True),))  # a callable is fine


def test_out_of_range_options_made_in_python_are_refused_by_the_pipeline() -> None:
    with pytest.raises(PipelineError, match="option 'window' must be a positive integer"):
        Pipeline((FuseScoredPass(window=-1),))
    with pytest.raises(PipelineError, match="option 'window' must be a positive integer"):
        xfuse.pipeline("fuse-scored{window=-1}")


def test_compile_with_a_bad_pipeline_option_is_refused() -> None:
    x = torch.randn(4)
    with pytest.raises(PipelineError, match="option 'max-rounds' must be a non-negative"):
        xfuse.compile(relu2, (x,), pipeline="decompose,fuse-scored{max-rounds=-3}")


def test_opt_on_an_unknown_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "good.mlir"
    path.write_text(GOOD)
    status, _, err = run_opt(capsys, str(path), "--no-such-flag")
    assert status == 1 and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert "unrecognized arguments: --no-such-flag" in err


# ---------------------------------------------------------------------------------------------
# xfuse.compile
# ---------------------------------------------------------------------------------------------


def relu2(x: Tensor) -> Tensor:
    return torch.relu(x) * 2


def add(x: Tensor, y: Tensor) -> Tensor:
    return x + y


def compile_quietly(fn: Callable[..., Any], inputs: tuple[Any, ...], **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        return xfuse.compile(fn, inputs, **kwargs)


BAD_COMPILES: dict[str, tuple[Callable[[], Any], type[Exception], str]] = {
    "an object as input": (
        lambda: compile_quietly(relu2, (object(),)),
        UnsupportedInputError,
        "input 0 is a object; compiled programs take tensors, Python scalars",
    ),
    "an object in a nested tuple": (
        lambda: compile_quietly(lambda t: t[0] + t[1], ((torch.randn(4), object()),)),
        UnsupportedInputError,
        "input 0[1] is a object",
    ),
    "inputs on different devices (eager's error)": (
        lambda: compile_quietly(add, (torch.randn(4), torch.randn(4, device="meta"))),
        EagerRuntimeError,
        "Tensor on device meta is not on the expected device cpu!",
    ),
    "a sparse CSR input": (
        lambda: compile_quietly(relu2, (torch.randn(4, 4).to_sparse_csr(),)),
        UnsupportedInputError,
        "sparse_csr tensor",
    ),
    "an unsupported dtype": (
        lambda: compile_quietly(relu2, (torch.ones(4, dtype=torch.uint8),)),
        UnsupportedInputError,
        "dtype torch.uint8 is not supported",
    ),
    "an unknown device": (
        lambda: compile_quietly(relu2, (torch.randn(4),), device="tpu"),
        ValueError,
        "unknown device 'tpu'",
    ),
    "an unknown pass": (
        lambda: compile_quietly(relu2, (torch.randn(4),), pipeline="fuse-nothing"),
        PipelineError,
        "unknown pass 'fuse-nothing'",
    ),
    "a bad pass option": (
        lambda: compile_quietly(relu2, (torch.randn(4),), pipeline="fuse-scored{window=x}"),
        PipelineError,
        "pass 'fuse-scored'",
    ),
    "a complex intermediate": (
        lambda: compile_quietly(lambda x: torch.view_as_complex(x).abs(), (torch.randn(4, 2),)),
        ExportError,
        "complex dtype",
    ),
    "a program that fails on its example inputs": (
        lambda: compile_quietly(lambda x: x.reshape(3, 5), (torch.randn(4),)),
        EagerRuntimeError,  # eager's error: the program run eagerly where export failed
        "shape '[3, 5]' is invalid",
    ),
    "keyword-only parameters": (
        lambda: compile_quietly(lambda *, x: x + 1, (torch.randn(4),)),
        EagerTypeError,  # what calling it so raises in Python
        "takes 0 positional arguments but 1 was given",
    ),
}


@pytest.mark.parametrize("case", list(BAD_COMPILES))
def test_compile_on_bad_input(case: str) -> None:
    make, error, expected = BAD_COMPILES[case]
    with pytest.raises(error) as info:
        make()
    message = str(info.value)
    assert expected in message, message
    assert "\n" not in message, message


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_compile_for_cuda_without_a_gpu_is_refused() -> None:
    with pytest.raises(XfuseError, match="torch sees no CUDA device") as info:
        compile_quietly(relu2, (torch.randn(4),), device="cuda")
    assert "\n" not in str(info.value)


def test_inputs_that_need_grad_are_differentiated_with_grad_and_run_without() -> None:
    x = torch.randn(8, requires_grad=True)
    compiled = compile_quietly(relu2, (x,))
    y = compiled(x)  # through AOTAutograd: a grad_fn, and eager's gradient
    assert y.grad_fn is not None
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.autograd.grad(relu2(x).sum(), x)[0])
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), relu2(x).detach())
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), relu2(x).detach())
    assert len(compiled.specialisations) == 1  # one program serves both modes


def test_torch_compile_falls_back_to_eager_on_a_graph_xfuse_cannot_import() -> None:
    def complex_abs(x: Tensor) -> Tensor:
        return torch.view_as_complex(x).abs() + 1

    torch._dynamo.reset()
    fn = torch.compile(complex_abs, backend="xfuse")
    x = torch.randn(6, 2)
    with pytest.warns(FallbackWarning, match="runs this graph eagerly.*complex"):
        got = fn(x)
    torch.testing.assert_close(got, complex_abs(x))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_corrupt_kernel_cache_is_rebuilt_with_the_right_result(
    damage: str, tmp_path: Path
) -> None:
    from xfuse.runtime.cache import KernelCache

    def program(x: Tensor, y: Tensor) -> Tensor:
        return torch.sigmoid(x * y + 0.25) - y

    x, y = torch.randn(64, 8), torch.randn(8)
    first = compile_quietly(program, (x, y), cache=KernelCache(tmp_path))
    torch.testing.assert_close(first(x, y), program(x, y))
    entries = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert entries, "the kernels were not cached on disk"
    for entry in entries:
        data = entry.read_bytes()
        if damage == "garbage":
            entry.write_bytes(bytes(255 - b for b in data))
        elif damage == "truncated":
            entry.write_bytes(data[: len(data) // 2])
        else:
            entry.write_bytes(b"")
    with pytest.warns(KernelCacheWarning):
        again = compile_quietly(program, (x, y), cache=KernelCache(tmp_path))
    torch.testing.assert_close(again(x, y), program(x, y))


# ---------------------------------------------------------------------------------------------
# One line: a model that refuses its inputs, at compile time and at call time
# ---------------------------------------------------------------------------------------------


def _expects_64_features() -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()).eval()
    model.requires_grad_(False)
    return model


def _torch_noise(text: str) -> list[str]:
    """Lines of torch's own logging or of a traceback through torch's internals."""
    return [
        line
        for line in text.splitlines()
        if "fake_tensor.py" in line or "site-packages/torch" in line or "Traceback" in line
    ]


def test_compiling_for_inputs_the_model_refuses_is_one_line_and_logs_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    import traceback

    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    with pytest.raises(EagerRuntimeError) as info:  # eager's error, as eager raises it
        compile_quietly(_expects_64_features(), (torch.randn(8, 32),))
    error = info.value
    assert str(error) == "mat1 and mat2 shapes cannot be multiplied (8x32 and 64x64)"
    assert isinstance(error.__cause__, RuntimeError)  # export's error, kept for those who want it
    printed = "".join(traceback.format_exception(error))
    assert not _torch_noise(printed.split("The above exception")[0]), printed
    assert len(printed.splitlines()) < 40, printed
    out, err = capfd.readouterr()
    assert not _torch_noise(out + err), err
    assert logger.level == level  # torch's logging as it was


def test_xfuse_traceback_keeps_torchs_whole_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    import traceback

    monkeypatch.setenv("XFUSE_TRACEBACK", "1")
    with pytest.raises(EagerRuntimeError) as info:
        compile_quietly(_expects_64_features(), (torch.randn(8, 32),))
    assert _torch_noise("".join(traceback.format_exception(info.value)))


def test_calling_with_inputs_the_model_refuses_is_one_line_as_eager_raises(
    capfd: pytest.CaptureFixture[str],
) -> None:
    model = _expects_64_features()
    compiled = compile_quietly(model, (torch.randn(8, 64),))
    capfd.readouterr()
    with pytest.raises(RuntimeError) as eager:  # what eager raises for it
        model(torch.randn(8, 32))
    with pytest.raises(EagerRuntimeError) as info:
        compiled(torch.randn(8, 32))
    message = str(info.value)
    assert message == str(eager.value).splitlines()[0]
    out, err = capfd.readouterr()
    assert not _torch_noise(out + err), err
    x = torch.randn(3, 64)  # a shape the model takes compiles, as before
    torch.testing.assert_close(compiled(x), model(x))


# ---------------------------------------------------------------------------------------------
# Arguments of the public API
# ---------------------------------------------------------------------------------------------

BAD_ARGUMENTS: dict[str, tuple[dict[str, Any], str]] = {
    "an unknown device": (
        {"device": "mps"},
        "unknown device 'mps': xfuse compiles for 'cpu' or 'cuda'",
    ),
    "a device torch does not know": ({"device": "gpu"}, "unknown device 'gpu'"),
    "a device of no device type": ({"device": 0}, "device must be a string or torch.device"),
    "a pipeline that is no string": ({"pipeline": 3}, "pipeline must be a string"),
    "a cache that is no cache": (
        {"cache": "dir"},
        "cache must be an xfuse.runtime.cache.KernelCache",
    ),
    "example kwargs that are no dict": ({"example_kwargs": [1]}, "example_kwargs must be a dict"),
    "a fallback mode that does not exist": ({"fallback": "loud"}, "fallback must be one of"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
@pytest.mark.parametrize("entry", ["compile", "explain"])
def test_public_api_arguments_of_the_wrong_kind_are_one_line_xfuse_errors(
    case: str, entry: str
) -> None:
    kwargs, expected = BAD_ARGUMENTS[case]
    if entry == "explain" and set(kwargs) - {"device", "pipeline"}:
        pytest.skip("explain takes no such argument")
    run = xfuse.compile if entry == "compile" else xfuse.explain
    with pytest.raises(InvalidArgumentError) as info:
        run(relu2, (torch.randn(4),), quiet=True, **kwargs)
    assert isinstance(info.value, ValueError)  # an old `except ValueError` still catches it
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_a_torch_device_is_taken_as_its_name() -> None:
    compiled = compile_quietly(relu2, (torch.randn(4),), device=torch.device("cpu"))
    assert compiled.device == torch.device("cpu")
