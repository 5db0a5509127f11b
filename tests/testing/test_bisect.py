"""The miscompilation bisector, on passes broken on purpose (so the tests can fail)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from xfuse.cli.fuzz import main as fuzz_main
from xfuse.dialects import graph
from xfuse.pipeline import known_passes
from xfuse.testing.bisect import BisectError, Bisector, bisect_reproducer
from xfuse.testing.fuzz.reproducer import reproducer
from xfuse.testing.fuzz.runner import Outcome


@dataclass(frozen=True)
class SwapAddForSubPass(ModulePass):
    """A broken pass: every `graph.add` becomes a `graph.sub`."""

    name = "test-swap-add-sub"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for add in [o for o in op.walk() if isinstance(o, graph.AddOp)]:
            Rewriter.replace_op(add, graph.SubOp(add.lhs, add.rhs))


@dataclass(frozen=True)
class CommutePass(ModulePass):
    """Commutes binary ops, one "decision" each, in block order: right for add and mul, wrong
    for sub. `max_fusions` limits the decisions like the fusion passes' option."""

    name = "test-commute"
    max_fusions: int = -1

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        ops = [o for o in op.walk() if isinstance(o, graph.AddOp | graph.MulOp | graph.SubOp)]
        for i, binary in enumerate(ops):
            if 0 <= self.max_fusions <= i:
                return
            Rewriter.replace_op(binary, type(binary)(binary.rhs, binary.lhs))


PASSES = {
    **known_passes(),
    SwapAddForSubPass.name: lambda: SwapAddForSubPass,
    CommutePass.name: lambda: CommutePass,
}

PROGRAM = """import torch
TOLERANCE = "strict"


def program(x0, x1):
    v1 = torch.exp(x0)
    v2 = torch.tanh(x1)
    v3 = v1 * v2
    v4 = v3 + x1
    v5 = torch.relu(v4)
    v6 = v1 * 2.0
    v7 = v6 - v2
    return (v5, v7, v3)


def make_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(4, 8, generator=g), torch.randn(8, generator=g))
"""


def write_reproducer(tmp_path: Path, source: str = PROGRAM) -> Path:
    path = tmp_path / "fail_0_0.py"
    path.write_text(reproducer(source, Outcome("fail", "cpu", "injected"), 0, 0))
    return path


def test_finds_the_broken_pass_and_shrinks_to_its_op(tmp_path: Path) -> None:
    path = write_reproducer(tmp_path)
    report = bisect_reproducer(path, "decompose,test-swap-add-sub,fuse-scored", PASSES)
    assert report.culprit == "test-swap-add-sub"
    assert report.decision is None
    assert report.case is not None
    ops = [op.name for op in report.case.module.walk() if op.name.startswith("graph.")]
    assert ops == ["graph.add"]  # everything else became an input or was dropped
    assert report.original_size > report.case.size
    lit = report.lit_test()
    assert lit.startswith("// RUN: xfuse-opt %s -p 'test-swap-add-sub' | filecheck %s")
    assert "graph.add" in lit and "// CHECK-LABEL: func.func @forward" in lit


def test_finds_the_single_bad_decision(tmp_path: Path) -> None:
    path = write_reproducer(tmp_path)
    report = bisect_reproducer(path, "test-commute", PASSES)
    assert report.culprit == "test-commute"
    assert report.case is not None
    assert [op.name for op in report.case.module.walk() if op.name.startswith("graph.")] == [
        "graph.sub"
    ]
    # In the shrunk program the sub is the first commuted op.
    assert report.decision == 1
    assert report.culprit_spec == "test-commute{max-fusions=1}"


def test_the_decision_index_in_the_whole_program() -> None:
    from xfuse.frontend import import_module
    from xfuse.testing.bisect import Case, first_bad_decision
    from xfuse.testing.fuzz.program import load_source

    namespace = load_source(PROGRAM)
    imported = import_module(namespace["program"], namespace["make_inputs"]())
    case = Case(imported.module, imported.arguments(*namespace["make_inputs"]()))
    # mul, add, mul (v6 = v1 * 2.0), sub: the sub is the 4th commuted op.
    assert first_bad_decision(CommutePass(), case, crashes=False) == 4


def test_a_program_that_does_not_fail_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BisectError, match="does not fail"):
        bisect_reproducer(write_reproducer(tmp_path), "decompose,fuse-scored")


def test_the_cli_prints_the_lit_test(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_reproducer(tmp_path)
    assert fuzz_main(["--bisect", str(path), "--pipeline", "decompose,fuse-scored"]) == 2
    assert "does not fail" in capsys.readouterr().err
    assert fuzz_main(["--bisect", str(tmp_path / "missing.py")]) == 2


def test_a_crashing_pass_is_the_culprit() -> None:
    @dataclass(frozen=True)
    class CrashOnTanh(ModulePass):
        name = "test-crash-on-tanh"

        def apply(self, ctx: Context, op: ModuleOp) -> None:
            if any(isinstance(o, graph.TanhOp) for o in op.walk()):
                raise RuntimeError("tanh is not handled")

    from xfuse.testing.fuzz.program import load_source

    passes = {**PASSES, CrashOnTanh.name: lambda: CrashOnTanh}
    namespace = load_source(PROGRAM)
    report = Bisector("decompose,test-crash-on-tanh", passes).bisect_source(PROGRAM)
    assert report.culprit == "test-crash-on-tanh"
    assert report.problem.startswith("crash: RuntimeError: tanh is not handled")
    assert report.case is not None
    assert [op.name for op in report.case.module.walk() if op.name.startswith("graph.")] == [
        "graph.tanh"
    ]
    assert namespace["program"] is not None


def test_backend_miscompilation_is_blamed_on_codegen(monkeypatch: pytest.MonkeyPatch) -> None:
    from xfuse.testing import bisect

    real = bisect.run_backend

    def off_by_one(
        module: ModuleOp, inputs: list[torch.Tensor], device: str = "cpu"
    ) -> list[torch.Tensor]:
        has_relu = any(isinstance(o, graph.ReluOp) for o in module.walk())
        return [t + 1 if has_relu else t for t in real(module, inputs, device)]

    monkeypatch.setattr(bisect, "run_backend", off_by_one)
    report = Bisector("decompose,fuse-scored").bisect_source(PROGRAM)
    assert report.culprit == "codegen (cpu)"
    assert report.case is not None
    assert [op.name for op in report.case.module.walk() if op.name.startswith("graph.")] == [
        "graph.relu"
    ]
