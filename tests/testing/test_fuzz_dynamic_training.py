"""The fuzzer's dynamic-shapes training mode (`xfuse.testing.fuzz.dynamic_training`,
`xfuse-fuzz --training --dynamic`): forward and backward through `torch.compile(backend="xfuse",
dynamic=True)` at several sizes against eager's outputs and input gradients at each."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.testing.test_fuzz_training import changed
from xfuse import dynamo
from xfuse.cli import fuzz as cli
from xfuse.errors import UnsupportedProgram, XfuseError
from xfuse.runtime.executor import CompiledProgram
from xfuse.testing.fuzz import reproducer
from xfuse.testing.fuzz.dynamic import per_shape_reason, sized_calls
from xfuse.testing.fuzz.dynamic_training import (
    DynamicTrainingDifferential,
    check_dynamic_training,
    compiled_stages,
)
from xfuse.testing.fuzz.generator import generate
from xfuse.testing.fuzz.program import InputSpec, load_source, program_source
from xfuse.training import PartCompiler

Tensor = torch.Tensor

Change = Callable[[Tensor], Tensor]


def source(body: list[str], outputs: list[str], *inputs: InputSpec) -> str:
    specs = inputs or (InputSpec("x0", (4, 6)), InputSpec("x1", (6,)))
    return program_source(7, specs, body, outputs, "strict")


BROADCAST = source(["v1 = torch.sin(x0) * x1", "v2 = torch.exp(v1) + x1"], ["v1", "v2"])
"""Two inputs, one broadcast (its gradient is a sum over the swept dim or beside it), two
outputs that need grad."""

SYMBOLIC = ["eager", "cpu dynamic forward (symbolic)", "cpu dynamic backward (symbolic)"]


def sizes(text: str) -> list[int]:
    """The sizes a run of `text` calls at, in order (the last twice)."""
    calls = sized_calls(load_source(text)["make_inputs"](), text)
    assert calls is not None
    return [size for size, _ in calls]


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """`plant(part, change, from_run=1)`: every tensor the symbolic `part` ("forward",
    "backward") returns passed through `change`, from its `from_run`th run on."""
    real = PartCompiler.build

    def plant(part: str, change: Change, from_run: int = 1) -> None:
        def build(self: PartCompiler, gm: torch.fx.GraphModule, inputs: Any) -> Any:
            program = real(self, gm, inputs)
            return changed(program, change, from_run) if self.part == part else program

        monkeypatch.setattr(PartCompiler, "build", build)

    return plant


@pytest.fixture
def backward_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """The symbolic compile refuses every backward part: it is compiled per shape."""

    def refuse(gm: torch.fx.GraphModule) -> None:
        raise UnsupportedProgram("planted refusal of s3")

    monkeypatch.setattr(dynamo, "check_reads_by_value", refuse)


def test_forward_and_backward_match_eager_at_every_size() -> None:
    outcome = check_dynamic_training(BROADCAST)
    assert outcome.status == "pass", str(outcome)
    assert outcome.stages == SYMBOLIC
    assert outcome.message == ""


@pytest.mark.parametrize("seed", [0, 2])
def test_generated_programs_train_as_eager_does_at_every_size(seed: int) -> None:
    outcome = check_dynamic_training(generate(seed).source)
    assert outcome.status == "pass", str(outcome)


def test_a_wrong_gradient_at_a_new_size_is_a_failure(planted: Callable[..., None]) -> None:
    """Right at the program's own sizes, wrong at the others: each size is trained."""
    own_shapes = {(4, 6), (6,)}
    planted("backward", lambda t: t if tuple(t.shape) in own_shapes else t * 1.01)
    outcome = check_dynamic_training(BROADCAST)
    own, new, *_ = sizes(BROADCAST)
    assert (outcome.status, outcome.stage) == ("fail", f"cpu dynamic, size {new} backward")
    assert re.match(r"gradient of input \d: Tensor-likes are not close", outcome.message)
    assert outcome.stages == [f"cpu dynamic, size {own}"]


def test_a_wrong_gradient_of_the_repeated_call_is_a_failure(
    planted: Callable[..., None],
) -> None:
    """The last size is called twice (the second call reuses the first's buffers)."""
    planted("backward", lambda t: t * 1.01, from_run=4)
    outcome = check_dynamic_training(BROADCAST)
    last = sizes(BROADCAST)[-1]
    assert (outcome.status, outcome.stage) == ("fail", f"cpu dynamic, size {last}, again backward")


def test_a_wrong_output_of_the_forward_is_a_failure(planted: Callable[..., None]) -> None:
    planted("forward", lambda t: t + 1e-3)
    outcome = check_dynamic_training(BROADCAST)
    own = sizes(BROADCAST)[0]
    assert (outcome.status, outcome.stage) == ("fail", f"cpu dynamic, size {own} forward")
    assert outcome.message.startswith("output 0: Tensor-likes are not close")


@pytest.mark.usefixtures("backward_per_shape")
def test_a_part_the_symbolic_compile_refuses_is_compiled_per_shape() -> None:
    outcome = check_dynamic_training(BROADCAST)
    assert outcome.status == "pass", str(outcome)
    assert outcome.stages == [
        "eager",
        "cpu dynamic forward (symbolic)",
        "cpu dynamic backward (per-shape x3)",
    ]
    assert outcome.message == "backward: UnsupportedProgram: planted refusal of N"


@pytest.mark.usefixtures("backward_per_shape")
def test_a_wrong_gradient_of_a_per_shape_program_is_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = PartCompiler.compile_shape

    def wrong(self: PartCompiler, function: Any, inputs: Any, static: Any) -> Any:
        program = real(self, function, inputs, static)
        return changed(program, lambda t: t * 1.01, 1) if self.part == "backward" else program

    monkeypatch.setattr(PartCompiler, "compile_shape", wrong)
    outcome = check_dynamic_training(BROADCAST)
    own = sizes(BROADCAST)[0]
    assert (outcome.status, outcome.stage) == ("fail", f"cpu dynamic, size {own} backward")


