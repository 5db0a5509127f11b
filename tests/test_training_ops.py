"""Gradients of the ops xfuse lowers, through `torch.compile(backend="xfuse")` in strict mode
(`xfuse.training`: AOTAutograd's forward and backward, each compiled by xfuse).

The ops are PyTorch's OpInfos that xfuse fuses (the OpInfo table, `tests/testing/
opinfo_expected.tsv`, says `fused` for their first f32 sample) and that support autograd. The
first f64 sample of each, its tensors that require grad as leaves: the compiled outputs and the
gradient of every such input (of the outputs weighted by fixed random values) are eager's, and
`torch.autograd.gradcheck` (fast mode) finds the compiled backward the derivative of the
compiled forward wherever it finds eager's so. CI runs a subset (as the OpInfo sweep does: every `CI_STRIDE`-th op and
`CI_OPS`); `XFUSE_OPINFO=all` runs every op.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest")

from tests.testing.test_opinfo import CI_OPS, CI_STRIDE  # noqa: E402
from xfuse.testing.opinfo import _as_function, op_db, op_name, read_expected  # noqa: E402

Tensor = torch.Tensor

STRICT: dict[str, Any] = {"fallback": "error"}

KNOWN: dict[str, str] = {}
"""Ops whose training step xfuse does not yet get right, by OpInfo name: why (xfail, strict)."""


def lowered() -> list[Any]:
    """The OpInfos xfuse fuses and that have f64 gradients on the CPU."""
    expected = read_expected()
    found = []
    for info in op_db():
        row = expected.get((info.name, info.variant_test_name, "f32", 0))
        if row is None or row.outcome != "fused" or not info.supports_autograd:
            continue
        if torch.float64 in info.supported_backward_dtypes("cpu"):
            found.append(info)
    return found


def _selected() -> list[Any]:
    infos = lowered()
    if os.environ.get("XFUSE_OPINFO") == "all":
        return infos
    return [i for n, i in enumerate(infos) if n % CI_STRIDE == 0 or i.name in CI_OPS]


def _param(info: Any) -> Any:
    name = op_name(info)
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN[name])] if name in KNOWN else []
    return pytest.param(info, id=name, marks=marks)


INFOS = [_param(i) for i in _selected()]


def first_differentiable_sample(info: Any) -> Any:
    for sample in info.sample_inputs("cpu", torch.float64, requires_grad=True):
        leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
        if any(isinstance(t, Tensor) and t.requires_grad for t in leaves):
            return sample
    pytest.skip("no sample with an input that requires grad")


def fresh(tensors: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """New leaves on the same storage (layouts kept), requiring grad as the sample's do."""
    return tuple(t.detach().requires_grad_(t.requires_grad) for t in tensors)


def step(fn: Any, tensors: Sequence[Tensor], weights: list[Tensor]) -> tuple[list[Tensor], ...]:
    """The outputs of `fn`, and each grad input's gradient of the weighted sum of the outputs
    that need grad (zeros where the sum does not reach it)."""
    outputs = [t for t in pytree.tree_leaves(fn(*tensors)) if isinstance(t, Tensor)]
    differentiable = [o for o in outputs if o.requires_grad]
    if not weights:
        g = torch.Generator().manual_seed(0)
        weights += [torch.randn(o.shape, generator=g, dtype=torch.float64) for o in differentiable]
    loss = torch.zeros((), dtype=torch.float64)
    for o, w in zip(differentiable, weights, strict=True):
        loss = loss + (o.double() * w).sum()
    wanted = [t for t in tensors if t.requires_grad]
    grads = torch.autograd.grad(loss, wanted, allow_unused=True, materialize_grads=True)
    return [o.detach() for o in outputs], list(grads)


@pytest.mark.parametrize("info", INFOS)
def test_gradients_match_eager(info: Any) -> None:
    sample = first_differentiable_sample(info)
    fn, tensors = _as_function(info, sample)
    weights: list[Tensor] = []
    try:
        want_outputs, want_grads = step(fn, fresh(tensors), weights)
    except RuntimeError as e:  # eager cannot differentiate this sample
        pytest.skip(f"eager: {str(e).splitlines()[0]}")
    if not weights:
        pytest.skip("no output needs grad")
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="xfuse", options=STRICT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):  # the second step reuses the compiled parts
            got_outputs, got_grads = step(compiled, fresh(tensors), weights)
            torch.testing.assert_close(got_outputs, want_outputs, equal_nan=True)
            torch.testing.assert_close(got_grads, want_grads, equal_nan=True)
        if all(o.dtype == torch.float64 for o in want_outputs) and _gradcheck(fn, tensors):
            compiled_gradcheck(fn, tensors)
    torch._dynamo.reset()


def _gradcheck(fn: Any, tensors: Sequence[Tensor], raise_exception: bool = False) -> bool:
    return torch.autograd.gradcheck(
        fn,
        fresh(tensors),
        fast_mode=True,
        check_batched_grad=False,
        raise_exception=raise_exception,
    )


def compiled_gradcheck(fn: Any, tensors: Sequence[Tensor]) -> None:
    """`torch.autograd.gradcheck` of `fn` compiled anew (where eager's passes: max_unpool's
    duplicate indices fail it). It runs the backward more than once (`retain_graph`), so
    AOTAutograd must not donate the saved tensors' buffers to it."""
    torch._dynamo.reset()
    with torch._functorch.config.patch(donated_buffer=False):
        compiled = torch.compile(fn, backend="xfuse", options=STRICT)
        assert _gradcheck(compiled, tensors, raise_exception=True)
