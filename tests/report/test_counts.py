"""One definition of the headline's ops, groups and kernels (`xfuse.report.counts`): the demo,
`xfuse-opt --fusion-report` and `xfuse.explain` print the same numbers for the same program and
pipeline, and each report's table totals to its headline."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import xfuse
from examples import demo
from examples.mlp import make_mlp
from examples.transformer import make_transformer_block
from xfuse.api import DEFAULT_PIPELINE
from xfuse.cli.opt import main as opt_main
from xfuse.frontend import import_module
from xfuse.report.counts import headline

Inputs = tuple[torch.Tensor, ...]


def gelu_mlp() -> tuple[torch.nn.Module, Inputs]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)
    ).eval()
    model.requires_grad_(False)
    return model, (torch.randn(8, 32),)


def small_transformer() -> tuple[torch.nn.Module, Inputs]:
    model, inputs = make_transformer_block(batch=1, seq=16, d_model=32, heads=2)
    return model, tuple(inputs)


MODELS: dict[str, Callable[[], tuple[torch.nn.Module, Inputs]]] = {
    "GELU MLP": gelu_mlp,
    "demo MLP": lambda: make_mlp(batch=8, d_in=32, d_hidden=64, d_out=32),
    "demo transformer block": small_transformer,
}


def headline_and_total(report: str) -> tuple[str, tuple[int, int, int]]:
    """A report's headline, and its table's ops total, group rows and kernels total."""
    lines = report.splitlines()
    groups = sum(1 for line in lines if re.match(r"(@\S+ )?group \d+ ", line))
    total = next(line for line in lines if line.startswith("total "))
    ops, kernels = (int(n) for n in total.split()[1:3])
    return lines[0], (ops, groups, kernels)


def fusion_report(
    model: torch.nn.Module,
    inputs: Inputs,
    pipeline: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> str:
    path = tmp_path / "model.mlir"
    path.write_text(str(import_module(model, inputs).module))
    capsys.readouterr()
    assert opt_main([str(path), "-p", pipeline, "--fusion-report"]) == 0
    return capsys.readouterr().out


CASES = [(name, DEFAULT_PIPELINE) for name in MODELS] + [
    ("GELU MLP", pipeline) for pipeline in ("decompose,fuse-greedy", "decompose")
]


@pytest.mark.parametrize(("name", "pipeline"), CASES)
def test_explain_and_the_fusion_report_count_alike(
    name: str, pipeline: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, inputs = MODELS[name]()
    explanation = xfuse.explain(model, inputs, pipeline=pipeline, quiet=True)
    counts = len(explanation.ops), len(explanation.groups), len(explanation.kernels)
    explained, explained_total = headline_and_total(str(explanation))
    assert explained == headline(*counts)
    assert explained_total == counts  # the table totals to the headline
    reported, reported_total = headline_and_total(
        fusion_report(model, inputs, pipeline, tmp_path, capsys)
    )
    assert reported == headline(*counts, estimated=True)
    assert reported_total == counts


def test_the_gelu_mlp_counts_its_ops_after_decomposition() -> None:
    """linear, gelu, linear: gelu decomposes into 6 elementwise ops that fuse into one kernel;
    the linears run as library calls (no kernel of xfuse's)."""
    model, inputs = gelu_mlp()
    explanation = xfuse.explain(model, inputs, quiet=True)
    assert str(explanation).splitlines()[0] == "8 ops -> 1 group -> 1 kernel"
    assert explanation.imported_ops == ["graph.linear", "graph.gelu", "graph.linear"]


def test_the_headline_says_one_group_and_many_kernels() -> None:
    assert headline(1, 1, 1) == "1 op -> 1 group -> 1 kernel"
    assert headline(11, 0, 4, estimated=True, fallbacks=1) == (
        "11 ops -> 0 groups -> 4 kernels (estimated from the IR) (1 fallback)"
    )


def test_the_demo_prints_headlines_its_tables_total_to(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(demo, "median_ms", lambda *args, **kwargs: 0.0)
    monkeypatch.setattr(demo, "inductor_ms", lambda *args: "n/a (not timed here)")
    small: dict[str, Callable[[], Any]] = {
        "MLP": MODELS["demo MLP"],
        "transformer block": small_transformer,
    }
    for name, make in small.items():
        demo.run_model(name, make)
        out = capsys.readouterr().out
        report = out[out.index("compiled in") :].split("\n", 1)[1]
        line, (ops, groups, kernels) = headline_and_total(report)
        assert line == headline(ops, groups, kernels), out
