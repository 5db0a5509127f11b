"""Programs with symbolic sizes on the CPU (xfuse/runtime/symbolic.py): kernels compiled once
serve every size of a symbolic batch, outputs match eager, and sizes outside the symbols'
ranges (0 and 1 among them) are refused in one line."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch.export import Dim
from torch.utils._python_dispatch import TorchDispatchMode
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

import xfuse
from xfuse.backends.cpu import CPUBackend
from xfuse.dialects import graph
from xfuse.errors import SymbolicSizeError
from xfuse.frontend import import_module
from xfuse.frontend.importer import ImportedProgram
from xfuse.interpreters.graph import bind_arguments
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.dynamic import DynamicProgram
from xfuse.runtime.symbolic import SymbolicProgram, _Launch  # pyright: ignore[reportPrivateUsage]


class CountingBackend(CPUBackend):
    """The CPU backend, counting the kernels it compiles."""

    def __init__(self) -> None:
        super().__init__()
        self.compiled: list[str] = []

    def compile(self, module: ModuleOp, name: str) -> bytes:
        self.compiled.append(name)
        return super().compile(module, name)


class Block(torch.nn.Module):
    """An MLP with a layer norm and a softmax: externs (linear) between fused groups with
    elementwise ops and row reductions."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.l2 = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(torch.nn.functional.gelu(self.l1(x)))
        return torch.softmax(self.l2(h) * 0.5, dim=-1)


def imported(model: torch.nn.Module) -> ImportedProgram:
    return import_module(
        model, (torch.randn(5, 16),), dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}}
    )


def test_kernels_compile_once_and_match_eager_at_every_batch_size() -> None:
    torch.manual_seed(0)
    model = Block().eval()
    program = imported(model)
    backend = CountingBackend()
    compiled = SymbolicProgram(program.module, backend=backend, cache=KernelCache(None))
    kernels = list(backend.compiled)
    assert compiled.kernel_count >= 2 and len(kernels) == compiled.kernel_count
    for batch in range(2, 65):
        x = torch.randn(batch, 16)
        (out,) = compiled(*bind_arguments(program.function, [x], program.params))
        with torch.no_grad():
            torch.testing.assert_close(out, model(x))
    assert backend.compiled == kernels  # no size compiled anything again


def test_kernels_carry_the_names_of_their_ops_as_static_ones_do() -> None:
    """Profilers show a symbolic program's kernels by their ops (`kernel_name`: the GELU and
    layer norm's `xfuse_add_mul_erf_reduce_mean_3more`, the softmax's `xfuse_add_mul_reduce_max_...`
    with its symbol's `_k1`), each name distinct in the program."""
    compiled = SymbolicProgram(imported(Block().eval()).module, cache=KernelCache(None))
    names = [k.name for k in compiled.kernels.values()]
    assert len(set(names)) == len(names) >= 2
    assert all(n.startswith("xfuse_") for n in names), names
    assert any("erf" in n for n in names) and any("reduce_max" in n for n in names), names


