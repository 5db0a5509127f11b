"""Indexing with computed indices through the whole CPU path (xfuse.compile) equals eager:
embedding, index_select, gather, take_along_dim and advanced indexing run in xfuse kernels
(no torch_call, no fallback), with int32 and int64 indices, negative indices where torch
takes them, repeated and empty index tensors, bf16 tables; an index out of range raises as
eager raises, and the program still runs afterwards."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xfuse
from xfuse.errors import FallbackWarning, IndexOutOfRangeError

_gen = torch.Generator().manual_seed(0)


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen).to(dtype)


def randint(high: int, *shape: int, low: int = 0, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=_gen).to(dtype)


def compiled(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> xfuse.api.CompiledProgram:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        program = xfuse.compile(fn, inputs, fallback="error")
    ops = [op.name for op in program.default.program.module.walk()]
    assert "graph.torch_call" not in ops, ops
    assert program.kernels and not program.fallbacks
    return program


def check(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> xfuse.api.CompiledProgram:
    program = compiled(fn, inputs)
    got, want = program(*inputs), fn(*inputs)
    got = list(got) if isinstance(got, tuple | list) else [got]
    want = list(want) if isinstance(want, tuple | list) else [want]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    return program


INDEX_DTYPES = [torch.int64, torch.int32]

CASES: dict[str, tuple[Callable[..., Any], Callable[[torch.dtype], tuple[Any, ...]]]] = {
    "embedding": (
        lambda i, w: F.embedding(i, w) * 2,
        lambda d: (randint(50, 4, 9, dtype=d), rand(50, 33)),
    ),
    "embedding_repeated": (
        F.embedding,
        lambda d: (torch.tensor([[3, 3, 3, 0]], dtype=d), rand(5, 8)),
    ),
    "embedding_bf16": (
        lambda i, w: F.embedding(i, w) + 1,
        lambda d: (randint(20, 7, dtype=d), rand(20, 16, dtype=torch.bfloat16)),
    ),
    "index_select": (
        lambda x, i: torch.index_select(x, 1, i).exp(),
        lambda d: (rand(5, 37), randint(37, 11, dtype=d)),
    ),
    "gather": (
        lambda x, i: torch.gather(x, 1, i) - 1,
        lambda d: (rand(6, 40), randint(40, 6, 13, dtype=d)),
    ),
    "gather_bf16": (
        lambda x, i: torch.gather(x, 0, i),
        lambda d: (rand(9, 7, dtype=torch.bfloat16), randint(9, 3, 7, dtype=d)),
    ),
    "index_negative": (
        lambda x, i: x[:, i] * 3,
        lambda d: (rand(4, 30), randint(30, 17, low=-30, dtype=d)),
    ),
    "index_two_tensors": (
        lambda x, i, j: x[i, :, j],
        lambda d: (
            rand(5, 6, 7),
            randint(5, 3, 1, low=-5, dtype=d),
            randint(7, 4, low=-7, dtype=d),
        ),
    ),
    # (the empty index folds to a constant: `x * 2` keeps a kernel in the program)
    "index_empty": (
        lambda x, i: (x[i] + 1, x * 2),
        lambda d: (rand(5, 3), torch.zeros(0, dtype=d)),
    ),
    "index_transposed_indices": (
        lambda x, i: x[i.t()],
        lambda d: (rand(8, 5), randint(8, 3, 4, low=-8, dtype=d)),
    ),
}


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(name: str, index_dtype: torch.dtype) -> None:
    fn, make = CASES[name]
    check(fn, make(index_dtype))


def test_take_along_dim_matches_eager() -> None:
    """Export decomposes it into a remainder (a torch_call for now) and a gather."""
    x, i = rand(4, 6), randint(6, 4, 3, low=-6)
    got = xfuse.compile(lambda x, i: torch.take_along_dim(x, i, 1), (x, i))(x, i)
    torch.testing.assert_close(got, torch.take_along_dim(x, i, 1))


def test_embedding_position_add_layer_norm_is_one_kernel() -> None:
    """GPT-2's input: token and position embeddings, added and normalised, in one kernel."""
    wte, wpe = rand(50, 64), rand(16, 64)
    ids = randint(50, 2, 8)

    def fn(ids: torch.Tensor, wte: torch.Tensor, wpe: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(8)
        return F.layer_norm(F.embedding(ids, wte) + F.embedding(pos, wpe), (64,))

    program = xfuse.compile(fn, (ids, wte, wpe))
    torch.testing.assert_close(program(ids, wte, wpe), fn(ids, wte, wpe))
    assert len(program.kernels) == 1


BAD: dict[str, tuple[Callable[..., Any], tuple[Any, ...], tuple[Any, ...], type[Exception]]] = {
    "embedding": (
        F.embedding,
        (torch.tensor([1, 2]), rand(4, 8)),
        (torch.tensor([1, 4]), rand(4, 8)),
        IndexError,
    ),
    "embedding_negative": (
        F.embedding,
        (torch.tensor([1]), rand(4, 8)),
        (torch.tensor([-1]), rand(4, 8)),
        IndexError,
    ),
    "gather": (
        lambda x, i: torch.gather(x, 1, i),
        (rand(3, 5), torch.tensor([[0], [1], [2]])),
        (rand(3, 5), torch.tensor([[0], [5], [2]])),
        RuntimeError,
    ),
    "index_select": (
        lambda x, i: torch.index_select(x, 1, i),
        (rand(3, 5), torch.tensor([0, 4])),
        (rand(3, 5), torch.tensor([0, -1])),
        RuntimeError,
    ),
    "index": (
        lambda x, i: x[i] + 1,
        (rand(5, 2), torch.tensor([0, -5])),
        (rand(5, 2), torch.tensor([0, -6])),
        IndexError,
    ),
    "index_huge": (
        lambda x, i: x[i] + 1,
        (rand(5, 2), torch.tensor([0])),
        (rand(5, 2), torch.tensor([2**40])),
        IndexError,
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_index_out_of_range_raises_like_eager(name: str) -> None:
    fn, good, bad, error = BAD[name]
    with pytest.raises(error):
        fn(*bad)
    program = compiled(fn, good)
    with pytest.raises(error, match="index out of range in self"):
        program(*bad)
    with pytest.raises(IndexOutOfRangeError):
        program(*bad)
    torch.testing.assert_close(program(*good), fn(*good))  # the program still runs


def test_each_thread_has_its_own_error_flag() -> None:
    """A checked kernel's error flag is made once per thread (`KernelStep._cpu_flag`): calls on
    two threads never clear or read each other's, and a bad index on one raises there alone."""
    import threading

    from xfuse.runtime.steps import KernelStep

    fn, good, bad, _ = BAD["embedding"]
    program = compiled(fn, good)
    (step,) = (s for s in program.default.program.steps if isinstance(s, KernelStep))
    assert step.error_flag
    flags: list[torch.Tensor] = []
    errors: list[BaseException] = []

    def run(args: tuple[Any, ...]) -> None:
        flags.append(step._cpu_flag()[0])
        try:
            program(*args)
        except IndexOutOfRangeError as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(a,)) for a in (good, bad)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 1 and flags[0] is not flags[1]
    assert step._cpu_flag()[0] is not flags[0] and step._cpu_flag()[0] is step._cpu_flag()[0]
    torch.testing.assert_close(program(*good), fn(*good))
