"""
`xfuse-opt`: xDSL's `xdsl-opt` with xfuse's dialects and passes.

    xfuse-opt model.mlir -p 'decompose,fuse-greedy{arg-limit=64}' -o fused.mlir
    xfuse-opt model.mlir -p decompose,fuse-scored --emit=dot | dot -Tsvg -o fused.svg
    xfuse-opt model.mlir -p decompose,fuse-scored --fusion-report[=json]
    xfuse-opt model.mlir --compile-pipeline cpu    # the passes xfuse.compile runs on the CPU

Every xDSL dialect, pass and target stays available. The IR is verified after parsing and
after every pass (`--no-verify-each` keeps only the first). Bad input -- a syntax error, an
unknown op, IR that does not verify, an unknown pass or option, a missing file, a usage error --
prints one line, `file:line:col: error: message` where there is a location, and exits with
status 1. An input with no op is an empty module (as in mlir-opt); a closed output pipe
(`| head`) ends quietly with status 141, as `cat` does.

`--compile-pipeline DEVICE` runs the pipeline `xfuse.compile` runs for DEVICE (cpu or cuda;
`xfuse.pipeline.compile_pipeline`): `-p`'s passes, or `DEFAULT_PIPELINE` without `-p`, with the
device's own passes after `decompose`.

`--emit=dot` prints the program after the pipeline as a Graphviz picture instead of IR, and
`--fusion-report` (`=json` for JSON) prints the fusion report instead: groups, kernels, bytes
moved with and without fusion, and why the fusion passes of the pipeline refused pairs
(`xfuse.report` draws and tabulates both).

To add a flag, extend `register_all_arguments`; to add an output target, extend
`register_all_targets` (both call the base class first).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from typing import IO, NoReturn

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Dialect, Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException, ParseError
from xdsl.utils.lexer import Span
from xdsl.xdsl_opt_main import xDSLOptMain

from xfuse.dialects.mlir_ops import EXTRA_OPS
from xfuse.errors import XfuseError
from xfuse.ir.context import DIALECTS
from xfuse.ir.diagnostics import LocatingParser, error_line, span_location
from xfuse.passes import get_all_passes
from xfuse.passes.fusion.decisions import FusionDecision
from xfuse.pipeline import (
    DEFAULT_PIPELINE,
    InvalidIRError,
    PassFactories,
    PassFailedError,
    Pipeline,
    PipelineError,
    PipelineOptions,
    compile_pipeline,
    file_line_col,
    parse_passes,
    verify_module,
)
from xfuse.report.dot import program_dot
from xfuse.report.op_index import OpIndex, collect_decisions
from xfuse.report.summary import format_summary, summarize

EXIT_ERROR = 1
DEVICES = ("cpu", "cuda")
"""The devices `--compile-pipeline` builds `xfuse.compile`'s pipeline for."""
EXIT_INTERNAL = 70
"""A bug in xfuse (sysexits.h EX_SOFTWARE), told apart from bad input."""


class SourceError(XfuseError, ParseError):
    """A parse error that prints as one line, `file:line:col: error: message`."""

    def __str__(self) -> str:
        return error_line(self.msg, span_location(self.span))


def _dialect_factory(dialect: Dialect) -> Callable[[], Dialect]:
    return lambda: dialect


class CliError(XfuseError):
    """A user error found by the driver itself (not by parsing or verification)."""


def diagnostic_line(error: Exception) -> str:
    """One line for a user error: `file:line:col: error: message` where there is a location."""
    if isinstance(error, ParseError):
        return str(SourceError(error.span, error.msg))
    if isinstance(error, InvalidIRError | PassFailedError):
        return str(error)  # already `[file:line:col: ]error: ...`
    return error_line(str(error) or type(error).__name__)


# --- arguments and --help ----------------------------------------------------------------------


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, without breaking pass and flag names at their hyphens."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class ArgumentParser(argparse.ArgumentParser):
    """xfuse-opt's arguments: a usage error is one line, `xfuse-opt: error: ...`, with status 1
    (as every other bad input), and `--help` ends with the passes, xfuse's first, each with the
    first sentence of its docstring."""

    passes: PassFactories

    @classmethod
    def adopt(cls, parser: argparse.ArgumentParser, passes: PassFactories) -> ArgumentParser:
        """`parser` made one of these, in place: `xDSLOptMain` builds a plain ArgumentParser."""
        parser.__class__ = cls
        assert isinstance(parser, cls)
        parser.passes = passes
        parser.prog = "xfuse-opt"
        parser.formatter_class = HelpFormatter
        return parser

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")

    def format_help(self) -> str:
        width = max(shutil.get_terminal_size().columns - 2, 40)
        return super().format_help() + "\n" + pass_listing(self.passes, width)


