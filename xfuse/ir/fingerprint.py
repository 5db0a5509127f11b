"""
A module's text for keying it: what the printer shows, faster to make than the printed text.

    key = sha256(fingerprint(module).encode())    # fingerprint(a) == fingerprint(b)
                                                  # only if str(a) == str(b)

The fused-program cache keys an imported module by its content (`xfuse.runtime.driver.fuse_and_lower`),
and printing a large imported module was a large part of a warm start. The fingerprint walks
what the generic printer prints (each op's name, operands, successors, properties, attributes,
result types and regions, each block's argument types, each value's name hint) and prints
each distinct attribute once (attributes are values: equal ones share their text); bytes
are written as hex, where the printer escapes them a character at a time, and a dense
constant as a digest of its elements' bytes.
It is not IR that parses, only text that differs wherever two modules' printed text does.
"""

from __future__ import annotations

import hashlib
from io import StringIO

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.printer import Printer

from xfuse.ir.dense import element_bytes


class _KeyPrinter(Printer):
    """The printer, writing bytes literals as hex in one piece."""

    def print_bytes_literal(self, bytestring: bytes) -> None:
        self.print_string(f'x"{bytestring.hex()}"')


class _Fingerprint:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.texts: dict[Attribute, str] = {}
        self.values: dict[SSAValue, str] = {}
        self.blocks: dict[Block, str] = {}

    def attribute(self, attribute: Attribute) -> str:
        try:
            return self.texts[attribute]
        except KeyError:
            pass
        except TypeError:  # an unhashable attribute: printed each time
            return self._print(attribute)
        text = self.texts[attribute] = self._print(attribute)
        return text

    def _print(self, attribute: Attribute) -> str:
        if isinstance(attribute, DenseIntOrFPElementsAttr):
            return self._dense(attribute)
        stream = StringIO()
        _KeyPrinter(stream=stream).print_attribute(attribute)
        return stream.getvalue()

    def _dense(self, attribute: DenseIntOrFPElementsAttr) -> str:  # pyright: ignore[reportMissingTypeArgument]
        """A dense constant as its type and a digest of its elements' bytes (a splat's one
        element's, however it is stored), never its elements decoded one by one."""
        digest = hashlib.blake2b(element_bytes(attribute), digest_size=20).hexdigest()
        return f"dense[{self.attribute(attribute.type)}]{digest}"

    def name(self, value: SSAValue) -> str:
        """A value's number: where it is defined, or where first used (a use before its
        definition, as a graph region has)."""
        return self.values.setdefault(value, f"%{len(self.values)}")

    def define(self, value: SSAValue) -> None:
        name = self.name(value)
        hint = value.name_hint
        self.parts.append(f"{name}#{hint or ''}:{self.attribute(value.type)}")

    def block(self, block: Block) -> str:
        return self.blocks.setdefault(block, f"^{len(self.blocks)}")

    def op(self, op: Operation) -> None:
        parts = self.parts
        parts.append(f"\n{op.name}(")
        parts.append(",".join(map(self.name, op.operands)))
        parts.append(")[" + ",".join(self.block(b) for b in op.successors) + "]")
        for name, attribute in op.properties.items():
            parts.append(f"<{name}={self.attribute(attribute)}>")
        for name, attribute in op.attributes.items():
            parts.append(f"{{{name}={self.attribute(attribute)}}}")
        for result in op.results:
            self.define(result)
        for region in op.regions:
            parts.append("{")
            for block in region.blocks:
                parts.append(self.block(block) + "(")
                for argument in block.args:
                    self.define(argument)
                parts.append(")")
                for inner in block.ops:
                    self.op(inner)
            parts.append("}")


def fingerprint(op: Operation) -> str:
    """`op` and everything nested in it, as text that two ops share only if they print the
    same (see the module's docstring)."""
    walk = _Fingerprint()
    walk.op(op)
    return "".join(walk.parts)
