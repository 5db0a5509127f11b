"""`xfuse.parse`: errors as one line that names the op and where it is, as `xfuse-opt` prints."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.utils.exceptions import ParseError, VerifyException

import xfuse
from xfuse.cli.opt import main
from xfuse.errors import IRParseError, XfuseError

SHAPE_ERROR = """\
func.func @f(%x: tensor<3xf32>, %y: tensor<4xf32>) {
  %0 = graph.neg %x : tensor<3xf32>
  %1 = graph.add %x, %y : tensor<3xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return
}
"""


def parse_error(text: str, **kwargs: object) -> IRParseError:
    with pytest.raises(IRParseError) as info:
        xfuse.parse(text, **kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, XfuseError) and isinstance(info.value, ValueError)
    return info.value


def test_verifier_error_names_the_op_and_its_line() -> None:
    error = parse_error(SHAPE_ERROR, name="model.mlir")
    assert str(error) == (
        "model.mlir:3:3: error: 'graph.add' op operand shapes [3] and [4] do not broadcast"
    )
    assert isinstance(error.__cause__, VerifyException)


def test_syntax_error_is_one_line() -> None:
    error = parse_error("func.func @f(%x: tensor<4xf32> -> {\n  func.return\n}\n")
    assert str(error) == "<string>:1:32: error: ')' expected"
    assert isinstance(error.__cause__, ParseError)


def test_type_constraint_checked_while_parsing_is_located() -> None:
    error = parse_error(
        "func.func @f(%x: tensor<*xf32>) {\n  %0 = graph.neg %x : tensor<*xf32>\n  func.return\n}\n"
    )
    assert str(error).startswith("<string>:2:3: error: tensor<*xf32>")
    assert "\n" not in str(error)


def test_the_same_line_as_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.mlir"
    path.write_text(SHAPE_ERROR)
    assert main([str(path)]) == 1
    printed = capsys.readouterr().err
    assert printed == str(parse_error(SHAPE_ERROR, name=str(path))) + "\n"


def test_unverified_parse_lets_invalid_ir_through() -> None:
    module = xfuse.parse(SHAPE_ERROR, verify=False)
    with pytest.raises(VerifyException):
        module.verify()


@pytest.mark.parametrize("text", ["", "  \n", "// nothing here\n"])
def test_text_without_ops_is_an_empty_module(text: str) -> None:
    module = xfuse.parse(text)
    assert list(module.ops) == []
