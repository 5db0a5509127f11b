"""Context, parsing and printing: text to module and back."""

from __future__ import annotations

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
from xdsl.parser import AttrParser, Parser

from xfuse.dialects.fusion import Fusion
from xfuse.dialects.graph import Graph
from xfuse.dialects.mlir_ops import EXTRA_OPS


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
    """Parse IR text into a module (verified unless asked otherwise)."""
    module = Parser(make_context(), text, name).parse_module()
    if verify:
        module.verify()
    return module
