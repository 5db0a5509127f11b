"""`xfuse-opt`: round trips, pipelines, and one-line errors (no traceback) on bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from xfuse.cli.opt import XfuseOptMain, main
from xfuse.pipeline import Pipeline

VALID = """\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.exp %x : tensor<4xf32>
  %1 = graph.exp %x : tensor<4xf32>
  %2 = graph.add %0, %1 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}
"""


def run_opt(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `xfuse-opt argv` in this process; returns (exit status, stdout, stderr)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def write(tmp_path: Path, text: str, name: str = "input.mlir") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def assert_one_line_error(status: int, out: str, err: str, expected: str) -> None:
    assert status == 1
    assert out == ""
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    assert expected in err, err


def test_round_trip(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = run_opt(capsys, write(tmp_path, VALID))
    assert (status, err) == (0, "")
    status, again, _ = run_opt(capsys, write(tmp_path, out, "again.mlir"))
    assert status == 0 and again == out


def test_pipeline_and_output_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    output = tmp_path / "out.mlir"
    status, out, err = run_opt(capsys, write(tmp_path, VALID), "-p", "cse", "-o", str(output))
    assert (status, out, err) == (0, "", "")
    assert output.read_text().count("graph.exp") == 1


def test_print_between_passes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, _ = run_opt(
        capsys, write(tmp_path, VALID), "-p", "cse,canonicalize", "--print-between-passes"
    )
    assert status == 0
    assert "// IR after cse:" in out
    assert "// IR after canonicalize:" not in out


def test_split_input_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = VALID + "// -----\nfunc.func @g() {\n  func.return\n}\n"
    status, out, _ = run_opt(capsys, write(tmp_path, text), "--split-input-file")
    assert status == 0
    assert out.count("// -----") == 1 and "@g" in out


def test_syntax_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, "func.func @f(%x: tensor<4xf32> -> {\n  func.return\n}\n")
    assert_one_line_error(*run_opt(capsys, path), f"{path}:1:32: error: ')' expected")


def test_unknown_op(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, VALID.replace("graph.exp %x", "graph.expo %x", 1))
    assert_one_line_error(
        *run_opt(capsys, path), f"{path}:2:19: error: Operation graph.expo is not registered"
    )


def test_verifier_error_points_at_the_op(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        "func.func @f(%x: tensor<4xf32>, %i: tensor<4xi32>) {\n"
        "  %0 = graph.neg %x : tensor<4xf32>\n"
        "  %1 = graph.exp %i : tensor<4xi32>\n"
        "  func.return\n}\n",
    )
    assert_one_line_error(
        *run_opt(capsys, path),
        f"{path}:3:3: error: 'graph.exp' op expected a floating-point operand, found i32",
    )


def test_type_constraint_error_while_parsing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        "func.func @f(%x: tensor<*xf32>) {\n  %0 = graph.neg %x : tensor<*xf32>\n"
        "  func.return\n}\n",
    )
    assert_one_line_error(*run_opt(capsys, path), f"{path}:2:3: error: tensor<*xf32>")


def test_unknown_pass(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert_one_line_error(
        *run_opt(capsys, write(tmp_path, VALID), "-p", "cse,no-such-pass"),
        "error: unknown pass 'no-such-pass'",
    )


def test_unknown_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert_one_line_error(
        *run_opt(capsys, write(tmp_path, VALID), "-p", "cse{depth=2}"),
        "error: pass 'cse' has no option 'depth'",
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "convert-memref-to-ptr{lower_func=3}",
            "error: pass 'convert-memref-to-ptr': option 'lower-func' must be true or false, "
            "found 3\n",
        ),
        (
            "fuse-greedy{arg-limit=abc}",
            "error: pass 'fuse-greedy': option 'arg-limit' must be an integer, found 'abc'\n",
        ),
        (
            "fuse-greedy{arg-limit=1.5}",
            "error: pass 'fuse-greedy': option 'arg-limit' must be an integer, found 1.5\n",
        ),
        (
            "fuse-greedy{arg-limit}",
            "error: pass 'fuse-greedy': option 'arg-limit' must be an integer, found no value\n",
        ),
    ],
)
def test_option_value_of_the_wrong_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, spec: str, expected: str
) -> None:
    """The option and the type it takes, as a pipeline spec writes them (no Python repr)."""
    status, out, err = run_opt(capsys, write(tmp_path, VALID), "-p", spec)
    assert (status, out, err) == (1, "", expected)


@pytest.mark.parametrize(
    ("spec", "column"), [("decompose,", 11), (",decompose", 1), ("cse,,decompose", 5)]
)
def test_empty_pass_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, spec: str, column: int
) -> None:
    assert_one_line_error(
        *run_opt(capsys, write(tmp_path, VALID), "-p", spec),
        f"error: invalid pass pipeline '{spec}' at column {column}: Expected pass name here",
    )


def test_malformed_pipeline(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert_one_line_error(
        *run_opt(capsys, write(tmp_path, VALID), "-p", "cse{"),
        "error: invalid pass pipeline 'cse{' at column",
    )


def test_missing_input_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.mlir")
    assert_one_line_error(
        *run_opt(capsys, missing),
        f"error: cannot read '{missing}': No such file or directory",
    )


def test_unwritable_output_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = str(tmp_path / "no-such-dir" / "out.mlir")
    assert_one_line_error(
        *run_opt(capsys, write(tmp_path, VALID), "-o", target),
        f"error: cannot write '{target}'",
    )


def test_verify_diagnostics_reports_each_chunk(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    chunk = (
        "func.func @f(%x: tensor<4xi32>) {\n  %0 = graph.exp %x : tensor<4xi32>\n  func.return\n}\n"
    )
    path = write(tmp_path, chunk + "// -----\n" + chunk)
    status, out, err = run_opt(capsys, path, "--split-input-file", "--verify-diagnostics")
    assert (status, err) == (0, "")
    assert f"{path}:2:3: error: 'graph.exp' op" in out
    assert f"{path}:7:3: error: 'graph.exp' op" in out


def test_registers_xfuse_and_xdsl_dialects_and_passes() -> None:
    from xfuse.ir.context import DIALECTS
    from xfuse.passes import get_all_passes

    tool = XfuseOptMain([])
    assert set(get_all_passes()) <= set(tool.available_passes)
    assert {"cse", "canonicalize", "convert-scf-to-cf"} <= set(tool.available_passes)
    assert {d.name for d in DIALECTS} <= set(tool.ctx.registered_dialect_names)
    assert "riscv" in tool.ctx.registered_dialect_names  # xDSL's own stay registered


def run_module(path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xfuse.cli.opt", path], capture_output=True, text=True, check=False
    )


def test_as_a_process(tmp_path: Path) -> None:
    """In a process of its own, as a user runs it: status 0, or 1 and one line, no traceback."""
    ok = run_module(write(tmp_path, VALID, "ok.mlir"))
    assert (ok.returncode, ok.stderr) == (0, "")
    path = write(
        tmp_path,
        VALID.replace("%0 = graph.exp %x : tensor<4xf32>", "%0 = graph.exp %x : tensor<5xf32>"),
    )
    bad = run_module(path)
    assert bad.returncode == 1
    assert "Traceback" not in bad.stderr
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith(f"{path}:2:"), bad.stderr


def test_a_bug_in_a_pass_is_one_line_and_status_70(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception that is not a diagnostic (a bug in xfuse) is reported in one line, told
    apart from bad input by its status; XFUSE_TRACEBACK=1 lets it propagate."""
    from xfuse.passes.fusion.group_cleanup import GroupCleanupPass

    def broken(self: object, ctx: object, op: object) -> None:
        raise TypeError("object of type 'IRUses' has no len()")

    monkeypatch.setattr(GroupCleanupPass, "apply", broken)
    path = write(tmp_path, VALID)
    status, out, err = run_opt(capsys, path, "-p", "group-cleanup")
    assert status == 70 and out == "" and "Traceback" not in err and err.count("\n") == 1
    assert "internal error in xfuse-opt: TypeError: object of type 'IRUses'" in err
    monkeypatch.setenv("XFUSE_TRACEBACK", "1")
    with pytest.raises(TypeError):
        main([path, "-p", "group-cleanup"])


