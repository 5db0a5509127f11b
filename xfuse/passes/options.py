"""
The values a pass option accepts, declared beside the option in its pass class:

    class FuseGreedyPass(ModulePass):
        arg_limit: int = 128
        OPTION_RULES: ClassVar[OptionRules] = {"arg_limit": POSITIVE}

`xfuse.pipeline` checks every pass it builds against its class's `OPTION_RULES` (field name ->
rule); integer options without a rule accept any integer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class OptionRule:
    """The integer values a pass option accepts, and how an error message describes them."""

    accepts: Callable[[int], bool]
    expected: str


OptionRules = Mapping[str, OptionRule]

POSITIVE = OptionRule(lambda v: v >= 1, "a positive integer")
NON_NEGATIVE = OptionRule(lambda v: v >= 0, "a non-negative integer")
LIMIT_OR_ALL = OptionRule(lambda v: v >= -1, "a non-negative integer, or -1 for no limit")
BLOCK_THREADS = OptionRule(lambda v: 1 <= v <= 1024, "an integer from 1 to 1024")
ROW_THREADS = OptionRule(
    lambda v: v == 0 or (64 <= v <= 1024 and v & (v - 1) == 0),
    "0 (automatic) or a power of two from 64 to 1024",
)
