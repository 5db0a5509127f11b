"""
`xfuse-fuzz`: differential fuzzing of xfuse against torch eager, and the miscompilation
bisector.

    xfuse-fuzz --seconds 600 --seed 1 --out failures/      # fuzz; one reproducer per failure
    xfuse-fuzz --programs 50 --seed 3 --device cpu         # a fixed number of programs
    xfuse-fuzz --bisect failures/fail_1_17.py              # the pass, the fusion, a lit test
    xfuse-fuzz --training --seconds 900 --seed 1           # forward and backward vs eager's
    xfuse-fuzz --dynamic --seconds 900 --seed 1            # several sizes, dynamic=True
    xfuse-fuzz --training --dynamic --seconds 900 --seed 1 # both: training at several sizes

The fuzz run ends with the line `N passed, M failed` and exits 1 when M > 0. Programs that
torch.export rejects are counted as skipped, on a line of their own. With `--training`, each
program's outputs and input gradients through `torch.compile(backend="xfuse")` in strict mode
(AOTAutograd's forward and backward parts) are compared with eager's
(`xfuse.testing.fuzz.training`); skips are counted by reason, and parts xfuse cannot compile
(`EagerFallbackError`: coverage gaps, not failures) by the op they name. With `--dynamic`, each
program is called at its own sizes and two others of one dim through
`torch.compile(backend="xfuse", dynamic=True)`, values and strides against eager's
(`xfuse.testing.fuzz.dynamic`); the stages count how the backend compiled them (symbolic,
per-shape). With both, each program is trained at those sizes through
`torch.compile(backend="xfuse", dynamic=True)` in strict mode, outputs and input gradients
against eager's at each (`xfuse.testing.fuzz.dynamic_training`); the stages count how each part
(forward, backward) compiled, and skips, coverage gaps and reasons for compiling per shape are
counted as in either mode.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xfuse.pipeline import DEFAULT_PIPELINE
from xfuse.testing.fuzz.generator import generate
from xfuse.testing.fuzz.reproducer import check_in_mode, reproducer, reproducer_name
from xfuse.testing.fuzz.runner import Outcome, available_devices, check_source
from xfuse.testing.fuzz.training import REFUSED, gap_ops
from xfuse.testing.limits import ProgramTimeout, time_limit


def program_seed(seed: int, index: int) -> int:
    """The generator seed of program `index` of a run with `seed` (fail_<seed>_<index>.py)."""
    return seed * 1_000_003 + index


@dataclass
class FuzzRun:
    """Counts and failures of one `xfuse-fuzz` run."""

    seed: int
    out: Path | None
    devices: list[str]
    pipeline: str = DEFAULT_PIPELINE
    allow_unsupported: bool = True
    semantics: bool = False
    mode: str = "forward"
    """forward | training | dynamic | dynamic-training (`reproducer.MODES`)"""
    per_program_s: int = 120
    verbose: bool = False
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    gaps: int = 0
    stages: Counter[str] = field(default_factory=Counter[str])
    signatures: Counter[str] = field(default_factory=Counter[str])
    skip_reasons: Counter[str] = field(default_factory=Counter[str])
    gap_ops: Counter[str] = field(default_factory=Counter[str])
    per_shape: Counter[str] = field(default_factory=Counter[str])
    """The dynamic modes' reasons for compiling per shape, by how many programs gave each."""

    @property
    def training(self) -> bool:
        """Whether the mode trains (forward and backward through torch.compile)."""
        return self.mode in ("training", "dynamic-training")

    @property
    def dynamic(self) -> bool:
        """Whether the mode calls the program at several sizes with dynamic shapes."""
        return self.mode in ("dynamic", "dynamic-training")

    def run_one(self, index: int) -> Outcome:
        seed = program_seed(self.seed, index)
        source = generate(seed, allow_unsupported=self.allow_unsupported).source
        outcome = self.check_in_time(source)
        if self.training and outcome.status == "skip" and outcome.message == REFUSED:
            # The program drawn before its tail of dtypes eager refuses: one it differentiates.
            source = generate(
                seed, allow_unsupported=self.allow_unsupported, mismatches=False
            ).source
            outcome = self.check_in_time(source)
        self.record(index, source, outcome)
        return outcome

    def check_in_time(self, source: str) -> Outcome:
        try:
            with time_limit(self.per_program_s):
                return self.check(source)
        except ProgramTimeout as e:
            return Outcome("fail", "timeout", str(e))

    def check(self, source: str) -> Outcome:
        if self.mode != "forward":
            return check_in_mode(source, self.mode, self.devices)
        return check_source(source, self.devices, self.pipeline, semantics=self.semantics)

    def record(self, index: int, source: str, outcome: Outcome) -> None:
        if outcome.status == "skip":
            self.skipped += 1
            self.skip_reasons[outcome.message] += 1
        elif outcome.status == "gap":
            self.gaps += 1
            self.gap_ops.update(f"{outcome.stage}: {op}" for op in gap_ops(outcome.message))
            print(f"GAP program {index} at {outcome.stage}: {outcome.message[:300]}", flush=True)
        elif outcome.status == "pass":
            self.passed += 1
            self.stages.update(outcome.stages)
            if self.dynamic and outcome.message:
                self.per_shape.update(outcome.message.split("; "))
        else:
            self.failed += 1
            self.signatures[f"{outcome.stage}: {outcome.message[:100]}"] += 1
            where = self.write(index, source, outcome)
            print(
                f"FAIL program {index} at {outcome.stage}: {outcome.message[:300]}{where}",
                flush=True,
            )
        if self.verbose:
            print(f"program {index}: {outcome}", flush=True)

    def write(self, index: int, source: str, outcome: Outcome) -> str:
        if self.out is None:
            return ""
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / reproducer_name(self.seed, index)
        path.write_text(reproducer(source, outcome, self.seed, index, self.mode))
        return f" -> {path}"

    def summary(self) -> list[str]:
        if self.mode == "forward":
            lines = [f"{self.skipped} skipped (torch.export rejects them)"]
        else:
            lines = [f"{self.skipped} skipped"]
            lines += [f"  {n} x {why}" for why, n in self.skip_reasons.most_common()]
        if self.training:
            lines.append(f"{self.gaps} coverage gaps (EagerFallbackError in strict mode)")
            lines += [f"  {n} x {op}" for op, n in self.gap_ops.most_common()]
        if self.dynamic:
            lines.append("compiled per shape, because:")
            lines += [f"  {n} x {why}" for why, n in self.per_shape.most_common()]
        if self.stages:
            lines.append(
                "stages checked: " + ", ".join(f"{k} x{v}" for k, v in self.stages.items())
            )
        lines += [f"  {n} x {sig}" for sig, n in self.signatures.most_common()]
        lines.append(f"{self.passed} passed, {self.failed} failed")
        return lines