# --- usage errors, input files, output pipes, --help ------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--emit=png"], "xfuse-opt: error: argument --emit: invalid choice: 'png'"),
        (["--no-such-flag"], "xfuse-opt: error: unrecognized arguments: --no-such-flag"),
        (["-t", "no-such-target"], "xfuse-opt: error: argument -t/--target: invalid choice"),
        (["--fusion-report=xml"], "xfuse-opt: error: argument --fusion-report: invalid choice"),
    ],
)
def test_usage_error_is_one_line_and_status_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], expected: str
) -> None:
    """argparse's errors as every other bad input: one line (no usage block), status 1."""
    assert_one_line_error(*run_opt(capsys, write(tmp_path, VALID), *argv), expected)


@pytest.mark.parametrize("text", ["", "\n  \n", "// only a comment\n"])
def test_empty_input_is_an_empty_module(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str
) -> None:
    """As in mlir-opt: a file with no op is an empty module."""
    status, out, err = run_opt(capsys, write(tmp_path, text), "-p", "decompose,fuse-greedy")
    assert (status, out.strip(), err) == (0, "builtin.module {\n}", "")


def test_empty_input_without_implicit_module(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path, "")
    assert_one_line_error(
        *run_opt(capsys, path, "--no-implicit-module"),
        f"{path}:1:1: error: the input is empty: expected a builtin.module operation",
    )


