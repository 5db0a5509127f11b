"""Differentiable programs (`xfuse.compile` with grad on, `torch.compile(backend="xfuse")`
through AOTAutograd) against eager in what a training step sees besides values:

- the errors of the backward: a grad of another dtype, shape or device, `backward()` of a
  non-scalar, a second backward without `retain_graph`, `torch.autograd.grad` of a tensor
  that does not require grad or is unused, double backward. Where eager raises, the program
  raises the same type with the same message; where eager succeeds, it gives eager's values;
  double backward, which AOTAutograd does not support, is refused in one line;
- the outputs: views of inputs, of parameters and of each other, a tensor returned twice,
  an input returned: `._base`, `is_leaf`, `requires_grad`, `grad_fn` or not, strides,
  storage offsets, shared memory, version counters; and what an in-place op on an output
  does afterwards (eager's error on a view of a leaf, writes seen through the views), and
  the gradients after it;
- a write between the forward and the backward (of an output, an input, a parameter):
  eager's version-counter error exactly where eager's backward reads what was written, else
  eager's gradients, though the partitioner saves other tensors than eager's autograd; under
  saved tensors hooks, as eager, no check.

A single view of an intermediate that no other output views is fresh memory in a compiled
program (docs/contracts.md, "Outputs and aliasing"): its `._base` is None where eager's is the
intermediate, which nothing else can reach: `describe` names a base only where it is a
tensor the caller holds (an input, a parameter, another output)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

import xfuse

Tensor = torch.Tensor

FRONT_ENDS = ("xfuse.compile", "torch.compile")


pytestmark = pytest.mark.usefixtures("no_fallback")


def compiled(front_end: str, model: torch.nn.Module, *example: Tensor) -> Callable[..., Any]:
    """`model` compiled by one front end, in strict mode."""
    if front_end == "xfuse.compile":
        return xfuse.compile(model, example, quiet=True, fallback="error")
    return torch.compile(model, backend="xfuse", options={"fallback": "error"})


@dataclass
class Outcome:
    """What an action did: the values it returned, or the error it raised."""

    value: Any = None
    error: BaseException | None = None


def outcome(action: Callable[[], Any]) -> Outcome:
    try:
        return Outcome(value=action())
    except Exception as e:  # noqa: BLE001 - compared with eager's below
        return Outcome(error=e)


def first_line(error: BaseException) -> str:
    """The message's first line; the autograd node a version-counter error names (eager's
    `TanhBackward0`, a compiled program's `CompiledFunctionBackward`) as `<node>`."""
    line = str(error).strip().splitlines()[0]
    return re.sub(r"(is (?:output|input) \d+ of )\w+", r"\1<node>", line)


def assert_same_outcome(got: Outcome, expected: Outcome) -> None:
    """Eager's error (its type, its message's first line), or eager's values."""
    if expected.error is not None:
        assert got.error is not None, f"eager raises {expected.error!r}; got {got.value!r}"
        assert type(got.error) is type(expected.error)
        assert first_line(got.error) == first_line(expected.error)
        return
    if got.error is not None:
        raise AssertionError(f"eager succeeds; the program raises {got.error!r}") from got.error
    assert_same_values(got.value, expected.value)


def assert_same_values(got: Any, expected: Any) -> None:
    """Tensors close (torch.testing's f32 tolerances), anything else equal, through lists,
    tuples and dicts."""
    if isinstance(expected, list | tuple):
        assert isinstance(got, list | tuple) and len(got) == len(expected)
        for mine, eagers in zip(got, expected, strict=True):
            assert_same_values(mine, eagers)
    elif isinstance(expected, Tensor):
        torch.testing.assert_close(got, expected)
    else:
        assert got == expected


# ---------------------------------------------------------------------------------------------
# Errors of the backward
# ---------------------------------------------------------------------------------------------


