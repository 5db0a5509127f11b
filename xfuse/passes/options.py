"""
The values a pass option accepts, declared with the option itself (its dataclass field):

    class FuseGreedyPass(ModulePass):
        arg_limit: int = option(128, POSITIVE)

`xfuse.pipeline` checks every pass it builds against its fields' rules (`option_rule`); integer
options without a rule accept any integer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, dataclass, field
from typing import Any


@dataclass(frozen=True)
class OptionRule:
    """The integer values a pass option accepts, and how an error message describes them."""

    accepts: Callable[[int], bool]
    expected: str


POSITIVE = OptionRule(lambda v: v >= 1, "a positive integer")
NON_NEGATIVE = OptionRule(lambda v: v >= 0, "a non-negative integer")
LIMIT_OR_ALL = OptionRule(lambda v: v >= -1, "a non-negative integer, or -1 for no limit")
COUNT_OR_TARGETS = OptionRule(
    lambda v: v >= -1, "a non-negative integer, or -1 for the target's value"
)
BLOCK_THREADS = OptionRule(lambda v: 1 <= v <= 1024, "an integer from 1 to 1024")
ROW_THREADS = OptionRule(
    lambda v: v == 0 or (64 <= v <= 1024 and v & (v - 1) == 0),
    "0 (automatic) or a power of two from 64 to 1024",
)

_RULE = "xfuse.option_rule"


def option(default: int, rule: OptionRule) -> Any:
    """A pass option (a dataclass field) with its default and the values it accepts."""
    return field(default=default, metadata={_RULE: rule})


def option_rule(f: Field[Any]) -> OptionRule | None:
    """The values the option of field `f` accepts (None: any value of its type)."""
    rule = f.metadata.get(_RULE)
    return rule if isinstance(rule, OptionRule) else None
