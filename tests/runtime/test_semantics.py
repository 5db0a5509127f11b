"""A compiled program behaves like eager PyTorch: what its outputs alias."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest
import torch

import xfuse
from tests.conftest import CountCalls
from xfuse.errors import ModuleChangedError

Tensor = torch.Tensor


def compiled(fn: Callable[..., Any], *inputs: Tensor) -> Any:
    return xfuse.compile(fn, inputs, quiet=True)


def shares_memory(a: Tensor, b: Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def layout(t: Tensor) -> tuple[Any, ...]:
    return tuple(t.shape), t.stride(), t.storage_offset()


def test_clone_returns_fresh_memory() -> None:
    x = torch.randn(3, 4)
    y = compiled(lambda x: x.clone(), x)(x)
    before = x.clone()
    y.add_(1)
    assert torch.equal(x, before)


def test_contiguous_of_a_transpose_is_a_contiguous_copy() -> None:
    x = torch.randn(3, 4)
    y = compiled(lambda x: x.t().contiguous(), x)(x)
    assert y.is_contiguous() and not shares_memory(x, y)
    assert torch.equal(y, x.t())


def test_a_cloned_buffer_cannot_change_the_module() -> None:
    class Pos(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("pos", torch.arange(4.0))

        def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
            return self.pos.clone(), x + self.pos

    model = Pos()
    x = torch.zeros(4)
    pos, _ = compiled(model, x)(x)
    pos.mul_(100)
    assert torch.equal(model.pos, torch.arange(4.0))


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x[0],
        lambda x: x[:, 1],
        lambda x: x.expand(2, 3, 4),
        lambda x: x.detach(),
        lambda x: x.t(),
        lambda x: x.to(torch.float32),
    ],
    ids=["select-row", "select-column", "expand", "detach", "t", "to-same-dtype"],
)
def test_views_of_an_input_are_views_like_eager(view: Callable[[Tensor], Tensor]) -> None:
    x = torch.randn(3, 4)
    y = compiled(view, x)(x)
    expected = view(x)
    assert shares_memory(y, x)
    assert layout(y) == layout(expected)


def test_a_view_of_an_output_is_a_view_of_it() -> None:
    def f(x: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, ...], Tensor]:
        h = x * 2
        return h, h[0], h.split(2, 1), h

    x = torch.randn(3, 4)
    h, h0, (s0, s1), again = compiled(f, x)(x)
    assert again is h
    for view, expected in ((h0, h[0]), (s0, h[:, :2]), (s1, h[:, 2:])):
        assert shares_memory(view, h) and layout(view) == layout(expected)
    h0.fill_(7)
    assert torch.equal(h[0], torch.full((4,), 7.0))


def test_two_clones_of_one_value_are_two_buffers() -> None:
    def f(x: Tensor) -> tuple[Tensor, Tensor]:
        y = x + 1
        return y, y.clone()

    x = torch.randn(5)
    y, z = compiled(f, x)(x)
    assert not shares_memory(y, z)


def test_returned_constants_are_fresh_per_call() -> None:
    def f(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        k = torch.ones(4).reshape(2, 2)
        return k, x @ k, torch.tensor([1.0, 2.0])

    x = torch.randn(2, 2)
    c = compiled(f, x)
    k, _, literal = c(x)
    k.mul_(100)
    literal.mul_(100)
    k, product, literal = c(x)
    assert torch.equal(k, torch.ones(2, 2))
    assert torch.equal(literal, torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(product, x @ torch.ones(2, 2))


def test_a_channels_last_input_gives_a_channels_last_output() -> None:
    def f(x: Tensor) -> Tensor:
        return torch.relu(x) + 1

    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    y = compiled(f, x)(x)
    assert y.stride() == f(x).stride()
    torch.testing.assert_close(y, f(x))


def test_input_strides_are_part_of_the_signature() -> None:
    def f(x: Tensor) -> Tensor:
        return x * 2

    x = torch.randn(2, 3, 4, 5)
    c = compiled(f, x)
    last = x.to(memory_format=torch.channels_last)
    assert c(last).stride() == f(last).stride()
    assert c(x).stride() == f(x).stride()


def test_torch_compile_clone_is_fresh() -> None:
    x = torch.randn(4)
    fn = torch.compile(lambda x: x.clone(), backend="xfuse")
    with torch.no_grad():
        y = fn(x)
    assert not shares_memory(x, y)


DIVISION_BY_ZERO = """
import torch, xfuse
a = torch.tensor([7, -7, 3], dtype=torch.int64)
b = torch.tensor([2, 0, 1], dtype=torch.int64)
for name, fn in [
    ("trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    ("floor", lambda a, b: torch.div(a, b, rounding_mode="floor")),
    ("remainder", lambda a, b: a % b),
    ("trunc-fused", lambda a, b: torch.div(a * 2 + 1, b - 1, rounding_mode="trunc") + 1),
]:
    c = xfuse.compile(fn, (a, b + 1), quiet=True)
    try:
        c(a, b)
    except RuntimeError as e:
        print(name, "raised", e)
    else:
        print(name, "did not raise")
"""


def test_integer_division_by_zero_raises_like_eager() -> None:
    import subprocess
    import sys

    # In a child process: a kernel that divides by zero kills its process (SIGFPE).
    done = subprocess.run(
        [sys.executable, "-c", DIVISION_BY_ZERO], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines == [
        f"{name} raised ZeroDivisionError"
        for name in ("trunc", "floor", "remainder", "trunc-fused")
    ]


class Double(torch.nn.Module):
    def forward(self, w: Tensor) -> Tensor:
        return 2 * w


def _weight_becomes_a_buffer(model: torch.nn.Module) -> None:
    del model.fc.weight
    model.fc.register_buffer("weight", torch.full((3, 4), 3.0))


def _weight_becomes_a_property(model: torch.nn.Module) -> None:
    """The module's class changes to one whose `weight` is a property (the parameter stays)."""

    class Scaled(torch.nn.Linear):
        @property
        def weight(self) -> Tensor:  # type: ignore[override]
            return self._parameters["weight"] * 4  # type: ignore[operator]

    model.fc.__class__ = Scaled


class Affine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("shift", torch.zeros(3))
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.drop(self.fc(x)) + self.shift)


