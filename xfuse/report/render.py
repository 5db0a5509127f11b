"""
DOT text to a picture through Graphviz's `dot` (.svg, .png, .pdf), or DOT text where Graphviz
is missing.

    render_dot(text, "fused.svg")
"""

from __future__ import annotations

import shutil
import subprocess
import warnings
from pathlib import Path

from xfuse.errors import GraphvizMissingWarning, RenderError

RENDER_FORMATS = ("svg", "png", "pdf")
DOT_SUFFIXES = (".dot", ".gv")


def render_dot(text: str, path: str | Path) -> Path:
    """Write `text` (DOT) to `path`: as is for `.dot`/`.gv`, else rendered by Graphviz in the
    format the suffix names (svg, png, pdf). Without Graphviz, writes `<path>.dot` and warns
    once with a hint. Returns the path written."""
    path = Path(path)
    if path.suffix in DOT_SUFFIXES:
        path.write_text(text)
        return path
    fmt = path.suffix.removeprefix(".").lower()
    if fmt not in RENDER_FORMATS:
        raise RenderError(f"cannot render to '{path}': use a .svg, .png, .pdf or .dot file name")
    dot = shutil.which("dot")
    if dot is None:
        fallback = path.with_suffix(".dot")
        fallback.write_text(text)
        warnings.warn(
            f"Graphviz `dot` not found: wrote the DOT text to {fallback} instead of {path} "
            "(install Graphviz, e.g. `apt-get install graphviz`, to render pictures)",
            GraphvizMissingWarning,
            stacklevel=2,
        )
        return fallback
    done = subprocess.run(
        [dot, f"-T{fmt}", "-o", str(path)], input=text, text=True, capture_output=True
    )
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise RenderError(f"Graphviz could not render {path}: {first}")
    return path
