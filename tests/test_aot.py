"""AOTAutograd's decompositions for xfuse (`xfuse.aot.decompositions`): what the partitioner
saves for a language model's loss, and the two decompositions of xfuse's own; and how the
backward node of a call is found (`xfuse.aot.compiled_node`)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

import xfuse
from tests.backends.test_cuda import gpu
from tests.test_training_api import BF16_SCALE, assert_same_grads
from xfuse.aot import (
    ForwardReturns,
    compiled_node,
    dtype_conversion,
    explicit_devices,
    filled_like,
    views_as_reshapes,
)
from xfuse.runtime.outputs import OutputPlan

Tensor = torch.Tensor


class LossHead(torch.nn.Module):
    """A language model's head and loss as transformers computes it under autocast: bf16
    logits cast to f32, log-softmax over the vocabulary, the mean over tokens not ignored."""

    def __init__(self, width: int = 16, vocab: int = 200) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, h: Tensor, labels: Tensor) -> Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = self.head(h)
        logits = logits.float().view(-1, logits.shape[-1])
        return torch.nn.functional.cross_entropy(logits, labels.view(-1), ignore_index=-100)


def _inputs() -> tuple[Tensor, Tensor]:
    labels = torch.randint(0, 200, (2, 8))
    labels[0, :3] = -100
    return torch.randn(2, 8, 16, requires_grad=True), labels


def test_a_loss_saves_its_bf16_logits_and_row_statistics_not_f32_log_probabilities() -> None:
    """As Inductor's partitioner does: the backward computes the log-probabilities again from
    the logits (half the bytes) and two numbers a row; it is one kernel, which sums nothing
    over the vocabulary (`simplify`: the sum of nll_loss's one-hot is the label's element)."""
    explanation = xfuse.explain(LossHead(), _inputs(), quiet=True, training=True)
    float_tables = [s for s in explanation.saved if "float32[16, 200]" in s]
    assert not float_tables, explanation.saved
    assert any("bfloat16[2, 8, 200]" in s for s in explanation.saved), explanation.saved
    assert any("aten.amax" in s for s in explanation.saved), explanation.saved
    backward = explanation.parts["backward"]
    rows = [g for g in backward.groups if any("exp" in op for op in g.ops)]
    assert len(rows) == 1 and not any("reduce" in op for op in rows[0].ops), backward.groups


def test_a_loss_trains_as_eager() -> None:
    model, reference = LossHead(), LossHead()
    h, labels = _inputs()
    program = xfuse.compile(model, (h, labels), quiet=True, fallback="error")
    g = h.detach().clone().requires_grad_(True)
    loss, expected = program(h, labels), reference(g, labels)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    expected.backward()
    torch.testing.assert_close(h.grad, g.grad)
    torch.testing.assert_close(model.head.weight.grad, reference.head.weight.grad)


def test_only_a_change_of_element_type_is_a_cast() -> None:
    x = torch.randn(4, 3)
    cast = dtype_conversion(x, dtype=torch.bfloat16)
    assert cast.dtype == torch.bfloat16 and torch.equal(cast, x.to(torch.bfloat16))
    assert dtype_conversion(x, dtype=torch.float64, device="meta") is NotImplemented
    assert dtype_conversion(x) is NotImplemented  # no dtype: a plain copy
    assert (
        dtype_conversion(x, dtype=torch.half, memory_format=torch.channels_last) is NotImplemented
    )


def _half_norm(kind: str) -> Any:
    """A norm over 2 elements of an f16 input with f32 weight and bias: its output is +-1
    whatever the input, so the input's gradient is a cancellation (of rounding size)."""
    if kind == "layer_norm":
        return lambda x, w, b: torch.nn.functional.layer_norm(x.half(), (2,), w, b)
    return lambda x, w, b: torch.nn.functional.group_norm(x.half(), 1, w, b)


