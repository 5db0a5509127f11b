"""Context, parsing and printing: text to module and back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xdsl.context import Context
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import AnyFloat, Builtin, ModuleOp
from xdsl.dialects.cf import Cf
from xdsl.dialects.func import Func
from xdsl.dialects.llvm import LLVM
from xdsl.dialects.math import Math
from xdsl.dialects.memref import MemRef
from xdsl.dialects.ptr import Ptr
from xdsl.dialects.scf import Scf
from xdsl.ir import Operation
from xdsl.parser import AttrParser
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span

from xfuse.dialects.fusion import Fusion
from xfuse.dialects.graph import Graph
from xfuse.dialects.mlir_ops import EXTRA_OPS
from xfuse.errors import IRParseError
from xfuse.ir.diagnostics import (
    LocatingParser,
    error_line,
    first_invalid_op,
    op_message,
    span_location,
)


def _read_hex_float_elements() -> None:
    """Workaround for xDSL 0.74: it prints non-finite float elements of dense attributes as
    their bits (`dense<0xff800000> : tensor<f32>`, as MLIR does) but reads such a literal back
    as the integer 4286578688. Read hex literals of float elements as bit patterns."""
    element = AttrParser._TensorLiteralElement  # pyright: ignore[reportPrivateUsage]
    if getattr(element.to_type, "xfuse_hex_floats", False):
        return
    original = element.to_type

    def to_type(self: Any, parser: AttrParser, type: Any) -> Any:
        if (
            isinstance(type, AnyFloat)
            and isinstance(self.value, int)
            and not isinstance(self.value, bool)
            and self.span.text.lower().startswith("0x")
        ):
            raw = self.value.to_bytes(type.compile_time_size, "little")
            return next(type.iter_unpack(raw))
        return original(self, parser, type)

    # A marker on the function and a monkeypatched method: deliberate, so unchecked.
    to_type.xfuse_hex_floats = True  # type: ignore[attr-defined]  # pyright: ignore[reportFunctionMemberAccess]
    element.to_type = to_type  # type: ignore[method-assign]  # pyright: ignore[reportAttributeAccessIssue]


_read_hex_float_elements()

DIALECTS = (Builtin, Func, Arith, Scf, Cf, MemRef, Math, LLVM, Ptr, Graph, Fusion)


def make_context() -> Context:
    """A context with xfuse's dialects and the xDSL dialects its lowerings produce."""
    ctx = Context()
    for dialect in DIALECTS:
        ctx.load_dialect(dialect)
    for op in EXTRA_OPS:  # MLIR math/arith ops that xDSL's dialects lack
        ctx.load_op(op)
    return ctx


def parse(text: str, *, verify: bool = True, name: str = "<string>") -> ModuleOp:
    """Parse IR text into a module (verified unless asked otherwise). Text that does not parse
    or verify raises `IRParseError`, one line as `xfuse-opt` prints it:
    `name:line:col: error: 'graph.add' op ...`. Text with no op is an empty module."""
    spans: dict[Operation, Span[str]] = {}
    try:
        module = LocatingParser(make_context(), text, name, spans).parse_module()
    except ParseError as e:
        raise IRParseError(error_line(e.msg, span_location(e.span))) from e
    if verify:
        verify_parsed(module, spans, name)
    return module


def verify_parsed(module: ModuleOp, spans: Mapping[Operation, Span[str]], name: str) -> None:
    """Verify a parsed module; raise `IRParseError` naming the first op that does not verify
    and where `spans` says it starts."""
    try:
        module.verify()
    except VerifyException as e:
        op, error = first_invalid_op(module) or (None, e)
        span = spans.get(op) if op is not None else None
        location = span_location(span) if span is not None else name
        raise IRParseError(error_line(op_message(op, str(error)), location)) from error
