"""Module state (`xfuse.runtime.state`): the key of a call's parameters and buffers is the same
for the same layouts, whichever way it was found (the C++ guard of an earlier call, or read in
Python), and differs when any size, stride, dtype or the training flag does."""

from __future__ import annotations

import pytest
import torch

from xfuse.runtime import state as state_module
from xfuse.runtime.state import ModuleState


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).eval()


def test_this_torch_has_guards_that_work() -> None:
    # CI's torch (2.13) and the GPU machine's (2.11) both do; elsewhere the key is read in Python.
    assert state_module._guards_work()


def test_the_same_layouts_give_the_same_key_and_others_another() -> None:
    model = _model()
    state = ModuleState(model)
    first = state.key(state.tensors())
    assert state.key(state.tensors()) == first  # through the guard
    assert state._fast and ModuleState(model).key(state.tensors()) == (False, 0, 0)
    weight = model[0].weight
    weight.data = torch.randn(4, 3).t()  # same sizes, other strides
    strided = state.key(state.tensors())
    assert strided != first
    weight.data = torch.randn(3, 4)  # back: the first key again, from the table
    assert state.key(state.tensors()) == first
    model[1].running_mean = torch.zeros(3, dtype=torch.float64)
    assert state.key(state.tensors()) not in (first, strided)
    model[1].running_mean = torch.zeros(3)
    model.train()
    assert state.key(state.tensors()) == (True, first[1], first[2])


def test_calls_in_and_out_of_inference_mode_each_keep_a_guard() -> None:
    model = _model()
    state = ModuleState(model)
    with torch.no_grad():
        plain = state.key(state.tensors())
    with torch.inference_mode():
        inference = state.key(state.tensors())
    assert plain == inference and len(state._fast) == 2
    for _ in range(3):
        with torch.inference_mode():
            assert state.key(state.tensors()) == plain
        assert state.key(state.tensors()) == plain
    assert len(state._fast) == 2  # both found by their guards: no new ones


def test_without_guards_the_key_is_read_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_module, "_guards_work", lambda: False)
    model = _model()
    state = ModuleState(model)
    key = state.key(state.tensors())
    assert state.key(state.tensors()) == key and not state._fast
    model[0].weight.data = torch.randn(3, 5)
    assert state.key(state.tensors()) != key


@pytest.mark.parametrize("grad", [False, True])
def test_state_that_is_no_tensor_any_more_is_refused_in_one_line(grad: bool) -> None:
    import xfuse
    from xfuse.errors import XfuseError

    model = _model()
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn(2, 4)
    compiled = xfuse.compile(model, (x,), quiet=True)
    compiled(x)
    model[0].bias = None  # the dict still holds the name: read directly, it is None
    with torch.set_grad_enabled(grad), pytest.raises(XfuseError) as caught:
        compiled(x)
    assert str(caught.value) == "module state '0.bias' is now a NoneType, not a tensor"


def test_this_torch_reads_dict_versions() -> None:
    # CI's torch (2.13) and the GPU machine's (2.11) both do; elsewhere every call reads the dicts.
    assert state_module._versions_work()


def test_unwritten_dicts_give_the_last_read_and_any_write_a_new_one() -> None:
    model = _model()
    state = ModuleState(model)
    first = state.tensors()
    assert state.tensors() is first  # no dict written: the same tensors, not read again
    new_weight = torch.nn.Parameter(torch.ones(3, 4))
    model[0].weight = new_weight  # a write of the parameter dict
    second = state.tensors()
    assert second is not first and second[state.names.index("0.weight")] is new_weight
    model[1].momentum = 0.5  # a write of an owner's instance dict: read again, the same values
    third = state.tensors()
    assert third is not second and third == second
    shadow = torch.zeros(3)
    object.__setattr__(model[1], "running_mean", shadow)  # shadows the buffer: read by getattr
    assert state.tensors()[state.names.index("1.running_mean")] is shadow
    assert state.tensors()[state.names.index("1.running_mean")] is shadow


def test_without_dict_versions_every_call_reads_the_dicts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_module, "_versions_work", lambda: False)
    model = _model()
    state = ModuleState(model)
    first = state.tensors()
    assert state.tensors() is not first and state.tensors() == first
    model[0].weight = torch.nn.Parameter(torch.ones(3, 4))
    assert state.tensors()[state.names.index("0.weight")] is model[0].weight


class _Settings:
    """A plain object of settings a forward reads (as transformers' `config`)."""

    def __init__(self) -> None:
        self.shift = 1.0


class _Flagged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scale, self.relu, self.mode, self.config = 2.0, True, "double", _Settings()
        self.sizes = [1, 2]
        self.cache = torch.zeros(1)  # a tensor attribute: no value compared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x) * self.scale + self.config.shift
        y = torch.relu(y) if self.relu else y
        return y * 2 if self.mode == "double" else y


_CHANGES = {
    "scale": ("scale", 3.0),
    "flag": ("relu", False),
    "string": ("mode", "single"),
    "settings": ("config.shift", -1.0),
    "list": ("sizes", [1, 3]),
}


@pytest.mark.parametrize("change", list(_CHANGES))
def test_a_changed_python_value_is_another_key_and_a_change_back_the_first(change: str) -> None:
    model = _Flagged()
    state = ModuleState(model)
    first = state.key(state.tensors())
    path, value = _CHANGES[change]
    owner = model.config if path.startswith("config.") else model
    attr = path.split(".")[-1]
    before = getattr(owner, attr)
    setattr(owner, attr, value)
    changed = state.key(state.tensors())
    assert changed != first
    assert state.attributes.change(first[1]).startswith(f"'{path}' is {value!r}, was")
    setattr(owner, attr, before)
    assert state.key(state.tensors()) == first
    model.cache = torch.ones(1)  # not compared: the same key
    assert state.key(state.tensors()) == first


def test_a_replaced_added_or_removed_submodule_is_refused_in_one_line() -> None:
    from xfuse.errors import ModuleChangedError

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    state = ModuleState(model)
    model[1] = torch.nn.GELU()
    with pytest.raises(ModuleChangedError, match="submodule '1' was replaced") as e:
        state.tensors()
    assert "\n" not in str(e.value)
    model[1] = torch.nn.ReLU()
    with pytest.raises(ModuleChangedError, match="'1' was replaced"):
        state.tensors()  # another ReLU object: the program holds the first one
    layers = torch.nn.ModuleList()
    holder = torch.nn.Module()
    holder.layers = layers
    state = ModuleState(holder)
    layers.append(torch.nn.Linear(2, 2))
    with pytest.raises(ModuleChangedError, match="'layers.0' was added"):
        state.tensors()
