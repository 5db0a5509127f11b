"""
A module's parameters and buffers, read from the module at every call (docs/contracts.md,
"Module state"): a reassigned parameter (`m.weight = nn.Parameter(...)`,
`load_state_dict(..., assign=True)`, `m.weight.data = ...`) is what the next call computes with.
Where each tensor lives is resolved once; a call reads each tensor from its module's parameter
or buffer dict, as `nn.Module.__getattr__` would (`ModuleState.tensors`). What a program
was compiled for (their shapes, strides, dtypes, devices, and `training`) is part of its
signature, so a change there compiles a new program.
"""

from __future__ import annotations

import enum
import functools
import operator
import threading
import types
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, NamedTuple, cast

import torch

from xfuse.errors import ModuleChangedError, XfuseError
from xfuse.frontend.pytrees import picker

Tensor = torch.Tensor


class ModuleState:
    """The parameters and buffers of one module, by fully qualified name."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        names = [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()]
        slots = {name: _owner(module, name) for name in dict.fromkeys(names)}
        # Ordered by owner and dict, so that one C call reads each dict's tensors (`_reads`).
        by_dict: dict[tuple[int, str], list[str]] = {}
        for name, (owner, attr) in slots.items():
            by_dict.setdefault((id(owner), _kind(owner, attr)), []).append(name)
        self.names = tuple(name for group in by_dict.values() for name in group)
        self._slots = tuple(slots[name] for name in self.names)
        self._reads = ReadPlans(
            [
                _read_plan(slots[group[0]][0], kind, [slots[n][1] for n in group])
                for (_, kind), group in by_dict.items()
            ]
        )
        self._seen: _Seen | None = None
        """The dicts of the last direct read, their versions then, and what it read."""
        self._tokens: dict[tuple[object, ...], int] = {}
        self._lock = threading.Lock()
        self._fast: tuple[tuple[Any, int], ...] = ()
        """(guard, token) of recent layouts, newest first (`key`)."""
        self.attributes = ModuleAttributes(module)
        self._attributes = self.attributes.token()
        """The modules' Python values at the last `tensors` (`ModuleAttributes.token`)."""

    def tensors(self) -> list[Tensor]:
        """The tensors now, in `names`' order, and the modules' Python values read for `key`.
        Read from the dicts, the only other value one can hold is None (`m.bias = None`),
        which `key` refuses: it checks every value where the guard of an earlier call fails,
        as it does for None."""
        values = self._read_direct()
        if values is None:
            values = [getattr(owner, attr) for owner, attr in self._slots]
            self._check(values)
            self._attributes = self.attributes.token()
        return values

    def _check(self, values: Sequence[object]) -> None:
        for name, value in zip(self.names, values, strict=True):
            if not isinstance(value, Tensor):
                raise XfuseError(
                    f"module state '{name}' is now a {type(value).__name__}, not a tensor"
                )

    def _read_direct(self) -> list[Tensor] | None:
        """The tensors read straight from each owner's `_parameters` or `_buffers` dict, where
        that is what `getattr` gives: no owner's class changed (a parametrization swaps it and
        adds a property), none had a `__getattr__`, `__getattribute__` or class attribute of
        its own for the name (`_read_plan`), no instance attribute shadows one, and each name
        is still where it was; else None (read by `getattr`). Each check and read is one C
        loop over the dicts (`ReadPlans`). Where no dict read last time was written since
        (CPython's dict version tags, `_versions_work`), the last read's tensors are the
        tensors now, which skips the reads."""
        plans = self._reads
        if plans.instances is None:
            return None
        if list(map(type, plans.owners)) != plans.classes:
            return None
        seen = self._seen
        if seen is not None and list(map(_dict_version, seen.dicts)) == seen.versions:
            self._attributes = seen.attributes
            return seen.tensors  # no dict was written since: the same tensors and values
        if not all(map(_disjoint, plans.views, plans.attrs)):
            return None
        try:
            dicts = list(map(operator.getitem, plans.instances, plans.kinds))
            values = list(chain.from_iterable(map(operator.call, plans.getters, dicts)))
        except KeyError:  # a name moved
            return None
        self._attributes = self.attributes.token()
        if _versions_work():
            read = list(
                {id(d): d for d in (*plans.instances, *dicts, *self.attributes.dicts)}.values()
            )
            self._seen = _Seen(read, list(map(_dict_version, read)), values, self._attributes)
        return values

    def key(self, tensors: Sequence[Tensor]) -> tuple[object, ...]:
        """What a program depends on: `training`, the modules' Python values (as `tensors`,
        which read `tensors`, read them: `ModuleAttributes.token`), and each tensor's layout,
        dtype and device (as a small number: the same layouts, the same number). A call whose tensors pass a
        guard of an earlier call's (`torch._C._dynamo.guards.TensorGuards`, dynamo's C++
        check of sizes, strides, dtype, device, dispatch keys and requires_grad) has that
        call's layouts, checked in C++ instead of read in Python, and a key of two fields to
        hash instead of one per tensor."""
        for guard, token in self._fast:
            if guard.check(*tensors):  # False for anything but a tensor
                return (self.module.training, self._attributes, token)
        self._check(tensors)
        layouts = tuple([(t.shape, t.stride(), t.dtype, t.device) for t in tensors])
        with self._lock:
            token = self._tokens.setdefault(layouts, len(self._tokens))
        guard = layout_guard(tensors)
        if guard is not None:
            # One assignment (threads read the tuple whole); the newest first, a few kept: a
            # guard also checks the dispatch keys that inference mode and grad mode set.
            self._fast = ((guard, token), *self._fast[: FAST_KEYS - 1])
        return (self.module.training, self._attributes, token)


