"""
One-line diagnostics for IR text, the form `xfuse-opt` prints and `xfuse.parse` raises:

    model.mlir:3:3: error: 'graph.add' op operand shapes [3] and [4] do not broadcast

`error_line` is that form; `LocatingParser` remembers where each op starts, so that an op that
does not verify can be reported at its line.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span
from xdsl.utils.mlir_lexer import MLIRTokenKind


def error_line(message: str, location: str | None = None) -> str:
    """`location: error: message` (`error: message` without a location), on one line: the
    first non-empty line of `message`."""
    first = next((line.strip() for line in message.splitlines() if line.strip()), "")
    return f"{location}: error: {first}" if location else f"error: {first}"


def op_message(op: Operation | None, message: str) -> str:
    """`'graph.add' op message`: a verifier's message naming its op, as MLIR prints it."""
    return f"'{op.name}' op {message}" if op is not None else message


def span_location(span: Span[str] | Span[bytes]) -> str:
    """`file:line:col` of the start of `span` (its line offset included)."""
    loc = span.get_location()
    return f"{loc.file}:{loc.line}:{loc.col}"


def first_invalid_op(module: Operation) -> tuple[Operation, VerifyException] | None:
    """The innermost op of `module` that does not verify, with its error (nested ops first, as
    `Operation.verify` checks them); None when every op verifies on its own."""
    for op in module.walk(region_first=True):
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException as e:
            return op, e
    return None


class LocatingParser(Parser):
    """A parser that remembers where each operation starts, so diagnostics can point there,
    and reads an input with no operation (empty, or only comments) as an empty module, as
    `mlir-opt` does."""

    def __init__(
        self, ctx: Context, text: str | bytes, name: str, spans: dict[Operation, Span[str]]
    ):
        super().__init__(ctx, text, name)
        self.spans = spans

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        try:
            op = super().parse_operation()
        except VerifyException as e:
            # A type constraint checked while parsing (e.g. `tensor<*xf32>` where a ranked
            # tensor is required): report it at the op, like any other parse error.
            raise ParseError(start, str(e)) from e
        self.spans[op] = start
        return op

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        if self._current_token.kind == MLIRTokenKind.EOF:
            if allow_implicit_module:
                return ModuleOp([])
            self.raise_error("the input is empty: expected a builtin.module operation")
        return super().parse_module(allow_implicit_module)