class TanhNet(torch.nn.Module):
    """A linear layer and a tanh, and a parameter the forward does not read."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 3)
        self.unused = torch.nn.Parameter(torch.randn(2))

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.fc(x))


Program = Callable[[Tensor], Tensor]


def grads(x: Tensor, model: torch.nn.Module) -> list[Tensor | None]:
    return [x.grad, *(p.grad for p in model.parameters())]


def with_grad(grad: Callable[[], Tensor]) -> Callable[[Program, Tensor, TanhNet], Any]:
    """`backward(grad())` of the output: the gradients."""

    def action(program: Program, x: Tensor, model: TanhNet) -> Any:
        program(x).backward(grad())
        return grads(x, model)

    return action


def backward_twice(program: Program, x: Tensor, model: TanhNet) -> Any:
    loss = program(x).sum()
    loss.backward()
    loss.backward()
    return grads(x, model)


def backward_twice_retained(program: Program, x: Tensor, model: TanhNet) -> Any:
    loss = program(x).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    return grads(x, model)


def backward_of_inputs(program: Program, x: Tensor, model: TanhNet) -> Any:
    program(x).sum().backward(inputs=[model.fc.weight])
    return grads(x, model)


def first_order_graph(program: Program, x: Tensor, model: TanhNet) -> Any:
    found = torch.autograd.grad(program(x).sum(), (x, model.fc.weight), create_graph=True)
    return [(g.detach(), g.requires_grad) for g in found]


def output_hooks(program: Program, x: Tensor, model: TanhNet) -> Any:
    seen: list[Tensor] = []
    y = program(x)
    y.retain_grad()
    y.register_hook(seen.append)
    (y * 3).sum().backward()
    return [y.grad, *seen, *grads(x, model)]


BACKWARD: dict[str, Callable[[Program, Tensor, TanhNet], Any]] = {
    "a float64 grad": with_grad(lambda: torch.rand(2, 3, dtype=torch.float64)),
    "a float16 grad": with_grad(lambda: torch.rand(2, 3).half()),
    "an int64 grad": with_grad(lambda: torch.ones(2, 3, dtype=torch.int64)),
    "a grad of another shape": with_grad(lambda: torch.ones(3, 2)),
    "a grad that broadcasts": with_grad(lambda: torch.ones(3)),
    "a grad on another device": with_grad(lambda: torch.ones(2, 3, device="meta")),
    "a transposed grad": with_grad(lambda: torch.rand(3, 2).t()),
    "an expanded grad": with_grad(lambda: torch.rand(3).expand(2, 3)),
    "backward of a non-scalar without a grad": lambda p, x, m: p(x).backward(),
    "backward twice": backward_twice,
    "backward twice, the graph retained": backward_twice_retained,
    "grad of a tensor that does not require grad": lambda p, x, m: torch.autograd.grad(
        p(x).sum(), torch.ones(2)
    ),
    "grad of an unused parameter": lambda p, x, m: torch.autograd.grad(p(x).sum(), m.unused),
    "grad of an unused parameter, allowed": lambda p, x, m: torch.autograd.grad(
        p(x).sum(), (m.unused, m.fc.bias), allow_unused=True
    ),
    "grad of an unused parameter, materialized": lambda p, x, m: torch.autograd.grad(
        p(x).sum(), (m.unused,), allow_unused=True, materialize_grads=True
    ),
    "grad of an unused input": lambda p, x, m: torch.autograd.grad(
        p(x).sum(), torch.ones(2, requires_grad=True)
    ),
    "backward to chosen inputs": backward_of_inputs,
    "first order with create_graph": first_order_graph,
    "an output's retained grad and hook": output_hooks,
}


def run_backward(
    front_end: str | None, action: Callable[[Program, Tensor, TanhNet], Any]
) -> Outcome:
    """`action` on a fresh `TanhNet` (eager where `front_end` is None) and an input that
    requires grad; the same random numbers either way."""
    model = TanhNet()
    torch.manual_seed(1)
    x = torch.randn(2, 4, requires_grad=True)
    program = model if front_end is None else compiled(front_end, model, x)
    torch.manual_seed(2)
    return outcome(lambda: action(program, x, model))


@pytest.mark.parametrize("case", BACKWARD)
@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_the_backward_raises_or_succeeds_as_eagers(front_end: str, case: str) -> None:
    assert_same_outcome(run_backward(front_end, BACKWARD[case]), run_backward(None, BACKWARD[case]))


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_double_backward_is_refused_in_one_line(front_end: str) -> None:
    """AOTAutograd's backward has no backward of its own: the first derivatives (with
    `create_graph=True`) are eager's, the second backward raises one line instead of giving
    second derivatives that would be wrong."""

    def second(program: Program, x: Tensor, model: TanhNet) -> Any:
        (first,) = torch.autograd.grad(program(x).sum(), x, create_graph=True)
        return torch.autograd.grad(first.sum(), (x, model.fc.weight))

    assert run_backward(None, second).error is None
    got = run_backward(front_end, second)
    assert isinstance(got.error, RuntimeError)
    assert "does not currently support double backward" in str(got.error)
    assert "\n" not in str(got.error).strip()


# ---------------------------------------------------------------------------------------------
# Outputs: aliasing, leaves, strides, versions, in-place ops afterwards
# ---------------------------------------------------------------------------------------------


class Scaled(torch.nn.Module):
    """A parameter `w` (3, 4) and a forward `body(module, x)`."""

    def __init__(self, body: Callable[[Scaled, Tensor], Any]) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(3, 4))
        self.body = body

    def forward(self, x: Tensor) -> Any:
        return self.body(self, x)


def pair(h: Tensor) -> tuple[Tensor, Tensor]:
    return h, h


OUTPUTS: dict[str, Callable[[Scaled, Tensor], Any]] = {
    "a view of an intermediate": lambda m, x: (x * m.w).view(12),
    "a row of an intermediate": lambda m, x: (x * m.w)[0],
    "an expand of a reduction": lambda m, x: (x * m.w).sum(0).expand(2, 4),
    "a transposed result": lambda m, x: (x * m.w).t() * 2,
    "a view of the input": lambda m, x: (x.view(12), x * m.w),
    "the input transposed": lambda m, x: (x.t(), x * m.w),
    "a row of the input": lambda m, x: (x[0], x * m.w),
    "the input itself": lambda m, x: (x, x * m.w),
    "the parameter itself": lambda m, x: (m.w, x * m.w),
    "the parameter transposed": lambda m, x: (m.w.t(), x * m.w),
    "one tensor twice": lambda m, x: pair(x * m.w),
    "a result and its transpose": lambda m, x: (lambda h: (h, h.t()))(torch.tanh(x * m.w)),
    "two views of an intermediate": lambda m, x: (lambda h: (h[0], h[1:]))(x * m.w),
    "a detached result": lambda m, x: ((x * m.w).detach(), x * m.w),
}


def describe(out: Tensor, outputs: list[Tensor], x: Tensor, w: Tensor) -> dict[str, Any]:
    """What a caller can see of an output besides its values."""
    named = {"x": x, "w": w, **{f"output {i}": o for i, o in enumerate(outputs)}}

    def name_of(t: Tensor | None) -> str | None:
        return next((n for n, o in named.items() if o is t), None) if t is not None else None

    storage = out.untyped_storage().data_ptr()
    return {
        "shape": tuple(out.shape),
        "stride": out.stride(),
        "offset": out.storage_offset(),
        "dtype": out.dtype,
        "is": [n for n, o in named.items() if o is out],
        "shares memory with": [
            n
            for n, o in named.items()
            if o is not out and o.untyped_storage().data_ptr() == storage
        ],
        "base": name_of(out._base),
        "is_leaf": out.is_leaf,
        "requires_grad": out.requires_grad,
        "has grad_fn": out.grad_fn is not None,
        "version": out._version,
    }


def outputs_of(result: Any) -> list[Tensor]:
    return list(result) if isinstance(result, tuple) else [result]


def run_outputs(
    front_end: str | None,
    case: str,
    x_requires_grad: bool,
    after: Callable[[list[Tensor], Tensor, Scaled], Any],
) -> Outcome:
    """`after(outputs, x, model)` on the outputs of `OUTPUTS[case]` (eager where `front_end`
    is None)."""
    model = Scaled(OUTPUTS[case])
    torch.manual_seed(1)
    x = torch.randn(3, 4, requires_grad=x_requires_grad)
    program = model if front_end is None else compiled(front_end, model, x)
    outputs = outputs_of(program(x))
    return outcome(lambda: after(outputs, x, model))


def descriptions(outputs: list[Tensor], x: Tensor, model: Scaled) -> Any:
    return [describe(o, outputs, x, model.w) for o in outputs], [o.detach() for o in outputs]


def in_place(index: int) -> Callable[[list[Tensor], Tensor, Scaled], Any]:
    """`add_(1)` on output `index`; then every output's and input's values (what the write
    reached), and the gradients of the outputs' sum."""

    def action(outputs: list[Tensor], x: Tensor, model: Scaled) -> Any:
        outputs[index].add_(1)
        seen = [o.detach().clone() for o in (*outputs, x, model.w)]
        differentiable = [o.sum() for o in outputs if o.requires_grad]
        gradients = outcome(lambda: torch.stack(differentiable).sum().backward())
        if gradients.error is not None:
            return seen, type(gradients.error).__name__, first_line(gradients.error)
        return seen, x.grad, model.w.grad

    return action