def pass_summary(pass_class: type[ModulePass]) -> str:
    """The first sentence of a pass's docstring (its reference entry's summary)."""
    paragraph = " ".join((pass_class.__doc__ or "").strip().split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s", paragraph, maxsplit=1)[0]


def pass_listing(passes: PassFactories, width: int) -> str:
    """xfuse's passes, one per row with its summary, then the names of xDSL's other passes."""
    ours = get_all_passes()
    column = max(len(name) for name in ours) + 4
    rows = [
        textwrap.fill(
            pass_summary(factory()),
            width,
            initial_indent=f"  {name}".ljust(column),
            subsequent_indent=" " * column,
            break_on_hyphens=False,
        )
        for name, factory in ours.items()
    ]
    others = textwrap.fill(
        ", ".join(sorted(set(passes) - set(ours))),
        width,
        initial_indent="  ",
        subsequent_indent="  ",
        break_on_hyphens=False,
    )
    return (
        "xfuse passes (-p):\n" + "\n".join(rows) + "\n\nxDSL passes (-p), also available:\n"
        f"{others}\n"
    )


class XfuseOptMain(xDSLOptMain):
    """xdsl-opt plus xfuse's dialects, passes, per-pass verification and one-line errors."""

    version_format = "xfuse-opt built on xdsl version {xdsl_version}"

    def __init__(self, args: Sequence[str] | None = None):
        # Spans of the ops of the chunk being processed, and that chunk's first line.
        self.op_spans: dict[Operation, Span[str]] = {}
        self.chunk_line_offset = 0
        self.pass_started = time.perf_counter()
        self.op_index = OpIndex()
        super().__init__("xfuse operator-fusion optimizer driver", args)

    # --- registration ------------------------------------------------------------------------

    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        known = set(self.ctx.registered_dialect_names)
        for dialect in DIALECTS:
            if dialect.name not in known:
                self.ctx.register_dialect(dialect.name, _dialect_factory(dialect))
        for op in EXTRA_OPS:  # MLIR math/arith ops that xDSL's dialects lack
            self.ctx.load_op(op)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)

    def register_all_frontends(self) -> None:
        super().register_all_frontends()
        self.available_frontends["mlir"] = self.parse_mlir

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        parser = ArgumentParser.adopt(arg_parser, self.available_passes)
        # xDSL's help for these lists every pass (or nothing): `--help` lists the passes last.
        helps = {
            "-p": "The pass pipeline, `pass{option=value ...},pass,...`: xfuse's passes and "
            "xDSL's, listed below.",
            "-v": "Print the version of xDSL that xfuse-opt is built on, and exit.",
            "--disable-verify": "Verify nothing: neither the input nor the IR after each pass.",
        }
        for flag, text in helps.items():
            parser._option_string_actions[flag].help = text  # pyright: ignore[reportPrivateUsage]
        arg_parser.add_argument(
            "--no-verify-each",
            dest="verify_each",
            default=True,
            action="store_false",
            help="Verify the IR only after parsing, not after every pass (faster).",
        )
        arg_parser.add_argument(
            "--compile-pipeline",
            metavar="DEVICE",
            choices=DEVICES,
            default=None,
            help="Run the pipeline `xfuse.compile` runs for DEVICE (cpu or cuda): the fusion "
            "pipeline (`-p`'s passes where given, else xfuse.compile's default) with the "
            "device's own passes after `decompose`.",
        )
        arg_parser.add_argument(
            "--emit",
            choices=("ir", "dot"),
            default="ir",
            help="What to print after the pipeline: the IR (default) or a Graphviz DOT "
            "picture of it (fusion groups as clusters, refused pairs as dashed edges).",
        )
        arg_parser.add_argument(
            "--fusion-report",
            nargs="?",
            const="text",
            choices=("text", "json"),
            default=None,
            help="Print the fusion report instead of the IR: groups, kernels, bytes moved "
            "with and without fusion, and why pairs were refused (`--fusion-report=json` "
            "for JSON).",
        )

    # --- pipeline ----------------------------------------------------------------------------

    def setup_pipeline(self) -> None:
        # Raises PipelineError (reported by `main`) for an unknown pass or option.
        self.xfuse_pipeline = Pipeline(
            self.pipeline_passes(),
            verify_each=self.args.verify_each and not self.args.disable_verify,
            locate=self.locate,
            observer=self.between_passes,
        )

    def pipeline_passes(self) -> tuple[ModulePass, ...]:
        """`-p`'s passes, or with `--compile-pipeline DEVICE` those of `compile_pipeline`:
        `-p`'s (else `DEFAULT_PIPELINE`) with the device's own after `decompose`."""
        device = self.args.compile_pipeline
        if device is None:
            return parse_passes(self.args.passes, self.available_passes)
        options = PipelineOptions(self.args.passes or DEFAULT_PIPELINE)
        try:
            return compile_pipeline(device, options, passes=self.available_passes).passes
        except PipelineError:
            raise
        except XfuseError as e:  # a bad XFUSE_CHANNELS_LAST
            raise PipelineError(str(e)) from None

    def apply_passes(self, prog: ModuleOp) -> None:
        self.op_index = OpIndex()
        self.xfuse_pipeline.apply(prog)

    def between_passes(
        self, previous: ModulePass | None, module: ModuleOp, following: ModulePass | None
    ) -> None:
        """`--time-passes` and `--print-between-passes`; runs after the IR is verified.
        Also indexes the ops a fusion pass is about to name in its decisions."""
        self.op_index.observe(previous, module, following)
        if self.args.time_passes and previous is not None:
            print(f"// pass {previous.name} took {time.perf_counter() - self.pass_started:.6f} s")
        if self.args.print_between_passes and previous is not None and following is not None:
            print(f"// IR after {previous.name}:")
            print(super().output_resulting_program(module))
        self.pass_started = time.perf_counter()

    # --- output ------------------------------------------------------------------------------

    def output_resulting_program(self, prog: ModuleOp) -> str:
        """The IR, or what `--emit=dot` / `--fusion-report` ask for instead."""
        decisions = self.fusion_decisions()
        if self.args.emit == "dot":
            return program_dot(prog, decisions, self.op_index)
        if self.args.fusion_report == "json":
            report = {
                "summary": summarize(prog, decisions).to_dict(),
                "decisions": [d.to_dict() for d in decisions],
            }
            return json.dumps(report, indent=2) + "\n"
        if self.args.fusion_report == "text":
            return format_summary(summarize(prog, decisions)) + "\n"
        try:
            return super().output_resulting_program(prog)
        except NotImplementedError as e:  # an xDSL target that cannot print these ops
            raise CliError(f"target '{self.args.target}' cannot print this program: {e}") from e

    def fusion_decisions(self) -> list[FusionDecision]:
        """The decisions of the fusion passes of the pipeline's last run."""
        return collect_decisions(self.xfuse_pipeline.passes)

    # --- input -------------------------------------------------------------------------------

    def get_input_stream(self) -> tuple[IO[bytes], str]:
        if self.args.input_file == "-":  # stdin, as in mlir-opt
            self.args.input_file = None
        try:
            stream, extension = super().get_input_stream()
        except OSError as e:
            raise CliError(f"cannot read '{self.args.input_file}': {e.strerror}") from None
        # Any file that is not in a registered format is read as MLIR text.
        if extension not in self.available_frontends:
            extension = "mlir"
        return stream, extension

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        self.op_spans.clear()
        self.chunk_line_offset = start_offset
        module = super().parse_chunk(chunk, file_extension, start_offset)
        if module is not None and not self.args.disable_verify:
            verify_module(module, None, self.locate)
        return module

    def parse_mlir(self, stream: IO[bytes]) -> ModuleOp:
        data = stream.read()
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else data
        except UnicodeDecodeError as e:
            raise CliError(
                f"cannot read '{self.get_input_name()}': not UTF-8 text (byte {e.start})"
            ) from None
        parser = LocatingParser(self.ctx, text, self.get_input_name(), spans=self.op_spans)
        try:
            return parser.parse_module(not self.args.no_implicit_module)
        except ParseError as e:  # one line also under --parsing-diagnostics
            raise SourceError(e.span, e.msg) from None

    def locate(self, op: Operation) -> str | None:
        """`file:line:col` of an op parsed from the input, else its `loc(...)` if it has one."""
        span = self.op_spans.get(op)
        if span is None:
            return file_line_col(op)
        loc = span.get_location()
        return f"{loc.file}:{loc.line + self.chunk_line_offset}:{loc.col}"

    # --- running -----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            if self.args.emit == "dot" and self.args.fusion_report is not None:
                raise CliError("--emit=dot and --fusion-report both replace the output: pick one")
            super().run()
        except (ParseError, PipelineError, DiagnosticException, CliError) as e:
            fail(diagnostic_line(e))
        except BrokenPipeError:
            raise  # the reader of the output went away: `main` ends quietly
        except OSError as e:
            fail(diagnostic_line(CliError(f"cannot write '{self.args.output_file}': {e.strerror}")))


