"""The pytest configuration (pyproject.toml): torch's deprecation noise is filtered, xfuse's
own warnings are not, and the summary gives every skip's reason."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = """
import copy
import warnings

import pytest
import torch
from torch.utils import _pytree

from xfuse.errors import FallbackWarning


def test_torch_noise() -> None:
    copy.deepcopy(_pytree.tree_flatten(1)[1])  # what run_decompositions does to a LeafSpec
    torch.randn(4, 4).to_sparse_csr()


def test_own_warning() -> None:
    warnings.warn("a group runs eagerly", FallbackWarning)


@pytest.mark.skipif(True, reason="a reason the summary shows")
def test_skipped() -> None:
    pass
"""


def test_config_filters_torch_noise_keeps_ours_and_reports_skips(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-p",
         "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_sample.py")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out[-3000:]
    assert "2 passed, 1 skipped, 1 warning" in out, out[-3000:]
    assert "LeafSpec" not in out and "Sparse CSR" not in out
    assert "FallbackWarning: a group runs eagerly" in out
    assert re.search(r"SKIPPED \[1\] test_sample\.py:\d+: a reason the summary shows", out)