@pytest.mark.parametrize("kind", ["layer_norm", "group_norm"])
def test_an_f16_norm_with_f32_weights_keeps_eagers_f32_statistics(kind: str) -> None:
    """On the CPU eager keeps the mean and rstd of an f16 norm with f32 weights in f32 (torch's
    decomposition rounds them to f16): the input's gradient is within twice eager's distance
    from f64 (thousands of times it with f16 statistics)."""
    torch.manual_seed(0)
    shape = (4, 2) if kind == "layer_norm" else (4, 2, 1)
    x, weight, bias = torch.randn(shape), torch.rand(2) + 0.5, torch.randn(2)
    upstream = torch.randn(shape, dtype=torch.float64)
    norm = _half_norm(kind)

    def input_grad(fn: Any, dtype: torch.dtype = torch.float32) -> Tensor:
        leaf = x.to(dtype, copy=True).requires_grad_()
        (fn(leaf, weight.to(dtype), bias.to(dtype)).double() * upstream).sum().backward()
        assert leaf.grad is not None
        return leaf.grad.double()

    def f64(x: Tensor, w: Tensor, b: Tensor) -> Tensor:  # the norm without the f16 cast
        if kind == "layer_norm":
            return torch.nn.functional.layer_norm(x, (2,), w, b)
        return torch.nn.functional.group_norm(x, 1, w, b)

    exact = input_grad(f64, torch.float64)
    torch._dynamo.reset()
    compiled = torch.compile(norm, backend="xfuse", options={"fallback": "error"})
    eager_rmse = (input_grad(norm) - exact).pow(2).mean().sqrt()
    assert (input_grad(compiled) - exact).pow(2).mean().sqrt() <= 2 * eager_rmse
    torch._dynamo.reset()


def test_zeros_like_of_a_contiguous_tensor_is_a_full() -> None:
    x = torch.randn(4, 3)
    filled = filled_like(x, 2.0)
    assert torch.equal(filled, torch.full_like(x, 2.0)) and filled.dtype == x.dtype
    assert filled_like(x.t(), 0) is NotImplemented  # its strides would differ from full's
    assert filled_like(x, 0, dtype=torch.int32).dtype == torch.int32


class Program(torch.autograd.Function):
    """A forward part run inside an `autograd.Function`, as AOTAutograd runs one, under a name
    of its own (its node is `ProgramBackward`): it returns `tanh(x)`, `x` itself (a tensor it
    saves, say) and `x * 2`, which the Function returns as `_unsafe_view`, as AOTAutograd
    returns a view of an intermediate."""

    @staticmethod
    def forward(ctx: Any, part: Any, x: Tensor) -> tuple[Tensor, Tensor]:
        y, same, doubled = part([x])
        assert same is x
        ctx.save_for_backward(y)
        return y, torch.ops.aten._unsafe_view(doubled, doubled.shape)

    @staticmethod
    def backward(ctx: Any, dy: Tensor, dz: Tensor) -> tuple[None, Tensor]:
        (y,) = ctx.saved_tensors
        return None, dy * (1 - y * y) + 2 * dz


def forward_part(args: list[Any]) -> tuple[Tensor, Tensor, Tensor]:
    (x,) = args
    args.clear()
    return x.tanh(), x, x * 2


def test_the_backward_node_is_the_grad_fn_of_what_the_forward_returned() -> None:
    """Not an input's node (the input is itself a function's output), whatever the Function's
    node class is called."""
    returns = ForwardReturns()
    part = returns.telling(forward_part)
    x = torch.randn(3, requires_grad=True) * 1
    with returns.calling() as returned:
        y, z = Program.apply(part, x)
    assert [t.shape for t in returned] == [(3,), (3,)]  # tanh(x) and x * 2, not x
    node = compiled_node([x], [y, z], returned)
    assert node is y.grad_fn and type(node).__name__ == "ProgramBackward"
    assert node is not x.grad_fn