@pytest.mark.parametrize("x_requires_grad", [True, False], ids=["x requires grad", "x does not"])
@pytest.mark.parametrize("case", OUTPUTS)
@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_outputs_alias_as_eagers(front_end: str, case: str, x_requires_grad: bool) -> None:
    expected = run_outputs(None, case, x_requires_grad, descriptions)
    got = run_outputs(front_end, case, x_requires_grad, descriptions)
    assert expected.error is None and got.error is None
    for i, (mine, eagers) in enumerate(zip(got.value[0], expected.value[0], strict=True)):
        assert mine == eagers, f"output {i}"
    assert_same_values(got.value[1], expected.value[1])


@pytest.mark.parametrize("case", OUTPUTS)
@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_an_in_place_op_on_an_output_does_what_eagers_does(front_end: str, case: str) -> None:
    """Eager's error (a leaf or a view of a leaf that requires grad; a tensor whose elements
    share memory), or the write seen through every alias, and eager's gradients after it."""
    for index in range(len(outputs_of(OUTPUTS[case](Scaled(OUTPUTS[case]), torch.ones(3, 4))))):
        expected = run_outputs(None, case, True, in_place(index))
        got = run_outputs(front_end, case, True, in_place(index))
        assert_same_outcome(got, expected)


def test_a_copied_output_of_an_inference_program_is_at_version_0() -> None:
    """An output copied into eager's strides (a transposed result) is fresh, as eager's."""
    model = Scaled(OUTPUTS["a transposed result"])
    x = torch.randn(3, 4)
    program = xfuse.compile(model, (x,), quiet=True, fallback="error")
    with torch.no_grad():
        y = program(x)
    assert y.stride() == (1, 4)
    assert y._version == 0
    with torch.inference_mode():
        torch.testing.assert_close(program(x), model(x))


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_a_channels_last_output_and_input_gradient_have_eagers_strides(front_end: str) -> None:
    """A convolution of a channels-last input: its output and the input's gradient are
    channels-last as eager's, the output at version 0."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last).requires_grad_()
    x_eager = x.detach().clone(memory_format=torch.preserve_format).requires_grad_()
    y, expected = compiled(front_end, conv, x)(x), conv(x_eager)
    assert (y.stride(), y._version) == (expected.stride(), 0)
    torch.testing.assert_close(y, expected)
    grad = torch.randn_like(expected)
    y.backward(grad)
    expected.backward(grad)
    assert x.grad is not None and x_eager.grad is not None
    assert x.grad.stride() == x_eager.grad.stride()
    torch.testing.assert_close(x.grad, x_eager.grad)


# ---------------------------------------------------------------------------------------------
# In-place writes after the forward, before the backward
# ---------------------------------------------------------------------------------------------

WRITES: dict[str, Callable[[Tensor, Tensor], Any]] = {
    "gelu": lambda x, w: torch.nn.functional.gelu(x * w),
    "silu": lambda x, w: torch.nn.functional.silu(x * w),
    "softmax": lambda x, w: torch.softmax(x * w, -1),
    "log_softmax": lambda x, w: torch.log_softmax(x * w, -1),
    "layer_norm": lambda x, w: torch.nn.functional.layer_norm(x, (4,), w[0]),
    "matmul": lambda x, w: x @ w.t(),
    "sqrt": lambda x, w: torch.sqrt(w.abs() + x.abs()),
    "square": lambda x, w: (x * w) ** 2,
    "leaky_relu": lambda x, w: torch.nn.functional.leaky_relu(x * w),
    "hardtanh": lambda x, w: torch.nn.functional.hardtanh(x * w),
    "exp and a sum": lambda x, w: (torch.exp(x * w), (x * w).sum()),
    "relu": lambda x, w: torch.relu(x * w),
    "tanh transposed": lambda x, w: torch.tanh(x * w).t(),
    "division": lambda x, w: x / w,
    "tanh of the input": lambda x, w: torch.tanh(x) * w,
    "tanh of an output": lambda x, w: (lambda y: (y, torch.tanh(y).sum()))(x * w),
}
"""Forwards of `x` and `w`. The min-cut partitioner saves other tensors than eager's autograd
for some (relu's mask for its output; tanh's input, to compute tanh again, for its output):
the compiled backward checks the versions of those eager saves, and saves a copy of an input
or output that only it reads."""

TARGETS = ("output", "input", "weight")
"""What is written after the forward: the first output, `x` (which does not require grad), or
`w` (which does, written with grad off)."""


def write_cases() -> list[Any]:
    """Each (case, target) of `WRITES`."""
    return [
        pytest.param(case, target, id=f"{case}-{target}") for case in WRITES for target in TARGETS
    ]


def write(target: str, outputs: list[Tensor], x: Tensor, w: Tensor) -> None:
    """`mul_(2)` on the target (`TARGETS`)."""
    with torch.no_grad():
        {"output": outputs[0], "input": x, "weight": w}[target].mul_(2)


def run_write(front_end: str | None, body: Callable[[Tensor, Tensor], Any], target: str) -> Outcome:
    """`body(x, w)`, then a write of `target` (`write`), then the backward of the outputs'
    sum: eager's error or its gradient of `w`."""
    torch.manual_seed(0)
    w = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(3, 4)
    program = body if front_end is None else xfuse_or_dynamo(front_end, body, x, w)
    outputs = outputs_of(program(x, w))

    def action() -> Tensor:
        write(target, outputs, x, w)
        torch.stack([o.sum() for o in outputs]).sum().backward()
        assert w.grad is not None
        return w.grad

    return outcome(action)


