"""Sources say what the code does, not which work ticket asked for it: no comment, docstring or
page under the project's source directories names an issue number or a task label."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIRECTORIES = ("xfuse", "tests", "benchmarks", "docs", "examples", "filecheck")
SUFFIXES = (".py", ".md", ".mlir")

# Built from pieces so that this file does not cite a ticket itself.
_ISSUE = "[Ii]ss" + r"ue [0-9]+"
_TASK = "ta" + r"sk `"
_TASK_LABEL = r"\(ta" + r"sk \w+\)"
_LABELLED_TASK = r"\b(?:scatter|pool|gather|scan|index) ta" + r"sk\b"
_IND = r"\bin" + r"d[0-9]+\b"
TICKET = re.compile("|".join((_ISSUE, _TASK, _TASK_LABEL, _LABELLED_TASK, _IND)))


def ticket_citations(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each line of `text` that cites a work ticket."""
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if TICKET.search(line)]


def source_files() -> list[Path]:
    return sorted(
        path
        for directory in DIRECTORIES
        for path in (ROOT / directory).rglob("*")
        if path.suffix in SUFFIXES and path.is_file() and "Output" not in path.parts
    )


def test_no_source_cites_a_work_ticket() -> None:
    files = source_files()
    assert any(path.name == "steps.py" for path in files)
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in ticket_citations(path.read_text(encoding="utf-8"))
    ]
    assert not found, "\n".join(found)


def test_the_pattern_finds_ticket_labels() -> None:
    cited = [
        "# " + "iss" + "ue 15: accurate",
        '"""Output recycling (' + "Iss" + 'ue 14)."""',
        "// " + "ta" + "sk `scan`",
        "(" + "ta" + "sk gather) On the CPU",
        "// " + "pool " + "ta" + "sk: padding",
        "see " + "in" + "d90",
    ]
    assert [bool(ticket_citations(line)) for line in cited] == [True] * len(cited)
    plain = ["the task the threads share", "an index out of range", "issues output", "indices"]
    assert not any(ticket_citations(line) for line in plain)
