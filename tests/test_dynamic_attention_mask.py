"""`attention-mask` in symbolic programs (`xfuse.runtime.symbolic.DEFAULT_PASSES`): a mask
computed from sizes alone that is causal (or hides nothing) at the example's sizes goes,
attention runs as `is_causal=True` (or without it), and each call's sizes are checked: where
the mask computed at them is not that kind, the call runs a static program for its shape.
Values match eager at every size (CPU)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim
from torch.utils._python_dispatch import TorchDispatchMode

import xfuse
from xfuse import dynamo
from xfuse.dialects import graph
from xfuse.errors import DynamicShapesWarning, FallbackWarning
from xfuse.passes.transforms.attention_mask import MaskGuardError
from xfuse.runtime.dynamic import DynamicProgram

GUARD = "attention's mask, computed from sizes alone"


def sdpa_calls(program: DynamicProgram) -> list[graph.TorchCallOp]:
    return [
        op
        for op in program.compiled.module.walk()
        if isinstance(op, graph.TorchCallOp) and "scaled_dot_product" in op.target.data
    ]


def runs_causal_without_mask(op: graph.TorchCallOp) -> bool:
    return len(op.inputs) == 3 and "is_causal = true" in str(op)


def shifted_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention whose mask, computed from iotas alone, lets query i see keys
    j <= i + (S - L - 1): `tril(ones(L, S))` where S == L + 1, another mask at other S."""
    length, source = q.shape[-2], k.shape[-2]
    rows, cols = torch.arange(length), torch.arange(source)
    offset = cols.max() - rows.max() - 1  # S - L: 0 where S == L + 1
    mask = cols[None, :] <= rows[:, None] + offset
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])


def qkv(length: int, source: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(length * 100 + source)
    return (
        torch.randn(2, 2, length, 16, generator=g),
        torch.randn(2, 2, source, 16, generator=g),
        torch.randn(2, 2, source, 16, generator=g),
    )


@pytest.fixture
def reset() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_a_mask_causal_at_the_hints_goes_guarded_and_other_sizes_run_static() -> None:
    """xfuse.compile: the mask is causal at the example's sizes (S == L + 1): attention runs
    as `is_causal=True`; at S == L + 3 the guard fails and a static program runs the call;
    values match eager at both; the guard's line is among the explanation's guards."""
    length, source = Dim("L", min=2, max=64), Dim("S", min=2, max=64)
    shapes = ({2: length}, {2: source}, {2: source})
    program = xfuse.compile(shifted_causal, qkv(8, 9), dynamic_shapes=shapes)
    assert isinstance(program, DynamicProgram)
    [call] = sdpa_calls(program)
    assert runs_causal_without_mask(call)
    [guard] = program.compiled.mask_guards
    assert guard.kind == "causal"
    for length_, source_ in [(8, 9), (5, 6), (8, 11), (4, 4), (5, 6)]:
        inputs = qkv(length_, source_)
        torch.testing.assert_close(program(*inputs), shifted_causal(*inputs))
    assert program.specialised is not None  # (8, 11) and (4, 4) ran it
    with pytest.raises(MaskGuardError, match="attention's mask is not causal at"):
        program.compiled.bind(list(qkv(8, 11)))
    explanation = xfuse.explain(shifted_causal, qkv(8, 9), dynamic_shapes=shapes)
    [line] = [g for g in explanation.guards if g.startswith(GUARD)]
    assert "is causal (tril) at the call's sizes: it runs as is_causal=True" in line


def test_a_mask_that_hides_nothing_at_the_hints_goes_guarded() -> None:
    """A mask over keys `j <= max row` hides nothing where S <= L: it goes, and a call with
    S > L (keys hidden) runs a static program."""

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        rows, cols = torch.arange(q.shape[-2]), torch.arange(k.shape[-2])
        mask = cols[None, :] <= rows.max()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])

    length, source = Dim("L", min=2, max=64), Dim("S", min=2, max=64)
    program = xfuse.compile(f, qkv(8, 6), dynamic_shapes=({2: length}, {2: source}, {2: source}))
    [call] = sdpa_calls(program)
    assert len(call.inputs) == 3 and "is_causal" not in str(call)
    assert [g.kind for g in program.compiled.mask_guards] == ["none"]
    for length_, source_ in [(8, 6), (9, 9), (4, 7)]:
        inputs = qkv(length_, source_)
        torch.testing.assert_close(program(*inputs), f(*inputs))


def test_torch_compile_runs_a_guarded_mask_and_other_sizes_match_eager(reset: None) -> None:
    """torch.compile(dynamic=True): the same, through the backend's symbolic program; a size
    where the guard fails runs a static program, with no DynamicShapesWarning."""
    before = set(dynamo.BACKEND_PROGRAMS.keys())
    compiled = torch.compile(shifted_causal, backend="xfuse", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for length, source in [(8, 9), (5, 6), (8, 12), (7, 8)]:
            inputs = qkv(length, source)
            torch.testing.assert_close(compiled(*inputs), shifted_causal(*inputs))
    [program] = new_programs(before)
    assert [g.kind for g in program.compiled.mask_guards] == ["causal"]
    assert program.specialised is not None


def dynamic_program(backend_program: Any) -> DynamicProgram | None:
    found = getattr(backend_program, "dynamic", None)
    return found if isinstance(found, DynamicProgram) else None


def new_programs(before: set[Any]) -> list[DynamicProgram]:
    """The symbolic programs the backend made since `before` (the keys of its programs then)."""
    found = [p for k, p in dynamo.BACKEND_PROGRAMS.items() if k not in before]
    return [d for d in map(dynamic_program, found) if d is not None]


class LargestResult(TorchDispatchMode):
    """The most elements of a tensor that a torch op under it returned."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else [out]:
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


def test_gpt2_runs_causal_attention_without_its_mask(
    reset: None, compiled_kernels: list[str]
) -> None:
    """A 2-layer GPT-2 through torch.compile(dynamic=True): its symbolic program's attention
    calls run `is_causal=True` without the mask (whose kernels are gone), one guard for the
    mask both layers read, every length runs the kernels compiled once, values match eager.
    The guard computes the mask, `[B, 1, L, L]` and the same for every batch, once: at a new
    batch and length, no tensor of more than `L * L` elements (the whole mask: `B` times)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64, use_cache=False
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    before = set(dynamo.BACKEND_PROGRAMS.keys())
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for length in (9, 17, 3, 30):
            ids = torch.randint(0, 128, (2, length))
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits)
            if length == 9:
                kernels = len(compiled_kernels)
    assert len(compiled_kernels) == kernels
    [program] = new_programs(before)
    calls = sdpa_calls(program)
    assert len(calls) == 2 and all(runs_causal_without_mask(c) for c in calls)
    [guard] = program.compiled.mask_guards
    assert guard.kind == "causal"
    assert program.specialised is None
    assert any(g.startswith(GUARD) for g in program.guards)
    batch, _, length, source = guard.weights
    assert isinstance(batch, str) and length == source and isinstance(length, str)
    with LargestResult() as largest:
        assert guard.holds({batch: 8, length: 40})
    assert largest.numel == 40 * 40
