"""
The results a caller gets alias what eager's would, and nothing else (docs/contracts.md,
"Outputs and aliasing"): the importer's `OutputRule`s say what each output is in eager; after a
program has run, `OutputPlan.apply` makes its results so.

- a view of an argument (input, parameter, buffer, constant): the view chain replayed with torch
  on the argument itself, so sizes, strides and storage offset are eager's;
- a view of another output: the chain replayed on that output;
- a view of a hidden output (an intermediate two or more outputs view; `@forward` returns it
  after the returned outputs): the chain replayed on it, and the hidden output dropped;
- fresh: the program's result when it is memory of its own with eager's strides, else a copy
  (a result that shares storage with an argument, a constant or another output, as an
  identity `clone` gives, or that has other strides, as a kernel's contiguous buffer for a
  channels-last result). A result that is a CUDA graph's memory is always copied, once,
  straight into eager's strides.

Which outputs need no check at all (kernel buffers of their own, contiguous as eager's) is
known once per program: then `apply` returns the results as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import cast

import torch

from xfuse.dialects.graph import row_major_strides
from xfuse.frontend.outputs import OutputRule, replay
from xfuse.runtime.compiler import AliasClasses, Program, may_alias
from xfuse.runtime.steps import KernelStep

Tensor = torch.Tensor


def storage_address(t: Tensor) -> int:
    """The address of `t`'s memory; for a ZeroTensor (the gradient `sgn`'s backward returns),
    which has none and aliases nothing, a key no memory has (a negative number)."""
    if t._is_zerotensor():
        return -1 - id(t)
    return t.untyped_storage().data_ptr()


def _owned_slots(program: Program) -> set[int]:
    """Slots whose tensor is memory the program allocated this call (kernel buffers, results of
    eager ops that never alias their inputs)."""
    owned: set[int] = set()
    for step in program.steps:
        if not may_alias(step):
            owned.update(step.outputs)
    return owned - set(program.constants)


def _shared_roots(program: Program, rules: Sequence[OutputRule], classes: AliasClasses) -> set[int]:
    """The alias classes (`AliasClasses.root`) where a fresh output may share memory with
    something it must not: those holding an argument or a constant, or two fresh outputs."""
    shared = {classes.root(s) for s in (*program.arg_slots, *program.constants)}
    seen: set[int] = set()
    for slot, rule in zip(program.output_slots, rules, strict=False):
        if rule.base == "fresh":
            root = classes.root(slot)
            if root in seen:
                shared.add(root)
            seen.add(root)
    return shared


def _kernel_shapes(program: Program) -> dict[int, tuple[int, ...]]:
    """Slot -> shape of the kernel buffers (contiguous by construction)."""
    shapes: dict[int, tuple[int, ...]] = {}
    for step in program.steps:
        if isinstance(step, KernelStep):
            shapes.update(
                (s, spec.shape) for s, spec in zip(step.outputs, step.out_specs, strict=True)
            )
    return shapes


def with_kernel_strides(
    rules: Sequence[OutputRule], program: Program, free: Collection[int]
) -> tuple[OutputRule, ...]:
    """`rules` where each fresh output at a position in `free` (outputs whose strides only the
    program's own readers see: a training forward's saved tensors, whose strides follow
    `xfuse.aot.PartCompiler.saved_tensors`) that is a kernel buffer returned once, and that no
    other output views, takes the buffer's row-major strides: it is returned as the kernel
    wrote it, where eager's strides (a transpose's) would copy it."""
    slots, shapes = program.output_slots, _kernel_shapes(program)
    viewed = {rule.index for rule in rules if rule.base == "output"}
    out = list(rules)
    for i in free:
        slot = slots[i] if i < len(slots) else None
        rule = rules[i] if i < len(rules) else None
        if rule is None or rule.base != "fresh" or i in viewed or slot not in shapes:
            continue
        if slots.count(slot) == 1:
            out[i] = replace(rule, stride=row_major_strides(shapes[slot]))
    return tuple(out)


def fresh_copy(t: Tensor, stride: tuple[int, ...]) -> Tensor:
    """`t` in memory of its own with eager's `stride`. A stride of 0 (eager's result is an
    expand of a value not returned) makes one element of memory serve a whole dimension: that
    dimension's first index is what is copied. The copy's version counter is set back to 0, as
    a fresh result of eager's has it (the `copy_` that fills it counts as a write, which
    `_version` and autograd's checks of saved tensors would see); an inference tensor (made
    under `torch.inference_mode`) has no version counter. Row-major strides are one `clone`,
    whose result is at version 0."""
    if stride == row_major_strides(tuple(t.shape)):
        return t.clone(memory_format=torch.contiguous_format)
    copy = torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device)
    if 0 in stride:
        once = tuple(slice(0, 1) if s == 0 else slice(None) for s in stride)
        copy[once].copy_(t[once])
    else:
        copy.copy_(t)
    if not copy.is_inference():
        torch._C._autograd._unsafe_set_version_counter((copy,), (0,))
    return copy


class OutputPlan:
    """Applies the output rules of one program (see the module docstring); the last `hidden`
    rules and results are the hidden outputs."""

    def __init__(self, rules: Sequence[OutputRule], program: Program, hidden: int = 0):
        self.rules = tuple(rules)
        self.visible = len(self.rules) - hidden
        slots = program.output_slots
        owned = _owned_slots(program)
        classes = AliasClasses(program.steps)
        shared = _shared_roots(program, self.rules, classes)
        self.unchecked = frozenset(
            i
            for i, rule in enumerate(self.rules)
            if rule.base == "fresh"
            and (
                (slots[i] in owned and slots.count(slots[i]) == 1)
                or classes.root(slots[i]) not in shared
            )
        )
        """Fresh outputs that are memory of their own by construction (no storage check): a
        buffer of their own, or in a class of slots that holds no argument, constant or other
        fresh output (`_shared_roots`)."""
        checked = {
            classes.root(slots[i])
            for i, rule in enumerate(self.rules)
            if rule.base == "fresh" and i not in self.unchecked
        }
        self.watched_args = tuple(
            k for k, s in enumerate(program.arg_slots) if classes.root(s) in checked
        )
        """The arguments a checked output may share memory with (`_runner`)."""
        self.watched_outputs = tuple(
            i for i in sorted(self.unchecked) if classes.root(slots[i]) in checked
        )
        """The unchecked outputs a checked one may share memory with (`_runner`)."""
        self.constant_storages = frozenset(storage_address(t) for t in program.constants.values())
        self.checks = any(
            r.base == "fresh" and i not in self.unchecked for i, r in enumerate(rules)
        )
        self.views = tuple(i for i, r in enumerate(self.rules) if r.base != "fresh")
        shapes = _kernel_shapes(program)
        exact = {
            i
            for i in self.unchecked
            if slots[i] in shapes
            and (
                math.prod(shapes[slots[i]]) <= 1
                or row_major_strides(shapes[slots[i]]) == tuple(self.rules[i].stride)
            )
        }
        self.dynamic = tuple(
            i for i, rule in enumerate(self.rules) if rule.base == "fresh" and i not in exact
        )
        """The fresh outputs to check at each call (the others are kernel buffers of their own
        with eager's strides, known once here)."""
        self.as_is = len(exact) == len(self.rules) and hidden == 0
        """Every result is such a buffer: `apply` has nothing to do (the common case)."""
        self.run = self._runner()
        """`apply` without `copy_out`, as straight-line code (`_runner`)."""

    def apply(
        self, args: Sequence[Tensor], results: Sequence[Tensor], copy_out: bool = False
    ) -> list[Tensor]:
        """The caller's outputs from the program's `results` for `args`. `copy_out`: the results
        are memory the program keeps (a CUDA graph's, overwritten by its next replay): every
        fresh output is copied, once, into memory of its own with eager's strides."""
        if not copy_out:
            return list(results) if self.as_is else self.run(args, results)
        out = list(results)
        for i, rule in enumerate(self.rules):
            if rule.base == "fresh":
                out[i] = self._copy(rule, out[i], set())
        for i in self.views:
            rule = self.rules[i]
            out[i] = replay(rule.chain, args[rule.index] if rule.base == "arg" else out[rule.index])
        return out[: self.visible]

    def _runner(self) -> Callable[[Sequence[Tensor], Sequence[Tensor]], list[Tensor]]:
        """`apply(args, results)` (no `copy_out`) as one Python function of straight-line code,
        made once: the storages a checked fresh output must not share (arguments, constants,
        and the outputs that are buffers of their own it may share memory with:
        `watched_args`, `watched_outputs`), then each output of `dynamic` copied where it
        shares one of them or has other strides than eager's, then each view replayed (a
        `VIEW_METHODS` view as its method's call), so that a call runs no loop over the rules.

            def apply(args, results):
                out = list(results)
                taken = set(constant_storages)
                taken.add(storage(args[3]))
                t = out[5]
                s = storage(t)
                if s in taken and t.numel():
                    out[5] = copy(rule5, t, taken)
                else:
                    taken.add(s)
                    if t.stride() != stride5 and t.numel() > 1:
                        out[5] = copy(rule5, t, taken)
                out[6] = args[4]
                out[7] = out[5].transpose(*view7_0)
                return out[:8]
        """
        names: dict[str, object] = {
            "storage": storage_address,
            "copy": self._copy,
            "constant_storages": self.constant_storages,
        }
        lines = ["def apply(args, results):", "    out = list(results)"]
        lines.append("    taken = set(constant_storages)" if self.checks else "    taken = set()")
        if self.checks:
            lines += [f"    taken.add(storage(args[{k}]))" for k in self.watched_args]
            lines += [f"    taken.add(storage(out[{i}]))" for i in self.watched_outputs]
        for i in self.dynamic:
            names[f"rule{i}"], names[f"stride{i}"] = self.rules[i], tuple(self.rules[i].stride)
            restride = [
                f"if t.stride() != stride{i} and t.numel() > 1:",
                f"    out[{i}] = copy(rule{i}, t, taken)",
            ]
            lines.append(f"    t = out[{i}]")
            if i in self.unchecked:
                lines += [f"    {line}" for line in restride]
                continue
            lines += [
                "    s = storage(t)",
                "    if s in taken and t.numel():",
                f"        out[{i}] = copy(rule{i}, t, taken)",
                "    else:",
                "        taken.add(s)",
                *(f"        {line}" for line in restride),
            ]
        for i in self.views:
            rule = self.rules[i]
            value = f"args[{rule.index}]" if rule.base == "arg" else f"out[{rule.index}]"
            for n, view in enumerate(rule.chain):
                if view.method is not None and view.item is None:
                    names[f"view{i}_{n}"] = view.method_args
                    value = f"{value}.{view.method}(*view{i}_{n})"
                else:
                    names[f"view{i}_{n}"] = view
                    value = f"view{i}_{n}({value})"
            lines.append(f"    out[{i}] = {value}")
        lines.append(f"    return out[:{self.visible}]")
        code = compile("\n".join(lines) + "\n", "<xfuse outputs>", "exec")
        exec(code, names)  # noqa: S102 - code made above from output positions only
        return cast(Callable[[Sequence[Tensor], Sequence[Tensor]], list[Tensor]], names["apply"])

    @staticmethod
    def _copy(rule: OutputRule, t: Tensor, taken: set[int]) -> Tensor:
        """`fresh_copy` of `t` with the rule's strides, its storage added to `taken`."""
        copy = fresh_copy(t, rule.stride)
        taken.add(storage_address(copy))
        return copy