def test_unreadable_inputs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A directory and a file that is not text: one line naming the input, no traceback."""
    assert_one_line_error(
        *run_opt(capsys, str(tmp_path)), f"error: cannot read '{tmp_path}': Is a directory"
    )
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\xff\xfe\x00graph")
    assert_one_line_error(
        *run_opt(capsys, str(binary)), f"error: cannot read '{binary}': not UTF-8 text (byte 0)"
    )


def test_closed_output_pipe_ends_quietly(tmp_path: Path) -> None:
    """`xfuse-opt ... | head -2`: no message when the reader goes away, and the status of a tool
    killed by SIGPIPE (as `cat`), 141."""
    lines = [
        "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {",
        "  %v0 = graph.exp %x : tensor<4xf32>",
    ]
    lines += [f"  %v{i} = graph.exp %v{i - 1} : tensor<4xf32>" for i in range(1, 3000)]
    lines += ["  func.return %v2999 : tensor<4xf32>", "}"]
    path = write(
        tmp_path, "\n".join(lines) + "\n"
    )  # some 300 KiB of output: more than a pipe holds
    process = subprocess.Popen(
        [sys.executable, "-m", "xfuse.cli.opt", path, "-p", "decompose,decompose"]
        + ["--print-between-passes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline() == "// IR after decompose:\n"
    process.stdout.close()
    assert process.wait(timeout=120) == 141
    assert process.stderr.read() == ""


def test_help_lists_xfuse_passes_first_with_what_they_do(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from xfuse.passes import get_all_passes

    status, out, _ = run_opt(capsys, "--help")
    assert status == 0
    ours, xdsl = out.split("xfuse passes (-p):\n")[1].split("xDSL passes (-p), also available:")
    rows = [line.split() for line in ours.splitlines() if line.startswith("  ") and line[2] != " "]
    assert [row[0] for row in rows] == list(get_all_passes())  # every name whole, on its row
    greedy = list(get_all_passes()).index("fuse-greedy")
    assert ["fuse-greedy", "Greedy", "producer-consumer"] == rows[greedy][:3]
    assert all(len(row) > 1 for row in rows)  # each with its description
    assert "fuse-greedy" not in xdsl and "canonicalize," in xdsl and "cse," in xdsl
    assert not any(line.rstrip().endswith("-") for line in out.splitlines())  # no name split
    assert "-v, --version         Print the version of xDSL" in out


def test_unreadable_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file the user may not read (simulated: the tests may run as root, who reads all)."""
    from xdsl.tools import command_line_tool

    def denied(path: str, mode: str = "r") -> object:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(command_line_tool, "open", denied, raising=False)
    path = write(tmp_path, VALID)
    assert_one_line_error(*run_opt(capsys, path), f"error: cannot read '{path}': Permission denied")


