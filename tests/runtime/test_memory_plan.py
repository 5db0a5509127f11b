"""The memory plan (`AliasClasses`): which slots may share memory, when a kernel's buffer is
free for reuse, as the static program (`Program.release_after`, `drop_after`) and a symbolic
program's CPU runner (`recycled_slots`) both take it."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
from runtime_fakes import ReferenceBackend, fake_lower_to_loops
from torch.export import Dim

from xfuse.frontend import import_module
from xfuse.ir.context import parse
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.compiler import AliasClasses, ProgramCompiler
from xfuse.runtime.steps import EagerStep, KernelStep, ViewStep
from xfuse.runtime.symbolic import SymbolicProgram, recycled_slots


class FakeStep(NamedTuple):
    """A step as the plan sees it (`SlotStep`)."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    owns_outputs: bool


def test_alias_classes_join_what_a_step_that_does_not_own_its_outputs_reads_and_writes() -> None:
    """A view's or aliasing op's results join its inputs' class, an owning step's do not; a
    class ends at the last step that touches any of its slots; an owned buffer is free after
    its class's end unless its class holds a pinned slot."""
    steps = [
        FakeStep((0,), (1,), owns_outputs=True),  # 0: a kernel writes 1
        FakeStep((1,), (2,), owns_outputs=False),  # 1: a view of 1
        FakeStep((0,), (3,), owns_outputs=True),  # 2: a kernel writes 3
        FakeStep((2, 3), (4,), owns_outputs=True),  # 3: a fresh op reads the view and 3
        FakeStep((4,), (5,), owns_outputs=True),  # 4: a kernel writes 5
        FakeStep((5,), (6,), owns_outputs=False),  # 5: a view of 5, returned
    ]
    classes = AliasClasses(steps)
    assert classes.root(2) == classes.root(1) != classes.root(3)
    assert classes.root(4) != classes.root(3) and classes.root(6) == classes.root(5)
    assert classes.end == {0: 2, 1: 1, 2: 3, 3: 3, 4: 4, 5: 5, 6: 5}
    assert classes.class_end[classes.root(1)] == 3  # the view's reader, not the view
    assert classes.recycled([1, 3, 5], pinned=[0, 6]) == {1: 3, 3: 3}


STATIC = """
func.func @forward(%w: tensor<8x16xf32>, %x: tensor<4x8xf32>) -> (tensor<4x16xf32>, tensor<64xf32>) {
  %a = graph.exp %x : tensor<4x8xf32>
  %z = graph.matmul %a, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %b = graph.sin %x : tensor<4x8xf32>
  %t = graph.permute %b perm = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %y = graph.matmul %t, %a : tensor<8x4xf32>, tensor<4x8xf32> -> tensor<8x8xf32>
  %c = graph.cos %z : tensor<4x16xf32>
  %l = graph.torch_call "aten.alias.default"(%c) args = ["%t0"] kwargs = {} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %n = graph.neg %l : tensor<4x16xf32>
  %one = graph.constant dense<1.000000e+00> : tensor<4x16xf32>
  %p = graph.exp %z : tensor<4x16xf32>
  %pt = graph.torch_call "aten.type_as.default"(%p, %one) args = ["%t0", "%t1"] kwargs = {} : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %k = graph.exp %y : tensor<8x8xf32>
  %q = graph.matmul %k, %y : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %e = graph.add %n, %pt : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
  %u = graph.tanh %q : tensor<8x8xf32>
  %r = graph.reshape %u : tensor<8x8xf32> -> tensor<64xf32>
  func.return %e, %r : tensor<4x16xf32>, tensor<64xf32>
}
"""


def test_the_static_plan_releases_each_kernel_buffer_after_its_alias_class(
    tmp_path: Path,
) -> None:
    """Each kernel buffer returns to the pool after the last step of its class (a view's
    reader, an aliasing torch call's reader), none whose class holds a constant or a result;
    every other slot is dropped after its own last step."""
    backend = ReferenceBackend()
    cache = KernelCache(tmp_path)
    compiler = ProgramCompiler(
        lambda m, name: cache.kernel(backend, m, name), lower=fake_lower_to_loops
    )
    program = compiler.compile(parse(STATIC))
    kinds = [type(s) for s in program.steps]
    K, E, V = KernelStep, EagerStep, ViewStep  # noqa: N806 - the table's letters
    assert kinds == [K, E, K, V, E, K, E, K, K, E, K, E, K, K, V]
    assert (program.arg_slots, program.output_slots, list(program.constants)) == (
        (0, 1),
        (15, 17),
        [10],
    )
    released = [tuple(s for s, _ in r) for r in program.release_after]
    assert released == [(), (), (), (), (2, 4), (), (), (7,), (), (), (), (13,), (9,), (), ()]
    assert program.drop_after == [
        (), (0,), (1,), (), (2, 4, 5), (), (), (7, 8), (3,), (10, 11), (), (6, 13), (9, 12), (14,), (16,)
    ]  # fmt: skip


def view_then_extern(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = (x * 2).exp()
    y = torch.matmul(h.unsqueeze(0), w)
    return (y.sin() + 1).cumsum(1)


def test_a_symbolic_kernel_buffer_read_through_a_view_is_recycled_after_the_views_reader() -> None:
    """The CPU runner's plan is the static one (`AliasClasses`): the first kernel's buffer,
    viewed (`unsqueeze`) and read by the product, returns to the pool after the product, not
    after the view; the result's is never recycled."""
    imported = import_module(
        view_then_extern,
        (torch.randn(5, 16), torch.randn(16, 8)),
        dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}, "w": None},
    )
    program = SymbolicProgram(imported.module)
    kinds = [type(s).__name__ for s in program.steps]
    assert kinds == ["_Launch", "_View", "_Eager", "_Launch"]
    assert [s.outputs for s in program.steps] == [[2], (3,), [4], [5]]
    assert program.results == [5]
    assert recycled_slots(program) == {2: 2}