CONSTANT_TYPES = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device)
"""Python values a forward may branch on or compute with that torch.export bakes into the
program (`ModuleAttributes`)."""

_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))
"""What every module's instance dict holds for torch itself (its tensor and hook dicts,
`training`), which `ModuleState` and the signature see already."""


class _Unwatched:
    """A value `ModuleAttributes` does not compare (a tensor, a function, a cache)."""


_UNWATCHED = _Unwatched()


def _constant(value: object) -> object:
    """`value` as a hashable constant where it is one (`CONSTANT_TYPES`, an enum, and tuples,
    lists and dicts of them), else `_UNWATCHED`."""
    if isinstance(value, (*CONSTANT_TYPES, enum.Enum)):
        return value
    if isinstance(value, tuple | list | frozenset | set):
        items = [_constant(v) for v in value]
        if any(v is _UNWATCHED for v in items):
            return _UNWATCHED
        return (
            type(value).__name__,
            tuple(items) if isinstance(value, tuple | list) else frozenset(items),
        )
    if isinstance(value, dict):
        pairs = [(_constant(k), _constant(v)) for k, v in value.items()]
        if any(v is _UNWATCHED for pair in pairs for v in pair):
            return _UNWATCHED
        return ("dict", tuple(pairs))
    return _UNWATCHED


def _holds_settings(value: object) -> bool:
    """A plain object whose attributes a forward may read as settings (transformers'
    `config`, a dataclass of options): no module, tensor, function or class."""
    return (
        hasattr(value, "__dict__")
        and not isinstance(value, torch.nn.Module | Tensor | type | enum.Enum)
        and not callable(value)
    )


