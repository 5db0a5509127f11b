"""torch.compile(backend="xfuse"): the device it compiles for, its registration on a plain
`import xfuse`, and strict mode (fallback="error" / XFUSE_STRICT=1) for graphs and groups."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import xfuse
import xfuse.api
import xfuse.dynamo
import xfuse.runtime.compiler
from xfuse.errors import (
    EagerFallbackError,
    ExportError,
    FallbackWarning,
    InvalidArgumentError,
    XfuseError,
)
from xfuse.runtime.fallback import fallback_mode

ROOT = Path(__file__).resolve().parents[1]


def _gelu_add(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x) + x.sum(-1, keepdim=True)


def test_graph_device_is_the_inputs_device() -> None:
    gm = torch.fx.symbolic_trace(torch.nn.Linear(2, 2).to("meta"))
    assert xfuse.dynamo.graph_device(gm, [3, torch.zeros(1, device="meta")]).type == "meta"
    assert xfuse.dynamo.graph_device(gm, [3]).type == "meta"  # from the parameters
    plain = torch.fx.symbolic_trace(lambda x: x + 1)
    assert xfuse.dynamo.graph_device(plain, [2]).type == "cpu"
    # No tensor input, no state: the device its traced values are on (dynamo records them).
    graph = torch.fx.Graph()
    rows = graph.call_function(torch.arange, (4,), {"device": "meta"})
    rows.meta["example_value"] = torch.empty(4, device="meta")
    graph.output((rows,))
    factories = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert xfuse.dynamo.graph_device(factories, []).type == "meta"


def _causal_rows() -> torch.Tensor:
    """A graph of factories alone (BART's attention mask, made with no tensor input)."""
    rows = torch.arange(16, device="cuda")
    return (rows[None, None, :, None] >= 0).expand(2, -1, 16, 16)


@pytest.mark.gpu
def test_a_graph_without_tensor_inputs_runs_on_its_factories_device() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch._dynamo.reset()
    got = torch.compile(_causal_rows, backend="xfuse", options={"fallback": "error"})()
    assert got.device.type == "cuda"
    torch.testing.assert_close(got, _causal_rows())
    torch._dynamo.reset()


@pytest.mark.gpu
def test_torch_compile_on_cuda_compiles_for_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch._dynamo.reset()
    x = torch.randn(8, 32, device="cuda")
    fn = torch.compile(_gelu_add, backend="xfuse", options={"fallback": "error"})
    with torch.no_grad():
        got = fn(x)
    assert got.device == x.device
    torch.testing.assert_close(got, _gelu_add(x))


def test_import_xfuse_registers_the_backend_without_the_entry_point() -> None:
    """With the entry point hidden (xfuse on PYTHONPATH only), `import torch, xfuse` is enough."""
    script = (
        "import importlib.metadata as md\n"
        "real = md.entry_points\n"
        "def hidden(**kw):\n"
        "    eps = real(**kw)\n"
        "    if kw.get('group') == 'torch_dynamo_backends':\n"
        "        return md.EntryPoints([e for e in eps if e.name != 'xfuse'])\n"
        "    return eps\n"
        "md.entry_points = hidden\n"
        "import sys, torch, xfuse\n"
        "assert 'xfuse.api' not in sys.modules\n"
        "f = torch.compile(lambda x: torch.relu(x) + 1, backend='xfuse')\n"
        "x = torch.randn(16)\n"
        "with torch.no_grad():\n"
        "    assert torch.equal(f(x), torch.relu(x) + 1)\n"
        "assert 'xfuse.api' in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_fallback_mode_has_one_default_and_the_environment_makes_it_strict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("XFUSE_STRICT", raising=False)
    assert fallback_mode() == "eager"
    monkeypatch.setenv("XFUSE_STRICT", "1")
    assert fallback_mode() == "error"
    assert fallback_mode("eager") == "eager"  # an explicit choice wins
    with pytest.raises(XfuseError, match="fallback must be one of"):
        fallback_mode("loud")


def _broken_lowering(module: Any, device: Any = None) -> None:
    raise RuntimeError("injected lowering failure")


def test_strict_compile_turns_a_group_fallback_into_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(xfuse.runtime.compiler, "lower_to_loops", _broken_lowering)
    x = torch.randn(4, 8)
    with pytest.warns(FallbackWarning, match="injected"):
        eager = xfuse.compile(_gelu_add, (x,), quiet=True)
    torch.testing.assert_close(eager(x), _gelu_add(x))
    with pytest.raises(EagerFallbackError, match=r"group 0 .*would run eagerly.*injected"):
        xfuse.compile(_gelu_add, (x,), quiet=True, fallback="error")
    monkeypatch.setenv("XFUSE_STRICT", "1")
    with pytest.raises(EagerFallbackError, match="injected"):
        xfuse.compile(_gelu_add, (x,), quiet=True)


def test_strict_torch_compile_turns_an_eager_graph_into_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ExportError("xfuse: cannot import the program: injected")

    monkeypatch.setattr(xfuse.dynamo, "compile", refuse)
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    fn = torch.compile(_gelu_add, backend="xfuse", options={"fallback": "error"})
    with pytest.raises(Exception, match="would run this graph eagerly.*injected") as info:
        fn(x)
    assert _in_chain(info.value, EagerFallbackError)
    monkeypatch.setenv("XFUSE_STRICT", "1")
    torch._dynamo.reset()
    with pytest.raises(Exception, match="injected") as info:
        torch.compile(_gelu_add, backend="xfuse")(x)
    assert _in_chain(info.value, EagerFallbackError)


def test_strict_torch_compile_runs_a_clean_graph() -> None:
    torch._dynamo.reset()
    x = torch.randn(4, 8)
    fn = torch.compile(_gelu_add, backend="xfuse", options={"fallback": "error"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        torch.testing.assert_close(fn(x), _gelu_add(x))


def test_unknown_torch_compile_options_are_refused() -> None:
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    with pytest.raises(XfuseError, match="unknown torch.compile options for xfuse: mode"):
        xfuse.dynamo.dynamo_backend(gm, [torch.randn(2)], options={"mode": "max"})


@pytest.mark.parametrize("mode", list(xfuse.dynamo.BACKEND_MODES))
def test_every_torch_compile_mode_compiles_the_graph(mode: str) -> None:
    torch._dynamo.reset()
    x = torch.randn(4, 8)
    fn = torch.compile(_gelu_add, backend="xfuse", mode=mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        torch.testing.assert_close(fn(x), _gelu_add(x))
    torch._dynamo.reset()


def test_an_unknown_torch_compile_mode_is_refused_in_one_line() -> None:
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    with pytest.raises(XfuseError, match="unknown torch.compile mode for xfuse: 'fast'"):
        xfuse.dynamo.dynamo_backend(gm, [torch.randn(2)], mode="fast")
    with pytest.raises(XfuseError, match="cuda_graphs for xfuse is True or False, got 'no'"):
        xfuse.dynamo.dynamo_backend(gm, [torch.randn(2)], options={"cuda_graphs": "no"})


def _in_chain(error: BaseException | None, kind: type[BaseException]) -> bool:
    while error is not None:
        if isinstance(error, kind):
            return True
        error = error.__cause__ or error.__context__
    return False


class _Layer(torch.nn.Module):
    """A module whose parameters require grad: a call with grad enabled needs autograd."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))


@pytest.mark.parametrize("how", ["option", "environment"])
def test_strict_torch_compile_trains_compiled(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Strict mode: a call with grad enabled on parameters that require grad runs xfuse's
    forward and backward programs (`xfuse.training`), with eager's values and gradients and no
    eager graph; under no_grad the inference program runs."""
    model = _Layer()
    reference = copy.deepcopy(model)
    options: dict[str, Any] | None = {"fallback": "error"}
    if how == "environment":
        monkeypatch.setenv("XFUSE_STRICT", "1")
        options = None
    torch._dynamo.reset()
    fn = torch.compile(model, backend="xfuse", options=options)
    x = torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = fn(x)
        assert got.grad_fn is not None
        got.square().sum().backward()
        reference(x).square().sum().backward()
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
        with torch.no_grad():
            torch.testing.assert_close(fn(x), model(x))


def test_strict_torch_compile_trains_with_dynamic_shapes() -> None:
    """With `dynamic=True`, strict mode trains too: the forward and backward parts compile for
    symbolic sizes (or per shape, with a `DynamicShapesWarning`; nothing runs eagerly), with
    eager's values and gradients at each batch size (`tests/test_training_dynamic.py`)."""
    torch._dynamo.reset()
    model = _Layer()
    reference = copy.deepcopy(model)
    fn = torch.compile(model, backend="xfuse", options={"fallback": "error"}, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for batch in (4, 6, 3):
            x = torch.randn(batch, 8)
            got = fn(x)
            torch.testing.assert_close(got, reference(x))
            got.square().sum().backward()
            reference(x).square().sum().backward()
            for p, q in zip(model.parameters(), reference.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad)
    torch._dynamo.reset()


def test_torch_compile_options_that_are_no_dict_are_refused() -> None:
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    with pytest.raises(InvalidArgumentError, match="options for xfuse must be a dict") as info:
        xfuse.dynamo.dynamo_backend(gm, [torch.randn(2)], options=["fallback"])  # type: ignore[arg-type]
    assert isinstance(info.value, TypeError | ValueError)


# ---------------------------------------------------------------------------------------------
# Lifted parameters: static inputs, and calls that skip their per-tensor checks
# ---------------------------------------------------------------------------------------------


def _backend_run(model: torch.nn.Module, x: torch.Tensor) -> Any:
    """What the xfuse backend returned for `model`'s one graph (its `run`)."""
    from xfuse.dynamo import dynamo_backend

    seen: list[Any] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        seen.append(dynamo_backend(gm, example_inputs))
        return seen[-1]

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        compiled(x)
    (run,) = seen
    return compiled, run


def test_dynamo_marks_lifted_parameters_static() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    _, run = _backend_run(model.eval(), torch.randn(2, 8))
    program = run.compiled
    assert len(program.static_inputs) == 4  # two weights and two biases
    assert program.arity == 5  # and the user's input, not static


def test_calls_after_the_first_skip_the_checks_of_static_inputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8)
    compiled, run = _backend_run(model, x)
    checked: list[int] = []
    program = run.compiled
    real_call = type(program).__call__

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        checked.append(1)
        return real_call(self, *args, **kwargs)

    monkeypatch.setattr(type(program), "__call__", counting)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
        assert checked == []  # the first call (in `_backend_run`) recorded the static inputs
        # Another tensor in a parameter's place (same layout, no recompile) takes the checked
        # path once, and computes with it.
        model[0].weight = torch.nn.Parameter(torch.randn(8, 8))
        torch.testing.assert_close(compiled(x), model(x))
        torch.testing.assert_close(compiled(x), model(x))
    assert len(checked) == 1