def test_an_output_made_anew_from_what_the_forward_returned_has_its_node() -> None:
    """An `_unsafe_view` of a tensor the forward returned (not itself an output, no grad_fn)
    is the call's output: its memory names it."""
    returns = ForwardReturns()
    part = returns.telling(forward_part)
    x = torch.randn(3, requires_grad=True)
    with returns.calling() as returned:
        y, z = Program.apply(part, x)
    doubled = list(returned)[1]
    assert doubled.grad_fn is None and z._base is None
    assert compiled_node([x], [z], [doubled]) is z.grad_fn is y.grad_fn


def test_the_forward_tells_nothing_outside_a_call() -> None:
    """Outside `calling` nothing it returns is kept (its tensors free as they would)."""
    returns = ForwardReturns()
    part = returns.telling(forward_part)
    x = torch.randn(3, requires_grad=True)
    Program.apply(part, x)
    with returns.calling() as returned:
        pass
    assert list(returned) == []
    assert compiled_node([x], [], []) is None


def tiny_gpt2() -> torch.nn.Module:
    """A 1-layer GPT-2 whose attention has dropout: on the CPU, torch's math attention, which
    saves transposed bf16 casts of the scores and values for its matmuls' backward."""
    import transformers

    config = transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, use_cache=False
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).train()


