"""The key of an export (`xfuse.frontend.export_key`): the same for the same computation, in
this process or another; another where anything the program computes differs; none where the
replay cannot vouch for the program."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from xfuse.frontend.export_key import ExportKey, export_key
from xfuse.frontend.importer import wrap_function


class Net(torch.nn.Module):
    def __init__(self, scale: float = 2.0, width: int = 8) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.norm = torch.nn.BatchNorm1d(width)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        h = torch.relu(self.norm(self.lin(x))) * self.scale
        return {"h": h, "t": h.t(), "n": 3}


def _key(model: torch.nn.Module, *args: Any, **kwargs: Any) -> ExportKey:
    key = export_key(model, args, kwargs)
    assert key is not None
    return key


def _digest(model: torch.nn.Module, *args: Any) -> str:
    return _key(model, *args).digest


def x(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype)


def test_the_same_computation_has_the_same_key_whatever_the_values() -> None:
    torch.manual_seed(0)
    a, b = Net().eval(), Net().eval()  # other weights
    assert _digest(a, x(4, 8)) == _digest(b, x(4, 8))


def test_the_key_follows_the_computation() -> None:
    base = _digest(Net().eval(), x(4, 8))
    others = [
        _digest(Net(scale=3.0).eval(), x(4, 8)),  # a scalar in the code
        _digest(Net().train(), x(4, 8)),  # batch statistics, running stats updated
        _digest(Net().eval(), x(5, 8)),  # the input's shape
        _digest(Net().eval(), x(4, 8, dtype=torch.float64)[:, :].float().t().contiguous().t()),
        _digest(Net().eval().double(), x(4, 8, dtype=torch.float64)),  # dtypes
        _digest(Net(width=8).eval().requires_grad_(False), x(4, 8)),  # requires_grad
    ]
    assert len({base, *others}) == len(others) + 1


def test_the_outputs_structure_and_constants_are_in_the_key() -> None:
    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
        return x + 1, n

    module = wrap_function(f)
    one, two = _key(module, x(3), 1), _key(module, x(3), 2)
    assert one.digest != two.digest  # a Python input is specialised
    assert str(one.out_spec) == str(torch.utils._pytree.tree_flatten((x(3), 1))[1])


class Holder(torch.nn.Module):
    """A tensor held as a plain attribute: torch.export lifts it to a constant."""

    def __init__(self, held: torch.Tensor) -> None:
        super().__init__()
        self.held = held

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.held


def test_the_values_of_held_tensors_are_in_the_key() -> None:
    a = _digest(Holder(torch.ones(3)), x(3))
    assert a == _digest(Holder(torch.ones(3)), x(3))
    assert a != _digest(Holder(torch.full((3,), 2.0)), x(3))


def test_ties_between_state_tensors_are_in_the_key() -> None:
    def tied(tie: bool) -> torch.nn.Module:
        m = torch.nn.Sequential(
            torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 4, bias=False)
        )
        if tie:
            m[1].weight = m[0].weight
        return m

    assert _digest(tied(True), x(2, 4)) != _digest(tied(False), x(2, 4))


def _none(model: torch.nn.Module | Callable[..., Any], *args: Any) -> None:
    module = model if isinstance(model, torch.nn.Module) else wrap_function(model)
    assert export_key(module, args, None) is None


def test_no_key_where_the_program_reads_data() -> None:
    _none(lambda x: x * 2 if x.sum() > 0 else x, x(3))
    _none(lambda x: x[x > 0], x(3))


def test_no_key_where_an_op_changes_metadata_in_place() -> None:
    _none(lambda x: (x + 1).unsqueeze_(0), x(3))


def test_no_key_where_inputs_share_memory() -> None:
    y = x(4)
    _none(lambda a, b: a + b, y[:2], y[2:])
    _none(lambda a, b: a + b, y, y)


class Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.last = x
        return x + 1


def test_no_key_where_the_program_changes_its_modules_and_they_are_put_back() -> None:
    model = Counter()
    _none(model, x(3))
    assert model.calls == 0 and not hasattr(model, "last")
    assert set(model.state_dict()) == set()


class BiasCache(torch.nn.Module):
    """LeViT's attention biases: gathered once per device in eval and kept in a dict (and a
    list, a set and a dict of dicts beside it, as other caches are kept)."""

    def __init__(self) -> None:
        super().__init__()
        self.biases = torch.nn.Parameter(torch.randn(4))
        self.register_buffer("idxs", torch.tensor([[0, 1], [2, 3]]), persistent=False)
        self.cache: dict[str, torch.Tensor] = {}
        self.seen: list[int] = []
        self.devices: set[str] = set()
        self.by_rows: dict[str, dict[int, torch.Tensor]] = {"cpu": {}}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = str(x.device)
        if key not in self.cache:
            self.cache[key] = self.biases[self.idxs]
        self.seen.append(x.shape[0])
        self.devices.add(key)
        self.by_rows[key][x.shape[0]] = self.cache[key]
        return x + self.by_rows[key][x.shape[0]]


def test_no_key_where_the_program_fills_a_container_it_holds_and_it_is_emptied() -> None:
    """A shadow left in the cache would reach every later call, eager's too."""
    model = BiasCache()
    _none(model, x(2, 2))
    assert model.cache == {} and model.seen == [] and model.devices == set()
    assert model.by_rows == {"cpu": {}}
    held = torch.ones(2, 2)
    model.cache["cpu"] = held
    _none(model, x(2, 2))  # the list and the set still change
    assert model.cache == {"cpu": held} and model.cache["cpu"] is held and model.seen == []


