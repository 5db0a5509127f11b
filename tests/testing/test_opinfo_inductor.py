"""Which OpInfo samples Inductor lowers with no eager fallback (`xfuse.testing.opinfo`'s
`--inductor` measure): the classifier on ops whose answer is known."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest")

from xfuse.testing.opinfo import (  # noqa: E402
    Result,
    inductor_lowered,
    inductor_report,
    inductor_unlowered,
    op_db,
    op_name,
)

INFOS = {op_name(i): i for i in op_db()}


@pytest.mark.parametrize(
    "name",
    ["sin", "add", "sum", "mm", "nn.functional.conv2d", "empty", "sort", "lgamma",
     "nn.functional.scaled_dot_product_attention", "nn.functional.interpolate.bilinear"],
)  # fmt: skip
def test_lowered(name: str) -> None:
    assert inductor_lowered(INFOS[name], "f32", 0) == []


@pytest.mark.parametrize(
    ("name", "op"),
    [("linalg.svd", "aten._linalg_svd.default"), ("nonzero", "aten.nonzero.default"),
     ("digamma", "aten.digamma.default"), ("cumsum", "aten.cumsum.default")],
)  # fmt: skip
def test_not_lowered(name: str, op: str) -> None:
    assert op in inductor_lowered(INFOS[name], "f32", 0)


def test_composite_ops_decompose_as_inductor_sees_them() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear")

    assert inductor_unlowered(f, (torch.randn(1, 2, 4, 4),)) == []


def test_eager_errors_are_not_lowered() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x @ x  # 1-d by 3-d: eager refuses

    assert inductor_unlowered(f, (torch.randn(3, 2, 4),))[0].startswith("untraceable")


def test_report_counts_lowered_samples() -> None:
    infos: list[Any] = [INFOS["sin"], INFOS["linalg.svd"]]
    results = [
        Result("sin", "", "f32", 0, "eager", "aten.sin.default"),
        Result("linalg.svd", "", "f32", 0, "eager", "aten._linalg_svd.default"),
    ]
    report = inductor_report(results, infos)
    assert "f32: 1 Inductor-lowered samples of 2, xfuse fuses 0 (0.0%)" in report
    assert "with the 0 convolution/attention extern calls: 0.0%" in report
    assert "sin\teager\taten.sin.default" in report
    assert "aten._linalg_svd.default 1" in report


def test_later_tables_override(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from xfuse.testing.opinfo import main, write_expected

    first, second = tmp_path / "a.tsv", tmp_path / "b.tsv"
    write_expected([Result("sin", "", "f32", 0, "eager", "aten.sin.default")], first)
    write_expected([Result("sin", "", "f32", 0, "fused")], second)
    assert main(["--ops", "sin", "--inductor", "--table", str(first), "--table", str(second)]) == 0
    assert "f32: 1 Inductor-lowered samples of 1, xfuse fuses 1 (100.0%)" in capsys.readouterr().out
