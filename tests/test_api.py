"""The public API end to end on the CPU: xfuse.compile, xfuse.explain and
torch.compile(backend="xfuse") on the bundled models, specialisation, fallback, bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from xdsl.dialects.builtin import ModuleOp

import xfuse
import xfuse.api
import xfuse.dynamo
from examples.convnet import make_convnet
from examples.mlp import make_mlp
from examples.transformer import make_transformer_block
from tests.conftest import CountCalls
from tests.frontend.test_export_key import BiasCache
from xfuse.backends import Kernel, get_backend
from xfuse.errors import (
    CodegenError,
    ExportError,
    FallbackWarning,
    UnsupportedInputError,
    XfuseError,
)
from xfuse.report.counts import headline
from xfuse.runtime.executor import CompiledProgram

ROOT = Path(__file__).resolve().parent.parent
MODELS: dict[str, Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]] = {
    "mlp": make_mlp,
    "transformer": make_transformer_block,
    "convnet": make_convnet,
}


@pytest.fixture(autouse=True)
def _quiet_export() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*pytree.*")
        yield


def eager(model: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> Any:
    with torch.no_grad():
        return model(*inputs)


@pytest.mark.parametrize("name", list(MODELS))
def test_compile_equals_eager(name: str) -> None:
    model, inputs = MODELS[name]()
    compiled = xfuse.compile(model, inputs)
    assert isinstance(compiled, CompiledProgram)
    assert compiled.kernels, "nothing was compiled to a kernel"
    other = torch.randn_like(inputs[0])
    with torch.no_grad():  # compiled programs are for inference
        torch.testing.assert_close(compiled(*inputs), eager(model, inputs))
        torch.testing.assert_close(compiled(other), eager(model, (other,)))


@pytest.mark.parametrize("name", list(MODELS))
def test_torch_compile_backend_equals_eager(name: str, count_calls: CountCalls) -> None:
    model, inputs = MODELS[name]()
    calls = count_calls(CompiledProgram, "__call__")
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="xfuse")
    with warnings.catch_warnings():
        # Groups may fall back; the backend as a whole must not give up on the graph.
        warnings.filterwarnings("error", ".*runs this graph eagerly", FallbackWarning)
        got = eager(compiled, inputs)
    torch.testing.assert_close(got, eager(model, inputs))
    assert calls, "torch.compile did not run the xfuse program"


def test_convnet_fuses_around_extern_convolutions() -> None:
    model, inputs = make_convnet()
    explanation = xfuse.explain(model, inputs)
    assert "graph.torch_call" in explanation.ops
    assert all("graph.torch_call" not in g.ops for g in explanation.groups)
    assert any({"graph.add", "graph.relu"} <= set(g.ops) for g in explanation.groups)


def test_explain_describes_groups_kernels_and_decisions() -> None:
    model, inputs = make_transformer_block(batch=1, seq=16, d_model=32, heads=2)
    explanation = xfuse.explain(model, inputs)
    assert explanation.groups and explanation.kernels
    for group in explanation.groups:
        assert group.ops and group.inputs and group.outputs and group.kind and group.rule
        assert group.kernels or group.fallback
    assert explanation.report.decisions, "the fusion passes recorded no decisions"
    assert any(d.fused for d in explanation.report.decisions)
    assert any(not d.fused and d.reason for d in explanation.report.decisions)
    data = json.loads(explanation.to_json())
    assert set(data) == {
        "ops",
        "imported_ops",
        "groups",
        "kernels",
        "report",
        "fallbacks",
        "cuda_graph",
        "summary",
    }
    assert data["cuda_graph"] is None  # a CPU program
    assert len(data["groups"]) == len(explanation.groups)
    text = str(explanation)
    counts = len(explanation.ops), len(explanation.groups), len(explanation.kernels)
    assert text.startswith(headline(*counts))
    assert "group 0" in text


def test_outputs_keep_the_models_structure() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return torch.relu(x) + y, [x * y, torch.exp(y)]

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    got = xfuse.compile(fn, (x, y))(x, y)
    assert isinstance(got, tuple) and isinstance(got[1], list)
    torch.testing.assert_close(got, fn(x, y))


def test_new_shapes_and_dtypes_compile_new_specialisations() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * x + 1

    compiled = xfuse.compile(fn, (torch.randn(4, 8),))
    for x in (torch.randn(4, 8), torch.randn(3, 5), torch.randn(4, 8, dtype=torch.float64)):
        torch.testing.assert_close(compiled(x), fn(x))
    assert len(compiled.specialisations) == 3
    compiled(torch.randn(3, 5))
    assert len(compiled.specialisations) == 3


def test_non_contiguous_inputs() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * y

    x, y = torch.randn(8, 6), torch.randn(6, 8)
    compiled = xfuse.compile(fn, (x, y.t().contiguous()))
    torch.testing.assert_close(compiled(x, y.t()), fn(x, y.t()))
    strided = torch.randn(8, 12)[:, ::2]
    torch.testing.assert_close(compiled(strided, y.t()), fn(strided, y.t()))


class FailingBackend:
    """The CPU backend, except that every compile raises (as an LLVM error would)."""

    def __init__(self) -> None:
        self.inner = get_backend("cpu")
        self.target = "failing-" + self.inner.target

    def compile(self, module: ModuleOp, name: str) -> bytes:
        raise CodegenError(f"injected LLVM failure for @{name}")

    def load(self, artifact: bytes, name: str) -> Kernel:
        return self.inner.load(artifact, name)


def test_groups_that_cannot_compile_fall_back_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, inputs = make_mlp(batch=4, d_in=16, d_hidden=32, d_out=8)
    monkeypatch.setattr(xfuse.api, "get_backend", lambda device: FailingBackend())
    with pytest.warns(FallbackWarning, match=r"group 0 \(.*graph.relu.*\).*injected LLVM"):
        compiled = xfuse.compile(model, inputs)
    assert not compiled.kernels and compiled.fallbacks
    assert compiled.groups[0].fallback is not None
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), eager(model, inputs))


def _relu(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 2


BAD_INPUTS: dict[str, tuple[tuple[Any, ...], str]] = {
    "too few": ((), "takes 1 positional input"),
    "too many": ((torch.randn(4), torch.randn(4)), "takes 1 positional input"),
    "not a tensor": ((object(),), "input 0 is a object; compiled programs take tensors"),
    "sparse": ((torch.randn(4).to_sparse(),), "sparse_coo tensor"),
    "complex": ((torch.randn(4, dtype=torch.complex64),), "complex dtype"),
    "other device": ((torch.randn(4, device="meta"),), "is on meta"),
    "unsupported dtype": ((torch.randn(4).to(torch.uint8),), "not supported"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_inputs_to_a_compiled_program(case: str) -> None:
    compiled = xfuse.compile(_relu, (torch.randn(4),))
    args, message = BAD_INPUTS[case]
    with pytest.raises(UnsupportedInputError, match=message):
        compiled(*args)


@pytest.mark.parametrize("case", ["sparse", "complex", "other device", "not a tensor"])
def test_bad_example_inputs_to_compile(case: str) -> None:
    args, message = BAD_INPUTS[case]
    with pytest.raises(UnsupportedInputError, match=message):
        xfuse.compile(_relu, args)


def test_example_inputs_must_be_a_tuple() -> None:
    with pytest.raises(XfuseError, match="tuple of inputs"):
        xfuse.compile(_relu, torch.randn(4))  # type: ignore[arg-type]


def _data_dependent(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:
        return x + 1
    return x - 1


def test_a_model_that_does_not_export_is_a_clear_error() -> None:
    with pytest.raises(ExportError, match="torch.export could not export") as info:
        xfuse.compile(_data_dependent, (torch.randn(4),))
    assert "\n" not in str(info.value)


def test_a_model_that_caches_a_tensor_in_a_dict_compiles_and_stays_eager_callable() -> None:
    """LeViT's attention biases cached in a dict on the first call: compiled first, the
    model matches eager, and the model itself still runs eagerly after (a shadow of the
    export key's replay, left in the cache, made xfuse.compile fail and every eager call
    after it)."""
    model, inputs = BiasCache(), (torch.randn(2, 2),)
    with torch.no_grad():
        compiled = xfuse.compile(model, inputs)
        assert type(model.cache.get("cpu", torch.empty(0))) is torch.Tensor
        want = model(*inputs)
        torch.testing.assert_close(compiled(*inputs), want)


def test_torch_compile_falls_back_to_eager_when_xfuse_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ExportError("xfuse: cannot import the program: injected")

    monkeypatch.setattr(xfuse.dynamo, "compile", refuse)
    torch._dynamo.reset()
    fn = torch.compile(_relu, backend="xfuse")
    x = torch.randn(4)
    with pytest.warns(FallbackWarning, match="runs this graph eagerly.*injected"):
        got = fn(x)
    torch.testing.assert_close(got, _relu(x))


def test_torch_compile_calls_needing_autograd_are_compiled_for_training() -> None:
    torch._dynamo.reset()
    model = torch.nn.Linear(8, 4)
    reference = torch.nn.Linear(8, 4)
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="xfuse")
    x = torch.randn(2, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        compiled(x).sum().backward()
    reference(x).sum().backward()
    torch.testing.assert_close(model.weight.grad, reference.weight.grad)
    torch.testing.assert_close(compiled(x), model(x))


def test_backend_is_registered_through_the_entry_point_alone() -> None:
    script = (
        "import torch\n"
        "f = torch.compile(lambda x: torch.relu(x) + 1, backend='xfuse')\n"
        "x = torch.randn(16)\n"
        "with torch.no_grad():\n"
        "    assert torch.equal(f(x), torch.relu(x) + 1)\n"
        "import sys; assert 'xfuse.api' in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_lazy_exports() -> None:
    assert xfuse.compile is xfuse.api.compile
    assert xfuse.explain is xfuse.api.explain
    with pytest.raises(AttributeError):
        _ = xfuse.no_such_thing  # type: ignore[attr-defined]


def test_binding_planned_once_equals_binding_by_name() -> None:
    """The call path binds inputs and parameters with a plan made at build time: it gives
    what `ImportedProgram.arguments` gives."""
    from xfuse.frontend import import_module

    model, inputs = make_mlp()
    imported = import_module(model, inputs)
    fast = imported.binder(len(inputs))(inputs)
    slow = imported.arguments(*inputs)
    assert len(fast) == len(slow) and all(a is b for a, b in zip(fast, slow, strict=True))


def test_nested_outputs_keep_their_structure() -> None:
    def nested(x: torch.Tensor) -> dict[str, Any]:
        return {"a": x.exp(), "b": (x.sin(), [x * 2])}

    x = torch.randn(3, 4)
    got = xfuse.compile(nested, (x,))(x)
    expected = nested(x)
    assert got.keys() == expected.keys()
    torch.testing.assert_close(got["a"], expected["a"])
    torch.testing.assert_close(got["b"][0], expected["b"][0])
    torch.testing.assert_close(got["b"][1][0], expected["b"][1][0])


def _with_factories(x: torch.Tensor) -> torch.Tensor:
    return x * torch.ones(3) + torch.arange(3) / 7


@pytest.fixture
def default_dtype() -> Iterator[None]:
    saved = torch.get_default_dtype()
    yield
    torch.set_default_dtype(saved)


@pytest.mark.usefixtures("default_dtype")
def test_a_call_under_another_default_dtype_gets_eagers_dtype() -> None:
    """A forward's factories make tensors of the default dtype: a call after
    `torch.set_default_dtype` runs a program specialised for it, whose results promote as
    eager's do (one compiled under f32 and called under f64 returned f32)."""
    x = torch.randn(3)
    program = xfuse.compile(_with_factories, (x,), quiet=True)
    program(x)
    torch.set_default_dtype(torch.float64)
    got, want = program(x), _with_factories(x)
    assert got.dtype == want.dtype == torch.float64
    torch.testing.assert_close(got, want)
    assert len(program.specialisations) == 2