def test_a_kernel_that_repeats_compiles_once_and_a_second_program_compiles_none() -> None:
    """Two layers alike: each layer's norm and GELU is one kernel of the same loop IR, compiled
    once and launched twice; a second program of the same module finds every kernel in the
    cache."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, *copy.deepcopy(layers)).eval()
    program = import_module(
        model, (torch.randn(5, 16),), dynamic_shapes=({0: Dim("batch", min=2, max=64)},)
    )
    backend, cache = CountingBackend(), KernelCache(None)
    compiled = SymbolicProgram(program.module, backend=backend, cache=cache)
    assert compiled.kernel_count == 2 and len(backend.compiled) == 1
    again = SymbolicProgram(program.module, backend=backend, cache=cache)
    assert again.kernel_count == 2 and len(backend.compiled) == 1
    for batch in (2, 7, 64):
        x = torch.randn(batch, 16)
        for built in (compiled, again):
            (out,) = built(*bind_arguments(program.function, [x], program.params))
            with torch.no_grad():
                torch.testing.assert_close(out, model(x))


@pytest.mark.parametrize("batch", [0, 1, 65])
def test_a_size_outside_the_range_is_refused_in_one_line(batch: int) -> None:
    program = imported(Block().eval())
    compiled = SymbolicProgram(program.module)
    x = torch.randn(batch, 16)
    with pytest.raises(SymbolicSizeError, match=r"outside its range \[2, 64\]") as e:
        compiled(*bind_arguments(program.function, [x], program.params))
    assert "\n" not in str(e.value)


def test_a_static_dim_of_another_size_is_refused() -> None:
    program = imported(Block().eval())
    compiled = SymbolicProgram(program.module)
    with pytest.raises(SymbolicSizeError, match="dim 1 is static 16, got size 12"):
        compiled(*bind_arguments(program.function, [torch.randn(4, 12)], program.params))


def test_a_table_of_input_symbols_binds_them_alone() -> None:
    program = imported(Block().eval())
    compiled = SymbolicProgram(program.module)
    assert not compiled.derives
    tensors = bind_arguments(program.function, [torch.randn(7, 16)], program.params)
    sizes = compiled.bind(tensors)
    (symbol,) = compiled.input_symbols
    assert sizes == compiled.table.evaluate(sizes) == {symbol.name: 7}


def test_a_static_program_is_refused() -> None:
    program = import_module(Block().eval(), (torch.randn(5, 16),))
    with pytest.raises(SymbolicSizeError, match="has none"):
        SymbolicProgram(program.module)


def _and_flattened(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x.exp()
    return y, y.reshape(-1).exp()


def test_a_group_with_a_flattened_output_lowers_symbolically() -> None:
    """A group of [batch, 16] that also yields its value flattened, [16*batch] (as many
    elements for every size; `lower-to-loops` refused it before): one program, eager's
    values at every batch size."""
    program = import_module(
        _and_flattened,
        (torch.randn(5, 16),),
        dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}},
    )
    compiled = SymbolicProgram(program.module)
    for b in (2, 7, 64):
        x = torch.rand(b, 16)  # exp(exp(x)) within float32's precision
        for got, expected in zip(compiled(x), _and_flattened(x), strict=True):
            torch.testing.assert_close(got, expected)


class Embeddings(torch.nn.Module):
    """A language model's input: token and position embeddings (gathers from static tables at
    symbolic positions, an iota over the sequence), the attention's head split (a reshape and
    a permute of symbolic dims after the first) and a causal mask (iotas compared)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(50, 16)
        self.positions = torch.nn.Embedding(32, 16)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq = ids.shape[1]
        h = self.tokens(ids) + self.positions(torch.arange(seq).unsqueeze(0))
        heads = h.view(ids.shape[0], seq, 2, 8).transpose(1, 2)
        q, k = heads.split(4, dim=-1)
        causal = torch.arange(seq).unsqueeze(0) <= torch.arange(seq).unsqueeze(1)
        return (q * k.exp()).contiguous(), causal.to(torch.float32)


def test_embeddings_heads_and_masks_compile_once_and_match_eager() -> None:
    torch.manual_seed(0)
    model = Embeddings().eval()
    program = import_module(
        model,
        (torch.randint(0, 50, (2, 7)),),
        dynamic_shapes={"ids": {1: Dim("seq", min=2, max=32)}},
    )
    backend = CountingBackend()
    compiled = SymbolicProgram(program.module, backend=backend, cache=KernelCache(None))
    kernels = sorted(backend.compiled)
    for seq in (2, 3, 8, 17, 32):
        ids = torch.randint(0, 50, (2, seq))
        got = compiled(*bind_arguments(program.function, [ids], program.params))
        with torch.no_grad():
            for g, want in zip(got, model(ids), strict=True):
                torch.testing.assert_close(g, want)
    assert sorted(backend.compiled) == kernels


def test_a_token_out_of_range_raises_like_eager() -> None:
    model = Embeddings().eval()
    program = import_module(
        model,
        (torch.randint(0, 50, (2, 7)),),
        dynamic_shapes={"ids": {1: Dim("seq", min=2, max=32)}},
    )
    compiled = SymbolicProgram(program.module)
    ids = torch.randint(0, 50, (2, 5))
    ids[1, 3] = 50
    with pytest.raises(IndexError, match="index out of range"):
        compiled(*bind_arguments(program.function, [ids], program.params))


