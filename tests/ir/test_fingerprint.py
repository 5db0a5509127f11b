"""`xfuse.ir.fingerprint`: two modules share a fingerprint exactly when they print the same."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import ModuleOp

from xfuse.ir.context import parse
from xfuse.ir.fingerprint import fingerprint
from xfuse.pipeline import DEFAULT_PIPELINE
from xfuse.runtime.compiler import ProgramCompiler
from xfuse.runtime.driver import run_pipeline
from xfuse.testing.random_graph import random_program

CONSTANT = """
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = graph.constant dense<VALUE> : tensor<f32>
  %y = graph.add %x, %c : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
"""


def corpus() -> list[ModuleOp]:
    """Random programs, each also fused and lowered to loops: IR of every level."""
    modules: list[ModuleOp] = []
    for seed in range(40):
        program = random_program(seed, 4 + seed % 9, rows=seed % 2 == 0).module
        modules.append(program.clone())
        run_pipeline(DEFAULT_PIPELINE, program)
        modules.append(program)
        units = ProgramCompiler(lambda source, name: None).lower_ahead(program.clone())
        modules += list(units.units.values())[:2]
    return modules


def test_modules_share_a_fingerprint_exactly_when_they_print_the_same() -> None:
    modules = corpus()
    texts = [str(m) for m in modules]
    prints = [fingerprint(m) for m in modules]
    assert len(set(texts)) > 100
    by_text = dict(zip(texts, prints, strict=True))
    assert len(set(by_text.values())) == len(by_text)  # different text: different fingerprints
    for text, printed in zip(texts, prints, strict=True):
        assert by_text[text] == printed  # the same text: the same fingerprint


def test_a_parsed_copy_has_the_same_fingerprint() -> None:
    for module in corpus()[:40]:
        copy = parse(str(module))
        assert str(copy) == str(module)
        assert fingerprint(copy) == fingerprint(module)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("0.0", "-0.0"),  # equal as floats, not as bits
        ("1.0", "1.0000001"),
        ("0x7FC00000", "0x7FC00001"),  # two NaNs
    ],
)
def test_constants_that_print_differently_differ(a: str, b: str) -> None:
    first, second = (parse(CONSTANT.replace("VALUE", v)) for v in (a, b))
    assert str(first) != str(second)
    assert fingerprint(first) != fingerprint(second)


def test_names_and_operand_order_count() -> None:
    base = parse(CONSTANT.replace("VALUE", "2.0"))
    renamed = parse(CONSTANT.replace("VALUE", "2.0").replace("%y", "%z"))
    swapped = parse(
        CONSTANT.replace("VALUE", "2.0").replace(
            "%x, %c : tensor<4xf32>, tensor<f32>", "%c, %x : tensor<f32>, tensor<4xf32>"
        )
    )
    assert len({fingerprint(base), fingerprint(renamed), fingerprint(swapped)}) == 3


TWO_CONSTANTS = """
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.constant dense<0.0> : tensor<f32>
  %b = graph.constant dense<VALUE> : tensor<f32>
  %y = graph.add %x, %a : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %z = graph.add %y, %b : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  func.return %z : tensor<4xf32>
}
"""


def test_attributes_that_compare_equal_as_floats_keep_their_own_text_in_one_module() -> None:
    """Equal attributes share their printed text: 0.0 and -0.0 must not be equal."""
    zeros, signed = (parse(TWO_CONSTANTS.replace("VALUE", v)) for v in ("0.0", "-0.0"))
    assert fingerprint(zeros) != fingerprint(signed)


SPLAT = """
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = graph.constant dense<VALUE> : tensor<4xf32>
  %y = graph.add %x, %c : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}
"""


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("[1.0, 1.0, 1.0, 1.0]", "1.0", True),  # stored whole or as one element: one text
        ("[1.0, 1.0, 1.0, 2.0]", "1.0", False),
        ("[1.0, 2.0, 3.0, 4.0]", "[1.0, 2.0, 3.0, 5.0]", False),
    ],
)
def test_dense_constants_share_a_fingerprint_exactly_when_they_print_the_same(
    a: str, b: str, same: bool
) -> None:
    first, second = (parse(SPLAT.replace("VALUE", v)) for v in (a, b))
    assert (str(first) == str(second)) == same
    assert (fingerprint(first) == fingerprint(second)) == same
