"""Reproducers: a failing program as a standalone script, and loading one back."""

from __future__ import annotations

from collections.abc import Sequence

from xfuse.testing.fuzz.runner import Outcome, check_source

# ---------------------------------------------------------------------------------------------
# Reproducers
# ---------------------------------------------------------------------------------------------


MODES = ("forward", "training", "dynamic", "dynamic-training")
"""The fuzzer's modes: every stage of xfuse against eager (`runner.check_source`), forward and
backward through torch.compile (`training.check_training`, `xfuse-fuzz --training`), calls at
several sizes through torch.compile with dynamic shapes (`dynamic.check_dynamic`, `xfuse-fuzz
--dynamic`), and both: forward and backward at several sizes
(`dynamic_training.check_dynamic_training`, `xfuse-fuzz --training --dynamic`)."""

RERUN = {
    "training": "its forward and backward through torch.compile (xfuse-fuzz --training)",
    "dynamic": "its calls at several sizes through torch.compile(dynamic=True) (xfuse-fuzz --dynamic)",
    "dynamic-training": (
        "its forward and backward at several sizes through torch.compile(dynamic=True) "
        "(xfuse-fuzz --training --dynamic)"
    ),
}
"""What a reproducer of each mode but the forward one runs again."""


def reproducer(source: str, outcome: Outcome, seed: int, index: int, mode: str = "forward") -> str:
    """A standalone script: the program, then a main that runs it eagerly and through xfuse as
    the fuzzer's `mode` does (`MODES`) and exits non-zero while they differ."""
    name = reproducer_name(seed, index)
    how = RERUN.get(mode, f"`xfuse-fuzz --bisect {name}` finds the pass and shrinks it")
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
        f"    sys.exit(check_file(__file__{'' if mode == 'forward' else f', mode={mode!r}'}))\n"
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


def check_file(path: str, devices: Sequence[str] | None = None, mode: str = "forward") -> int:
    """Run a reproducer's program through xfuse as the fuzzer's `mode` does (the modes through
    torch.compile on the CPU unless `devices` says otherwise); print the outcome; 0 when it
    passes."""
    with open(path) as f:
        source = program_part(f.read())
    outcome = check_in_mode(source, mode, devices)
    print(outcome)
    return 0 if outcome.status != "fail" else 1


def check_in_mode(source: str, mode: str, devices: Sequence[str] | None = None) -> Outcome:
    """`source` checked by the fuzzer's `mode` (`MODES`)."""
    if mode not in MODES:
        raise ValueError(f"no fuzzing mode {mode!r} (the modes: {', '.join(MODES)})")
    from xfuse.testing.fuzz.dynamic import check_dynamic
    from xfuse.testing.fuzz.dynamic_training import check_dynamic_training
    from xfuse.testing.fuzz.training import check_training

    checks = {
        "training": check_training,
        "dynamic": check_dynamic,
        "dynamic-training": check_dynamic_training,
    }
    if mode in checks:
        return checks[mode](source, devices or ("cpu",))
    return check_source(source, devices)