class ModuleAttributes:
    """The Python values of a module and its submodules that torch.export bakes into a
    program (numbers, strings, flags, and those of plain objects they hold, such as
    transformers' `config`: `_constant`), and which submodule objects the module holds. A
    change of a value is another program's (`token`: its number); a submodule replaced by
    another object is refused (`ModuleChangedError`): the program reads the tensors of the
    modules it was compiled with. Each call compares CPython's version tags of the dicts
    read (`_dict_version`); only where one was written are the values read again."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self._tokens: dict[Hashable, int] = {}
        self._lock = threading.Lock()
        self._dicts: list[dict[str, Any]] = []
        self._versions: list[int] | None = None
        self._token = 0
        self._values: dict[int, Any] = {}
        self._structure = self._modules()
        self.token()

    def change(self, token: int) -> str:
        """Which value differs now from those of `token` ("'scale' is 3.0, was 2.0")."""
        before = {path: (c, value) for path, c, value in self._values[token]}
        now = {path: (c, value) for path, c, value in self._values[self.token()]}
        missing = (_UNWATCHED, _UNWATCHED)
        for path in [*before, *now]:
            (old, was), (new, is_) = before.get(path, missing), now.get(path, missing)
            if old != new:
                return f"'{path}' is {_shown(is_)}, was {_shown(was)}"
        return "no value"

    @property
    def dicts(self) -> list[dict[str, Any]]:
        """The dicts the last read read (none where CPython's version tags do not work)."""
        return self._dicts

    def _modules(self) -> tuple[tuple[str, torch.nn.Module], ...]:
        return tuple(self.module.named_modules())

    def token(self) -> int:
        """The number of the values now (the same values, the same number)."""
        versions = self._versions
        if versions is not None and list(map(_dict_version, self._dicts)) == versions:
            return self._token
        dicts, values = self._read()
        key = tuple((path, constant) for path, constant, _ in values)
        with self._lock:
            token = self._tokens.setdefault(key, len(self._tokens))
            self._values.setdefault(token, values)
        if _versions_work():
            self._dicts, self._versions = dicts, list(map(_dict_version, dicts))
        self._token = token
        return token

    def _read(self) -> tuple[list[dict[str, Any]], tuple[tuple[str, object, object], ...]]:
        """The dicts read (each module's instance and submodule dicts, and those of the plain
        objects they hold) and the values; a `ModuleChangedError` where a submodule is
        another object than at compile time."""
        structure = self._modules()
        if len(structure) != len(self._structure) or any(
            a != b or m is not n for (a, m), (b, n) in zip(structure, self._structure, strict=True)
        ):
            change = _changed(self._structure, structure)
            if change is not None:
                raise ModuleChangedError(
                    f"xfuse: {change} after compile; the program reads the modules it was "
                    "compiled with: compile the model again"
                )
        dicts: list[dict[str, Any]] = []
        values: list[tuple[str, object, object]] = []
        held: set[int] = set()
        for name, module in self._structure:  # those added since run in no forward here
            dicts.append(vars(module))
            if module._modules or isinstance(module, CONTAINERS):  # where a change matters
                dicts.append(module._modules)
            for attr, value in vars(module).items():
                if attr in _MODULE_INTERNALS:
                    continue
                path = f"{name}.{attr}" if name else attr
                constant = _constant(value)
                if constant is not _UNWATCHED:
                    values.append((path, constant, value))
                elif _holds_settings(value) and id(value) not in held:
                    held.add(id(value))
                    dicts.append(vars(value))
                    values += [
                        (f"{path}.{k}", c, v)
                        for k, v in vars(value).items()
                        if (c := _constant(v)) is not _UNWATCHED
                    ]
        return dicts, tuple(values)


def _shown(value: object) -> str:
    return "nothing" if value is _UNWATCHED else repr(value)


CONTAINERS = (torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.Sequential)
"""Modules whose forward (or their owner's) calls each submodule they hold: one added to
them after compile is one the program does not run."""


class FunctionValues:
    """The Python constants a function reads from its module's globals and its closure
    (`_constant`), which torch.export bakes into its program: a change is another program's
    (`token`). Read at every call by name (a few dict reads): a script's loop writes its
    globals dict at every step, so no version tag would stay."""

    def __init__(self, function: Callable[..., Any]):
        function = getattr(function, "__func__", function)  # a bound method's function
        code = getattr(function, "__code__", None)
        scope: dict[str, Any] = getattr(function, "__globals__", {})
        names = _global_names(code) if isinstance(code, types.CodeType) else set()
        self._scope = scope
        self._names = tuple(
            sorted(n for n in names if n in scope and _constant(scope[n]) is not _UNWATCHED)
        )
        cells = getattr(function, "__closure__", None) or ()
        self._cells = tuple(c for c in cells if _constant(_contents(c)) is not _UNWATCHED)
        self._labels = (*self._names, *(f"closure {i}" for i in range(len(self._cells))))
        self._last = self._read()
        self._tokens: dict[Hashable, int] = {}
        self._values: dict[int, tuple[object, ...]] = {}
        self._token = self._number(self._last)
        self._lock = threading.Lock()

    def _read(self) -> tuple[object, ...]:
        return (*map(self._scope.get, self._names), *map(_contents, self._cells))

    def _number(self, values: tuple[object, ...]) -> int:
        token = self._tokens.setdefault(tuple(map(_constant, values)), len(self._tokens))
        self._values.setdefault(token, values)
        return token

    def token(self) -> int:
        """The number of the values now (the same values, the same number)."""
        now = self._read()
        if now == self._last:
            return self._token
        with self._lock:
            self._last, self._token = now, self._number(now)
            return self._token

    def change(self, token: int) -> str:
        """Which value differs now from those of `token` ("'SCALE' is 3.0, was 2.0")."""
        before, now = self._values[token], self._read()
        for label, old, new in zip(self._labels, before, now, strict=True):
            if _constant(old) != _constant(new):
                return f"'{label}' is {new!r}, was {old!r}"
        return "no value"


def _global_names(code: types.CodeType) -> set[str]:
    """The names a function's code (and the code nested in it) reads as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _contents(cell: Any) -> object:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _UNWATCHED


def _changed(
    compiled: tuple[tuple[str, torch.nn.Module], ...], now: tuple[tuple[str, torch.nn.Module], ...]
) -> str | None:
    """How a module's submodules changed since compile time in a way the program cannot
    follow, or None: a submodule replaced or removed, or one added to a container
    (`CONTAINERS`). One added elsewhere (`register_parametrization`'s) is no forward's the
    program ran, and the state reads its parameters through `getattr`."""
    before, after = dict(compiled), dict(now)
    for name, module in before.items():
        if name not in after:
            return f"submodule '{name}' was removed"
        if after[name] is not module:
            return f"submodule '{name or '(the module)'}' was replaced by another object"
    for name in after.keys() - before.keys():
        if isinstance(before.get(name.rpartition(".")[0]), CONTAINERS):
            return f"submodule '{name}' was added"
    return None


FAST_KEYS = 4
"""Guards `ModuleState.key` keeps (calls in and out of inference mode each pass their own)."""


def layout_guard(tensors: Sequence[Tensor]) -> Any:
    """A C++ check that tensors have `tensors`' sizes, strides, dtypes and devices (and
    Python types, dispatch keys and requires_grad: `guard.check(*others)`), or None
    where this torch has none that behaves so (it is private to dynamo: `_guards_work`)."""
    if not _guards_work():
        return None
    return _tensor_guards(tensors)


def _tensor_guards(tensors: Sequence[Tensor]) -> Any:
    from torch._C._dynamo import guards

    # Static sizes and strides are given as numbers (dynamo's None would leave a dim unchecked).
    return cast(Any, guards).TensorGuards(
        *tensors,
        dynamic_dims_sizes=[list(t.shape) for t in tensors],
        dynamic_dims_strides=[list(t.stride()) for t in tensors],
    )


@functools.cache
def _guards_work() -> bool:
    """Whether this torch's `TensorGuards` pass the same layouts and refuse other sizes,
    strides and dtypes (checked once; any error: no)."""
    try:
        x = torch.zeros(2, 3)
        guard = _tensor_guards([x, x])
        others = (torch.zeros(3, 2), torch.zeros(3, 2).t(), torch.zeros(2, 3, dtype=torch.float64))
        return bool(guard.check(x, torch.ones(2, 3))) and not any(
            guard.check(x, other) for other in others
        )
    except Exception:  # noqa: BLE001 - a private API: anything unexpected means no guards
        return False


_disjoint: Callable[[Any, frozenset[str]], bool] = type({}.keys()).isdisjoint


class _Seen(NamedTuple):
    dicts: list[dict[str, Any]]
    """The owners' instance dicts, the parameter and buffer dicts read, and those
    `ModuleAttributes` reads."""
    versions: list[int]
    tensors: list[Tensor]
    attributes: int


def _no_dict_version(d: dict[str, Any]) -> int:
    raise NotImplementedError


try:  # private to dynamo's guards: CPython's dict version tags
    from torch._C._dynamo.guards import dict_version as _dict_version
except ImportError:
    _dict_version = _no_dict_version


@functools.cache
def _versions_work() -> bool:
    """Whether `_dict_version` reads a tag that every write of a dict changes (but one that
    stores the object already there; checked once; any error: no)."""
    try:
        d: dict[str, Any] = {}
        tags = [_dict_version(d)]
        for write in (lambda: d.__setitem__("a", 1), lambda: d.__setitem__("a", 2), d.clear):
            write()
            tags.append(_dict_version(d))
    except Exception:  # noqa: BLE001 - a private API: anything unexpected means no versions
        return False
    return len(set(tags)) == len(tags)


def _kind(owner: torch.nn.Module, attr: str) -> str:
    return "_parameters" if attr in owner._parameters else "_buffers"


@dataclass(frozen=True)
class ReadPlan:
    """How `_read_direct` reads `attrs` from the `kind` dict of `owner`."""

    owner: torch.nn.Module
    cls: type
    instance: dict[str, Any] | None
    """`owner`'s instance dict; None where `getattr` might not reach the `kind` dict (the
    class defines attribute access or one of the names itself)."""
    kind: str
    get: Callable[[dict[str, Any]], tuple[Any, ...]]
    """The names' values of a dict, as a tuple."""
    attrs: frozenset[str]