def xfuse_or_dynamo(
    front_end: str, body: Callable[..., Any], *example: Tensor
) -> Callable[..., Any]:
    if front_end == "xfuse.compile":
        return xfuse.compile(body, example, quiet=True, fallback="error")
    return torch.compile(body, backend="xfuse", options={"fallback": "error"})


@pytest.mark.parametrize(("case", "target"), write_cases())
@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_a_write_before_the_backward_is_seen_as_eagers(
    front_end: str, case: str, target: str
) -> None:
    """Eager's version-counter error where eager's backward reads what was written, else
    eager's gradients."""
    expected = run_write(None, WRITES[case], target)
    assert_same_outcome(run_write(front_end, WRITES[case], target), expected)


class WithWeight(torch.nn.Module):
    """`body(x, w)` of a parameter `w` (3, 4)."""

    def __init__(self, body: Callable[[Tensor, Tensor], Any]) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(3, 4))
        self.body = body

    def forward(self, x: Tensor) -> Any:
        return self.body(x, self.w)


def run_parameter_write(front_end: str | None, body: Callable[[Tensor, Tensor], Any]) -> Outcome:
    """A model's forward, its parameter written (grad off), then the backward of the outputs'
    sum: eager's error or the parameter's gradient."""
    model = WithWeight(body)
    torch.manual_seed(1)
    x = torch.randn(3, 4)
    program = model if front_end is None else compiled(front_end, model, x)
    outputs = outputs_of(program(x))

    def action() -> Tensor:
        write("weight", outputs, x, model.w)
        torch.stack([o.sum() for o in outputs]).sum().backward()
        assert model.w.grad is not None
        return model.w.grad

    return outcome(action)