def test_a_scan_and_a_gather_along_the_symbol_compile_once_and_match_eager() -> None:
    """A cumsum along the symbolic dim (its sequential loop to the runtime size) read back
    through a gather along that dim (each index checked against the runtime size)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return x.cumsum(0)[torch.arange(x.shape[0]) // 2] * 2

    program = import_module(
        f, (torch.randn(5, 4),), dynamic_shapes={"x": {0: Dim("n", min=2, max=64)}}
    )
    backend = CountingBackend()
    compiled = SymbolicProgram(program.module, backend=backend, cache=KernelCache(None))
    kernels = sorted(backend.compiled)
    for n in (2, 3, 17, 64):
        x = torch.randn(n, 4)
        (out,) = compiled(*bind_arguments(program.function, [x], program.params))
        torch.testing.assert_close(out, f(x))
    assert sorted(backend.compiled) == kernels


def test_an_addmm_between_merging_reshapes_compiles_once_and_matches_eager() -> None:
    """transformers' `Conv1D`: a layer norm's output viewed as `[2 * s, 16]`, an `addmm`, and
    the result viewed back as `[2, s, 8]`: the import multiplies the unmerged input, so no
    kernel reads through a reshape that merges the sequence with the batch."""
    norm = torch.nn.LayerNorm(16).eval()
    weight, bias = torch.randn(16, 8), torch.randn(8)

    def f(x: torch.Tensor) -> torch.Tensor:
        h = norm(x)
        y = torch.addmm(bias, h.view(-1, 16), weight).view(2, x.shape[1], 8)
        return torch.tanh(y) + h[..., :8]

    program = import_module(
        f, (torch.randn(2, 5, 16),), dynamic_shapes={"x": {1: Dim("seq", min=2, max=64)}}
    )
    compiled = SymbolicProgram(program.module)
    for n in (2, 7, 33):
        x = torch.randn(2, n, 16)
        (out,) = compiled(*bind_arguments(program.function, [x], program.params))
        with torch.no_grad():
            torch.testing.assert_close(out, f(x))


def _cat_inner(x: torch.Tensor) -> torch.Tensor:
    """Along an inner symbolic dim of a tensor with two more symbolic dims."""
    return torch.cat([x, x.exp()], 2) * 2


def _cat_three(x: torch.Tensor) -> torch.Tensor:
    """Along the symbolic batch: a symbolic input, a static one, a symbolic one again."""
    return torch.cat([x.relu(), torch.ones(3, 4, 5, 6), x * 3], 0).sigmoid()


def _cat_static_dim(x: torch.Tensor) -> torch.Tensor:
    """Along a static dim of tensors with symbolic ones (offsets stay static)."""
    return torch.cat([x, x[:, :2].neg()], 1).sum(1)


@pytest.mark.parametrize("f", [_cat_inner, _cat_three, _cat_static_dim])
def test_a_concatenation_along_symbolic_dims_compiles_once_and_matches_eager(f: Any) -> None:
    """A concatenation fused with its producers and readers: each input's offset along the
    axis is the runtime sum of the sizes before it, each element read from the input the
    index falls in, at every size."""
    batch = Dim("b", min=2, max=16)
    image = {2: Dim("h", min=2, max=16), 3: Dim("w", max=16)} if f is not _cat_three else {}
    program = import_module(
        f, (torch.randn(3, 4, 5, 6),), dynamic_shapes={"x": {0: batch, **image}}
    )
    backend = CountingBackend()
    compiled = SymbolicProgram(program.module, backend=backend, cache=KernelCache(None))
    kernels = sorted(backend.compiled)
    forward = next(op for op in compiled.module.ops if isinstance(op, func.FuncOp))
    assert kernels and not any(isinstance(op, graph.ConcatOp) for op in forward.body.ops)
    for b, h, w in ((2, 2, 2), (3, 7, 5), (16, 3, 16)):
        x = torch.randn(b, 4, h, w) if image else torch.randn(b, 4, 5, 6)
        (out,) = compiled(*bind_arguments(program.function, [x], program.params))
        torch.testing.assert_close(out, f(x))
    assert sorted(backend.compiled) == kernels


def _flip(x: torch.Tensor) -> torch.Tensor:
    """Along both symbolic dims and the static one between them."""
    return torch.flip(x.exp(), [0, 1, 2]) + x


def _flatten_image(x: torch.Tensor) -> torch.Tensor:
    """A conv net's flatten of channels and a symbolic image, then a softmax over it."""
    return (x.exp().flatten(1) * 2).softmax(-1)


def _flatten_and_back(x: torch.Tensor) -> torch.Tensor:
    """Two symbolic dims flattened, then split again into a symbolic and a static dim."""
    return (x.exp().reshape(-1) + 1).reshape(x.shape[0], 2, -1).sin()