def fuzz(args: argparse.Namespace) -> int:
    run = FuzzRun(
        seed=args.seed,
        out=Path(args.out) if args.out else None,
        devices=available_devices(args.device),
        pipeline=args.pipeline,
        allow_unsupported=not args.supported_only,
        semantics=args.semantics,
        mode=mode_of(args),
        verbose=args.verbose,
    )
    deadline = time.monotonic() + args.seconds
    index = args.start
    while time.monotonic() < deadline and (
        args.programs is None or index - args.start < args.programs
    ):
        run.run_one(index)
        index += 1
    for line in run.summary():
        print(line)
    return 1 if run.failed else 0


def mode_of(args: argparse.Namespace) -> str:
    """The run's mode (`reproducer.MODES`) by its flags: `--training` and `--dynamic` alone or
    together, else forward."""
    if args.training and args.dynamic:
        return "dynamic-training"
    return "training" if args.training else "dynamic" if args.dynamic else "forward"


def bisect_file(args: argparse.Namespace) -> int:
    from xfuse.testing.bisect import BisectError, bisect_reproducer

    try:
        device = args.device or "cpu"
        report = bisect_reproducer(Path(args.bisect), pipeline=args.pipeline, device=device)
    except (BisectError, OSError) as e:
        print(f"xfuse-fuzz: error: {e}", file=sys.stderr)
        return 2
    print(report)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="xfuse-fuzz", description="Differential fuzzing of xfuse against torch eager."
    )
    p.add_argument("--seconds", type=float, default=60.0, help="fuzz for this long (default 60)")
    p.add_argument("--programs", type=int, default=None, help="stop after this many programs")
    p.add_argument("--seed", type=int, default=0, help="names the run's programs (default 0)")
    p.add_argument("--start", type=int, default=0, help="index of the first program (default 0)")
    p.add_argument("--out", default=None, help="write a reproducer script per failure here")
    p.add_argument(
        "--device", default=None, help="only this device (default: cpu, and cuda if usable)"
    )
    p.add_argument("--pipeline", default=DEFAULT_PIPELINE, help="the fusion pipeline to test")
    p.add_argument(
        "--semantics",
        action="store_true",
        help="also check aliasing: write into every output, compare what changes with eager",
    )
    p.add_argument(
        "--training",
        action="store_true",
        help="check forward and backward through torch.compile against eager's gradients "
        "(with --dynamic: at several sizes)",
    )
    p.add_argument(
        "--dynamic",
        action="store_true",
        help="call each program at several sizes through torch.compile(dynamic=True) "
        "(with --training: train it at each)",
    )
    p.add_argument("--supported-only", action="store_true", help="only ops xfuse compiles")
    p.add_argument("--bisect", metavar="FILE", default=None, help="bisect a failing reproducer")
    p.add_argument("-v", "--verbose", action="store_true", help="print every program's outcome")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.bisect is not None:
        return bisect_file(args)
    return fuzz(args)


if __name__ == "__main__":
    sys.exit(main())