@pytest.mark.parametrize("case", WRITES)
@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_a_parameter_written_before_the_backward_is_seen_as_eagers(
    front_end: str, case: str
) -> None:
    """Eager's error where its backward reads the parameter (`x @ w.t()` saves `w.t()`),
    else its gradient."""
    expected = run_parameter_write(None, WRITES[case])
    assert_same_outcome(run_parameter_write(front_end, WRITES[case]), expected)


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_a_saved_tensor_written_twice_is_reported_at_its_versions(front_end: str) -> None:
    """The error names eager's saved tensor and versions: the parameter that `x @ w.t()`
    saves as `w.t()` where `x` requires grad, written twice."""
    model = WithWeight(WRITES["matmul"])
    x = torch.randn(3, 4, requires_grad=True)
    eager_model = WithWeight(WRITES["matmul"])
    errors = []
    for program, m in ((compiled(front_end, model, x), model), (eager_model, eager_model)):
        y = program(x)
        with torch.no_grad():
            m.w.add_(1).add_(1)
        errors.append(outcome(lambda y=y: y.sum().backward()).error)
    assert isinstance(errors[0], RuntimeError) and isinstance(errors[1], RuntimeError)
    assert str(errors[0]) == str(errors[1])
    assert "is at version 2; expected version 0 instead" in str(errors[1])


def run_parameter_write_hooked(front_end: str | None) -> Outcome:
    """`x / w` under saved tensors hooks that keep copies (eager then checks no versions),
    `w` written, then the backward: the gradient of the forward as it ran."""
    model = WithWeight(WRITES["division"])
    torch.manual_seed(1)
    x = torch.randn(3, 4)
    program = model if front_end is None else compiled(front_end, model, x)
    with torch.autograd.graph.saved_tensors_hooks(torch.clone, lambda t: t):
        outputs = outputs_of(program(x))

    def action() -> Tensor:
        write("weight", outputs, x, model.w)
        outputs[0].sum().backward()
        assert model.w.grad is not None
        return model.w.grad

    return outcome(action)


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_a_parameter_written_under_saved_tensor_hooks_is_not_checked(front_end: str) -> None:
    """Under saved tensors hooks eager's backward checks no version: no error, its values."""
    expected = run_parameter_write_hooked(None)
    assert expected.error is None
    assert_same_outcome(run_parameter_write_hooked(front_end), expected)
