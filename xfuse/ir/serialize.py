"""
IR in bytes and back, fast: pickle, with the links that would make it recurse cut.

xDSL keeps a block's ops, a region's blocks and a value's uses as linked lists, so pickle
following the links recurses once per op (and once per use along a chain of def-use): a
module of a few hundred ops passes Python's recursion limit. Here an op is pickled without
its neighbours and uses, a block with its ops as a list, a region with its blocks as a list
and a value without its uses; loading links them again and rebuilds every use from the
operands and successors (those that were in their value's use list: an op a pass dropped
without erasing it may still name operands whose lists no longer hold it). The depth is
then the nesting depth of the IR (an op's operands are defined earlier in its block, or
outside it, so they are pickled already).

    data = dumps((module, {group: lowered}))
    module, lowered = loads(data)     # str(module) as before, uses and all

Reading is far faster than parsing the IR's text, which is what makes a cached program worth
loading (`xfuse.runtime.driver.fuse_and_lower`).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Sequence
from typing import Any

from xdsl.ir import Block, Operation, Region, SSAValue, Use

_OP_LINKS = ("_next_op", "_prev_op", "_operand_uses", "_successor_uses")
_BLOCK_LINKS = ("_first_op", "_last_op", "_next_block", "_prev_block", "first_use")
_REGION_LINKS = ("_first_block", "_last_block")


def dumps(value: Any) -> bytes:
    """`value` (any picklable structure that holds IR) as bytes for `loads`."""
    out = io.BytesIO()
    _IRPickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return out.getvalue()


def loads(data: bytes) -> Any:
    """What `dumps` was given, its IR linked as it was (uses in another order)."""
    return pickle.loads(data)


def _without(state: dict[str, Any], links: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k not in links}


class _IRPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Operation):
            op = (_without(vars(obj), _OP_LINKS), _registered(obj))
            return _new, (type(obj),), op, None, None, _set_op
        if isinstance(obj, Block):
            block = (_without(vars(obj), _BLOCK_LINKS), list(obj.ops))
            return _new, (Block,), block, None, None, _set_block
        if isinstance(obj, Region):
            blocks: list[Block] = list(obj.blocks)
            region = (_without(vars(obj), _REGION_LINKS), blocks)
            return _new, (Region,), region, None, None, _set_region
        if isinstance(obj, SSAValue):
            return _new, (type(obj),), _without(vars(obj), ("first_use",))
        if isinstance(obj, Use):
            raise pickle.PicklingError("a Use outside its op: uses are rebuilt, not pickled")
        return NotImplemented


def _new(cls: type[Any]) -> Any:
    return object.__new__(cls)


Registered = tuple[tuple[bool, ...], tuple[bool, ...]]


def _registered(op: Operation) -> Registered:
    """Which of the op's operand and successor uses are in their value's (block's) use list.
    An op a pass dropped without erasing it (still reachable from, say, the decisions' index
    of ops) may keep operands whose use lists no longer hold it: loading must not add it."""
    return (
        _listed(op._operands, op._operand_uses),  # pyright: ignore[reportPrivateUsage]
        _listed(op._successors, op._successor_uses),  # pyright: ignore[reportPrivateUsage]
    )


def _listed(used: Sequence[SSAValue | Block], uses: Sequence[Use]) -> tuple[bool, ...]:
    """(A dropped op may hold operands and no uses at all.)"""
    return tuple(i < len(uses) and _is_listed(v, uses[i]) for i, v in enumerate(used))


def _is_listed(used: SSAValue | Block, use: Use) -> bool:
    previous = use._prev_use  # pyright: ignore[reportPrivateUsage]
    if previous is None:
        return used.first_use is use
    return previous._next_use is use  # pyright: ignore[reportPrivateUsage]


def _set_op(op: Operation, state: tuple[dict[str, Any], Registered]) -> None:
    fields, (operands, successors) = state
    vars(op).update(fields)
    op._next_op = op._prev_op = None  # pyright: ignore[reportPrivateUsage]
    op._operand_uses = _uses(op, op._operands, operands)  # pyright: ignore[reportPrivateUsage]
    op._successor_uses = _uses(op, op._successors, successors)  # pyright: ignore[reportPrivateUsage]


def _uses(
    op: Operation, used: tuple[SSAValue | Block, ...], listed: tuple[bool, ...]
) -> tuple[Use, ...]:
    uses = tuple(Use(op, i) for i in range(len(used)))
    for value, use, add in zip(used, uses, listed, strict=True):
        if add:
            value.add_use(use)
    return uses


def _set_block(block: Block, state: tuple[dict[str, Any], list[Operation]]) -> None:
    fields, ops = state
    vars(block).update(fields)
    block._first_op, block._last_op = _link(  # pyright: ignore[reportPrivateUsage]
        ops, "_prev_op", "_next_op"
    )
    block._next_block = block._prev_block = None  # pyright: ignore[reportPrivateUsage]


def _set_region(region: Region, state: tuple[dict[str, Any], list[Block]]) -> None:
    fields, blocks = state
    vars(region).update(fields)
    region._first_block, region._last_block = _link(  # pyright: ignore[reportPrivateUsage]
        blocks, "_prev_block", "_next_block"
    )


def _link(items: list[Any], prev: str, next_: str) -> tuple[Any, Any]:
    """Chain `items` through their `prev`/`next_` attributes; the first and the last."""
    for a, b in zip(items, items[1:], strict=False):
        setattr(a, next_, b)
        setattr(b, prev, a)
    if items:
        setattr(items[0], prev, None)
        setattr(items[-1], next_, None)
        return items[0], items[-1]
    return None, None