def _transpose_and_flatten(x: torch.Tensor) -> torch.Tensor:
    """A transpose before the flatten: the flat index maps to a permuted one."""
    return x.exp().transpose(1, 2).reshape(x.shape[0], -1).sum(-1)


@pytest.mark.parametrize(
    "f",
    [
        _flip,
        lambda x: torch.flip(x, [2]).sigmoid(),
        _flatten_image,
        _flatten_and_back,
        _transpose_and_flatten,
    ],
)
def test_flips_and_reshapes_of_symbolic_dims_compile_once_and_match_eager(f: Any) -> None:
    """Element i of a flipped dim of runtime size n reads element n - 1 - i. A reshape with
    symbolic dims after the first inside a group: the element of the result at a linear offset
    reads the input's at the same one, through divisions and moduli by the runtime sizes,
    which a leaf's offset folds back to the linear offset."""
    shapes = {"x": {0: Dim("b", min=2, max=16), 2: Dim("h", min=2, max=16)}}
    program = import_module(f, (torch.randn(3, 4, 5),), dynamic_shapes=shapes)
    backend = CountingBackend()
    compiled = SymbolicProgram(program.module, backend=backend, cache=KernelCache(None))
    kernels = sorted(backend.compiled)
    assert kernels
    for b, h in ((2, 2), (3, 7), (16, 16)):
        x = torch.randn(b, 4, h)
        (out,) = compiled(*bind_arguments(program.function, [x], program.params))
        torch.testing.assert_close(out, f(x))
    assert sorted(backend.compiled) == kernels


POOLED = """
func.func @forward(%x: tensor<2x?xf32, #graph.syms<s0>>) -> tensor<2x?xf32, #graph.syms<e0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 1) hint 9 range [2, 64], e0 = (s0 + 1) floordiv 2>} {
  %0 = graph.torch_call "aten.max_pool1d.default"(%x) args = ["%t0", [3], [2], [1]] kwargs = {} : (tensor<2x?xf32, #graph.syms<s0>>) -> tensor<2x?xf32, #graph.syms<e0>>
  %1 = graph.exp %0 : tensor<2x?xf32, #graph.syms<e0>>
  func.return %1 : tensor<2x?xf32, #graph.syms<e0>>
}"""
"""A stride-2 pooling, then a kernel over its output, whose size is a floor division of the
input's: the kernel computes it from its size argument."""


def test_a_kernel_over_a_floor_division_symbol_compiles_once() -> None:
    from xfuse.ir.context import parse

    backend = CountingBackend()
    program = SymbolicProgram(parse(POOLED), backend=backend, cache=KernelCache(None))
    assert program.kernel_count == len(backend.compiled) == 1
    assert program.derives and program.bind([torch.randn(2, 9)]) == {"s0": 9, "e0": 5}
    for n in (3, 4, 9, 10, 63, 64):
        x = torch.randn(2, n)
        (got,) = program(x)
        torch.testing.assert_close(got, torch.nn.functional.max_pool1d(x, 3, 2, 1).exp())
    assert len(backend.compiled) == 1
    with pytest.raises(
        SymbolicSizeError, match=r"^size symbol 'e0' = \(s0 \+ 1\) floordiv 2 is 1 at s0 = 2: "
    ):
        program(torch.randn(2, 2))


def doubled_length_program() -> DynamicProgram:
    """`torch.cat([x, x]) + y` compiled with `y` declared twice `x`'s length: an argument dim
    that holds a derived size."""
    d = Dim("d", min=2, max=64)
    return xfuse.compile(
        lambda x, y: torch.cat([x, x]) + y,
        (torch.randn(4), torch.randn(8)),
        dynamic_shapes=({0: d}, {0: 2 * d}),
    )


def test_an_argument_dim_of_a_derived_size_is_checked() -> None:
    """`y` is declared twice `x`'s length: a call whose `y` is shorter is refused (as the
    exported program's guards refuse it), not run reading past its end."""
    program = doubled_length_program()
    x = torch.randn(5)
    torch.testing.assert_close(program(x, torch.ones(10)), torch.cat([x, x]) + 1)
    with pytest.raises(
        SymbolicSizeError,
        match=r"^argument 1 dim 0 is size symbol '\w+', which is 8 at this call's sizes, got size 7$",
    ):
        program(torch.randn(4), torch.randn(7))


