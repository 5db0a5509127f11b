"""The fuzzer's dynamic-shapes mode (`xfuse.testing.fuzz.dynamic`, `xfuse-fuzz --dynamic`): a
program through `torch.compile(backend="xfuse", dynamic=True)` at several sizes against eager."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from xfuse.cli import fuzz as cli
from xfuse.runtime import dynamic as runtime_dynamic
from xfuse.testing.fuzz import reproducer
from xfuse.testing.fuzz.dynamic import check_dynamic, per_shape_reason, resized, swept_size
from xfuse.testing.fuzz.program import InputSpec, program_source

Tensor = torch.Tensor


def source(body: list[str], outputs: list[str], *inputs: InputSpec) -> str:
    return program_source(7, inputs, body, outputs, "strict")


def test_resized_inputs_keep_their_layout_and_kind_of_values() -> None:
    g = torch.Generator().manual_seed(0)
    transposed = torch.randn(6, 4).t()
    new = resized(transposed, 4, 9, g)
    assert new.shape == (9, 6) and new.stride() == (1, 9)
    expanded = torch.randn(1, 4).expand(5, 4)
    new = resized(expanded, 4, 7, g)
    assert new.shape == (5, 7) and new.stride() == (0, 1)
    gapped = torch.randn(3, 8)[..., ::2]
    new = resized(gapped, 3, 5, g)
    assert new.shape == (5, 4) and new.stride() == (8, 2)
    positive = torch.rand(4, 4) + 0.5
    assert bool((resized(positive, 4, 11, g) > 0).all())
    ints = torch.randint(-4, 5, (4, 2), dtype=torch.int32)
    new_ints = resized(ints, 4, 6, g)
    assert new_ints.dtype == torch.int32 and int(new_ints.abs().max()) <= 4
    assert resized(torch.randn(3, 3) > 0, 3, 5, g).dtype == torch.bool


def test_the_swept_size_is_one_of_the_inputs_sizes_of_two_or_more() -> None:
    inputs = (torch.randn(1, 6), torch.randn(6, 3))
    assert swept_size(inputs, "a") in {3, 6}
    assert swept_size((torch.randn(1, 1),), "a") is None


def test_a_program_passes_at_every_size_and_says_how_it_compiled() -> None:
    text = source(
        ["v1 = torch.tanh(x0) * x1", "v2 = v1.sum(-1)"],
        ["v1", "v2"],
        InputSpec("x0", (5, 8)),
        InputSpec("x1", (8,)),
    )
    outcome = check_dynamic(text)
    assert outcome.status == "pass", outcome
    assert outcome.stages == ["eager", "cpu dynamic (symbolic)"]


def test_a_layout_fault_at_a_new_size_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager returns a transposed input's product transposed: the compiled call must too."""
    text = source(["v1 = x0 * 2.0 + 1.0"], ["v1"], InputSpec("x0", (5, 8), layout="transposed"))
    assert check_dynamic(text).status == "pass"
    monkeypatch.setattr(runtime_dynamic, "in_memory_order", lambda result, order: result)
    outcome = check_dynamic(text)
    assert outcome.status == "fail"
    assert outcome.stage.startswith("cpu dynamic, size ")
    assert "strides" in outcome.message


def test_where_eager_raises_at_a_new_size_the_compiled_call_raises() -> None:
    """A reshape to constant sizes fits the inputs' own sizes only."""
    text = source(["v1 = x0.reshape(4, 6) + 1.0"], ["v1"], InputSpec("x0", (4, 6)))
    outcome = check_dynamic(text)
    assert outcome.status == "pass", outcome


def test_per_shape_reasons_elide_sizes() -> None:
    message = "xfuse: ... refused it: SymbolicSizeError: s12 < 3 at node 'select_4'"
    assert per_shape_reason(message) == "SymbolicSizeError: N < N at node 'select_4'"


def test_the_cli_writes_a_dynamic_reproducer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli.main(["--dynamic", "--programs", "2", "--seed", "5", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    # Of seed 5's first two programs one ends on an op eager refuses; the other compiles one
    # symbolic program, which refuses a call whose derived size (a floor division) is below 2:
    # that size runs per shape.
    assert lines[0] == "1 skipped" and lines[-1] == "1 passed, 0 failed", lines
    assert lines[2] == "compiled per shape, because:" and "a symbol's size is" in lines[3], lines

    def wrong(result: Tensor, order: tuple[int, ...]) -> Tensor:
        return result * 1.5

    monkeypatch.setattr(runtime_dynamic, "in_memory_order", wrong)
    text = source(["v1 = x0 * 2.0"], ["v1"], InputSpec("x0", (5, 8), layout="transposed"))
    path = tmp_path / "fail_5_0.py"
    failed = check_dynamic(text)
    assert failed.status == "fail" and "output 0" in failed.message
    path.write_text(reproducer.reproducer(text, failed, 5, 0, mode="dynamic"))
    assert "check_file(__file__, mode='dynamic')" in path.read_text()
    assert reproducer.check_file(str(path), mode="dynamic") == 1
    monkeypatch.undo()
    assert reproducer.check_file(str(path), mode="dynamic") == 0