@pytest.mark.usefixtures("backward_per_shape")
def test_a_part_xfuse_cannot_compile_per_shape_is_a_coverage_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: PartCompiler, function: Any, inputs: Any, static: Any) -> CompiledProgram:
        raise XfuseError("no lowering for aten.planted_backward.default")

    monkeypatch.setattr(PartCompiler, "compile_shape", refuse)
    outcome = check_dynamic_training(BROADCAST)
    own = sizes(BROADCAST)[0]
    assert (outcome.status, outcome.stage) == ("gap", f"cpu dynamic, size {own} gap"), outcome
    assert "aten.planted_backward.default" in outcome.message


def test_where_eager_raises_at_a_new_size_the_compiled_call_raises() -> None:
    """A reshape to constant sizes fits the inputs' own sizes only: the other sizes are left
    out once the compiled call raises as eager does."""
    text = source(["v1 = x0.reshape(4, 6) * 2.0"], ["v1"], InputSpec("x0", (4, 6)))
    outcome = check_dynamic_training(text)
    assert outcome.status == "pass", str(outcome)


DEAD_INDEX_ADD = source(
    [
        "v1 = torch.index_add(torch.zeros((6, 2, 7), device=x0.device), 0, "
        "torch.tensor([2, 0, 5, 5, 3], device=x0.device), x1)",
        "v2 = x0 * 2.0",
    ],
    ["v2"],
    InputSpec("x0", (5, 7)),
    InputSpec("x1", (5, 2, 7)),
)
"""An unused `index_add` whose source fits its own sizes only (fuzz seed 1004 program 777):
eager raises at the other sizes, and AOTAutograd drops the op, so torch's own training
(`aot_eager`) computes there as xfuse's does."""


def test_an_error_of_an_op_torch_drops_is_not_xfuses_to_raise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outcome = check_dynamic_training(DEAD_INDEX_ADD)
    assert outcome.status == "pass", str(outcome)
    monkeypatch.setattr(DynamicTrainingDifferential, "torch_computes", lambda self: False)
    outcome = check_dynamic_training(DEAD_INDEX_ADD)
    assert outcome.status == "fail" and "computes what eager refuses" in outcome.message


def test_what_eager_cannot_differentiate_is_skipped() -> None:
    text = source(["v1 = torch.floor_divide(x0, x1)"], ["v1"])
    outcome = check_dynamic_training(text)
    assert (outcome.status, outcome.message) == ("skip", "no derivative: aten::floor_divide")


def test_a_program_without_a_dim_to_sweep_is_skipped() -> None:
    text = source(["v1 = x0 * 2.0"], ["v1"], InputSpec("x0", (1, 1)))
    assert check_dynamic_training(text).message == "no dim of size 2 or more"


def test_stages_name_each_part_and_how_it_compiled() -> None:
    from collections import Counter

    parts = {
        "forward": Counter({"symbolic": 2}),
        "backward": Counter({"symbolic": 1, "per-shape": 1}),
        "graph": Counter({"per-shape": 3}),
    }
    assert compiled_stages("cpu", parts) == [
        "cpu dynamic forward (symbolic x2)",
        "cpu dynamic backward (symbolic, per-shape)",
        "cpu dynamic graph (per-shape x3)",
    ]


def test_per_shape_reasons_name_the_part_and_a_refused_call() -> None:
    head = "xfuse: torch.compile backend compiles this dynamic-shape graph per shape: "
    refused = head + "the symbolic compile refused the backward part: UnsupportedProgram: s3 > 2"
    assert per_shape_reason(refused) == "backward: UnsupportedProgram: N > N"
    call = head + "a call of the forward part the symbolic program refuses: SymbolicSizeError: s0"
    assert per_shape_reason(call) == "forward: a call: SymbolicSizeError: N"


def test_the_cli_trains_at_several_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(
        ["--training", "--dynamic", "--programs", "2", "--seed", "1", "--device", "cpu"]
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert status == 0
    assert lines[-1] == "2 passed, 0 failed", lines
    assert "0 coverage gaps (EagerFallbackError in strict mode)" in lines
    assert "compiled per shape, because:" in lines
    assert any("cpu dynamic forward (symbolic)" in line for line in lines), lines


def test_the_cli_writes_a_reproducer_that_fails_while_the_bug_is_there(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    planted: Callable[..., None],
) -> None:
    planted("backward", lambda t: t * 1.01)
    args = ["--training", "--dynamic", "--programs", "1", "--seed", "1", "--device", "cpu"]
    assert cli.main([*args, "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == "0 passed, 1 failed"
    path = tmp_path / "fail_1_0.py"
    text = path.read_text()
    assert re.search(r"Failed at: cpu dynamic, size \d+ backward", text), text
    assert "check_file(__file__, mode='dynamic-training')" in text
    assert reproducer.program_part(text) == generate(cli.program_seed(1, 0)).source
    assert reproducer.check_file(str(path), mode="dynamic-training") == 1
    assert capsys.readouterr().out.startswith("fail at cpu dynamic, size ")
    monkeypatch.undo()
    assert reproducer.check_file(str(path), mode="dynamic-training") == 0


def test_the_cli_combines_training_and_dynamic() -> None:
    assert cli.mode_of(cli.parser().parse_args(["--training", "--dynamic"])) == "dynamic-training"
    assert cli.mode_of(cli.parser().parse_args(["--dynamic"])) == "dynamic"
    assert "dynamic-training" in reproducer.MODES
