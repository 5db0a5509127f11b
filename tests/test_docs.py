"""The documentation: the generated pass reference is current, links resolve, pictures exist."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def gen_reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_pass_reference_is_current() -> None:
    generated = gen_reference().reference()
    assert (DOCS / "passes.md").read_text() == generated, (
        "docs/passes.md is stale: run `python docs/gen_reference.py`"
    )


def test_pass_reference_lists_every_pass_and_option() -> None:
    from xfuse.passes import get_all_passes

    text = gen_reference().reference()
    for name in get_all_passes():
        assert f"## `{name}`" in text
    assert "| `arg-limit` | `int` | `128` |" in text  # fuse-greedy's and fuse-scored's default
    assert "Settable from Python only (no textual form): `fusable`." in text


def test_reference_check_mode_reports_staleness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = gen_reference()
    stale = tmp_path / "passes.md"
    stale.write_text("# old\n")
    monkeypatch.setattr(module, "OUTPUT", stale)
    assert module.main(["--check"]) == 1
    assert module.main([]) == 0 and module.main(["--check"]) == 0


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")) + ["../README.md"])
def test_relative_links_resolve(page: str) -> None:
    path = DOCS / page
    for target, _ in LINK.findall(path.read_text()):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{page} links to missing {target}"


def test_readme_links_every_doc() -> None:
    readme = (ROOT / "README.md").read_text() + (DOCS / "README.md").read_text()
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert f"{page.name})" in readme, f"{page.name} is linked from no index"


def test_pictures_are_svg() -> None:
    pictures = sorted((DOCS / "img").glob("*.svg"))
    assert {p.stem for p in pictures} >= {"resnet18", "gpt2", "custom_op", "small", "rejected"}
    for picture in pictures:
        text = picture.read_text()
        assert "<svg" in text and "cluster" in text, picture
