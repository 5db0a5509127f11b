"""The documentation: every Python block runs as written, the sample IR is current, the
generated pass reference is current, links resolve, pictures exist."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")


# --- Python blocks run as written ------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One ```python block of a page: its first line's number and its text."""

    page: Path
    line: int
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def python_blocks(page: Path) -> list[Block]:
    """The page's fenced blocks whose language is `python` (or `py`), in order."""
    blocks: list[Block] = []
    fence: str | None = None
    language, start, body = "", 0, list[str]()
    for number, line in enumerate(page.read_text().splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence, language, start, body = match.group(1), match.group(2), number + 1, []
        elif fence is not None and match and match.group(1) == fence and not match.group(2):
            if language in ("python", "py"):
                blocks.append(Block(page, start, "\n".join(body) + "\n"))
            fence = None
        elif fence is not None:
            body.append(line)
    return blocks


BLOCKS = [block for page in PAGES for block in python_blocks(page)]

# Runs one block as `python -c` would, in a fresh interpreter: an eager fallback is an error
# (FallbackWarning raised, and XFUSE_STRICT=1 in the environment makes every eager graph or
# group an EagerFallbackError); the block's lines keep their numbers in the page, so a
# traceback names the page and line.
HARNESS = """
import sys, warnings
from xfuse.errors import FallbackWarning
warnings.simplefilter("error", FallbackWarning)
page, line = sys.argv[1], int(sys.argv[2])
source = "\\n" * (line - 1) + sys.stdin.read()
exec(compile(source, page, "exec"), {"__name__": "__main__"})
"""


def scratch_root(path: Path) -> Path:
    """A directory that reads as the repository's root (a link to each of its entries), where
    the files a block writes (`model.svg`, `fused.dot`) stay out of the tree."""
    path.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".venv") and not (path / entry.name).exists():
            (path / entry.name).symlink_to(entry)
    return path


def run_block(block: Block, cwd: Path, timeout: float = 300) -> tuple[int, str]:
    """The block's exit status (-1: it timed out) and its output, stdout and stderr together."""
    env = {**os.environ, "XFUSE_STRICT": "1", "PYTHONPATH": str(cwd)}
    page = str(block.page.relative_to(ROOT))
    try:
        done = subprocess.run(
            [sys.executable, "-c", HARNESS, page, str(block.line)],
            input=block.code,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        return -1, f"{e.output or ''}\n(timed out after {timeout:.0f} s)"
    return done.returncode, done.stdout


@pytest.fixture(scope="module")
def block_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[Block, tuple[int, str]]:
    """Every block's exit status and output, a few blocks at a time (each is mostly torch's
    import and a compile)."""
    cwd = scratch_root(tmp_path_factory.mktemp("docs-root"))
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(BLOCKS, pool.map(lambda block: run_block(block, cwd), BLOCKS), strict=True))


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_python_block_runs(block: Block, block_runs: dict[Block, tuple[int, str]]) -> None:
    status, out = block_runs[block]
    assert status == 0, f"the block at {block.where} fails:\n{out[-3000:]}"


def test_python_blocks_are_found() -> None:
    """The pages that teach the Python API hold blocks the test runs."""
    pages = {block.page.name for block in BLOCKS}
    assert {"README.md", "python-api.md", "torch-backend.md", "architecture.md"} <= pages
    readme = python_blocks(ROOT / "README.md")
    assert any("examples/mlp.mlir" in block.code for block in readme)


def test_block_extraction_keeps_lines_and_languages(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```python\nx = 1\n```\n```sh\nls\n```\n````\n```python\n````\n"
        "```py\n\n  y = 2\n```\n"
    )
    blocks = python_blocks(page)
    assert [(b.line, b.code) for b in blocks] == [(3, "x = 1\n"), (12, "\n  y = 2\n")]


def test_harness_fails_on_fallback_warning_and_names_the_line(tmp_path: Path) -> None:
    """A block that warns `FallbackWarning` fails, and the traceback names its page and line."""
    page = ROOT / "README.md"
    code = "import warnings\nfrom xfuse.errors import FallbackWarning\n\n" + (
        "warnings.warn('runs eagerly', FallbackWarning)\n"
    )
    status, out = run_block(Block(page, 40, code), scratch_root(tmp_path))
    assert status != 0
    assert 'File "README.md", line 43' in out and "FallbackWarning: runs eagerly" in out


def test_sample_mlir_is_current() -> None:
    """examples/mlp.mlir is what `make examples/mlp.mlir` writes from examples/mlp.py."""
    from examples.to_mlir import to_mlir

    assert (ROOT / "examples" / "mlp.mlir").read_text() == to_mlir("mlp") + "\n", (
        "examples/mlp.mlir is stale: run `make examples/mlp.mlir`"
    )


# --- the pass reference, links and pictures --------------------------------------------------


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
