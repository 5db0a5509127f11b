"""The per-group benchmark (benchmarks/group_times.py) on one small zoo model and one of the
third-party families (BERT, its hidden states out): every unit that runs as a kernel gets a row, its kernel's results matched eager's for the group's ops (checked
inside), and the table ends with the model's summary."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from benchmarks.group_times import main, model_rows  # noqa: E402


def test_every_kernel_unit_of_a_zoo_model_is_timed_against_eager() -> None:
    with torch.no_grad():
        rows = list(model_rows("families", "bert_hf", "latency", "cpu", torch.float32, rounds=2))
    assert rows
    for row in rows:
        assert row.label.startswith("xfuse_") and row.ops
        assert row.xfuse_us > 0 and row.eager_us > 0


def test_the_table_ends_with_each_models_summary(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--models", "vit", "--rounds", "2"])
    out = capsys.readouterr().out
    assert "| model | group | ops | xfuse us | eager us | ratio |" in out
    assert out.count("| vit | xfuse_") >= 1
    assert "| model | groups | slower by >10% |" in out