def eager_no_grad(model: torch.nn.Module, x: Tensor) -> Tensor:
    with torch.no_grad():
        return model(x)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m.fc, "weight", torch.nn.Parameter(torch.ones(3, 4))),
        lambda m: m.load_state_dict(
            {"fc.weight": torch.ones(3, 4), "fc.bias": torch.ones(3), "shift": torch.ones(3)},
            assign=True,
        ),
        lambda m: setattr(m.fc.weight, "data", torch.full((3, 4), 2.0)),
        lambda m: setattr(m, "shift", torch.full((3,), 5.0)),
        lambda m: torch.nn.utils.parametrize.register_parametrization(m.fc, "weight", Double()),
        lambda m: object.__setattr__(m, "shift", torch.full((3,), 7.0)),  # shadows the buffer
        _weight_becomes_a_buffer,
        _weight_becomes_a_property,
    ],
    ids=[
        "parameter",
        "load_state_dict-assign",
        "weight-data",
        "buffer",
        "parametrization",
        "instance-attribute",
        "parameter-to-buffer",
        "class-property",
    ],
)
def test_reassigned_module_state_is_seen(change: Callable[[torch.nn.Module], Any]) -> None:
    model = Affine().eval()
    x = torch.randn(2, 4)
    c = compiled(model, x)
    change(model)
    with torch.no_grad():
        torch.testing.assert_close(c(x), eager_no_grad(model, x))
    assert len(c.specialisations) == 1