def test_torch_compile_compiles_once_for_no_grad_and_inference_mode(
    count_calls: CountCalls,
) -> None:
    """Dynamo compiles a graph again per grad mode; the backend hands back the first program."""
    compiles = count_calls(xfuse.dynamo, "compile")
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
    fn = torch.compile(model, backend="xfuse")
    x = torch.randn(2, 4)
    with torch.no_grad():
        expected = model(x)
        torch.testing.assert_close(fn(x), expected)
    with torch.inference_mode():
        torch.testing.assert_close(fn(x), expected)
    with torch.no_grad():
        torch.testing.assert_close(fn(x), expected)
    assert len(compiles) == 1


def test_torch_compile_does_not_share_a_program_between_models_of_other_weights() -> None:
    torch._dynamo.reset()
    first, second = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with torch.no_grad():
        for model in (first, second):
            torch.testing.assert_close(torch.compile(model, backend="xfuse")(x), model(x))


def test_the_cycle_collector_is_paused_while_compiling_and_restored_after() -> None:
    import gc

    seen: list[bool] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        seen.append(gc.isenabled())  # runs while the export key's replay, torch.export trace it
        return torch.tanh(x) * 2

    assert gc.isenabled()
    xfuse.compile(fn, (torch.randn(4),), quiet=True)
    assert seen and not any(seen) and gc.isenabled()
    # a compile that fails turns it back on too
    with pytest.raises(xfuse.errors.ExportError):
        xfuse.compile(lambda x: x.numpy(), (torch.randn(4),), quiet=True)
    assert gc.isenabled()
    # and one that was off before stays off
    gc.disable()
    try:
        xfuse.compile(fn, (torch.randn(4),), quiet=True)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_export_records_no_stack_traces_and_restores_the_setting() -> None:
    """torch.fx captures no stack trace per node while xfuse exports (xfuse reads none); the
    caller's setting is back after, a failed export included."""
    import torch.fx.config as fx_config

    seen: list[bool] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        seen.append(fx_config.do_not_emit_stack_traces)  # runs while torch.export traces it
        return torch.tanh(x) * 2

    assert fx_config.do_not_emit_stack_traces is False
    compiled = xfuse.compile(fn, (torch.randn(4),), quiet=True)
    assert seen == [True] and fx_config.do_not_emit_stack_traces is False
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), fn(x))
    with pytest.raises(xfuse.errors.ExportError):
        xfuse.compile(lambda x: x.numpy(), (torch.randn(4),), quiet=True)
    assert fx_config.do_not_emit_stack_traces is False


def test_tracers_record_no_stack_traces_where_torch_has_no_setting_for_it() -> None:
    """The way for a torch without `do_not_emit_stack_traces` (2.11): torch.export's nodes get
    no stack trace, and tracers record them again after, a failed export included."""
    from xfuse.frontend.export import tracers_record_none
    from xfuse.frontend.importer import wrap_function

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2

    def traces() -> list[str | None]:
        exported = torch.export.export(wrap_function(fn), (torch.randn(4),), strict=False)
        return [n.meta.get("stack_trace") for n in exported.graph.nodes if n.op == "call_function"]

    assert len(traces()) == 2 and all(traces())  # recorded by default
    with tracers_record_none():
        assert traces() == [None, None]
    assert all(traces())
    with pytest.raises(RuntimeError), tracers_record_none():
        raise RuntimeError
    assert all(traces())
