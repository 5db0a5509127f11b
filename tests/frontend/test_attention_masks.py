"""Attention masks computed from constants that hide nothing are dropped before tracing
(`xfuse.frontend.attention_masks`), in dynamo's graphs and in torch.export's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from xfuse.frontend.attention_masks import op_name, without_constant_masks

B, H, T, D = 2, 4, 16, 8


def constant_mask(q: torch.Tensor) -> torch.Tensor:
    """transformers' mask for an encoder without padding under tracing: all True."""
    return (torch.arange(T, device=q.device)[None, None, :, None] >= 0).expand(B, -1, T, T)


def attend(mask_of: Callable[[torch.Tensor], torch.Tensor | None]) -> Callable[..., Any]:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask_of(q)) * 2

    return fn


def inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, H, T, D, generator=gen) for _ in range(3))


def dynamo_graph(fn: Callable[..., Any], args: tuple[Any, ...]) -> torch.fx.GraphModule:
    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=capture, fullgraph=True)(*args)
    (gm,) = graphs
    return gm


def masks(gm: torch.fx.GraphModule) -> list[Any]:
    return [
        n.kwargs.get("attn_mask", n.args[3] if len(n.args) > 3 else None)
        for n in gm.graph.nodes
        if op_name(n) == "scaled_dot_product_attention"
    ]


def check(fn: Callable[..., Any], dropped: bool) -> None:
    """`fn`'s dynamo graph after the rewrite: its mask dropped or not, its result eager's."""
    args = inputs()
    gm = without_constant_masks(dynamo_graph(fn, args))
    (mask,) = masks(gm)
    assert (mask is None) == dropped
    torch.testing.assert_close(gm(*args)[0], fn(*args))


def test_a_constant_mask_that_hides_nothing_is_dropped() -> None:
    check(attend(constant_mask), dropped=True)
    gm = without_constant_masks(dynamo_graph(attend(constant_mask), inputs()))
    assert not any(op_name(n) in {"ge", "expand", "arange"} for n in gm.graph.nodes)


def test_an_additive_mask_of_zeros_is_dropped() -> None:
    check(attend(lambda q: torch.zeros(T, T, device=q.device)), dropped=True)


@pytest.mark.parametrize(
    "mask_of",
    [
        pytest.param(lambda q: torch.arange(T)[None, :] <= torch.arange(T)[:, None], id="causal"),
        pytest.param(lambda q: q[..., :1] > 0, id="reads-an-input"),
        pytest.param(lambda q: torch.full((T, T), -1.0), id="adds-a-constant"),
    ],
)
def test_a_mask_that_may_hide_something_is_kept(
    mask_of: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    check(attend(mask_of), dropped=False)


def test_a_mask_written_in_place_is_kept() -> None:
    def mask_of(q: torch.Tensor) -> torch.Tensor:
        m = torch.ones(T, T, dtype=torch.bool)
        m[0, 1:] = False
        return m

    check(attend(mask_of), dropped=False)


def test_an_exported_programs_constant_mask_is_dropped() -> None:
    class Attend(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return attend(constant_mask)(q, k, v)

    args = inputs()
    exported = torch.export.export(Attend(), args, strict=False)
    without_constant_masks(exported.graph_module)
    assert masks(exported.graph_module) == [None]
    torch.testing.assert_close(exported.module()(*args), Attend()(*args))


def test_xfuse_compile_runs_attention_without_the_constant_mask() -> None:
    import xfuse

    args = inputs()
    fn = attend(constant_mask)
    torch.testing.assert_close(xfuse.compile(fn, args, quiet=True)(*args), fn(*args))
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="xfuse", options={"fallback": "error"})
    torch.testing.assert_close(compiled(*args), fn(*args))
