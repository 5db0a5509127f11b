"""Every pass has its lit folder, `filecheck/passes/<level>/<pass-name>/`, mirroring the module's
place under `xfuse/passes/<level>/`, with a test that runs it by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xfuse.passes import get_all_passes

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(get_all_passes()))
def test_pass_has_its_lit_folder(name: str) -> None:
    cls = get_all_passes()[name]()
    level = cls.__module__.split(".")[2]  # xfuse.passes.<level>.<module>
    folder = ROOT / "filecheck" / "passes" / level / name
    tests = sorted(folder.glob("*.mlir"))
    assert tests, f"{name}: no lit tests in {folder.relative_to(ROOT)}"
    runs = re.compile(rf"RUN:.*-p\s+'?[^|]*\b{re.escape(name)}\b")
    assert any(runs.search(t.read_text()) for t in tests), f"{name}: no RUN line runs it"
