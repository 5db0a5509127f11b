"""Reproducers: a failing program as a standalone script, and loading one back."""

from __future__ import annotations

from collections.abc import Sequence

from xfuse.testing.fuzz.runner import Outcome, check_source

# ---------------------------------------------------------------------------------------------
# Reproducers
# ---------------------------------------------------------------------------------------------


def reproducer(source: str, outcome: Outcome, seed: int, index: int, training: bool = False) -> str:
    """A standalone script: the program, then a main that runs it eagerly and through xfuse
    (with `training`, its forward and backward: `check_training`) and exits non-zero while
    they differ."""
    name = reproducer_name(seed, index)
    how = (
        "its forward and backward through torch.compile (xfuse-fuzz --training)"
        if training
        else f"`xfuse-fuzz --bisect {name}` finds the pass and shrinks it"
    )
    header = (
        f'"""xfuse-fuzz reproducer: seed {seed}, program {index}.\n\n'
        f"Failed at: {outcome.stage}\n{_wrap(outcome.message)}\n\n"
        f"Run `python {name}` (exits non-zero while it fails);\n{how}.\n"
        '"""\n'
    )
    main = (
        "\n\n"
        'if __name__ == "__main__":\n'
        "    import sys\n\n"
        "    from xfuse.testing.fuzz.reproducer import check_file\n\n"
        f"    sys.exit(check_file(__file__{', training=True' if training else ''}))\n"
    )
    return header + source + main


def reproducer_name(seed: int, index: int) -> str:
    return f"fail_{seed}_{index}.py"


def _wrap(text: str, width: int = 96) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text.replace('"""', "'''"), width)) or "(no message)"


def program_part(text: str) -> str:
    """The program of a reproducer (or of a plain program file): the text before its main."""
    marker = '\n\nif __name__ == "__main__":'
    body = text.split(marker, 1)[0]
    if body.startswith('"""'):
        end = body.find('"""', 3)
        body = body[end + 3 :].lstrip("\n")
    return body.rstrip("\n") + "\n"


def check_file(path: str, devices: Sequence[str] | None = None, training: bool = False) -> int:
    """Run a reproducer's program through xfuse (with `training`, its forward and backward on
    the CPU, or `devices`); print the outcome; 0 when it passes."""
    from xfuse.testing.fuzz.training import check_training

    with open(path) as f:
        source = program_part(f.read())
    if training:
        outcome = check_training(source, devices or ("cpu",))
    else:
        outcome = check_source(source, devices)
    print(outcome)
    return 0 if outcome.status != "fail" else 1