def test_saved_tensors_keep_their_kernels_strides_and_the_backward_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through torch.compile, AOTAutograd asks the forward's compiler for its outputs' strides
    and compiles the backward for them: the saved casts are returned as their kernels wrote
    them (row-major; none copied into eager's transposed strides), and the gradients are
    eager's under the same seed."""
    restrided: list[tuple[int, ...]] = []
    real = OutputPlan._copy

    def counted(rule: Any, t: Tensor, taken: set[int]) -> Tensor:
        if t.stride() != rule.stride:
            restrided.append(tuple(t.shape))
        return real(rule, t, taken)

    monkeypatch.setattr(OutputPlan, "_copy", staticmethod(counted))
    trains_as_eager_under_autocast("cpu")
    assert restrided == []


@gpu
def test_gpu_saved_tensors_in_their_kernels_strides_train_as_eager() -> None:
    """The same on the GPU, where torch's cuDNN attention backward views what the forward
    saved as eager's strides allow: given the kernels' strides, its views are reshapes."""
    trains_as_eager_under_autocast("cuda")


def _with_cpu_literals(x: Tensor) -> Tensor:
    """A forward that makes tensors on the CPU: an index and a 0-d factor."""
    return (x[torch.tensor([2, 0])] * torch.tensor(3.0)).tanh()


@gpu
def test_gpu_a_forwards_cpu_tensor_literals_train_as_eager() -> None:
    """AOTAutograd lifts a forward's tensor literals into graph constants on the CPU (as T5's
    relative position buckets make them): the part reads them on the GPU, as eager does."""
    x = torch.randn(4, 8, device="cuda", requires_grad=True)
    torch._dynamo.reset()
    compiled = torch.compile(_with_cpu_literals, backend="xfuse", options={"fallback": "error"})
    got = compiled(x)
    (grad,) = torch.autograd.grad(got.sum(), x)
    want = _with_cpu_literals(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, torch.autograd.grad(want.sum(), x)[0])
    torch._dynamo.reset()


def _filled_by_factories() -> torch.fx.GraphModule:
    """`x.index_fill(1, torch.tensor([0, 2]), 3.0) + torch.ones(3)` as dynamo's graph holds it
    under `torch.set_default_device`: factories that name no device, whose traced values
    dynamo made outside the mode, on the CPU."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    index = graph.call_function(torch.tensor, ([0, 2],))
    ones = graph.call_function(torch.ones, (3,))
    for node in (index, ones):
        node.meta["example_value"] = torch.empty(0)
    filled = graph.call_method("index_fill", (x, 1, index, 3.0))
    graph.output(graph.call_function(torch.add, (filled, ones)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_a_factory_that_names_no_device_runs_on_the_default_device_it_was_traced_under() -> None:
    """Under `torch.set_default_device`, dynamo's graph leaves a factory's device out and
    relies on the mode at each call; `explicit_devices` gives each such call the default
    device of the trace (not its traced value's, which is on the CPU), so a retrace outside
    the mode builds it there, as eager does (meta stands in for a GPU: outside the mode the
    graph's factories make CPU tensors, and `index_fill` refuses a CPU index of a meta
    tensor). Outside any mode the graph is left as it is."""
    gm = _filled_by_factories()
    x = torch.randn(4, 3, device="meta")
    with pytest.raises(RuntimeError, match="device"):
        gm(x)
    explicit_devices(gm)
    factories = [n for n in gm.graph.nodes if n.target in (torch.tensor, torch.ones)]
    assert [n.kwargs.get("device") for n in factories] == [None, None]
    torch.set_default_device("meta")
    try:
        explicit_devices(gm)
    finally:
        torch.set_default_device(None)
    assert gm(x).device.type == "meta"
    assert [n.kwargs["device"] for n in factories] == [torch.device("meta")] * 2


def trains_as_eager_under_autocast(device: str) -> None:
    """A step of the 1-layer GPT-2 under bf16 autocast on `device`, compiled in strict mode
    and eager from one seed: the same gradients."""
    model = tiny_gpt2().to(device)
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="xfuse", options={"fallback": "error"})
    ids = torch.randint(0, 64, (2, 16), device=device)
    for net in (compiled, reference):
        torch.manual_seed(1)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = net(input_ids=ids, labels=ids).loss
        loss.backward()
    assert_same_grads(model, reference, **BF16_SCALE)


def test_outside_dynamo_saved_tensors_have_eagers_strides() -> None:
    """`xfuse.compile`'s training program (no dynamo `TracingContext` asks for strides)
    compiles its backward for eager's strides of what the forward saves, and gives eager's
    gradients."""
    model = tiny_gpt2().eval()
    reference = copy.deepcopy(model)
    ids = torch.randint(0, 64, (2, 16))
    program = xfuse.compile(
        model, (ids,), example_kwargs={"labels": ids}, quiet=True, fallback="error"
    )
    program(ids, labels=ids).loss.backward()
    reference(input_ids=ids, labels=ids).loss.backward()
    assert_same_grads(model, reference)


def test_a_part_compiles_its_views_as_reshapes_of_the_same_values() -> None:
    """A part's `view`s hold for the strides AOTAutograd traced, which neither its inputs (a
    backward given saved tensors row-major, traced with eager's transposed strides) nor
    torch.export's retrace need keep (torch 2.11 lays a depthwise convolution of channels-last
    input out channels-first under export): here the graph was traced from a channels-last
    tensor and is given a row-major one, where its `view` of the permute fails. The part's
    program reshapes, copying where the strides allow no view."""
    from xfuse.aot import PartCompiler

    def never(error: Exception, mode: Any) -> None:
        raise AssertionError(f"ran eagerly: {error}")

    def tokens(image: Tensor) -> Tensor:
        return (image + 1).permute(0, 2, 3, 1).view(-1, 4) * 2

    traced = torch.fx.experimental.proxy_tensor.make_fx(tokens)(
        torch.randn(2, 4, 3, 3).to(memory_format=torch.channels_last)
    )
    given = torch.randn(2, 4, 3, 3)
    traced.graph.find_nodes(op="placeholder")[0].meta["val"] = given
    with pytest.raises(RuntimeError, match="view"):
        traced(given)
    program = PartCompiler("forward", "error", never).compile(traced, [given])
    want = (given + 1).permute(0, 2, 3, 1).reshape(-1, 4) * 2
    torch.testing.assert_close(program(given), want)
    reshaping = views_as_reshapes(traced)
    torch.testing.assert_close(reshaping(given), want)
    assert traced.graph.find_nodes(op="call_function", target=torch.ops.aten.view.default)