class ReadPlans:
    """The `ReadPlan`s of a module as parallel sequences, which `_read_direct` maps C
    functions over (`type`, `dict_keys.isdisjoint`, `getitem`, the getters)."""

    def __init__(self, plans: Sequence[ReadPlan]) -> None:
        self.owners = tuple(p.owner for p in plans)
        self.classes = [p.cls for p in plans]
        instances = [p.instance for p in plans]
        self.instances = None if None in instances else tuple(cast(list[dict[str, Any]], instances))
        """None where some owner's tensors must be read by `getattr`."""
        self.views = tuple(i.keys() for i in self.instances or ())
        """Live views of the instance dicts' keys (an attribute set later shows in them)."""
        self.kinds = tuple(p.kind for p in plans)
        self.getters = tuple(p.get for p in plans)
        self.attrs = tuple(p.attrs for p in plans)


def _read_plan(owner: torch.nn.Module, kind: str, attrs: list[str]) -> ReadPlan:
    """How `_read_direct` reads `attrs` from the `kind` dict of `owner` (see `ReadPlan`)."""
    cls = type(owner)
    plain = (
        cls.__getattr__ is torch.nn.Module.__getattr__
        and cls.__getattribute__ is object.__getattribute__
        and not any(attr in vars(k) for k in cls.__mro__ for attr in attrs)
    )
    get = picker(attrs)
    return ReadPlan(owner, cls, vars(owner) if plain else None, kind, get, frozenset(attrs))


def _owner(module: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return (module.get_submodule(path) if path else module), attr
