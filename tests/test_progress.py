"""Progress of long compilations: shown on a terminal, quiet elsewhere or when asked."""

from __future__ import annotations

import io
import sys
import time
import warnings

import pytest
import torch

import xfuse
from xfuse.progress import CLEAR_LINE, ENV_QUIET, Progress
from xfuse.report.counts import plural


class Terminal(io.StringIO):
    """A stream that says it is a TTY."""

    def isatty(self) -> bool:
        return True


def run_stages(progress: Progress) -> None:
    with progress:
        progress.stage("imported 12 ops")
        for _ in range(3):
            progress.count("kernels compiled")
        progress.finish("12 ops -> 2 groups -> 3 kernels")


def test_terminal_redraws_one_line_and_keeps_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_QUIET, raising=False)
    stream = Terminal()
    progress = Progress.create(stream=stream)
    progress.min_interval = 0.0
    run_stages(progress)
    out = stream.getvalue()
    assert f"{CLEAR_LINE}xfuse: imported 12 ops" in out
    assert f"{CLEAR_LINE}xfuse: kernels compiled: 3" in out
    assert out.endswith("\n") and out.count("\n") == 1
    assert "xfuse: 12 ops -> 2 groups -> 3 kernels (" in out.splitlines()[-1]


def test_counts_are_throttled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_QUIET, raising=False)
    stream = Terminal()
    progress = Progress.create(stream=stream)
    progress.min_interval = 3600.0
    progress.stage("compiling")  # stages are always drawn, and start the interval
    for _ in range(100):
        progress.count("kernels compiled")
    assert progress.counts["kernels compiled"] == 100
    assert "kernels compiled" not in stream.getvalue()


def test_quiet_when_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_QUIET, raising=False)
    stream = io.StringIO()
    run_stages(Progress.create(stream=stream))
    assert stream.getvalue() == ""


@pytest.mark.parametrize("value", ["1", "yes"])
def test_quiet_with_the_environment_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ENV_QUIET, value)
    stream = Terminal()
    run_stages(Progress.create(stream=stream))
    assert stream.getvalue() == ""


def test_quiet_argument_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_QUIET, raising=False)
    stream = Terminal()
    run_stages(Progress.create(quiet=True, stream=stream))
    assert stream.getvalue() == ""
    # quiet=False asks for progress off a terminal too: plain lines, no redrawing.
    monkeypatch.setenv(ENV_QUIET, "1")
    plain = io.StringIO()
    run_stages(Progress.create(quiet=False, stream=plain))
    lines = plain.getvalue().splitlines()
    assert lines[0] == "xfuse: imported 12 ops"
    assert lines[-1].startswith("xfuse: 12 ops -> 2 groups -> 3 kernels (")
    assert "\r" not in plain.getvalue() and len(lines) == 2


def test_an_unfinished_line_is_cleared_on_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_QUIET, raising=False)
    stream = Terminal()
    with pytest.raises(RuntimeError), Progress.create(stream=stream) as progress:
        progress.stage("fusing")
        raise RuntimeError("boom")
    assert stream.getvalue().endswith(CLEAR_LINE)


def fn(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * 2.0) + 1.0


def test_compile_shows_progress_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_QUIET, raising=False)
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        compiled = xfuse.compile(fn, (torch.randn(4, 8),))
    out = stream.getvalue()
    assert "xfuse: exporting the program" in out
    assert "ops; fusing" in out and "formed; compiling kernels" in out
    last = out.splitlines()[-1]
    groups, kernels = plural(len(compiled.groups), "group"), plural(len(compiled.kernels), "kernel")
    assert f"-> {groups} -> {kernels} (" in last


def test_compile_is_quiet_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_QUIET, raising=False)
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        xfuse.compile(fn, (torch.randn(4, 8),), quiet=True)
        monkeypatch.setenv(ENV_QUIET, "1")
        xfuse.compile(fn, (torch.randn(2, 8),))
    assert "xfuse:" not in stream.getvalue()


def test_phases_are_kept_and_shown_on_the_last_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_QUIET, raising=False)
    plain = io.StringIO()
    with Progress.create(quiet=False, stream=plain) as progress:
        first = progress.lap("export")
        progress.stage("fusing")
        second = progress.lap("fusion")
        progress.finish("12 ops -> 2 groups -> 3 kernels")
    assert progress.phases == {"export": first, "fusion": second}
    assert first >= 0 and second >= 0
    last = plain.getvalue().splitlines()[-1]
    assert last.startswith("xfuse: 12 ops -> 2 groups -> 3 kernels (")
    assert ", export " in last and ", fusion " in last and last.endswith(")")


def test_a_compiled_program_says_where_its_compile_time_went() -> None:
    start = time.perf_counter()
    c = xfuse.compile(lambda x: torch.tanh(x) * 2, (torch.randn(4, 8),), quiet=True)
    total = time.perf_counter() - start
    times = c.compile_times
    assert list(times) == ["export", "fusion", "kernels"]
    assert all(t >= 0 for t in times.values()) and sum(times.values()) <= total