class MergedHeads(torch.nn.Module):
    """An attention's output heads merged back before its projection (a permute and a reshape
    read only by a matmul) and a table viewed with a leading unit dim (a reshape)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Parameter(torch.randn(16, 16))
        self.table = torch.nn.Parameter(torch.randn(6, 16))

    def forward(self, heads: torch.Tensor) -> torch.Tensor:
        merged = heads.exp().permute(0, 2, 1, 3).reshape(heads.shape[0], heads.shape[2], 16)
        return (merged @ self.proj + self.table[None, :1]).sin()


def test_lone_layout_ops_run_as_views_not_copying_kernels() -> None:
    """The static runtime's views (a reshape; a permute read only by externs) are no kernels
    of a symbolic program either: a kernel would copy every element at every call."""
    torch.manual_seed(0)
    model = MergedHeads().eval()
    shapes = {"heads": {2: Dim("seq", min=2, max=64)}}
    program = import_module(model, (torch.randn(2, 4, 5, 4),), dynamic_shapes=shapes)
    backend = CountingBackend()
    compiled = SymbolicProgram(program.module, backend=backend, cache=KernelCache(None))
    assert compiled.kernel_count == 2  # the exp and the add's sine: no permute, no reshape
    for seq in (2, 3, 17, 64):
        heads = torch.randn(2, 4, seq, 4)
        (out,) = compiled(*bind_arguments(program.function, [heads], program.params))
        with torch.no_grad():
            torch.testing.assert_close(out, model(heads))
    assert len(backend.compiled) == 2


class TransposedProduct(torch.nn.Module):
    """A kernel's result read transposed by a batched matmul (an extern): a view of it."""

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x.exp().transpose(1, 2) @ w


class CopyCounter(TorchDispatchMode):
    """Counts the torch copies made under it (`clone`, `copy_`)."""

    def __init__(self) -> None:
        super().__init__()
        self.copies = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in (torch.ops.aten.clone.default, torch.ops.aten.copy_.default):
            self.copies += 1
        return func(*args, **(kwargs or {}))


def test_a_permute_read_by_an_extern_is_a_view_at_every_size() -> None:
    """The permute runs as a torch view of the kernel's result, which the matmul reads
    strided: the call copies nothing (the graph interpreter's permute would copy)."""
    seq = Dim("seq", min=2, max=64)
    program = import_module(
        TransposedProduct(),
        (torch.randn(3, 5, 4), torch.randn(3, 5, 6)),
        dynamic_shapes={"x": {1: seq}, "w": {1: seq}},
    )
    compiled = SymbolicProgram(program.module)
    assert compiled.kernel_count == 1  # the exp
    for length in (2, 9, 33):
        x, w = torch.randn(3, length, 4), torch.randn(3, length, 6)
        counter = CopyCounter()
        with counter:
            (out,) = compiled(x, w)
        assert counter.copies == 0
        torch.testing.assert_close(out, TransposedProduct()(x, w))


def test_a_returned_reshape_is_a_fresh_tensor() -> None:
    """A reshape that `@forward` returns is a kernel's copy: results never alias an input."""
    program = import_module(
        lambda x: x.reshape(x.shape[0], 2, 8),
        (torch.randn(5, 16),),
        dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}},
    )
    compiled = SymbolicProgram(program.module)
    x = torch.randn(7, 16)
    (out,) = compiled(x)
    assert compiled.kernel_count == 1 and out.data_ptr() != x.data_ptr()
    torch.testing.assert_close(out, x.reshape(7, 2, 8))


class SumAndTransposed(torch.nn.Module):
    """A value summed over its batch and also read transposed by a matmul (an MLP backward's
    bias and weight gradients): one group yields the sum and the value permuted, through two
    permutes, to [8, 3, batch]."""

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.exp() * 2
        return y.sum(0), y.permute(2, 0, 1).transpose(1, 2) @ w


def test_a_group_yields_a_permute_of_its_full_shape() -> None:
    """The group's kernel writes the permuted output at each element's permuted index, in the
    loop that sums: one kernel, eager's results at every batch size."""
    batch = Dim("batch", min=2, max=64)
    program = import_module(
        SumAndTransposed(),
        (torch.randn(5, 3, 8), torch.randn(5, 4)),
        dynamic_shapes={"x": {0: batch}, "w": {0: batch}},
    )
    compiled = SymbolicProgram(program.module)
    assert compiled.kernel_count == 1
    for b in (2, 3, 17, 64):
        x, w = torch.randn(b, 3, 8), torch.randn(b, 4)
        for got, expected in zip(compiled(x, w), SumAndTransposed()(x, w), strict=True):
            torch.testing.assert_close(got, expected)