class Configured(torch.nn.Module):
    """A forward that reads Python values: its own, a submodule's, and a settings object's."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.act = torch.nn.LeakyReLU(0.1)
        self.config = types.SimpleNamespace(scale=2.0)
        self.residual = True

    def forward(self, x: Tensor) -> Tensor:
        y = self.act(self.fc(x)) * self.config.scale
        return y + x[:, :3] if self.residual else y


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m, "residual", False),
        lambda m: setattr(m.act, "negative_slope", 0.5),
        lambda m: setattr(m.config, "scale", -1.0),
    ],
    ids=["flag", "submodule-setting", "config"],
)
def test_a_changed_python_value_compiles_anew(
    change: Callable[[torch.nn.Module], Any],
) -> None:
    """torch.export bakes a module's Python values into the program: a call after one changed
    runs a program for the new value (it returned the old value's result before)."""
    model = Configured().eval()
    x = -torch.rand(2, 4)
    c = compiled(model, x)
    with torch.no_grad():
        c(x)
        change(model)
        torch.testing.assert_close(c(x), eager_no_grad(model, x))
    assert len(c.specialisations) == 2
    change(model)
    torch.testing.assert_close(c(x), model(x))  # with grad: traced for the value now


SCALE = 2.0


def _scaled(x: Tensor) -> Tensor:
    return x * SCALE


def test_a_functions_changed_global_or_closure_value_compiles_anew() -> None:
    """torch.export bakes a function's global and closure constants into its program: a call
    after one changed runs a program for the new value (it returned the old one's result)."""
    global SCALE
    x = torch.randn(3)
    c = compiled(_scaled, x)
    try:
        SCALE = 3.0
        torch.testing.assert_close(c(x), x * 3.0)
    finally:
        SCALE = 2.0
    torch.testing.assert_close(c(x), x * 2.0)
    assert len(c.specialisations) == 2
    shift = 1.0

    def shifted(t: Tensor) -> Tensor:
        return t + shift

    c = compiled(shifted, x)
    shift = -4.0
    torch.testing.assert_close(c(x), x - 4.0)


def test_a_replaced_submodule_is_refused_in_one_line() -> None:
    model = Configured().eval()
    x = torch.randn(2, 4)
    c = compiled(model, x)
    model.act = torch.nn.Tanh()
    with pytest.raises(ModuleChangedError, match="submodule 'act' was replaced") as e:
        c(x)
    assert "\n" not in str(e.value)


def test_train_mode_and_a_new_parameter_shape_compile_anew() -> None:
    model = Affine().eval()
    x = torch.randn(2, 4)
    c = compiled(model, x)
    model.fc.weight = torch.nn.Parameter(torch.randn(3, 4).t().contiguous().t())  # new strides
    with torch.no_grad():
        torch.testing.assert_close(c(x), eager_no_grad(model, x))
    model.load_state_dict({"fc.weight": torch.ones(3, 4), "fc.bias": torch.ones(3)}, strict=False)
    model.train()
    with torch.no_grad():
        y = c(torch.ones(8, 4))  # 5 before dropout: 0 or 10 after it (p = 0.5)
    assert set(y.flatten().tolist()) == {0.0, 10.0}
    assert len(c.specialisations) == 3  # the first, the new strides, training mode


def test_a_parameter_that_requires_grad_gets_eagers_gradient_with_grad_enabled() -> None:
    model = Affine().eval()
    x = torch.randn(2, 4)
    c = compiled(model, x)
    c(x).sum().backward()
    got = [p.grad for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    torch.testing.assert_close(got, [p.grad for p in model.parameters()])


class GradModeBranch(torch.nn.Module):
    """A forward that branches on grad mode, as eager runs it in each mode."""

    def __init__(self, requires_grad: bool):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4), requires_grad=requires_grad)

    def forward(self, x: Tensor) -> Tensor:
        return x * self.w + (1.0 if torch.is_grad_enabled() else 2.0)


def test_a_module_that_requires_grad_is_traced_as_its_calls_run() -> None:
    # compiled with grad on, but every call it accepts runs with grad off (else it raises)
    model, x = GradModeBranch(requires_grad=True), torch.zeros(4)
    c = xfuse.compile(model, (x,), quiet=True)
    with torch.no_grad():
        torch.testing.assert_close(c(x), model(x))
    with torch.inference_mode():
        torch.testing.assert_close(c(x), torch.full((4,), 2.0))
    assert len(c.specialisations) == 1


def test_grad_mode_is_part_of_the_signature() -> None:
    model, x = GradModeBranch(requires_grad=False), torch.zeros(4)
    c = xfuse.compile(model, (x,), quiet=True)
    torch.testing.assert_close(c(x), model(x))  # grad on: + 1
    with torch.no_grad():
        torch.testing.assert_close(c(x), model(x))  # grad off: + 2
    assert len(c.specialisations) == 2
    with torch.no_grad():
        c2 = xfuse.compile(model, (x,), quiet=True)
        torch.testing.assert_close(c2(x), torch.full((4,), 2.0))
    torch.testing.assert_close(c2(x), torch.full((4,), 1.0))


def test_a_repeated_call_is_checked_as_the_first() -> None:
    """A call that passes a recent call's guard (`CompiledProgram._guarded`) runs its program;
    other strides, one tensor passed twice, and another grad mode are seen as on a first
    call."""

    def f(x: Tensor, y: Tensor) -> Tensor:
        return x * 2 + y

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    c = compiled(f, x, y)
    for _ in range(2):
        torch.testing.assert_close(c(x, y), f(x, y))
    assert len(c._recent) == 1
    torch.testing.assert_close(c(x.t(), y), f(x.t(), y))
    torch.testing.assert_close(c(x, x), f(x, x))
    assert len(c.specialisations) == 3
    with torch.no_grad():
        torch.testing.assert_close(c(x, y), f(x, y))
    assert len(c.specialisations) == 4  # grad off


