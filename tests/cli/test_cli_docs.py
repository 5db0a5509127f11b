"""docs/cli.md and docs/writing-a-pass.md say what the code does: the sample report is what its
command prints, the lit test it cites exists, and the names they cite are there."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from xfuse.cli.opt import main

DOCS = Path(__file__).resolve().parents[2] / "docs"
ROOT = DOCS.parent


def test_cli_report_sample_is_what_its_command_prints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    page = (DOCS / "cli.md").read_text()
    found = re.search(r"For this `model.mlir`:\n\n```mlir\n(.*?)```", page, re.S)
    command = re.search(r"`xfuse-opt model.mlir ([^`]*)` prints:\n\n```\n(.*?)```", page, re.S)
    assert found is not None and command is not None
    model = tmp_path / "model.mlir"
    model.write_text(found.group(1))
    assert main([str(model), *command.group(1).split()]) == 0
    assert capsys.readouterr().out == command.group(2)


@pytest.mark.parametrize("page", ["cli.md", "writing-a-pass.md"])
def test_cited_files_exist(page: str) -> None:
    text = (DOCS / page).read_text()
    cited = re.findall(r"\b((?:filecheck|xfuse|tests|docs)/[\w./-]+\.(?:mlir|py|md))\b", text)
    assert cited
    missing = [path for path in cited if not (ROOT / path).exists()]
    assert not missing, missing


def test_writing_a_pass_names_the_registry_that_exists() -> None:
    text = (DOCS / "writing-a-pass.md").read_text()
    named = re.findall(r"`(xfuse\.passes)\.(\w+)\(\)`", text)
    assert ("xfuse.passes", "get_all_passes") in named
    for module, name in named:
        assert hasattr(importlib.import_module(module), name), f"{module}.{name}"
