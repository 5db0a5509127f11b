"""`xfuse-fuzz`: the run's last line, its exit status, and the reproducers it writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xfuse.cli import fuzz as cli
from xfuse.testing.fuzz import generator, program, reproducer, runner
from xfuse.testing.fuzz.reproducer import program_part
from xfuse.testing.fuzz.runner import StageFailure


def test_a_clean_run_ends_with_the_counts(capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(["--programs", "3", "--seed", "1", "--seconds", "600"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "3 passed, 0 failed", lines
    assert lines[0] == "0 skipped (torch.export rejects them)"
    # the second compilation of each took its imported program from the cache
    assert "cpu import cached x3" in lines[1], lines
    assert status == 0


def test_failures_are_written_as_reproducers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_cpu(self: Any, device: str) -> None:
        raise StageFailure(device, "output 0: injected mismatch")

    monkeypatch.setattr(runner.Differential, "run_compiled", broken_cpu)
    # Seed 9's first two programs both reach a compiled run (one of seed 7's now ends on an
    # op eager refuses, which is checked without running compiled code).
    status = cli.main(["--programs", "2", "--seed", "9", "--out", str(tmp_path), "--device", "cpu"])
    out = capsys.readouterr().out.strip().splitlines()
    assert status == 1
    assert out[-1] == "0 passed, 2 failed"
    assert any("2 x cpu: output 0: injected mismatch" in line for line in out)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["fail_9_0.py", "fail_9_1.py"]
    text = (tmp_path / "fail_9_0.py").read_text()
    assert "Failed at: cpu" in text and "injected mismatch" in text
    assert program_part(text) == generator.generate(cli.program_seed(9, 0)).source


def test_a_reproducer_fails_while_the_bug_is_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = program.program_source(
        3, [program.InputSpec("x0", (4, 4))], ["v1 = torch.relu(x0)"], ["v1"], "strict"
    )
    path = tmp_path / "fail_3_0.py"
    path.write_text(reproducer.reproducer(source, runner.Outcome("fail", "cpu", "planted"), 3, 0))
    assert reproducer.check_file(str(path), ["cpu"]) == 0  # xfuse gets relu right
    assert capsys.readouterr().out.startswith("pass")

    def broken_cpu(self: Any, device: str) -> None:
        raise StageFailure(device, "output 0: planted")

    monkeypatch.setattr(runner.Differential, "run_compiled", broken_cpu)
    assert reproducer.check_file(str(path), ["cpu"]) == 1
    assert capsys.readouterr().out.startswith("fail at cpu: output 0: planted")


def test_program_seeds_are_distinct_across_runs() -> None:
    seeds = {cli.program_seed(s, i) for s in range(20) for i in range(1000)}
    assert len(seeds) == 20 * 1000


def test_the_semantics_flag_checks_aliasing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []
    check = cli.check_source

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("semantics", False))
        return check(*args, **kwargs)

    monkeypatch.setattr(cli, "check_source", recording)
    status = cli.main(["--programs", "2", "--seed", "1", "--seconds", "600", "--semantics"])
    assert capsys.readouterr().out.strip().splitlines()[-1] == "2 passed, 0 failed"
    assert status == 0 and seen == [True, True]
