"""Context, parsing and printing: text to module and back."""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.arith import Arith
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.cf import Cf
from xdsl.dialects.func import Func
from xdsl.dialects.llvm import LLVM
from xdsl.dialects.math import Math
from xdsl.dialects.memref import MemRef
from xdsl.dialects.ptr import Ptr
from xdsl.dialects.scf import Scf
from xdsl.parser import Parser

from xfuse.dialects.fusion import Fusion
from xfuse.dialects.graph import Graph

DIALECTS = (Builtin, Func, Arith, Scf, Cf, MemRef, Math, LLVM, Ptr, Graph, Fusion)


def make_context() -> Context:
    """A context with xfuse's dialects and the xDSL dialects its lowerings produce."""
    ctx = Context()
    for dialect in DIALECTS:
        ctx.load_dialect(dialect)
    return ctx


def parse(text: str, *, verify: bool = True, name: str = "<string>") -> ModuleOp:
    """Parse IR text into a module (verified unless asked otherwise)."""
    module = Parser(make_context(), text, name).parse_module()
    if verify:
        module.verify()
    return module