def softmax_then_cumsum(x: torch.Tensor) -> torch.Tensor:
    """Two kernels, the second reading the first's output (a scan along the symbol)."""
    return torch.softmax(x, -1).cumsum(0)


def chained_program() -> SymbolicProgram:
    program = import_module(
        softmax_then_cumsum,
        (torch.randn(5, 16),),
        dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}},
    )
    return SymbolicProgram(program.module)


def test_a_kernel_reads_another_kernels_output_as_it_is() -> None:
    """The CPU runner passes a kernel's output (torch.empty's, contiguous) to the next kernel
    with no contiguity check or copy; an argument it checks, and copies where it is not
    contiguous (a transposed input)."""
    compiled = chained_program()
    assert compiled.kernel_count == 2
    runner = compiled._cpu_runner  # pyright: ignore[reportPrivateUsage]
    assert runner is not None
    launches = [s for s in compiled.steps if isinstance(s, _Launch)]
    made = [s for s in launches[1].inputs if s in launches[0].outputs]
    assert made
    for slot in made:
        assert f"s{slot}.is_contiguous()" not in runner.code
    assert "s0.is_contiguous()" in runner.code
    for batch in (2, 9, 33):
        x = torch.randn(batch, 16)
        counter = CopyCounter()
        with counter:
            (out,) = compiled(x)
        assert counter.copies == 0
        torch.testing.assert_close(out, softmax_then_cumsum(x))
        strided = torch.randn(16, batch).t()
        torch.testing.assert_close(compiled(strided)[0], softmax_then_cumsum(strided))


def test_the_cpu_runner_works_sizes_out_once_per_sizes() -> None:
    """What a call's sizes decide (shapes, extents, size arguments) is worked out once per
    sizes and kept: a later call of the same sizes, a new dict from `bind`, reads the kept
    one; results are fresh tensors at every call."""
    compiled = chained_program()
    runner = compiled._cpu_runner  # pyright: ignore[reportPrivateUsage]
    assert runner is not None
    frames = []
    for batch in (3, 17, 3):
        x = torch.randn(batch, 16)
        sizes = compiled.bind([x])
        first = compiled.run([x], sizes)[0]
        second = compiled.run([x], compiled.bind([x]))[0]
        assert first.data_ptr() != second.data_ptr()
        torch.testing.assert_close(first, softmax_then_cumsum(x))
        torch.testing.assert_close(second, first)
        frames.append(runner.frame(sizes))
    assert frames[0] is frames[2] and frames[0] != frames[1]


class EmptyCounter(TorchDispatchMode):
    """Counts the tensors `torch.empty` makes under it."""

    def __init__(self) -> None:
        super().__init__()
        self.made = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.empty.memory_format:
            self.made += 1
        return func(*args, **(kwargs or {}))


def test_a_cpu_call_reuses_the_intermediate_buffers_of_the_last_call_of_its_sizes() -> None:
    """The first kernel's output (read only by the second kernel) goes back to a pool once
    read: the next call at the same sizes writes it again instead of allocating, and results
    stay fresh (an earlier call's keeps its values); a call at other sizes allocates anew;
    with grad enabled nothing is reused."""
    compiled = chained_program()
    runner = compiled._cpu_runner  # pyright: ignore[reportPrivateUsage]
    assert runner is not None and runner.recycled
    with torch.no_grad():
        x1, x2 = torch.randn(9, 16), torch.randn(9, 16)
        first, second = EmptyCounter(), EmptyCounter()
        with first:
            (out1,) = compiled(x1)
        with second:
            (out2,) = compiled(x2)
        assert second.made == first.made - len(runner.recycled)
        torch.testing.assert_close(out1, softmax_then_cumsum(x1))
        torch.testing.assert_close(out2, softmax_then_cumsum(x2))
        x3 = torch.randn(4, 16)
        other = EmptyCounter()
        with other:
            (out3,) = compiled(x3)
        assert other.made == first.made
        torch.testing.assert_close(out3, softmax_then_cumsum(x3))
    with torch.enable_grad():
        counted = []
        for x in (x1, x2):
            counter = EmptyCounter()
            with counter:
                compiled(x)
            counted.append(counter.made)
        assert counted == [first.made, first.made]