def test_the_replay_takes_exports_branches() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_exporting():
            raise AssertionError("the replay ran eager's branch")
        return x * 2

    assert export_key(wrap_function(f), (x(3),), None) is not None


def test_shadows_show_the_inputs_device_and_layout() -> None:
    seen: list[Any] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        seen.append((x.device, x.shape, x.stride(), x.dtype))
        return torch.zeros(2, device=x.device) + x.sum()

    y = x(4, 6).t()
    assert export_key(wrap_function(f), (y,), None) is not None
    assert seen == [(y.device, y.shape, y.stride(), y.dtype)]


_KEY_IN_A_NEW_PROCESS = """
import json, sys
sys.path.insert(0, {tests!r})
import torch
from test_export_key import Net
from xfuse.frontend.export_key import export_key
torch.manual_seed(0)
print(json.dumps(export_key(Net().eval(), (torch.randn(4, 8),), None).digest))
"""


def test_a_new_process_finds_the_same_key() -> None:
    script = _KEY_IN_A_NEW_PROCESS.format(tests=str(Path(__file__).parent))

    def run() -> str:
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        )
        return str(json.loads(done.stdout.strip().splitlines()[-1]))

    torch.manual_seed(0)
    assert run() == run() == _digest(Net().eval(), torch.randn(4, 8))


def test_no_key_for_a_value_its_repr_does_not_tell_apart() -> None:
    _none(lambda x, o: x + 1, x(3), object())
    assert export_key(wrap_function(lambda x, o: x + o), (x(3), 1.5), None) is not None


def test_conjugate_and_negative_bits_are_in_the_key() -> None:
    module = wrap_function(lambda z: z * 2)
    z = torch.randn(3, dtype=torch.cfloat)
    keys = {_digest(module, z), _digest(module, z.conj()), _digest(module, torch.randn(3))}
    assert len(keys) == 3


def test_no_key_for_a_tensor_subclass_or_another_layout() -> None:
    class Tagged(torch.Tensor):
        pass

    _none(lambda x: x + 1, torch.randn(3).as_subclass(Tagged))
    _none(lambda x: x * 2, torch.randn(3, 3).to_sparse())


def test_no_key_where_an_out_argument_is_resized() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(0)
        torch.add(x, 1, out=out)  # resizes out
        return out

    _none(f, x(3))
    assert export_key(wrap_function(lambda x: x.add_(1)), (x(3),), None) is not None