def test_new_shapes_from_eight_threads_all_compile() -> None:
    import concurrent.futures

    def f(x: Tensor) -> Tensor:
        return torch.tanh(x) * 2 + 1

    c = compiled(f, torch.randn(1, 3))
    inputs = [torch.randn(n + 2, 3) for n in range(8)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(c, inputs))
    for x, y in zip(inputs, results, strict=True):
        torch.testing.assert_close(y, f(x))
    assert len(c.specialisations) == 9


def test_torch_compile_differentiates_an_input_that_requires_grad() -> None:
    """A graph whose input requires grad runs xfuse's forward and backward programs
    (`xfuse.training`): no warning, and eager's gradient."""
    import warnings

    from xfuse.errors import FallbackWarning

    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.relu(x) * 2, backend="xfuse")
    x = torch.randn(4, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        y = fn(x)
        fn(x)
        y.sum().backward()
    torch.testing.assert_close(x.grad, (x > 0).float() * 2)


def test_torch_compile_runs_xfuse_for_every_batch_size(count_calls: CountCalls) -> None:
    from xfuse.runtime.executor import Executable
    from xfuse.runtime.symbolic import SymbolicProgram

    runs, symbolic_runs = count_calls(Executable, "run"), count_calls(SymbolicProgram, "run")

    def f(x: Tensor, w: Tensor) -> Tensor:
        return torch.relu(x @ w + 1).sum(1)

    torch._dynamo.reset()
    fn = torch.compile(f, backend="xfuse")
    w = torch.randn(4, 3)
    sizes = (2, 3, 4, 5, 7)  # from the second on, dynamo hands the backend SymInts: one
    # symbolic program runs them (xfuse.runtime.symbolic)
    with torch.no_grad():
        for n in sizes:
            x = torch.randn(n, 4)
            torch.testing.assert_close(fn(x, w), f(x, w))
    assert len(runs) + len(symbolic_runs) == len(sizes)


def test_an_expand_of_a_value_not_returned_has_eager_strides() -> None:
    """Found by `xfuse-fuzz --semantics` (seed 14, program 25): copying into eager's strides
    (0 for an expanded dimension) raised 'more than one element ... refers to a single memory
    location'."""

    def f(x: Tensor) -> Tensor:
        return torch.nn.functional.gelu(x.reshape(-1)).neg().expand(3, 2)

    x = torch.rand(2) + 0.5
    y = compiled(f, x)(x)
    assert y.stride() == f(x).stride()
    torch.testing.assert_close(y, f(x))


# -- views of an intermediate that is not returned (a hidden output) ---------------------------


def _first_then_t(x: Tensor) -> tuple[Tensor, Tensor]:
    h = x * 2
    return h[0], h.t()


def _flat_and_tail(x: Tensor) -> tuple[Tensor, Tensor]:
    h = x * 2
    return h.view(12), h[1:]


def _through_a_reshape_chain(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    a = (x + 1).view(4, 3)
    return a[0], a.t().reshape(12), x - 1


def _a_reshape_and_a_row(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    h = x * 2
    a = h.reshape(2, 6).view(4, 3)  # a view of h through a reshape chain
    return a, h[1], a.t()


def _views_of_a_constant(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    k = torch.arange(12.0).reshape(3, 4)
    return k[0], k[1:], x + 1


def _views_of_a_literal(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    k = torch.tensor([1.0, 2.0, 3.0, 4.0])
    return k[1:], k[:2], x + 1


def _a_view_of_a_cast_output(x: Tensor) -> tuple[Tensor, Tensor]:
    """`to` another dtype copies (its schema only says it may alias): `v` is an output of its
    own and `v.t()` a view of it (seed 71, program 70)."""
    v = (x > 0).to(torch.float32)
    return v.t(), v


def _views_of_a_gapped_buffer(x: Tensor) -> tuple[Tensor, Tensor]:
    """Eager's `copy_` keeps the buffer's gapped rows; torch's decomposition of the functional
    `copy` is a dense `clone`, whose layout the views must not take."""
    h = torch.empty_strided((3, 4), (8, 1))
    h.copy_(x * 2)
    return h[0], h[:, 1]


VIEWS_OF_INTERMEDIATES = [
    _views_of_a_gapped_buffer,
    _first_then_t,
    _flat_and_tail,
    _through_a_reshape_chain,
    _a_reshape_and_a_row,
    _views_of_a_constant,
    _views_of_a_literal,
    _a_view_of_a_cast_output,
]


def check_like_eager(f: Callable[..., Any], got: Any, x: Tensor) -> None:
    """Same values, sizes, strides and offsets as eager, the same pairs of outputs sharing
    memory, and a write into each output changes the others where eager's does."""
    expected = f(x)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
        assert layout(g) == layout(e)
    pairs = [(i, j) for i in range(len(got)) for j in range(len(got)) if i != j]
    for i, j in pairs:
        assert shares_memory(got[i], got[j]) == shares_memory(expected[i], expected[j])
    for i in range(len(got)):
        got_before = [t.clone() for t in got]
        eager_before = [t.clone() for t in expected]
        got[i].fill_(7.0)
        expected[i].fill_(7.0)
        for j in range(len(got)):
            assert torch.equal(got[j] != got_before[j], expected[j] != eager_before[j]), (i, j)


@pytest.mark.parametrize("f", VIEWS_OF_INTERMEDIATES, ids=lambda f: f.__name__.strip("_"))
def test_views_of_an_intermediate_share_it_like_eager(f: Callable[..., Any]) -> None:
    x = torch.randn(3, 4)
    c = compiled(f, x)
    check_like_eager(f, c(x), x)
    check_like_eager(f, c(x), x)  # the second call: the first one's writes changed nothing


@pytest.mark.parametrize("f", VIEWS_OF_INTERMEDIATES, ids=lambda f: f.__name__.strip("_"))
def test_torch_compile_views_of_an_intermediate_share_it_like_eager(
    f: Callable[..., Any], count_calls: CountCalls
) -> None:
    from xfuse.runtime.executor import Executable

    calls = count_calls(Executable, "run")
    torch._dynamo.reset()
    x = torch.randn(3, 4)
    fn = torch.compile(f, backend="xfuse")
    with torch.no_grad():
        check_like_eager(f, fn(x), x)
        check_like_eager(f, fn(x), x)
    assert len(calls) == 2  # xfuse ran both calls


def _a_column_of_a_batched_product(x: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    y = x @ w  # decomposed through views of a 3-D product: another base than the trace's
    return w[:, torch.tensor([0, -1])], y.select(1, 2), y


def test_a_view_of_a_product_whose_decomposition_has_another_base() -> None:
    """The base a returned view has before decomposing (a 4-D product) is not the one after
    (a 3-D `bmm` viewed back): its traced layout is not taken for the other (found by
    `xfuse-fuzz --semantics --seed 924`, program 1213: a `zip` of strides of two ranks)."""
    x, w = torch.rand(6, 17, 1, 10)[..., ::2], torch.randn(1, 3).expand(5, 3)
    c = compiled(_a_column_of_a_batched_product, x, w)
    got, want = c(x, w), _a_column_of_a_batched_product(x, w)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e)
        assert layout(g) == layout(e)
    assert shares_memory(got[1], got[2])


def test_the_hidden_output_is_not_returned() -> None:
    from xfuse.frontend import import_module

    imported = import_module(_first_then_t, (torch.randn(3, 4),))
    assert imported.hidden_outputs == 1
    assert len(imported.function.function_type.outputs) == 3
    assert [r.base for r in imported.output_rules] == ["output", "output", "fresh"]


def _has_cuda() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        import pycuda  # noqa: F401  # pyright: ignore[reportMissingImports]
    except ImportError:
        return False
    return True


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(), reason="needs an NVIDIA GPU and pycuda")
@pytest.mark.parametrize(
    "f",
    [
        _first_then_t,
        _flat_and_tail,
        _through_a_reshape_chain,
        _a_reshape_and_a_row,
        _a_view_of_a_cast_output,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_cuda_views_of_an_intermediate_share_it_like_eager(f: Callable[..., Any]) -> None:
    """Step by step, then as a CUDA graph (replays copy the hidden output out like the rest)."""
    x = torch.randn(3, 4, device="cuda")
    c = xfuse.compile(f, (x,), device="cuda", quiet=True)
    for _ in range(4):
        check_like_eager(f, c(x), x)