def test_dash_reads_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-` is stdin, as in mlir-opt; its errors are located in `stdin`."""
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(VALID.encode())))
    status, out, err = run_opt(capsys, "-")
    assert (status, err) == (0, "") and "graph.add" in out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"func.func @f(\n")))
    assert_one_line_error(*run_opt(capsys, "-"), "stdin:2:1: error:")


def test_a_target_that_cannot_print_the_program_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An xDSL target that does not handle graph IR: one line and status 1, not an internal error."""
    assert_one_line_error(
        *run_opt(capsys, write(tmp_path, VALID), "-t", "llvm"),
        "error: target 'llvm' cannot print this program: Conversion not implemented for op",
    )


PADDED = """\
func.func @f(%x: tensor<4x16xbf16>, %w: tensor<16x300xbf16>) -> tensor<4x300xbf16> {
  %y = graph.matmul %x, %w : tensor<4x16xbf16>, tensor<16x300xbf16> -> tensor<4x300xbf16>
  func.return %y : tensor<4x300xbf16>
}
"""


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_compile_pipeline_runs_what_xfuse_compile_runs(
    device: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`--compile-pipeline DEVICE` builds `compile_pipeline(DEVICE)` and prints the IR after
    it: the same as `-p` with that pipeline's text."""
    from xfuse.pipeline import compile_pipeline

    monkeypatch.delenv("XFUSE_CHANNELS_LAST", raising=False)
    path = write(tmp_path, PADDED)
    built = XfuseOptMain([path, "--compile-pipeline", device]).xfuse_pipeline
    expected = compile_pipeline(device)
    assert Pipeline(built.passes).description() == expected.description()
    status, out, err = run_opt(capsys, path, "--compile-pipeline", device)
    assert (status, err) == (0, "")
    assert run_opt(capsys, path, "-p", str(expected)) == (0, out, "")
    assert ("graph.pad" in out) == (device == "cuda")  # pad-matmul runs on CUDA only


def test_compile_pipeline_takes_p_as_its_fusion_pipeline(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from xfuse.pipeline import PipelineOptions, compile_pipeline

    monkeypatch.delenv("XFUSE_CHANNELS_LAST", raising=False)
    path = write(tmp_path, PADDED)
    built = XfuseOptMain([path, "--compile-pipeline", "cpu", "-p", "decompose,cse"])
    expected = compile_pipeline("cpu", PipelineOptions("decompose,cse"))
    assert Pipeline(built.xfuse_pipeline.passes).description() == expected.description()


def test_compile_pipeline_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = write(tmp_path, PADDED)
    assert_one_line_error(
        *run_opt(capsys, path, "--compile-pipeline", "tpu"),
        "xfuse-opt: error: argument --compile-pipeline: invalid choice: 'tpu'",
    )
    assert_one_line_error(
        *run_opt(capsys, path, "--compile-pipeline", "cpu", "-p", "decompose,nope"),
        "error: unknown pass 'nope'",
    )
    monkeypatch.setenv("XFUSE_CHANNELS_LAST", "sometimes")
    assert_one_line_error(
        *run_opt(capsys, path, "--compile-pipeline", "cuda"),
        "error: XFUSE_CHANNELS_LAST must be 0, 1 or auto, found 'sometimes'",
    )
