"""`import xfuse`: light (no torch), and every documented dotted name reachable after it."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "xfuse"


def run(script: str) -> str:
    """Run `script` in a fresh interpreter; its stdout (it must exit with status 0)."""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def submodules() -> list[str]:
    """The package's modules and subpackages, from its directory."""
    names = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    names |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    return sorted(names)


def test_import_xfuse_does_not_import_torch() -> None:
    out = run(
        "import sys, xfuse\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    assert out.strip() == "[]"


# Names the docs reach through the package, grouped so that each process's first line reaches
# a subpackage not yet imported (one process per group: torch's import is most of its time).
DOCUMENTED = [
    ["xfuse.frontend.import_module", "xfuse.frontend.export_key"],
    ["xfuse.interpreters.graph.bind_arguments"],
    ["xfuse.runtime.cache.KernelCache"],
    [
        "xfuse.report.summary.FusionSummary",
        "xfuse.progress",
        "xfuse.api.DEFAULT_PIPELINE",
        "xfuse.dynamo.graph_device",
        "xfuse.errors.GraphvizMissingWarning",
        "xfuse.passes.get_all_passes",
    ],
]


def test_documented_dotted_names_resolve_after_import_xfuse() -> None:
    """Each group in a fresh process that imported only `xfuse` (a few processes at a time)."""

    def resolves(names: list[str]) -> str:
        return run("import xfuse\n" + "".join(f"assert {n} is not None\n" for n in names))

    with ThreadPoolExecutor(max_workers=2) as pool:
        assert list(pool.map(resolves, DOCUMENTED)) == [""] * len(DOCUMENTED)


def test_every_submodule_is_an_attribute_after_import_xfuse() -> None:
    """Each module and subpackage, first touched as an attribute of the package. `pipeline` is
    left out: `xfuse.pipeline` is the function `xfuse.pipeline(spec)`, which shadows it."""
    names = [name for name in submodules() if name != "pipeline"]
    assert {"api", "dynamo", "frontend", "interpreters", "progress", "testing"} <= set(names)
    script = (
        "import types, xfuse\n"
        f"for name in {names!r}:\n"
        "    module = getattr(xfuse, name)\n"
        "    assert isinstance(module, types.ModuleType), name\n"
        "    assert module.__name__ == 'xfuse.' + name, name\n"
        "    assert name in dir(xfuse), name\n"
        "assert callable(xfuse.pipeline) and not isinstance(xfuse.pipeline, types.ModuleType)\n"
        "print('ok')\n"
    )
    assert run(script) == "ok\n"


def test_unknown_attribute_is_still_an_attribute_error() -> None:
    out = run(
        "import xfuse\ntry:\n    xfuse.no_such_module\nexcept AttributeError as e:\n    print(e)\n"
    )
    assert out.strip() == "module 'xfuse' has no attribute 'no_such_module'"