def fail(line: str) -> NoReturn:
    print(line, file=sys.stderr)
    raise SystemExit(EXIT_ERROR)


EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
"""The status of a tool killed by SIGPIPE (`cat` when its reader closes the pipe)."""


def silence_stdout() -> None:
    """Send what is left for stdout to /dev/null, so Python's flush at exit raises no error."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `xfuse-opt`; returns the exit status."""
    try:
        XfuseOptMain(argv).run()
        sys.stdout.flush()  # a closed pipe shows here, not at exit
    except BrokenPipeError:  # `xfuse-opt ... | head`: stop quietly, as Unix tools do
        silence_stdout()
        return EXIT_BROKEN_PIPE
    except PipelineError as e:  # from building the pipeline, before any input is read
        print(diagnostic_line(e), file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as e:  # argparse, --help, --version and `fail`
        return e.code if isinstance(e.code, int) else 0 if e.code is None else EXIT_ERROR
    except Exception as e:  # a bug in xfuse: one line, the traceback only on request
        if os.environ.get("XFUSE_TRACEBACK") == "1":
            raise
        print(
            f"error: internal error in xfuse-opt: {type(e).__name__}: {e} "
            "(a bug in xfuse; XFUSE_TRACEBACK=1 prints the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    return 0


if __name__ == "__main__":
    sys.exit(main())
